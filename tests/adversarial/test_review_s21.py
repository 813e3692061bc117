"""Review of session 21's merged changes (a59be63..main, reviewer review21).

Every finding is a strict xfail witness: the test states the property that should hold and fails today; the fix
turns it green (then drop the mark). Deterministic (no randomness decides a verdict): no false failures.

* X1 (LOW) ``Ledger.release`` (``_transaction(synced=False)``) skips the moved-away check: a query reserved before
  ``veil move-ledger`` and answered after it logs its release row in the retired file; the moved copy keeps the
  reservation ``reserved`` and never gets the row (docs/ledger.md: "nothing is written to it any more").
* X2 (LOW-MEDIUM) the binding compares identities only: a stale copy of the bound ledger (a backup, or the "plain file
  copy" docs/ledger.md allows) lacks later publications and is accepted, reopening the population to a second release
  without DP guarantee (s66 F7's attack through a copy instead of a fresh file).
* X4 (MEDIUM) the 15 KiB value cap does not place DuckDB's spill edge: a GROUP BY of 12,288-byte rows (three
  default open categories) is answered at 13,681 distinct rows and fails after the charge at 13,682 (256 MiB, 1 thread,
  the s65 F2 regime; at 2 threads both X4 shapes were answered at 20,000 rows).
* X5 (LOW-MEDIUM) COUNT(col) of a text column is priced as a copy in the group's row (it holds a counter): grouped
  counts of open categories answered at a59be63 are refused.
* X3 (LOW) GROUP BY four open categories (answered at a59be63) is now refused by the 15 KiB value cap with a hint about
  literals and concatenation that does not apply to it.
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


def _sqlite_copy(src: Path, dst: Path) -> None:
    import sqlite3

    a, b = sqlite3.connect(src), sqlite3.connect(dst)
    try:
        a.backup(b)
    finally:
        a.close()
        b.close()


def _kanon(path: Path, output: str) -> None:
    from veil.generators.transaction import publish
    from veil.policy import load_policy

    request = {"table": "people", "output": output, "algorithm": "mondrian", "k": 5, "qi": ["age"]}
    publish(load_policy(path), "kanon", request, progress=False)


def test_x2_a_stale_copy_of_the_bound_ledger_is_refused(tmp_path: Path) -> None:
    """s66 F7's attack, through a stale copy instead of a fresh file. The curator keeps a copy of the ledger (a
    backup, or ``cp`` — docs/ledger.md: "a plain file copy keeps the identity too"), publishes without a DP guarantee,
    and later points ``[ledger] path`` at the copy. The warehouse holds the published table (Veil wrote it, with its
    version comment), the copy has no record of it; the binding compares identities only, so the copy is accepted and a
    second release without guarantee of the same population is published (the refresh difference of s66 F7). The
    same holds for a copy made without its ``-wal`` (docs/ledger.md: "a copy without its -wal may lack recent records").
    Correct: a ledger that lacks a publication whose output the warehouse holds is refused (LedgerMismatch), or the
    second release is refused (NonDPReleaseRefused)."""
    from veil.errors import LedgerMismatch, NonDPReleaseRefused

    path = _world(tmp_path / "w")  # write_table bound the warehouse to its (new) ledger
    base = path.parent
    _sqlite_copy(base / "ledger.sqlite", base / "backup.sqlite")  # the curator's backup: same identity
    _kanon(path, "pub1")
    with pytest.raises(NonDPReleaseRefused):  # one release without guarantee per population, ever
        _kanon(path, "pub2")
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace('path = "ledger.sqlite"', 'path = "backup.sqlite"'), encoding="utf-8")
    with pytest.raises((LedgerMismatch, NonDPReleaseRefused)):
        _kanon(path, "pub2")


_OPEN = (
    '[database]\npath = "warehouse.duckdb"\n[ledger]\npath = "ledger.sqlite"\n'
    '[tables.people]\nprivacy_unit = "row"\n[tables.people.columns]\n'
    # 1,024 characters each (the default until session 22 lowered it to 256): four such keys pass the 15 KiB cap
    'a = { type = "category", max_length = 1024 }\nb = { type = "category", max_length = 1024 }\n'
    'c = { type = "category", max_length = 1024 }\nd = { type = "category", max_length = 1024 }\n'
    "[analysts.bob]\nepsilon = 5.0\n"
)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT a, b, c, d, COUNT(*) FROM people GROUP BY a, b, c, d",
        "SELECT a, b, c, COUNT(DISTINCT d) FROM people GROUP BY a, b, c",
    ],
)
def test_x3_a_group_by_refused_by_the_value_cap_says_what_to_change(tmp_path: Path, sql: str) -> None:
    """The 15 KiB value cap (s65 F2) and the grouped-DISTINCT row (s65 F1) now refuse plain GROUP BYs of four open
    category columns of 1,024 characters (4 × 1,024 × 4 bytes): ``Unsupported`` "a text value of this query may hold 16,416
    bytes" (COUNT(*)'s ``*`` is priced too) with the hint "Use shorter literals, or concatenate fewer or shorter
    columns (SUBSTRING shortens one)" — the query has no literal and no concatenation. The refusal is the house's
    trade-off; its message must say what to change (group by fewer text columns, or the curator's ``max_length``)."""
    import pandas as pd

    import veil as veil_api
    from veil.errors import Unsupported
    from veil.policy import load_policy
    from veil.store.warehouse import write_table

    (tmp_path / "policy.toml").write_text(_OPEN, encoding="utf-8")
    write_table(load_policy(tmp_path / "policy.toml"), "people", pd.DataFrame({k: ["x", "y"] * 10 for k in "abcd"}))
    with veil_api.connect(tmp_path / "policy.toml", analyst="bob") as db:
        with pytest.raises(Unsupported) as info:
            db.sql(sql, epsilon=0.1)
    told = f"{info.value} {getattr(info.value, 'hint', '')}"
    assert "GROUP BY" in told and "max_length" in told


_WIDE_ROWS = 14_000


@pytest.fixture(scope="module")
def wide_world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three open categories (default max_length 1,024: priced 4,096 bytes each) of 1,024 four-byte characters each,
    every row distinct, 14,000 rows."""
    import pandas as pd

    from veil.policy import load_policy
    from veil.store.warehouse import write_table

    base = Path(tmp_path_factory.mktemp("s21x4"))
    cols = "".join(f'k{j} = {{ type = "category" }}\n' for j in range(3))
    (base / "policy.toml").write_text(
        '[database]\npath = "warehouse.duckdb"\n[ledger]\npath = "ledger.sqlite"\n[tables.people]\n'
        f'privacy_unit = "row"\n[tables.people.columns]\n{cols}[analysts.bob]\nepsilon = 100.0\n',
        encoding="utf-8",
    )
    wide = "\U0001d538" * 1024  # 4 bytes a character in UTF-8: 4,096 bytes a value
    frame = pd.DataFrame({f"k{j}": [wide[: 1024 - len(str(i))] + str(i) for i in range(_WIDE_ROWS)] for j in range(3)})
    write_table(load_policy(base / "policy.toml"), "people", frame)
    return base / "policy.toml"


@pytest.mark.slow
@pytest.mark.parametrize(
    "sql",
    ["SELECT k0, k1, k2, COUNT(*) FROM people GROUP BY k0, k1, k2", "SELECT COUNT(DISTINCT k0 || k1 || k2) FROM people"],
)
def test_x4_a_query_within_the_value_cap_is_answered_at_the_floor(wide_world: Path, sql: str) -> None:
    """The 15 KiB cap (s65 F2) rests on "values Veil lets into a private query are at most 15 KiB (one hash-table row
    together), which spill" (docs/server.md, docs/sql.md). Measured here: three open categories (default max_length
    1,024, priced 4,096 bytes each: 12,288, under the 15,360 cap) holding 1,024 four-byte characters each, every row
    distinct; ``SELECT k0, k1, k2, COUNT(*) … GROUP BY k0, k1, k2`` at the readers' floor (256 MiB, 1 thread) is
    answered at 5,000 … 13,681 rows and fails after the charge (QueryFailed XX000, OutOfMemory, "This is a bug in
    Veil") at 13,682, 13,750, 14,000 and 20,000 — 13,681 vs 13,682 (one person) reproduced twice each: whether the
    charged statement fails is a step one more distinct row crosses, the s63 F1 class. DuckDB alone (same settings, 20,000 rows of
    one key column): keys of 4,096, 8,192, 13,000, 15,360 bytes spill and are answered; 10,000 and 12,288 fail — the
    edge is not monotone in the row size, so no byte cap alone places it. The class holds for a DISTINCT's hash row too:
    ``COUNT(DISTINCT k0 || k1 || k2)`` (12,288 bytes, under the cap) fails after the charge at 14,000 and 20,000 rows.
    Correct: a query within the cap is answered (the engine spills), or the shape is refused free."""
    import veil as veil_api
    from veil.store import warehouse

    memory, threads = warehouse._CONNECTIONS.memory_mib, warehouse._CONNECTIONS.threads
    warehouse.set_reader_memory(warehouse.MIN_READER_MEMORY_MIB)
    warehouse.set_reader_threads(warehouse.MIN_READER_THREADS)
    try:
        with veil_api.connect(wide_world, analyst="bob") as db:
            db.sql(sql, epsilon=1.0)
    finally:
        warehouse.set_reader_memory(memory)
        warehouse.set_reader_threads(threads)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT a, b, COUNT(c), COUNT(d) FROM people GROUP BY a, b",
        "SELECT a, b, c, COUNT(d) FROM people GROUP BY a, b, c",
    ],
)
def test_x5_count_of_a_text_column_holds_no_copy_in_the_group_row(tmp_path: Path, sql: str) -> None:
    """expansion._sizes (s65 F1 fix) prices a group's row as its keys "with every other aggregate's arguments" ("a text
    MIN/MAX keeps a copy"). Text MIN/MAX are refused for their bounds anyway (test_redteam_s65's own note), so the only
    text arguments the rule meets are COUNT(col)'s — whose state is a counter. DuckDB alone (256 MiB, 1 thread, 20,000
    distinct rows): keys of 15,360 bytes with COUNT(d) of 16,000-byte d, and keys of 13,000 with 8,000-byte d, are
    answered. Veil now refuses these grouped counts ("a text value of this query may hold 16,384 bytes", 0A000), both
    answered at a59be63. Correct: COUNT's argument is not priced into the group's row (only a DISTINCT's, or an
    aggregate whose state copies its text)."""
    import pandas as pd

    import veil as veil_api
    from veil.policy import load_policy
    from veil.store.warehouse import write_table

    (tmp_path / "policy.toml").write_text(_OPEN, encoding="utf-8")
    write_table(load_policy(tmp_path / "policy.toml"), "people", pd.DataFrame({k: ["x", "y"] * 10 for k in "abcd"}))
    with veil_api.connect(tmp_path / "policy.toml", analyst="bob") as db:
        db.sql(sql, epsilon=0.1)
