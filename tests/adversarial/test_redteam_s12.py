"""Red team, session 12: the price of operations that may raise (d84dd98: every operation under a ``TRY`` in the
generated statements costs 1,000 evaluations per row one person brings, `multiplicity.check_raising_work`), the
TRIM literal sets, and the prepared bounded copies with their table versions (7bc1aef).

Same harness as sessions 4–11 (:mod:`tests.adversarial.test_redteam_s4`): D and D′ differ in one person (the
target, unit 7) or in one of their values; the same analyst SQL must end the same way on both and take about the
same time.

Part A holds attacks that succeed today (the tests FAIL until Veil is fixed); part B holds probes of defences
that held (they pass, and fail if the defence breaks). Status on 2026-11-26 (DuckDB 2.0, main at d84dd98):

* A1 (high) ``TRY_CAST`` is not priced (`totality.needs_try` returns False for every ``Cast``), but DuckDB's
  cast of an *integer* to a DECIMAL whose storage integer cannot hold it throws and catches a C++ exception per
  row (3–11 µs against ~5 ns; BIGINT 10¹⁰ → DECIMAL(4,2) or DECIMAL(9,2), ≥ 10¹⁷ → DECIMAL(18,2)). The analyst's
  ``CAST(e AS DECIMAL(p, s))`` is generated as ``TRY_CAST(TRY_CAST(e AS DECIMAL(p, s)) AS DOUBLE)``, so
  ``CAST(CASE WHEN t.x > 3 THEN GREATEST(p.pk, 9·10¹⁸) ELSE p.pk END AS DECIMAL(18,2))`` — CASE, GREATEST and the
  comparison are all "total", nothing under TRY — costs 5.9 s when the target's x = 5 and 0.02 s when x = 3
  (50 rows × 10,000 joined rows; 2 shared cores, noisy). Membership the same way: 0.01 s against 5.7 s.
* A2 (medium) a table another tool wrote (no Veil version comment) is hashed in full by every `veil query`
  process before the prepared copy can be found: 6,000,000 raw rows of the target (50 in the copy) 2.6–4.3 s
  against 0.9–1.0 s through the CLI (three runs; the documented residual of 7bc1aef, but docs/sql.md still says no
  analyst query spends time that grows with the raw table).
* A3 (high) ISO-week parts of the earliest dates raise: `EXTRACT(week | isoyear | yearweek FROM …)` is a "total"
  node (no TRY) and raises a ConversionException on DATE '-5877641-06-25'; `DATE_TRUNC('week' | 'isoyear', …)` of
  it raises through its TRY. With the date chosen by a CASE on a hidden value: D answers, D′ `QueryFailed`
  (charged) — a one-bit oracle at any ε.
* L1/L2 (low, usability) `check_raising_work` runs in `rewrite`, after `explain` stops, so `explain` prices
  queries `query` refuses; and it prices the rewrite's own arithmetic on clamped values (quantile buckets,
  VARIANCE's centring), which cannot raise: MEDIAN + MIN + MAX is refused on a table with ≥ 834 rows per person,
  `WHERE t.x + 1 > p.pk` over an unpinned 100-row public table at ≥ 201.
* L3 (low) `DATE_TRUNC('era' | 'timezone' | 'timezone_hour', d)` passes every free check and fails after the
  charge (NotImplementedException, QueryFailed), on D and D′ alike.
* Part B passes: every partial operation ends the same on D and D′ in every clause (B1).
* Held without a test here (probed by hand on DuckDB 2.0, main at d84dd98): TRY_CAST failing *without* an
  exception (text → DECIMAL/DATE/TIMESTAMP/BOOLEAN, DOUBLE → DECIMAL: 0.2–0.7 µs a row against ~5 ns; bigint →
  DECIMAL(38, 30): 2.5 µs) is unpriced too, but the node ceiling (2·10⁷ evaluations, ~14 nodes per forced
  per-row cast) keeps it below ~0.4 s; DuckDB's common-subexpression elimination evaluates a raising TRY once
  even when a simple CASE with 100 WHENs, a 100-element IN list or BETWEEN repeats it (so `measure` does not
  under-count there); LOWER/UPPER of non-ASCII text cost ~7 ns a character (10× ASCII) but `text_work` prices
  them as building 1.5× their input, ≤ 0.15 s at the 64 MiB ceiling; REPLACE/STRPOS/LIKE with 1,000-byte literal
  needles over a person's worst-shaped 1,024-character value (linear, ≤ 10 µs a row, priced by the literal's
  bytes); TRIM's set check covers TRIM/BTRIM/LTRIM/RTRIM in every syntax sqlglot accepts (a parenthesised
  literal passes; a column, a constant from a CTE or derived table, or a CAST is refused, free); the TRY price
  counts quantile grids (8 operations each) and the s11 A1–A3 tests now pass (refused or fast);
  re-ingest in the same process and policy changes under a live session (the session re-reads the policy; the
  copy follows the new version and spec).
"""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from tests.adversarial.test_redteam_s4 import (
    TARGET_ROW,
    Pair,
    _base_rows,
    _frame,
    assert_same_ending,
    assert_time_independent,
)
from tests.adversarial.test_redteam_s11 import PUB_10000, UNIT_ROWS, USER_POLICY
from veil.errors import VeilError

