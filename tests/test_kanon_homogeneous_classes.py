"""k-anonymity's homogeneity attack (red team s64 F10): a published class whose members (nearly) all share one
sensitive value gives that value to anyone who knows a member's quasi-identifiers. ``kanon --sensitive`` forms only
classes whose commonest sensitive value is at most ``max_share`` (default ``MAX_KEEP_PROBABILITY``, 0.9) of their rows,
for every algorithm, and publishes every value (the NULL that used to blank such a class marked its composition: red
team s20b F4, ``tests/test_kanon_diverse_classes.py``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from veil.generators.gate import MAX_KEEP_PROBABILITY

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
    assert pub["income"].notna().all()  # nothing suppressed: a NULL would mark its class's composition (s20b F4)
    classes = pub.groupby(["age", "sex"], dropna=False)["income"]
    for _, values in classes:
        assert len(values) >= 5
        counts = values.value_counts(dropna=True)
        assert counts.iloc[0] / len(values) <= MAX_KEEP_PROBABILITY, values.tolist()
