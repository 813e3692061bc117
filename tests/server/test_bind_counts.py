"""A Bind must supply exactly the parameters its prepared statement has, as PostgreSQL requires: a statement has as
many parameters as its Parse declared types or its highest ``$n``, whichever is more, and a Bind supplying another
number is refused with 08P01 ``bind message supplies N parameters, but prepared statement "S" requires M`` — before
anything is decoded, described or run, so before any charge.

Until then a Bind short of parameters was refused only at Execute, 22023 "the query uses $1 but 0 parameter(s) were
bound" (after a BindComplete), and a Bind with too many was accepted: its extra values were dropped and the query
answered and charged. Raw protocol messages, as in ``tests/adversarial/test_redteam_s54.py``.
"""

from __future__ import annotations

import itertools
import socket
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.server import (
    PASSWORD,
    SYNC,
    build_policy,
    error_code,
    error_message,
    message,
    raw_login,
    read_message,
    running_server,
)

INT4 = 23
#: a statement using no, one or two parameters (each bound to the text '30')
USING = {
    0: "SELECT COUNT(*) FROM adult WHERE age > 31",
    1: "SELECT COUNT(*) FROM adult WHERE age > $1",
    2: "SELECT COUNT(*) FROM adult WHERE age > $1 AND hours_per_week > $2",
}
#: (parameters the SQL uses, types the Parse declares, parameters the Bind supplies)
GRID = [
    (used, declared, supplied)
    for used, declared, supplied in itertools.product((0, 1, 2), (0, 1, 2, 3), (0, 1, 2, 3, 4))
    if declared in (0, used, used + 1, 3) and supplied <= max(used, declared) + 1
]


@pytest.fixture(scope="module")
def port(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[int]:
    policy: Path = build_policy(tmp_path_factory.mktemp("bind"), request.getfixturevalue("shared_data"), rows=100)
    with running_server(policy) as st:
        yield st.port  # type: ignore[attr-defined]


def _parse(sql: str, name: str, oids: tuple[int, ...]) -> bytes:
    body = name.encode() + b"\x00" + sql.encode() + b"\x00" + struct.pack("!h", len(oids))
    return message(b"P", body + b"".join(struct.pack("!i", o) for o in oids))


def _bind(statement: str, params: tuple[bytes, ...]) -> bytes:
    body = b"\x00" + statement.encode() + b"\x00" + struct.pack("!h", 0) + struct.pack("!h", len(params))
    body += b"".join(struct.pack("!i", len(v)) + v for v in params)
    return message(b"B", body + struct.pack("!h", 0))


EXECUTE = message(b"E", b"\x00" + struct.pack("!i", 0))


def _exchange(sock: socket.socket, *messages: bytes) -> list[tuple[bytes, bytes]]:
    sock.sendall(b"".join(messages))
    out = []
    while True:
        tag, payload = read_message(sock)
        out.append((tag, payload))
        if tag == b"Z":
            return out


def _spent(sock: socket.socket) -> str:
    out = _exchange(sock, message(b"Q", b"SELECT spent FROM veil.budget\x00"))
    rows = [payload for tag, payload in out if tag == b"D"]
    assert len(rows) == 1, out
    return rows[0][6:].decode()  # one column: count (2), length (4), text


@pytest.fixture
def sock(port: int) -> Iterator[socket.socket]:
    conn, sqlstate = raw_login(port, "alice", PASSWORD)
    assert conn is not None, sqlstate
    _exchange(conn, message(b"Q", b"SET veil.epsilon = 0.05\x00"))
    yield conn
    conn.close()


@pytest.mark.parametrize(("used", "declared", "supplied"), GRID)
@pytest.mark.parametrize("name", ["", "named"])
def test_a_bind_supplies_exactly_the_parameters_the_statement_has(
    sock: socket.socket, used: int, declared: int, supplied: int, name: str
) -> None:
    required = max(used, declared)
    before = _spent(sock)
    out = _exchange(sock, _parse(USING[used], name, (INT4,) * declared), _bind(name, (b"30",) * supplied), EXECUTE, SYNC)
    tags = [tag for tag, _ in out]
    errors = [(error_code(p), error_message(p)) for tag, p in out if tag == b"E"]
    if supplied == required:
        assert errors == [] and tags == [b"1", b"2", b"D", b"C", b"Z"], (errors, tags)
        return
    assert errors == [
        ("08P01", f'bind message supplies {supplied} parameters, but prepared statement "{name}" requires {required}')
    ], errors
    assert tags == [b"1", b"E", b"Z"], tags  # refused at Bind: no BindComplete, the Execute skipped
    assert _spent(sock) == before, "a refused Bind must be free"
    if name:
        _exchange(sock, message(b"C", b"S" + name.encode() + b"\x00"), SYNC)


@pytest.mark.parametrize(
    "sql", ["SELECT 1", "SET veil.epsilon = 0.05", "SELECT spent FROM veil.budget", "BEGIN", "", "SHOW veil.epsilon"]
)
def test_a_statement_without_parameters_refuses_a_bound_value(sock: socket.socket, sql: str) -> None:
    out = _exchange(sock, _parse(sql, "", ()), _bind("", (b"1",)), EXECUTE, SYNC)
    errors = [(error_code(p), error_message(p)) for tag, p in out if tag == b"E"]
    assert errors == [("08P01", 'bind message supplies 1 parameters, but prepared statement "" requires 0')], errors
    out = _exchange(sock, _parse(sql, "", ()), _bind("", ()), EXECUTE, SYNC)
    assert [tag for tag, _ in out if tag == b"E"] == [], out
    _exchange(sock, message(b"Q", b"ROLLBACK\x00"))
