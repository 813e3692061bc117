"""The 1-D batch SOM and its neuron-count search."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from veil.errors import InputError
from veil.generators.som import choose_neurons, fit_som, neuron_candidates


def test_som_orders_a_one_dimensional_manifold() -> None:
    # points on a half circle: after standardising, their directions from the centre still vary
    # monotonically with the angle, so a 1-D cosine SOM must order them by angle
    rng = np.random.default_rng(0)
    theta = rng.uniform(0, np.pi, 600)
    x = np.c_[np.cos(theta), np.sin(theta)] * (1 + 0.01 * rng.standard_normal((600, 1)))
    model = fit_som(x, 10, seed=0)
    idx = model.transform(x)
    from scipy.stats import spearmanr

    assert abs(spearmanr(idx, theta).statistic) > 0.95
    assert len(np.unique(idx)) == 10


def test_neuron_search_prefers_label_correlated_maps() -> None:
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 800)
    x = np.c_[y * 2.0 + rng.normal(0, 0.5, 800), rng.normal(0, 1, 800), rng.normal(0, 1, 800)]
    model, scores = choose_neurons(x, y, [3, 6, 9], epochs=10, seed=0)
    assert set(scores) == {3, 6, 9}
    assert model.n_neurons == max(scores, key=scores.get)
    assert max(scores.values()) > 0.5  # the label-driven column dominates one end of the map


def test_som_on_adult_columns_uses_most_neurons(shared_data: Path) -> None:
    from veil.datasets import load_adult

    df = load_adult(drop_missing=True).head(4000)
    x = df[["capital_gain", "capital_loss", "hours_per_week", "fnlwgt"]].to_numpy(float)
    model = fit_som(x, 50, epochs=10, seed=0)
    idx = model.transform(x)
    assert len(np.unique(idx)) >= 45
    assert model.quantisation_error(x) < 0.05


def test_bad_som_arguments() -> None:
    with pytest.raises(InputError, match="bounds"):
        neuron_candidates(300, 100, 10)
    with pytest.raises(InputError, match="at least 2"):
        fit_som(np.ones((5, 2)), 1)
    with pytest.raises(InputError, match="missing"):
        fit_som(np.array([[1.0, np.nan]]), 3)
