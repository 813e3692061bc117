"""What a query session returns: answers, budget status and explanations (frozen values).

:class:`Answer` is frozen: ``columns`` (:class:`OutputColumn` name + sql_type ∈ bigint/double/text/
boolean/date), ``rows``, ``ci95`` (half-width per cell at the policy's confidence, None for exact
cells), ``epsilon_charged`` and ``epsilon_remaining`` (Fractions), ``release_id`` (None for public
or cached answers) and ``cached``. :class:`Explanation` is what ``EXPLAIN`` shows: every statistic's
role, mechanism, sensitivity, noise scale, CI half-width and ε share, and the query's exact (ε, δ).
The session itself is :class:`veil.proxy.session.QuerySession`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import pandas as pd

from veil._json import to_jsonable
from veil.proxy.plan import MAX_RELEASED_VALUES

if TYPE_CHECKING:
    from veil.proxy.plan import QueryPlan

__all__ = ["Answer", "BudgetStatus", "Explanation", "OutputColumn", "explanation"]


@dataclass(frozen=True)
class OutputColumn:
    name: str
    sql_type: str  # bigint | double | text | boolean | date


@dataclass(frozen=True)
class Answer:
    columns: tuple[OutputColumn, ...]
    rows: tuple[tuple[Any, ...], ...]
    ci95: tuple[tuple[float | None, ...], ...]
    epsilon_charged: Fraction
    epsilon_remaining: Fraction
    release_id: str | None
    cached: bool
    #: Groups whose noisy count passed partition selection's threshold but that the cap on released values withheld
    #: (the highest noisy counts are kept); 0 when the answer holds every group that passed.
    withheld_groups: int = 0

    @property
    def notes(self) -> tuple[str, ...]:
        """What the analyst should know about this answer beyond its rows (the CLI prints them, ``veil serve`` sends
        them as NOTICEs)."""
        if not self.withheld_groups:
            return ()
        return (
            f"{self.withheld_groups:,} more groups passed the threshold but were withheld: an answer releases at most "
            f"{MAX_RELEASED_VALUES:,} values, so the groups with the highest noisy counts were kept. Narrow the query "
            "with WHERE, or group by fewer or coarser columns, to see the others",
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape of ``veil query --format json``."""
        return {
            "columns": [c.name for c in self.columns],
            "rows": [[to_jsonable(v) for v in r] for r in self.rows],
            "ci95": [list(r) for r in self.ci95],
            "epsilon_charged": float(self.epsilon_charged),
            "epsilon_remaining": float(self.epsilon_remaining),
            "withheld_groups": self.withheld_groups,
            "notes": list(self.notes),
        }

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame([list(r) for r in self.rows], columns=[c.name for c in self.columns])


@dataclass(frozen=True)
class BudgetStatus:
    analyst: str
    total: Fraction  # ε
    spent: Fraction
    remaining: Fraction
    delta_total: Fraction = Fraction(0)
    delta_spent: Fraction = Fraction(0)
    delta_remaining: Fraction = Fraction(0)

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape of ``veil budget --format json``."""
        return {
            "analyst": self.analyst,
            "total": float(self.total),
            "spent": float(self.spent),
            "remaining": float(self.remaining),
            "epsilon_total": float(self.total),
            "epsilon_spent": float(self.spent),
            "epsilon_remaining": float(self.remaining),
            "delta_total": float(self.delta_total),
            "delta_spent": float(self.delta_spent),
            "delta_remaining": float(self.delta_remaining),
        }


@dataclass(frozen=True)
class Explanation:
    """What a query would cost and how noisy each statistic would be; nothing is spent."""

    sql: str
    epsilon: Fraction
    statistics: tuple[dict[str, Any], ...]
    public: bool = False
    contribution: int = 1
    partition_threshold: int | None = None
    partition_delta: Fraction | None = None
    delta: Fraction = Fraction(0)

    def rows(self) -> list[dict[str, Any]]:
        return [dict(s) for s in self.statistics]


def explanation(sql: str, plan: QueryPlan | None, alpha: float) -> Explanation:
    """The :class:`Explanation` of a plan (``None``: a public query, free and exact)."""
    from veil.proxy.postprocess import halfwidth

    if plan is None:
        return Explanation(sql=sql, epsilon=Fraction(0), statistics=(), public=True)
    rows = []
    for s in plan.statistics:
        role = "hidden" if s.hidden else "output"
        if s.id == plan.partition_stat:
            role = "partition selection" + ("" if s.hidden else " + output")
        if s.mechanism == "exponential":
            k = s.grid_n
            rank_err = 2 * float(s.sensitivity) * math.log(k / alpha) / float(s.epsilon) if k > 1 else 0.0
            ci = None
            note = (
                f"grid of {k} points from {float(s.grid_lo):g} step {float(s.grid_step):g}; "
                f"rank error ≤ {rank_err:.3g} rows ({1 - alpha:.0%})"
            )
        else:
            ci = halfwidth(s, alpha)
            note = ""
        if s.id == plan.partition_stat:
            note = (note + "; " if note else "") + (
                f"groups with a noisy count ≥ {plan.partition_threshold} are released (δ = {float(plan.delta):g}); "
                "partition selection has its own share of ε"
            )
        rows.append(
            {
                "statistic": s.label,
                "role": role,
                "mechanism": s.mechanism,
                "sensitivity": float(s.sensitivity),
                "scale": s.scale,
                "ci95": ci,
                "epsilon": float(s.epsilon),
                "epsilon_exact": str(s.epsilon),
                "note": note,
            }
        )
    return Explanation(
        sql=sql,
        epsilon=plan.cost,
        statistics=tuple(rows),
        contribution=plan.contribution,
        partition_threshold=plan.partition_threshold,
        partition_delta=plan.partition_delta,
        delta=plan.delta,
    )


def __getattr__(name: str) -> Any:
    """``QuerySession`` used to live here; it is :class:`veil.proxy.session.QuerySession`."""
    if name == "QuerySession":
        from veil.proxy.session import QuerySession

        return QuerySession
    raise AttributeError(name)
