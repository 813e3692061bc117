"""End to end: `veil ingest`-ed Adult → `veil publish sdc` and `veil compare`."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from veil.cli.main import cli

COLS = "age,education_num,hours_per_week,capital_gain"


def test_publish_sdc_writes_table_and_release(adult_policy) -> None:
    from veil.policy import load_policy
    from veil.store.releases import list_releases
    from veil.store.warehouse import read_table

    policy_path = adult_policy(rows=1500)
    runner = CliRunner()
    res = runner.invoke(
        cli,
        [
            "publish",
            "sdc",
            "--policy",
            str(policy_path),
            "--table",
            "adult",
            "--method",
            "microagg_mdav",
            "--param",
            "k=5",
            "--columns",
            COLS,
            "--target",
            "income",
            "--output",
            "adult_mdav",
            "--format",
            "json",
        ],
    )
    assert res.exit_code == 0, res.output
    body = json.loads(res.output)
    assert body["rows_out"] == 1500 and body["epsilon"] is None and 0 < body["linkage_risk"] < 1
    policy = load_policy(policy_path)
    table = read_table(policy, "adult_mdav")
    assert list(table.columns) == COLS.split(",") and len(table) == 1500  # the copied label is not published
    rel = next(r for r in list_releases(policy, kind="publication") if r.table == "adult_mdav")
    assert rel.method == "sdc-microagg_mdav" and rel.params["k"] == 5 and "il_mean" in rel.metrics

    res = runner.invoke(
        cli,
        [
            "publish",
            "sdc",
            "--policy",
            str(policy_path),
            "--table",
            "adult",
            "--method",
            "dp_microagg_laplace",
            "--param",
            "epsilon=2",
            "--columns",
            COLS,
            "--output",
            "adult_dp",
            "--format",
            "json",
        ],
    )
    assert res.exit_code == 0, res.output
    rel = next(r for r in list_releases(policy, kind="publication") if r.table == "adult_dp")
    assert float(rel.epsilon) == 2.0

    res = runner.invoke(
        cli,
        [
            "publish",
            "sdc",
            "--policy",
            str(policy_path),
            "--table",
            "adult",
            "--method",
            "noise_adition",
            "--columns",
            COLS,
            "--output",
            "x",
        ],
    )
    assert res.exit_code == 2 and "Did you mean 'noise_addition'" in res.output


def test_compare_json_and_plot(adult_policy, tmp_path: Path) -> None:
    policy_path = adult_policy(rows=1500)
    plot = tmp_path / "tradeoff.png"
    res = CliRunner().invoke(
        cli,
        [
            "compare",
            "--policy",
            str(policy_path),
            "--table",
            "adult",
            "--columns",
            COLS,
            "--target",
            "income",
            "--methods",
            "noise_addition,rank_swapping,ml_copy",
            "--plot",
            str(plot),
            "--format",
            "json",
        ],
    )
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)
    assert len(rows) == 5 + 5 + 4
    assert {"method", "params", "il", "il_mean", "dr", "linkage_risk", "seconds"} <= set(rows[0])
    assert any(r["pareto"] for r in rows)
    assert plot.exists() and plot.read_bytes()[:4] == b"\x89PNG"
    res = CliRunner().invoke(
        cli,
        [
            "compare",
            "--policy",
            str(policy_path),
            "--table",
            "adult",
            "--columns",
            COLS,
            "--target",
            "income",
            "--methods",
            "gan",
            "--param",
            "gan.epochs=1",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "architecture=1 epochs=1" in res.output
