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


# --- Tiny row bounds (red team s70 F1): a subnormal sum's rounding is absolute, not relative ----------------------

#: Multipliers of ``LEAST(GREATEST(y, 0), 1)`` (rows in [0, m]): the smallest subnormal and others below 2⁻¹⁰²², the
#: floor's neighbourhood (2⁻¹⁰⁰⁰ ≈ 9.33e-302: a SUM at 5e-302 below, 1e-301 above; an AVG's half-width m/2 below at
#: 1e-301, above at 3e-301) and normal ones (a variance's squared half-width is below the floor at 1e-160, above
#: at 1e-150).
TINY = ["5e-324", "3e-323", "1e-310", "5e-302", "1e-301", "3e-301", "1e-160", "1e-150", "1e-100"]
TINY_SQL = [
    "SELECT SUM(LEAST(GREATEST(y, 0), 1) * {m}) FROM t",
    "SELECT AVG(LEAST(GREATEST(y, 0), 1) * {m}) FROM t",
    "SELECT VARIANCE(LEAST(GREATEST(y, 0), 1) * {m}) FROM t",
    "SELECT y < 0 AS neg, SUM(LEAST(GREATEST(y, 0), 1) * {m}), AVG(LEAST(GREATEST(y, 0), 3) * {m}) FROM t GROUP BY 1",
    "SELECT y < 0 AS neg, STDDEV(LEAST(GREATEST(y, -1), 2) * {m}) FROM t GROUP BY 1",
]


def _worst_neighbour_distance(stat: Any) -> Fraction:
    """The largest distance between the doubles of one group's exact sums on two neighbouring databases (one more
    row), over adversarial grid totals of ``n`` rows near zero and near half a row (where a subnormal sum's rounding
    is absolute, ties included) and added rows at the row range's ends and middle: what
    :func:`veil.proxy.fixed_point.to_doubles` releases, noise off."""
    from veil.proxy.rewrite import centred_in_sql, row_bound, row_range, sum_exponent

    k, bound = sum_exponent(stat), row_bound(stat)
    glo, ghi = fixed_point.on_grid(*row_range(stat), k)
    centred = stat.kind == "sum_centered" and not centred_in_sql(stat)  # centred after the sum, with the count
    worst = Fraction(0)
    for n in (1, 2, 3):
        near = round(stat.center * n * Fraction(2) ** k) if centred else 0  # a total whose centred sum is ~0
        bases = {n * glo, n * ghi, *(near + d for d in (-1, 0, 1, ghi // 2, glo // 2, ghi // 2 + 1))}
        for total in (b for b in bases if n * glo <= b <= n * ghi):
            for row in {glo, ghi, (glo + ghi) // 2, (glo + ghi) // 2 + 1}:
                a = fixed_point.to_doubles([total], k, stat.center, [n] if centred else None, bound=bound)[0]
                b = fixed_point.to_doubles([total + row], k, stat.center, [n + 1] if centred else None, bound=bound)[0]
                worst = max(worst, abs(Fraction(a) - Fraction(b)))
    return worst


@pytest.mark.parametrize("m", TINY)
@pytest.mark.parametrize("template", TINY_SQL)
def test_tiny_row_bounds_are_refused_free_or_stay_within_their_charge(world: tuple[Any, Any], template: str, m: str) -> None:
    """Every real statistic of a sum, average or variance over rows in a tiny range either is refused (typed, free:
    the budget does not move) or has a normal Laplace scale that pays for the worst distance between neighbours'
    doubles: distance / scale ≤ its ε share. Before the fix 23 of these 45 cases were accepted and exceeded it: every
    subnormal row range (m ≤ 1e-310; a SUM's 0.5 → 0 and 1.5 → 2 units: twice Δ) and the variances whose squared
    half-width is subnormal (m = 5e-302 … 1e-160). Deterministic."""
    from veil.errors import Unsupported

    sql = template.format(m=m)
    session = world[1]
    try:
        plan = plan_of(session, sql, 1)
    except Unsupported as e:
        assert e.sqlstate == "0A000" and "2^-1000" in str(e) and m in str(e) and e.hint, str(e)
        before = session.budget().spent
        with pytest.raises(Unsupported):
            session.execute(sql, epsilon=1)
        assert session.budget().spent == before
        return
    assert plan is not None
    real = [s for s in plan.statistics if s.mechanism == "laplace"]
    assert real
    for stat in real:
        assert stat.scale >= sys.float_info.min  # a normal double: the relative raise is not rounded away
        assert _worst_neighbour_distance(stat) / Fraction(stat.scale) <= stat.epsilon, (sql, stat.label)


def test_tiny_row_bounds_refuse_exactly_below_the_floor(world: tuple[Any, Any]) -> None:
    """The floor is data-independent and only bites below 2⁻¹⁰⁰⁰: a SUM at 1e-301, an AVG at 3e-301 (half-width
    1.5e-301) and a VARIANCE at 1e-150 are answered, their neighbours below are refused."""
    from veil.errors import QueryRejected, Unsupported

    session = world[1]
    for sql, accepted in [
        ("SELECT SUM(LEAST(GREATEST(y, 0), 1) * 1e-301) FROM t", True),
        ("SELECT SUM(LEAST(GREATEST(y, 0), 1) * 5e-302) FROM t", False),
        ("SELECT AVG(LEAST(GREATEST(y, 0), 1) * 3e-301) FROM t", True),
        ("SELECT AVG(LEAST(GREATEST(y, 0), 1) * 1e-301) FROM t", False),
        ("SELECT VARIANCE(LEAST(GREATEST(y, 0), 1) * 1e-150) FROM t", True),
        ("SELECT VARIANCE(LEAST(GREATEST(y, 0), 1) * 1e-160) FROM t", False),
        ("SELECT SUM(LEAST(GREATEST(y, 0), 0) * 1e-300) FROM t", True),  # a zero range: exact, no rounding at all
    ]:
        if accepted:
            assert plan_of(session, sql, 1) is not None, sql
        else:
            with pytest.raises(Unsupported, match="2\\^-1000"):
                plan_of(session, sql, 1)
    # a scale Δ/ε below a normal double (a huge ε), where the relative raise would be rounded away: refused too
    assert plan_of(session, "SELECT SUM(LEAST(GREATEST(y, 0), 1) * 1e-301) FROM t", 1e5) is not None
    with pytest.raises(QueryRejected, match="2\\^-1020"):
        plan_of(session, "SELECT SUM(LEAST(GREATEST(y, 0), 1) * 1e-301) FROM t", 1e8)
