"""Privacy accounting for PATE's noisy-vote aggregation (moments accountant).

Pure functions, no randomness. The aggregation mechanism answers one student query ``x`` with
``argmax_c(n_c(x) + Lap(1/γ))`` where ``n_c(x)`` counts the teachers voting for class ``c``.
Changing one record of the private table changes one teacher's vote, which moves two counts by
one each, so one answer is ``(2γ, 0)``-DP.

The moments accountant (Abadi et al. 2016; Papernot et al. 2016, "Semi-supervised knowledge
transfer for deep learning from private training data", arXiv:1610.05755) bounds the log
moment-generating function ``α(λ)`` of the privacy loss of each answer, adds the bounds over the
``T`` answers, and turns the sum into ``ε`` for a chosen ``δ``:

    ε(δ) = min_λ (Σ_t α_t(λ) + log(1/δ)) / λ                      (Yovine et al. 2021, Eq. 10/14)

* Data-independent: ``α(λ) ≤ 2γ²λ(λ+1)`` for every answer (Eq. 11), so
  ``ε_ind = min_λ (2Tγ²λ(λ+1) − log δ)/λ`` (Eq. 12). Minimised over real ``λ > 0`` it has the
  closed form ``ε_ind = 2Tγ² + 2·sqrt(2Tγ²·log(1/δ))`` at ``λ* = sqrt(log(1/δ)/(2Tγ²))``; this
  reproduces the paper's figures (natural logarithm).

  >>> b = data_independent_epsilon(gamma=0.05, queries=1000, delta=1e-5)
  >>> round(b.epsilon, 4), round(b.order, 5)
  (20.1743, 1.51743)
  >>> round(data_independent_epsilon(gamma=0.05, queries=900, delta=1e-6).epsilon, 4)
  20.2696

* Data-dependent: from the actual vote counts, ``q ≥ P[M(d) ≠ c*]`` (Papernot et al. 2016,
  Proposition 2 in the appendix) and, when ``q < (e^{2γ}−1)/(e^{4γ}−1)``, Theorem 3 of the same
  paper bounds ``α(λ) ≤ log((1−q)·((1−q)/(1−e^{2γ}q))^λ + q·e^{2γλ})``. Every answer also keeps the
  data-independent bounds ``2γ²λ(λ+1)`` and ``2γλ`` (pure ``2γ``-DP), and the smallest applies.
  Following the reference implementation of that paper (``analysis.py``, ``--moments 8``) the
  minimum is taken over the integer orders ``λ = 1..8`` by default; that is why a run whose votes
  carry no information lands on 20.41 for ``T = 900, δ = 1e-6`` (Table 1 of Yovine et al.) and not
  on the real-λ data-independent 20.2696.

  The data-dependent ε is a function of the private votes: it describes one run and is not itself a
  differentially private statistic. Veil charges the ledger with the data-independent ε.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from veil.errors import InputError

__all__ = [
    "DEFAULT_ORDERS",
    "MomentsBound",
    "data_dependent_epsilon",
    "data_dependent_log_moments",
    "data_independent_epsilon",
    "data_independent_log_moment",
    "epsilon_from_log_moments",
    "log_moment_bound",
    "noisy_max_q_bound",
    "theorem3_q_limit",
]

#: Integer moment orders used by Papernot et al.'s reference accountant (``--moments 8``).
DEFAULT_ORDERS: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 7, 8)


@dataclass(frozen=True)
class MomentsBound:
    """An ``(epsilon, delta)`` guarantee and the moment order ``λ`` that achieved it."""

    epsilon: float
    delta: float
    order: float
    queries: int


def _check_gamma(gamma: float) -> float:
    if isinstance(gamma, bool) or not isinstance(gamma, (int, float)) or not math.isfinite(gamma) or gamma <= 0:
        raise InputError(f"gamma must be a finite number > 0, got {gamma!r}", hint="Pass e.g. gamma=0.05 (noise Lap(1/γ))")
    return float(gamma)


def _check_delta(delta: float) -> float:
    if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not 0 < delta < 1:
        raise InputError(f"delta must be in (0, 1), got {delta!r}", hint="Pass e.g. delta=1e-5")
    return float(delta)


def _check_queries(queries: int) -> int:
    if isinstance(queries, bool) or not isinstance(queries, (int, np.integer)) or queries < 1:
        raise InputError(
            f"queries must be a positive integer, got {queries!r}", hint="Pass the number of answered student queries T"
        )
    return int(queries)


def _check_orders(orders: Sequence[float] | np.ndarray) -> np.ndarray:
    arr = np.asarray(orders, dtype=float)
    if arr.ndim != 1 or arr.size == 0 or not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise InputError(f"orders must be a non-empty list of numbers > 0, got {orders!r}", hint="Use e.g. orders=range(1, 9)")
    return arr


def data_independent_log_moment(gamma: float, order: float) -> float:
    """Eq. (11): the log-MGF bound ``2γ²λ(λ+1)`` of one ``(2γ, 0)``-DP noisy-max answer.

    >>> round(data_independent_log_moment(0.05, 2), 12)
    0.03
    """
    g = _check_gamma(gamma)
    return 2.0 * g * g * order * (order + 1.0)


def data_independent_epsilon(*, gamma: float, queries: int, delta: float, orders: Sequence[float] | None = None) -> MomentsBound:
    """Eq. (12): ``min_λ (2Tγ²λ(λ+1) − log δ)/λ``.

    With ``orders=None`` the minimum is over all real ``λ > 0`` (closed form, the paper's figures);
    otherwise over the given orders.

    >>> round(data_independent_epsilon(gamma=0.05, queries=900, delta=1e-6, orders=range(1, 9)).epsilon, 4)
    20.4078
    """
    g, t, d = _check_gamma(gamma), _check_queries(queries), _check_delta(delta)
    a = 2.0 * t * g * g
    log_inv_delta = -math.log(d)
    if orders is None:
        lam = math.sqrt(log_inv_delta / a)
        return MomentsBound(epsilon=a + 2.0 * math.sqrt(a * log_inv_delta), delta=d, order=lam, queries=t)
    lams = _check_orders(orders)
    return epsilon_from_log_moments(a * lams * (lams + 1.0), lams, delta=d, queries=t)


def epsilon_from_log_moments(
    total_log_moments: Sequence[float] | np.ndarray, orders: Sequence[float] | np.ndarray, *, delta: float, queries: int
) -> MomentsBound:
    """Tail bound of the moments accountant: ``min_λ (α(λ) + log(1/δ))/λ`` over the given orders.

    >>> epsilon_from_log_moments([1.0, 3.0], [1, 2], delta=math.exp(-1), queries=1).epsilon
    2.0
    """
    d = _check_delta(delta)
    lams = _check_orders(orders)
    alpha = np.asarray(total_log_moments, dtype=float)
    if alpha.shape != lams.shape:
        raise InputError(f"{alpha.size} log moments for {lams.size} orders", hint="Pass one log moment per order")
    eps = (alpha - math.log(d)) / lams
    i = int(np.argmin(eps))
    return MomentsBound(epsilon=float(eps[i]), delta=d, order=float(lams[i]), queries=int(queries))


def _check_counts(counts: np.ndarray | Sequence[Sequence[float]]) -> np.ndarray:
    arr = np.asarray(counts, dtype=float)
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.shape[1] < 2 or arr.shape[0] < 1:
        raise InputError(
            f"vote counts must be a (queries, classes) array with ≥ 2 classes, got shape {np.shape(counts)}",
            hint="Pass one row of per-class teacher vote counts per answered query",
        )
    if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise InputError("vote counts must be finite and ≥ 0", hint="Pass the raw teacher vote counts")
    return arr


def noisy_max_q_bound(counts: np.ndarray | Sequence[Sequence[float]], gamma: float) -> np.ndarray:
    """Upper bound ``q`` on ``P[argmax_c(n_c + Lap(1/γ)) ≠ c*]`` for each row of vote counts.

    Papernot et al. 2016, appendix: ``q ≤ Σ_{c≠c*} (2 + γ·Δ_c) / (4·exp(γ·Δ_c))`` with
    ``Δ_c = n_{c*} − n_c``, capped at ``1 − 1/k`` (the plurality class wins at least as often as any
    other class).

    >>> float(noisy_max_q_bound([[10, 10]], 0.05)[0])
    0.5
    >>> round(float(noisy_max_q_bound([[250, 0]], 0.05)[0]), 10)
    1.35091e-05
    """
    g = _check_gamma(gamma)
    arr = _check_counts(counts)
    top = arr.max(axis=1, keepdims=True)
    gap = g * (top - arr)
    terms = (2.0 + gap) / (4.0 * np.exp(gap))
    # the winner's own term is (2 + 0)/4 = 1/2 per row; remove it once (ties keep their 1/2 each)
    q = terms.sum(axis=1) - 0.5
    return np.minimum(q, 1.0 - 1.0 / arr.shape[1])


def theorem3_q_limit(gamma: float) -> float:
    """Largest ``q`` (exclusive) for which Theorem 3 of Papernot et al. 2016 applies: ``(e^{2γ}−1)/(e^{4γ}−1)``.

    >>> round(theorem3_q_limit(0.05), 6)
    0.475021
    """
    g = _check_gamma(gamma)
    return math.expm1(2.0 * g) / math.expm1(4.0 * g)


def log_moment_bound(q: np.ndarray | float, gamma: float, order: float) -> np.ndarray:
    """Per-answer log-MGF bound at order ``λ``: the least of ``2γ²λ(λ+1)``, ``2γλ`` and Theorem 3.

    >>> log_moment_bound([0.5, 1e-6], 0.05, 2).round(10).tolist()  # q = 0.5 is too large for Theorem 3
    [0.03, 4.317e-07]
    """
    g = _check_gamma(gamma)
    lam = float(order)
    qa = np.atleast_1d(np.asarray(q, dtype=float))
    eps = 2.0 * g
    bound = np.full(qa.shape, min(0.5 * eps * eps * lam * (lam + 1.0), eps * lam))
    ok = qa < theorem3_q_limit(g)
    if np.any(ok):
        qq = qa[ok]
        ratio = (1.0 - qq) / (1.0 - math.exp(eps) * qq)
        t = (1.0 - qq) * np.power(ratio, lam) + qq * math.exp(eps * lam)
        bound[ok] = np.minimum(bound[ok], np.log(t))
    return bound


def data_dependent_log_moments(
    counts: np.ndarray | Sequence[Sequence[float]], *, gamma: float, orders: Sequence[float] | np.ndarray = DEFAULT_ORDERS
) -> np.ndarray:
    """Sum over the answered queries of the per-answer log-MGF bounds, one value per order."""
    q = noisy_max_q_bound(counts, gamma)
    lams = _check_orders(orders)
    return np.array([float(np.sum(log_moment_bound(q, gamma, lam))) for lam in lams])


def data_dependent_epsilon(
    counts: np.ndarray | Sequence[Sequence[float]],
    *,
    gamma: float,
    delta: float,
    orders: Sequence[float] = DEFAULT_ORDERS,
) -> MomentsBound:
    """Eq. (14): data-dependent ε of the answers whose teacher vote counts are ``counts`` (T × k).

    Not a DP statistic itself (it reads the private votes); see the module docstring.

    >>> round(data_dependent_epsilon([[5, 5]] * 900, gamma=0.05, delta=1e-6).epsilon, 4)  # uninformative votes
    20.4078
    """
    arr = _check_counts(counts)
    d = _check_delta(delta)
    lams = _check_orders(orders)
    total = data_dependent_log_moments(arr, gamma=gamma, orders=lams)
    return epsilon_from_log_moments(total, lams, delta=d, queries=arr.shape[0])
