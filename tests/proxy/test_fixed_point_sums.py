"""Real sums are exact: each row is summed on a fixed-point grid, and only the finished sum is rounded.

A DOUBLE ``SUM`` rounds after every row, so one person's row could move it by more than the sensitivity
(Casacuberta et al. 2022; red team s17 A2): ``1e16 + 1 − 1e16`` is 0 or 2 depending on the order. Veil sums
``FLOOR(value · 2**k)`` as BIGINTs (:mod:`veil.proxy.fixed_point`). The properties, over adversarial rows
(magnitudes that cancel, denormals, values off every grid), noise off:

* the released SUM / AVG equals the exact sum of the rows' grid values (computed here with fractions), rounded
  once — so it depends on the multiset of rows, never on their order;
* D and D′ = D + one row give released values that differ by at most Δ · (1 + ``CONVERSION_SLACK``), and the
  exact grid sums by at most Δ.

Each fails on a DOUBLE ``SUM`` (the first at once: a sum of ``[1.6e16, 1, -1.6e16] × m`` lost the ones).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import pandas as pd
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from veil.policy import load_policy
from veil.proxy import fixed_point
from veil.proxy._testing import exact_session, plan_of
from veil.store.warehouse import write_table

BOUND = 1e15  # the policy's largest; the queries sum y * 16 (exact in doubles), whose ulp at the bound is 2
SCALE = 16

POLICY = f"""\
[database]
path = "w.duckdb"
[ledger]
path = "l.sqlite"
[tables.t]
privacy_unit = "row"
[tables.t.columns]
y = {{ type = "float", lower = {-BOUND!r}, upper = {BOUND!r} }}
[analysts.a]
epsilon = 1000000000
delta = 0.5
"""


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any]]:
    folder = tmp_path_factory.mktemp("fixed")
    (folder / "policy.toml").write_text(POLICY, encoding="utf-8")
    policy = load_policy(folder / "policy.toml")
    session = exact_session(policy, "a")
    yield policy, session
    session.close()


def _grid_sum(values: list[float]) -> Fraction:
    """Σ floor(16·v · 2**k) / 2**k over the rows, exactly (k from the bounds of ``y * 16``)."""
    k = fixed_point.exponent(Fraction(-BOUND * SCALE), Fraction(BOUND * SCALE))
    grid = Fraction(2) ** k
    return sum((Fraction(math.floor(Fraction(v * SCALE) * grid)) / grid for v in values), Fraction(0))


def _released(world: tuple[Any, Any], values: list[float], sql: str) -> float:
    policy, session = world
    write_table(policy, "t", pd.DataFrame({"y": values}, dtype="float64"), replace=True)
    session.asked = getattr(session, "asked", 0) + 1  # a new ε each time: the answer cache never answers
    return float(session.execute(sql, epsilon=1 + session.asked / 10**6).rows[0][0])


ROWS = st.lists(
    st.one_of(
        st.sampled_from([BOUND, -BOUND, 1 / SCALE, -1.0, 0.1, 5e-324, 2.0**-60, BOUND - 0.125, 562949953421312.1]),
        st.floats(-BOUND, BOUND, allow_nan=False, allow_infinity=False),
    ),
    min_size=1,
    max_size=40,
)
SETTINGS = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.mark.slow
@SETTINGS
@given(rows=ROWS)
@example(rows=[BOUND, 1 / SCALE, -BOUND] * 10)  # a DOUBLE sum gives 0 or 2, not 10
def test_a_real_sum_is_the_exact_sum_of_its_rows_rounded_once(world: tuple[Any, Any], rows: list[float]) -> None:
    got = _released(world, rows, "SELECT SUM(y * 16) FROM t")
    assert got == float(_grid_sum(rows)), (got, float(_grid_sum(rows)))


@pytest.mark.slow
@SETTINGS
@given(rows=ROWS)
@example(rows=[BOUND, 1 / SCALE, -BOUND] * 10)
def test_an_average_is_the_exact_sum_over_the_count(world: tuple[Any, Any], rows: list[float]) -> None:
    got = _released(world, rows, "SELECT AVG(y * 16) FROM t")
    want = float(_grid_sum(rows) / len(rows))  # centre 0: the centred sum is the sum
    assert got == pytest.approx(want, rel=1e-12, abs=1e-300), (got, want)


@pytest.mark.slow
@SETTINGS
@given(rows=ROWS, extra=st.sampled_from([BOUND, -BOUND, 1 / SCALE, 0.1, 3e14 + 0.5]))
@example(rows=[BOUND, 1 / SCALE, -BOUND] * 10, extra=1.0)
def test_neighbours_move_a_sum_by_at_most_its_sensitivity(world: tuple[Any, Any], rows: list[float], extra: float) -> None:
    sql = "SELECT SUM(y * 16) FROM t"
    plan = plan_of(world[1], sql, 1)
    assert plan is not None
    delta = float(plan.statistics[0].sensitivity)
    assert abs(_grid_sum([*rows, extra]) - _grid_sum(rows)) <= Fraction(delta)
    moved = abs(_released(world, [*rows, extra], sql) - _released(world, rows, sql))
    assert moved <= delta * (1 + fixed_point.CONVERSION_SLACK), (moved, delta)


def test_the_released_sum_does_not_depend_on_the_rows_order(world: tuple[Any, Any]) -> None:
    rows = [BOUND, 1 / SCALE, -BOUND, 0.1, 3.0, -BOUND + 0.125, BOUND] * 7
    answers = {_released(world, order, "SELECT SUM(y * 16) FROM t") for order in (rows, rows[::-1], sorted(rows))}
    assert answers == {float(_grid_sum(rows))}


def test_the_laplace_scale_pays_for_the_conversion_slack(world: tuple[Any, Any]) -> None:
    """Real sums' Laplace scale is Δ/ε raised by SCALE_RAISE, more than the conversion slack; counts are not."""
    plan = plan_of(world[1], "SELECT COUNT(*), SUM(y * 16) FROM t", 1)
    assert plan is not None
    for stat in plan.statistics:
        plain = float(stat.sensitivity / stat.epsilon)
        if stat.mechanism == "laplace":
            assert stat.scale == pytest.approx(plain * (1 + fixed_point.SCALE_RAISE), rel=1e-12)
            assert fixed_point.SCALE_RAISE > fixed_point.CONVERSION_SLACK + 2.0**-36  # the lattice's own slack
        else:
            assert stat.scale == plain


