"""Making a WAL-mode SQLite file durable off its write lock: an fsync of its ``-wal`` file in a worker thread.

Under ``synchronous=FULL`` SQLite fsyncs the WAL inside ``COMMIT``, with the write lock held, so the caller waits for
the disk and every other session waits behind it. A commit under ``synchronous=NORMAL`` has already written its WAL
frames to the file (the OS holds them) but not synced them. :func:`start` fsyncs the file from a worker thread: the
wait overlaps whatever the caller does next (the ledger: running the query), and no lock is held meanwhile.

Why this is as durable as ``FULL`` for every commit that returned before :func:`start` was called:

* fsync(2) flushes every written page of the file, whoever wrote it and through whichever descriptor;
* WAL frames carry a chained checksum, so recovery keeps a prefix of the commits: a synced commit keeps every commit
  before it;
* a checkpoint under ``NORMAL`` syncs the WAL before copying it and the database file after, and the WAL is restarted
  only after that, so a commit whose frames were checkpointed in the meantime is already in the synced database
  file (the fallback below syncs that file when the WAL file is gone).

A sync nothing waits for (the ledger's release rows: the answer has left) is *deferred*: it joins the one deferred
sync of that file, which is carried by the next sync begun without deferral (the next query's reservation: one fsync
for both), or else begins :data:`DEFER_SECONDS` after the first commit that joined it (at once on :func:`flush`, which
a closing ledger calls), or, when it was deferred while another sync of the file ran, as that one ends — in every case
after the commit of everyone who joined it, since each joins only once committed. So release rows share
fsyncs, under many concurrent queries and one query after another alike, instead of adding one fsync per query; a
reservation's sync is never deferred (its answer waits for it).

The deadlines are kept by one timer thread per process (:func:`_timer`), which sleeps until the earliest one: joining a
deferred sync only notes its deadline, and wakes the timer only when it sleeps without one (idle). One query after
another, the timer is rarely idle when a release row joins, so a release wakes no thread (session 24: handing each
release row's deferral to a pool worker that waited out its 50 ms cost the answer's thread ~0.09 ms).
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

__all__ = ["DEFER_SECONDS", "flush", "start", "sync_now"]

log = logging.getLogger("veil.store.wal_sync")

_pool: ThreadPoolExecutor | None = None
_pool_pid = 0
_pool_lock = threading.Lock()
_running: dict[Path, int] = {}  # per file, the syncs submitted and not ended (guarded by _pool_lock)
_deferred: dict[Path, Future[None]] = {}  # per file, the deferred sync not begun yet
#: per file whose deferred sync no running sync will begin: when the timer begins it (``time.monotonic()``; at once
#: after :func:`flush`)
_due: dict[Path, float] = {}
_timer_wake = threading.Lock()  # held while nobody woke the timer; released to wake it (see _timer)
_timer_until = math.inf  # when the timer wakes next (``time.monotonic()``; inf: only when woken): an earlier deadline wakes it
_timer_pid = 0  # the process the timer thread runs in (none after a fork)
#: Per file, the first fsync failure: every later sync of the file fails with it, for the life of the process. After a
#: failed fsync, Linux may report a later one of the same file a success though the pages it could not write are lost
#: (review s20 M3, "fsyncgate"): a reservation synced after that could vanish with them, its answer already out. So
#: the ledger stops releasing (each charged answer is withheld, ReleaseError) until the process is restarted.
_failed: dict[Path, BaseException] = {}

#: The longest a deferred sync waits for more commits to join it when no other sync of its file is running: the
#: window in which a power loss can lose a release row that no later sync covered (never a charge: a reservation's
#: sync is never deferred). 50 ms: a few queries' time, so the next one's reservation usually carries it.
DEFER_SECONDS = 0.05


def _executor() -> ThreadPoolExecutor:
    """The process's sync workers (made again in a forked child: threads do not survive a fork). Holds ``_pool_lock``."""
    global _pool, _pool_pid
    if _pool is None or _pool_pid != os.getpid():
        _pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="veil-wal-sync")
        _pool_pid = os.getpid()
        _running.clear()  # (a parent's syncs do not run in this child)
        _deferred.clear()
        _due.clear()
    return _pool


def _forget_the_parents_syncs() -> None:
    """In a forked child: the parent's workers, timer and syncs are not here, and a worker may have held the lock at
    the fork (it takes it after each sync), which would then never be released."""
    global _pool, _pool_lock, _timer_wake, _timer_until, _timer_pid
    _pool_lock = threading.Lock()
    _pool = None
    _running.clear()
    _deferred.clear()
    _due.clear()
    _timer_wake, _timer_until, _timer_pid = threading.Lock(), math.inf, 0


os.register_at_fork(after_in_child=_forget_the_parents_syncs)


def sync_now(db_path: Path) -> None:
    """fsync ``db_path``'s WAL file, or the database file itself when there is no WAL file (checkpointed and removed:
    its frames are then in the database file). Raises ``OSError`` when neither can be synced."""
    for target in (Path(f"{db_path}-wal"), Path(db_path)):
        try:
            fd = os.open(target, os.O_RDONLY)
        except FileNotFoundError:
            continue
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        return
    raise FileNotFoundError(f"neither {db_path} nor its WAL file exists")


