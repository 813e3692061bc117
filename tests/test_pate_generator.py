"""PATE generator: noise scales (statistical, α = STAT_ALPHA), encoding, teachers, student, Adult and MNIST runs."""

from __future__ import annotations

import json
import math
from pathlib import Path
from statistics import NormalDist

import numpy as np
import pandas as pd
import pytest
import torch

from tests.conftest import STAT_ALPHA
from veil.errors import InputError
from veil.generators.pate import (
    FeatureEncoder,
    FeatureSpec,
    PateConfig,
    choose_threshold,
    identities,
    ldp_guarantee,
    load_student,
    noisy_aggregate,
    partition_shards,
    privatise_records,
    run_pate,
    train_teachers,
    vote_counts,
)
from veil.mechanisms.pate_accounting import data_dependent_epsilon, data_independent_epsilon

Z_ALPHA = NormalDist().inv_cdf(1 - STAT_ALPHA / 2)  # two-sided normal critical value (4.89 at α = 1e-6)


def _wrong_rate(gamma: float, gap: int) -> float:
    g = gamma * gap
    return (2 + g) / (4 * math.exp(g))  # exact P[loser wins] for two classes with Laplace(1/γ) noise


@pytest.mark.slow
def test_noisy_aggregate_error_rate_matches_laplace_scale() -> None:
    # production sampler (OpenDP, OS CSPRNG); P[class 1 wins] is exact for two classes
    gamma, n = 0.05, 10_000
    counts = np.tile([130, 120], (n, 1))
    labels = noisy_aggregate(counts, gamma=gamma)
    p = _wrong_rate(gamma, 10)
    tol = Z_ALPHA * math.sqrt(p * (1 - p) / n)
    assert abs(np.mean(labels == 1) - p) < tol
    # power: a scale off by ±30% moves the rate outside the acceptance band by a wide margin
    for factor in (0.7, 1.3):
        assert abs(_wrong_rate(gamma / factor, 10) - p) > 1.1 * tol


