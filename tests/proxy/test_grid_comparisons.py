"""A WHERE comparing a bounded real column with a number may compare its pre-scaled grid column instead.

The bounded copy stores ``g = FLOOR(c · 2**k)`` beside each bounded real column ``c`` (:mod:`veil.proxy.bounding`);
for a number ``v`` with ``N = v · 2**k`` an integer, ``c >= v ⟺ g >= N`` and ``c < v ⟺ g < N``, so the rewrite
reads ``g`` there (:func:`veil.proxy.rewrite._compare_on_grid`) and a statement that sums ``g`` reads one column
fewer. Properties:

* for bounds of every kind (integers, decimals that are no doubles, ranges far from 0, huge and tiny) and values next
  to each literal (its neighbouring doubles, -0.0, NaN, ±inf, NULL, beyond the bounds), each rewritten comparison has
  the original's truth value on every row of the copy, NULL included; comparisons that are not exact on the grid
  (``<=``, ``>``, a literal off the grid, a negative exponent) stay as they are;
* for any double within the bounds (hypothesis: subnormals, -0.0, the bounds themselves, NULL) and any plain number
  literal, on the grid or off it, the rewritten comparison over the copy's grid expression
  (:func:`veil.proxy.bounding.grid_value_sql`) has the original's truth value;
* end to end, through the plan cache (a shape planned with one literal and reused with others, on the grid or not),
  the exact answers are those of the statements without the grid comparison.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pytest
import sqlglot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from veil.policy import load_policy
from veil.proxy import bounding, fixed_point, pipeline, rewrite
from veil.proxy._testing import exact_session
from veil.store.warehouse import write_table

POLICY = """\
[database]
path = "w.duckdb"
[ledger]
path = "l.sqlite"
[tables.t]
privacy_unit = "row"
[tables.t.columns]
g = {{ type = "category", values = ["a", "b"] }}
y = {{ type = "float", lower = {lo}, upper = {hi} }}
[analysts.a]
epsilon = 1000000000
delta = 0.5
"""

LITERALS = ["0", "1", "5", "3", "10", "2.5", "0.125", "0.0078125", "0.1", "0.3", "123456.75", "1000000", "99999999999",
            "-0", "-5", "-2.5", "-0.1", "-123456.75"]  # fmt: skip
BOUNDS = [
    ("0", "10"), ("-5", "5"), ("0", "200000"), ("0.1", "0.3"), ("-0.7", "0.1"), ("-1e15", "1e15"),
    ("1e-300", "3e-300"), ("123456.5", "123457.25"),
]  # fmt: skip
ODD = [None, math.nan, math.inf, -math.inf, 0.0, -0.0, 5e-324, -5e-324, 1e-300]
OPS = ["{c} >= {v}", "{c} < {v}", "{v} <= {c}", "{v} > {c}", "{c} <= {v}", "{c} > {v}", "{c} = {v}"]


def _values(lo: str, hi: str) -> list[float | None]:
    out: list[float | None] = list(ODD)
    for text in [*LITERALS, lo, hi]:
        v = float(text)
        for x in (v, -v):
            out += [x, math.nextafter(x, -math.inf), math.nextafter(x, math.inf), x * 2 + 1]
    return out


def _world(folder: Path, lo: str, hi: str) -> Any:
    folder.mkdir(parents=True)
    (folder / "policy.toml").write_text(POLICY.format(lo=lo, hi=hi), encoding="utf-8")
    policy = load_policy(folder / "policy.toml")
    values = _values(lo, hi)
    frame = pd.DataFrame({"g": ["ab"[i % 2] for i in range(len(values))], "y": values}).astype({"y": "float64"})
    write_table(policy, "t", frame, replace=True)
    return exact_session(policy, "a")


@pytest.fixture(scope="module")
def worlds(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[tuple[str, str], Any]]:
    base = tmp_path_factory.mktemp("gridcmp")
    out = {b: _world(base / f"w{i}", *b) for i, b in enumerate(BOUNDS)}
    yield out
    for s in out.values():
        s.close()


@pytest.mark.parametrize("bounds", BOUNDS)
def test_each_rewritten_comparison_has_the_same_truth_value_on_every_row(
    worlds: dict[tuple[str, str], Any], bounds: tuple[str, str]
) -> None:
    session = worlds[bounds]
    source, grids = session._env.bounded_copy("t")
    k = grids["y"].exponent
    rewritten = 0
    for op in OPS:
        for text in LITERALS:
            original = sqlglot.parse_one(op.format(c="t.y", v=text), read="duckdb")
            where = sqlglot.parse_one(f"SELECT 1 WHERE NOT ({op.format(c='t.y', v=text)})", read="duckdb").args["where"]
            rewrite._compare_on_grid(where.this, "t", grids)
            changed = where.this.sql(dialect="duckdb")
            exact_op = op in ("{c} >= {v}", "{c} < {v}", "{v} <= {c}", "{v} > {c}")
            on_grid = exact_op and fixed_point.literal_on_grid(text.lstrip("-"), k) is not None
            assert ("__veil_grid_" in changed) == on_grid, (op, text, k, changed)
            rewritten += "__veil_grid_" in changed
            differ = session._env.engine.execute(
                f"SELECT COUNT(*) FROM {source} AS t WHERE ({original.sql(dialect='duckdb')}) IS DISTINCT FROM (NOT ({changed}))"
            ).rows
            assert differ == [(0,)], (op, text, bounds, changed)
    assert rewritten


@pytest.mark.parametrize("bounds", [("0", "200000"), ("-5", "5"), ("0.1", "0.3")])
def test_answers_through_the_plan_cache_are_those_without_grid_comparisons(
    worlds: dict[tuple[str, str], Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bounds: tuple[str, str]
) -> None:
    shared = worlds[bounds]
    plain = _world(tmp_path / "plain", *bounds)
    queries = [
        f"SELECT g, COUNT(*), AVG(y), SUM(y) FROM t WHERE y >= {v} GROUP BY g" for v in ("5", "6", "7", "0", "1")
    ] + [
        f"SELECT COUNT(*), AVG(y) FROM t WHERE y < {v} AND NOT (g = 'a' OR -{v} > y)" for v in ("0.5", "2.5", "0.1", "0.3", "1.5")
    ] + [f"SELECT MEDIAN(y) FROM t WHERE {v} <= y" for v in ("0.25", "0.2", "0.75")]  # fmt: skip
    try:
        for sql in queries:
            got = shared.execute(sql)
            with monkeypatch.context() as m:
                m.setattr(rewrite, "_compare_on_grid", lambda *a: None)
                want = plain.execute(sql)
            assert got.rows == want.rows, sql
        assert shared._env.plan_cache  # the shapes were reused
    finally:
        plain.close()


def test_a_cached_shape_fills_each_literal_on_its_grid(worlds: dict[tuple[str, str], Any]) -> None:
    session = worlds[("0", "200000")]
    k = session._env.bounded_copy("t")[1]["y"].exponent
    for i, v in enumerate(("11", "12", "13", "98")):  # one shape: planned, probed, then hits
        state = pipeline.run(
            session._state(f"SELECT COUNT(*), SUM(y) FROM t WHERE y >= {v}", None), session._env, until="prepare", cache=True
        )
        assert state.rendered is not None and state.rendered.main is not None
        hit = any(state.plan is entry.state.plan for entry in session._env.plan_cache.values())
        assert hit or i == 0, v  # the first query planned and probed its shape (and is the entry); the others reuse it
        assert f'"__veil_grid_1" >= {int(v) << k}' in state.rendered.main, state.rendered.main
        assert " t.y " not in state.rendered.main  # the statement reads the grid column alone


def _plain(value: Fraction) -> str | None:
    """``value`` as a plain number literal (digits and a point, no sign), when it is one of at most 15 digits."""
    text = format(Decimal(value.numerator) / Decimal(value.denominator), "f") if value.denominator > 1 else str(value)
    text = text.lstrip("-")
    return text if fixed_point._PLAIN_NUMBER.fullmatch(text) and sum(c.isdigit() for c in text) <= 15 else None


@st.composite
def _literal(draw: Any, lo: float, hi: float) -> str:
    """A plain number: a double within the bounds rounded to a grid of ``2**-j`` (often the column's), any short
    decimal, or one of :data:`LITERALS`."""
    kind = draw(st.integers(0, 2))
    if kind == 0:
        x, j = Fraction(draw(st.floats(lo, hi))), draw(st.integers(0, 64))
        text = _plain(Fraction(round(x * 2**j), 2**j))
        if text is not None:
            return text
    if kind == 1:
        return str(draw(st.from_regex(r"[0-9]{1,8}(\.[0-9]{1,7})?", fullmatch=True)))
    return str(draw(st.sampled_from(LITERALS))).lstrip("-")


def _near(value: Fraction, k: int) -> list[float]:
    """Doubles next to ``value`` and to the grid points of ``2**-k`` on either side of it (where a wrong grid
    comparison would read another truth value)."""
    step = Fraction(1, 2**k) if k >= 0 else Fraction(2**-k)
    low = math.floor(value / step) * step
    out = []
    for point in (value, low, low + step):
        x = float(point)
        out += [x, math.nextafter(x, -math.inf), math.nextafter(x, math.inf)]
    return out


@pytest.fixture(scope="module")
def duck() -> Iterator[duckdb.DuckDBPyConnection]:
    con = duckdb.connect()
    yield con
    con.close()


@pytest.mark.slow
@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data(), bounds=st.sampled_from(BOUNDS), op=st.sampled_from(OPS), negative=st.booleans())
def test_the_rewritten_comparison_holds_for_any_double_within_the_bounds(
    duck: duckdb.DuckDBPyConnection, data: Any, bounds: tuple[str, str], op: str, negative: bool
) -> None:
    lo, hi = float(bounds[0]), float(bounds[1])
    k = fixed_point.exponent(Fraction(bounds[0]), Fraction(bounds[1]))
    text = data.draw(_literal(lo, hi))
    literal = f"-{text}" if negative else text
    drawn = data.draw(st.lists(st.one_of(st.none(), st.floats(lo, hi), st.sampled_from([lo, hi, 0.0, -0.0])), max_size=30))
    near = _near(-Fraction(text) if negative else Fraction(text), k)
    values = [v for v in [*drawn, *near] if v is None or lo <= v <= hi]  # the copy holds values within the bounds
    where = sqlglot.parse_one(f"SELECT 1 WHERE {op.format(c='t.y', v=literal)}", read="duckdb").args["where"]
    original = where.this.sql(dialect="duckdb")
    rewrite._compare_on_grid(where.this, "t", {"y": bounding.GridColumn("g", k)})
    changed = where.this.sql(dialect="duckdb")
    exact_op = op in ("{c} >= {v}", "{c} < {v}", "{v} <= {c}", "{v} > {c}")
    assert ('"g"' in changed) == (exact_op and fixed_point.literal_on_grid(text, k) is not None), (changed, k)
    rows = ", ".join(f"(CAST({'NULL' if v is None else repr(v)} AS DOUBLE))" for v in [*values, None])
    grid = bounding.grid_value_sql("y", k)
    copy = f"SELECT y, {grid} AS g FROM (VALUES {rows}) AS v(y)"
    differ = duck.execute(f"SELECT y FROM ({copy}) AS t WHERE ({original}) IS DISTINCT FROM ({changed})").fetchall()
    assert differ == [], (original, changed, k, differ)
