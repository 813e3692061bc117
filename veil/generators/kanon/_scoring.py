"""Vectorised NCP scoring shared by the clustering algorithms (K-Member, OKA).

The NCP of a box (per-QI code interval) grown to include a record is additive over QIs, and for
one box each QI's term depends only on the record's code. :class:`Scorer` groups QIs so that the
product of their code counts stays small, builds one lookup vector per group (an outer sum of
the per-QI vectors) and scores every candidate record with one gather per group.
"""

from __future__ import annotations

import numpy as np

from veil.generators.kanon.generalise import QISpace

__all__ = ["BoxSet", "Scorer", "distinct_tuples"]

_GROUP_LIMIT = 4096
#: QIs with at most this many codes get a (U, U·U) "grown box" table for BoxSet lookups.
_GROW_LIMIT = 128


def distinct_tuples(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(distinct rows, multiplicity of each, index of its distinct row for every input row)."""
    uniq, inverse, counts = np.unique(codes, axis=0, return_inverse=True, return_counts=True)
    return uniq, counts.astype(np.int64), inverse.reshape(-1)


class Scorer:
    """Scores ``NCP(box ∪ record)`` (summed over QIs, in [0, Q]) for many records at once."""

    def __init__(self, space: QISpace, codes: np.ndarray) -> None:
        q = codes.shape[1]
        self.q = q
        self.tables = [space.cost_table(j) for j in range(q)]
        self.sizes = [t.shape[0] for t in self.tables]
        groups: list[list[int]] = []
        for j in np.argsort(self.sizes)[::-1]:
            for g in groups:
                if int(np.prod([self.sizes[i] for i in g])) * self.sizes[j] <= _GROUP_LIMIT:
                    g.append(int(j))
                    break
            else:
                groups.append([int(j)])
        self.groups = groups
        self.keys = self.group_keys(codes)
        self._arange = [np.arange(s) for s in self.sizes]

    def group_keys(self, codes: np.ndarray) -> np.ndarray:
        """Combined code per group for each row: ``(n, G)``."""
        keys = np.zeros((len(codes), len(self.groups)), dtype=np.int64)
        for gi, g in enumerate(self.groups):
            key = np.zeros(len(codes), dtype=np.int64)
            for j in g:
                key = key * self.sizes[j] + codes[:, j]
            keys[:, gi] = key
        return keys

    def vectors(self, lo: np.ndarray, hi: np.ndarray) -> list[np.ndarray]:
        """Per group, the NCP contribution of every combined code for the box ``lo..hi``."""
        out = []
        for g in self.groups:
            vec = np.zeros(1)
            for j in g:
                v = self._arange[j]
                term = self.tables[j][np.minimum(v, lo[j]), np.maximum(v, hi[j])]
                vec = (vec[:, None] + term[None, :]).reshape(-1)
            out.append(vec)
        return out

    def score(self, lo: np.ndarray, hi: np.ndarray, keys: np.ndarray) -> np.ndarray:
        """NCP (summed over QIs) of the box grown to each row of ``keys`` (``(m, G)``)."""
        vecs = self.vectors(lo, hi)
        total = vecs[0][keys[:, 0]]
        for gi in range(1, len(vecs)):
            total = total + vecs[gi][keys[:, gi]]
        return total

    def grow_tables(self) -> list[np.ndarray | None]:
        """Per QI with at most ``_GROW_LIMIT`` codes: ``(U, U·U)`` NCP of box ``lo·U + hi`` widened to each code."""
        if getattr(self, "_grow", None) is None:
            grow: list[np.ndarray | None] = []
            for j, table in enumerate(self.tables):
                u = self.sizes[j]
                if u > _GROW_LIMIT:
                    grow.append(None)
                    continue
                v = np.arange(u)
                grown = table[np.minimum(v[:, None, None], v[None, :, None]), np.maximum(v[:, None, None], v[None, None, :])]
                grow.append(np.ascontiguousarray(grown.reshape(u, u * u)))
            self._grow = grow
        return self._grow

    def box_cost(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """NCP summed over QIs of boxes ``(..., Q)``."""
        total = self.tables[0][lo[..., 0], hi[..., 0]]
        for j in range(1, self.q):
            total = total + self.tables[j][lo[..., j], hi[..., j]]
        return total


class BoxSet:
    """Boxes of many clusters, scored against one record at a time with one ``take`` per QI.

    For a QI with ``U`` codes, ``grow[v][lo * U + hi]`` is the NCP of box ``[lo, hi]`` widened to
    code ``v``; boxes are kept QI-major and as flat ``lo * U + hi`` indices, so scoring all
    clusters against a record is ``Q`` contiguous gathers.
    """

    def __init__(self, scorer: Scorer, lo: np.ndarray, hi: np.ndarray) -> None:
        self.scorer = scorer
        self.lo = np.ascontiguousarray(np.asarray(lo, dtype=np.int64).T)
        self.hi = np.ascontiguousarray(np.asarray(hi, dtype=np.int64).T)
        self.sizes = np.array(scorer.sizes, dtype=np.int64)
        self.flat = self.lo * self.sizes[:, None] + self.hi
        self.grow = scorer.grow_tables()
        self._flat_tables = [t.ravel() for t in scorer.tables]

    def merged_cost(self, record: np.ndarray) -> np.ndarray:
        """NCP (summed over QIs) of every box widened to include ``record``."""
        total = np.zeros(self.lo.shape[1])
        for j, grow in enumerate(self.grow):
            v = int(record[j])
            if grow is not None:
                total += grow[v].take(self.flat[j])
            else:
                idx = np.minimum(self.lo[j], v) * self.sizes[j] + np.maximum(self.hi[j], v)
                total += self._flat_tables[j].take(idx)
        return total

    def extend(self, c: int, record: np.ndarray) -> None:
        """Widen box ``c`` to include ``record``."""
        for j in range(self.lo.shape[0]):
            v = int(record[j])
            if v < self.lo[j, c]:
                self.lo[j, c] = v
            if v > self.hi[j, c]:
                self.hi[j, c] = v
            self.flat[j, c] = self.lo[j, c] * self.sizes[j] + self.hi[j, c]

    def cost(self) -> np.ndarray:
        """NCP (summed over QIs) of every box."""
        return self.scorer.box_cost(self.lo.T, self.hi.T)
