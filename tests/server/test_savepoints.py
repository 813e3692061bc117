"""Savepoints on the wire behave as in PostgreSQL (s36 left: ``ROLLBACK TO SAVEPOINT`` ended the whole transaction,
so a driver's nested transaction — psycopg's ``conn.transaction()`` inside another, SQLAlchemy's ``begin_nested`` —
saw its outer transaction vanish). Nothing is ever undone: an answer given inside a rolled-back savepoint stays
charged."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from psycopg.pq import TransactionStatus

from tests.support.server import build_policy, dsn, running_server

COUNT = "SELECT COUNT(*) FROM adult WHERE age > 30"


@pytest.fixture(scope="module")
def port(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[int]:
    policy = build_policy(tmp_path_factory.mktemp("savepoints"), request.getfixturevalue("shared_data"), rows=300)
    with running_server(policy) as st:
        yield st.port  # type: ignore[attr-defined]


def _spent(conn: psycopg.Connection) -> float:
    return float(conn.execute("SELECT spent FROM veil.budget").fetchone()[0])


def test_a_failed_nested_transaction_leaves_the_outer_one_open(port: int) -> None:
    with psycopg.connect(dsn(port), autocommit=True) as conn:  # conn.transaction() is BEGIN, nested a SAVEPOINT
        conn.execute("SET veil.epsilon = 0.01")
        with conn.transaction():
            before = _spent(conn)
            with pytest.raises(psycopg.errors.UndefinedColumn), conn.transaction():  # SAVEPOINT … ROLLBACK TO
                conn.execute(COUNT).fetchall()
                conn.execute("SELECT COUNT(*) FROM adult WHERE nope > 1")
            assert conn.info.transaction_status == TransactionStatus.INTRANS
            assert conn.execute(COUNT.replace("30", "31")).fetchone()[0] is not None  # the outer one goes on
            assert _spent(conn) - before == pytest.approx(0.02, abs=1e-9)  # the answer inside the savepoint stays charged
        assert conn.info.transaction_status == TransactionStatus.IDLE


@pytest.mark.parametrize("spelling", ["ROLLBACK TO SAVEPOINT {}", "ROLLBACK TO {}", "rollback to savepoint {}"])
def test_rollback_to_keeps_the_savepoint_and_drops_later_ones(port: int, spelling: str) -> None:
    with psycopg.connect(dsn(port), autocommit=True) as conn:
        conn.execute("BEGIN")
        conn.execute("SAVEPOINT a")
        conn.execute('SAVEPOINT "B"')
        with pytest.raises(psycopg.errors.UndefinedColumn):
            conn.execute("SELECT COUNT(*) FROM adult WHERE nope > 1")
        assert conn.info.transaction_status == TransactionStatus.INERROR
        with pytest.raises(psycopg.errors.InFailedSqlTransaction):
            conn.execute("SAVEPOINT c")
        conn.execute(spelling.format("A"))  # a bare name folds to lower case: a
        assert conn.info.transaction_status == TransactionStatus.INTRANS
        with pytest.raises(psycopg.errors.InvalidSavepointSpecification):
            conn.execute('RELEASE SAVEPOINT "B"')  # set after a: gone
        conn.execute(spelling.format("a"))  # a itself stays
        conn.execute("RELEASE a")
        with pytest.raises(psycopg.errors.InvalidSavepointSpecification):
            conn.execute("ROLLBACK TO a")
        conn.execute("ROLLBACK")
        assert conn.info.transaction_status == TransactionStatus.IDLE


@pytest.mark.parametrize("sql", ["SAVEPOINT a", "RELEASE SAVEPOINT a", "ROLLBACK TO SAVEPOINT a"])
def test_savepoints_outside_a_transaction_are_refused(port: int, sql: str) -> None:
    with psycopg.connect(dsn(port), autocommit=True) as conn:
        with pytest.raises(psycopg.errors.NoActiveSqlTransaction):
            conn.execute(sql)
        assert conn.execute("SELECT 1").fetchone() == (1,)


@pytest.mark.parametrize("sql", ["SAVEPOINT", "SAVEPOINT a b", "RELEASE", "ROLLBACK TO"])
def test_a_savepoint_statement_without_one_name_is_a_syntax_error(port: int, sql: str) -> None:
    with psycopg.connect(dsn(port), autocommit=True) as conn:
        conn.execute("BEGIN")
        with pytest.raises(psycopg.errors.SyntaxError):
            conn.execute(sql)
        conn.execute("ROLLBACK")
