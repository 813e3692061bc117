"""The only place Veil draws differential-privacy noise.

Production draws come from OpenDP's samplers (OS CSPRNG; floating-point-safe Laplace on a
lattice, discrete Laplace on the integers, exact exponential-mechanism via report-noisy-max).
The keyword ``rng`` exists **for tests only**: passing a ``numpy.random.Generator`` switches to
a reproducible NumPy sampler with the same distribution, so statistical tests can run at a
fixed seed. Library code never passes ``rng``.

>>> import numpy as np
>>> out = laplace([0.0, 10.0], scale=1.0)
>>> out.shape
(2,)
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Any

import numpy as np
import opendp.measurements as dp_m
from opendp.domains import atom_domain, vector_domain
from opendp.measures import max_divergence
from opendp.metrics import l1_distance, l2_distance, linf_distance
from opendp.mod import enable_features

from veil.errors import InputError, InternalError
from veil.mechanisms import _csprng
from veil.mechanisms._opendp_call import vector_call
from veil.mechanisms.budget import as_epsilon, double_at_least, exp_at_most

# Not opendp.prelude: it imports opendp.extras, which pulls scikit-learn into the SQL proxy.
enable_features("contrib")

__all__ = [
    "DiscreteLaplaceDraw",
    "FixedLattice",
    "LaplaceLatticeDraw",
    "discrete_laplace",
    "discrete_laplace_ci_halfwidth",
    "discrete_laplace_draw",
    "exponential",
    "fixed_lattice",
    "gaussian",
    "keep_probability",
    "laplace",
    "laplace_ci_halfwidth",
    "laplace_fixed",
    "laplace_lattice_draw",
    "lattice_add",
    "noisy_max_scale",
    "randomized_response",
    "report_noisy_max",
]

ArrayLike = Sequence[float] | np.ndarray


def _check_scale(scale: float, what: str = "scale") -> float:
    if isinstance(scale, bool) or not isinstance(scale, (int, float, Fraction, np.floating, np.integer)):
        raise InputError(f"noise {what} must be a number, got {scale!r}")
    s = float(scale)
    if not math.isfinite(s) or s < 0:
        raise InputError(f"noise {what} must be finite and ≥ 0, got {scale!r}")
    return s


def _as_float_array(values: ArrayLike) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64)
    if not np.all(np.isfinite(arr)):
        raise InputError("cannot add noise to NaN or infinite values", hint="Clamp or drop them first")
    return arr


@lru_cache(maxsize=256)
def _float_laplace(scale: float) -> Any:
    return dp_m.make_laplace(vector_domain(atom_domain(T=float, nan=False)), l1_distance(T=float), scale=scale)


@lru_cache(maxsize=256)
def _int_laplace(scale: float) -> Any:
    return dp_m.make_laplace(vector_domain(atom_domain(T="i64")), l1_distance(T="i64"), scale=scale)


@lru_cache(maxsize=256)
def _float_gaussian(sigma: float) -> Any:
    return dp_m.make_gaussian(vector_domain(atom_domain(T=float, nan=False)), l2_distance(T=float), scale=sigma)


@lru_cache(maxsize=256)
def _noisy_max(scale: float) -> Any:
    return dp_m.make_noisy_max(
        vector_domain(atom_domain(T=float, nan=False)),
        linf_distance(T=float),
        max_divergence(),
        scale=scale,
    )


@lru_cache(maxsize=256)
def _laplace_call(scale: float, sensitivity: float | None, n: int) -> Any:
    """The releasing function of the Laplace measurement :func:`laplace` uses (called through OpenDP's C API,
    :mod:`veil.mechanisms._opendp_call`): the lattice one given a positive sensitivity it is defined for, else
    OpenDP's default lattice."""
    m = _lattice_laplace(scale, sensitivity, n) if sensitivity else None
    return vector_call(m) if m is not None else _default_laplace_call(scale)


@lru_cache(maxsize=256)
def _default_laplace_call(scale: float) -> Any:
    return vector_call(_float_laplace(scale))  # one per scale, whatever the vector's length


