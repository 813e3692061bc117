"""Two free refusals of the query path, through the interfaces analysts touch: ``veil query`` (the CLI) and ``veil
serve`` (psycopg: the simple protocol, the extended one with a bound parameter, and a named prepared statement).

* ORDER BY/LIMIT/OFFSET (and FETCH) written after a parenthesised query, ``FROM ((SELECT age FROM adult) LIMIT 3) x``:
  sqlglot hangs them on the parentheses, where one person in pushes another out (review of s52); refused in
  ``resolve`` (0A000; FETCH by the parser's allow-list, 0A000 too).
* A call with more arguments than PostgreSQL takes, ``LEFT(sex, 1, 2)``: answered as the call without the extra one
  until red team s55 A2; refused in ``parse`` (42883).
* An interval used as a value, or a text subtracted from a date (red teams s56 C2, s57 D2): refused in ``validate``
  (42804); the family is ``tests/proxy/test_interval_values.py`` and the red-team files.

Each is free: the analyst's spent budget is the same after it, while one answered query in the same test moves it
(so the reading of the budget can see a charge). The Python API's tests: ``tests/adversarial/test_redteam_s52.py``,
``tests/adversarial/test_redteam_s55.py``, ``tests/proxy/test_function_arity.py``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.support.server import build_policy, dsn, running_server

#: (SQL, SQLSTATE): the clause after a parenthesised query (in FROM, a join, a CTE, double parentheses), then the
#: extra argument (in the select list, WHERE, an aggregate's argument, HAVING, GROUP BY).
REFUSED = (
    ("SELECT COUNT(*) FROM ((SELECT age FROM adult) LIMIT 3) x", "0A000"),
    ("SELECT COUNT(*) FROM ((SELECT age FROM adult) OFFSET 3) x", "0A000"),
    ("SELECT COUNT(*) FROM ((SELECT age FROM adult) ORDER BY age) x", "0A000"),
    ("SELECT AVG(x.age) FROM ((SELECT age FROM adult) ORDER BY age DESC LIMIT 3) x", "0A000"),
    ("SELECT COUNT(*) FROM ((SELECT age FROM adult) ORDER BY age FETCH FIRST 3 ROWS ONLY) x", "0A000"),
    ("SELECT COUNT(*) FROM (((SELECT age FROM adult)) LIMIT 3) x", "0A000"),
    ("SELECT COUNT(*) FROM adult a JOIN ((SELECT age FROM adult) OFFSET 2) b ON a.age = b.age", "0A000"),
    ("WITH c AS ((SELECT age FROM adult) LIMIT 3) SELECT COUNT(*) FROM c", "0A000"),
    ("SELECT LEFT(sex, 1, 2) FROM adult", "42883"),
    ("SELECT COUNT(*) FROM adult WHERE LEFT(sex, 1, 2) = 'F'", "42883"),
    ("SELECT COUNT(*) FROM adult WHERE STRPOS(sex, 'a', 1) = 1", "42883"),
    ("SELECT COUNT(*) FROM adult WHERE SUBSTRING(sex, 1, 2, 3) = 'F'", "42883"),
    ("SELECT SUM(ABS(age, 1)) FROM adult", "42883"),
    ("SELECT sex, COUNT(*) FROM adult GROUP BY sex HAVING ROUND(AVG(age), 1, 2) > 0", "42883"),
    ("SELECT LEFT(sex, 1), COUNT(*) FROM adult GROUP BY LEFT(sex, 1, 2)", "42883"),
    ("SELECT AVG(INTERVAL (age) DAY) FROM adult", "42804"),
    ("SELECT COUNT(*) FROM adult WHERE EXTRACT(DAY FROM INTERVAL (age) DAY) > 3", "42804"),
    ("SELECT COUNT(*) FROM adult WHERE DATE '2020-01-01' - '2019-01-01' IS NOT NULL", "42804"),
)
IDS = [f"{state}-{i}" for i, (_, state) in enumerate(REFUSED)]
#: answered and charged: shows each test's reading of the budget sees a charge
ANSWERED = "SELECT COUNT(*) FROM adult WHERE age > {n}"


@pytest.fixture(scope="module")
def policy(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Path:
    """Adult's first 200 rows ingested with ``veil ingest``; alice (ε 10) and bob have passwords."""
    return build_policy(tmp_path_factory.mktemp("edges"), request.getfixturevalue("shared_data"), rows=200)


