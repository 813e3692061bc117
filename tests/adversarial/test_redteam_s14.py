"""Red team, session 14: the fix to s13 A1 (main at 7414f68, commit 3962004) — `bounds._wide` and
`bounds.mark_arithmetic_that_cannot_raise`: ``+ - *`` and unary minus are exempt from the raising-work price only
over "wide" operands (private int/float columns of a base table, BIGINT/DOUBLE in the bounded copy, such
arithmetic, number literals) within ±(2³¹ − 1) (integers) / ±10¹⁵⁰ (reals), and casts of wide values to BIGINT,
HUGEINT, DOUBLE, FLOAT or text are exempt too.

Same harness as sessions 4–13 (:mod:`tests.adversarial.test_redteam_s4`): D and D′ differ in one of the target's
values (unit 7); the same analyst SQL must end the same way on both and take about the same time.

Status on 2026-11-26 (DuckDB 2.0, main at 7414f68):

* A1 (MEDIUM) a cast of wide *arithmetic* to REAL (FLOAT4, sqlglot's FLOAT) is marked CANNOT_RAISE and priced
  as nothing (not even as a cast that may fail), on the reasoning that wide values are within ±10¹⁵ — true of a
  column, not of arithmetic, which the mark allows up to ±10¹⁵⁰. ``CAST(t.x * 1e38 AS REAL)`` fails for x ≥ 4
  (DuckDB: "Type DOUBLE with value 4e+38 can't be cast … FLOAT"); the generated TRY_CAST builds the error text
  per failing row, ~0.15–0.3 µs against ~3 ns. Five such casts × the target's 50 rows × 10,000 joined public rows
  (an equi-join on a public key all equal to the target's unit, so the t values are not constant vectors):
  x = 3 0.06 s, x = 5 0.47 s (2 shared cores, noisy, first run of each session). The node budget (2·10⁷ per
  person, ~5 nodes a cast) caps the gap at ~0.5 s a query, hence MEDIUM; amplified by repetition (ε each).
* Held (B1, probed on the corners of the bounds, every marked node evaluated without TRY on the bounded copy):
  decimal literals (1.5, 2.000…0 with 37 digits: the rewrite casts them to DOUBLE, so no DECIMAL overflow),
  integer literals past 64 bits (cast to DOUBLE), 1e308 (outside ±10¹⁵⁰: not marked), negative literals and unary
  minus of the lower bound, int × float mixing, casts of wide values to BIGINT (rendered TRY_CAST(ROUND(…)): the
  ROUND stays priced), DOUBLE and text; narrow casts, CASE, functions, CTE/derived columns and public columns are
  not wide (not marked); hex literals do not parse in DuckDB; string literals are not wide; CAST(… AS HUGEINT)
  is refused (unsupported type); DOUBLE overflow gives inf in DuckDB 2.0 (never raises). Constant-vector note: a
  CROSS JOIN hands the engine the private side as constant vectors, so per-row work on t-only expressions runs
  once per chunk — a timing probe needs an equi-join (as A1 does).
* Held (B2): a name that reads like the base table's column but is a CTE or derived table named ``t``, a CTE or
  public table aliased ``t``, or a public column beside the private one is not wide (nothing marked); a private
  self-join is refused (the table is read once).
* Note (LOW, no test): ``CAST(t.x * 3e18 AS BIGINT)`` is marked too and fails past INT64 on the bounds; harmless
  today only because the rewrite puts a ROUND (priced as raising) in front of a DOUBLE → integer cast. The fix for
  A1 should check every cast target's range against the operand's interval, not rely on that.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import duckdb
import pandas as pd
import pytest
from sqlglot import exp

from tests.adversarial.test_redteam_s4 import TARGET_ROW, _base_rows, _frame, time_neighbours
from tests.adversarial.test_redteam_s11 import UNIT_ROWS, USER_POLICY

# ==================================================================================================
# Part A — attacks that succeed today
# ==================================================================================================

# --- A1. Casts of wide arithmetic to REAL marked as unable to fail ---------------------------------------------
#
# Severity MEDIUM (a sub-second running-time bit about one person's value, ~0.4 s a query at the node budget;
# a threshold on a bounded column, so the value by bisection). Class: running time — a data-dependent slow path
# in a node the price skips. `_WIDE_TARGETS` includes FLOAT on the assumption that a wide value is within ±10¹⁵,
# but `_wide` also accepts arithmetic, which the interval check allows up to ±10¹⁵⁰; a DOUBLE past ±3.4·10³⁸
# fails the cast to REAL, and DuckDB's TRY_CAST formats the error text for each failing row. Fix by construction:
# mark a cast to FLOAT only when the operand's interval (expression_interval) is within ±3.4·10³⁸ (and to BIGINT /
# HUGEINT only within their ranges, rather than relying on the ROUND Veil puts in front), or leave casts of
# arithmetic priced as `converts`; and extend the corner property test to evaluate marked casts without TRY.

#: Marked casts that fail on a corner of the bounds (x ∈ [-1000, 1000], f ∈ [-10⁶, 10⁶]).
REAL_CASTS = [
    "CAST(t.x * 1e36 AS REAL)",
    "CAST(t.f * 1e33 AS FLOAT4)",
    "TRY_CAST(t.f * t.f * t.f * t.f * t.f * t.f * t.f AS REAL)",
    "CAST(-(t.x * 1e36) AS REAL)",
]

#: Marked nodes that must not raise on the corners (B1: they held; keep them pinned).
HELD = [
    "t.x * 2.0000000000000000000000000000000000000",
    "t.x + 2.0000000000000000000000000000000000000",
    "t.x * 1.5 - 7",
    "t.x * 99999999999999999999",
    "t.x * 1e308",
    "-t.x * -1000",
    "t.x * t.f * 1e130",
    "t.x * t.y + t.x",
    "CAST(t.x * 1000000 AS BIGINT)",
    "CAST(t.f * 1e140 AS DOUBLE)",
    "CAST(t.f * 1e140 AS VARCHAR)",
    "CAST(t.f AS REAL)",
    "CAST(t.x * 2000 AS REAL)",
]


@pytest.fixture(scope="module")
def corners(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    from tests.proxy.test_raising_work import BOUNDED_POLICY, CORNERS
    from veil.policy import load_policy
    from veil.proxy._testing import exact_session
    from veil.store.warehouse import write_table

    d = tmp_path_factory.mktemp("s14-corners")
    (d / "policy.toml").write_text(BOUNDED_POLICY, encoding="utf-8")
    policy = load_policy(d / "policy.toml")
    write_table(policy, "t", CORNERS, replace=True)
    with exact_session(policy, "a") as s:
        yield s


def _marked_that_fail(s: object, expr: str) -> tuple[int, list[str]]:
    """How many nodes of ``WHERE expr IS NOT NULL`` are marked CANNOT_RAISE, and those that fail on a row of the
    bounded copy when evaluated without TRY (children in their generated, total form; a cast as a plain CAST)."""
    from veil.proxy import pipeline
    from veil.proxy.totality import CANNOT_RAISE, make_total

    sql = f"SELECT COUNT(*) FROM t WHERE {expr} IS NOT NULL"
    state = pipeline.run(s._state(sql, 1), s._env, until="plan")  # type: ignore[attr-defined]
    assert state.analysis is not None
    table = s._env.bounded_table("t")  # type: ignore[attr-defined]
    con = duckdb.connect()
    con.execute(f"ATTACH '{s._env.policy.database_path}' AS w (READ_ONLY)")  # type: ignore[attr-defined]
    marked, failed = 0, []
    try:
        for node in state.analysis.tree.find_all(exp.Add, exp.Sub, exp.Mul, exp.Neg, exp.Cast):
            if not node.meta.get(CANNOT_RAISE):
                continue
            marked += 1
            if isinstance(node, exp.Cast):
                inner = make_total(node.this.copy())
                bare: exp.Expression = exp.Cast(this=inner, to=node.args["to"].copy())
            else:
                total = make_total(node.copy())
                bare = total.this if isinstance(total, exp.Try) else total
            try:
                con.execute(f"SELECT {bare.sql(dialect='duckdb')} FROM w.{table} AS t").fetchall()
            except duckdb.Error as e:
                failed.append(f"{node.sql(dialect='duckdb')}: {str(e).splitlines()[0]}")
    finally:
        con.close()
    return marked, failed


@pytest.mark.parametrize("expr", REAL_CASTS, ids=["int-times-literal", "float4", "float-power", "under-neg"])
def test_a1_cast_marked_as_unable_to_fail_does_not_fail_on_the_bounds(corners: object, expr: str) -> None:
    """FAILS today (MEDIUM, the mechanism of the timing test below): a cast to REAL of wide arithmetic is marked
    CANNOT_RAISE and fails on a corner of the bounds ("Type DOUBLE with value 1e+39 can't be cast … FLOAT")."""
    _, failed = _marked_that_fail(corners, expr)
    assert not failed, "marked CANNOT_RAISE but fails on the bounded copy:\n  " + "\n  ".join(failed)


#: 10,000 public rows whose key is the target's unit: an equi-join fans each of the target's rows out to 10,000
#: rows with t's values in flat (not constant) vectors, so a cast of them runs once per joined row.
PUB_FAN = pd.DataFrame({"pk": pd.array([7] * 10_000, dtype="Int64"), "pn": ["q"] * 10_000})
#: Five casts (≈ 36 nodes a row × 500,000 of the target's joined rows: inside the 2·10⁷ node budget).
REAL_GREATEST = "GREATEST(" + ", ".join(f"CAST(t.x * {1 + i / 100}e38 AS REAL)" for i in range(5)) + ")"
REAL_QUERY = f"SELECT COUNT(*) FILTER (WHERE {REAL_GREATEST} > 0) AS n FROM t JOIN pub p ON p.pk = t.u"


@pytest.mark.slow
def test_a1_cast_to_real_does_not_reveal_a_value(tmp_path: Path) -> None:
    """FAILS today (MEDIUM): the target's x = 3 (every cast fits) ~0.06 s, x = 5 (every cast fails) ~0.45 s. The
    node budget bounds the gap to well under a second, so the bound here is tighter than s4's 5× D + 1 s: 3× D +
    0.15 s (after a fix both take ~0.06 s)."""
    frames = (
        _frame([*_base_rows(), *[{**TARGET_ROW, "x": 3}] * UNIT_ROWS]),
        _frame([*_base_rows(), *[{**TARGET_ROW, "x": 5}] * UNIT_ROWS]),
    )
    took = time_neighbours(tmp_path, REAL_QUERY, PUB_FAN, frames=frames, policy=USER_POLICY)
    assert took[1] < 3 * took[0] + 0.15, f"D: {took[0]:.2f} s, D′: {took[1]:.2f} s — one value decides the time"


# ==================================================================================================
# Part B — defences that held
# ==================================================================================================


@pytest.mark.parametrize("expr", HELD)
def test_b1_marked_arithmetic_and_casts_do_not_fail_on_the_bounds(corners: object, expr: str) -> None:
    """Passes today: each node the fix marks over these shapes evaluates on every corner without an error."""
    _, failed = _marked_that_fail(corners, expr)
    assert not failed, "marked CANNOT_RAISE but fails on the bounded copy:\n  " + "\n  ".join(failed)


def test_b1_the_probe_sees_marks(corners: object) -> None:
    """The corner probe is not vacuous: the fix marks the arithmetic of these shapes (so B1 tests them)."""
    assert _marked_that_fail(corners, "t.x * 1.5 - 7")[0] >= 2
    assert _marked_that_fail(corners, "CAST(t.f * 1e140 AS VARCHAR)")[0] >= 2


#: A narrow value under a name that reads like a base table's column: a CTE or derived table named ``t``, a CTE
#: aliased ``t``, a public table aliased ``t``, a public column beside the private one. None is wide.
SHADOWED = [
    "WITH t AS (SELECT CAST(t.x AS SMALLINT) AS x, t.u FROM t) SELECT COUNT(*) FILTER (WHERE t.x * 200 > 0) AS n FROM t",
    "SELECT COUNT(*) FILTER (WHERE t.x * 200 > 0) AS n FROM (SELECT CAST(x AS SMALLINT) AS x, u FROM t) AS t",
    "SELECT COUNT(*) FILTER (WHERE x * 200 > 0) AS n FROM (SELECT CAST(x AS SMALLINT) AS x, u FROM t) AS t",
    "WITH c AS (SELECT CAST(x AS SMALLINT) AS x FROM t) SELECT COUNT(*) FILTER (WHERE t.x * 200 > 0) AS n FROM c AS t",
    "SELECT COUNT(*) FILTER (WHERE p.x * 200 > 0) AS n FROM t JOIN pub AS p ON p.pk = t.u",
    "SELECT COUNT(*) FILTER (WHERE t.x * 200 > 0) AS n FROM pub AS t",
]


@pytest.fixture(scope="module")
def shadowing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    from tests.proxy.test_raising_work import BOUNDED_POLICY, CORNERS
    from veil.policy import load_policy
    from veil.proxy._testing import exact_session
    from veil.store.warehouse import write_table

    d = tmp_path_factory.mktemp("s14-shadowing")
    (d / "policy.toml").write_text(BOUNDED_POLICY, encoding="utf-8")
    policy = load_policy(d / "policy.toml")
    write_table(policy, "t", CORNERS, replace=True)
    pub = pd.DataFrame({"pk": pd.array([1, 2], dtype="Int64"), "x": pd.array([1, 2], dtype="Int64"), "n": ["a", "b"]})
    write_table(policy, "pub", pub, replace=True, public=True)
    with exact_session(policy, "a") as s:
        yield s


@pytest.mark.parametrize(
    "sql", SHADOWED, ids=["cte-named-t", "derived-named-t", "derived-bare", "cte-as-t", "pub-col", "pub-as-t"]
)
def test_b2_a_name_shadowing_a_base_table_is_not_wide(shadowing: object, sql: str) -> None:
    """Passes today: `scope.sources` resolves ``t`` to the CTE/derived table or the public table, so nothing in
    these queries is marked CANNOT_RAISE (the product is priced)."""
    from veil.proxy import pipeline
    from veil.proxy.totality import CANNOT_RAISE

    state = pipeline.run(shadowing._state(sql, 1), shadowing._env, until="plan")  # type: ignore[attr-defined]
    assert state.analysis is not None
    marked = [n.sql() for n in state.analysis.tree.walk() if isinstance(n, exp.Expression) and n.meta.get(CANNOT_RAISE)]
    assert not marked, f"marked CANNOT_RAISE over a value that is not wide: {marked}"


def test_b2_the_shadowing_probe_sees_marks(shadowing: object) -> None:
    """Not vacuous: the same product over the base table's column is marked."""
    from veil.proxy import pipeline
    from veil.proxy.totality import CANNOT_RAISE

    sql = "SELECT COUNT(*) FILTER (WHERE t.x * 200 > 0) AS n FROM t JOIN pub AS p ON p.pk = t.u"
    state = pipeline.run(shadowing._state(sql, 1), shadowing._env, until="plan")  # type: ignore[attr-defined]
    assert state.analysis is not None
    assert any(isinstance(n, exp.Mul) and n.meta.get(CANNOT_RAISE) for n in state.analysis.tree.walk())
