"""Red team, session 10: attacks on the per-person work bounds of fb6ab6b (`multiplicity.check_person_work`:
node evaluations and text built, × rows per unit × join multiplicity × statements).

Same harness as sessions 4–9 (:mod:`tests.adversarial.test_redteam_s4`): D and D′ differ in one person (the
target, unit 7); the same analyst SQL must end the same way on both and take about the same time.

Part A holds attacks that succeed today (the tests FAIL until Veil is fixed). Status on 2026-11-26 (DuckDB 2.0,
main at fb6ab6b):

* A1 (high) text *read* per evaluation: the evaluation ceiling (10^8 node evaluations per person) prices every
  node alike, and `text_work` prices only text a node *builds*. A comparison of two equal texts reads both in
  full, so `GREATEST(t.s, …×150)` / `LEAST(…)` on a 1,024-character (4 KB) value costs ~4 KB of memcmp per
  argument per row, none of it counted: 50 rows per unit × 10,000 joined rows, D 0.04 s, D′ (short value,
  the same evaluations) 0.9 s, D′ (4 KB value) 4.0 s.
* A2 (high) text *stored* per row: `COUNT(DISTINCT (t.s, p.pk))` keeps every joined row's 4 KB value in the
  DISTINCT hash table; a row value builds nothing, so `text_work` is 0, while `t.s || p.pn` is refused at
  1.2 GB. 30 distinct rows of one person × 10,000 joined rows: D 0.01 s / 240 MB RSS, D′ 1.7–2.9 s / 1.45 GB RSS
  (40 rows, the test: D′ 1.8 s, 2.1 GB).
* Held without a test here (probed by hand on DuckDB 2.0, main at fb6ab6b): STRPOS/REPLACE/contains with a
  private 1,024-character needle of the worst shapes (`a…ab`, `ba…a`, `abab…`) in a 500 KB literal haystack,
  TRIM with a 200 KB character set (all linear, ≤ 0.02 s); constant `%`-LIKE, STRPOS and LENGTH of a 4 KB
  value (memchr-fast, and DuckDB computes them once per chunk when the private row is a constant vector of a
  cross product); `p.pn IN (t.s, …)`; POWER/LN chains up to the 10^8-evaluation ceiling (0.3 s, or refused);
  a public × public derived table joined to the private row (the join-factor probe runs it on D and D′ alike);
  DISTINCT/GROUP BY inside a subquery over private rows (refused); quantile arguments that are not bounded
  (refused), so grid buckets stay within the grid; date + huge INTERVAL (`d + INTERVAL '292100' YEAR`, the
  target's 2300 date overflows: the same ending on D and D′).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from tests.adversarial.test_redteam_s4 import (
    POLICY,
    TARGET_ROW,
    Pair,
    _base_rows,
    _frame,
    assert_cli_same_ending,
    assert_time_independent,
    assert_wire_same_endings,
)
from tests.adversarial.test_redteam_s8 import EMOJI_TARGET

# ==================================================================================================
# Part A — attacks that succeed today
# ==================================================================================================

# --- A1. Text read per evaluation: a comparison of long equal texts reads them whole, counted as one node -------
#
# Severity HIGH (a deterministic running-time bit of seconds about one person; a hidden-value bit with
# `AND t.x > 3`). Class: running time — per-evaluation work that grows with the value's length, which the
# evaluation ceiling counts as a unit. `check_person_work(rows, nodes, text)` bounds nodes × rows ≤ 10^8 and
# text *built* × rows ≤ 64 MiB; GREATEST/LEAST are choosers (they build nothing: `text_work` 0), yet DuckDB
# compares each argument to the running maximum, and two equal strings compare by a full memcmp of their bytes.
# `GREATEST(t.s, …×150, p.pn)` (≈ 150 nodes) over 50 rows per unit × a 10,000-row join = 5·10^5 rows ≈ 7.6·10^7
# node evaluations (< 10^8): with the target's 1,024-emoji value (4 KB, the text cap) each evaluation reads
# 4 KB. `p.pn` keeps DuckDB from computing the call once per chunk (the private row is a constant vector in the
# cross product). Measured (production noise, 2 shared cores, noisy), D = base rows, D′ = + 50 rows of unit 7:
#   GREATEST: D 0.04 s; D′ with a 2-character value 0.9 s; D′ with the 4 KB value 3.96 s.
#   LEAST:    D 0.04 s; D′ with a 2-character value 0.8 s; D′ with the 4 KB value 3.95 s.
# (`p.pn IN (t.s, …)` held: 0.2 s; `t.s || p.pn IN (…)` is refused by the text-work ceiling.)
# Fix by construction: price every node that reads a text operand by the bytes it reads — comparisons,
# GREATEST/LEAST (each argument), LIKE, STRPOS, LENGTH, IN, CASE operand matches, hashing in GROUP BY /
# COUNT(DISTINCT) / join keys — i.e. make `text_work` count bytes *touched*, not only bytes built, so that
# nodes × rows × bytes-per-operand is what the ceiling bounds (or cap the number of text operands per node).

UNIT_ROWS = 50
USER_POLICY = POLICY.replace('privacy_unit = "row"', f'privacy_unit = "u"\nmax_rows_per_unit = {UNIT_ROWS}')
PUB_10000 = pd.DataFrame({"pk": pd.array(range(10_000), dtype="Int64"), "pn": [f"p{i}" for i in range(10_000)]})
CHOOSERS = ["GREATEST({a}, p.pn) > 'z'", "LEAST({a}, p.pn) > 'z'"]


@pytest.mark.slow
@pytest.mark.parametrize("cond", CHOOSERS)
def test_a1_text_comparisons_are_priced_by_the_bytes_they_read(tmp_path: Path, cond: str) -> None:
    sql = f"SELECT COUNT(*) FILTER (WHERE {cond.format(a=', '.join(['t.s'] * 150))}) AS n FROM t CROSS JOIN pub p WHERE t.u = 7"
    frames = (_frame(_base_rows()), _frame([*_base_rows(), *[EMOJI_TARGET] * UNIT_ROWS]))
    assert_time_independent(tmp_path, sql, PUB_10000, frames=frames, policy=USER_POLICY)


# --- A2. Text stored per row: a DISTINCT over a row value holds every joined copy of one person's text ---------
#
# Severity HIGH (a deterministic running-time bit of seconds and a memory blow-up of ~1.2 GB decided by one
# person; more rows per unit or a wider join scale it to an out-of-memory). Class: running time and memory —
# text a node keeps (hash tables of COUNT(DISTINCT), DISTINCT, GROUP BY) not counted. `text_work` prices the bytes
# a node *builds*; a tuple builds nothing (it is costed only when cast to text, s9 A1), but
# `COUNT(DISTINCT (t.s, p.pk))` makes DuckDB copy each distinct (value, key) pair — the whole 4 KB value — into
# the aggregate's hash table, once per joined row. The same bytes as `t.s || p.pn` are refused ("about
# 1,238,400,000 bytes of text … Veil allows 67,108,864"). Policy `privacy_unit = "u"`, `max_rows_per_unit = n`;
# D′ adds n rows of unit 7, each a different 1,100-emoji value (capped to 4 KB); |pub| = 10,000 (n × 10,000 rows,
# a few nodes each, < 10^8 evaluations). Measured (production noise, 2 shared cores, noisy), one process:
#   10 rows: D 0.01 s / 240 MB max RSS, D′ 0.29 s / 644 MB; 30 rows: D 0.01 s / 240 MB, D′ 1.7–2.9 s / 1,449 MB;
#   40 rows (the test): D 0.01 s, D′ 1.8 s, test process max RSS 2.1 GB.
# Fix by construction: count text *kept* like text built — every aggregate or DISTINCT input (and GROUP BY key,
# join key, ORDER BY key) holds the size of its value (a tuple: the sum of its elements) per row, so
# `check_person_work`'s text term bounds what DISTINCT/hash tables store; simplest, make `text_work` charge each
# node by the bytes it touches (built, read or kept), as A1 also needs.

DISTINCT_ROWS = 40
DISTINCT_POLICY = POLICY.replace('privacy_unit = "row"', f'privacy_unit = "u"\nmax_rows_per_unit = {DISTINCT_ROWS}')
DISTINCT_TARGETS = [{**EMOJI_TARGET, "s": f"{i:03d}" + "\N{GRINNING FACE}" * 1100} for i in range(DISTINCT_ROWS)]


@pytest.mark.slow
def test_a2_text_kept_by_distinct_is_bounded_per_person(tmp_path: Path) -> None:
    sql = "SELECT COUNT(DISTINCT (t.s, p.pk)) AS n FROM t CROSS JOIN pub p WHERE t.u = 7"
    frames = (_frame(_base_rows()), _frame([*_base_rows(), *DISTINCT_TARGETS]))
    assert_time_independent(tmp_path, sql, PUB_10000, frames=frames, policy=DISTINCT_POLICY)


# --- (lead) this session's refusals, through `veil query` and a real client against `veil serve` -----------------
#
# Each class fixed this session refuses free with a typed SQLSTATE on both D and D′ through the interfaces users
# touch (the Python API is covered above and in tests/proxy/): a computed LIKE pattern, a '_' pattern, text work
# past the ceiling.

INTERFACE_REFUSALS = [
    "SELECT COUNT(*) FROM t WHERE s LIKE s || '%'",
    "SELECT COUNT(*) FROM t WHERE s LIKE 's_'",
    "SELECT COUNT(*) FROM t WHERE " + "LOWER(" * 25 + "s" + ")" * 25 + " = ''",
    # the fifth session's: a computed TRIM set (s11 A1), date fields/units the engine cannot compute on every
    # value (s12 A3/L3); the raising-work price over the wire is test_redteam_s11.py::test_a3_through_the_wire
    "SELECT COUNT(*) FROM t WHERE TRIM(BOTH s FROM 'abc') = ''",
    "SELECT COUNT(*) FROM t WHERE EXTRACT(ERA FROM d) = 1",
    "SELECT COUNT(*) FROM t WHERE DATE_TRUNC('timezone', d) IS NULL",
]


@pytest.fixture(scope="module")
def iface_pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    p = Pair(tmp_path_factory.mktemp("s10iface"), TARGET_ROW)
    yield p
    p.close()


@pytest.mark.slow
@pytest.mark.parametrize("sql", INTERFACE_REFUSALS)
def test_this_sessions_refusals_end_the_same_through_the_cli(iface_pair: Pair, sql: str) -> None:
    from tests.support.attack import CliInterface

    assert_cli_same_ending(iface_pair, sql)
    out = CliInterface(iface_pair.policy_paths[1], "b").query(sql, 0.01)
    assert not out.ok and out.sqlstate == "0A000", out  # refused as unsupported, not answered


@pytest.mark.slow
def test_this_sessions_refusals_end_the_same_over_the_wire(iface_pair: Pair) -> None:
    assert_wire_same_endings(iface_pair, INTERFACE_REFUSALS)
