"""Published columns take their type from the policy, never from the data they were made from.

A source column's pandas dtype says things about its rows: an integer column holding one missing value is a
float, an all-missing one an object. A generated column that kept that dtype (kRR: red team s16 A1; synthetic
tables: red team s20 A4) published whether one person's value was missing, whatever the model learnt. Every
generated column is therefore cast to a type fixed by its declared Veil type alone (values that do not convert
become missing, the same way whatever the rows).

>>> import pandas as pd
>>> as_declared(pd.Series([1.0, None, 3.0]), "int").dtype, as_declared(pd.Series([1, 2]), "float").dtype
(Int64Dtype(), Float64Dtype())
>>> as_declared(pd.Series([1, None]), "category").tolist()  # a float series: 1.0
['1', <NA>]
"""

from __future__ import annotations

from typing import Any

import pandas as pd

__all__ = ["as_declared", "as_source", "as_stored"]


_INT64_END = 2.0**63


def _numbers(series: pd.Series) -> pd.Series:
    """``series`` as float64 (NaN for what is not a number, booleans as 0/1)."""
    return pd.to_numeric(series.astype(object), errors="coerce").astype("float64")


def _bool(v: Any) -> Any:
    if v is None or v is pd.NA or (isinstance(v, float) and v != v):
        return pd.NA
    if isinstance(v, str):
        low = v.strip().lower()
        return True if low in ("true", "t", "1", "yes") else False if low in ("false", "f", "0", "no") else pd.NA
    try:
        return bool(v)
    except (TypeError, ValueError):
        return pd.NA


def as_declared(series: pd.Series, veil_type: str | None) -> pd.Series:
    """``series`` in the pandas type of ``veil_type`` (int → Int64, float → Float64, bool → boolean, category →
    string, date → datetime64[s]); a column with no declared type is left as objects."""
    if veil_type == "int":
        numbers = _numbers(series).round()
        return numbers.where(numbers.abs() < _INT64_END).astype("Int64")  # beyond BIGINT: missing, as unconvertible
    if veil_type == "float":
        return _numbers(series).astype("Float64")
    if veil_type == "bool":
        return series.astype(object).map(_bool).astype("boolean")
    if veil_type == "date":
        return pd.to_datetime(series.astype(object), errors="coerce", format="mixed").astype("datetime64[s]")
    if veil_type == "category":
        return series.astype(object).map(_text).astype("string")
    return series.astype(object)  # no declared type (not a policy column): as it is


def _text(v: Any) -> Any:
    """A category's text: a whole float as its integer (a missing value makes an int column a float one)."""
    if v is None or v is pd.NA or (isinstance(v, float) and v != v):
        return pd.NA
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def as_source(frame: pd.DataFrame, spec: Any) -> pd.DataFrame:
    """The source rows as the policy types them: a declared ``int``/``float`` column read as numbers, a ``bool``
    column as booleans, a ``category`` column as text (``1.0`` → ``'1'``), a value that does not convert missing —
    for that person alone.

    The warehouse types a column from every value in it (``veil ingest`` of a CSV): one person's ``'x'`` in an
    ``int`` column makes the whole column text. A publication that read those dtypes changed for everyone because
    of one person (red team s35 A1: kRR read every row as outside its domain, the DP grid was refused naming the
    dtype, k-anonymity generalised the numeric QI as categories; a category declared ``["1", "2"]`` read as numbers
    matched no declared value unless one person's value was text), where the query path's typed reads drop that
    one value. Columns already of their declared kind are left as they are.

    >>> out = as_source(pd.DataFrame({"n": ["1", "x"], "b": ["true", "x"]}),
    ...                 type("S", (), {"columns": {"n": type("C", (), {"type": "int"})(),
    ...                                            "b": type("C", (), {"type": "bool"})()}})())
    >>> out["n"].tolist(), out["b"].tolist()
    ([1.0, nan], [True, <NA>])
    """
    columns = getattr(spec, "columns", None) or {}
    out = frame
    for name, col in columns.items():
        if name not in frame.columns:
            continue
        series = frame[name]
        kind = getattr(col, "type", None)
        numeric = pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series)
        if kind in ("int", "float") and not numeric:
            converted = _numbers(series)
        elif kind == "bool" and not pd.api.types.is_bool_dtype(series) and series.map(lambda v: isinstance(v, str)).any():
            converted = series.astype(object).map(_bool)
        elif kind == "category" and (pd.api.types.is_numeric_dtype(series) or pd.api.types.is_bool_dtype(series)):
            # a category of digits ("1", "2") is stored as numbers unless someone's value is not one
            converted = series.astype(object).map(_text)
        else:
            continue
        if out is frame:
            out = frame.copy()
        out[name] = converted
    return out


def as_stored(frame: pd.DataFrame, spec: Any) -> pd.DataFrame:
    """``frame`` as a curator's write stores it: a declared ``category`` column always as text (``1.0`` → ``'1'``),
    and a declared ``int``/``float``/``bool`` column whose values are of mixed Python types as their text, the way
    ``veil ingest`` stores a CSV column holding one value that is not a number.

    A pandas frame's dtypes follow its rows: one person's missing grade makes an integer column a float one, and
    the warehouse stored the category ``1`` as ``1.0``; the query path reads a category as text, so ``COUNT(*) WHERE
    grade = '1'`` went from 75 to 0 because of that one person (the s37 A1 class, through the Python
    ``write_table``). One ``True`` among numbers failed the write with an engine error.

    >>> spec = type("S", (), {"columns": {"g": type("C", (), {"type": "category"})(),
    ...                                   "n": type("C", (), {"type": "int"})()}})()
    >>> out = as_stored(pd.DataFrame({"g": [1.0, None], "n": pd.Series([1, True], dtype=object)}), spec)
    >>> out["g"].tolist(), out["n"].tolist()
    (['1', <NA>], ['1', 'True'])
    """
    columns = getattr(spec, "columns", None) or {}
    out = frame
    for name, col in columns.items():
        if name not in frame.columns:
            continue
        series = frame[name]
        kind = getattr(col, "type", None)
        texts = series.dtype == object and series.map(lambda v: isinstance(v, str) or _missing(v)).all()
        if kind == "category" and not (texts or isinstance(series.dtype, pd.StringDtype)):
            converted = as_declared(series, "category")
        elif (
            kind in ("int", "float", "bool") and series.dtype == object and len({type(v) for v in series if not _missing(v)}) > 1
        ):
            converted = series.astype(object).map(_text).astype("string")
        else:
            continue
        if out is frame:
            out = frame.copy()
        out[name] = converted
    return out


def _missing(v: Any) -> bool:
    return v is None or v is pd.NA or (isinstance(v, float) and v != v)
