"""DP microaggregation: calibration of every noise draw, data-independent partition, outputs."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import veil.mechanisms
from veil.generators.base import Context, get_generator
from veil.generators.sdc import dp_centroids, dp_grid_microaggregation, mdav

LOWER = np.array([0.0, 0.0])
UPPER = np.array([10.0, 100.0])


@pytest.fixture
def calls(monkeypatch):
    """Record every (mechanism, size, scale or sensitivity, epsilon) the generators ask for."""
    log: list[tuple] = []
    real_lap, real_rnm = veil.mechanisms.laplace, veil.mechanisms.report_noisy_max

    def lap(values, *, scale, rng=None):
        log.append(("laplace", np.size(values), scale))
        return real_lap(values, scale=scale, rng=rng)

    def rnm(scores, *, epsilon, sensitivity, rng=None):
        log.append(("rnm", len(scores), sensitivity, epsilon))
        return real_rnm(scores, epsilon=epsilon, sensitivity=sensitivity, rng=rng)

    monkeypatch.setattr(veil.mechanisms, "laplace", lap)
    monkeypatch.setattr(veil.mechanisms, "report_noisy_max", rnm)
    return log


def _data(n=3000, seed=0):
    rng = np.random.default_rng(seed)
    return np.c_[rng.uniform(0, 10, n), rng.uniform(0, 100, n)]


def test_grid_laplace_calibration(calls) -> None:
    x = _data()
    eps, bins = 2.0, 4
    vals, y, info = dp_grid_microaggregation(
        x, None, 0, lower=LOWER, upper=UPPER, bins=bins, epsilon=eps, mechanism="laplace", rng=np.random.default_rng(1)
    )
    counts_call = calls[0]
    assert counts_call == ("laplace", bins**2, 1.0 / (eps / 2))  # every cell, sensitivity 1, ε/2
    width = (UPPER - LOWER) / bins
    # centred cell sums: sensitivity half a cell width, ε/2 split over 2 columns
    assert [c[2] for c in calls[1:]] == pytest.approx([width[0] / 2 / (eps / 4), width[1] / 2 / (eps / 4)])
    assert info["cells"] == 16 and y is None
    assert abs(len(vals) - len(x)) < 200  # sum of 16 Laplace(1) counts: sd ≈ 5.7


def test_grid_exponential_calibration(calls) -> None:
    x = _data()
    eps, bins = 1.0, 2
    dp_grid_microaggregation(
        x,
        None,
        0,
        lower=LOWER,
        upper=UPPER,
        bins=bins,
        epsilon=eps,
        mechanism="exponential",
        candidates=16,
        rng=np.random.default_rng(1),
    )
    rnm = [c for c in calls if c[0] == "rnm"]
    assert rnm and all(c[1] == 16 and c[3] == pytest.approx(eps / 4) for c in rnm)
    assert {c[2] for c in rnm} == {5.0, 50.0}  # sensitivity = one cell width per column


def test_grid_partition_is_data_independent() -> None:
    # Two very different data sets: every released value sits inside a cell of the same fixed grid.
    for seed in (0, 1):
        x = _data(seed=seed) ** 1.0 * (0.2 if seed else 1.0)
        vals, _, _ = dp_grid_microaggregation(
            x, None, 0, lower=LOWER, upper=UPPER, bins=5, epsilon=1e6, mechanism="laplace", rng=np.random.default_rng(seed)
        )
        assert ((vals >= LOWER) & (vals <= UPPER)).all()
    # with a huge ε the cells' centroids are (almost) exact
    x = np.r_[np.full((50, 2), [1.0, 10.0]), np.full((50, 2), [9.0, 90.0])]
    vals, _, _ = dp_grid_microaggregation(
        x, None, 0, lower=LOWER, upper=UPPER, bins=2, epsilon=1e6, mechanism="laplace", rng=np.random.default_rng(0)
    )
    assert len(vals) == 100
    assert sorted({tuple(np.round(v, 3)) for v in vals}) == [(1.0, 10.0), (9.0, 90.0)]


def test_centroid_laplace_scale_statistical() -> None:
    # 4,000 groups of 10 with a known centroid: the noise's mean absolute value estimates the
    # Laplace scale b = d·Δ/(m·ε) (sd of the estimate ≈ b/63). A ±6 % band fails by chance with
    # probability < 1e-5; a scale off by 30 % never passes.
    rng = np.random.default_rng(0)
    x = np.repeat(rng.uniform(2, 8, size=(4000, 2)), 10, axis=0) * [1, 10]
    labels = np.repeat(np.arange(4000), 10)
    eps = 0.5
    out = dp_centroids(x, labels, lower=LOWER, upper=UPPER, epsilon=eps, mechanism="laplace", rng=np.random.default_rng(1))
    noise = (out - x)[::10]
    expected = 2 * (UPPER - LOWER) / 10 / eps
    inside = np.abs(noise) < (np.array([2.0, 20.0]))  # ignore values clamped at the bounds
    for j in range(2):
        b_hat = np.abs(noise[inside[:, j], j]).mean()
        # E|L| restricted to |L| < c for Laplace(b): b − c·e^{−c/b}/(1 − e^{−c/b})
        b, c = expected[j], [2.0, 20.0][j]
        trunc_mean = b - c * np.exp(-c / b) / (1 - np.exp(-c / b))
        assert abs(b_hat / trunc_mean - 1) < 0.06


def test_exponential_centroids_concentrate_with_large_epsilon() -> None:
    x = np.r_[np.full((10, 2), [3.0, 30.0]), np.full((10, 2), [7.0, 70.0])]
    labels = np.repeat([0, 1], 10)
    out = dp_centroids(
        x, labels, lower=LOWER, upper=UPPER, epsilon=1e4, mechanism="exponential", candidates=101, rng=np.random.default_rng(0)
    )
    np.testing.assert_allclose(out, x)


def test_generator_guarantees(shared_data) -> None:
    from veil.datasets import load_adult

    df = load_adult().head(3000)
    cols = ("age", "education_num", "hours_per_week")
    bounds = {"age": (17, 90), "education_num": (1, 16), "hours_per_week": (1, 99)}
    ctx = Context(
        columns=cols,
        target="income",
        bounds=bounds,
        seed=0,
        rng=np.random.default_rng(0),
        categories={"income": ("<=50K", ">50K")},
    )
    grid = get_generator("dp_microagg_laplace")(epsilon=1.0, bins=4).run(df, ctx)
    assert grid.epsilon == 1.0 and grid.source is None and "for the whole release" in grid.guarantee
    assert set(grid.frame["income"]) <= {"<=50K", ">50K"}
    part = get_generator("dp_microagg_exponential")(epsilon=1.0, partition="mdav", k=25).run(df, ctx)
    assert part.epsilon is None and part.guarantee.startswith("NOT ε-DP as a whole")
    assert len(part.frame) == len(df)
    assert pd.Series(mdav(np.zeros((60, 1)), 25)).value_counts().min() >= 25
