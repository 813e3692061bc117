"""Distance to closest record (DCR): does a synthetic table reproduce its training rows?

The source rows were split at random into **training** rows (shown to the generator) and a **holdout** (never
shown). A generator that learned the distribution and not the rows produces the same table whichever rows the split
put on the training side; so, for any set ``D`` of source rows chosen by looking at the synthetic table and the
*unsplit* source, the number of training rows in ``D`` follows (at most as widely as) ``Binomial(|D|, p)`` with
``p`` the training share of the source. Two such sets, each over **all** source rows (never a subsample of the
training side: a copy of a training row left out of the subsample counted as fresh, red team s64 F8):

* **exact copies** — the source rows equal to some synthetic row (every synthetic row, every source row; an exact
  match set over the rows' values). A verbatim copy of a training row adds a training row to ``D`` and never a
  holdout row; a chance match (a small domain) adds training and holdout rows in proportion ``p``;
* **nearest records** — the source rows nearest to some synthetic row (ties: all of them), for up to
  :data:`MAX_ROWS` synthetic rows against up to :data:`MAX_SOURCE_ROWS` source rows (subsampled from training and
  holdout *together*, which keeps the law above).

Distance: mean over columns of ``|a − b| / range`` for numbers (range from all the rows), and 0/1 mismatch for
everything else (a Gower distance); missing values equal only each other.

The check refuses when the training share of either set is significantly above ``p``: its one-sided binomial tail
probability is below :data:`ALPHA` (``10⁻⁶``) and the share exceeds the tolerance :data:`NEAREST_ODDS` (training
odds 1.22 times ``p``'s, the former ``0.55`` of equal-size references: a generator slightly closer to its training
rows, or slightly likelier to draw a combination it saw, passes). A generator that does not memorise is refused
with probability at most ``2·10⁻⁶`` (the two tails; the split's hypergeometric law is narrower than the
binomial). Power: 120 copied training rows of 150 are refused (tail ``0.8¹²⁰ ≈ 2·10⁻¹²``), and 300 copied
rows among 10,000 synthetic ones of a 10,000-row source.

>>> rng = np.random.default_rng(0)
>>> train = pd.DataFrame({"x": rng.normal(size=400), "c": rng.choice(list("ab"), 400)})
>>> hold = pd.DataFrame({"x": rng.normal(size=100), "c": rng.choice(list("ab"), 100)})
>>> fresh = pd.DataFrame({"x": rng.normal(size=400), "c": rng.choice(list("ab"), 400)})
>>> dcr_check(fresh, train, hold, rng=np.random.default_rng(1)).passed
True
>>> dcr_check(train, train, hold, rng=np.random.default_rng(1)).passed  # a copy of the training rows
False
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["DcrReport", "dcr_check", "nearest_distances"]

#: Synthetic rows whose nearest records are looked up at most (subsampled beyond); exact copies: every row.
MAX_ROWS = 2000
#: Source rows (training and holdout together) the nearest records are looked up among at most.
MAX_SOURCE_ROWS = 50_000
#: The false-refusal probability of each of the two tests.
ALPHA = 1e-6
#: A training share is refused only above the share whose training odds are this many times ``p``'s.
NEAREST_ODDS = 1.22


@dataclass(frozen=True)
class DcrReport:
    rows: int  # synthetic rows whose nearest records were looked up
    reference_rows: int  # source rows (training and holdout) they were looked up among
    train_share: float  # p: the training rows' share of the source
    nearest_records: int  # |D|: source rows nearest to some synthetic row
    share_closer_to_train: float  # the training share of those
    share_limit: float
    exact_copies: int  # source rows equal to some synthetic row (every row of both)
    exact_train_rate: float  # the training share of those
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
    return _nearest(query, ref, n_cols)[0]


#: Below this many numeric columns numpy sums a row's columns left to right, which :func:`_nearest`'s column-at-a-time
#: sum repeats (the same distances, bit for bit, as the one-array sum it replaced); from it on numpy sums pairwise.
_SUM_IN_ORDER = 8


def _nearest(
    query: tuple[np.ndarray, np.ndarray], ref: tuple[np.ndarray, np.ndarray], n_cols: int, member: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(distances, hit, to_members, to_others)``: each query row's Gower distance to its closest reference row,
    which reference rows are closest to some query row (all of them on a tie), and each query row's distance to its
    closest reference row inside / outside ``member`` (a mask of the reference rows; inf where none)."""
    qn, qc = query
    rn, rc = ref
    member = np.ones(len(rn), dtype=bool) if member is None else member
    # the members first: the two minima below read slices of each chunk, not copies; ``hit`` is put back in order
    order = np.r_[np.flatnonzero(member), np.flatnonzero(~member)]
    n_in = int(member.sum())
    rn, rc = rn[order], rc[order]
    rn_t, rc_t = np.ascontiguousarray(rn.T), np.ascontiguousarray(rc.T)
    out = np.empty(len(qn))
    inside = np.full(len(qn), np.inf)
    outside = np.full(len(qn), np.inf)
    hit = np.zeros(len(rn), dtype=bool)
    step = max(1, 4_000_000 // max(1, len(rn) * max(1, n_cols)))
    scale = max(1, n_cols)
    for a in range(0, len(qn), step):
        q_n, q_c = qn[a : a + step], qc[a : a + step]
        if q_n.shape[1] >= _SUM_IN_ORDER:  # numpy's own (pairwise) sum over the columns
            d = np.abs(q_n[:, None, :] - rn[None, :, :]).clip(max=1.0).sum(axis=2)
        elif q_n.shape[1]:  # one column at a time (no query × reference × column array), summed in numpy's order
            d = np.minimum(np.abs(q_n[:, 0, None] - rn_t[0][None, :]), 1.0)
            for j in range(1, q_n.shape[1]):
                d += np.minimum(np.abs(q_n[:, j, None] - rn_t[j][None, :]), 1.0)
        else:
            d = np.zeros((len(q_n), len(rn)))
        if q_c.shape[1]:
            mismatches = np.zeros(d.shape, dtype=np.int64)
            for j in range(q_c.shape[1]):
                mismatches += q_c[:, j, None] != rc_t[j][None, :]
            d += mismatches
        low = d.min(axis=1) if len(rn) else np.full(len(d), np.inf)
        out[a : a + step] = low / scale
        if len(rn):
            hit[order] |= (d <= low[:, None] + 1e-9).any(axis=0)
        if n_in:
            inside[a : a + step] = d[:, :n_in].min(axis=1) / scale
        if n_in < len(rn):
            outside[a : a + step] = d[:, n_in:].min(axis=1) / scale
    return out, hit, inside, outside


def _row_keys(num: np.ndarray, cat: np.ndarray) -> np.ndarray:
    """One 64-bit hash per encoded row (equal rows, equal keys; a collision has probability about n²/2⁶⁴)."""
    num = np.ascontiguousarray(num + 0.0)  # −0.0 and 0.0 alike
    frame = pd.DataFrame(np.column_stack([num.view(np.int64), cat]))
    return pd.util.hash_pandas_object(frame, index=False).to_numpy()


def _limit(count: int, p: float) -> float:
    """The largest training share of ``count`` rows whose one-sided Binomial(count, p) tail is at least ALPHA."""
    from scipy.stats import binom

    if count == 0:
        return 1.0
    return float(binom.isf(ALPHA, count, p)) / count


def dcr_check(synthetic: pd.DataFrame, train: pd.DataFrame, holdout: pd.DataFrame, *, rng: np.random.Generator) -> DcrReport:
    """Whether ``synthetic`` reproduces rows of ``train`` more than rows of ``holdout`` (the module docstring's two
    tests, on the columns all three share)."""
    columns = [c for c in synthetic.columns if c in train.columns and c in holdout.columns]
    n_t, n_h = len(train), len(holdout)
    p = n_t / max(1, n_t + n_h)
    num, cat = _encode([synthetic, train, holdout], columns)
    n_s = len(synthetic)
    in_train = np.r_[np.ones(n_t, dtype=bool), np.zeros(n_h, dtype=bool)]
    # exact copies: every synthetic row against every source row
    keys = _row_keys(num, cat)
    copied = np.isin(keys[n_s:], keys[:n_s])
    exact_n = int(copied.sum())
    exact_t = float(in_train[copied].mean()) if exact_n else 0.0
    odds = NEAREST_ODDS * p / max(1e-12, 1 - p)
    exact_limit = max(odds / (1 + odds), _limit(exact_n, p))
    # nearest records: a sample of the synthetic rows against a sample of the source rows, drawn together
    pick_s = rng.permutation(n_s)[:MAX_ROWS] if n_s > MAX_ROWS else np.arange(n_s)
    pick_r = rng.permutation(n_t + n_h)[:MAX_SOURCE_ROWS] if n_t + n_h > MAX_SOURCE_ROWS else np.arange(n_t + n_h)
    s = (num[pick_s], cat[pick_s])
    r = (num[n_s:][pick_r], cat[n_s:][pick_r])
    member = in_train[pick_r]
    _, hit, d_t, d_h = _nearest(s, r, len(columns), member)
    near_n = int(hit.sum())
    share = float(member[hit].mean()) if near_n else p
    share_limit = max(odds / (1 + odds), _limit(near_n, p))
    return DcrReport(
        rows=len(pick_s),
        reference_rows=len(pick_r),
        train_share=p,
        nearest_records=near_n,
        share_closer_to_train=share,
        share_limit=share_limit,
        exact_copies=exact_n,
        exact_train_rate=exact_t,
        exact_holdout_rate=(1.0 - exact_t) if exact_n else 0.0,
        exact_limit=exact_limit,
        median_dcr_train=float(np.median(d_t)) if len(d_t) and np.isfinite(d_t).all() else 0.0,
        median_dcr_holdout=float(np.median(d_h)) if len(d_h) and np.isfinite(d_h).all() else 0.0,
        passed=share <= share_limit and exact_t <= exact_limit,
    )
