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

import datetime as dt
import decimal
import math
import re
from typing import Any

import numpy as np
import pandas as pd

from veil.errors import InputError

__all__ = ["as_declared", "as_source", "as_stored", "whole_numbers"]


_INT64_END = 2.0**63
_INT64_LIMIT = 2**63
#: Beyond it not every integer is a float: a whole float there may be a rounded integer.
_EXACT_FLOAT_END = 2.0**53


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
        # ``-0.0`` as ``0.0`` (adding ``0.0`` drops the sign of a zero alone): the rules count it among the zeros, and
        # DuckDB would print and group it apart (one person's ``-0``; red team s76 F4)
        return (_numbers(series) + 0.0).astype("Float64")
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


def whole_numbers(series: pd.Series) -> pd.Series:
    """A declared ``int`` column's values as whole numbers (float64, NaN for a value that is none), each value as the
    query path's ``TRY_CAST(… AS BIGINT)`` reads it: a text (how :func:`as_stored` keeps a fraction in an ``int``
    column) rounded half away from zero, ``'2.5'`` → 3, as DuckDB casts a text; a number rounded half to even,
    2.5 → 2, as DuckDB casts a DOUBLE; not finite, not a number or beyond BIGINT: missing. A function of each value
    alone, and :func:`as_declared` (``int``) leaves every value it gives as it is.

    >>> whole_numbers(pd.Series(["2.5", "-2.5", "40.2", "x", "7"])).tolist()
    [3.0, -3.0, 40.0, nan, 7.0]
    >>> whole_numbers(pd.Series([2.5, 3.5, -0.4, float("inf"), 1e300])).tolist()
    [2.0, 4.0, -0.0, nan, nan]
    """
    x = _numbers(series)
    even = np.round(x.to_numpy())
    objects = series.dtype == object or isinstance(series.dtype, pd.StringDtype)
    texts = series.astype(object).map(lambda v: isinstance(v, str)).to_numpy(dtype=bool) if objects else None
    if texts is not None and texts.any():
        away = np.sign(x.to_numpy()) * np.floor(np.abs(x.to_numpy()) + 0.5)
        even = np.where(texts, away, even)
    with np.errstate(invalid="ignore"):
        whole = np.where(np.abs(even) < _INT64_END, even, np.nan)
    return pd.Series(whole, index=series.index, dtype="float64")


