"""DuckDB, the embedded default engine, over the sandboxed warehouse reader.

Engine-specific code lives here only. A :class:`DuckDBEngine` holds one cursor of the process-wide
sandboxed reader (:func:`veil.store.warehouse.reader`: read-only, no external access, configuration
locked) and takes a fresh cursor when a curator write in this process reopened the reader.
Engine errors never reach the analyst raw: they become :class:`EngineError` with a generic message.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import duckdb

from veil.engines.base import EngineError, Result
from veil.policy import Policy

__all__ = ["DuckDBEngine"]


_BIND_ERRORS: tuple[type[BaseException], ...] = (
    duckdb.BinderException,
    duckdb.ParserException,
    duckdb.CatalogException,
)


class DuckDBEngine:
    """One cursor on the sandboxed reader of ``policy``'s warehouse (not shareable across threads)."""

    def __init__(self, policy: Policy | None = None, *, connection: duckdb.DuckDBPyConnection | None = None) -> None:
        if policy is None and connection is None:
            raise ValueError("DuckDBEngine needs a policy or a connection")
        self._policy = policy
        self._connection = connection
        self._cursor: duckdb.DuckDBPyConnection | None = None
        self._generation = -1

    def _cur(self) -> duckdb.DuckDBPyConnection:
        if self._connection is not None:
            if self._cursor is None:
                self._cursor = self._connection.cursor()
            return self._cursor
        from veil.store import warehouse

        assert self._policy is not None
        if self._cursor is None or warehouse.reader_generation(self._policy) != self._generation:
            self._cursor, self._generation = warehouse.reader_cursor(self._policy)
        return self._cursor

    def _run(self, sql: str) -> Result:
        cur = self._cur()
        try:
            cur.execute(sql)
            rows = cur.fetchall()
        except _BIND_ERRORS as exc:
            raise EngineError(
                f"the query could not be run: {type(exc).__name__.replace('Exception', '')} error",
                hint="Check that values are compared with columns of the same type",
                before_data=True,
            ) from None
        except duckdb.Error as exc:
            raise EngineError(
                f"the query failed while running ({type(exc).__name__.replace('Exception', '')} error)",
                hint="A value in the data could not be converted or computed; use TRY_CAST or a WHERE filter",
            ) from None
        desc: Sequence[Any] = cur.description or []
        return Result(tuple(d[0] for d in desc), tuple(str(d[1]) for d in desc), rows)

    def execute(self, sql: str) -> Result:
        return self._run(sql)

    def describe(self, sql: str) -> Result:
        """Names and types of ``sql``'s result without reading data (DESCRIBE binds only)."""
        res = self._run(f"DESCRIBE {sql}")
        return Result(tuple(r[0] for r in res.rows), tuple(str(r[1]) for r in res.rows), [])

    def close(self) -> None:
        if self._cursor is not None:
            try:
                self._cursor.close()
            except duckdb.Error:
                pass
            self._cursor = None
