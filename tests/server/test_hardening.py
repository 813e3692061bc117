"""``veil serve`` as an attacker meets it, on loopback and bounded in time: limits before login
(startup packet size, authentication timeout, connection slots, brute force, SCRAM salts),
oversized and deeply nested statements, statement timeouts, and one client's pathological catalog
query while another client's latency is measured."""

from __future__ import annotations

import logging
import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.support.server import (
    FAST_BACKOFF,
    PASSWORD,
    SYNC,
    build_policy,
    dsn,
    error_code,
    error_message,
    message,
    raw_exchange,
    raw_login,
    read_message,
    running_server,
    scram_salt,
    startup_packet,
)
from veil.errors import QueryCancelled
from veil.proxy.session import QuerySession
from veil.server.limits import MAX_STARTUP_PACKET, ServerLimits


@pytest.fixture(scope="module")
def policy(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Path:
    return build_policy(tmp_path_factory.mktemp("hardening"), request.getfixturevalue("shared_data"), rows=300)


def _limits(**kwargs: object) -> ServerLimits:
    return ServerLimits(**{**FAST_BACKOFF, **kwargs})  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def served(policy: Path) -> Iterator[int]:
    with running_server(policy, limits=_limits(catalog_timeout=1.5)) as st:
        yield st.port  # type: ignore[attr-defined]


def _closed(sock: socket.socket, within: float) -> tuple[bool, list[tuple[bytes, bytes]]]:
    """Whether the server closed ``sock`` within ``within`` seconds, and what it sent before."""
    sock.settimeout(within)
    got = []
    try:
        while True:
            got.append(read_message(sock))
    except ConnectionError:
        return True, got
    except TimeoutError:
        return False, got


# --- before login -------------------------------------------------------------------------------


@pytest.mark.parametrize("length", [MAX_STARTUP_PACKET + 1, 300_000_000, 2**31 - 1, 7, -5])
def test_bad_startup_packet_length_is_refused_before_its_body(served: int, length: int) -> None:
    with socket.create_connection(("127.0.0.1", served), timeout=5) as sock:
        sock.sendall(struct.pack("!ii", length, 196608))  # the header only: the body never comes
        t0 = time.monotonic()
        closed, got = _closed(sock, 5)
    assert closed and time.monotonic() - t0 < 4
    assert [(tag, error_code(payload)) for tag, payload in got] == [(b"E", "08P01")]


def test_startup_packet_at_the_limit_is_read(served: int) -> None:
    base = len(startup_packet("alice"))
    packet = startup_packet("alice", application_name="x" * (MAX_STARTUP_PACKET - base - len("application_name") - 2))
    assert len(packet) == MAX_STARTUP_PACKET
    with socket.create_connection(("127.0.0.1", served), timeout=5) as sock:
        sock.sendall(packet)
        tag, payload = read_message(sock)
    assert tag == b"R" and struct.unpack("!i", payload[:4])[0] == 10  # AuthenticationSASL: carry on


@pytest.mark.parametrize("send_startup", [False, True])
def test_idle_unauthenticated_sockets_are_closed(policy: Path, send_startup: bool) -> None:
    with running_server(policy, limits=_limits(auth_timeout=0.5)) as st:
        with socket.create_connection(("127.0.0.1", st.port), timeout=5) as sock:  # type: ignore[attr-defined]
            if send_startup:
                sock.sendall(startup_packet("alice"))  # then never answer the SCRAM challenge
            t0 = time.monotonic()
            closed, got = _closed(sock, 5)
    assert closed and time.monotonic() - t0 < 3
    assert (b"E", "08P01") in [(tag, error_code(payload)) for tag, payload in got]


def test_connection_limit_answers_53300_and_frees_slots(policy: Path) -> None:
    with running_server(policy, limits=_limits(max_connections=3, auth_timeout=30)) as st:
        port = st.port  # type: ignore[attr-defined]
        idle = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(3)]
        try:
            time.sleep(0.2)
            with pytest.raises(psycopg.OperationalError, match="too many clients"):
                psycopg.connect(dsn(port))
        finally:
            for sock in idle:
                sock.close()
        deadline = time.monotonic() + 5
        while True:  # the slots come back as the server notices the closed sockets
            try:
                with psycopg.connect(dsn(port), autocommit=True) as conn:
                    assert conn.execute("SELECT 1").fetchone() == (1,)
                break
            except psycopg.OperationalError:
                assert time.monotonic() < deadline
                time.sleep(0.1)


