"""The fast group sort (plain tuple order) equals the NULLs-last order whenever it does not raise."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from veil.proxy.session import _group_order

KEYS = st.tuples(
    st.none() | st.integers(-3, 3),
    st.none() | st.sampled_from(["a", "b", "c"]),
    st.none() | st.booleans(),
)


@given(groups=st.sets(KEYS, max_size=12))
def test_plain_order_equals_nulls_last_order(groups: set[tuple[object, ...]]) -> None:
    ref = sorted(groups, key=_group_order)
    try:
        fast = sorted(groups)  # type: ignore[type-var]
    except TypeError:
        return  # a NULL met a value: the session falls back to _group_order
    assert fast == ref
