"""Catalog and ``veil.*`` answers for ``veil serve``, built from what an analyst may name, never from data.

Clients introspect before they query: psql's ``\\dt``/``\\d``, pgjdbc's ``DatabaseMetaData``
and DBeaver's navigator. Every answer here comes from the analyst's query catalog
(:class:`veil.proxy.catalog.Catalog`: the policy's tables with their declared columns, public
tables and published tables with their stored column types), mapped to PostgreSQL types;
row counts, sizes and statistics are never revealed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pg_mimic import BOOL, DATE, FLOAT8, INT8, TEXT, ResultColumn
from sqlglot import exp
from sqlglot.executor import execute as sqlglot_execute

from veil.errors import UnknownTable, did_you_mean
from veil.proxy.catalog import Catalog, CatalogTable

__all__ = ["BUDGET_COLUMNS", "PG_TYPE_NAMES", "budget_result", "column_comment", "schema_of", "table_comment"]

#: Veil column type → PostgreSQL type name (as the catalog reports it).
PG_TYPE_NAMES = {"int": "bigint", "float": "double precision", "category": "text", "bool": "boolean", "date": "date"}
#: Veil answer type (``OutputColumn.sql_type``) → PostgreSQL type OID.
SQL_TYPE_OIDS = {"bigint": INT8, "double": FLOAT8, "text": TEXT, "boolean": BOOL, "date": DATE}
_PG_TYPES = {"TEXT": TEXT, "DOUBLE": FLOAT8}

BUDGET_SCHEMA = {"analyst": "TEXT", "total": "DOUBLE", "spent": "DOUBLE", "remaining": "DOUBLE"}
BUDGET_COLUMNS = [ResultColumn(name, _PG_TYPES[t]) for name, t in BUDGET_SCHEMA.items()]
_VEIL_TABLES = ("budget",)


def schema_of(cat: Catalog) -> dict[str, dict[str, str]]:
    """``{table: {column: pg type name}}``: what pg-mimic's catalog emulation describes."""
    return {
        name: {col: PG_TYPE_NAMES.get(vtype, "text") for col, vtype in table.columns.items()}
        for name, table in cat.tables.items()
    }


def table_comment(table: CatalogTable) -> str:
    if table.spec is None:
        return "published table: queried exactly, costs nothing"
    return "public reference table" if table.public else "private table: aggregate queries only, with DP noise"


def column_comment(table: CatalogTable, column: str) -> str:
    """A column's declared bounds or values (``int in [17, 90]``), else its type."""
    vtype = table.columns[column]
    spec = table.spec.columns.get(column) if table.spec is not None else None
    if spec is None:
        return vtype
    if spec.values is not None:
        return f"{spec.type}: {', '.join(map(str, spec.values))}"
    if spec.lower is not None and spec.upper is not None:
        return f"{spec.type} in [{spec.lower}, {spec.upper}]"
    return spec.type


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


def analyst_catalog(query_session: Any) -> Catalog:
    """What ``query_session``'s analyst may name (re-read when the policy file changed).

    Query sessions keep their catalog in their environment; one without (a stand-in in tests)
    gets the policy's own tables."""
    env = getattr(query_session, "_env", None)
    if env is not None and callable(getattr(env, "catalog", None)):
        env.refresh_policy()
        return env.catalog()
    from veil.proxy.catalog import build_catalog

    return build_catalog(query_session.policy, {})
