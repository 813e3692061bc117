"""The resolve pass: names mean what sqlglot's scopes say, and the generated SQL cannot mean anything else.

Property-based: hypothesis nests CTEs and derived tables whose names collide with the catalog's tables
(private ``adult``, public ``regions``) at every scope — later siblings, nested WITHs, a CTE named like the
table it reads. For every query the pass accepts, (1) no CTE in the output carries a catalog table's name,
(2) a query judged public runs on a connection that holds only the public table (so it truly never needs
the private one), and (3) the rewritten SQL returns exactly what the analyst's SQL returns on DuckDB.
"""

from __future__ import annotations

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlglot import exp

from veil.errors import QueryRejected
from veil.proxy.catalog import Catalog, CatalogTable
from veil.proxy.parse import parse
from veil.proxy.resolve import CTE_PREFIX, resolve

CATALOG = Catalog(
    {
        "adult": CatalogTable("adult", {"x": "int"}, None, False),
        "regions": CatalogTable("regions", {"x": "int"}, None, True),
    }
)
NAMES = ["adult", "regions", "a", "b"]


@st.composite
def queries(draw: st.DrawFn, depth: int = 2) -> str:
    """SELECT x FROM <source> with optional WITH clauses; sources may be CTEs, derived tables or base tables."""
    ctes = []
    for _ in range(draw(st.integers(0, 2))):
        name = draw(st.sampled_from(NAMES))
        if any(name == n for n, _ in ctes):
            continue
        body = draw(queries(depth - 1)) if depth > 0 and draw(st.booleans()) else f"SELECT x FROM {draw(st.sampled_from(NAMES))}"
        ctes.append((name, body))
    if depth > 0 and draw(st.booleans()):
        source = f"({draw(queries(depth - 1))}) AS d"
    else:
        source = draw(st.sampled_from(NAMES))
    with_clause = ("WITH " + ", ".join(f"{n} AS ({b})" for n, b in ctes) + " ") if ctes else ""
    return f"{with_clause}SELECT x FROM {source}"


@pytest.fixture(scope="module")
def full() -> duckdb.DuckDBPyConnection:
    c = duckdb.connect(":memory:")
    c.execute("CREATE TABLE adult AS SELECT 1000 + range AS x FROM range(3)")  # private marker values ≥ 1000
    c.execute("CREATE TABLE regions AS SELECT range AS x FROM range(2)")
    c.execute("CREATE TABLE a AS SELECT -1 AS x")  # tables that exist in DuckDB but not in the catalog
    c.execute("CREATE TABLE b AS SELECT -2 AS x")
    yield c
    c.close()


@pytest.fixture(scope="module")
def public_only() -> duckdb.DuckDBPyConnection:
    c = duckdb.connect(":memory:")
    c.execute("CREATE TABLE regions AS SELECT range AS x FROM range(2)")
    yield c
    c.close()


@pytest.mark.slow
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sql=queries())
def test_resolution_is_unambiguous_and_faithful(
    full: duckdb.DuckDBPyConnection, public_only: duckdb.DuckDBPyConnection, sql: str
) -> None:
    try:
        r = resolve(parse(sql), CATALOG, sql=sql)
    except QueryRejected:
        return  # unknown tables (a, b) and the like: refused before anything runs
    for cte in r.tree.find_all(exp.CTE):
        assert cte.alias.startswith(CTE_PREFIX) and cte.alias not in CATALOG.tables
    generated = r.tree.sql(dialect="duckdb")
    if r.private_table is None:
        public_only.execute(generated).fetchall()  # never needs the private table
        assert all(v < 1000 for (v,) in full.execute(generated).fetchall())
    try:
        expected = sorted(full.execute(sql).fetchall())
    except duckdb.Error:
        return  # the analyst's text does not even run as written
    assert sorted(full.execute(generated).fetchall()) == expected, generated


@pytest.mark.parametrize(
    ("sql", "private_reads"),
    [
        ("WITH adult AS (SELECT * FROM adult AS a) SELECT * FROM adult", 1),
        ("WITH t AS (SELECT * FROM adult) SELECT * FROM t a, t b", 2),
        ("WITH a AS (SELECT * FROM regions), regions AS (SELECT * FROM adult) SELECT * FROM a", 0),
        ("SELECT * FROM (WITH adult AS (SELECT x FROM regions) SELECT * FROM adult) s", 0),
        ("SELECT * FROM (WITH adult AS (SELECT x FROM regions) SELECT * FROM adult) s, adult", 1),
        ("WITH r AS (SELECT * FROM regions) SELECT * FROM (WITH adult AS (SELECT * FROM r) SELECT * FROM adult) q", 0),
    ],
)
def test_private_reads_follow_every_cte_reference(sql: str, private_reads: int) -> None:
    r = resolve(parse(sql), CATALOG, sql=sql)
    assert r.private_reads == private_reads
    assert (r.private_table == "adult") == (private_reads > 0)
