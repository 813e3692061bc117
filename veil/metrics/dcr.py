"""Distance to closest record (DCR): does a synthetic table reproduce its training rows, or come nearer to them?

The source rows were split at random into **training** rows (shown to the generator) and a **holdout** (never
shown). A generator that learned the distribution and not the rows produces the same table whichever rows the split
put on the training side; so, for any set ``D`` of source rows chosen by looking at the synthetic table and the
*unsplit* source, the number of training rows in ``D`` is hypergeometric: ``|D|`` draws from the source rows, of which
a share ``p`` are training rows. Two families of such sets, each over **all** source rows (never a subsample of the
training side: a copy of a training row left out of the subsample counted as fresh, red team s64 F8):

* **exact copies** — the source rows equal to some synthetic row (every synthetic row, every source row; an exact
  match set over the rows' values). A verbatim copy of a training row adds a training row to ``D`` and never a
  holdout row; a chance match (a small domain) adds training and holdout rows in proportion ``p``;
* **near records** — each source row's distance to its nearest synthetic row (its DCR seen from the source), for up
  to :data:`MAX_ROWS` synthetic rows (:data:`MAX_BLOCK_ROWS` where the distances are computed in blocks) and
  :data:`MAX_SOURCE_ROWS` source rows (subsampled from training and holdout *together*, which keeps the law above);
  ``D_K`` is the ``K`` source rows nearest to the synthetic table (ties at the ``K``-th distance all in), for ``K`` =
  32, 64, 128, … below the number of source rows, under the Gower distance and under each distance that weighs one
  column :data:`DISCOUNT` (a copy with that one value moved, however far, is near under it). A memorising generator
  puts its training rows' copies — exact or one value off — at the head of that ranking, holdout rows never; a fresh
  generator's nearest source rows are training rows in proportion ``p``. This is the "closer to training than to
  holdout" test asked *how near*, with an exact null: the former test counted which source rows are nearest to some
  synthetic row, never how near, and once the synthetic table outnumbers the source nearly every source row is
  someone's nearest record, so a near copy (one value moved by one unit) of every training row passed (red team s66
  F2). Per synthetic row (is its nearest training record nearer than its nearest holdout record?) the rows share
  nearest records, so their verdicts are not independent and a binomial test over them has no stated error rate;
  the shares are recorded (``share_closer_to_train``, ``median_dcr_train`` / ``median_dcr_holdout``), not tested.

Distance: mean over columns of ``|a − b| / range`` for numbers (range from all the rows), and 0/1 mismatch for
everything else (a Gower distance); missing values equal only each other (a missing and a present number: 1).
Rows that are points of at most 16 dimensions (numbers, plus each category's values one-hot) without missing numbers
are compared through k-d trees (L1): 10,000 synthetic rows against 10,000 source rows of 3 columns in under a second;
others exactly in blocks (float32), 2,000 synthetic rows against 10,000 source rows of 8 categorical columns in about
3 seconds (a loaded 2-core host).

The check refuses when the training share of the exact-copy set, or of any ``D_K``, is significantly above ``p``:
its one-sided hypergeometric tail probability is below :data:`ALPHA` (``10⁻⁶``; for the ``D_K``, ``10⁻⁶`` over the
number of ``K`` tried, Bonferroni) and the share exceeds the tolerance :data:`NEAREST_ODDS` (training odds 1.22 times
``p``'s: a generator slightly closer to its training rows, or slightly likelier to draw a combination it saw,
passes). A generator whose output does not depend on the split is refused with probability at most ``2·10⁻⁶``
(measured: none of 900 fresh or whole-source resampled tables of three kinds; the smallest corrected tail 0.015).
Power: 120 copied training rows of 150 are refused, 300 copied rows among 10,000 synthetic ones of a 10,000-row
source, and a near copy (one column one unit off) of every training row, or of 10 % of the synthetic rows
(``tests/test_synth_dcr_near_copies.py``).

>>> rng = np.random.default_rng(0)
>>> train = pd.DataFrame({"x": rng.normal(size=400), "c": rng.choice(list("ab"), 400)})
>>> hold = pd.DataFrame({"x": rng.normal(size=100), "c": rng.choice(list("ab"), 100)})
>>> fresh = pd.DataFrame({"x": rng.normal(size=400), "c": rng.choice(list("ab"), 400)})
>>> dcr_check(fresh, train, hold, rng=np.random.default_rng(1)).passed
True
>>> dcr_check(train, train, hold, rng=np.random.default_rng(1)).passed  # a copy of the training rows
False
>>> near = train.assign(x=train["x"] + 1e-3)  # every training row, one value moved a little
>>> dcr_check(near, train, hold, rng=np.random.default_rng(1)).passed
False
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["DcrReport", "dcr_check", "nearest_distances"]

#: Synthetic rows compared with the source rows at most (subsampled beyond); exact copies: every row.
MAX_ROWS = 10_000
#: Synthetic rows compared at most where the distances are computed in blocks (many dimensions, or missing numbers).
MAX_BLOCK_ROWS = 2000
#: Source rows (training and holdout together) compared at most.
MAX_SOURCE_ROWS = 20_000
#: The false-refusal probability of each of the two tests (exact copies; near records, over all its ``K``).
ALPHA = 1e-6
#: A training share is refused only above the share whose training odds are this many times ``p``'s.
NEAREST_ODDS = 1.22
#: The smallest near-record set tested; then twice as many, up to the number of source rows.
FIRST_K = 32
#: The weight of the moved column in the one-column-discounted distances (a near copy with one value moved).
DISCOUNT = 1e-3
#: Rows are compared through k-d trees up to this many dimensions (numbers, plus each category's values), else in
#: blocks.
_TREE_DIMENSIONS = 16
#: Distance-matrix entries computed at once.
_BLOCK = 2_000_000


@dataclass(frozen=True)
class DcrReport:
    rows: int  # synthetic rows compared
    reference_rows: int  # source rows (training and holdout) they were compared with
    train_share: float  # p: the training rows' share of those source rows
    nearest_records: int  # |D_K| of the near-record set with the smallest tail probability
    near_train_share: float  # the training share of that set
    share_limit: float  # the share it is refused above (the larger of the tolerance and its tail limit)
    near_tail: float  # its one-sided hypergeometric tail probability
    near_sets: int  # how many near-record sets were tested (the Bonferroni factor)
    exact_copies: int  # source rows equal to some synthetic row (every row of both)
    exact_train_rate: float  # the training share of those
    exact_holdout_rate: float
    exact_limit: float
    share_closer_to_train: float  # recorded, not tested: synthetic rows nearer a training row than any holdout row
    median_dcr_train: float
    median_dcr_holdout: float
    passed: bool

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _encode(frames: list[pd.DataFrame], columns: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Numeric block scaled to [0, 1] by the joint range (missing: a sentinel), and an integer-coded categorical
    block."""
    num_cols = [
        c for c in columns if all(pd.api.types.is_numeric_dtype(f[c]) and not pd.api.types.is_bool_dtype(f[c]) for f in frames)
    ]
    cat_cols = [c for c in columns if c not in num_cols]
    joined = pd.concat([f[columns] for f in frames], ignore_index=True)
    num = joined[num_cols].to_numpy(dtype=np.float64) if num_cols else np.zeros((len(joined), 0))
    if num_cols:
        finite = np.where(np.isfinite(num), num, np.nan)
        lo = np.where(np.isfinite(finite), finite, np.inf).min(axis=0)
        hi = np.where(np.isfinite(finite), finite, -np.inf).max(axis=0)
        lo, hi = np.where(np.isfinite(lo), lo, 0.0), np.where(np.isfinite(hi), hi, 0.0)
        span = np.where(hi > lo, hi - lo, 1.0)
        num = np.where(np.isnan(finite), -1e6, (finite - lo) / span)  # missing (or infinite): equal only each other
    cat = np.zeros((len(joined), len(cat_cols)), dtype=np.int64)
    for j, c in enumerate(cat_cols):
        cat[:, j] = pd.factorize(joined[c].astype(str).where(joined[c].notna(), "\x00na"))[0]
    return num, cat


