"""Red team, session 13: the fixes to s12 (main at d790512) — arithmetic marked as unable to raise
(`bounds.mark_arithmetic_that_cannot_raise`), the price of casts (`totality.converts` / `raises`), the date
fields/units allow-list with the ISO-week guard, and version stamps on tables other tools wrote.

Same harness as sessions 4–12 (:mod:`tests.adversarial.test_redteam_s4`): D and D′ differ in one person (the
target, unit 7) or in one of their values; the same analyst SQL must end the same way on both and take about the
same time.

Part A holds attacks that succeed today (the tests FAIL until Veil is fixed); part B holds probes of defences
that held (they pass, and fail if the defence breaks). Status on 2026-11-26 (DuckDB 2.0, main at d790512):

* A1 (high) arithmetic on SMALLINT/TINYINT operands that sqlglot annotates as INT is marked CANNOT_RAISE (the
  narrow-type skip reads sqlglot's type), but DuckDB binds an integer literal to the narrow operand's type and
  overflows: ``(CASE WHEN t.x > 3 THEN CAST(200 AS SMALLINT) ELSE CAST(0 AS SMALLINT) END) * 200`` is priced as
  nothing (casts of constants are free, the product [0, 40,000] is "within ±2³¹") and raises, caught by TRY, on
  every joined row of the target when x > 3: 0.01–0.02 s against 3.9–5.4 s (50 rows × 10,000 joined; membership
  with `WHEN t.u = 7`: 0.02 s against 4.4–5.1 s; TINYINT `+ 100` and through a CTE column alike; 2 shared
  cores, noisy, three runs). The direct soundness check
  (`test_a1_arithmetic_marked_…`) shows the mark failing on the corners of the bounds the property test in
  tests/proxy/test_raising_work.py uses (it draws `CAST(t.x AS SMALLINT)` but never pairs it with `1000`).
* A1, same check, MEDIUM: DuckDB types ``ROUND(bigint, d)`` as BIGINT (the interval calls it real, cap 1e150:
  ``ROUND(t.x, 1) * 4611686018427387904`` is marked and overflows INT64) and ``SIGN(…)`` as TINYINT
  (``SIGN(t.x) * 100 + 100`` overflows INT8). ROUND and SIGN are themselves priced as raising, which caps one
  person's rows at 2·10⁴, so the unpriced exception at most doubles the time the price allows (~0.2 s).
* L1 (low) a table another tool wrote is stamped with a version on first use and never re-read: the tool's later
  in-place DELETE of the target's row is not seen (30 rows answered where 29 remain; noise off).
* L2 (low) casts that cannot fail (a bounded int column to DOUBLE or BIGINT) are priced at 100 and refused over
  50 × 10,000 joined rows, while `t.x * 2 > 0` is answered.
* Part B passes: the ISO-week guard and date allow-list in every spelling tried (B1).
* Held without a test here (probed by hand, DuckDB 2.0): failing TRY_CASTs cost ≤ 3.5 µs a row even for a
  1,024-character text (to TIMESTAMP; 0.3–2 µs for the others, none takes an exception path but DECIMAL, priced
  1,000), so the 100-evaluation price is under by ≤ 7× for the longest texts (≤ 0.7 s at the 2·10⁷ ceiling, not
  reproduced through Veil: 0.016 s against 0.012 s with a 1,024-character failing text × 4,000 joined rows);
  DOUBLE arithmetic never raises in DuckDB 2.0 (overflow and NaN give inf/NaN); CTE column lists ``c(a, b)`` are
  renamed by sqlglot's qualify before the bounds read them; duplicate CTE column names and UNION are refused;
  declared bounds are capped at ±10¹⁵, so Veil's grid offsets cannot overflow; WEEK()/WEEKOFYEAR()/YEARWEEK()/
  STRFTIME/DATE_DIFF are refused free; the s12 file (A1–A3, L1–L3, B1) passes on d790512.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest
from sqlglot import exp

from tests.adversarial.test_redteam_s4 import (
    TARGET_ROW,
    Pair,
    _base_rows,
    _frame,
    assert_same_ending,
    assert_time_independent,
)
from tests.adversarial.test_redteam_s11 import PUB_10000, UNIT_ROWS, USER_POLICY

# ==================================================================================================
# Part A — attacks that succeed today
# ==================================================================================================

# --- A1. Narrow integer arithmetic marked as unable to raise ---------------------------------------------------
#
# Severity HIGH (a seconds-scale running-time bit about one person's value: a threshold on a bounded column, so
# the value by bisection). Class: running time — a data-dependent exception path in a node the price skips.
# `mark_arithmetic_that_cannot_raise` skips a node whose *sqlglot* type is SMALLINT/TINYINT/…, and marks the rest
# when the declared bounds keep the result within ±(2³¹ − 1). sqlglot annotates SMALLINT * INT (a literal) as
# INT; DuckDB types the integer literal as INTEGER_LITERAL, which binds to the narrow operand's type, so the
# product is a SMALLINT (INT16) and overflows past 32,767 ("Overflow in multiplication of INT16"), an exception
# the TRY catches per row (~8 µs against ~5 ns). The narrow operand need not be a priced cast of a column: a CASE
# on a hidden value choosing between casts of constants (free) is enough, so the whole expression costs 0 in
# `check_raising_work`. The same through a CTE's column (sqlglot types it UNKNOWN, not narrow) and with TINYINT.
# Fix by construction: mark only when every integer operand's *engine* type is known to be ≥ INTEGER (a column
# of the bounded copy, BIGINT, or a BIGINT cast), i.e. treat any operand that is (or may be, through CASE /
# COALESCE / a derived column) a SMALLINT/TINYINT cast as narrow; or compute the marked arithmetic with its
# operands cast to BIGINT (then ±2³¹ is sound); and a property test that evaluates every marked node on the
# corners in DuckDB itself, with operands built from narrow casts of constants.

NARROW = [
    "SELECT COUNT(*) FILTER (WHERE (CASE WHEN t.x > 3 THEN CAST(200 AS SMALLINT) ELSE CAST(0 AS SMALLINT) END) * 200 > 0)"
    " AS n FROM t CROSS JOIN pub p WHERE t.u = 7",
    "SELECT COUNT(*) FILTER (WHERE (CASE WHEN t.x > 3 THEN CAST(100 AS TINYINT) ELSE CAST(0 AS TINYINT) END) + 100 > 0)"
    " AS n FROM t CROSS JOIN pub p WHERE t.u = 7",
    "WITH c AS (SELECT CASE WHEN t.x > 3 THEN CAST(200 AS SMALLINT) ELSE CAST(0 AS SMALLINT) END AS v FROM t "
    "WHERE t.u = 7) SELECT COUNT(*) FILTER (WHERE c.v * 200 > 0) AS n FROM c CROSS JOIN pub p",
]


@pytest.mark.slow
@pytest.mark.parametrize("sql", NARROW, ids=["smallint-mul", "tinyint-add", "cte-smallint"])
def test_a1_narrow_integer_arithmetic_does_not_reveal_a_value(tmp_path: Path, sql: str) -> None:
    """FAILS today (HIGH): the target's x = 3 ~0.02 s, x = 5 ~4 s — marked CANNOT_RAISE, priced as nothing."""
    frames = (
        _frame([*_base_rows(), *[{**TARGET_ROW, "x": 3}] * UNIT_ROWS]),
        _frame([*_base_rows(), *[{**TARGET_ROW, "x": 5}] * UNIT_ROWS]),
    )
    assert_time_independent(tmp_path, sql, PUB_10000, frames=frames, policy=USER_POLICY)


