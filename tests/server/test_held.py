"""What one connection may hold between messages (red team s24 A9): named prepared statements,
named portals and cursors, bounded in number and in bytes (:mod:`veil.server.held`), refused with
53400 before anything is kept or run, so a refusal costs nothing and the connection answers on.

The rule first (hypothesis), then real clients: psycopg (``pgconn.prepare``, server-side
transactions with ``DECLARE``), asyncpg (its statement cache) and the protocol by hand (named
portals).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.server import (
    FAST_BACKOFF,
    PASSWORD,
    SYNC,
    add_public_table,
    bind_msg,
    build_policy,
    dsn,
    error_code,
    execute_msg,
    message,
    parse_msg,
    raw_exchange,
    raw_login,
    running_server,
)
from veil.server import held
from veil.server.limits import ServerLimits

LIMITED = {
    "max_prepared_statements": 4,
    "max_statement_bytes": 300_000,
    "max_portals": 3,
    "max_cursors": 2,
}

# --- the rule ----------------------------------------------------------------------------------


@dataclass
class _Sized:
    held_bytes: int


@given(
    ops=st.lists(st.tuples(st.sampled_from(["", "a", "b", "c", "d", "e"]), st.integers(0, 5_000)), max_size=40),
    count=st.integers(1, 4),
    size=st.integers(1, 12_000),
)
def test_statements_kept_never_pass_either_limit(ops: list[tuple[str, int]], count: int, size: int) -> None:
    """Whatever a client parses, the named statements kept stay within both limits (each counted with its name,
    red team s73 F1), a Parse is refused only when keeping it would pass one, and the unnamed statement always
    passes."""
    limits = ServerLimits(max_prepared_statements=count, max_statement_bytes=size)
    statements: dict[str, _Sized] = {}
    for name, n in ops:
        others = [v.held_bytes + held.name_bytes(k) for k, v in statements.items() if k and k != name]
        fits = not name or (len(others) < count and sum(others) + n + held.name_bytes(name) <= size)
        try:
            held.check_statement_count(limits, statements, name)
            held.check_statement_bytes(limits, statements, name, n)
        except held.HeldStateLimit as exc:
            assert not fits and exc.sqlstate == "53400"
        else:
            assert fits
            statements[name] = _Sized(n)
        named = [v.held_bytes + held.name_bytes(k) for k, v in statements.items() if k]
        assert len(named) <= count and sum(named) <= size


@pytest.mark.parametrize(
    "bad",
    [
        "max_prepared_statements",
        "max_statement_bytes",
        "max_portals",
        "max_cursors",
        "max_held_bytes",
        "max_analyst_held_bytes",
    ],
)
def test_held_limits_refuse_zero(bad: str) -> None:
    from veil.errors import InputError

    with pytest.raises(InputError, match=bad):
        ServerLimits(**{bad: 0})  # type: ignore[arg-type]


# --- real clients --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def policy(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Path:
    path = build_policy(tmp_path_factory.mktemp("held"), request.getfixturevalue("shared_data"), rows=300)
    add_public_table(path)
    return path


@pytest.fixture(scope="module")
def limited(policy: Path) -> Iterator[int]:
    with running_server(policy, limits=ServerLimits(**{**FAST_BACKOFF, **LIMITED})) as st:  # type: ignore[arg-type]
        yield st.port  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def default(policy: Path) -> Iterator[int]:
    with running_server(policy) as st:
        yield st.port  # type: ignore[attr-defined]


def _spent(port: int) -> float:
    with psycopg.connect(dsn(port), autocommit=True) as conn:
        return float(conn.execute("SELECT spent FROM veil.budget").fetchone()[0])


def _prepare(conn: psycopg.Connection, name: str, sql: str) -> str | None:
    """None when the server kept the statement, else its SQLSTATE."""
    res = conn.pgconn.prepare(name.encode(), sql.encode())
    if res.status == psycopg.pq.ExecStatus.COMMAND_OK:
        return None
    return (res.error_field(psycopg.pq.DiagnosticField.SQLSTATE) or b"").decode()


@pytest.mark.parametrize(("pad", "kept"), [(0, 4), (60_000, 2)])
def test_named_statements_are_bounded_in_number_and_bytes(limited: int, pad: int, kept: int) -> None:
    """Small statements stop at ``max_prepared_statements`` (4), statements of 60 kB (~120 kB held
    with their tokens) at ``max_statement_bytes`` (300 kB); the refusal is 53400 and the connection
    answers on: the unnamed statement, re-preparing a kept name, and a name freed by DEALLOCATE."""
    text = "x" * pad
    with psycopg.connect(dsn(limited), autocommit=True) as conn:
        outcomes = [_prepare(conn, f"s{i}", f"SELECT COUNT(*) FROM regions WHERE region = '{text}{i}'") for i in range(6)]
        assert outcomes == [None] * kept + ["53400"] * (6 - kept)
        assert conn.execute("SELECT population FROM regions WHERE region = %s", ("north",)).fetchone() == (120,)
        again = f"SELECT COUNT(*) FROM regions WHERE region = '{text}0'"
        assert _prepare(conn, "s0", again) is None  # replacing a kept statement is not one more
        conn.execute("DEALLOCATE s1")
        assert _prepare(conn, "again", f"SELECT COUNT(*) FROM regions WHERE region = '{text}'") is None
        assert _prepare(conn, "more", f"SELECT COUNT(*) FROM regions WHERE region = '{text}!'") == "53400"


def test_one_connection_cannot_grow_the_server_with_statements(default: int) -> None:
    """The red team's attack with the default limits: 1 MiB statements (few tokens) are refused
    once the connection holds ``max_statement_bytes`` (16 MiB, ~2 MiB each): at most 8 are kept."""
    pad = "x" * (1000 * 1024)
    with psycopg.connect(dsn(default), autocommit=True) as conn:
        kept = 0
        for i in range(20):
            outcome = _prepare(conn, f"s{i}", f"SELECT COUNT(*) FROM adult WHERE workclass = '{pad}{i}'")
            if outcome is not None:
                assert outcome == "53400"
                break
            kept += 1
        assert 1 <= kept <= 8
        assert conn.execute("SELECT 1").fetchone() == (1,)


@pytest.mark.slow
def test_asyncpg_statement_cache_fits_the_default_limits(default: int) -> None:
    """A driver that prepares every statement it runs (asyncpg, cache of 100, evicted ones closed)
    runs 150 distinct statements with the default limits."""
    asyncpg = pytest.importorskip("asyncpg")
    import asyncio

    async def run() -> list[int]:
        conn = await asyncpg.connect(host="127.0.0.1", port=default, user="alice", password=PASSWORD, database="veil", ssl=False)
        try:
            return [await conn.fetchval(f"SELECT COUNT(*) FROM regions WHERE population > {i}") for i in range(150)]
        finally:
            await conn.close()

    counts = asyncio.run(run())
    assert counts == [sum(p > i for p in (120, 340, 75)) for i in range(150)]  # a public table: exact


def _codes(replies: list[tuple[bytes, bytes]]) -> list[str]:
    return [error_code(payload) or "" if tag == b"E" else tag.decode() for tag, payload in replies]


def _query(text: str) -> bytes:
    return message(b"Q", text.encode() + b"\x00")


def test_named_portals_are_bounded_and_end_with_their_transaction(limited: int) -> None:
    """``max_portals`` (3) named portals at once: the fourth Bind gets 53400. Portals end with
    their transaction (ROLLBACK, COMMIT, or the Sync of an implicit one), which frees room."""
    sock, err = raw_login(limited, "alice", PASSWORD)
    assert sock is not None, err
    try:
        binds = [bind_msg(f"p{i}", "q") for i in range(4)]
        assert _codes(raw_exchange(sock, _query("BEGIN")))[-1] == "Z"
        replies = raw_exchange(sock, parse_msg("SELECT region FROM regions", "q"), *binds, SYNC)
        assert _codes(replies) == ["1", "2", "2", "2", "53400", "Z"]
        raw_exchange(sock, _query("ROLLBACK"))
        raw_exchange(sock, _query("BEGIN"))
        assert _codes(raw_exchange(sock, *binds[:3], SYNC)) == ["2", "2", "2", "Z"]
        raw_exchange(sock, _query("COMMIT"))
        # outside a transaction block each Sync ends the implicit transaction and its portals
        assert _codes(raw_exchange(sock, *binds[:3], SYNC)) == ["2", "2", "2", "Z"]
        replies = raw_exchange(sock, binds[3], execute_msg("p3"), SYNC)
        assert _codes(replies)[:1] == ["2"] and _codes(replies)[-2:] == ["C", "Z"]
        replies = raw_exchange(sock, execute_msg("p0"), SYNC)
        assert replies[0][0] == b"E"  # p0 ended with its implicit transaction
    finally:
        sock.close()


def test_cursors_are_bounded_and_a_refused_declare_costs_nothing(limited: int) -> None:
    """``max_cursors`` (2) open cursors: a third DECLARE (a private, charged query) gets 53400 and
    charges nothing; so does a DECLARE of a name already open (it used to run first); CLOSE frees room."""
    with psycopg.connect(dsn(limited)) as conn:
        conn.execute("SET veil.epsilon = 0.1")
        conn.commit()
        for i in range(2):
            conn.execute(f"DECLARE c{i} CURSOR FOR SELECT COUNT(*) FROM adult WHERE age > {30 + i}")
        before = _spent(limited)
        for sql, state in [
            ("DECLARE c2 CURSOR FOR SELECT COUNT(*) FROM adult WHERE age > 40", "53400"),
            ("DECLARE c0 CURSOR FOR SELECT COUNT(*) FROM adult WHERE age > 41", "0A000"),
        ]:
            with pytest.raises(psycopg.Error) as info:
                conn.execute(sql)
            assert info.value.sqlstate == state
            conn.rollback()
            assert _spent(limited) == pytest.approx(before)
            for i in range(2):
                conn.execute(f"DECLARE c{i} CURSOR FOR SELECT COUNT(*) FROM regions WHERE population > {i}")
        conn.execute("CLOSE c0")
        conn.execute("DECLARE c2 CURSOR FOR SELECT region FROM regions")
        assert conn.execute("FETCH ALL FROM c2").fetchall() == [("north",), ("south",), ("east",)]
        conn.commit()


def test_held_answers_are_bounded_before_the_next_query_runs(policy: Path) -> None:
    """Once the answers kept by cursors and named portals reach ``max_held_bytes``, a new cursor or
    named portal's query is refused before it runs (53400, nothing charged); closing frees room."""
    limits = ServerLimits(**{**FAST_BACKOFF, "max_held_bytes": 100})  # type: ignore[arg-type]
    with running_server(policy, limits=limits) as st:
        port = st.port  # type: ignore[attr-defined]
        with psycopg.connect(dsn(port)) as conn:
            conn.execute("SET veil.epsilon = 0.1")
            conn.commit()
            conn.execute("DECLARE big CURSOR FOR SELECT region, population FROM regions")  # 3 rows: > 100 bytes
            before = _spent(port)
            with pytest.raises(psycopg.Error) as info:
                conn.execute("DECLARE c CURSOR FOR SELECT COUNT(*) FROM adult WHERE age > 33")
            assert info.value.sqlstate == "53400" and "100" in str(info.value)
            conn.rollback()
            assert _spent(port) == pytest.approx(before)
            conn.execute("DECLARE c CURSOR FOR SELECT COUNT(*) FROM adult WHERE age > 33")  # nothing held now
            assert _spent(port) > before
            conn.commit()
        sock, err = raw_login(port, "alice", PASSWORD)
        assert sock is not None, err
        try:
            before = _spent(port)
            raw_exchange(sock, _query("SET veil.epsilon = 0.1"))
            raw_exchange(sock, _query("BEGIN"))
            replies = raw_exchange(
                sock,
                parse_msg("SELECT region, population FROM regions", "pub"),
                parse_msg("SELECT COUNT(*) FROM adult WHERE age > 35", "priv"),
                bind_msg("a", "pub"),
                execute_msg("a"),
                bind_msg("b", "priv"),
                execute_msg("b"),
                SYNC,
            )
            assert _codes(replies)[-2:] == ["53400", "Z"]
            assert _spent(port) == pytest.approx(before)
        finally:
            sock.close()


