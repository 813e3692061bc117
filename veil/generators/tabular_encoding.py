"""Mixed-type tabular encoding for neural generators: one-hot categoricals, scaled numerics.

A :class:`TabularEncoder` is fitted on a DataFrame and turns it into a float32 matrix; a
generator's raw output goes back through :meth:`TabularEncoder.decode`, which always yields
*valid* values: categories seen at fit time, numbers inside the observed range, integers for
integer columns, NA only where the fit data had NA.

Encoding, per column:

* **categorical** (object, string, category or bool dtype, or numeric with at most
  ``max_categories_numeric`` distinct values): one-hot over the categories seen at fit time;
  missing values (NA) are one more category. Decoding takes the arg-max of each block, or
  samples from the block's softmax with ``sample=True`` (the generator's logits define a
  distribution; sampling keeps its spread, arg-max collapses it onto the mode).
* **numeric**: the empirical quantile transform to a standard normal (``n_quantiles`` knots,
  linear interpolation), so skewed and spiky columns (Adult's ``hours_per_week`` with half
  its mass at 40) become one well-scaled coordinate. Decoding applies the inverse transform,
  which maps every real number back into ``[min, max]`` of the fit data and lands on
  frequent values' mass points; integer columns are rounded. Numeric NA gets a 2-way
  "missing" one-hot block after the value; a decoded "missing" gives NA.

>>> import pandas as pd
>>> df = pd.DataFrame({"age": [20, 30, 40, 50], "sex": ["F", "M", "M", None]})
>>> enc = TabularEncoder.fit(df)
>>> enc.encode(df).shape
(4, 4)
>>> enc.decode(enc.encode(df)).equals(df)
True
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from veil.errors import InputError

__all__ = ["ColumnBlock", "TabularEncoder"]

_NA = "__veil_na__"


@dataclass(frozen=True)
class ColumnBlock:
    """Where one source column lives in the encoded matrix.

    ``kind`` is ``"categorical"`` (one-hot over ``categories``, a softmax block of width
    ``len(categories)``) or ``"numeric"`` (one value at ``start``; if ``has_na``, a 2-wide
    softmax block ``[present, missing]`` follows).
    """

    name: str
    kind: str
    start: int
    width: int
    categories: tuple[object, ...] = ()
    quantiles: tuple[float, ...] = ()
    is_integer: bool = False
    has_na: bool = False
    dtype: str = "object"


def _normal_ppf(p: np.ndarray) -> np.ndarray:
    from scipy.special import ndtri

    return ndtri(p)


def _normal_cdf(x: np.ndarray) -> np.ndarray:
    from scipy.special import ndtr

    return ndtr(x)


@dataclass(frozen=True)
class TabularEncoder:
    """A fitted mixed-type encoder (frozen; build it with :meth:`fit`)."""

    columns: tuple[str, ...]
    blocks: tuple[ColumnBlock, ...]
    width: int

    @classmethod
    def fit(
        cls,
        df: pd.DataFrame,
        *,
        categorical: tuple[str, ...] | list[str] | None = None,
        max_categories_numeric: int = 0,
        n_quantiles: int = 1000,
    ) -> TabularEncoder:
        """Fit on ``df``. ``categorical`` forces columns to be one-hot encoded.

        Numeric columns with at most ``max_categories_numeric`` distinct values are treated as
        categorical too (0, the default, never does).
        """
        if df.shape[1] == 0:
            raise InputError("cannot encode a table with no columns", hint="Pass at least one column")
        if len(df) == 0:
            raise InputError("cannot fit an encoder on an empty table", hint="Pass at least one row")
        forced = set(categorical or ())
        unknown = forced - set(df.columns)
        if unknown:
            raise InputError(
                f"categorical columns {sorted(unknown)} are not in the table", hint=f"Choose among {list(df.columns)}"
            )
        blocks: list[ColumnBlock] = []
        start = 0
        for name in df.columns:
            col = df[name]
            numeric = pd.api.types.is_numeric_dtype(col) and not pd.api.types.is_bool_dtype(col)
            few = numeric and col.nunique(dropna=True) <= max_categories_numeric
            if name in forced or not numeric or few:
                present = col.dropna()
                cats: list[object] = sorted(pd.unique(present).tolist(), key=lambda v: (str(type(v)), v))
                if col.isna().any():
                    cats.append(_NA)
                block = ColumnBlock(str(name), "categorical", start, len(cats), tuple(cats), dtype=str(col.dtype))
            else:
                values = col.dropna().to_numpy(dtype=float)
                if len(values) == 0:
                    raise InputError(f"numeric column {name!r} has only missing values", hint="Drop the column or fill it")
                probs = np.linspace(0.0, 1.0, min(n_quantiles, max(len(values), 2)))
                knots = np.quantile(values, probs)
                is_int = pd.api.types.is_integer_dtype(col) or bool(np.all(np.mod(values, 1) == 0))
                has_na = bool(col.isna().any())
                block = ColumnBlock(
                    str(name),
                    "numeric",
                    start,
                    3 if has_na else 1,
                    quantiles=tuple(float(k) for k in knots),
                    is_integer=is_int,
                    has_na=has_na,
                    dtype=str(col.dtype),
                )
            blocks.append(block)
            start += block.width
        return cls(tuple(str(c) for c in df.columns), tuple(blocks), start)

    # -- encode -------------------------------------------------------------------------
    def encode(self, df: pd.DataFrame) -> np.ndarray:
        """``df`` (same columns as at fit time) → float32 matrix of shape ``(len(df), width)``."""
        missing = [c for c in self.columns if c not in df.columns]
        if missing:
            raise InputError(
                f"columns {missing} are missing from the table to encode",
                hint="Encode a table with the columns the encoder was fitted on",
            )
        out = np.zeros((len(df), self.width), dtype=np.float32)
        for b in self.blocks:
            col = df[b.name]
            if b.kind == "categorical":
                values = col.astype(object).where(col.notna(), _NA)
                index = {c: i for i, c in enumerate(b.categories)}
                codes = values.map(index)
                if codes.isna().any():
                    bad = values[codes.isna()].iloc[0]
                    raise InputError(
                        f"column {b.name!r} has value {bad!r} not seen at fit time",
                        hint=f"Known values: {list(b.categories)[:10]}",
                    )
                out[np.arange(len(df)), b.start + codes.to_numpy(dtype=int)] = 1.0
            else:
                x = col.to_numpy(dtype=float, na_value=np.nan)
                na = np.isnan(x)
                q = np.asarray(b.quantiles)
                ranks = _rank_in_knots(np.where(na, q[0], x), q)
                p = np.clip(ranks, 1e-6, 1 - 1e-6)
                out[:, b.start] = np.where(na, 0.0, _normal_ppf(p)).astype(np.float32)
                if b.has_na:
                    out[:, b.start + 1] = (~na).astype(np.float32)
                    out[:, b.start + 2] = na.astype(np.float32)
        return out

    # -- decode -------------------------------------------------------------------------
    def softmax_spans(self) -> list[tuple[int, int]]:
        """``(start, end)`` of every block a generator should pass through a softmax."""
        spans = []
        for b in self.blocks:
            if b.kind == "categorical":
                spans.append((b.start, b.start + b.width))
            elif b.has_na:
                spans.append((b.start + 1, b.start + 3))
        return spans

    def numeric_index(self) -> list[int]:
        """Indices of the scaled numeric coordinates (one per numeric column)."""
        return [b.start for b in self.blocks if b.kind == "numeric"]

    def decode(self, matrix: np.ndarray, *, sample: bool = False, rng: np.random.Generator | None = None) -> pd.DataFrame:
        """Encoded (or generated) matrix → DataFrame of valid values.

        Softmax blocks hold probabilities (or one-hots); ``sample=True`` draws each category
        from them (needs ``rng``), otherwise the arg-max wins.
        """
        matrix = np.asarray(matrix, dtype=float)
        if matrix.ndim != 2 or matrix.shape[1] != self.width:
            raise InputError(
                f"matrix of shape {matrix.shape} does not match encoder width {self.width}",
                hint="Decode the output of this encoder's generator",
            )
        if sample and rng is None:
            raise InputError("sample=True needs an rng", hint="Pass rng=numpy.random.default_rng(seed)")
        data: dict[str, object] = {}
        for b in self.blocks:
            if b.kind == "categorical":
                idx = _choose(matrix[:, b.start : b.start + b.width], sample, rng)
                cats = np.array(b.categories, dtype=object)[idx]
                series = pd.Series(cats, dtype=object).where(cats != _NA, None)
                data[b.name] = _restore_dtype(series, b.dtype)
            else:
                q = np.asarray(b.quantiles)
                p = _normal_cdf(matrix[:, b.start])
                x = _inverse_rank(p, q)
                if b.is_integer:
                    x = np.rint(x)
                x = np.clip(x, q[0], q[-1])
                series = pd.Series(x)
                if b.has_na:
                    na = _choose(matrix[:, b.start + 1 : b.start + 3], sample, rng) == 1
                    series = series.where(~na, np.nan)
                data[b.name] = _restore_dtype(series, b.dtype)
        return pd.DataFrame(data, columns=list(self.columns))


def _rank_in_knots(x: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Empirical CDF through the quantile knots; a value on a run of equal knots (a mass point)
    maps to the middle of the run, so the inverse transform lands back on it."""
    probs = np.linspace(0.0, 1.0, len(q))
    lo = np.searchsorted(q, x, side="left")
    hi = np.searchsorted(q, x, side="right")
    on_knot = hi > lo
    mid = (probs[np.minimum(lo, len(q) - 1)] + probs[np.maximum(hi - 1, 0)]) / 2.0
    return np.where(on_knot, mid, np.interp(x, q, probs))


def _inverse_rank(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    probs = np.linspace(0.0, 1.0, len(q))
    return np.interp(p, probs, q)


def _choose(block: np.ndarray, sample: bool, rng: np.random.Generator | None) -> np.ndarray:
    if not sample:
        return block.argmax(axis=1)
    p = np.clip(block, 0.0, None)
    total = p.sum(axis=1, keepdims=True)
    p = np.where(total > 0, p / np.where(total > 0, total, 1.0), 1.0 / block.shape[1])
    u = rng.random((len(block), 1))  # type: ignore[union-attr]
    idx = (np.cumsum(p, axis=1) < u).sum(axis=1)
    return np.minimum(idx, block.shape[1] - 1)


def _restore_dtype(series: pd.Series, dtype: str) -> pd.Series:
    if dtype in ("object",):
        return series.astype(object)
    try:
        if series.isna().any() and dtype.startswith("int"):
            return series.astype("Int64" if dtype.startswith("int") else dtype)
        return series.astype(dtype)
    except (TypeError, ValueError):
        return series.astype(object)
