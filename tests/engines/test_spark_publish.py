"""Publications into a Spark policy: `veil publish` reads the private table from Spark and writes the
published table back into the policy's Spark database through the same two-phase transaction as on
DuckDB (journal in the ledger file, ``veil.store.spark_publish``), and crash recovery rolls a staged
publication back (no release recorded) or forward (release recorded). Shares the test run's one Spark
session (skipped only when pyspark or Java is missing).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from tests.engines.conftest import spark_cli_dir
from veil.cli.main import cli
from veil.policy import load_policy

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def spark_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = spark_cli_dir(tmp_path_factory, "spark_publish", 300)
    res = CliRunner().invoke(cli, ["ingest", "--policy", str(d / "policy.toml"), "--table", "people", str(d / "people.csv")])
    assert res.exit_code == 0, res.output
    return d


def test_publish_into_spark_and_query_the_published_table(spark_dir: Path) -> None:
    from veil.store.warehouse import pending_publications, read_table, table_names

    policy = str(spark_dir / "policy.toml")
    runner = CliRunner()
    args = ["publish", "krr", "--policy", policy, "--table", "people", "--columns", "sex", "--epsilon", "1"]
    res = runner.invoke(cli, [*args, "--output", "people_krr", "--format", "json"])
    assert res.exit_code == 0, res.output
    p = load_policy(spark_dir / "policy.toml")
    assert "people_krr" in table_names(p)
    assert not [t for t in table_names(p) if t.startswith("_veil_stage")]  # the staging table is gone
    assert pending_publications(p) == []
    assert not (spark_dir / "wh.duckdb").exists()  # nothing went to DuckDB
    res = runner.invoke(
        cli,
        ["query", "--policy", policy, "--analyst", "alice", "--format", "json", "SELECT COUNT(*) FROM people_krr"],
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    # a published table is public: exact, free (kRR's row count is DP: within ±25 of 300 with probability 1 − 2.8e-11)
    assert abs(out["rows"][0][0] - 300) <= 25 and out["epsilon_charged"] == 0
    assert out["rows"] == [[len(read_table(p, "people_krr"))]]
    res = runner.invoke(cli, [*args, "--output", "people", "--format", "json"])
    assert res.exit_code != 0 and "source" in res.output  # never over the private source
    res = runner.invoke(cli, ["tables", "--policy", policy, "--format", "json"])
    assert any(t["table"] == "people_krr" and t["status"] == "published" for t in json.loads(res.output))


def test_recovery_rolls_a_staged_spark_publication_back_or_forward(spark_dir: Path) -> None:
    from veil.generators.transaction import recover
    from veil.store.ledger import Ledger
    from veil.store.warehouse import pending_publications, read_table, stage_publication, staging_name, table_names

    p = load_policy(spark_dir / "policy.toml")
    frame = pd.DataFrame({"sex": ["Female", "Male", "Male"]})
    back, forward = uuid.uuid4().hex[:12], uuid.uuid4().hex[:12]
    stage_publication(p, back, "never_recorded", frame)  # a crash right after staging: no release
    stage_publication(p, forward, "recorded", frame)  # a crash after the release was recorded
    with Ledger.for_policy(p) as led:
        led.record(kind="publication", method="test", params={"publication_token": forward}, metrics={}, table="recorded")
    assert {r["token"] for r in pending_publications(p)} >= {back, forward}
    assert staging_name(back) in table_names(p)
    done = recover(p)
    assert any("rolled back never_recorded" in d for d in done) and any("committed recorded" in d for d in done)
    names = table_names(p)
    assert "never_recorded" not in names and staging_name(back) not in names and staging_name(forward) not in names
    assert sorted(read_table(p, "recorded")["sex"]) == ["Female", "Male", "Male"]
    assert pending_publications(p) == []
