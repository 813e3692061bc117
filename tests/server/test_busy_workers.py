"""Few busy analyst threads, and isolation all the same (``FairExecutor(busy=…)``, ``ServerLimits.busy_workers``).

Sixteen Python threads on 2 cores spend a fifth of the server's CPU switching the interpreter lock, so only
``busy`` analyst jobs start at once (each process's share of the cores); but a job that has run ``long_after``
seconds (a long statement in the engine, a long planning) no longer counts, so the others start beside it, up to
``--workers`` threads: one client's long statements never hold up another's cheap ones for longer than that.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import psycopg
import pytest

from tests.support.server import BOB_PASSWORD, FAST_BACKOFF, dsn, running_server
from veil.engines.base import Result
from veil.engines.duckdb import DuckDBEngine
from veil.errors import InputError
from veil.policy import Policy
from veil.proxy.session import QuerySession
from veil.server.limits import ServerLimits
from veil.server.pool import FairExecutor

# --- the pool ---------------------------------------------------------------------------------------


class _Running:
    """Counts the jobs running at once, and the most seen."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.now = 0
        self.most = 0

    def __enter__(self) -> None:
        with self._lock:
            self.now += 1
            self.most = max(self.most, self.now)

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self.now -= 1


@pytest.mark.parametrize(("size", "busy", "owners"), [(4, 1, 1), (6, 2, 3), (8, 3, 2), (3, 3, 3), (2, 5, 2)])
def test_at_most_busy_short_jobs_run_at_once(size: int, busy: int, owners: int) -> None:
    """Short jobs (each well below ``long_after``) run ``busy`` at a time, however many wait (never more threads
    than ``size``, one owner never more than ``size − 1``); all are answered."""
    pool = FairExecutor(size, "test-busy", busy=busy, long_after=30.0)
    running = _Running()

    def job(i: int) -> int:
        with running:
            time.sleep(0.005)  # an engine run: the interpreter lock is released
        return i

    try:
        futures = [pool.submit(job, i, owner=f"o{i % owners}") for i in range(40)]
        assert [f.result(30) for f in futures] == list(range(40))
    finally:
        pool.shutdown()
    assert running.most == min(busy, size, max(1, size - 1) * owners)


@pytest.mark.parametrize(("size", "busy", "long_jobs"), [(4, 1, 1), (4, 1, 3), (8, 2, 5), (3, 1, 2), (8, 1, 7)])
def test_long_jobs_do_not_hold_up_a_short_one(size: int, busy: int, long_jobs: int) -> None:
    """While up to ``size − 1`` long jobs run (of one owner or several), another owner's short job starts once the
    busy ones have run ``long_after`` (0.05 s here), not when they end."""
    pool = FairExecutor(size, "test-busy", busy=busy, long_after=0.05)
    release = threading.Event()

    def long_job() -> None:
        release.wait(30)  # a long statement in the engine

    try:
        longs = [pool.submit(long_job, owner=f"bob{i % 2}") for i in range(long_jobs)]
        time.sleep(0.05 * long_jobs + 0.2)  # each long job started in turn
        asked = time.monotonic()
        started = pool.submit(time.monotonic, owner="alice").result(30)
        assert started - asked < 0.05 + 0.5, started - asked  # a shared 2-core host: generous
        assert not any(f.done() for f in longs)
    finally:
        release.set()
        pool.shutdown()


@pytest.mark.parametrize("busy", [1, 2])
def test_with_every_thread_held_a_short_job_waits_for_one_to_end(busy: int) -> None:
    """``size`` still bounds the threads: long jobs on all of them hold up the next until one ends."""
    pool = FairExecutor(3, "test-busy", busy=busy, long_after=0.02)
    release = threading.Event()
    try:
        longs = [pool.submit(release.wait, 30, owner=f"o{i}") for i in range(3)]
        short = pool.submit(time.monotonic, owner="alice")
        time.sleep(0.3)
        assert not short.done()
        released = time.monotonic()
        release.set()
        assert short.result(10) >= released and all(f.result(10) for f in longs)
    finally:
        release.set()
        pool.shutdown()


