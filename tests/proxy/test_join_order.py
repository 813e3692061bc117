"""The private rows are never the build side of a join in a charged statement (red team s74 F2, F4; ``join_order``).

A hash join's build side, partitioned by key, cannot spill a partition: private rows on that side that share one key
(a constant key, a few-valued one, a category most rows hold) failed with OutOfMemory after the charge. The readers run
without DuckDB's ``build_side_probe_side`` optimiser and the generated SQL lists the private source first
(``join_order.private_first``), so the private rows stay the leftmost leaf, on the probe side of every join.

The class: hypothesis makes connected join graphs of the private rows (estimated at ~1 row by ``id % 2 = 0``, so the
optimiser would have built them) and one to four public tables (5 and 300 rows), keys spread, constant and few-valued,
or none (``ON TRUE``, an OR of equalities, ``<>``: cross products and nested-loop joins, which hold their right child
too), the private source written anywhere, as comma lists, ``JOIN … ON``, ``LEFT JOIN``s among the public tables or onto
the private rows, bracketed joins, and the private source as the table, a derived table or a CTE (plain, materialised,
over a CTE, behind a derived table, over a derived table: review s24 Y2, the CTE forms failed before ``_private_ctes``);
every statement Veil generates for an admitted one is EXPLAINed
on the session's own sandboxed reader, and the private copy's scan must lie under no join's right (build) child.
Deterministic property (no false failures); most shapes are admitted. Before the fix every test here failed
(the named shapes, and a counterexample found by hypothesis). A query over private rows joining more than
``MAX_PRIVATE_JOIN_RELATIONS`` relations is refused free (DuckDB's greedy join-order solver, used past them, put the
private rows on the build side in every shape tried).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

_POLICY = """\
[database]
path = "w.duckdb"
[ledger]
path = "l.sqlite"
[tables.t]
privacy_unit = "row"
[tables.t.columns]
id = { type = "int", lower = 0, upper = 100000 }
c = { type = "category", max_length = 4 }
[tables.pa]
public = true
[tables.pb]
public = true
[analysts.a]
epsilon = 1000000
"""

_JOINS = {"HASH_JOIN", "NESTED_LOOP_JOIN", "PIECEWISE_MERGE_JOIN", "IE_JOIN", "BLOCKWISE_NL_JOIN", "CROSS_PRODUCT"}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any]]:
    import pandas as pd

    from tests.support.warehouse import policy_with_tables
    from veil.proxy._testing import exact_session

    base = Path(tmp_path_factory.mktemp("joinorder"))
    t = pd.DataFrame({"id": list(range(3000)), "c": [f"v{i % 3}" for i in range(3000)]})
    pa = pd.DataFrame({"k": list(range(5)), "k2": list(range(1, 6))})
    pb = pd.DataFrame({"k": list(range(300)), "k2": list(range(1, 301))})
    policy = policy_with_tables(base, _POLICY, {"t": t}, {"pa": pa, "pb": pb})
    session = exact_session(policy, "a")
    try:
        yield session, policy
    finally:
        session.close()


def _reads(node: dict[str, Any], source: str) -> bool:
    if node.get("name") in ("SEQ_SCAN", "TABLE_SCAN") and str(node.get("extra_info", {}).get("Table", "")).endswith(source):
        return True
    return any(_reads(k, source) for k in node.get("children", []))


def _private_ctes(node: dict[str, Any], source: str) -> set[str]:
    """The indexes of the materialised CTEs (a ``CTE`` operator: its body, then the query reading it) over the
    private copy: a ``CTE_SCAN`` of one on a build side holds the private rows too."""
    out = set()
    if node.get("name") == "CTE" and node.get("children") and _reads(node["children"][0], source):
        out.add(str(node.get("extra_info", {}).get("Table Index")))
    for k in node.get("children", []):
        out |= _private_ctes(k, source)
    return out


def _private_on_build(node: dict[str, Any], source: str, on_build: bool = False, ctes: set[str] | None = None) -> bool:
    ctes = _private_ctes(node, source) if ctes is None else ctes
    if node.get("name") in ("SEQ_SCAN", "TABLE_SCAN"):
        return on_build and str(node.get("extra_info", {}).get("Table", "")).endswith(source)
    if node.get("name") == "CTE_SCAN":
        return on_build and str(node.get("extra_info", {}).get("CTE Index")) in ctes
    join = node.get("name") in _JOINS
    return any(_private_on_build(k, source, on_build or (join and i == 1), ctes) for i, k in enumerate(node.get("children", [])))


def _check(world: tuple[Any, Any], sql: str) -> bool:
    """Whether ``sql`` was admitted; if so, assert no generated statement builds a join on the private rows."""
    from veil.errors import VeilError
    from veil.proxy._testing import generated_sql
    from veil.store import warehouse

    session, policy = world
    try:
        statements = generated_sql(session, sql, 1.0)
    except VeilError:
        return False
    cur, _ = warehouse.reader_cursor(policy)  # the readers' own configuration (a copy built since reopens it)
    for stmt in statements:
        source = next(w for w in stmt.replace("(", " ").split() if w.startswith("_veil_bounded_t_"))
        plan = json.loads(cur.execute("EXPLAIN (FORMAT JSON) " + stmt).fetchall()[0][1])
        root = plan[0] if isinstance(plan, list) else plan
        assert not _private_on_build(root, source), (sql, stmt)
    cur.close()
    return True


_KEYS = {
    "spread": "{a}.{ca} = {b}.k",
    "constant": "{a}.{ca} * 0 = {b}.k * 0",
    "few": "{a}.{ca} % 3 = {b}.k % 3",
    # no equality: a cross product, a nested-loop or a blockwise nested-loop join (each holds its right child)
    "none": "TRUE",
    "or": "({a}.{ca} = {b}.k OR {a}.{ca} = {b}.k2)",
    "not_equal": "{a}.{ca} <> {b}.k",
}


_BODY = "SELECT id, c FROM t WHERE id % 2 = 0"
#: the private source as written: the table, a derived table, a CTE (review s24 Y2: a CTE reference shows no private
#: table's name), a materialised one, a CTE over a CTE, a CTE behind a derived table, a derived table in a CTE
_WRAPS = {
    "table": ("", "t AS x"),
    "derived": ("", f"({_BODY}) AS x"),
    "cte": (f"WITH w AS ({_BODY}) ", "w AS x"),
    "cte_materialized": (f"WITH w AS MATERIALIZED ({_BODY}) ", "w AS x"),
    "cte_of_cte": (f"WITH w0 AS ({_BODY}), w AS (SELECT * FROM w0) ", "w AS x"),
    "derived_of_cte": (f"WITH w AS ({_BODY}) ", "(SELECT * FROM w) AS x"),
    "cte_of_derived": (f"WITH w AS (SELECT * FROM ({_BODY}) AS d) ", "w AS x"),
}


@st.composite
def _shapes(draw: st.DrawFn) -> str:
    n = draw(st.integers(1, 4))
    nodes = ["x"] + [f"p{i}" for i in range(n)]
    tables = {f"p{i}": draw(st.sampled_from(["pa", "pb"])) for i in range(n)}
    parent = {nodes[j]: nodes[draw(st.integers(0, j - 1))] for j in range(1, n + 1)}
    key = {b: draw(st.sampled_from(sorted(_KEYS))) for b in parent}
    edge = {b: _KEYS[key[b]].format(a=a, ca="id" if a == "x" else "k2", b=b) for b, a in parent.items()}
    order = draw(st.permutations(nodes))
    wrap = draw(st.sampled_from(sorted(_WRAPS)))
    with_, private = _WRAPS[wrap]
    where = ["x.id % 2 = 0"] if wrap == "table" else []
    source = {"x": private, **{p: f"{tables[p]} AS {p}" for p in tables}}
    if draw(st.booleans()):  # a comma list
        body = ", ".join(source[o] for o in order)
        where += list(edge.values())
    else:
        seen: set[str] = set()
        parts = []
        for i, o in enumerate(order):
            seen.add(o)
            on = [edge[b] for b in parent if b in seen and parent[b] in seen and (b == o or parent[b] == o)]
            if i == 0:
                parts.append(source[o])
                continue
            # a LEFT JOIN only where it keeps the private rows on its left (the policy's rule)
            left = "LEFT " if on and o != "x" and "x" in seen and draw(st.booleans()) else ""
            parts.append(f"{left}JOIN {source[o]} ON {' AND '.join(on) or 'TRUE'}")
        body = " ".join(parts)
        if draw(st.booleans()) and len(parts) > 2:  # bracket the first two sources
            head, rest = " ".join(parts[:2]), " ".join(parts[2:])
            body = f"({head}) {rest}"
    sql = f"SELECT x.id FROM {body}" + (f" WHERE {' AND '.join(where)}" if where else "")
    if draw(st.booleans()):
        return f"{with_}SELECT COUNT(*) FROM ({sql}) AS q"
    return with_ + sql.replace("SELECT x.id", "SELECT COUNT(*)", 1)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sql=_shapes())
def test_the_private_rows_are_never_a_join_build_side(world: tuple[Any, Any], sql: str) -> None:
    _check(world, sql)


#: The witnesses' shapes (red team s74 F2/F4, the private side estimated small) and the private source written last.
_NAMED = [
    "SELECT COUNT(*) FROM (SELECT id, c FROM t WHERE id % 2 = 0) x JOIN pb ON x.id * 0 = pb.k * 0",
    "SELECT COUNT(*) FROM pb JOIN (SELECT id, c FROM t WHERE id % 2 = 0) x ON x.id * 0 = pb.k * 0",
    "SELECT COUNT(*) FROM pb, pa, (SELECT id, c FROM t WHERE id % 2 = 0) x WHERE x.id = pb.k AND pb.k2 = pa.k",
    "SELECT COUNT(*) FROM (SELECT id, c, 'xx' AS z FROM t WHERE id % 2 = 0) x JOIN pb ON x.id = pb.k "
    "WHERE x.c || x.z <> CAST(pb.k AS VARCHAR)",
    "SELECT COUNT(*) FROM pb LEFT JOIN pa ON pb.k = pa.k JOIN t ON t.id = pb.k WHERE t.id % 2 = 0",
    "SELECT COUNT(*) FROM pb JOIN (pa JOIN t ON t.id = pa.k) ON pb.k = pa.k WHERE t.id % 2 = 0",
    # joins with no equality (joincap24's open witnesses: DuckDB held the side it estimated smaller)
    "SELECT COUNT(*) FROM pb CROSS JOIN t WHERE t.c = 'v1'",
    "SELECT COUNT(*) FROM pb, t WHERE t.id % 2 = 0",
    "SELECT COUNT(*) FROM pb JOIN t ON t.id = pb.k OR t.id = pb.k2 WHERE t.c = 'v1'",
    "SELECT COUNT(*) FROM pb JOIN t ON t.id <> pb.k WHERE t.c = 'v1'",
    "SELECT COUNT(*) FROM pa JOIN t ON TRUE JOIN pb ON TRUE WHERE t.c = 'v1'",
]


@pytest.mark.parametrize("sql", _NAMED)
def test_named_shapes_keep_the_private_rows_on_the_probe_side(world: tuple[Any, Any], sql: str) -> None:
    assert _check(world, sql), "the named shapes are admitted"


@pytest.fixture(scope="module")
def plain() -> Iterator[Any]:
    """The world's tables in a plain DuckDB: the analyst's SQL as written, for the answers the reordering must keep."""
    import duckdb

    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT range AS id, 'v' || (range % 3) AS c FROM range(3000)")
    con.execute("CREATE TABLE pa AS SELECT range AS k, range + 1 AS k2 FROM range(5)")
    con.execute("CREATE TABLE pb AS SELECT range AS k, range + 1 AS k2 FROM range(300)")
    try:
        yield con
    finally:
        con.close()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sql=_shapes())
def test_the_reordered_statements_answer_as_the_query_written(world: tuple[Any, Any], plain: Any, sql: str) -> None:
    """Exact answers (noise off, every row its own unit, so the bounded copy holds every row) equal DuckDB's answer to
    the query as written: moving the private source first joins the same rows."""
    from veil.errors import VeilError

    try:
        answer = world[0].execute(sql, epsilon=1.0).rows
    except VeilError:
        return
    assert [tuple(r) for r in answer] == [tuple(r) for r in plain.execute(sql).fetchall()], sql


def test_a_query_over_private_rows_joining_many_tables_is_refused_free(world: tuple[Any, Any]) -> None:
    from veil.errors import QueryTooComplex
    from veil.proxy.join_order import MAX_PRIVATE_JOIN_RELATIONS

    session, _ = world
    joins = " ".join(f"JOIN pa AS p{i} ON p{i}.k = t.id" for i in range(MAX_PRIVATE_JOIN_RELATIONS))
    spent = session.budget().spent
    with pytest.raises(QueryTooComplex):
        session.execute(f"SELECT COUNT(*) FROM t {joins}", epsilon=0.01)
    assert session.budget().spent == spent
    fewer = " ".join(f"JOIN pa AS p{i} ON p{i}.k = t.id" for i in range(MAX_PRIVATE_JOIN_RELATIONS - 1))
    assert _check(world, f"SELECT COUNT(*) FROM t {fewer}")


#: review s24 Y1: a condition side reading two relations (a hyperedge of DuckDB's join graph, joined first: the private
#: rows crossed with a public table became a build side) — the mixed side, the other side, the comparison
_MIXED = ["x.id + pa.k", "x.id * 0 + pa.k * 0", "LEAST(x.id * 0, pa.k)", "COALESCE(x.id, pa.k)", "pa.k + pb.k2"]
_OTHER = {"x.id + pa.k": "pb.k", "x.id * 0 + pa.k * 0": "pb.k * 0", "pa.k + pb.k2": "x.id"}
_OPS = ["{a} = {b}", "{b} = {a}", "{a} >= {b}", "{a} <> {b}", "{a} IN ({b}, 7)", "{b} BETWEEN {a} AND 9"]


@st.composite
def _hyperedges(draw: st.DrawFn) -> str:
    mixed = draw(st.sampled_from(_MIXED))
    cond = draw(st.sampled_from(_OPS)).format(a=mixed, b=_OTHER.get(mixed, "pb.k"))
    wrap = draw(st.sampled_from(["table", "derived", "cte", "carried"]))
    if wrap == "carried":  # the mixed side computed in a derived table over the private rows, compared outside it
        inner = mixed.replace("pb.k2", "pb2.k2")
        cond = cond.replace(mixed, "x.m").replace("x.id", "x.id0")
        cond = cond.replace("x.m", "x.m", 1)
        body = (
            f"(SELECT x.id AS id0, {inner} AS m FROM t AS x, pa, pb AS pb2 WHERE x.c = 'v1') AS x"
            if "pb2" in inner
            else f"(SELECT x.id AS id0, {inner} AS m FROM t AS x, pa WHERE x.c = 'v1') AS x"
        )
        return f"SELECT COUNT(*) FROM {body}, pb WHERE {cond}"
    with_, private = {"table": ("", "t AS x"), "derived": ("", f"({_BODY}) AS x"), "cte": (f"WITH w AS ({_BODY}) ", "w AS x")}[
        wrap
    ]
    if draw(st.booleans()):
        return f"{with_}SELECT COUNT(*) FROM {private}, pa, pb WHERE {cond}"
    return f"{with_}SELECT COUNT(*) FROM {private} JOIN pa ON TRUE JOIN pb ON {cond}"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sql=_hyperedges())
def test_a_condition_side_reading_two_relations_is_refused_free(world: tuple[Any, Any], sql: str) -> None:
    """Review s24 Y1's class: every such condition over private rows is refused free (0A000, with a hint), through
    derived tables, CTEs and carried columns; before the fix each was admitted (and ``x.id + pa.k = pb.k`` planned the
    private rows crossed with ``pa`` as a hash join's build side). Deterministic (no false failures)."""
    from veil.errors import Unsupported

    session, _ = world
    spent = session.budget().spent
    with pytest.raises(Unsupported) as caught:
        session.execute(sql, epsilon=1.0)
    # (a range beside it may be refused first, by the range-join rule: as free, as typed)
    assert caught.value.sqlstate == "0A000" and caught.value.hint, sql
    assert session.budget().spent == spent, sql


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT COUNT(*) FROM t JOIN pb ON t.id + 1 = pb.k",  # one relation a side
        "SELECT COUNT(*) FROM t, pb WHERE t.id - pb.k >= 0",  # a filter: one side reads relations
        "SELECT COUNT(*) FROM t, pb WHERE CAST(t.id AS VARCHAR) || CAST(pb.k AS VARCHAR) LIKE '1%'",
    ],
)
def test_single_relation_sides_and_filters_stay_admitted(world: tuple[Any, Any], sql: str) -> None:
    assert _check(world, sql), sql


def test_two_public_tables_combined_in_a_public_derived_table_stay_admitted(world: tuple[Any, Any]) -> None:
    """The refusal's hint: a derived table over public tables alone is one relation (evaluated first, on its own)."""
    sql = "SELECT COUNT(*) FROM t, (SELECT pa.k + pb.k AS s FROM pa, pb) q WHERE t.id = q.s"
    assert world[0].execute(sql, epsilon=1.0).rows
