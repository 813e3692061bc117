"""Statistical tests of every noise mechanism.

Each test fixes α = ``STAT_ALPHA`` (tests/conftest.py: false-failure rate per test under a correct sampler) and checks
power: the same test run against a sampler with the scale off by ±30% must reject.
Production draws (OpenDP, CSPRNG) are tested directly; the test-only ``rng=`` path is tested to have
the same law.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from tests.conftest import STAT_ALPHA
from veil.errors import InputError
from veil.mechanisms import (
    as_epsilon,
    discrete_laplace,
    discrete_laplace_draw,
    laplace,
    laplace_ci_halfwidth,
    randomized_response,
    report_noisy_max,
)

ALPHA = STAT_ALPHA
N = 20_000


def _ks_laplace(sample: np.ndarray, scale: float) -> float:
    return stats.kstest(sample, stats.laplace(scale=scale).cdf).pvalue


@pytest.mark.slow
@pytest.mark.parametrize("scale", [0.5, 3.0])
def test_laplace_production_has_the_right_law(scale: float) -> None:
    noise = laplace(np.zeros(N), scale=scale)
    assert _ks_laplace(noise, scale) > ALPHA
    for wrong in (0.7 * scale, 1.3 * scale):
        assert _ks_laplace(noise, wrong) < ALPHA, f"KS did not detect scale {wrong} vs {scale}"


@pytest.mark.slow
@pytest.mark.parametrize(("scale", "sensitivity"), [(0.5, 1.0), (3.0, 1e-3), (2e8, 2e5)])
def test_lattice_laplace_has_the_right_law(scale: float, sensitivity: float) -> None:
    """The faster lattice path (``sensitivity=``) draws the same Laplace law as the default lattice."""
    noise = laplace(np.zeros(N), scale=scale, sensitivity=sensitivity)
    assert _ks_laplace(noise, scale) > ALPHA
    for wrong in (0.7 * scale, 1.3 * scale):
        assert _ks_laplace(noise, wrong) < ALPHA, f"KS did not detect scale {wrong} vs {scale}"


@given(
    scale=st.floats(1e-6, 1e12),
    sensitivity=st.floats(1e-9, 1e9),
    n=st.integers(1, 2_000_000),
)
@settings(max_examples=60, deadline=None)
def test_lattice_laplace_never_loses_more_than_charged(scale: float, sensitivity: float, n: int) -> None:
    """OpenDP's own privacy map of the lattice measurement stays within Δ/scale (or it is not used)."""
    from veil.mechanisms.noise import _lattice_laplace

    m = _lattice_laplace(scale, sensitivity, n)
    if m is not None:
        assert m.map(sensitivity) <= sensitivity / scale
        assert m.map(2 * sensitivity) <= 2 * sensitivity / scale


def test_laplace_test_rng_path_has_the_same_law() -> None:
    noise = laplace(np.zeros(N), scale=2.0, rng=np.random.default_rng(1))
    assert _ks_laplace(noise, 2.0) > ALPHA
    assert _ks_laplace(noise, 2.6) < ALPHA


def _dlap_pmf(k: np.ndarray, scale: float) -> np.ndarray:
    a = math.exp(-1.0 / scale)
    return (1 - a) / (1 + a) * a ** np.abs(k)


def _chi2_dlap(sample: np.ndarray, scale: float) -> float:
    edges = np.arange(-8, 9)
    obs = np.array([(sample == k).sum() for k in edges] + [(np.abs(sample) > 8).sum()])
    p = _dlap_pmf(edges, scale)
    exp = np.append(p, 1 - p.sum()) * len(sample)
    return stats.chisquare(obs, exp).pvalue


@pytest.mark.parametrize("rng", [None, np.random.default_rng(2)], ids=["opendp", "test-rng"])
def test_discrete_laplace_pmf(rng: np.random.Generator | None) -> None:
    sample = discrete_laplace(np.zeros(N, dtype=np.int64), scale=2.0, rng=rng)
    assert sample.dtype == np.int64
    assert _chi2_dlap(sample, 2.0) > ALPHA
    assert _chi2_dlap(sample, 1.4) < ALPHA
    assert _chi2_dlap(sample, 2.6) < ALPHA


def _rnm_probabilities(scores: np.ndarray, scale: float) -> np.ndarray:
    """P(argmax_i scores_i + Exp(scale) = i), by numerical integration."""
    grid = np.linspace(scores.min(), scores.max() + 40 * scale, 200_001)
    dens = [stats.expon(loc=s, scale=scale).pdf(grid) for s in scores]
    cdfs = [stats.expon(loc=s, scale=scale).cdf(grid) for s in scores]
    out = []
    for i in range(len(scores)):
        others = np.prod([cdfs[j] for j in range(len(scores)) if j != i], axis=0)
        out.append(np.trapezoid(dens[i] * others, grid))
    p = np.array(out)
    return p / p.sum()


@pytest.mark.slow
@pytest.mark.parametrize("rng", [None, np.random.default_rng(3)], ids=["opendp", "test-rng"])
def test_report_noisy_max_has_the_right_law(rng: np.random.Generator | None) -> None:
    scores = np.array([0.0, 1.0, 2.0, 4.0])
    eps, sens = 1.0, 1.0
    n = 6000
    draws = np.array([report_noisy_max(scores, epsilon=eps, sensitivity=sens, rng=rng) for _ in range(n)])
    counts = np.bincount(draws, minlength=4)
    assert stats.chisquare(counts, _rnm_probabilities(scores, 2 * sens / eps) * n).pvalue > ALPHA
    for wrong in (0.7, 1.3):
        assert stats.chisquare(counts, _rnm_probabilities(scores, 2 * sens / (wrong * eps)) * n).pvalue < ALPHA


