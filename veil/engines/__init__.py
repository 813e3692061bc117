"""Engines that run Veil's generated SQL: DuckDB embedded (the default) or Spark (``[engine] kind = "spark"``).

:func:`open_engine` picks the engine a policy names; everything engine-specific lives behind
:class:`veil.engines.base.Engine`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from veil.engines.base import Engine
    from veil.policy import Policy

__all__ = ["open_engine"]


def open_engine(policy: Policy, *, public: bool = False) -> Engine:
    """The engine of ``policy``: its warehouse, or (``public=True``) where public and published tables are read.

    DuckDB keeps public tables in a separate mirror file; on Spark they live in the same database.
    """
    if policy.engine.kind == "spark":
        from veil.engines.spark import SparkEngine

        return SparkEngine(policy, public=public)
    from veil.engines.duckdb import DuckDBEngine

    return DuckDBEngine(policy, public=public)
