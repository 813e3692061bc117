"""Utility and risk metrics for published tables: IL (cosine), DR (Jensen–Shannon), linkage risk.

All three compare an original numeric matrix ``x`` (n × d) with a sanitised one. Both are
standardised with the *original* columns' mean and standard deviation first, so that no column
dominates by its units (Adult's capital_gain runs to 99,999 while education_num stops at 16).

* :func:`information_loss` — the paper's IL (Heredia-Ductram et al. 2021, Eq. 6–7): the sum over
  records of the cosine distance ``1 − x·x'/(‖x‖‖x'‖)`` between a record and its sanitised version,
  plus the mean (``il_mean``), which is comparable across data sizes (0 = identical directions,
  1 = orthogonal, 2 = opposite).
* :func:`disclosure_risk` — the paper's DR (Eq. 8): ``1 − JSD(Y, Y')`` where Y and Y' are the
  predictions (positive-class probabilities) of one logistic regression, trained on the original
  data, on the original and the sanitised inputs, and JSD is the base-2 Jensen–Shannon *distance*
  of the two prediction vectors (each normalised to sum 1). It measures how closely the release
  reproduces that model's per-record outputs; it is **not** a re-identification probability.
* :func:`linkage_risk` — record-linkage risk (the standard SDC measure): the share of released
  records whose nearest original record (Euclidean, standardised) is the record it came from, ties
  split evenly. Only defined when rows map to source records.

When a release has no row-to-record link (synthetic data), :func:`pair_rows` pairs original row
i with a randomly drawn released row, as the paper did for its GAN and ML copies; IL and DR then
measure distribution mismatch, not per-record distortion.

>>> x = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
>>> [round(v, 12) for v in information_loss(x, x, standardise=False)]
[0.0, 0.0]
>>> linkage_risk(x, x, np.arange(3))
1.0
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from veil.errors import InputError

__all__ = [
    "cosine_distances",
    "disclosure_risk",
    "evaluate_release",
    "information_loss",
    "js_distance",
    "linkage_risk",
    "pair_rows",
    "pareto_front",
]


def _standardise(x: np.ndarray, ref: np.ndarray) -> np.ndarray:
    mu = ref.mean(axis=0)
    sd = ref.std(axis=0)
    return (x - mu) / np.where(sd > 0, sd, 1.0)


def _check(x: np.ndarray, x2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    a = np.asarray(x, dtype=np.float64)
    b = np.asarray(x2, dtype=np.float64)
    if a.ndim != 2 or a.shape != b.shape:
        raise InputError(f"original and sanitised data must have the same 2-D shape, got {a.shape} and {b.shape}")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise InputError("metrics need finite values", hint="Drop rows with missing values first")
    return a, b


def cosine_distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine distance. Convention: two zero vectors → 0; one zero vector → 1."""
    na = np.linalg.norm(a, axis=1)
    nb = np.linalg.norm(b, axis=1)
    dot = (a * b).sum(axis=1)
    denom = na * nb
    out = np.where(denom > 0, 1.0 - dot / np.where(denom > 0, denom, 1.0), 1.0)
    out = np.where((na == 0) & (nb == 0), 0.0, out)
    return np.clip(out, 0.0, 2.0)


def information_loss(x: np.ndarray, x_sanitised: np.ndarray, *, standardise: bool = True) -> tuple[float, float]:
    """``(IL, IL_mean)``: the sum and the mean of row-wise cosine distances (rows paired by position)."""
    a, b = _check(x, x_sanitised)
    if standardise:
        a, b = _standardise(a, a), _standardise(b, a)
    d = cosine_distances(a, b)
    return float(d.sum()), float(d.mean()) if len(d) else 0.0


