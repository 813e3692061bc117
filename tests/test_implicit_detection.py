"""Implicit-privacy detection (NMI similarity, θ candidates, β classifier check)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from veil.auditor.implicit import (
    NORMALISATIONS,
    detect_implicit,
    discretise,
    normalised_mutual_information,
    plot_report,
)
from veil.errors import InputError


def _eq7(x: np.ndarray, s: np.ndarray) -> float:
    """The paper's Eq. (7): (H(x|s) + H(s|x)) / H(x,s), computed from conditional entropies."""
    df = pd.DataFrame({"x": x, "s": s})
    n = len(df)

    def h(counts: pd.Series) -> float:
        p = counts / counts.sum()
        return float(-(p * np.log(p)).sum())

    hxs = h(df.value_counts())
    h_x_given_s = sum(len(g) / n * h(g["x"].value_counts()) for _, g in df.groupby("s"))
    h_s_given_x = sum(len(g) / n * h(g["s"].value_counts()) for _, g in df.groupby("x"))
    return (h_x_given_s + h_s_given_x) / hxs


def test_joint_similarity_is_one_minus_eq7() -> None:
    rng = np.random.default_rng(3)
    s = rng.integers(0, 2, 5000)
    x = np.where(rng.random(5000) < 0.7, s, rng.integers(0, 4, 5000))
    nmi = normalised_mutual_information(x, s, "joint")[0]
    assert nmi == pytest.approx(1.0 - _eq7(x, s), abs=1e-9)
    assert 0.05 < nmi < 0.95


def test_extremes_and_order_of_normalisations() -> None:
    a = np.array([0, 0, 1, 1, 2, 2])
    for norm in NORMALISATIONS:
        assert normalised_mutual_information(a, a, norm)[0] == pytest.approx(1.0)
    independent = (np.array([0, 0, 1, 1] * 5), np.array([0, 1, 0, 1] * 5))
    assert all(normalised_mutual_information(*independent, n)[0] == 0.0 for n in NORMALISATIONS)
    rng = np.random.default_rng(0)
    s = rng.integers(0, 2, 2000)
    x = np.where(rng.random(2000) < 0.5, s, rng.integers(0, 5, 2000))
    v = {n: normalised_mutual_information(x, s, n)[0] for n in NORMALISATIONS}
    assert v["joint"] <= v["max"] <= v["arithmetic"] <= v["geometric"] <= v["min"]


def test_discretise_keeps_mass_points_together() -> None:
    col = pd.Series([0] * 90 + list(range(1, 11)))
    codes, binned = discretise(col, bins=10)
    assert binned and len(set(codes[:90])) == 1 and codes[90] != codes[0]
    cat, binned = discretise(pd.Series(["a", None, "b", "a"]))
    assert not binned and len(set(cat)) == 3  # NA is a symbol
    few, binned = discretise(pd.Series([1, 2, 3, 1]))
    assert not binned and len(set(few)) == 3
    with pytest.raises(InputError, match="bins"):
        discretise(col, bins=1)


@pytest.mark.slow
def test_adult_sex(shared_data) -> None:
    from veil.datasets import load_adult

    df = load_adult().head(6000)
    rep = detect_implicit(df, "sex", theta=0.01, beta=0.7, exclude=["income"], seed=0)
    assert {"relationship", "marital_status"} <= set(rep.candidates)
    assert "fnlwgt" not in rep.candidates and "income" not in rep.to_dict()["scores"]
    assert rep.scores[0].name == "relationship"
    assert all(a.nmi >= rep.theta for a in rep.scores if a.candidate)
    # relationship alone names husbands and wives: far above the majority rate (about 0.67)
    assert rep.accuracy is not None and rep.accuracy > 0.78 > rep.majority_rate
    assert rep.implicit == rep.candidates
    strict = detect_implicit(df, "sex", theta=0.01, beta=0.99, exclude=["income"], seed=0)
    assert strict.candidates == rep.candidates and strict.implicit == ()
    f1 = detect_implicit(df, "sex", theta=0.01, beta=0.5, metric="f1", exclude=["income"], seed=0)
    assert f1.tau == f1.f1 and f1.f1 is not None and f1.f1 < f1.accuracy
    d = rep.to_dict()
    assert d["normalisation_formula"].startswith("I(x;s)/H(x,s)") and d["implicit"] == list(rep.candidates)
    frame = rep.to_frame()
    assert list(frame["attribute"])[:2] == ["relationship", "marital_status"]


def test_no_candidate_means_no_classifier() -> None:
    df = pd.DataFrame({"s": ["a", "b"] * 50, "x": [1, 1, 2, 2] * 25})
    rep = detect_implicit(df, "s", theta=0.5)
    assert rep.candidates == () and rep.accuracy is None and rep.implicit == ()


@pytest.mark.slow
def test_plot_writes_png(tmp_path) -> None:
    df = pd.DataFrame({"s": ["a", "b"] * 50, "leak": ["x", "y"] * 50, "noise": [1, 1, 2, 2] * 25})
    rep = detect_implicit(df, "s", theta=0.1, beta=0.5, seed=0)
    path = plot_report(rep, tmp_path / "nmi.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"sensitive": "sexx"}, "Did you mean 'sex'"),
        ({"theta": 1.5}, "theta must be in"),
        ({"beta": -0.1}, "beta must be in"),
        ({"metric": "auc"}, "unknown metric"),
        ({"normalisation": "sqrt"}, "unknown normalisation"),
        ({"exclude": ["nope"]}, "column 'nope'"),
    ],
)
def test_bad_input_is_rejected(kwargs, match) -> None:
    df = pd.DataFrame({"sex": ["a", "b"] * 10, "x": [1, 2] * 10})
    args = {"sensitive": "sex", **kwargs}
    with pytest.raises(InputError, match=match):
        detect_implicit(df, args.pop("sensitive"), **args)


def test_nan_free_entropy() -> None:
    assert math.isfinite(normalised_mutual_information(np.zeros(10), np.arange(10) % 2)[0])