def as_source(frame: pd.DataFrame, spec: Any) -> pd.DataFrame:
    """The source rows as the policy types them: a declared ``int`` column read as whole numbers (each value rounded
    as the query path's cast rounds it, :func:`whole_numbers`), a ``float`` column as numbers, a ``bool`` column as
    booleans (numbers too: 0 false, any other true), a ``category`` column as text (``1.0`` → ``'1'``), a value that
    does not convert missing — for that person alone. Every value is then one the publication's output type
    (:func:`as_declared`) leaves as it is: a publication's rules see the values it publishes (red team s72 F4/F5: a
    declared ``int`` column holding fractions passed k-anonymity's diversity and rare-value rules as fractions, and
    was published rounded, each class's values one).

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
    >>> as_source(pd.DataFrame({"n": ["40.2", "39.6"], "b": [2, 0]}), type("S", (), {"columns": {
    ...     "n": type("C", (), {"type": "int"})(), "b": type("C", (), {"type": "bool"})()}})())["n"].tolist()
    [40.0, 40.0]
    """
    columns = getattr(spec, "columns", None) or {}
    out = frame
    for name, col in columns.items():
        if name not in frame.columns:
            continue
        series = frame[name]
        kind = getattr(col, "type", None)
        numeric = pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series)
        if kind == "int" and not (numeric and pd.api.types.is_integer_dtype(series)):
            # whole numbers, as the query path's cast reads each value (red team s72 F4/F5): a fraction read as it is
            # would pass every rule and then be published rounded (as_declared), several values become one
            converted = whole_numbers(series)
        elif kind == "float" and not numeric:
            converted = _numbers(series)
        elif (
            kind == "bool"
            and not pd.api.types.is_bool_dtype(series)
            and (numeric or series.map(lambda v: isinstance(v, str)).any())
        ):
            # numbers too (0 → false, anything else → true, as the cast and as_declared read them): a 2 read as the
            # number 2 was published as true, one value with the 1s (s72 F4's class)
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
    and each declared ``int``/``float``/``bool`` column in a form every value of which the query path's
    ``TRY_CAST(stored AS declared type)`` reads the same whatever the other rows hold.

    A pandas frame's dtypes follow its rows: one person's missing grade makes an integer column a float one, and
    the warehouse stored the category ``1`` as ``1.0``; the query path reads a category as text, so ``COUNT(*) WHERE
    grade = '1'`` went from 75 to 0 because of that one person (the s37 A1 class, through the Python
    ``write_table``). One ``True`` among numbers failed the write with an engine error.

    A numeric or boolean column is stored in its declared kind (nullable ``Int64``, ``Float64``, ``boolean``) when
    every value converts exactly, and otherwise as text — each value rendered by :func:`_canonical` alone, so the
    text casts to what the typed value would have. DuckDB casts the DOUBLE ``2.5`` to the BIGINT 2 but the text
    ``'2.5'`` to 3, the DOUBLE ``1.0`` to ``true`` but the text ``'1.0'`` to NULL, and registers a column of
    ``Decimal`` values holding one ``NaN`` as 32-bit floats; one person's text or NaN decided which, for everyone
    (red team s38, A2–A4). A float column (one gap makes pandas read integers as floats) holding a whole number
    between 2⁵³ and 2⁶³ in an ``int`` or ``category`` column has lost the integers' last digits, and 64-bit
    identifiers have merged: the write is refused (A1).

    >>> spec = type("S", (), {"columns": {"g": type("C", (), {"type": "category"})(),
    ...                                   "n": type("C", (), {"type": "int"})()}})()
    >>> out = as_stored(pd.DataFrame({"g": [1.0, None], "n": pd.Series([1, True], dtype=object)}), spec)
    >>> out["g"].tolist(), out["n"].tolist()
    (['1', <NA>], [1, 1])
    >>> as_stored(pd.DataFrame({"g": ["1", "2"], "n": pd.Series([2.5, "x"], dtype=object)}), spec)["n"].tolist()
    ['2.5', 'x']
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
            for v in series.tolist() if pd.api.types.is_float_dtype(series.dtype) else ():
                _exact_float(v, name)  # an id category held as floats: the written text of 2**60 + 7 is gone
            converted = as_declared(series, "category")
        elif kind in ("int", "float", "bool") and name == getattr(spec, "privacy_unit", None):
            # the unit is kept as stored: the bounded copy tells people apart by the stored value ('10' and '010', 0.0
            # and -0.0 are two people), which a conversion would merge; a float column that rounded ids is refused
            for v in series.tolist() if kind == "int" and pd.api.types.is_float_dtype(series.dtype) else ():
                _exact_float(v, name)
            if series.dtype != object or texts:
                continue
            # objects of several kinds: DuckDB would make one float 0.5 (or one Decimal NaN: 32-bit floats) a DOUBLE
            # column of every id, and ids beyond 2**53 would merge; each value kept apart as its own text instead
            converted = series.map(_unit_text).astype("string")
        elif kind in ("int", "float", "bool"):
            converted = _stored(series, kind, name)
            if converted is None:
                continue
        elif kind == "date":
            converted = _stored_dates(series)
            if converted is None:
                continue
        else:
            continue
        if out is frame:
            out = frame.copy()
        out[name] = converted
    return out


def _wall_clock(v: Any) -> Any:
    """A date-time as its own wall-clock time, without the zone, to the microsecond (floored); any other value as
    it is. A NumPy ``datetime64`` is read as a ``pd.Timestamp`` first (one beyond its range stays as it is); bytes
    are read as UTF-8 text (missing if they are none): one ``bytes`` value made DuckDB store the column as BLOB,
    every text date in it NULL (red team s47, B3)."""
    if isinstance(v, (bytes, bytearray)):
        try:
            return bytes(v).decode("utf-8")
        except UnicodeDecodeError:
            return None
    if isinstance(v, np.datetime64):
        try:
            v = pd.Timestamp(v)
        except (OverflowError, ValueError):
            return v
    if v is pd.NaT or not isinstance(v, dt.datetime):
        return v
    if v.tzinfo is not None:
        v = v.replace(tzinfo=None)  # a pd.Timestamp too (a subclass), nanoseconds kept
    if isinstance(v, pd.Timestamp) and v.nanosecond:
        v = v.floor("us")
    return v


