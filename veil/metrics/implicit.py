"""Implicit-privacy detection: which ordinary columns betray a sensitive one (IMPOSTER, Alg. 1).

Shared by the IMPOSTER publication (:mod:`veil.generators.imposter`) and the audit
(:mod:`veil.auditor.implicit`, which adds the plot), so it lives in the metrics layer below both.

Yang et al. (2022) call an attribute a *(θ, β)-implicit privacy attribute* for a sensitive
attribute ``s`` when (1) its normalised mutual information with ``s`` is at least θ and (2) a
classifier trained on the set of all such attributes predicts ``s`` with accuracy (or F1) at
least β. This module scores every column, forms the candidate set, trains the classifier, and
reports both figures.

**Similarity, not distance.** The paper's Eq. (7), ``(H(x|s) + H(s|x)) / H(x, s)``, equals
``1 − I(x; s) / H(x, s)``: a *distance* that is 0 for fully dependent and 1 for independent
columns, so "≥ θ" with θ = 0.01 would select almost everything. Veil uses similarities where
1 means full dependence and 0 independence. ``normalisation`` names which one:

* ``"joint"`` (default): ``I(x; s) / H(x, s)`` = 1 − Eq. (7); the paper's own quantity, turned
  into a similarity.
* ``"geometric"``: ``I / sqrt(H(x) H(s))`` (Strehl & Ghosh).
* ``"arithmetic"``: ``2 I / (H(x) + H(s))`` (scikit-learn's default).
* ``"min"``: ``I / min(H(x), H(s))``; ``"max"``: ``I / max(H(x), H(s))``.

Entropies use natural logarithms on empirical frequencies (the ratios do not depend on the
base). A column with zero entropy scores 0.

**Discretisation.** Categorical columns (strings, booleans, categories) use each value as a
symbol; NA is one more symbol. A numeric column with at most ``bins`` distinct values is
treated the same way; any other numeric column is cut into at most ``bins`` equal-frequency
intervals whose edges are the distinct values among the ``k / bins`` quantiles (k = 1 … bins−1),
so a mass point stays in one interval (Adult's ``capital_gain``, 92 % zeros, gets 2 intervals
instead of ten fake ones); NA is its own interval.

**Classifier check.** The candidate columns (one-hot categoricals, raw numerics) train a
scikit-learn ``HistGradientBoostingClassifier`` on a random ``1 − test_size`` share of the rows
and are scored on the rest: accuracy and macro-averaged F1 (the average the paper's Table 1
figures match). τ is the one named by ``metric``; the set is reported as implicit-privacy
attributes only when τ ≥ β, otherwise the result is empty (Algorithm 1, lines 8–11).

>>> import pandas as pd
>>> df = pd.DataFrame({"s": ["a", "b"] * 50, "leak": ["x", "y"] * 50, "noise": [1, 1, 2, 2] * 25})
>>> rep = detect_implicit(df, "s", theta=0.1, beta=0.9, seed=0)
>>> rep.candidates, rep.implicit
(('leak',), ('leak',))
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from veil.errors import InputError, did_you_mean

__all__ = [
    "NORMALISATIONS",
    "AttributeScore",
    "ImplicitReport",
    "detect_implicit",
    "discretise",
    "normalised_mutual_information",
    "one_hot_features",
]

NORMALISATIONS: tuple[str, ...] = ("joint", "geometric", "arithmetic", "min", "max")
METRICS: tuple[str, ...] = ("accuracy", "f1")


@dataclass(frozen=True)
class AttributeScore:
    """One column's dependence on the sensitive attribute."""

    name: str
    nmi: float
    mutual_information: float
    entropy: float
    joint_entropy: float
    symbols: int
    discretised: bool
    candidate: bool


