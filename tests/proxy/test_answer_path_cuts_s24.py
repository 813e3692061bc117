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


# -- the lattice addition of drawn-ahead real noise --------------------------------------------------------------------


def _loop_lattice_add(x: np.ndarray, z: np.ndarray, k: int) -> np.ndarray:
    """``noise.lattice_add``'s exact loop in Python integers (the code before session 24, always taken then)."""
    import math

    out = []
    for xi, zi in zip(x.tolist(), z.tolist(), strict=True):
        num, den = xi.as_integer_ratio()
        if k >= 0:
            den <<= k
        else:
            num <<= -k
        v = ((2 * num + den) >> den.bit_length()) + zi
        try:
            out.append(float(v << k) if k >= 0 else v / (1 << -k))
        except OverflowError:
            out.append(math.copysign(math.inf, v))
    return np.array(out, dtype=np.float64)


@st.composite
def _lattice_cases(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, int]:
    k = draw(st.one_of(st.integers(-60, 0), st.sampled_from([-1074, -1023, -1022, -1021, 1, 5]), st.integers(-1074, 60)))
    n = draw(st.integers(1, 12))
    lattice = 2.0**k if k > -1075 else 0.0
    # values on and between lattice points, exact ties (m + ½)·2**k, near the fast path's bound 2**(52 + k), and any
    half_ties = st.integers(-(2**53), 2**53).map(lambda m: (m + 0.5) * lattice)
    # a double next to a tie: 0.49999999999999994 + ½ rounds to 1 in floating point (⌊y + ½⌋ would round it up)
    beside_ties = st.tuples(st.integers(-(2**20), 2**20), st.sampled_from([-np.inf, np.inf])).map(
        lambda mt: float(np.nextafter(mt[0] + 0.5, mt[1])) * lattice
    )
    near_bound = st.sampled_from([1.0, -1.0, 0.5, -0.5, 1 - 2**-53, -(1 - 2**-53), 2.0**-10, -(2.0**-10)]).map(
        lambda f: f * 2.0 ** min(62 + k, 1023)
    )
    xs = draw(
        st.lists(
            st.one_of(
                st.floats(allow_nan=False, allow_infinity=False),
                half_ties,
                beside_ties,
                near_bound,
                st.sampled_from([0.0, -0.0]),
            ),
            min_size=n,
            max_size=n,
        )
    )
    ints = st.one_of(
        st.integers(-(2**51), 2**51), st.sampled_from([2**62 - 1, -(2**62) + 1, 2**62, -(2**62), 2**63 - 1, -(2**63), 0])
    )
    zs = draw(st.lists(ints, min_size=n, max_size=n))
    x = np.array([v if np.isfinite(v) else 0.0 for v in xs], dtype=np.float64)
    return x, np.array(zs, dtype=np.int64), k


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_lattice_cases())
def test_lattice_addition_is_the_exact_loop_bit_for_bit(case: tuple[np.ndarray, np.ndarray, int]) -> None:
    from veil.mechanisms import noise

    x, z, k = case
    assert _same(noise.lattice_add(x, z, k), _loop_lattice_add(x, z, k))


def test_the_lattice_fast_path_is_taken_for_a_real_sum_and_not_past_its_bound() -> None:
    """(So the comparison above exercises it.) A 50-group sum at its lattice takes the NumPy path (the bench's row-level
    state GROUP BY: centred sums near 1e9 at k = -23); a value at 2**(62 + k), a noise of 2**62 or a lattice above 1
    goes to the loop; exact ties round half up."""
    from veil.mechanisms import noise

    x = np.linspace(-3e9, 3e9, 50)
    z = np.arange(50, dtype=np.int64) * 2**40
    assert noise._lattice_add_fast(x, z, -23) is not None
    assert noise._lattice_add_fast(np.array([2.0**40]), np.array([0]), -22) is None
    assert noise._lattice_add_fast(np.array([1.0]), np.array([2**62]), -22) is None
    assert noise._lattice_add_fast(np.array([1.0]), np.array([0]), 1) is None
    tie = np.array([0.49999999999999994, -0.49999999999999994, 0.5, -0.5, 2.5, -2.5])
    zero = np.zeros(len(tie), dtype=np.int64)
    assert _same(noise._lattice_add_fast(tie, zero, 0), np.array([0.0, -0.0, 1.0, 0.0, 3.0, -2.0]) + 0.0)  # type: ignore[arg-type]
