"""Red team s73: ``veil serve`` attacked over the wire, as an outsider and as an analyst (raw protocol messages).

Each finding has a test that fails on the code it was found on (strict xfail) and passes once its class is fixed.
One ``veil serve`` subprocess per module, on the red team's world (``tests/support/attack_world.py``); its memory is
read from ``/proc/<pid>/status`` (Linux only).

F1 (HIGH, denial of service by one analyst). The *names* a connection keeps are neither counted by the held-state
limits (``veil/server/held.py``: ``max_statement_bytes``, ``max_held_bytes``) nor cut to a length: a named
``Parse``'s statement name, a named ``Bind``'s portal name, a ``DECLARE``'s cursor name and a ``SAVEPOINT``'s name
are stored whole, up to ``max_message_bytes`` (4 MiB) / ``max_query_bytes`` (1 MiB) each. Measured on the shared
2-core host, one connection each, the server's RSS before → after: 200 statements ``Parse('<1 MB name>', 'SELECT 1')``
334 → 522 MiB in 3.8 s, never refused (the statement budget counts only the texts, 16 bytes); 100 named portals of
``SELECT 1`` with 1 MB names 332 → 427 MiB; 100 cursors ``DECLARE "<1 MB>" CURSOR FOR SELECT 1`` 332 → 429 MiB;
100 ``SAVEPOINT "<1 MB>"`` 321 → 427 MiB in 1 s (savepoints are not counted at all, only their number). Freed when
the connection closes. Scaled up: 1,000 statements (``max_prepared_statements``) × 4 MiB names is ~4 GB from one
connection, and one analyst may hold half of ``--max-connections`` (50) of them: the server is OOM-killed for every
analyst, against docs/server.md's "a connection holds at most [max_held_bytes] plus one answer". PostgreSQL
truncates identifiers (cursor and savepoint names) to 63 bytes. Root cause: ``held.check_statement_bytes`` /
``check_portal`` / ``check_cursor`` are given the text / parameters / answer, never the name;
``VeilSession._savepoint`` appends the name after only ``check_savepoints`` (a count). Fix (class): count every
name a connection keeps (statement, portal, cursor, savepoint, and any future one) into the held bytes, and/or cap
names at PostgreSQL's 63 bytes (truncate identifiers like PostgreSQL; refuse longer protocol names with 08P01 or
42622) before anything is stored.

F2 (LOW, metadata of other analysts). A VB001 refusal quotes the exact remaining ε of a table cap, which every
analyst (and the curator's publications) spends together (``Ledger`` reservation message, ``veil/store/ledger.py``
``"... has ε = X remaining of T (short by ...)"``). A refused query is free, so one analyst polls ``SET
veil.epsilon = 1e300; SELECT COUNT(*) FROM people`` at no cost and reads, to the digit, when any other analyst
queries the table and with what ε (measured: the figure fell by exactly 0.0173 when ``wire`` ran one query at
ε = 0.0173; whether it was a free cache hit shows too), beyond docs/server.md's ``veil.budget`` (one row: one's own).
Fix (class): refusals name only the asking analyst's own figures; for a shared account (table cap, population
cap) say that it does not allow the query, without its remaining amount — or round it to a coarse public grid.

F3 (HIGH, denial of service by one analyst). ``held.answer_bytes`` counts a held answer's text cells by their
length and other cells as 8 bytes, but a cursor's or named portal's answer is held as Python tuples of Python
objects: a 5-character ``str`` is ~54 bytes plus its 8-byte slot, a float 24 + 8, each row's tuple 56 + 8 per
column. So ``max_held_bytes`` (64 MiB) lets one connection hold ~10× that: measured on the shared host, one
connection ``BEGIN`` + ``DECLARE cN CURSOR FOR SELECT r1.rname AS c0, … (60 columns) FROM regions r1, …, regions r7``
(16,384 rows × 60 short texts of a public table, under the 1,000,000-value public answer cap): the 13th cursor was
refused with 53400 at 71,368,704 counted bytes, while the server's RSS had grown 452 → 1,152 MiB (+700 MiB; freed
at COMMIT). With 50 connections per analyst that is ~35 GB from one analyst, free (public data costs no ε). Root
cause: ``veil/server/held.py`` ``answer_bytes`` (and ``_CELL``/``_ROW``) under-count what ``Cursors``/
``VeilPortal`` keep. Fix (class): hold answers in the form that is counted (e.g. the encoded DataRow bytes, which
is what FETCH/Execute send anyway), or count with the real object sizes (``sys.getsizeof`` per distinct object);
and add a per-analyst (or server-wide) budget of held bytes so the connection cap does not multiply it.

F4 (MEDIUM, an outsider fills the server's disk). A login that ends before a SCRAM proof is sent "made no guess and
counts nothing" for the login backoff, and is logged at INFO with the whole user name the client claimed
(``VeilConnection._login``: ``"login for user %r from %s ended before a password was sent"``), which the startup
packet may make ~10,000 bytes long. A client with no login sends a startup packet with a 9,900-character user, then
a ``SASLInitialResponse`` naming any mechanism but SCRAM-SHA-256 (or a malformed client-first): the server writes a
~10 kB line, answers 28P01 and the next attempt is admitted at once. Measured from one client thread on loopback:
967 attempts in 3 s, the serve log grew by 9.7 MB (~3 MB/s, ~280 GB a day; several threads or processes multiply
it), never slowed down. The FATAL sent back quotes the whole name too. Fix (class): every client-supplied string in
a log line (user, database, application_name, options, statement and cursor names) is cut to a short prefix
(PostgreSQL's 63 bytes for names) and escaped; and attempts that end without a proof after the mechanism step are
throttled per address like a failure (or their log lines rate-limited per address).
"""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.attack import PASSWORD, Server, set_password
from tests.support.attack_world import World