@lru_cache(maxsize=256)
def _discrete_laplace_call(scale: float) -> Any:
    return vector_call(_int_laplace(scale))


#: The lattice laplace (see :func:`_lattice_laplace`) is fine enough for this many values at once.
_LATTICE_MAX_VALUES_LOG2 = 40
#: Relative slack: rounding ``2**40`` values to the lattice moves a vector by at most ``2**-36`` of the
#: sensitivity in L1; the scale is raised by ``2**-30`` ≫ that to pay for it.
_LATTICE_BITS = 36
_SCALE_BITS = 30


@lru_cache(maxsize=256)
def _lattice_laplace(scale: float, sensitivity: float, n: int) -> Any:
    """Laplace noise for ``n`` values on a lattice of ``2**k``, ~3× cheaper than OpenDP's default (``k = -1074``).

    OpenDP rounds each value to the lattice, which can move a vector by up to ``n * 2**k`` in L1. ``k``
    depends on ``sensitivity`` only — **never on** ``n``: the lattice shows in the released values'
    binary digits, and ``n`` can be the number of private groups in the data, released or not. It is
    fine enough for up to ``2**40`` values: the slack is then at most ``2**-36`` of ``sensitivity``,
    paid for by raising the scale by a factor ``1 + 2**-30``, so the loss at ``sensitivity`` stays
    within ``sensitivity / scale``; OpenDP's own privacy map confirms it. Returns ``None`` (the caller
    uses the default lattice) only for a sensitivity so small that ``k`` would leave the float range —
    again a choice that depends on the sensitivity alone.
    """
    k = math.floor(math.log2(sensitivity)) - _LATTICE_BITS - _LATTICE_MAX_VALUES_LOG2
    if k < -1000:
        return None
    if n > 2**_LATTICE_MAX_VALUES_LOG2:
        raise InternalError(f"{n} values in one noise call: more than the lattice laplace is made for")
    raised = scale * (1.0 + 2.0**-_SCALE_BITS)
    m = dp_m.make_laplace(vector_domain(atom_domain(T=float, nan=False), size=n), l1_distance(T=float), scale=raised, k=k)
    if not m.map(sensitivity) <= sensitivity / scale:
        raise InternalError(
            f"OpenDP's map of the lattice laplace exceeds its charge (k={k}, scale={scale}, Δ={sensitivity}, n={n})"
        )
    return m


def laplace(
    values: ArrayLike, *, scale: float, rng: np.random.Generator | None = None, sensitivity: float | None = None
) -> np.ndarray:
    """Add Laplace(0, ``scale``) noise to every element of ``values`` (any shape).

    ε-DP for a query of L1 sensitivity Δ when ``scale = Δ/ε``. Given ``sensitivity`` (Δ), the noise
    is drawn on a fine lattice whose privacy loss OpenDP's map bounds by Δ/``scale`` (faster, same ε);
    without it, on OpenDP's default lattice.
    """
    s = _check_scale(scale)
    arr = _as_float_array(values)
    if s == 0 or arr.size == 0:
        return arr.copy()
    if rng is not None:
        return arr + rng.laplace(0.0, s, size=arr.shape)
    d = None if sensitivity is None else _check_scale(sensitivity, "sensitivity")
    return _laplace_call(s, d, arr.size)(arr.ravel()).reshape(arr.shape)


def discrete_laplace(values: ArrayLike, *, scale: float, rng: np.random.Generator | None = None) -> np.ndarray:
    """Add discrete-Laplace (two-sided geometric) noise of ``scale`` to integer ``values``.

    ``P(k) ∝ exp(-|k|/scale)``; ε-DP for integer queries of L1 sensitivity Δ when ``scale = Δ/ε``.
    Values and results are 64-bit integers (callers clamp values to ±2⁶² first).
    """
    s = _check_scale(scale)
    arr = np.asarray(values)
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        as_int = np.rint(arr.astype(np.float64))
        if not np.array_equal(as_int, arr):
            raise InputError("discrete_laplace needs integer values", hint="Use laplace() for real values")
        arr = as_int.astype(np.int64)
    arr = arr.astype(np.int64)
    if s == 0 or arr.size == 0:
        return arr.copy()
    if rng is not None:
        # difference of two geometric variables with success prob 1 - exp(-1/s) is discrete Laplace(s)
        p = -math.expm1(-1.0 / s)
        g1 = rng.geometric(p, size=arr.shape) - 1
        g2 = rng.geometric(p, size=arr.shape) - 1
        return arr + g1 - g2
    return _discrete_laplace_call(s)(arr.ravel()).reshape(arr.shape)


