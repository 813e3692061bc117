"""What one connection may hold between messages: named prepared statements, named portals, cursors.

A client keeps protocol state on the server: every named ``Parse`` a statement (its text and
tokens), every named ``Bind`` a portal (its parameters, then its whole answer once executed), every
``DECLARE`` a cursor (its whole answer). Without bounds one connection grows the one server process
until it dies (red team s24 A9: 200 statements of 1 MiB grew it by 402 MiB in 1.2 s). So, per
connection (:class:`~veil.server.limits.ServerLimits`):

- ``max_prepared_statements`` named statements, holding ``max_statement_bytes`` in all (their
  texts, tokens and parameter types, :func:`statement_bytes`);
- ``max_portals`` named portals and ``max_cursors`` cursors, whose names, parameters (:func:`param_bytes`) and
  answers (:func:`answer_bytes`, measured), with the savepoints' names and settings snapshots, hold
  ``max_held_bytes`` in all;
- and all of one analyst's connections (in one process), their named statements included,
  ``max_analyst_held_bytes`` together (red team s73 F3).

Each check runs before the new thing is kept (a statement's count before it is tokenised, its
size before it is stored; a cursor or portal before its query runs), so a refusal costs nothing:
53400 (configuration limit exceeded), naming the limit and how to free room. An answer's size is
known only once it has run, so a new cursor or portal's query is refused once the answers already
held reach ``max_held_bytes``: a connection holds at most that plus one answer, and one analyst's connections
``max_analyst_held_bytes`` plus one answer. The unnamed portal is counted like a named one (red team s75 F5: a
suspended one, ``Execute`` with a row limit then ``Flush`` without ``Sync``, kept a whole answer per connection,
uncounted: ~85 MiB each), and a portal run to its end keeps no rows (:class:`~veil.server.session.VeilPortal`).
The unnamed statement is never refused (there is one, replaced by the next, as for a simple query), but counted in
the analyst's budget (:meth:`~veil.server.session.VeilSession.cache_bytes`). Portals end
with their transaction, as in PostgreSQL (:class:`~veil.server.connection.VeilConnection`: at ``Sync`` outside a
transaction block, and at ``COMMIT``/``ROLLBACK``); cursors at ``COMMIT``/``ROLLBACK``.

>>> from veil.server.limits import ServerLimits
>>> limits = ServerLimits(max_prepared_statements=1)
>>> check_statement_count(limits, {"s1": object()}, "s2")
Traceback (most recent call last):
...
veil.errors.HeldStateLimit: too many prepared statements on this connection (1 held, the limit is 1). ...
>>> check_statement_count(limits, {"s1": object()}, "s1")  # replacing one is not one more
>>> answer_bytes([("ab", 1.5)]) >= sys.getsizeof(("ab", 1.5)) + sys.getsizeof("ab") + sys.getsizeof(1.5)
True
>>> truncate_name("n" * 100) == "n" * 63, len(truncate_name("é" * 40).encode())  # cut on a character's boundary
(True, 62)

Names are cut to PostgreSQL's 63 bytes (``NAMEDATALEN`` - 1) before anything is kept (red team s73 F1: 200 statements
named with 1 MB each grew the server by 188 MiB, never refused): the names of prepared statements and portals in
protocol messages silently, as PostgreSQL's hash tables keep them, so every later message naming them finds them;
identifiers in SQL text (cursors, savepoints, ``DEALLOCATE``) with PostgreSQL's NOTICE (42622). Each kept name is
counted too (:func:`name_bytes`): a statement's in the statement bytes, a portal's, a cursor's and a savepoint's in
the held bytes.
"""

from __future__ import annotations

import functools
import itertools
import operator
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Generic, TypeVar

from veil.errors import HeldStateLimit
from veil.server.limits import ServerLimits

__all__ = [
    "MAX_SETTINGS",
    "MAX_SETTINGS_BYTES",
    "NAMEDATALEN",
    "PARAM_BYTES",
    "PARAM_TYPE_BYTES",
    "TOKEN_BYTES",
    "HeldStateLimit",
    "Notice",
    "TextCache",
    "answer_bytes",
    "check_analyst",
    "check_answer",
    "check_cursor",
    "check_kept",
    "check_portal",
    "check_savepoints",
    "check_setting",
    "check_statement_bytes",
    "check_statement_count",
    "identifier",
    "name_bytes",
    "param_bytes",
    "portal_bytes",
    "settings_bytes",
    "statement_bytes",
    "statements_bytes",
    "truncate_name",
]

