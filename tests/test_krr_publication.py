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
    p = keep_probability(eps, 4)
    assert info["c"]["k"] == 4 and info["c"]["keep_probability"] == pytest.approx(p)
    kept = float((out["c"] == df["c"]).mean())
    sd = np.sqrt(p * (1 - p) / n)
    assert abs(kept - p) < 5.3 * sd
    assert abs(kept - 1.3 * p) > 5.3 * sd and abs(kept - 0.7 * p) > 5.3 * sd
    # flips are uniform over the other k - 1 values: each lands near (1 - p) / 3 of the "a" rows
    flipped = out["c"][(df["c"] == "a") & (out["c"] != "a")].value_counts(normalize=True)
    assert set(flipped.index) == {"b", "c", "d"} and (abs(flipped - 1 / 3) < 0.05).all()
    assert list(out.columns) == ["c"]  # the unperturbed column is never returned


def test_declared_domains_and_missing_values() -> None:
    df = pd.DataFrame({"h": [40, 40, 41, 39] * 50, "w": ["x", None, "y", "x"] * 50})
    specs = {
        "h": SimpleNamespace(type="int", bounded=True, lower=1, upper=99, values=None),
        "w": SimpleNamespace(type="category", values=("x", "y")),
    }
    out, info = krr_publish(df, ["h", "w"], epsilon=0.5, specs=specs, rng=np.random.default_rng(1))
    assert info["h"] == {"k": 99, "domain_source": "policy bounds", "keep_probability": keep_probability(0.5, 99)}
    assert info["w"]["k"] == 3 and info["w"]["domain_source"] == "policy values"  # x, y and NA
    assert out["h"].between(1, 99).all() and out["h"].dtype == df["h"].dtype
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


def test_value_outside_declared_domain_is_refused() -> None:
    df = pd.DataFrame({"c": ["a", "q"]})
    spec = {"c": SimpleNamespace(type="category", bounded=False, lower=None, upper=None, values=("a", "b"))}
    with pytest.raises(InputError, match="outside its declared domain"):
        krr_publish(df, ["c"], epsilon=1.0, specs=spec)


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
