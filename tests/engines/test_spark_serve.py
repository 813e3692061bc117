"""``veil serve`` on a Spark policy (``[engine] kind = "spark"``, ``local[2]``) with a real psycopg client.

The same server as on DuckDB; its worker threads share the process's SparkSession. Uses the test run's one
local Spark (its own database, so the conformance tables are not touched); skipped, with the reason, only
when pyspark or Java is missing.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import psycopg
import pytest
from click.testing import CliRunner

from tests.engines.conftest import SPARK, build
from tests.support.server import PASSWORD, dsn, running_server
from tests.test_proxy_fixtures import REGIONS
from veil.cli.main import cli

pytestmark = pytest.mark.slow

ROWS = 4000  # people() in conftest


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, same_salt: None) -> Iterator[int]:
    from veil.engines.spark import spark_available

    reason = spark_available()
    if reason is not None:
        pytest.skip(f"Spark serve test skipped: {reason}")
    policy = build(tmp_path_factory.mktemp("spark_serve") / "p", SPARK + 'database = "served"\n')
    res = CliRunner().invoke(cli, ["analyst", "add", "--policy", str(policy.path), "alice", "--password-stdin"],
                             input=PASSWORD + "\n")  # fmt: skip
    assert res.exit_code == 0, res.output
    with running_server(policy.path) as st:
        yield st.port  # type: ignore[attr-defined]


def _spent(port: int) -> float:
    with psycopg.connect(dsn(port), autocommit=True) as conn:
        return float(conn.execute("SELECT spent FROM veil.budget").fetchone()[0])


def test_private_and_public_queries_over_the_wire(served: int) -> None:
    before = _spent(served)
    with psycopg.connect(dsn(served), autocommit=True) as conn:
        (n,) = conn.execute("SELECT COUNT(*) FROM people").fetchone()
        assert isinstance(n, int) and abs(n - ROWS) < 60  # discrete Laplace, scale 2: |noise| >= 60 has p < 1e-12
        rows = conn.execute("SELECT sex, COUNT(*) AS n, AVG(age) FROM people GROUP BY sex ORDER BY sex").fetchall()
        assert [r[0] for r in rows] == ["Female", "Male", "Other"]
        assert all(isinstance(r[1], int) and isinstance(r[2], float) for r in rows)
        (m,) = conn.execute("SELECT COUNT(*) FROM people WHERE age > %s", (40,)).fetchone()  # extended protocol
        assert isinstance(m, int)
        public = conn.execute("SELECT state, region FROM regions ORDER BY state").fetchall()
        assert public == sorted(zip(REGIONS["state"], REGIONS["region"], strict=True))  # public: exact, free
    assert _spent(served) == pytest.approx(before + 3 * 0.5)


def test_refused_query_is_free_and_typed(served: int) -> None:
    before = _spent(served)
    with psycopg.connect(dsn(served), autocommit=True) as conn:
        with pytest.raises(psycopg.Error) as info:
            conn.execute("SELECT age FROM people")
        assert info.value.sqlstate is not None and "aggregate" in str(info.value).lower()
        with pytest.raises(psycopg.Error):
            conn.execute("SELECT nope FROM people")  # unknown column: refused before reading data
    assert _spent(served) == before


def test_concurrent_clients_share_the_spark_session(served: int) -> None:
    before = _spent(served)
    answers: list[int] = []
    errors: list[BaseException] = []

    def client(k: int) -> None:
        try:
            with psycopg.connect(dsn(served), autocommit=True) as conn:
                for j in range(2):
                    (n,) = conn.execute(f"SELECT COUNT(*) FROM people WHERE age >= {17 + k * 2 + j}").fetchone()
                    answers.append(n)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors
    assert len(answers) == 8 and all(isinstance(a, int) for a in answers)
    assert _spent(served) == pytest.approx(before + 8 * 0.5)


def test_catalog_lists_the_spark_tables(served: int) -> None:
    """The catalog a client sees lists the Spark tables (the same as on DuckDB)."""
    with psycopg.connect(dsn(served), autocommit=True) as conn:
        names = {r[0] for r in conn.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    assert {"people", "visits", "regions"} <= names
