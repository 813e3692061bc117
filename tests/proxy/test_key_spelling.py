"""A released group key has one spelling per value: the engine keeps the spelling of whichever row of a group it
met first, so any other spelling of an equal value would be one row's bit, whatever the noise (red team s15, A1)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from veil.proxy.session import exact_keys


@pytest.mark.parametrize("engine_type", ["DOUBLE", "FLOAT", "REAL", "double"])
@given(value=st.floats(allow_nan=True, allow_infinity=True))
def test_equal_float_keys_are_spelled_alike(engine_type: str, value: float) -> None:
    key = exact_keys(["VARCHAR", engine_type])
    got = key(("a", value))[1]
    if math.isnan(value):
        assert got is None  # NaN (any sign, any payload) is the NULL group
    else:
        assert got == value and math.copysign(1.0, got) == math.copysign(1.0, abs(value) if value == 0 else value)
        assert repr(key(("a", -value))[1] if value == 0 else got) == repr(got)


def test_negative_zero_and_negative_nan_lose_their_sign() -> None:
    key = exact_keys(["DOUBLE"])
    assert repr(key((-0.0,))[0]) == "0.0"
    assert key((-math.nan,))[0] is None and key((math.nan,))[0] is None
    assert key((None,))[0] is None
