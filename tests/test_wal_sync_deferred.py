"""Deferred syncs (:mod:`veil.store.wal_sync`): a sync nothing waits for (a release row's) joins one deferred sync per
file; it begins once a running one ends, or, with none running, DEFER_SECONDS after the first joiner (at once on
``flush``), so after every commit that joined it, and its outcome reaches all of them. A sync an answer waits for (a
reservation's) is never deferred.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import pytest

from veil.store import wal_sync
from veil.store.ledger import Account, Cost, Ledger


class Disk:
    """``sync_now`` replaced: each call logs its start, then waits while the disk is held. Only files under the test's
    own folder: a sync of another test's ledger (a handle left unclosed, its release rows synced at their deadline
    while this test runs in the same worker) is done for real and not logged — it made ``events`` hold one sync too
    many, now and then, on main too."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.events: list[str] = []
        self.free = threading.Event()
        self.free.set()
        self.began = threading.Semaphore(0)
        self.fail = False

    def sync_now(self, path: Path) -> None:
        if not Path(path).resolve().is_relative_to(self.root):
            _REAL_SYNC_NOW(path)
            return
        self.events.append("sync")
        self.began.release()
        assert self.free.wait(10), "the disk was never released"
        if self.fail:
            raise OSError(5, "Input/output error")

    def hold(self, path: Path) -> None:
        """Start a sync that runs until :meth:`release`."""
        self.free.clear()
        self.began = threading.Semaphore(0)  # (an earlier sync's start is not this one's)
        wal_sync.start(path)
        assert self.began.acquire(timeout=10)


_REAL_SYNC_NOW = wal_sync.sync_now


@pytest.fixture
def disk(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Disk]:
    d = Disk(tmp_path)
    monkeypatch.setattr(wal_sync, "sync_now", d.sync_now)
    yield d
    d.free.set()


@pytest.mark.parametrize("joiners", [1, 2, 5])
def test_deferred_syncs_share_one_that_begins_when_the_running_one_ends(tmp_path: Path, disk: Disk, joiners: int) -> None:
    path = tmp_path / "l.sqlite"
    disk.hold(path)
    futures = [wal_sync.start(path, defer=True) for _ in range(joiners)]
    assert len({id(f) for f in futures}) == 1
    assert not futures[0].running() and disk.events == ["sync"]  # not begun while the first runs
    disk.free.set()
    futures[0].result(10)
    assert disk.events == ["sync", "sync"]  # one more sync for all of them


def test_a_sync_an_answer_waits_for_begins_at_once(tmp_path: Path, disk: Disk) -> None:
    path = tmp_path / "l.sqlite"
    disk.hold(path)
    deferred = wal_sync.start(path, defer=True)
    now = wal_sync.start(path)
    assert now is not deferred
    assert disk.began.acquire(timeout=10), "the undeferred sync did not begin while another ran"
    disk.free.set()
    now.result(10)
    deferred.result(10)


def test_with_no_sync_running_a_deferred_one_waits_then_syncs_once_for_all_who_joined(tmp_path: Path, disk: Disk) -> None:
    """With none running, the deferred sync waits DEFER_SECONDS for more commits to join it, then begins: one sync for
    all of them (not a worker's wake-up and an fsync per release row)."""
    path = tmp_path / "l.sqlite"
    first = wal_sync.start(path, defer=True)
    others = [wal_sync.start(path, defer=True) for _ in range(4)]
    assert all(f is first for f in others)
    assert not first.done() and disk.events == []  # (no sync began at once: a wait of 50 ms)
    first.result(10)
    assert disk.events == ["sync"]
    later = wal_sync.start(path, defer=True)  # a commit after it began: a deferred sync of its own
    assert later is not first
    later.result(10)
    assert disk.events == ["sync", "sync"]


def test_flush_begins_the_waiting_deferred_sync_at_once(tmp_path: Path, disk: Disk, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wal_sync, "DEFER_SECONDS", 30.0)
    path = tmp_path / "l.sqlite"
    f = wal_sync.start(path, defer=True)
    assert not f.done()
    wal_sync.flush(path)
    f.result(10)  # long before 30 s
    assert disk.events == ["sync"]


