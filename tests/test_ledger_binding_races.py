"""The Spark warehouse's binding to its ledger is decided by one atomic step, and written on any filesystem (review s23).

Y3: on Spark Connect the binding was "the earliest row by its ``bound_at`` (the writer's clock), then its id": a binder
whose INSERT landed after another had read its own row back as the winner displaced it, and both went on with a ledger
of their own (two budgets on one database). Now the binding is a view created once (``CREATE VIEW`` without ``IF NOT
EXISTS``); every binder reads that one row back, whatever the clocks and the order. Y2: the local binding file was
placed with ``os.link`` only, and a filesystem without hard links (vfat/exFAT, many FUSE/SMB mounts) failed every way
in with a raw PermissionError; now it falls back to an exclusive create in place (readers wait out a partly written
file), and any other failure is a typed PolicyError naming the path.

No JVM and no Spark statement: Connect is the fake session of tests/adversarial/test_review_s23.py, local mode reads
and writes Parquet files with pyarrow. Hypothesis draws schedules and clocks; every property is exact (no false
failures).
"""

from __future__ import annotations

import errno
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.adversarial.test_review_s23 import _CONNECT, _LOCAL, _FakeConnect, _spark_policy
from veil.errors import PolicyError
from veil.store import spark

#: Clocks as binders write them: any second of a day, in either order between binders (skewed hosts).
_CLOCK = st.integers(0, 86399).map(lambda s: f"2026-11-28T{s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}+00:00")
_HEALTH = [HealthCheck.function_scoped_fixture]


def _row(i: int, at: str) -> tuple[str, str, str]:
    return (f"{i:x}" * 32)[:32], at, f"/host{i}/ledger.sqlite"


@settings(max_examples=60, deadline=None, suppress_health_check=_HEALTH)
@given(clocks=st.lists(_CLOCK, min_size=2, max_size=6), nested=st.integers(1, 5))
def test_racing_connect_binders_all_agree_on_the_first_creator(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clocks: list[str], nested: int
) -> None:
    """Binder 0 reads no binding; before its write lands binder 1 runs (reads none too), and so on ``nested`` deep:
    the deepest creates the view first. The rest bind afterwards. Whatever their clocks, every binder returns the
    first creator's ledger, and the database holds one row."""
    policy = _spark_policy(tmp_path, "ledger.sqlite", _CONNECT)
    fake = _FakeConnect()
    monkeypatch.setattr(spark, "spark_session", lambda _spec: fake)
    rows = [_row(i, at) for i, at in enumerate(clocks)]
    depth = min(nested, len(rows) - 1)
    won: dict[int, str] = {}

    def bind(i: int) -> None:
        if i < depth:
            fake.before_insert = lambda: bind(i + 1)
        won[i] = spark.write_binding(policy, rows[i])

    bind(0)
    for i in range(depth + 1, len(rows)):
        won[i] = spark.write_binding(policy, rows[i])
    first = rows[depth][0]
    assert set(won.values()) == {first}, won
    assert [r["ledger_id"] for r in fake.tables["_veil_ledger_binding"]] == [first]
    assert spark.read_binding(policy) == first