def start(db_path: Path, *, defer: bool = False) -> Future[None]:
    """Begin :func:`sync_now` in a worker thread; the future holds its outcome (``OSError`` if it failed).

    Call it once the commit to make durable has returned. ``defer``: join the file's deferred sync (see above) instead
    of beginning one now."""
    with _pool_lock:
        failed = _failed.get(db_path)
        if failed is not None:
            refused: Future[None] = Future()
            refused.set_exception(
                OSError(f"an earlier fsync of {db_path} failed ({failed}); restart the process once the disk is sound")
            )
            return refused
        pool = _executor()
        if defer:
            deferred = _deferred.get(db_path)
            if deferred is not None:
                return deferred
            if _running.get(db_path):
                # a worker of this file begins it when its sync ends, if none carries it
                deferred = _deferred[db_path] = Future()
                return deferred
            _start_timer()  # (before anything is noted: a timer that cannot start refuses, as a refused submit)
            deferred = _deferred[db_path] = Future()
            due = _due[db_path] = time.monotonic() + DEFER_SECONDS
            if due < _timer_until:  # (one query after another, the timer mostly sleeps until an earlier deadline)
                _wake_timer()
            return deferred
        future: Future[None] = Future()
        # a deferred sync not begun yet is carried by this one, which begins after it is taken here, so after the
        # commit of everyone who joined it: queries one after another then sync their release rows with the next
        # query's reservation, not on their own
        carried = _deferred.get(db_path)
        pool.submit(_sync, db_path, future, carried)
        if carried is not None:
            del _deferred[db_path]
            _due.pop(db_path, None)  # (the timer has nothing to begin for it now)
        _running[db_path] = _running.get(db_path, 0) + 1  # (after: a refused submit leaves no count behind)
    return future


def _wake_timer() -> None:
    """Make the timer look at the deadlines now (holds ``_pool_lock``)."""
    try:
        _timer_wake.release()
    except RuntimeError:  # woken already, not asleep yet
        pass


def _start_timer() -> None:
    """The process's timer thread, started once per process (holds ``_pool_lock``)."""
    global _timer_pid, _timer_until, _timer_wake
    if _timer_pid == os.getpid():
        return
    wake = threading.Lock()
    wake.acquire()
    threading.Thread(target=_timer, args=(wake,), name="veil-wal-sync-timer", daemon=True).start()
    _timer_wake, _timer_pid, _timer_until = wake, os.getpid(), math.inf


def _timer(wake: threading.Lock) -> None:
    """Begin each deferred sync that no running sync will begin, at its deadline (or at once once :func:`flush` made
    it due): sleep until the earliest deadline, or, with none, until a new one wakes it. A daemon thread (it keeps no
    process alive): at interpreter exit :func:`_begin_every_deferred_sync` begins what it still waits for."""
    global _timer_until
    while True:
        unpooled: list[tuple[Path, Future[None]]] = []
        with _pool_lock:
            if wake is not _timer_wake:
                return  # (a fork replaced this process's timer)
            now = time.monotonic()
            for path in [p for p, at in _due.items() if at <= now]:
                del _due[path]
                future = _deferred.pop(path, None)
                if future is None:
                    continue
                try:
                    _executor().submit(_sync, path, future)
                except Exception:  # no worker can start (interpreter shutdown, the thread limit): synced here
                    unpooled.append((path, future))
                _running[path] = _running.get(path, 0) + 1
            _timer_until = min(_due.values(), default=math.inf)
            until = _timer_until
        for path, future in unpooled:
            _sync(path, future)
        if not unpooled:
            wake.acquire(timeout=-1 if until == math.inf else max(0.0, until - time.monotonic()))


def _begin_every_deferred_sync() -> None:
    """At interpreter exit (before the sync workers are joined): begin every deferred sync the timer would begin, as
    the pool's waiting workers did before session 24, so a process that ends without closing its ledger still syncs its
    last release rows."""
    with _pool_lock:
        due = list(_due)
        _due.clear()
        begun = [(p, f) for p in due if (f := _deferred.pop(p, None)) is not None]
        for path, _future in begun:
            _running[path] = _running.get(path, 0) + 1
    for path, future in begun:
        _sync(path, future)


# (threading's own exit hook, as concurrent.futures uses: run before the pool's workers are joined; atexit is later)
getattr(threading, "_register_atexit", lambda fn: None)(_begin_every_deferred_sync)


def flush(db_path: Path) -> None:
    """Begin ``db_path``'s deferred sync now, if one waits for its deadline (a ledger closing waits for it)."""
    with _pool_lock:
        if db_path in _due:
            _due[db_path] = 0.0
            _wake_timer()


def _sync(db_path: Path, future: Future[None] | None, carried: Future[None] | None = None) -> None:
    """Sync ``db_path`` for ``future`` (and ``carried``, a deferred sync this one took over); then, while a sync was
    deferred meanwhile, for it (it begins now: after the commit of everyone who joined it)."""
    while True:
        waiting = [f for f in (future, carried) if f is not None and f.set_running_or_notify_cancel()]
        carried = None
        if waiting:
            try:
                sync_now(db_path)
            except BaseException as exc:  # an OSError; anything else reaches the waiters all the same
                with _pool_lock:
                    _failed.setdefault(db_path, exc)
                log.error("fsync of %s failed (%s): no charged answer is released from this ledger until restart", db_path, exc)
                for f in reversed(waiting):  # (the carried one first: done once the one waited for is)
                    f.set_exception(exc)
            else:
                for f in reversed(waiting):
                    f.set_result(None)
        with _pool_lock:
            # a deferred sync the timer will begin (``_due``) is left to it; one without was deferred while this one
            # ran, and begins now
            future = None if db_path in _due else _deferred.pop(db_path, None)
            if future is None:
                left = _running.get(db_path, 1) - 1
                if left > 0:
                    _running[db_path] = left
                else:
                    _running.pop(db_path, None)
                return
