"""A stale copy of the warehouse's ledger is refused: the warehouse keeps a high-water mark of its history (review s21
X2).

The binding (tests/test_ledger_binding.py) compares identities: a copy of the bound ledger (a backup, a ``cp``) has the
same identity, and one taken before a publication without a DP guarantee reopened the population to a second one (s66
F7's attack through a copy) and set every budget back. Now the warehouse records, at every curator step that writes it
(binding, ``write_table``/``veil ingest``, a publication's commit and its recovery, a retraction, ``veil serve``'s
start), the latest reservation
and release its ledger holds (random ids, taken after the ledger's commit was synced), and every way in refuses a ledger
that lacks either (``LedgerMismatch``, F0000, a hint) before anything is read, charged or written. A ledger *ahead* of
the mark (queries answered since the last curator step, a crash between the ledger's commit and the warehouse's) is
the warehouse's own ledger and is accepted. Deterministic: no false failures.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.test_ledger_binding import ENTRIES, _copy, _people, _publish, _query, _spent, _world, _write_policy
from veil.errors import LedgerMismatch, NonDPReleaseRefused


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _world(tmp_path_factory.mktemp("template"))


@pytest.fixture(scope="module")
def unpublished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A warehouse with ``people`` and bob's charge, nothing published yet."""
    import veil as veil_api
    from veil.policy import load_policy
    from veil.store.warehouse import write_table

    base = tmp_path_factory.mktemp("unpublished")
    path = _write_policy(base, "ledger.sqlite")
    write_table(load_policy(path), "people", _people())
    with veil_api.connect(path, analyst="bob") as db:
        db.sql("SELECT COUNT(*) FROM people", epsilon=1.0)
    return path


def _ledger(path: Path) -> Path:
    from veil.policy import load_policy

    return load_policy(path).ledger_path


def _backup(path: Path, name: str = "backup.sqlite") -> Path:
    """The curator's backup of the ledger (SQLite's online backup: the WAL's commits included, the identity kept)."""
    src, dst = sqlite3.connect(_ledger(path)), sqlite3.connect(path.parent / name)
    try:
        src.backup(dst)
    finally:
        src.close()
        dst.close()
    return path.parent / name


def _restore(path: Path, backup: Path, how: str) -> Path:
    """Bring the backup back: ``repoint`` ([ledger] path names it) or ``in_place`` (copied over the ledger file the
    policy names); returns the file the policy now names."""
    if how == "repoint":
        _write_policy(path.parent, backup.name)
        return backup
    own = _ledger(path)
    for side in (Path(f"{own}-wal"), Path(f"{own}-shm")):
        side.unlink(missing_ok=True)
    shutil.copyfile(backup, own)
    return own


def _retract(path: Path) -> None:
    from veil.policy import load_policy
    from veil.store.catalog import retract

    retract(load_policy(path), "pub")


def _ingest(path: Path) -> None:
    from veil.policy import load_policy
    from veil.store.warehouse import write_table

    write_table(load_policy(path), "people", _people(81), replace=True)


def _move_then_retract(path: Path) -> None:
    """``veil move-ledger`` (the backup predates it), the policy repointed, then a retraction on the moved ledger."""
    from veil.policy import load_policy
    from veil.store.binding import move_ledger

    move_ledger(load_policy(path), path.parent / "moved.sqlite")
    _write_policy(path.parent, "moved.sqlite")
    _retract(path)


def _serve_start(path: Path) -> None:
    """What ``veil serve`` (and ``veil ingest``) runs before it listens: the bounded copies' preparation."""
    from veil.policy import load_policy
    from veil.proxy.bounding import prepare

    prepare(load_policy(path))


#: What happens after the backup was taken: each leaves the warehouse's mark past the backup. ``publication`` runs on
#: the world without one (the backup lacks the population's one release without a DP guarantee: s66 F7's attack).
AFTER_BACKUP = {
    "publication": _publish,
    "queries_then_ingest": lambda p: (_query(p), _query(p), _ingest(p)),  # spent budget, then a curator step
    "queries_then_serve_start": lambda p: (_query(p), _serve_start(p)),  # spent budget, then a server (re)start
    "retraction": _retract,
    "move_ledger": _move_then_retract,
}