MIB = 1 << 20


# --- a raw protocol client (the attacks need messages drivers do not send) ------------------------------------------


def _msg(tag: bytes, body: bytes) -> bytes:
    return tag + struct.pack("!i", len(body) + 4) + body


def _cstr(s: str) -> bytes:
    return s.encode() + b"\0"


def query_msg(sql: str) -> bytes:
    return _msg(b"Q", _cstr(sql))


def parse_msg(name: str, sql: str) -> bytes:
    return _msg(b"P", _cstr(name) + _cstr(sql) + struct.pack("!h", 0))


def bind_msg(portal: str, statement: str) -> bytes:
    return _msg(b"B", _cstr(portal) + _cstr(statement) + struct.pack("!hhh", 0, 0, 0))


SYNC = _msg(b"S", b"")
TERMINATE = _msg(b"X", b"")


class Raw:
    """One logged-in connection speaking the protocol by hand (SCRAM-SHA-256 through scramp)."""

    def __init__(self, port: int, user: str = "wire", password: str = PASSWORD) -> None:
        from scramp import ScramClient

        self.sock = socket.create_connection(("127.0.0.1", port), timeout=60)
        self.buf = b""
        body = struct.pack("!i", 196608) + _cstr("user") + _cstr(user) + _cstr("database") + _cstr("veil") + b"\0"
        self.sock.sendall(struct.pack("!i", len(body) + 4) + body)
        tag, _ = self.read()
        assert tag == b"R"
        client = ScramClient(["SCRAM-SHA-256"], user, password)
        first = client.get_client_first().encode()
        self.sock.sendall(_msg(b"p", _cstr("SCRAM-SHA-256") + struct.pack("!i", len(first)) + first))
        tag, payload = self.read()
        client.set_server_first(payload[4:].decode())
        self.sock.sendall(_msg(b"p", client.get_client_final().encode()))
        replies = self.until_ready()
        assert not [b for t, b in replies if t == b"E"], replies

    def _recv(self, n: int) -> bytes:
        while len(self.buf) < n:
            data = self.sock.recv(1 << 16)
            if not data:
                raise EOFError("the server closed the connection")
            self.buf += data
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read(self) -> tuple[bytes, bytes]:
        head = self._recv(5)
        return head[:1], self._recv(struct.unpack("!i", head[1:])[0] - 4)

    def until_ready(self) -> list[tuple[bytes, bytes]]:
        out = []
        while True:
            tag, payload = self.read()
            out.append((tag, payload))
            if tag == b"Z":
                return out

    def round(self, *messages: bytes) -> str | None:
        """Send ``messages`` (ending in Sync or a Query) and read to ReadyForQuery: the first error's SQLSTATE."""
        self.sock.sendall(b"".join(messages))
        for tag, payload in self.until_ready():
            if tag == b"E":
                fields = {f[:1]: f[1:] for f in payload.split(b"\0") if f}
                return fields[b"C"].decode()
        return None

    def close(self) -> None:
        try:
            self.sock.sendall(TERMINATE)
        finally:
            self.sock.close()


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


