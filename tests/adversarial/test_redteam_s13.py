"""Red team, session 13: the fixes to s12 (main at d790512) — arithmetic marked as unable to raise
(`bounds.mark_arithmetic_that_cannot_raise`), the price of casts (`totality.converts` / `raises`), the date
fields/units allow-list with the ISO-week guard, and version stamps on tables other tools wrote.

Same harness as sessions 4–12 (:mod:`tests.adversarial.test_redteam_s4`): D and D′ differ in one person (the
target, unit 7) or in one of their values; the same analyst SQL must end the same way on both and take about the
same time.

Part A holds attacks that succeed today (the tests FAIL until Veil is fixed); part B holds probes of defences
that held (they pass, and fail if the defence breaks). Status on 2026-11-26 (DuckDB 2.0, main at d790512):

* A1 (high) arithmetic on SMALLINT/TINYINT operands that sqlglot annotates as INT is marked CANNOT_RAISE (the
  narrow-type skip reads sqlglot's type), but DuckDB keeps an integer literal in the narrow operand's type and
  overflows: ``(CASE WHEN t.x > 3 THEN CAST(200 AS SMALLINT) ELSE CAST(0 AS SMALLINT) END) * 200`` is priced as
  nothing (casts of constants are free, the product [0, 40,000] is "within ±2³¹"), and raises (caught by TRY)
  on every joined row of the target when x > 3: 0.02 s against 4.0 s (50 rows × 10,000; 2 shared cores, noisy).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.adversarial.test_redteam_s4 import TARGET_ROW, _base_rows, _frame, assert_time_independent
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