#: The largest scale :func:`discrete_laplace_draw` draws ahead: OpenDP's i64 sampler saturates a value whose noise
#: is beyond ±(2⁶³ − 1), and noise drawn at 0 then added can differ from noise added by OpenDP only then, which at
#: this scale has probability below exp(−2⁷) ≈ 2.6·10⁻⁵⁶ per value (larger scales are drawn the ordinary way).
DRAW_AHEAD_MAX_SCALE = 2.0**56
_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1
_HALF_I64 = 2**62  # two int64 values below it in magnitude add without overflow


class DiscreteLaplaceDraw:
    """Discrete-Laplace noise of one ``scale`` for ``n`` integer values, drawn before the values exist.

    The noise is data-independent, so it may be drawn while the engine computes the values it will be added to
    (:func:`veil.proxy.add_noise.draw_ahead`). It is OpenDP's sampler on the OS CSPRNG, the same call as
    :func:`discrete_laplace`, applied to a vector of zeros; :meth:`add` adds it exactly and saturates to i64 as
    OpenDP does, so ``draw.add(x)`` has the distribution of ``discrete_laplace(x, scale=scale)`` (up to the
    saturation noted at :data:`DRAW_AHEAD_MAX_SCALE`). A draw is added once: a second :meth:`add` raises.
    """

    __slots__ = ("_lock", "_noise", "n", "scale")

    def __init__(self, n: int, scale: float) -> None:
        self.n = n
        self.scale = scale
        self._noise: np.ndarray | None = _discrete_laplace_call(scale)(np.zeros(n, dtype=np.int64))
        self._lock = threading.Lock()

    def add(self, values: ArrayLike) -> np.ndarray:
        """``values`` (``n`` integers) plus this draw's noise, saturated to i64; the draw is spent."""
        with self._lock:
            noise, self._noise = self._noise, None
        if noise is None:
            raise InternalError("a drawn-ahead noise vector was used twice")
        arr = np.asarray(values)
        if arr.shape != (self.n,) or not np.issubdtype(arr.dtype, np.integer):
            raise InternalError(f"a drawn-ahead noise vector of {self.n} integers was added to {arr.dtype} {arr.shape}")
        if (
            arr.dtype == np.int64
            and arr.size
            and -_HALF_I64 < min(arr.min(), noise.min())
            and max(arr.max(), noise.max()) < _HALF_I64
        ):
            return arr + noise  # each term within ±2⁶²: the sum is within i64, so nothing saturates (as added exactly)
        out = [min(max(v + z, _I64_MIN), _I64_MAX) for v, z in zip(arr.tolist(), noise.tolist(), strict=True)]
        return np.array(out, dtype=np.int64)


def discrete_laplace_draw(n: int, *, scale: float) -> DiscreteLaplaceDraw | None:
    """Discrete-Laplace noise of ``scale`` for ``n`` values to be added later (:class:`DiscreteLaplaceDraw`), or
    None where :func:`discrete_laplace` must draw it with the values (no values, a zero scale, a scale beyond
    :data:`DRAW_AHEAD_MAX_SCALE`)."""
    s = _check_scale(scale)
    if n <= 0 or s == 0 or s > DRAW_AHEAD_MAX_SCALE:
        return None
    return DiscreteLaplaceDraw(n, s)