@pytest.mark.slow
@pytest.mark.parametrize("how", ["repoint", "in_place"])
@pytest.mark.parametrize("after", sorted(AFTER_BACKUP))
def test_every_entry_point_refuses_a_stale_copy_of_the_ledger(
    template: Path, unpublished: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, after: str, how: str
) -> None:
    """A backup of the bound ledger, then history the warehouse marked (a publication without a DP guarantee, analysts'
    charges followed by a table write, a retraction, a move and a retraction on the moved ledger), then the backup
    restored (repointed, or copied over the file in use): every entry point refuses it (LedgerMismatch, F0000, "stale",
    a hint), and the restored file records nothing."""
    path = _copy(unpublished if after == "publication" else template, tmp_path / "w")
    backup = _backup(path)
    AFTER_BACKUP[after](path)
    restored = _restore(path, backup, how)
    before = _spent(restored)
    for name, entry in ENTRIES.items():
        args = (path, monkeypatch) if name == "serve" else (path,)
        with pytest.raises(LedgerMismatch) as caught:
            entry(*args)
        told = f"{caught.value} {caught.value.hint}"
        assert caught.value.sqlstate == "F0000" and "stale" in told and "backup" in told, (name, told)
    assert _spent(restored) == before


@pytest.mark.slow
def test_the_s66_f7_attack_through_a_backup_is_refused(tmp_path: Path) -> None:
    """The attack itself: a backup taken before the population's one release without a DP guarantee, restored after it;
    the second release is refused (LedgerMismatch) and nothing is recorded anywhere."""
    import veil as veil_api
    from veil.policy import load_policy
    from veil.store.warehouse import write_table

    base = tmp_path / "w"
    base.mkdir()
    path = _write_policy(base, "ledger.sqlite")
    write_table(load_policy(path), "people", _people())
    with veil_api.connect(path, analyst="bob") as db:
        db.sql("SELECT COUNT(*) FROM people", epsilon=1.0)
    backup = _backup(path)
    _kanon(path, "pub1")
    with pytest.raises(NonDPReleaseRefused):  # one release without a DP guarantee per population, ever
        _kanon(path, "pub2")
    _restore(path, backup, "repoint")
    before = _spent(backup)
    with pytest.raises(LedgerMismatch, match="stale"):
        _kanon(path, "pub2")
    assert _spent(backup) == before


@pytest.mark.slow
def test_a_ledger_ahead_of_the_mark_is_the_warehouses(template: Path, tmp_path: Path) -> None:
    """The mark lags the ledger, never leads it: queries answered after the last curator step, and a crash between a
    release's commit in the ledger and the warehouse's step (simulated: a release recorded in the ledger alone), leave
    a ledger ahead of the mark, which every entry point accepts; its next curator step raises the mark to it."""
    from veil.policy import load_policy
    from veil.store.binding import open_ledger
    from veil.store.warehouse import read_ledger_mark

    path = _copy(template, tmp_path / "w")
    _query(path)
    with open_ledger(load_policy(path)) as led:
        rid = led.record(kind="retraction", method="retract", params={"publication": "none"}, metrics={}, table="gone")
    mark = read_ledger_mark(load_policy(path))
    assert mark is not None and mark.release_id != rid
    _query(path)
    _ingest(path)
    mark = read_ledger_mark(load_policy(path))
    assert mark is not None and mark.release_id == rid  # (the second query was answered from the cache: no release)
    with open_ledger(load_policy(path)) as led:
        assert led.lacks(mark) is None and led.history_mark() == mark


def _kanon(path: Path, output: str) -> None:
    from veil.generators.transaction import publish
    from veil.policy import load_policy

    request = {"table": "people", "output": output, "algorithm": "mondrian", "k": 5, "qi": ["age", "sex"], "seed": 0}
    publish(load_policy(path), "kanon", request, progress=False)


def _probe(path: Path) -> bool:
    """Whether the policy's ledger is refused as stale (a query's open; nothing else refuses here)."""
    from veil.policy import load_policy
    from veil.store.binding import open_ledger

    try:
        open_ledger(load_policy(path)).close()
    except LedgerMismatch as exc:
        assert "stale" in str(exc)
        return True
    return False


_ASKED = [0]


def _new_query(path: Path) -> None:
    """A query never asked before (another ε each time): charged and released, never answered from the cache."""
    import veil as veil_api

    _ASKED[0] += 1
    with veil_api.connect(path, analyst="bob") as db:
        db.sql("SELECT COUNT(*) FROM people", epsilon=0.01 * _ASKED[0])


STEPS = {"query": _new_query, "ingest": _ingest, "retract": _retract, "serve_start": _serve_start}


