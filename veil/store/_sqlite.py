"""The one way Veil opens its SQLite files (ledger, credentials): autocommit, one busy timeout."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

__all__ = ["BUSY_TIMEOUT_S", "connect", "use_wal"]

#: Seconds a transaction waits for another process's write lock before giving up.
BUSY_TIMEOUT_S = 30.0


def connect(path: str | Path, *, check_same_thread: bool = True) -> sqlite3.Connection:
    """Open ``path`` in autocommit mode (transactions are explicit) with the busy timeout set both ways."""
    con = sqlite3.connect(path, isolation_level=None, check_same_thread=check_same_thread, timeout=BUSY_TIMEOUT_S)
    con.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
    return con


def use_wal(con: sqlite3.Connection) -> None:
    """Put the file in WAL mode (once: the mode is stored in the file).

    Switching the journal mode needs the file to itself, and SQLite answers "database is locked" at once,
    without its busy handler, when another connection opens it at the same moment (``veil serve
    --processes N`` starts N workers on one ledger): retry within the busy timeout."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            if str(con.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
                con.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)
