"""GAN and ML-copy sanitisers on small Adult subsets."""

from __future__ import annotations

import numpy as np
import pytest

from veil.errors import InputError, PolicyError
from veil.generators.base import Context, get_generator
from veil.generators.gan import ARCHITECTURES, train_gan
from veil.generators.mlcopy import ml_copy
from veil.generators.synthetic_size import DEFAULT_ROWS

COLS = ("age", "education_num", "hours_per_week")


@pytest.fixture(scope="module")
def adult(shared_data):
    from veil.datasets import load_adult

    return load_adult().head(1500)


def test_table8_architectures() -> None:
    assert ARCHITECTURES[3] == ((1024, 512, 256), (256, 512, 1024))
    assert ARCHITECTURES[7] == ((256, 512, 1024), (1024, 512, 256))
    assert len(ARCHITECTURES) == 7


@pytest.mark.slow
def test_gan_learns_location_and_is_reproducible() -> None:
    rng = np.random.default_rng(0)
    z = rng.normal(3.0, 0.5, size=(2000, 2))
    a, info = train_gan(z, architecture=2, epochs=40, batch_size=200, lr=2e-3, seed=5)
    b, _ = train_gan(z, architecture=2, epochs=40, batch_size=200, lr=2e-3, seed=5)
    np.testing.assert_array_equal(a, b)  # private torch.Generator: same seed, same samples
    assert a.shape == (DEFAULT_ROWS, 2) and info["train_seconds"] >= 0  # the public default, never len(z)
    # untrained output is centred near 0; after training the mean moves most of the way to 3
    assert np.all(np.abs(a.mean(axis=0) - 3.0) < 1.0)


def test_gan_generator_outputs_labels(adult) -> None:
    ctx = Context(
        columns=COLS,
        target="income",
        seed=0,
        bounds={"age": (17, 90), "education_num": (1, 16), "hours_per_week": (1, 99)},
        categories={"income": ("<=50K", ">50K")},
    )
    out = get_generator("gan")(architecture=1, epochs=2, batch_size=256, rows=300).run(adult, ctx)
    assert len(out.frame) == 300 and out.source is None
    assert set(out.frame["income"]) <= {"<=50K", ">50K"}


def test_ml_copy_labels_by_tree_and_keeps_class_shares() -> None:
    rng = np.random.default_rng(0)
    x = np.r_[rng.normal(0, 1, (600, 2)), rng.normal(5, 1, (200, 2))]
    y = np.r_[np.zeros(600, int), np.ones(200, int)]
    xs, ys = ml_copy(x, y, sampling="normal", seed=1)
    assert xs.shape == (DEFAULT_ROWS, 2)  # the public default, never len(x)
    # labels come from the tree: points deep in each class region get that class
    assert (ys[xs.sum(axis=1) < 0] == 0).mean() > 0.95 and (ys[xs.sum(axis=1) > 10] == 1).mean() > 0.95
    assert abs(ys.mean() - 0.25) < 0.05
    lo, hi = np.array([-3.0, -4.0]), np.array([9.0, 8.0])
    xu, _ = ml_copy(x, y, sampling="uniform", balanced=True, seed=1, lower=lo, upper=hi)
    # uniform over the declared box (every class alike), not the rows' range
    assert np.all(xu.min(axis=0) >= lo - 1e-9) and np.all(xu.max(axis=0) <= hi + 1e-9)
    assert np.all(np.abs(xu.mean(axis=0) - (lo + hi) / 2) < 0.5)
    with pytest.raises(InputError, match="declared bounds"):
        ml_copy(x, y, sampling="uniform", seed=1)


def test_ml_copy_generator(adult) -> None:
    ctx = Context(
        columns=COLS,
        target="income",
        seed=0,
        bounds={"age": (17, 90), "education_num": (1, 16), "hours_per_week": (1, 99)},
        categories={"income": ("<=50K", ">50K")},
    )
    out = get_generator("ml_copy")(sampling="uniform").run(adult, ctx)
    assert len(out.frame) == DEFAULT_ROWS and set(out.frame["income"]) <= {"<=50K", ">50K"}
    with pytest.raises(PolicyError, match="'age' has no declared bounds"):
        get_generator("ml_copy")(sampling="uniform").run(adult, Context(columns=COLS, target="income", seed=0))
