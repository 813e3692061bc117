"""Red team, session 17: today's fixes — released keys' spelling, centred moments built total (red team s15), and
the publications' kRR, gate, ledger accounts, write paths and PATE student table (red team s16).

Same harness as sessions 4–15 (:mod:`tests.adversarial.test_redteam_s15`): D and D′ differ in one person (the
target, unit 7) or in one of their values; the same analyst SQL must end the same way on both, and every released
value must differ only through the noise (noise off: ``veil.proxy._testing.exact_session``), each statistic by at
most the sensitivity its plan used.

Part A holds attacks that succeeded on 2026-11-26 (main at 867181c); part B holds probes of defences that held
(they pass, and fail if the defence breaks). Lead's status after the fixes (same day): A1, A3, A4, A5 fixed
(e4dee79: parsed analyst trees hold no meta and no comments; cd00c5e: the catalog rebuilt on every publication or
retraction; a DP publication's record leaves out exact source sizes; DP microaggregation leaves out undeclared
labels); A2 fixed in the seventh session (fixed-point sums, veil/proxy/fixed_point.py). Finding text as reported:

* A1 (HIGH) the analyst sets Veil's own internal marks. sqlglot turns a comment ``/* sqlglot.meta KEY */`` after
  a node into ``node.meta[KEY] = True``, and Veil keeps its trust marks in the same ``meta`` dict: the new
  ``BUILT_TOTAL`` (``veil_built_total``: `totality.make_total` leaves the node and *its operands* as they are),
  ``CANNOT_RAISE`` (``veil_cannot_raise``: not priced as raising work) and ``WIDE_SUM`` (``veil_wide_sum``).
  `parse._drop_positions` only pops the position keys. So
  ``SELECT COUNT(*) FROM t WHERE CAST(CASE WHEN x > 3 THEN 'zz' ELSE '1' END AS INTEGER)
  /* sqlglot.meta veil_built_total */ > 0`` is sent to DuckDB with a plain CAST (no TRY_CAST): it answers on D
  and on the neighbour with x = 3, and fails with QueryFailed (Conversion error) on the neighbour with x = 10 —
  one bit of one person's row per query, whatever the noise, through `veil.connect`, `veil query` and a PostgreSQL
  client on `veil serve` (XX000 against an answer). With
  ``veil_cannot_raise`` on 50 casts to DECIMAL the raising-work price counts 49 operations instead of 99
  (``veil_built_total``: 0 fallible casts instead of 50): the timing bound of red team s12 is bypassed too.
  Fix: in `veil/proxy/parse.py` (where positions are dropped) clear every node's ``meta`` except the keys Veil
  reads from sqlglot, or keep Veil's marks out of ``meta`` (a set of node ids held by the pass, or a private
  attribute sqlglot's parser cannot reach); class-level: no analyst text can set any key Veil reads. (The
  failure is charged, ε ≥ the minimum per bit; the ``veil_cannot_raise``/``veil_wide_sum`` marks alone do not
  skip TRY: `_total_node` builds a fresh TRY_CAST without them, so those MARKED_QUERIES pass today and guard the
  class.) Drop the analyst's comments too: they are rendered into the generated SQL, and Veil re-parses generated
  DuckDB text in places (`Env._native` for Spark), where a ``sqlglot.meta`` comment would set the mark again.
* A2 (LOW) a DOUBLE SUM's rounding moves a statistic beyond its sensitivity (the float-summation class,
  Casacuberta et al. 2022): ``STDDEV(CASE WHEN x > 3 THEN y ELSE 1e16 END)`` (half-width 5e15, 29 rows, partial
  sums near 1.45e17 with ulp 32): the centred sum moves by Δ + 46 (Δ = 5,000,000,000,000,002), Σ(e − mid)² by
  6.5e-15 relative beyond Δ. Measured on 5,000 rows: ``SUM(x * 0.1 + 1.1)`` 1.7e-13 relative, a centred
  VARIANCE 1.1e-13. The excess grows like n²·2⁻⁵³ (worst case), so it is negligible against the noise for
  realistic n (10⁷ rows: ~1 % of Δ); a DP guarantee with an unaccounted Δ all the same. Fix (if wanted): pad Δ by
  the recursive-summation bound for a public bound on n, or sum in fixed point (scaled BIGINT/HUGEINT).
* A3 (MEDIUM) a DP publication's release record holds the exact number of source rows, undoing red team s16 A5
  for whoever reads the release log (auditors, `veil releases --show ID`): kRR records
  ``metrics.training_rows`` = 100 on D and 101 on D′ (next to the noisy ``rows``, 98 / 102); PATE records
  ``teacher_rows`` and ``dropped_rows_unknown_label`` (exact counts of the private table; read in the code, not
  run here). Fix:
  `veil/generators/transaction.py::publish` records no exact source count for ``plan.is_dp`` methods, and the
  PATE plug-in's params hold only data-independent figures.
* A4 (HIGH, Spark) a session's catalog is cached for its life, and on Spark the public engine reads the Spark
  database itself (no mirror; `warehouse.drop_public` returns). After `veil publish krr … --output p_out`, one
  query on p_out, `veil retract p_out` and `write_table(policy, "p_out", raw)` (what `_refuse_published`'s hint
  tells the curator to do), the *same* `veil.connect` session (by the same code, a `veil serve` worker; not run here) answers
  ``SELECT * FROM p_out`` with the raw rows (``secret-30``, …), free as a public query; a fresh session refuses
  (UnknownTable); DuckDB holds (the mirror drops the table). Fix: re-read the published set (or a publication
  generation from the ledger) before each public query on every engine, and/or drop or rename the table on a
  Spark retraction (`veil/store/catalog.py::retract`, `veil/proxy/session.py::Env.catalog`).
* A5 (MEDIUM) the DP grid microaggregation (`veil publish sdc --method dp_microagg_laplace --target income`)
  refuses when one row's label is outside the declared values (exit 2 on D′, 0 on D) and prints the value
  ("label value 'salary-83000' is not among the declared values"), after the reservation — the s16 A12 class
  that kRR fixed; its result/record also carries ``rows_in`` (exact clean count) and ``il``/``dr`` (exact
  functions of the private rows), the A3 class. Fix: `veil/generators/sdc.py::_DPMicroagg.generate` maps
  undeclared labels data-independently (or drops them as NA rows are), `plugins/sdc.py` records no exact figure.
* B1–B5 held: released keys' spelling/type (collations, intervals, lists, TIMESTAMPTZ refused free; REAL/DOUBLE
  keys normalised through CTEs, derived tables, expressions of the key, HAVING/ORDER BY on unreleased groups);
  centred moments within Δ for DECIMAL/CASE/int×float/2⁶⁰/NaN/NULL/FILTER/GROUP BY/public joins/DECIMAL(38, 30)
  arguments, on row-level and user-level tables (row bounding, join multiplicity); kRR's published types, domains
  and signs of zero do not depend on one row (missing, out-of-domain, -0.0 values). Probed by hand and held:
  post-processing errors over unreleased groups, per-table caps under ``FROM T``/``"t"``, the PATE student-table
  check, `_refuse_published` on every DuckDB write path (demo, ingest, Warehouse.write), the gate's declared-
  values check on kRR output (values always from the declared domain), user-level DP count sensitivity
  (publications refuse non-row-level sources). Not probed: Spark key spelling, PATE end to end.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from tests.adversarial.test_redteam_s4 import TARGET_ROW
from tests.adversarial.test_redteam_s15 import Worlds


@pytest.fixture(scope="module")
def worlds(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worlds]:
    w = Worlds(
        tmp_path_factory.mktemp("s17"),
        {"d": None, "x10": dict(TARGET_ROW, x=10, y=-1.5), "x3": dict(TARGET_ROW, x=3, y=1.5)},
    )
    yield w
    w.close()


def _outcome(answer: Any) -> Any:
    return answer if isinstance(answer, str) else "answered"


# ==================================================================================================
# Part A — attacks that succeed today
# ==================================================================================================

# --- A1. Analyst comments set Veil's internal trust marks ------------------------------------------------

VEIL_MARKS = ("veil_built_total", "veil_cannot_raise", "veil_wide_sum")

#: a cast that fails on the target's row only when its hidden x > 3 (TRY_CAST by make_total, unless marked)
FAILING_CAST = "CAST(CASE WHEN x > 3 THEN 'zz' ELSE '1' END AS INTEGER)"

MARKED_QUERIES = [
    f"SELECT COUNT(*) AS n FROM t WHERE {FAILING_CAST} /* sqlglot.meta veil_built_total */ > 0",
    f"SELECT COUNT(*) AS n FROM t WHERE ({FAILING_CAST} > 0) /* sqlglot.meta veil_built_total */",
    f"SELECT SUM({FAILING_CAST} /* sqlglot.meta veil_built_total */) AS n FROM t",
    f"SELECT k, COUNT(*) AS n FROM t WHERE {FAILING_CAST} /* sqlglot.meta veil_built_total */ > 0 GROUP BY k",
    f"SELECT COUNT(*) AS n FROM t WHERE {FAILING_CAST} /* sqlglot.meta veil_cannot_raise */ > 0",
    f"SELECT COUNT(*) AS n FROM t WHERE {FAILING_CAST} /* sqlglot.meta veil_wide_sum */ > 0",
]


@pytest.mark.parametrize("sql", MARKED_QUERIES)
def test_a1_a_comment_cannot_make_a_query_fail_on_one_row(worlds: Worlds, sql: str) -> None:
    out = {name: _outcome(a) for name, a in worlds.run(sql).items()}
    assert out["x10"] == out["d"] == out["x3"], f"the outcome depends on one row's value: {out}\n  SQL: {sql}"


def test_a1_through_the_api_with_production_noise(worlds: Worlds) -> None:
    """`veil.connect` (real noise, real ledger): the query fails iff the target's x > 3."""
    from tests.support.attack import ApiInterface

    sql = MARKED_QUERIES[0]
    out = {}
    for name in ("x10", "x3"):
        iface = ApiInterface(worlds.paths[name], "b")
        try:
            o = iface.query(sql, 1.0)
        finally:
            iface.close()
        out[name] = "answered" if o.ok else o.sqlstate
    assert out["x10"] == out["x3"], f"API: the outcome depends on one row's value: {out}"