@pytest.fixture(scope="module")
def server(world: World) -> Iterator[Server]:
    for who in ("wire", "poor"):
        set_password(world.policy, who)
    srv = Server(world.policy, world.folder / "serve.log")
    yield srv
    srv.stop()


# --- F1: names a connection keeps -----------------------------------------------------------------------------------

_NAMES = 80  # names of 1 MiB each: 80 MiB if kept whole
_NAME_LEN = MIB - 64


def _hold_named(conn: Raw, kind: str, i: int) -> str | None:
    name = f"{i:03d}" + "n" * _NAME_LEN
    if kind == "statement":
        return conn.round(parse_msg(name, "SELECT 1"), SYNC)
    if kind == "portal":
        return conn.round(bind_msg(name, "st"), SYNC)
    if kind == "cursor":
        return conn.round(query_msg(f'DECLARE "{name}" CURSOR FOR SELECT 1'))
    return conn.round(query_msg(f'SAVEPOINT "{name}"'))


@pytest.mark.parametrize("kind", ["statement", "portal", "cursor", "savepoint"])
def test_names_a_connection_keeps_are_bounded(server: Server, kind: str) -> None:
    """80 statements / portals / cursors / savepoints named with 1 MiB each on one connection: refused before the
    connection holds them all, or kept in far less than their 80 MiB (a fixed server grows by ~0; before: +80 MiB)."""
    conn = Raw(server.port)
    try:
        if kind != "statement":
            assert conn.round(query_msg("BEGIN")) is None
        if kind == "portal":
            assert conn.round(parse_msg("st", "SELECT 1"), SYNC) is None
        before = rss_mib(server.proc.pid)
        refused: str | None = None
        for i in range(_NAMES):
            refused = _hold_named(conn, kind, i)
            if refused is not None:
                break
        grown = rss_mib(server.proc.pid) - before
    finally:
        conn.close()
    assert refused is not None or grown < 24, f"{_NAMES} {kind} names of 1 MiB kept: the server grew by {grown:.0f} MiB"
    if refused is not None:
        assert refused in ("53400", "54000", "08P01", "42622"), refused


# --- F2: a refusal tells one analyst what the others spend ----------------------------------------------------------


def _refusal(conn: Raw, sql: str) -> str:
    """The message of the VB001 refusal of ``sql`` at an ε no budget holds (free: a refused query costs nothing)."""
    conn.sock.sendall(query_msg("SET veil.epsilon = 1e300") + query_msg(sql))
    messages = [b for t, b in conn.until_ready() + conn.until_ready() if t == b"E"]
    assert len(messages) == 1, messages
    fields = {f[:1]: f[1:].decode() for f in messages[0].split(b"\0") if f}
    assert fields[b"C"] == "VB001", fields
    return fields[b"M"]


def test_refusal_does_not_reveal_other_analysts_spending(server: Server) -> None:
    """`poor` asks for ε = 1e300 (refused, free) before and after `wire` runs one query at ε = 0.0173: the two
    refusals must read the same (before: the table cap's remaining ε in the message fell by exactly 0.0173)."""
    spy, other = Raw(server.port, "poor"), Raw(server.port, "wire")
    try:
        sql = "SELECT COUNT(*) FROM people"
        before = _refusal(spy, sql)
        assert other.round(query_msg("SET veil.epsilon = 0.0173")) is None
        assert other.round(query_msg("SELECT COUNT(*) FROM people WHERE age > 33")) is None
        after = _refusal(spy, sql)
    finally:
        spy.close()
        other.close()
    assert before == after, f"one analyst reads another's spending:\n  {before}\n  {after}"


