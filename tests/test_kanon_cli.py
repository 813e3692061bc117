"""End to end: ingest Adult into a temp policy, publish k-anonymous tables, audit them, utility report."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from veil.cli.main import cli

QI = "age,workclass,education_num,marital_status,occupation,race,sex,native_country"


@pytest.fixture
def policy(adult_policy: Callable[..., Path]) -> Path:
    return adult_policy(rows=2500)


def _run(args: list[str]) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.slow
def test_publish_audit_and_query_release(policy: Path, shared_data: Path, tmp_path: Path) -> None:
    hier = str(shared_data / "adult/hierarchies/clustering_based_k_anon")
    export = tmp_path / "k5.csv"
    # the SOM neuron column is published, so k must hold on (QIs, som_neuron): with 10-30 neurons over
    # classes of about k rows it does not, and the gate refuses (nothing written, nothing recorded: adult_k5 below is
    # then the population's one release without a DP guarantee, which a later SOM table could not follow)
    som = ["--som-columns", "capital_gain,capital_loss,hours_per_week,fnlwgt", "--som-neurons", "10:30:10", "--som-epochs", "5"]
    base = ["publish", "kanon", "--policy", str(policy), "--table", "adult", "--algorithm", "kma", "--k", "5"]
    code, _, err = _run([*base, "--qi", QI, "--som-label", "income", "--hierarchies", hier, *som, "--output", "adult_som"])
    assert code == 2 and "som_neuron" in err and "below k = 5" in err, err
    code, out, err = _run(
        [
            "publish",
            "kanon",
            "--policy",
            str(policy),
            "--table",
            "adult",
            "--algorithm",
            "kma",
            "--k",
            "5",
            "--qi",
            QI,
            "--sensitive",
            "income",
            "--hierarchies",
            hier,
            "--output",
            "adult_k5",
            "--export",
            str(export),
            "--format",
            "json",
        ]
    )
    assert code == 0, err
    summary = json.loads(out)
    assert set(summary) == {"table", "k", "ncp_percent", "min_class_size", "seconds"}
    assert summary["table"] == "adult_k5" and summary["k"] == 5 and summary["min_class_size"] >= 5
    # every class is income-diverse (no income on more than 90 % of a class, s20b F4): 31.8 % measured (seed 1); 16.0 % for
    # the same command's k-anonymous partition alone (the partition published before, with homogeneous classes' income blanked)
    assert 0 < summary["ncp_percent"] < 40

    exported = pd.read_csv(export)
    assert len(exported) < 2500  # rows with '?' dropped
    assert set(exported.columns) == {*QI.split(","), "income"}
    assert "capital_gain" not in exported.columns

    from veil.policy import load_policy
    from veil.store.releases import list_releases
    from veil.store.warehouse import read_table

    pol = load_policy(policy)
    rel = [r for r in list_releases(pol, kind="publication") if r.table == "adult_k5"][-1]
    assert rel.method == "kanon-kma"
    assert rel.params["k"] == 5 and rel.params["qi"] == QI.split(",")
    assert rel.metrics["min_class_size"] >= 5
    assert rel.metrics["ncp_percent"] == pytest.approx(summary["ncp_percent"])
    pd.testing.assert_frame_equal(read_table(pol, "adult_k5"), exported, check_dtype=False)

    # audit reads QIs, sensitive, hierarchies and population from the release record
    code, out, err = _run(["audit", "kanon", "--policy", str(policy), "--table", "adult_k5", "--k", "5", "--format", "json"])
    assert code == 0, err
    report = json.loads(out)
    assert report["k"] >= 5 and report["ncp_percent"] == pytest.approx(summary["ncp_percent"])
    assert report["l_diversity"]["income"] >= 1 and 0 <= report["t_closeness"]["income"] <= 1
    assert report["journalist_max"] <= report["prosecutor_max"] <= 0.2

    # the raw table is not 5-anonymous on these QIs: audit says so with exit status 1
    code, out, err = _run(
        ["audit", "kanon", "--policy", str(policy), "--table", "adult", "--qi", QI, "--k", "5", "--no-population"]
    )
    assert code == 1 and "NOT 5-anonymous" in err

    code, out, err = _run(
        [
            "audit",
            "utility",
            "--policy",
            str(policy),
            "--table",
            "adult_k5",
            "--label",
            "income",
            "--models",
            "naive_bayes,logistic_regression",
            "--baseline",
            "adult",
            "--baseline-features",
            QI + ",capital_gain,capital_loss,hours_per_week,fnlwgt",
            "--format",
            "json",
        ]
    )
    assert code == 0, err
    rows = json.loads(out)
    assert [(r["table"], r["model"]) for r in rows] == [
        ("adult_k5", "naive_bayes"),
        ("adult_k5", "logistic_regression"),
        ("adult", "naive_bayes"),
        ("adult", "logistic_regression"),
    ]
    assert all(0.6 < r["accuracy"] <= 1 for r in rows if r["table"] == "adult")
    # every class keeps its income (classes are diverse by construction, nothing is blanked: s20b F4), so a model learns
    # from every row: 0.746 (naive Bayes) and 0.802 (logistic regression) measured, against 0.78 / 0.826 on the source;
    # 0.58-0.63 when homogeneous classes' income was NULL (s64 F10's suppression). The row order is CSPRNG-shuffled, so
    # the split varies from run to run: the bound leaves room
    assert all(0.6 < r["accuracy"] <= 1 for r in rows if r["table"] == "adult_k5")


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["mondrian", "mondrian-relaxed", "oka"])
def test_other_algorithms_publish(policy: Path, algorithm: str) -> None:
    code, out, err = _run(
        [
            "publish",
            "kanon",
            "--policy",
            str(policy),
            "--table",
            "adult",
            "--algorithm",
            algorithm,
            "--k",
            "10",
            "--qi",
            QI,
            "--sensitive",
            "income",
            "--output",
            f"adult_{algorithm.replace('-', '_')}",
            "--format",
            "json",
        ]
    )
    assert code == 0, err
    assert json.loads(out)["min_class_size"] >= 10


def test_errors_exit_2_and_write_nothing(policy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code, _, err = _run(
        ["publish", "kanon", "--policy", str(policy), "--table", "adult", "--k", "5", "--qi", "agee,sex", "--output", "bad"]
    )
    assert code == 2 and "Did you mean 'age'" in err

    # a generator that returns classes below k must be refused by the independent audit
    import numpy as np

    import veil.generators.kanon.anonymisation as kanon

    monkeypatch.setattr(kanon, "kmember", lambda space, k, rng=None, tick=None, diversity=None: np.arange(space.n) // 2)
    code, _, err = _run(
        ["publish", "kanon", "--policy", str(policy), "--table", "adult", "--k", "5", "--qi", "age,sex", "--output", "broken"]
    )
    assert code == 2 and "refusing to publish" in err
    from veil.policy import load_policy
    from veil.store.warehouse import table_names

    assert "broken" not in table_names(load_policy(policy))
