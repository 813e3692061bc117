"""SDC filters (noise addition, MDAV, DBSCAN, rank swapping) and the generator registry."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from veil.errors import InputError
from veil.generators.base import Context, generator_names, get_generator, grid_points, parse_param_args
from veil.generators.sdc import CODED_TAIL, dbscan_groups, mdav, noise_addition, rank_swap, replace_by_centroids, standardise

COLS = ("age", "education_num", "hours_per_week", "capital_gain")


@pytest.fixture(scope="module")
def adult(shared_data):
    from veil.datasets import load_adult

    return load_adult().head(4000)


def test_registry_lists_every_sanitiser_and_suggests() -> None:
    names = generator_names(lambda c: c.family == "sdc")
    assert names == sorted(
        [
            "noise_addition",
            "microagg_mdav",
            "microagg_dbscan",
            "rank_swapping",
            "dp_microagg_laplace",
            "dp_microagg_exponential",
            "gan",
            "ml_copy",
        ]
    )
    with pytest.raises(InputError, match="Did you mean 'rank_swapping'"):
        get_generator("rank_swaping")


def test_params_are_typed_and_checked() -> None:
    cls = get_generator("microagg_mdav")
    assert parse_param_args(cls, ["k=7"]) == {"k": 7}
    with pytest.raises(InputError, match="must be a int"):
        parse_param_args(cls, ["k=seven"])
    with pytest.raises(InputError, match="k=0"):  # a VacuousParameter, which is an InputError
        cls(k=0)
    with pytest.raises(InputError, match="no parameter 'kk'"):
        parse_param_args(cls, ["kk=3"])
    with pytest.raises(InputError, match="one of grid, mdav"):
        get_generator("dp_microagg_laplace")(partition="kmeans")


def test_default_grids_follow_the_paper() -> None:
    assert [p["a"] for p in grid_points(get_generator("noise_addition"))] == [0.1, 0.25, 0.5, 0.75, 1.0]
    assert [p["p"] for p in grid_points(get_generator("rank_swapping"))] == [10, 25, 50, 75, 80]
    assert len(grid_points(get_generator("microagg_dbscan"))) == 24  # 4 radii × Table 3's six m values
    eps = {p["epsilon"] for p in grid_points(get_generator("dp_microagg_laplace"))}
    assert eps == {0.01, 0.1, 1.0, 10.0, 100.0}  # Table 5
    fixed = grid_points(get_generator("gan"), {"epochs": 3})
    assert {p["epochs"] for p in fixed} == {3}


def test_noise_addition_scale() -> None:
    # sd of (x' − x)/σ over 40,000 N(0,1) draws: relative standard error ≈ 0.35 %; a ±3 % band
    # fails by chance with probability < 1e-15, and a scale off by 30 % always fails.
    rng = np.random.default_rng(1)
    x = rng.normal(5, 3, size=(20000, 2))
    a = 0.5
    out = noise_addition(x, a, np.random.default_rng(2))
    ratio = ((out - x) / x.std(axis=0)).std() / a
    assert abs(ratio - 1) < 0.03
    assert abs(ratio * 1.3 - 1) > 0.03


def test_mdav_groups_have_k_to_2k_minus_1_members(adult) -> None:
    x = adult[list(COLS)].to_numpy(float)
    for k in (3, 10):
        labels = mdav(standardise(x), k)
        sizes = np.bincount(labels)
        assert sizes.min() >= k and sizes.max() <= 2 * k - 1
        out = replace_by_centroids(x, labels)
        np.testing.assert_allclose(out.mean(axis=0), x.mean(axis=0))  # centroids keep the column means
        # each released record equals at least k-1 others: k-anonymity on the protected columns
        _, counts = np.unique(out, axis=0, return_counts=True)
        assert counts.min() >= k


def test_mdav_small_inputs() -> None:
    assert mdav(np.zeros((3, 2)), 2).tolist() == [0, 0, 0]
    with pytest.raises(InputError, match="k=0"):
        mdav(np.zeros((3, 2)), 0)
    with pytest.raises(InputError, match="3 rows, fewer than k"):
        mdav(np.zeros((3, 2)), 4)


def test_dbscan_groups_dense_blobs() -> None:
    rng = np.random.default_rng(0)
    z = np.r_[rng.normal(0, 0.05, (200, 2)), rng.normal(5, 0.05, (200, 2)), [[50.0, 50.0]]]
    labels = dbscan_groups(z, 0.5, 10)
    assert len(set(labels[:200])) == 1 and len(set(labels[200:400])) == 1 and labels[0] != labels[200]
    assert labels[-1] == -1


def test_rank_swap_permutes_within_window() -> None:
    rng = np.random.default_rng(3)
    x = rng.permutation(1000).astype(float).reshape(-1, 1)  # values = ranks
    out = rank_swap(x, 5.0, np.random.default_rng(4))
    k = CODED_TAIL
    coded = np.clip(np.sort(x[:, 0]), k - 1, 1000 - k)  # the same multiset with its tails coded
    assert sorted(out[:, 0]) == coded.tolist()
    assert out.min() == k - 1 and out.max() == 1000 - k and (out == 1000 - k).sum() >= k  # an extreme is ≥ k rows'
    assert np.abs(out - x).max() <= 50  # within 5 % of 1000 ranks
    assert (out != x).mean() > 0.9  # nearly every value swapped
    with pytest.raises(InputError, match=r"p=0\.0"):  # swapping nothing is refused, never published
        rank_swap(x, 0.0, np.random.default_rng(4))


def test_generators_keep_rows_and_round_integers_but_noise_addition(adult) -> None:
    ctx = Context(columns=COLS, target="income", seed=0)
    for name, params in [
        ("noise_addition", {"a": 0.25}),
        ("microagg_mdav", {"k": 5}),
        ("microagg_dbscan", {"eps": 0.5, "min_samples": 50}),
        ("rank_swapping", {"p": 10}),
    ]:
        out = get_generator(name)(**params).run(adult, ctx)
        assert len(out.frame) == len(adult) and out.source is not None and out.epsilon is None
        assert list(out.frame.columns) == [*COLS, "income"]
        if name == "noise_addition":  # published unrounded: rounding back onto the integers published lone values (s64 F1)
            age = out.frame["age"].to_numpy()
            assert pd.api.types.is_float_dtype(out.frame["age"]) and (age != np.rint(age)).all()
        else:
            assert pd.api.types.is_integer_dtype(out.frame["age"])
        assert (out.frame["income"].to_numpy() == adult["income"].to_numpy()[out.source]).all()


def test_context_errors(adult) -> None:
    gen = get_generator("noise_addition")()
    with pytest.raises(InputError, match="Did you mean 'age'"):
        gen.run(adult, Context(columns=("agee",)))
    with pytest.raises(InputError, match="not numeric"):
        gen.run(adult, Context(columns=("sex",)))
    with pytest.raises(InputError, match="needs a label column"):
        get_generator("ml_copy")().run(adult, Context(columns=COLS))
    with pytest.raises(InputError, match="needs public bounds"):
        get_generator("dp_microagg_laplace")().run(adult, Context(columns=COLS))


def test_every_method_and_parameter_is_documented() -> None:
    from pathlib import Path

    doc = (Path(__file__).resolve().parent.parent / "docs" / "sdc.md").read_text(encoding="utf-8")
    for name in generator_names(lambda c: c.family == "sdc"):
        assert f"`{name}`" in doc, name
        for p in get_generator(name).params:
            assert f"`{p.name}`" in doc, (name, p.name)