# ==================================================================================================
# Part A — attacks that succeed today
# ==================================================================================================

# --- A1. TRY_CAST of an integer into a DECIMAL too narrow for it: a caught exception per row, priced as nothing ---
#
# Severity HIGH (a deterministic running-time bit of seconds about one person's value — a threshold on a bounded
# column, so the value by bisection — and membership with `WHERE t.u = 7`). Class: running time — a data-dependent
# slow path in a node the TRY price does not count. d84dd98 prices every operation the rewrite wraps in `TRY` at
# 1,000 evaluations per row one person brings, but `needs_try` returns False for `exp.Cast` ("a TRY_CAST … does not
# raise"). DuckDB's TRY_CAST from an integer to DECIMAL(p, s) checks the range when the value fits the decimal's
# storage integer (int16 up to p = 4, int32 up to 9, int64 up to 18: ~0.3 µs a failing row), but when it does not
# (BIGINT 10¹⁰ into DECIMAL(4,2); ≥ 10¹⁷ into DECIMAL(18,2), where × 10^s overflows int64) the cast throws and
# catches an exception: measured on DuckDB 2.0, 200,000 rows, 1.3–1.9 s against 0.001 s for a value that fits.
# The value need not come from arithmetic (which is priced): a CASE on one person's hidden column choosing a big
# literal (GREATEST with a public column, so the optimiser cannot fold the cast into the CASE's branches) is all
# "total" nodes. 50 rows of the target × 10,000 public rows: D (x = 3) 0.02 s, D′ (x = 5) 5.9 s; DECIMAL(4,2) with
# 10¹⁰: 0.01 s against 1.8 s (2 shared cores, noisy, production noise).
# Fix by construction: price TRY_CAST by what its source and target types can cost (an integer or DOUBLE into a
# DECIMAL as raising; or rewrite the cast so it cannot throw: clamp the operand to the DECIMAL's range with
# LEAST/GREATEST in the *source* type before casting, or cast through DOUBLE), and a test that feeds every
# (source type, target type) pair the closed type set allows with failing values on many rows.

DECIMAL_CASTS = [
    "CAST(CASE WHEN t.x > 3 THEN GREATEST(p.pk, 9000000000000000000) ELSE p.pk END AS DECIMAL(18,2))",
    "CAST(CASE WHEN t.x > 3 THEN GREATEST(p.pk, 10000000000) ELSE 0 END AS DECIMAL(4,2))",
    "CAST(CASE WHEN t.x > 3 THEN GREATEST(p.pk, 10000000000) ELSE 0 END AS DECIMAL(9,2))",
]


@pytest.mark.slow
@pytest.mark.parametrize("cast", DECIMAL_CASTS, ids=["decimal-18", "decimal-4", "decimal-9"])
def test_a1_try_cast_into_a_narrow_decimal_does_not_reveal_a_value(tmp_path: Path, cast: str) -> None:
    """FAILS today (HIGH): the target's x = 3 ~0.02 s, x = 5 ~2–6 s — no TRY in the generated SQL, so no price."""
    sql = f"SELECT COUNT(*) FILTER (WHERE {cast} > 0) AS n FROM t CROSS JOIN pub p WHERE t.u = 7"
    frames = (
        _frame([*_base_rows(), *[{**TARGET_ROW, "x": 3}] * UNIT_ROWS]),
        _frame([*_base_rows(), *[{**TARGET_ROW, "x": 5}] * UNIT_ROWS]),
    )
    assert_time_independent(tmp_path, sql, PUB_10000, frames=frames, policy=USER_POLICY)


