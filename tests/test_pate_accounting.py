"""PATE moments accountant: exact figures of Yovine et al. 2021 and Papernot et al. 2016."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.optimize import minimize_scalar

from veil.errors import InputError
from veil.mechanisms.pate_accounting import (
    DEFAULT_ORDERS,
    data_dependent_epsilon,
    data_dependent_log_moments,
    data_independent_epsilon,
    epsilon_from_log_moments,
    log_moment_bound,
    noisy_max_q_bound,
    theorem3_q_limit,
)


@pytest.mark.parametrize(
    ("queries", "delta", "epsilon", "lam"),
    [(1000, 1e-5, 20.1743, 1.51743), (900, 1e-6, 20.2696, 1.75217)],
    ids=["web-T1000-d1e-5", "ecg-T900-d1e-6"],
)
def test_data_independent_epsilon_reproduces_paper(queries: int, delta: float, epsilon: float, lam: float) -> None:
    b = data_independent_epsilon(gamma=0.05, queries=queries, delta=delta)
    assert round(b.epsilon, 4) == epsilon
    assert round(b.order, 5) == lam
    assert (b.delta, b.queries) == (delta, queries)


def test_closed_form_is_the_minimum_of_eq12() -> None:
    gamma, t, delta = 0.05, 1000, 1e-5

    def eq12(lam: float) -> float:
        return (2 * t * gamma**2 * lam * (lam + 1) - math.log(delta)) / lam

    res = minimize_scalar(eq12, bounds=(1e-3, 50), method="bounded", options={"xatol": 1e-10})
    b = data_independent_epsilon(gamma=gamma, queries=t, delta=delta)
    assert b.epsilon == pytest.approx(res.fun, abs=1e-9)
    assert b.order == pytest.approx(res.x, abs=1e-5)
    assert eq12(b.order) == pytest.approx(b.epsilon, rel=1e-12)


def test_integer_orders_give_table1_value_for_uninformative_votes() -> None:
    # Table 1 (ECG, T=900, δ=1e-6): noisy students have median ε_dep 20.41 > ε_ind 20.2696,
    # because the reference accountant minimises over λ = 1..8 only.
    grid = data_independent_epsilon(gamma=0.05, queries=900, delta=1e-6, orders=DEFAULT_ORDERS)
    assert round(grid.epsilon, 2) == 20.41
    assert grid.order == 2.0
    tied = data_dependent_epsilon(np.full((900, 2), 125), gamma=0.05, delta=1e-6)
    assert tied.epsilon == pytest.approx(grid.epsilon, rel=1e-12)


def test_q_bound_two_classes_is_exact_laplace_difference_tail() -> None:
    # For two classes P[n2 + L2 > n1 + L1] = (2 + γg) / (4 e^{γg}) exactly (g = n1 - n2).
    gamma = 0.05
    for n1, n2 in [(250, 0), (130, 120), (200, 50)]:
        g = gamma * (n1 - n2)
        assert noisy_max_q_bound([[n1, n2]], gamma)[0] == pytest.approx((2 + g) / (4 * math.exp(g)), rel=1e-12)
    assert noisy_max_q_bound([[7, 7]], gamma)[0] == 0.5


def test_q_bound_three_classes_by_hand_and_cap() -> None:
    gamma = 0.1
    expected = (2 + 16) / (4 * math.exp(16)) + (2 + 19) / (4 * math.exp(19))
    assert noisy_max_q_bound([[200, 40, 10]], gamma)[0] == pytest.approx(expected, rel=1e-12)
    # all tied: the sum would be 1.0, capped at 1 - 1/3
    assert noisy_max_q_bound([[5, 5, 5]], gamma)[0] == pytest.approx(2 / 3)


def test_log_moment_bound_theorem3_by_hand() -> None:
    gamma, q, lam = 0.05, 0.01, 3.0
    e2g = math.exp(2 * gamma)
    thm3 = math.log((1 - q) * ((1 - q) / (1 - e2g * q)) ** lam + q * math.exp(2 * gamma * lam))
    assert thm3 < 2 * gamma**2 * lam * (lam + 1)
    assert log_moment_bound(q, gamma, lam)[0] == pytest.approx(thm3, rel=1e-12)


def test_log_moment_bound_falls_back_above_theorem3_limit() -> None:
    gamma, lam = 0.05, 4.0
    limit = theorem3_q_limit(gamma)
    assert limit == pytest.approx(math.expm1(0.1) / math.expm1(0.2))
    above = log_moment_bound([limit, 0.49], gamma, lam)
    assert above.tolist() == [pytest.approx(2 * gamma**2 * lam * (lam + 1))] * 2
    # and the pure-DP bound 2γλ wins at large orders
    assert log_moment_bound(0.49, gamma, 100.0)[0] == pytest.approx(2 * gamma * 100.0)


def test_data_dependent_sums_per_query_bounds() -> None:
    counts = np.array([[240, 10], [200, 50], [126, 124]])
    gamma, delta = 0.05, 1e-5
    q = noisy_max_q_bound(counts, gamma)
    per_order = data_dependent_log_moments(counts, gamma=gamma, orders=(1, 2, 3))
    for j, lam in enumerate((1, 2, 3)):
        assert per_order[j] == pytest.approx(sum(float(log_moment_bound(qi, gamma, lam)[0]) for qi in q))
    b = data_dependent_epsilon(counts, gamma=gamma, delta=delta, orders=(1, 2, 3))
    manual = min((per_order[j] - math.log(delta)) / lam for j, lam in enumerate((1, 2, 3)))
    assert b.epsilon == pytest.approx(manual)


def test_consensus_lowers_data_dependent_epsilon() -> None:
    gamma, delta, t = 0.05, 1e-5, 1000
    grid = data_independent_epsilon(gamma=gamma, queries=t, delta=delta, orders=DEFAULT_ORDERS).epsilon
    eps = [
        data_dependent_epsilon(np.tile([top, 250 - top], (t, 1)), gamma=gamma, delta=delta).epsilon
        for top in (125, 150, 200, 250)
    ]
    assert eps == sorted(eps, reverse=True)
    assert eps[0] == pytest.approx(grid)
    assert eps[-1] < 1.5  # unanimous teachers: almost no privacy loss
    assert all(e <= grid + 1e-9 for e in eps)


def test_epsilon_from_log_moments_picks_best_order() -> None:
    b = epsilon_from_log_moments([10.0, 12.0, 30.0], [1, 2, 3], delta=math.exp(-4), queries=5)
    assert (b.epsilon, b.order) == (8.0, 2.0)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"gamma": 0.0, "queries": 10, "delta": 1e-5},
        {"gamma": float("nan"), "queries": 10, "delta": 1e-5},
        {"gamma": 0.05, "queries": 0, "delta": 1e-5},
        {"gamma": 0.05, "queries": True, "delta": 1e-5},
        {"gamma": 0.05, "queries": 10, "delta": 1.0},
        {"gamma": 0.05, "queries": 10, "delta": 1e-5, "orders": [0, 1]},
    ],
)
def test_bad_parameters_are_input_errors(kwargs: dict) -> None:
    with pytest.raises(InputError):
        data_independent_epsilon(**kwargs)


@pytest.mark.parametrize(
    "counts", [[[1, 2, 3]] * 0, [[-1, 3]], [[5]], [[np.nan, 1]]], ids=["empty", "negative", "one-class", "nan"]
)
def test_bad_vote_counts_are_input_errors(counts: list) -> None:
    with pytest.raises(InputError):
        data_dependent_epsilon(np.asarray(counts, dtype=float), gamma=0.05, delta=1e-5)
