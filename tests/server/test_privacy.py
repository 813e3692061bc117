"""Privacy of the wire server's own answers: the catalog evaluator never sees a data table, every
connection plans with the policy file as it is now, and EXPLAIN of a public query works."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.support.server import BOB_PASSWORD, add_public_table, build_policy, dsn, running_server

CATALOG_TABLES = (
    "pg_catalog.pg_class",
    "pg_class",
    "pg_catalog.pg_attribute",
    "pg_type",
    "information_schema.tables",
    "information_schema.columns",
    "veil.budget",
)
#: Every way a query can put a data table next to a catalog table.
MIXES = (
    "SELECT COUNT(*) FROM {data}, {cat}",
    "SELECT COUNT(*) FROM {data} JOIN {cat} ON TRUE",
    "SELECT COUNT(*) FROM {cat} CROSS JOIN {data}",
    "SELECT (SELECT COUNT(*) FROM {data}) FROM {cat}",
    "SELECT COUNT(*) FROM {cat} WHERE EXISTS (SELECT 1 FROM {data})",
    "SELECT COUNT(*) FROM {cat} WHERE 1 IN (SELECT COUNT(*) FROM {data})",
    "SELECT COUNT(*) FROM (SELECT * FROM {data}) AS d, {cat}",
    "WITH d AS (SELECT * FROM {data}) SELECT COUNT(*) FROM d, {cat}",
    "SELECT COUNT(*) FROM {cat} UNION ALL SELECT COUNT(*) FROM {data}",
    "WITH {data} AS (SELECT 1 AS x) SELECT COUNT(*) FROM {data}, {cat}",  # a CTE named like a data table
    "SELECT COUNT(*) FROM public.{data}, {cat}",
    'SELECT COUNT(*) FROM "{data}", {cat}',
)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[tuple[Path, int]]:
    policy = build_policy(tmp_path_factory.mktemp("privacy"), request.getfixturevalue("shared_data"), rows=300)
    add_public_table(policy)
    with running_server(policy) as st:
        yield policy, st.port  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def conn(served: tuple[Path, int]) -> Iterator[psycopg.Connection]:
    with psycopg.connect(dsn(served[1]), autocommit=True) as c:
        yield c


def _spent(conn: psycopg.Connection) -> float:
    return float(conn.execute("SELECT spent FROM veil.budget").fetchone()[0])


@pytest.mark.parametrize("data", ["adult", "regions"])
@pytest.mark.parametrize("cat", CATALOG_TABLES)
@pytest.mark.parametrize("mix", MIXES)
def test_catalog_combined_with_data_is_refused(conn: psycopg.Connection, mix: str, cat: str, data: str) -> None:
    spent = _spent(conn)
    with pytest.raises(psycopg.Error) as info:
        conn.execute(mix.format(data=data, cat=cat)).fetchall()
    assert info.value.sqlstate == "0A000", (info.value.sqlstate, str(info.value))
    assert "catalog tables cannot be combined" in str(info.value)
    assert _spent(conn) == spent  # refused: costs nothing


def test_catalog_alone_and_data_alone_still_work(conn: psycopg.Connection) -> None:
    assert conn.execute("SELECT relname FROM pg_catalog.pg_class WHERE relname = 'adult'").fetchall() == [("adult",)]
    assert ("regions",) in conn.execute("SELECT table_name FROM information_schema.tables").fetchall()
    assert conn.execute("WITH t AS (SELECT relname FROM pg_class) SELECT COUNT(*) FROM t").fetchone()[0] >= 2
    assert conn.execute("SELECT COUNT(*) FROM regions").fetchone() == (3,)


def test_explain_of_a_public_query(conn: psycopg.Connection) -> None:
    spent = _spent(conn)
    cur = conn.execute("EXPLAIN SELECT region, SUM(population) FROM regions GROUP BY region")
    names = [d.name for d in cur.description]
    rows = cur.fetchall()
    assert len(rows) == 1
    row = dict(zip(names, rows[0], strict=True))
    assert row["epsilon"] == 0 and row["mechanism"] == "none" and "public" in row["note"]
    assert _spent(conn) == spent
    # and a private query's EXPLAIN keeps its columns
    cur = conn.execute("EXPLAIN SELECT COUNT(*) FROM adult")
    assert [d.name for d in cur.description] == names
    assert cur.fetchone()[names.index("epsilon")] > 0


def _rewrite(policy: Path, old: str, new: str) -> None:
    text = policy.read_text(encoding="utf-8")
    assert old in text
    policy.write_text(text.replace(old, new), encoding="utf-8")


def test_every_connection_uses_the_policy_as_it_is_now(tmp_path: Path, shared_data: Path) -> None:
    policy = build_policy(tmp_path, shared_data, rows=200)
    with running_server(policy) as st:
        port = st.port  # type: ignore[attr-defined]
        with psycopg.connect(dsn(port), autocommit=True) as c:
            sensitivity = c.execute("EXPLAIN SELECT SUM(age) FROM adult").fetchone()[3]
            assert sensitivity == 90
        with psycopg.connect(dsn(port, user="bob", password=BOB_PASSWORD), autocommit=True):
            pass
        # the curator narrows age, drops a column and removes bob, while the server runs
        _rewrite(policy, 'age = { type = "int", lower = 17, upper = 90 }', 'age = { type = "int", lower = 17, upper = 50 }')
        _rewrite(policy, 'workclass = { type = "category" }\n', "")
        _rewrite(policy, "[analysts.bob]\nepsilon = 1.0\n", "")
        with psycopg.connect(dsn(port), autocommit=True) as c:
            assert c.execute("EXPLAIN SELECT SUM(age) FROM adult").fetchone()[3] == 50
            columns = {r[0] for r in c.execute("SELECT column_name FROM information_schema.columns").fetchall()}
            assert "workclass" not in columns and "age" in columns
            with pytest.raises(psycopg.Error) as info:
                c.execute("SELECT COUNT(*) FROM adult WHERE workclass = 'Private'")
            assert info.value.sqlstate == "42703"
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            psycopg.connect(dsn(port, user="bob", password=BOB_PASSWORD))