#: Bytes one token of a prepared statement holds (measured with tracemalloc, the Route kept: 158 for one-character
#: numbers and operators, 181 for short identifiers, with its position and type; red team s75 LOW: 160 under-counted).
TOKEN_BYTES = 192
#: Bytes one parameter type of a prepared statement holds (a list slot and an int: ~40; red team s54 A2).
PARAM_TYPE_BYTES = 40
#: Bytes one bound parameter holds besides its value's length (a str object's header and its list slot).
PARAM_BYTES = 64
#: ``SET`` parameters one connection may hold (Veil's own and any other name, remembered for SHOW).
MAX_SETTINGS = 256
#: Bytes their names and values hold, in all (``sys.getsizeof``: a value of astral characters takes 4 bytes a
#: character; bounded in characters, 1 Mi of them held 4 MiB, red team s75 F4).
MAX_SETTINGS_BYTES = 1 << 20
#: Savepoints one transaction may hold open at once (each keeps a snapshot of the connection's settings, which
#: ``ROLLBACK TO`` puts back).
MAX_SAVEPOINTS = 100
#: PostgreSQL's ``NAMEDATALEN``: a name keeps at most ``NAMEDATALEN - 1`` = 63 bytes.
NAMEDATALEN = 64
#: Bytes one kept name holds besides its ``str`` object: its slot in a dict (hash, key, value) or list.
NAME_SLOT_BYTES = 64
#: pymalloc hands out blocks in 16-byte steps: an object wastes half a step on average beyond ``sys.getsizeof``.
_SLACK = 8
_sizeof = sys.getsizeof
_NOT_NONE = functools.partial(operator.is_not, None)


class Notice(str):
    """A notice's text with its SQLSTATE (sent as a NoticeResponse; a plain ``str`` notice is 00000)."""

    sqlstate = "00000"


class _NameTooLong(Notice):
    sqlstate = "42622"  # name_too_long: PostgreSQL's NOTICE when it truncates an identifier


def truncate_name(name: str) -> str:
    """``name`` cut to ``NAMEDATALEN - 1`` bytes of UTF-8, on a character's boundary (PostgreSQL's
    ``truncate_identifier``, ``pg_mbcliplen``)."""
    if len(name) < NAMEDATALEN // 4:  # at most 4 bytes a character: short enough whatever it holds
        return name
    raw = name.encode("utf-8", errors="surrogatepass")
    if len(raw) < NAMEDATALEN:
        return name
    return raw[: NAMEDATALEN - 1].decode("utf-8", errors="ignore")


def identifier(name: str) -> tuple[str, tuple[str, ...]]:
    """An identifier of SQL text as PostgreSQL keeps it: (its first 63 bytes, the NOTICE saying so when it was cut)."""
    short = truncate_name(name)
    if short is name:
        return name, ()
    shown = name if len(name) <= 200 else name[:200] + "…"  # (the reply need not quote a 1 MB name whole)
    return short, (_NameTooLong(f'identifier "{shown}" will be truncated to "{short}"'),)


def name_bytes(name: str) -> int:
    """What one kept name holds: its ``str`` object and its slot."""
    return _sizeof(name) + NAME_SLOT_BYTES


def answer_bytes(rows: Sequence[Sequence[Any]]) -> int:
    """What an answer holds as it is kept (a list of tuples of Python objects), measured, not estimated (red team s73
    F3: counting a text by its length and a number as 8 bytes counted a tenth of the memory): ``sys.getsizeof`` of the
    list, of each row's tuple and of each value but ``None`` (one object, shared: its cell is the tuple's slot), plus
    half a 16-byte allocation step per row and cell. Other values shared between cells (``True``, small integers) are
    counted once per cell: a little more than they hold, never less. Passes in C (~0.1 µs a value)."""
    cells = sum(map(len, rows))
    values = filter(_NOT_NONE, itertools.chain.from_iterable(rows))
    total = _sizeof(rows) + sum(map(_sizeof, rows)) + sum(map(_sizeof, values))
    return total + _SLACK * (len(rows) + cells)


