"""Planning work is bounded by the size of what Veil generates, checked before it is built.

The plan clamps each aggregate argument (up to 16 copies) and the rewrite copies each statistic's clamped argument
again (centred, clamped, squared, once per statistic): VARIANCE of a 160-branch CASE generated 33,000 nodes and took
5 s to explain, free (red team s23, A2). ``rewrite.check_generated_size`` prices each statistic's copies as the
rewrite will make them (``argument_copies``); the property: that price is never below the nodes actually generated
(so the limit bounds the work), over argument shapes, sizes, wrappers and aggregates — and beyond the limit a query
is refused free, quickly.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from veil.errors import QueryTooComplex
from veil.policy import load_policy
from veil.proxy import pipeline
from veil.proxy._testing import exact_session
from veil.proxy.rewrite import generated_size_bound
from veil.store.warehouse import write_table

POLICY = """\
[database]
path = "w.duckdb"
[ledger]
path = "l.sqlite"
[tables.t]
privacy_unit = "row"
[tables.t.columns]
x = { type = "int", lower = 0, upper = 9 }
y = { type = "float", lower = -3.3, upper = 1000.7 }
[analysts.a]
epsilon = 1000
"""


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    folder: Path = tmp_path_factory.mktemp("size")
    (folder / "policy.toml").write_text(POLICY, encoding="utf-8")
    policy = load_policy(folder / "policy.toml")
    write_table(policy, "t", pd.DataFrame({"x": [1, 2, 3], "y": [0.5, 7.0, 9.25]}), replace=True)
    with exact_session(policy, "a") as s:
        yield s


def _case(n: int) -> str:
    return "CASE " + " ".join(f"WHEN x = {i % 10} THEN y * {i % 7 + 1}" for i in range(n)) + " END"


AGGREGATES = ["VARIANCE", "SUM", "AVG", "MEDIAN", "COUNT"]
WRAPPERS = ["{}", "ROUND({})", "{} + 1e17", "CAST({} AS REAL)", "FLOOR({} / 3)"]


def _priced_and_built(session: object, sql: str) -> tuple[int, int]:
    state = pipeline.run(session._state(sql, 1), session._env, until="plan")  # type: ignore[attr-defined]
    p = state.plan
    assert p is not None
    price = generated_size_bound(p)
    state = pipeline.run(state, session._env, until="rewrite")  # type: ignore[attr-defined]
    q = state.queries
    built = sum(1 for t in [q.main, *(g for _, g in q.grids)] if t is not None for _ in t.walk())
    return price, built


@pytest.mark.parametrize("agg", AGGREGATES)
@pytest.mark.parametrize("wrap", WRAPPERS)
@pytest.mark.parametrize("n", [3])
def test_the_price_bounds_what_is_generated(session: object, agg: str, wrap: str, n: int) -> None:
    price, built = _priced_and_built(session, f"SELECT {agg}({wrap.format(_case(n))}) FILTER (WHERE x > 1) FROM t")
    # the template (FROM, WHERE, keys, aliases) adds a few nodes per statement beyond the arguments
    assert built <= price + 60, (agg, wrap, price, built)


@pytest.mark.parametrize("sql", [f"SELECT VARIANCE({_case(160)}) FROM t", f"SELECT SUM(ROUND({_case(400)})) FROM t",
                                 f"SELECT MEDIAN(ROUND({_case(60)})) FROM t", f"SELECT AVG({_case(90)}) FROM t"])  # fmt: skip
def test_a_query_past_the_limit_is_refused_free_and_fast(session: object, sql: str) -> None:
    before = session.budget().spent  # type: ignore[attr-defined]
    start = time.perf_counter()
    with pytest.raises(QueryTooComplex, match="too large to plan"):
        session.explain(sql, epsilon=1)  # type: ignore[attr-defined]
    assert time.perf_counter() - start < 2.0
    with pytest.raises(QueryTooComplex):
        session.execute(sql, epsilon=1)  # type: ignore[attr-defined]
    assert session.budget().spent == before  # type: ignore[attr-defined]
