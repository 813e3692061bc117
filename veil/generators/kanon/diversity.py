"""Diverse classes by construction: (α, k)-anonymity on every sensitive column (Wong, Li, Fu & Wang, KDD 2006).

With ``sensitive`` columns, every equivalence class an algorithm produces must hold, in each sensitive column, no value
on more than ``max_share`` (α) of its rows — "probabilistic ℓ-diversity" with ℓ = 1/α in Machanavajjhala et al.'s
terms: an attacker who knows a person's quasi-identifiers finds their class and guesses its commonest value, and is
right for at most α of the class. Mondrian cuts a partition only when every part stays diverse (LeFevre et al.'s
ℓ-diverse Mondrian); the clustering algorithms grow a cluster past k until it is diverse and merge any class left
undiverse into its nearest class (:func:`merge_until_diverse`).

The condition is kept under union (``a_v ≤ α|A|`` and ``b_v ≤ α|B|`` give ``a_v + b_v ≤ α|A ∪ B|``), so a partition
exists exactly when the whole table meets it (:func:`require_feasible`; else a typed refusal naming the column), and
merging always ends (at worst in one class, the whole table). No class is ever suppressed afterwards, so nothing
published marks a class's composition (red team s20b F4: the former NULL of a > 90 % class did).

>>> d = Diversity(np.array([[0], [0], [0], [1]]), 0.75)
>>> bool(d.ok_rows(np.arange(4))), bool(d.ok_rows(np.arange(3)))
(True, False)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from veil.errors import InputError, VacuousParameter

__all__ = ["DEFAULT_MAX_SHARE", "Diversity", "check_max_share", "merge_until_diverse", "require_feasible", "worst_shares"]

#: Default α: the house's bound on the probability that a published value stands for a person's own
#: (``veil.generators.gate.MAX_KEEP_PROBABILITY``), and the largest α accepted.
DEFAULT_MAX_SHARE = 0.9

_EPS = 1e-9


def check_max_share(value: Any) -> float:
    """``value`` as a float in (0, DEFAULT_MAX_SHARE], else a typed error (before anything is read)."""
    try:
        p = float(value)
    except (TypeError, ValueError):
        raise InputError(
            f"max_share must be a number in (0, {DEFAULT_MAX_SHARE}], got {value!r}", hint="e.g. --max-share 0.8"
        ) from None
    if math.isnan(p) or p <= 0.0:
        raise InputError(f"max_share must be in (0, {DEFAULT_MAX_SHARE}], got {value!r}", hint="e.g. --max-share 0.8")
    if p > DEFAULT_MAX_SHARE:
        raise VacuousParameter(
            f"max_share={p:g} lets a class publish one sensitive value for more than {DEFAULT_MAX_SHARE:.0%} of its members "
            f"(at most {DEFAULT_MAX_SHARE:g}: above, the class says its members' value with probability above the bound "
            "every other publication keeps)",
            hint=f"Use --max-share {DEFAULT_MAX_SHARE:g} or less; a column this skewed can be published as a "
            "quasi-identifier, coarser, or with a DP method (kRR)",
        )
    return p


def _cap(size: np.ndarray | int, p: float) -> np.ndarray:
    """The most rows one value may hold in a class of ``size`` rows."""
    return np.floor(np.asarray(size, dtype=np.float64) * p + _EPS)


def require_feasible(frame: pd.DataFrame, sensitive: Sequence[str], max_share: float) -> None:
    """InputError (22023) naming the first sensitive column whose commonest value is more than ``max_share`` of the
    rows: no partition can then keep every class at ``max_share`` (the whole table, merged into one class, is the
    most diverse class there is). The share is the table's own, which the publication would show anyway."""
    n = len(frame)
    for column in sensitive:
        if n == 0:
            return
        counts = frame[column].astype("string").value_counts(dropna=True)
        top = int(counts.iloc[0]) if len(counts) else 0
        if top > _cap(n, max_share):
            share = top / n
            can_raise = share <= DEFAULT_MAX_SHARE
            raise InputError(
                f"sensitive column {column!r}: its commonest value is {share:.4g} of the {n} rows, above max_share="
                f"{max_share:g}; no partition into classes can keep every class's commonest value at {max_share:g} "
                "(the whole table is the most diverse class)",
                hint=(
                    f"Pass --max-share {math.ceil(share * 1000) / 1000:g} or more (at most {DEFAULT_MAX_SHARE:g}), "
                    if can_raise
                    else ""
                )
                + ("p" if can_raise else "P")
                + "ublish the column as a quasi-identifier or coarser, or leave it out of --sensitive",
            )


def worst_shares(frame: pd.DataFrame, groups: Sequence[str], sensitive: Sequence[str]) -> dict[str, float]:
    """Per sensitive column, the largest share of its class (rows equal on ``groups``) that one value holds."""
    out: dict[str, float] = {}
    if frame.empty:
        return out
    keys = [frame[g].astype("string").fillna("\x00NULL") for g in groups]
    for name in sensitive:
        values = frame[name].astype("string").fillna("\x00NULL")
        size = values.groupby(keys, dropna=False).transform("size")
        top = values.groupby([*keys, values], dropna=False).transform("size")
        out[name] = float((top / size).max())
    return out