def test_report_noisy_max_satisfies_the_dp_inequality() -> None:
    """Neighbouring score vectors (each score moved by ≤ Δ) change each outcome's probability by ≤ e^ε."""
    eps, sens = 1.0, 1.0
    a = np.array([0.0, 1.0, 2.0, 4.0])
    b = a + np.array([1.0, -1.0, 1.0, -1.0])
    pa, pb = _rnm_probabilities(a, 2 * sens / eps), _rnm_probabilities(b, 2 * sens / eps)
    assert np.all(pa <= math.exp(eps) * pb + 1e-9)
    assert np.all(pb <= math.exp(eps) * pa + 1e-9)


def test_randomized_response_keep_rate() -> None:
    cats = ["a", "b", "c", "d"]
    eps = 1.0
    out = randomized_response(np.array(["a"] * N, dtype=object), categories=cats, epsilon=eps)
    keep = float((out == "a").mean())
    p = math.exp(eps) / (math.exp(eps) + 3)
    se = math.sqrt(p * (1 - p) / N)
    z = stats.norm.isf(ALPHA / 2)
    assert abs(keep - p) < z * se
    # the wrong ε (±30%) gives a keep rate outside the band
    for wrong in (0.7, 1.3):
        pw = math.exp(wrong) / (math.exp(wrong) + 3)
        assert abs(keep - pw) > z * se
    others = np.array([(out == c).sum() for c in "bcd"])
    assert stats.chisquare(others).pvalue > ALPHA  # uniform over the other categories


def test_randomized_response_rejects_unknown_value() -> None:
    with pytest.raises(InputError, match="'z' is not among the 2 categories"):
        randomized_response(["a", "z"], categories=["a", "b"], epsilon=1)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1.0, True, "x"])
def test_bad_scales_and_epsilons_are_rejected(bad: object) -> None:
    with pytest.raises(InputError):
        laplace([1.0], scale=bad)  # type: ignore[arg-type]
    with pytest.raises(InputError):
        as_epsilon(bad)


def test_noise_refuses_non_finite_values() -> None:
    with pytest.raises(InputError, match="NaN or infinite"):
        laplace([1.0, float("nan")], scale=1.0)


def test_epsilon_is_exact() -> None:
    assert sum([as_epsilon(0.1)] * 10) == 1
    assert as_epsilon("1/3") == Fraction(1, 3)


@pytest.mark.slow
def test_ci_halfwidth_covers_95_percent() -> None:
    hw = laplace_ci_halfwidth(2.0, 0.95)
    noise = laplace(np.zeros(N), scale=2.0)
    cover = float((np.abs(noise) <= hw).mean())
    assert abs(cover - 0.95) < stats.norm.isf(ALPHA / 2) * math.sqrt(0.95 * 0.05 / N)


@pytest.mark.parametrize("scale", [1e-6, 0.3, 1.0, 7.5, 1e3, 1e9, 2.0**40, 1e13, 1e18, 4.6e21, 1e300])
@pytest.mark.parametrize("confidence", [0.5, 0.9, 0.95, 0.999])
def test_discrete_laplace_halfwidth_is_finite_and_covers(scale: float, confidence: float) -> None:
    """The exact discrete tail bound at every scale Veil can produce (tiny to ±2^62/ε): finite, never
    below the true quantile, and at most one step (or a 1e-9 relative margin) above it."""
    import math

    from veil.mechanisms.noise import discrete_laplace_ci_halfwidth

    h = discrete_laplace_ci_halfwidth(scale, confidence)
    assert math.isfinite(h) and h >= 0 and h == math.floor(h)
    log_r = -1.0 / scale
    if log_r < -745:
        assert h == 0
        return

    def log_tail(x: float) -> float:  # log P(|Z| > x) = log 2 + (x + 1) log r − log(1 + r)
        return math.log(2.0) + (x + 1.0) * log_r - math.log1p(math.exp(log_r))

    alpha = math.log(1.0 - confidence)
    assert log_tail(h) <= alpha + 1e-12  # covers
    if scale <= 2.0**40:
        assert h == 0 or log_tail(h - 1) > alpha  # and is the smallest such integer
    else:
        assert h <= -scale * (alpha + math.log1p(math.exp(log_r)) - math.log(2.0)) * (1 + 1e-8) + 2


@pytest.mark.parametrize("shift", [0, 1_000_003])
def test_discrete_laplace_drawn_ahead_has_the_right_law(shift: int) -> None:
    """Noise drawn before its values (OpenDP at 0, added afterwards) has discrete_laplace's law at its scale."""
    values = np.full(N, shift, dtype=np.int64)
    draw = discrete_laplace_draw(N, scale=2.0)
    assert draw is not None
    sample = draw.add(values) - shift
    assert sample.dtype == np.int64
    assert _chi2_dlap(sample, 2.0) > ALPHA
    assert _chi2_dlap(sample, 1.4) < ALPHA
    assert _chi2_dlap(sample, 2.6) < ALPHA
