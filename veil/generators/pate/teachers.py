"""Curator A's side of PATE: teacher training on disjoint shards (:mod:`~veil.generators.pate.split`), vote
counts and the noisy plurality ``argmax_c(n_c(x) + Lap(1/γ))`` drawn through :func:`veil.mechanisms.laplace`.

A teacher whose shard is empty *abstains*: it votes for no class. One person joining or leaving then moves
a query's vote histogram by at most 2 in L1 (one teacher changes its vote) or 1 (a teacher starts or stops
voting), within the sensitivity the accountant assumes.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from sklearn.linear_model import LogisticRegression
from threadpoolctl import threadpool_limits

from veil.errors import InputError
from veil.mechanisms import laplace

# --------------------------------------------------------------------------- curator A: teachers


@dataclass(frozen=True)
class TeacherEnsemble:
    """Teachers as stacked linear models: teacher ``i`` votes ``argmax_c (X @ W[i] + b[i])[c]``.

    A teacher whose shard held one class only votes that class (its weights are zero, its bias one-hot);
    a teacher whose shard was empty abstains (``shard_sizes[i] == 0``: it votes for no class).
    """

    classes: tuple[Any, ...]
    weights: np.ndarray  # (teachers, width, classes)
    biases: np.ndarray  # (teachers, classes)
    shard_sizes: tuple[int, ...]
    train_seconds: float

    @property
    def n_teachers(self) -> int:
        return int(self.weights.shape[0])


def train_teachers(
    X: np.ndarray,
    y: np.ndarray,
    shards: Sequence[np.ndarray],
    *,
    classes: Sequence[Any],
    C: float = 1.0,
    progress: bool = True,
) -> TeacherEnsemble:
    """Train one L2-regularised logistic regression per shard (``y`` holds class indices 0..k-1)."""
    from veil._progress import progress as progress_bar

    Xa = np.asarray(X, dtype=np.float64)
    ya = np.asarray(y)
    k = len(classes)
    if k < 2:
        raise InputError(f"PATE needs at least 2 label classes, got {list(classes)}")
    if ya.size and (ya.min() < 0 or ya.max() >= k):
        raise InputError("teacher labels must be class indices 0..k-1")
    W = np.zeros((len(shards), Xa.shape[1], k))
    B = np.zeros((len(shards), k))
    start = time.perf_counter()
    bar = progress_bar(shards, desc="training teachers", unit="teacher") if progress else shards
    # Each shard is tiny: BLAS/OpenMP threads only add overhead (13x slower measured on a loaded 2-core host).
    # threadpool_limits is scoped: the previous limits come back when the block ends.
    with threadpool_limits(limits=1):
        _fit_shards(Xa, ya, shards, bar, W, B, k, C)
    return TeacherEnsemble(
        classes=tuple(classes),
        weights=W,
        biases=B,
        shard_sizes=tuple(len(s) for s in shards),
        train_seconds=time.perf_counter() - start,
    )


def _fit_shards(
    Xa: np.ndarray, ya: np.ndarray, shards: Sequence[np.ndarray], bar: Any, W: np.ndarray, B: np.ndarray, k: int, C: float
) -> None:
    for i, rows in enumerate(bar):
        present = np.unique(ya[rows])
        if len(present) == 0:  # an empty shard: the teacher abstains (vote_counts skips it)
            continue
        if len(present) == 1:
            B[i, present[0]] = 1.0
            continue
        model = LogisticRegression(C=C, max_iter=200)
        model.fit(Xa[rows], ya[rows])
        cls = model.classes_.astype(int)
        if len(cls) == 2:  # binary sklearn model: one coefficient row for class cls[1]
            W[i, :, cls[1]] = model.coef_[0]
            B[i, cls[1]] = model.intercept_[0]
            B[i, cls[0]] = 0.0
            W[i, :, [c for c in range(k) if c not in cls]] = 0.0
            B[i, [c for c in range(k) if c not in cls]] = -np.inf
        else:
            absent = [c for c in range(k) if c not in cls]
            W[i][:, cls] = model.coef_.T
            B[i, cls] = model.intercept_
            B[i, absent] = -np.inf


def vote_counts(ensemble: TeacherEnsemble, X: np.ndarray) -> np.ndarray:
    """``n_c(x)``: how many teachers vote for each class, one row per record (int64; rows sum to the number
    of teachers with a non-empty shard: an empty one abstains)."""
    Xa = np.asarray(X, dtype=np.float64)
    k = len(ensemble.classes)
    counts = np.zeros((Xa.shape[0], k), dtype=np.int64)
    for W, b, size in zip(ensemble.weights, ensemble.biases, ensemble.shard_sizes, strict=True):
        if size == 0:
            continue
        with np.errstate(invalid="ignore"):
            scores = Xa @ W + b
        votes = np.argmax(scores, axis=1)
        counts[np.arange(len(votes)), votes] += 1
    return counts


def noisy_aggregate(counts: np.ndarray, *, gamma: float, rng: np.random.Generator | None = None) -> np.ndarray:
    """Eq. (5): ``argmax_c(n_c(x) + Lap(1/γ))`` per row; the noise comes from :func:`veil.mechanisms.laplace`."""
    if isinstance(gamma, bool) or not isinstance(gamma, (int, float)) or not math.isfinite(gamma) or gamma <= 0:
        raise InputError(f"gamma must be a finite number > 0, got {gamma!r}")
    noisy = laplace(np.asarray(counts, dtype=np.float64), scale=1.0 / float(gamma), rng=rng)
    return np.argmax(noisy, axis=1)
