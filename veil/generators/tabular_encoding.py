"""Mixed-type tabular encoding for neural generators: one-hot categoricals, scaled numerics.

A :class:`TabularEncoder` is fitted on a DataFrame and turns it into a float32 matrix; a
generator's raw output goes back through :meth:`TabularEncoder.decode`, which always yields
*valid* values: categories of the column's domain, numbers inside its range, integers for
integer columns.

**Domains.** What a decoded column can hold is its *domain*. Publications pass ``domains``
(:class:`ColumnDomain`, built from the policy by :func:`declared_domains`): the one-hot block of a
category column is exactly its declared ``values``, the inverse transform of a number spans exactly
its declared ``[lower, upper]``, and NA is never decoded — so nothing a generator emits depends on
which values the training rows happen to hold (one person's rare category or outlier cannot widen
the output's support). Training rows outside the domain are left out by the caller
(:meth:`TabularEncoder.in_domain`: an undeclared category, a NA), numbers are clamped into the
bounds, as the query path does. A column without a declared domain (an open category, an unbounded
number) is refused by :func:`declared_domains` with a :class:`~veil.errors.PolicyError`: a refusal
that depends on the policy only. Without ``domains`` (library use on *public* data, e.g. the
benchmarks) the domains are the observed ones: categories seen at fit time (NA one more category
where the fit data has NA) and the observed ``[min, max]``.

Encoding, per column:

* **categorical** (object, string, category or bool dtype, a column whose domain lists
  ``values``, or numeric with at most ``max_categories_numeric`` distinct values): one-hot over the
  domain's categories. Decoding takes the arg-max of each block, or
  samples from the block's softmax with ``sample=True`` (the generator's logits define a
  distribution; sampling keeps its spread, arg-max collapses it onto the mode).
* **numeric**: the empirical quantile transform to a standard normal (``n_quantiles`` knots,
  linear interpolation), so skewed and spiky columns (Adult's ``hours_per_week`` with half
  its mass at 40) become one well-scaled coordinate. Decoding applies the inverse transform,
  which maps every real number back into ``[min, max]`` of the fit data and lands on
  frequent values' mass points; integer columns are rounded. With a declared domain the first
  and last knots are the declared ``lower`` and ``upper`` (the rest are the training quantiles), so
  the decoded range is the declared one whatever the extreme training values are. Without domains,
  numeric NA gets a 2-way "missing" one-hot block after the value; a decoded "missing" gives NA.

>>> import pandas as pd
>>> df = pd.DataFrame({"age": [20, 30, 40, 50], "sex": ["F", "M", "M", None]})
>>> enc = TabularEncoder.fit(df)
>>> enc.encode(df).shape
(4, 4)
>>> enc.decode(enc.encode(df)).equals(df)
True
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from veil.errors import InputError, PolicyError

__all__ = ["ColumnBlock", "ColumnDomain", "TabularEncoder", "declared_domains"]

_NA = "__veil_na__"

#: an integer column with declared bounds whose range holds at most this many values may be one-hot encoded
MAX_INTEGER_CATEGORIES = 256


@dataclass(frozen=True)
class ColumnDomain:
    """The values a generated column may hold, fixed before any data is read.

    Categorical: ``values`` (the declared categories, in a fixed order). Numeric: ``lower``/``upper``
    (declared bounds) and ``is_integer``.

    >>> ColumnDomain(values=("F", "M")).categorical, ColumnDomain(lower=0, upper=9).categorical
    (True, False)
    """

    values: tuple[Any, ...] | None = None
    lower: float | None = None
    upper: float | None = None
    is_integer: bool = False

    @property
    def categorical(self) -> bool:
        return self.values is not None

    def contains(self, col: pd.Series) -> np.ndarray:
        """Boolean mask of the entries of ``col`` inside this domain (NA never is; numbers are clamped
        into the bounds, so any non-NA number is)."""
        if self.values is not None:
            return col.isin(list(self.values)).to_numpy() & col.notna().to_numpy()
        return col.notna().to_numpy()


def declared_domains(
    spec: Any, columns: Sequence[str], *, categorical: Sequence[str] = (), table: str | None = None
) -> dict[str, ColumnDomain]:
    """``{column: ColumnDomain}`` from a policy's table spec (:class:`veil.policy.TableSpec`) alone.

    A category column needs declared ``values``; a number declared ``lower`` and ``upper``; a column
    in ``categorical`` (a class label) needs ``values``, or integer bounds spanning at most
    :data:`MAX_INTEGER_CATEGORIES` values (its categories are then ``lower, …, upper``). Anything else
    — an open category, an unbounded number, a date, an undeclared column — raises
    :class:`~veil.errors.PolicyError` naming the column and what to declare: a synthetic table may
    only hold values fixed by the policy, never values read from the rows (one person's rare value
    would otherwise appear in the output only when they are in the table). The refusal depends on the
    policy only, never on the data.

    >>> from veil.policy import ColumnSpec, TableSpec
    >>> spec = TableSpec("t", {"sex": ColumnSpec("sex", "category", values=("F", "M")),
    ...                        "age": ColumnSpec("age", "int", lower=17, upper=90)})
    >>> d = declared_domains(spec, ["sex", "age"])
    >>> d["sex"].values, (d["age"].lower, d["age"].upper, d["age"].is_integer)
    (('F', 'M'), (17.0, 90.0, True))
    >>> declared_domains(TableSpec("t", {"job": ColumnSpec("job", "category")}), ["job"])
    Traceback (most recent call last):
    ...
    veil.errors.PolicyError: column 'job' of table 't' has no declared domain: ...
    """
    name = table or getattr(spec, "name", "?")
    where = f"[tables.{name}.columns]"
    cats = set(categorical)
    out: dict[str, ColumnDomain] = {}
    for c in columns:
        col = spec.columns.get(c) if spec is not None else None
        if col is None:
            raise PolicyError(
                f"column {c!r} is not declared for table {name!r}: a synthetic table may only hold declared columns",
                hint=f"Declare it in {where} with its values (a category) or lower/upper (a number)",
            )
        if col.values:
            out[c] = ColumnDomain(values=tuple(col.values))
        elif col.type == "bool":
            out[c] = ColumnDomain(values=(False, True))
        elif col.type in ("int", "float") and col.lower is not None and col.upper is not None:
            lo, hi = float(col.lower), float(col.upper)
            if c in cats:
                if col.type != "int" or hi - lo + 1 > MAX_INTEGER_CATEGORIES:
                    raise PolicyError(
                        f"column {c!r} of table {name!r} is a class label but declares no values",
                        hint=f"Declare its classes in {where}: {c} = {{ type = ..., values = [...] }}",
                    )
                out[c] = ColumnDomain(values=tuple(range(int(lo), int(hi) + 1)))
            else:
                out[c] = ColumnDomain(lower=lo, upper=hi, is_integer=col.type == "int")
        else:
            what = (
                "values = [...] (its categories)"
                if col.type in ("category", "date") or c in cats
                else "lower = ... and upper = ... (its bounds)"
            )
            raise PolicyError(
                f"column {c!r} of table {name!r} has no declared domain: a synthetic table may only hold values the "
                "policy declares, never values read from the rows (a value one person alone holds would appear only "
                "when they are in the table)",
                hint=f"Declare {what} for {c!r} in {where}, or leave the column out",
            )
    return out


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
        domains: Mapping[str, ColumnDomain] | None = None,
    ) -> TabularEncoder:
        """Fit on ``df``. ``categorical`` forces columns to be one-hot encoded.

        Numeric columns with at most ``max_categories_numeric`` distinct values are treated as
        categorical too (0, the default, never does). With ``domains`` (publications: see the module
        docstring) every column needs one, and ``df`` must hold in-domain rows only
        (:meth:`in_domain`); the categories and numeric ranges come from the domains alone.
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
        if domains is not None:
            return cls._fit_declared(df, domains, n_quantiles)
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

    @classmethod
    def _fit_declared(cls, df: pd.DataFrame, domains: Mapping[str, ColumnDomain], n_quantiles: int) -> TabularEncoder:
        open_ = [str(c) for c in df.columns if c not in domains]
        if open_:
            raise PolicyError(
                f"column {open_[0]!r} has no declared domain",
                hint="Build the domains with declared_domains() from the policy, for every column",
            )
        outside = [str(c) for c in df.columns if not domains[c].contains(df[c]).all()]
        if outside:
            raise InputError(
                f"column {outside[0]!r} has rows outside its declared domain",
                hint="Keep only the rows TabularEncoder.in_domain() accepts before fitting",
            )
        blocks: list[ColumnBlock] = []
        start = 0
        for name in df.columns:
            dom = domains[name]
            col = df[name]
            if dom.values is not None:
                # the dtype from the domain, never the rows' (a missing int makes the column float: red team s20 A4)
                block = ColumnBlock(str(name), "categorical", start, len(dom.values), tuple(dom.values), dtype="object")
            else:
                if dom.lower is None or dom.upper is None or not dom.lower <= dom.upper:
                    raise PolicyError(
                        f"numeric column {name!r} needs declared bounds lower ≤ upper, got [{dom.lower}, {dom.upper}]",
                        hint="Declare lower and upper in the policy",
                    )
                values = np.clip(col.to_numpy(dtype=float), dom.lower, dom.upper)
                probs = np.linspace(0.0, 1.0, min(n_quantiles, max(len(values), 2)))
                knots = np.quantile(values, probs) if len(values) else np.linspace(dom.lower, dom.upper, len(probs))
                knots[0], knots[-1] = dom.lower, dom.upper  # the decoded range is the declared one, not the rows'
                block = ColumnBlock(
                    str(name),
                    "numeric",
                    start,
                    1,
                    quantiles=tuple(float(k) for k in knots),
                    is_integer=dom.is_integer,
                    dtype="Int64" if dom.is_integer else "float64",
                )
            blocks.append(block)
            start += block.width
        return cls(tuple(str(c) for c in df.columns), tuple(blocks), start)

    @staticmethod
    def in_domain(df: pd.DataFrame, domains: Mapping[str, ColumnDomain]) -> np.ndarray:
        """Mask of the rows of ``df`` whose every column (of those in ``domains``) is inside its domain:
        the rows a generator may train on (the others are left out, as queries leave them out)."""
        mask = np.ones(len(df), dtype=bool)
        for c, dom in domains.items():
            if c in df.columns:
                mask &= dom.contains(df[c])
        return mask

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
                q = np.asarray(b.quantiles)
                x = col.to_numpy(dtype=float, na_value=np.nan)
                na = np.isnan(x)
                x = np.clip(x, q[0], q[-1])
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
