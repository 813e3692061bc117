"""One exception tree for Veil.

Every error carries a SQLSTATE so the wire server can send it unchanged, and a message
that says what was wrong, the offending value, and what to do instead.

>>> try:
...     raise UnknownTable("unknown table 'adlt'", hint="Did you mean 'adult'?")
... except QueryRejected as exc:
...     (exc.sqlstate, str(exc))
('42P01', "unknown table 'adlt'. Did you mean 'adult'?")
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = [
    "AuthError",
    "BudgetExhausted",
    "CopyNotReady",
    "DivisionByZero",
    "HeldStateLimit",
    "InputError",
    "InternalError",
    "InvalidBinaryRepresentation",
    "InvalidColumnReference",
    "InvalidDatetimeFormat",
    "InvalidEncoding",
    "InvalidEscapeSequence",
    "InvalidRegularExpression",
    "LedgerMismatch",
    "MissingExtra",
    "NoActiveTransaction",
    "NonDPReleaseRefused",
    "NotAllowed",
    "NumericOutOfRange",
    "ParseError",
    "PlaintextRefused",
    "PolicyError",
    "ProtocolViolation",
    "PublicationRefused",
    "QueryCancelled",
    "QueryFailed",
    "QueryRejected",
    "QueryTooComplex",
    "QueryTooLarge",
    "ReleaseError",
    "TooManyConnections",
    "TypeMismatch",
    "Unbounded",
    "UndefinedOperator",
    "UnknownColumn",
    "UnknownCursor",
    "UnknownSavepoint",
    "UnknownSetting",
    "UnknownTable",
    "Unsupported",
    "VacuousParameter",
    "ValueTooLarge",
    "VeilError",
    "WarehouseChanged",
    "did_you_mean",
]

#: SQLSTATE sent for an exhausted privacy budget (class "VB": Veil budget). Documented in docs/errors.md.
BUDGET_SQLSTATE = "VB001"


class VeilError(Exception):
    """Base of every error Veil raises on purpose."""

    sqlstate: str = "XX000"

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        self.message = message
        self.hint = hint
        super().__init__(f"{message}. {hint}" if hint else message)


class InputError(VeilError, ValueError):
    """A parameter or input file given to a command is invalid (bad value, wrong shape)."""

    sqlstate = "22023"


class VacuousParameter(InputError):
    """A publication parameter that gives no protection (k < 2, noise a ≤ 0, ε ≤ 0 or ∞, a group
    smaller than k): the output would be the private data under a privacy label."""


class InvalidEncoding(InputError):
    """Bytes that are not valid UTF-8 where text was expected (PostgreSQL's character_not_in_repertoire)."""

    sqlstate = "22021"


class InvalidBinaryRepresentation(InputError):
    """A parameter sent in binary format that is not a valid value of its type (PostgreSQL's
    invalid_binary_representation)."""

    sqlstate = "22P03"


class ProtocolViolation(VeilError):
    """A client broke the PostgreSQL wire protocol (malformed or oversized message)."""

    sqlstate = "08P01"


class TooManyConnections(VeilError):
    """The server (or one analyst) already has as many connections as allowed."""

    sqlstate = "53300"


class PolicyError(VeilError, ValueError):
    """The policy file is missing, malformed, or does not allow what was asked."""

    sqlstate = "F0000"


class LedgerMismatch(PolicyError):
    """The policy names a ledger that is not the warehouse's own: another ledger, a missing file, or one moved away
    with ``veil move-ledger``. Its budgets and release history would be forgotten (red team s66 F7), so nothing runs
    on it: refused before anything is read or written. A configuration error (SQLSTATE F0000, as every policy error)."""


class QueryRejected(VeilError, ValueError):
    """An analyst query was refused before anything ran; it costs nothing."""

    sqlstate = "42000"


class ParseError(QueryRejected):
    """The SQL text does not parse."""

    sqlstate = "42601"


class UnknownTable(QueryRejected):
    sqlstate = "42P01"


class UnknownColumn(QueryRejected):
    sqlstate = "42703"


class InvalidColumnReference(QueryRejected):
    """A derived table or CTE is given more column names than its query has columns (PostgreSQL's
    invalid_column_reference)."""

    sqlstate = "42P10"


class UnknownCursor(QueryRejected):
    """``FETCH``/``CLOSE`` of a cursor that was not declared (PostgreSQL's invalid_cursor_name)."""

    sqlstate = "34000"


class UnknownSavepoint(QueryRejected):
    """``ROLLBACK TO``/``RELEASE`` of a savepoint that was not set in this transaction (invalid_savepoint_specification)."""

    sqlstate = "3B001"


class NoActiveTransaction(QueryRejected):
    """``SAVEPOINT``, ``ROLLBACK TO`` or ``RELEASE`` outside a transaction block (no_active_sql_transaction)."""

    sqlstate = "25P01"


class UnknownSetting(QueryRejected):
    """``SET``/``SHOW``/``RESET`` of a setting that does not exist (PostgreSQL's undefined_object)."""

    sqlstate = "42704"


class Unsupported(QueryRejected):
    """Valid SQL that Veil cannot answer with differential privacy."""

    sqlstate = "0A000"


class Unbounded(Unsupported):
    """An aggregate over a column (or expression) without declared bounds."""


class NotAllowed(QueryRejected):
    """A statement or function analysts may never run (non-SELECT, file access, …)."""

    sqlstate = "42501"


class TypeMismatch(QueryRejected):
    """Values of different type families are compared or combined (they would be cast row by row)."""

    sqlstate = "42804"


class QueryTooLarge(QueryRejected):
    """The query text is longer than the configured limit (checked before parsing)."""

    sqlstate = "54000"


class QueryTooComplex(QueryRejected):
    """The query nests deeper than the configured limit (checked before parsing)."""

    sqlstate = "54001"


class NumericOutOfRange(QueryRejected):
    """A catalog or table-less expression's number does not fit its type (PostgreSQL's numeric_value_out_of_range)."""

    sqlstate = "22003"


class DivisionByZero(QueryRejected):
    """Division (or modulo) by zero in a catalog or table-less expression."""

    sqlstate = "22012"


class UndefinedOperator(QueryRejected):
    """An operator applied to types it does not take, e.g. ``'ab' * 3`` (PostgreSQL's undefined_function)."""

    sqlstate = "42883"


class InvalidDatetimeFormat(QueryRejected):
    """A date or time literal whose text no engine reads alike (``DATE 'infinity'``, ``DATE 'epoch'``, a year past
    9999; PostgreSQL's invalid_datetime_format)."""

    sqlstate = "22007"


class InvalidRegularExpression(QueryRejected):
    """A ``~`` pattern that is not a valid regular expression."""

    sqlstate = "2201B"


class InvalidEscapeSequence(QueryRejected):
    """A ``LIKE`` pattern that ends in its escape character (PostgreSQL's invalid_escape_sequence)."""

    sqlstate = "22025"


class ValueTooLarge(QueryRejected):
    """A value or answer larger than the server builds (PostgreSQL's program_limit_exceeded): a catalog or
    table-less expression's text, a LIKE or ``~`` match, a public answer's rows."""

    sqlstate = "54000"


class HeldStateLimit(VeilError):
    """One server connection holds as many prepared statements, portals or cursors (or bytes of them) as the server
    allows (``veil serve``; refused before anything is kept or run)."""

    sqlstate = "53400"


class QueryFailed(VeilError):
    """Generated SQL failed after the budget was reserved: a bug. The message never depends on the data."""

    sqlstate = "XX000"


class QueryCancelled(VeilError):
    """A statement was cancelled (statement timeout or client cancel request)."""

    sqlstate = "57014"


class CopyNotReady(VeilError):
    """A timed planning needed a bounded copy that is not built (the policy or the table changed just before): it
    never builds one under a timer, since the build reads the raw table (red team s40 A1). Nothing was charged; the
    server builds it untimed and plans again."""

    sqlstate = "55000"


class WarehouseChanged(CopyNotReady):
    """A curator write in this process (a table written, the policy reloaded, a bounded copy built by another session)
    moved the reader between a query's plan and its charged run: refused before anything is read, refunded if it was
    reserved. Nothing about the data decides it; running the query again plans it on the new reader."""


class BudgetExhausted(VeilError, ValueError):
    """The query's ε cost does not fit in the analyst's remaining budget; nothing was charged."""

    sqlstate = BUDGET_SQLSTATE


class AuthError(VeilError):
    sqlstate = "28P01"


class PlaintextRefused(AuthError):
    """An unencrypted connection from a non-loopback address (PostgreSQL's invalid_authorization_specification)."""

    sqlstate = "28000"


class ReleaseError(VeilError):
    """A publication or release record could not be written or found."""

    sqlstate = "55000"


class PublicationRefused(ReleaseError):
    """The release gate found that a publication would not be protected as claimed; nothing was written."""

    sqlstate = "42501"


class NonDPReleaseRefused(PublicationRefused):
    """A publication without an end-to-end DP guarantee refused from the release history and the policy alone, before
    any data is read: its population already has a release without DP guarantee (live, replaced or retracted: a
    published table is public for good), or its source table caps ε (``epsilon_total``) and such a release's ε is
    unbounded. ``earlier``: the ids of the earlier releases without DP guarantee (empty for the cap)."""

    def __init__(self, message: str, *, hint: str | None = None, earlier: Iterable[str] = ()) -> None:
        self.earlier = tuple(earlier)
        super().__init__(message, hint=hint)


class InternalError(VeilError):
    """A bug in Veil: please report it with the message."""

    sqlstate = "XX000"

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message, hint=hint or "This is a bug in Veil, please report it")


class MissingExtra(VeilError, ImportError):
    """A command needs an optional part of Veil that is not installed (``pip install 'veil[<extra>]'``)."""

    sqlstate = "58000"

    def __init__(self, message: str, *, extra: str, hint: str | None = None) -> None:
        self.extra = extra
        super().__init__(message, hint=hint or f"Install it with: pip install 'veil[{extra}]'")


def did_you_mean(name: str, candidates: Iterable[str]) -> str | None:
    """Return a "Did you mean …?" hint for ``name`` among ``candidates``, or None.

    >>> did_you_mean("agee", ["age", "sex"])
    "Did you mean 'age'?"
    """
    close = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return f"Did you mean '{close[0]}'?" if close else None
