"""Utility of a published table for a prediction task: the SOM paper's income-prediction report.

Mohammed, Ayesh & Boiten (2021) train classifiers on each version of Adult (original,
anonymised, anonymised + SOM) with a 60 / 20 / 20 train / validation / test split and report
accuracy, precision, recall and F1. They used RapidMiner; these are the scikit-learn models of
the same families: naive Bayes (Bernoulli, numbers cut into quantile bins), logistic regression, decision tree, random forest,
gradient-boosted trees (histogram-based) and a multi-layer perceptron ("deep learning").

Features: numeric columns as numbers; published generalised numbers (``[lo, hi]`` text) as the
interval midpoint; any other text column one-hot encoded. Numbers are standardised. Precision,
recall and F1 are for the positive class (by default the rarer label, e.g. ``>50K``). The
validation split picks the ``selected`` model, as in the paper.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from veil.auditor.anonymity import finite_ends, parse_generalised
from veil.errors import InputError, did_you_mean

__all__ = ["MODELS", "encode_features", "utility_report"]

MODELS = ("naive_bayes", "logistic_regression", "decision_tree", "random_forest", "gradient_boosting", "mlp")


class _QuantileOneHot:
    """Naive Bayes input: two-valued columns kept as 0/1, every other column cut into ≤ 10 quantile bins, one-hot."""

    def fit(self, x: np.ndarray, y: object = None) -> _QuantileOneHot:
        self.mid_ = [float(np.mean(np.unique(x[:, j]))) if len(np.unique(x[:, j])) <= 2 else None for j in range(x.shape[1])]
        qs = np.linspace(0.1, 0.9, 9)
        self.edges_ = [np.unique(np.quantile(x[:, j], qs)) for j in range(x.shape[1])]
        return self

    def transform(self, x: np.ndarray) -> np.ndarray:
        cols = []
        for j, edges in enumerate(self.edges_):
            if self.mid_[j] is not None:
                cols.append(x[:, j : j + 1] > self.mid_[j])
            else:
                b = np.digitize(x[:, j], edges)
                cols.append(b[:, None] == np.arange(len(edges) + 1)[None, :])
        return np.hstack(cols).astype(np.float64)

    def get_params(self, deep: bool = True) -> dict[str, object]:
        return {}

    def set_params(self, **params: object) -> _QuantileOneHot:
        return self


def _model(name: str, seed: int) -> Any:
    from sklearn.ensemble import HistGradientBoostingClassifier, RandomForestClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.naive_bayes import BernoulliNB
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.tree import DecisionTreeClassifier

    if name == "naive_bayes":
        return make_pipeline(_QuantileOneHot(), BernoulliNB())
    if name == "logistic_regression":
        return LogisticRegression(max_iter=1000)
    if name == "decision_tree":
        return DecisionTreeClassifier(random_state=seed, min_samples_leaf=5)
    if name == "random_forest":
        return RandomForestClassifier(n_estimators=100, min_samples_leaf=2, random_state=seed, n_jobs=1)
    if name == "gradient_boosting":
        return HistGradientBoostingClassifier(random_state=seed)
    if name == "mlp":
        return MLPClassifier(hidden_layer_sizes=(64, 32), early_stopping=True, max_iter=200, random_state=seed)
    raise InputError(f"unknown model {name!r}", hint=did_you_mean(name, MODELS) or f"Use {', '.join(MODELS)}")


def encode_features(frame: pd.DataFrame) -> pd.DataFrame:
    """Numeric matrix (as a DataFrame) from mixed published columns (see module docstring)."""
    parts: list[pd.DataFrame] = []
    for col in frame.columns:
        s = frame[col]
        parsed = parse_generalised(s)
        if parsed is not None:
            lo, hi = finite_ends(*parsed)
            parts.append(pd.DataFrame({col: (lo + hi) / 2.0}, index=frame.index))
        else:
            parts.append(pd.get_dummies(s.astype(str), prefix=col, dtype=np.float64))
    if not parts:
        raise InputError("no feature columns to train on", hint="Pass --features")
    x = pd.concat(parts, axis=1)
    return x.fillna(x.mean(numeric_only=True))


def utility_report(
    table: pd.DataFrame,
    *,
    label: str,
    features: Sequence[str] | None = None,
    positive: str | None = None,
    models: Sequence[str] = MODELS,
    seed: int = 0,
) -> pd.DataFrame:
    """One row per model: test accuracy/precision/recall/F1 and validation accuracy; ``selected``
    marks the model with the best validation accuracy.

    >>> rng = np.random.default_rng(0)
    >>> t = pd.DataFrame({"x": rng.normal(size=300)})
    >>> t["y"] = np.where(t["x"] + rng.normal(0, .3, 300) > 0, "hi", "lo")
    >>> rep = utility_report(t, label="y", models=["logistic_regression"])
    >>> bool(rep.loc[0, "accuracy"] > 0.8)
    True
    """
    from sklearn.metrics import accuracy_score, f1_score, precision_score, recall_score
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler

    if label not in table.columns:
        raise InputError(f"label column {label!r} is not in the table", hint=did_you_mean(label, map(str, table.columns)))
    feats = list(features) if features is not None else [c for c in table.columns if c != label]
    for col in feats:
        if col not in table.columns:
            raise InputError(f"feature {col!r} is not in the table", hint=did_you_mean(col, map(str, table.columns)))
    data = table.dropna(subset=[label])
    y_raw = data[label].astype(str)
    counts = y_raw.value_counts()
    if len(counts) != 2:
        raise InputError(f"label {label!r} must have exactly 2 values, has {len(counts)}", hint="Choose a binary label")
    pos = positive if positive is not None else str(counts.index[-1])
    if pos not in counts.index:
        raise InputError(f"positive label {pos!r} is not a value of {label!r}", hint=f"Values: {list(counts.index)}")
    y = (y_raw == pos).to_numpy(dtype=np.int64)
    x = encode_features(data[feats]).to_numpy(dtype=np.float64)
    idx = np.arange(len(y))
    train, rest = train_test_split(idx, train_size=0.6, random_state=seed, stratify=y)
    val, test = train_test_split(rest, train_size=0.5, random_state=seed, stratify=y[rest])
    scaler = StandardScaler().fit(x[train])
    xs = scaler.transform(x)
    rows = []
    for name in models:
        model = _model(name, seed).fit(xs[train], y[train])
        pred = model.predict(xs[test])
        rows.append(
            {
                "model": name,
                "accuracy": accuracy_score(y[test], pred),
                "precision": precision_score(y[test], pred, zero_division=0),
                "recall": recall_score(y[test], pred, zero_division=0),
                "f1": f1_score(y[test], pred, zero_division=0),
                "val_accuracy": accuracy_score(y[val], model.predict(xs[val])),
            }
        )
    out = pd.DataFrame(rows)
    out["selected"] = out["val_accuracy"] == out["val_accuracy"].max()
    out.attrs.update(rows=len(y), features=feats, positive=pos, split="60/20/20", seed=seed)
    return out
