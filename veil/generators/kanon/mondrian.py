"""Mondrian multidimensional k-anonymity (LeFevre, DeWitt & Ramakrishnan, ICDE 2006).

Top-down partitioning on integer QI codes (numpy). A partition is cut while a cut leaves
every part with at least ``k`` rows.

Cuts: a numeric QI is cut in two; a categorical QI is cut into one part per leaf value
present (values with fewer than ``k`` rows are pooled into one part, itself merged into the
smallest part if still under ``k``), so parts become pure in that QI as in LeFevre's
hierarchy-driven categorical splits.

Which cut (``split=``):

* ``"gain"`` (default): over all QIs, the cut with the largest drop in summed NCP
  (``Σ rows · NCP`` of the parent minus that of the parts) per ``sqrt(parts - 1)`` — a cut into
  many parts spends more of the partition's room for further cuts, so it must earn more.
  With the taxonomy-based NCP (flat trees cost 1 for any mixture) the original median rule
  leaves most classes mixed; this rule is what brings Mondrian's NCP under the paper's.
* ``"median"``: the original rule — the QI with the largest normalised width, cut at the median.

Models (``relaxed=``):

* strict (default): parts never share a value of the cut QI (numeric cuts fall on value
  boundaries: the best boundary for ``gain``, the one nearest the median for ``median``);
* relaxed: numeric cuts may fall inside a run of equal values (rows with the median value
  can land on both sides), which lets every partition of ``2k`` rows or more be cut.

With ``diversity`` (the sensitive columns, :mod:`~veil.generators.kanon.diversity`), a cut is a candidate only
when every part stays diverse (LeFevre et al.'s ℓ-diverse Mondrian): a categorical cut first pools its undiverse
values' parts together, then into a part that makes them diverse (none: no cut). The root is diverse (checked before),
so every class is.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from veil.errors import InputError
from veil.generators.kanon.diversity import Diversity
from veil.generators.kanon.generalise import QISpace

__all__ = ["SPLITS", "mondrian"]

SPLITS = ("gain", "median")


class _Cutter:
    def __init__(self, space: QISpace, k: int, relaxed: bool, split: str, diversity: Diversity | None = None) -> None:
        self.q = space.codes.shape[1]
        self.tables = [space.cost_table(j) for j in range(self.q)]
        self.width = np.array([t.shape[0] for t in self.tables], dtype=np.int64)
        self.offset = np.r_[0, np.cumsum(self.width**2)[:-1]].astype(np.int64)
        stored = all(isinstance(t, np.ndarray) for t in self.tables)  # else a wide QI's costs come from its values
        self.flat = np.concatenate([t.ravel() for t in self.tables]) if stored else None
        self.numeric = [space.is_numeric(j) for j in range(self.q)]
        self.k = k
        self.relaxed = relaxed
        self.split = split
        self.div = diversity
        self.rows = np.arange(space.n)  # the rows of the partition being cut (set by ``cut``)

    def cost(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Summed NCP of boxes ``(..., Q)``: one gather from the concatenated flat cost tables."""
        if self.flat is None:
            return sum(self.tables[j][lo[..., j], hi[..., j]] for j in range(self.q))
        return self.flat.take(lo * self.width + hi + self.offset).sum(axis=-1)

    # -------------------------------------------------------------- candidate cuts
    def numeric_cut(self, part: np.ndarray, order: np.ndarray, col: np.ndarray) -> tuple[float, np.ndarray] | None:
        """Best binary cut on a sorted column: (summed NCP of the parts, part id per row) or None."""
        m, k = len(part), self.k
        a, b = k - 1, m - k  # cut after sorted position i, i in [a, b)
        if b <= a:
            return None
        s = part[order]
        pmin = np.minimum.accumulate(s)
        pmax = np.maximum.accumulate(s)
        smin = np.minimum.accumulate(s[::-1])[::-1]
        smax = np.maximum.accumulate(s[::-1])[::-1]
        left = np.arange(a + 1, b + 1)
        right_cost = self.cost(smin[a + 1 : b + 1], smax[a + 1 : b + 1])
        total = self.cost(pmin[a:b], pmax[a:b]) * left + right_cost * (m - left)
        if not self.relaxed:
            total = np.where(col[a:b] != col[a + 1 : b + 1], total, np.inf)
        if self.div is not None:
            prefix = np.cumsum(self.div.onehot[self.rows[order]], axis=0)
            kept = prefix[a:b]
            total = np.where(
                self.div.ok(kept, left) & self.div.ok(prefix[-1] - kept, m - left),
                total,
                np.inf,
            )
        i = int(np.argmin(total))
        if not np.isfinite(total[i]):
            return None
        ids = np.zeros(m, dtype=np.int64)
        ids[order[a + i + 1 :]] = 1
        return float(total[i]), ids

    def categorical_cut(self, part: np.ndarray, order: np.ndarray, col: np.ndarray) -> tuple[float, np.ndarray] | None:
        """One part per value (small values pooled): (summed NCP of the parts, part id per row) or None."""
        m, k = len(part), self.k
        starts = np.flatnonzero(np.r_[True, col[1:] != col[:-1]])
        sizes = np.diff(np.r_[starts, m])
        small = sizes < k
        n_big = int((~small).sum())
        if n_big == 0 or (n_big == 1 and not small.any()):
            return None
        group = np.where(small, n_big, np.cumsum(~small) - 1)
        rest = int(sizes[small].sum())
        if 0 < rest < k:
            if n_big == 1:
                return None
            bigs = np.flatnonzero(~small)
            group = np.where(small, group[bigs[np.argmin(sizes[bigs])]], group)
        if self.div is not None:
            found = self._diverse_groups(
                self.div, group, sizes, np.add.reduceat(self.div.onehot[self.rows[order]], starts, axis=0)
            )
            if found is None:
                return None
            group = found
        n_parts = int(group.max()) + 1
        s = part[order]
        vlo = np.minimum.reduceat(s, starts, axis=0)
        vhi = np.maximum.reduceat(s, starts, axis=0)
        by_group = np.argsort(group, kind="stable")
        starts_g = np.flatnonzero(np.r_[True, np.diff(group[by_group]) != 0])
        lo = np.minimum.reduceat(vlo[by_group], starts_g, axis=0)
        hi = np.maximum.reduceat(vhi[by_group], starts_g, axis=0)
        counts = np.bincount(group, weights=sizes, minlength=n_parts)
        total = float((self.cost(lo, hi) * counts).sum())
        ids = np.empty(m, dtype=np.int64)
        ids[order] = np.repeat(group, sizes)
        return total, ids

    def _diverse_groups(self, div: Diversity, group: np.ndarray, sizes: np.ndarray, counts: np.ndarray) -> np.ndarray | None:
        """``group`` (part per value run) with undiverse parts merged: pooled together, then into the largest part that
        makes them diverse (else the largest part); None when fewer than two parts are left."""
        group = group.copy()
        n = int(group.max()) + 1
        while True:
            gsize = np.bincount(group, weights=sizes, minlength=n)
            gcount = np.zeros((n, div.width), dtype=np.int64)
            np.add.at(gcount, group, counts)
            present = gsize > 0
            bad = np.flatnonzero(present & ~div.ok(gcount, gsize))
            if len(bad) == 0:
                break
            if len(bad) > 1:
                group[np.isin(group, bad[1:])] = bad[0]
                continue
            c = int(bad[0])
            others = np.flatnonzero(present)
            others = others[others != c]
            if len(others) == 0:
                return None
            fine = div.ok(gcount[others] + gcount[c], gsize[others] + gsize[c])
            pool = others[fine] if fine.any() else others
            group[group == c] = int(pool[np.argmax(gsize[pool])])
        _, dense = np.unique(group, return_inverse=True)
        dense = dense.reshape(-1).astype(np.int64)
        return dense if int(dense.max()) >= 1 else None

    def _halves_ok(self, ids: np.ndarray) -> bool:
        if self.div is None:
            return True
        return all(self.div.ok_rows(self.rows[ids == i]) for i in (0, 1))

    def median_cut(self, part: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray | None:
        widths = np.array([self.tables[j][lo[j], hi[j]] for j in range(self.q)])
        m, k = len(part), self.k
        for j in np.argsort(-widths, kind="stable"):
            if lo[j] == hi[j]:
                break
            col = part[:, j]
            if self.relaxed:
                order = np.argsort(col, kind="stable")
                ids = np.zeros(m, dtype=np.int64)
                ids[order[m // 2 :]] = 1
                if self._halves_ok(ids):
                    return ids
                continue
            cum = np.cumsum(np.bincount(col - lo[j]))[:-1]
            valid = (cum >= k) & (cum <= m - k)
            if self.div is not None and valid.any():
                prefix = np.cumsum(self.div.onehot[self.rows[np.argsort(col, kind="stable")]], axis=0)
                kept = prefix[np.maximum(cum - 1, 0)]
                valid &= self.div.ok(kept, cum) & self.div.ok(prefix[-1] - kept, m - cum)
            if valid.any():
                cand = np.flatnonzero(valid)
                best = cand[np.argmin(np.abs(cum[cand] - m / 2.0))]
                return (col > lo[j] + best).astype(np.int64)
        return None

    def cut(self, part: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray | None:
        """Part id per row of the chosen cut, or None if the partition is final (``rows``: the partition's row
        numbers, for the sensitive counts)."""
        self.rows = rows if rows is not None else np.arange(len(part))
        lo = part.min(axis=0)
        hi = part.max(axis=0)
        if self.split == "median":
            return self.median_cut(part, lo, hi)
        parent = float(self.cost(lo, hi)) * len(part)
        best_score, best_ids = -np.inf, None
        for j in range(self.q):
            if lo[j] == hi[j]:
                continue
            col_all = part[:, j]
            order = np.argsort(col_all, kind="stable")
            col = col_all[order]
            found = self.numeric_cut(part, order, col) if self.numeric[j] else self.categorical_cut(part, order, col)
            if found is None:
                continue
            total, ids = found
            n_parts = int(ids.max()) + 1
            score = (parent - total) / np.sqrt(n_parts - 1)
            if score > best_score:
                best_score, best_ids = score, ids
        return best_ids


def mondrian(
    space: QISpace,
    k: int,
    *,
    relaxed: bool = False,
    split: str = "gain",
    tick: Callable[[int], None] | None = None,
    diversity: Diversity | None = None,
) -> np.ndarray:
    """Class label per row (0..C-1) of a k-anonymous Mondrian partition of ``space`` (each class diverse too, with
    ``diversity``, when the whole table is).

    >>> import pandas as pd
    >>> space = QISpace(pd.DataFrame({"a": range(10)}), ["a"])
    >>> labels = mondrian(space, 3)
    >>> sorted(np.bincount(labels).tolist())
    [5, 5]
    """
    if k < 1:
        raise InputError(f"k must be at least 1, got {k}", hint="Use --k 2 or more")
    if space.n < k:
        raise InputError(f"the table has {space.n} rows, fewer than k={k}", hint="Lower k or publish more rows")
    if split not in SPLITS:
        raise InputError(f"unknown Mondrian split rule {split!r}", hint=f"Use one of {', '.join(SPLITS)}")
    cutter = _Cutter(space, k, relaxed, split, diversity)
    codes = space.codes.astype(np.int64)
    labels = np.empty(space.n, dtype=np.int64)
    stack: list[np.ndarray] = [np.arange(space.n)]
    n_classes = 0
    while stack:
        rows = stack.pop()
        ids = cutter.cut(codes[rows], rows) if len(rows) >= 2 * k else None
        if ids is not None:
            order = np.argsort(ids, kind="stable")
            bounds = np.cumsum(np.bincount(ids))[:-1]
            stack.extend(np.split(rows[order], bounds)[::-1])
            continue
        labels[rows] = n_classes
        n_classes += 1
        if tick is not None:
            tick(len(rows))
    return labels
