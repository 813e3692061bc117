"""Class-level test: an aggregate over any expression is refused before charging or answered — never
failed after the reservation, whatever range its sub-expressions reach and whatever the data holds.

Hypothesis builds aggregate arguments from the grammar analysts may use (arithmetic, integer and
decimal literals from 1e-300 to 1e300 and the int64 extremes, casts to INT/BIGINT/DECIMAL/DOUBLE,
powers, modulo, CASE, GREATEST …) over columns whose declared bounds are ±1e15 and whose rows sit at
those bounds. The run must end in an answer or in a refusal that charges nothing; ``QueryFailed``
(the engine failed after the charge) or any non-Veil exception is a bug: a failure that depends on
the data is a one-bit oracle on a row.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from veil.errors import InternalError, QueryFailed, VeilError
from veil.policy import load_policy
from veil.proxy._testing import exact_session
from veil.proxy.session import QuerySession
from veil.store.warehouse import write_table

#: the recursive strategy's repr is large; hypothesis warns about it when reporting a failure
pytestmark = pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisWarning")

POLICY = """\
[database]
path = "warehouse.duckdb"
[ledger]
path = "ledger.sqlite"
[defaults]
epsilon_per_query = 0.5
[tables.t]
privacy_unit = "row"
[tables.t.columns]
i = { type = "int", lower = -1000000000000000, upper = 1000000000000000 }
f = { type = "float", lower = -1e15, upper = 1e15 }
s = { type = "int", lower = 0, upper = 100 }
[analysts.alice]
epsilon = 1e12
delta = 0.5
"""

ROWS = pd.DataFrame(
    {
        "i": [10**15, -(10**15), 0, 1, 77516, None],
        "f": [1e15, -1e15, 0.0, 0.5, 2174.25, float("nan")],
        "s": [0, 100, 7, 50, 99, 1],
    }
)

LEAVES = st.sampled_from(
    ["i", "f", "s", "0", "1", "-1", "7", "9223372036854775807", "1.5", "1.00000000000000000000000001",
     "1e300", "1e-300", "1e308", "99999999999999999999999", "0.1"]
)  # fmt: skip


def _compound(sub: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    binary = st.tuples(sub, st.sampled_from(["+", "-", "*", "/", "%"]), sub).map(lambda t: f"({t[0]} {t[1]} {t[2]})")
    cast = st.tuples(sub, st.sampled_from(["INT", "BIGINT", "SMALLINT", "DECIMAL(38,30)", "DECIMAL(10,2)", "DOUBLE"])).map(
        lambda t: f"CAST({t[0]} AS {t[1]})"
    )
    power = st.tuples(sub, st.integers(0, 8)).map(lambda t: f"POWER({t[0]}, {t[1]})")
    unary = st.tuples(st.sampled_from(["ABS", "ROUND", "FLOOR", "CEIL", "SIGN", "-"]), sub).map(lambda t: f"{t[0]}({t[1]})")
    case = st.tuples(sub, sub, sub).map(lambda t: f"CASE WHEN {t[0]} > 0 THEN {t[1]} ELSE {t[2]} END")
    pick = st.tuples(st.sampled_from(["GREATEST", "LEAST", "COALESCE"]), sub, sub).map(lambda t: f"{t[0]}({t[1]}, {t[2]})")
    return st.one_of(binary, cast, power, unary, case, pick)


EXPRESSIONS = st.recursive(LEAVES, _compound, max_leaves=6)
AGGREGATES = st.sampled_from(
    ["SUM({})", "AVG({})", "VARIANCE({})", "STDDEV({})", "MIN({})", "MAX({})", "MEDIAN({})",
     "QUANTILE_CONT({}, 0.9)", "COUNT({})"]
)  # fmt: skip


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[QuerySession]:
    d: Path = tmp_path_factory.mktemp("ranges")
    (d / "policy.toml").write_text(POLICY, encoding="utf-8")
    write_table(load_policy(d / "policy.toml"), "t", ROWS, replace=True)
    s = exact_session(d / "policy.toml", "alice")
    yield s
    s.close()


def _run(session: QuerySession, sql: str) -> None:
    before = session.budget()
    try:
        session.execute(sql, epsilon=1)
    except (QueryFailed, InternalError) as e:
        pytest.fail(f"{sql}: failed after the reservation: {e}")
    except VeilError:
        assert session.budget() == before, f"{sql}: a refusal charged the budget"
    try:
        session.explain(sql, epsilon=1)
    except (QueryFailed, InternalError) as e:  # pragma: no cover - the failure is the finding
        pytest.fail(f"EXPLAIN {sql}: {e}")
    except VeilError:
        pass


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(expr=EXPRESSIONS, agg=AGGREGATES, where=st.booleans())
# found by this property: a bound of ~10^9600 broke the refusal's message (Python will not print an int of more
# than 4,300 digits) and ended in a bare ValueError
@example(expr="(i / POWER(POWER(1e-300, 2), 8))", agg="SUM({})", where=False)
def test_any_aggregate_is_answered_or_refused_for_free(session: QuerySession, expr: str, agg: str, where: bool) -> None:
    sql = f"SELECT {agg.format(expr)} FROM t" + (f" WHERE {expr} > 0" if where else "")
    _run(session, sql)


@pytest.mark.parametrize(
    "expr",
    ["i * i", "f * f * f", "1e300 * f", "1e308 * 10", "i * 9223372036854775807", "POWER(i, 4)",
     "i * 1.00000000000000000000000001", "f / 1e-300", "CAST(f AS DECIMAL(38,30))", "99999999999999999999999 * s"],
)  # fmt: skip
def test_known_overflow_shapes(session: QuerySession, expr: str) -> None:
    for agg in ("SUM({})", "AVG({})", "VARIANCE({})", "MAX({})", "QUANTILE_CONT({}, 0.5)"):
        _run(session, f"SELECT {agg.format(expr)} FROM t")


@pytest.mark.parametrize(("n", "epsilon"), list(enumerate([0.001, "0.001", 0.0010000000000000002])))
def test_epsilon_at_the_minimum_is_accepted(session: QuerySession, n: int, epsilon: float | str) -> None:
    """The default minimum ε per query is 0.001: asking for exactly that (as a float or as text) is
    served; the next float below it is refused."""
    from fractions import Fraction

    before = session.budget()
    session.execute(f"SELECT COUNT(*) FROM t WHERE s > {n}", epsilon=epsilon)  # type: ignore[arg-type]  # a new query: no cache
    assert session.budget() != before
    below = 0.0009999999999999998
    assert Fraction(repr(below)) < Fraction(1, 1000)
    before = session.budget()
    with pytest.raises(VeilError, match="below the minimum"):
        session.execute("SELECT COUNT(*) FROM t", epsilon=below)
    assert session.budget() == before


@pytest.mark.parametrize("expr", ["i * i", "i * 9223372036854775807", "POWER(i, 3)", "-(i * 1000000)"])
def test_integer_products_beyond_int64_are_computed_in_doubles(session: QuerySession, expr: str) -> None:
    """An integer expression whose range leaves ±2^62 is answered, computed in DOUBLE (not refused, not
    silently NULL): with noise off the SUM equals the exact sum of the clamped values, up to the fixed-point
    grid each row is summed on (``fixed_point``: one step, 2⁻⁶² of the row bound, per row)."""
    from veil.proxy._testing import plan_of

    sql = f"SELECT SUM({expr}) FROM t"
    ans = session.execute(sql, epsilon=1)
    values = [v for v in ROWS["i"].dropna().astype("int64").tolist()]
    exact = sum(float(eval(expr.replace("POWER(i, 3)", "i ** 3"), {"i": float(v)})) for v in values)
    plan = plan_of(session, sql, 1)
    assert plan is not None
    (stat,) = plan.statistics
    grid = float(max(abs(stat.lower), abs(stat.upper))) * 2.0**-62 if stat.mechanism == "laplace" else 0.0
    assert float(ans.rows[0][0]) == pytest.approx(exact, rel=1e-9, abs=len(values) * grid)
