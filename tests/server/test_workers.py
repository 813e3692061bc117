"""``veil serve --processes 2``: two worker processes on one port, tested with real psycopg clients
against the real command (a subprocess), plus the shared-memory limits across real processes.

Which worker gets a connection is the kernel's choice; a connection's backend PID tells which
worker holds it (``pid % 2``), so the tests open connections until both workers hold some.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.server import BOB_PASSWORD, PASSWORD, build_policy, dsn, make_cert, raw_login
from veil.server.limits import Outcome, ServerLimits
from veil.server.shared import ProcessShare, SharedConnectionSlots, SharedLoginThrottle, SharedState

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
_DRAINERS: dict[int, threading.Thread] = {}


def _drain(stream: object, log: list[str]) -> None:
    for line in stream:  # type: ignore[attr-defined]
        log.append(line)


def start_serve(policy: Path, *flags: str) -> tuple[subprocess.Popen[str], int, list[str]]:
    """``veil serve --processes 2`` on a free port; returns (process, port, its log lines so far)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "veil.cli.main", "serve", "--policy", str(policy), "--port", "0", "--processes", "2", *flags],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "VEIL_PROGRESS": "0"},
        cwd=REPO,
    )
    assert proc.stderr is not None
    log: list[str] = []
    # No deadline of its own (a clock read would put every caller in the serial `timing` pass, tests/conftest.py):
    # a server that never says it listens fails the test at pytest's timeout; one that exits ends the loop.
    for line in iter(proc.stderr.readline, ""):
        log.append(line)
        match = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
        if match:
            drainer = threading.Thread(target=_drain, args=(proc.stderr, log), daemon=True)
            drainer.start()
            _DRAINERS[proc.pid] = drainer
            return proc, int(match.group(1)), log
    proc.kill()
    proc.wait(30)
    proc.stderr.close()
    raise AssertionError("veil serve --processes 2 did not start:\n" + "".join(log))


def stop_serve(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    try:
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        drainer = _DRAINERS.pop(proc.pid, None)
        if drainer is not None:
            drainer.join(10)
        # Closing a stream another thread still reads blocks forever (a worker that outlived the
        # parent keeps the pipe open): the test then fails on its own assertion instead of hanging.
        if proc.stderr is not None and (drainer is None or not drainer.is_alive()):
            proc.stderr.close()


def connections_on_both(port: int, user: str, password: str, per_worker: int, **extra: str) -> list[psycopg.Connection]:
    """``per_worker`` open connections of ``user`` in each of the two workers."""
    have: dict[int, list[psycopg.Connection]] = {0: [], 1: []}
    for _ in range(100):
        if all(len(v) >= per_worker for v in have.values()):
            break
        try:
            conn = psycopg.connect(dsn(port, user, password, **extra), autocommit=True)
        except psycopg.OperationalError as exc:
            if "too many" not in str(exc):
                raise
            time.sleep(0.2)  # a surplus connection closed just now still counts until its worker sees it
            continue
        side = have[conn.info.backend_pid % 2]
        if len(side) < per_worker:
            side.append(conn)
        else:
            conn.close()
    if not all(len(v) >= per_worker for v in have.values()):
        for c in have[0] + have[1]:
            c.close()
        raise AssertionError(f"the kernel gave 100 connections to one worker only: {[len(v) for v in have.values()]}")
    return have[0] + have[1]


@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return make_cert(tmp_path_factory.mktemp("cert"))


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, shared_data: Path, cert: tuple[Path, Path]) -> Iterator[tuple[Path, int]]:
    folder = tmp_path_factory.mktemp("workers")
    policy = build_policy(folder, shared_data, rows=1000)
    tls = ("--tls-cert", str(cert[0]), "--tls-key", str(cert[1]))
    proc, port, _log = start_serve(policy, "--max-connections-per-analyst", "6", "--catalog-timeout", "60", *tls)
    try:
        yield policy, port
    finally:
        stop_serve(proc)


def test_tls_in_every_worker(served: tuple[Path, int], cert: tuple[Path, Path]) -> None:
    _policy, port = served
    conns = connections_on_both(port, "alice", PASSWORD, per_worker=1, sslmode="verify-full", sslrootcert=str(cert[0]))
    try:
        for conn in conns:
            assert conn.pgconn.ssl_in_use
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        for c in conns:
            c.close()