def test_a1_through_the_cli_with_production_noise(worlds: Worlds) -> None:
    """`veil query --format json` (real noise): exit 0 iff the target's x ≤ 3."""
    from tests.support.attack import CliInterface

    sql = MARKED_QUERIES[0]
    out = {}
    for name in ("x10", "x3"):
        o = CliInterface(worlds.paths[name], "b").query(sql, 1.0)
        out[name] = "answered" if o.ok else o.sqlstate
    assert out["x10"] == out["x3"], f"CLI: the outcome depends on one row's value: {out}"


@pytest.mark.slow
def test_a1_over_the_wire_with_production_noise(worlds: Worlds) -> None:
    """A real PostgreSQL client against `veil serve` (real noise): the same bit."""
    from tests.adversarial.test_redteam_s15 import wire_outcomes

    outcomes = wire_outcomes(worlds, ("x10", "x3"), MARKED_QUERIES[0], 1.0)
    out = {name: "answered" if o.ok else o.sqlstate for name, o in outcomes.items()}
    assert out["x10"] == out["x3"], f"wire: the outcome depends on one row's value: {out}"


@pytest.mark.parametrize("mark", VEIL_MARKS)
def test_a1_parsed_analyst_text_carries_no_veil_mark(mark: str) -> None:
    """Class level: whatever node a comment follows, no key Veil reads from ``meta`` survives parsing."""
    from veil.proxy.parse import parse

    places = [
        f"SELECT COUNT(*) FROM t WHERE x /* sqlglot.meta {mark} */ > 0",
        f"SELECT SUM(CAST(y AS DECIMAL(5, 1)) /* sqlglot.meta {mark} */) FROM t",
        f"SELECT COUNT(*) FROM t WHERE (x + 1 > 0) /* sqlglot.meta {mark} */",
        f"SELECT AVG(x * 2 /* sqlglot.meta {mark} */) FROM t",
        f"SELECT k /* sqlglot.meta {mark} */, COUNT(*) FROM t GROUP BY k",
    ]
    marked = []
    for sql in places:
        tree = parse(sql)
        marked += [f"{type(n).__name__} in {sql!r}" for n in tree.walk() if n._meta and n._meta.get(mark)]
    assert marked == [], f"analyst comments set Veil's mark {mark!r} on: {marked}"


