"""kRR publication: domains, keep probability (statistical), copying of other columns."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from veil.errors import InputError
from veil.generators.krr import keep_probability, krr_publish


def test_keep_rate_matches_theory() -> None:
    """Binomial check at α ≈ 1e-7 (5.3 sd); a keep probability off by ±30 % would fail it."""
    n = 20_000
    df = pd.DataFrame({"c": np.array(["a", "b", "c", "d"])[np.arange(n) % 4], "other": np.arange(n)})
    eps = 1.0
    specs = {"c": SimpleNamespace(values=("a", "b", "c", "d"))}
    out, info = krr_publish(df, ["c"], epsilon=eps, specs=specs, rng=np.random.default_rng(0))
    p = keep_probability(eps, 5)  # a, b, c, d and NA (always in the domain)
    assert info["c"]["k"] == 5 and info["c"]["keep_probability"] == pytest.approx(p)
    kept = float((out["c"] == df["c"]).mean())
    sd = np.sqrt(p * (1 - p) / n)
    assert abs(kept - p) < 5.3 * sd
    assert abs(kept - 1.3 * p) > 5.3 * sd and abs(kept - 0.7 * p) > 5.3 * sd
    # flips are uniform over the other k - 1 values (NA among them): each near a quarter of the flipped "a" rows
    flipped = out["c"][(df["c"] == "a") & (out["c"] != "a")].fillna("<NA>").value_counts(normalize=True)
    assert set(flipped.index) == {"b", "c", "d", "<NA>"} and (abs(flipped - 1 / 4) < 0.05).all()
    assert list(out.columns) == ["c"]  # the unperturbed column is never returned


def test_declared_domains_and_missing_values() -> None:
    df = pd.DataFrame({"h": [40, 40, 41, 39] * 50, "w": ["x", None, "y", "x"] * 50})
    specs = {
        "h": SimpleNamespace(type="int", bounded=True, lower=1, upper=99, values=None),
        "w": SimpleNamespace(type="category", values=("x", "y")),
    }
    out, info = krr_publish(df, ["h", "w"], epsilon=0.5, specs=specs, rng=np.random.default_rng(1))
    assert info["h"] == {"k": 100, "domain_source": "policy bounds", "keep_probability": keep_probability(0.5, 100)}
    assert info["w"]["k"] == 3 and info["w"]["domain_source"] == "policy values"  # x, y and NA
    assert out["h"].dropna().between(1, 99).all() and str(out["h"].dtype) == "Int64"  # the declared type
    assert out["h"].nunique() > 10  # values outside the observed three appear
    assert set(out["w"].dropna()) <= {"x", "y"} and out["w"].isna().any()
    cat_spec = {"w": SimpleNamespace(type="category", bounded=False, lower=None, upper=None, values=("x", "y", "z"))}
    _, info = krr_publish(df, ["w"], epsilon=1.0, specs=cat_spec, rng=np.random.default_rng(2))
    assert info["w"]["domain_source"] == "policy values" and info["w"]["k"] == 4


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"epsilon": 0.0}, "epsilon must be"),
        ({"epsilon": float("inf")}, "epsilon must be"),
        ({"columns": []}, "no columns"),
        ({"columns": ["c", "c"]}, "repeat"),
        ({"columns": ["cc"]}, "Did you mean 'c'"),
    ],
)
def test_bad_input(kwargs, match) -> None:
    df = pd.DataFrame({"c": ["a", "b"]})
    args = {"columns": ["c"], "epsilon": 1.0, "specs": {"c": SimpleNamespace(values=("a", "b"))}, **kwargs}
    with pytest.raises(InputError, match=match):
        krr_publish(df, args.pop("columns"), **args)


def test_a_value_outside_the_declared_domain_is_read_as_missing() -> None:
    """Not refused (a refusal would depend on one row, red team s16 A12): randomised as NA, never published."""
    spec = {"c": SimpleNamespace(type="category", bounded=False, lower=None, upper=None, values=("a", "b"))}
    outside, _ = krr_publish(pd.DataFrame({"c": ["a", "q"] * 50}), ["c"], epsilon=1.0, specs=spec, rng=np.random.default_rng(3))
    missing, _ = krr_publish(pd.DataFrame({"c": ["a", None] * 50}), ["c"], epsilon=1.0, specs=spec, rng=np.random.default_rng(3))
    assert "q" not in set(outside["c"].dropna()) and outside["c"].tolist() == missing["c"].tolist()


@pytest.mark.parametrize("source_type", ["category", "int", "bool"])
def test_the_output_does_not_say_whether_a_source_value_was_missing(source_type: str) -> None:
    """One missing source value changes neither the domain (NA always in it), nor the published type: with the
    same randomness, D and D′ (one value missing) differ in that one row only (red team s16 A1)."""
    values: dict[str, tuple[object, ...]] = {"category": ("x", "y"), "int": (1, 2), "bool": (True, False)}
    a, b = values[source_type]
    spec = {"c": SimpleNamespace(type=source_type, bounded=source_type == "int", lower=1, upper=2, values=values[source_type])}
    d = pd.DataFrame({"c": [a, b] * 100})
    d_prime = d.astype(object).copy()
    d_prime.loc[7, "c"] = None
    if source_type == "int":
        d_prime = d_prime.astype({"c": "float64"})  # pandas holds a missing int as a float
    out_d, info_d = krr_publish(d, ["c"], epsilon=0.5, specs=spec, rng=np.random.default_rng(5))
    out_p, info_p = krr_publish(d_prime, ["c"], epsilon=0.5, specs=spec, rng=np.random.default_rng(5))
    assert info_d == info_p and out_d["c"].dtype == out_p["c"].dtype
    left = out_d["c"].astype(object).where(out_d["c"].notna(), None)
    right = out_p["c"].astype(object).where(out_p["c"].notna(), None)
    differ = [i for i in range(len(d)) if left[i] != right[i]]
    assert differ in ([], [7])
    assert out_d["c"].isna().any()  # NA is published with no missing source value at all


def test_the_number_of_rows_is_discrete_laplace() -> None:
    """|rows − n| over 300 publications (n = 20, count ε = 0.5, scale 2): E|X| = 2p/(1 − p²), p = e^(−1/2), ≈ 1.92.

    Five standard errors (false failure ≈ 6e-7 by the normal approximation); scale 1 (E|X| ≈ 0.85) or 4 (≈ 3.96)
    would fail it."""
    spec = {"c": SimpleNamespace(type="category", values=("x", "y"))}
    df = pd.DataFrame({"c": ["x", "y"] * 10})
    rng = np.random.default_rng(11)
    dev = np.array([abs(len(krr_publish(df, ["c"], epsilon=1.0, specs=spec, count_epsilon=0.5, rng=rng)[0]) - 20)
                    for _ in range(300)], dtype=float)  # fmt: skip
    p = np.exp(-0.5)
    mean = 2 * p / (1 - p**2)
    assert abs(dev.mean() - mean) < 5 * dev.std(ddof=1) / np.sqrt(len(dev))
    for wrong in (1.0, 4.0):
        q = np.exp(-1 / wrong)
        assert abs(dev.mean() - 2 * q / (1 - q**2)) > 5 * dev.std(ddof=1) / np.sqrt(len(dev))


def test_added_rows_stay_in_the_declared_domains() -> None:
    spec = {"h": SimpleNamespace(type="int", bounded=True, lower=1, upper=5, values=None)}
    df = pd.DataFrame({"h": [1, 2]})
    sizes = set()
    for seed in range(40):
        out, _ = krr_publish(df, ["h"], epsilon=1.0, specs=spec, count_epsilon=0.2, rng=np.random.default_rng(seed))
        sizes.add(len(out))
        assert out["h"].dropna().between(1, 5).all() and str(out["h"].dtype) == "Int64"
    assert max(sizes) > 2 and min(sizes) < 2


@pytest.mark.parametrize(
    "spec",
    [
        None,  # not declared at all
        SimpleNamespace(type="category", bounded=False, lower=None, upper=None, values=None),  # declared, no values
        SimpleNamespace(type="int", bounded=True, lower=0, upper=5000, values=None),  # bounds too wide for kRR
        SimpleNamespace(type="float", bounded=True, lower=0.0, upper=1.0, values=None),  # not a finite domain
    ],
)
def test_a_domain_is_never_read_from_the_data(spec: SimpleNamespace | None) -> None:
    df = pd.DataFrame({"c": ["a", "b"] * 10})
    specs = {} if spec is None else {"c": spec}
    with pytest.raises(InputError, match="declared"):
        krr_publish(df, ["c"], epsilon=1.0, specs=specs)
