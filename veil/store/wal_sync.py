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
fsyncs, under many concurrent queries and one query after another alike, instead of adding one fsync (and a worker's
wake-up) per query; a reservation's sync is never deferred (its answer waits for it).
"""

from __future__ import annotations

import logging
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

__all__ = ["DEFER_SECONDS", "flush", "start", "sync_now"]

log = logging.getLogger("veil.store.wal_sync")

_pool: ThreadPoolExecutor | None = None
_pool_pid = 0
_pool_lock = threading.Lock()
_running: dict[Path, int] = {}  # per file, the syncs submitted and not ended (guarded by _pool_lock)
_deferred: dict[Path, Future[None]] = {}  # per file, the deferred sync not begun yet
_wake: dict[Path, threading.Event] = {}  # per file, ends the wait of the worker that will begin the deferred sync
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
        _wake.clear()
    return _pool


def _forget_the_parents_syncs() -> None:
    """In a forked child: the parent's workers and syncs are not here, and a worker may have held the lock at the
    fork (it takes it after each sync), which would then never be released."""
    global _pool, _pool_lock
    _pool_lock = threading.Lock()
    _pool = None
    _running.clear()
    _deferred.clear()
    _wake.clear()


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
            deferred = _deferred[db_path] = Future()
            if _running.get(db_path):
                return deferred  # a worker of this file begins it when its sync (or its wait) ends, if none carries it
            wake = threading.Event()
            pool.submit(_sync, db_path, None, wake)
            _wake[db_path] = wake
            _running[db_path] = _running.get(db_path, 0) + 1
            return deferred
        future: Future[None] = Future()
        # a deferred sync not begun yet is carried by this one, which begins after it is taken here, so after the
        # commit of everyone who joined it: queries one after another then sync their release rows with the next
        # query's reservation, not on their own
        carried = _deferred.get(db_path)
        pool.submit(_sync, db_path, future, None, carried)
        if carried is not None:
            del _deferred[db_path]
        _running[db_path] = _running.get(db_path, 0) + 1  # (after: a refused submit leaves no count behind)
    return future


def flush(db_path: Path) -> None:
    """Begin ``db_path``'s deferred sync now, if one waits for :data:`DEFER_SECONDS` (a ledger closing waits for it)."""
    with _pool_lock:
        wake = _wake.get(db_path)
    if wake is not None:
        wake.set()


def _sync(
    db_path: Path, future: Future[None] | None, wake: threading.Event | None = None, carried: Future[None] | None = None
) -> None:
    """Sync ``db_path`` for ``future`` (and ``carried``, a deferred sync this one took over); then, while a sync was
    deferred meanwhile, for it (it begins now: after the commit of everyone who joined it). With ``wake``, first wait
    :data:`DEFER_SECONDS` (or until :func:`flush`), then begin the deferred sync (``future`` is None; there is none
    left when another sync carried it meanwhile)."""
    if wake is not None:
        wake.wait(DEFER_SECONDS)
        with _pool_lock:
            if _wake.get(db_path) is wake:
                del _wake[db_path]
            future = _deferred.pop(db_path, None)
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
            # a deferred sync whose worker waits for more commits (``_wake``) is left to it; one without was deferred
            # while this one ran, and begins now
            future = None if db_path in _wake else _deferred.pop(db_path, None)
            if future is None:
                left = _running.get(db_path, 1) - 1
                if left > 0:
                    _running[db_path] = left
                else:
                    _running.pop(db_path, None)
                return