def test_a_sync_begun_without_deferral_carries_the_waiting_deferred_one(
    tmp_path: Path, disk: Disk, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Queries one after another: the next reservation's sync, begun after the release rows were committed, makes them
    durable too (one fsync for both), instead of one more fsync of their own; the waiting worker then has none to do."""
    monkeypatch.setattr(wal_sync, "DEFER_SECONDS", 30.0)
    path = tmp_path / "l.sqlite"
    deferred = wal_sync.start(path, defer=True)
    assert wal_sync.start(path, defer=True) is deferred  # a second release row joins it
    wal_sync.start(path).result(10)  # a reservation's sync
    assert deferred.done() and deferred.exception() is None
    assert disk.events == ["sync"]
    later = wal_sync.start(path, defer=True)  # a release row committed after that sync began: not carried by it
    assert later is not deferred and not later.done()
    wal_sync.flush(path)
    later.result(10)
    assert disk.events == ["sync", "sync"]


def test_a_failed_sync_fails_for_the_deferred_sync_it_carried(tmp_path: Path, disk: Disk) -> None:
    path = tmp_path / "l.sqlite"
    deferred = wal_sync.start(path, defer=True)
    disk.fail = True
    now = wal_sync.start(path)
    for f in (now, deferred):
        assert isinstance(f.exception(10), OSError)


def test_release_rows_one_after_another_share_a_sync_and_close_does_not_wait_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the ledger, queries one after another: each reservation has its own sync (an answer waits for it); the
    release rows share deferred ones, begun at the latest when the handle closes."""
    import time

    real = wal_sync.sync_now
    synced: list[str] = []

    def counted(path: Path) -> None:
        real(path)
        synced.append("sync")

    monkeypatch.setattr(wal_sync, "sync_now", counted)
    monkeypatch.setattr(wal_sync, "DEFER_SECONDS", 30.0)
    led = Ledger(tmp_path / "l.sqlite")
    acct = [Account.analyst("a", Fraction(100), Fraction(0))]
    n = 5
    previous = None
    for _ in range(n):
        r = led.reserve(Cost(Fraction(1)), acct, actor="a")
        for _ in range(500):  # the reservation's worker done with its bookkeeping (else the release row's sync is
            if not wal_sync._running.get(led._file) or led._file in wal_sync._due:  # deferred behind it)
                break
            threading.Event().wait(0.01)
        if previous is not None:
            assert r.durable is not None
            r.durable.result(10)
            assert previous.done(), "the reservation's sync did not carry the release row before it"
        led.release(r, answer={"rows": [[1]]})
        previous = led._syncs[-1]
    t = time.monotonic()
    led.close()
    assert time.monotonic() - t < 10  # close began the waiting sync rather than waiting 30 s
    # one per reservation (an answer waits for it), each also carrying the release row before it, and one at the close
    # for the last release row (before session 20: one more per release row)
    assert len(synced) == n + 1
    with Ledger(tmp_path / "l.sqlite") as again:
        assert [x["status"] for x in again.reservations("a")] == ["released"] * n


def test_a_failed_deferred_sync_fails_for_everyone_who_joined(tmp_path: Path, disk: Disk) -> None:
    path = tmp_path / "l.sqlite"
    disk.hold(path)
    a, b = wal_sync.start(path, defer=True), wal_sync.start(path, defer=True)
    disk.fail = True
    disk.free.set()
    for f in (a, b):
        assert isinstance(f.exception(10), OSError)


def test_a_release_rows_sync_begins_after_its_commit(tmp_path: Path, disk: Disk) -> None:
    """Through the ledger: the release joins the deferred sync while another runs, and that sync begins after the
    release row was committed; closing the handle waits for it."""
    led = Ledger(tmp_path / "l.sqlite")
    r = led.reserve(Cost(Fraction(1)), [Account.analyst("a", Fraction(2), Fraction(0))], actor="a")
    assert r.durable is not None
    r.durable.result(10)
    disk.hold(led._file)  # a sync of another session's commit, still running
    led._db.set_trace_callback(lambda sql: disk.events.append("commit") if sql == "COMMIT" else None)
    led.release(r, answer={})
    assert disk.events[-1] == "commit"
    closed = threading.Thread(target=led.close)
    closed.start()
    closed.join(0.2)
    assert closed.is_alive(), "the handle closed before its release row's sync"
    disk.free.set()
    closed.join(10)
    assert disk.events[-2:] == ["commit", "sync"]


def test_a_forked_child_syncs_though_a_worker_held_the_lock_at_the_fork(tmp_path: Path) -> None:
    """A worker takes the lock after each sync; a fork at that moment left the child a lock nobody would release."""
    import os

    path = tmp_path / "l.sqlite"
    path.write_bytes(b"")
    with wal_sync._pool_lock:  # as a worker in its bookkeeping
        pid = os.fork()
        if pid == 0:  # the child: one sync, then out, whatever happens
            code = 1
            try:
                wal_sync.start(path).result(10)
                code = 0
            finally:
                os._exit(code)
    for _ in range(300):  # a hang guard: polls of a fixed sleep
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        threading.Event().wait(0.05)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        pytest.fail("the forked child never finished its sync (it waited for a lock held at the fork)")
    assert os.waitstatus_to_exitcode(status) == 0


def test_a_failed_fsync_fails_every_later_sync_of_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Review s20 M3: after one failed fsync, Linux may report a later fsync of the same file a success though the
    pages it could not write are gone, so a reservation synced after it could vanish with its answer already out. A
    failure is sticky: every later sync of the file fails without being tried (the ledger then withholds every charged
    answer, ReleaseError, until the process restarts); another file is unaffected."""
    path, other = tmp_path / "a.sqlite", tmp_path / "b.sqlite"
    for p in (path, other):
        p.write_bytes(b"x")
    calls: list[Path] = []

    def broken(p: Path) -> None:
        calls.append(p)
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(wal_sync, "sync_now", broken)
    with pytest.raises(OSError, match="Input/output"):
        wal_sync.start(path).result(30)
    monkeypatch.undo()  # the disk "recovers": a real fsync would now succeed
    try:
        for defer in (False, True):
            with pytest.raises(OSError, match="an earlier fsync"):
                wal_sync.start(path, defer=defer).result(30)
        assert calls == [path]  # not tried again
        wal_sync.start(other).result(30)  # another file syncs
    finally:
        wal_sync._failed.pop(path, None)


def test_release_rows_one_after_another_hand_no_wait_to_a_worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Session 24 (issue 16): each release row whose deferred sync nothing carried yet was handed to a pool worker that
    waited out DEFER_SECONDS (a submit and a thread's wake-up on the answer's path, ~0.09 ms an answer). Its deadline is
    now kept by the process's timer: the workers run syncs only, one per reservation and one at the close for the last
    release rows."""
    monkeypatch.setattr(wal_sync, "DEFER_SECONDS", 30.0)
    submitted: list[object] = []
    real = wal_sync._executor

    class Counting:
        def submit(self, fn: object, *args: object) -> object:
            submitted.append(fn)
            return real().submit(fn, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(wal_sync, "_executor", Counting)
    led = Ledger(tmp_path / "l.sqlite")
    acct = [Account.analyst("a", Fraction(100), Fraction(0))]
    n = 5
    for _ in range(n):
        r = led.reserve(Cost(Fraction(1)), acct, actor="a")
        assert r.durable is not None
        r.durable.result(10)
        for _ in range(500):  # the reservation's worker done with its bookkeeping: nothing of this file runs now
            if not wal_sync._running.get(led._file):
                break
            threading.Event().wait(0.01)
        led.release(r, answer={"rows": [[1]]})
    assert len(submitted) == n  # the reservations' syncs only (each carrying the release row before it)
    led.close()
    assert len(submitted) == n + 1  # and the last release rows', begun at the close


def test_a_process_that_ends_without_closing_its_ledger_syncs_its_last_release_rows(tmp_path: Path) -> None:
    """The deferred syncs' timer is a daemon thread: at interpreter exit a hook begins what it still waits for (the
    pool's waiting workers, joined at exit, did so before session 24), so release rows committed just before a process
    ends are synced then, not left to the OS."""
    import subprocess
    import sys
    import textwrap

    log = tmp_path / "syncs.txt"
    script = textwrap.dedent(
        f"""
        from fractions import Fraction
        from pathlib import Path
        from veil.store import wal_sync
        from veil.store.ledger import Account, Cost, Ledger

        real = wal_sync.sync_now
        def logged(path):
            real(path)
            with open({str(log)!r}, "a") as f:
                f.write("sync\\n")
        wal_sync.sync_now = logged
        wal_sync.DEFER_SECONDS = 600.0
        led = Ledger(Path({str(tmp_path / "l.sqlite")!r}))
        r = led.reserve(Cost(Fraction(1)), [Account.analyst("a", Fraction(2), Fraction(0))], actor="a")
        r.durable.result(10)
        led.release(r, answer={{}})
        with open({str(log)!r}, "a") as f:
            f.write("released\\n")
        # ends without led.close(): the release row's sync waits on the timer for 600 s
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert log.read_text().splitlines()[-2:] == ["released", "sync"]