def test_a1_a_comment_does_not_lower_the_raising_work_price(worlds: Worlds) -> None:
    """The price of fallible operations (red team s12: a failing cast costs 100–1,000× a plain one) is the same
    with and without a mark in a comment."""
    from veil.proxy import pipeline
    from veil.proxy.expansion import measure

    session = worlds.sessions["d"]

    def price(comment: str) -> tuple[int, int]:
        sql = "SELECT COUNT(*) AS n FROM t WHERE " + " + ".join([f"CAST(s AS DECIMAL(3, 1)){comment}"] * 50) + " > 0"
        state = pipeline.run(session._state(sql, 1), session._env, until="rewrite")
        m = measure(state.queries.main)
        return m.partial, m.casts

    plain = price("")
    marked = {mark: price(f" /* sqlglot.meta {mark} */") for mark in VEIL_MARKS}
    assert all(p == plain for p in marked.values()), f"priced (raising, casts) {plain} plain, marked {marked}"


# --- A2. A DOUBLE sum's rounding moves it beyond its sensitivity (LOW) ------------------------------------
#
# The float-summation class (Casacuberta et al., CCS 2022): the engine's SUM over DOUBLEs rounds each partial
# sum, so adding one row changes the result by its (clamped) value plus the rounding of every later partial
# sum — up to about n·ulp(n·hw), i.e. a relative excess ~ n²·2⁻⁵³ (29 rows here: 1e-14; 5,000 rows measured
# 1.7e-13 on ``SUM(x * 0.1 + 1.1)``). The centring of red team s15 keeps the partial sums at the scale of the
# half-width, so the excess is tiny against the noise; it is still a Δ the plan does not account for.

