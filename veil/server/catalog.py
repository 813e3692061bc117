"""Catalog and ``veil.*`` answers for ``veil serve``, built from the policy, never from data.

Clients introspect before they query: psql's ``\\dt``/``\\d``, pgjdbc's ``DatabaseMetaData``
and DBeaver's navigator. Every answer here comes from the policy schema (declared tables and
columns, their Veil types mapped to PostgreSQL types); nothing reads the warehouse, so row
counts, sizes and statistics are never revealed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pg_mimic import BOOL, DATE, FLOAT8, INT8, TEXT, ResultColumn
from sqlglot import exp
from sqlglot.executor import execute as sqlglot_execute

from veil.errors import UnknownTable, did_you_mean
from veil.policy import Policy

__all__ = ["BUDGET_COLUMNS", "PG_TYPE_NAMES", "budget_result", "policy_schema"]

#: Veil column type → PostgreSQL type name (as the catalog reports it).
PG_TYPE_NAMES = {"int": "bigint", "float": "double precision", "category": "text", "bool": "boolean", "date": "date"}
#: Veil answer type (``OutputColumn.sql_type``) → PostgreSQL type OID.
SQL_TYPE_OIDS = {"bigint": INT8, "double": FLOAT8, "text": TEXT, "boolean": BOOL, "date": DATE}
_PG_TYPES = {"TEXT": TEXT, "DOUBLE": FLOAT8}

BUDGET_SCHEMA = {"analyst": "TEXT", "total": "DOUBLE", "spent": "DOUBLE", "remaining": "DOUBLE"}
BUDGET_COLUMNS = [ResultColumn(name, _PG_TYPES[t]) for name, t in BUDGET_SCHEMA.items()]
_VEIL_TABLES = ("budget",)


def policy_schema(policy: Policy) -> dict[str, dict[str, str]]:
    """``{table: {column: pg type name}}``: what pg-mimic's catalog emulation describes."""
    return {name: {col: PG_TYPE_NAMES[spec.type] for col, spec in table.columns.items()} for name, table in policy.tables.items()}


def budget_row(status: Any) -> dict[str, Any]:
    return {
        "analyst": str(status.analyst),
        "total": float(status.total),
        "spent": float(status.spent),
        "remaining": float(status.remaining),
    }


def budget_result(expr: exp.Expression, status: Any) -> tuple[list[ResultColumn], list[tuple]]:
    """Evaluate a SELECT over ``veil.budget`` (the session analyst's one row)."""
    for table in expr.find_all(exp.Table):
        if (table.db or "").lower() == "veil" and table.name.lower() not in _VEIL_TABLES:
            raise UnknownTable(
                f"unknown table 'veil.{table.name}'",
                hint=did_you_mean(table.name.lower(), _VEIL_TABLES) or "Veil's own tables: veil.budget",
            )
    result = sqlglot_execute(
        expr,
        schema={"veil": {"budget": BUDGET_SCHEMA}},
        tables={"veil": {"budget": [budget_row(status)]}},
        dialect="postgres",
    )
    rows = [tuple(r) for r in result.rows]
    return _columns_for(result.columns, rows), rows


def _columns_for(names: tuple[str, ...] | list[str], rows: list[tuple]) -> list[ResultColumn]:
    cols = []
    for i, name in enumerate(names):
        sample = next((r[i] for r in rows if r[i] is not None), None)
        oid = FLOAT8 if isinstance(sample, float) else INT8 if isinstance(sample, int) and not isinstance(sample, bool) else TEXT
        if isinstance(sample, bool):
            oid = BOOL
        cols.append(ResultColumn(name, oid))
    return cols


def static_result(
    names: list[str], rows: list[tuple], types: Mapping[str, int] | None = None
) -> tuple[list[ResultColumn], list[tuple]]:
    """Columns for a fixed answer; types given by name, else inferred, else text."""
    cols = _columns_for(names, rows)
    if types:
        cols = [ResultColumn(c.name, types.get(c.name, c.oid)) for c in cols]
    return cols, rows
