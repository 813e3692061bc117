"""End to end: `veil ingest` → `veil publish pate` → release record, saved model, `veil audit pate`."""

from __future__ import annotations

import json
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from veil.cli.main import cli
from veil.generators.pate import load_student
from veil.mechanisms.pate_accounting import data_dependent_epsilon, data_independent_epsilon
from veil.policy import load_policy
from veil.store.releases import list_releases


@pytest.fixture
def policy_path(adult_policy: Callable[..., Path], tmp_path: Path) -> Path:
    from veil.datasets import load_adult

    csv = tmp_path / "adult.csv"
    load_adult().head(4000).to_csv(csv, index=False)
    path = adult_policy(rows=10)  # writes the policy; the CLI ingest below replaces the table
    result = CliRunner().invoke(cli, ["ingest", "--policy", str(path), "--table", "adult", str(csv), "--replace"])
    assert result.exit_code == 0, result.output
    return path


def test_publish_and_audit_pate(policy_path: Path, tmp_path: Path) -> None:
    model, votes = tmp_path / "student.pt", tmp_path / "votes.npy"
    args = [
        "publish",
        "pate",
        "--policy",
        str(policy_path),
        "--table",
        "adult",
        "--label",
        "income",
        "--features",
        "age,education_num,hours_per_week,capital_gain,sex",
        "--teachers",
        "30",
        "--gamma",
        "0.05",
        "--queries",
        "200",
        "--validation",
        "300",
        "--student-rho",
        "0.5",
        "--delta",
        "1e-5",
        "--output-model",
        str(model),
        "--save-votes",
        str(votes),
        "--format",
        "json",
    ]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    expected = data_independent_epsilon(gamma=0.05, queries=200, delta=1e-5).epsilon
    assert out["epsilon_data_independent"] == pytest.approx(expected)
    assert out["student_ldp_epsilon_per_record"] == pytest.approx(0.5 * (4 + 2))

    (rel,) = list_releases(load_policy(policy_path), kind="publication")
    assert rel.id == out["release_id"] and rel.method == "pate"
    assert float(rel.epsilon) == pytest.approx(expected) and rel.delta == Fraction(1, 10**5)
    assert rel.params["features"] == ["age", "education_num", "hours_per_week", "capital_gain", "sex"]
    assert rel.params["teachers"] == 30 and rel.params["student_rho"] == 0.5
    assert "student_accuracy" in rel.metrics

    student = load_student(model)  # the documented one-liner
    side = json.loads(Path(str(model) + ".json").read_text())
    assert side["description"]["release_id"] == rel.id
    from veil.datasets import load_adult

    pred = student.predict(load_adult("test").head(50))
    assert set(pred.tolist()) <= {"<=50K", ">50K"}

    counts = np.load(votes)
    assert counts.shape == (200, 2) and np.all(counts.sum(axis=1) == 30)
    audit = CliRunner().invoke(
        cli, ["audit", "pate", "--gamma", "0.05", "--delta", "1e-5", "--votes", str(votes), "--format", "json"]
    )
    assert audit.exit_code == 0, audit.output
    report = json.loads(audit.stdout)
    dep = [b for b in report["bounds"] if b["bound"].startswith("data-dependent")]
    assert dep[0]["epsilon"] == pytest.approx(data_dependent_epsilon(counts, gamma=0.05, delta=1e-5).epsilon)
    assert dep[0]["epsilon"] == pytest.approx(rel.metrics["epsilon_data_dependent"])


def test_audit_pate_paper_figure_table_output() -> None:
    result = CliRunner().invoke(cli, ["audit", "pate", "--gamma", "0.05", "--queries", "900", "--delta", "1e-6"])
    assert result.exit_code == 0, result.output
    assert "20.2696" in result.output and "20.4078" in result.output


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ([], "--student-rho"),  # neither --student-rho nor --no-student-noise
        (["--student-rho", "0.5", "--no-student-noise"], "--student-rho"),
        (["--no-student-noise", "--features", "workclass"], "declared"),  # category without declared values
        # so many queries that the charged ε is vacuous (the table's size never refuses: tests/test_pate_partition.py)
        (["--student-rho", "0.01", "--queries", "100000"], "vacuous parameter: ε"),
        (["--student-rho", "0.5", "--student-share", "1.5"], "student share"),
        (["--student-rho", "0.5", "--student-share", "0.2", "--student-table", "adult"], "--student-share"),
        # a student held out of the source is people of the table: never without local noise (red team s24, A2)
        (["--no-student-noise"], "no local noise"),
        (["--student-rho", "1000"], "too little local noise"),
        # a vacuous δ is refused before anything is charged (red team s24, A7)
        (["--student-rho", "0.05", "--delta", "0.5"], "δ = 0.5"),
        # the student learns from public records only (red team s16, A11): never a private or internal table
        (["--no-student-noise", "--student-table", "adult"], "is private"),
        (["--student-rho", "0.5", "--student-table", "adult"], "is private"),
        (["--no-student-noise", "--student-table", "_veil_bounded_adult"], "is not a table of the policy"),
        (["--no-student-noise", "--student-table", "nosuch"], "is not a table of the policy"),
    ],
    ids=[
        "no-rho-choice",
        "both-rho-choices",
        "undeclared-category",
        "vacuous-queries",
        "student-share-out-of-range",
        "student-share-with-student-table",
        "held-out-student-without-noise",
        "held-out-student-vacuous-rho",
        "vacuous-delta",
        "private-student",
        "private-student-with-noise",
        "internal-student",
        "unknown-student",
    ],
)
def test_publish_pate_user_errors(policy_path: Path, tmp_path: Path, extra: list[str], message: str) -> None:
    model = tmp_path / "m.pt"
    args = [
        "publish",
        "pate",
        "--policy",
        str(policy_path),
        "--table",
        "adult",
        "--label",
        "income",
        "--teachers",
        "20",
        "--queries",
        "100",
        "--output-model",
        str(model),
        *extra,
    ]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2
    assert message in result.output
    assert not model.exists()
    assert list_releases(load_policy(policy_path)) == []


def test_audit_pate_votes_mismatch(tmp_path: Path) -> None:
    votes = tmp_path / "v.npy"
    np.save(votes, np.tile([20, 10], (50, 1)))
    result = CliRunner().invoke(
        cli, ["audit", "pate", "--gamma", "0.05", "--delta", "1e-5", "--queries", "10", "--votes", str(votes)]
    )
    assert result.exit_code == 2 and "vote file has 50 rows" in result.output


def test_every_pate_option_is_documented() -> None:
    from veil.cli.pate import audit_pate_command, publish_pate_command

    doc = (Path(__file__).resolve().parent.parent / "docs" / "pate.md").read_text(encoding="utf-8")
    options = [o for cmd in (publish_pate_command, audit_pate_command) for p in cmd.params for o in p.opts]
    missing = [o for o in options if o.startswith("--") and o not in doc]
    assert missing == []
