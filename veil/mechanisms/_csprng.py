"""Vectorised exact sampling from the operating system's CSPRNG (``os.urandom``).

Used where OpenDP has no vectorised sampler (uniform integers, Bernoulli draws for
randomized response). No floating-point inverse-CDF is involved: draws are integers
compared with integer thresholds.
"""

from __future__ import annotations

import os
from fractions import Fraction

import numpy as np

__all__ = ["bernoulli", "uniform_ints"]


def _u64(n: int) -> np.ndarray:
    return np.frombuffer(os.urandom(8 * n), dtype=np.uint64).copy()


def uniform_ints(n: int, high: int) -> np.ndarray:
    """``n`` integers uniform on ``[0, high)``, by rejection sampling (exact)."""
    if high < 1:
        raise ValueError(f"high must be ≥ 1, got {high}")
    if high == 1:
        return np.zeros(n, dtype=np.int64)
    limit = (2**64 // high) * high  # accept u < limit, then u % high is exactly uniform
    out = np.empty(n, dtype=np.int64)
    filled = 0
    while filled < n:
        need = n - filled
        u = _u64(need + need // 8 + 8)
        u = u[u < np.uint64(limit)] if limit < 2**64 else u
        take = u[:need]
        out[filled : filled + len(take)] = (take % np.uint64(high)).astype(np.int64)
        filled += len(take)
    return out


def bernoulli(n: int, p: Fraction) -> np.ndarray:
    """``n`` Bernoulli draws with probability ``p`` rounded down to a multiple of 2⁻⁶⁴.

    The realised probability is ``floor(p·2⁶⁴)/2⁶⁴``; callers that need the exact guarantee
    compute it from :func:`realised_probability`.
    """
    threshold = (p.numerator << 64) // p.denominator
    if threshold >= 2**64:
        return np.ones(n, dtype=bool)
    return _u64(n) < np.uint64(threshold)


def realised_probability(p: Fraction) -> Fraction:
    """The probability :func:`bernoulli` actually uses for ``p``."""
    return Fraction(min((p.numerator << 64) // p.denominator, 2**64), 2**64)
