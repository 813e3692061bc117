"""A reader opened while another process briefly holds the warehouse for writing waits for it (red team s68 F2's fix
raises the warehouse's mark at each analyst session's start and end: a write of ~0.1 s in that process); one held past
``READ_LOCK_WAIT`` is refused with a PolicyError naming the file, never a raw engine error. Deterministic: the holder
signals when it holds the file and holds it for a fixed time."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from veil.errors import PolicyError
from veil.store import warehouse

_HOLD = """
import sys, time, duckdb
con = duckdb.connect(sys.argv[1])
con.execute("CREATE OR REPLACE TABLE held AS SELECT 1 AS x")
print("held", flush=True)
time.sleep(float(sys.argv[2]))
con.close()
"""


def _hold(path: Path, seconds: float) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", _HOLD, str(path), str(seconds)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


@pytest.fixture
def database(tmp_path: Path) -> Path:
    path = tmp_path / "w.duckdb"
    duckdb.connect(str(path)).close()
    return path


def test_a_reader_waits_for_a_brief_write_by_another_process(database: Path) -> None:
    proc = _hold(database, 0.6)
    try:
        started = time.monotonic()
        con = warehouse._connect_read_only(database)
        waited = time.monotonic() - started
        assert con.execute("SELECT x FROM held").fetchall() == [(1,)]
        con.close()
    finally:
        proc.wait(timeout=30)
        proc.stdout.close()  # type: ignore[union-attr]
    assert waited < warehouse.READ_LOCK_WAIT


def test_a_write_held_past_the_wait_is_a_policy_error(database: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(warehouse, "READ_LOCK_WAIT", 0.3)
    proc = _hold(database, 3.0)
    try:
        with pytest.raises(PolicyError, match="holds it for writing") as info:
            warehouse._connect_read_only(database)
        assert str(database) in str(info.value)
    finally:
        proc.kill()
        proc.wait(timeout=30)
        proc.stdout.close()  # type: ignore[union-attr]
