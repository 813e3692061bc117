"""The charge of a query is on disk before its answer leaves, and the fsync that puts it there runs off the write lock.

:meth:`Ledger.reserve` commits with ``synchronous=NORMAL`` and starts an fsync of the WAL in a worker thread
(:mod:`veil.store.wal_sync`); :meth:`Ledger.release` waits for it before writing the release row. These tests pin the
order of events (release never before the reservation's sync), a failed sync (answer withheld, charge kept, typed
error), that the sync really targets the ledger's WAL file, and that curator records still commit fully synced.
"""

from __future__ import annotations

import os
import threading
from fractions import Fraction
from pathlib import Path

import pytest

from tests.support.attack_world import build_world
from veil.errors import ReleaseError
from veil.store import wal_sync
from veil.store.ledger import Account, Cost, Ledger
from veil.store.records import ReleasedStatistic

STAT = ReleasedStatistic("count(*)", "discrete_laplace", Fraction(1, 10), 1.0, 10.0, 3.0, 30.0, ())
ALICE = Account.analyst("alice", Fraction(10), Fraction(1, 10**5))


def test_release_waits_for_the_reservations_sync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The release row (and with it the answer) comes only after the reservation's fsync has finished."""
    gate, events = threading.Event(), []
    real = wal_sync.sync_now

    def slow_sync(path: Path) -> None:
        gate.wait(30)
        real(path)
        events.append("synced")

    led = Ledger(tmp_path / "l.sqlite")
    monkeypatch.setattr(wal_sync, "sync_now", slow_sync)
    r = led.reserve(Cost(Fraction(1)), [ALICE], actor="alice")
    released = threading.Event()

    def release() -> None:
        led.release(r, answer={"rows": [[3]]}, statistics=[STAT])
        events.append("released")
        released.set()

    t = threading.Thread(target=release)
    t.start()
    early = released.wait(1.0)  # without the wait, the release is done in milliseconds
    gate.set()
    t.join(30)
    monkeypatch.setattr(wal_sync, "sync_now", real)
    led.close()
    assert not early, "the release was written before the reservation's fsync finished"
    assert events[:2] == ["synced", "released"], events


def test_a_failed_sync_withholds_the_answer_and_keeps_the_charge(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the query path: the answer is refused (ReleaseError, 55000), the ε stays charged, no release row."""
    from veil.policy import load_policy
    from veil.proxy.session import QuerySession

    world = build_world(tmp_path / "w")

    def broken(path: Path) -> None:
        raise OSError(5, "Input/output error")

    with QuerySession(load_policy(world.policy), "api") as s:
        before = s.budget().spent
        monkeypatch.setattr(wal_sync, "sync_now", broken)
        with pytest.raises(ReleaseError, match="could not be synced") as err:
            s.execute("SELECT COUNT(*) FROM people", epsilon=0.5)
        monkeypatch.undo()
        assert err.value.sqlstate == "55000"
        assert "answer is withheld" in err.value.message
        spent = s.budget().spent - before
    assert spent == Fraction(1, 2)
    with Ledger(world.ledger) as led:
        rows = led.reservations("api")
        assert [r["status"] for r in rows] == ["reserved"]
        assert led.list_releases("query") == []


def test_the_sync_targets_the_ledgers_wal_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fsync started by a reservation is of the ledger's ``-wal`` file (the one its commit wrote)."""
    synced: list[str] = []
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    led = Ledger(tmp_path / "l.sqlite")
    monkeypatch.setattr(os, "fsync", spy)
    r = led.reserve(Cost(Fraction(1)), [ALICE], actor="alice")
    assert r.durable is not None
    r.durable.result(30)
    monkeypatch.undo()
    led.close()
    assert synced == [str((tmp_path / "l.sqlite-wal").resolve())]


def test_curator_records_commit_fully_synced_and_queries_do_not(tmp_path: Path) -> None:
    """A publication record is durable when ``record`` returns (synchronous=FULL, 2); a reservation is not on its own
    (NORMAL, 1) and carries the fsync that makes it durable."""
    with Ledger(tmp_path / "l.sqlite") as led:
        r = led.reserve(Cost(Fraction(1)), [ALICE], actor="alice")
        assert led._db.execute("PRAGMA synchronous").fetchone()[0] == 1
        assert r.durable is not None
        led.record(kind="publication", method="mondrian", params={}, metrics={}, table="t")
        assert led._db.execute("PRAGMA synchronous").fetchone()[0] == 2
        led.release(r, answer={"rows": []}, statistics=[])
        assert led._db.execute("PRAGMA synchronous").fetchone()[0] == 1
        assert led.spent(ALICE.key) == Cost(Fraction(1))
