"""AVG/VAR/STDDEV of a column the query's WHERE keeps non-NULL share the query's COUNT(*) statistic.

``COUNT(y)`` and ``COUNT(*)`` are the same number on every row a ``WHERE`` keeps when one of its top-level
conjuncts compares ``y`` with a literal (never TRUE for a NULL ``y``) or tests ``y IS NOT NULL``; the plan then
noises that count once (``plan._non_null_columns``: from the query's text alone, never the data) and the statement
counts ``COUNT(*)``. Properties:

* for each shape that rejects NULLs, the moments' count is the ``COUNT(*)`` statistic (or partition selection's),
  one statistic fewer, and no ``COUNT(y)`` is generated; for each shape that may keep a NULL ``y`` (an ``OR``, a
  ``NOT``, another column, ``IS NULL``, a comparison with another column), the plan is as before;
* the exact (noise-off) answers are those of the plan without the sharing, over data holding NULL, NaN, ±inf and
  values beyond the bounds, grouped by public and private keys, with and without a ``FILTER``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from veil.policy import load_policy
from veil.proxy import plan as plan_module
from veil.proxy._testing import exact_session, generated_sql, plan_of
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
g = { type = "category", values = ["a", "b"] }
y = { type = "float", lower = -5, upper = 5 }
[analysts.a]
epsilon = 1000000000
delta = 0.5
"""

Y_VALUES = [None, math.nan, math.inf, -math.inf, -7.5, -5.0, -0.0, 0.0, 0.1, 1.0, 1.5, 2.5, 4.75, 5.0, 9.0]
ROWS = [(i % 21 - 10, [None, "a", "b"][i % 3], Y_VALUES[i % len(Y_VALUES)]) for i in range(600)]

#: WHERE clauses on which every kept row has a non-NULL y
REJECTING = ["y >= 0", "0 <= y", "y < 2.5 AND x > -3", "(y <> 1) AND g = 'a'", "y IS NOT NULL", "x > 0 AND (y = 1.5)"]
#: WHERE clauses that may keep a row whose y is NULL
KEEPING = ["y >= 0 OR x > 0", "NOT (y < 0)", "x >= 0", "y IS NULL", "y >= x", "NOT y IS NULL OR x = 1"]

QUERIES = [
    "SELECT g, COUNT(*), AVG(y) FROM t WHERE {w} GROUP BY g",
    "SELECT AVG(y), VAR_POP(y), STDDEV_SAMP(y) FROM t WHERE {w}",
    "SELECT g, AVG(y) FILTER (WHERE x > 0), COUNT(*) FILTER (WHERE x > 0) FROM t WHERE {w} GROUP BY g",
    "SELECT x, AVG(y) FROM t WHERE {w} GROUP BY x",  # private keys: partition selection's COUNT(*)
]


def _world(folder: Path) -> Any:
    folder.mkdir()
    (folder / "policy.toml").write_text(POLICY, encoding="utf-8")
    policy = load_policy(folder / "policy.toml")
    frame = pd.DataFrame(ROWS, columns=["x", "g", "y"]).astype({"x": "Int64", "y": "float64"})
    write_table(policy, "t", frame, replace=True)
    return exact_session(policy, "a")


@pytest.fixture(scope="module")
def worlds(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any]]:
    base = tmp_path_factory.mktemp("nonnull")
    shared, apart = _world(base / "shared"), _world(base / "apart")
    yield shared, apart
    shared.close()
    apart.close()


def _unshared(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plan_module, "_non_null_columns", lambda tree: frozenset())


@pytest.mark.parametrize("where", REJECTING)
def test_a_null_rejecting_where_shares_the_count(worlds: tuple[Any, Any], where: str) -> None:
    shared, _ = worlds
    sql = QUERIES[0].format(w=where)
    plan = plan_of(shared, sql)
    assert plan is not None
    assert [s.kind for s in plan.statistics] == ["count", "sum_centered"], [s.label for s in plan.statistics]
    count, avg = plan.aggregates[0], plan.aggregates[1]
    assert avg.stats[0] == count.stats[0] and plan.statistics[count.stats[0]].arg is None
    assert all(s.epsilon == plan.epsilon / 2 for s in plan.statistics)
    assert not any("COUNT(t.y)" in s for s in generated_sql(shared, sql))
    keyed = plan_of(shared, QUERIES[3].format(w=where))  # AVG's count is partition selection's COUNT(*)
    assert keyed is not None and keyed.partition_stat is not None
    assert keyed.aggregates[0].stats[0] == keyed.partition_stat and len(keyed.statistics) == 2


@pytest.mark.parametrize("where", KEEPING)
def test_a_where_that_may_keep_nulls_counts_the_column(worlds: tuple[Any, Any], where: str) -> None:
    shared, _ = worlds
    sql = QUERIES[0].format(w=where)
    plan = plan_of(shared, sql)
    assert plan is not None
    assert [s.kind for s in plan.statistics] == ["count", "count", "sum_centered"], [s.label for s in plan.statistics]
    assert any("COUNT(t.y)" in s for s in generated_sql(shared, sql))


@pytest.mark.parametrize("query", QUERIES)
@pytest.mark.parametrize("where", REJECTING + KEEPING)
def test_exact_answers_are_those_of_the_unshared_plan(
    worlds: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch, query: str, where: str
) -> None:
    shared, apart = worlds
    sql = query.format(w=where)
    got = shared.execute(sql)
    with monkeypatch.context() as m:
        _unshared(m)
        want = apart.execute(sql)
    assert got.columns == want.columns
    assert sorted(got.rows, key=repr) == sorted(want.rows, key=repr), sql
