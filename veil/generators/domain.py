"""Declared domains and row order of released tables (shared by the generator algorithms).

A released value must lie in its column's declared domain (the policy's ``lower``/``upper``): no
age of −18 because Gaussian noise was added, no negative capital gain from a GAN. Where the policy
declares no bounds for a column, the observed range of the source column is used instead (and
reported as ``"observed"``: it is computed from the private data, so declare bounds to avoid it).

Rows are released in an order drawn from the operating system's CSPRNG, never in source order
(a row's position would otherwise link it back to its source record).

>>> lo, hi, kinds = column_domain(np.array([[1.0], [5.0]]), ("age",), {"age": (0.0, 3.0)})
>>> lo.tolist(), hi.tolist(), kinds
([0.0], [3.0], {'age': 'declared'})
>>> clip_into(np.array([[-1.0], [4.0]]), lo, hi)[0][:, 0].tolist()
[0.0, 3.0]
>>> sorted(csprng_permutation(5).tolist())
[0, 1, 2, 3, 4]
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from veil.errors import InputError

__all__ = ["clip_into", "column_domain", "csprng_permutation", "resample_into"]


def column_domain(
    x: np.ndarray, columns: Sequence[str], bounds: Mapping[str, tuple[float, float]]
) -> tuple[np.ndarray, np.ndarray, dict[str, str]]:
    """``(lower, upper, kinds)`` per column: the declared bounds, else the observed min/max of ``x``.

    ``kinds[c]`` is ``"declared"`` or ``"observed"``.
    """
    x = np.asarray(x, dtype=np.float64)
    lower = np.empty(len(columns))
    upper = np.empty(len(columns))
    kinds: dict[str, str] = {}
    for j, c in enumerate(columns):
        if c in bounds:
            lo, hi = (float(v) for v in bounds[c])
            if not (np.isfinite(lo) and np.isfinite(hi)) or hi < lo:
                raise InputError(
                    f"the declared domain of {c!r} is [{lo}, {hi}]",
                    hint="Declare finite bounds with lower ≤ upper in the policy",
                )
            kinds[c] = "declared"
        else:
            col = x[:, j] if len(x) else np.zeros(1)
            lo, hi = float(np.min(col)), float(np.max(col))
            kinds[c] = "observed"
        lower[j], upper[j] = lo, hi
    return lower, upper, kinds


def clip_into(values: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(clipped, n_moved)``: values clamped into ``[lower, upper]`` per column, and how many moved per column."""
    v = np.asarray(values, dtype=np.float64)
    out = np.clip(v, lower, upper)
    return out, (out != v).sum(axis=0)


def resample_into(
    values: np.ndarray,
    redraw: Callable[[np.ndarray], np.ndarray],
    lower: np.ndarray,
    upper: np.ndarray,
    *,
    rounds: int = 64,
) -> tuple[np.ndarray, np.ndarray]:
    """Redraw out-of-domain values with ``redraw(mask) → new values for mask`` (rejection sampling:
    the result follows the original distribution truncated to the domain), at most ``rounds`` times;
    whatever is still outside is clamped. Returns ``(values, n_redrawn_or_clamped per column)``."""
    out = np.array(values, dtype=np.float64, copy=True)
    bad = (out < lower) | (out > upper)
    touched = bad.copy()
    for _ in range(rounds):
        if not bad.any():
            break
        out[bad] = redraw(bad)
        bad = (out < lower) | (out > upper)
    out = np.clip(out, lower, upper)
    return out, touched.sum(axis=0)


def csprng_permutation(n: int, rng: np.random.Generator | None = None) -> np.ndarray:
    """A uniformly random permutation of ``range(n)`` from the OS CSPRNG (``rng``: tests only).

    Sorting by independent 64-bit keys is exactly uniform unless two keys collide (probability
    below n²/2⁶⁵); collisions are broken by a second draw.
    """
    if rng is not None:
        return rng.permutation(n)
    if n <= 1:
        return np.arange(n)
    keys = np.frombuffer(os.urandom(16 * n), dtype=np.uint64).reshape(n, 2)
    return np.lexsort((keys[:, 1], keys[:, 0]))