def test_an_old_binding_table_of_several_rows_is_still_read_by_its_earliest_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A table an earlier Veil appended rows to keeps its winner (earliest by time, then id); binding again adds
    nothing and returns that winner."""
    policy = _spark_policy(tmp_path, "ledger.sqlite", _CONNECT)
    fake = _FakeConnect()
    fake.tables["_veil_ledger_binding"] = [
        {"ledger_id": "b" * 32, "bound_at": "2026-11-28T10:00:00+00:00", "ledger_path": "/b"},
        {"ledger_id": "a" * 32, "bound_at": "2026-11-28T10:00:05+00:00", "ledger_path": "/a"},
    ]
    monkeypatch.setattr(spark, "spark_session", lambda _spec: fake)
    assert spark.read_binding(policy) == "b" * 32
    assert spark.write_binding(policy, _row(3, "2026-11-28T09:00:00+00:00")) == "b" * 32
    assert len(fake.tables["_veil_ledger_binding"]) == 2


def test_an_empty_old_binding_table_is_refused_with_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An earlier Veil's binding interrupted between its CREATE TABLE and its INSERT: nothing bound, and no atomic way
    to bind on that table: typed (F0000), naming the DROP TABLE to run; no row is appended."""
    policy = _spark_policy(tmp_path, "ledger.sqlite", _CONNECT)
    fake = _FakeConnect()
    fake.sql("CREATE TABLE IF NOT EXISTS `veil_s23`.`_veil_ledger_binding` (ledger_id STRING, bound_at STRING)")
    monkeypatch.setattr(spark, "spark_session", lambda _spec: fake)
    with pytest.raises(PolicyError, match="empty") as info:
        spark.write_binding(policy, _row(1, "2026-11-28T09:00:00+00:00"))
    assert info.value.sqlstate == "F0000" and "DROP TABLE" in (info.value.hint or "")
    assert fake.tables["_veil_ledger_binding"] == []


def test_a_connect_server_that_refuses_the_view_is_a_typed_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """CREATE VIEW refused for another reason (no privilege, a catalog without views) and no binding there: typed."""
    policy = _spark_policy(tmp_path, "ledger.sqlite", _CONNECT)
    fake = _FakeConnect()

    def refuse() -> None:
        raise RuntimeError("[INSUFFICIENT_PERMISSIONS] CREATE VIEW")

    fake.before_insert = refuse
    monkeypatch.setattr(spark, "spark_session", lambda _spec: fake)
    with pytest.raises(PolicyError, match="write the ledger's binding"):
        spark.write_binding(policy, _row(1, "2026-11-28T09:00:00+00:00"))


# --- local mode: a filesystem without hard links ---------------------------------------------------------------------

_NO_LINK = [errno.EPERM, errno.EOPNOTSUPP, errno.ENOSYS, errno.EMLINK, errno.EXDEV]


def _no_links(monkeypatch: pytest.MonkeyPatch, code: int) -> None:
    def no_link(src: object, dst: object, **_: object) -> None:
        raise OSError(code, "no hard links here", str(dst))

    monkeypatch.setattr(spark.os, "link", no_link)


def _local(tmp_path: Path) -> Any:
    policy = _spark_policy(tmp_path, "ledger.sqlite", _LOCAL)
    (tmp_path / "spark-warehouse" / "veil_s23.db").mkdir(parents=True)
    return policy


def _binding_file(tmp_path: Path) -> Path:
    return tmp_path / "spark-warehouse" / "veil_s23.db" / "_veil_ledger_binding" / "part-00000-binding.parquet"


@pytest.mark.parametrize("code", _NO_LINK, ids=errno.errorcode.get)
def test_without_hard_links_the_first_local_binder_wins_and_the_mark_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    from veil.store.ledger import HistoryMark

    policy = _local(tmp_path)
    _no_links(monkeypatch, code)
    won = [spark.write_binding(policy, _row(i, f"2026-11-28T0{9 - i}:00:00+00:00")) for i in range(3)]
    assert won == [_row(0, "")[0]] * 3
    folder = _binding_file(tmp_path).parent
    assert [f.name for f in folder.iterdir()] == [_binding_file(tmp_path).name]  # no temporary file left
    for k in range(1, 7):  # past MARK_FILES: folded too
        spark.write_mark(policy, HistoryMark(k, f"r{k}", 0, ""))
    assert spark.read_mark(policy) == HistoryMark(6, "r6", 0, "")


