"""The answer path's bulk conversions give exactly what the per-value ones gave (values and Python types)."""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from veil._json import to_jsonable
from veil.proxy.session import _json_row, _json_rows, _py, _py_column, _py_values

_COLUMNS = st.one_of(
    st.lists(st.integers(-(2**63), 2**63 - 1)).map(lambda v: np.array(v, dtype=np.int64)),
    st.lists(st.floats(allow_nan=True, allow_infinity=True)).map(lambda v: np.array(v, dtype=np.float64)),
    st.lists(st.booleans()).map(lambda v: np.array(v, dtype=np.bool_)),
    st.lists(st.one_of(st.none(), st.integers(), st.floats(), st.integers(-5, 5).map(np.int64))).map(
        lambda v: np.array([*v, None], dtype=object)[:-1]
    ),
)


def _same(a: list[Any], b: list[Any]) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if type(x) is not type(y):
            return False
        if isinstance(x, float) and math.isnan(x):
            if not math.isnan(y):
                return False
        elif x != y:
            return False
    return True


@settings(max_examples=200, deadline=None)
@given(_COLUMNS)
def test_py_column_is_py_of_each_value(column: np.ndarray) -> None:
    assert _same(_py_column(column), [_py(v) for v in column])


_CELLS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=5),
    st.dates(),
    st.datetimes(),
    st.decimals(allow_nan=False, places=3),
    st.integers(-(2**62), 2**62).map(np.int64),
    st.floats().map(np.float64),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_CELLS, max_size=6))
def test_json_row_is_to_jsonable_of_each_value(row: list[Any]) -> None:
    assert _same(_json_row(tuple(row)), [to_jsonable(v, nan_as_null=False) for v in row])


def test_json_row_converts_what_is_not_plain() -> None:
    """The fast path is taken only for plain values: a date, a Decimal or a NumPy number in the row is converted."""
    assert _json_row((dt.date(2020, 1, 2), 1)) == ["2020-01-02", 1]
    assert _json_row((Decimal("1.5"), "a")) == ["1.5", "a"]
    assert type(_json_row((np.int64(3),))[0]) is int


def _same_nested(a: Any, b: Any) -> bool:
    """Equal with the same types, inside tuples and lists too (NaN equal to NaN)."""
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same_nested(x, y) for x, y in zip(a, b, strict=True))
    return _same([a], [b])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(_CELLS, max_size=3).map(tuple), max_size=6))
def test_json_rows_is_json_row_of_each_row(rows: list[tuple[Any, ...]]) -> None:
    """The group keys a release logs, checked in one pass over all their cells (session 20): the same rows."""
    assert _same_nested(_json_rows(rows), tuple(tuple(_json_row(r)) for r in rows))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(_CELLS, st.booleans().map(np.bool_)), max_size=8))
def test_py_values_is_py_of_each_value(values: list[Any]) -> None:
    """An answer's key column, converted only when a value needs it (session 20)."""
    assert _same(_py_values(list(values)), [_py(v) for v in values])