# --- what else a connection remembers: SET parameters, the Describe cache -----------------------


@given(keys=st.lists(st.text(max_size=40), max_size=60), entries=st.integers(1, 8), max_bytes=st.integers(1, 2_000))
def test_the_describe_cache_never_holds_more_than_its_bounds(keys: list[str], entries: int, max_bytes: int) -> None:
    """Bounded in bytes as Python holds them (red team s75 F4: in characters, astral ones held 4 bytes each)."""
    cache = held.TextCache[int](entries=entries, max_bytes=max_bytes)
    for i, key in enumerate(keys):
        first = cache.get(key)
        cache.put(key, i)
        assert len(cache) <= entries and cache.bytes <= max_bytes
        assert sum(held.TextCache.size_of(k, v) for k, v in cache._items.items()) == cache.bytes
        if first is None:
            assert cache.get(key) == (i if held.TextCache.size_of(key, i) <= max_bytes else None)


def test_set_parameters_are_bounded(limited: int) -> None:
    """Any ``SET name = value`` is remembered for SHOW; one connection keeps at most
    ``held.MAX_SETTINGS`` of them and ``held.MAX_SETTINGS_BYTES`` bytes (53400 beyond, the
    connection answers on; RESET frees room)."""
    big = "y" * (600 * 1024)
    with psycopg.connect(dsn(limited), autocommit=True) as conn:
        conn.execute(f"SET myapp.big = '{big}'")
        with pytest.raises(psycopg.Error) as info:
            conn.execute(f"SET myapp.other = '{big}'")
        assert info.value.sqlstate == "53400"
        conn.execute(f"SET myapp.big = '{big}!'")  # replacing one is not one more
        assert conn.execute("SHOW myapp.big").fetchone() == (big + "!",)
        conn.execute("RESET myapp.big")
        conn.execute(f"SET myapp.other = '{big}'")
        conn.execute("RESET ALL")
        refused = None
        for i in range(held.MAX_SETTINGS + 1):
            try:
                conn.execute(f"SET myapp.p{i} = 'v'")
            except psycopg.Error as exc:
                refused = (i, exc.sqlstate)
                break
        assert refused is not None and refused[1] == "53400"
        assert held.MAX_SETTINGS - 20 <= refused[0] <= held.MAX_SETTINGS  # (the client's own SETs count too)
        assert conn.execute("SELECT 1").fetchone() == (1,)
        conn.execute("RESET ALL")
        conn.execute("SET myapp.p0 = 'v'")


