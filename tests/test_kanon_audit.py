"""The independent k-anonymity audit: hand-computed k, ℓ, t, NCP and risk values."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from veil.auditor.anonymity import audit_anonymity, leaf_counts_from_dir, parse_generalised
from veil.errors import InputError


@pytest.fixture
def published() -> pd.DataFrame:
    # classes: A (3 rows), B (2 rows), C (4 rows)
    return pd.DataFrame(
        {
            "age": ["[20, 29]"] * 3 + ["41"] * 2 + ["[30, 60]"] * 4,
            "sex": ["*"] * 3 + ["F"] * 2 + ["M"] * 4,
            "income": ["lo", "hi", "lo", "hi", "hi", "lo", "lo", "lo", "lo"],
            "score": [1, 2, 3, 1, 1, 3, 3, 3, 3],
        }
    )


def test_k_l_and_class_sizes(published: pd.DataFrame) -> None:
    r = audit_anonymity(published, ["age", "sex"], sensitive=["income"])
    assert (r.k, r.n_classes, r.class_sizes) == (2, 3, {2: 1, 3: 1, 4: 1})
    assert r.l_diversity == {"income": 1}  # classes B and C are homogeneous
    assert r.is_k_anonymous(2) and not r.is_k_anonymous(3)


def test_t_closeness_categorical_and_ordered(published: pd.DataFrame) -> None:
    r = audit_anonymity(published, ["age", "sex"], sensitive=["income", "score"])
    # income overall: hi 3/9; class B all hi → total variation |1 - 3/9| = 2/3
    assert r.t_closeness["income"] == pytest.approx(2 / 3)
    # score overall 1:3/9, 2:1/9, 3:5/9; ordered EMD per class = Σ|cum diff| / 2
    q = np.array([3, 1, 5]) / 9
    emd = {
        "A": np.abs(np.cumsum(np.array([1, 1, 1]) / 3 - q)[:-1]).sum() / 2,
        "B": np.abs(np.cumsum(np.array([1, 0, 0]) - q)[:-1]).sum() / 2,
        "C": np.abs(np.cumsum(np.array([0, 0, 1]) - q)[:-1]).sum() / 2,
    }
    assert r.t_closeness["score"] == pytest.approx(max(emd.values()))


def test_ncp_and_risk_without_population(published: pd.DataFrame) -> None:
    r = audit_anonymity(published, ["age", "sex"])
    # age domain = 20..60 → widths 9/40 (3 rows), 0 (2 rows), 30/40 (4 rows); sex: '*' = 1 for 3 rows
    age = (3 * 9 / 40 + 4 * 30 / 40) / 9
    sex = 3 / 9
    assert r.ncp_per_qi["age"] == pytest.approx(100 * age)
    assert r.ncp_percent == pytest.approx(100 * (age + sex) / 2)
    assert r.gcp == pytest.approx(r.ncp_percent / 100)
    assert r.prosecutor_max == pytest.approx(1 / 2)
    assert r.prosecutor_mean == pytest.approx(3 / 9)
    assert r.journalist_max == r.prosecutor_max and r.marketer == r.prosecutor_mean
    assert r.records_at_risk == pytest.approx(1.0)  # 1/2, 1/3 and 1/4 all exceed 0.2
    strict = audit_anonymity(published, ["age", "sex"], risk_threshold=0.3)
    assert strict.records_at_risk == pytest.approx(5 / 9)  # only the classes of 2 and 3


def test_population_risk_counts_matching_records(published: pd.DataFrame) -> None:
    population = pd.DataFrame(
        {
            "age": [21, 25, 28, 41, 41, 41, 35, 50, 60, 33, 44, 70],
            "sex": ["M", "F", "M", "F", "F", "F", "M", "M", "M", "M", "F", "M"],
        }
    )
    r = audit_anonymity(published, ["age", "sex"], population=population, population_name="pop")
    # F_A: ages 20..29, any sex → 3; F_B: age 41 & F → 3; F_C: 30..60 & M → 4 (35, 50, 60, 33)
    assert r.journalist_max == pytest.approx(1 / 3)
    assert r.marketer == pytest.approx((3 / 3 + 2 / 3 + 4 / 4) / 9)


def test_hierarchy_ncp_uses_leaf_counts(shared_data: Path) -> None:
    d = shared_data / "adult/hierarchies/clustering_based_k_anon"
    counts = leaf_counts_from_dir(d, ["workclass"])["workclass"]
    assert counts["gov"] == 3 and counts["*"] == 8 and counts["Private"] == 1
    t = pd.DataFrame({"workclass": ["gov", "gov", "Private", "*"]})
    r = audit_anonymity(t, ["workclass"], hierarchies=d)
    assert r.ncp_percent == pytest.approx(100 * (3 / 8 + 3 / 8 + 0 + 1) / 4)
    with pytest.raises(InputError, match="not a node"):
        audit_anonymity(pd.DataFrame({"workclass": ["govv"]}), ["workclass"], hierarchies=d)


def test_extra_qi_and_errors(published: pd.DataFrame) -> None:
    r = audit_anonymity(published, ["age", "sex"], extra_qi=["score"])
    assert r.k_with == {"score": 1}
    with pytest.raises(InputError, match="Did you mean 'age'"):
        audit_anonymity(published, ["agee"])
    assert parse_generalised(pd.Series(["[1, 2]", "x"])) is None
