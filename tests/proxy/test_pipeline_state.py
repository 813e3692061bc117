"""``pipeline._with``, the pipeline's cheap ``dataclasses.replace`` of a QueryState, gives the same state."""

from __future__ import annotations

import dataclasses
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from veil.proxy import pipeline
from veil.proxy.pipeline import QueryState

_FIELDS = [f.name for f in dataclasses.fields(QueryState)]


def test_query_state_has_nothing_its_init_derives() -> None:
    """What makes ``_with`` valid: no ``__post_init__``, no ``InitVar``, every field set by ``__init__`` as given."""
    assert not hasattr(QueryState, "__post_init__")
    assert all(f.init for f in dataclasses.fields(QueryState))
    assert set(_FIELDS) == set(QueryState("x", Fraction(1)).__dict__)


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(_FIELDS),
        st.one_of(st.none(), st.integers(), st.text(max_size=5), st.booleans()),
        max_size=6,
    ),
    st.dictionaries(st.sampled_from(_FIELDS), st.one_of(st.none(), st.integers(), st.text(max_size=5)), max_size=4),
)
def test_with_equals_dataclasses_replace(first: dict[str, Any], changes: dict[str, Any]) -> None:
    base = dataclasses.replace(QueryState("SELECT 1", Fraction(1, 3)), **first)
    fast = pipeline._with(base, **changes)
    slow = dataclasses.replace(base, **changes)
    assert type(fast) is QueryState
    assert {n: getattr(fast, n) for n in _FIELDS} == {n: getattr(slow, n) for n in _FIELDS}
    assert {n: getattr(base, n) for n in _FIELDS} == {  # the original is untouched
        n: getattr(dataclasses.replace(QueryState("SELECT 1", Fraction(1, 3)), **first), n) for n in _FIELDS
    }
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.sql = "changed"  # type: ignore[misc]


def test_with_refuses_an_unknown_field() -> None:
    with pytest.raises(TypeError, match="no field 'nope'"):
        pipeline._with(QueryState("SELECT 1", Fraction(1)), nope=1)