@pytest.mark.slow
def test_a1_try_cast_into_a_narrow_decimal_does_not_reveal_membership(tmp_path: Path) -> None:
    """FAILS today (HIGH): D without the target ~0.02 s, D′ with the target's 50 rows ~5 s."""
    sql = (
        "SELECT COUNT(*) FILTER (WHERE CAST(GREATEST(p.pk, 9000000000000000000) AS DECIMAL(18,2)) > 0) AS n "
        "FROM t CROSS JOIN pub p WHERE t.u = 7"
    )
    frames = (_frame(_base_rows()), _frame([*_base_rows(), *[TARGET_ROW] * UNIT_ROWS]))
    assert_time_independent(tmp_path, sql, PUB_10000, frames=frames, policy=USER_POLICY)


# --- L1. `explain` prices a query that `query` then refuses for its TRY work -------------------------------------
#
# Severity LOW (usability, no leak: the refusal is free and depends on the query's shape, the policy and public
# data only). Class: a check placed after the pass `explain` stops at. `check_raising_work` runs in the rewrite
# pass, after `plan`, so `veil explain` / `db.explain` print an exact (ε, δ) cost for a query that `veil query`
# refuses, free. Every earlier per-person ceiling (`check_person_work`, `check_grouped_contribution`, the join
# factor) runs in `plan`, where `explain` sees it. Example: a summary of one bounded column on a user-level table
# with 1,000 rows per person — MEDIAN, MIN and MAX are three histogram statements of 8 operations under TRY each
# (the rewrite's own bucket arithmetic on the clamped value, which cannot raise): 24 × 1,000 rows × 1,000 =
# 2.4·10⁷ > 2·10⁷. Fix: run the check in `plan` (count the partial operations the rewrite will emit there), or have
# `explain` run through `rewrite`.
#
# L2 (LOW, usability): the same queries are legitimate and now refused. The price counts the rewrite's own
# operations on values it has already clamped into the declared bounds (grid buckets `ROUND((e - lo) / step)`,
# VARIANCE's centring), which cannot raise, at 1,000 evaluations each: any query with MEDIAN + MIN + MAX (or four
# quantiles) is refused on a table whose policy keeps ≥ 834 rows per person, and `SELECT AVG(x), AVG(y),
# VARIANCE(x), MEDIAN(y), MIN(y), MAX(y)` (27 operations) at ≥ 741; `WHERE t.x + 1 > p.pk` over an unpinned
# 100-row public table at ≥ 201 rows per person. Fix: price only operations that can raise on the values they
# can receive (the rewrite's arithmetic on clamped DOUBLEs, or an analyst's `x + 1` over declared bounds, cannot).

THOUSAND_POLICY = USER_POLICY.replace(f"max_rows_per_unit = {UNIT_ROWS}", "max_rows_per_unit = 1000")
SUMMARIES = [
    "SELECT MEDIAN(y), MIN(y), MAX(y) FROM t",
    "SELECT PERCENTILE_CONT(0.25) WITHIN GROUP (ORDER BY y), MEDIAN(y), PERCENTILE_CONT(0.75) WITHIN GROUP (ORDER BY y) FROM t",
]


@pytest.fixture(scope="module")
def thousand(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from veil.policy import load_policy
    from veil.proxy.session import QuerySession
    from veil.store.warehouse import write_table

    base = tmp_path_factory.mktemp("s12-thousand")
    (base / "policy.toml").write_text(THOUSAND_POLICY, encoding="utf-8")
    policy = load_policy(base / "policy.toml")
    write_table(policy, "pub", PUB_10000.head(100), replace=True, public=True)
    write_table(policy, "t", _frame([*_base_rows(), TARGET_ROW]), replace=True)
    with QuerySession(policy, "a") as s:
        yield s


@pytest.mark.parametrize("sql", SUMMARIES, ids=["median-min-max", "quartiles"])
def test_l1_a_query_explain_prices_is_not_then_refused_for_its_shape(thousand: Any, sql: str) -> None:
    """FAILS today (LOW): `explain` prints a cost; `execute` refuses (Unsupported, 0A000) the same query, free."""
    thousand.explain(sql)
    try:
        thousand.execute(sql, epsilon=Fraction(1, 2))
    except VeilError as exc:
        pytest.fail(f"explain priced {sql!r}, execute refused it: {exc.sqlstate} {exc.message[:160]}")


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT AVG(x), AVG(y), VARIANCE(x), MEDIAN(y), MIN(y), MAX(y) FROM t",
        "SELECT COUNT(*) FROM t CROSS JOIN pub p WHERE t.x + 1 <> p.pk",  # <>: a range join is refused (s71 F2)
    ],
    ids=["summary", "unpinned-100-row-join"],
)
def test_l2_legitimate_queries_are_not_refused_for_operations_that_cannot_raise(thousand: Any, sql: str) -> None:
    """FAILS today (LOW): refused (0A000) for 'operations that may raise' that cannot, on clamped bounded values."""
    try:
        thousand.execute(sql, epsilon=Fraction(1, 3))
    except VeilError as exc:
        pytest.fail(f"{sql!r} refused: {exc.sqlstate} {exc.message[:160]}")


