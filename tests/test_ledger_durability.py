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


def test_a_power_loss_at_any_moment_keeps_the_charge_of_every_answer_that_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a power loss leaves is, at most, what the last fsync put on disk: each fsync here also copies the ledger's
    files as they are then (the disk after a loss at that moment; a copy taken while a commit appends to the WAL is a
    torn write, which SQLite's recovery drops). After every answer, and after a refusal that kept its charge, the
    latest copy must hold that query's charge: never an answer without its ε on disk, whatever the release rows'
    deferred syncs (one per DEFER_SECONDS, so most answers here leave before their release row is synced)."""
    import shutil
    import sqlite3

    from veil.errors import QueryFailed
    from veil.policy import load_policy
    from veil.proxy import pipeline
    from veil.proxy.session import QuerySession

    world = build_world(tmp_path / "w")
    real = wal_sync.sync_now
    copies: list[Path] = []
    lock = threading.Lock()

    def sync_and_copy(path: Path) -> None:
        real(path)
        with lock:
            target = tmp_path / f"disk{len(copies)}"
            target.mkdir()
            for f in (Path(path), Path(f"{path}-wal")):
                if f.exists():
                    shutil.copyfile(f, target / f.name)
            copies.append(target / Path(path).name)

    def charged_on_disk() -> tuple[Fraction, set[str]]:
        """The analyst's spend and reservation ids in the latest copy (nothing if no fsync ran yet)."""
        with lock:
            if not copies:
                return Fraction(0), set()
            scratch = tmp_path / f"open{len(copies)}"
            shutil.copytree(copies[-1].parent, scratch)
        db = sqlite3.connect(scratch / copies[-1].name)
        try:
            spent = db.execute("SELECT epsilon_spent FROM accounts WHERE account = 'analyst:api'").fetchone()
            ids = {r[0] for r in db.execute("SELECT id FROM reservations WHERE status IN ('reserved', 'released')")}
        finally:
            db.close()
        return (Fraction(spent[0]) if spent else Fraction(0)), ids

    monkeypatch.setattr(wal_sync, "sync_now", sync_and_copy)
    left = Fraction(0)
    with QuerySession(load_policy(world.policy), "api") as s:
        for i, sql in enumerate(
            ["SELECT COUNT(*) FROM people", "SELECT COUNT(*) FROM people WHERE age > 30", "SELECT COUNT(*) FROM people"] * 3
        ):
            eps = Fraction(1, 100 + i)  # (another ε each time: no answer from the cache)
            if i == 4:  # an engine failure after the charge: the refusal keeps it, and leaves only once it is on disk
                monkeypatch.setattr(pipeline, "noised", _boom)
                with pytest.raises(QueryFailed):
                    s.execute(sql, epsilon=eps)
                monkeypatch.undo()
                monkeypatch.setattr(wal_sync, "sync_now", sync_and_copy)
            else:
                answer = s.execute(sql, epsilon=eps)
                assert answer.release_id is not None
            left += eps
            spent, _ids = charged_on_disk()
            assert spent >= left, f"after query {i}, the disk holds ε {spent} of the {left} charged for what left"
    with Ledger(world.ledger) as led:
        assert len(led.reservations("api")) == 9


def _boom(*args: object) -> object:
    from veil.errors import QueryFailed

    raise QueryFailed("the engine failed after the charge", hint="(test)")
