"""What a statement hands back to the wire: rows with PostgreSQL types, and errors as SQLSTATEs.

:class:`Result` is one statement's answer (columns, rows, command tag). :func:`to_pg_error` maps
any exception to what a client may see: a :class:`~veil.errors.VeilError` keeps its own message
and SQLSTATE; anything else becomes a bare "internal error" (XX000) whose details go to the
server log only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date
from fractions import Fraction
from typing import Any

from pg_mimic import ResultColumn
from pg_mimic.errors import PgError

from veil.errors import (
    HeldStateLimit,
    InternalError,
    InvalidEncoding,
    ProtocolViolation,
    QueryCancelled,
    QueryTooComplex,
    QueryTooLarge,
    TooManyConnections,
    VeilError,
)
from veil.server import catalog
from veil.server.logtext import server_logger

__all__ = ["EXPLAIN_COLUMNS", "Result", "answer_rows", "explain_rows", "output_columns", "to_pg_error"]

logger = server_logger()  # client text clipped, outsiders' lines rate-limited (veil.server.logtext)

#: Errors that mean "this client asked for too much": logged in one line, never with a traceback.
_ONE_LINE = frozenset(
    c.sqlstate
    for c in (
        TooManyConnections,
        HeldStateLimit,
        QueryTooLarge,
        QueryTooComplex,
        QueryCancelled,
        ProtocolViolation,
        InvalidEncoding,
    )
)


@dataclass(frozen=True)
class Result:
    """One statement's answer: ``columns`` None for statements without rows (``SET``, ``BEGIN``)."""

    columns: list[ResultColumn] | None
    rows: list[tuple[Any, ...]] = field(default_factory=list)
    tag: str = ""
    notices: tuple[str, ...] = ()  # sent as NoticeResponse (severity NOTICE) before the rows


def to_pg_error(exc: BaseException, *, context: str = "") -> PgError:
    """Map any exception to the client's ErrorResponse (never with Python's own text)."""
    if isinstance(exc, PgError):
        return exc
    if isinstance(exc, RecursionError):
        exc = QueryTooComplex("the query nests too deeply to be analysed", hint="Flatten the expression")
    if isinstance(exc, VeilError):
        if exc.sqlstate in _ONE_LINE:
            logger.warning("%s%s: %s", f"{context}: " if context else "", exc.sqlstate, exc.message)
        fields = {"H": exc.hint} if exc.hint else {}
        return PgError(exc.sqlstate, exc.message, **fields)
    logger.error("internal error answering a client%s", f" ({context})" if context else "", exc_info=exc)
    return PgError(
        InternalError.sqlstate, "internal error in Veil", H="This is a bug in Veil, please report it with the server log"
    )


def _convert(value: Any, sql_type: str) -> Any:
    if value is None:
        return None
    if sql_type == "bigint":
        return round(value) if isinstance(value, float) else int(value)
    if sql_type == "double":
        return float(value)
    if sql_type == "boolean":
        return bool(value)
    if sql_type == "date":
        return value if isinstance(value, date) else date.fromisoformat(str(value))
    return str(value)


def _numeric(sql_type: str) -> bool:
    return sql_type in ("bigint", "double")


def output_columns(columns: Sequence[Any], show_ci: bool) -> list[ResultColumn]:
    """Wire columns of an analyst answer (plus ``<col>_ci95`` after numeric ones with ``show_ci``)."""
    out: list[ResultColumn] = []
    for col in columns:
        out.append(ResultColumn(col.name, catalog.SQL_TYPE_OIDS.get(col.sql_type, catalog.TEXT)))
        if show_ci and _numeric(col.sql_type):
            out.append(ResultColumn(f"{col.name}_ci95", catalog.FLOAT8))
    return out


def answer_rows(answer: Any, show_ci: bool) -> list[tuple[Any, ...]]:
    """Rows of an analyst answer, converted to the wire types of :func:`output_columns`."""
    types = [c.sql_type for c in answer.columns]
    ci = answer.ci95
    rows = []
    for r, row in enumerate(answer.rows):
        out: list[Any] = []
        for i, value in enumerate(row):
            out.append(_convert(value, types[i]))
            if show_ci and _numeric(types[i]):
                half = ci[r][i] if ci is not None and ci[r] is not None else None
                out.append(None if half is None else float(half))
        rows.append(tuple(out))
    return rows


#: EXPLAIN's columns, whatever the query (a public query has one row saying it is free and exact).
EXPLAIN_COLUMNS = ("statistic", "role", "mechanism", "sensitivity", "scale", "ci95", "epsilon", "epsilon_exact", "note")
_EXPLAIN_TYPES = {"sensitivity": catalog.FLOAT8, "scale": catalog.FLOAT8, "ci95": catalog.FLOAT8, "epsilon": catalog.FLOAT8}


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str, date)):
        return value
    if isinstance(value, Fraction):
        return float(value)
    if hasattr(value, "item"):  # numpy scalar
        return value.item()
    return str(value)


def explain_rows(explanation: Any) -> Result:
    """An :class:`~veil.proxy.answer.Explanation` as EXPLAIN's table."""
    stats = list(explanation.rows())
    if not all(isinstance(s, dict) for s in stats):
        raise InternalError(f"cannot render EXPLAIN rows of type {type(stats[0]).__name__}")
    if not stats and explanation.public:
        stats = [
            {
                "statistic": "(whole query)",
                "role": "output",
                "mechanism": "none",
                "sensitivity": 0.0,
                "scale": 0.0,
                "ci95": None,
                "epsilon": 0.0,
                "epsilon_exact": "0",
                "note": "public tables only: answered exactly, costs nothing",
            }
        ]
    rows = [tuple(_plain(s.get(name)) for name in EXPLAIN_COLUMNS) for s in stats]
    columns = [ResultColumn(name, _EXPLAIN_TYPES.get(name, catalog.TEXT)) for name in EXPLAIN_COLUMNS]
    return Result(columns, rows, "EXPLAIN")
