"""The engine seam: what every engine that runs Veil's generated SQL provides.

An engine runs SQL that Veil generated from a validated plan and returns rows with engine-neutral
types (:func:`output_type`). Engine errors never reach the analyst raw: they become
:class:`EngineError` with a generic message that carries no data values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from veil.errors import QueryRejected

__all__ = ["Engine", "EngineError", "Result", "output_type"]


class EngineError(QueryRejected):
    """The engine refused or failed to run generated SQL (message carries no data values)."""

    sqlstate = "22000"

    def __init__(self, message: str, *, hint: str | None = None, before_data: bool = False) -> None:
        super().__init__(message, hint=hint)
        self.before_data = before_data  # True: failed while binding, before reading any row


@dataclass(frozen=True)
class Result:
    names: tuple[str, ...]
    types: tuple[str, ...]  # DuckDB type names
    rows: list[tuple[Any, ...]]


class Engine(Protocol):
    def execute(self, sql: str) -> Result: ...

    def describe(self, sql: str) -> Result: ...

    def close(self) -> None: ...


def output_type(duckdb_type: str) -> str:
    """Map an engine type to one of the wire types: bigint, double, text, boolean, date."""
    t = str(duckdb_type).upper()
    if t in ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT"):
        return "bigint"
    if t in ("FLOAT", "DOUBLE", "REAL") or t.startswith("DECIMAL"):
        return "double"
    if t == "BOOLEAN":
        return "boolean"
    if t == "DATE":
        return "date"
    return "text"