FLOAT_SUM_QUERIES = [
    # centred: half-width 5e15, 29 partial sums near 1.45e17 (ulp 32): moves by Δ + 46
    "SELECT STDDEV(CASE WHEN x > 3 THEN y ELSE 1e16 END) AS v FROM t",
    "SELECT VARIANCE(COALESCE(y, 1e16) - 1e16) AS v FROM t",
]


@pytest.mark.parametrize("sql", FLOAT_SUM_QUERIES)
def test_a2_a_double_sum_moves_by_at_most_its_sensitivity(worlds: Worlds, sql: str) -> None:
    """Fixed: real sums are exact (fixed point); only the finished sum is rounded to a double, a slack of at
    most ``CONVERSION_SLACK`` of Δ that the raised Laplace scale pays for (veil.proxy.fixed_point). Before the
    fix the centred sum moved by Δ + 46 here; the exactness itself is tested in tests/proxy/test_fixed_point_sums.py."""
    from tests.adversarial.test_redteam_s15 import moves_beyond_sensitivity
    from veil.proxy.fixed_point import CONVERSION_SLACK

    worlds.asked += 1
    pair = {"d": worlds.sessions["d"], "x10": worlds.sessions["x10"]}
    assert moves_beyond_sensitivity(pair, sql, Fraction(5) + Fraction(worlds.asked, 10**6), CONVERSION_SLACK) == []


# --- A3. A DP publication's release record holds the exact number of source rows (MEDIUM) -----------------
#
# Red team s16 A5 made kRR's number of published rows discrete-Laplace, but the transaction records
# ``metrics["training_rows"] = len(train)`` (and ``holdout_rows``) in the release: `veil releases --show ID`
# prints 100 on D and 101 on D′ (one more person), next to the noisy ``rows`` (98 / 102). The release log is what
# auditors read (docs/ledger.md), so the exact count — whether one person is in the table — is published outside
# the ε charged. PATE's record does the same (``teacher_rows``, ``dropped_rows_unknown_label``: exact counts of
# the private table). Fix: `veil/generators/transaction.py::publish` (and plugins' ``params``/``metrics``) record
# no exact count of the source for a DP method (``plan.is_dp``); only the noisy figures.


@pytest.mark.slow
def test_a3_a_dp_publications_record_does_not_hold_the_exact_source_size(tmp_path: Path) -> None:
    from tests.publish_support import make_warehouse, ok_json, veil

    records = {}
    for n in (100, 101):
        (tmp_path / str(n)).mkdir()
        policy = make_warehouse(tmp_path / str(n), n=n)
        args = ["--table", "people", "--columns", "sex", "--epsilon", "1", "--output", "p1", "--format", "json"]
        body = ok_json(veil("publish", "krr", "--policy", policy, *args))
        shown = ok_json(veil("releases", "--policy", policy, "--show", body["release_id"]))
        # the noisy row count may differ (that is the noise); nothing else may say how many rows the source holds
        records[n] = {k: v for k, v in shown["metrics"].items() if k != "rows"}
    assert records[100] == records[101], f"the release record depends on the exact source size: {records}"


