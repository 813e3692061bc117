"""Red team, session 11: the less attacked parts of the query path — the refund of engine errors from before
reading data (the catalog key-type shortcut, ``bind_on_run``), the answer cache, partition selection and
public-key groups, the per-person work bounds (`expansion.text_work`, `multiplicity.check_person_work`), and
the noise domain's types.

Same harness as sessions 4–10 (:mod:`tests.adversarial.test_redteam_s4`): D and D′ differ in one person (the
target, unit 7); the same analyst SQL must end the same way on both and take about the same time.

Part A holds attacks that succeed today (the tests FAIL until Veil is fixed); part B holds probes of defences
that held (they pass, and fail if the defence breaks). Status on 2026-11-26 (DuckDB 2.0, main at 6ea75c2):

* A1 (high) TRIM's character set is decoded into a hash set anew for every row: `TRIM(BOTH t.s FROM p.pn)`
  costs the engine ~40 ns per distinct character of one person's value per joined row, but `text_work` prices
  the set as text *read* (1/16 of building it): one person's 1,024-character CJK value × 50 rows × 4,000
  joined rows, D′ 8.2 s against 0.03 s for a 2-character value (the same rows, the same bound).
* A2 (medium) the same with a public table's long text as the set: `TRIM(BOTH p.doc FROM t.s)` with 49
  public values of 250 KB and 20 rows of the target: 1.9 s against 0.08 s without the target (needs a public
  table holding long text; the analyst cannot make one).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.adversarial.test_redteam_s4 import (
    POLICY,
    TARGET_ROW,
    _base_rows,
    _frame,
    assert_time_independent,
)

# ==================================================================================================
# Part A — attacks that succeed today
# ==================================================================================================

# --- A1. TRIM's character set: one person's value is decoded into a hash set for every joined row -------------
#
# Severity HIGH (a deterministic running-time bit of seconds about one person's value; membership too, with
# `WHERE t.u = 7`, and any hidden condition with `AND t.x > 3`). Class: running time — per-evaluation work on a
# text operand that is far dearer than reading it. DuckDB's TRIM/LTRIM/RTRIM(s, chars) decodes `chars` into a
# set of code points *for every row* it evaluates (not once for a constant set): ~40 ns per distinct CJK
# character, ~5.5 ns per byte of ASCII. `expansion.text_work` prices every text operand as read once at
# 1/READ_SHARE (= 1/16) of building it, so the set `t.s` (the 1,024-character cap × 4 bytes) counts 256 bytes
# per row: 288 per row × 50 rows per unit × 4,000 public rows = 57.6 MB < 64 MiB, a handful of nodes per row
# (< 2·10⁷ evaluations), no literal (so `check_factor`'s text term is 0). The engine then builds 200,000 sets of
# 1,024 distinct characters for the target's rows: measured (production noise, 2 shared cores, noisy, one
# process), D′ with the target's 1,024-character CJK value 8.2 s; D with a 2-character value in the same rows
# 0.03 s. Here 2,500 public rows (D′ ≈ 5 s) to keep the test shorter.
# Fix by construction: give each allowed function a per-evaluation cost for each operand that matches the
# engine (TRIM's character set is *decoded and hashed* per row: price it like building, or more, or allow only
# a constant character set of a few characters); better, derive `text_work`'s operand prices from a measured
# table per function (read, build, hash/decode) rather than one READ_SHARE, and test each allowed function's
# worst operand shape against the ceiling (a timing test per allowed function, like this one).

UNIT_ROWS = 50
USER_POLICY = POLICY.replace('privacy_unit = "row"', f'privacy_unit = "u"\nmax_rows_per_unit = {UNIT_ROWS}')
PUB_2500 = pd.DataFrame({"pk": pd.array(range(2500), dtype="Int64"), "pn": [f"p{i}" for i in range(2500)]})
#: 1,100 distinct CJK characters (the bounded copy keeps the first 1,024): the costliest set per byte
CJK_TARGET: dict[str, Any] = {**TARGET_ROW, "s": "".join(chr(0x4E00 + i) for i in range(1100))}
SHORT_TARGET: dict[str, Any] = {**TARGET_ROW, "s": "s1"}
TRIM_SET_QUERIES = [
    "SELECT COUNT(*) FILTER (WHERE TRIM(BOTH t.s FROM p.pn) = 'x') AS n FROM t CROSS JOIN pub p WHERE t.u = 7",
    "SELECT COUNT(*) FILTER (WHERE LTRIM(p.pn, t.s) = 'x') AS n FROM t CROSS JOIN pub p WHERE t.u = 7 AND t.x > 3",
    "SELECT COUNT(*) FILTER (WHERE RTRIM(p.pn, t.s) = 'x') AS n FROM t CROSS JOIN pub p WHERE t.u = 7",
]


@pytest.mark.slow
@pytest.mark.parametrize("sql", TRIM_SET_QUERIES, ids=["trim", "ltrim-hidden-value", "rtrim"])
def test_a1_trim_character_set_of_one_persons_value_is_priced_by_its_per_row_work(tmp_path: Path, sql: str) -> None:
    """FAILS today (HIGH): D′ (the target's 1,024 CJK characters) ~5 s, D (a 2-character value) ~0.03 s."""
    frames = (
        _frame([*_base_rows(), *[SHORT_TARGET] * UNIT_ROWS]),
        _frame([*_base_rows(), *[CJK_TARGET] * UNIT_ROWS]),
    )
    assert_time_independent(tmp_path, sql, PUB_2500, frames=frames, policy=USER_POLICY)


@pytest.mark.slow
def test_a1_trim_character_set_membership(tmp_path: Path) -> None:
    """FAILS today (HIGH): D without the target's rows ~0.03 s, D′ with them ~5 s."""
    frames = (_frame(_base_rows()), _frame([*_base_rows(), *[CJK_TARGET] * UNIT_ROWS]))
    assert_time_independent(tmp_path, TRIM_SET_QUERIES[0], PUB_2500, frames=frames, policy=USER_POLICY)


# --- A2. The same with a public table's long text as the character set ----------------------------------------
#
# Severity MEDIUM (seconds-scale membership bit; needs a public or published table holding long text values,
# which the analyst cannot create). Class: as A1. `TRIM(BOTH p.pn FROM t.s)` with 49 public values of 250 KB:
# the set is decoded per joined row (~1.9 ms each), priced ~67 KB per row; 20 rows per unit × 49 = 980 rows
# (65.8 MB < 64 MiB). Measured (2 shared cores, noisy): with the target 1.9 s, with unit 8 (absent) 0.08 s.

DOC_POLICY = POLICY.replace('privacy_unit = "row"', 'privacy_unit = "u"\nmax_rows_per_unit = 20')
PUB_DOCS = pd.DataFrame({"pk": pd.array(range(49), dtype="Int64"), "pn": [f"{i:04d}" + "b" * 250_000 for i in range(49)]})


@pytest.mark.slow
def test_a2_trim_character_set_from_public_text_is_priced_by_its_per_row_work(tmp_path: Path) -> None:
    """FAILS today (MEDIUM): D ~0.02 s, D′ (20 rows of the target) ~1.9 s."""
    sql = "SELECT COUNT(*) FILTER (WHERE TRIM(BOTH p.pn FROM t.s) = 'x') AS n FROM t CROSS JOIN pub p WHERE t.u = 7"
    frames = (_frame(_base_rows()), _frame([*_base_rows(), *[TARGET_ROW] * 20]))
    assert_time_independent(tmp_path, sql, PUB_DOCS, frames=frames, policy=DOC_POLICY)
