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
    laplace_fixed,
    laplace_lattice_draw,
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


@pytest.mark.parametrize(("scale", "sensitivity", "shift"), [(3.0, 1.0, 0.0), (2e8, 1e7, 1.2345e11)])
def test_real_noise_drawn_ahead_has_the_right_law(scale: float, sensitivity: float, shift: float) -> None:
    """Real noise drawn before its values (OpenDP's i64 discrete Laplace at 0 on the fixed lattice, added in exact
    arithmetic afterwards, ``laplace_lattice_draw``) has Laplace's law at its scale, on a value away from 0 too;
    and so has the same mechanism drawn with the values (``laplace_fixed``, OpenDP's measurement)."""
    values = np.full(N, shift)
    draw = laplace_lattice_draw(N, scale=scale, sensitivity=sensitivity)
    assert draw is not None
    ahead = draw.add(values) - shift
    now = laplace_fixed(values, scale=scale, sensitivity=sensitivity) - shift
    for sample in (ahead, now):
        assert _ks_laplace(sample, scale) > ALPHA
        for wrong in (0.7 * scale, 1.3 * scale):
            assert _ks_laplace(sample, wrong) < ALPHA, f"KS did not detect scale {wrong} vs {scale}"
    # the two ways are one law (two-sample KS at α; a draw at the wrong scale is told apart)
    assert stats.ks_2samp(ahead, now).pvalue > ALPHA
    assert stats.ks_2samp(ahead * 1.3, now).pvalue < ALPHA


@given(
    scale=st.floats(1e-300, 1e300),
    sensitivity=st.floats(1e-300, 1e300),
    n=st.integers(1, 2**24 + 1),
)
@settings(max_examples=80, deadline=None)
def test_the_fixed_lattice_never_loses_more_than_charged(scale: float, sensitivity: float, n: int) -> None:
    """OpenDP's own privacy map of the fixed-lattice measurement stays within Δ/scale (or it is not used), and its
    integer noise's scale is the one the i64 sampler draws at, in [2^50, 2^51)."""
    from veil.mechanisms.noise import fixed_lattice

    lattice = fixed_lattice(scale, sensitivity, n)
    if lattice is not None:
        raised = scale * (1.0 + 2.0**-30)
        assert Fraction(lattice.t) == Fraction(raised) / Fraction(2) ** lattice.k and 2.0**50 <= lattice.t < 2.0**51
        assert lattice.measurement.map(sensitivity) <= sensitivity / scale
        assert lattice.measurement.map(2 * sensitivity) <= 2 * sensitivity / scale


def _opendp_float_lattice(scale: float, k: int, n: int):  # type: ignore[no-untyped-def]
    import opendp.measurements as dp_m
    from opendp.domains import atom_domain, vector_domain
    from opendp.metrics import l1_distance

    from veil.mechanisms._opendp_call import vector_call

    return vector_call(
        dp_m.make_laplace(vector_domain(atom_domain(T=float, nan=False), size=n), l1_distance(T=float), scale=scale, k=k)
    )


@given(
    xs=st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=1, max_size=20),
    halves=st.lists(st.integers(-(2**20), 2**20), min_size=1, max_size=10),
    k=st.integers(-994, 1000),  # OpenDP's smallest scale, 2^-1074, is then 2^-80 of the lattice or less
)
@settings(max_examples=150, deadline=None)
def test_the_exact_addition_rounds_onto_the_lattice_as_opendp(xs: list[float], halves: list[int], k: int) -> None:
    """``lattice_add`` with no noise rounds each value to the lattice of 2^k exactly as OpenDP's float Laplace on that
    lattice does (OpenDP at a scale 2^-80 of the lattice, so that its noise is 0 but with probability below
    2·exp(-2^80)): values and exact half-way points (ties), negative ones, subnormals and the largest doubles alike."""
    from veil.mechanisms.noise import lattice_add

    ties = [h * 2.0**k / 2 for h in halves if math.isfinite(h * 2.0**k / 2)]
    x = np.array(xs + ties, dtype=np.float64)
    tiny = 2.0 ** (k - 80)  # integer noise of scale 2^-80: not 0 with probability below 2·exp(-2^80)
    opendp = _opendp_float_lattice(tiny, k, x.size)(x)
    ours = lattice_add(x, np.zeros(x.size, dtype=np.int64), k)
    assert np.array_equal(ours, opendp) and np.array_equal(np.signbit(ours), np.signbit(opendp))


def test_the_exact_addition_rounds_the_sum_to_even_as_opendp() -> None:
    """With noise, the lattice point 2^k·(i + z) is rounded to a double as OpenDP rounds it (nearest, ties to even):
    at x = ±2^53 on the lattice of 1 the points 2^53 + 1 and 2^53 + 3 are ties. Checked exactly on the ties, and
    as a law: OpenDP's own release at scale ½ against ``lattice_add`` with OpenDP's i64 noise at ½ (chi-square of the
    offsets, α = STAT_ALPHA; rounding ties away from zero instead moves ~10% of the mass and is rejected)."""
    from veil.mechanisms.noise import _discrete_laplace_call, lattice_add

    top = 2.0**53
    assert lattice_add(np.array([top, top, -top]), np.array([1, 3, -1]), 0).tolist() == [top, top + 4, -top]
    n = 20_000
    z = _discrete_laplace_call(0.5)(np.zeros(n, dtype=np.int64))
    ours = lattice_add(np.full(n, top), z, 0) - top
    theirs = _opendp_float_lattice(0.5, 0, n)(np.full(n, top)) - top
    away = np.where((z > 0) & (z % 2 == 1), z + 1, z).astype(np.float64)  # ties away from zero, the same draws
    cats = np.array([-4.0, -3.0, -2.0, -1.0, 0.0, 2.0, 4.0])

    def table(a: np.ndarray) -> np.ndarray:
        return np.array([np.sum(np.clip(a, -4, 4) == c) for c in cats]) + 1

    assert stats.chi2_contingency(np.stack([table(ours), table(theirs)]))[1] > ALPHA
    assert stats.chi2_contingency(np.stack([table(away), table(theirs)]))[1] < ALPHA
