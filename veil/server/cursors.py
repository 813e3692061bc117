"""SQL cursors (``DECLARE … CURSOR FOR``, ``FETCH``, ``MOVE``, ``CLOSE``), as psql's ``FETCH_COUNT`` uses them.

A cursor's query is answered once, when it is declared (and charged then, like any query); ``FETCH``
hands out its rows. Only forward fetching is supported (``NEXT``, ``FORWARD [n | ALL]``, ``n``,
``ALL``); ``NO SCROLL`` is the default. A cursor's name keeps its first 63 bytes, with PostgreSQL's NOTICE (42622)
when it is cut (:func:`~veil.server.held.identifier`; red team s73 F1: 1 MB names were kept whole), and is counted
with the cursor's answer in what the connection holds.

>>> parse_declare("DECLARE c NO SCROLL CURSOR WITHOUT HOLD FOR SELECT 1")
('c', 'SELECT 1')
>>> parse_fetch("FETCH FORWARD 100 FROM _psql_cursor"), parse_fetch("FETCH c"), parse_fetch("FETCH ALL IN c")
(('_psql_cursor', 100), ('c', 1), ('c', None))
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from veil.errors import ParseError, UnknownCursor, Unsupported
from veil.server.held import answer_bytes, identifier, name_bytes
from veil.server.results import Result

__all__ = ["Cursors", "parse_declare", "parse_fetch"]

_DECLARE_RE = re.compile(
    r"^\s*DECLARE\s+(\"[^\"]+\"|[A-Za-z_][\w$]*)\s+((?:BINARY|ASENSITIVE|INSENSITIVE|NO\s+SCROLL|SCROLL|\s)*)"
    r"CURSOR\s+(?:(?:WITH|WITHOUT)\s+HOLD\s+)?FOR\s+(.+?)\s*$",
    re.I | re.S,
)
_FETCH_RE = re.compile(
    r"^\s*(?:FETCH|MOVE)\s+(?:(NEXT|FORWARD\s+ALL|FORWARD\s+[0-9]+|FORWARD|ALL|[0-9]+)\s+)?(?:(?:FROM|IN)\s+)?"
    r"(\"[^\"]+\"|[A-Za-z_][\w$]*)\s*$",
    re.I | re.S,
)


def _name(raw: str) -> str:
    return raw[1:-1] if raw.startswith('"') else raw.lower()


def parse_declare(sql: str) -> tuple[str, str]:
    """(cursor name, its query)."""
    match = _DECLARE_RE.match(sql)
    if match is None:
        raise ParseError(f"cannot read {sql[:200]!r}", hint="Write DECLARE name [NO SCROLL] CURSOR FOR SELECT …")
    if "SCROLL" in match.group(2).upper() and "NO" not in match.group(2).upper():
        raise Unsupported("scrollable cursors are not supported", hint="Declare it NO SCROLL (fetch forward only)")
    return _name(match.group(1)), match.group(3)


def parse_fetch(sql: str) -> tuple[str, int | None]:
    """(cursor name, rows to fetch; None: all)."""
    match = _FETCH_RE.match(sql)
    if match is None:
        raise Unsupported(
            f"cannot run {sql[:200]!r}", hint="Only forward fetching is supported: FETCH [FORWARD] [n | ALL] FROM name"
        )
    how = " ".join((match.group(1) or "NEXT").upper().split())
    count: int | None
    if how in ("NEXT", "FORWARD"):
        count = 1
    elif how in ("ALL", "FORWARD ALL"):
        count = None
    else:
        count = int(how.split()[-1])
    return _name(match.group(2)), count


@dataclass
class _Cursor:
    result: Result
    offset: int = 0
    size: int | None = None  # bytes of its answer (held.answer_bytes), once asked


class Cursors:
    """One connection's open cursors."""

    def __init__(self) -> None:
        self._open: dict[str, _Cursor] = {}

    def __len__(self) -> int:
        return len(self._open)

    def check_new(self, name: str) -> None:
        """Refuse a name already open (before the cursor's query runs)."""
        if name in self._open:
            raise Unsupported(f'cursor "{name}" already exists', hint=f"CLOSE {name} first")

    def declare(self, name: str, result: Result, notices: tuple[str, ...] = ()) -> Result:
        """Keep ``result`` as cursor ``name`` (already cut to 63 bytes: :func:`~veil.server.held.identifier`)."""
        self.check_new(name)
        self._open[name] = _Cursor(result)
        # told when the query runs: at DECLARE
        return Result(None, [], "DECLARE CURSOR", notices=notices + result.notices)

    def held_bytes(self) -> int:
        """Bytes the open cursors hold: their names and answers (each sized once, :func:`~veil.server.held.answer_bytes`)."""
        total = 0
        for name, cursor in self._open.items():
            if cursor.size is None:
                cursor.size = name_bytes(name) + answer_bytes(cursor.result.rows)
            total += cursor.size
        return total

    def is_open(self, name: str) -> bool:
        return name in self._open

    def described(self, name: str) -> list | None:
        """The columns of an open cursor (Describe of it as a portal)."""
        return self._open[name].result.columns

    def columns(self, sql: str) -> Result:
        """What :meth:`fetch` would return, without moving (Describe)."""
        name, _ = parse_fetch(sql)
        name, notices = identifier(name)
        cursor = self._open.get(name)
        if cursor is None:
            raise UnknownCursor(f'cursor "{name}" does not exist', hint="DECLARE it first")
        return Result(cursor.result.columns, [], "FETCH 0", notices=notices)

    def fetch(self, sql: str) -> Result:
        name, count = parse_fetch(sql)
        name, notices = identifier(name)
        cursor = self._open.get(name)
        if cursor is None:
            raise UnknownCursor(f'cursor "{name}" does not exist', hint="DECLARE it first")
        rows = cursor.result.rows
        end = len(rows) if count is None else min(len(rows), cursor.offset + count)
        chunk = rows[cursor.offset : end]
        cursor.offset = end
        verb = "MOVE" if sql.lstrip()[:4].upper() == "MOVE" else "FETCH"
        return Result(
            cursor.result.columns if verb == "FETCH" else None,
            chunk if verb == "FETCH" else [],
            f"{verb} {len(chunk)}",
            notices=notices,
        )

    def close(self, sql: str) -> Result:
        words = sql.split()
        if len(words) != 2:
            raise ParseError(f"cannot read {sql[:200]!r}", hint="Write CLOSE name or CLOSE ALL")
        if words[1].upper() == "ALL":
            self._open.clear()
            return Result(None, [], "CLOSE CURSOR ALL")
        name, notices = identifier(_name(words[1]))
        if self._open.pop(name, None) is None:
            raise UnknownCursor(f'cursor "{name}" does not exist')
        return Result(None, [], "CLOSE CURSOR", notices=notices)

    def clear(self) -> None:
        self._open.clear()
