"""``veil audit pate``: how much privacy a PATE release of ``T`` noisy-vote answers can lose.

Built on :mod:`veil.mechanisms.pate_accounting`. Without vote counts it reports the
data-independent bounds (Eq. 12 over real λ — the guarantee Veil charges — the same over the
integer orders 1..8, and plain composition ``2Tγ``). With the vote counts of an actual run
(``.npy``, shape ``(T, classes)``, as written by ``veil publish pate --save-votes``) it adds the
data-dependent ε of Papernot et al. 2016 and how often the teachers agreed.

>>> report = audit_pate(gamma=0.05, queries=1000, delta=1e-5)
>>> for r in report.rows:
...     print(r["bound"], round(r["epsilon"], 4))
data-independent (Eq. 12, real λ) 20.1743
data-independent (λ = 1..8) 20.7565
pure composition 2Tγ 100.0
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from veil.errors import InputError
from veil.mechanisms.pate_accounting import (
    DEFAULT_ORDERS,
    data_dependent_epsilon,
    data_dependent_log_moments,
    data_independent_epsilon,
    noisy_max_q_bound,
    theorem3_q_limit,
)

__all__ = ["PateAudit", "audit_pate", "load_votes"]


@dataclass(frozen=True)
class PateAudit:
    """One audit: parameters, one row per bound, and (with votes) agreement statistics."""

    gamma: float
    queries: int
    delta: float
    rows: tuple[dict[str, Any], ...]
    votes: dict[str, Any] | None = None
    orders: tuple[float, ...] = field(default=DEFAULT_ORDERS)

    def to_dict(self) -> dict[str, Any]:
        return {
            "gamma": self.gamma,
            "queries": self.queries,
            "delta": self.delta,
            "orders": list(self.orders),
            "bounds": list(self.rows),
            "votes": self.votes,
        }


def load_votes(path: str | Path) -> np.ndarray:
    """Read a ``(T, classes)`` vote-count array from ``.npy`` (no pickles) or ``.csv`` (no header)."""
    p = Path(path)
    if not p.exists():
        raise InputError(f"vote file {str(p)!r} does not exist", hint="Pass the file written by --save-votes")
    try:
        arr = np.load(p, allow_pickle=False) if p.suffix == ".npy" else np.loadtxt(p, delimiter=",", ndmin=2)
    except ValueError as exc:
        raise InputError(
            f"cannot read vote counts from {str(p)!r}: {exc}",
            hint="Use a numeric .npy or comma-separated .csv of per-class counts",
        ) from None
    arr = np.asarray(arr)
    if arr.ndim != 2 or arr.shape[1] < 2:
        raise InputError(f"vote counts in {str(p)!r} have shape {arr.shape}", hint="Expected (queries, classes)")
    return arr


def audit_pate(
    *,
    gamma: float,
    queries: int | None = None,
    delta: float,
    votes: np.ndarray | Sequence[Sequence[float]] | None = None,
    orders: Sequence[float] = DEFAULT_ORDERS,
) -> PateAudit:
    """Privacy-loss bounds for ``queries`` answers of ``argmax(n + Lap(1/γ))`` at ``delta``.

    With ``votes``, ``queries`` defaults to their row count (and must match it when given).
    """
    counts = None
    if votes is not None:
        counts = np.asarray(votes, dtype=float)
        if counts.ndim != 2:
            raise InputError(f"votes must be a (queries, classes) array, got shape {counts.shape}")
        if queries is not None and queries != counts.shape[0]:
            raise InputError(
                f"--queries {queries} but the vote file has {counts.shape[0]} rows",
                hint="Drop --queries or pass the matching vote file",
            )
        queries = counts.shape[0]
    if queries is None:
        raise InputError("the number of queries is unknown", hint="Pass --queries T or --votes FILE")
    ind = data_independent_epsilon(gamma=gamma, queries=queries, delta=delta)
    grid = data_independent_epsilon(gamma=gamma, queries=queries, delta=delta, orders=orders)
    rows: list[dict[str, Any]] = [
        {"bound": "data-independent (Eq. 12, real λ)", "epsilon": ind.epsilon, "delta": delta, "lambda": ind.order},
        {
            "bound": f"data-independent (λ = {_orders_label(orders)})",
            "epsilon": grid.epsilon,
            "delta": delta,
            "lambda": grid.order,
        },
        {"bound": "pure composition 2Tγ", "epsilon": 2.0 * gamma * queries, "delta": 0.0, "lambda": None},
    ]
    vote_stats = None
    if counts is not None:
        dep = data_dependent_epsilon(counts, gamma=gamma, delta=delta, orders=orders)
        rows.append(
            {"bound": "data-dependent (Papernot et al. 2016)", "epsilon": dep.epsilon, "delta": delta, "lambda": dep.order}
        )
        q = noisy_max_q_bound(counts, gamma)
        top = np.sort(counts, axis=1)
        gap = top[:, -1] - top[:, -2]
        vote_stats = {
            "teachers": float(np.median(counts.sum(axis=1))),
            "classes": int(counts.shape[1]),
            "median_plurality_gap": float(np.median(gap)),
            "share_theorem3_applies": float(np.mean(q < theorem3_q_limit(gamma))),
            "median_q": float(np.median(q)),
            "log_moments": [float(v) for v in data_dependent_log_moments(counts, gamma=gamma, orders=orders)],
        }
    return PateAudit(
        gamma=float(gamma),
        queries=int(queries),
        delta=float(delta),
        rows=tuple(rows),
        votes=vote_stats,
        orders=tuple(float(o) for o in orders),
    )


def _orders_label(orders: Sequence[float]) -> str:
    vals = [float(o) for o in orders]
    if vals == [float(i) for i in range(1, len(vals) + 1)]:
        return f"1..{len(vals)}"
    return ", ".join(f"{v:g}" for v in vals)