#: :func:`fixed_lattice` puts the integer noise's scale in [2^50, 2^51): OpenDP's i64 sampler then saturates a draw
#: (|noise| ≥ 2⁶³ − 1) with probability below exp(−2¹²) per value.
_FIXED_LATTICE_SCALE_BITS = 50
#: At most this many values in one :func:`fixed_lattice` call (more are drawn on :func:`laplace`'s lattice).
_FIXED_LATTICE_MAX_VALUES = 2**24


@dataclass(frozen=True)
class FixedLattice:
    """:func:`fixed_lattice`'s mechanism: OpenDP's float Laplace on the lattice of ``2**k`` (``measurement``, and
    ``release`` to call it on a NumPy vector), whose integer noise has the scale ``t``."""

    k: int
    t: float
    measurement: Any
    release: Any


@lru_cache(maxsize=256)
def fixed_lattice(scale: float, sensitivity: float, n: int) -> FixedLattice | None:
    """The lattice Laplace of ``n`` values at ``scale`` whose noise can be drawn before the values, or None where it
    is not defined (the caller draws on :func:`laplace`'s lattice).

    OpenDP's float Laplace on the lattice of ``2**k`` (``make_laplace(..., k=k)``) rounds each value to the nearest
    multiple of ``2**k`` (ties up), adds discrete-Laplace noise of scale ``t = scale' · 2**-k`` to the integer
    (``scale'`` = ``scale`` raised by ``1 + 2**-30``, as :func:`_lattice_laplace`), and rounds ``2**k`` times the sum
    to the nearest double (ties to even). Here ``k`` = ⌊log₂ scale'⌋ − 50, so ``t`` lies in [2^50, 2^51) and
    the integer noise is OpenDP's i64 discrete Laplace at the double ``t`` (the very rational scale the float
    mechanism samples at): :class:`LaplaceLatticeDraw` draws it ahead and adds it in exact arithmetic, which is
    that mechanism, output for output. ``k`` depends on ``scale`` alone; ``n`` only decides whether the lattice is
    fine enough, which OpenDP's privacy map of the mechanism for ``n`` values checks against ``sensitivity / scale``
    — so use this only where ``n`` is fixed by the query and the policy (``n`` values always, whatever the data).
    ``release`` calls OpenDP's own measurement of that mechanism, to draw with the values instead.
    """
    raised = scale * (1.0 + 2.0**-_SCALE_BITS)
    if not (math.isfinite(raised) and raised > 0 and sensitivity > 0 and 0 < n <= _FIXED_LATTICE_MAX_VALUES):
        return None
    k = math.frexp(raised)[1] - 1 - _FIXED_LATTICE_SCALE_BITS  # ⌊log₂ raised⌋ − 50, exactly
    if k < -1074:  # OpenDP's finest lattice
        return None
    t = math.ldexp(raised, -k)  # exact: a power-of-two scaling into [2^50, 2^51)
    if not 2.0**_FIXED_LATTICE_SCALE_BITS <= t < 2.0 ** (_FIXED_LATTICE_SCALE_BITS + 1):
        raise InternalError(f"the fixed lattice's integer scale {t} is outside [2^50, 2^51)")
    m = dp_m.make_laplace(vector_domain(atom_domain(T=float, nan=False), size=n), l1_distance(T=float), scale=raised, k=k)
    if not m.map(sensitivity) <= sensitivity / scale:
        return None  # too many values for this lattice at this sensitivity: drawn on laplace()'s lattice
    return FixedLattice(k, t, m, vector_call(m))


