"""Distance to closest record (DCR): does a synthetic table reproduce its training rows?

For each synthetic row, the distance to the closest row of the **training** data is compared with
the distance to the closest row of a **holdout** drawn from the same table but never shown to the
generator (the training side subsampled to the holdout's size, so both references are equally
dense). A generator that learned the distribution and not the rows is as close to holdout rows as
to training rows: the share of synthetic rows strictly closer to a training row (ties count half)
is about 1/2, and exact reproductions of training rows are no more frequent than of holdout rows.

Distance: mean over columns of |a − b| / range for numbers (range from the two references), and
0/1 mismatch for everything else (a Gower distance); missing values equal only each other.

The check passes when the share is at most ``1/2 + max(0.05, 4·0.5/√n)`` and the exact-copy rate on
the training side exceeds the holdout's by at most ``4`` binomial standard errors (plus ``1/n``),
with ``n`` the smaller of the synthetic sample and the reference samples: a generator that does not
memorise is refused with probability about 3·10⁻⁵ (normal approximation).

>>> rng = np.random.default_rng(0)
>>> train = pd.DataFrame({"x": rng.normal(size=400), "c": rng.choice(list("ab"), 400)})
>>> hold = pd.DataFrame({"x": rng.normal(size=400), "c": rng.choice(list("ab"), 400)})
>>> fresh = pd.DataFrame({"x": rng.normal(size=400), "c": rng.choice(list("ab"), 400)})
>>> dcr_check(fresh, train, hold, rng=np.random.default_rng(1)).passed
True
>>> dcr_check(train, train, hold, rng=np.random.default_rng(1)).passed  # a copy of the training rows
False
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["DcrReport", "dcr_check", "nearest_distances"]

#: Rows of each side compared at most (subsampled beyond): keeps the check to about a second.
MAX_ROWS = 2000


@dataclass(frozen=True)
class DcrReport:
    rows: int  # synthetic rows compared
    reference_rows: int  # rows on each reference side
    share_closer_to_train: float
    share_limit: float
    exact_train_rate: float
    exact_holdout_rate: float
    exact_limit: float
    median_dcr_train: float
    median_dcr_holdout: float
    passed: bool

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _encode(frames: list[pd.DataFrame], columns: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Numeric block scaled to [0, 1] by the joint range, and an integer-coded categorical block."""
    num_cols = [
        c for c in columns if all(pd.api.types.is_numeric_dtype(f[c]) and not pd.api.types.is_bool_dtype(f[c]) for f in frames)
    ]
    cat_cols = [c for c in columns if c not in num_cols]
    joined = pd.concat([f[columns] for f in frames], ignore_index=True)
    num = joined[num_cols].to_numpy(dtype=np.float64) if num_cols else np.zeros((len(joined), 0))
    if num_cols:
        lo, hi = np.nanmin(num, axis=0), np.nanmax(num, axis=0)
        span = np.where(hi > lo, hi - lo, 1.0)
        num = (num - lo) / span
        num = np.where(np.isnan(num), -1e6, num)  # missing numbers equal only each other
    cat = np.zeros((len(joined), len(cat_cols)), dtype=np.int64)
    for j, c in enumerate(cat_cols):
        cat[:, j] = pd.factorize(joined[c].astype(str).where(joined[c].notna(), "\x00na"))[0]
    return num, cat


def nearest_distances(query: tuple[np.ndarray, np.ndarray], ref: tuple[np.ndarray, np.ndarray], n_cols: int) -> np.ndarray:
    """For each query row, the Gower distance to its closest reference row (chunked)."""
    qn, qc = query
    rn, rc = ref
    out = np.empty(len(qn))
    step = max(1, 4_000_000 // max(1, len(rn) * max(1, n_cols)))
    for a in range(0, len(qn), step):
        d = np.zeros((min(step, len(qn) - a), len(rn)))
        if qn.shape[1]:
            d += np.abs(qn[a : a + step, None, :] - rn[None, :, :]).clip(max=1.0).sum(axis=2)
        if qc.shape[1]:
            d += (qc[a : a + step, None, :] != rc[None, :, :]).sum(axis=2)
        out[a : a + step] = d.min(axis=1) / max(1, n_cols)
    return out


def dcr_check(synthetic: pd.DataFrame, train: pd.DataFrame, holdout: pd.DataFrame, *, rng: np.random.Generator) -> DcrReport:
    """Compare ``synthetic`` rows' closest-record distances to ``train`` and ``holdout`` (columns of
    ``synthetic`` that all three share)."""
    columns = [c for c in synthetic.columns if c in train.columns and c in holdout.columns]
    m = min(len(holdout), len(train), MAX_ROWS)
    syn = synthetic.iloc[rng.permutation(len(synthetic))[:MAX_ROWS]] if len(synthetic) > MAX_ROWS else synthetic
    tr = train.iloc[rng.permutation(len(train))[:m]]
    ho = holdout.iloc[rng.permutation(len(holdout))[:m]]
    num, cat = _encode([syn, tr, ho], columns)
    n_s, n_t = len(syn), len(tr)
    s = (num[:n_s], cat[:n_s])
    t = (num[n_s : n_s + n_t], cat[n_s : n_s + n_t])
    h = (num[n_s + n_t :], cat[n_s + n_t :])
    d_t = nearest_distances(s, t, len(columns))
    d_h = nearest_distances(s, h, len(columns))
    # the references' own randomness dominates when they are smaller than the synthetic sample
    n = max(1, min(len(d_t), m))
    share = float(np.mean(np.where(d_t < d_h, 1.0, np.where(d_t == d_h, 0.5, 0.0)))) if len(d_t) else 0.5
    share_limit = 0.5 + max(0.05, 4 * 0.5 / math.sqrt(n))
    exact_t = float(np.mean(d_t == 0)) if len(d_t) else 0.0
    exact_h = float(np.mean(d_h == 0)) if len(d_h) else 0.0
    pooled = (exact_t + exact_h) / 2
    exact_limit = exact_h + 4 * math.sqrt(max(pooled * (1 - pooled), 0.0) * 2 / n) + 1 / n
    return DcrReport(
        rows=len(d_t),
        reference_rows=m,
        share_closer_to_train=share,
        share_limit=share_limit,
        exact_train_rate=exact_t,
        exact_holdout_rate=exact_h,
        exact_limit=exact_limit,
        median_dcr_train=float(np.median(d_t)) if len(d_t) else 0.0,
        median_dcr_holdout=float(np.median(d_h)) if len(d_h) else 0.0,
        passed=share <= share_limit and exact_t <= exact_limit,
    )