@dataclass(frozen=True)
class ImplicitReport:
    """Result of :func:`detect_implicit` (frozen)."""

    sensitive: str
    theta: float
    beta: float
    metric: str
    normalisation: str
    bins: int
    rows: int
    sensitive_entropy: float
    scores: tuple[AttributeScore, ...]
    candidates: tuple[str, ...]
    accuracy: float | None
    f1: float | None
    majority_rate: float
    test_rows: int

    @property
    def tau(self) -> float | None:
        """The classifier figure compared with β (accuracy or macro F1)."""
        return self.accuracy if self.metric == "accuracy" else self.f1

    @property
    def implicit(self) -> tuple[str, ...]:
        """The (θ, β)-implicit privacy attributes: the candidates if τ ≥ β, else empty."""
        tau = self.tau
        return self.candidates if tau is not None and tau >= self.beta else ()

    def to_frame(self) -> pd.DataFrame:
        """Per-attribute scores, highest NMI first."""
        rows = [
            {
                "attribute": a.name,
                "nmi": round(a.nmi, 6),
                "mutual_information": round(a.mutual_information, 6),
                "symbols": a.symbols,
                "discretised": a.discretised,
                "candidate": a.candidate,
                "implicit": a.name in self.implicit,
            }
            for a in self.scores
        ]
        return pd.DataFrame(rows)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (what ``--format json`` prints)."""
        return {
            "sensitive": self.sensitive,
            "theta": self.theta,
            "beta": self.beta,
            "metric": self.metric,
            "normalisation": self.normalisation,
            "normalisation_formula": _FORMULAS[self.normalisation],
            "bins": self.bins,
            "rows": self.rows,
            "scores": {a.name: a.nmi for a in self.scores},
            "candidates": list(self.candidates),
            "classifier": "HistGradientBoostingClassifier",
            "accuracy": self.accuracy,
            "f1_macro": self.f1,
            "tau": self.tau,
            "majority_rate": self.majority_rate,
            "test_rows": self.test_rows,
            "implicit": list(self.implicit),
        }


_FORMULAS = {
    "joint": "I(x;s)/H(x,s)  (= 1 - paper Eq. 7)",
    "geometric": "I(x;s)/sqrt(H(x)H(s))",
    "arithmetic": "2I(x;s)/(H(x)+H(s))",
    "min": "I(x;s)/min(H(x),H(s))",
    "max": "I(x;s)/max(H(x),H(s))",
}


def discretise(column: pd.Series, bins: int = 10) -> tuple[np.ndarray, bool]:
    """Integer symbol codes for ``column`` and whether it was binned (see module docstring).

    >>> codes, binned = discretise(pd.Series([0, 0, 0, 0, 5, 7, 9, 100]), bins=4)
    >>> binned, len(set(codes))
    (True, 3)
    """
    if bins < 2:
        raise InputError(f"bins must be at least 2, got {bins}", hint="Use --bins 10")
    numeric = pd.api.types.is_numeric_dtype(column) and not pd.api.types.is_bool_dtype(column)
    if not numeric or column.nunique(dropna=True) <= bins:
        return pd.factorize(column, use_na_sentinel=False)[0].astype(np.int64), False
    x = column.to_numpy(dtype=float, na_value=np.nan)
    present = x[~np.isnan(x)]
    edges = np.unique(np.quantile(present, np.arange(1, bins) / bins))
    codes = np.searchsorted(edges, x, side="left").astype(np.int64)
    codes[np.isnan(x)] = len(edges) + 1
    return codes, True


def _entropy(counts: np.ndarray) -> float:
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())


def normalised_mutual_information(
    x: np.ndarray, s: np.ndarray, normalisation: str = "joint"
) -> tuple[float, float, float, float]:
    """``(nmi, I, H(x), H(x,s))`` for two integer code arrays.

    >>> a = np.array([0, 0, 1, 1]); normalised_mutual_information(a, a)[0]
    1.0
    >>> normalised_mutual_information(a, np.array([0, 1, 0, 1]))[0]
    0.0
    """
    if normalisation not in NORMALISATIONS:
        raise InputError(f"unknown normalisation {normalisation!r}", hint=f"Choose one of {list(NORMALISATIONS)}")
    _, xi = np.unique(x, return_inverse=True)
    _, si = np.unique(s, return_inverse=True)
    joint = np.zeros((xi.max() + 1, si.max() + 1))
    np.add.at(joint, (xi, si), 1.0)
    hx, hs, hxs = _entropy(joint.sum(1)), _entropy(joint.sum(0)), _entropy(joint.ravel())
    mi = max(hx + hs - hxs, 0.0)
    denom = {
        "joint": hxs,
        "geometric": math.sqrt(hx * hs),
        "arithmetic": (hx + hs) / 2.0,
        "min": min(hx, hs),
        "max": max(hx, hs),
    }[normalisation]
    nmi = 0.0 if denom <= 1e-12 or mi <= 1e-12 else min(mi / denom, 1.0)
    return round(nmi, 12), mi, hx, hxs


def detect_implicit(
    df: pd.DataFrame,
    sensitive: str,
    *,
    theta: float = 0.01,
    beta: float = 0.7,
    metric: str = "accuracy",
    normalisation: str = "joint",
    bins: int = 10,
    columns: Sequence[str] | None = None,
    exclude: Iterable[str] = (),
    test_size: float = 0.3,
    seed: int | None = None,
) -> ImplicitReport:
    """Algorithm 1: score every column against ``sensitive``, keep NMI ≥ θ, check τ ≥ β.

    ``columns`` restricts the attributes scored (default: every column but ``sensitive`` and
    ``exclude``). ``seed`` fixes the train/test split and the classifier (no global state).
    """
    if sensitive not in df.columns:
        raise InputError(
            f"sensitive column {sensitive!r} is not in the table",
            hint=did_you_mean(sensitive, df.columns) or f"Columns: {list(df.columns)}",
        )
    if not 0.0 <= theta <= 1.0:
        raise InputError(f"theta must be in [0, 1], got {theta}", hint="NMI similarities lie in [0, 1]; try 0.01")
    if not 0.0 <= beta <= 1.0:
        raise InputError(f"beta must be in [0, 1], got {beta}", hint="β is an accuracy or F1 threshold; try 0.7")
    if metric not in METRICS:
        raise InputError(f"unknown metric {metric!r}", hint=f"Choose one of {list(METRICS)}")
    if not 0.0 < test_size < 1.0:
        raise InputError(f"test_size must be in (0, 1), got {test_size}", hint="Use 0.3")
    excluded = set(exclude) | {sensitive}
    for name in list(excluded) + list(columns or ()):
        if name not in df.columns:
            raise InputError(
                f"column {name!r} is not in the table", hint=did_you_mean(name, df.columns) or f"Columns: {list(df.columns)}"
            )
    attrs = [c for c in (columns if columns is not None else df.columns) if c not in excluded]
    if not attrs:
        raise InputError("no attributes left to score", hint="Do not exclude every column")
    target = df[sensitive]
    if target.isna().any():
        raise InputError(
            f"sensitive column {sensitive!r} has {int(target.isna().sum())} missing values", hint="Drop those rows first"
        )
    s_codes = pd.factorize(target)[0]
    if s_codes.max() < 1:
        raise InputError(f"sensitive column {sensitive!r} has a single value", hint="Nothing can be inferred")
    hs = _entropy(np.bincount(s_codes).astype(float))
    scores = []
    for name in attrs:
        codes, binned = discretise(df[name], bins)
        nmi, mi, hx, hxs = normalised_mutual_information(codes, s_codes, normalisation)
        scores.append(AttributeScore(str(name), nmi, mi, hx, hxs, len(np.unique(codes)), binned, nmi >= theta))
    scores.sort(key=lambda a: -a.nmi)
    candidates = tuple(a.name for a in scores if a.candidate)
    majority = float(np.bincount(s_codes).max() / len(s_codes))
    accuracy = f1 = None
    n_test = 0
    if candidates:
        accuracy, f1, n_test = _classifier_check(df[list(candidates)], s_codes, test_size, seed)
    return ImplicitReport(
        sensitive,
        theta,
        beta,
        metric,
        normalisation,
        bins,
        len(df),
        hs,
        tuple(scores),
        candidates,
        accuracy,
        f1,
        majority,
        n_test,
    )


def _classifier_check(x: pd.DataFrame, y: np.ndarray, test_size: float, seed: int | None) -> tuple[float, float, int]:
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.metrics import accuracy_score, f1_score
    from sklearn.model_selection import train_test_split

    features = one_hot_features(x)
    stratify = y if np.bincount(y).min() >= 2 else None
    xtr, xte, ytr, yte = train_test_split(features, y, test_size=test_size, random_state=seed, stratify=stratify)
    clf = HistGradientBoostingClassifier(max_iter=100, random_state=seed)
    clf.fit(xtr, ytr)
    pred = clf.predict(xte)
    return float(accuracy_score(yte, pred)), float(f1_score(yte, pred, average="macro")), len(yte)


def one_hot_features(x: pd.DataFrame, reference: pd.DataFrame | None = None) -> np.ndarray:
    """Classifier features: numerics as they are (NA → column median), categoricals one-hot
    (NA its own value). With ``reference``, categories come from it (for train/test alignment)."""
    ref = x if reference is None else reference
    parts = []
    for name in x.columns:
        col, rcol = x[name], ref[name]
        if pd.api.types.is_numeric_dtype(rcol) and not pd.api.types.is_bool_dtype(rcol):
            values = col.to_numpy(dtype=float, na_value=np.nan)
            med = float(np.nanmedian(rcol.to_numpy(dtype=float, na_value=np.nan)))
            parts.append(np.where(np.isnan(values), med, values)[:, None])
        else:
            cats = pd.unique(rcol.astype(object).fillna("__na__"))
            vals = col.astype(object).fillna("__na__").to_numpy()
            parts.append((vals[:, None] == np.asarray(cats, dtype=object)[None, :]).astype(np.float32))
    return np.hstack(parts).astype(np.float32)
