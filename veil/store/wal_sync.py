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
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

__all__ = ["start", "sync_now"]

_pool: ThreadPoolExecutor | None = None
_pool_pid = 0
_pool_lock = threading.Lock()


def _executor() -> ThreadPoolExecutor:
    """The process's sync workers (made again in a forked child: threads do not survive a fork)."""
    global _pool, _pool_pid
    with _pool_lock:
        if _pool is None or _pool_pid != os.getpid():
            _pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="veil-wal-sync")
            _pool_pid = os.getpid()
        return _pool


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


def start(db_path: Path) -> Future[None]:
    """Begin :func:`sync_now` in a worker thread; the future holds its outcome (``OSError`` if it failed)."""
    return _executor().submit(sync_now, db_path)
