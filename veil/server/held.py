"""What one connection may hold between messages: named prepared statements, named portals, cursors.

A client keeps protocol state on the server: every named ``Parse`` a statement (its text and
tokens), every named ``Bind`` a portal (its parameters, then its whole answer once executed), every
``DECLARE`` a cursor (its whole answer). Without bounds one connection grows the one server process
until it dies (red team s24 A9: 200 statements of 1 MiB grew it by 402 MiB in 1.2 s). So, per
connection (:class:`~veil.server.limits.ServerLimits`):

- ``max_prepared_statements`` named statements, holding ``max_statement_bytes`` in all (their
  texts, tokens and parameter types, :func:`statement_bytes`);
- ``max_portals`` named portals and ``max_cursors`` cursors, whose parameters (:func:`param_bytes`) and answers
  hold ``max_held_bytes`` in all.

Each check runs before the new thing is kept (a statement's count before it is tokenised, its
size before it is stored; a cursor or portal before its query runs), so a refusal costs nothing:
53400 (configuration limit exceeded), naming the limit and how to free room. An answer's size is
known only once it has run, so a new cursor or named portal is refused once the answers already
held reach ``max_held_bytes``: a connection holds at most that plus one answer. The unnamed
statement and portal are not counted: there is one of each, replaced by the next, as for a simple
query. Portals end with their transaction, as in PostgreSQL (:class:`~veil.server.connection.
VeilConnection`: at ``Sync`` outside a transaction block, and at ``COMMIT``/``ROLLBACK``); cursors
at ``COMMIT``/``ROLLBACK``.

>>> from veil.server.limits import ServerLimits
>>> limits = ServerLimits(max_prepared_statements=1)
>>> check_statement_count(limits, {"s1": object()}, "s2")
Traceback (most recent call last):
...
veil.errors.HeldStateLimit: too many prepared statements on this connection (1 held, the limit is 1). ...
>>> check_statement_count(limits, {"s1": object()}, "s1")  # replacing one is not one more
>>> answer_bytes([("ab", 1), (None, b"xyz")])
117
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Generic, TypeVar

from veil.errors import HeldStateLimit
from veil.server.limits import ServerLimits

__all__ = [
    "MAX_SETTINGS",
    "MAX_SETTINGS_CHARS",
    "PARAM_BYTES",
    "PARAM_TYPE_BYTES",
    "TOKEN_BYTES",
    "HeldStateLimit",
    "TextCache",
    "answer_bytes",
    "check_answer",
    "check_cursor",
    "check_portal",
    "check_savepoints",
    "check_setting",
    "check_statement_bytes",
    "check_statement_count",
    "param_bytes",
    "statement_bytes",
]

#: Bytes one token of a prepared statement holds (measured: ~160 with its position and type).
TOKEN_BYTES = 160
#: Bytes one parameter type of a prepared statement holds (a list slot and an int: ~40; red team s54 A2).
PARAM_TYPE_BYTES = 40
#: Bytes one bound parameter holds besides its value's length (a str object's header and its list slot).
PARAM_BYTES = 64
#: ``SET`` parameters one connection may hold (Veil's own and any other name, remembered for SHOW).
MAX_SETTINGS = 256
#: Characters of their names and values, in all.
MAX_SETTINGS_CHARS = 1 << 20
#: Savepoints one transaction may hold open at once (each keeps a snapshot of the connection's settings, which
#: ``ROLLBACK TO`` puts back).
MAX_SAVEPOINTS = 100
_CELL = 8  # a number, date or NULL, counted as one machine word
_ROW = 48  # a tuple's own header, roughly


def answer_bytes(rows: Iterable[Sequence[Any]]) -> int:
    """An answer's size as it is held: text and bytes by length, other values one word each."""
    total = 0
    for row in rows:
        total += _ROW
        for value in row:
            total += len(value) if isinstance(value, (str, bytes)) else _CELL
    return total


def statement_bytes(sql: str, tokens: int, params: int = 0) -> int:
    """What a prepared statement holds, roughly: its text twice (the text, and the copies its tokens
    keep), ``TOKEN_BYTES`` per token and ``PARAM_TYPE_BYTES`` per parameter type (declared or inferred)."""
    return 2 * len(sql.encode()) + TOKEN_BYTES * tokens + PARAM_TYPE_BYTES * params


def param_bytes(values: Iterable[bytes | None]) -> int:
    """What a portal's bound parameters hold, roughly: each value's length and ``PARAM_BYTES`` for the Python
    object it becomes (NULLs included), not its bytes on the wire (red team s54 A2: 32,767 four-byte values
    are 131 KB on the wire and ~2 MB as Python strings)."""
    return sum(PARAM_BYTES + (len(v) if v is not None else 0) for v in values)


def _named(statements: Mapping[str, Any], name: str) -> list[Any]:
    return [s for key, s in statements.items() if key and key != name]


def check_statement_count(limits: ServerLimits, statements: Mapping[str, Any], name: str) -> None:
    """Refuse a ``Parse`` of the named statement ``name`` (the unnamed one always passes; replacing
    one is not one more) when the connection holds ``max_prepared_statements`` others. Checked
    before the statement is tokenised."""
    if not name:
        return
    others = len(_named(statements, name))
    if others >= limits.max_prepared_statements:
        raise HeldStateLimit(
            f"too many prepared statements on this connection ({others} held, the limit is {limits.max_prepared_statements})",
            hint="Close (DEALLOCATE) prepared statements the client no longer uses, or use the unnamed statement",
        )


