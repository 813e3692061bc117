"""A one-statement query grouped by bare base-table columns binds when it runs, its key types read off the catalog.

``veil.proxy.pipeline._prepare`` skips the DESCRIBE round trip for such queries: the bounded copy and the
public tables' reads hold exactly their catalog types. This checks, for every column type a private or
public table can have, private and declared keys, with and without aliases and joins, that the catalog's
key types are the ones the engine binds — and that every other shape (expression keys, CTE columns,
several statements) still binds first.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from fractions import Fraction

import pandas as pd
import pytest

from tests.support.warehouse import policy_with_tables
from veil.engines.base import output_type
from veil.proxy import pipeline
from veil.proxy.session import QuerySession

POLICY = """\
[database]
path = "w.duckdb"
[ledger]
path = "l.sqlite"
[tables.t]
privacy_unit = "row"
[tables.t.columns]
i = { type = "int", lower = 0, upper = 10 }
iv = { type = "int", values = [1, 2, 3] }
f = { type = "float", lower = 0, upper = 1 }
c = { type = "category", max_length = 256 }  # read across a join: at most 504 characters (multiplicity.MAX_JOIN_ROW_BYTES)
cv = { type = "category", values = ["a", "b"] }
b = { type = "bool" }
d = { type = "date" }
[tables.pub]
public = true
[analysts.a]
epsilon = 100
"""


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[QuerySession]:
    n = 40
    t = pd.DataFrame({
        "i": [k % 10 for k in range(n)], "iv": [1 + k % 3 for k in range(n)], "f": [k / n for k in range(n)],
        "c": ["x", "y"] * (n // 2), "cv": ["a", "b"] * (n // 2), "b": [True, False] * (n // 2),
        "d": [dt.date(2020, 1, 1 + k % 28) for k in range(n)],
    })  # fmt: skip
    pub = pd.DataFrame({"pk": [1, 2, 3], "pn": ["u", "v", "w"], "pf": [0.5, 1.5, 2.5], "pd": [dt.date(2020, 1, 1)] * 3})
    policy = policy_with_tables(tmp_path_factory.mktemp("keytypes"), POLICY, {"t": t}, {"pub": pub})
    with QuerySession(policy, "a") as s:
        yield s


def _prepared(session: QuerySession, sql: str) -> pipeline.QueryState:
    return pipeline.run(pipeline.QueryState(sql, Fraction(1)), session._env, until="prepare")


def _bound_key_types(session: QuerySession, state: pipeline.QueryState) -> list[str]:
    assert state.plan is not None and state.rendered is not None
    (stmt,) = state.rendered.statements()
    return [output_type(t) for t in session._env.engine.describe(stmt).types[: len(state.plan.keys)]]


CATALOG_KEYED = [
    *(f"SELECT {k}, COUNT(*) FROM t GROUP BY {k}" for k in ("i", "iv", "f", "c", "cv", "b", "d")),
    "SELECT x.c, x.b, SUM(x.i) FROM t AS x GROUP BY x.c, x.b",
    "SELECT d, iv, AVG(f) FROM t WHERE i > 3 GROUP BY 1, 2",
    *(f"SELECT p.{k}, COUNT(*) FROM t JOIN pub p ON p.pk = t.iv GROUP BY p.{k}" for k in ("pk", "pn", "pf", "pd")),
    "SELECT t.c, p.pn, COUNT(*) FROM t JOIN pub p ON p.pk = t.iv GROUP BY t.c, p.pn",
]


@pytest.mark.parametrize("sql", CATALOG_KEYED)
def test_catalog_key_types_are_the_bound_ones(session: QuerySession, sql: str) -> None:
    state = _prepared(session, sql)
    assert state.bind_on_run, "a bare base-table key should skip the DESCRIBE round trip"
    assert state.key_types == _bound_key_types(session, state)
    answer = session.execute(sql, epsilon=1)  # runs, and Env.run checks the types it ran with
    assert len(answer.columns) >= 2


BOUND_FIRST = [
    "SELECT i + 1, COUNT(*) FROM t GROUP BY i + 1",  # an expression key
    "SELECT UPPER(c), COUNT(*) FROM t GROUP BY UPPER(c)",
    "WITH w AS (SELECT i AS c FROM t) SELECT c, COUNT(*) FROM w GROUP BY c",  # a CTE column named like a table's
    "SELECT s.c, COUNT(*) FROM (SELECT CAST(i AS VARCHAR) AS c FROM t) AS s GROUP BY s.c",  # a derived table
    "SELECT c, MEDIAN(f) FROM t GROUP BY c",  # two statements (the quantile's histogram)
]


@pytest.mark.parametrize("sql", BOUND_FIRST)
def test_other_keyed_shapes_still_bind_first(session: QuerySession, sql: str) -> None:
    state = _prepared(session, sql)
    assert not state.bind_on_run
    session.execute(sql, epsilon=1)


@pytest.mark.parametrize(
    ("key", "want"),
    [("b * 1", {0, 1}), ("b + b", {0, 2}), ("CASE WHEN b THEN 1 ELSE 0 END + iv", {1, 2, 3, 4}), ("NOT b", {False, True})],
)
def test_public_domains_of_boolean_arithmetic_are_neutral_like_the_engine_sql(
    session: QuerySession, key: str, want: set[object]
) -> None:
    # the domain query is made total and neutral like the engine's (a boolean in arithmetic is cast first);
    # without it DuckDB refused `b * 1` and a declared bool key in arithmetic could not be grouped by
    answer = session.execute(f"SELECT {key} AS g, COUNT(*) FROM t GROUP BY 1", epsilon=1)
    assert {r[0] for r in answer.rows} == want