def test_grid_values_fit_a_bigint_for_every_bound() -> None:
    for b in [Fraction(1, 10**400), Fraction(1, 3), Fraction(1), Fraction(2**62), Fraction(10**150), Fraction(10**300)]:
        k = fixed_point.exponent(-b, b)
        assert b * Fraction(2) ** k <= 2**62 < 2 * b * Fraction(2) ** k or k == 62 + 1074, (b, k)
        assert -1074 <= k <= 62 + 1074  # below 2**-1074 every double in range is a multiple of 2**-1074: exact
        product = Fraction(1)
        for factor in fixed_point.grid_factors(k):  # the SQL multiplies by these doubles, each exact
            assert factor == Fraction(2) ** round(math.log2(factor)) and math.isfinite(factor)
            product *= Fraction(factor)
        assert product == Fraction(2) ** k, (b, k)


@given(
    total=st.one_of(st.none(), st.integers(-(2**90), 2**90)),
    k=st.sampled_from([0, 5, 58, 62, 65, 1023, 1100, 1136, -437, -962]),
    center=st.sampled_from([Fraction(0), Fraction(1, 3), Fraction(10**17), Fraction(-5, 2), Fraction(7, 10)]),
    count=st.one_of(st.none(), st.integers(0, 10**7)),
    bound=st.sampled_from([Fraction(10), Fraction(1, 10), Fraction(10**150), Fraction(10**300), Fraction(1, 10**400)]),
)
def test_the_exact_sum_is_rounded_once_after_its_clamp(
    total: int | None, k: int, center: Fraction, count: int | None, bound: Fraction
) -> None:
    exact = Fraction(total or 0) / Fraction(2) ** k - center * (count or 0)
    limit = bound * 2**fixed_point.CLAMP_BITS
    clamped = max(-limit, min(limit, exact))
    top = Fraction(sys.float_info.max)
    want = float(clamped) if abs(clamped) <= top else (sys.float_info.max if clamped > 0 else -sys.float_info.max)
    assert fixed_point.to_doubles([total], k, center, [count], bound=bound) == [want]