@settings(max_examples=25, deadline=None, suppress_health_check=_HEALTH)
@given(cut=st.floats(0, 1, exclude_max=True))
def test_a_binding_file_being_written_in_place_is_waited_for(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, cut: float
) -> None:
    """A reader meets the binding file cut at any point (an exclusive create in place, its bytes not all written): it
    reads again until the file is whole, and gets its id."""
    tmp_path = tmp_path_factory.mktemp("partial")
    policy = _local(tmp_path)
    spark.write_binding(policy, _row(7, "2026-11-28T09:00:00+00:00"))
    f = _binding_file(tmp_path)
    whole = f.read_bytes()
    f.write_bytes(whole[: int(cut * len(whole))])
    timer = threading.Timer(0.05, f.write_bytes, (whole,))
    timer.start()
    try:
        assert spark.read_binding(policy) == _row(7, "")[0]
    finally:
        timer.join()


def test_a_binding_file_left_partial_is_refused_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    policy = _local(tmp_path)
    f = _binding_file(tmp_path)
    f.parent.mkdir(parents=True)
    f.write_bytes(b"PAR1\x00\x01")
    monkeypatch.setattr(spark, "PARTIAL_WAIT_S", 0.05)
    with pytest.raises(PolicyError, match="not a whole Parquet file") as info:
        spark.read_binding(policy)
    assert str(f) in str(info.value) and info.value.hint


def test_the_mark_is_not_folded_over_a_file_being_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Folding never removes a mark file it could not read (another process's, being written in place)."""
    from veil.store.ledger import HistoryMark

    policy = _local(tmp_path)
    monkeypatch.setattr(spark, "MARK_FILES", 100)
    for k in range(1, 6):
        spark.write_mark(policy, HistoryMark(k, f"r{k}", 0, ""))
    folder = tmp_path / "spark-warehouse" / "veil_s23.db" / "_veil_ledger_mark"
    partial = folder / "part-99999999999999999999-partial.parquet"
    partial.write_bytes(b"")
    before = sorted(folder.iterdir())
    monkeypatch.setattr(spark, "MARK_FILES", 4)
    spark._fold_marks(folder)  # six files, past MARK_FILES: a fold is due
    assert sorted(folder.iterdir()) == before


@pytest.mark.parametrize("code", [errno.EINVAL, errno.EPERM, errno.ENOTSUP], ids=errno.errorcode.get)
def test_a_refused_directory_fsync_is_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int) -> None:
    policy = _local(tmp_path)
    real = spark.os.fsync

    def fsync(fd: int) -> None:
        if spark.os.path.isdir(f"/proc/self/fd/{fd}"):
            raise OSError(code, "directory fsync not supported")
        real(fd)

    monkeypatch.setattr(spark.os, "fsync", fsync)
    assert spark.write_binding(policy, _row(2, "2026-11-28T09:00:00+00:00")) == _row(2, "")[0]


@pytest.mark.parametrize("code", [errno.EROFS, errno.EACCES, errno.ENOSPC, errno.EIO], ids=errno.errorcode.get)
def test_any_other_filesystem_failure_is_a_typed_error_naming_the_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    policy = _local(tmp_path)
    real = spark.os.open

    def refuse(path: Any, flags: int, *args: Any, **kw: Any) -> int:
        if flags & spark.os.O_CREAT:
            raise OSError(code, spark.os.strerror(code), str(path))
        return real(path, flags, *args, **kw)

    monkeypatch.setattr(spark.os, "open", refuse)
    with pytest.raises(PolicyError, match="cannot write the ledger's record") as info:
        spark.write_binding(policy, _row(2, "2026-11-28T09:00:00+00:00"))
    assert str(_binding_file(tmp_path)) in str(info.value) and info.value.sqlstate == "F0000"


def test_a_record_this_user_cannot_read_is_a_typed_error_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    policy = _local(tmp_path)
    spark.write_binding(policy, _row(2, "2026-11-28T09:00:00+00:00"))

    def denied(path: Any, **_: Any) -> None:
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    monkeypatch.setattr(pq, "read_table", denied)
    with pytest.raises(PolicyError, match="cannot read the ledger's record") as info:
        spark.read_binding(policy)
    assert str(_binding_file(tmp_path)) in str(info.value)