def check_statement_bytes(limits: ServerLimits, statements: Mapping[str, Any], name: str, size: int) -> None:
    """Refuse to keep the named statement ``name`` of ``size`` bytes (:func:`statement_bytes`) when
    it would bring the connection's named statements past ``max_statement_bytes``."""
    if not name:
        return
    held = sum(int(getattr(s, "held_bytes", 0)) for s in _named(statements, name))
    if held + size > limits.max_statement_bytes:
        raise HeldStateLimit(
            f"prepared statement {name!r} holds about {size} bytes and would bring this connection's prepared "
            f"statements to {held + size} bytes, the limit is {limits.max_statement_bytes}",
            hint="Close (DEALLOCATE) prepared statements the client no longer uses, or use the unnamed statement",
        )


def _held(portals: Mapping[str, Any], cursor_bytes: int, skip: str | None) -> int:
    total = cursor_bytes
    for key, entry in portals.items():
        if key and key != skip:
            total += int(getattr(entry.portal, "held_bytes", 0))
    return total


def check_portal(limits: ServerLimits, portals: Mapping[str, Any], cursor_bytes: int, name: str, param_bytes: int) -> None:
    """Refuse a ``Bind`` to the named portal ``name`` (the unnamed one always passes) beyond
    ``max_portals`` named portals, or when its parameters would bring what the connection holds
    past ``max_held_bytes``."""
    if not name:
        return
    others = sum(1 for key in portals if key and key != name)
    if others >= limits.max_portals:
        raise HeldStateLimit(
            f"too many open portals on this connection ({others} held, the limit is {limits.max_portals})",
            hint="Close portals the client no longer uses (they also end with their transaction)",
        )
    held = _held(portals, cursor_bytes, name)
    if held + param_bytes > limits.max_held_bytes:
        raise HeldStateLimit(
            f"portal {name!r} with {param_bytes} bytes of parameters would bring what this connection holds "
            f"to {held + param_bytes} bytes, the limit is {limits.max_held_bytes}",
            hint="Close portals and cursors the client no longer uses, or end the transaction",
        )


def check_answer(limits: ServerLimits, portals: Mapping[str, Any], cursor_bytes: int, skip: str | None) -> None:
    """Refuse to run a query whose answer a named portal or a cursor would keep, when the answers
    already held (but ``skip``'s own) reach ``max_held_bytes``: before it runs, so free."""
    held = _held(portals, cursor_bytes, skip)
    if held >= limits.max_held_bytes:
        raise HeldStateLimit(
            f"this connection already holds {held} bytes of portals and cursors, the limit is {limits.max_held_bytes}",
            hint="Fetch what you need and CLOSE cursors (or portals) the client no longer uses, or end the transaction",
        )


def check_cursor(limits: ServerLimits, open_cursors: int, portals: Mapping[str, Any], cursor_bytes: int) -> None:
    """Refuse a ``DECLARE`` beyond ``max_cursors`` open cursors, or once what is held reaches
    ``max_held_bytes`` (before its query runs: free)."""
    if open_cursors >= limits.max_cursors:
        raise HeldStateLimit(
            f"too many open cursors on this connection ({open_cursors} open, the limit is {limits.max_cursors})",
            hint="CLOSE cursors the client no longer uses (they also end with their transaction)",
        )
    check_answer(limits, portals, cursor_bytes, None)


def check_setting(values: Mapping[str, str], name: str, value: str) -> None:
    """Refuse a ``SET`` that would bring the parameters remembered for ``SHOW`` past
    :data:`MAX_SETTINGS` names or :data:`MAX_SETTINGS_CHARS` characters (replacing one is not one more)."""
    others = {k: v for k, v in values.items() if k != name}
    if len(others) >= MAX_SETTINGS:
        raise HeldStateLimit(
            f"too many parameters set on this connection ({len(others)}, the limit is {MAX_SETTINGS})",
            hint="RESET parameters the client no longer needs (or RESET ALL)",
        )
    chars = sum(len(k) + len(v) for k, v in others.items()) + len(name) + len(value)
    if chars > MAX_SETTINGS_CHARS:
        raise HeldStateLimit(
            f"the parameters set on this connection would hold {chars} characters, the limit is {MAX_SETTINGS_CHARS}",
            hint="Set shorter values, or RESET parameters the client no longer needs",
        )


def check_savepoints(open_now: int) -> None:
    """Refuse a ``SAVEPOINT`` past :data:`MAX_SAVEPOINTS` open in one transaction."""
    if open_now >= MAX_SAVEPOINTS:
        raise HeldStateLimit(
            f"too many savepoints open in this transaction ({open_now}, the limit is {MAX_SAVEPOINTS})",
            hint="RELEASE savepoints the transaction no longer needs",
        )


_V = TypeVar("_V")


class TextCache(Generic[_V]):
    """A cache keyed by statement text that holds at most ``entries`` keys and ``chars`` characters
    of them: when one more would pass either, it starts over (a statement's text may be 1 MiB).

    >>> cache = TextCache[int](entries=2, chars=10)
    >>> cache.put("abcdef", 1); cache.put("ghij", 2); cache.get("abcdef")
    1
    >>> cache.put("k", 3); cache.get("abcdef") is None, cache.get("k")  # 11 characters: started over
    (True, 3)
    """

    def __init__(self, *, entries: int, chars: int) -> None:
        self._entries, self._chars = entries, chars
        self._items: dict[str, _V] = {}
        self._held = 0

    def __len__(self) -> int:
        return len(self._items)

    @property
    def chars(self) -> int:
        return self._held

    def get(self, key: str) -> _V | None:
        return self._items.get(key)

    def put(self, key: str, value: _V) -> None:
        if key in self._items:
            self._items[key] = value
            return
        if len(self._items) >= self._entries or self._held + len(key) > self._chars:
            self._items.clear()
            self._held = 0
        if len(key) > self._chars:
            return  # never kept
        self._items[key] = value
        self._held += len(key)
