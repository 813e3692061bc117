"""The one way Veil opens its SQLite files (ledger, credentials): autocommit, one busy timeout."""

from __future__ import annotations

import sqlite3
from pathlib import Path

__all__ = ["BUSY_TIMEOUT_S", "connect"]

#: Seconds a transaction waits for another process's write lock before giving up.
BUSY_TIMEOUT_S = 30.0


def connect(path: str | Path, *, check_same_thread: bool = True) -> sqlite3.Connection:
    """Open ``path`` in autocommit mode (transactions are explicit) with the busy timeout set both ways."""
    con = sqlite3.connect(path, isolation_level=None, check_same_thread=check_same_thread, timeout=BUSY_TIMEOUT_S)
    con.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
    return con
