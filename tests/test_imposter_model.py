"""IMPOSTER model: released rows, the λ trade-off, determinism, no global RNG, interrupts."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from veil.errors import InputError
from veil.generators.imposter import Imposter
from veil.generators.synthetic_size import DEFAULT_ROWS


def _toy(n: int, seed: int) -> pd.DataFrame:
    """s strongly readable from (colour, size); y depends on size; 'keep' is an unrelated column."""
    rng = np.random.default_rng(seed)
    s = rng.integers(0, 2, n)
    colour = np.where(rng.random(n) < 0.85, np.where(s == 1, "red", "blue"), rng.choice(["red", "blue", "green"], n))
    size = np.round(10 + 4 * s + rng.normal(0, 1.5, n)).astype(np.int64)
    y = np.where(size + rng.normal(0, 2, n) > 12, "hi", "lo")
    return pd.DataFrame({"keep": np.arange(n), "colour": colour, "size": size, "s": np.where(s == 1, "F", "M"), "y": y})


def _s_accuracy(df: pd.DataFrame) -> float:
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import cross_val_score

    from veil.auditor.implicit import one_hot_features

    x = one_hot_features(df[["colour", "size"]])
    return float(cross_val_score(LogisticRegression(max_iter=500), x, df["s"], cv=3).mean())


@pytest.fixture(scope="module")
def toy() -> pd.DataFrame:
    return _toy(2000, 0)


@pytest.mark.slow
def test_released_rows_are_synthetic_in_every_column_with_valid_values(toy: pd.DataFrame) -> None:
    model = Imposter(implicit=["colour", "size"], sensitive="s", label="y", lam=1.0, epochs=2, batch_size=200, seed=1)
    out = model.fit(toy).publish(toy, seed=2)
    # only the conditions and the implicit attributes, none copied from a row ("keep" is dropped)
    assert list(out.columns) == ["s", "y", "colour", "size"] and len(out) == DEFAULT_ROWS  # public, never len(toy)
    for col in ("s", "y"):
        assert not out[col].equals(toy[col])
        assert abs(out[col].value_counts(normalize=True) - toy[col].value_counts(normalize=True)).max() < 0.05
    assert set(out["colour"]) <= {"red", "blue", "green"}
    assert out["size"].between(toy["size"].min(), toy["size"].max()).all() and out["size"].dtype == np.int64
    assert not out["colour"].equals(toy["colour"])  # regenerated, not copied
    assert len(model.history) == 2 and all(h.seconds > 0 for h in model.history)
    assert model.params()["lambda"] == 1.0


@pytest.mark.slow
def test_lambda_removes_the_dependence_that_gan_keeps(toy: pd.DataFrame) -> None:
    """Deterministic given the seeds (no statistical false-failure rate); real data: accuracy ≈ 0.93."""
    data = toy.head(1200)
    assert _s_accuracy(data) > 0.9
    common = {"implicit": ["colour", "size"], "sensitive": "s", "label": "y", "epochs": 15, "batch_size": 200, "seed": 3}
    gan = Imposter(lam=0.0, **common).fit(data).publish(data, seed=4)
    imposter = Imposter(lam=5.0, **common).fit(data).publish(data, seed=4)
    acc_gan, acc_imp = _s_accuracy(gan), _s_accuracy(imposter)
    assert acc_gan > 0.75, acc_gan
    assert acc_imp < 0.65, acc_imp


def test_same_seed_same_release_and_no_global_rng(toy: pd.DataFrame) -> None:
    torch_state, np_state = torch.random.get_rng_state().clone(), np.random.get_state()[1].copy()
    small = toy.head(400)
    a = Imposter(implicit=["colour", "size"], sensitive="s", epochs=2, batch_size=100, seed=7).fit(small)
    b = Imposter(implicit=["colour", "size"], sensitive="s", epochs=2, batch_size=100, seed=7).fit(small)
    assert a.publish(small, seed=1).equals(b.publish(small, seed=1))
    assert not a.publish(small, seed=1).equals(a.publish(small, seed=2))
    assert torch.equal(torch.random.get_rng_state(), torch_state)
    assert np.array_equal(np.random.get_state()[1], np_state)


def test_interrupt_leaves_model_unfitted(toy: pd.DataFrame) -> None:
    model = Imposter(implicit=["colour"], sensitive="s", epochs=5, batch_size=200, seed=0)

    def stop(stats) -> None:
        if stats.epoch == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        model.fit(toy, on_epoch=stop)
    assert not model.fitted and len(model.history) == 2
    with pytest.raises(InputError, match="not trained"):
        model.publish(toy)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"implicit": []}, "at least one implicit"),
        ({"implicit": ["s"]}, "cannot also be an implicit"),
        ({"label": "colour"}, "label column 'colour'"),
        ({"lam": -1.0}, "lambda must be"),
        ({"epochs": 0}, "epochs must be"),
    ],
)
def test_bad_parameters(kwargs, match) -> None:
    args = {"implicit": ["colour"], "sensitive": "s", **kwargs}
    with pytest.raises(InputError, match=match):
        Imposter(**args)


def test_bad_frames(toy: pd.DataFrame) -> None:
    with pytest.raises(InputError, match="Did you mean 'colour'"):
        Imposter(implicit=["colur"], sensitive="s", epochs=1).fit(toy)
    bad = toy.copy()
    bad.loc[0, "s"] = None
    with pytest.raises(InputError, match="missing values"):
        Imposter(implicit=["colour"], sensitive="s", epochs=1).fit(bad)
    model = Imposter(implicit=["colour"], sensitive="s", epochs=1, batch_size=500, seed=0).fit(toy)
    other = toy.head(3).assign(s=["X", "M", "F"])
    with pytest.raises(InputError, match="'X' is not a value seen in training"):
        model.generate(other)
    declared = Imposter(
        implicit=["colour"], sensitive="s", epochs=1, batch_size=500, seed=0, domains=_declared(toy, ["s", "colour"])
    ).fit(bad)  # with declared domains a missing condition is left out, not refused
    with pytest.raises(InputError, match="'X' is not a declared value"):
        declared.generate(other)


def _declared(frame: pd.DataFrame, columns: list[str]) -> dict:
    from veil.generators.tabular_encoding import ColumnDomain

    return {c: ColumnDomain(values=tuple(sorted(frame[c].dropna().unique()))) for c in columns}


def test_d2_may_see_the_label(toy: pd.DataFrame) -> None:
    small = toy.head(400)
    model = Imposter(
        implicit=["colour", "size"], sensitive="s", label="y", epochs=1, batch_size=100, seed=0, d2_sees_label=True
    ).fit(small)
    assert model.params()["d2_sees_label"] is True and 0.0 <= model.history[0].d2_accuracy <= 1.0
    assert model._nets.d2[0].in_features == model.encoder_.width + 2  # + one-hot of y