def _rss_mib() -> float:
    import os

    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


@pytest.mark.slow
def test_unread_replies_hold_the_connection_not_the_server_memory(default: int) -> None:
    """A client that pipelines 2,000 Bind/Execute of a 100 kB literal (60 kB of messages) and never
    reads: the server stops reading its messages once 1 MiB of replies wait (as PostgreSQL blocks
    on a full socket) instead of holding all 200 MB of them."""
    import time

    sock, err = raw_login(default, "alice", PASSWORD)
    assert sock is not None, err
    try:
        sock.sendall(parse_msg(f"SELECT '{'z' * 100_000}' AS v"))
        start = _rss_mib()
        sock.settimeout(2)
        try:
            sock.sendall((bind_msg() + execute_msg()) * 2_000 + SYNC)
        except TimeoutError:
            pass  # the server has stopped reading: sound
        time.sleep(2)
        grown = _rss_mib() - start
    finally:
        sock.close()
    assert grown < 60, f"2,000 unread replies of 100 kB grew the server by {grown:.0f} MiB"


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT " + ",".join(["1"] * 1999),  # one-character numbers and commas (red team s75 LOW)
        "SELECT " + "+".join(["a"] * 1999) + " FROM t",  # one-character identifiers and operators
        "SELECT " + ",".join(f"c{i}" for i in range(1999)) + " FROM t",  # short identifiers
        "SELECT '" + "x" * 100_000 + "'",  # one long literal
    ],
)
def test_a_statement_is_counted_at_least_at_what_its_route_holds(sql: str) -> None:
    """:func:`held.statement_bytes` is at least what a kept statement's route (its text and tokens) holds, measured
    with tracemalloc (before: 160 a token, 181 held for short identifiers)."""
    import gc
    import tracemalloc

    from veil.server import routing

    routing.route(sql)  # (caches warmed)
    gc.collect()
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        kept = [routing.route(sql) for _ in range(3)]
        gc.collect()
        used = (tracemalloc.get_traced_memory()[0] - start) / 3
    finally:
        tracemalloc.stop()
    assert held.statement_bytes(sql, len(kept[0].tokens)) >= used, used
