"""End to end on real Adult data: `veil ingest`, then `veil query/explain/budget` and `veil.connect`."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

import veil
from veil.cli.main import cli


@pytest.mark.slow
def test_cli_query_explain_budget_on_adult(tmp_path: Path, shared_data: Path, adult_policy: Callable[..., Path]) -> None:
    policy = adult_policy(rows=10)  # writes the policy; re-ingest the full file through the CLI below
    runner = CliRunner()
    adult = str(shared_data / "adult" / "adult.data")
    res = runner.invoke(cli, ["ingest", "--policy", str(policy), "--table", "adult", adult, "--replace"])
    assert res.exit_code == 0, res.output
    sql = "SELECT sex, COUNT(*) AS n, AVG(age) AS mean_age FROM adult GROUP BY sex ORDER BY sex"
    res = runner.invoke(cli, ["explain", "--policy", str(policy), "--analyst", "alice", "--format", "json", sql])
    assert res.exit_code == 0, res.output
    quoted = json.loads(res.output)["epsilon"]
    res = runner.invoke(cli, ["query", "--policy", str(policy), "--analyst", "alice", "--epsilon", "1", "--format", "json", sql])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert set(out) == {"columns", "rows", "ci95", "epsilon_charged", "epsilon_remaining", "withheld_groups", "notes"}
    assert out["withheld_groups"] == 0 and out["notes"] == []
    assert out["columns"] == ["sex", "n", "mean_age"] and [r[0] for r in out["rows"]] == ["Female", "Male"]
    assert quoted == 0.5 and out["epsilon_charged"] == 1.0 and out["epsilon_remaining"] == 9.0
    female_n = out["rows"][0][1]
    assert abs(female_n - 10771) < 60  # 32,561 rows; 10,771 women; CI half-width ≈ 9
    assert out["ci95"][0][0] is None and out["ci95"][0][1] > 0
    res = runner.invoke(cli, ["budget", "--policy", str(policy), "--analyst", "alice", "--format", "json"])
    assert json.loads(res.output)["spent"] == 1.0
    res = runner.invoke(cli, ["query", "--policy", str(policy), "--analyst", "alice", "SELECT * FROM adult"])
    assert res.exit_code == 2 and "0A000" in res.output
    res = runner.invoke(cli, ["query", "--policy", str(policy), "--analyst", "bob", "--epsilon", "2", sql])
    assert res.exit_code == 2 and "remaining" in res.output


@pytest.mark.slow
def test_connect_returns_dataframe_with_attrs(adult_policy: Callable[..., Path]) -> None:
    policy = adult_policy(rows=3000)
    with veil.connect(policy, analyst="alice") as db:
        df = db.sql("SELECT income, COUNT(*) AS n, MEDIAN(age) AS med FROM adult GROUP BY income ORDER BY income")
        assert list(df.columns) == ["income", "n", "med"] and list(df["income"]) == ["<=50K", ">50K"]
        assert df.attrs["epsilon_charged"] == 0.5 and df.attrs["release_id"]
        assert df.attrs["ci95"]["n"].notna().all() and df.attrs["ci95"]["med"].isna().all()
        ex = db.explain("SELECT occupation, COUNT(*) FROM adult GROUP BY occupation")
        assert ex.partition_threshold is not None and ex.epsilon == 0.5
        assert db.budget().spent == 0.5


@pytest.mark.slow
def test_cli_query_with_no_released_group_prints_header_only(adult_policy: Callable[..., Path]) -> None:
    """fnlwgt is an unbounded-key group (one row per value): partition selection releases no group."""
    policy = adult_policy(rows=500)
    runner = CliRunner()
    sql = "SELECT fnlwgt, COUNT(*) AS n FROM adult GROUP BY fnlwgt"
    res = runner.invoke(cli, ["query", "--policy", str(policy), "--analyst", "alice", "--format", "csv", sql])
    assert res.exit_code == 0, res.output
    assert res.stdout.splitlines() == ["fnlwgt,n"]