# ==================================================================================================
# Part B — probes that held (these pass today; each fails if its defence breaks)
# ==================================================================================================

# --- B1. A released key's spelling and type do not depend on the group's first row ------------------------
#
# Keys whose engine groups values that are equal but spelled differently are refused free (collations,
# intervals, lists, time zones); float keys are normalised whatever their type name (FLOAT/REAL) and wherever
# they come from (a CTE, a derived table), and expressions of a key are computed from the normalised key.

KEY_SPELLINGS = [
    f"SELECT CASE WHEN x > 3 THEN 'A' ELSE 'a' END COLLATE NOCASE AS g, COUNT(*) AS n FROM t WHERE u >= {7} GROUP BY 1",
    "SELECT CASE WHEN x > 3 THEN INTERVAL '1 day' ELSE INTERVAL '24 hours' END AS g, COUNT(*) AS n FROM t GROUP BY 1",
    "SELECT CASE WHEN x > 3 THEN [-0.0] ELSE [0.0] END AS g, COUNT(*) AS n FROM t WHERE u >= 7 GROUP BY 1",
    "SELECT CASE WHEN x > 3 THEN TIMESTAMPTZ '2020-01-01 00:00:00+00' ELSE TIMESTAMPTZ '2020-01-01 01:00:00+01' END "
    "AS g, COUNT(*) AS n FROM t GROUP BY 1",
    "SELECT CASE WHEN x > 3 THEN CAST(-0.0 AS REAL) ELSE CAST(0.0 AS REAL) END AS g, COUNT(*) AS n FROM t WHERE u >= 7 "
    "GROUP BY 1",
    "SELECT CASE WHEN x > 3 THEN 1.50 ELSE 1.5 END AS g, COUNT(*) AS n FROM t WHERE u >= 7 GROUP BY 1",
    "SELECT CAST(y * 0 AS VARCHAR) AS g, COUNT(*) AS n FROM t WHERE u >= 7 GROUP BY y * 0",
    "SELECT 1 / (y * 0) AS inv, COUNT(*) AS n FROM t WHERE u >= 7 GROUP BY y * 0",
    "SELECT g, 1 / g AS inv, COUNT(*) AS n FROM (SELECT y * 0 AS g FROM t WHERE u >= 7) AS s GROUP BY g",
    "WITH c AS (SELECT y * 0 AS g FROM t WHERE u >= 7) SELECT CAST(g AS VARCHAR) AS sg, COUNT(*) AS n FROM c GROUP BY g",
    "SELECT y * 0 AS g, COUNT(*) AS n FROM t WHERE u >= 7 GROUP BY 1 HAVING 1 / g < 0",
    "SELECT CASE WHEN x > 3 THEN 'zz' ELSE '1' END AS g, COUNT(*) AS n FROM t GROUP BY 1 HAVING CAST(g AS INTEGER) > 0",
    "SELECT CASE WHEN x > 3 THEN 9223372036854775807 ELSE 1 END AS g, COUNT(*) AS n FROM t GROUP BY 1 ORDER BY g * 2",
]


def _spelled_rows(answer: Any) -> Any:
    if isinstance(answer, str):
        return answer
    cols = [(c.name, c.sql_type) for c in answer.columns]
    return cols, sorted(tuple(repr(v) if isinstance(v, float) else v for v in r[:-1]) for r in answer.rows)


@pytest.mark.parametrize("sql", KEY_SPELLINGS)
def test_b1_a_released_keys_spelling_does_not_depend_on_one_row(worlds: Worlds, sql: str) -> None:
    out = {name: _spelled_rows(a) for name, a in worlds.run(sql).items()}
    assert out["x10"] == out["x3"], f"released keys depend on one row's value: {out}\n  SQL: {sql}"


# --- B2. Centred moments move by at most their sensitivity, whatever the argument's shape -------------------
#
# DECIMAL arguments, CASE, int × float, magnitudes up to 2⁶⁰, NULL/NaN targets, FILTER, GROUP BY, a public join
# multiplying rows, tiny scales (DECIMAL(38, 30)): each row is centred and clamped in the generated SQL (red
# team s15, A2), and the centred value's rounding stays inside ±hw. (Half-widths near 10¹⁶ are A2 above.)