def _needs_wall_clock(v: Any) -> bool:
    return isinstance(v, (np.datetime64, bytes, bytearray)) or (
        isinstance(v, dt.datetime)
        and v is not pd.NaT
        and (v.tzinfo is not None or (isinstance(v, pd.Timestamp) and v.nanosecond != 0))
    )


def _datetime_dtype(dtype: Any) -> bool:
    """A dtype whose values are date-times but which DuckDB stores by the dtype, not value by value: zoned or
    nanosecond NumPy ones, Arrow timestamps, categories of date-times."""
    if isinstance(dtype, pd.ArrowDtype):
        return bool(dtype.kind == "M")  # Arrow timestamps and dates
    if isinstance(dtype, pd.CategoricalDtype):
        return _datetime_dtype(dtype.categories.dtype) or pd.api.types.is_datetime64_dtype(dtype.categories.dtype)
    return isinstance(dtype, pd.DatetimeTZDtype)


def _stored_dates(series: pd.Series) -> pd.Series | None:
    """A declared ``date`` column with every date-time as its own wall-clock time to the microsecond (None: nothing
    to change).

    A zoned value made DuckDB store the whole column as TIMESTAMP WITH TIME ZONE, which the bounded copy reads as
    dates in the zone of the process that builds it, while a column that one person's text (or plain date) turned
    into text is read value by value, each zoned value at its own wall-clock date (DuckDB's cast of
    ``'2020-01-01 03:00:00+05:30'`` to DATE ignores the offset). So one person's value moved everyone's date by a
    day: 30 people's ``03:00 +05:30`` were 2019-12-31 on a UTC host, and 2020-01-01 once one more person's date
    was text (red team s45, A1). The same held for zoned Arrow timestamps (``read_csv(dtype_backend="pyarrow")``)
    and categories of zoned values, which are no ``DatetimeTZDtype`` (red team s47, B1), and for nanoseconds:
    DuckDB stores them as TIMESTAMP_NS, whose cast to DATE *rounds* to the microsecond (``23:59:59.999999999`` is
    the next day), while one person's text made the column text and ``TRY_CAST`` cut the digits (s47, B2). Each
    value's own wall clock, floored to the microsecond, is what DuckDB's cast of its text gives, so a frame and its
    CSV store the same dates on every engine and host, whatever the other rows are."""
    dtype = series.dtype
    if isinstance(dtype, pd.DatetimeTZDtype):
        return series.dt.tz_localize(None).dt.floor("us")
    if pd.api.types.is_datetime64_dtype(dtype):
        return series.dt.floor("us") if bool((series.dt.nanosecond != 0).any()) else None
    if _datetime_dtype(dtype):
        return series.astype(object).map(_wall_clock).astype(object)
    if dtype != np.dtype(object) or not series.map(_needs_wall_clock).any():
        return None
    return series.map(_wall_clock).astype(object)


_NATIVE = {"int": "Int64", "float": "Float64", "bool": "boolean"}
_INT_TEXT = re.compile(r"\s*[+-]?\d{1,19}\s*")  # longer: read as a Decimal (int() refuses 4,300 digits)
_BOOL_TEXT = {"true": True, "t": True, "yes": True, "y": True, "false": False, "f": False, "no": False, "n": False}


def _stored(series: pd.Series, kind: str, name: str) -> pd.Series | None:
    """``series`` (a declared ``kind`` column) in its stored form, or None when it is already of the declared kind."""
    if kind == "int" and pd.api.types.is_integer_dtype(series.dtype):
        return None
    if kind == "float" and pd.api.types.is_float_dtype(series.dtype):
        return None
    if kind == "bool" and pd.api.types.is_bool_dtype(series.dtype):
        return None
    if kind == "int" and pd.api.types.is_float_dtype(series.dtype):
        for v in series.tolist():  # pandas made the integers floats (one gap does): refused if digits were lost
            _exact_float(v, name)
    values = [_canonical(v, kind) for v in series.astype(object)]
    if all(not isinstance(v, str) for v in values):
        return pd.Series(values, index=series.index, dtype=object).astype(_NATIVE[kind])
    return pd.Series([_render(v) for v in values], index=series.index, dtype=object).astype("string")


