"""Frontend messages of the extended protocol, read as PostgreSQL reads them.

pg-mimic's parsers read counts as signed 16-bit numbers and ignore what follows a message's last field, so a Bind
with ``-1`` parameters read as none, a parameter length of ``-2`` moved the reader back, a Parse with ``-3`` types
declared none, a Close of subtype ``X`` closed a portal and ``SELECT 1\\0; SELECT 2\\0`` ran both (red team s54 A7).
Here, as in PostgreSQL (``pq_getmsgint``, ``pq_getmsgbytes``, ``pq_getmsgend``): counts are unsigned 16-bit (at
most 65,535), a parameter length is ``-1`` (NULL) or at least 0, a Describe or Close names ``S`` or ``P``, and a
message ends with its last field. Anything else is 08P01 (:class:`~veil.errors.ProtocolViolation`); text that is
not UTF-8 raises :class:`UnicodeDecodeError` (the caller's 22021). The name of a statement or portal keeps its first
63 bytes, as PostgreSQL keeps it (red team s73 F1: 1 MB names were kept whole).

>>> parse_bind(b"p\\x00s\\x00\\x00\\x00\\x00\\x01\\xff\\xff\\xff\\xff\\x00\\x00").params
[None]
>>> parse_bind(b"\\x00\\x00\\x00\\x00\\x00\\x01\\xff\\xff\\xff\\xfe\\x00\\x00")
Traceback (most recent call last):
...
veil.errors.ProtocolViolation: invalid length -2 of parameter $1 in a Bind message
>>> parse_query(b"SELECT 1\\x00; SELECT 2\\x00")
Traceback (most recent call last):
...
veil.errors.ProtocolViolation: invalid Query message: bytes after its terminating NUL
"""

from __future__ import annotations

import struct

from pg_mimic.messages import (
    TARGET_PORTAL,
    TARGET_STATEMENT,
    ParsedBind,
    ParsedDescribeOrClose,
    ParsedExecute,
    ParsedParse,
)

from veil.errors import ProtocolViolation
from veil.server.held import truncate_name

__all__ = ["parse_bind", "parse_close", "parse_describe", "parse_execute", "parse_parse", "parse_query"]

_U16 = struct.Struct("!H")
_I32 = struct.Struct("!i")


class _Reader:
    """A message body read field by field; every read checks that the bytes are there."""

    __slots__ = ("data", "name", "offset")

    def __init__(self, data: bytes, name: str) -> None:
        self.data, self.name, self.offset = data, name, 0

    def _need(self, n: int) -> None:
        if n < 0 or self.offset + n > len(self.data):
            raise ProtocolViolation(f"insufficient data left in a {self.name} message")

    def cstring(self) -> str:
        end = self.data.find(b"\x00", self.offset)
        if end < 0:
            raise ProtocolViolation(f"invalid string in a {self.name} message")
        text = self.data[self.offset : end].decode("utf-8")
        self.offset = end + 1
        return text

    def kept_name(self) -> str:
        """A prepared statement's or portal's name, cut to 63 bytes as PostgreSQL's hash tables keep it
        (:func:`~veil.server.held.truncate_name`; red team s73 F1), so every message naming it finds the same one."""
        return truncate_name(self.cstring())

    def byte(self) -> int:
        self._need(1)
        value = self.data[self.offset]
        self.offset += 1
        return value

    def count(self) -> int:
        self._need(2)
        (value,) = _U16.unpack_from(self.data, self.offset)
        self.offset += 2
        return int(value)

    def int32(self) -> int:
        self._need(4)
        (value,) = _I32.unpack_from(self.data, self.offset)
        self.offset += 4
        return int(value)

    def array(self, fmt: str, size: int, n: int) -> list[int]:
        self._need(size * n)
        values = struct.unpack_from(f"!{n}{fmt}", self.data, self.offset)
        self.offset += size * n
        return list(values)

    def take(self, n: int) -> bytes:
        self._need(n)
        value = self.data[self.offset : self.offset + n]
        self.offset += n
        return value

    def end(self) -> None:
        if self.offset != len(self.data):
            raise ProtocolViolation(f"invalid {self.name} message: {len(self.data) - self.offset} bytes after its end")


def parse_query(payload: bytes) -> str:
    """A simple Query: one NUL-terminated string and nothing after it."""
    end = payload.find(b"\x00")
    if end < 0:
        raise ProtocolViolation("invalid Query message: no terminating NUL")
    if end != len(payload) - 1:
        raise ProtocolViolation("invalid Query message: bytes after its terminating NUL")
    return payload[:end].decode("utf-8")


def parse_parse(payload: bytes) -> ParsedParse:
    r = _Reader(payload, "Parse")
    name, sql = r.kept_name(), r.cstring()
    oids = r.array("i", 4, r.count())
    r.end()
    return ParsedParse(name, sql, oids)


def parse_bind(payload: bytes) -> ParsedBind:
    r = _Reader(payload, "Bind")
    portal, statement = r.kept_name(), r.kept_name()
    formats = r.array("h", 2, r.count())
    params: list[bytes | None] = []
    for i in range(r.count()):
        length = r.int32()
        if length == -1:
            params.append(None)
        elif length < 0:
            raise ProtocolViolation(f"invalid length {length} of parameter ${i + 1} in a Bind message")
        else:
            params.append(r.take(length))
    results = r.array("h", 2, r.count())
    r.end()
    return ParsedBind(portal, statement, formats, params, results)


def _target(payload: bytes, name: str) -> ParsedDescribeOrClose:
    r = _Reader(payload, name)
    kind = r.byte()
    if kind not in (TARGET_STATEMENT, TARGET_PORTAL):
        raise ProtocolViolation(f"invalid {name.upper()} message subtype {kind}")
    target = r.kept_name()
    r.end()
    return ParsedDescribeOrClose(kind, target)


def parse_describe(payload: bytes) -> ParsedDescribeOrClose:
    return _target(payload, "Describe")


def parse_close(payload: bytes) -> ParsedDescribeOrClose:
    return _target(payload, "Close")


def parse_execute(payload: bytes) -> ParsedExecute:
    r = _Reader(payload, "Execute")
    portal = r.kept_name()
    max_rows = r.int32()
    r.end()
    return ParsedExecute(portal, max_rows)