CENTRED_SHAPES = [
    "SELECT AVG(CAST(y AS DECIMAL(10, 3)) + 123456789.125), VARIANCE(CAST(y AS DECIMAL(10, 3)) + 123456789.125) FROM t",
    "SELECT AVG(x * y + 4503599627370496.5), VAR_POP(x * 0.1 + 1e17) FROM t",
    "SELECT k, AVG(x + 1e17) FILTER (WHERE y > 0), VARIANCE(y + 1152921504606846976.0) FROM t GROUP BY k",
    "SELECT pub.pn, AVG(t.x + 9007199254740993), VARIANCE(t.y * 3.3 + 7e15) FROM t JOIN pub ON pub.pk = t.x % 4 GROUP BY pub.pn",
    "SELECT AVG(CAST(x AS DECIMAL(38, 30)) * 1e-20 + 1e8), VARIANCE(CAST(x AS DOUBLE) * 1e-30 + 1) FROM t",
    "SELECT AVG(CASE WHEN y <> y THEN 5 ELSE y END + 0.30000000000000004), STDDEV_SAMP(ROUND(y * 1e10) + 1e17) FROM t",
]


@pytest.fixture(scope="module")
def edge_worlds(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worlds]:
    w = Worlds(
        tmp_path_factory.mktemp("s17e"),
        {
            "d": None,
            "x10": dict(TARGET_ROW, x=10, y=-1.5),
            "nulls": dict(TARGET_ROW, x=None, y=float("nan"), s=None, k=None, b=None),
            "wide": dict(TARGET_ROW, x=10**12, y=1e300, s="z" * 50, k="zz"),
        },
    )
    yield w
    w.close()


@pytest.mark.parametrize("sql", CENTRED_SHAPES)
def test_b2_centred_moments_move_within_their_sensitivity(edge_worlds: Worlds, sql: str) -> None:
    from tests.adversarial.test_redteam_s15 import moves_beyond_sensitivity

    edge_worlds.asked += 1
    assert moves_beyond_sensitivity(edge_worlds.sessions, sql, Fraction(5) + Fraction(edge_worlds.asked, 10**6)) == []


# --- B3. kRR's output shape and types do not depend on one row ---------------------------------------------
#
# With the same randomness, D and D′ (one more row: missing values, values outside the declared domains, -0.0)
# publish the same columns with the same types (the policy's), over domains that always hold NA.


def test_b3_krr_types_and_domains_do_not_depend_on_one_row() -> None:
    from types import SimpleNamespace as Spec

    import numpy as np
    import pandas as pd

    from veil.generators.krr import krr_publish

    specs = {
        "c": Spec(type="category", values=("a", "b")),
        "n": Spec(type="int", values=None, bounded=True, lower=0, upper=3),
        "f": Spec(type="float", values=(0.0, 1.5)),
        "b": Spec(type="bool", values=(True, False)),
    }
    base = pd.DataFrame(
        {"c": ["a", "b"] * 10, "n": pd.array([0, 1, 2, 3] * 5, dtype="Int64"), "f": [0.0, 1.5] * 10, "b": [True, False] * 10}
    )
    targets = {
        "na": {"c": None, "n": None, "f": float("nan"), "b": None},
        "outside": {"c": "zz", "n": 99, "f": -0.0, "b": True},
    }
    seen = {}
    for name, extra in {"d": None, **targets}.items():
        df = base if extra is None else pd.concat([base, pd.DataFrame([extra])], ignore_index=True)
        out, info = krr_publish(df, list(specs), epsilon=1.0, specs=specs, count_epsilon=1.0, rng=np.random.default_rng(0))
        signs = {math.copysign(1.0, v) for v in out["f"].dropna()}
        seen[name] = (dict(out.dtypes.astype(str)), {c: i["k"] for c, i in info.items()}, signs <= {1.0})
    assert seen["na"] == seen["d"] == seen["outside"], seen


