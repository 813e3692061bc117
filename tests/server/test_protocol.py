"""``veil serve`` with real clients: psql (simple protocol, \\dt, \\d), psycopg 3 (extended
protocol, server-side parameters, prepared statements, binary results), psycopg2; session
settings, EXPLAIN, the budget table, SQLSTATEs, and charging once per executed portal."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import psycopg2
import pytest

from tests.support.server import (
    build_policy,
    dsn,
    psql,
    query_session_factory,
    running_server,
)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[tuple[Path, int]]:
    shared = request.getfixturevalue("shared_data")
    policy = build_policy(tmp_path_factory.mktemp("serve"), shared)
    with running_server(policy, query_session_factory=query_session_factory()) as st:
        yield policy, st.port  # type: ignore[attr-defined]


def _wait(pg: psycopg.pq.abc.PGconn) -> psycopg.pq.abc.PGresult:
    """Collect a libpq result without blocking (the server runs in this process; libpq's
    blocking calls would hold the GIL it needs)."""
    import time

    while pg.flush():
        time.sleep(0.005)
    while True:
        pg.consume_input()
        if not pg.is_busy():
            break
        time.sleep(0.005)
    result = pg.get_result()
    while pg.get_result() is not None:
        pass
    return result


def _spent(cur: psycopg.Cursor) -> float:
    cur.execute("SELECT spent FROM veil.budget")
    return float(cur.fetchone()[0])


def test_psql_simple_protocol_query_budget_and_catalog(served: tuple[Path, int]) -> None:
    _, port = served
    out = psql(
        port,
        "SELECT sex, COUNT(*) FROM adult WHERE age > 20 GROUP BY sex",
        "SHOW veil.budget",
        "SELECT * FROM veil.budget",
        r"\dt",
        r"\d adult",
        r"\d+ adult",
        r"\l",
    )
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "Female" in text and "Male" in text and "(2 rows)" in text
    assert "remaining" in text and "alice" in text
    assert "public | adult | table" in text  # \dt
    for column, pgtype in (("age", "bigint"), ("sex", "text"), ("hours_per_week", "bigint")):
        assert any(line.split("|")[0].strip() == column and pgtype in line for line in text.splitlines()), text
    assert "fnlwgt" not in text  # undeclared columns are not in the catalog
    assert "int in [17, 90]" in text  # \d+: the declared bounds are the column comments
    assert " veil " in text  # \l


def test_psql_errors_carry_sqlstate_and_connection_survives(served: tuple[Path, int]) -> None:
    _, port = served
    out = psql(
        port,
        r"\set VERBOSITY verbose",
        "SELECT COUNT(*) FROM adlt",
        "SELECT COUNT(*) FROM adult WHERE agee > 3",
        "SELECT COUNT(* FROM adult",
        "INSERT INTO adult (age) VALUES (1)",
        "SELECT COUNT(*) FROM read_csv('/etc/passwd')",
        "SELECT * FROM adult",
        "SET veil.epsilom = 1",
        "SELECT COUNT(*) FROM adult WHERE age > 21",
    )
    err = out.stderr
    for code in ("42P01", "42703", "42601", "42501", "0A000", "42704"):
        assert f"ERROR:  {code}" in err, err
    assert "Did you mean 'adult'?" in err
    assert "veil.epsilon" in err
    assert "(1 row)" in out.stdout  # the last query still ran on the same connection


def test_psycopg3_parameters_prepared_binary_and_settings(served: tuple[Path, int]) -> None:
    _, port = served
    with psycopg.connect(dsn(port), autocommit=True) as conn:
        cur = conn.cursor()
        cur.execute("SET veil.epsilon = 0.25")
        cur.execute("SHOW veil.epsilon")
        assert float(cur.fetchone()[0]) == 0.25
        before = _spent(cur)
        cur.execute("SELECT sex, COUNT(*) FROM adult WHERE age > %s AND income = %s GROUP BY sex", (30, ">50K"))
        rows = cur.fetchall()
        assert [r[0] for r in rows] == ["Female", "Male"]
        assert isinstance(rows[0][1], int)
        assert cur.description[1].type_code == 20  # int8
        # a prepared statement reused with new parameters: each execution charged once
        for bound in (31, 32):
            cur.execute("SELECT COUNT(*) FROM adult WHERE age > %s", (bound,), prepare=True)
            assert isinstance(cur.fetchone()[0], int)
        bcur = conn.cursor(binary=True)
        bcur.execute("SELECT AVG(hours_per_week) FROM adult WHERE age > %s", (33,))
        assert isinstance(bcur.fetchone()[0], float)
        assert _spent(cur) == pytest.approx(before + 4 * 0.25)
        cur.execute("SET veil.show_ci = on")
        cur.execute("SELECT sex, COUNT(*) AS n FROM adult WHERE age > %s GROUP BY sex", (34,))
        names = [d.name for d in cur.description]
        assert names == ["sex", "n", "n_ci95"]
        assert all(r[2] > 0 for r in cur.fetchall())
        cur.execute("RESET veil.show_ci")
        cur.execute("SELECT COUNT(*) AS n FROM adult WHERE age > %s", (35,))
        assert [d.name for d in cur.description] == ["n"]


def test_describe_and_explain_never_charge(served: tuple[Path, int]) -> None:
    _, port = served
    with psycopg.connect(dsn(port), autocommit=True) as conn:
        cur = conn.cursor()
        before = _spent(cur)
        pg = conn.pgconn
        pg.send_prepare(b"q1", b"SELECT sex, COUNT(*) AS n FROM adult WHERE age > $1 GROUP BY sex")
        res = _wait(pg)
        assert res.status == psycopg.pq.ExecStatus.COMMAND_OK, res.error_message
        pg.send_describe_prepared(b"q1")
        desc = _wait(pg)
        assert desc.status == psycopg.pq.ExecStatus.COMMAND_OK, desc.error_message
        assert [desc.fname(i) for i in range(desc.nfields)] == [b"sex", b"n"]
        assert [desc.ftype(i) for i in range(desc.nfields)] == [25, 20]
        cur.execute("EXPLAIN SELECT sex, AVG(age) FROM adult GROUP BY sex")
        assert cur.fetchall()
        assert _spent(cur) == before
        pg.send_query_prepared(b"q1", [b"40"])
        res = _wait(pg)
        assert res.status == psycopg.pq.ExecStatus.TUPLES_OK, res.error_message
        assert res.ntuples == 2
        assert _spent(cur) == pytest.approx(before + 0.5)


def test_transactions_and_session_statements_need_no_engine(served: tuple[Path, int]) -> None:
    _, port = served
    with psycopg.connect(dsn(port)) as conn:  # psycopg 3 opens a transaction implicitly
        cur = conn.cursor()
        cur.execute("SELECT COUNT(*) FROM adult WHERE age > %s", (41,))
        assert cur.fetchone()[0] is not None
        conn.commit()
        with pytest.raises(psycopg.errors.UndefinedTable) as info:
            cur.execute("SELECT COUNT(*) FROM nope")
        assert info.value.sqlstate == "42P01"
        with pytest.raises(psycopg.errors.InFailedSqlTransaction):
            cur.execute("SELECT COUNT(*) FROM adult")
        conn.rollback()
        for stmt in (
            "SET application_name = 'x'",
            "SET TIME ZONE 'UTC'",
            "RESET ALL",
            "DISCARD ALL",
            "SHOW transaction_isolation",
            "BEGIN",
            "SAVEPOINT a",
            "RELEASE a",
            "COMMIT",
        ):
            cur.execute(stmt)
        conn.rollback()


def test_psycopg2_client_side_parameters(served: tuple[Path, int]) -> None:
    _, port = served
    conn = psycopg2.connect(dsn(port))
    try:
        cur = conn.cursor()
        cur.execute("SELECT sex, COUNT(*) FROM adult WHERE sex = %s AND age > %s GROUP BY sex", ("Male", 42))
        rows = cur.fetchall()
        assert [r[0] for r in rows] == ["Female", "Male"] or [r[0] for r in rows] == ["Male"]
        with pytest.raises(psycopg2.Error) as info:
            cur.execute("SELECT SUM(fnlwgt) FROM adult")
        assert info.value.pgcode in ("42703", "0A000")
        conn.rollback()
        cur.execute("SELECT * FROM veil.budget")
        assert cur.fetchone()[0] == "alice"
        conn.commit()
    finally:
        conn.close()


def test_budget_exhausted_sqlstate(served: tuple[Path, int]) -> None:
    _, port = served
    from tests.support.server import BOB_PASSWORD

    with psycopg.connect(dsn(port, user="bob", password=BOB_PASSWORD), autocommit=True) as conn:
        cur = conn.cursor()
        cur.execute("SET veil.epsilon = 0.6")
        cur.execute("SELECT COUNT(*) FROM adult WHERE age > %s", (50,))
        with pytest.raises(psycopg.Error) as info:
            cur.execute("SELECT COUNT(*) FROM adult WHERE age > %s", (51,))
        assert info.value.sqlstate == "VB001"
        cur.execute("SELECT spent, remaining FROM veil.budget")
        spent, remaining = cur.fetchone()
        assert spent == pytest.approx(0.6) and remaining == pytest.approx(0.4)


def test_catalog_answers_come_from_the_policy(served: tuple[Path, int]) -> None:
    _, port = served
    with psycopg.connect(dsn(port), autocommit=True) as conn:
        cur = conn.cursor()
        cur.execute("SELECT table_name FROM information_schema.tables")
        assert [r[0] for r in cur.fetchall()] == ["adult"]
        cur.execute(
            "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = 'adult' ORDER BY ordinal_position"
        )
        cols = dict(cur.fetchall())
        assert cols["age"] == "bigint" and cols["sex"] == "text" and "fnlwgt" not in cols
        cur.execute("SELECT version()")
        assert "Veil" in cur.fetchone()[0]
        cur.execute("SELECT current_user")
        assert cur.fetchone()[0] == "alice"


def test_portal_row_limits_run_the_query_once(served: tuple[Path, int]) -> None:
    """Execute with a row limit: PortalSuspended, then the rest; one execution, one charge."""
    from tests.support.server import (
        PASSWORD,
        SYNC,
        bind_msg,
        describe_portal_msg,
        execute_msg,
        parse_msg,
        raw_exchange,
        raw_login,
    )

    _, port = served
    with psycopg.connect(dsn(port), autocommit=True) as conn:
        before = _spent(conn.cursor())
    sock, err = raw_login(port, "alice", PASSWORD)
    assert sock is not None, err
    try:
        sql = "SELECT sex, COUNT(*) AS n FROM adult WHERE age > 52 GROUP BY sex"
        replies = raw_exchange(
            sock, parse_msg(sql), bind_msg(), describe_portal_msg(), execute_msg(max_rows=1), execute_msg(max_rows=1), SYNC
        )
        tags = [t for t, _ in replies]
        assert tags == [b"1", b"2", b"T", b"D", b"s", b"D", b"C", b"Z"], tags
        assert replies[6][1].rstrip(b"\x00") == b"SELECT 2"
    finally:
        sock.close()
    with psycopg.connect(dsn(port), autocommit=True) as conn:
        assert _spent(conn.cursor()) == pytest.approx(before + 0.5)


@pytest.mark.parametrize(
    "sql",
    [
        'SELECT "x\\"(1)',  # a quoted name ending in a backslash would escape sqlglot's generated Python string
        'SELECT relname AS "a\\" FROM pg_catalog.pg_class ORDER BY "a\\"',
        'SELECT 1::"evil"',
    ],
)
def test_catalog_evaluator_refuses_unsafe_names(served: tuple[Path, int], sql: str) -> None:
    _, port = served
    with psycopg.connect(dsn(port), autocommit=True) as conn:
        with pytest.raises(psycopg.Error) as info:
            conn.execute(sql)
        assert info.value.sqlstate == "42501"
        assert conn.execute("SELECT 1").fetchone() == (1,)