def test_connection_limit_per_analyst(policy: Path) -> None:
    from tests.support.server import BOB_PASSWORD

    with running_server(policy, limits=_limits(max_connections_per_analyst=2)) as st:
        port = st.port  # type: ignore[attr-defined]
        with psycopg.connect(dsn(port)), psycopg.connect(dsn(port)):
            with pytest.raises(psycopg.OperationalError, match="too many connections for analyst 'alice'"):
                psycopg.connect(dsn(port))
            with psycopg.connect(dsn(port, user="bob", password=BOB_PASSWORD)):
                pass
        with psycopg.connect(dsn(port)):  # a closed connection gives its slot back
            pass


@pytest.mark.slow
def test_brute_force_is_slowed_per_address_and_logged(policy: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="veil.server")
    with running_server(policy, limits=ServerLimits(login_backoff_base=0.2, login_backoff_max=5)) as st:
        port = st.port  # type: ignore[attr-defined]
        took = []
        for i in range(6):
            t0 = time.monotonic()
            sock, sqlstate = raw_login(port, "alice", f"guess-{i}")
            took.append(time.monotonic() - t0)
            assert sock is None and sqlstate == "28P01"
        # waits before attempts 3..6: 0.2, 0.4, 0.8, 1.6 s
        assert took[5] >= 1.5 and sum(took) >= 2.9, took
        t0 = time.monotonic()
        sock, sqlstate = raw_login(port, "alice", "guess-elsewhere", source="127.0.0.2")
        assert sqlstate == "28P01" and time.monotonic() - t0 < 1.0  # another address is not slowed
        sock, sqlstate = raw_login(port, "alice", PASSWORD, timeout=15)  # the right password still gets in
        assert sock is not None and sqlstate is None
        sock.close()
        t0 = time.monotonic()
        sock, sqlstate = raw_login(port, "alice", "guess-after-success")
        assert time.monotonic() - t0 < 1.0  # a success cleared the address's record
    failed = [r.getMessage() for r in caplog.records if "failed login" in r.getMessage()]
    assert len(failed) >= 7
    assert "failed login for user 'alice' from 127.0.0.1" in failed[0]
    assert any("from 127.0.0.2" in m for m in failed)


def test_unknown_user_salt_is_stable_across_restarts(policy: Path) -> None:
    salts = []
    for _ in range(2):
        with running_server(policy) as st:
            port = st.port  # type: ignore[attr-defined]
            salts.append((scram_salt(port, "mallory"), scram_salt(port, "alice"), scram_salt(port, "mallory")))
    (m1, a1, m1b), (m2, a2, _) = salts
    assert m1 == m1b == m2  # the same for an invented name, before and after a restart
    assert a1 == a2  # as for a real analyst
    assert m1 != a1


# --- after login: statements that ask for too much -----------------------------------------------


def _sqlstate(conn: psycopg.Connection, sql: str) -> str | None:
    try:
        conn.execute(sql).fetchall()
    except psycopg.Error as exc:
        return exc.sqlstate
    return None


def test_oversized_and_deeply_nested_statements(served: int, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    with psycopg.connect(dsn(served), autocommit=True) as conn:
        cases = {
            "SELECT COUNT(*) FROM adult WHERE sex = '" + "x" * (1 << 20) + "'": "54000",  # over 1 MiB
            "SELECT COUNT(*) FROM adult WHERE " + "(" * 600 + "age > 1" + ")" * 600: "54001",
            "SELECT COUNT(*) FROM adult WHERE " + " OR ".join(f"age = {i}" for i in range(8000)): "54001",
            "SELECT SUM(age" + " + 1" * 3000 + ") FROM adult": "54001",
            "SELECT 1 FROM pg_class WHERE " + "(" * 600 + "true" + ")" * 600: "54001",
        }
        for sql, expected in cases.items():
            t0 = time.monotonic()
            assert _sqlstate(conn, sql) == expected, sql[:80]
            assert time.monotonic() - t0 < 5, sql[:80]
        assert conn.execute("SELECT 1").fetchone() == (1,)
    assert not [r for r in caplog.records if r.exc_info]  # one line each, never a traceback
    assert sum("5400" in r.getMessage() for r in caplog.records) >= len(cases)


def test_deep_expressions_under_the_bracket_limit_are_54001_not_xx000(served: int) -> None:
    with psycopg.connect(dsn(served), autocommit=True) as conn:
        for n in (200, 900, 1500):  # left-deep chains parse into deep trees without brackets
            assert _sqlstate(conn, "SELECT SUM(age" + " + age" * n + ") FROM adult") in (None, "54001", "0A000")


def test_sqlstates_of_bad_statements(served: int) -> None:
    with psycopg.connect(dsn(served), autocommit=True) as conn:
        assert _sqlstate(conn, "SELEC 1") == "42601"
        assert _sqlstate(conn, "SET statement_timeout = 'soon'") == "22023"
        assert _sqlstate(conn, "FETCH 1 FROM nowhere") == "34000"


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        ((message(b"Q", b"SELECT '\xff\xfe'\x00"),), "22021"),
        ((message(b"P", b"\x00SELECT 1\x00\x00\x01"), SYNC), "08P01"),  # truncated parameter count
        ((message(b"B", b"\x00"), SYNC), "08P01"),
        ((message(b"D", b""), SYNC), "08P01"),
        ((message(b"z", b"junk"), SYNC), "08P01"),
        ((message(b"Q", b"SELECT 1"),), "08P01"),  # not NUL-terminated
    ],
)
def test_malformed_messages_get_08p01_without_python_text(served: int, messages: tuple[bytes, ...], expected: str) -> None:
    sock, _ = raw_login(served, "alice", PASSWORD)
    assert sock is not None
    with sock:
        replies = raw_exchange(sock, *messages)
        errors = [(error_code(p), error_message(p)) for tag, p in replies if tag == b"E"]
        assert errors and errors[0][0] == expected, replies
        assert not any(word in errors[0][1] for word in ("unpack", "struct", "index out of range", "Traceback", "codec"))
        # the connection is still usable
        replies = raw_exchange(sock, message(b"Q", b"SELECT 1\x00"))
        assert any(tag == b"D" for tag, _ in replies)


