"""Red team s68 (redq22): the query path after session 21 (plan-cache front, noise drawn ahead, the text-value cap,
readers of at least two DuckDB threads, the ledger binding).

Every finding is a strict xfail witness: the test states the property that should hold and fails today; the fix turns
it green (then drop the mark). Deterministic (no randomness decides a verdict): no false failures.

* F1 (HIGH) a join that carries a private text of ~15 KiB (within the 15,360-byte value cap: the join's read columns
  together, ``expansion.largest_text_value``) into a GROUP BY fails after the charge (QueryFailed XX000, DuckDB
  OutOfMemory) past an edge one row crosses, at the readers' floor (256 MiB) with **2** threads, the regime review s21
  X4's fix relies on ("with 2 or 4 threads every shape tried spilled"). Measured on this host: ``SELECT t.c, COUNT(*)
  FROM t JOIN pub ON t.id = pub.k WHERE t.id < K GROUP BY t.c`` (c: 3,832 four-byte characters, 15,328 bytes; pub: 4
  rows per key) is answered at K = 15,426 and fails after the charge at K = 15,427, each reproduced twice: the s63 F1
  membership bit (calibrate K with charged probes of ε = 0.001, then one WHERE that holds or not for the target).
  Over the wire too (``veil serve`` with ``engine_memory_mib=256, engine_threads=2``, psycopg, a 17,000-row world):
  K = 15,000 and 15,426 answered, 15,427 and 17,000 end in SQLSTATE XX000 after the charge.
  DuckDB 2.0 alone (2 threads, 256 MiB): the same join + GROUP BY fails at 20,000 and 30,000 rows of 15,360 bytes,
  30,000 of 12,000, 40,000 of 8,000 bytes (and at 4 threads, 30,000 of 15,360), while the GROUP BY alone spills
  30,000 rows of 15,360 bytes and the join + GROUP BY of 1,000-byte rows (300,000) and 4,000-byte rows (100,000)
  spills: the cap does not place the edge of a join's build side. No text key is needed: ``SELECT COUNT(*) FROM t JOIN
  pub ON t.id = pub.k WHERE LENGTH(t.c) > 3 OR pub.k < 0`` fails after the charge at 16,000 rows and is answered at
  8,000 (DuckDB alone: ``SELECT MAX(length(t.c)), COUNT(*) FROM t JOIN pub …`` fails at 30,000 rows of 15,000 bytes).
  The edge is a deterministic function of which rows pass (neighbouring databases: D with the row ``id = 15,426``
  fails ``WHERE t.id < 15427``, D′ without it answers; in the form ``WHERE t.id < 14536 OR t.id = T`` the query is
  answered for T absent, 14,537, 14,600, 15,000, 16,000, 17,000, 17,999 and fails for T = 14,536, three runs each).
  Small values spill: DuckDB alone answers the join of 1,000,000 rows of 1,000 bytes and 500,000 of 2,000 bytes at
  the floor, and fails on 200,000 of 4,000 bytes (the default ``max_length`` of 1,024 four-byte characters): a fix
  must price a join's build row far below the 15 KiB cap (or refuse such joins free).
  The analyst need not find large values: a literal column of a derived table over the private rows is carried
  into the build side too (``test_s68_f1_a_literal_padded_join…``: a default open category of short ASCII values,
  an 11,000-byte literal, 9,709 rows answered and 9,710 failed after the charge, twice each).
  A public join inside the derived table multiplies the padded rows (each private row brings 20 into the build side,
  ~220 KB, within the 16 MiB carried-literal bound): 530 private rows answered, 531 failed after the charge
  (``test_s68_f1_an_amplified_padded_join…``). At the defaults (DuckDB's 80% of memory per connection, or ``veil serve``'s
  80% / 2 per process) the edge moves up in proportion (~7 GB: ~33,000 private rows at 20×), never away.
  Membership, measured (1,500-row world): calibrate K on ids nobody has (``WHERE t.id < K OR t.id = 999999``, 10
  probes of ε = 0.001: K = 530), then one query of ε = 0.001 per target, ``WHERE t.id < 530 OR t.id = T``: answered for
  all 4 absent T (999,999, 888,888, 777,777, 666,666), failed after the charge for 5 of 6 present T (700, 1,100, 1,200,
  1,300, 1,499; 900 answered): a 0% false-positive, 83% true-positive oracle where ε = 0.001 allows an advantage of
  about 0.05%.
* F2 (LOW; a careless curator) review s21 X2 on the query path: a stale copy of the bound ledger (a backup: same
  identity) is accepted by ``veil.connect`` and gives the analyst's and the table's spent ε back (a query refused with
  BudgetExhausted on the ledger is answered on the copy). X2's proposed check (a ledger lacking a publication the
  warehouse holds) cannot see it: an answered query leaves no mark in the warehouse.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

#: Rows of the F1 world: past the measured edge (15,426 answered, 15,427 failed) with a margin.
_F1_ROWS = 16_000
#: Characters of each private text value: 3,832 four-byte characters, 15,328 bytes; the join also reads ``id``
#: (32 bytes as text), so the join's row is priced at exactly the 15,360-byte cap and admitted.
_F1_CHARS = 3_832

_F1_POLICY = f"""\
[database]
path = "w.duckdb"
[ledger]
path = "l.sqlite"
[tables.t]
privacy_unit = "row"
[tables.t.columns]
id = {{ type = "int", lower = 0, upper = 1000000 }}
c = {{ type = "category", max_length = {_F1_CHARS} }}
[tables.pub]
public = true
[analysts.a]
epsilon = 1000000
"""


@pytest.fixture(scope="module")
def f1_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """An exact session over ``_F1_ROWS`` distinct 15,328-byte texts joined to a public table (4 rows a key), its
    bounded copy built under DuckDB's default limit; then the readers at the floor: 256 MiB, 2 threads."""
    import pandas as pd

    from tests.support.warehouse import copied_session, readers_at_the_floor

    base = Path(tmp_path_factory.mktemp("s68f1"))
    t = pd.DataFrame({
        "id": list(range(_F1_ROWS)),
        "c": [str(i).rjust(_F1_CHARS, "\U0001f600") for i in range(_F1_ROWS)],
    })  # fmt: skip
    pub = pd.DataFrame({"k": [i % _F1_ROWS for i in range(4 * _F1_ROWS)]})
    session = copied_session(base, _F1_POLICY, {"t": t}, {"pub": pub})
    del t
    try:
        with readers_at_the_floor():
            yield session
    finally:
        session.close()


