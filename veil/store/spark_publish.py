"""The two-phase publish transaction's storage steps for a Spark policy (``[engine] kind = "spark"``).

The same protocol as DuckDB's (:mod:`veil.store.warehouse`: stage → the caller records the release in
the ledger → commit → finish, with :func:`pending` for recovery), with two differences: Spark has no
transaction spanning a table write and a journal row, so the **journal lives in the ledger's SQLite
file** (table ``publish_journal``, written only through the ledger's checked transactions: never into a ledger moved
away) and every step is ordered and idempotent instead:

* :func:`stage` writes the journal row (state ``staged``) first, then the staging table
  ``_veil_stage_<token>`` (an internal name analysts never see). A crash in between leaves a row whose
  staging table may not exist: :func:`abort` drops it if it does.
* :func:`commit` copies the staging table over the output (Spark's own write-aside-then-swap, see
  :func:`veil.store.spark.write_table`), raises the database's high-water mark of its ledger, then marks the row
  ``committed``. A crash before the mark is
  rolled forward by running :func:`commit` again: the staging table is still there (only
  :func:`finish` drops it), so the copy is simply redone.
* :func:`finish` drops the staging table and the journal row. Spark has no public mirror: public and
  published tables are read from the policy's Spark database (docs/engines.md).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from veil.policy import Policy

if TYPE_CHECKING:
    import pandas as pd

    from veil.store.ledger import HistoryMark

__all__ = ["abort", "commit", "finish", "pending", "stage"]

_DDL = (
    "CREATE TABLE IF NOT EXISTS publish_journal(token TEXT PRIMARY KEY, output TEXT NOT NULL, "
    "staging TEXT NOT NULL, artifact TEXT NOT NULL, state TEXT NOT NULL, release_id TEXT)"
)
_KEYS = ("token", "output", "staging", "artifact", "state", "release_id")


@contextmanager
def _journal(policy: Policy) -> Iterator[sqlite3.Connection]:
    """One checked write transaction of the ledger (synced when committed): opened as every ledger writer opens it
    (:func:`veil.store.binding.open_ledger`: a ledger moved away or not the warehouse's is refused) and written in
    :meth:`~veil.store.ledger.Ledger.exclusive`, which refuses a ledger moved away meanwhile. A connection of its own
    skipped both: after ``veil move-ledger`` the journal's rows went to the retired file (review s21)."""
    from veil.store.ledger import Ledger

    with Ledger.for_policy(policy) as ledger, ledger.exclusive() as db:
        db.execute(_DDL)
        yield db


def _row(policy: Policy, token: str) -> dict[str, str | None] | None:
    rows = [r for r in pending(policy) if r["token"] == token]
    return rows[0] if rows else None


def _drop(policy: Policy, name: str) -> None:
    from veil.store import spark

    spec = spark.spec_of(policy)
    if spark.exists(spec, name):
        spark.drop(spark.spark_session(spec), spec, name)
        spark.bump_writes()


def stage(policy: Policy, token: str, output: str, staging: str, frame: pd.DataFrame | None, staging_file: str) -> None:
    """The journal row, then ``frame`` under ``staging`` (or, for a model, the staged file's path)."""
    from veil.store import spark

    with _journal(policy) as db:
        db.execute(
            "INSERT INTO publish_journal VALUES (?, ?, ?, ?, 'staged', NULL)",
            (token, output, staging if frame is not None else staging_file, "table" if frame is not None else "model"),
        )
    if frame is not None:
        spark.write_table(policy, staging, frame)


def pending(policy: Policy) -> list[dict[str, str | None]]:
    """Journal rows of publications that did not finish."""
    if not Path(policy.ledger_path).exists():
        return []
    with _journal(policy) as db:
        rows = db.execute(f"SELECT {', '.join(_KEYS)} FROM publish_journal").fetchall()
    return [dict(zip(_KEYS, r, strict=True)) for r in rows]


def commit(policy: Policy, token: str, release_id: str, *, mark: HistoryMark | None = None) -> None:
    """Copy the staged table over the output (or move the staged model file), raise the database's high-water ``mark``
    of its ledger (taken after the release was recorded: :mod:`veil.store.binding`), then mark the row committed.
    Idempotent: a committed row is left alone, an interrupted copy is redone — and the mark with it: a crash before
    the row's mark leaves it staged, and the recovery's commit writes the mark again."""
    from veil.store import spark

    row = _row(policy, token)
    if row is None or row["state"] == "committed":
        return
    output, staging = str(row["output"]), str(row["staging"])
    if row["artifact"] == "model":
        if Path(staging).exists():
            Path(staging).replace(output)
            side = Path(staging + ".json")
            if side.exists():
                side.replace(output + ".json")
    else:
        spark.write_table(policy, output, spark.read_table(policy, staging), replace=True)
    spark.write_mark(policy, mark)
    with _journal(policy) as db:
        db.execute("UPDATE publish_journal SET state = 'committed', release_id = ? WHERE token = ?", (release_id, token))


def finish(policy: Policy, token: str) -> None:
    """After the commit: drop the staging table and the journal row."""
    row = _row(policy, token)
    if row is None:
        return
    if row["artifact"] == "table":
        _drop(policy, str(row["staging"]))
    with _journal(policy) as db:
        db.execute("DELETE FROM publish_journal WHERE token = ?", (token,))


def abort(policy: Policy, token: str) -> None:
    """Drop a staged publication whose release was never recorded."""
    row = _row(policy, token)
    if row is None or row["state"] != "staged":
        return
    staging = str(row["staging"])
    if row["artifact"] == "model":
        for p in (Path(staging), Path(staging + ".json")):
            p.unlink(missing_ok=True)
    else:
        _drop(policy, staging)
    with _journal(policy) as db:
        db.execute("DELETE FROM publish_journal WHERE token = ?", (token,))