# --- A2. A table another tool wrote is hashed in full by every `veil query`: time grows with one person's raw rows -
#
# Severity MEDIUM (a seconds-scale membership bit, but only on a table the curator loaded with another tool — DuckDB
# directly, an ETL — and only about a person with millions of raw rows; a heavy user of a transactions table).
# Class: running time that grows with the raw table. 7bc1aef reads the table's version off its catalog comment when
# Veil wrote it, but a table without Veil's comment is still versioned by hashing every raw row
# (`DuckDBEngine.table_version`: count, hash and MD5 of every row) — once per process and warehouse generation. The
# bounded copy exists (built at `veil ingest`/`veil serve`/`bounding.prepare`), but each `veil query` is a new
# process, so each one hashes the whole raw table before it can find the copy: the bounded copy caps the person at
# 50 rows, the hash reads all of them. Measured (2 shared cores, noisy): 2,000,000 raw rows of the target, first
# query of a fresh process 0.65 s against 0.08 s without them; through the CLI with 6,000,000 rows, below.
# Fix by construction: never read raw rows on the analyst's path — on a table without Veil's version, refuse (free)
# and tell the curator to load it with `veil ingest` (or have `veil serve`/`bounding.prepare` stamp a version and
# build the copy on the curator's side), instead of hashing it per process.


def _cli_seconds(base: Path, extra_rows: int) -> float:
    """CPU seconds of a fresh ``veil query`` process on a warehouse whose raw table holds ``extra_rows`` more rows
    of the target (the best of two)."""
    import subprocess
    import sys

    import duckdb

    from tests.support.cpu import children_cpu_seconds
    from veil.policy import load_policy
    from veil.proxy import bounding
    from veil.store.warehouse import write_table

    base.mkdir()
    (base / "policy.toml").write_text(USER_POLICY, encoding="utf-8")
    policy = load_policy(base / "policy.toml")
    write_table(policy, "pub", PUB_10000.head(10), replace=True, public=True)
    write_table(policy, "t", _frame([*_base_rows(), TARGET_ROW]), replace=True)
    con = duckdb.connect(str(policy.database_path))  # the curator's own tool rewrites the table (no Veil comment)
    try:
        con.execute("CREATE OR REPLACE TABLE t AS SELECT * FROM t")
        con.execute(
            "INSERT INTO t SELECT 7, 5, 1.5, 'a', 's1', true, '2300-06-25' FROM range(?)",
            [extra_rows],
        )
    finally:
        con.close()
    assert bounding.prepare(policy) == {}  # the curator's side built the bounded copy
    cmd = [sys.executable, "-m", "veil.cli.main", "query", "--policy", str(base / "policy.toml"), "--analyst", "a"]
    subprocess.run([*cmd, "SELECT COUNT(*) FROM t WHERE x > 0"], check=True, capture_output=True)  # warm the OS cache
    took = []
    for sql in ("SELECT COUNT(*) FROM t", "SELECT COUNT(*) FROM t WHERE x < 0"):  # the best of two fresh processes
        start = children_cpu_seconds()  # the child's CPU time: a neighbour's load does not move it
        subprocess.run([*cmd, sql], check=True, capture_output=True)
        took.append(children_cpu_seconds() - start)
    return min(took)


