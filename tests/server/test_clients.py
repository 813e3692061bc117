"""The client matrix: each real client library against a real ``veil serve`` on loopback.

SQLAlchemy 2 (psycopg 3, psycopg2 and pg8000 dialects) with reflection and ``pandas.read_sql``,
asyncpg (parameters, prepared statements, type introspection, pools with their reset query),
pg8000's native API and psql (``\\gdesc``, ``FETCH_COUNT`` cursors, ``\\dt``, ``\\d``). pgjdbc is
in test_catalog.py, psycopg throughout. Failed client statements are never charged.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from collections.abc import Iterator

import psycopg
import pytest

from tests.support.server import PASSWORD, add_public_table, build_policy, dsn, running_server

sa = pytest.importorskip("sqlalchemy")
pd = pytest.importorskip("pandas")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[int]:
    policy = build_policy(tmp_path_factory.mktemp("clients"), request.getfixturevalue("shared_data"), rows=300)
    add_public_table(policy)
    with running_server(policy) as st:
        yield st.port  # type: ignore[attr-defined]


def _spent(port: int) -> float:
    with psycopg.connect(dsn(port), autocommit=True) as conn:
        return float(conn.execute("SELECT spent FROM veil.budget").fetchone()[0])


@pytest.mark.parametrize("driver", ["psycopg", "psycopg2", "pg8000"])
def test_sqlalchemy_reflection_and_pandas(served: int, driver: str) -> None:
    pytest.importorskip(driver)
    args = {} if driver == "pg8000" else {"sslmode": "disable"}
    engine = sa.create_engine(f"postgresql+{driver}://alice:{PASSWORD}@127.0.0.1:{served}/veil", connect_args=args)
    try:
        inspector = sa.inspect(engine)
        assert sorted(inspector.get_table_names()) == ["adult", "regions"]
        columns = {c["name"]: str(c["type"]) for c in inspector.get_columns("adult")}
        assert columns == {
            "age": "BIGINT",
            "education_num": "BIGINT",
            "hours_per_week": "BIGINT",
            "sex": "TEXT",
            "income": "TEXT",
            "workclass": "TEXT",
        }
        frame = pd.read_sql("SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex", engine)
        assert sorted(frame["sex"]) == ["Female", "Male"] and frame["n"].dtype.kind == "i"
        frame = pd.read_sql(sa.text("SELECT COUNT(*) AS n FROM regions WHERE population > :p"), engine, params={"p": 100})
        assert frame["n"].tolist() == [2]  # public table: exact
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT pg_catalog.version()")).scalar().startswith("PostgreSQL 16")
            assert conn.execute(sa.text("SHOW transaction isolation level")).scalar() == "read committed"
    finally:
        engine.dispose()


def test_asyncpg_parameters_prepared_statements_and_pools(served: int) -> None:
    asyncpg = pytest.importorskip("asyncpg")
    spent_before = _spent(served)

    async def main() -> None:
        kwargs = {"host": "127.0.0.1", "port": served, "user": "alice", "password": PASSWORD, "database": "veil", "ssl": False}
        conn = await asyncpg.connect(**kwargs)
        try:
            assert (await conn.fetchval("SELECT COUNT(*) FROM regions WHERE population > $1", 100)) == 2
            assert (await conn.fetchval("SELECT COUNT(*) FROM regions WHERE region = $1", "north")) == 1
            assert (await conn.fetchval("SELECT SUM(population) FROM regions WHERE population < $1", 200.5)) == 195
            statement = await conn.prepare("SELECT region FROM regions WHERE population BETWEEN $1 AND $2 ORDER BY region")
            assert [r["region"] for r in await statement.fetch(50, 150)] == ["east", "north"]
            assert [r["region"] for r in await statement.fetch(300, 400)] == ["south"]
            rows = await conn.fetch("SELECT sex, COUNT(*) AS n FROM adult WHERE age > $1 GROUP BY sex", 30)
            assert {r["sex"] for r in rows} <= {"Female", "Male"}
            types = await conn.fetch(asyncpg.introspection.INTRO_LOOKUP_TYPES_13, [20, 25])
            assert {r["name"] for r in types} >= {"int8", "text"}
        finally:
            await conn.close()
        pool = await asyncpg.create_pool(**kwargs, min_size=1, max_size=2)
        try:
            for _ in range(3):  # each release runs the pool's reset query
                async with pool.acquire() as c:
                    assert (await c.fetchval("SELECT COUNT(*) FROM regions")) == 3
                    with pytest.raises(asyncpg.PostgresError) as info:
                        await c.fetch("SELECT age FROM adult")  # not an aggregate: refused
                    assert info.value.sqlstate == "0A000"
        finally:
            await pool.close()

    asyncio.run(main())
    spent_after = _spent(served)
    assert spent_after - spent_before == pytest.approx(0.5)  # one private query charged once; failures nothing


def test_pg8000_native(served: int) -> None:
    native = pytest.importorskip("pg8000.native")
    conn = native.Connection("alice", host="127.0.0.1", port=served, password=PASSWORD, database="veil")
    try:
        assert conn.run("SELECT COUNT(*) FROM regions WHERE population > :p", p=100) == [[2]]
        assert conn.run("SELECT region FROM regions WHERE region = :r", r="south") == [["south"]]
    finally:
        conn.close()


def _psql(port: int, script: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("psql")
    if exe is None:
        pytest.skip("psql is not installed")
    args = [exe, "-X", "-v", "ON_ERROR_STOP=1", f"host=127.0.0.1 port={port} user=alice dbname=veil sslmode=disable"]
    env = {"PGPASSWORD": PASSWORD, "PATH": "/usr/bin:/bin", "PGCONNECT_TIMEOUT": "10"}
    return subprocess.run(args, input=script, capture_output=True, text=True, timeout=60, env=env)


def test_psql_gdesc_fetch_count_and_listing(served: int) -> None:
    spent_before = _spent(served)
    out = _psql(
        served,
        "SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex \\gdesc\n"
        "\\set FETCH_COUNT 1\n"
        "SELECT region, population FROM regions ORDER BY region;\n"
        "SELECT sex, COUNT(*) AS n FROM adult WHERE age > 50 GROUP BY sex;\n"
        "\\unset FETCH_COUNT\n"
        "\\dt\n"
        "\\d regions\n",
    )
    assert out.returncode == 0, out.stderr
    text = out.stdout
    lines = [[cell.strip() for cell in line.split("|")] for line in text.splitlines() if "|" in line]
    assert ["sex", "text"] in lines and ["n", "bigint"] in lines  # \gdesc: described, never run
    assert ["east", "75"] in lines and ["south", "340"] in lines  # fetched through a cursor, one row at a time
    assert {"public", "adult", "table"} <= {c for line in lines for c in line}
    assert any(line[:3] == ["public", "regions", "table"] for line in lines)  # \dt lists the public table
    assert any(line[:2] == ["population", "bigint"] for line in lines)  # \d regions
    assert _spent(served) - spent_before == pytest.approx(0.5)  # only the cursor's private query


def test_server_side_cursor_with_psycopg(served: int) -> None:
    with psycopg.connect(dsn(served)) as conn:
        with conn.cursor(name="veil_cursor") as cur:
            cur.execute("SELECT region, population FROM regions ORDER BY region")
            assert cur.fetchmany(2) == [("east", 75), ("north", 120)]
            assert cur.fetchall() == [("south", 340)]


def test_failed_statements_are_never_charged(served: int) -> None:
    spent = _spent(served)
    bad = [
        "SELECT age FROM adult",
        "SELECT COUNT(*) FROM adlt",
        "SELECT COUNT(*) FROM adult WHERE nope = 1",
        "SELEC 1",
        "SELECT COUNT(*) FROM adult, pg_class",
    ]
    with psycopg.connect(dsn(served), autocommit=True) as conn:
        for sql in bad:
            with pytest.raises(psycopg.Error):
                conn.execute(sql)
    assert _spent(served) == spent