def _column_distance(qn: np.ndarray, qc: np.ndarray, rn: np.ndarray, rc: np.ndarray, j: int, missing: bool) -> np.ndarray:
    """Column ``j``'s Gower term between a block of query rows and every reference row (numbers first, then
    categories), float32."""
    if j < qn.shape[1]:
        diff = np.abs(qn[:, j, None] - rn[None, :, j])
        if missing:
            np.minimum(diff, 1.0, out=diff)
        return diff
    k = j - qn.shape[1]
    return (qc[:, k, None] != rc[None, :, k]).astype(np.float32)


def _blocks(
    query: tuple[np.ndarray, np.ndarray], ref: tuple[np.ndarray, np.ndarray], member: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(ref_nearest, to_members, to_others)``: each reference row's distance to its closest query row under the
    Gower distance (row 0) and, with two columns or more, under each one-column-discounted one (row ``1 + j``: column
    ``j`` weighted :data:`DISCOUNT`), and each query row's Gower distance to its closest reference row inside / outside
    ``member`` (a mask of the reference rows; inf where none). Exact, in blocks of query rows."""
    qn, qc = query
    rn, rc = ref
    n_q, n_r = len(qn), len(rn)
    n_cols = qn.shape[1] + qc.shape[1]
    views = 1 + (n_cols if n_cols > 1 else 0)
    ref_nearest = np.full((views, n_r), np.inf)
    inside = np.full(n_q, np.inf)
    outside = np.full(n_q, np.inf)
    if not n_q or not n_r or not n_cols:
        return ref_nearest, inside, outside
    qn32, rn32 = qn.astype(np.float32), rn.astype(np.float32)
    qc32, rc32 = qc.astype(np.int32), rc.astype(np.int32)
    missing = [bool((qn[:, j] < -1).any() or (rn[:, j] < -1).any()) for j in range(qn.shape[1])] + [False] * qc.shape[1]
    scale = float(n_cols)
    step = max(1, _BLOCK // n_r)
    has_in, has_out = bool(member.any()), bool((~member).any())
    for a in range(0, n_q, step):
        b = min(n_q, a + step)
        block = (qn32[a:b], qc32[a:b], rn32, rc32)
        d = np.zeros((b - a, n_r), dtype=np.float32)
        for j in range(n_cols):
            d += _column_distance(*block, j, missing[j])
        np.minimum(ref_nearest[0], d.min(axis=0), out=ref_nearest[0])
        if has_in:
            inside[a:b] = d[:, member].min(axis=1)
        if has_out:
            outside[a:b] = d[:, ~member].min(axis=1)
        for j in range(views - 1):  # a copy with column j moved, however far, is near under view 1 + j
            np.minimum(ref_nearest[1 + j], (d - (1.0 - DISCOUNT) * _column_distance(*block, j, missing[j])).min(axis=0),
                       out=ref_nearest[1 + j])  # fmt: skip
    return ref_nearest / scale, inside / scale, outside / scale


def _dense(num: np.ndarray, cat: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Rows as points whose L1 distance is the weighted Gower sum: numbers as they are, each category one-hot at
    half its column's weight (a mismatch differs in two coordinates)."""
    parts = [num * weights[None, : num.shape[1]]]
    for k in range(cat.shape[1]):
        width = int(cat[:, k].max()) + 1 if len(cat) else 1
        hot = np.zeros((len(cat), width))
        hot[np.arange(len(cat)), cat[:, k]] = 0.5 * weights[num.shape[1] + k]
        parts.append(hot)
    return np.hstack(parts) if parts else np.zeros((len(num), 0))


def _trees(
    query: tuple[np.ndarray, np.ndarray], ref: tuple[np.ndarray, np.ndarray], member: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_blocks`' result through k-d trees (L1), for few dimensions and no missing numbers: the same distances,
    in a fraction of the time (10,000 × 10,000 rows of 3 columns: under a second where the blocks take 4 s)."""
    qn, qc = query
    rn, rc = ref
    n_q, n_r = len(qn), len(rn)
    n_cols = qn.shape[1] + qc.shape[1]
    views = 1 + (n_cols if n_cols > 1 else 0)
    codes = np.r_[qc, rc]
    ref_nearest = np.empty((views, n_r))
    for v in range(views):
        weights = np.ones(n_cols)
        if v:
            weights[v - 1] = DISCOUNT
        points = _dense(np.r_[qn, rn], codes, weights)
        ref_nearest[v] = _tree_nearest(points[:n_q], points[n_q:])
        if not v:
            q_points, r_points = points[:n_q], points[n_q:]
    inside = np.full(n_q, np.inf)
    outside = np.full(n_q, np.inf)
    if member.any():
        inside = _tree_nearest(r_points[member], q_points)
    if (~member).any():
        outside = _tree_nearest(r_points[~member], q_points)
    return ref_nearest / n_cols, inside / n_cols, outside / n_cols


def _tree_nearest(points: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """Each query's L1 distance to its nearest point, through a k-d tree over the distinct points, asked once per
    distinct query (a small domain repeats rows, and a tree over many equal points is slow)."""
    from sklearn.neighbors import KDTree

    distinct = np.unique(points, axis=0)
    asked, back = np.unique(queries, axis=0, return_inverse=True)
    found = KDTree(distinct, metric="manhattan").query(asked, k=1)[0][:, 0]
    return np.asarray(found[np.ravel(back)], dtype=np.float64)


def _tree_fits(num: np.ndarray, cat: np.ndarray) -> bool:
    """Whether rows encoded as ``num``/``cat`` are points of few dimensions without missing numbers (k-d trees)."""
    widths = sum(int(cat[:, k].max(initial=0)) + 1 for k in range(cat.shape[1]))
    return 0 < num.shape[1] + widths <= _TREE_DIMENSIONS and not (num < -1).any()


def _nearest(
    query: tuple[np.ndarray, np.ndarray], ref: tuple[np.ndarray, np.ndarray], member: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_blocks`' result, through k-d trees where the rows are points of few dimensions without missing numbers,
    else exactly in blocks."""
    both = (np.r_[query[0], ref[0]], np.r_[query[1], ref[1]])
    if len(query[0]) and len(ref[0]) and _tree_fits(*both):
        return _trees(query, ref, member)
    return _blocks(query, ref, member)


def nearest_distances(query: tuple[np.ndarray, np.ndarray], ref: tuple[np.ndarray, np.ndarray], n_cols: int) -> np.ndarray:
    """For each query row, the Gower distance to its closest reference row."""
    return _nearest(query, ref, np.ones(len(ref[0]), dtype=bool))[1]


def _row_keys(num: np.ndarray, cat: np.ndarray) -> np.ndarray:
    """One 64-bit hash per encoded row (equal rows, equal keys; a collision has probability about n²/2⁶⁴)."""
    num = np.ascontiguousarray(num + 0.0)  # −0.0 and 0.0 alike
    frame = pd.DataFrame(np.column_stack([num.view(np.int64), cat]))
    return pd.util.hash_pandas_object(frame, index=False).to_numpy()


def _tail(hits: int, drawn: int, train: int, total: int) -> float:
    """P(at least ``hits`` training rows among ``drawn`` source rows drawn at random from ``total``, ``train`` of them
    training rows)."""
    from scipy.stats import hypergeom

    if drawn == 0:
        return 1.0
    return float(hypergeom.sf(hits - 1, total, train, drawn))


def _limit(drawn: int, train: int, total: int, alpha: float) -> float:
    """The largest training share of ``drawn`` rows whose one-sided hypergeometric tail is at least ``alpha``."""
    from scipy.stats import hypergeom

    if drawn == 0:
        return 1.0
    return float(hypergeom.isf(alpha, total, train, drawn)) / drawn


def _near_sets(nearest: np.ndarray) -> list[np.ndarray]:
    """The label-free sets ``D_K``: the ``K`` source rows nearest to the synthetic table, ties at the ``K``-th distance
    all in, for ``K`` = FIRST_K, 2·FIRST_K, … below the number of rows (distinct sets only)."""
    n = len(nearest)
    ordered = np.sort(nearest)
    out: list[np.ndarray] = []
    seen: set[int] = set()
    k = FIRST_K
    while k < n:
        cut = ordered[k - 1]
        chosen = nearest <= cut
        size = int(chosen.sum())
        if size < n and size not in seen:
            seen.add(size)
            out.append(chosen)
        k *= 2
    return out


def dcr_check(synthetic: pd.DataFrame, train: pd.DataFrame, holdout: pd.DataFrame, *, rng: np.random.Generator) -> DcrReport:
    """Whether ``synthetic`` reproduces rows of ``train``, or comes nearer to them than to rows of ``holdout`` (the
    module docstring's two tests, on the columns all three share)."""
    columns = [c for c in synthetic.columns if c in train.columns and c in holdout.columns]
    n_t, n_h = len(train), len(holdout)
    p = n_t / max(1, n_t + n_h)
    num, cat = _encode([synthetic, train, holdout], columns)
    n_s = len(synthetic)
    in_train = np.r_[np.ones(n_t, dtype=bool), np.zeros(n_h, dtype=bool)]
    odds = NEAREST_ODDS * p / max(1e-12, 1 - p)
    tolerance = odds / (1 + odds)
    # exact copies: every synthetic row against every source row
    keys = _row_keys(num, cat)
    copied = np.isin(keys[n_s:], keys[:n_s])
    exact_n = int(copied.sum())
    exact_hits = int(in_train[copied].sum())
    exact_t = exact_hits / exact_n if exact_n else 0.0
    exact_limit = max(tolerance, _limit(exact_n, n_t, n_t + n_h, ALPHA))
    exact_refused = exact_t > exact_limit
    # near records: a sample of the synthetic rows against a sample of the source rows, drawn together
    most = MAX_ROWS if _tree_fits(num, cat) else MAX_BLOCK_ROWS
    pick_s = rng.permutation(n_s)[:most] if n_s > most else np.arange(n_s)
    pick_r = rng.permutation(n_t + n_h)[:MAX_SOURCE_ROWS] if n_t + n_h > MAX_SOURCE_ROWS else np.arange(n_t + n_h)
    s = (num[pick_s], cat[pick_s])
    r = (num[n_s:][pick_r], cat[n_s:][pick_r])
    member = in_train[pick_r]
    nearest, d_t, d_h = _nearest(s, r, member)
    n_r, r_t = len(pick_r), int(member.sum())
    sets = [chosen for view in nearest for chosen in _near_sets(view)]
    alpha = ALPHA / max(1, len(sets))
    tested: list[tuple[float, int, float, float, bool]] = []  # tail, |D|, training share, limit, refused
    for chosen in sets:
        size, hits = int(chosen.sum()), int(member[chosen].sum())
        limit = max(tolerance, _limit(size, r_t, n_r, alpha))
        tested.append((_tail(hits, size, r_t, n_r), size, hits / size, limit, hits / size > limit))
    near_refused = any(t[4] for t in tested)
    # the report shows the most significant refused set, else the most significant one
    best = min((t for t in tested if t[4] == near_refused), default=(1.0, 0, p, 1.0, False))
    finite = np.isfinite(d_t) & np.isfinite(d_h)
    closer = np.where(d_t[finite] < d_h[finite], 1.0, np.where(d_t[finite] == d_h[finite], 0.5, 0.0))
    return DcrReport(
        rows=len(pick_s),
        reference_rows=n_r,
        train_share=p,
        nearest_records=best[1],
        near_train_share=best[2],
        share_limit=best[3],
        near_tail=best[0],
        near_sets=len(sets),
        exact_copies=exact_n,
        exact_train_rate=exact_t,
        exact_holdout_rate=(1.0 - exact_t) if exact_n else 0.0,
        exact_limit=exact_limit,
        share_closer_to_train=float(closer.mean()) if len(closer) else 0.5,
        median_dcr_train=float(np.median(d_t)) if len(d_t) and np.isfinite(d_t).all() else 0.0,
        median_dcr_holdout=float(np.median(d_h)) if len(d_h) and np.isfinite(d_h).all() else 0.0,
        passed=not exact_refused and not near_refused,
    )