# --- A4. On Spark, a long-lived session keeps reading a retracted name: raw data written over it later is public
#
# `_refuse_published` (red team s16 A8) refuses a raw write over a *published* table and its hint says to
# `veil retract` it first. On DuckDB a retraction drops the table from the public mirror, so a session whose
# catalog still lists it fails and refreshes (B4 below). On Spark there is no mirror (`drop_public` returns) and
# the public engine reads the Spark database itself, while `Env.catalog` is cached for the session's life
# (refreshed only on a policy change or an unknown table): after `veil publish krr … --output p_out`, one query
# on p_out, `veil retract p_out` and `write_table(policy, "p_out", raw)`, the *same* session (`veil.connect`,
# or a `veil serve` worker) answers ``SELECT * FROM p_out`` with the raw rows, free (public query). A fresh
# session refuses (UnknownTable). Fix: the catalog's published set must be re-read (or checked against the
# ledger's publication generation) before a public query runs, on every engine; or retraction on Spark must
# drop/rename the table; or `write_table` must also refuse a name a publication ever used.


def _spark_or_duckdb_policy(base: Path, engine: str) -> str:
    from tests.engines.conftest import POLICY, SPARK
    from tests.publish_support import people

    if engine == "spark":
        from veil.engines.spark import spark_available

        reason = spark_available()
        if reason is not None:
            pytest.skip(f"Spark test skipped: {reason}")
    (base / "policy.toml").write_text(POLICY + (SPARK if engine == "spark" else ""), encoding="utf-8")
    people(60).to_csv(base / "people.csv", index=False)
    return str(base / "policy.toml")


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["spark", "duckdb"])
def test_a4_a_retracted_name_rewritten_with_raw_rows_is_not_readable(tmp_path: Path, engine: str) -> None:
    import pandas as pd

    import veil
    from tests.publish_support import ok_json
    from tests.publish_support import veil as run_cli
    from veil.errors import VeilError
    from veil.policy import load_policy
    from veil.store.warehouse import write_table

    policy = _spark_or_duckdb_policy(tmp_path, engine)
    assert run_cli("ingest", "--policy", policy, "--table", "people", tmp_path / "people.csv").exit_code == 0
    args = ["--table", "people", "--columns", "sex", "--epsilon", "1", "--output", "p_out", "--format", "json"]
    ok_json(run_cli("publish", "krr", "--policy", policy, *args))
    db = veil.connect(policy, analyst="alice")
    try:
        assert len(db.sql("SELECT * FROM p_out")) > 0  # the published table, read once: the catalog lists it
        assert run_cli("retract", "--policy", policy, "p_out").exit_code == 0
        # the curator follows the hint: retract, then store raw rows under the name
        write_table(load_policy(policy), "p_out", pd.DataFrame({"sex": [f"secret-{i}" for i in range(60)]}), replace=True)
        try:
            rows = db.sql("SELECT * FROM p_out")["sex"].tolist()
        except VeilError:
            rows = []
    finally:
        db.close()
    assert not [v for v in rows if str(v).startswith("secret-")], f"{engine}: raw rows read as public: {rows[:3]}"


# --- B5. Centred moments on a user-level table (row bounding, joins multiplying rows) ---------------------
#
# The target (user 999) brings 7 rows (bounded to 3: one NaN/NULL), extreme values; the bounded copies of D and
# D′ keep each other user's rows with one fixed salt (as tests/engines/conftest.py's ``same_salt``).

USER_POLICY = """\
[database]
path = "w.duckdb"
[ledger]
path = "l.sqlite"
[tables.v]
privacy_unit = "user_id"
max_rows_per_unit = 3
[tables.v.columns]
user_id = { type = "int" }
amount = { type = "float", lower = 0, upper = 100 }
n = { type = "int", lower = -7, upper = 7 }
kind = { type = "category", values = ["a", "b", "c"] }
[tables.pub]
public = true
[tables.pub.columns]
pk = { type = "int" }
[analysts.a]
epsilon = 1000000
delta = 0.5
"""

USER_SHAPES = [
    "SELECT AVG(amount + 1e15), VARIANCE(amount * 3 + 7e15) FROM v",
    "SELECT kind, AVG(n + 4611686018427387000), STDDEV(n * 0.5 + 1e17) FROM v GROUP BY kind",
    "SELECT AVG(n + 1600740000000026 + CASE WHEN n > 0 THEN 1 ELSE 0 END), VAR_SAMP(n) FROM v",
    "SELECT AVG(v.amount + 1e16), VARIANCE(v.n + 1e17) FROM v JOIN pub ON pub.pk = v.n",
    "SELECT COUNT(*), SUM(amount), AVG(amount) FILTER (WHERE n > 0) FROM v JOIN pub ON pub.pk <= 3",
]


