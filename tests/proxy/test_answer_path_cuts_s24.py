"""Session 24's cuts of the noise pass (issue 16) give what the code before them gave.

``add_noise.clamp_raw`` skips NumPy's ``clip`` and ``nan_to_num`` where they would change nothing (every count within
±2⁶², every real finite and within ±1e300): compared here with the old code, copied as the reference, bit for bit
(the sign of a zero included) over hypothesis-made values at and around the limits, NaN and ±inf. Deterministic.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from veil.proxy import add_noise

_SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _old_clamp_real(values: np.ndarray) -> np.ndarray:
    """``clamp_raw``'s real branch before session 24 (after the exact sums became doubles)."""
    arr = np.nan_to_num(values.astype(np.float64), nan=0.0, posinf=add_noise.FLOAT_LIMIT, neginf=-add_noise.FLOAT_LIMIT)
    return np.clip(arr, -add_noise.FLOAT_LIMIT, add_noise.FLOAT_LIMIT)


def _old_clamp_counts(values: list[Any]) -> list[int]:
    return [max(-add_noise.INT_LIMIT, min(add_noise.INT_LIMIT, int(v))) for v in values]


_LIMIT = add_noise.FLOAT_LIMIT
_REALS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(
        [0.0, -0.0, _LIMIT, -_LIMIT, np.nextafter(_LIMIT, np.inf), np.nextafter(-_LIMIT, -np.inf), 1.7976931348623157e308]
    ),
    st.floats(-1e12, 1e12),
)


class _Real:
    mechanism = "laplace"


class _Count:
    mechanism = "discrete_laplace"


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return (
        a.dtype == b.dtype
        and a.shape == b.shape
        and np.array_equal(a, b, equal_nan=True)
        and np.array_equal(np.signbit(a), np.signbit(b))
    )


@_SETTINGS
@given(st.lists(_REALS, max_size=60))
def test_reals_clamped_as_before(values: list[float]) -> None:
    arr = np.array(values, dtype=np.float64)
    got = add_noise.clamp_raw(_Real(), arr)  # type: ignore[arg-type]
    assert _same(got, _old_clamp_real(arr))
    assert got is not arr  # a new array, as before (the caller's values are never aliased)


_COUNTS = st.one_of(
    st.integers(-(2**70), 2**70),
    st.sampled_from([2**62, 2**62 + 1, -(2**62), -(2**62) - 1, 2**63, -(2**63), 0]),
    st.integers(-(10**6), 10**6),
)


@_SETTINGS
@given(st.lists(_COUNTS, max_size=60))
def test_counts_clamped_as_before(values: list[int]) -> None:
    arr = np.empty(len(values), dtype=object)
    arr[:] = values
    got = add_noise.clamp_raw(_Count(), arr)  # type: ignore[arg-type]
    assert got.dtype == np.int64 and got.shape == (len(values),) and got.tolist() == _old_clamp_counts(values)


def test_a_charged_answer_is_what_dataclasses_replace_gave(tmp_path: Path) -> None:
    """``QuerySession.execute`` builds the charged answer directly (``dataclasses.replace`` cost ~15 µs): its fields are
    the answer ``shape`` made with the remaining ε, the release id and ``cached=False`` — checked field by field, so a
    field added to ``Answer`` and not carried fails here."""
    import dataclasses

    from tests.test_proxy_fixtures import make_proxy_policy
    from veil.proxy import answer as answer_mod
    from veil.proxy.session import QuerySession

    shaped: list[answer_mod.Answer] = []
    with QuerySession(make_proxy_policy(tmp_path), "alice") as session:
        real = session._env.shape

        def keep(*args: Any, **kwargs: Any) -> Any:
            out = real(*args, **kwargs)
            shaped.append(out[0])
            return out

        session._env.shape = keep  # type: ignore[method-assign]
        got = session.execute("SELECT COUNT(*) FROM people")
        remaining = session.budget().remaining
    want = dataclasses.replace(shaped[-1], epsilon_remaining=remaining, release_id=got.release_id, cached=False)
    assert got.release_id is not None
    for f in dataclasses.fields(answer_mod.Answer):
        assert getattr(got, f.name) == getattr(want, f.name), f.name
