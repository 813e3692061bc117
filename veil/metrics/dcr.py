"""Distance to closest record (DCR): does a synthetic table reproduce its training rows, or come nearer to them?

The source rows were split at random into **training** rows (shown to the generator) and a **holdout** (never
shown). A generator that learned the distribution and not the rows produces the same table whichever rows the split
put on the training side; so, for any set ``D`` of source rows chosen by looking at the synthetic table and the
*unsplit* source, the number of training rows in ``D`` is hypergeometric: ``|D|`` draws from the source rows, of which
a share ``p`` are training rows. Four families of such sets, each against **every** synthetic row (never a subsample
of the synthetic table: a table may have 10,000,000 rows, and near copies of every training row among 400,000 rows
passed a 10,000-row subsample, red team s69 F1) and over all source rows (never a subsample of the training side: a
copy of a training row left out of the subsample counted as fresh, red team s64 F8):

* **exact copies** — the source rows equal to some synthetic row (a hash join over every row of both). A verbatim copy
  of a training row adds a training row to ``D`` and never a holdout row; a chance match (a small domain) adds
  training and holdout rows in proportion ``p``;
* **rare copies** — of those, the source rows whose combination no other source row holds: each is one person's whole
  row, published as it is (red team s69 F2: at ``p`` = 0.8 and ``10⁻⁶`` no test of the split refuses fewer than ~62
  copies; this one, at :data:`RARE_ALPHA`, refuses about 45: see the floor below);
* **rank views** — with two numeric columns or more, the near records again in two views that a map of a column onto
  itself keeping or reversing its order cannot change: each number (or date) as its folded rank ``|2u − 1|``, ``u``
  its mid-rank share within its own table (the synthetic rows; the source rows, training and holdout together), and
  those folded ranks sorted within the row (columns swapped); and the ranks each reflected or not and rotated round
  the circle as best aligns them with the source's (the peak of the torus cross-correlation of the rank-pair
  histograms of each column and the next, :func:`_aligned_ranks`: a cyclic shift ``x → (x + c) mod range`` rotates
  the ranks). A decoder fitted on other bounds publishes its training rows reflected, compressed or shifted inside the
  declared domain, near nothing as values and exact copies as ranks (red team s76 F1: passed; refused now, tails
  10⁻⁷⁴ and 10⁻⁷² for the six-column world reflected or shifted with categories permuted, 10⁻³⁸ for three same-bounds
  columns rotated). Not covered: other maps (a permutation of a number's values), columns both swapped and shifted,
  and a copy whose numbers alone do not single its rows out while its categories are permuted;
* **how often** — the source rows that at least ``c`` synthetic rows equal, for each distinct count ``c`` ≥ 2 (at most
  :data:`_COUNT_SETS`, spread over the counts), tested with the near records: a table that holds every source row
  ``t`` times (an enumeration of the declared domain, which depends on the policy alone) plus a copy of each training
  row matches the members ``t + 1`` times and the non-members ``t`` (red team s76 F3: passed at ``t`` = 4, 5, 8, 9,
  the neighbour ranks 1, 2, 4, 8 seeing it only where ``t + 1`` is one);
* **near records** — for up to :data:`MAX_SOURCE_ROWS` source rows (subsampled from training and holdout *together*,
  which keeps the law above), ``D_K`` is the ``K`` source rows nearest to the synthetic table (ties at the ``K``-th
  distance all in), for ``K`` = 32, 64, 128, … below the number of source rows, where a source row's nearness is its
  distance to its ``k``-th nearest synthetic row (``k`` in :data:`NEIGHBOURS`: 1, 2, 4, 8), under the Gower distance
  and under each distance that weighs one column :data:`DISCOUNT` (a copy with that one value moved, however far, is
  near under it); and the source rows that some synthetic row equals in all columns but at most ``m`` (``m`` = 1, 2,
  and 3 while the column triples times the rows stay within ``2·10⁸``; numbers compared exactly: a copy with ``m``
  values redrawn, however far, red team s69 F5); with grouped (many-valued) categories, one more distance leaves them
  all out (a copy with several of them moved is near under it: red team s72 F1);
* **best matches** — each of those source rows has a *best-match score*, the most of it one synthetic row holds
  exactly, in bits: over the column sets of a family (every set of 1 to all-but-one columns while there are at most
  :data:`_MATCH_SETS` of them and rows × sets stay within :data:`_MATCH_WORK`; else every single column and sets drawn
  at random, at least :data:`_MATCH_MIN_SETS`), the largest sum of ``log2(n / n_j)`` over a set's columns that some
  synthetic row matches, ``n_j`` being how many source rows hold the row's value in column ``j`` (a rare value weighs
  much, a common one nothing: what a linkage attacker gains). The ``K`` best-scored source rows (``K`` = 32, 64, …)
  are sets as above; and so, per family set, are the source rows some synthetic row matches on it (a test of their
  own). A copy that keeps much of its row — whichever columns, however far the rest is moved — scores every family
  set inside what it keeps (red team s72 F2: four or five columns redrawn passed the agreement sets, which stop at
  three). A memorising generator puts its training rows' copies — exact or a
  few values off — at the head of those rankings, holdout rows never; a fresh generator's nearest source rows are
  training rows in proportion ``p``. The ``k``-th neighbour matters in a large table: where chance puts a synthetic row
  near most source rows, a memorised row is one *more* near synthetic row, which shows in the count (the ``k``-th
  distance) more than in the nearest one (400,000 rows: near tails 10⁻²³ where the nearest alone stayed within the
  tolerance). Per synthetic row (is its nearest training record nearer than its nearest holdout record?) the rows share
  nearest records, so their verdicts are not independent and a binomial test over them has no stated error rate;
  the shares are recorded (``share_closer_to_train``, ``median_dcr_train`` / ``median_dcr_holdout``, over up to
  :data:`MAX_RECORDED_ROWS` synthetic rows), not tested.

Distance: mean over columns of ``|a − b| / range`` for numbers and dates (a date as its day number: red team s76 F2,
a copy with every date one day off was as far as any other date; range from all the rows), and 0/1 mismatch for
everything else (a Gower distance); missing values equal only each other (a missing number lies one range below the
present ones: 1 to 2 from any). Every row is a point: numbers as they are, categorical columns one-hot (narrowest
first) while the points have at most 16 coordinates, and the remaining (many-valued) categorical columns matched
exactly through one group coordinate (a source row whose values there no synthetic row shares has no near record under
that distance; each one-column-discounted distance of such a column leaves it out of the group, and one more distance
leaves them all out). Each source row's ``k`` nearest synthetic rows come from a k-d tree (L1, SciPy) over the
distinct synthetic points, each kept at most 8 times; the agreement sets and best matches from one hash per column,
summed (one subtraction per row and column set). Cost: linear in the synthetic rows (``python -m bench.dcr_gate``,
docs/benchmarks.md: 1,000,000 synthetic rows in 2.8 CPU seconds for 3 columns, 13.7 for 8 categorical ones, 30.6 for
Adult's 15 (22.8 before the best matches); 100,000 rows of Adult in 6.9 (4.3 before); 10,000,000 rows of 3 columns in
37 CPU seconds and 2.4 GiB before them)).

The check refuses when the exact-copy set, the rare-copy set, any near-record or best-match set or any match set holds
significantly more **or fewer** training rows than chance: Fisher's exact test of its 2×2 table (training or holdout
row, in the set or not), two-sided (red team s76 F7/F8). An **excess** — the upper hypergeometric tail below half the
test's alpha (:data:`ALPHA`, ``10⁻⁶``; for the near-record and best-match sets ``10⁻⁶`` over their number, Bonferroni;
for the match sets another ``10⁻⁶`` over theirs; for the rare copies :data:`RARE_ALPHA`, ``0.99·10⁻⁴``, whole) and the
table's odds ratio — a training row's odds of being in the set over a holdout row's — above :data:`NEAREST_ODDS`
(1.22: a generator slightly closer to its training rows, or slightly likelier to draw a combination it saw, passes) —
is memorisation. A **deficit** — the lower tail below the other half (the rare copies: :data:`RARE_DEFICIT_ALPHA`,
``10⁻⁶``) and the odds ratio below ``1/1.22`` — is a table that keeps *away* from its training rows: a filter that
drops synthetic rows equal to a unique training row (synthpop's ``rm.replicated.uniques``) or within a distance of one
(a "similarity filter") leaves holes where the members are and none where the non-members are, so whoever finds their
row in the table, or near it, is a non-member (s76 F8: 32-97 % of the source-unique non-members shown, no member,
passed; F7: every member beyond the radius against 22-45 % of non-members, passed). A set tested for a deficit is also
its complement tested for an excess: the source rows *farthest* from the table. The tolerance bounds the odds ratio,
not the set's training share: a set that chance fills with most of the holdout rows can hold at most odds ``1/h``
times ``p``'s whatever its evidence, so a share tolerance could never refuse it (red team s72 F3: the three-column
agreement set held 82-89 % of the holdout by chance and passed with tails 10⁻⁸³ to 10⁻¹⁰⁶). A generator whose output
does not depend on the split is refused with probability at most ``1.03·10⁻⁴`` (``10⁻⁶ + 10⁻⁴ + 10⁻⁶ + 10⁻⁶``, each
split between the sides; the rare excess test fires only on a table that reproduces at least ~41 rows unique in the
source, nearly all of them training rows, so below ``3·10⁻⁶`` for any table that does not publish dozens of people's
whole rows). Measured for the two-sided rule with the count sets and rank views (``python -m bench.dcr_null``): none
of 80 tables that do not depend on the split refused (fresh draws ×1 and ×4, the unsplit source resampled, every
source row nudged; four worlds, Adult included; smallest tails 3.9·10⁻⁵ excess, 5.7·10⁻⁴ deficit, before correction),
and six honest generator tables on Adult (ML copy, IMPOSTER 30 epochs, GAN 100 epochs; two seeds each) passed, the
smallest tail 3.8·10⁻⁴ (excess, before correction). Before s76 (one-sided): none of 780 split-free tables refused —
fresh draws, the source resampled, every source row near-copied before the split; five worlds of 3 to 8 columns, 2,000
to 20,000 rows, and Adult — the smallest tails 0.012 exact, 0.014 rare, 3.5·10⁻⁷ near, best-match or match set
(4.6·10⁻⁵ after correction); six honest generator tables, the smallest tail 7.9·10⁻⁴. The deficit side has a floor
too: a filter that exposes only a few non-members passes (a radius leaving 178 of 8,000 rows, 15 of 400 non-members
within it: tail 1.4·10⁻⁷ before correction).

The floor (red team s69 F2): a set of ``c`` copies, all training rows, has tail about ``p^c``; at ``p`` = 0.8 no test
of the split can refuse fewer than ``log α / log p`` copies (41 at ``10⁻⁴``, 62 at ``10⁻⁶``), and chance matches of a
large table on a small domain dilute them further (100 copies of a 1,000-row source among 50,000 rows of a
730,000-cell domain: refused in about half the draws). Only a smaller training share would lower it (``p`` = 0.5: 14
copies at ``10⁻⁴``). Near copies likewise need the table not to bury them: where the synthetic rows outnumber the
domain's cells many times (10,000,000 rows of a 730,000-cell domain: ~14 per cell), a memorised row is one near row
among ~15 where a holdout row has ~14, a membership signal within the 1.22 odds tolerance, and passes. And a copy that
keeps only what honest rows hold as often — a few common values (Adult: 9 of 15 columns kept when ``age``, ``fnlwgt``,
``hours``, ``capital_loss``, ``workclass`` and ``relationship`` are redrawn: even the exact best match over every
column set gives a tail of 2.5·10⁻⁷ at best, where ~10⁻⁹ refuses) — is not told from a fresh draw; it identifies no
one either.

Power: tables filtered of the unique training rows (2,000 to 20,000 rows) or of the rows within a radius of a training
row (``tests/test_synth_dcr_two_sided.py``); 120 copied training rows of 150 are refused, 300 copied rows among
10,000 synthetic ones of a 10,000-row
source, a near copy (one column one unit off) of every training row, or of 10 % of the synthetic rows
(``tests/test_synth_dcr_near_copies.py``), among 20,000 to 400,000 rows, with missing values or many-valued
categories, with one or two columns moved (``tests/test_synth_dcr_every_row.py``), 45-60 verbatim copies of rows
unique in the source, and copies of every training row with any ``k`` = 1 … columns − 2 columns redrawn or nudged, or
of a share of them (down to 80 of 800) among honest rows (``tests/test_synth_dcr_best_match.py``; Adult with two
categories moved and two numbers nudged, four or five columns redrawn, three categories moved among 20,000 rows:
``tests/adversarial/test_redteam_s72.py``).

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

__all__ = ["DcrReport", "dcr_check"]

#: Source rows (training and holdout together) compared at most; every synthetic row is compared.
MAX_SOURCE_ROWS = 20_000
#: Synthetic rows whose distances to the nearest training and holdout rows are recorded (not tested), at most.
MAX_RECORDED_ROWS = 10_000
#: The false-refusal probability of each of the three tests (exact copies; near records and scores, over all their
#: sets; match sets): half of it for a training excess, half for a training deficit (red team s76 F7/F8).
ALPHA = 1e-6
#: The false-refusal probability of the rare-copy test's excess side (copies of rows whose combination is unique in the
#: source) ...
RARE_ALPHA = 0.99e-4
#: ... and of its deficit side (a table that never shows a unique training row: red team s76 F8).
RARE_DEFICIT_ALPHA = 1e-6
#: A training share is refused only above the share whose training odds are this many times ``p``'s.
NEAREST_ODDS = 1.22
#: The smallest near-record set tested; then twice as many, up to the number of source rows.
FIRST_K = 32
#: The near records are ranked by the distance to the k-th nearest synthetic row for each of these k (a memorised
#: row is one more synthetic row near its training row: where chance puts a synthetic row near most source rows, it
#: shows in the count of near synthetic rows more than in the nearest one).
NEIGHBOURS = (1, 2, 4, 8)
#: The weight of the moved column in the one-column-discounted distances (a near copy with one value moved).
DISCOUNT = 1e-3
#: Categorical columns are one-hot coordinates (narrowest first) while the points have at most this many; the others
#: are matched exactly, through one group coordinate.
_ONE_HOT_DIMENSIONS = 16
#: Rows × column triples up to which the agreement sets also look for copies with three columns moved.
_AGREEMENT_WORK = 200_000_000
#: The best-match scores look at every column set while the sets number at most this many (and their rows stay
#: within :data:`_MATCH_WORK`); else at this many drawn at random.
_MATCH_SETS = 512
#: Rows × column sets the best-match scores look at, at most (but at least :data:`_MATCH_MIN_SETS` sets).
_MATCH_WORK = 60_000_000
_MATCH_MIN_SETS = 48
#: The neighbour ranks of the rank views (the nearest only: each set they add divides the near sets' alpha, and a
#: copy under a per-column map is the nearest row to its source row there).
_RANK_NEIGHBOURS = (1,)
#: Cells a side of the rank-pair histograms the cyclic alignment cross-correlates.
_ALIGN_GRID = 64
#: The most multiplicity sets (source rows equal to at least ``c`` synthetic rows) tested, per distinct count ``c``.
_COUNT_SETS = 64
#: A missing number's coordinate (present numbers lie in [0, 1]: a missing and a present number are 1 to 2 apart).
_MISSING = -1.0


@dataclass(frozen=True)
class DcrReport:
    rows: int  # synthetic rows compared (all of them)
    reference_rows: int  # source rows (training and holdout) they were compared with
    train_share: float  # p: the training rows' share of those source rows
    nearest_records: int  # |D_K| of the near-record set with the smallest tail probability
    near_train_share: float  # the training share of that set
    share_limit: float  # the share it is refused above (the larger of the tolerance and its tail limit)
    near_tail: float  # its hypergeometric tail probability on the side it departs to (an excess or a deficit)
    near_sets: int  # how many sets were tested: near-record and score sets (one Bonferroni factor), match sets (another)
    exact_copies: int  # source rows equal to some synthetic row (every row of both)
    exact_train_rate: float  # the training share of those
    exact_holdout_rate: float
    exact_limit: float
    rare_copies: int  # of those, the rows whose combination no other source row holds
    rare_train_rate: float  # the training share of those
    rare_limit: float
    share_closer_to_train: float  # recorded, not tested: synthetic rows nearer a training row than any holdout row
    median_dcr_train: float
    median_dcr_holdout: float
    passed: bool
    # the shares each is refused *below* (a training deficit: red team s76 F7/F8), and the side the shown set departs to
    share_floor: float = 0.0
    exact_floor: float = 0.0
    rare_floor: float = 0.0
    near_side: str = "excess"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _encode(frames: list[pd.DataFrame], columns: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Numeric block scaled to [0, 1] by the joint range (missing or infinite: :data:`_MISSING`), and an
    integer-coded categorical block (missing: a value of its own)."""
    num_cols = [
        c
        for c in columns
        if all(pd.api.types.is_numeric_dtype(f[c]) and not pd.api.types.is_bool_dtype(f[c]) for f in frames)
        or all(pd.api.types.is_datetime64_any_dtype(f[c]) for f in frames)
    ]
    cat_cols = [c for c in columns if c not in num_cols]
    joined = pd.concat([f[columns] for f in frames], ignore_index=True)
    for c in num_cols:  # a date is its day number: a date one day off is near (red team s76 F2: 0/1 as a category)
        if pd.api.types.is_datetime64_any_dtype(joined[c]):
            moment = pd.to_datetime(joined[c])
            if getattr(moment.dt, "tz", None) is not None:
                moment = moment.dt.tz_convert("UTC").dt.tz_localize(None)
            joined[c] = (moment - pd.Timestamp("1970-01-01")) / pd.Timedelta(days=1)
    num = joined[num_cols].to_numpy(dtype=np.float64) if num_cols else np.zeros((len(joined), 0))
    if num_cols:
        finite = np.isfinite(num)
        lo = np.where(finite, num, np.inf).min(axis=0)
        hi = np.where(finite, num, -np.inf).max(axis=0)
        lo, hi = np.where(np.isfinite(lo), lo, 0.0), np.where(np.isfinite(hi), hi, 0.0)
        span = np.where(hi > lo, hi - lo, 1.0)
        with np.errstate(invalid="ignore"):
            num = np.where(finite, (num - lo) / span, _MISSING)
    cat = np.zeros((len(joined), len(cat_cols)), dtype=np.int64)
    for j, c in enumerate(cat_cols):
        cat[:, j] = pd.factorize(joined[c].astype(str).where(joined[c].notna(), "\x00na"))[0]
    return num, cat


