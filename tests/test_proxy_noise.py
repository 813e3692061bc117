"""Statistical tests of the noise the query path adds (fixed α = 1e-6; scales off by ±30% must fail)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from tests.conftest import STAT_ALPHA
from tests.test_proxy_fixtures import proxy_policy  # noqa: F401  (fixture)
from veil.policy import Policy
from veil.proxy import fixed_point
from veil.proxy._testing import plan_of
from veil.proxy.add_noise import NoiseSource, grid_scores, noisy_statistics
from veil.proxy.plan import QueryPlan
from veil.proxy.postprocess import finalize_aggregates
from veil.proxy.session import QuerySession

ALPHA = STAT_ALPHA
N = 20_000


def _plan(policy: Policy, sql: str, eps: float) -> QueryPlan:
    with QuerySession(policy, "alice") as s:
        p = plan_of(s, sql, eps)
    assert isinstance(p, QueryPlan)
    return p


def _dkw(n: int) -> float:
    """Dvoretzky–Kiefer–Wolfowitz: P(sup|F_n − F| > t) ≤ 2·exp(−2nt²) = ALPHA (any distribution)."""
    return math.sqrt(math.log(2 / ALPHA) / (2 * n))


def _dlap_cdf(k: np.ndarray, b: float) -> np.ndarray:
    p = math.exp(-1 / b)
    return np.where(k >= 0, 1 - p ** (k + 1) / (1 + p), p ** (-k) / (1 + p))


@pytest.mark.slow
def test_count_noise_is_discrete_laplace_with_planned_scale(proxy_policy: Policy) -> None:  # noqa: F811
    p = _plan(proxy_policy, "SELECT COUNT(*) FROM people", 0.5)
    (stat,) = p.statistics
    assert stat.mechanism == "discrete_laplace" and stat.sensitivity == 1 and stat.scale == 2.0
    noise = noisy_statistics(p, {0: np.full(N, 1000, dtype=np.int64)}, {})[0] - 1000  # OS CSPRNG (OpenDP)
    ks = np.arange(-60, 61)
    emp = np.searchsorted(np.sort(noise), ks, side="right") / N
    d = {f: float(np.max(np.abs(emp - _dlap_cdf(ks, stat.scale * f)))) for f in (1.0, 0.7, 1.3)}
    assert d[1.0] < _dkw(N), d
    assert d[0.7] > _dkw(N) and d[1.3] > _dkw(N), d


@pytest.mark.slow
def test_sum_noise_is_laplace_with_planned_scale(proxy_policy: Policy) -> None:  # noqa: F811
    p = _plan(proxy_policy, "SELECT SUM(income) FROM people", 1.0)
    (stat,) = p.statistics
    # Δ/ε, raised by the slack the exact sum's one rounding may add (veil.proxy.fixed_point)
    assert stat.mechanism == "laplace" and stat.scale == 200000.0 * (1 + fixed_point.SCALE_RAISE)
    noise = noisy_statistics(p, {0: np.zeros(N)}, {})[0]
    assert stats.kstest(noise, "laplace", args=(0, stat.scale)).pvalue > ALPHA
    for f in (0.7, 1.3):
        assert stats.kstest(noise, "laplace", args=(0, stat.scale * f)).pvalue < ALPHA


def test_avg_ci_covers_at_least_95_percent(proxy_policy: Policy) -> None:  # noqa: F811
    p = _plan(proxy_policy, "SELECT AVG(age), STDDEV(age), COUNT(*) FROM people", 1.0)
    rng = np.random.default_rng(1)
    n, true_sum, true_sq = 400, 400 * 60.0, 0.0
    raw = {}
    for s in p.statistics:
        if s.kind == "count":
            raw[s.id] = np.full(N, n, dtype=np.int64)
        elif s.kind == "sum_centered":
            raw[s.id] = np.full(N, true_sum - float(s.center) * n)
        else:
            raw[s.id] = np.full(N, true_sq + n * (60.0 - float(s.center)) ** 2)
    noisy = noisy_statistics(p, raw, {}, NoiseSource(rng=rng))
    values, cis = finalize_aggregates(p, noisy, N)
    covered = np.abs(values[0] - 60.0) <= cis[0]
    # true coverage ≥ 0.95 ⇒ P(empirical < 0.95 − t) ≤ exp(−2Nt²) = STAT_ALPHA (Hoeffding)
    assert covered.mean() >= 0.95 - math.sqrt(math.log(1 / STAT_ALPHA) / (2 * N))
    assert np.abs(values[2] - n).mean() > 0  # counts are noisy too


@pytest.mark.parametrize("target", ["min", "max", "quantile"])
def test_grid_scores_have_sensitivity_one(proxy_policy: Policy, target: str) -> None:  # noqa: F811
    sql = {"min": "SELECT MIN(age) FROM people", "max": "SELECT MAX(age) FROM people",
           "quantile": "SELECT quantile_cont(age, 0.3) FROM people"}[target]  # fmt: skip
    (stat,) = _plan(proxy_policy, sql, 1.0).statistics
    rng = np.random.default_rng(5)
    for _ in range(300):
        counts = rng.integers(0, 4, stat.grid_n)
        other = counts.copy()
        j = rng.integers(stat.grid_n)
        if other[j] > 0 and rng.random() < 0.5:
            other[j] -= 1
        else:
            other[j] += 1
        assert np.max(np.abs(grid_scores(stat, counts) - grid_scores(stat, other))) <= 1.0 + 1e-12


def test_grid_scores_peak_at_the_truth(proxy_policy: Policy) -> None:  # noqa: F811
    (stat,) = _plan(proxy_policy, "SELECT MIN(age) FROM people", 1.0).statistics
    counts = np.zeros(stat.grid_n, dtype=np.int64)
    counts[[10, 20, 30]] = [1, 5, 2]
    scores = grid_scores(stat, counts)
    assert int(np.argmax(scores)) == 10 and scores[10] == 0 and np.sum(scores == 0) == 1


def test_cost_equals_sum_of_statistics_including_hidden(proxy_policy: Policy) -> None:  # noqa: F811
    p = _plan(proxy_policy, "SELECT state, AVG(age) FROM people GROUP BY state", 0.9)
    kinds = sorted(s.kind for s in p.statistics)
    assert kinds == ["count", "count", "sum_centered"]  # AVG's count, its sum, partition selection count
    assert p.cost == Fraction(9, 10) == sum(s.epsilon for s in p.statistics)
    assert sum(1 for s in p.statistics if s.hidden) == 3
