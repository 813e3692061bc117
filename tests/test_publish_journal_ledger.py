"""The Spark publish journal (in the ledger's SQLite file) is written only through the ledger's own checks (review s21).

``veil.store.spark_publish`` kept its journal rows (``publish_journal``) in the ledger file through a connection of its
own: it skipped the check every other ledger writer makes, so after ``veil move-ledger`` a publication's stage, commit,
finish or abort (and even the recovery's read of pending rows, which creates the table) wrote into the retired file,
and the moved copy — the ledger in use — never saw those rows. Now each step opens the ledger as every other writer
does (:func:`veil.store.binding.open_ledger`) and writes in its checked transaction: refused (``LedgerMismatch``,
F0000, a hint) with the retired file unchanged. These tests stage model files only (a journal row, no table): they never
start Spark. Deterministic: no false failures.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from veil.errors import LedgerMismatch

_POLICY = (
    '[database]\npath = "warehouse.duckdb"\n[ledger]\npath = "ledger.sqlite"\n'
    '[engine]\nkind = "spark"\nmaster = "local[1]"\nwarehouse = "spark-warehouse"\n'
    '[tables.people]\nprivacy_unit = "row"\n[tables.people.columns]\nage = { type = "int", lower = 17, upper = 90 }\n'
)


def _dump(path: Path) -> list[str]:
    con = sqlite3.connect(path)
    try:
        return list(con.iterdump())
    finally:
        con.close()


STEPS: dict[str, Callable[[Any, Path], object]] = {
    "stage": lambda sp, base: sp.stage(_policy(base), "t1", str(base / "m1.bin"), "", None, str(base / "m1.staged")),
    "pending": lambda sp, base: sp.pending(_policy(base)),
    "commit": lambda sp, base: sp.commit(_policy(base), "t0", "p0"),
    "finish": lambda sp, base: sp.finish(_policy(base), "t0"),
    "abort": lambda sp, base: sp.abort(_policy(base), "t0"),
}


def _policy(base: Path) -> Any:
    from veil.policy import load_policy

    return load_policy(base / "policy.toml")


@pytest.mark.parametrize("step", sorted(STEPS))
def test_a_publish_journal_step_on_a_moved_ledger_is_refused(tmp_path: Path, step: str) -> None:
    """A model publication staged on a Spark policy (its journal row in the ledger), then ``veil move-ledger``; each
    journal step on the old file is refused and writes nothing there (nor moves the staged file)."""
    from veil.store import spark_publish
    from veil.store.binding import move_ledger

    base = tmp_path
    (base / "policy.toml").write_text(_POLICY, encoding="utf-8")
    staged = base / "m0.staged"
    staged.write_bytes(b"model")
    spark_publish.stage(_policy(base), "t0", str(base / "m0.bin"), "", None, str(staged))
    move_ledger(_policy(base), base / "moved.sqlite")
    before = _dump(base / "ledger.sqlite")
    with pytest.raises(LedgerMismatch) as caught:
        STEPS[step](spark_publish, base)
    assert caught.value.sqlstate == "F0000" and "moved" in str(caught.value) and caught.value.hint
    assert _dump(base / "ledger.sqlite") == before
    assert staged.exists() and not (base / "m0.bin").exists()


def test_the_publish_journal_still_works_on_the_ledger_in_use(tmp_path: Path) -> None:
    """The same steps on a ledger that was not moved: stage, commit (the staged model file moved into place), finish."""
    from veil.store import spark_publish

    (tmp_path / "policy.toml").write_text(_POLICY, encoding="utf-8")
    staged = tmp_path / "m0.staged"
    staged.write_bytes(b"model")
    policy = _policy(tmp_path)
    spark_publish.stage(policy, "t0", str(tmp_path / "m0.bin"), "", None, str(staged))
    assert [r["state"] for r in spark_publish.pending(policy)] == ["staged"]
    spark_publish.commit(policy, "t0", "p0")
    assert [(r["state"], r["release_id"]) for r in spark_publish.pending(policy)] == [("committed", "p0")]
    assert (tmp_path / "m0.bin").read_bytes() == b"model"
    spark_publish.finish(policy, "t0")
    assert spark_publish.pending(policy) == []
