"""A public answer is bounded before it is built (red team s27 A15): the engine runs a public query with
``LIMIT MAX_PUBLIC_ROWS + 1`` and one row more than the bound refuses it (54000); an analyst's own LIMIT and
ORDER BY keep their meaning. The Python API here; the wire server goes through the same pipeline
(``tests/adversarial/test_redteam_s27.py::test_A15…`` measures its memory)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlglot
from click.testing import CliRunner

from veil.errors import ValueTooLarge
from veil.policy import load_policy
from veil.proxy import pipeline
from veil.proxy.session import QuerySession


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[QuerySession]:
    from tests.publish_support import make_warehouse
    from veil.cli.main import cli

    folder = tmp_path_factory.mktemp("public_rows")
    path = make_warehouse(folder, n=60)
    with path.open("a", encoding="utf-8") as f:
        f.write("\n[tables.grid]\npublic = true\n")
    csv = folder / "grid.csv"
    csv.write_text("k,name\n" + "".join(f"{i},n{i}\n" for i in range(60)), encoding="utf-8")
    result = CliRunner().invoke(cli, ["ingest", "--policy", str(path), "--table", "grid", str(csv)])
    assert result.exit_code == 0, result.output
    policy = load_policy(path)
    analyst = next(iter(policy.analysts))
    with QuerySession(policy, analyst) as s:
        yield s


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT a.k, b.k, c.k FROM grid a, grid b, grid c",  # 216,000 rows
        "SELECT a.k, b.k, c.k FROM grid a, grid b, grid c ORDER BY a.k LIMIT 200000",
        "SELECT a.k, b.k, c.k, d.k FROM grid a, grid b, grid c, grid d",  # 13 M rows: never built
        # wide: 3,600 rows × 400 columns = 1.44 M values, under the row bound (red team s28 A3)
        "SELECT " + ", ".join(f"a.k + {i}" for i in range(400)) + " FROM grid a, grid b",
        "SELECT " + ", ".join(f"a.k + {i}" for i in range(400)) + " FROM grid a, grid b LIMIT 100000",
    ],
)
def test_a_public_answer_over_the_bound_is_refused_typed(session: QuerySession, sql: str) -> None:
    with pytest.raises(ValueTooLarge) as caught:
        session.execute(sql)
    assert caught.value.sqlstate == "54000" and "LIMIT" in (caught.value.hint or "")


def test_a_wide_answer_within_the_value_bound_is_answered(session: QuerySession) -> None:
    cols = ", ".join(f"a.k + {i}" for i in range(250))
    assert len(session.execute(f"SELECT {cols} FROM grid a, grid b").rows) == 3_600  # 900,000 values


def test_a_public_answer_within_the_bound_keeps_limit_and_order(session: QuerySession) -> None:
    answer = session.execute("SELECT a.k AS x, b.k AS y FROM grid a, grid b ORDER BY x DESC, y DESC LIMIT 3 OFFSET 1")
    assert [tuple(r) for r in answer.rows] == [(59, 58), (59, 57), (59, 56)]
    assert len(session.execute("SELECT a.k, b.k FROM grid a, grid b").rows) == 3_600
    paged = session.execute("SELECT a.k, b.k, c.k FROM grid a, grid b, grid c ORDER BY 1, 2, 3 LIMIT 5 OFFSET 100000")
    assert tuple(paged.rows[0]) == (27, 46, 40)  # 100,000 = 27·3600 + 46·60 + 40


def test_the_bound_is_put_into_the_engine_statement() -> None:
    def limited(sql: str) -> str:
        return pipeline.bounded_public(sqlglot.parse_one(sql), 11).sql()

    assert limited("SELECT a FROM t ORDER BY a") == "SELECT a FROM t ORDER BY a LIMIT 11"
    assert limited("SELECT a FROM t LIMIT 5 OFFSET 2") == "SELECT a FROM t LIMIT 5 OFFSET 2"
    assert limited("SELECT a FROM t LIMIT 50") == "SELECT * FROM (SELECT a FROM t LIMIT 50) AS veil_public_answer LIMIT 11"