@pytest.fixture(scope="module")
def user_worlds(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    import random
    import types

    import pandas as pd

    import veil.proxy.bounding as bounding
    from veil.policy import load_policy
    from veil.proxy._testing import exact_session
    from veil.store.warehouse import write_table

    rng = random.Random(2)
    rows = [
        (u, rng.uniform(0, 100), rng.randint(-7, 7), "abc"[rng.randrange(3)]) for u in range(40) for _ in range(rng.randint(1, 6))
    ]
    target = [(999, 100.0, 7, "a")] * 6 + [(999, float("nan"), None, None)]
    saved = bounding.secrets
    bounding.secrets = types.SimpleNamespace(token_hex=lambda n: "5a" * n)  # type: ignore[assignment]
    base = tmp_path_factory.mktemp("s17u")
    sessions = {}
    try:
        for name, data in (("d", rows), ("t", rows[:20] + target + rows[20:])):
            (base / name).mkdir()
            (base / name / "policy.toml").write_text(USER_POLICY, encoding="utf-8")
            policy = load_policy(base / name / "policy.toml")
            frame = pd.DataFrame(data, columns=["user_id", "amount", "n", "kind"]).astype({"user_id": "Int64", "n": "Int64"})
            write_table(policy, "v", frame, replace=True)
            write_table(policy, "pub", pd.DataFrame({"pk": pd.array([1, 2, 3, 7], dtype="Int64")}), replace=True, public=True)
            sessions[name] = exact_session(policy, "a")
        yield sessions
    finally:
        bounding.secrets = saved
        for s in sessions.values():
            s.close()


@pytest.mark.parametrize("sql", USER_SHAPES)
def test_b5_centred_moments_on_a_user_level_table(user_worlds: dict[str, Any], sql: str) -> None:
    from tests.adversarial.test_redteam_s15 import moves_beyond_sensitivity

    assert moves_beyond_sensitivity(user_worlds, sql, Fraction(5)) == []


# --- A5. DP microaggregation refuses on one person's out-of-domain label, and names it (MEDIUM) -------------
#
# Red team s16 A12 made kRR read a value outside the declared domain as NA (a refusal would depend on one row).
# The DP grid microaggregation (`veil publish sdc --method dp_microagg_laplace|exponential --target L`) still
# refuses: `sdc._DPMicroagg.generate` raises InputError "label value 'salary-83000' is not among the declared
# values of 'income'" when one row's label is undeclared — the refusal depends on that one row, after the
# reservation (the plan is DP: ε charged), and its message prints the private value. Its result (and release
# record) also carries ``rows_in`` (the exact number of clean source rows: 100 with or without a row whose label
# is NULL), ``il``/``dr`` (exact functions of the private rows) — the A3 class. Fix: map undeclared or missing
# labels to a data-independent class (or drop those rows silently, as the NA rows are), and record no exact
# figure for a DP method (`veil/generators/sdc.py::_DPMicroagg.generate`, `veil/generators/plugins/sdc.py`).


def _dp_microagg(base: Path, extra: dict[str, Any] | None) -> Any:
    import pandas as pd

    from tests.publish_support import POLICY, people, veil

    base.mkdir()
    (base / "policy.toml").write_text(POLICY.format(table_budget=""), encoding="utf-8")
    df = people(100)
    if extra is not None:
        df = pd.concat([df, pd.DataFrame([{**df.iloc[0].to_dict(), "name": "target", **extra}])], ignore_index=True)
    df.to_csv(base / "people.csv", index=False)
    assert veil("ingest", "--policy", base / "policy.toml", "--table", "people", base / "people.csv").exit_code == 0
    args = ["--method", "dp_microagg_laplace", "--param", "epsilon=1", "--columns", "age,hours,gain", "--target", "income"]
    return veil("publish", "sdc", "--policy", base / "policy.toml", "--table", "people", *args, "--output", "p_dp")


@pytest.mark.slow
def test_a5_dp_microaggregation_does_not_refuse_on_one_label(tmp_path: Path) -> None:
    ends = {}
    for name, extra in (("d", None), ("outside", {"income": "salary-83000"})):
        res = _dp_microagg(tmp_path / name, extra)
        ends[name] = (res.exit_code, "salary-83000" in res.output)
    assert ends["outside"] == ends["d"] == (0, False), f"(exit code, private value printed): {ends}"