def _layout(cat: np.ndarray, n_num: int) -> tuple[list[int], list[int]]:
    """The categorical columns taken one-hot (narrowest first, while the points have at most
    :data:`_ONE_HOT_DIMENSIONS` coordinates) and those matched exactly through the group coordinate."""
    widths = [int(cat[:, k].max(initial=0)) + 1 for k in range(cat.shape[1])]
    onehot: list[int] = []
    used = n_num
    for k in sorted(range(cat.shape[1]), key=lambda k: widths[k]):
        if used + widths[k] > _ONE_HOT_DIMENSIONS:
            break
        onehot.append(k)
        used += widths[k]
    return sorted(onehot), [k for k in range(cat.shape[1]) if k not in onehot]


def _hash_rows(block: np.ndarray) -> np.ndarray:
    """One 64-bit hash per row of a 2-D numeric block (equal rows, equal hashes; collisions about n²/2⁶⁴)."""
    if block.dtype.kind == "f":
        block = np.ascontiguousarray(block + 0.0).view(np.int64)  # −0.0 and 0.0 alike
    return pd.util.hash_pandas_object(pd.DataFrame(block), index=False).to_numpy()


def _points(num: np.ndarray, cat: np.ndarray, onehot: list[int], weights: np.ndarray, group: np.ndarray | None) -> np.ndarray:
    """Rows as points whose L1 distance is the weighted Gower sum within a group: numbers as they are, each one-hot
    category at half its column's weight (a mismatch differs in two coordinates), and the group code (``group``, the
    grouped columns' values together) times a spacing larger than any distance within a group."""
    n_num = num.shape[1]
    parts = [num * weights[None, :n_num]]
    for k in onehot:
        hot = np.zeros((len(cat), int(cat[:, k].max(initial=0)) + 1))
        hot[np.arange(len(cat)), cat[:, k]] = 0.5 * weights[n_num + k]
        parts.append(hot)
    if group is not None:
        parts.append((_spacing(n_num, len(onehot)) * group.astype(np.float64))[:, None])
    return np.hstack(parts)


