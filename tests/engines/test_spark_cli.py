"""`veil ingest`, `query`, `explain`, `budget` and a table-reading publication against a Spark policy (local[2]).

The same commands as on DuckDB, unchanged; the tables, bounded copies and queries live in Spark, the
ledger in SQLite. Shares the test run's one Spark session (skipped only when pyspark or Java is missing).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.engines.conftest import people, spark_cli_dir
from veil.cli.main import cli
from veil.policy import load_policy

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def spark_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return spark_cli_dir(tmp_path_factory, "spark_cli", 500)


def test_cli_against_spark(spark_dir: Path) -> None:
    policy = str(spark_dir / "policy.toml")
    runner = CliRunner()
    res = runner.invoke(cli, ["ingest", "--policy", policy, "--table", "people", str(spark_dir / "people.csv")])
    assert res.exit_code == 0, res.output
    assert not (spark_dir / "wh.duckdb").exists()  # nothing went to DuckDB
    assert (spark_dir / "spark-warehouse" / "default.db" / "people").is_dir()
    sql = "SELECT sex, COUNT(*) AS n, AVG(age) FROM people GROUP BY sex"
    res = runner.invoke(cli, ["explain", "--policy", policy, "--analyst", "alice", "--format", "json", sql])
    assert res.exit_code == 0, res.output
    res = runner.invoke(cli, ["query", "--policy", policy, "--analyst", "alice", "--epsilon", "1", "--format", "json", sql])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert [r[0] for r in out["rows"]] == ["Female", "Male", "Other"]
    assert out["epsilon_charged"] == 1
    res = runner.invoke(cli, ["budget", "--policy", policy, "--analyst", "alice", "--format", "json"])
    assert res.exit_code == 0 and json.loads(res.output)["spent"] == 1
    res = runner.invoke(cli, ["query", "--policy", policy, "--analyst", "alice", "SELECT * FROM people"])
    assert res.exit_code != 0 and "aggregate" in res.output.lower()


def test_curator_read_and_write_go_to_spark(spark_dir: Path) -> None:
    from veil.store.warehouse import read_table, table_columns, table_names, write_table

    policy = load_policy(spark_dir / "policy.toml")
    df = people(50)
    write_table(policy, "sample", df, replace=True)
    assert "sample" in table_names(policy)
    assert [c for c, _ in table_columns(policy, "sample")] == list(df.columns)
    back = read_table(policy, "sample", ["age", "married"])  # a Spark table has no row order
    assert sorted(zip(back["age"], back["married"], strict=True)) == sorted(zip(df["age"], df["married"], strict=True))
    write_table(policy, "sample", df.head(10), replace=True)
    assert len(read_table(policy, "sample")) == 10