def test_budget_raced_across_both_workers_is_never_overspent(served: tuple[Path, int]) -> None:
    """bob (ε = 1) races 6 connections, 3 in each worker, each asking distinct queries at ε = 1/20
    until refused: exactly 20 are answered, the ledger's spent ε is exactly 1, never more."""
    from veil.policy import load_policy
    from veil.store.ledger import Ledger

    policy_path, port = served
    conns = connections_on_both(port, "bob", BOB_PASSWORD, per_worker=3)
    answered: list[int] = []
    refused: list[str] = []
    barrier = threading.Barrier(len(conns))

    def race(i: int, conn: psycopg.Connection) -> None:
        conn.execute("SET veil.epsilon = '1/20'")
        barrier.wait()
        for j in range(40):
            try:
                conn.execute("SELECT COUNT(*) FROM adult WHERE age > %s", (17 + i * 40 + j,)).fetchall()
                answered.append(1)
            except psycopg.Error as exc:
                refused.append(exc.sqlstate or "?")
                return

    threads = [threading.Thread(target=race, args=(i, c)) for i, c in enumerate(conns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for c in conns:
        c.close()
    assert refused == ["VB001"] * len(conns), refused  # every connection ran until the budget said no
    assert len(answered) == 20
    policy = load_policy(policy_path)
    with Ledger.for_policy(policy) as ledger:
        rows = [r for r in ledger.reservations("bob") if r["status"] != "cancelled"]
        spent = ledger.spent("analyst:bob").epsilon
    assert all(r["status"] == "released" for r in rows), rows
    assert len(rows) == 20 and sum((r["epsilon"] for r in rows), Fraction(0)) == spent == Fraction(1)


def test_connections_per_analyst_count_across_workers(served: tuple[Path, int]) -> None:
    """--max-connections-per-analyst 6 holds for the server: with 3 connections in each worker,
    every further login is refused (53300), wherever the kernel puts it."""
    _policy, port = served
    conns = connections_on_both(port, "alice", PASSWORD, per_worker=3)
    try:
        for _ in range(6):
            with pytest.raises(psycopg.OperationalError) as info:
                psycopg.connect(dsn(port), autocommit=True)
            assert info.value.sqlstate == "53300" or "53300" in str(info.value) or "too many" in str(info.value)
        conns.pop().close()
        time.sleep(0.2)  # the worker counts the logout when it sees the socket close
        with psycopg.connect(dsn(port), autocommit=True) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        for c in conns:
            c.close()


def test_login_backoff_holds_across_workers(served: tuple[Path, int]) -> None:
    """Parallel wrong guesses at carol land in both workers; each still waits its own turn (the
    backoff's counts, attempts in flight included, live in shared memory): after 2 failures, 4 at
    once are answered after 0.25, 0.75, 1.75 and 3.75 s (the default backoff), not all after 0.25 s."""
    _policy, port = served
    for i in range(2):
        assert raw_login(port, "carol", f"seq-{i}", source="127.0.0.9")[1] == "28P01"
    results: list[tuple[str | None, float]] = [(None, 0.0)] * 4
    t0 = time.monotonic()

    def go(i: int) -> None:
        _sock, sqlstate = raw_login(port, "carol", f"par-{i}", source="127.0.0.9", timeout=30)
        results[i] = (sqlstate, time.monotonic() - t0)

    threads = [threading.Thread(target=go, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert [r[0] for r in results] == ["28P01"] * 4, results
    answered = sorted(t for _, t in results)
    assert all(a >= due - 0.05 for a, due in zip(answered, (0.25, 0.75, 1.75, 3.75), strict=True)), answered


def test_cancel_request_reaches_the_worker_that_runs_the_query(served: tuple[Path, int]) -> None:
    """A CancelRequest arrives on a new connection, often in the other worker: it still stops the
    query (a catalog cross join that would run for many seconds) within seconds."""
    _policy, port = served
    conns = connections_on_both(port, "alice", PASSWORD, per_worker=2)
    slow = "SELECT COUNT(*) FROM pg_catalog.pg_type a, pg_type b, pg_type c, pg_type d"
    try:
        for conn in conns:
            timer = threading.Timer(0.5, conn.cancel)
            timer.start()
            t0 = time.monotonic()
            with pytest.raises(psycopg.errors.QueryCanceled):
                conn.execute(slow).fetchall()
            timer.join()
            assert time.monotonic() - t0 < 15
            assert conn.execute("SELECT 1").fetchone() == (1,)  # the connection stays usable
    finally:
        for c in conns:
            c.close()


@pytest.mark.slow
def test_one_address_cannot_hold_every_slot_across_workers(tmp_path: Path, shared_data: Path) -> None:
    """Red team s20 A3 with --processes 2: 127.0.0.2 holds all 20 slots of the server with idle
    sockets (spread over both workers by the kernel); alice logs in from 127.0.0.1 again and again:
    the worker that gets her connection gives her the slot of one of the hog's there."""
    import socket

    policy = build_policy(tmp_path, shared_data, rows=100)
    proc, port, log = start_serve(policy, "--max-connections", "20", "--auth-timeout", "60")
    hog: list[socket.socket] = []
    try:
        for _ in range(20):
            hog.append(socket.create_connection(("127.0.0.1", port), timeout=5, source_address=("127.0.0.2", 0)))
        time.sleep(1.0)  # both workers have accepted them
        for _ in range(3):
            with psycopg.connect(dsn(port), autocommit=True) as conn:
                assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        for s in hog:
            s.close()
        stop_serve(proc)
    assert any("to make room for 127.0.0.1" in line for line in log), "".join(log[-20:])


def test_a_bounded_copy_missing_in_the_workers_is_refused_not_read_raw(tmp_path: Path, shared_data: Path) -> None:
    """Workers only read the warehouse: when the policy's bounds change while serving, the new
    bounded copy does not exist, and the query is refused with F0000 (nothing charged) instead of
    being answered from raw data or another copy."""
    policy = build_policy(tmp_path, shared_data, rows=300)
    proc, port, log = start_serve(policy)
    try:
        with psycopg.connect(dsn(port), autocommit=True) as conn:
            conn.execute("SET veil.epsilon = 0.1")
            conn.execute("SELECT AVG(age) FROM adult").fetchall()  # the copy built before the start
            before = conn.execute("SHOW veil.budget").fetchone()
            text = policy.read_text(encoding="utf-8")
            policy.write_text(text.replace("upper = 90", "upper = 80"), encoding="utf-8")
            with pytest.raises(psycopg.Error) as info:
                conn.execute("SELECT AVG(age) FROM adult WHERE hours_per_week > 3").fetchall()
            assert info.value.sqlstate == "F0000"
            assert "Restart veil serve" in str(info.value.diag.message_hint)
            assert conn.execute("SHOW veil.budget").fetchone() == before
    finally:
        stop_serve(proc)
    assert "Traceback" not in "".join(log)


def test_serve_processes_restarted_builds_the_copy(tmp_path: Path, shared_data: Path) -> None:
    """The remedy the error names works: a restarted server builds the copy for the new bounds."""
    policy = build_policy(tmp_path, shared_data, rows=300)
    policy.write_text(policy.read_text(encoding="utf-8").replace("upper = 90", "upper = 80"), encoding="utf-8")
    proc, port, _log = start_serve(policy)
    try:
        conns = connections_on_both(port, "alice", PASSWORD, per_worker=1)
        for i, conn in enumerate(conns):
            conn.execute("SET veil.epsilon = 0.1")
            assert len(conn.execute("SELECT sex, AVG(age) FROM adult WHERE age > %s GROUP BY sex", (20 + i,)).fetchall()) == 2
            conn.close()
    finally:
        stop_serve(proc)


def _worker_pids(log: list[str], count: int = 2) -> dict[int, int]:
    """Worker index → OS pid, from the workers' start lines (the last start of each index wins)."""
    for _ in range(600):  # at least 60 s (a poll count, not a clock: a hang guard needs no quiet machine)
        found = {}
        for line in list(log):
            m = re.search(r"worker process (\d+) \(pid (\d+)\) is accepting", line)
            if m:
                found[int(m.group(1))] = int(m.group(2))
        if len(found) == count:
            return found
        time.sleep(0.1)
    raise AssertionError("".join(log))


def test_a_killed_worker_is_restarted_and_its_connections_forgotten(tmp_path: Path, shared_data: Path) -> None:
    """SIGKILL one worker holding connections: the server keeps answering, the worker comes back,
    and its dead connections no longer count against --max-connections."""
    import signal

    policy = build_policy(tmp_path, shared_data, rows=300)
    proc, port, log = start_serve(policy, "--max-connections", "6", "--max-connections-per-analyst", "6")
    conns: list[psycopg.Connection] = []
    try:
        first = _worker_pids(log)
        conns = connections_on_both(port, "alice", PASSWORD, per_worker=2)
        os.kill(first[0], signal.SIGKILL)
        polls = 0
        while _worker_pids(log)[0] == first[0]:
            polls += 1
            assert polls < 300, "".join(log)  # at least 60 s
            time.sleep(0.2)
        alive = [c for c in conns if c.info.backend_pid % 2 == 1]
        # 2 alive + 4 new = 6, the limit: only if worker 0's 2 dead connections no longer count
        again = connections_on_both(port, "alice", PASSWORD, per_worker=2)
        conns += again
        for i, c in enumerate(again + alive):
            c.execute("SET veil.epsilon = 0.1")
            assert c.execute("SELECT COUNT(*) FROM adult WHERE age > %s", (30 + i,)).fetchone() is not None
    finally:
        for c in conns:
            c.close()
        stop_serve(proc)
    assert "exited with code -9; starting it again" in "".join(log)


def test_sigterm_under_load_leaves_no_charge_without_its_release(tmp_path: Path, shared_data: Path) -> None:
    """Stopping the server while both workers answer: every charge in the ledger has its release."""
    from veil.policy import load_policy
    from veil.store.ledger import Ledger

    policy = build_policy(tmp_path, shared_data, rows=300)
    proc, port, log = start_serve(policy)
    conns = connections_on_both(port, "alice", PASSWORD, per_worker=2)
    done = threading.Event()

    def load(i: int, conn: psycopg.Connection) -> None:
        conn.execute("SET veil.epsilon = '1/100'")
        j = 0
        while not done.is_set():
            try:
                conn.execute("SELECT COUNT(*) FROM adult WHERE age > %s", (i * 1000 + j,)).fetchall()
            except psycopg.Error:
                return
            j += 1

    threads = [threading.Thread(target=load, args=(i, c)) for i, c in enumerate(conns)]
    for t in threads:
        t.start()
    time.sleep(2)
    stop_serve(proc)
    done.set()
    for t in threads:
        t.join(30)
    for c in conns:
        c.close()
    with Ledger.for_policy(load_policy(policy)) as ledger:
        rows = ledger.reservations("alice")
    assert rows and all(r["status"] in ("released", "cancelled") for r in rows), [r["status"] for r in rows]
    assert proc.returncode == 0, "".join(log)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_workers_stop_when_the_parent_is_killed(tmp_path: Path, shared_data: Path) -> None:
    """SIGKILL to the parent (no chance to stop its workers): the workers notice and exit."""
    import signal

    policy = build_policy(tmp_path, shared_data, rows=300)
    proc, _port, log = start_serve(policy)
    workers = _worker_pids(log)
    os.kill(proc.pid, signal.SIGKILL)
    stop_serve(proc)
    polls = 0
    while any(_alive(pid) for pid in workers.values()):
        polls += 1
        assert polls < 300, "worker processes outlived their parent"  # at least 60 s
        time.sleep(0.2)


def _spawned_children(pid: int) -> list[int]:
    """``pid``'s child processes started by multiprocessing's spawn (the workers)."""
    out = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return out
    for task in tasks:
        try:  # a thread of the parent can end between the listing and the read
            children = (task / "children").read_text().split()
        except OSError:
            continue
        for child in children:
            try:
                if "spawn_main" in Path(f"/proc/{child}/cmdline").read_text():
                    out.append(int(child))
            except OSError:
                continue
    return out


def test_workers_stop_when_the_parent_dies_before_they_are_ready(tmp_path: Path, shared_data: Path) -> None:
    """The parent killed while its workers still start up (before any of them serves): each worker
    must still notice. A worker that read "its parent" only once it was running would read the
    process that adopted it, and serve forever."""
    import signal

    policy = build_policy(tmp_path, shared_data, rows=300)
    proc = subprocess.Popen(
        [sys.executable, "-m", "veil.cli.main", "serve", "--policy", str(policy), "--port", "0", "--processes", "2"],
        stderr=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        env={**os.environ, "VEIL_PROGRESS": "0"},
        cwd=REPO,
    )
    workers: list[int] = []
    polls = 0
    try:
        while len(workers) < 2:
            polls += 1
            assert proc.poll() is None and polls < 12_000, "veil serve did not start its workers"  # at least 120 s
            workers = _spawned_children(proc.pid)
            time.sleep(0.01)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)  # the workers are still importing: none serves yet
        proc.wait(30)
    polls = 0
    try:
        while any(_alive(pid) for pid in workers):
            polls += 1
            assert polls < 300, "worker processes outlived their parent"  # at least 60 s
            time.sleep(0.2)
    finally:
        for pid in workers:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


# --- the shared-memory limits, across real processes ------------------------------------------------


def _login_in_child(state: SharedState, limits: ServerLimits, analysts: list[str], out: object) -> None:
    """Each of ``analysts`` logs in, in turn, through slots of its own in this one process (worker 1): one spawned
    process for all of them (a spawn costs ~1.2 s of CPU: the interpreter and this module's imports)."""
    for analyst in analysts:
        slots = SharedConnectionSlots(ProcessShare(1, 2, state), limits)
        try:
            slots.acquire(analyst)
            out.put("ok")  # type: ignore[attr-defined]
        except Exception as exc:
            out.put(type(exc).__name__)  # type: ignore[attr-defined]


def _fail_in_child(state: SharedState, address: str, times: int) -> None:
    throttle = SharedLoginThrottle(state, base=0.25, maximum=30)
    for _ in range(times):
        _, ticket = throttle.try_admit(address, "carol", now=100.0)
        if ticket is None:
            raise RuntimeError("not admitted")
        throttle.finish(ticket, Outcome.FAILED, now=100.0)


def _admit_in_child(state: SharedState, address: str, nows: list[float], out: object) -> None:
    """An admission at each of ``nows`` in turn, each through a throttle of its own, in this one process."""
    for now in nows:
        throttle = SharedLoginThrottle(state, base=0.25, maximum=30)
        out.put(throttle.try_admit(address, "carol", now=now)[1] is not None)  # type: ignore[attr-defined]


def test_shared_slots_and_throttle_hold_across_processes() -> None:
    ctx = multiprocessing.get_context("spawn")
    limits = ServerLimits(max_connections=2, max_connections_per_analyst=1)
    state = SharedState(ctx, limits)
    share = ProcessShare(0, 2, state)
    slots = SharedConnectionSlots(share, limits)
    slots.acquire("alice")
    out = ctx.Queue()
    # alice: over her limit; carol: over the total (bob's slot, taken just before in the other process, counts)
    p = ctx.Process(target=_login_in_child, args=(state, limits, ["alice", "bob", "carol"], out))
    p.start()
    p.join(60)
    assert p.exitcode == 0
    assert [out.get(timeout=10) for _ in range(3)] == ["TooManyConnections", "ok", "TooManyConnections"]
    assert slots.total == 2
    slots.logout("alice")
    slots.release()
    slots.acquire("alice")  # her slot is free again
    state.forget(1)  # worker 1 (bob's connection) died: its connections no longer count
    assert slots.total == 1
    slots.acquire("bob")
    throttle = SharedLoginThrottle(state, base=0.25, maximum=30)
    p = ctx.Process(target=_fail_in_child, args=(state, "10.0.0.7", 2))
    p.start()
    p.join(60)
    assert p.exitcode == 0
    assert throttle.delay("10.0.0.7", "carol", now=100.0) == 0.25  # 2 failures in the other process
    assert throttle.delay("10.0.0.8", "carol", now=100.0) == 0.25  # carol's count, from any address
    assert throttle.delay("10.0.0.8", "dave", now=100.0) == 0
    _, ticket = throttle.try_admit("10.0.0.7", "carol", now=100.25)
    assert ticket is not None
    # in flight here: the other process waits its turn (not admitted at 100.5), then is admitted at 100.75
    p = ctx.Process(target=_admit_in_child, args=(state, "10.0.0.7", [100.5, 100.75], out))
    p.start()
    p.join(60)
    assert p.exitcode == 0 and [out.get(timeout=10) for _ in range(2)] == [False, True]
    assert throttle.finish(ticket, Outcome.FAILED, now=101.0) == 3
    assert throttle.delay("10.0.0.7", "carol", now=101.0) == 1.0  # 3 failures + the child's attempt in flight
    state.close_lock()


def test_throttle_forgets_within_a_bucket_only_the_oldest_and_keeps_their_penalty() -> None:
    ctx = multiprocessing.get_context("spawn")
    state = SharedState(ctx, ServerLimits())
    throttle = SharedLoginThrottle(state, base=1, maximum=30, forget_after=1e9)  # forgotten by eviction only
    pairs = [(f"10.1.{i // 256}.{i % 256}", f"u{i}") for i in range(12_000)]  # 36,000 keys (pair, user, address)
    for i, (a, u) in enumerate(pairs):
        for dt in (0.0, 5.0):  # 5 s apart: a key sharing an overflow slot with a forgotten one may wait 1 s
            _, ticket = throttle.try_admit(a, u, now=10.0 * i + dt)
            assert ticket is not None
            throttle.finish(ticket, Outcome.FAILED, now=10.0 * i + dt)
    n = len(pairs)
    kept = sum(throttle.delay(a, u, now=10.0 * i + 5) > 0 for i, (a, u) in enumerate(pairs) if i >= n - 600)
    assert kept == 600  # the most recent failures are remembered (each of the pair's 3 keys slows it alone)
    assert sum(1 for slot in state.failures if slot.used) <= 16_384  # bounded memory
    # the oldest are out of the table, but their penalty is not forgiven (red team s20 A7): the overflow keeps it
    assert sum(throttle.delay(a, u, now=10.0 * i + 5) > 0 for i, (a, u) in enumerate(pairs[:600])) == 600
    state.close_lock()


def test_processes_refuse_a_non_duckdb_policy(tmp_path: Path) -> None:
    from dataclasses import replace

    from tests.support.server import SERVER_POLICY
    from veil.errors import InputError
    from veil.policy import load_policy
    from veil.server.workers import serve_processes

    path = tmp_path / "policy.toml"
    path.write_text(SERVER_POLICY, encoding="utf-8")
    policy = load_policy(path)
    spark = replace(policy, engine=replace(policy.engine, kind="spark"))
    with pytest.raises(InputError, match="DuckDB"):
        serve_processes(spark, processes=2, port=0)


def test_cancel_mailbox_hands_each_request_to_its_owner_only() -> None:
    from veil.server.shared import CancelMailbox

    ctx = multiprocessing.get_context("spawn")
    state = SharedState(ctx, ServerLimits())
    zero, one = CancelMailbox(ProcessShare(0, 2, state)), CancelMailbox(ProcessShare(1, 2, state))
    assert zero.collect() == [] and one.collect() == []
    zero.post(10001, 7)  # a connection of worker 1
    one.post(10002, -5)  # a connection of worker 0
    assert zero.collect() == [(10002, -5)]
    assert one.collect() == [(10001, 7)]
    assert zero.collect() == [] == one.collect()
    for pid in range(10000, 10000 + 2 * 300, 2):  # more than the mailbox holds: the oldest are overwritten
        one.post(pid, 1)
    got = zero.collect()
    assert {pid for pid, _ in got} == set(range(10000 + 2 * (300 - 256), 10000 + 2 * 300, 2))
    state.close_lock()


@settings(max_examples=200, deadline=None)
@given(gaps=st.lists(st.floats(min_value=0.0, max_value=120.0), min_size=1, max_size=40))
def test_exits_after_serving_never_stop_the_server(gaps: list[float]) -> None:
    """Red team s73: a worker that exits after it accepted connections (an analyst made it run out of memory, say)
    is always started again — at most RESTART_BACKOFF_MAX_S later —, however often; only exits before serving (a
    broken policy or port) stop the server, at the 6th within 60 s."""
    from veil.server.workers import _MAX_RESTARTS, _RESTART_WINDOW_S, RESTART_BACKOFF_MAX_S, restart_delay

    now, served_exits, early_exits = 0.0, list[float](), list[float]()
    for gap in gaps:
        now += gap
        delay = restart_delay(served_exits, now, served=True)
        assert delay is not None and 0.0 <= delay <= RESTART_BACKOFF_MAX_S
        served_exits.append(now)
        early = restart_delay(early_exits, now, served=False)
        recent = sum(1 for t in early_exits if now - t < _RESTART_WINDOW_S)
        assert (early is None) == (recent + 1 > _MAX_RESTARTS)
        if early is not None:
            early_exits.append(now)
    # a crash loop after serving backs off: the 10th exit within a second waits
    loop = [i * 0.01 for i in range(9)]
    assert restart_delay(loop, 0.1, served=True) == RESTART_BACKOFF_MAX_S
