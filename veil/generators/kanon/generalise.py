"""Encode quasi-identifiers as integer codes and turn groups of rows into generalised values.

Every quasi-identifier (QI) becomes an integer code per row:

* numeric QI: the rank of the value among the column's sorted distinct values;
* categorical QI: the depth-first leaf index in its taxonomy tree (see ``hierarchies``).

A group of rows is then generalised per QI to the code interval ``[min, max]``: a numeric
interval ``[lo, hi]`` or the lowest common ancestor of the leaves. Its normalised certainty
penalty (NCP) per QI is ``cost[q][min, max]`` (``ncp.py`` states the definition).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from veil.errors import InputError, InternalError, did_you_mean
from veil.generators.kanon.hierarchies import Hierarchy

__all__ = ["QISpace", "format_interval", "public_grid"]

#: A numeric quasi-identifier's public grid has about this many cells over its declared range (:func:`public_grid`).
GRID_CELLS = 20


def public_grid(lower: float, upper: float, *, integer: bool) -> tuple[float, float, bool]:
    """``(origin, step, integer)``: the grid a numeric QI's labels are drawn on, from its declared bounds alone — the
    step the smallest of 1, 2, 5 × 10ⁿ (a whole number on an int column) at least ``(upper − lower) /``
    :data:`GRID_CELLS`, the origin the multiple of the step at or below ``lower``.

    >>> public_grid(0, 5000, integer=True), public_grid(17, 90, integer=True), public_grid(0, 1, integer=False)
    ((0.0, 500.0, True), (15.0, 5.0, True), (0.0, 0.05, False))
    """
    import math

    want = max((float(upper) - float(lower)) / GRID_CELLS, 1e-12)
    power = 10.0 ** math.floor(math.log10(want))
    step = next(m * power for m in (1.0, 2.0, 5.0, 10.0) if m * power >= want * (1 - 1e-9))
    if integer:
        step = float(max(1, round(step)))
    else:
        step = float(f"{step:.12g}")
    return float(math.floor(float(lower) / step) * step), step, integer


def _on_grid(points: np.ndarray) -> np.ndarray:
    """Grid points as the grid's decimal numbers: ``0 + 17 · 0.05`` is ``0.8500000000000001`` in floats, a label the
    audit read as excluding the cell's own 0.85 (and a label that is no multiple of the declared step).

    >>> _on_grid(np.array([0.0 + 17 * 0.05, 15.0 + 3 * 5.0])).tolist()
    [0.85, 30.0]
    """
    return np.array([float(f"{v:.12g}") for v in points.tolist()], dtype=np.float64)


#: Numeric QIs with more distinct values than this get their cost computed from values,
#: not from a precomputed (U × U) table.
_TABLE_LIMIT = 1024


class RangeCost:
    """The ``(U, U)`` NCP table of a wide numeric QI, computed from its values on each lookup instead of stored.

    Indexes like the stored table (``t[lo, hi]``, ``t.shape``, ``t.ravel().take(lo * U + hi)``), so every
    algorithm runs on a QI of any number of distinct values: refusing one above a count read from the private
    rows made whether the table is published depend on one person's value (red team s35 A3).

    >>> t = RangeCost(np.array([0.0, 1.0, 4.0]), 4.0)
    >>> t[np.array([0, 1]), np.array([2, 1])].tolist(), t.ravel().take(np.array([0 * 3 + 1])).tolist(), t.shape
    ([1.0, 0.0], [0.25], (3, 3))
    """

    def __init__(self, ends: np.ndarray, span: float, highs: np.ndarray | None = None) -> None:
        self.ends = ends
        self.highs = ends if highs is None else highs  # a grid cell's upper end (the value itself without a grid)
        self.span = span
        self.shape = (len(ends), len(ends))

    def __getitem__(self, key: tuple[Any, Any]) -> Any:
        lo, hi = key
        if self.span <= 0:
            return np.zeros(np.broadcast(np.asarray(lo), np.asarray(hi)).shape)
        return np.maximum((self.highs[hi] - self.ends[lo]) / self.span, 0.0)

    def ravel(self) -> _FlatRangeCost:
        return _FlatRangeCost(self)


class _FlatRangeCost:
    """:class:`RangeCost` read by flat index ``lo * U + hi``."""

    def __init__(self, table: RangeCost) -> None:
        self.table = table

    def take(self, index: Any) -> Any:
        index = np.asarray(index)
        return self.table[index // self.table.shape[0], index % self.table.shape[0]]


def format_interval(lo: float, hi: float, *, open_low: bool = False, open_high: bool = False) -> str:
    """The published form of a numeric interval: the value itself, ``[lo, hi]``, or open at an end.

    ``open_low``/``open_high``: the interval reaches the column's smallest/largest value, which is then not
    written — the class holding an outlier would otherwise be labelled by that one person's exact value
    (red team s16, A9b); the interval runs to −∞/∞ instead.

    >>> format_interval(3, 3), format_interval(17.0, 25.0), format_interval(0.5, 2)
    ('3', '[17, 25]', '[0.5, 2]')
    >>> format_interval(2870, 4999, open_high=True), format_interval(17, 25, open_low=True)
    ('[2870, inf)', '(-inf, 25]')
    """

    def fmt(v: float) -> str:
        return str(int(v)) if float(v).is_integer() else repr(float(v))

    if lo == hi:
        return fmt(lo)
    low = "(-inf" if open_low else f"[{fmt(lo)}"
    high = "inf)" if open_high else f"{fmt(hi)}]"
    return f"{low}, {high}"


@dataclass(frozen=True)
class _QI:
    name: str
    numeric: bool
    values: np.ndarray | None  # numeric: sorted distinct values
    hierarchy: Hierarchy | None  # categorical
    table: np.ndarray | None  # (U, U) cost table, or None for wide numeric columns (RangeCost on demand)
    span: float = 0.0  # numeric: the domain width NCP divides by
    ends: np.ndarray | None = None  # numeric: ``values`` with the first/last widened to the population's extremes
    highs: np.ndarray | None = None  # numeric on a grid: each cell's upper end (the last widened as ``ends``)
    tops: np.ndarray | None = None  # numeric on a grid: each cell's upper end as labels write it

    @property
    def size(self) -> int:
        return len(self.values) if self.numeric else self.hierarchy.n_leaves  # type: ignore[union-attr,arg-type]


class QISpace:
    """Integer codes and NCP cost tables for a table's quasi-identifiers.

    >>> df = pd.DataFrame({"age": [30, 40, 50], "sex": ["F", "M", "F"]})
    >>> space = QISpace(df, ["age", "sex"])
    >>> space.codes.tolist()
    [[0, 0], [1, 1], [2, 0]]
    >>> space.box_cost(np.array([0, 0]), np.array([1, 1])).tolist()
    [0.5, 1.0]
    """

    def __init__(
        self,
        df: pd.DataFrame,
        qi: Sequence[str],
        hierarchies: Mapping[str, Hierarchy] | None = None,
        *,
        numeric: Sequence[str] | None = None,
        spans: Mapping[str, float] | None = None,
        ends: Mapping[str, tuple[float, float]] | None = None,
        grids: Mapping[str, tuple[float, float, bool]] | None = None,
    ) -> None:
        """``grids``: per numeric QI, a public grid ``(origin, step, integer)`` (:func:`public_grid`, from the declared
        bounds): its values are coded by grid cell (``[origin + i·step, origin + (i+1)·step)``; on an integer column
        the cell's last integer closes it), so a class's label runs from its smallest member's cell start to its
        largest member's cell end — a label depends on a value through its cell alone, never shows the value itself
        (red team s64 F7: ``[900, 1234]`` published person 7's lone gain as the class's largest).

        ``spans``: the domain width of numeric QIs for NCP (default: the range in ``df``), e.g.
        the range over the whole source population when some of its rows are not published. ``ends``: the
        population's (smallest, largest) value of numeric QIs, which sets ``spans`` too: a class that reaches
        ``df``'s extreme is published open at that end (``format_interval``) and the audit reads the open end as
        the population's extreme, so its NCP is measured to that extreme (red team s35 A4: a person dropped for a
        missing sensitive value who alone held the population's extreme made generator and audit NCP disagree,
        an internal error that refused the table)."""
        hierarchies = dict(hierarchies or {})
        spans = dict(spans or {})
        ends = dict(ends or {})
        for col, (low, high) in ends.items():
            spans.setdefault(col, float(high) - float(low))
        if not qi:
            raise InputError("no quasi-identifiers given", hint="Pass --qi col1,col2,…")
        if len(set(qi)) != len(qi):
            raise InputError(f"quasi-identifiers repeat a column: {list(qi)}", hint="List each column once")
        for col in qi:
            if col not in df.columns:
                raise InputError(
                    f"quasi-identifier {col!r} is not a column of the table",
                    hint=did_you_mean(col, [str(c) for c in df.columns]),
                )
        if len(df) == 0:
            raise InputError("the table has no rows", hint="Publish a non-empty table")
        self.names: tuple[str, ...] = tuple(qi)
        self.n = len(df)
        qis: list[_QI] = []
        codes = np.empty((self.n, len(qi)), dtype=np.int32)
        for j, col in enumerate(qi):
            series = df[col]
            if series.isna().any():
                raise InputError(
                    f"quasi-identifier {col!r} has {int(series.isna().sum())} missing values",
                    hint="Choose --missing drop or --missing leaf",
                )
            is_num = col in numeric if numeric is not None else pd.api.types.is_numeric_dtype(series)
            if is_num and col not in hierarchies:
                vals = series.to_numpy(dtype=np.float64)
                # a grid of one integer per cell is kept too: the source is read as numbers, so an int column may hold
                # one person's 2.5 (stored as text, s38), which its cell [2, 2] hides (red team s66 F5: ``[2.5, 3]``)
                grid = (grids or {}).get(col)
                raw_lo, raw_hi = float(vals.min()), float(vals.max())
                if grid is not None:
                    origin, step, integer = grid
                    # (a value on a cell's start is in that cell, not the one below: 0.85 / 0.05 is 16.999…)
                    cells = np.floor(np.round((vals - origin) / step, 9))
                    ucells, inverse = np.unique(cells, return_inverse=True)
                    uniq = _on_grid(origin + ucells * step)  # each cell's start: a label's lower end
                    tops = _on_grid(uniq + step - (1.0 if integer else 0.0))  # each cell's end: a label's upper end
                else:
                    uniq, inverse = np.unique(vals, return_inverse=True)
                    tops = uniq
                codes[:, j] = inverse.reshape(-1)
                rng = float(spans.get(col, raw_hi - raw_lo))
                if rng < raw_hi - raw_lo:
                    raise InternalError(f"the NCP span of {col!r} ({rng}) is narrower than its values' range")
                at = uniq.astype(np.float64, copy=True)  # the ends NCP measures to (open ends: the population's)
                low, high = ends.get(col, (raw_lo, raw_hi))
                if grid is None:
                    if col in ends:
                        at[0], at[-1] = min(float(low), at[0]), max(float(high), at[-1])
                    top = at  # one array: a one-value class costs nothing, as its label (the value) reads
                else:
                    # an open end stands for the population's extreme (the audit reads it so)
                    top = tops.astype(np.float64, copy=True)
                    at[0], top[-1] = min(float(low), raw_lo), max(float(high), raw_hi)
                table = None
                if len(uniq) <= _TABLE_LIMIT:
                    table = (top[None, :] - at[:, None]) / rng if rng > 0 else np.zeros((len(uniq),) * 2)
                    table = np.maximum(table, 0.0)
                qis.append(_QI(col, True, uniq, None, table, rng, at, top, tops))
            else:
                h = hierarchies.get(col) or Hierarchy.flat(series.astype(str).unique())
                codes[:, j] = h.encode(series.astype(str).to_numpy(), column=col)
                qis.append(_QI(col, False, None, h, h.cost_table(), 0.0))
        self.codes = codes
        self._qis = tuple(qis)
        self.sizes = np.array([q.size for q in qis], dtype=np.int64)

    # ------------------------------------------------------------------ costs
    @property
    def hierarchies(self) -> dict[str, Hierarchy]:
        return {q.name: q.hierarchy for q in self._qis if q.hierarchy is not None}

    def is_numeric(self, j: int) -> bool:
        return self._qis[j].numeric

    def cost_table(self, j: int) -> Any:
        """``(U, U)`` table of the NCP of interval ``[a, b]`` for QI ``j``: stored, or a :class:`RangeCost` that
        computes it from the values for a QI of more than ``_TABLE_LIMIT`` distinct values."""
        q = self._qis[j]
        if q.table is not None:
            return q.table
        return RangeCost(q.ends if q.ends is not None else q.values, q.span, q.highs)  # type: ignore[arg-type]

    def qi_cost(self, j: int, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """NCP in [0, 1] of generalising QI ``j`` to code intervals ``[lo, hi]`` (element-wise)."""
        q = self._qis[j]
        if q.table is not None:
            return q.table[lo, hi]
        v = q.ends if q.ends is not None else q.values
        top = q.highs if q.highs is not None else v
        rng = q.span or 1.0
        return (top[hi] - v[lo]) / rng  # type: ignore[index]

    def box_cost(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Per-QI NCP of boxes ``lo``/``hi`` with shape ``(..., Q)``."""
        out = np.empty(np.broadcast(lo, hi).shape, dtype=np.float64)
        for j in range(len(self._qis)):
            out[..., j] = self.qi_cost(j, lo[..., j], hi[..., j])
        return out

    # ------------------------------------------------------------------ groups
    def boxes(self, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For class labels ``0..C-1`` per row: (lo, hi) code boxes ``(C, Q)`` and class sizes."""
        labels = np.asarray(labels)
        n_classes = int(labels.max()) + 1
        q = len(self._qis)
        lo = np.full((n_classes, q), np.iinfo(np.int32).max, dtype=np.int64)
        hi = np.full((n_classes, q), -1, dtype=np.int64)
        for j in range(q):
            np.minimum.at(lo[:, j], labels, self.codes[:, j])
            np.maximum.at(hi[:, j], labels, self.codes[:, j])
        sizes = np.bincount(labels, minlength=n_classes)
        return lo, hi, sizes

    def generalised_frame(self, labels: np.ndarray) -> pd.DataFrame:
        """One row per input row: each QI replaced by its class's generalised value (string)."""
        lo, hi, _ = self.boxes(labels)
        out = {}
        for j, q in enumerate(self._qis):
            if q.numeric:
                last = q.size - 1
                strings: np.ndarray = np.array(
                    [
                        format_interval(q.values[a], q.tops[b], open_low=a == 0, open_high=b == last)  # type: ignore[index]
                        for a, b in zip(lo[:, j], hi[:, j], strict=True)
                    ],
                    dtype=object,
                )
            else:
                h = q.hierarchy
                strings = np.array(
                    [h.label(int(a), int(b)) for a, b in zip(lo[:, j], hi[:, j], strict=True)],  # type: ignore[union-attr]
                    dtype=object,
                )
            out[q.name] = strings[labels]
        return pd.DataFrame(out)