@pytest.mark.parametrize("cancel_futures", [False, True])
def test_shutdown_ends_the_watcher(cancel_futures: bool) -> None:
    """Shutdown runs (or drops) the waiting work as before, and the watcher thread ends with the pool."""
    pool = FairExecutor(3, "test-busy-stop", busy=1, long_after=0.02)
    futures = [pool.submit(time.sleep, 0.05, owner=f"o{i % 2}") for i in range(6)]
    pool.shutdown(wait=True, cancel_futures=cancel_futures)
    assert all(f.done() for f in futures)
    if not cancel_futures:
        assert not any(f.cancelled() for f in futures)
    deadline = time.monotonic() + 5
    while any(t.name == "test-busy-stop-watch" for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(t.name == "test-busy-stop-watch" for t in threading.enumerate())


def test_the_default_is_the_cores_per_process() -> None:
    assert [ServerLimits.default_busy_workers(n, 4) for n in (1, 2, 3, 4, 8)] == [4, 2, 1, 1, 1]
    with pytest.raises(InputError, match="busy_workers"):
        ServerLimits(busy_workers=-1)


# --- the server: one analyst's long statements, another's cheap ones --------------------------------------


class _SlowForBob(DuckDBEngine):
    """The warehouse engine; each statement of bob's waits 3 s first, as a long engine run does (the interpreter
    lock released), and stops there when cancelled."""

    def __init__(self, policy: Policy) -> None:
        super().__init__(policy)
        self._stop = threading.Event()

    def execute(self, sql: str) -> Result:
        self._stop.wait(3.0)
        self._stop.clear()
        return super().execute(sql)

    def cancel(self) -> None:
        self._stop.set()
        super().cancel()


def _sessions(policy: Policy, analyst: str, **kwargs: object) -> QuerySession:
    engine = _SlowForBob(policy) if analyst == "bob" else None
    return QuerySession(policy, analyst, engine=engine, **kwargs)  # type: ignore[arg-type]


HEAVY_PUBLIC = "SELECT COUNT(*) FROM regions a, regions b, regions c, regions d, regions e"  # hours unless stopped


@pytest.fixture(scope="module")
def policy(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Path:
    from click.testing import CliRunner

    from tests.support.server import build_policy
    from veil.cli.main import cli

    path = build_policy(tmp_path_factory.mktemp("busy"), request.getfixturevalue("shared_data"), rows=300)
    with path.open("a", encoding="utf-8") as f:
        f.write("\n[tables.regions]\npublic = true\n")
    csv = path.parent / "regions.csv"
    csv.write_text("id,name\n" + "".join(f"{i},region {i}\n" for i in range(300)), encoding="utf-8")
    result = CliRunner().invoke(cli, ["ingest", "--policy", str(path), "--table", "regions", str(csv)])
    assert result.exit_code == 0, result.output
    return path


@pytest.mark.slow
@pytest.mark.parametrize(("busy", "long_statements"), [(1, 1), (1, 3), (2, 2)])
def test_a_cheap_query_is_answered_while_another_analysts_statements_run_long(
    policy: Path, busy: int, long_statements: int
) -> None:
    """bob's private queries each spend 3 s in the engine, on ``long_statements`` connections at once; alice's cheap
    queries are answered in well under that, one busy worker or two (with ``--workers 1`` she waited 3 s)."""
    limits = ServerLimits(**{**FAST_BACKOFF, "workers": 4, "busy_workers": busy})  # type: ignore[arg-type]
    with running_server(policy, limits=limits, query_session_factory=_sessions) as st:
        port = st.port  # type: ignore[attr-defined]
        bobs = [psycopg.connect(dsn(port, user="bob", password=BOB_PASSWORD), autocommit=True) for _ in range(long_statements)]
        ended: list[float] = []

        def long(conn: psycopg.Connection, i: int) -> None:
            conn.execute("SET veil.epsilon = 0.01")
            conn.execute(f"SELECT COUNT(*) FROM adult WHERE age > {20 + i + 5 * long_statements + 20 * busy}").fetchall()
            ended.append(time.monotonic())

        threads = [threading.Thread(target=long, args=(c, i), daemon=True) for i, c in enumerate(bobs)]
        try:
            with psycopg.connect(dsn(port), autocommit=True) as alice:
                alice.execute("SET veil.epsilon = 0.01")
                alice.execute("SELECT COUNT(*) FROM adult").fetchall()  # charged once; then from the release log
                for t in threads:
                    t.start()
                time.sleep(0.5)  # bob's statements are in the engine
                took = []
                for _ in range(5):
                    t0 = time.monotonic()
                    assert alice.execute("SELECT COUNT(*) FROM adult").fetchall()
                    took.append(time.monotonic() - t0)
                done_before = len(ended)
        finally:
            for t in threads:
                t.join(30)
            for c in bobs:
                c.close()
    assert done_before == 0 and len(ended) == long_statements, (done_before, took)  # bob's were still running
    assert max(took) < 1.0, took  # a shared 2-core host: generous against bob's 3 s


@pytest.mark.slow
@pytest.mark.parametrize("stop", ["statement timeout", "cancel request"])
def test_a_timeout_and_a_cancel_still_stop_work_beside_long_statements(policy: Path, stop: str) -> None:
    """With one busy worker and two of bob's statements running long in the engine, alice's heavy public query
    stops at her statement timeout or her cancel request (57014), and her connection answers again at once."""
    limits = ServerLimits(**{**FAST_BACKOFF, "workers": 4, "busy_workers": 1})  # type: ignore[arg-type]
    with running_server(policy, limits=limits, query_session_factory=_sessions) as st:
        port = st.port  # type: ignore[attr-defined]
        bobs = [psycopg.connect(dsn(port, user="bob", password=BOB_PASSWORD), autocommit=True) for _ in range(2)]

        def long(conn: psycopg.Connection, i: int) -> None:
            conn.execute("SET veil.epsilon = 0.01")
            conn.execute(f"SELECT COUNT(*) FROM adult WHERE age > {60 + i + len(stop)}").fetchall()

        threads = [threading.Thread(target=long, args=(c, i), daemon=True) for i, c in enumerate(bobs)]
        try:
            with psycopg.connect(dsn(port), autocommit=True) as alice:
                for t in threads:
                    t.start()
                time.sleep(0.3)
                if stop == "statement timeout":
                    alice.execute("SET statement_timeout = 500")
                else:
                    threading.Timer(0.5, alice.cancel_safe).start()
                t0 = time.monotonic()
                with pytest.raises(psycopg.Error) as caught:
                    alice.execute(HEAVY_PUBLIC).fetchall()
                took = time.monotonic() - t0
                assert alice.execute("SELECT COUNT(*) FROM regions WHERE id < 7").fetchone() == (7,)
        finally:
            for t in threads:
                t.join(30)
            for c in bobs:
                c.close()
    assert caught.value.sqlstate == "57014" and took < 2.5, (caught.value.sqlstate, took)