# --- time limits -----------------------------------------------------------------------------------


class _SlowSession(QuerySession):
    """The real query session with a slow, interruptible engine run for SUM(hours_per_week)
    (``cancel()`` interrupts it, as it interrupts DuckDB)."""

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self._interrupted = threading.Event()

    def cancel(self) -> None:
        self._interrupted.set()
        super().cancel()

    def execute(self, sql, *, epsilon=None):  # type: ignore[no-untyped-def]
        self._interrupted.clear()
        if "hours_per_week" in sql and self._interrupted.wait(1.5):
            raise QueryCancelled("the statement was cancelled")
        return super().execute(sql, epsilon=epsilon)


@pytest.mark.parametrize("where", ["server", "session"])
def test_statement_timeout_cancels_with_57014(policy: Path, where: str) -> None:
    limits = _limits(statement_timeout=0.3 if where == "server" else 0)
    with running_server(policy, limits=limits, query_session_factory=_SlowSession) as st:
        with psycopg.connect(dsn(st.port), autocommit=True) as conn:  # type: ignore[attr-defined]
            if where == "session":
                conn.execute("SET statement_timeout = 300")  # milliseconds, as in PostgreSQL
            t0 = time.monotonic()
            assert _sqlstate(conn, "SELECT SUM(hours_per_week) FROM adult") == "57014"
            assert time.monotonic() - t0 < 1.2
            assert conn.execute("SELECT COUNT(*) FROM adult").fetchone()[0] > 0  # still usable
            if where == "session":
                conn.execute("SET statement_timeout = 0")
                assert conn.execute("SELECT SUM(hours_per_week) FROM adult").fetchone()[0] is not None


@pytest.mark.slow
def test_pathological_catalog_query_does_not_delay_others(served: int) -> None:
    outcome: dict[str, object] = {}

    def pathological() -> None:
        with psycopg.connect(dsn(served), autocommit=True) as conn:
            t0 = time.monotonic()
            outcome["sqlstate"] = _sqlstate(conn, "SELECT COUNT(*) FROM pg_catalog.pg_type a, pg_type b, pg_type c, pg_type d")
            outcome["seconds"] = time.monotonic() - t0

    with psycopg.connect(dsn(served), autocommit=True) as cheap:
        cheap.execute("SELECT COUNT(*) FROM adult WHERE age > 30").fetchone()  # answered once, then cached
        thread = threading.Thread(target=pathological)
        thread.start()
        time.sleep(0.2)
        latencies = []
        while thread.is_alive():
            t0 = time.monotonic()
            cheap.execute("SELECT COUNT(*) FROM adult WHERE age > 30").fetchone()
            cheap.execute("SELECT relname FROM pg_class").fetchall()
            latencies.append(time.monotonic() - t0)
        thread.join()
    assert outcome["sqlstate"] == "57014" and outcome["seconds"] < 4, outcome  # stopped at --catalog-timeout
    assert latencies and max(latencies) < 1.0, latencies  # shared 2-core machine: generous bound
