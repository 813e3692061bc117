"""Exact sums: real values are summed in fixed point, and only the finished sum is rounded to a double.

A DOUBLE ``SUM`` rounds after every row, so its result depends on the order and magnitude of the other
rows: one person's row can move it by more than the sensitivity, up to ~n²·2⁻⁵³ of Δ in the worst case
(Casacuberta et al., CCS 2022; red team s17 A2). Veil therefore sums each row's clamped value as a
BIGINT on a grid of ``2**-k``: ``CAST(FLOOR(value * 2**k) AS BIGINT)``, with ``k`` chosen from the
row's bounds alone so that every row fits in ±2⁶². The engine adds BIGINTs exactly (DuckDB into a
HUGEINT, other engines into ``DECIMAL(38, 0)``: no overflow below 2⁶⁴ rows), so the sum is exact, and
each row's grid value stays within the row's bounds (``FLOOR`` keeps the upper bound; the lower bound is
on the grid, or the grid value is clamped to it). Centring (AVG, VARIANCE) subtracts ``center · count``
from the exact sum with integers.

One rounding is left: the exact sum (a rational) becomes the double the noise is added to. It moves by
at most 2⁻⁵³ of its magnitude *plus* half the smallest subnormal, 2⁻¹⁰⁷⁵ (a subnormal sum rounds by up to that
whatever its size: red team s70 F1), and the magnitude of each group's sum is clamped (1-Lipschitz, data-
independent) to ``2**CLAMP_BITS`` rows at the row bound. The plan refuses (free) every real sum whose row bound
is below ``MIN_ROW_BOUND`` = 2⁻¹⁰⁰⁰ (``veil.proxy.plan``), so the absolute term is at most 2⁻⁷⁵ of the row
bound, and two neighbouring databases' doubles differ by at most ``Δ·(1 + CONVERSION_SLACK)``; the Laplace
scale is raised by ``SCALE_RAISE`` > that slack (``Statistic.scale``; a scale below ``MIN_NOISE_SCALE``, where
the raise itself would be rounded away, is refused too), so the privacy loss stays within ε.

>>> from fractions import Fraction
>>> exponent(Fraction(-10), Fraction(10))
58
>>> to_doubles([37], 2, Fraction(1, 2), [3], bound=Fraction(10))  # 37/4 − 3·(1/2)
[7.75]
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Sequence
from fractions import Fraction
from functools import lru_cache

import numpy as np

__all__ = [
    "CLAMP_BITS", "CONVERSION_SLACK", "GRID_BITS", "MIN_NOISE_SCALE", "MIN_ROW_BOUND", "SCALE_RAISE", "exact_sums",
    "exponent", "grid_factors", "literal_on_grid", "on_grid", "to_doubles",
]  # fmt: skip

#: Each row's grid value fits in ±2**GRID_BITS (a BIGINT holds ±2⁶³).
GRID_BITS = 62
#: A group's exact sum is clamped to ±2**CLAMP_BITS times the row bound before it becomes a double.
CLAMP_BITS = 36
#: The smallest row bound (largest |value| one row adds, after centring; for a sum of squares, the squared one) of a
#: real sum Veil answers: the plan refuses smaller ones, free, from the query's bounds alone. Above it, a subnormal
#: sum's absolute rounding (≤ 2⁻¹⁰⁷⁵ per neighbour) is at most 2⁻⁷⁵ of the row bound per changed group.
MIN_ROW_BOUND = Fraction(1, 2**1000)
#: The smallest Laplace scale of a real statistic: a normal double (≥ 2⁻¹⁰²²), so that ``SCALE_RAISE`` and the
#: noise lattice (``veil.mechanisms.noise``: k = ⌊log₂ scale⌋ − 50 ≥ −1070) act relatively, as their bounds assume.
MIN_NOISE_SCALE = 2.0**-1020
#: The most the doubles of two neighbouring sums can differ beyond Δ, relative to Δ: each changed group's
#: rounding is at most 2⁻⁵³ · 2³⁶ of its row bound plus 2⁻¹⁰⁷⁵ ≤ 2⁻⁷⁵ of it (``MIN_ROW_BOUND``), twice (both
#: neighbours): 2⁻¹⁶ + 2⁻⁷⁴, rounded up here to 2⁻¹⁶ + 2⁻⁶⁴ (an exact double).
CONVERSION_SLACK = 2.0 ** (CLAMP_BITS - 52) + 2.0**-64
#: The Laplace scale of real statistics is raised by this much (relative), more than the slack above plus the
#: noise lattice's own (``veil.mechanisms.noise``), so the loss at Δ stays within ε.
SCALE_RAISE = 2.0 ** (CLAMP_BITS - 51)

_MAX_EXPONENT = sys.float_info.max_exp - 1  # 2**1023 is the largest power of two a double holds
#: The finest grid any double needs: the smallest positive double is 2**-1074, so a row bound below it holds only
#: multiples of 2**-1074, all exact on a grid of 2**-(GRID_BITS + 1074).
_FINEST = GRID_BITS - (sys.float_info.min_exp - sys.float_info.mant_dig)  # 62 + 1074
_MAX_DOUBLE = int(sys.float_info.max)


@lru_cache(maxsize=4096)
def exponent(lo: Fraction, hi: Fraction) -> int:
    """The grid exponent ``k`` for row values within ``[lo, hi]``: the largest with ``max(|lo|, |hi|)·2**k ≤ 2**62``.

    It depends on the bounds only (never on the data); a zero range takes ``k = 0``.
    """
    b = max(abs(lo), abs(hi))
    if b == 0:
        return 0
    e = b.numerator.bit_length() - b.denominator.bit_length()  # 2**(e-1) < b ≤ 2**e, after the two loops
    while Fraction(2) ** e < b:
        e += 1
    while Fraction(2) ** (e - 1) >= b:
        e -= 1
    return min(GRID_BITS - e, _FINEST)


def grid_factors(k: int) -> tuple[float, ...]:
    """The doubles whose product is ``2**k``, each a power of two a double holds: one factor up to ``2**1023``, two
    beyond (a row bound below ``2**-961``: red team s59 F2, where one factor capped at ``2**1023`` lost up to a whole
    step of ``2**-1023`` per row, far more than ``2**-62`` of the bound). Multiplying a double by a power of two is
    exact while the product is a normal double, and every partial product here lies within ``±2**62``.

    >>> grid_factors(10), grid_factors(1100) == (2.0**1023, 2.0**77)
    ((1024.0,), True)
    """
    if k <= _MAX_EXPONENT:
        return (math.ldexp(1.0, k),)
    return (math.ldexp(1.0, _MAX_EXPONENT), math.ldexp(1.0, k - _MAX_EXPONENT))


@lru_cache(maxsize=4096)
def on_grid(lo: Fraction, hi: Fraction, k: int) -> tuple[int, int]:
    """The smallest and largest grid values (in units of ``2**-k``) within ``[lo, hi]``."""
    scale = Fraction(2) ** k
    return math.ceil(lo * scale), math.floor(hi * scale)


#: A number literal :func:`literal_on_grid` reads: digits, optionally a point and more digits, 15 digits in all, so
#: the engine's double of it is exact whenever its value is a double (its digits and ``10**scale`` are exact doubles,
#: and the one division rounds correctly).
_PLAIN_NUMBER = re.compile(r"(?=[0-9.]{1,16}$)[0-9]+(?:\.[0-9]+)?")


def literal_on_grid(text: str, k: int) -> int | None:
    """The integer ``N = v · 2**k`` for a plain number literal ``text`` (its value ``v``), when that is exact and
    ``|N| ≤ 2**GRID_BITS``; else None. For ``k ≥ 0``, a bounded real column ``c`` and its pre-scaled grid copy
    ``g = FLOOR(c · 2**k)`` (:mod:`veil.proxy.bounding`; ``c · 2**k`` is exact), ``c >= v ⟺ g >= N`` and
    ``c < v ⟺ g < N`` on every row (both NULL when ``c`` is): ``FLOOR(x) >= N ⟺ x >= N`` for an integer ``N``.

    >>> literal_on_grid("5", 2), literal_on_grid("5.25", 2), literal_on_grid("0.1", 40), literal_on_grid("5", -1)
    (20, 21, None, None)
    """
    return _literal_on_grid(text, k)


@lru_cache(maxsize=1024)
def _literal_on_grid(text: str, k: int) -> int | None:
    """:func:`literal_on_grid` (a hit asks it up to three times for its literal: the front's grid class, the entry's
    grid checks and the value filled in)."""
    if k < 0 or not _PLAIN_NUMBER.fullmatch(text):
        return None
    whole, _point, fraction = text.partition(".")
    if len(whole) + len(fraction) > 15:  # (the text is digits and at most one point)
        return None
    # v · 2**k = digits · 2**k / 10**len(fraction): an integer when 10**len(fraction) divides the numerator
    scaled, rest = divmod(int(whole + fraction) << k, 10 ** len(fraction))
    if rest or scaled > 1 << GRID_BITS:
        return None
    return scaled


def _whole(v: object) -> int:
    """A SUM or COUNT from the engine (a Python int, a ``DECIMAL(38, 0)`` as a Decimal; NULL: 0) as an int."""
    if v is None or isinstance(v, bool):
        return 0
    try:
        return int(v)  # type: ignore[call-overload]
    except (TypeError, ValueError, OverflowError):
        return 0


def to_doubles(
    totals: Sequence[object], k: int, center: Fraction, counts: Sequence[object] | None, *, bound: Fraction
) -> list[float]:
    """Each ``total · 2**-k − center · count`` (exact), clamped to ±``2**CLAMP_BITS · bound``, as the nearest double.

    Integer arithmetic only (a query may release a million groups): each value is ``num / den`` with
    ``den = center.denominator · 2**max(k, 0)``, and Python rounds an int quotient correctly. ``counts`` is
    None for a sum that is not centred.
    """
    p, q = center.numerator, center.denominator
    den = q << k if k >= 0 else q
    lim = (bound.numerator << CLAMP_BITS) * den  # |num/den| ≤ limit  ⟺  |num| · bound.denominator ≤ lim
    bden = bound.denominator
    big = _MAX_DOUBLE * den
    out = []
    for i, total in enumerate(totals):
        t = total if type(total) is int else _whole(total)
        n = 0 if counts is None else (c if type(c := counts[i]) is int else _whole(c))
        num = t * q - ((p * n) << k) if k >= 0 else (t * q << -k) - p * n
        if abs(num) * bden > lim:  # clamped: num/den = ±bound·2**CLAMP_BITS
            out.append(_ratio(lim if num > 0 else -lim, den * bden, big * bden))
        else:
            out.append(_ratio(num, den, big))
    return out


def _ratio(num: int, den: int, big: int) -> float:
    """``num / den`` correctly rounded, the largest finite double beyond it (``big = max double · den``)."""
    return num / den if abs(num) <= big else (sys.float_info.max if num > 0 else -sys.float_info.max)


def exact_sums(totals: Sequence[object], counts: Sequence[object] | None) -> np.ndarray:
    """Exact sums as the engine returned them, one ``(total, count)`` pair per group (count None: not centred),
    in an object array: they become doubles (:func:`to_doubles`) only for the groups that are released."""
    out = np.empty(len(totals), dtype=object)
    for i, total in enumerate(totals):
        out[i] = (total, None if counts is None else counts[i])
    return out
