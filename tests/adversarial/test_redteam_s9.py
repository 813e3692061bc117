"""Red team, session 9: attacks on the fixes for session 8 (main at 64d5c2d): LIKE/ILIKE only with a constant
pattern, the text work one row makes the engine build (`expansion.text_work` × join factor ≤ 64 MiB), partition
selection before the other statistics with ≤ 20,000 values per unit in a grouped query, unquoted names folded
before resolution with unused CTEs dropped through scopes, and declared policy values type-checked.

Same harness as sessions 4–8 (:mod:`tests.adversarial.test_redteam_s4`): D and D′ differ in one person (the
target, unit 7); the same analyst SQL must end the same way on both and take about the same time.

Part A holds attacks that succeed today (the tests FAIL until Veil is fixed); part B holds probes of defences
that held (they pass, and fail if the defence breaks). Status on 2026-11-26 (DuckDB 2.0, main at 64d5c2d):

* A1 (high) a row value cast to text: `text_work` sizes a tuple `(a, b, …)` like a chooser (its largest
  element), but `CAST((t.s, t.s, …, p.pn) AS TEXT)` builds the text of every element: N × 4 KB per joined row
  for one person's value, counted as 4 KB. N = 100 over a 1,000-row join: D 0.03 s, D′ 1.8 s (N = 150, the test: D′ 2.6 s).
* A2 (high) every quantile statistic is its own histogram query that repeats the whole FROM/WHERE, so the
  per-row ceilings (join factor, text work ≤ 64 MiB) hold per engine query, not per analyst query, and a keyless
  query has no limit on its number of statistics: 50 quantiles over a 5,000-row join whose WHERE case-maps one
  person's text: D 0.5 s, D′ 3.8 s.
* A3 (high) the text-work ceiling is per private *row*, not per person: on a user-level table (max_rows_per_unit
  = 30) one person's 30 rows each build the 64 MiB the ceiling allows — 5,000-row join: D 0.01 s, D′ 1.9 s
  (one row: 0.08 s).
* Part B passes: CTE names that differ from tables or other CTEs only in case run what validation read.
* Held without a test here (probed by hand on DuckDB 2.0): constant LIKE patterns with long or many %-segments,
  backslashes or bracket characters, STRPOS/REPLACE/TRIM with 100 KB needles over 1 MB texts (all linear,
  ≤ 0.03 s); scalar subqueries (refused); CTE/derived-table column lists (`AS c(v)`), DISTINCT ON and ORDER BY
  over private rows (sized or refused); join-factor probes on `OR`, `%`, `/`, FLOOR, LENGTH, COALESCE keys;
  LEFT() cuts by code points (a 5,000-mark grapheme stays 2 code points); 20 statistics × 1,000 groups refused;
  overflow/ROUND/LN/SQRT of one row (same ending on D and D′).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pandas as pd
import pytest

from tests.adversarial.test_redteam_s4 import (
    POLICY,
    TARGET_ROW,
    Pair,
    _base_rows,
    _frame,
    assert_same_ending,
    assert_time_independent,
)
from tests.adversarial.test_redteam_s8 import EMOJI_TARGET, _timed_pair

# ==================================================================================================
# Part A — attacks that succeed today
# ==================================================================================================

# --- A1. A row value cast to text: every element is built, the bound counts the largest ---------------------
#
# Severity HIGH (a deterministic running-time bit of seconds about one person; a denial of service in memory
# too: 2.7 GB RSS at N = 300). Class: running time — text work one row causes per joined row, under-counted.
# `expansion.text_work` sizes any node that is not a text builder, a cast or a literal as "a chooser: at most
# its largest operand" — right for CASE/COALESCE/GREATEST, wrong for `exp.Tuple`, which the allow-list admits
# and which DuckDB turns into a STRUCT whose cast to text holds *every* element (`CAST((s, s) AS TEXT)` is
# 2·|s| + 4 bytes). No concatenation limit applies (it is not `||`), so `CAST((t.s, …×N, p.pn) AS TEXT)`
# builds N × 4 KB for each joined row of one person's 1,024-emoji value, counted as 4 KB + a case map:
# with N = 100 and |pub| = 1,000 the bound is ~10 MB (< 64 MiB) while the engine builds ~0.8 GB.
# Measured (production noise, 2 shared cores, noisy), D without the target / D′ with it, |pub| = 1,000:
#   N = 100: D 0.03 s, D′ 1.8 s; N = 150 (the test): D 0.05 s, D′ 2.6 s (1.7 GB RSS); N = 300: D 0.14 s, D′ 5.7 s (2.7 GB RSS).
# The `p.pn` element keeps DuckDB from computing the cast once per chunk (the single private row is a constant
# vector in the cross product). `WHERE t.u = 7 AND t.x > 3` makes it a hidden-value bit.
# Fix by construction: size text by what each node's *value* can hold, not by what it chooses from — a tuple
# (and any composite that can be cast or compared as text) holds the sum of its elements plus separators;
# better, make the size function total over the allow-list (every allowed node class has its own rule, and
# an unknown class is an InternalError in tests), so a newly allowed node cannot default to "largest operand".


def _tuple_cast(n: int, wrap: str) -> str:
    tup = ", ".join(["t.s"] * n + ["p.pn"])
    return f"SELECT COUNT(*) FILTER (WHERE {wrap.format(tup=tup)}) AS n FROM t CROSS JOIN pub p WHERE t.u = 7"


PUB_1000 = pd.DataFrame({"pk": pd.array(range(1000), dtype="Int64"), "pn": [f"p{i}" for i in range(1000)]})
#: a row value cast to text, then case-mapped (directly, or by the ILIKE → LOWER(x) LIKE LOWER(p) rewrite);
#: CONCAT((…), 'x') and (…) || 'x' are refused by the 64-value concatenation limit (it counts the tuple's columns)
TUPLE_WRAPS = [
    "length(lower(CAST(({tup}) AS TEXT))) > 3",
    "CAST(({tup}) AS TEXT) ILIKE '%zz%'",
]


@pytest.mark.slow
@pytest.mark.parametrize("wrap", TUPLE_WRAPS)
def test_a1_row_value_cast_to_text_counts_every_element(tmp_path: Path, wrap: str) -> None:
    assert_time_independent(tmp_path, _tuple_cast(150, wrap), PUB_1000, target=EMOJI_TARGET)


# --- A2. Each quantile re-runs the query's per-row work: the per-row ceilings hold per engine query ----------
#
# Severity HIGH (a deterministic running-time bit of seconds about one person). Class: running time — work one
# row causes, multiplied by something no ceiling counts. `rewrite._grid` builds one histogram query per quantile
# statistic (PERCENTILE_CONT/DISC, MEDIAN), each a copy of the whole template: its FROM, joins and WHERE run again.
# The plan pass checks the public-join factor (≤ 10,000) and the text work (`text_work` × factor ≤ 64 MiB) once
# for the analyst query, and `check_grouped_contribution` (rows × statistics ≤ 20,000) applies only with group
# keys — so a keyless query with n quantiles makes the engine do n times the per-row work the ceilings allow,
# all of it on the target's joined rows only. `SELECT PERCENTILE_CONT(0.5) WITHIN GROUP (ORDER BY t.y + i) …
# (n = 50) FROM t CROSS JOIN pub p WHERE t.u = 7 AND length(lower(t.s || p.pn)) > 3`, |pub| = 5,000, target
# value 1,024 emoji (4 KB; counted 10 KB per row × 5,000 = 51 MB < 64 MiB). Measured (production noise, 2 shared
# cores, noisy): n = 1: D 0.03 s, D′ 0.13 s; n = 50: D 0.5 s, D′ 3.8 s (linear in n; the query text allows
# thousands). `t.x > 3` in the WHERE makes it a hidden-value bit.
# Fix by construction: charge the ceilings per engine query the plan will run — multiply the per-row work
# (factor, text work) by the number of passes over the joined rows (1 + grid statistics), and bound the
# statistics of a keyless query too (or compute every grid in one pass over the joined rows: one scan with all
# histogram buckets as columns, or materialise the joined rows once and run the grids over that).

QUANTILES = 50
PUB_5000 = pd.DataFrame({"pk": pd.array(range(5000), dtype="Int64"), "pn": [f"p{i}" for i in range(5000)]})


@pytest.mark.slow
def test_a2_quantile_grids_do_not_repeat_one_persons_row_work(tmp_path: Path) -> None:
    stats = ", ".join(f"PERCENTILE_CONT(0.5) WITHIN GROUP (ORDER BY t.y + {i}) AS q{i}" for i in range(QUANTILES))
    sql = f"SELECT {stats} FROM t CROSS JOIN pub p WHERE t.u = 7 AND length(lower(t.s || p.pn)) > 3"
    took = _timed_pair(tmp_path, PUB_5000, sql, EMOJI_TARGET)
    # the same planning and grid queries on both sides: compare what the target adds
    assert took[1] < took[0] + 1.0, (
        f"D: {took[0]:.2f} s, D′: {took[1]:.2f} s — one row decides seconds of running time "
        f"({QUANTILES} histogram queries each redo the per-row text work)"
    )


# --- A3. The text-work ceiling counts one row, and a person has max_rows_per_unit of them ---------------------
#
# Severity HIGH (a deterministic running-time bit of seconds about one person on any user-level table; the
# same class as s7 A4, which the grouped-contribution ceiling fixed by multiplying by the unit's rows).
# Class: running time — per-person work under-counted by the unit's row count. `pipeline._plan` calls
# `check_text_work(text_work(…), factor)`: bytes one *row* builds × the public-join factor ≤ 64 MiB, while the
# grouped ceiling right after it uses `env.contribution(table) × factor`. A person has up to `max_rows_per_unit`
# rows in the bounded copy (no upper limit in the policy), each joined `factor` times, so the work one person
# decides is c × the ceiling. Policy: `privacy_unit = "u"`, `max_rows_per_unit = 30`; D′ adds 30 rows of unit 7
# with a 1,024-emoji value; `COUNT(*) FILTER (WHERE length(lower(t.s || p.pn)) > 3) … CROSS JOIN pub p WHERE
# t.u = 7`, |pub| = 5,000 (counted 10 KB × 5,000 = 51 MB < 64 MiB). Measured (production noise, 2 shared
# cores, noisy): D 0.01 s, D′ 1.9 s; with 50 rows (the test) D′ 3.6 s; with max_rows_per_unit = 1 (one row): D′ 0.08 s.
# Fix by construction: bound the work per privacy unit, not per row — multiply by the unit's contribution, as
# `check_grouped_contribution` does (`check_text_work(work, env.contribution(table) × factor)`), and audit the
# other per-row ceilings (the join factor itself, `MAX_JOINED_TEXT_BYTES`) for the same omission.

UNIT_ROWS = 50
USER_POLICY = POLICY.replace('privacy_unit = "row"', f'privacy_unit = "u"\nmax_rows_per_unit = {UNIT_ROWS}')


@pytest.mark.slow
def test_a3_text_work_is_bounded_per_person_not_per_row(tmp_path: Path) -> None:
    frames = (_frame(_base_rows()), _frame([*_base_rows(), *[EMOJI_TARGET] * UNIT_ROWS]))
    sql = "SELECT COUNT(*) FILTER (WHERE length(lower(t.s || p.pn)) > 3) AS n FROM t CROSS JOIN pub p WHERE t.u = 7"
    assert_time_independent(tmp_path, sql, PUB_5000, frames=frames, policy=USER_POLICY)


# ==================================================================================================
# Part B — defences that held (these pass; they fail if the defence breaks)
# ==================================================================================================

# --- B1. Quoted and unquoted names: what is validated is what runs --------------------------------------
#
# DuckDB matches identifiers case-insensitively even when quoted; Veil follows PostgreSQL (unquoted names fold
# to lower case, quoted ones keep their case). Where the two disagree, the engine SQL must still read what
# validation read: a CTE "PUB"/"X" over the private table beside the public table pub / a CTE x must not make
# the engine read the private table twice (a self-join the sensitivity does not cover), nor read a public CTE
# where Veil counted a private read. Exact answers (noise off) on D (29 rows) and D′ (30 rows), |pub| = 3.

#: (SQL, the exact answer under PostgreSQL's name resolution as a function of the private row count n)
CASE_FOLDED = [
    ('WITH "Pub" AS (SELECT t.u FROM t) SELECT COUNT(*) FROM "Pub" AS a CROSS JOIN pub AS b', lambda n: n * 3),
    ('WITH "T" AS (SELECT pk AS u FROM pub) SELECT COUNT(*) FROM "T" AS a CROSS JOIN t AS b', lambda n: n * 3),
    ("WITH x AS (SELECT u FROM t), \"X\" AS (SELECT pk AS u FROM pub) SELECT COUNT(*) FROM \"X\" AS a CROSS JOIN x AS b",
     lambda n: n * 3),
    ('WITH "X" AS (SELECT pk AS u FROM pub), x AS (SELECT u FROM t) SELECT COUNT(*) FROM x AS a', lambda n: n),
    ('WITH "X" AS (SELECT u FROM t), x AS (SELECT pk AS u FROM pub) SELECT COUNT(*) FROM x AS a', lambda n: 3),
    ("WITH T AS (SELECT u FROM t WHERE u = 7) SELECT COUNT(*) FROM t", lambda n: int(n == 30)),
    ("WITH pub AS (SELECT u AS pk FROM t) SELECT COUNT(*) FROM pub", lambda n: n),
]  # fmt: skip


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    p = Pair(tmp_path_factory.mktemp("s9"), TARGET_ROW)
    yield p
    p.close()


@pytest.mark.parametrize(("sql", "expected"), CASE_FOLDED)
def test_b1_case_folded_names_run_what_was_validated(pair: Pair, sql: str, expected: Callable[[int], int]) -> None:
    d, dp = assert_same_ending(pair, sql)
    assert d.ok, d
    assert (d.rows[0][0], dp.rows[0][0]) == (expected(29), expected(30)), (d, dp, sql)