@pytest.mark.slow
@pytest.mark.parametrize(
    "sql",
    [
        "SELECT t.c, COUNT(*) FROM t JOIN pub ON t.id = pub.k GROUP BY t.c",
        f"SELECT t.c, COUNT(*) FROM t JOIN pub ON t.id = pub.k WHERE t.id < {_F1_ROWS} GROUP BY t.c",
        # no text key at all: a COUNT(*) whose WHERE reads the private text after the join (its build side holds it)
        "SELECT COUNT(*) FROM t JOIN pub ON t.id = pub.k WHERE LENGTH(t.c) > 3 OR pub.k < 0",
    ],
)
def test_s68_f1_a_join_within_the_value_cap_ends_the_same_way_whatever_the_rows(f1_session: Any, sql: str) -> None:
    """Correct: a charged query within the cap is answered (the engine spills), or its shape is refused free; never a
    failure after the charge whose occurrence one more row decides. Today: QueryFailed (XX000, OutOfMemory), charged."""
    from veil.errors import QueryFailed, VeilError

    spent = f1_session.budget().spent
    try:
        f1_session.execute(sql, epsilon=0.001)
    except QueryFailed as exc:
        pytest.fail(f"charged and failed: {exc}")
    except VeilError:
        assert f1_session.budget().spent == spent, "a refusal of the shape must be free"


#: Rows of the F1 literal-padding world: past the measured edge (9,709 answered, 9,710 failed) with a margin.
_PAD_ROWS = 12_000
#: The analyst's padding: a literal column of a derived table over the private rows, carried into the join's build side.
_PAD = "x" * 11_000

_PAD_POLICY = """\
[database]
path = "w.duckdb"
[ledger]
path = "l.sqlite"
[tables.t]
privacy_unit = "row"
[tables.t.columns]
id = { type = "int", lower = 0, upper = 1000000 }
c = { type = "category" }
[tables.pub]
public = true
[analysts.a]
epsilon = 1000000
"""


