"""The engine seam: what every engine that runs Veil's generated SQL provides.

Veil generates SQL as sqlglot trees (a neutral form); an engine renders them in its dialect
(:meth:`Engine.render`), runs them, and answers a few metadata questions. Everything
engine-specific lives behind this protocol: rows come back with engine type names that
:func:`output_type` maps to Veil's wire types, and every failure is an :class:`EngineError` whose
``before_data`` flag says whether it happened before any row was read (binding, planning: a
failure that cannot depend on the data) or while running.

>>> output_type("HUGEINT"), output_type("DECIMAL(38,0)"), output_type("VARCHAR")
('bigint', 'double', 'text')
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sqlglot import exp

from veil.errors import QueryRejected, Unsupported

__all__ = ["Engine", "EngineError", "Result", "check_key_type", "output_type"]


class EngineError(QueryRejected):
    """The engine refused or failed to run generated SQL (message carries no data values)."""

    sqlstate = "22000"

    def __init__(self, message: str, *, hint: str | None = None, before_data: bool = False) -> None:
        super().__init__(message, hint=hint)
        self.before_data = before_data  # True: failed while binding, before reading any row


@dataclass(frozen=True)
class Result:
    names: tuple[str, ...]
    types: tuple[str, ...]  # engine type names
    rows: list[tuple[Any, ...]]


class Engine(Protocol):
    """Runs SQL Veil generated from a validated plan. One instance per session (not thread-safe)."""

    #: sqlglot dialect the engine's SQL is rendered in.
    dialect: str

    def render(self, tree: exp.Expression) -> str:
        """SQL text of a generated tree in this engine's dialect (with its semantic fixes)."""
        ...

    def execute(self, sql: str) -> Result: ...

    def describe(self, sql: str) -> Result:
        """Names and types of ``sql``'s result, binding only (reads no data)."""
        ...

    def table_columns(self, table: str) -> list[tuple[str, str]]:
        """``(column, engine type)`` of a table; empty when it does not exist."""
        ...

    def table_exists(self, table: str) -> bool: ...

    def refresh_tables(self, tables: Sequence[str]) -> None:
        """Forget what the engine cached about ``tables`` (another process may have replaced them)."""
        ...

    def table_version(self, table: str, columns: Sequence[str]) -> str:
        """An identity of the table's current data over ``columns`` (changes when any row changes)."""
        ...

    def materialise(self, name: str, sql: str) -> None:
        """Create table ``name`` from ``sql`` atomically (all rows or no table)."""
        ...

    def drop(self, name: str) -> None: ...

    def cancel(self) -> None:
        """Interrupt the statement running in this engine (from another thread)."""
        ...

    def close(self) -> None: ...


#: Engine types a group key may have: the ones whose values come back to Python exactly, hashable
#: and in one total order (DuckDB's and Spark's names). Lists, maps, structs, times, timestamps with a
#: time zone or a precision other than microseconds, intervals, UUIDs and blobs are refused.
_KEY_TYPES = frozenset({
    "BOOLEAN", "TINYINT", "SMALLINT", "INTEGER", "INT", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT",
    "UINTEGER", "UBIGINT", "FLOAT", "DOUBLE", "REAL", "VARCHAR", "STRING", "DATE", "TIMESTAMP", "TIMESTAMP_NTZ",
})  # fmt: skip


def check_key_type(key: str, engine_type: str) -> None:
    """Refuse (free: it depends on types only) a group key of a type outside :data:`_KEY_TYPES`."""
    t = str(engine_type).upper()
    if t not in _KEY_TYPES and not t.startswith("DECIMAL"):
        raise Unsupported(
            f"the group key {key!r} has type {engine_type}, which Veil cannot group by",
            hint="Group by a number, text, boolean, date or timestamp (cast the key, e.g. CAST(k AS VARCHAR))",
        )


def output_type(engine_type: str) -> str:
    """Map an engine type to one of the wire types: bigint, double, text, boolean, date."""
    t = str(engine_type).upper()
    if t in ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT",
             "INT", "LONG", "SHORT", "BYTE"):  # fmt: skip
        return "bigint"
    if t in ("FLOAT", "DOUBLE", "REAL") or t.startswith("DECIMAL"):
        return "double"
    if t == "BOOLEAN":
        return "boolean"
    if t == "DATE":
        return "date"
    return "text"
