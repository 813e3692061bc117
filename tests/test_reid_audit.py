"""Re-identification audit: loading, noise calibrations, metrics, release-log extraction, CLI."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from scipy import stats

from tests.conftest import STAT_ALPHA, policy_text
from veil.auditor import reid as R
from veil.cli.main import cli
from veil.errors import InputError, ReleaseError
from veil.store.releases import ReleasedStatistic


def blobs(n: int = 150, d: int = 6, shift: float = 1.5, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = np.vstack([rng.normal(shift, 1, (n, d)), rng.normal(-shift, 1, (n, d))]).astype(np.float32)
    return X, np.r_[np.ones(n, bool), np.zeros(n, bool)]


# ----------------------------------------------------------------------------------- metrics


def test_metrics_stability_and_truth_labels():
    m = R.classification_metrics(np.array([1, 1, 1, 0], bool), np.array([1, 1, 0, 0], bool))
    assert m == {"accuracy": 0.75, "precision": 2 / 3, "recall": 1.0}
    assert R.stability([np.ones(4, bool)]) is None
    assert R.stability([np.ones(4, bool)] * 3) == 1.0
    assert R.truth_labels(np.array([3, 5, 5])).tolist() == [False, True, True]
    assert R.truth_labels(np.array([-1, 1])).tolist() == [False, True]
    with pytest.raises(InputError, match="two values"):
        R.truth_labels(np.array([0, 1, 2]))
    with pytest.raises(InputError, match="shape"):
        R.classification_metrics(np.ones(3, bool), np.ones(4, bool))


def test_load_matrix_and_vector(tmp_path: Path):
    np.save(tmp_path / "x.npy", np.eye(3))
    X, names = R.load_matrix(tmp_path / "x.npy")
    assert X.shape == (3, 3) and names == ["x0", "x1", "x2"]
    pd.DataFrame({"age": [30, 40], "sex": ["M", "F"]}).to_csv(tmp_path / "r.csv", index=False)
    X, names = R.load_matrix(tmp_path / "r.csv")
    assert names == ["age", "sex=F", "sex=M"] and X.tolist() == [[30, 0, 1], [40, 1, 0]]
    (tmp_path / "m.json").write_text("[1, 2.5]")
    assert R.load_vector(tmp_path / "m.json").tolist() == [1, 2.5]
    np.savetxt(tmp_path / "m.csv", [[1, 2, 3]], delimiter=",")
    assert R.load_vector(tmp_path / "m.csv").tolist() == [1, 2, 3]
    with pytest.raises(InputError, match="does not exist"):
        R.load_matrix(tmp_path / "nope.npy")
    (tmp_path / "m.xlsx").write_text("")
    with pytest.raises(InputError, match="unsupported"):
        R.load_vector(tmp_path / "m.xlsx")


# ----------------------------------------------------------------------------------- noise


@pytest.mark.parametrize("calibration,factor", [("per-coordinate", 1.0), ("l1", 400.0)])
def test_noisy_class_mean_calibrations(calibration: str, factor: float):
    """KS test at α = STAT_ALPHA on 400 coordinates x 10 draws; a scale off by 30% must fail."""
    X = np.random.default_rng(1).uniform(0, 1, (50, 400))
    true = X.mean(0)
    expected = factor * 1.0 / (50 * 0.5)
    residuals = []
    for i in range(10):
        noisy, scale = R.noisy_class_mean(
            X, epsilon=0.5, lower=0.0, upper=1.0, calibration=calibration, rng=np.random.default_rng(100 + i)
        )
        assert np.allclose(scale, expected)
        residuals.append(noisy - true)
    r = np.concatenate(residuals)
    assert stats.kstest(r, "laplace", args=(0, expected)).pvalue > STAT_ALPHA
    assert stats.kstest(r, "laplace", args=(0, 1.3 * expected)).pvalue < STAT_ALPHA
    assert stats.kstest(r, "laplace", args=(0, 0.7 * expected)).pvalue < STAT_ALPHA


def test_noisy_class_mean_validates():
    with pytest.raises(InputError, match="epsilon"):
        R.noisy_class_mean(np.ones((3, 2)), epsilon=0, lower=0, upper=1)
    with pytest.raises(InputError, match="calibration"):
        R.noisy_class_mean(np.ones((3, 2)), epsilon=1, lower=0, upper=1, calibration="l2")


# ----------------------------------------------------------------------------------- attacks


@pytest.mark.slow
def test_run_attack_subset_and_audit_summary():
    X, truth = blobs()
    m = X[truth].mean(0)
    out = R.run_attack(
        "growpu", X, m, prior=0.5, seed=0, truth=truth, train_index=np.arange(0, 300, 3), batch_size=50, t_pre=200, t_tune=200
    )
    assert out.predicted.shape == (300,) and out.metrics["accuracy"] > 0.9  # trained on 100, scores all 300
    runs, summary = R.audit(X, m, prior=0.5, methods=["floor", "kmeans"], seeds=[0, 1], truth=truth)
    assert len(runs) == 4 and summary["floor"]["stability"] == 1.0
    assert summary["kmeans"]["accuracy_mean"] > 0.95
    with pytest.raises(InputError, match="Did you mean 'growpu'"):
        R.run_attack("growp", X, m, prior=0.5)
    with pytest.raises(InputError, match="true labels"):
        R.run_attack("oracle", X, m, prior=0.5)


@pytest.mark.slow
def test_write_report(tmp_path: Path):
    X, truth = blobs(60, 4)
    runs, summary = R.audit(
        X,
        X[truth].mean(0),
        prior=0.5,
        methods=["growpu", "floor"],
        truth=truth,
        record_every=20,
        params={"growpu": {"batch_size": 30, "t_pre": 50, "t_tune": 60}},
    )
    path = R.write_report(tmp_path / "audit.md", runs, summary, {"prior": 0.5})
    text = path.read_text()
    assert "| growpu | linear | 1 |" in text and "audit_positive_fraction.png" in text
    assert (tmp_path / "audit_positive_fraction.png").stat().st_size > 1000
    assert (tmp_path / "audit_accuracy.png").exists()


# ----------------------------------------------------------------------------------- release log


def stat(name: str, value: float, scale: float = 0.1, mechanism: str = "laplace") -> ReleasedStatistic:
    return ReleasedStatistic(name, mechanism, Fraction(1, 10), 1.0, scale, value)


def fake_release(sql: str, statistics, kind: str = "query", answer=None) -> SimpleNamespace:
    return SimpleNamespace(
        id="q_1", kind=kind, canonical_sql=sql, statistics=tuple(statistics), epsilon=Fraction(1, 5), answer=answer
    )


def test_mean_from_planner_sum_and_count():
    rel = fake_release(
        "SELECT AVG(pts.a), AVG(pts.b) FROM pts WHERE pts.label = 1",
        [
            stat("count(pts.a)", 100.0, mechanism="discrete_laplace"),
            stat("sum(pts.a - 0.5)", 10.0, 2.0),
            stat("count(pts.b)", 100.0, mechanism="discrete_laplace"),
            stat("sum(pts.b - -2)", -50.0, 4.0),
        ],
    )
    rm = R.mean_from_release(rel)
    assert rm.table == "pts" and rm.features == ("a", "b") and rm.count == 100.0
    assert rm.values.tolist() == pytest.approx([0.5 + 0.1, -2 - 0.5])
    assert rm.scales.tolist() == pytest.approx([0.02, 0.04])
    assert rm.predicate == "pts.label = 1"
    assert R.mean_from_release(rel, ["b"]).values.tolist() == pytest.approx([-2.5])
    with pytest.raises(ReleaseError, match="Did you mean 'b'"):
        R.mean_from_release(rel, ["bb"])


def test_mean_from_named_positional_and_answer():
    named = fake_release("SELECT AVG(x) AS mx, COUNT(*) FROM t WHERE y", [stat("count(*)", 7), stat("avg(x)", 3.0)])
    rm = R.mean_from_release(named)
    assert rm.values.tolist() == [3.0] and rm.count == 7
    positional = fake_release("SELECT AVG(x), AVG(z) FROM t", [stat("s1", 1.0), stat("s2", 2.0)])
    assert R.mean_from_release(positional).values.tolist() == [1.0, 2.0]
    answered = fake_release("SELECT AVG(x) FROM t", [], answer={"columns": ["avg"], "rows": [[4.0]]})
    rm = R.mean_from_release(answered)
    assert rm.values.tolist() == [4.0] and np.isnan(rm.scales[0])


def test_mean_from_release_rejects():
    with pytest.raises(ReleaseError, match="not an analyst query"):
        R.mean_from_release(fake_release("SELECT AVG(x) FROM t", [], kind="publication"))
    with pytest.raises(ReleaseError, match="no AVG"):
        R.mean_from_release(fake_release("SELECT SUM(x) FROM t", [stat("sum(x)", 1.0)]))
    with pytest.raises(ReleaseError, match="grouped"):
        R.mean_from_release(fake_release("SELECT g, AVG(x) FROM t GROUP BY g", []))
    with pytest.raises(ReleaseError, match="no released statistic"):
        R.mean_from_release(fake_release("SELECT AVG(x), AVG(z) FROM t", [stat("count(x)", 3)]))


def test_truth_from_predicate():
    df = pd.DataFrame({"label": [1, 0, None], "a": [1.0, 2.0, 3.0]})
    assert R.truth_from_predicate(df, "pts.label = 1", "pts").tolist() == [True, False, False]
    with pytest.raises(InputError, match="predicate"):
        R.truth_from_predicate(df, "nosuch = 1", "pts")


# ----------------------------------------------------------------------------------- CLI


@pytest.mark.slow
def test_cli_from_files(tmp_path: Path):
    X, truth = blobs(100, 5)
    np.save(tmp_path / "x.npy", X)
    np.save(tmp_path / "m.npy", X[truth].mean(0))
    np.save(tmp_path / "t.npy", truth.astype(int))
    runner = CliRunner()
    base = ["audit", "reid", "--data", str(tmp_path / "x.npy"), "--mean", str(tmp_path / "m.npy"), "--prior", "0.5"]
    res = runner.invoke(cli, [*base, "--method", "kmeans", "--format", "json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["method"] == "kmeans" and out["accuracy"] is None and out["predicted_positive"] > 0
    assert {"method", "classifier", "accuracy", "predicted_positive", "seconds"} <= set(out)
    res = runner.invoke(
        cli,
        [
            *base,
            "--method",
            "all",
            "--truth",
            str(tmp_path / "t.npy"),
            "--t-pre",
            "100",
            "--t-tune",
            "100",
            "--epochs",
            "5",
            "--seeds",
            "2",
            "--format",
            "json",
            "--report",
            str(tmp_path / "a.md"),
            "--output",
            str(tmp_path / "p.csv"),
        ],
    )
    assert res.exit_code == 0, res.output
    rows = {r["method"]: r for r in json.loads(res.output)}
    assert set(rows) == {"growpu", "nnpu", "upu", "kmeans", "floor", "oracle"}
    assert rows["oracle"]["accuracy"] > 0.95 and rows["growpu"]["stability"] is not None
    assert (tmp_path / "a.md").exists() and len((tmp_path / "p.csv").read_text().split()) == 201
    res = runner.invoke(cli, [*base, "--loss", "sigmoid", "--t-pre", "50", "--t-tune", "50", "--format", "json"])
    assert res.exit_code == 0 and json.loads(res.output)["method"] == "growpu"
    bad = runner.invoke(
        cli, ["audit", "reid", "--data", str(tmp_path / "x.npy"), "--mean", str(tmp_path / "t.npy"), "--prior", "0.5"]
    )
    assert bad.exit_code == 2 and "--mean has 200 values but --data has 5 features" in bad.output
    assert runner.invoke(cli, ["audit", "reid", "--prior", "0.5"]).exit_code == 2


POLICY = policy_text("reid_points")


def test_cli_from_release_log(tmp_path: Path):
    """Ingest a table, log an analyst query release of the class mean, audit it from the log."""
    X, truth = blobs(150, 3, shift=1.2)
    df = pd.DataFrame(X, columns=["a", "b", "c"]).assign(label=truth.astype(int))
    (tmp_path / "policy.toml").write_text(POLICY)
    df.to_csv(tmp_path / "pts.csv", index=False)
    runner = CliRunner()
    policy = str(tmp_path / "policy.toml")
    assert runner.invoke(cli, ["ingest", "--policy", policy, "--table", "pts", str(tmp_path / "pts.csv")]).exit_code == 0

    from veil.policy import load_policy
    from veil.store.ledger import Account, Cost, Ledger

    sql = "SELECT AVG(pts.a), AVG(pts.b), AVG(pts.c) FROM pts WHERE pts.label = 1"
    n_p = int(truth.sum())
    statistics = []
    for col in "abc":
        statistics += [
            stat(f"count(pts.{col})", float(n_p), 1.0, "discrete_laplace"),
            stat(f"sum(pts.{col} - 0)", float(df.loc[truth, col].sum()), 20.0),
        ]
    with Ledger.for_policy(load_policy(tmp_path / "policy.toml")) as ledger:
        res = ledger.reserve(
            Cost(Fraction(3, 10)),
            [Account.analyst("alice", Fraction(10), Fraction(0))],
            actor="alice",
            canonical_sql=sql,
            cache_key="k1",
        )
        rid = ledger.release(
            res, answer={"columns": ["avg", "avg", "avg"], "rows": [[0, 0, 0]]}, statistics=statistics, table="pts"
        )
    out = runner.invoke(cli, ["audit", "reid", "--policy", policy, "--release", rid, "--method", "floor", "--format", "json"])
    assert out.exit_code == 0, out.output
    row = json.loads(out.output)
    assert row["accuracy"] > 0.9 and row["predicted_positive"] == n_p  # truth from the class predicate
    out = runner.invoke(cli, ["audit", "reid", "--policy", policy, "--release", rid, "--features", "a,x"])
    assert out.exit_code == 2 and "no AVG for feature(s) ['x']" in out.output
    out = runner.invoke(cli, ["audit", "reid", "--policy", policy, "--release", "q_nope"])
    assert out.exit_code == 2


@pytest.mark.slow
def test_cli_from_analyst_query_release(tmp_path: Path):
    """The whole loop: an analyst asks the class mean through Veil's query path; the audit reads it back.

    ε = 10 (the whole budget) keeps the noise small: the count's noise scale is below 1 and each AVG's
    below 0.1 against a class separation of 2.4 per coordinate, so the accuracy bound fails with
    probability far below 1e-6 (at ε = 1 it failed about once in a few hundred runs).
    """
    from veil.policy import load_policy
    from veil.proxy.session import QuerySession

    X, truth = blobs(150, 3, shift=1.2)
    (tmp_path / "policy.toml").write_text(POLICY)
    pd.DataFrame(X, columns=["a", "b", "c"]).assign(label=truth.astype(int)).to_csv(tmp_path / "pts.csv", index=False)
    runner = CliRunner()
    policy = str(tmp_path / "policy.toml")
    assert runner.invoke(cli, ["ingest", "--policy", policy, "--table", "pts", str(tmp_path / "pts.csv")]).exit_code == 0
    with QuerySession(load_policy(tmp_path / "policy.toml"), "alice") as session:
        session.execute("SELECT AVG(a), AVG(b), AVG(c), COUNT(*) FROM pts WHERE label = 1", epsilon=10.0)
    from veil.store.releases import list_releases

    rel = list_releases(load_policy(tmp_path / "policy.toml"), kind="query")[-1]
    rm = R.mean_from_release(rel)
    assert rm.features == ("a", "b", "c") and rm.count is not None and rm.predicate == "pts.label = 1"
    assert np.allclose(rm.values, rel.answer["rows"][0][:3])  # same AVGs the analyst received
    out = runner.invoke(cli, ["audit", "reid", "--policy", policy, "--release", rel.id, "--method", "floor", "--format", "json"])
    assert out.exit_code == 0, out.output
    row = json.loads(out.output)
    assert row["accuracy"] > 0.85 and row["predicted_positive"] == round(rm.count)
