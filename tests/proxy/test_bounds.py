"""The bounds pass on its own: interval arithmetic is sound for every expression it accepts.

Hypothesis builds row-level expressions over three declared columns (an int in [-1000, 1000], a float
in [-2.5, 7.25], a small int in [0, 3]) from the operators the pass has rules for. For each expression
it accepts, DuckDB evaluates the expression (made total, as the engine would run it) on rows spread
over the declared box — its corners included — and every non-NULL value must lie inside the computed
interval, and be an integer when the interval says so. (The planner also clamps every aggregated
expression to this interval, so an unsound interval would not leak; it would bias answers.)

The engine SQL is the query path's (``neutralise(make_total(…))`` over the annotated tree), and some rows hold NULLs:
where the analysis and the engine disagree about which operations may be NULL (an integer literal is a 32-bit INTEGER,
so ``1000000 * 1000000`` overflowed and TRY made it NULL; GREATEST, LEAST and COALESCE skip a NULL operand) the value
lies outside the interval. The explicit examples are such cases. Deterministic apart from the drawn expressions: a
failure is a real disagreement (no false failures); 400 examples run in ~10 s.
"""

from __future__ import annotations

import math
from fractions import Fraction

import duckdb
import pytest
import sqlglot
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from sqlglot.optimizer.annotate_types import annotate_types
from sqlglot.optimizer.scope import build_scope

from veil.engines.neutral import neutralise
from veil.errors import Unbounded
from veil.policy import ColumnSpec, TableSpec
from veil.proxy.bounds import MAX_INTEGRAL, Interval, expression_interval, in_doubles
from veil.proxy.catalog import Catalog, CatalogTable
from veil.proxy.totality import make_total

pytestmark = pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisWarning")

SPEC = TableSpec(
    "t",
    {
        "a": ColumnSpec("a", "int", -1000, 1000),
        "b": ColumnSpec("b", "float", -2.5, 7.25),
        "c": ColumnSpec("c", "int", 0, 3),
    },
)
CATALOG = Catalog({"t": CatalogTable("t", {"a": "int", "b": "float", "c": "int"}, SPEC, False)})

LEAVES = st.sampled_from(["t.a", "t.b", "t.c", "0", "1", "-3", "2.5", "0.1", "1000000"])