def settings_bytes(values: Mapping[str, Any], previous: Mapping[str, Any] | None = None) -> int:
    """What a copy of ``values`` holds (its dict, and each name and value not already held by ``previous``, the copy
    before it): a savepoint's snapshot of the settings (red team s73 F1: ``SET x = '<1 MB>'; SAVEPOINT sN`` in a loop
    kept a new 1 MB value with each savepoint, uncounted)."""
    total = _sizeof(values)
    for key, value in values.items():
        old = previous.get(key) if previous is not None else None
        if old is not value:
            total += _sizeof(value) + (sum(map(_sizeof, value)) if isinstance(value, tuple) else 0)
            total += _sizeof(key) + _SLACK
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
    it would bring the connection's named statements past ``max_statement_bytes`` (each with its name)."""
    if not name:
        return
    size += name_bytes(name)
    held = statements_bytes(statements, skip=name)
    if held + size > limits.max_statement_bytes:
        raise HeldStateLimit(
            f"prepared statement {name!r} holds about {size} bytes and would bring this connection's prepared "
            f"statements to {held + size} bytes, the limit is {limits.max_statement_bytes}",
            hint="Close (DEALLOCATE) prepared statements the client no longer uses, or use the unnamed statement",
        )


def statements_bytes(statements: Mapping[str, Any], skip: str | None = None) -> int:
    """What the named statements (but ``skip``) hold: each one's name and :func:`statement_bytes`."""
    return sum(int(getattr(s, "held_bytes", 0)) + name_bytes(key) for key, s in statements.items() if key and key != skip)


def portal_bytes(portals: Mapping[str, Any], skip: str | None = None) -> int:
    """What the portals (but ``skip``) hold: each one's name, parameters and answer, the unnamed portal's too (red
    team s75 F5: a suspended unnamed portal kept a whole answer per connection, outside every budget)."""
    total = 0
    for key, entry in portals.items():
        if key != skip:
            total += name_bytes(key) + int(getattr(entry.portal, "held_bytes", 0))
    return total


def _held(portals: Mapping[str, Any], kept_bytes: int, skip: str | None) -> int:
    return kept_bytes + portal_bytes(portals, skip)


def check_analyst(limits: ServerLimits, others: int, mine: int, adding: int = 0) -> None:
    """Refuse once what one analyst's connections hold together (``others``: the analyst's other connections in this
    process, ``mine``: this one's) reaches ``max_analyst_held_bytes`` (or would pass it with ``adding`` more bytes),
    so that the connection cap does not multiply ``max_held_bytes`` (red team s73 F3)."""
    total = others + mine
    if total + adding > limits.max_analyst_held_bytes or (not adding and total >= limits.max_analyst_held_bytes):
        raise HeldStateLimit(
            f"your connections already hold {total} bytes of prepared statements, portals, cursors and savepoints"
            f"{f' and this would add {adding}' if adding else ''}, the limit for one analyst is "
            f"{limits.max_analyst_held_bytes}",
            hint="Fetch what you need and CLOSE cursors (or portals) on your connections, end their transactions, "
            "DEALLOCATE prepared statements, or close connections you no longer use",
        )


def check_kept(limits: ServerLimits, held: int, adding: int, what: str, others: int = 0) -> None:
    """Refuse to keep ``what`` (``adding`` bytes: a savepoint's name and settings) when it would bring what the
    connection holds (``held``) past ``max_held_bytes``, or the analyst's connections past their budget."""
    if held + adding > limits.max_held_bytes:
        raise HeldStateLimit(
            f"{what} would bring what this connection holds to {held + adding} bytes, the limit is {limits.max_held_bytes}",
            hint="RELEASE savepoints, CLOSE cursors and portals the client no longer uses, or end the transaction",
        )
    check_analyst(limits, others, held, adding)


def check_portal(
    limits: ServerLimits, portals: Mapping[str, Any], kept_bytes: int, name: str, param_bytes: int, others: int = 0
) -> None:
    """Refuse a ``Bind`` to the named portal ``name`` (the unnamed one always passes) beyond
    ``max_portals`` named portals, or when its name and parameters would bring what the connection holds
    (``kept_bytes``: its cursors and savepoints, and its named portals) past ``max_held_bytes``, or what the
    analyst's connections hold (``others``: the other connections') past ``max_analyst_held_bytes``."""
    if not name:
        return
    others_here = sum(1 for key in portals if key and key != name)
    if others_here >= limits.max_portals:
        raise HeldStateLimit(
            f"too many open portals on this connection ({others_here} held, the limit is {limits.max_portals})",
            hint="Close portals the client no longer uses (they also end with their transaction)",
        )
    held = _held(portals, kept_bytes, name)
    adding = param_bytes + name_bytes(name)
    if held + adding > limits.max_held_bytes:
        raise HeldStateLimit(
            f"portal {name!r} with {param_bytes} bytes of parameters would bring what this connection holds "
            f"to {held + adding} bytes, the limit is {limits.max_held_bytes}",
            hint="Close portals and cursors the client no longer uses, or end the transaction",
        )
    check_analyst(limits, others, held, adding)