def lattice_add(values: np.ndarray, noise: np.ndarray, k: int) -> np.ndarray:
    """``2**k · (round(values / 2**k) + noise)`` to the nearest doubles, in exact arithmetic (Python integers): OpenDP's
    float Laplace on the lattice of ``2**k`` given its integer noise — each value rounded to the nearest multiple of
    ``2**k``, ties up; the sum rounded to the nearest double, ties to even, ±inf past the largest. ``values``:
    finite doubles. (~0.7 µs a value; NumPy's small-array calls cost more.)"""
    x = np.asarray(values, dtype=np.float64)
    z = np.asarray(noise, dtype=np.int64)
    if x.shape != z.shape or x.ndim != 1:
        raise InternalError(f"lattice_add takes two vectors of one length, got {x.shape} and {z.shape}")
    fast = _lattice_add_fast(x, z, k)
    if fast is not None:
        return fast
    out = []
    for xi, zi in zip(x.tolist(), z.tolist(), strict=True):
        num, den = xi.as_integer_ratio()  # den is a power of two
        if k >= 0:
            den <<= k
        else:
            num <<= -k
        v = ((2 * num + den) >> den.bit_length()) + zi  # den = 2**(b − 1): ⌊num/den + ½⌋ = (2·num + den) >> b
        try:
            out.append(float(v << k) if k >= 0 else v / (1 << -k))  # int → float and int / int round correctly
        except OverflowError:
            out.append(math.copysign(math.inf, v))
    return np.array(out, dtype=np.float64)


def _lattice_add_fast(x: np.ndarray, z: np.ndarray, k: int) -> np.ndarray | None:
    """:func:`lattice_add` in NumPy where every step is exact or one correct rounding, else None (the caller adds in
    Python integers). Taken for ``-1022 ≤ k ≤ 0`` (a real sum noised on its scale's lattice: ``k = ⌊log₂ scale⌋ − 50``)
    with ``|x| < 2**(62 + k)`` and the noise within ±2**62: then ``y = x·2**-k`` is exact (scaling up by a power of
    two, below 2**62); ``r = ⌊y⌋`` and ``y − r`` are exact (Sterbenz; from 2**52 on, ``y`` is an integer and ``y − r``
    is 0), so ``r + (y − r ≥ ½)`` rounds half up exactly (``⌊y + ½⌋`` is not: 0.49999999999999994 + ½ rounds to 1);
    ``r`` plus the noise is exact in int64 (each term below 2**62); its conversion to a double is the one rounding (to
    nearest, ties to even, as Python's int → float); and scaling back by ``2**k`` is exact (a nonzero integer times
    ``2**k ≥ 2**-1022`` is normal, and below 2**63 finite). 50 values: about half the loop's time
    (tests/proxy/test_answer_path_cuts_s24.py compares the two bit for bit)."""
    if not -1022 <= k <= 0 or not x.size:
        return None
    limit = math.ldexp(1.0, 62 + k)
    if not (-limit < x.min() and x.max() < limit and -_HALF_I64 < z.min() and z.max() < _HALF_I64):  # (NaN fails)
        return None
    y = np.ldexp(x, -k)
    r = np.floor(y)
    v = (r + (y - r >= 0.5)).astype(np.int64) + z
    return np.ldexp(v.astype(np.float64), k)


class LaplaceLatticeDraw:
    """The integer noise of :func:`fixed_lattice`'s mechanism for ``n`` values, drawn before the values exist.

    OpenDP's i64 discrete-Laplace sampler at 0 and scale ``t`` on the OS CSPRNG (the integer noise OpenDP's float
    Laplace on that lattice draws inside; it saturates only with probability below exp(−2¹²) a value);
    :meth:`add` puts it on the values in exact arithmetic (:func:`lattice_add`), so ``draw.add(x)`` is that
    mechanism's release on ``x`` — no floating-point step sees both a value and its noise. A draw is added once.
    """

    __slots__ = ("_k", "_lock", "_noise", "n", "scale", "sensitivity")

    def __init__(self, n: int, scale: float, sensitivity: float) -> None:
        lattice = fixed_lattice(scale, sensitivity, n)
        if lattice is None:
            raise InternalError(f"no fixed lattice for {n} values at scale {scale}, sensitivity {sensitivity}")
        self.n, self.scale, self.sensitivity = n, scale, sensitivity
        self._k = lattice.k
        self._noise: np.ndarray | None = _discrete_laplace_call(lattice.t)(np.zeros(n, dtype=np.int64))
        self._lock = threading.Lock()

    def add(self, values: ArrayLike) -> np.ndarray:
        """``values`` (``n`` finite doubles) released with this draw's noise; the draw is spent."""
        with self._lock:
            noise, self._noise = self._noise, None
        if noise is None:
            raise InternalError("a drawn-ahead noise vector was used twice")
        arr = _as_float_array(values)
        if arr.shape != (self.n,):
            raise InternalError(f"a drawn-ahead noise vector of {self.n} values was added to {arr.shape}")
        return lattice_add(arr, noise, self._k)


