"""k-anonymity's homogeneity attack (red team s64 F10): a published class whose members (nearly) all share one
sensitive value gives that value to anyone who knows a member's quasi-identifiers. ``kanon --sensitive`` publishes such
a class's sensitive values as NULL (``plugins.kanon.suppress_homogeneous``): no class's commonest published value may be
more than ``MAX_KEEP_PROBABILITY`` of its rows, for every algorithm."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from veil.generators.gate import MAX_KEEP_PROBABILITY
from veil.generators.plugins.kanon import suppress_homogeneous

_POLICY = """\
[database]
path = "warehouse.duckdb"
[ledger]
path = "ledger.sqlite"
[tables.people]
privacy_unit = "row"
[tables.people.columns]
age = { type = "int", lower = 17, upper = 90 }
sex = { type = "category", values = ["F", "M"] }
income = { type = "category", values = ["<=50K", ">50K"] }
[analysts.bob]
epsilon = 2.0
"""


def test_the_rule_on_a_frame() -> None:
    frame = pd.DataFrame(
        {
            "q": ["a"] * 5 + ["b"] * 5 + ["c"] * 11 + ["d"] * 5,
            "s": ["x"] * 5 + ["x", "x", "x", "x", "y"] + ["x"] * 10 + ["y"] + [None, None, None, None, "x"],
        }
    )
    out, counts = suppress_homogeneous(frame, ["q"], ["s"])
    assert out["s"].iloc[:5].isna().all()  # homogeneous
    assert list(out["s"].iloc[5:10]) == ["x", "x", "x", "x", "y"]  # 80 %: kept
    assert out["s"].iloc[10:21].isna().all()  # 10 of 11 (91 %): suppressed
    assert list(out["s"].iloc[21:].isna()) == [True] * 4 + [False]  # NULLs are no value: 1 of 5 'x' kept
    assert counts == {"s": 16}
    assert frame["s"].iloc[0] == "x"  # the input is not modified


@pytest.mark.parametrize("algorithm", ["mondrian", "oka", "kmember"])
@pytest.mark.parametrize("seed", [0, 1])
def test_no_published_class_gives_its_members_sensitive_value(tmp_path: Path, algorithm: str, seed: int) -> None:
    from veil.generators.transaction import publish
    from veil.policy import load_policy
    from veil.store.warehouse import write_table

    rng = np.random.default_rng(seed)
    n = 200
    age = rng.integers(18, 70, n)
    frame = pd.DataFrame(
        {
            "age": age,
            "sex": rng.choice(["F", "M"], n),
            "income": np.where(rng.random(n) < np.clip((age - 25) / 60, 0.0, 0.6), ">50K", "<=50K"),
        }
    )
    path = tmp_path / "policy.toml"
    path.write_text(_POLICY, encoding="utf-8")
    policy = load_policy(path)
    write_table(policy, "people", frame)
    request = {
        "table": "people",
        "algorithm": algorithm,
        "k": 5,
        "qi": ["age", "sex"],
        "sensitive": ["income"],
        "output": "pub",
        "seed": seed,
    }
    publish(policy, "kanon", request, progress=False)
    import veil as veil_api

    with veil_api.connect(path, analyst="bob") as db:
        pub = db.sql("SELECT age, sex, income FROM pub")
    classes = pub.groupby(["age", "sex"], dropna=False)["income"]
    for _, values in classes:
        assert len(values) >= 5
        counts = values.value_counts(dropna=True)
        if len(counts):
            assert counts.iloc[0] / len(values) <= MAX_KEEP_PROBABILITY, values.tolist()
    assert pub["income"].notna().any()  # diverse classes keep their values: the rule does not blank the column
