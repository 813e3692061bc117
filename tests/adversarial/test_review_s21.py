"""Review of session 21's merged changes (a59be63..main, reviewer review21).

Every finding is a strict xfail witness: the test states the property that should hold and fails today; the fix
turns it green (then drop the mark). Deterministic unless a test says otherwise.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest

_POLICY = (
    '[database]\npath = "warehouse.duckdb"\n[ledger]\npath = "ledger.sqlite"\n'
    '[tables.people]\nprivacy_unit = "row"\n[tables.people.columns]\n'
    'age = { type = "int", lower = 17, upper = 90 }\n'
    "[analysts.bob]\nepsilon = 5.0\n"
)


def _world(base: Path) -> Path:
    import pandas as pd

    from veil.policy import load_policy
    from veil.store.warehouse import write_table

    base.mkdir(parents=True, exist_ok=True)
    path = base / "policy.toml"
    path.write_text(_POLICY, encoding="utf-8")
    write_table(load_policy(path), "people", pd.DataFrame({"age": list(range(20, 60))}))
    return path


def _count(path: Path, sql: str) -> int:
    import sqlite3

    con = sqlite3.connect(path)
    try:
        return int(con.execute(sql).fetchone()[0])
    finally:
        con.close()


@pytest.mark.xfail(
    strict=True,
    reason="review s21 X1: a handle opened before veil move-ledger still writes its release "
    "rows (synced=False transactions skip the moved_to check) to the retired file",
)
def test_x1_a_retired_ledger_takes_no_release_row(tmp_path: Path) -> None:
    """docs/ledger.md: after ``veil move-ledger`` "nothing is written to it any more, also by a session opened before
    the move". A query reserved before the move and answered (or refused free) after it logs its release row in the
    retired file through ``Ledger.release``, whose ``_transaction(synced=False)``
    skips ``_refuse_moved``: the moved copy keeps the reservation ``reserved`` forever and never gets the answer's
    release row (the audit log ``veil releases`` reads) — the retired file gets it instead. Correct: the write is
    refused (LedgerMismatch) and the retired file is unchanged. (``Ledger.cancel`` holds: its account read refuses.)"""
    from veil.errors import LedgerMismatch
    from veil.policy import load_policy
    from veil.store.binding import move_ledger
    from veil.store.ledger import Cost, Ledger, accounts_for

    path = _world(tmp_path / "w")
    policy = load_policy(path)
    old = tmp_path / "w" / "ledger.sqlite"
    led = Ledger.for_policy(policy)
    try:
        res = led.reserve(Cost(Fraction(1, 2)), accounts_for(policy, analyst="bob", tables=["people"]), actor="bob")
        led.wait_durable(res)
        move_ledger(policy, tmp_path / "moved.sqlite")
        before = _count(old, "SELECT count(*) FROM releases") + _count(
            old, "SELECT count(*) FROM reservations WHERE status != 'reserved'"
        )
        with pytest.raises(LedgerMismatch):
            led.release(res, answer={"rows": [[1]]})
    finally:
        led.close()
    after = _count(old, "SELECT count(*) FROM releases") + _count(
        old, "SELECT count(*) FROM reservations WHERE status != 'reserved'"
    )
    assert after == before