@pytest.mark.slow
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    before=st.lists(st.sampled_from(sorted(STEPS)), max_size=2),
    after=st.lists(st.sampled_from(sorted(STEPS)), max_size=3),
)
def test_a_backup_is_refused_exactly_when_the_warehouse_marked_history_after_it(
    template: Path, tmp_path_factory: pytest.TempPathFactory, before: list[str], after: list[str]
) -> None:
    """Any run of queries, table writes, retractions and server starts, a backup, any further run, then the backup
    restored in place: refused exactly when a step after the backup that raises the mark (a table write, a retraction,
    a server start) came after
    (or, for a retraction, is) a new reservation or release; otherwise the restored file is the ledger as the warehouse
    last saw it (the charges of queries answered since the last curator step are the ones a backup can lose,
    docs/ledger.md). A retraction needs a live publication: the template's, retracted once."""
    path = _copy(template, tmp_path_factory.mktemp("run") / "w")
    retracted = False

    def run(step: str) -> bool:
        nonlocal retracted
        if step == "retract":
            if retracted:
                return False
            retracted = True
        STEPS[step](path)
        return True

    for step in before:
        run(step)
    backup = _backup(path)
    new_history = False  # a reservation or release the backup lacks
    stale = False
    for step in after:
        if not run(step):
            continue
        if step in ("query", "retract"):
            new_history = True
        if step in ("ingest", "retract", "serve_start") and new_history:
            stale = True
    _restore(path, backup, "in_place")
    assert _probe(path) == stale, (before, after)


@pytest.mark.slow
def test_a_mark_that_cannot_be_written_lags_and_bricks_nothing(
    template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A retraction or a server start while another process holds the warehouse (simulated: its writer refused) still
    completes — the retraction recorded and the table gone from the mirror — and leaves the mark where it was: the
    ledger is ahead of it and accepted, and the next step that can write the warehouse raises it."""
    from veil.errors import PolicyError
    from veil.policy import load_policy
    from veil.store import warehouse
    from veil.store.publications import published_tables

    path = _copy(template, tmp_path / "w")
    before = warehouse.read_ledger_mark(load_policy(path))

    real = warehouse.writer
    own = load_policy(path).database_path

    def held(target: object) -> object:
        if warehouse._db_path(target) == own:  # type: ignore[arg-type]
            raise PolicyError("cannot open the warehouse for writing: held by another process")
        return real(target)  # type: ignore[arg-type]

    with monkeypatch.context() as patch:
        patch.setattr(warehouse, "writer", held)
        _retract(path)
        _new_query(path)
        _serve_start(path)
    assert "pub" not in published_tables(load_policy(path))
    assert warehouse.read_ledger_mark(load_policy(path)) == before
    assert not _probe(path)
    _serve_start(path)
    assert warehouse.read_ledger_mark(load_policy(path)) != before


def test_the_remembered_mark_follows_every_write_of_another_process(unpublished: Path, tmp_path: Path) -> None:
    """``read_ledger_mark`` remembers the last mark per warehouse file while the file and its WAL are unchanged (a
    DuckDB connection per ledger open cost ~18 ms of CPU): a mark raised by another process (a curator step, ``veil
    ingest``) is read at this process's next open, and a stale copy is then refused here too."""
    import subprocess
    import sys

    from veil.policy import load_policy
    from veil.store.warehouse import read_ledger_mark

    path = _copy(unpublished, tmp_path / "w")
    backup = _backup(path)
    before = read_ledger_mark(load_policy(path))
    assert read_ledger_mark(load_policy(path)) == before  # remembered
    # in another process: a charge after the backup, then a curator step that marks it
    script = (
        "import sys, pandas as pd\n"
        "import veil\n"
        "from veil.policy import load_policy\n"
        "from veil.store.warehouse import write_table\n"
        "with veil.connect(sys.argv[1], analyst='bob') as db:\n"
        "    db.sql('SELECT COUNT(*) FROM people', epsilon=0.5)\n"
        "write_table(load_policy(sys.argv[1]), 'other', pd.DataFrame({'x': [1, 2, 3]}))\n"
    )
    subprocess.run([sys.executable, "-c", script, str(path)], check=True, cwd=Path(__file__).resolve().parents[1])
    after = read_ledger_mark(load_policy(path))
    assert after is not None and after != before
    _restore(path, backup, "in_place")
    with pytest.raises(LedgerMismatch):
        _query(path)