def _compound(sub: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    binary = st.tuples(sub, st.sampled_from(["+", "-", "*"]), sub).map(lambda t: f"({t[0]} {t[1]} {t[2]})")
    by_const = st.tuples(sub, st.sampled_from(["/", "%"]), st.sampled_from(["2", "-3", "0.5", "7"])).map(
        lambda t: f"({t[0]} {t[1]} {t[2]})"
    )
    unary = st.tuples(st.sampled_from(["ABS", "ROUND", "FLOOR", "CEIL", "SIGN", "-"]), sub).map(lambda t: f"{t[0]}({t[1]})")
    power = st.tuples(sub, st.integers(0, 3)).map(lambda t: f"POWER({t[0]}, {t[1]})")
    sqrt = sub.map(lambda e: f"SQRT(ABS({e}))")
    case = st.tuples(sub, sub, sub).map(lambda t: f"CASE WHEN {t[0]} > 0 THEN {t[1]} ELSE {t[2]} END")
    pick = st.tuples(st.sampled_from(["GREATEST", "LEAST", "COALESCE"]), sub, sub).map(lambda t: f"{t[0]}({t[1]}, {t[2]})")
    cast = st.tuples(sub, st.sampled_from(["INT", "SMALLINT", "BIGINT", "DOUBLE", "REAL", "DECIMAL(6, 1)"])).map(
        lambda t: f"CAST({t[0]} AS {t[1]})"
    )
    rounding = st.tuples(sub, st.integers(-2, 2)).map(lambda t: f"ROUND({t[0]}, {t[1]})")
    return st.one_of(binary, by_const, unary, power, sqrt, case, pick, cast, rounding)


EXPRESSIONS = st.recursive(LEAVES, _compound, max_leaves=6)


@pytest.fixture(scope="module")
def con() -> duckdb.DuckDBPyConnection:
    c = duckdb.connect(":memory:")
    c.execute("CREATE TABLE t (a BIGINT, b DOUBLE, c BIGINT)")
    corners = [(a, b, cc) for a in (-1000, 0, 1, 1000) for b in (-2.5, 0.0, 0.5, 7.25) for cc in (0, 1, 3)]
    c.executemany("INSERT INTO t VALUES (?, ?, ?)", corners)
    c.execute(
        "INSERT INTO t SELECT (random() * 2000 - 1000)::BIGINT, random() * 9.75 - 2.5, (random() * 3)::BIGINT FROM range(300)"
    )
    # the bounded copy keeps NULLs: each column NULL beside the others' corners
    c.executemany("INSERT INTO t VALUES (?, ?, ?)", [(None, b, cc) for b in (-2.5, 7.25) for cc in (0, 3)])
    c.executemany("INSERT INTO t VALUES (?, ?, ?)", [(a, None, cc) for a in (-1000, 1000) for cc in (0, 3)])
    c.executemany("INSERT INTO t VALUES (?, ?, ?)", [(a, b, None) for a in (-1000, 1000) for b in (-2.5, 7.25)])
    yield c
    c.close()


def _interval(sql: str) -> Interval | None:
    tree = sqlglot.parse_one(f"SELECT {sql} FROM t", read="postgres")
    scope = build_scope(tree)
    assert scope is not None
    expr = tree.expressions[0]
    try:
        return expression_interval(expr, scope, CATALOG)
    except Unbounded:
        return None


def _engine_sql(sql: str) -> str:
    """``sql`` as the query path runs it: types annotated, made total, engine-neutral."""
    tree = sqlglot.parse_one(f"SELECT {sql} AS v FROM t", read="postgres")
    annotate_types(tree, schema={"t": {"a": "BIGINT", "b": "DOUBLE", "c": "BIGINT"}})
    return neutralise(make_total(tree)).sql(dialect="duckdb")


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sql=EXPRESSIONS)
# int32 literal arithmetic (overflowed to NULL under TRY), skipped by GREATEST / LEAST / COALESCE
@example(sql="GREATEST(t.a, (1000000 * 1000000))")
@example(sql="LEAST(t.a, -(1000000 * 1000000))")
@example(sql="COALESCE((1000000 * 1000000), t.a)")
@example(sql="LEAST((1000000 * (1000000 + t.c)), t.b)")
@example(sql="GREATEST(t.a, CASE WHEN t.c > 0 THEN (1000000 * 1000000) ELSE 1000000 * -1000000 END)")
@example(sql="GREATEST(t.a, (SIGN(t.a) * 100 + SIGN(t.a) * 100) * 1000000 * 1000)")
@example(sql="GREATEST(t.a, CAST(t.c AS INT) * 1000000 * 1000000)")
@example(sql="GREATEST(t.a, (1000000 * 1000000) % 7)")
@example(sql="GREATEST(t.a, ABS(-1000000 * 1000000))")
# casts that do not fit their target are NULL (TRY_CAST)
@example(sql="GREATEST(t.c, CAST((1000000 * t.a) AS INT))")
@example(sql="LEAST(t.c, CAST((t.a * 100) AS SMALLINT))")
@example(sql="GREATEST(t.c, CAST((1000000 * (1000000 * t.b)) AS INT))")
@example(sql="GREATEST(t.c, CAST((t.a * 1000) AS DECIMAL(6, 1)))")
# a column holds NULL: GREATEST / LEAST of columns alone
@example(sql="GREATEST(t.a, t.c)")
@example(sql="LEAST(t.b, t.c, 2.5)")
@example(sql="GREATEST(t.c, (t.a % t.c))")
@example(sql="LEAST(t.c, CASE WHEN t.a > 0 THEN 1 END)")
# rounding: DECIMAL to its scale, FLOAT to 24 bits, ROUND to negative digits
@example(sql="CAST(t.b AS DECIMAL(6, 0))")
@example(sql="CAST(0.1 AS REAL)")
@example(sql="GREATEST(t.c, CAST(POWER((t.b + 10.0) * 100000.0, 8) AS REAL))")
@example(sql="ROUND(t.b, -1)")
@example(sql="ROUND(t.a * 7, -2)")
@example(sql="(t.a + CAST(0.1 AS REAL))")
def test_every_value_lies_in_the_computed_interval(con: duckdb.DuckDBPyConnection, sql: str) -> None:
    iv = _interval(sql)
    if iv is None:
        return
    engine_sql = _engine_sql(sql)
    values = [r[0] for r in con.execute(engine_sql).fetchall() if r[0] is not None]
    lo, hi = float(iv.lo), float(iv.hi)
    # a REAL (float32) value's later arithmetic rounds to 24 bits (≈ 6·10⁻⁸ relative per operation), which the
    # intervals do not model past the cast itself (a value an ulp outside is clamped into the interval the sensitivity
    # used, so privacy does not rest on it); doubles, to 1e-9
    slack = (1e-6 if "REAL" in sql else 1e-9) * max(1.0, abs(lo), abs(hi))
    for v in values:
        v = float(v)
        if math.isnan(v):
            continue
        assert lo - slack <= v <= hi + slack, f"{sql} = {v} outside [{lo}, {hi}]"
        if iv.integral:
            assert v == math.floor(v), f"{sql} = {v} is not an integer though its interval is integral"


def test_integer_products_beyond_the_cap_are_recomputed_in_doubles() -> None:
    tree = sqlglot.parse_one("SELECT t.a * t.a * t.a * t.a * t.a * t.a * t.a FROM t", read="postgres")
    scope = build_scope(tree)
    assert scope is not None
    with pytest.raises(Unbounded):
        expression_interval(tree.expressions[0], scope, CATALOG)
    doubled = in_doubles(tree.expressions[0])
    iv = expression_interval(doubled, scope, CATALOG)
    assert iv is not None and not iv.integral and iv.hi == Fraction(1000) ** 7 > MAX_INTEGRAL