@pytest.mark.slow
def test_privatise_records_laplace_scale() -> None:
    rho, n = 0.5, 20_000
    X = np.full((n // 4, 4), 0.25)
    noise = privatise_records(X, rho=rho) - X
    b = 1 / rho  # E|L| = b and sd(|L|) = b for Laplace(b)
    tol = Z_ALPHA * b / math.sqrt(n)
    assert abs(np.mean(np.abs(noise)) - b) < tol
    assert abs(np.mean(noise)) < Z_ALPHA * math.sqrt(2) * b / math.sqrt(n)
    for factor in (0.7, 1.3):
        assert abs(factor * b - b) > 1.5 * tol


def test_privatise_records_checks_and_l1() -> None:
    X = np.array([[0.5, 0.5, 1.0], [0.0, 0.0, 0.0]])
    out = privatise_records(X, rho=None, encoding="l1")
    assert out.tolist() == [[0.25, 0.25, 0.5], [0.0, 0.0, 0.0]]
    assert np.array_equal(privatise_records(X, rho=None), X)
    with pytest.raises(InputError):
        privatise_records(X * 2, rho=1.0)
    with pytest.raises(InputError):
        privatise_records(X, rho=0.0)


def test_ldp_guarantee_per_feature_and_record() -> None:
    enc = FeatureEncoder(
        (
            FeatureSpec("age", "numeric", 17, 90),
            FeatureSpec("hours", "numeric", 1, 99),
            FeatureSpec("sex", "category", values=("Female", "Male")),
            FeatureSpec("race", "category", values=("a", "b", "c", "d", "e")),
        )
    )
    assert enc.width == 9 and enc.l1_diameter == 6
    g = ldp_guarantee(enc, 0.3)
    assert g["per_numeric_feature"] == 0.3
    assert g["per_categorical_feature"] == 0.6
    assert g["per_record"] == pytest.approx(1.8)
    assert ldp_guarantee(enc, 0.3, "l1")["per_record"] == pytest.approx(0.6)
    assert ldp_guarantee(enc, None)["per_record"] is None


def test_encoder_uses_declared_bounds_only() -> None:
    enc = FeatureEncoder((FeatureSpec("age", "numeric", 20, 60), FeatureSpec("sex", "category", values=("F", "M"))))
    df = pd.DataFrame({"age": [10, 40, 100, None], "sex": ["M", "F", "X", None]})
    X = enc.transform(df)
    assert X.tolist() == [[0.0, 0.0, 1.0], [0.5, 1.0, 0.0], [1.0, 0.0, 0.0], [0.5, 0.0, 0.0]]
    assert FeatureEncoder.from_dict(json.loads(json.dumps(enc.to_dict()))) == enc
    with pytest.raises(InputError):
        FeatureSpec("x", "numeric", 1, 1)
    with pytest.raises(InputError):
        FeatureSpec("c", "category")
    with pytest.raises(InputError):
        enc.transform(pd.DataFrame({"age": [1]}))


def test_partition_shards_disjoint_and_units_together() -> None:
    X = np.random.default_rng(0).random((103, 2))
    shards = partition_shards(identities(X), 10, seed=4)
    allrows = np.concatenate(shards)
    assert sorted(allrows.tolist()) == list(range(103))
    assert all(0 < len(s) < 25 for s in shards)  # a keyed hash per row: about 10 each (fixed data and seed)
    groups = np.repeat(np.arange(30), 3)
    gs = partition_shards(identities(np.zeros((90, 1)), groups=groups), 7, seed=1)
    owner = {}
    for i, s in enumerate(gs):
        for unit in set(groups[s].tolist()):
            assert owner.setdefault(unit, i) == i
    assert sorted(np.concatenate(gs).tolist()) == list(range(90))
    few = partition_shards(identities(X[:5]), 6, seed=0)  # fewer rows than teachers: some shards are empty
    assert sum(len(s) for s in few) == 5 and any(len(s) == 0 for s in few)
    with pytest.raises(InputError):
        partition_shards(identities(X), 0, seed=0)


def test_teachers_one_class_shard_and_multiclass() -> None:
    rng = np.random.default_rng(3)
    X = rng.random((300, 2))
    y = np.digitize(X[:, 0], [1 / 3, 2 / 3])  # 3 classes by the first feature
    order = np.argsort(X[:, 0])
    shards = [order[:40], *np.array_split(rng.permutation(order[40:]), 4)]  # shard 0 holds class 0 only
    ens = train_teachers(X, y, shards, classes=("lo", "mid", "hi"), progress=False)
    counts = vote_counts(ens, X)
    assert counts.shape == (300, 3) and np.all(counts.sum(axis=1) == 5)
    assert np.all(counts[:, 0] >= 1)  # the one-class teacher always votes "lo"
    assert np.mean(np.argmax(counts, axis=1) == y) > 0.6


def test_choose_threshold_youden() -> None:
    scores = np.array([0.1, 0.2, 0.3, 0.6, 0.7, 0.9])
    labels = np.array([0, 0, 0, 1, 1, 1])
    assert choose_threshold(scores, labels) == 0.6
    assert choose_threshold(scores, np.zeros(6)) == 0.5


@pytest.fixture(scope="module")
def adult_arrays(shared_data: Path) -> dict:
    from veil.datasets import load_adult

    tr, te = load_adult("train").head(6000), load_adult("test").head(2000)
    cats = ("workclass", "marital_status", "occupation", "relationship", "race", "sex")
    specs = [
        FeatureSpec(n, "numeric", lo, hi)
        for n, lo, hi in (
            ("age", 17, 90),
            ("education_num", 1, 16),
            ("capital_gain", 0, 99999),
            ("capital_loss", 0, 4356),
            ("hours_per_week", 1, 99),
        )
    ]
    specs += [FeatureSpec(c, "category", values=tuple(sorted(tr[c].dropna().unique()))) for c in cats]
    enc = FeatureEncoder(tuple(specs))
    return {
        "enc": enc,
        "Xt": enc.transform(tr),
        "yt": (tr["income"] == ">50K").to_numpy(int),
        "Xe": enc.transform(te),
        "ye": (te["income"] == ">50K").to_numpy(int),
    }


@pytest.mark.slow
def test_adult_end_to_end_no_student_noise(adult_arrays: dict, tmp_path: Path) -> None:
    a = adult_arrays
    cfg = PateConfig(teachers=50, queries=400, rho=None, seed=2)
    res = run_pate(
        a["Xt"],
        a["yt"],
        a["Xe"][:1000],
        a["Xe"][1000:],
        a["ye"][1000:],
        encoder=a["enc"],
        classes=("<=50K", ">50K"),
        config=cfg,
        y_student=a["ye"][:1000],
        rng=np.random.default_rng(5),
        progress=False,
    )
    m = res.metrics
    assert m["ensemble_accuracy_before_noise"] > 0.75
    assert m["student_accuracy"] > 0.7
    assert 0.5 < m["student_balanced_accuracy"] <= 1
    assert res.counts.shape == (400, 2) and np.all(res.counts.sum(axis=1) == 50)
    assert m["epsilon_data_independent"] == data_independent_epsilon(gamma=0.05, queries=400, delta=1e-5).epsilon
    assert m["epsilon_data_dependent"] == data_dependent_epsilon(res.counts, gamma=0.05, delta=1e-5).epsilon
    assert m["student_ldp_epsilon_per_record"] is None
    # save / load: same predictions, the sidecar describes the training and holds no records
    path = res.student.save(tmp_path / "student.pt", description={"table": "adult"})
    loaded = load_student(path)
    Xv = a["Xe"][1000:]
    assert np.array_equal(loaded.predict_index(Xv, encoded=True), res.student.predict_index(Xv, encoded=True))
    side = json.loads((tmp_path / "student.pt.json").read_text())
    assert side["description"] == {"table": "adult"} and side["threshold"] == res.student.threshold
    state = torch.load(path, weights_only=True)
    assert sum(v.numel() for v in state.values()) == 4 * a["enc"].width + 2  # mean, scale, 2 weight rows, 2 biases


@pytest.mark.slow
def test_adult_student_noise_reports_ldp(adult_arrays: dict) -> None:
    a = adult_arrays
    cfg = PateConfig(teachers=50, queries=300, rho=0.5, seed=3)
    res = run_pate(
        a["Xt"],
        a["yt"],
        a["Xe"][:1000],
        a["Xe"][1000:],
        a["ye"][1000:],
        encoder=a["enc"],
        classes=("<=50K", ">50K"),
        config=cfg,
        y_student=a["ye"][:1000],
        rng=np.random.default_rng(6),
        progress=False,
    )
    assert res.metrics["student_ldp_epsilon_per_record"] == pytest.approx(0.5 * (5 + 2 * 6))
    assert 0 <= res.metrics["student_accuracy"] <= 1


@pytest.mark.slow
def test_mnist_3_vs_5_end_to_end(shared_data: Path) -> None:
    from veil.datasets import load_mnist_3_5, load_mnist_test_3_5

    X, y = load_mnist_3_5(n_per_class=1000)
    Xe, ye = load_mnist_test_3_5()
    enc = FeatureEncoder.numeric_box([f"p{i}" for i in range(784)], 0.0, 1.0)
    cfg = PateConfig(teachers=20, gamma=1.0, queries=300, rho=None, seed=1)  # 20 teachers: little noise
    res = run_pate(
        X.astype(float),
        (y == 5).astype(int),
        Xe[:600].astype(float),
        Xe[600:1200].astype(float),
        (ye[600:1200] == 5).astype(int),
        encoder=enc,
        classes=(3, 5),
        config=cfg,
        y_student=(ye[:600] == 5).astype(int),
        rng=np.random.default_rng(2),
        progress=False,
    )
    assert res.metrics["ensemble_accuracy_before_noise"] > 0.85
    assert res.metrics["student_accuracy"] > 0.8


def test_config_validation() -> None:
    for bad in (
        {"teachers": 0},
        {"gamma": -1.0},
        {"rho": 0.0},
        {"delta": 1.5},
        {"ldp_encoding": "l2"},
        {"queries": 1},
        {"threshold": "half"},
    ):
        with pytest.raises(InputError):
            PateConfig(**bad)  # type: ignore[arg-type]


def test_threads_are_validated_and_restored() -> None:
    import torch

    from veil.errors import InputError

    with pytest.raises(InputError, match="threads"):
        PateConfig(threads=0)
    rng = np.random.default_rng(0)
    X = rng.random((300, 2))
    y = (X[:, 0] > 0.5).astype(int)
    enc = FeatureEncoder.numeric_box(["a", "b"], 0.0, 1.0)
    before = torch.get_num_threads()
    cfg = PateConfig(teachers=5, queries=50, rho=None, student_epochs=5, threads=2, seed=0)
    run_pate(enc.transform(X[:200]), y[:200], enc.transform(X[200:]), None, None, encoder=enc, classes=(0, 1),
             config=cfg, rng=rng, progress=False)  # fmt: skip
    assert torch.get_num_threads() == before