@pytest.fixture(scope="module")
def pad_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """An exact session over ``_PAD_ROWS`` short ASCII values of a default open category (``v0``, ``v1``, …) joined to
    a public table (4 rows a key); then the readers at the floor: 256 MiB, 2 threads."""
    import pandas as pd

    from tests.support.warehouse import copied_session, readers_at_the_floor

    base = Path(tmp_path_factory.mktemp("s68pad"))
    t = pd.DataFrame({"id": list(range(_PAD_ROWS)), "c": [f"v{i}" for i in range(_PAD_ROWS)]})
    pub = pd.DataFrame({"k": [i % _PAD_ROWS for i in range(4 * _PAD_ROWS)]})
    session = copied_session(base, _PAD_POLICY, {"t": t}, {"pub": pub})
    try:
        with readers_at_the_floor():
            yield session
    finally:
        session.close()


def test_s68_f1_a_literal_padded_join_ends_the_same_way_whatever_the_rows(pad_session: Any) -> None:
    """F1 without large data: a default open category of short ASCII values (``v0``, ``v1``, …), and the analyst's own
    11,000-byte literal as a column of a derived table over the private rows, read after the join (priced 4,096 +
    11,000 + 32 = 15,128 bytes, within the cap). ``… FROM (SELECT id, c, '<11,000 x>' AS z FROM t WHERE id < K) x
    JOIN pub ON x.id = pub.k WHERE x.c || x.z > CAST(pub.k AS VARCHAR)`` is answered at K = 9,709 and fails after the
    charge (QueryFailed XX000, OutOfMemory) at K = 9,710, each twice (binary search of 14 probes at ε = 0.001): any
    private table of ~10,000 rows (at the floor; the edge grows with the memory limit) gives a deterministic bit on
    whether one more row passes the WHERE. Correct: answered, or the shape refused free."""
    from veil.errors import QueryFailed, VeilError

    sql = (
        f"SELECT COUNT(*) FROM (SELECT id, c, '{_PAD}' AS z FROM t) x JOIN pub ON x.id = pub.k "
        "WHERE x.c || x.z > CAST(pub.k AS VARCHAR)"
    )
    spent = pad_session.budget().spent
    try:
        pad_session.execute(sql, epsilon=0.001)
    except QueryFailed as exc:
        pytest.fail(f"charged and failed: {exc}")
    except VeilError:
        assert pad_session.budget().spent == spent, "a refusal of the shape must be free"


#: The amplified world: few private rows, each joined to 20 rows of ``pub`` inside the derived table (so 20 padded
#: rows of the join's build side), the derived rows joined to 30 rows of ``pub2`` each (the larger side: probed).
_AMP_ROWS, _AMP_INNER, _AMP_OUTER = 1_000, 20, 30


@pytest.fixture(scope="module")
def amp_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """An exact session over ``_AMP_ROWS`` short ASCII values, ``pub`` (20 rows a key) and ``pub2`` (30 rows a key);
    then the readers at the floor: 256 MiB, 2 threads."""
    import pandas as pd

    from tests.support.warehouse import copied_session, readers_at_the_floor

    base = Path(tmp_path_factory.mktemp("s68amp"))
    n = _AMP_ROWS
    t = pd.DataFrame({"id": list(range(n)), "c": [f"v{i}" for i in range(n)]})
    public = {
        "pub": pd.DataFrame({"k": [i % n for i in range(_AMP_INNER * n)]}),
        "pub2": pd.DataFrame({"k": [i % n for i in range(_AMP_OUTER * n)]}),
    }
    policy = _PAD_POLICY.replace("[tables.pub]", "[tables.pub2]\npublic = true\n[tables.pub]")
    session = copied_session(base, policy, {"t": t}, public)
    try:
        with readers_at_the_floor():
            yield session
    finally:
        session.close()