def _predictions(x: np.ndarray, y: np.ndarray, x_other: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.linear_model import LogisticRegression

    classes = np.unique(y)
    if len(classes) < 2:
        raise InputError("disclosure risk needs a label with at least two classes", hint="Pick another --target")
    a, b = _standardise(x, x), _standardise(x_other, x)
    model = LogisticRegression(max_iter=500, random_state=seed)
    model.fit(a, y)
    pa, pb = model.predict_proba(a), model.predict_proba(b)
    if len(classes) == 2:
        return pa[:, 1], pb[:, 1]
    return pa.ravel(), pb.ravel()


def disclosure_risk(x: np.ndarray, x_sanitised: np.ndarray, y: Sequence[Any] | np.ndarray, *, seed: int = 0) -> float:
    """The paper's DR = 1 − Jensen–Shannon distance (base 2) between a logistic regression's
    predictions on the original and on the sanitised inputs (rows paired by position)."""
    a, b = _check(x, x_sanitised)
    ya, yb = _predictions(a, np.asarray(y), b, seed)
    if ya.sum() <= 0 or yb.sum() <= 0:
        return 1.0 if np.allclose(ya, yb) else 0.0
    return float(1.0 - js_distance(ya, yb))


def js_distance(p: np.ndarray, q: np.ndarray) -> float:
    """Base-2 Jensen–Shannon distance of two non-negative vectors (each normalised to sum 1), in [0, 1].

    Never NaN: the divergence is clamped at 0 before the square root (scipy's ``jensenshannon``
    returns NaN when rounding makes the divergence of two identical vectors slightly negative,
    which made the disclosure risk null exactly when disclosure is total).

    >>> js_distance(np.array([0.2, 0.8]), np.array([0.2, 0.8]))
    0.0
    >>> js_distance(np.array([1.0, 0.0]), np.array([0.0, 1.0]))
    1.0
    """
    from scipy.special import rel_entr

    pp = np.asarray(p, dtype=np.float64) / np.sum(p)
    qq = np.asarray(q, dtype=np.float64) / np.sum(q)
    m = (pp + qq) / 2.0
    div = (rel_entr(pp, m).sum() + rel_entr(qq, m).sum()) / (2.0 * np.log(2.0))
    return float(np.sqrt(np.clip(div, 0.0, 1.0)))


def linkage_risk(x: np.ndarray, x_sanitised: np.ndarray, source: np.ndarray) -> float:
    """Share of released rows whose nearest original row is their source (ties split evenly)."""
    from scipy.spatial import cKDTree

    orig = np.asarray(x, dtype=np.float64)
    rel = np.asarray(x_sanitised, dtype=np.float64)
    src = np.asarray(source, dtype=np.int64)
    if len(rel) != len(src) or rel.ndim != 2 or rel.shape[1] != orig.shape[1]:
        raise InputError("linkage risk needs one source index per released row")
    if len(rel) == 0:
        return 0.0
    a, b = _standardise(orig, orig), _standardise(rel, orig)
    tree = cKDTree(a)
    d_min, _ = tree.query(b, k=1)
    d_src = np.linalg.norm(b - a[src], axis=1)
    tol = 1e-9 * (1.0 + d_min)
    hit = d_src <= d_min + tol
    risk = np.zeros(len(b))
    if hit.any():
        counts = tree.query_ball_point(b[hit], r=d_src[hit] + tol[hit], return_length=True)
        risk[hit] = 1.0 / np.maximum(counts, 1)
    return float(risk.mean())


def pair_rows(n: int, m: int, seed: int | None = 0) -> np.ndarray:
    """Indices into an unlinked release of ``m`` rows to pair with ``n`` original rows."""
    if m == 0:
        raise InputError("the release has no rows to evaluate")
    rng = np.random.default_rng(seed)
    return rng.choice(m, size=n, replace=m < n)


def evaluate_release(
    x: np.ndarray,
    released: np.ndarray,
    *,
    source: np.ndarray | None,
    y: np.ndarray | None = None,
    seed: int = 0,
) -> dict[str, float | None]:
    """IL, IL mean, DR (if labels ``y`` are given) and linkage risk (if ``source`` is given).

    ``source[i]`` is the original row released row i came from. Without it rows are paired at
    random (:func:`pair_rows`) for IL/DR and the linkage risk is None.
    """
    x = np.asarray(x, dtype=np.float64)
    released = np.asarray(released, dtype=np.float64)
    if source is not None:
        src = np.asarray(source, dtype=np.int64)
        paired_orig, paired_rel = x[src], released
        link: float | None = linkage_risk(x, released, src)
    else:
        idx = pair_rows(len(x), len(released), seed)
        paired_orig, paired_rel = x, released[idx]
        link = None
    il, il_mean = information_loss(paired_orig, paired_rel)
    dr = None
    if y is not None:
        yy = np.asarray(y)
        y_paired = yy[np.asarray(source, dtype=np.int64)] if source is not None else yy
        dr = disclosure_risk(paired_orig, paired_rel, y_paired, seed=seed)
    return {"il": il, "il_mean": il_mean, "dr": dr, "linkage_risk": link}


def pareto_front(points: Sequence[tuple[float, float]]) -> list[bool]:
    """Mask of points not dominated when both coordinates are to be minimised.

    >>> pareto_front([(1, 3), (2, 2), (3, 1), (3, 3)])
    [True, True, True, False]
    """
    out = []
    for i, (a, b) in enumerate(points):
        dominated = any((c <= a and d <= b) and (c < a or d < b) for j, (c, d) in enumerate(points) if j != i)
        out.append(not dominated)
    return out