class Diversity:
    """Sensitive codes ``(n, S)`` (one column per sensitive column, any integers) and the cap α.

    Counts are kept one-hot over the concatenated values of every column (``width`` wide); a class is diverse when,
    in every column, no value count exceeds ``floor(α · size)``.
    """

    def __init__(self, codes: np.ndarray, max_share: float) -> None:
        codes = np.asarray(codes, dtype=np.int64).reshape(len(codes), -1)
        self.p = float(max_share)
        blocks = []
        self.bounds: list[tuple[int, int]] = []
        start = 0
        self.dense = np.zeros_like(codes)
        for j in range(codes.shape[1]):
            _, dense = np.unique(codes[:, j], return_inverse=True)
            dense = dense.reshape(-1)
            width = int(dense.max()) + 1 if len(dense) else 1
            self.dense[:, j] = dense + start
            blocks.append(width)
            self.bounds.append((start, start + width))
            start += width
        self.width = start
        self.onehot = np.zeros((len(codes), self.width), dtype=np.int64)
        for j in range(codes.shape[1]):
            self.onehot[np.arange(len(codes)), self.dense[:, j]] = 1

    @classmethod
    def from_frame(cls, frame: pd.DataFrame, sensitive: Sequence[str], max_share: float) -> Diversity:
        codes = np.column_stack([pd.factorize(frame[c].astype("string"), sort=True)[0] for c in sensitive])
        return cls(codes, max_share)

    def top(self, counts: np.ndarray) -> np.ndarray:
        """Per row of ``counts`` ``(..., width)`` and per sensitive column: the commonest value's count ``(..., S)``."""
        return np.stack([counts[..., a:b].max(axis=-1) for a, b in self.bounds], axis=-1)

    def ok(self, counts: np.ndarray, size: np.ndarray | int) -> np.ndarray:
        """Whether classes of these value counts and sizes are diverse (element-wise over the leading axes)."""
        return np.all(self.top(counts) <= _cap(size, self.p)[..., None], axis=-1)

    def counts(self, rows: np.ndarray) -> np.ndarray:
        return self.onehot[rows].sum(axis=0)

    def ok_rows(self, rows: np.ndarray) -> bool:
        return bool(self.ok(self.counts(rows), len(rows)))

    def class_counts(self, labels: np.ndarray, n_classes: int) -> np.ndarray:
        out = np.zeros((n_classes, self.width), dtype=np.int64)
        np.add.at(out, labels, self.onehot)
        return out

    def labels_ok(self, labels: np.ndarray) -> bool:
        n_classes = int(labels.max()) + 1 if len(labels) else 0
        return bool(self.ok(self.class_counts(labels, n_classes), np.bincount(labels, minlength=n_classes)).all())


def merge_until_diverse(labels: np.ndarray, codes: np.ndarray, tables: Sequence[Any], diversity: Diversity) -> np.ndarray:
    """Class labels (0..C-1) where every class not diverse has been merged into its nearest class: the one whose box
    grows least in ``|C| · NCP`` among those the union makes diverse, else the nearest of all. Ends, since the whole
    table is diverse (:func:`require_feasible`) and each merge removes a class."""
    _, labels = np.unique(labels, return_inverse=True)
    labels = labels.reshape(-1).astype(np.int64)
    n = int(labels.max()) + 1 if len(labels) else 0
    q = codes.shape[1]
    lo = np.full((n, q), np.iinfo(np.int64).max, dtype=np.int64)
    hi = np.full((n, q), -1, dtype=np.int64)
    for j in range(q):
        np.minimum.at(lo[:, j], labels, codes[:, j])
        np.maximum.at(hi[:, j], labels, codes[:, j])
    sizes = np.bincount(labels, minlength=n).astype(np.int64)
    counts = diversity.class_counts(labels, n)
    alive = np.ones(n, dtype=bool)
    target = np.arange(n)

    def cost(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return sum((tables[j][a[..., j], b[..., j]] for j in range(q)), np.zeros(a.shape[:-1]))

    loss = cost(lo, hi) * sizes
    bad = [int(c) for c in np.flatnonzero(~diversity.ok(counts, sizes))]
    while bad:
        c = bad.pop()
        if not alive[c] or bool(diversity.ok(counts[c], sizes[c])):
            continue
        others = np.flatnonzero(alive)
        others = others[others != c]
        if len(others) == 0:  # pragma: no cover - the whole table is diverse (require_feasible)
            break
        new_lo = np.minimum(lo[others], lo[c])
        new_hi = np.maximum(hi[others], hi[c])
        new_size = sizes[others] + sizes[c]
        grow = cost(new_lo, new_hi) * new_size - loss[others] - loss[c]
        fine = diversity.ok(counts[others] + counts[c], new_size)
        pick = int(np.argmin(np.where(fine, grow, np.inf))) if fine.any() else int(np.argmin(grow))
        t = int(others[pick])
        lo[t], hi[t] = new_lo[pick], new_hi[pick]
        sizes[t] += sizes[c]
        counts[t] += counts[c]
        loss[t] = float(cost(lo[t : t + 1], hi[t : t + 1])[0]) * sizes[t]
        alive[c] = False
        target[c] = t
        if not fine.any():
            bad.append(t)
    # follow merges to their end
    for c in range(n):
        t = c
        while target[t] != t:
            t = int(target[t])
        target[c] = t
    _, out = np.unique(target[labels], return_inverse=True)
    return out.reshape(-1).astype(np.int64)
