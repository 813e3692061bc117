"""AVG, VARIANCE and STDDEV stay within their sensitivity whatever magnitude the analyst gives their argument.

The centred sum Σ(e − mid) and the centred square Σ(e − mid)² are charged for a half-width ``hw`` per row; the
analyst picks ``mid`` (``x + 1e17``) apart from ``hw``. Summing at the data's magnitude and centring afterwards
rounds to the ulp of n·mid, and a clamped value whose bounds are no doubles sits off its interval by half an ulp
of mid (red team s15, A2). The property: for any offset (integer or real, up to 2⁶⁰ / 10¹⁷) and scale, D and
D′ = D + one row at an extreme give centred statistics that move by at most the plan's sensitivity (noise off),
and one row's generated centred value never leaves ±hw.
"""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.support.attack_neighbours import compare, exact_release
from veil.policy import load_policy
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
x = { type = "int", lower = -10, upper = 10 }
y = { type = "float", lower = -5, upper = 5 }
[analysts.a]
epsilon = 1000000
delta = 0.5
"""

ROWS = [(i % 21 - 10, (i % 13) * 0.77 - 4.6) for i in range(300)]


def _world(folder: Path, extra: list[tuple[int, float]]) -> Any:
    folder.mkdir()
    (folder / "policy.toml").write_text(POLICY, encoding="utf-8")
    policy = load_policy(folder / "policy.toml")
    frame = pd.DataFrame(extra + ROWS, columns=["x", "y"]).astype({"x": "Int64"})  # the extra row stored first
    write_table(policy, "t", frame, replace=True)
    return exact_session(policy, "a")


@pytest.fixture(scope="module")
def worlds(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    base = tmp_path_factory.mktemp("centred")
    out = {
        "d": _world(base / "d", []),
        "high": _world(base / "high", [(10, 5.0)]),
        "low": _world(base / "low", [(-10, -5.0)]),
    }
    yield out
    for s in out.values():
        s.close()


OFFSETS = st.one_of(
    st.integers(-(2**60), 2**60),
    st.sampled_from([10**14 + 37, 16 * 10**14 + 26, 2**53 + 1, 2**60 - 3]),
    st.floats(-1e17, 1e17, allow_nan=False).map(repr),
    st.sampled_from(["1e17", "1.125e14", "-3.3e16", "1e15 + 0.5"]),
)
SCALES = st.sampled_from(["1", "3", "0.5", "1.0000001", "7"])


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(offset=OFFSETS, scale=SCALES, column=st.sampled_from(["x", "y"]), half=st.booleans())
@example(offset="1e17", scale="1", column="x", half=False)  # red team s15 A2a: one row 16 off against hw = 10
@example(offset=1600740000000026, scale="1", column="x", half=True)  # A2b: a half-integer centre, integers only
def test_centred_statistics_move_by_at_most_their_sensitivity(
    worlds: dict[str, Any], offset: int | str, scale: str, column: str, half: bool
) -> None:
    expr = f"{column} * {scale} + {offset}" + (" + CASE WHEN x > 0 THEN 1 ELSE 0 END" if half else "")
    sql = f"SELECT AVG({expr}) AS a, VAR_POP({expr}) AS v, STDDEV_SAMP({expr}) AS s FROM t"
    d = exact_release(worlds["d"], sql, Fraction(5))
    for name in ("high", "low"):
        assert compare(d, exact_release(worlds[name], sql, Fraction(5))) == [], (name, sql)


#: arguments whose engine type rounds differently from the bounds: float4 and DECIMAL near 2²⁴/2³⁰, DOUBLE-valued
#: integers beyond 2⁵³ (red team s19, A1/A2: clamped in the argument's own type, they passed values beyond the bounds)
SUMMED_EXPRESSIONS = [
    "x + 1e17", "y * 3 + 1.125e14", "x + 1152921504606846975", "y + 1e15 + 0.5", "y * 1.0000001 - 3.3e16",
    "y * 0.1", "y / 3 + 0.7",
    "CAST(x + 1073742015 AS REAL)", "CAST(y AS REAL) * 64 + 1073742015", "CAST(x AS FLOAT) + 16777217",
    "CAST(y * 1000 AS DECIMAL(18, 3)) + 123456789012.345", "CAST(x AS DECIMAL(38, 10)) / 3",
    "ROUND(x + 1152921504606847104.0)", "FLOOR(y * 1e3) + 9007199254740993", "CEIL(CAST(y AS REAL)) + 1073742015",
    "CAST(x AS SMALLINT) * 3 + 2", "CAST(ROUND(y) AS INTEGER) + 1152921504606846976",
    "y + 1e20 + 16", "CAST(x AS DOUBLE) * 1e-3 + 1e20 + 16", "y + 1e18 + 0.125", "4e18 + 512 * x",
    "y", "(y)", "x",
]  # fmt: skip


def test_one_rows_summed_value_stays_within_its_bound(worlds: dict[str, Any]) -> None:
    """Every row's summed value as generated (a fixed-point grid value for real sums, fixed_point), evaluated
    row by row on the bounded copy (with the extreme row), stays within the row's bound: ±hw centred, ≤ hw²
    squared, ±magnitude for SUM — also where the bounds are no doubles, and where the range lies far from 0 and is
    narrower than the magnitude's grid step (red team s21, A6)."""
    import re

    from veil.proxy._testing import generated_sql, plan_of
    from veil.proxy.rewrite import _quantities, centred_in_sql, make_total, row_bound, sum_exponent

    session = worlds["high"]
    (count,) = generated_sql(session, "SELECT COUNT(*) FROM t")
    match = re.search(r"FROM (\S+) AS t", count)
    assert match is not None, count
    grids = session._env.bounded_copy("t")[1]  # a bare real column is read from its pre-scaled grid copy
    checked = 0
    for expr in SUMMED_EXPRESSIONS:
        plan = plan_of(session, f"SELECT AVG({expr}), VAR_POP({expr}), SUM({expr}) FROM t")
        assert plan is not None
        for stat in plan.statistics:
            if stat.kind not in ("sum", "sum_centered", "sumsq_centered") or stat.lower is None or stat.upper is None:
                continue
            summed = make_total(_quantities(stat, grids)[0]).this.sql(dialect="duckdb")
            rows = [r[0] for r in session._env.engine.execute(f"SELECT {summed} FROM {match.group(1)} AS t").rows]
            grid = Fraction(2) ** sum_exponent(stat)
            # centred afterwards (exactly) unless centred in the SQL; a SUM needs only |value| ≤ its magnitude
            centre = stat.center if stat.kind == "sum_centered" and not centred_in_sql(stat) else Fraction(0)
            values = [Fraction(v) / grid - centre for v in rows if v is not None]
            bound = row_bound(stat)
            assert values and all(-bound <= v <= bound for v in values), (expr, stat.label, min(values), max(values))
            if stat.kind != "sum":
                assert all(stat.lower <= v <= stat.upper for v in values), (expr, stat.label, min(values), max(values))
            checked += 1
    assert checked >= 3 * len(SUMMED_EXPRESSIONS)