# --- F3: held answers counted at a fraction of their memory ---------------------------------------------------------

_LAUNCH = """
import sys, time
from veil.policy import load_policy
from veil.server.app import ServerThread, VeilServer
from veil.server.limits import ServerLimits
st = ServerThread(VeilServer(load_policy(sys.argv[1]), limits=ServerLimits(max_held_bytes=4 << 20)), port=0)
print(st.start(), flush=True)
sys.stdin.read()
"""


@pytest.fixture(scope="module")
def small_held(world: World, server: Server) -> Iterator[tuple[int, int]]:
    """A second server on the same world whose connections may hold 4 MiB of answers: (port, pid)."""
    with (world.folder / "small_held.log").open("w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-c", _LAUNCH, str(world.policy)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )
        assert proc.stdout is not None and proc.stdin is not None
        try:
            port = int(proc.stdout.readline())
            yield port, proc.pid
        finally:
            proc.stdin.close()
            proc.stdout.close()
            proc.terminate()
            proc.wait(10)


def test_held_answers_are_counted_as_held(small_held: tuple[int, int]) -> None:
    """With ``max_held_bytes`` = 4 MiB, one connection declares cursors of a 1,024-row × 60-column public answer
    until refused: the server may grow by at most the limit plus one answer (before: ~11 × 372 kB counted, +40 MiB
    of RSS against a bound of 16 MiB)."""
    port, pid = small_held
    sel = ", ".join(f"r{1 + i % 5}.rname AS c{i}" for i in range(60))
    sql = f"SELECT {sel} FROM regions r1, regions r2, regions r3, regions r4, regions r5"
    conn = Raw(port)
    try:
        assert conn.round(query_msg("BEGIN")) is None
        assert conn.round(query_msg(f"DECLARE warm CURSOR FOR {sql}")) is None  # caches, plans: not the answers
        assert conn.round(query_msg("CLOSE warm")) is None
        time.sleep(0.2)
        before = rss_mib(pid)
        refused = None
        for i in range(40):
            refused = conn.round(query_msg(f"DECLARE c{i} CURSOR FOR {sql}"))
            if refused is not None:
                break
        grown = rss_mib(pid) - before
        assert conn.round(query_msg("ROLLBACK")) is None
    finally:
        conn.close()
    assert refused == "53400", refused
    one_answer = 1024 * (56 + 60 * 62) / MIB  # a tuple of 60 five-character str objects per row, as Python holds it
    assert grown <= 4 + one_answer + 8, f"held {i} cursors counted within 4 MiB: the server grew by {grown:.0f} MiB"


# --- F4: an outsider's log lines ------------------------------------------------------------------------------------


def _abandoned_login(port: int, user: str) -> bytes:
    """Startup as ``user``, then a SASLInitialResponse naming a mechanism the server does not offer: the reply."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        body = struct.pack("!i", 196608) + _cstr("user") + _cstr(user) + b"\0"
        sock.sendall(struct.pack("!i", len(body) + 4) + body)
        first = sock.recv(1 << 16)
        assert first[:1] == b"R", first[:40]
        sock.sendall(_msg(b"p", _cstr("NOT-SCRAM") + struct.pack("!i", 1) + b"x"))
        reply = b""
        while chunk := sock.recv(1 << 16):
            reply += chunk
        return reply


def test_outsider_cannot_grow_the_log_at_will(world: World, server: Server) -> None:
    """200 logins with a 9,900-character user name that end before a proof: the serve log may grow by at most
    ~200 bytes a line (before: ~10 kB a line, 2 MB in all, in about a second)."""
    log = world.folder / "serve.log"
    before = log.stat().st_size
    for i in range(200):
        reply = _abandoned_login(server.port, f"{i:03d}" + "u" * 9_900)
        assert b"28P01" in reply, reply[:200]
    time.sleep(0.5)  # the server writes its log line as it closes the connection
    grown = log.stat().st_size - before
    assert grown <= 200 * 200, f"200 abandoned logins grew the serve log by {grown:,} bytes"