def test_s68_f1_an_amplified_padded_join_ends_the_same_way_whatever_the_rows(amp_session: Any) -> None:
    """F1 amplified: the derived table joins each private row to 20 public rows and pads each with the 11,000-byte
    literal (per private row 20 × 30 joined rows × 22,000 literal bytes = 13.2 MB, under the 16 MiB carried-literal
    bound), so one person brings 20 padded rows (~220 KB) into the outer join's build side. ``WHERE t.id < K`` in the
    derived table: answered at K = 530, failed after the charge at K = 531, twice each (K = 300 answered; 600 and 1,000
    failed; 1,500 answered again: the join order turned, itself a function of the private row count). Correct:
    answered, or the shape refused free."""
    from veil.errors import QueryFailed, VeilError

    sql = (
        f"SELECT COUNT(*) FROM (SELECT t.id, t.c, '{_PAD}' AS z FROM t JOIN pub ON t.id = pub.k) x "
        "JOIN pub2 ON x.id = pub2.k WHERE x.c || x.z > CAST(pub2.k AS VARCHAR)"
    )
    spent = amp_session.budget().spent
    try:
        amp_session.execute(sql, epsilon=0.001)
    except QueryFailed as exc:
        pytest.fail(f"charged and failed: {exc}")
    except VeilError:
        assert amp_session.budget().spent == spent, "a refusal of the shape must be free"


_F2_POLICY = (
    '[database]\npath = "warehouse.duckdb"\n[ledger]\npath = "ledger.sqlite"\n'
    '[tables.people]\nprivacy_unit = "row"\nepsilon_total = 1.0\n[tables.people.columns]\n'
    'age = { type = "int", lower = 17, upper = 90 }\n'
    "[analysts.bob]\nepsilon = 1.0\n"
)


@pytest.mark.xfail(
    strict=True,
    reason="s68 F2 (LOW, open): a stale copy of the bound ledger gives spent ε back on the query path; the session-boundary "
    "mark (markfix) was reverted: its writes failed other sessions (review s22 Y2) and could brick a ledger (Y3)",
)
def test_s68_f2_a_stale_copy_of_the_ledger_does_not_give_spent_budget_back(tmp_path: Path) -> None:
    """Review s21 X2 on the query path. The curator keeps a copy of the ledger (a backup, or the "plain file copy"
    docs/ledger.md allows: same identity), the analyst spends the whole budget (and the table's ``epsilon_total``),
    and the curator later points ``[ledger] path`` at the copy (restoring the backup). The binding compares identities
    only: the copy is accepted, and the analyst's and the table's spent ε are back — each restore is another full
    budget on the same people. X2's proposed fix (a ledger lacking a publication the warehouse holds is refused) does
    not cover this: an answered query writes nothing to the warehouse. Measured: after a backup at 0.01 spent, a query
    of ε = 0.5 is answered and the next is refused (BudgetExhausted, 1.01 > 1.0); on the copy the same query is answered
    (0.5 of the restored budget). Correct: the copy is refused (LedgerMismatch), or the query is (BudgetExhausted)."""
    import sqlite3

    import pandas as pd

    import veil as veil_api
    from veil.errors import BudgetExhausted, LedgerMismatch
    from veil.policy import load_policy
    from veil.store.warehouse import write_table

    path = tmp_path / "policy.toml"
    path.write_text(_F2_POLICY, encoding="utf-8")
    write_table(load_policy(path), "people", pd.DataFrame({"age": list(range(20, 60))}))
    sql = "SELECT COUNT(*) FROM people WHERE age > 30"
    with veil_api.connect(path, analyst="bob") as db:
        db.sql(sql.replace("30", "31"), epsilon=0.01)  # (the ledger and the bounded copy exist)
    a, b = sqlite3.connect(tmp_path / "ledger.sqlite"), sqlite3.connect(tmp_path / "backup.sqlite")
    try:
        a.backup(b)  # the curator's backup: same identity, 0.01 spent
    finally:
        a.close()
        b.close()
    with veil_api.connect(path, analyst="bob") as db:
        db.sql(sql.replace("30", "40"), epsilon=0.5)  # 0.51 of 1.0 spent
        with pytest.raises(BudgetExhausted):
            db.sql(sql.replace("30", "50"), epsilon=0.5)
    path.write_text(_F2_POLICY.replace('path = "ledger.sqlite"', 'path = "backup.sqlite"'), encoding="utf-8")
    with pytest.raises((LedgerMismatch, BudgetExhausted)):
        with veil_api.connect(path, analyst="bob") as db:
            db.sql(sql.replace("30", "50"), epsilon=0.5)