@pytest.mark.slow
def test_a1_narrow_integer_arithmetic_does_not_reveal_membership(tmp_path: Path) -> None:
    """FAILS today (HIGH): D without the target ~0.02 s, D′ with the target's 50 rows ~4.4 s (no WHERE on the
    unit: every one of D's 29 × 10,000 joined rows runs the same expression, without raising)."""
    sql = (
        "SELECT COUNT(*) FILTER (WHERE (CASE WHEN t.u = 7 THEN CAST(200 AS SMALLINT) ELSE CAST(0 AS SMALLINT) END)"
        " * 200 > 0) AS n FROM t CROSS JOIN pub p"
    )
    frames = (_frame(_base_rows()), _frame([*_base_rows(), *[TARGET_ROW] * UNIT_ROWS]))
    assert_time_independent(tmp_path, sql, PUB_10000, frames=frames, policy=USER_POLICY)


#: Marked nodes whose DuckDB type is narrower than sqlglot's (the product or sum is INT16/INT8 in DuckDB). The
#: property test in tests/proxy/test_raising_work.py draws `CAST(t.x AS SMALLINT)` leaves but, derandomised over
#: 150 draws, never pairs one with `1000` or chains two `* 7`.
NARROW_MARKED = [
    "CAST(t.x AS SMALLINT) * 1000",
    "(CAST(t.x AS SMALLINT) * 7) * 7",
    "(CASE WHEN t.x > 0 THEN CAST(100 AS TINYINT) ELSE CAST(0 AS TINYINT) END) + 100",
    "-((CASE WHEN t.x > 0 THEN CAST(200 AS SMALLINT) ELSE CAST(0 AS SMALLINT) END) * 200)",
    # `_round_rule` calls ROUND with digits other than a literal 0 real (cap 1e150), but DuckDB's ROUND(BIGINT, d)
    # is a BIGINT: the product overflows INT64 (MEDIUM on its own: ROUND is priced, so one person's rows are
    # capped at 2·10⁴ and this unpriced exception at most doubles the time the price allows, ~0.2 s)
    "ROUND(t.x, 1) * 4611686018427387904",
    # SIGN is a TINYINT in DuckDB, whatever its argument (MEDIUM, priced like ROUND): 100 + 100 overflows INT8
    "SIGN(t.x) * 100 + 100",
]