@pytest.mark.slow
def test_a2_a_query_does_not_hash_one_persons_raw_rows(tmp_path: Path) -> None:
    """FAILS today (MEDIUM): `veil query` on D (the target's one raw row) ~1.5 s, on D′ (6,000,000 raw rows of
    the target, bounded to 50 in the copy) several seconds more."""
    d = _cli_seconds(tmp_path / "d", 0)
    dp = _cli_seconds(tmp_path / "dp", 6_000_000)
    assert dp < d + 1.0, f"veil query: D {d:.2f} s, D′ {dp:.2f} s — the time grows with one person's raw rows"


# --- A3. ISO-week parts of the earliest dates raise — EXTRACT outside any TRY, DATE_TRUNC through it -------------
#
# Severity HIGH (a deterministic one-bit oracle on one person's row at any ε: the query fails, charged, exactly when
# a hidden condition on the target holds). Class: runtime errors in nodes treated as total. `EXTRACT` is in
# `totality.TOTAL_NODES` (never wrapped, never priced), but DuckDB's ISO-calendar parts of a date in the first days
# of its range raise: `EXTRACT(week | isoyear | yearweek FROM DATE '-5877641-06-25')` → ConversionException ("Date
# out of range: -5877641-1-1"). `DATE_TRUNC('week' | 'isoyear' | 'yearweek', …)` of that date or of '-infinity' is
# wrapped in TRY and still raises an OutOfRangeException ("subtracting 3 days from 5877642-06-25 (BC)") — the TRY
# does not catch it (probed on DuckDB 2.0: `SELECT TRY(DATE_TRUNC('week', v))` raises). An analyst writes the date
# as a literal chosen by a CASE on the target's hidden value, so no data needs to hold it; and a row whose own date
# is that early (an ETL's sentinel for "unknown") fails every ISO-week query that reaches it. Measured (noise off):
# D answers, D′ `QueryFailed` (XX000), the same ε charged on both.
# Fix by construction: clamp every date before an ISO-calendar part or a truncation into a range where DuckDB's
# calendar arithmetic cannot leave the date range (e.g. GREATEST(d, DATE '-5877000-01-01') / LEAST(…) over the
# supported range — or clamp dates into a sane range in the bounded copy), and treat EXTRACT/DATE_TRUNC as partial;
# test every allowed part and unit over the extreme dates ('-infinity', the first and last representable days).

EARLY = "CASE WHEN t.u = 7 AND t.x > 3 THEN DATE '-5877641-06-25' ELSE DATE '2000-01-01' END"
ISO_WEEK_QUERIES = [
    f"SELECT COUNT(*) FROM t WHERE EXTRACT(week FROM {EARLY}) = 1",
    f"SELECT COUNT(*) FROM t WHERE EXTRACT(isoyear FROM {EARLY}) = 1",
    f"SELECT COUNT(*) FROM t WHERE EXTRACT(yearweek FROM {EARLY}) = 1",
    f"SELECT COUNT(*) FROM t WHERE DATE_TRUNC('week', {EARLY}) = DATE '2000-01-03'",
    f"SELECT COUNT(*) FROM t WHERE DATE_TRUNC('isoyear', {EARLY}) = DATE '2000-01-03'",
    f"SELECT EXTRACT(week FROM {EARLY}) AS w, COUNT(*) FROM t GROUP BY 1",
]


@pytest.mark.parametrize(
    "sql", ISO_WEEK_QUERIES, ids=["week", "isoyear", "yearweek", "trunc-week", "trunc-isoyear", "group-week"]
)
def test_a3_iso_week_parts_of_an_early_date_do_not_reveal_a_hidden_value(pair: Pair, sql: str) -> None:
    """FAILS today (HIGH): D answers; D′ (the target's x = 5 > 3) fails with QueryFailed, charged."""
    assert_same_ending(pair, sql)


def test_a3_a_persons_own_early_date_does_not_decide_the_ending(tmp_path: Path) -> None:
    """FAILS today (HIGH): the target's own date -5877641-06-25 (or '-infinity' for DATE_TRUNC): D answers,
    D′ QueryFailed."""
    p = Pair(tmp_path, {**TARGET_ROW, "d": "-5877641-06-25"})
    try:
        for sql in (
            "SELECT COUNT(*) FROM t WHERE EXTRACT(week FROM t.d) = 1",
            "SELECT COUNT(*) FROM t WHERE DATE_TRUNC('week', t.d) = DATE '2000-01-03'",
        ):
            assert_same_ending(p, sql)
    finally:
        p.close()