def _canonical(v: Any, kind: str) -> Any:
    """One value of a declared ``kind`` column: the declared kind's value (``pd.NA`` for one that cannot be any),
    or a text the query path's cast reads (as written). A function of the value alone."""
    if _missing(v):
        return pd.NA
    if isinstance(v, decimal.Decimal):
        if not v.is_finite():
            return pd.NA
        if kind != "int":
            v = float(v)
        elif v.adjusted() >= 19:
            return pd.NA  # beyond BIGINT (decided from the exponent: int() of 1E+1000000 would take long)
        else:
            v = int(v) if v == v.to_integral_value() else str(v)
    if isinstance(v, str):
        text = v.strip()
        if kind == "int" and _INT_TEXT.fullmatch(v):
            v = int(text)
        elif kind == "int":
            try:  # a whole number written with a fraction or an exponent (40.0, 4e1): its integer
                number = decimal.Decimal(text)
            except decimal.InvalidOperation:
                return v
            if not number.is_finite() or number.adjusted() >= 19 or number != number.to_integral_value():
                return v  # as written: the query path's cast reads it (2.5 → 3, 1e400 → NULL)
            v = int(number)
        elif kind == "float":
            try:
                return float(text)
            except ValueError:
                return v
        elif kind == "bool" and text.lower() in _BOOL_TEXT:
            return _BOOL_TEXT[text.lower()]
        elif kind == "bool":
            try:  # a number written as text: true unless zero (1.0 is how pandas writes a 0/1 column with a gap)
                real = float(text)
            except ValueError:
                return v
            return pd.NA if real != real else real != 0
        else:
            return v
    if isinstance(v, (bool, np.bool_)):
        return bool(v) if kind == "bool" else (float(v) if kind == "float" else int(v))
    if isinstance(v, (int, np.integer)):
        if kind == "bool":
            return int(v) != 0
        if kind == "float":
            return float(v)
        return int(v) if abs(int(v)) < _INT64_LIMIT else pd.NA  # beyond BIGINT: missing, as the cast reads it
    if isinstance(v, (float, np.floating)):
        f = float(v)
        if f != f:
            return pd.NA
        if kind == "bool":
            return f != 0
        if kind == "float":
            return f
        if f in (math.inf, -math.inf) or abs(f) >= _INT64_END:
            return pd.NA
        if f.is_integer():
            return int(f)
        return repr(f)  # a fraction: as text, so the cast rounds it as it rounds the written number
    return str(v)


def _exact_float(v: Any, name: str) -> None:
    """Refuse a whole float beyond 2**53 in a declared int or category column: it may be a rounded integer."""
    f = float(v)
    if math.isfinite(f) and f.is_integer() and _EXACT_FLOAT_END <= abs(f) < _INT64_END:
        raise InputError(
            f"column {name!r} holds the whole number {f!r} as a float: beyond 2**53 a float has lost the integer's "
            "last digits (a missing value makes pandas read an integer column as floats), and two people's values, "
            "identifiers included, may have become one",
            hint=f"Pass {name!r} as pandas' nullable integers (`df[{name!r}].astype('Int64')` before values go "
            "missing) or as text, or read the file with `veil ingest`, which reads it as written",
        )


def _unit_text(v: Any) -> Any:
    """A privacy unit's value as text, two stored values never one (``0.0`` and ``-0.0``, ``2`` and ``2.0`` apart)."""
    if _missing(v) or (isinstance(v, decimal.Decimal) and v.is_nan()):
        return pd.NA
    if isinstance(v, (bool, np.bool_)):
        return "true" if v else "false"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        return repr(float(v))
    return str(v)


def _render(v: Any) -> Any:
    """A canonical value as the text stored in a column that holds some text."""
    if v is pd.NA or isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    return repr(v) if isinstance(v, float) else str(v)


def _missing(v: Any) -> bool:
    return v is None or v is pd.NA or v is pd.NaT or (isinstance(v, float) and v != v)