@pytest.fixture(scope="module")
def corners(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    from tests.proxy.test_raising_work import BOUNDED_POLICY, CORNERS
    from veil.policy import load_policy
    from veil.proxy._testing import exact_session
    from veil.store.warehouse import write_table

    d = tmp_path_factory.mktemp("s13-corners")
    (d / "policy.toml").write_text(BOUNDED_POLICY, encoding="utf-8")
    policy = load_policy(d / "policy.toml")
    write_table(policy, "t", CORNERS, replace=True)
    with exact_session(policy, "a") as s:
        yield s


@pytest.mark.parametrize(
    "expr",
    NARROW_MARKED,
    ids=["smallint-literal", "smallint-chain", "tinyint-case", "smallint-under-neg", "round-digits", "sign-tinyint"],
)
def test_a1_arithmetic_marked_as_unable_to_raise_does_not_raise_on_the_bounds(corners: object, expr: str) -> None:
    """FAILS today (HIGH, the mechanism of the timing tests above): a node marked CANNOT_RAISE raises in DuckDB on
    a corner of the declared bounds (x ∈ [-1000, 1000]): "Overflow in multiplication of INT16"."""
    from veil.proxy import pipeline
    from veil.proxy.totality import CANNOT_RAISE, make_total

    s = corners
    state = pipeline.run(s._state(f"SELECT COUNT(*) FROM t WHERE {expr} > 0", 1), s._env, until="plan")  # type: ignore[attr-defined]
    assert state.analysis is not None
    table = s._env.bounded_table("t")  # type: ignore[attr-defined]
    con = duckdb.connect()
    con.execute(f"ATTACH '{s._env.policy.database_path}' AS w (READ_ONLY)")  # type: ignore[attr-defined]
    raised = []
    try:
        for node in state.analysis.tree.find_all(exp.Add, exp.Sub, exp.Mul, exp.Neg):
            if node.meta.get(CANNOT_RAISE):
                total = make_total(node)
                bare = total.this if isinstance(total, exp.Try) else total
                try:
                    con.execute(f"SELECT {bare.sql(dialect='duckdb')} FROM w.{table} AS t").fetchall()
                except duckdb.Error as e:
                    raised.append(f"{node.sql(dialect='duckdb')}: {e}")
    finally:
        con.close()
    assert not raised, "marked CANNOT_RAISE but raises on the bounded copy:\n  " + "\n  ".join(raised)


# --- L1. A table another tool loads row by row is frozen at its first use -------------------------------------------
#
# Severity LOW (no leak between neighbours: a stale copy is the same for everyone; but a person deleted from the
# raw table keeps being answered about, and new rows never count). Class: stale bounded copies. Before b6ef029 a
# table without Veil's version comment was hashed on every process's first use, so a tool that INSERTs or DELETEs
# rows in place was followed; now the first use stamps a random token in its comment and every later process
# reads the token, so the tool's later in-place edits (which keep the comment) are never seen. docs/sql.md states
# the residual for tables Veil wrote; for a table another tool maintains it is the common way of loading data.
# Fix: fold a catalog-only fingerprint into the stamped version (DuckDB's `duckdb_tables().estimated_size`, the
# row count, read without a row) and restamp when it changes, or refuse a table without Veil's comment (free)
# and tell the curator to load it with `veil ingest` or `veil stamp`.


@pytest.mark.xfail(
    strict=True,
    reason="documented limit (docs/sql.md): a table edited in place by another tool keeps its version; load data "
    "with veil ingest (a stale answer, not a leak: the copy is still bounded)",
)
def test_l1_a_row_another_tool_deletes_in_place_is_not_answered_about(tmp_path: Path) -> None:
    """FAILS today (LOW): the target's row, deleted in place by another tool after the first query, is still
    counted by a new session (noise off): 30 rows answered where the table holds 29."""
    from tests.adversarial.test_redteam_s4 import POLICY
    from veil.policy import load_policy
    from veil.proxy._testing import exact_session
    from veil.store.warehouse import writer

    (tmp_path / "policy.toml").write_text(POLICY, encoding="utf-8")
    policy = load_policy(tmp_path / "policy.toml")
    frame = _frame([*_base_rows(), TARGET_ROW])
    with writer(policy) as con:  # another tool writes the table (no Veil version comment)
        con.register("frame_view", frame)
        con.execute("CREATE TABLE t AS SELECT * FROM frame_view")
        con.execute("CREATE TABLE pub (pk BIGINT, pn VARCHAR)")
    counts = []
    for edit in ("", "DELETE FROM t WHERE u = 7"):
        if edit:
            with writer(policy) as con:
                con.execute(edit)  # the tool deletes the target's row in place
        with exact_session(policy, "a") as s:
            counts.append(s.execute("SELECT COUNT(*) AS n FROM t", epsilon=1).rows[0][0])
    assert counts[1] == counts[0] - 1, f"before the deletion {counts[0]} rows, after it {counts[1]}: the copy is stale"


# --- L2. Casts that cannot fail are priced as failing ------------------------------------------------------------
#
# Severity LOW (usability: a free refusal of legitimate queries, no leak). `totality.converts` prices every cast of
# a non-constant to a non-text type at 100 evaluations per row, including a bounded integer column cast to DOUBLE
# or to BIGINT (the type the bounded copy already holds), which cannot fail on any row of the copy. Over 50 rows ×
# 10,000 joined rows the query is refused (5·10⁷ > 2·10⁷), while the same comparison written `t.x * 2 > 0` is
# answered. Fix: do not price a cast whose source type (annotated, or the declared spec of a bounded column) always
# converts to the target (any integer or boolean → BIGINT/DOUBLE, DATE → DATE, a bounded column into a type its
# declared bounds fit).

SAFE_CASTS = ["CAST(t.x AS DOUBLE) > 0", "CAST(t.x AS BIGINT) > 0", "CAST(t.y AS DOUBLE) > 0"]


@pytest.fixture(scope="module")
def joined(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    from veil.policy import load_policy
    from veil.proxy.session import QuerySession
    from veil.store.warehouse import write_table

    base = tmp_path_factory.mktemp("s13-joined")
    (base / "policy.toml").write_text(USER_POLICY, encoding="utf-8")
    policy = load_policy(base / "policy.toml")
    write_table(policy, "pub", PUB_10000, replace=True, public=True)
    write_table(policy, "t", _frame([*_base_rows(), *[TARGET_ROW] * UNIT_ROWS]), replace=True)
    with QuerySession(policy, "a") as s:
        yield s


@pytest.mark.parametrize("cond", SAFE_CASTS, ids=["int-double", "int-bigint", "float-double"])
def test_l2_a_cast_that_cannot_fail_is_not_refused(joined: object, cond: str) -> None:
    """FAILS today (LOW): Unsupported ("0 operations that may raise … casts that may fail"), free."""
    sql = f"SELECT COUNT(*) FILTER (WHERE {cond}) AS n FROM t CROSS JOIN pub p WHERE t.u = 7"
    joined.execute(sql, epsilon=1)  # type: ignore[attr-defined]


# ==================================================================================================
# Part B — probes of defences that held (they pass; they fail if the defence breaks)
# ==================================================================================================

# --- B1. The date allow-list and the ISO-week guard hold in every spelling ------------------------------------------
#
# The ISO-week family through DATE_PART / DATEPART, on `d ± INTERVAL` results (TIMESTAMPs), on a cast to TIMESTAMP,
# truncation by millennium at both ends of the DATE range, EPOCH of the latest date; and the function spellings
# (WEEK(), WEEKOFYEAR(), YEARWEEK(), ISOYEAR(), STRFTIME, DATE_DIFF), refused free: each ends the same on D and D′
# when the extreme date is chosen by the target's hidden x.

EARLY = "(CASE WHEN t.x > 3 THEN DATE '-5877641-06-25' END)"
LATE = "(CASE WHEN t.x > 3 THEN DATE '5881580-07-10' END)"
DATE_SPELLINGS = [
    f"SELECT COUNT(*) FROM t WHERE DATE_PART('week', {EARLY}) = 1",
    f"SELECT COUNT(*) FROM t WHERE DATEPART('isoyear', {EARLY}) = 1",
    f"SELECT COUNT(*) FROM t WHERE EXTRACT(week FROM {LATE} - INTERVAL 1 DAY) > 0",
    f"SELECT COUNT(*) FROM t WHERE DATE_TRUNC('week', {EARLY} + INTERVAL 1 DAY) IS NULL",
    f"SELECT COUNT(*) FROM t WHERE EXTRACT(week FROM CAST({EARLY} AS TIMESTAMP)) = 1",
    "SELECT COUNT(*) FROM t WHERE EXTRACT(week FROM CAST(t.d AS TIMESTAMP) - INTERVAL 294000 YEAR) > 0",
    f"SELECT COUNT(*) FROM t WHERE DATE_TRUNC('millennium', {EARLY}) IS NULL",
    f"SELECT COUNT(*) FROM t WHERE DATE_TRUNC('millennium', {LATE}) IS NULL",
    f"SELECT COUNT(*) FROM t WHERE EXTRACT(epoch FROM {LATE}) > 0",
    f"SELECT COUNT(*) FROM t WHERE WEEKOFYEAR({EARLY}) = 1",
    f"SELECT COUNT(*) FROM t WHERE YEARWEEK({EARLY}) = 1",
    f"SELECT COUNT(*) FROM t WHERE STRFTIME({EARLY}, '%V') = '1'",
    f"SELECT COUNT(*) FROM t WHERE DATE_DIFF('week', {EARLY}, DATE '2000-01-01') = 1",
]


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    p = Pair(tmp_path_factory.mktemp("s13"), TARGET_ROW)
    yield p
    p.close()


@pytest.mark.parametrize("sql", DATE_SPELLINGS)
def test_b1_date_fields_and_units_end_the_same_in_every_spelling(pair: Pair, sql: str) -> None:
    assert_same_ending(pair, sql)
