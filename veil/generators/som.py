"""A 1-D self-organising map (SOM) that turns numeric columns into one neuron-index column.

Mohammed, Ayesh & Boiten (2021) keep the numeric columns that k-anonymisation usually drops
(capital gain/loss, hours per week, fnlwgt) by mapping each row to the index of its best-matching
neuron on a 1-D SOM with cosine distance, choosing the neuron count by an exhaustive search for
the highest linear correlation between the neuron index and the label, within curator bounds.

This module implements a **batch SOM** in numpy: columns are standardised (z-scores) and
L2-normalised (cosine distance = 1 − dot product of unit vectors); weights start on the first
principal axis (linear initialisation, so neighbouring neurons start ordered); every epoch
assigns all rows to their best-matching unit at once and sets each neuron to the
neighbourhood-weighted mean of the rows, with a Gaussian neighbourhood shrinking from N/2 to
``sigma_end`` neurons. ``bench/kanon_adult.py`` times it against MiniSom 2.3.6, which updates
one row at a time in Python (see docs/kanon.md for the measured numbers).

The neuron index is *not* a privacy mechanism: it is a deterministic function of the mapped
columns, and the neuron count is chosen with the label. The audit therefore also reports k with
the neuron column treated as a quasi-identifier.

>>> rng = np.random.default_rng(0)
>>> x = np.r_[rng.normal(0, 1, (50, 2)) + [5, 0], rng.normal(0, 1, (50, 2)) + [0, 5]]
>>> som = fit_som(x, 4, seed=0)
>>> idx = som.transform(x)
>>> bool(len(set(idx[:50]) & set(idx[50:])) == 0)
True
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from veil.errors import InputError

__all__ = ["SomModel", "choose_neurons", "fit_som", "neuron_candidates", "som_matrix"]


def som_matrix(frame: Any, columns: Sequence[str]) -> tuple[np.ndarray, dict[str, str]]:
    """The SOM's input matrix from ``columns`` of a DataFrame: numeric columns as they are,
    categorical ones one-hot (one 0/1 column per value; the SOM standardises every column).
    Returns ``(matrix, {column: "numeric" | "one-hot"})``.

    >>> import pandas as pd
    >>> m, kinds = som_matrix(pd.DataFrame({"h": [40, 20], "w": ["a", "b"]}), ["h", "w"])
    >>> m.tolist(), kinds
    ([[40.0, 1.0, 0.0], [20.0, 0.0, 1.0]], {'h': 'numeric', 'w': 'one-hot'})
    """
    import pandas as pd

    parts: list[np.ndarray] = []
    kinds: dict[str, str] = {}
    for col in columns:
        series = frame[col]
        if pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series):
            parts.append(series.to_numpy(dtype=np.float64)[:, None])
            kinds[col] = "numeric"
        else:
            values = series.astype(str).to_numpy()
            cats = np.unique(values)
            parts.append((values[:, None] == cats[None, :]).astype(np.float64))
            kinds[col] = "one-hot"
    if not parts:
        raise InputError("no SOM columns given", hint="Pass --som-columns a,b")
    return np.hstack(parts), kinds


@dataclass(frozen=True)
class SomModel:
    """A fitted 1-D SOM: column means/scales and unit-length neuron weights ``(N, d)``."""

    mean: np.ndarray
    scale: np.ndarray
    weights: np.ndarray

    @property
    def n_neurons(self) -> int:
        return int(self.weights.shape[0])

    def transform(self, x: np.ndarray) -> np.ndarray:
        """Best-matching neuron index (cosine similarity) of every row."""
        u = _unit((np.asarray(x, dtype=np.float64) - self.mean) / self.scale)
        return _bmu(u, self.weights)

    def quantisation_error(self, x: np.ndarray) -> float:
        """Mean cosine distance between rows and their best-matching neuron."""
        u = _unit((np.asarray(x, dtype=np.float64) - self.mean) / self.scale)
        sim = u @ self.weights.T
        return float(np.mean(1.0 - sim.max(axis=1)))


def _unit(x: np.ndarray) -> np.ndarray:
    norm = np.linalg.norm(x, axis=1, keepdims=True)
    return np.divide(x, norm, out=np.zeros_like(x), where=norm > 0)


def _bmu(u: np.ndarray, w: np.ndarray, chunk: int = 65536) -> np.ndarray:
    out = np.empty(len(u), dtype=np.int64)
    wt = w.T.astype(np.float32)
    for s in range(0, len(u), chunk):
        out[s : s + chunk] = np.argmax(u[s : s + chunk].astype(np.float32) @ wt, axis=1)
    return out


def fit_som(
    x: np.ndarray,
    n_neurons: int,
    *,
    epochs: int = 20,
    sigma_end: float = 1.0,
    seed: int | None = None,
) -> SomModel:
    """Fit a 1-D batch SOM with cosine distance to the rows of ``x`` (n, d)."""
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2 or len(x) == 0:
        raise InputError(f"SOM input must be a non-empty 2-D array, got shape {x.shape}")
    if not np.isfinite(x).all():
        raise InputError("SOM input has missing or infinite values", hint="Drop or impute them first")
    if n_neurons < 2:
        raise InputError(f"a SOM needs at least 2 neurons, got {n_neurons}", hint="Raise --som-min-neurons")
    if epochs < 1:
        raise InputError(f"SOM epochs must be at least 1, got {epochs}")
    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale[scale == 0] = 1.0
    z = (x - mean) / scale
    u = _unit(z)
    # linear initialisation along the first principal axis, with a tiny seeded jitter
    from veil.generators.randomness import private_rng

    rng = np.random.default_rng(seed) if seed is not None else private_rng()
    centred = u - u.mean(axis=0)
    _, s, vt = np.linalg.svd(centred[: min(len(u), 20000)], full_matrices=False)
    spread = s[0] / np.sqrt(max(min(len(u), 20000) - 1, 1))
    t = np.linspace(-2.0, 2.0, n_neurons)[:, None]
    w = _unit(u.mean(axis=0) + t * spread * vt[0] + 1e-3 * rng.standard_normal((n_neurons, u.shape[1])))
    grid = np.arange(n_neurons, dtype=np.float64)
    sigma0 = max(n_neurons / 2.0, sigma_end)
    for e in range(epochs):
        sigma = sigma0 * (sigma_end / sigma0) ** (e / max(epochs - 1, 1))
        bmu = _bmu(u, w)
        counts = np.bincount(bmu, minlength=n_neurons).astype(np.float64)
        sums = np.zeros((n_neurons, u.shape[1]))
        for j in range(u.shape[1]):
            sums[:, j] = np.bincount(bmu, weights=u[:, j], minlength=n_neurons)
        h = np.exp(-((grid[:, None] - grid[None, :]) ** 2) / (2.0 * sigma * sigma))
        num = h @ sums
        den = h @ counts
        w = np.where(den[:, None] > 0, num / np.maximum(den, 1e-12)[:, None], w)
        w = _unit(w)
    return SomModel(mean=mean, scale=scale, weights=w)


#: the largest SOM searched (``--som-neurons 100000000:…`` ran out of memory allocating the map; s27 A9)
MAX_NEURONS = 10_000
#: the most maps one search trains
MAX_MAPS = 1_000


def neuron_candidates(lower: int, upper: int, step: int) -> list[int]:
    """The neuron counts searched: ``lower, lower+step, …, ≤ upper`` (the paper: 100..300 by 10).

    >>> neuron_candidates(100, 130, 10)
    [100, 110, 120, 130]
    """
    if lower < 2 or upper < lower or upper > MAX_NEURONS or step < 1 or (upper - lower) // step + 1 > MAX_MAPS:
        raise InputError(
            f"bad SOM neuron bounds: lower={lower}, upper={upper}, step={step}",
            hint=f"Need 2 ≤ lower ≤ upper ≤ {MAX_NEURONS}, step ≥ 1 and at most {MAX_MAPS} counts searched",
        )
    return list(range(lower, upper + 1, step))


def choose_neurons(
    x: np.ndarray,
    label: np.ndarray,
    candidates: Sequence[int],
    *,
    epochs: int = 20,
    seed: int | None = None,
    tick: Callable[[int], None] | None = None,
) -> tuple[SomModel, dict[int, float]]:
    """Fit one SOM per candidate neuron count; keep the one whose neuron index has the largest
    absolute Pearson correlation with ``label`` (numeric, e.g. 0/1). Returns (model, {count: |r|})."""
    y = np.asarray(label, dtype=np.float64)
    if len(y) != len(x):
        raise InputError(f"SOM label has {len(y)} rows but the data has {len(x)}")
    scores: dict[int, float] = {}
    best: tuple[float, SomModel] | None = None
    for n in candidates:
        model = fit_som(x, n, epochs=epochs, seed=seed)
        idx = model.transform(x).astype(np.float64)
        r = 0.0 if idx.std() == 0 or y.std() == 0 else abs(float(np.corrcoef(idx, y)[0, 1]))
        scores[n] = r
        if best is None or r > best[0]:
            best = (r, model)
        if tick is not None:
            tick(1)
    if best is None:
        raise InputError("no SOM neuron counts to search", hint="Check --som-min-neurons/--som-max-neurons")
    return best[1], scores
