"""Red team, session 8: attacks on the changes of 2026-11-26 (main at 9b547b7, since f22bf44): keyed queries
that bind when they run, the bounded copy's text cap and stored-unit bounding, public domains keyed like the
engine's groups, per-group work outside the engine (sparse histograms, the grouped-contribution ceiling),
unused CTEs dropped before resolution, the answer cache's index, and PERCENTILE … DESC.

Same harness as sessions 4–7 (:mod:`tests.adversarial.test_redteam_s4`): D and D′ differ in one person (the
target, unit 7); the same analyst SQL must end the same way on both, take about the same time, and move every
released statistic by at most the sensitivity the plan charged for.

Part A holds attacks that succeed today (the tests FAIL until Veil is fixed); part B holds probes of defences
that held (they pass, and fail if the defence breaks). Status on 2026-11-26 (DuckDB 2.0, main at 9b547b7):

* A1 (high) per-group work × number of statistics: the s7 A4 fix bounds the groups one person opens (≤ 1,000)
  and the quantile work per unreleased group, but every count/sum statistic is still noised (one OpenDP draw,
  ~7 µs) and converted in Python for every group, released or not — so one person's 1,000 groups × N
  statistics is N × 7 ms of work that one row decides (N = 1,000: 4 s without the target, 13 s with it).
* A2 (low) an unused CTE that a shadowed inner reference (or a case-different name) keeps still ends in an
  InternalError (free, the same on D and D′).
* A3 (high) the text cap counts characters, not bytes, and nothing bounds the text work per joined row: one
  person's 1,024-character value of 4-byte characters (4 KB), concatenated 63 times and case-mapped a few times
  over a 10,000-row join, took 88 s (6 GB RSS) against 0.04 s without them; memory grows ~0.5 GB per nested
  case map, so the bracket-depth limit allows more than this machine's RAM (extrapolated, not run).
* A4 (high) LIKE / ILIKE with a pattern that is not a constant (or a constant one holding `_`) is matched in
  time |text| × |pattern| by DuckDB: 180 KB of literals make one row cost 3 s (quadratic: no join, no wide
  column needed), so the reply time answers any predicate on one person's row (API, CLI and wire).
* A5 (low) declared `values` of another type on an int column (1.5, 1e300, a date), or not scalars at all, are
  accepted by the loader; a public key over them crashes with a raw TypeError (after the charge for ints).
* Part B passes: catalog key types agree with the engine's on odd bare-key shapes; dropping unused CTEs
  neither hides a private read nor changes what runs; a refunded keyed query gives back every account.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.adversarial.test_redteam_s4 import TARGET_ROW, Pair, assert_same_ending, time_neighbours
from veil.errors import VeilError

# ==================================================================================================
# Part A — attacks that succeed today
# ==================================================================================================

# --- A1. One person's groups × many statistics: noise and conversion for every unreleased group ----------
#
# Severity HIGH (a deterministic running-time bit of seconds about one person; the same class as s7 A4, which
# the lead fixed for quantiles and for the number of groups only). Class: running time — per-group work
# outside the engine. 9b547b7 caps the rows one person brings into a grouped query (c × join factor ≤ 1,000)
# and scores quantiles only for released groups, but `add_noise.noisy_statistics` still draws noise for
# *every* count/sum statistic of *every* group the engine returns, before partition selection decides which
# are released, and `Env._raw` converts each of them in Python. The work is groups × statistics, and nothing
# bounds the number of statistics: `SUM(x + 1), …, SUM(x + N)` are N distinct statistics (each its own
# sensitivity, so its own OpenDP call: ~7 µs per value). `SELECT t.u, p.pk, SUM(x + 1), …, SUM(x + N) FROM t,
# pub p WHERE t.u = 7 GROUP BY 1, 2` with |pub| = 1,000 (join factor 1,000 = the ceiling) returns no group on D
# and 1,000 private groups on D′, none released. Measured with production noise (2 shared cores, noisy):
# N = 200: D 0.6 s, D′ 2.3 s; N = 1,000: D 4.1 s, D′ 13 s (profile of N = 500 on D′: 4.3 s in 501
# discrete_laplace calls, 0.7 s in the engine). The reply time answers "is person 7 in the table" (or any
# predicate on their row) with seconds of margin, and the wire server runs a private query to its end.
# Fix by construction: select partitions first — noise the partition statistic for every group, then every
# other statistic (and its Python conversion) only for the released groups, whose number is DP — and bound
# the engine-side part too (c × join factor × number of statistics, or cells fetched, refused free past a
# ceiling), so the work one person adds stays far below a second whatever the query's width.

WIDE_PUB = pd.DataFrame({"pk": pd.array(range(1, 1001), dtype="Int64"), "pn": [f"p{i}" for i in range(1, 1001)]})

#: N distinct statistics of one kind (each ``{i}`` makes another statistic)
WIDE_AGGREGATES = ["SUM(t.x + {i})", "COUNT(*) FILTER (WHERE t.x > {i} - 500)"]


def _wide(agg: str, n: int) -> str:
    stats = ", ".join(agg.format(i=i) for i in range(1, n + 1))
    return f"SELECT t.u AS g, p.pk AS k, {stats} FROM t CROSS JOIN pub p WHERE t.u = 7 GROUP BY 1, 2"


def _timed_pair(tmp_path: Path, pub: pd.DataFrame, sql: str, target: dict[str, Any] = TARGET_ROW) -> list[float]:
    """Seconds the same query takes with production noise on D and on D′ (a free refusal counts as an answer)."""
    return time_neighbours(tmp_path, sql, pub, target=target)


@pytest.mark.slow
@pytest.mark.parametrize("agg", WIDE_AGGREGATES)
def test_a1_many_statistics_cost_no_work_per_unreleased_group(tmp_path: Path, agg: str) -> None:
    took = _timed_pair(tmp_path, WIDE_PUB, _wide(agg, 400))
    # the same planning on both sides (400 statistics take ~1 s to plan): compare what the target adds
    assert took[1] < took[0] + 1.0, (
        f"D: {took[0]:.2f} s, D′: {took[1]:.2f} s — one row decides seconds of running time "
        "(1,000 unreleased groups × 400 statistics)"
    )


# --- A2. An unused CTE kept by a shadowed reference still ends in an internal error -----------------------
#
# Severity LOW (no privacy loss: the error is free and the same on D and D′; a typed refusal is owed). Class:
# name resolution. 9b547b7 drops unused CTEs before resolution (an unused CTE over the private table was
# counted as a second read and ended in an InternalError), but `resolve._drop_unused_ctes` decides "used" by
# name only: any `Table` node of that name anywhere under the WITH's owner, outside the CTE itself, keeps it —
# also a reference that an inner WITH of the same name shadows. `WITH a AS (SELECT * FROM t) SELECT COUNT(*)
# FROM t, (WITH a AS (SELECT * FROM pub) SELECT * FROM a) s` keeps the outer `a` (the inner `a` reads pub), so
# the private table counts two reads and the query ends in `InternalError: the private table is referenced 2
# times in a validated query. This is a bug in Veil` (XX000). The same through case: the drop compares names
# case-insensitively, resolution compares CTE names case-sensitively, so `WITH T AS (SELECT * FROM t) SELECT
# COUNT(*) FROM t` keeps `T` (for the drop, `t` names it) while resolution reads the base table `t` — two
# reads, InternalError. (Related, not a leak: for unquoted names PostgreSQL and DuckDB fold case, so `WITH T AS
# (SELECT * FROM pub) SELECT COUNT(*) FROM t` reads the CTE there; Veil reads the private `t` and charges for it,
# and refuses `WITH A AS (…) SELECT … FROM a` as UnknownTable.) Fix by construction: decide "used" through
# sqlglot's scopes with the resolver's own name comparison (a CTE is used iff some reference *resolves* to
# it), fold unquoted CTE names like table names, and turn the read-count invariant into a typed refusal
# where analyst SQL can reach it.

SHADOWED_CTES = [
    "WITH a AS (SELECT * FROM t) SELECT COUNT(*) FROM t, (WITH a AS (SELECT * FROM pub) SELECT * FROM a) s",
    "WITH a AS (SELECT * FROM t WHERE u = 7) SELECT k, COUNT(*) FROM t, (WITH a AS (SELECT * FROM pub) SELECT * FROM a) s "
    "GROUP BY k",
    "WITH T AS (SELECT * FROM t) SELECT COUNT(*) FROM t",
]


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    p = Pair(tmp_path_factory.mktemp("s8"), TARGET_ROW)
    yield p
    p.close()


@pytest.mark.parametrize("sql", SHADOWED_CTES)
def test_a2_shadowed_unused_cte_is_not_an_internal_error(pair: Pair, sql: str) -> None:
    d, _dp = assert_same_ending(pair, sql)
    assert d.error != "InternalError", f"analyst SQL reached an internal error: {d}"


# --- A3. One person's text × concatenation × case mapping × join factor: the text cap counts characters -----
#
# Severity HIGH (a deterministic running-time bit of tens of seconds about one person, and a denial of
# service: minutes of CPU and gigabytes of memory from one cheap query). Class: running time — work one row's
# text causes per joined row. The s7 A5 fix cuts category values to `max_length` *characters* (default 1,024)
# in the bounded copy; the 16 MiB ceiling (`MAX_JOINED_TEXT_BYTES`) still counts only text *literals* × the
# join factor; and the 64-value concatenation limit and the expansion limit bound the *query*, not the bytes
# per joined row. So one person's value of 1,024 four-byte characters (4 KB, within the cap) concatenated 63
# times with a public column (`t.s || … || p.pn`, 64 values: allowed) is 258 KB built for *each* of the
# 10,000 public rows a keyless query may join (MAX_JOIN_FACTOR) — 2.6 GB of text — and every LOWER/UPPER
# around it copies and case-maps all of it again (nesting depth is bounded only by the expansion limit).
# Measured (production noise, 2 shared cores, noisy), D without the target / D′ with `s = '😀' × 5,000`:
#   * `COUNT(DISTINCT chain)`, |pub| = 10,000: D 0.03 s, D′ 2.2–3.1 s (3.3 GB RSS); ASCII 'z': D′ 0.7 s;
#   * `COUNT(*) FILTER (WHERE length(lower(upper(chain))) > 3)`, |pub| = 1,000: D 0.03 s, D′ 1.5–2.0 s;
#   * the same with five `lower(upper(` levels, |pub| = 10,000: D 0.04 s, D′ 88 s (6 GB RSS).
# With `WHERE t.u = 7 AND t.x > 3` the reply time is a hidden-value bit; `veil serve` runs a private query
# to its end, so a statement timeout cannot hide it.
# Memory: DuckDB keeps every level's intermediate vector (2,048 rows × 258 KB ≈ 0.5 GB) alive while it
# evaluates the nest: at |pub| = 2,048, RSS 1.8 GB with two case maps and 2.9 GB with four (D′ 3–7 s; D
# 0.03 s). The bracket-depth limit (64) allows ~60 levels ≈ 30 GB — more than this 23 GB machine holds, so
# (extrapolated, NOT run here: it would take the shared machine down) one row would decide between an answer
# and an out-of-memory failure or the OOM killer ending the server: an outcome bit, not only a timing one.
# Fix by construction: bound text in bytes, not characters (cut by `strlen`, or count 4 bytes per
# character), and make the per-row text work part of the ceiling that already multiplies by the join factor:
# (bytes of every text operand a row can carry — the cap × column references, literals — × the number of
# copying text operations it passes through) × join factor ≤ 16 MiB, refused free before the reservation.

EMOJI_TARGET = {**TARGET_ROW, "s": "\N{GRINNING FACE}" * 5000}
CHAIN = " || ".join(["t.s"] * 63 + ["p.pn"])
WIDE_TEXT_QUERIES = [
    (10_000, f"SELECT COUNT(DISTINCT {CHAIN}) AS n FROM t CROSS JOIN pub p WHERE t.u = 7"),
    (
        1_000,
        f"SELECT COUNT(*) FILTER (WHERE length(lower(upper(lower(upper({CHAIN}))))) > 3) AS n FROM t CROSS JOIN pub p "
        "WHERE t.u = 7",
    ),
]


@pytest.mark.slow
@pytest.mark.parametrize(("pub_rows", "sql"), WIDE_TEXT_QUERIES)
def test_a3_one_persons_text_work_per_joined_row_is_bounded_in_bytes(tmp_path: Path, pub_rows: int, sql: str) -> None:
    pub = pd.DataFrame({"pk": pd.array(range(pub_rows), dtype="Int64"), "pn": [f"p{i}" for i in range(pub_rows)]})
    took = _timed_pair(tmp_path, pub, sql, EMOJI_TARGET)
    assert took[1] < 5 * took[0] + 1.0, (
        f"D: {took[0]:.2f} s, D′: {took[1]:.2f} s — one person's 4 KB value (1,024 characters) decides the running time"
    )


# --- A4. LIKE with a computed pattern: quadratic work on the one row a predicate selects ------------------
#
# Severity HIGH (a deterministic running-time bit of seconds about one person from one cheap query, no join
# and no wide private value needed; minutes with a 1 MiB query). Class: running time — superlinear work per
# row. Veil's work ceilings assume work linear in the bytes a row carries (literal bytes × join factor ≤
# 16 MiB, 64 concatenated values, the text cap). DuckDB matches LIKE/ILIKE against a *constant* pattern with
# a linear matcher (`LIKE '%…%'` becomes `contains`), but a pattern computed per row — any column in it, here
# the declared `t.k` — goes through the generic matcher, which takes |text| × |pattern| for a text of 'a's
# and a pattern `%aa…ab%`. `SELECT COUNT(*) FROM t WHERE t.u = 7 AND ('a' × 100,000 || t.k) LIKE ('%' || 'a' ×
# 50,000 || t.k || 'b%')` (a 150 KB query, well under the 1 MiB limit) costs nothing on the rows `t.u = 7`
# rejects and 2 s on the one it selects. Measured (production noise, 2 shared cores, noisy): D 0.02 s, D′
# 2.1–2.2 s; ILIKE and NOT LIKE alike (1.8–2.1 s on one row in raw DuckDB). A *constant* pattern is no
# cure when it holds `_`: `LIKE '%' || '_' × 50,000 || 'b%'` (or `'%a_a_…b%'`) takes the generic matcher
# too (2.7–3.3 s on one row of 100,000 'a's in raw DuckDB; `'%aaa…b%'` and `'%a%a%…b'` take 4–7 ms).
# Doubling both literals quadruples it; with a 10,000-row public join (literals then ≤ 1.6 KB by the 16 MiB
# ceiling) a pattern of 500 'a's still took D 0.01 s, D′ 2.4 s. With `AND t.x > 3` the reply time is a
# hidden-value bit; `veil serve` runs a charged query to its end, so a statement timeout cannot hide it.
# Fix by construction: accept for LIKE only a constant pattern made of literal segments and `%` (the shapes
# DuckDB matches in linear time: prefix, suffix, contains, `%`-separated segments — check each shape, ILIKE
# too, with a timing test like this one), or bound
# |text| × |pattern| of every other LIKE by the per-row work ceiling (× join factor), refused free.

QUADRATIC_LIKE = [
    "SELECT COUNT(*) AS n FROM t WHERE t.u = 7 AND ('{a}' || t.k) LIKE ('%{h}' || t.k || 'b%')",
    "SELECT COUNT(*) AS n FROM t WHERE t.u = 7 AND ('{a}' || t.k) ILIKE ('%{h}' || t.k || 'b%')",
    "SELECT COUNT(*) FILTER (WHERE ('{a}' || t.k) NOT LIKE ('%{h}' || t.k || 'b%')) AS n FROM t WHERE t.u = 7",
    # a *constant* pattern with `_` takes the generic matcher too (only `%`-and-literal patterns are linear)
    "SELECT COUNT(*) AS n FROM t WHERE t.u = 7 AND ('{a}' || t.k) LIKE '%{u}b%'",
]


@pytest.mark.slow
@pytest.mark.parametrize("template", QUADRATIC_LIKE)
def test_a4_like_with_a_computed_pattern_costs_linear_work(tmp_path: Path, template: str) -> None:
    sql = template.format(a="a" * 120_000, h="a" * 60_000, u="_" * 60_000)
    pub = pd.DataFrame({"pk": pd.array([1, 2, 3], dtype="Int64"), "pn": ["p", "q", "r"]})
    took = _timed_pair(tmp_path, pub, sql)
    assert took[1] < 5 * took[0] + 1.0, (
        f"D: {took[0]:.2f} s, D′: {took[1]:.2f} s — the one row `t.u = 7` selects decides seconds of running time"
    )


@pytest.fixture(scope="module")
def wire_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from tests.support.attack import Server, set_password
    from tests.support.attack_world import build_world

    world = build_world(tmp_path_factory.mktemp("s8wire"))
    set_password(world.policy, "wire")
    srv = Server(world.policy, world.folder / "serve.log")
    yield srv
    srv.stop()


@pytest.mark.slow
def test_a4_like_oracle_pair_takes_the_same_time_on_the_wire(wire_server: Any) -> None:
    """The A4 attack as an analyst sends it to `veil serve` with psycopg, under `SET statement_timeout = 400`: an
    oracle pair whose two queries differ only in whether a condition on one person's row holds (salary = 13000
    is person 1's, 13001 nobody's). Both are answered (a charged query runs to its end); the reply time must not
    tell them apart."""
    import psycopg

    from tests.support.attack import wire_connect

    a, h = "a" * 120_000, "a" * 60_000
    took = {}
    for i, salary in enumerate((13001, 13000)):
        sql = f"SELECT COUNT(*) FROM people WHERE salary = {salary} AND ('{a}' || dept) LIKE ('%{h}' || dept || 'b%')"
        conn = wire_connect(wire_server.port, "wire")
        try:
            with conn.cursor() as cur:
                cur.execute(f"SET veil.epsilon = {0.0431 + i / 1000}")
                cur.execute("SET statement_timeout = 400")
                start = time.perf_counter()
                try:
                    cur.execute(sql.encode())
                    cur.fetchall()
                except psycopg.Error:  # an error ends it too; only the time is compared
                    pass
                took[salary] = time.perf_counter() - start
        finally:
            conn.close()
    assert took[13000] < 5 * took[13001] + 1.0, (
        f"no such row: {took[13001]:.2f} s; person 1's salary: {took[13000]:.2f} s — the reply time is the bit"
    )


@pytest.mark.slow
def test_a4_like_takes_the_same_time_through_the_cli(pair: Pair) -> None:
    """The A4 query through `veil query` (production noise) on D and on D′."""
    from tests.support.attack import CliInterface

    sql = QUADRATIC_LIKE[0].format(a="a" * 120_000, h="a" * 60_000, u="")
    took = []
    for i, path in enumerate(pair.policy_paths):
        cli = CliInterface(path, "b")
        start = time.process_time()
        cli.query(sql, 0.0123 + i / 1000)
        took.append(time.process_time() - start)
    assert took[1] < 5 * took[0] + 1.0, f"veil query — D: {took[0]:.2f} s, D′: {took[1]:.2f} s"


# --- A5. Declared values of the wrong type on an int column: a raw crash after the charge ----------------
#
# Severity LOW (no data dependence: the policy alone decides; but ε is charged for no answer, and the error is
# an untyped Python exception — through the wire a generic server error). Class: declared domains that are not
# faithful values of the column's type (888b59b refuses values *equal in Python*, not values of another type).
# The loader accepts `values = [1.5, 2, -3]` (or `[1e300, 2]`, or a TOML date) on an `int` column. A public key
# over it then releases the domain as declared, and the post-processing frame types the key column as the
# engine's BIGINT: `SELECT x, COUNT(*) FROM t GROUP BY x ORDER BY x` charges ε and then raises `TypeError:
# cannot safely cast non-equivalent float64 to int64` from pandas (`x + 0` as the key: DECIMAL domain values,
# the same crash). Lists and tables in `values` pass too, and end in `TypeError: unhashable type` (free, but an
# untyped crash). Fix by construction: the policy loader checks each declared value against the column's type
# (an int column takes Python ints in the BIGINT range, not bools; a category column takes strings), refusing
# the policy with a PolicyError naming the value.

#: (the column's policy line, its key, declared values the loader accepts today)
WRONG_TYPED_VALUES = [
    ('x = { type = "int", lower = -10, upper = 10 }', "x", "[1.5, 2, -3]"),
    ('x = { type = "int", lower = -10, upper = 10 }', "x", "[1e300, 2]"),
    ('x = { type = "int", lower = -10, upper = 10 }', "x", "[2, 1979-05-27]"),
    ('x = { type = "int", lower = -10, upper = 10 }', "x + 0", "[1.5, 2, -3]"),
    ('x = { type = "int", lower = -10, upper = 10 }', "x + 0", "[1e300, 2]"),
    # not even scalars: `dict.fromkeys` of the domain raises TypeError (unhashable), before the charge
    ('s = { type = "category" }', "s", "[[1], 2]"),
    ('s = { type = "category" }', "s", "[{ a = 1 }, 2]"),
]


@pytest.mark.parametrize(("column", "key", "values"), WRONG_TYPED_VALUES)
def test_a5_declared_values_of_another_type_are_refused_or_answered(tmp_path: Path, column: str, key: str, values: str) -> None:
    from tests.adversarial.test_redteam_s4 import POLICY, _base_rows, _frame
    from veil.errors import PolicyError
    from veil.policy import load_policy
    from veil.proxy.session import QuerySession
    from veil.store.warehouse import write_table

    declared = POLICY.replace(column, column[:-2] + f", values = {values} }}")
    assert declared != POLICY
    (tmp_path / "policy.toml").write_text(declared, encoding="utf-8")
    try:
        policy = load_policy(tmp_path / "policy.toml")
    except PolicyError:
        return  # refused by the loader: the fix
    write_table(policy, "t", _frame(_base_rows()), replace=True)
    with QuerySession(policy, "a") as s:
        try:
            s.execute(f"SELECT {key} AS g, COUNT(*) AS n FROM t GROUP BY g ORDER BY g", epsilon=1)
        except VeilError:
            pass  # a typed refusal is fine


# ==================================================================================================
# Part B — defences probed that held (these pass today; each fails if its defence breaks)
# ==================================================================================================

# --- B1. Catalog key types agree with the engine's on odd shapes of bare keys -------------------------------
#
# `pipeline._schema_key_types` reads key types off the catalog for a one-statement query grouped by bare
# base-table columns; a wrong guess would end in an InternalError *after* the charge (Env.run checks). Tried:
# quoted and upper-case qualifiers, aliases that swap the private and public tables' names, the public table
# first in FROM, LEFT JOIN, comma joins with WHERE pins, keys by alias and by ordinal, USING (the unqualified
# USING key becomes COALESCE and binds first). Every bare key bound as the catalog said. (Note for the lead:
# `_schema_key_types` reads `tree.args["with"]`, which sqlglot 30 calls `with_`, so its CTE exclusion is dead
# code; it holds only because resolution renames every CTE to `__veil_cte_N`, which no catalog table has.)

ODD_BARE_KEYS = [
    'SELECT "t"."k", COUNT(*) FROM t GROUP BY "t"."k"',
    "SELECT T.S, COUNT(*) FROM t GROUP BY T.S",
    "SELECT pub.k, COUNT(*) FROM t AS pub JOIN pub AS t ON t.pk = pub.x GROUP BY pub.k",
    "SELECT t.pk, t.pn, COUNT(*) FROM t AS pub JOIN pub AS t ON t.pk = pub.x GROUP BY t.pk, t.pn",
    "SELECT p.pn, t.d, COUNT(*) FROM pub p JOIN t ON p.pk = t.x GROUP BY p.pn, t.d",
    "SELECT p.pk, t.b, COUNT(*) FROM t LEFT JOIN pub p ON p.pk = t.x GROUP BY 1, 2",
    "SELECT p.pn AS g, t.y AS h, COUNT(*) FROM t, pub p WHERE p.pk = t.x GROUP BY g, h",
    "SELECT pk, COUNT(*) FROM t JOIN (SELECT pk AS x, pk FROM pub) AS q USING (x) GROUP BY pk",
    # a CTE or a derived table named like a base table, with another type under the same column name
    "WITH pub AS (SELECT CAST(x AS VARCHAR) AS pk FROM t) SELECT pub.pk, COUNT(*) FROM pub GROUP BY pub.pk",
    "SELECT t.k, COUNT(*) FROM (SELECT CAST(x AS VARCHAR) AS k FROM t) AS t GROUP BY t.k",
    "WITH t AS (SELECT x AS k FROM t) SELECT t.k, COUNT(*) FROM t JOIN pub ON pub.pk = t.k GROUP BY t.k",
]


@pytest.mark.parametrize("sql", ODD_BARE_KEYS)
def test_b1_catalog_key_types_are_the_bound_ones(pair: Pair, sql: str) -> None:
    from fractions import Fraction

    from veil.engines.base import output_type
    from veil.proxy import pipeline

    session = pair.sessions[0]
    state = pipeline.run(pipeline.QueryState(sql, Fraction(1)), session._env, until="prepare")
    if state.bind_on_run:
        assert state.plan is not None and state.rendered is not None
        (stmt,) = state.rendered.statements()
        bound = session._env.engine.describe(stmt).types[: len(state.plan.keys)]
        assert state.key_types == [output_type(t) for t in bound], sql
    d, _dp = assert_same_ending(pair, sql)
    assert d.ok, d


# --- B2. Dropping unused CTEs neither hides a private read nor changes what runs ---------------------------
#
# `resolve._drop_unused_ctes` removes CTEs by name before resolution. Tried: CTEs named like the private or
# the public table, forward references to a later sibling, shadowing at an inner WITH, quoted and upper-case
# names, a CTE used only by a dropped CTE, a CTE read only inside its own body (reads the base table): each
# query ends the same on D and D′, a private read is charged, a public-only one is free.

CTE_SHAPES = [
    ("WITH a AS (SELECT * FROM pub), pub AS (SELECT * FROM t) SELECT COUNT(*) FROM a", False),
    ("WITH a AS (SELECT * FROM pub), pub AS (SELECT * FROM t) SELECT COUNT(*) FROM t", True),
    ("WITH t AS (SELECT * FROM t WHERE u = 7) SELECT COUNT(*) FROM t", True),
    ("WITH a AS (SELECT * FROM t WHERE u = 7) SELECT COUNT(*) FROM (WITH a AS (SELECT * FROM pub) SELECT * FROM a) s", False),
    ("WITH a AS (SELECT * FROM t WHERE u = 7), b AS (SELECT * FROM a) SELECT COUNT(*) FROM pub", False),
    ("WITH a AS (SELECT * FROM t) SELECT COUNT(*) FROM (WITH a AS (SELECT * FROM a WHERE u = 7) SELECT * FROM a) s", True),
    ("WITH pub AS (SELECT * FROM t WHERE u = 7) SELECT COUNT(*) FROM pub", True),
]


@pytest.mark.parametrize(("sql", "private"), CTE_SHAPES)
def test_b2_dropped_ctes_keep_reads_counted(pair: Pair, sql: str, private: bool) -> None:
    d, _dp = assert_same_ending(pair, sql)
    assert d.ok, d
    assert (d.charged > 0) == private, f"charged {d.charged} for {'a private' if private else 'a public'} query"


# --- B3. A keyed query refunded at run time gives back the table's cap and δ too ---------------------------
#
# 01dda90 made keyed one-statement queries bind when they run and refund on a before-data engine error. The
# refund must cancel the whole reservation: the analyst's ε and δ and the table cap's. (DuckDB raises
# Binder/Parser/Catalog errors only while binding: no row-dependent refund was found; see s4 B1.)


def test_b3_keyed_refund_returns_every_account(tmp_path: Path) -> None:
    from tests.adversarial.test_redteam_s4 import POLICY, _base_rows, _frame
    from veil.engines.base import EngineError
    from veil.policy import load_policy
    from veil.proxy.session import QuerySession
    from veil.store.ledger import Ledger
    from veil.store.warehouse import write_table

    capped = POLICY.replace(
        '[tables.t]\nprivacy_unit = "row"', '[tables.t]\nprivacy_unit = "row"\nepsilon_total = 50\ndelta_total = 0.1'
    )
    assert capped != POLICY
    (tmp_path / "policy.toml").write_text(capped, encoding="utf-8")
    policy = load_policy(tmp_path / "policy.toml")
    write_table(policy, "t", _frame(_base_rows()), replace=True)
    with QuerySession(policy, "a") as s:
        for sql in (
            "SELECT s, COUNT(*) FROM t WHERE LENGTH(x) > 1 GROUP BY s",
            "SELECT t.k, t.d, SUM(x) FROM t WHERE YEAR(x) = 1 GROUP BY 1, 2",
        ):
            with pytest.raises(EngineError):
                s.execute(sql, epsilon=1)
    ledger = Ledger.for_policy(policy)
    try:
        for account in ("analyst:a", "table:t"):
            spent = ledger.spent(account)
            assert (spent.epsilon, spent.delta) == (0, 0), (account, spent)
    finally:
        ledger.close()