def _spacing(n_num: int, n_onehot: int) -> float:
    """The group coordinate's unit: more than twice the largest distance within a group (a number: at most 2, a
    one-hot category: at most 1)."""
    return 2.0 * (2.0 * n_num + n_onehot) + 2.0


def _group_codes(hashes: np.ndarray, columns: list[int]) -> np.ndarray | None:
    """An integer code per row for its values in ``columns`` together (None without such columns), from the
    categorical block's :func:`_column_hashes`."""
    if not columns:
        return None
    with np.errstate(over="ignore"):
        return pd.factorize(hashes[:, columns].sum(axis=1, dtype=np.uint64))[0].astype(np.int64)


def _distinct(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The positions of the first row of each distinct key (in order of first appearance) and how many rows hold it:
    a hash table, not a sort."""
    codes = pd.factorize(keys)[0]
    return np.flatnonzero(~pd.Series(codes).duplicated().to_numpy()), np.bincount(codes)


def _tree_nearest(points: np.ndarray, queries: np.ndarray, ks: tuple[int, ...] = (1,)) -> np.ndarray:
    """Each query's L1 distance to its ``k``-th nearest point for each ``k`` in ``ks`` (a row per ``k``; inf where
    fewer points), equal points counted apart, through a k-d tree over the distinct points each kept at most
    ``max(ks)`` times, asked once per distinct query (equal rows are common, and a tree over many equal points is
    slow)."""
    from scipy.spatial import cKDTree

    out = np.full((len(ks), len(queries)), np.inf)
    if not len(queries) or not len(points):
        return out
    if points.shape[1] == 0:
        out[:, :] = np.where(np.asarray(ks)[:, None] <= len(points), 0.0, np.inf)
        return out
    most = max(ks)
    first, counts = _distinct(_hash_rows(points))
    kept = points[np.repeat(first, np.minimum(counts, most))]
    back = pd.factorize(_hash_rows(queries))[0]  # each query's distinct row, in order of first appearance
    asked = np.flatnonzero(~pd.Series(back).duplicated().to_numpy())
    tree = cKDTree(kept, leafsize=32, balanced_tree=False, compact_nodes=False)
    found = tree.query(queries[asked], k=min(most, len(kept)), p=1)[0].reshape(len(asked), -1)
    for i, k in enumerate(ks):
        if k <= found.shape[1]:
            out[i] = found[back, k - 1]
    return out


def _source_nearest(num: np.ndarray, cat: np.ndarray, n_s: int, pick_r: np.ndarray) -> np.ndarray:
    """Each picked source row's distance to its ``k``-th nearest synthetic row, over **every** synthetic row (the
    first ``n_s`` encoded rows), one row per distance and ``k`` in :data:`NEIGHBOURS`: first under the Gower distance,
    then, with two columns or more, under each one that weighs column ``j`` :data:`DISCOUNT` (a grouped categorical
    column: not at all). A source row whose group (its values in the grouped categorical columns) no synthetic row
    shares has no near record there (inf)."""
    n_num = num.shape[1]
    n_cols = n_num + cat.shape[1]
    onehot, grouped = _layout(cat, n_num)
    # with grouped columns and others, one more view leaves every grouped column out (a copy with several of them
    # moved is near there; in the others its group may hold no synthetic row: red team s72 F1)
    views = 1 + (n_cols if n_cols > 1 else 0) + (1 if grouped and n_num + len(onehot) else 0)
    out = np.full((views, len(NEIGHBOURS), len(pick_r)), np.inf)
    if not n_cols or not len(pick_r):
        return out.reshape(-1, len(pick_r))
    rows = np.r_[np.arange(n_s), n_s + pick_r]
    num, cat = num[rows], cat[rows]
    hashes = _column_hashes(np.zeros((len(cat), 0)), cat)
    within = 2.0 * n_num + len(onehot)  # the largest distance within a group
    for v in range(views):
        weights = np.ones(n_cols)
        moved = v - 1
        if 0 < v <= n_cols:
            weights[moved] = DISCOUNT
        key_cols = [k for k in grouped if n_num + k != moved] if v <= n_cols else []
        group = _group_codes(hashes, key_cols)
        pts = _points(num, cat, onehot, weights, group)
        synth, source = pts[:n_s], pts[n_s:]
        if group is not None:  # synthetic rows of a group no picked source row has are near none
            synth = synth[np.isin(group[:n_s], group[n_s:])]
        found = _tree_nearest(synth, source, NEIGHBOURS)
        out[v] = np.where(found > within, np.inf, found)
    return out.reshape(-1, len(pick_r)) / n_cols


def _column_hashes(num: np.ndarray, cat: np.ndarray) -> np.ndarray:
    """A pseudo-random 64-bit hash per value, per column (a column's salt apart): a row's key without the columns
    ``S`` is the sum of its other columns' hashes (wrapping), so every ``S`` costs one subtraction per row."""
    bits = np.column_stack([np.ascontiguousarray(num + 0.0).view(np.int64), cat]).astype(np.uint64)
    with np.errstate(over="ignore"):
        z = bits + (np.arange(bits.shape[1], dtype=np.uint64) * np.uint64(0xD6E8FEB86659FD93))[None, :]
        z += np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return np.asarray(z ^ (z >> np.uint64(31)))


def _agreement(num: np.ndarray, cat: np.ndarray, n_s: int, pick_r: np.ndarray) -> np.ndarray:
    """Row ``m - 1``: whether some synthetic row (every one) equals the picked source row in all columns but at most
    ``m``, for ``m`` = 1, 2, … while :func:`_most_moved` allows (numbers compared exactly, as published)."""
    n_cols = num.shape[1] + cat.shape[1]
    most = _most_moved(n_cols, n_s + len(pick_r))
    out = np.zeros((most, len(pick_r)), dtype=bool)
    if not most or not n_s or not len(pick_r):
        return out
    from itertools import combinations

    hashes_s = _column_hashes(num[:n_s], cat[:n_s])
    hashes_r = _column_hashes(num[n_s:][pick_r], cat[n_s:][pick_r])
    with np.errstate(over="ignore"):
        total_s, total_r = hashes_s.sum(axis=1, dtype=np.uint64), hashes_r.sum(axis=1, dtype=np.uint64)
        for m in range(1, most + 1):
            for moved in combinations(range(n_cols), m):
                keys_s = total_s - hashes_s[:, moved].sum(axis=1, dtype=np.uint64)
                keys_r = total_r - hashes_r[:, moved].sum(axis=1, dtype=np.uint64)
                codes, asked = pd.factorize(keys_r)
                found = pd.Index(asked).get_indexer(keys_s)
                hit = np.zeros(len(asked), dtype=bool)
                hit[found[found >= 0]] = True
                out[m - 1] |= hit[codes]
            if m < most:
                out[m] = out[m - 1]
    return out


def _most_moved(n_cols: int, rows: int) -> int:
    """How many moved columns :func:`_agreement` looks for: 2 (1 with two columns; none with one), and 3 while the
    column triples times the rows stay within :data:`_AGREEMENT_WORK`."""
    from math import comb

    if n_cols < 2:
        return 0
    if n_cols < 4:
        return n_cols - 1
    return 3 if comb(n_cols, 3) * rows <= _AGREEMENT_WORK else 2


def _match_family(n_cols: int, rows: int, rng: np.random.Generator) -> list[tuple[int, ...]]:
    """The column sets the best-match scores look at: every set of 1 to ``n_cols - 1`` columns while they number at
    most :data:`_MATCH_SETS` and their rows stay within :data:`_MATCH_WORK`; else every single column, then sets drawn
    at random (a size uniform in 2 … ``n_cols - 1``, then the columns) up to that budget (at least
    :data:`_MATCH_MIN_SETS`). A copy that keeps a set ``A`` of its row's values holds every family set inside
    ``A``."""
    from itertools import combinations
    from math import comb

    if n_cols < 2:
        return []
    budget = max(_MATCH_MIN_SETS, min(_MATCH_SETS, int(_MATCH_WORK // max(1, rows))))
    if 2**n_cols - 2 <= budget:
        return [s for m in range(1, n_cols) for s in combinations(range(n_cols), m)]
    family: set[tuple[int, ...]] = {(j,) for j in range(n_cols)}
    available = sum(comb(n_cols, m) for m in range(2, n_cols))
    while len(family) < min(budget, n_cols + available):
        size = int(rng.integers(2, n_cols))
        family.add(tuple(sorted(int(j) for j in rng.choice(n_cols, size, replace=False))))
    return sorted(family, key=lambda s: (len(s), s))


def _match_scores(
    num: np.ndarray, cat: np.ndarray, n_s: int, pick_r: np.ndarray, rng: np.random.Generator
) -> tuple[np.ndarray, list[np.ndarray]]:
    """Each picked source row's best-match score: the most a synthetic row (every one) reproduces of it exactly, in
    bits — over the column sets ``S`` of :func:`_match_family` whose values some synthetic row holds exactly as the
    source row does, the largest sum over ``S`` of ``log2(n / n_j)``, where ``n`` is the number of picked source rows
    and ``n_j`` how many of them hold the row's value in column ``j`` (an identifying value weighs much, a common one
    nothing: what a linkage attacker gains). A copy that keeps much of its row — whichever columns, however the rest
    is moved — scores a large family set inside what it keeps; a row the table does not copy scores what the table
    holds of it by chance. Label-free: computed from the synthetic table and the unsplit source. Also returns, per
    family set, the source rows whose values there some synthetic row holds (distinct sets only: a copy that keeps
    the same columns of many rows fills one of them)."""
    n_cols = num.shape[1] + cat.shape[1]
    score = np.zeros(len(pick_r))
    matched: dict[bytes, np.ndarray] = {}
    family = _match_family(n_cols, n_s + len(pick_r), rng)
    if not family or not n_s or not len(pick_r):
        return score, []
    hashes_s = _column_hashes(num[:n_s], cat[:n_s])
    hashes_r = _column_hashes(num[n_s:][pick_r], cat[n_s:][pick_r])
    bits = np.zeros(hashes_r.shape)
    for j in range(n_cols):
        codes = pd.factorize(hashes_r[:, j])[0]
        bits[:, j] = np.log2(len(pick_r) / np.bincount(codes)[codes])
    with np.errstate(over="ignore"):
        for chosen in family:
            cols = list(chosen)
            keys_r = hashes_r[:, cols].sum(axis=1, dtype=np.uint64)
            keys_s = hashes_s[:, cols].sum(axis=1, dtype=np.uint64)
            codes, asked = pd.factorize(keys_r)
            found = pd.Index(asked).get_indexer(keys_s)
            hit = np.zeros(len(asked), dtype=bool)
            hit[found[found >= 0]] = True
            held = hit[codes]
            score[held] = np.maximum(score[held], bits[held][:, cols].sum(axis=1))
            if 0 < int(held.sum()) < len(held):
                matched.setdefault(np.packbits(held).tobytes(), held)
    return score, list(matched.values())


def _recorded(
    num: np.ndarray, cat: np.ndarray, pick_s: np.ndarray, pick_r: np.ndarray, member: np.ndarray, n_s: int
) -> tuple[np.ndarray, np.ndarray]:
    """Each picked synthetic row's Gower distance to its nearest picked training and holdout row (inf where none in
    its group): recorded, not tested."""
    n_num = num.shape[1]
    n_cols = n_num + cat.shape[1]
    if not n_cols or not len(pick_s):
        return np.full(len(pick_s), np.inf), np.full(len(pick_s), np.inf)
    onehot, grouped = _layout(cat, n_num)
    rows = np.r_[pick_s, n_s + pick_r]
    group = _group_codes(_column_hashes(np.zeros((len(rows), 0)), cat[rows]), grouped)
    pts = _points(num[rows], cat[rows], onehot, np.ones(n_cols), group)
    synth, source = pts[: len(pick_s)], pts[len(pick_s) :]
    within = 2.0 * n_num + len(onehot)
    d_t, d_h = _tree_nearest(source[member], synth)[0], _tree_nearest(source[~member], synth)[0]
    return np.where(d_t > within, np.inf, d_t) / n_cols, np.where(d_h > within, np.inf, d_h) / n_cols


def _tail(hits: int, drawn: int, train: int, total: int) -> float:
    """P(at least ``hits`` training rows among ``drawn`` source rows drawn at random from ``total``, ``train`` of them
    training rows)."""
    from scipy.stats import hypergeom

    if drawn == 0:
        return 1.0
    return float(hypergeom.sf(hits - 1, total, train, drawn))


def _limit(drawn: int, train: int, total: int, alpha: float) -> float:
    """The largest training share of ``drawn`` rows that passes: its one-sided hypergeometric tail (Fisher's exact
    test of the 2×2 table: training or holdout row, in the set or not) is at least ``alpha``, or its odds ratio is at
    most :data:`NEAREST_ODDS`."""
    from scipy.stats import hypergeom

    if drawn == 0:
        return 1.0
    return max(float(hypergeom.isf(alpha, total, train, drawn)), float(_tolerated(drawn, train, total))) / drawn


def _lower_tail(hits: int, drawn: int, train: int, total: int) -> float:
    """P(at most ``hits`` training rows among ``drawn`` source rows drawn at random from ``total``, ``train`` of them
    training rows): the deficit side."""
    from scipy.stats import hypergeom

    if drawn == 0:
        return 1.0
    return float(hypergeom.cdf(hits, total, train, drawn))


def _floor(drawn: int, train: int, total: int, alpha: float) -> float:
    """The smallest training share of ``drawn`` rows that passes the deficit side: its lower hypergeometric tail is at
    least ``alpha``, or its odds ratio at least ``1 /`` :data:`NEAREST_ODDS` (a generator slightly farther from its
    training rows passes, as one slightly nearer does). A share *below* it is refused."""
    from scipy.stats import hypergeom

    if drawn == 0:
        return 0.0
    least = int(hypergeom.ppf(alpha, total, train, drawn))  # the smallest count whose lower tail is at least alpha
    if _lower_tail(least, drawn, train, total) < alpha:  # ppf's rounding
        least += 1
    while least > 0 and _lower_tail(least - 1, drawn, train, total) >= alpha:
        least -= 1
    return min(least, _tolerated_below(drawn, train, total)) / drawn


def _tolerated_below(drawn: int, train: int, total: int) -> int:
    """The fewest training rows a set of ``drawn`` rows may hold with its odds ratio at least ``1 /``
    :data:`NEAREST_ODDS` (the ratio grows with the hits; a bisection)."""
    lo, hi = max(0, drawn - (total - train)), min(drawn, train)
    if _odds_ratio(hi, drawn, train, total) < 1.0 / NEAREST_ODDS:
        return hi + 1
    while lo < hi:  # the smallest tolerated count lies in [lo, hi]
        mid = (lo + hi) // 2
        if _odds_ratio(mid, drawn, train, total) >= 1.0 / NEAREST_ODDS:
            hi = mid
        else:
            lo = mid + 1
    return lo


def _odds_ratio(hits: int, drawn: int, train: int, total: int) -> float:
    """The 2×2 odds ratio of a set of ``drawn`` source rows holding ``hits`` of the ``train`` training rows: the odds
    that a training row is in the set over the odds that a holdout row is (inf where no holdout row is in, or no
    training row out, and some training row is in)."""
    a, b = hits, drawn - hits
    c, d = train - hits, total - train - (drawn - hits)
    if a == 0:
        return 0.0
    if b == 0 or c == 0:
        return float("inf")
    return (a * d) / (b * c)


def _tolerated(drawn: int, train: int, total: int) -> int:
    """The most training rows a set of ``drawn`` rows may hold with its odds ratio at most :data:`NEAREST_ODDS` (the
    ratio grows with the hits; a bisection)."""
    lo, hi = max(0, drawn - (total - train)), min(drawn, train)
    if _odds_ratio(lo, drawn, train, total) > NEAREST_ODDS:
        return lo - 1
    while lo < hi:  # the largest tolerated count lies in [lo, hi]
        mid = (lo + hi + 1) // 2
        if _odds_ratio(mid, drawn, train, total) <= NEAREST_ODDS:
            lo = mid
        else:
            hi = mid - 1
    return lo


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


def _rank_nearest(num: np.ndarray, n_s: int, pick_r: np.ndarray) -> np.ndarray:
    """Each picked source row's L1 distance to its nearest synthetic row (:data:`_RANK_NEIGHBOURS`) in three views of
    the numeric columns that a map of one column onto itself keeping or reversing its order (or rotating its ranks)
    cannot change (red team s76 F1: a copy reflected, ``x → lower + upper − x``, compressed or cyclically shifted
    inside its bounds had no near value anywhere): each value as its folded rank ``|2u − 1|``, ``u`` its mid-rank share
    *within its own table* (the synthetic rows; the source rows, training and holdout together: label-free); those
    folded ranks sorted within each row (columns swapped among themselves); and the ranks aligned with the source's
    (:func:`_aligned_ranks`). A missing value is 2 (far from any present one). Empty with fewer than two numeric
    columns."""
    from scipy.stats import rankdata

    n_num = num.shape[1]
    if n_num < 2 or not n_s or not len(pick_r):
        return np.zeros((0, len(pick_r)))
    ranks = np.empty_like(num)
    for part in (slice(0, n_s), slice(n_s, None)):
        block = num[part]
        present = block != _MISSING
        for j in range(n_num):
            keep = present[:, j]
            u = np.full(len(block), 2.0)
            if keep.any():
                u[keep] = (rankdata(block[keep, j]) - 0.5) / int(keep.sum())
            ranks[part, j] = u
    folded = np.where(ranks > 1.0, 2.0, np.abs(2.0 * ranks - 1.0))
    synth, source = folded[:n_s], folded[n_s:][pick_r]
    out = [
        _tree_nearest(synth, source, _RANK_NEIGHBOURS),
        _tree_nearest(np.sort(synth, axis=1), np.sort(source, axis=1), _RANK_NEIGHBOURS),
    ]
    aligned = _aligned_ranks(ranks[:n_s], ranks[n_s:])
    if aligned is not None:
        out.append(_tree_nearest(aligned, ranks[n_s:][pick_r], _RANK_NEIGHBOURS))
    return np.vstack(out)


def _aligned_ranks(synth: np.ndarray, source: np.ndarray) -> np.ndarray | None:
    """The synthetic rows' rank shares (missing: 2), each column reflected or not and rotated round the circle as
    best aligns it with the source's: per column ``j`` and its neighbour ``j + 1`` (cyclically), the 2-D histograms
    (:data:`_ALIGN_GRID` cells a side) of the two tables' rank pairs are cross-correlated on the torus (FFT) for each
    of the four reflections, and the peak gives column ``j``'s reflection and rotation. A copy under cyclic shifts
    ``x → (x + c) mod range`` (a rotation of the ranks) or reflections lands on its source rows; the alignment reads
    the synthetic table and the unsplit source only (label-free). None with fewer than two numeric columns."""
    n_num = synth.shape[1]
    if n_num < 2 or not len(synth) or not len(source):
        return None
    g = _ALIGN_GRID

    def grid(u: np.ndarray) -> np.ndarray:
        return np.minimum((np.where(u > 1.0, 0.0, u) * g).astype(np.int64), g - 1)

    out = synth.copy()
    for j in range(n_num):
        k = (j + 1) % n_num
        keep_s = (synth[:, j] <= 1.0) & (synth[:, k] <= 1.0)
        keep_r = (source[:, j] <= 1.0) & (source[:, k] <= 1.0)
        h_r = np.bincount(grid(source[keep_r, j]) * g + grid(source[keep_r, k]), minlength=g * g).reshape(g, g)
        f_r = np.conj(np.fft.rfft2(h_r))
        best = (-np.inf, False, 0)
        for flip_j in (False, True):
            for flip_k in (False, True):
                u_j = 1.0 - synth[keep_s, j] if flip_j else synth[keep_s, j]
                u_k = 1.0 - synth[keep_s, k] if flip_k else synth[keep_s, k]
                h_s = np.bincount(grid(u_j) * g + grid(u_k), minlength=g * g).reshape(g, g)
                corr = np.fft.irfft2(np.fft.rfft2(h_s) * f_r, s=(g, g))
                peak = int(np.argmax(corr))
                if corr.flat[peak] > best[0]:
                    best = (float(corr.flat[peak]), flip_j, peak // g)
        _, flip, shift = best
        u = 1.0 - synth[:, j] if flip else synth[:, j]
        out[:, j] = np.where(synth[:, j] > 1.0, 2.0, np.mod(u - shift / g, 1.0))
    return out


def _count_sets(keys_s: np.ndarray, keys_r: np.ndarray) -> list[np.ndarray]:
    """The label-free sets of source rows that at least ``c`` synthetic rows equal (every synthetic row, whole rows),
    for each distinct count ``c`` ≥ 2 the source rows hold (at most :data:`_COUNT_SETS` of them, spread over the
    counts' quantiles), proper and non-empty ones only. A copy of each training row among a table that holds every
    source row ``t`` times (an enumeration of the declared domain) makes the members' count ``t + 1`` and the
    non-members' ``t``: the set at ``c = t + 1`` holds members only (red team s76 F3)."""
    found = pd.Series(keys_s).value_counts()
    times = pd.Series(keys_r).map(found).fillna(0).to_numpy(dtype=np.int64)
    counts = np.unique(times[times >= 2])
    if len(counts) > _COUNT_SETS:
        counts = np.unique(np.quantile(counts, np.linspace(0, 1, _COUNT_SETS), method="nearest"))
    out = []
    for c in counts:
        chosen = times >= c
        if 0 < int(chosen.sum()) < len(times):
            out.append(chosen)
    return out


def _median(d: np.ndarray) -> float:
    finite = d[np.isfinite(d)]
    return float(np.median(finite)) if len(finite) else 0.0


def dcr_check(synthetic: pd.DataFrame, train: pd.DataFrame, holdout: pd.DataFrame, *, rng: np.random.Generator) -> DcrReport:
    """Whether ``synthetic`` reproduces rows of ``train``, or comes nearer to them than to rows of ``holdout`` (the
    module docstring's three tests, on the columns all three share, over every synthetic row)."""
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
    exact_hits = int(in_train[copied].sum())
    exact_t = exact_hits / exact_n if exact_n else 0.0
    exact_limit = _limit(exact_n, n_t, n_t + n_h, ALPHA / 2)
    exact_floor = _floor(exact_n, n_t, n_t + n_h, ALPHA / 2)
    exact_refused = exact_t > exact_limit or (exact_n > 0 and exact_t < exact_floor)
    # rare copies: of those, the source rows whose combination no other source row holds
    _, where, counts = np.unique(keys[n_s:], return_inverse=True, return_counts=True)
    rare = copied & (counts[np.ravel(where)] == 1)
    rare_n = int(rare.sum())
    rare_t = int(in_train[rare].sum()) / rare_n if rare_n else 0.0
    rare_limit = _limit(rare_n, n_t, n_t + n_h, RARE_ALPHA)
    rare_floor = _floor(rare_n, n_t, n_t + n_h, RARE_DEFICIT_ALPHA)
    rare_refused = rare_t > rare_limit or (rare_n > 0 and rare_t < rare_floor)
    # near records: every synthetic row against a sample of the source rows, drawn from training and holdout together
    pick_r = rng.permutation(n_t + n_h)[:MAX_SOURCE_ROWS] if n_t + n_h > MAX_SOURCE_ROWS else np.arange(n_t + n_h)
    member = in_train[pick_r]
    nearest = _source_nearest(num, cat, n_s, pick_r)
    n_r, r_t = len(pick_r), int(member.sum())
    sets = [chosen for view in nearest for chosen in _near_sets(view)]
    for agree in _agreement(num, cat, n_s, pick_r):  # copies with up to m columns moved, however far
        if 0 < int(agree.sum()) < n_r and not any(np.array_equal(agree, chosen) for chosen in sets):
            sets.append(agree)
    score, matched = _match_scores(num, cat, n_s, pick_r, rng)  # copies keeping much of their row, however moved
    # how often: the source rows some synthetic row equals at least c times, per distinct count c (copies among an
    # enumeration of the domain are one more equal row each: red team s76 F3)
    for chosen in _count_sets(keys[:n_s], keys[n_s:][pick_r]):
        if not any(np.array_equal(chosen, other) for other in sets):
            sets.append(chosen)
    for chosen in _near_sets(-score):
        if not any(np.array_equal(chosen, other) for other in sets):
            sets.append(chosen)
    # a copy under per-column maps that keep or reverse the order (a decoder fitted on other bounds: reflected,
    # compressed), or with columns swapped, is near in the rank views (red team s76 F1)
    for view in _rank_nearest(num, n_s, pick_r):
        for chosen in _near_sets(view):
            if not any(np.array_equal(chosen, other) for other in sets):
                sets.append(chosen)
    # tail, |D|, training share, limit, refused, floor, side
    tested: list[tuple[float, int, float, float, bool, float, str]] = []
    # the near and score sets share ALPHA (Bonferroni); the family's match sets have an ALPHA of their own; each set
    # is tested on both sides, half of it each: an excess of training rows (copies, near copies) and a deficit (a
    # filter that drops what is near a training row leaves holes around the members: red team s76 F7/F8)
    for family, alpha in ((sets, ALPHA / 2 / max(1, len(sets))), (matched, ALPHA / 2 / max(1, len(matched)))):
        for chosen in family:
            size, hits = int(chosen.sum()), int(member[chosen].sum())
            limit, floor = _limit(size, r_t, n_r, alpha), _floor(size, r_t, n_r, alpha)
            upper, lower = _tail(hits, size, r_t, n_r), _lower_tail(hits, size, r_t, n_r)
            refused = hits / size > limit or hits / size < floor
            side = "excess" if upper <= lower else "deficit"
            tested.append((min(upper, lower), size, hits / size, limit, refused, floor, side))
    near_refused = any(t[4] for t in tested)
    # the report shows the most significant refused set, else the most significant one
    best = min((t for t in tested if t[4] == near_refused), default=(1.0, 0, p, 1.0, False, 0.0, "excess"))
    # recorded, not tested: per synthetic row (a sample), nearer a training row than any holdout row?
    pick_s = rng.permutation(n_s)[:MAX_RECORDED_ROWS] if n_s > MAX_RECORDED_ROWS else np.arange(n_s)
    d_t, d_h = _recorded(num, cat, pick_s, pick_r, member, n_s)
    finite = np.isfinite(d_t) & np.isfinite(d_h)
    closer = np.where(d_t[finite] < d_h[finite], 1.0, np.where(d_t[finite] == d_h[finite], 0.5, 0.0))
    return DcrReport(
        rows=n_s,
        reference_rows=n_r,
        train_share=p,
        nearest_records=best[1],
        near_train_share=best[2],
        share_limit=best[3],
        near_tail=best[0],
        near_sets=len(sets) + len(matched),
        exact_copies=exact_n,
        exact_train_rate=exact_t,
        exact_holdout_rate=(1.0 - exact_t) if exact_n else 0.0,
        exact_limit=exact_limit,
        rare_copies=rare_n,
        rare_train_rate=rare_t,
        rare_limit=rare_limit,
        share_closer_to_train=float(closer.mean()) if len(closer) else 0.5,
        median_dcr_train=_median(d_t),
        median_dcr_holdout=_median(d_h),
        passed=not exact_refused and not rare_refused and not near_refused,
        share_floor=best[5],
        exact_floor=exact_floor,
        rare_floor=rare_floor,
        near_side=best[6],
    )


def _row_keys(num: np.ndarray, cat: np.ndarray) -> np.ndarray:
    """One 64-bit hash per encoded row (equal rows, equal keys; a collision has probability about n²/2⁶⁴)."""
    return _hash_rows(np.column_stack([np.ascontiguousarray(num + 0.0).view(np.int64), cat]))