# -- veil query ---------------------------------------------------------------------------------------------------


def _cli_spent(runner: CliRunner, policy: Path) -> float:
    from veil.cli.main import cli

    res = runner.invoke(cli, ["budget", "--policy", str(policy), "--analyst", "alice", "--format", "json"])
    assert res.exit_code == 0, res.output
    return float(json.loads(res.stdout)["spent"])


@pytest.mark.parametrize(("sql", "state"), REFUSED, ids=IDS)
def test_veil_query_refuses_free_with_the_sqlstate(policy: Path, sql: str, state: str) -> None:
    from veil.cli.main import cli

    runner = CliRunner()
    before = _cli_spent(runner, policy)
    res = runner.invoke(cli, ["query", "--policy", str(policy), "--analyst", "alice", "--epsilon", "0.1", sql])
    assert res.exit_code == 2, res.output
    assert f"[{state}]" in res.stderr and res.stdout == "", res.output
    assert _cli_spent(runner, policy) == before, "a refusal must be free"
    # the same reading sees a charge: an answered query moves it
    n = REFUSED.index((sql, state))
    res = runner.invoke(cli, ["query", "--policy", str(policy), "--analyst", "alice", "--epsilon", "0.1", ANSWERED.format(n=n)])
    assert res.exit_code == 0, res.output
    assert _cli_spent(runner, policy) == pytest.approx(before + 0.1)


# -- veil serve ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def port(policy: Path) -> Iterator[int]:
    with running_server(policy) as st:
        yield st.port  # type: ignore[attr-defined]


def _wire_spent(conn: object) -> float:
    with conn.cursor() as cur:  # type: ignore[attr-defined]
        cur.execute("SELECT spent FROM veil.budget")
        return float(cur.fetchone()[0])


def _with_a_parameter(sql: str) -> tuple[str, tuple[int, ...]]:
    """The statement with a bound parameter (the extended protocol's Bind): in the innermost WHERE, or a new one."""
    if "FROM adult)" in sql:
        return sql.replace("FROM adult)", "FROM adult WHERE age > %s)", 1), (20,)
    if " WHERE " in sql:
        return sql.replace(" WHERE ", " WHERE age > %s AND ", 1), (20,)
    return sql.replace("FROM adult", "FROM adult WHERE age > %s", 1), (20,)


@pytest.mark.parametrize("protocol", ["simple", "extended", "prepared"])
@pytest.mark.parametrize(("sql", "state"), REFUSED, ids=IDS)
def test_veil_serve_refuses_free_with_the_sqlstate(port: int, sql: str, state: str, protocol: str) -> None:
    import psycopg

    with psycopg.connect(dsn(port), autocommit=True) as conn:
        conn.execute("SET veil.epsilon = 0.1")
        before = _wire_spent(conn)
        with conn.cursor() as cur, pytest.raises(psycopg.Error) as info:
            if protocol == "simple":
                cur.execute(sql.encode())  # no parameters: psycopg sends a Query message
            elif protocol == "extended":
                cur.execute(*_with_a_parameter(sql))
            else:
                cur.execute(sql.encode(), prepare=True)  # a named Parse, then Bind/Execute
        assert info.value.sqlstate == state, info.value
        assert _wire_spent(conn) == before, "a refusal must be free"
        assert conn.execute("SELECT 1").fetchone() == (1,)  # the connection goes on
        n = 100 + 3 * REFUSED.index((sql, state)) + ["simple", "extended", "prepared"].index(protocol)
        conn.execute(ANSWERED.format(n=n)).fetchall()
        assert _wire_spent(conn) == pytest.approx(before + 0.1)
