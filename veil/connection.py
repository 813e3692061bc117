"""The Python API for analysts: ``veil.connect(policy, analyst=...)``.

>>> import veil                                                     # doctest: +SKIP
>>> with veil.connect("policy.toml", analyst="alice") as db:        # doctest: +SKIP
...     df = db.sql("SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex")
...     df.attrs["ci95"], df.attrs["epsilon_charged"]
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pandas as pd

from veil.policy import Policy, load_policy
from veil.proxy.answer import Answer, BudgetStatus, Explanation
from veil.proxy.session import QuerySession

__all__ = ["Connection"]


class Connection:
    """An analyst's connection: one :class:`~veil.proxy.answer.QuerySession` (not thread-safe)."""

    def __init__(self, policy: str | Path | Policy, *, analyst: str) -> None:
        self.policy = policy if isinstance(policy, Policy) else load_policy(policy)
        self.analyst = analyst
        self._session = QuerySession(self.policy, analyst)

    @property
    def session(self) -> QuerySession:
        return self._session

    def sql(self, query: str, epsilon: Fraction | float | None = None) -> pd.DataFrame:
        """Answer ``query``; the DataFrame's ``attrs`` hold ``ci95`` (per cell, a DataFrame of half-widths),
        ``epsilon_charged``, ``epsilon_remaining``, ``release_id``, ``cached`` and ``columns`` (SQL types)."""
        ans: Answer = self._session.execute(query, epsilon=epsilon)
        df = ans.to_frame()
        df.attrs["ci95"] = pd.DataFrame([list(r) for r in ans.ci95], columns=[c.name for c in ans.columns])
        df.attrs["epsilon_charged"] = ans.epsilon_charged
        df.attrs["epsilon_remaining"] = ans.epsilon_remaining
        df.attrs["release_id"] = ans.release_id
        df.attrs["cached"] = ans.cached
        df.attrs["columns"] = {c.name: c.sql_type for c in ans.columns}
        return df

    def explain(self, query: str, epsilon: Fraction | float | None = None) -> Explanation:
        """Mechanisms, sensitivities, noise scales, CI half-widths and the exact ε cost; spends nothing."""
        return self._session.explain(query, epsilon=epsilon)

    def budget(self) -> BudgetStatus:
        return self._session.budget()

    def close(self) -> None:
        self._session.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
