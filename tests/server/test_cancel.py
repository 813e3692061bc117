"""Stopping work (red team s20, A9): without a statement timeout (the default), a cancel request
still stops a public query, and work on public data stops at ``public_query_timeout`` whatever the
statement timeout; a charged private query is never cut by either (whether it finishes in time may
depend on one person's data), so it is released and re-asking it costs nothing.

Real clients (psycopg's cancel, asyncpg's timeout, both send a CancelRequest on a new connection)
against a real server; the public table is a 300-row table declared ``public = true``, so a 5-way
cross join of it runs for hours unless stopped.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner

from tests.support.server import FAST_BACKOFF, PASSWORD, SERVER_POLICY, dsn, running_server
from veil.engines.base import EngineError, Result
from veil.engines.duckdb import DuckDBEngine
from veil.policy import Policy
from veil.proxy.session import QuerySession
from veil.server.limits import ServerLimits

HEAVY_PUBLIC = "SELECT COUNT(*) FROM regions a, regions b, regions c, regions d, regions e"


@pytest.fixture(scope="module")
def policy(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Path:
    from tests.support.server import build_policy
    from veil.cli.main import cli

    path = build_policy(tmp_path_factory.mktemp("cancel"), request.getfixturevalue("shared_data"), rows=300)
    text = path.read_text(encoding="utf-8")
    assert text.startswith(SERVER_POLICY[:20])
    path.write_text(text + "\n[tables.regions]\npublic = true\n", encoding="utf-8")
    csv = path.parent / "regions.csv"
    csv.write_text("id,name\n" + "".join(f"{i},region {i}\n" for i in range(300)), encoding="utf-8")
    result = CliRunner().invoke(cli, ["ingest", "--policy", str(path), "--table", "regions", str(csv)])
    assert result.exit_code == 0, result.output
    return path


def _limits(**kwargs: object) -> ServerLimits:
    return ServerLimits(**{**FAST_BACKOFF, **kwargs})  # type: ignore[arg-type]


def _spent(policy: Path, analyst: str = "alice") -> Fraction:
    from veil.policy import load_policy
    from veil.store.ledger import Ledger

    with Ledger.for_policy(load_policy(policy)) as led:
        return Fraction(led.spent(f"analyst:{analyst}").epsilon)


# --- a public query stops on a cancel request -----------------------------------------------------


def _psycopg_cancel(port: int, sql: str, params: tuple[object, ...] | None) -> tuple[float, str]:
    """Run ``sql``, cancel it after 0.7 s; (seconds from the cancel to the end, how it ended)."""
    with psycopg.connect(dsn(port), autocommit=True) as conn:
        ended: dict[str, object] = {}

        def run() -> None:
            try:
                conn.execute(sql, params).fetchall()
                ended["how"] = "answered"
            except psycopg.Error as exc:
                ended["how"] = str(exc.sqlstate)
            ended["at"] = time.monotonic()

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        time.sleep(0.7)
        cancelled = time.monotonic()
        conn.cancel_safe()
        thread.join(10)
        assert "at" in ended, "the public query was still running 10 s after the cancel"
        assert conn.execute("SELECT COUNT(*) FROM regions").fetchone() == (300,)  # still usable
    return float(ended["at"]) - cancelled, str(ended["how"])  # type: ignore[arg-type]


def _asyncpg_timeout(port: int, sql: str, params: tuple[object, ...] | None) -> tuple[float, str]:
    asyncpg = pytest.importorskip("asyncpg")

    async def scenario() -> tuple[float, str]:
        conn = await asyncpg.connect(host="127.0.0.1", port=port, user="alice", password=PASSWORD, database="veil", ssl=False)
        try:
            args = [] if params is None else list(params)
            started = time.monotonic()
            try:
                await conn.fetch(sql.replace("%s", "$1"), *args, timeout=0.7)  # then asyncpg sends a CancelRequest
                how = "answered"
            except TimeoutError:
                how = "57014"
            # the connection is usable again only once the server has stopped the statement
            assert await conn.fetchval("SELECT COUNT(*) FROM regions") == 300
            return time.monotonic() - started - 0.7, how
        finally:
            await conn.close()
            # asyncpg sends its CancelRequest on a connection of its own, in the background: let the server
            # finish with it before the test stops the server (else its handler task is destroyed pending, and
            # the unclosed socket's ResourceWarning fails whichever test comes next)
            await asyncio.sleep(0.5)

    return asyncio.run(scenario())


CLIENTS: dict[str, Callable[[int, str, tuple[object, ...] | None], tuple[float, str]]] = {
    "psycopg cancel": _psycopg_cancel,
    "asyncpg timeout": _asyncpg_timeout,
}
#: the public query in each shape a driver sends it: simple query, bound parameter, a cursor
SHAPES: dict[str, tuple[str, tuple[object, ...] | None]] = {
    "simple": (HEAVY_PUBLIC, None),
    "parameter": (HEAVY_PUBLIC + " WHERE a.id >= %s", (0,)),
    "subquery": (f"SELECT n + 1 FROM ({HEAVY_PUBLIC.replace('COUNT(*)', 'COUNT(*) AS n')}) q", None),
}


@pytest.mark.slow
@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_a_cancel_request_stops_a_public_query(policy: Path, client: str, shape: str) -> None:
    sql, params = SHAPES[shape]
    if client == "asyncpg timeout" and shape == "subquery":
        pytest.skip("one shape per driver protocol is enough for asyncpg")
    before = _spent(policy)
    with running_server(policy, limits=_limits()) as st:  # the defaults: no statement timeout
        seconds, how = CLIENTS[client](st.port, sql, params)  # type: ignore[attr-defined]
    assert how == "57014" and seconds < 3.0, (how, seconds)
    assert _spent(policy) == before  # a public query costs nothing


@pytest.mark.slow
def test_public_work_stops_at_the_public_query_limit(policy: Path) -> None:
    with running_server(policy, limits=_limits(public_query_timeout=1.0)) as st:
        with psycopg.connect(dsn(st.port), autocommit=True) as conn:  # type: ignore[attr-defined]
            t0 = time.monotonic()
            with pytest.raises(psycopg.Error) as caught:
                conn.execute(HEAVY_PUBLIC).fetchall()
            took = time.monotonic() - t0
            assert caught.value.sqlstate == "57014" and 0.9 < took < 3.0, (caught.value.sqlstate, took)
            assert "public data" in str(caught.value)
            assert conn.execute("SELECT COUNT(*) FROM regions").fetchone() == (300,)


# --- a charged private query is never cut ----------------------------------------------------------


class _SlowWarehouse(DuckDBEngine):
    """The real warehouse engine, each statement 1.5 s slower, and interruptible there as DuckDB's
    own interrupt would stop it: were the server to interrupt the warehouse engine of a charged
    query, the query would end "cancelled, ε charged, nothing released"."""

    def __init__(self, policy: Policy) -> None:
        super().__init__(policy)
        self._stop = threading.Event()

    def execute(self, sql: str) -> Result:
        if self._stop.wait(1.5):
            self._stop.clear()
            raise EngineError("the statement was cancelled", hint="(test engine)")
        return super().execute(sql)

    def cancel(self) -> None:
        self._stop.set()
        super().cancel()


def _slow_private_session(policy: Policy, analyst: str, **kwargs: object) -> QuerySession:
    return QuerySession(policy, analyst, engine=_SlowWarehouse(policy), **kwargs)  # type: ignore[arg-type]


@pytest.mark.slow
@pytest.mark.parametrize("stop", ["cancel request", "public query limit", "statement timeout"])
def test_a_charged_private_query_is_never_cut(policy: Path, stop: str) -> None:
    """A private query charged and running in the engine is stopped by nothing (whether it ends in
    time may depend on one person's data): it runs to its end and is released with its charge, so
    re-asking it costs nothing."""
    limits = _limits(public_query_timeout=0.3 if stop == "public query limit" else 120.0)
    eps = Fraction(1, 100)
    private = f"SELECT COUNT(*) FROM adult WHERE age > {40 + len(stop)}"  # one per case: never answered before
    with running_server(policy, limits=limits, query_session_factory=_slow_private_session) as st:
        before = _spent(policy)
        with psycopg.connect(dsn(st.port), autocommit=True) as conn:  # type: ignore[attr-defined]
            conn.execute("SET veil.epsilon = 0.01")
            if stop == "statement timeout":
                conn.execute("SET statement_timeout = 500")
            elif stop == "cancel request":
                threading.Timer(0.5, conn.cancel_safe).start()
            t0 = time.monotonic()
            try:
                conn.execute(private).fetchall()
            except psycopg.Error as exc:
                assert exc.sqlstate == "57014", exc  # the client stopped waiting; the run goes on
            conn.execute("SHOW veil.budget").fetchall()  # waits for the session's running call to end
            assert time.monotonic() - t0 > 1.4
            assert conn.execute(private).fetchone() is not None  # re-asked: from the release log
        assert _spent(policy) - before == eps  # one charge, with its release


# --- one analyst cannot hold every analyst worker ------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("workers", [2, 3])
def test_one_analyst_cannot_hold_every_analyst_worker(policy: Path, workers: int) -> None:
    """bob runs more heavy public queries at once than there are analyst workers: he holds at most
    all workers but one, so alice's query is answered at once (before, first come first served, it
    waited behind bob's for as long as they ran: hours without a limit)."""
    from tests.support.server import BOB_PASSWORD

    with running_server(policy, limits=_limits(workers=workers, public_query_timeout=20.0)) as st:
        port = st.port  # type: ignore[attr-defined]
        conns = [psycopg.connect(dsn(port, user="bob", password=BOB_PASSWORD), autocommit=True) for _ in range(workers + 2)]
        for c in conns:  # each session is ready (its query session made): a cancel request finds its statement
            assert c.execute("SELECT 1").fetchone() == (1,)

        def heavy(conn: psycopg.Connection) -> None:
            try:
                conn.execute(HEAVY_PUBLIC).fetchall()
            except psycopg.Error:
                pass

        threads = [threading.Thread(target=heavy, args=(c,), daemon=True) for c in conns]
        try:
            with psycopg.connect(dsn(port), autocommit=True) as alice:
                for t in threads:
                    t.start()
                time.sleep(1.0)
                t0 = time.monotonic()
                assert alice.execute("SELECT COUNT(*) FROM regions WHERE id < 7").fetchone() == (7,)
                took = time.monotonic() - t0
        finally:
            for c in conns:
                c.cancel_safe()
            for t in threads:
                t.join(30)
            for c in conns:
                c.close()
    assert took < 2.0, took  # shared 2-core host, bob's engine runs busy on both cores: generous


def test_backend_pids_do_not_count_the_servers_connections() -> None:
    """Red team s73: pg-mimic's counter gave PIDs one per startup, so ``pg_backend_pid()`` told an analyst how many
    connections the others made meanwhile. Drawn at random: 200 allocations spread over the int32 range, in no
    order (false failure: two equal among 200 draws of 2³¹ − 10⁴ ≈ 10⁻⁵; a sorted or counted run ≈ 0)."""
    import itertools

    from pg_mimic.server import PgServer

    from veil.server.app import VeilServer
    from veil.server.shared import PID_BASE

    server = VeilServer.__new__(VeilServer)  # only the pid numbering: no policy, no sockets
    PgServer.__init__(server, session_factory=lambda: None)
    server.share = None
    pids = [server._allocate_pid() for _ in range(200)]
    assert all(PID_BASE <= p < 2**31 for p in pids)
    assert len(set(pids)) == 200
    assert max(pids) - min(pids) > 2**30
    steps = {b - a for a, b in itertools.pairwise(pids)}
    assert len(steps) > 100
