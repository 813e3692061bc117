"""No range join over private rows through derived tables and CTEs (red team s74 F1; ``range_lineage``).

A scope that cross-joins the private table with a public one passes the one-scope rule (no inequality between its
sources), and a scope above that compares the two sides' columns passes it too (one source); DuckDB pushes the filter
down and runs an IEJoin or a piecewise merge join over the private rows. The class: every way of joining the sources
with no equality between them (comma, CROSS JOIN, ON TRUE, LEFT JOIN ON TRUE, an ON filtering one side, a bracketed
cross join, a third source beside an equality) × every way of carrying the columns up (a derived table, a CTE, two
levels, a computed column, a cast, a comparison computed inside) × every comparison above (<, BETWEEN, NOT >=, a CASE
in the SELECT list, arithmetic of the columns): each is refused free (0A000), or DuckDB plans it with no range-join
operator. Controls: the same shapes with an equality between the sources are admitted. Deterministic.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

_POLICY = """\
[database]
path = "w.duckdb"
[ledger]
path = "l.sqlite"
[tables.t]
privacy_unit = "row"
[tables.t.columns]
id = { type = "int", lower = 0, upper = 10000000 }
[tables.pub]
public = true
[analysts.a]
epsilon = 1000000
"""

#: inner FROM clauses joining t and pub with no equality between them ({eq}: where the control puts one)
_CROSS = {
    "comma": "t, pub{w}",
    "cross": "t CROSS JOIN pub{w}",
    "on_true": "t JOIN pub ON TRUE{a}",
    "left_on_true": "t LEFT JOIN pub ON TRUE{a}",
    "public_filter": "t JOIN pub ON pub.k > 5{a}",
    "bracketed": "(t CROSS JOIN pub){w}",
    "beside": "t JOIN pub AS p0 ON t.id = p0.k, pub{w}",
}
_EQ = "t.id = pub.k"

#: how the inner join's columns reach the outer scope: (template with {inner} the FROM, {cols} the columns)
_CARRY = {
    "derived": "FROM (SELECT {cols} FROM {inner}) s",
    "cte": "FROM s",
    "two_levels": "FROM (SELECT * FROM (SELECT {cols} FROM {inner}) s0) s",
}
_COLS = {
    "bare": ("t.id AS a, pub.k AS b, pub.k2 AS c", "s.a", "s.b", "s.c"),
    "computed": ("t.id + 1 AS a, pub.k * 2 AS b, pub.k2 * 2 AS c", "s.a", "s.b", "s.c"),
    "cast": ("CAST(t.id AS DOUBLE) AS a, CAST(pub.k AS DOUBLE) AS b, CAST(pub.k2 AS DOUBLE) AS c", "s.a", "s.b", "s.c"),
}
_COMPARE = {
    "lt": "WHERE {a} < {b}",
    "between": "WHERE {a} BETWEEN {b} AND {c}",
    "not_gte": "WHERE NOT ({a} >= {b})",
    "arith": "WHERE {a} + 0 < {b} - 0",
}


def _query(cross: str, carry: str, cols: str, compare: str, *, control: bool = False) -> str:
    w, a = (f" WHERE {_EQ}", f" AND {_EQ}") if control else ("", "")
    if cross == "bracketed" and control:
        w = f" WHERE {_EQ}"
    inner = _CROSS[cross].format(w=w, a=a)
    if cross == "left_on_true" and control:
        inner = f"t LEFT JOIN pub ON {_EQ}"
    select, ca, cb, cc = _COLS[cols]
    outer = _CARRY[carry].format(cols=select, inner=inner)
    where = _COMPARE[compare].format(a=ca, b=cb, c=cc)
    sql = f"SELECT COUNT(*) {outer} {where}"
    if carry == "cte":
        sql = f"WITH s AS (SELECT {select} FROM {inner}) {sql}"
    return sql


#: every join × every carry, twice, the columns and the comparison cycling (every pair of them met; kept cheap)
_PAIRS = [(cross, carry) for cross in sorted(_CROSS) for carry in sorted(_CARRY) for _ in range(2)]
_CASES = [
    (cross, carry, sorted(_COLS)[i % len(_COLS)], sorted(_COMPARE)[i // len(_COLS) % len(_COMPARE)])
    for i, (cross, carry) in enumerate(_PAIRS)
]
#: a comparison computed inside the cross join (the SELECT list, a CASE) and read above
_INSIDE = [
    "SELECT COUNT(*) FROM (SELECT t.id < pub.k AS b FROM t, pub) s WHERE s.b",
    "SELECT COUNT(*) FROM (SELECT CASE WHEN t.id >= pub.k THEN 1 ELSE 0 END AS b FROM t, pub) s WHERE s.b = 1",
    "SELECT SUM(CASE WHEN s.a < s.b THEN 1 ELSE 0 END) FROM (SELECT t.id AS a, pub.k AS b FROM t, pub) s",
    "WITH s AS (SELECT t.id AS a, pub.k AS b FROM t, pub) SELECT COUNT(*) FROM s WHERE s.a < s.b",
]
_RANGE = re.compile(r"(IE Join|Piecewise Merge Join)", re.I)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any]]:
    import duckdb
    import pandas as pd

    from tests.support.warehouse import policy_with_tables
    from veil.proxy._testing import exact_session

    base = Path(tmp_path_factory.mktemp("rangelineage"))
    t = pd.DataFrame({"id": list(range(1000))})
    pub = pd.DataFrame({"k": list(range(50)), "k2": list(range(1, 51))})
    session = exact_session(policy_with_tables(base, _POLICY, {"t": t}, {"pub": pub}), "a")
    duck = duckdb.connect()
    duck.execute("CREATE TABLE t AS SELECT range AS id FROM range(1000)")
    duck.execute("CREATE TABLE pub AS SELECT range AS k, range + 1 AS k2 FROM range(50)")
    try:
        yield session, duck
    finally:
        duck.close()
        session.close()


def _admitted(session: Any, sql: str) -> bool:
    from veil.errors import Unsupported
    from veil.proxy._testing import plan_of

    spent = session.budget().spent
    try:
        plan_of(session, sql, 0.01)
    except Unsupported as exc:
        assert exc.sqlstate == "0A000"
        assert session.budget().spent == spent
        return False
    return True


@pytest.mark.parametrize(("cross", "carry", "cols", "compare"), _CASES)
def test_a_comparison_above_a_cross_join_never_runs_as_a_range_join(
    world: tuple[Any, Any], cross: str, carry: str, cols: str, compare: str
) -> None:
    session, duck = world
    sql = _query(cross, carry, cols, compare)
    if _admitted(session, sql):
        assert not _RANGE.search(duck.execute("EXPLAIN " + sql).fetchall()[0][1]), sql


@pytest.mark.parametrize("sql", _INSIDE)
def test_a_comparison_computed_inside_a_cross_join_is_refused(world: tuple[Any, Any], sql: str) -> None:
    assert not _admitted(world[0], sql)


@pytest.mark.parametrize(("cross", "carry"), list(itertools.product(sorted(set(_CROSS) - {"beside"}), sorted(_CARRY))))
def test_the_same_shapes_joined_on_an_equality_are_admitted(world: tuple[Any, Any], cross: str, carry: str) -> None:
    assert _admitted(world[0], _query(cross, carry, "bare", "lt", control=True))


def test_a_range_join_among_public_tables_alone_in_a_derived_table_is_admitted(world: tuple[Any, Any]) -> None:
    """Evaluated first, on public rows only (a materialised public source), then joined on an equality."""
    assert _admitted(
        world[0], "SELECT COUNT(*) FROM t JOIN (SELECT pub.k FROM pub JOIN pub AS p2 ON pub.k < p2.k2) q ON t.id = q.k"
    )
