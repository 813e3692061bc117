"""Red team, session 6: the fixes of aac2225 (the expansion measure, outer-join pins, total probes,
intervals inside TRY) attacked by class.

Same harness as sessions 4 and 5 (:mod:`tests.adversarial.test_redteam_s4`): D and D′ differ in one
person (the target, unit 7, whose row holds ``x = 5``); the same analyst SQL must end the same way on
both, and take about the same time.

Part A holds attacks that succeed today (the tests FAIL until Veil is fixed); part B holds probes of
defences that held. Status on 2026-11-26 (DuckDB 2.0, on aac2225 merged): 26 fail, 43 pass.

* A1, A2, A4 — one root cause: a scope with two output columns of one name (or names differing only in
  case). DuckDB resolves a reference to the *first*; expansion.measure's dict and sqlglot's types/pins the
  *last*. A1: the CTE expansion check is blind again (DoS and running-time channel of s5 A2/A7); A2: the
  validator's types are wrong, so no TRY_CAST and a row-dependent conversion error (QueryFailed on D′
  only: membership); A4: a text column passes for a numeric pin (sensitivity under-count). Bounds (B1)
  and group keys (B2) follow the engine.
* A3 one row's own long text repeated by the query (`s || s || …`): O(n²·|s|) work on that row only.
* A5 unbracketed operator chains of ~1,000 terms: a bare RecursionError (no typed error).
* A6 select-list alias chains (`a0 || a0 … AS a1, a1 || … AS a2`): inlined by qualify before measuring,
  so they count as written — the s5 A7 DoS again (7 levels: ~10 s; 57 s with a 1 KB literal).
* A7 nested CONCAT_WS (a subclass of Concat, so allow-listed): the separator is repeated n − 1 times,
  4ᵏ growth for k levels — one row's 10 KB becomes 650 MB (D 0.01 s, D′ 0.61 s).
* Part B passes: decoy bounds, decoy group keys, pins of USING/chained/duplicated/DISTINCT/LIMIT/aggregate
  sources, signed zeros, NaN, case and trailing spaces, refused join kinds, total row functions.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.adversarial.test_redteam_s4 import (
    TARGET_ROW,
    Pair,
    assert_cli_same_ending,
    assert_same_ending,
    assert_wire_same_endings,
    timed,
)
from tests.adversarial.test_redteam_s5 import CLI_ATTACKS as S5_CLI_ATTACKS
from tests.adversarial.test_redteam_s5 import assert_within_sensitivity

HIDDEN = "u = 7 AND x > 3"


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    p = Pair(tmp_path_factory.mktemp("s6"), TARGET_ROW)
    yield p
    p.close()


def _timed(pair: Pair, sql: str) -> list[float]:
    return timed(pair.sessions, sql)


# ==================================================================================================
# Part A — attacks that succeed today
# ==================================================================================================

# --- A1. Duplicate output names hide what a CTE column stands for --------------------------------------
#
# expansion.measure records each scope's output columns in a dict keyed by name, so with two projections
# named ``v`` the *last* one's size is kept; DuckDB resolves a reference to ``v`` to the *first*. Each level
# ``SELECT u, v || v || v || v AS v, 1 AS v FROM prev`` then counts as written (×1) while the engine
# builds ×4: measured expanded == written (63 units for six levels, against 19,119 without the decoy).
# The s5 A2 chain (a 100 KB literal only the target's row selects, five levels, ×1024) is accepted again:
# D 0.49 s, D′ 1.07 s here (2 shared cores, noisy) — the running time answers `x > 3` for person 7 — and
# eight levels of a one-byte literal is the planning denial of service of s5 A7 again.


def _decoy_chain(first: str, levels: int, decoy: bool) -> str:
    ctes = [f"c0 AS (SELECT u, {first} AS v FROM t)"]
    extra = ", 1 AS v" if decoy else ""
    ctes += [f"c{i} AS (SELECT u, v || v || v || v AS v{extra} FROM c{i - 1})" for i in range(1, levels + 1)]
    return f"WITH {', '.join(ctes)} SELECT COUNT(*) FROM c{levels} WHERE LENGTH(v) > 0"


@pytest.mark.parametrize("levels", [7, 8])
def test_a1_duplicate_output_names_do_not_hide_expansion(pair: Pair, levels: int) -> None:
    plain, decoyed = pair.run(_decoy_chain("s", levels, False)), pair.run(_decoy_chain("s", levels, True))
    assert not plain[0].ok, "the plain chain is refused by the expansion check (premise)"
    assert (plain[0].ok, plain[0].error) == (decoyed[0].ok, decoyed[0].error), (
        f"a decoy column of the same name hides the ×4 per level: plain {plain[0]}, decoyed {decoyed[0]}"
    )


@pytest.mark.slow
def test_a1_duplicate_output_names_do_not_decide_running_time(pair: Pair) -> None:
    took = _timed(pair, _decoy_chain(f"CASE WHEN {HIDDEN} THEN '{'s' * 200_000}' END", 5, True))
    assert took[1] < 1.5 * took[0] + 0.3, f"D: {took[0]:.2f} s, D′: {took[1]:.2f} s — one row decides the running time"


# --- A2. Duplicate output names confuse the types the validator checks ---------------------------------
#
# The same dict (and sqlglot's type annotation) takes the *last* projection of a name, the engine the
# *first*: in `WITH w AS (SELECT u, s AS v, 1 AS v FROM t)` the validator sees v as an INTEGER and the
# engine reads the text s. `v = 3` then passes the type check and no TRY_CAST is added; DuckDB casts the
# text to a number row by row, and 's1' fails only when a row reaches it: `WHERE u = 7 AND v = 3` is
# QueryFailed (charged) on D′ and answered on D — a membership bit. The same through a join pin, IN, a
# hidden condition, and with a DATE decoy.

CONFUSED = "WITH w AS (SELECT u, x AS x0, {first} AS v, {decoy} AS v FROM t) "
CONFUSED_PLACES = [
    ("s", "1", "SELECT COUNT(*) FROM w WHERE u = 7 AND v = 3"),
    ("s", "1", "SELECT COUNT(*) FROM w WHERE u = 7 AND v IN (1, 2)"),
    ("s", "1", "SELECT COUNT(*) FROM w JOIN pub ON pub.pk = w.v WHERE u = 7"),
    ("s", "1", f"SELECT COUNT(*) FROM w WHERE CASE WHEN {HIDDEN.replace('x', 'x0')} THEN v = 3 ELSE FALSE END"),
    ("s", "1", "SELECT COUNT(*) FROM w WHERE u = 7 AND CASE WHEN v = 1 THEN TRUE END"),
    ("s", "TRUE", "SELECT COUNT(*) FROM w WHERE u = 7 AND v"),  # text read as a boolean
    ("x", "'q'", "SELECT COUNT(*) FROM w WHERE u = 7 AND v = 'abc'"),  # a number compared with a text
    ("d", "'q'", "SELECT COUNT(*) FROM w WHERE u = 7 AND v = 'abc'"),  # a date compared with a text
    ("s", "1.5", "SELECT COUNT(*) FROM w WHERE u = 7 AND v < 2.5"),  # (refused or total today)
    ("s", "DATE '2000-01-01'", "SELECT COUNT(*) FROM w WHERE u = 7 AND v < DATE '2001-01-01'"),  # (total today)
]


@pytest.mark.parametrize(("first", "decoy", "query"), CONFUSED_PLACES)
def test_a2_duplicate_output_names_do_not_confuse_types(pair: Pair, first: str, decoy: str, query: str) -> None:
    assert_same_ending(pair, CONFUSED.format(first=first, decoy=decoy) + query)


#: the decoy may differ in case only: DuckDB matches `v` to the first of `"V"` and `v`, sqlglot to `v`
CASE_DECOYS = [
    'WITH w AS (SELECT u, s AS "V", 1 AS v FROM t) SELECT COUNT(*) FROM w WHERE u = 7 AND v = 3',
    'WITH w AS (SELECT u, s AS v, 1 AS "V" FROM t) SELECT COUNT(*) FROM w WHERE u = 7 AND "V" = 3',
]


@pytest.mark.parametrize("sql", CASE_DECOYS)
def test_a2_decoy_names_differing_in_case_do_not_confuse_types(pair: Pair, sql: str) -> None:
    assert_same_ending(pair, sql)


# ==================================================================================================
# Part B — defences probed that held (these pass today; each fails if its defence breaks)
# ==================================================================================================

# --- B1. Bounds follow the projection the engine reads, decoy names or not -------------------------------
#
# With a decoy of the same name (`x * 1000 AS v, x AS v`) the bounds pass still bounds what the engine
# aggregates (sensitivity 10,000 for SUM over x * 1000): one person moves the statistic within it.

BOUND_DECOYS = [
    "WITH w AS (SELECT u, x * 1000 AS v, x AS v FROM t) SELECT SUM(v) FROM w WHERE u = 7",
    "SELECT SUM(w.v) FROM (SELECT u, x * 1000 AS v, x AS v FROM t) w WHERE u = 7",
    "WITH w AS (SELECT u, x * 1000 AS v, x AS v FROM t) SELECT AVG(v) FROM w WHERE u = 7",
    "WITH w AS (SELECT u, y * 1e6 AS v, y AS v FROM t) SELECT SUM(v) FROM w WHERE u = 7",
    "WITH w AS (SELECT u, 1000 AS c, 1 AS c FROM t) SELECT SUM(c) FROM w WHERE u = 7",
]


@pytest.mark.parametrize("sql", BOUND_DECOYS)
def test_b1_duplicate_output_names_do_not_escape_bounds(pair: Pair, sql: str) -> None:
    assert_within_sensitivity(pair, sql)


# ==================================================================================================
# Part A (continued)
# ==================================================================================================

# --- A3. One person's own long text, repeated by the written query ---------------------------------------
#
# The expansion and text-bytes measures count the query's *literals*; a column reference counts 1 whatever
# the row holds. `s || s || … || s` (n references, a ~3 KB query, within every limit) builds, left to right,
# strings of 1, 2, …, n times the row's text: O(n²·|s|) work and memory decided by one row's data. With the
# target's s of 20 KB and n = 600: D 0.31 s, D′ 2.71 s (2 shared cores, noisy); with s of 1 MB and n = 300
# the process was killed for memory (an out-of-memory error or a timeout is the same bit). The response
# time reveals membership of a long-valued row and the length of its text; no policy bound on text length
# exists to charge it against.


@pytest.fixture(scope="module")
def long_pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    p = Pair(tmp_path_factory.mktemp("s6long"), {**TARGET_ROW, "s": "z" * 20_000})
    yield p
    p.close()


LONG_TEXT_SHAPES = [
    "SELECT COUNT(*) FROM t WHERE LENGTH({r}) > 0",
    "SELECT COUNT(*) FROM t WHERE ({r}) LIKE '%q%'",
    "WITH w AS (SELECT u, {r} AS v FROM t) SELECT COUNT(*) FROM w WHERE LENGTH(v) > 0",
]


@pytest.mark.slow
@pytest.mark.parametrize("shape", LONG_TEXT_SHAPES)
def test_a3_one_rows_long_text_does_not_decide_running_time(long_pair: Pair, shape: str) -> None:
    took = _timed(long_pair, shape.format(r=" || ".join(["s"] * 600)))
    assert took[1] < 1.5 * took[0] + 0.3, f"D: {took[0]:.2f} s, D′: {took[1]:.2f} s — one row decides the running time"


# --- A4. Duplicate output names make a text column pass for a numeric pin ------------------------------
#
# multiplicity._pins accepts `p.z = t.x` as a pin when both sides have the same type key — read from the
# sqlglot annotation, which with `… AS z, pk AS z` is the decoy's INTEGER. The engine compares the first z,
# a text, with x by casting the text to a number, so '5', '05' and ' 5' all match x = 5 while the probe
# groups the texts apart. Noise off: COUNT(*) … WHERE u = 7 moves by 3 with the plan's sensitivity 2; over
# a public table of n distinct spellings ('5', '05', '005', …) the plan says c = 1 and one person adds n,
# and MAX_JOIN_FACTOR is bypassed with it (class 3, a sensitivity under-count).

SPELLINGS = "CASE pk WHEN 1 THEN '5' WHEN 2 THEN '05' ELSE ' 5' END"
PIN_DECOYS = [
    f"SELECT COUNT(*) FROM t JOIN (SELECT {SPELLINGS} AS z, pk AS z FROM pub) p ON p.z = t.x WHERE u = 7",
    f"SELECT COUNT(*) FROM t, (SELECT {SPELLINGS} AS z, pk AS z FROM pub) p WHERE p.z = t.x AND u = 7",
    f"WITH p AS (SELECT {SPELLINGS} AS z, pk AS z FROM pub) SELECT COUNT(*) FROM t JOIN p ON p.z = t.x WHERE u = 7",
    f"WITH p AS (SELECT {SPELLINGS} AS z, pk AS z FROM pub) SELECT COUNT(*) FROM t LEFT JOIN p ON p.z = t.x WHERE u = 7",
]


@pytest.mark.parametrize("sql", PIN_DECOYS)
def test_a4_duplicate_output_names_do_not_fake_a_pin(pair: Pair, sql: str) -> None:
    assert_within_sensitivity(pair, sql)


# --- A5. Long operator chains: an untyped RecursionError -------------------------------------------------
#
# parse limits bracket depth (64) but not the depth of an unbracketed left-associative chain: `s || s ||
# … || s`, `x + x + …` or `c AND c AND …` with ~1,000 terms (a 5 KB query) makes a tree 1,000 deep, and the
# recursive walks after parsing (expansion.measure's size() first) raise a bare RecursionError: no
# VeilError, no SQLSTATE (the error tree's contract; over the wire, an internal error). Not a side channel
# (both sides alike, before any reservation).

CHAINS = [" || ".join(["s"] * 1000), " + ".join(["x"] * 1000) + " > 0", " AND ".join(["x > 0"] * 1000)]


@pytest.mark.parametrize("chain", CHAINS, ids=["concat", "plus", "and"])
def test_a5_long_operator_chains_are_refused_with_a_typed_error(pair: Pair, chain: str) -> None:
    from veil.errors import VeilError

    session = pair.sessions[0]
    before = session.budget().spent
    sql = f"SELECT COUNT(*) FROM t WHERE {'LENGTH(' + chain + ') > 0' if '||' in chain else chain}"
    try:
        session.execute(sql, epsilon=1)
    except VeilError as exc:
        assert exc.sqlstate, exc
    assert session.budget().spent - before in (0, 1), "charged only if answered"


# --- A6. Select-list aliases referenced in the same SELECT: expanded before they are measured ----------
#
# DuckDB lets a projection reference an earlier alias of the same SELECT (`s AS a0, a0 || a0 || a0 || a0
# AS a1, a1 || … AS a2, …`). sqlglot's qualify inlines those references, and expansion.measure runs on
# the qualified tree, so the 4ᵏ-fold expression counts as *written*: the ratio check never fires (the
# written size itself is what grew). A 1.3 KB query of seven such levels over a 1,000-byte literal ran
# 57 s on D and on D′; with `s` as the base, 5 levels 0.4 s, 6 levels 2.1 s, 7 levels ~10 s (×4.5 a level,
# 2 shared cores, noisy). Not a side channel (both sides alike) but the s5 A7 denial of service again,
# through a reference the measure does not see; the target's row alone also carries the 4ᵏ-fold literal.


@pytest.mark.slow
def test_a6_select_list_alias_chains_do_not_blow_up(pair: Pair) -> None:
    cols = ["s AS a0"] + [f"a{i - 1} || a{i - 1} || a{i - 1} || a{i - 1} AS a{i}" for i in range(1, 7)]
    sql = f"WITH w AS (SELECT u, {', '.join(cols)} FROM t) SELECT COUNT(*) FROM w WHERE LENGTH(a6) > 0"
    took = _timed(pair, sql)
    # 7 levels expand to 4⁶ references and are refused after 0.4–0.5 s of CPU (2-core host, 2026-11-28; 8 levels took
    # 2.3 s, 2–4 s on CI: ×4.5 a level). The bound keeps the 8-level version's ratios (CI's worst under it by 1.5×,
    # one level more of blow-up, ×4, over it), and the s6 finding (~10 s at 7 levels) fails it by 7×. 7 levels, not
    # 8: 4 timed runs of 0.45 s instead of 2.3 s (~7 CPU-s a run of the suite).
    assert max(took) < 1.4, f"a {len(sql)}-byte query took D: {took[0]:.2f} s, D′: {took[1]:.2f} s"


# --- A7. CONCAT_WS inserts its separator between every pair of arguments ---------------------------------
#
# validate._check_growth caps REPLACE on the premise that other text functions grow by at most the size
# of their arguments in the query. CONCAT_WS(sep, a₁, …, aₙ) writes sep once and repeats it n − 1 times
# (for '' arguments too; NULL ones are skipped), so k nested CONCAT_WS(…, '', '', '', '', '') multiply the
# innermost text by 4ᵏ with a query that grows by ~30 bytes a level (bracket depth allows k up to ~60).
# Eight levels over a 10 KB literal that only the target's row selects: a 650 MB string on D′ only —
# D 0.01 s, D′ 0.61 s (2 shared cores, noisy); ten levels would be 10 GB (out of memory on D′ only). Over
# the row's own text (`CONCAT_WS(s, …)` nested) it amplifies one person's data length the same way.


def _nested_concat_ws(inner: str, levels: int) -> str:
    for _ in range(levels):
        inner = f"CONCAT_WS({inner}, '', '', '', '', '')"
    return inner


@pytest.mark.slow
@pytest.mark.parametrize(
    "shape",
    [
        "SELECT COUNT(*) FROM t WHERE LENGTH({e}) > 0",
        "WITH w AS (SELECT u, {e} AS v FROM t) SELECT COUNT(*) FROM w WHERE v LIKE '%q%'",
    ],
)
def test_a7_concat_ws_separators_do_not_decide_running_time(pair: Pair, shape: str) -> None:
    e = _nested_concat_ws(f"CASE WHEN {HIDDEN} THEN '{'z' * 10_000}' END", 8)
    took = _timed(pair, shape.format(e=e))
    assert took[1] < 1.5 * took[0] + 0.3, f"D: {took[0]:.2f} s, D′: {took[1]:.2f} s — one row decides the running time"


# ==================================================================================================
# Part B (continued)
# ==================================================================================================

# --- B2. Group keys behind decoy names, and pins of every other join kind --------------------------------
#
# Group keys: whichever projection of a name Veil believes (a declared category or a free text), the
# released keys end the same on D and D′ (a target with a unique text). Pins: USING, chained pins through
# another public table, pins written twice, public sources with DISTINCT/ORDER BY + LIMIT/aggregates,
# signed zeros, NaN, case and trailing spaces in text keys, DATE against TIMESTAMP and wide integers against
# DOUBLE keep the plan's c ≥ what one person adds; ASOF/SEMI/ANTI/NATURAL/POSITIONAL joins are refused.

GROUP_DECOYS = [
    "WITH w AS (SELECT u, s AS g, k AS g FROM t) SELECT g, COUNT(*) FROM w GROUP BY g",
    "WITH w AS (SELECT u, k AS g, s AS g FROM t) SELECT g, COUNT(*) FROM w GROUP BY g",
    "SELECT w.g, COUNT(*) FROM (SELECT u, s AS g, k AS g FROM t) w GROUP BY w.g",
    "WITH w AS (SELECT u, s AS g, b AS g FROM t) SELECT g, COUNT(*) FROM w GROUP BY g",
]


@pytest.fixture(scope="module")
def unique_text_pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    p = Pair(tmp_path_factory.mktemp("s6text"), {**TARGET_ROW, "s": "secret"})
    yield p
    p.close()


@pytest.mark.parametrize("sql", GROUP_DECOYS)
def test_b2_group_keys_behind_decoy_names_end_the_same(unique_text_pair: Pair, sql: str) -> None:
    d, dp = assert_same_ending(unique_text_pair, sql)
    assert d.rows == dp.rows or not any("secret" in str(r) for r in dp.rows), (d, dp)


W7 = "(SELECT u, CASE WHEN u = 7 THEN {v} END AS x FROM t) w"
HELD_PINS = [
    "SELECT COUNT(*) FROM (SELECT u, x AS pk FROM t) w JOIN pub USING (pk) WHERE u = 7",
    "SELECT COUNT(*) FROM t JOIN pub p1 ON TRUE JOIN pub p2 ON p2.pk = p1.pk WHERE p1.pk = t.x AND t.u = 7",
    "SELECT COUNT(*) FROM t JOIN pub p ON p.pk = t.x AND p.pk = t.x WHERE t.u = 7",
    f"SELECT COUNT(*) FROM {W7.format(v=2)} JOIN (SELECT DISTINCT pk FROM pub) p ON p.pk = w.x WHERE u = 7",
    f"SELECT COUNT(*) FROM {W7.format(v=2)} JOIN (SELECT pk FROM pub ORDER BY pk LIMIT 2) p ON p.pk = w.x WHERE u = 7",
    f"SELECT COUNT(*) FROM {W7.format(v=3)} JOIN (SELECT COUNT(*) AS pk FROM pub) p ON p.pk = w.x WHERE u = 7",
    f"SELECT COUNT(*) FROM {W7.format(v='0.0')} JOIN (SELECT CASE WHEN pk = 1 THEN -0.0 ELSE 0.0 END AS z FROM pub) p "
    "ON p.z = w.x WHERE u = 7",
    f"SELECT COUNT(*) FROM {W7.format(v=repr('P'))} JOIN (SELECT CASE WHEN pk = 1 THEN 'p' ELSE 'P' END AS z FROM pub) p "
    "ON p.z = w.x WHERE u = 7",
    f"SELECT COUNT(*) FROM {W7.format(v=repr('a'))} JOIN (SELECT CASE WHEN pk = 1 THEN 'a' ELSE 'a ' END AS z FROM pub) p "
    "ON p.z = w.x WHERE u = 7",
    f"SELECT COUNT(*) FROM {W7.format(v=9007199254740993)} JOIN (SELECT CASE WHEN pk = 1 THEN 9007199254740992.0 "
    "ELSE 9007199254740994.0 END AS z FROM pub) p ON p.z = w.x WHERE u = 7",
    "SELECT COUNT(*) FROM t JOIN (SELECT 5 AS z, pk AS z FROM pub) p ON p.z = t.x WHERE u = 7",
]


@pytest.mark.parametrize("sql", HELD_PINS)
def test_b2_pins_of_other_join_shapes_hold(pair: Pair, sql: str) -> None:
    assert_within_sensitivity(pair, sql)


@pytest.mark.parametrize("kind", ["ASOF", "SEMI", "ANTI", "POSITIONAL"])
def test_b2_other_join_kinds_are_refused_for_free(pair: Pair, kind: str) -> None:
    on = "" if kind == "POSITIONAL" else " ON t.x >= p.pk"
    d, _ = assert_same_ending(pair, f"SELECT COUNT(*) FROM t {kind} JOIN pub p{on} WHERE t.u = 7")
    assert not d.ok and d.charged == 0, d


# --- B3. Row functions with a domain, on a value only the target's row holds ------------------------------
#
# Logarithms and roots of negatives, EXP/POWER overflow, ROUND of the largest double, DATE_TRUNC with a
# unit read from the row or of the last timestamp, ABS/SIGN of the smallest BIGINT, SUBSTRING/LEFT/RIGHT
# with huge or negative lengths, modulo by zero: each is total (NULL or a value) or refused while binding.

HELD_ROW_FUNCTIONS = [
    "DATE_TRUNC(s, d)",
    "DATE_TRUNC(CASE WHEN x > 3 THEN 'zz' ELSE 'year' END, d)",
    "LN(x - 10)",
    "SQRT(x - 10)",
    "LOG(x - 4, 10)",
    "EXP(x * 1000)",
    "POWER(x, 100000)",
    "x % (x - 5)",
    "SUBSTRING(s, x * 1000000000, 2)",
    "LEFT(s, x * 1000000000)",
    "RIGHT(s, -x)",
    "DATE_TRUNC('millennium', CASE WHEN x > 3 THEN TIMESTAMP '294247-01-01 00:00:00' END)",
    "ABS(CASE WHEN x > 3 THEN -9223372036854775808 END)",
    "-(CASE WHEN x > 3 THEN -9223372036854775807 - 1 END)",
    "SIGN(x) * (-9223372036854775807 - 1)",
    "ROUND(CASE WHEN x > 3 THEN 1.7e308 END, -400)",
    "CEIL(CASE WHEN x > 3 THEN CAST(99999999999999999.9 AS DECIMAL(18,1)) END)",
]


@pytest.mark.parametrize("e", HELD_ROW_FUNCTIONS)
def test_b3_row_functions_with_a_domain_are_total(pair: Pair, e: str) -> None:
    assert_same_ending(pair, f"SELECT COUNT(*) FROM t WHERE u = 7 AND ({e}) IS NOT NULL")


# --- The round's ending-class holes through the CLI and the wire ------------------------------------------
#
# The fixes sit in the shared query pipeline; these run one query of each class (and the previous round's)
# through `veil query` and through a real client against `veil serve`, on D and D′.

CLI_ATTACKS = [
    "WITH w AS (SELECT u, s AS v, 1 AS v FROM t) SELECT COUNT(*) FROM w WHERE u = 7 AND v = 3",  # duplicate names
    'WITH w AS (SELECT u, s AS "V", 1 AS v FROM t) SELECT COUNT(*) FROM w WHERE u = 7 AND v = 3',  # by case
    f"SELECT COUNT(*) FROM t WHERE LENGTH(CONCAT_WS('', CASE WHEN {HIDDEN} THEN 'ab' END, s)) > 0",  # CONCAT_WS
    f"SELECT COUNT(*) FROM t WHERE LENGTH({' || '.join(['s'] * 100)}) > 0",  # a long concatenation
    f"SELECT COUNT(*) FROM t WHERE ({' + '.join(['u'] * 600)}) > 0",  # too deep
]


@pytest.mark.parametrize("sql", CLI_ATTACKS)
def test_a8_cli_outcome_does_not_depend_on_one_row(pair: Pair, sql: str) -> None:
    assert_cli_same_ending(pair, sql)


@pytest.mark.slow
def test_a9_wire_outcome_does_not_depend_on_one_row(pair: Pair) -> None:
    assert_wire_same_endings(pair, [*S5_CLI_ATTACKS, *CLI_ATTACKS])
