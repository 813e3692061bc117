"""A DP table publication ends the same way whatever the private table holds (survey of the PATE class, fixpate).

``veil publish sdc --method dp_microagg_*`` (the grid partition: ε-DP as a whole) refused a table with fewer than
2 complete rows before the charge, and after the charge raised when its curator-only metrics could not be computed:
a label with one class among the rows (disclosure risk), an infinite value (information loss). Each flips when one
person joins or leaves, or changes their value, so each is a free (or charged but deterministic) bit about that
person. The noisy release itself may still come out empty — "released no rows" depends on the data only through
the noisy counts, so it is part of the ε-DP output. kRR has no such refusal (its row count is DP); k-anonymity and
the synthetic kinds make no DP claim.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from tests.publish_support import POLICY, people
from veil.errors import VeilError

FLOAT_HOURS = POLICY.replace('hours = {{ type = "int"', 'hours = {{ type = "float"')
NOISE_ONLY = "released no rows"  # the one refusal allowed: a function of the noisy counts


def _table(base: Path, frame: pd.DataFrame) -> Any:
    from veil.policy import load_policy
    from veil.store.warehouse import write_table

    base.mkdir(parents=True, exist_ok=True)
    path = base / "policy.toml"
    path.write_text(FLOAT_HOURS.format(table_budget=""), encoding="utf-8")
    policy = load_policy(path)
    write_table(policy, "people", frame.astype({"hours": float}), replace=True)
    return policy


def _ends(policy: Any, target: str | None) -> str:
    from veil.generators.transaction import publish
    from veil.store.ledger import Ledger

    request = {"table": "people", "method": "dp_microagg_laplace", "columns": ["age", "hours"],
               "params": ["epsilon=1.0", "bins=2"], "output": "dpm", "target": target}  # fmt: skip
    try:
        publish(policy, "sdc", request, progress=False, rng=np.random.default_rng(0))
        end = "published"
    except VeilError as exc:
        end = NOISE_ONLY if NOISE_ONLY in str(exc) else f"refused: {exc}"
    with Ledger.for_policy(policy) as led:
        spent = float(led.spent("table:people").epsilon)
    assert spent == 1.0, f"{end}: charged {spent}"
    return end


def _variants() -> dict[str, pd.DataFrame]:
    base = people(40, seed=2)  # 40 rows: the release is not empty (for this rng), so the metrics run
    one_class = base.assign(income="low")
    with_inf = base.assign(hours=base["hours"].astype(float))
    with_inf.loc[0, "hours"] = np.inf
    return {
        **{f"{n}-rows": base.iloc[:n] for n in range(4)},
        "one-label-class": one_class,
        "an-infinite-value": with_inf,
    }


@pytest.mark.slow
@pytest.mark.parametrize("target", [None, "income"])
@pytest.mark.parametrize("case", sorted(_variants()))
def test_a_dp_grid_release_never_refuses_for_the_private_rows(tmp_path: Path, case: str, target: str | None) -> None:
    policy = _table(tmp_path, _variants()[case].reset_index(drop=True))
    end = _ends(policy, target)
    assert end in ("published", NOISE_ONLY), f"{case}: {end}"
    if not case.endswith("-rows"):
        assert end == "published", f"{case}: {end}"  # the test's power: the metrics did run