def laplace_lattice_draw(n: int, *, scale: float, sensitivity: float) -> LaplaceLatticeDraw | None:
    """Laplace noise of ``scale`` for ``n`` real values to be added later (:class:`LaplaceLatticeDraw`), or None
    where :func:`fixed_lattice` has no lattice for them (or the scale is 0)."""
    s, d = _check_scale(scale), _check_scale(sensitivity, "sensitivity")
    if s == 0 or fixed_lattice(s, d, n) is None:
        return None
    return LaplaceLatticeDraw(n, s, d)


def laplace_fixed(values: ArrayLike, *, scale: float, sensitivity: float) -> np.ndarray:
    """:func:`fixed_lattice`'s mechanism drawn with the values (OpenDP's own measurement): the law of
    ``laplace_lattice_draw(len(values), ...).add(values)``, for a draw that was not made ahead. Falls back to
    :func:`laplace` where there is no such lattice (as the draw then does)."""
    s, d = _check_scale(scale), _check_scale(sensitivity, "sensitivity")
    arr = _as_float_array(values)
    lattice = fixed_lattice(s, d, arr.size) if s > 0 and arr.ndim == 1 and arr.size else None
    if lattice is None:
        return laplace(arr, scale=s, sensitivity=d)
    return lattice.release(arr)


def gaussian(values: ArrayLike, *, sigma: float, rng: np.random.Generator | None = None) -> np.ndarray:
    """Add N(0, ``sigma``²) noise (ρ-zCDP with ρ = Δ₂²/(2σ²)). Not used for pure-ε answers."""
    s = _check_scale(sigma, "sigma")
    arr = _as_float_array(values)
    if s == 0 or arr.size == 0:
        return arr.copy()
    if rng is not None:
        return arr + rng.normal(0.0, s, size=arr.shape)
    flat = _float_gaussian(s)(arr.ravel().tolist())
    return np.asarray(flat, dtype=np.float64).reshape(arr.shape)


def report_noisy_max(
    scores: ArrayLike, *, epsilon: float | Fraction, sensitivity: float, rng: np.random.Generator | None = None
) -> int:
    """Exponential mechanism by report-noisy-max: index of the best noisy score.

    ε-DP when each score has sensitivity ``sensitivity`` (L∞ across candidates): each score gets
    exponential noise of scale ``2·sensitivity/ε`` (OpenDP ``make_noisy_max``) and the index of
    the largest noisy score is released. This is report-noisy-max with exponential noise
    (equivalently the permute-and-flip mechanism): ε-DP like the exponential mechanism and never
    less accurate than it (McKenna & Sheldon, 2020).
    """
    sens = _check_scale(sensitivity, "sensitivity")
    scale = noisy_max_scale(epsilon, sens)  # validates ε
    arr = _as_float_array(scores).ravel()
    if arr.size == 0:
        raise InputError("report_noisy_max needs at least one candidate score")
    if sens == 0:
        return int(np.argmax(arr))
    if rng is not None:
        return int(np.argmax(arr + rng.exponential(scale, size=arr.shape)))
    return int(_noisy_max(scale)(arr.tolist()))


exponential = report_noisy_max


def noisy_max_scale(epsilon: float | Fraction, sensitivity: float) -> float:
    """The exponential noise scale of :func:`report_noisy_max`: the double at or above 2Δ/ε exactly.

    >>> noisy_max_scale(Fraction(3, 1000), 1.0) >= Fraction(2000, 3)
    True
    """
    return double_at_least(2 * Fraction(sensitivity) / as_epsilon(epsilon))


