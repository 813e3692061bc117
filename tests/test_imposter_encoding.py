"""Mixed-type tabular encoding: round trips, valid decodes, sampling."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from veil.errors import InputError
from veil.generators.tabular_encoding import TabularEncoder


@pytest.fixture(scope="module")
def adult_head(shared_data):
    from veil.datasets import load_adult

    return load_adult().head(3000)


def test_round_trip_on_adult(adult_head: pd.DataFrame) -> None:
    enc = TabularEncoder.fit(adult_head)
    x = enc.encode(adult_head)
    assert x.shape == (len(adult_head), enc.width) and x.dtype == np.float32
    back = enc.decode(x)
    for col in adult_head.columns:
        a, b = adult_head[col], back[col]
        if pd.api.types.is_numeric_dtype(a):
            assert b.dtype == a.dtype, col
            # 1000 quantile knots for 3000 rows: values between knots may move by interpolation
            rel = np.abs(b.to_numpy(float) - a.to_numpy(float)) / (a.max() - a.min())
            assert (rel <= 0.01).all(), col
        else:
            assert a.fillna("<NA>").astype(str).equals(b.fillna("<NA>").astype(str)), col
    # small-domain integer columns come back exactly
    assert back["age"].equals(adult_head["age"]) and back["education_num"].equals(adult_head["education_num"])


@pytest.mark.slow
def test_decode_of_arbitrary_output_is_valid(adult_head: pd.DataFrame) -> None:
    enc = TabularEncoder.fit(adult_head)
    rng = np.random.default_rng(0)
    noise = rng.normal(scale=3.0, size=(500, enc.width))
    for sample in (False, True):
        out = enc.decode(np.abs(noise), sample=sample, rng=rng)
        for col in adult_head.columns:
            a = adult_head[col]
            if pd.api.types.is_numeric_dtype(a):
                assert out[col].between(a.min(), a.max()).all(), col
                assert (out[col] % 1 == 0).all(), col
            else:
                seen = set(a.dropna()) | {None}
                assert set(out[col].where(out[col].notna(), None)) <= seen | {np.nan}, col


def test_sampling_follows_probabilities() -> None:
    enc = TabularEncoder.fit(pd.DataFrame({"c": ["a", "b"]}))
    n = 20_000
    probs = np.tile([0.2, 0.8], (n, 1))
    out = enc.decode(probs, sample=True, rng=np.random.default_rng(1))
    share = float((out["c"] == "b").mean())
    # binomial sd = sqrt(.16/n) = 0.0028; 5.3 sd is a false-failure rate of about 1e-7
    assert abs(share - 0.8) < 5.3 * np.sqrt(0.16 / n)
    assert (enc.decode(probs)["c"] == "b").all()  # arg-max


def test_numeric_missing_values_round_trip() -> None:
    df = pd.DataFrame({"v": [1.5, np.nan, 3.0, 4.25, np.nan]})
    enc = TabularEncoder.fit(df)
    assert enc.width == 3
    back = enc.decode(enc.encode(df))
    assert back["v"].isna().tolist() == df["v"].isna().tolist()
    assert np.allclose(back["v"].dropna(), df["v"].dropna())


def test_mass_point_survives() -> None:
    df = pd.DataFrame({"h": [40] * 60 + list(range(1, 41)) + [99]})
    enc = TabularEncoder.fit(df)
    x = enc.encode(df)
    assert np.unique(x[:60, 0]).size == 1
    assert (enc.decode(x)["h"] == df["h"]).all()


def test_errors_name_the_problem() -> None:
    enc = TabularEncoder.fit(pd.DataFrame({"c": ["a", "b"]}))
    with pytest.raises(InputError, match="not seen at fit time"):
        enc.encode(pd.DataFrame({"c": ["z"]}))
    with pytest.raises(InputError, match="missing from the table"):
        enc.encode(pd.DataFrame({"d": ["a"]}))
    with pytest.raises(InputError, match="does not match encoder width"):
        enc.decode(np.zeros((2, 5)))
    with pytest.raises(InputError, match="needs an rng"):
        enc.decode(np.zeros((2, 2)), sample=True)
    with pytest.raises(InputError, match="empty"):
        TabularEncoder.fit(pd.DataFrame({"c": []}))
