"""Baselines a PU attack must beat: k-means, the projection floor, and the supervised oracle."""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from veil.auditor.pu.models import PUResult, model_scorer, scores, validate
from veil.auditor.pu.training import init_model
from veil.errors import InputError

__all__ = ["kmeans_attack", "oracle", "projection_floor"]


def kmeans_attack(X: np.ndarray, mean: np.ndarray, *, prior: float = 0.5, seed: int | None = None) -> PUResult:
    """K-means with k=2; the cluster whose centroid is nearer the released mean is positive.

    The score is ``dist(x, other centroid) - dist(x, positive centroid)``: > 0 exactly for
    the records k-means assigns to the positive cluster.
    """
    from sklearn.cluster import KMeans

    X, mean = validate(X, mean, prior)
    t0 = time.perf_counter()
    km = KMeans(n_clusters=2, n_init=10, random_state=np.random.default_rng(seed).integers(2**31))
    km.fit(X.astype(np.float64))
    c = km.cluster_centers_
    pos = int(np.argmin(np.linalg.norm(c - mean.astype(np.float64), axis=1)))

    def score(Z: np.ndarray) -> np.ndarray:
        d = np.stack([np.linalg.norm(Z.astype(np.float64) - c[j], axis=1) for j in (0, 1)], axis=1)
        return d[:, 1 - pos] - d[:, pos]

    return PUResult("kmeans", None, score(X), time.perf_counter() - t0, (), {"positive_cluster": pos}, score)


def projection_floor(X: np.ndarray, mean: np.ndarray, *, prior: float) -> PUResult:
    """The floor an attack must beat: project on (released mean - table mean), top ``prior`` share positive.

    With ``prior`` known, the table mean and the class mean determine the other class's mean
    (``mu_N = (mu_X - pi mu_P) / (1 - pi)``), so a released mean is effectively two-sided.
    """
    X, mean = validate(X, mean, prior)
    t0 = time.perf_counter()
    direction = mean.astype(np.float64) - X.mean(0, dtype=np.float64)
    proj = X.astype(np.float64) @ direction
    k = min(max(round(prior * X.shape[0]), 1), X.shape[0] - 1)
    order = np.argsort(-proj, kind="stable")
    threshold = (proj[order[k - 1]] + proj[order[k]]) / 2.0
    out = proj - threshold
    # ties at the threshold (one-hot data): exactly k positives, ties broken by record order
    tiny = np.finfo(np.float64).tiny
    top = np.zeros(len(proj), bool)
    top[order[:k]] = True
    out[top & (out <= 0)] = tiny
    out[~top & (out > 0)] = -tiny
    info: dict[str, object] = {"direction_norm": float(np.linalg.norm(direction))}

    def score(Z: np.ndarray) -> np.ndarray:
        return Z.astype(np.float64) @ direction - threshold

    return PUResult("floor", None, out, time.perf_counter() - t0, (), info, score)


def oracle(
    X: np.ndarray,
    truth: np.ndarray,
    *,
    classifier: str = "linear",
    hidden: Sequence[int] | None = None,
    seed: int | None = None,
    steps: int = 2000,
    batch_size: int = 500,
    lr: float = 1e-3,
    weight_decay: float = 0.0,
) -> PUResult:
    """Supervised upper bound: the same classifier trained on the true labels (logistic loss).

    ``steps`` Adam steps on shuffled minibatches (2,000 = 100 epochs of MNIST 5 vs 3).
    Accuracy is transductive (training records = attacked records), like the paper's table.
    """
    X = np.require(X, dtype=np.float32, requirements=["C", "W"])
    truth = np.asarray(truth, dtype=bool).reshape(-1)
    if truth.shape[0] != X.shape[0]:
        raise InputError(f"truth has {truth.shape[0]} labels for {X.shape[0]} records")
    if steps < 1 or batch_size < 1:
        raise InputError(f"steps and batch_size must be >= 1, got {steps}, {batch_size}")
    t0 = time.perf_counter()
    model, opt, rng = init_model(seed, classifier, X.shape[1], hidden, lr, weight_decay)
    Xt = torch.from_numpy(X)
    yt = torch.from_numpy(truth.astype(np.float32))
    n = X.shape[0]
    lossf = nn.BCEWithLogitsLoss()
    done = 0
    while done < steps:
        order = torch.from_numpy(rng.permutation(n))
        for s in range(0, n, batch_size):
            if done == steps:
                break
            i = order[s : s + batch_size]
            opt.zero_grad()
            lossf(model(Xt[i]).reshape(-1), yt[i]).backward()
            opt.step()
            done += 1
    final = scores(model, Xt).numpy().astype(np.float64)
    return PUResult("oracle", classifier, final, time.perf_counter() - t0, (), {"steps": steps}, model_scorer(model))
