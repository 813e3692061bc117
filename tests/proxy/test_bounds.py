"""The bounds pass on its own: interval arithmetic is sound for every expression it accepts.

Hypothesis builds row-level expressions over three declared columns (an int in [-1000, 1000], a float
in [-2.5, 7.25], a small int in [0, 3]) from the operators the pass has rules for. For each expression
it accepts, DuckDB evaluates the expression (made total, as the engine would run it) on rows spread
over the declared box — its corners included — and every non-NULL value must lie inside the computed
interval, and be an integer when the interval says so. (The planner also clamps every aggregated
expression to this interval, so an unsound interval would not leak; it would bias answers.)
"""

from __future__ import annotations

import math
from fractions import Fraction

import duckdb
import pytest
import sqlglot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlglot.optimizer.scope import build_scope

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
    cast = st.tuples(sub, st.sampled_from(["INT", "BIGINT", "DOUBLE"])).map(lambda t: f"CAST({t[0]} AS {t[1]})")
    return st.one_of(binary, by_const, unary, power, sqrt, case, pick, cast)


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


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sql=EXPRESSIONS)
def test_every_value_lies_in_the_computed_interval(con: duckdb.DuckDBPyConnection, sql: str) -> None:
    iv = _interval(sql)
    if iv is None:
        return
    engine_sql = make_total(sqlglot.parse_one(f"SELECT {sql} AS v FROM t", read="postgres")).sql(dialect="duckdb")
    values = [r[0] for r in con.execute(engine_sql).fetchall() if r[0] is not None]
    lo, hi = float(iv.lo), float(iv.hi)
    slack = 1e-9 * max(1.0, abs(lo), abs(hi))
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