# --- L3. DATE_TRUNC with units DuckDB cannot truncate by fails after the charge ------------------------------------
#
# Severity LOW (no leak: D and D′ end alike; a query that could be refused free is charged and fails). Class: wrong
# error / crash after charge. `DATE_TRUNC('era' | 'timezone' | 'timezone_hour' | 'timezone_minute', d)` passes every
# pass before `reserve`; DuckDB then raises NotImplementedException ("Specifier type not implemented for DATETRUNC
# statistics") while running, even inside TRY: `QueryFailed` (XX000) with ε charged. Fix: allow-list the units
# (a constant unit is known statically) and refuse the rest, free, naming them.


@pytest.mark.parametrize("unit", ["era", "timezone", "timezone_hour"])
def test_l3_a_date_trunc_unit_the_engine_cannot_do_is_refused_free(pair: Pair, unit: str) -> None:
    """FAILS today (LOW): QueryFailed (XX000) after the reservation, ε charged, on D and D′ alike."""
    d, _ = assert_same_ending(pair, f"SELECT COUNT(*) FROM t WHERE DATE_TRUNC('{unit}', t.d) = DATE '2000-01-01'")
    assert d.ok or d.charged == 0, f"DATE_TRUNC('{unit}', …): {d.error} ({d.sqlstate}) with ε {d.charged} charged"


# ==================================================================================================
# Part B — probes of defences that held (they pass; they fail if the defence breaks)
# ==================================================================================================

# --- B1. Every partial operation is made total wherever it stands ----------------------------------------------
#
# Probed with noise off (the s4 pair, row-level, so the TRY price never refuses): a BIGINT overflow, a date +
# INTERVAL overflow and an integer → narrow DECIMAL cast that fail only on the target's row (x = 5), placed in
# WHERE, an inner and a LEFT join's ON, a CTE's body and projection, a derived table, a group key, FILTER,
# COUNT(DISTINCT …), a quantile's argument (MEDIAN and WITHIN GROUP), SUM(CASE …), CASE and COALESCE conditions:
# every query ends the same way on D and D′ (no error on one side only).

OVERFLOWS = [
    "(GREATEST(t.x - 4, 0) * 4611686018427387904 * 4)",
    "(t.d + INTERVAL (GREATEST(t.x - 4, 0) * 1000000) YEAR)",
    "CAST(GREATEST(t.x - 4, 0) * 10000000000 AS DECIMAL(4,2))",
]
PLACES = [
    "SELECT COUNT(*) FROM t WHERE {e} IS NOT NULL",
    "SELECT COUNT(*) FROM t JOIN pub p ON t.s = p.pn AND {e} IS NOT NULL",
    "SELECT COUNT(*) FROM t LEFT JOIN pub p ON t.s = p.pn AND {e} IS NOT NULL",
    "WITH c AS (SELECT t.x, {e} AS v FROM t WHERE {e} IS NOT NULL) SELECT COUNT(v) FROM c",
    "SELECT COUNT(*) FROM (SELECT {e} AS v FROM t) q WHERE q.v IS NULL",
    "SELECT {e} IS NULL AS g, COUNT(*) FROM t GROUP BY 1",
    "SELECT COUNT(*) FILTER (WHERE {e} IS NULL) FROM t",
    "SELECT COUNT(DISTINCT {e}) FROM t",
    "SELECT MEDIAN(CASE WHEN {e} IS NULL THEN t.x ELSE 0 END) FROM t",
    "SELECT PERCENTILE_CONT(0.5) WITHIN GROUP (ORDER BY CASE WHEN {e} IS NULL THEN t.y ELSE 0 END) FROM t",
    "SELECT SUM(CASE WHEN {e} IS NULL THEN 1 ELSE 0 END) FROM t",
    "SELECT COUNT(*) FROM t WHERE CASE WHEN t.u = 7 THEN {e} IS NULL ELSE true END",
    "SELECT COUNT(*) FROM t WHERE COALESCE({e} IS NULL, false)",
]


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    p = Pair(tmp_path_factory.mktemp("s12"), TARGET_ROW)
    yield p
    p.close()


@pytest.mark.parametrize("overflow", OVERFLOWS, ids=["bigint", "interval", "decimal"])
def test_b1_a_partial_operation_ends_the_same_in_every_clause(pair: Pair, overflow: str) -> None:
    for place in PLACES:
        assert_same_ending(pair, place.format(e=overflow))