def keep_probability(epsilon: float | Fraction, k: int) -> Fraction:
    """:func:`randomized_response`'s chance of keeping a value among ``k`` categories: e/(e + k − 1) for an exact
    e ≤ e^ε, so the ratio of keeping to reporting one given other value is at most e^ε.

    >>> keep_probability(1, 2) < Fraction(27183, 37183)
    True
    """
    e = exp_at_most(as_epsilon(epsilon))
    return e / (e + k - 1)


def laplace_ci_halfwidth(scale: float, confidence: float = 0.95) -> float:
    """Half-width of the central ``confidence`` interval of Laplace(0, scale) noise.

    >>> round(laplace_ci_halfwidth(1.0), 4)
    2.9957
    """
    if not 0 < confidence < 1:
        raise InputError(f"confidence must be in (0, 1), got {confidence!r}")
    return float(scale) * math.log(1.0 / (1.0 - confidence))


def discrete_laplace_ci_halfwidth(scale: float, confidence: float = 0.95) -> float:
    """Smallest integer h with P(|Z| ≤ h) ≥ ``confidence`` for discrete-Laplace noise Z of ``scale``.

    With r = e^(−1/scale), P(|Z| > h) = 2·r^(h+1)/(1 + r) exactly (the continuous formula b·ln(1/α)
    is not conservative for integer noise).

    >>> discrete_laplace_ci_halfwidth(1.0), discrete_laplace_ci_halfwidth(10.0)
    (3.0, 30.0)
    """
    if not 0 < confidence < 1:
        raise InputError(f"confidence must be in (0, 1), got {confidence!r}")
    s = _check_scale(scale)
    if s == 0:
        return 0.0
    alpha = 1.0 - confidence
    log_r = -1.0 / s  # r = e^(−1/scale) underflows to 0 for tiny scales and rounds to 1 for huge ones
    if log_r < -745.0:
        return 0.0
    log1p_r = math.log1p(math.exp(log_r))
    target = math.log(alpha)

    def tail(h: float) -> float:  # log P(|Z| > h)
        return math.log(2.0) + (h + 1.0) * log_r - log1p_r

    h = max(math.ceil((target + log1p_r - math.log(2.0)) / log_r) - 1, 0)
    if s > 2.0**40:  # h + 1 == h in floating point: widen by a relative margin instead of stepping
        return float(math.ceil(h * (1.0 + 1e-9)) + 1)
    while tail(h) > target:  # guard against rounding at the boundary
        h += 1
    return float(h)


def randomized_response(
    values: ArrayLike,
    *,
    categories: Sequence[Any],
    epsilon: float | Fraction,
    rng: np.random.Generator | None = None,
) -> np.ndarray:
    """k-ary randomised response: keep each value with probability e^ε/(e^ε+k−1), else
    report one of the other k−1 categories uniformly. ε-local-DP per value.

    Values not in ``categories`` are rejected. Draws are exact integer comparisons on the
    OS CSPRNG (keep-probability rounded down to a multiple of 2⁻⁶⁴, which only lowers ε).
    """
    cats = list(categories)
    k = len(cats)
    if k < 2:
        raise InputError(f"randomized_response needs at least 2 categories, got {cats!r}")
    eps = as_epsilon(epsilon)
    arr = np.asarray(values, dtype=object)
    index = {c: i for i, c in enumerate(cats)}
    try:
        codes = np.fromiter((index[v] for v in arr.ravel()), dtype=np.int64, count=arr.size)
    except KeyError as exc:
        raise InputError(
            f"value {exc.args[0]!r} is not among the {k} categories", hint="Pass every possible value in categories"
        ) from None
    p_keep = keep_probability(eps, k)
    n = codes.size
    if rng is not None:
        keep = rng.random(n) < float(p_keep)
        other = rng.integers(0, k - 1, size=n)
    else:
        keep = _csprng.bernoulli(n, p_keep)
        other = _csprng.uniform_ints(n, k - 1)
    other = other + (other >= codes)  # uniform over the k−1 categories ≠ the true one
    out_codes = np.where(keep, codes, other)
    cat_arr = np.empty(k, dtype=object)
    cat_arr[:] = cats
    return cat_arr[out_codes].reshape(arr.shape)