def check_answer(limits: ServerLimits, portals: Mapping[str, Any], kept_bytes: int, skip: str | None, others: int = 0) -> None:
    """Refuse to run a query whose answer a portal (the unnamed one too) or a cursor would keep, when the answers
    already held (but ``skip``'s own) reach ``max_held_bytes``, or the analyst's connections together
    reach ``max_analyst_held_bytes``: before it runs, so free."""
    held = _held(portals, kept_bytes, skip)
    if held >= limits.max_held_bytes:
        raise HeldStateLimit(
            f"this connection already holds {held} bytes of portals and cursors, the limit is {limits.max_held_bytes}",
            hint="Fetch what you need and CLOSE cursors (or portals) the client no longer uses, or end the transaction",
        )
    check_analyst(limits, others, held)


def check_cursor(limits: ServerLimits, open_cursors: int, portals: Mapping[str, Any], kept_bytes: int, others: int = 0) -> None:
    """Refuse a ``DECLARE`` beyond ``max_cursors`` open cursors, or once what is held reaches
    ``max_held_bytes`` (or the analyst's ``max_analyst_held_bytes``), before its query runs: free."""
    if open_cursors >= limits.max_cursors:
        raise HeldStateLimit(
            f"too many open cursors on this connection ({open_cursors} open, the limit is {limits.max_cursors})",
            hint="CLOSE cursors the client no longer uses (they also end with their transaction)",
        )
    check_answer(limits, portals, kept_bytes, None, others)


def check_setting(values: Mapping[str, str], name: str, value: str) -> None:
    """Refuse a ``SET`` that would bring the parameters remembered for ``SHOW`` past
    :data:`MAX_SETTINGS` names or :data:`MAX_SETTINGS_BYTES` bytes (replacing one is not one more)."""
    others = {k: v for k, v in values.items() if k != name}
    if len(others) >= MAX_SETTINGS:
        raise HeldStateLimit(
            f"too many parameters set on this connection ({len(others)}, the limit is {MAX_SETTINGS})",
            hint="RESET parameters the client no longer needs (or RESET ALL)",
        )
    size = sum(_sizeof(k) + _sizeof(v) for k, v in others.items()) + _sizeof(name) + _sizeof(value)
    if size > MAX_SETTINGS_BYTES:
        raise HeldStateLimit(
            f"the parameters set on this connection would hold {size} bytes, the limit is {MAX_SETTINGS_BYTES}",
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


def _value_bytes(value: Any) -> int:
    """A cached value's size: the object and, for a sequence (a Describe's columns), each element and a slot."""
    total = _sizeof(value)
    if isinstance(value, (list, tuple)):
        total += sum(_sizeof(v) + NAME_SLOT_BYTES for v in value)
    return total


class TextCache(Generic[_V]):
    """A cache keyed by statement text that holds at most ``entries`` keys and ``max_bytes`` bytes of keys and values
    (``sys.getsizeof``: a text of astral characters takes 4 bytes a character, red team s75 F4 — bounded in characters,
    a 4 Mi-character cache held 16 MiB): when one more would pass either, it starts over (a text may be 1 MiB).

    >>> cache = TextCache[int](entries=2, max_bytes=300)
    >>> cache.put("abcdef", 1); cache.put("ghij", 2); cache.get("abcdef")
    1
    >>> cache.put("k" * 60, 3); cache.get("abcdef") is None, cache.get("k" * 60)  # past 300 bytes: started over
    (True, 3)
    >>> TextCache.size_of("\U0001f600" * 1000, 0) > 4000
    True
    """

    def __init__(self, *, entries: int, max_bytes: int) -> None:
        self._entries, self._max = entries, max_bytes
        self._items: dict[str, _V] = {}
        self._held = 0

    def __len__(self) -> int:
        return len(self._items)

    @property
    def bytes(self) -> int:
        """What the cached keys and values hold (:meth:`size_of` each)."""
        return self._held

    @staticmethod
    def size_of(key: str, value: Any) -> int:
        return _sizeof(key) + _value_bytes(value) + NAME_SLOT_BYTES

    def get(self, key: str) -> _V | None:
        return self._items.get(key)

    def clear(self) -> None:
        self._items.clear()
        self._held = 0

    def put(self, key: str, value: _V) -> None:
        if key in self._items:
            return  # (a statement text's value does not change while it is cached)
        size = self.size_of(key, value)
        if len(self._items) >= self._entries or self._held + size > self._max:
            self.clear()
        if size > self._max:
            return  # never kept
        self._items[key] = value
        self._held += size
