"""IL (cosine), DR (Jensen–Shannon of LR predictions), record-linkage risk, Pareto front."""

from __future__ import annotations

import numpy as np
import pytest

from veil.auditor.metrics import (
    cosine_distances,
    disclosure_risk,
    evaluate_release,
    information_loss,
    linkage_risk,
    pareto_front,
)
from veil.errors import InputError


def test_information_loss_is_the_papers_sum_of_cosine_distances() -> None:
    x = np.array([[1.0, 0.0], [0.0, 2.0], [3.0, 3.0]])
    il, mean = information_loss(x, -x, standardise=False)
    assert il == pytest.approx(6.0) and mean == pytest.approx(2.0)  # opposite vectors: 2 each
    il, _ = information_loss(x, x[:, ::-1], standardise=False)
    assert il == pytest.approx(1 + 1 + 0)  # swapped axes: orthogonal, orthogonal, same direction
    assert cosine_distances(np.zeros((1, 2)), np.zeros((1, 2)))[0] == 0.0
    with pytest.raises(InputError):
        information_loss(x, x[:2])


def test_information_loss_grows_with_noise() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2000, 4))
    small = information_loss(x, x + 0.1 * rng.normal(size=x.shape))[1]
    large = information_loss(x, x + 1.0 * rng.normal(size=x.shape))[1]
    assert 0 < small < large


def test_disclosure_risk() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3000, 3))
    y = (x[:, 0] + 0.5 * rng.normal(size=3000) > 0).astype(int)
    assert disclosure_risk(x, x, y) == pytest.approx(1.0)
    noisy = disclosure_risk(x, x + rng.normal(size=x.shape), y)
    shuffled = disclosure_risk(x, rng.permutation(x), y)
    assert 0 < shuffled < noisy < 1
    with pytest.raises(InputError, match="two classes"):
        disclosure_risk(x, x, np.zeros(3000))


def test_linkage_risk() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(500, 3))
    assert linkage_risk(x, x, np.arange(500)) == 1.0
    # exact duplicates split the credit: two copies of every record → 1/2
    xx = np.r_[x, x]
    assert linkage_risk(xx, xx, np.arange(1000)) == pytest.approx(0.5)
    # a release whose rows point at the wrong sources is almost never linked
    assert linkage_risk(x, x, np.roll(np.arange(500), 1)) == 0.0
    small = linkage_risk(x, x + 0.01 * rng.normal(size=x.shape), np.arange(500))
    big = linkage_risk(x, x + 1.0 * rng.normal(size=x.shape), np.arange(500))
    assert big < small <= 1.0


def test_evaluate_release_without_sources_pairs_rows() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 2))
    y = (x[:, 0] > 0).astype(int)
    res = evaluate_release(x, rng.normal(size=(300, 2)), source=None, y=y)
    assert res["linkage_risk"] is None and 0 < res["il_mean"] < 2 and 0 < res["dr"] < 1


def test_pareto_front() -> None:
    assert pareto_front([(1, 3), (2, 2), (3, 1), (3, 3), (1, 3)]) == [True, True, True, False, True]
