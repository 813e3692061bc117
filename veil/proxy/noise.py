"""Pass 5: draw the noise for each planned statistic (through :mod:`veil.mechanisms` only).

``noisy_statistics(plan, raw, grids, noise_off=...)`` takes the exact per-group values and returns
the noisy ones. With ``noise_off`` (a test-only path) the exact values come back unchanged and the
exponential mechanism returns its best-scoring candidate (the mean of tied ones).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from veil import mechanisms
from veil.proxy.plan import QueryPlan, Statistic

__all__ = ["grid_scores", "noisy_statistics"]


def grid_scores(stat: Statistic, counts: np.ndarray) -> np.ndarray:
    """Utility of each grid candidate for one group (sensitivity: rows a unit contributes).

    ``counts[j]`` = rows whose value rounds to grid point j. For a quantile q over n rows,
    u(j) = −max(L(j) − q·n, G(j) − (1 − q)·n, 0) with L/G the rows strictly below/above j;
    MIN uses −max(L(j), 1 − #{≤ j}) and MAX −max(G(j), 1 − #{≥ j}).
    """
    counts = counts.astype(np.float64)
    n = counts.sum()
    cum = np.cumsum(counts)
    below = cum - counts  # strictly below j
    above = n - cum  # strictly above j
    if stat.target == "min":
        return -np.maximum(below, 1.0 - cum)
    if stat.target == "max":
        return -np.maximum(above, 1.0 - (n - below))
    q = stat.q
    return -np.maximum(np.maximum(below - q * n, above - (1 - q) * n), 0.0)


def _grid_value(stat: Statistic, scores: np.ndarray, *, noise_off: bool, rng: np.random.Generator | None) -> float:
    if noise_off:
        best = np.flatnonzero(scores == scores.max())
        idx = float(best.mean()) if stat.target == "quantile" else float(best[0])
    else:
        idx = float(mechanisms.report_noisy_max(scores, epsilon=stat.epsilon, sensitivity=float(stat.sensitivity), rng=rng))
    return float(stat.grid_lo + stat.grid_step * int(idx)) + (idx - int(idx)) * float(stat.grid_step)


def noisy_statistics(
    plan: QueryPlan,
    raw: Mapping[int, np.ndarray],
    grids: Mapping[int, np.ndarray],
    *,
    noise_off: bool = False,
    rng: np.random.Generator | None = None,
) -> dict[int, np.ndarray]:
    """Noisy value of every statistic for every group (arrays aligned with the group list).

    ``raw[id]``: exact values per group (counts/sums); ``grids[id]``: (groups × grid points) counts.
    """
    out: dict[int, np.ndarray] = {}
    batches: dict[tuple[str, float], list[int]] = {}
    for stat in plan.statistics:
        if stat.kind == "grid":
            hist = grids[stat.id]
            out[stat.id] = np.array(
                [_grid_value(stat, grid_scores(stat, row), noise_off=noise_off, rng=rng) for row in hist],
                dtype=np.float64,
            )
        elif noise_off:
            out[stat.id] = raw[stat.id].copy()
        else:  # statistics sharing a mechanism and scale are noised in one call (independent draws)
            batches.setdefault((stat.mechanism, stat.scale), []).append(stat.id)
    for (mechanism, scale), ids in batches.items():
        sizes = [len(raw[i]) for i in ids]
        if mechanism == "discrete_laplace":
            flat = mechanisms.discrete_laplace(np.concatenate([raw[i].astype(np.int64) for i in ids]), scale=scale, rng=rng)
        else:
            flat = mechanisms.laplace(np.concatenate([raw[i].astype(np.float64) for i in ids]), scale=scale, rng=rng)
        for i, part in zip(ids, np.split(flat, np.cumsum(sizes)[:-1]), strict=True):
            out[i] = part
    return out
