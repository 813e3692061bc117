"""Leftovers of session 17, item 4: the DP grid microaggregation's ε has a cap of its own.

The gate took any ε up to ``MAX_EPSILON`` = 50 for ``dp_microagg_*`` with the (ε-DP) grid partition. Each cell's
count is released with Laplace noise of scale 2/ε (ε/2 for the counts, sensitivity 1), and its number of rows is
that count rounded: the exact count with probability P(|Lap(2/ε)| < ½) = 1 − e^(−ε/4), 0.9 at ε = 4·ln 10 ≈ 9.21
and 0.9999963 at ε = 50 — every cell's true size published nearly always. The gate now refuses a grid release whose
cell counts are exact with a probability above ``MAX_KEEP_PROBABILITY`` (0.9, the bound kRR's keep probabilities and
its row count already have), before anything is read or charged.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.publish_support import POLICY, people
from veil.errors import PublicationRefused

CAP = 4 * math.log(10)


def _policy(base: Path) -> Any:
    from veil.policy import load_policy
    from veil.store.warehouse import write_table

    (base / "policy.toml").write_text(POLICY.format(table_budget=""), encoding="utf-8")
    policy = load_policy(base / "policy.toml")
    write_table(policy, "people", people(40).drop(columns=["name"]))
    return policy


@pytest.fixture(scope="module")
def policy(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return _policy(tmp_path_factory.mktemp("s17g"))


def _request(method: str, eps: float, *extra: str) -> dict[str, Any]:
    return {"table": "people", "method": method, "columns": ["age", "hours"], "params": [f"epsilon={eps!r}", *extra],
            "output": "out"}  # fmt: skip


def _spent(policy: Any) -> float:
    from veil.store.ledger import Ledger

    if not policy.ledger_path.exists():
        return 0.0
    with Ledger.for_policy(policy) as led:
        return float(led.spent("table:people").epsilon)


@pytest.mark.parametrize("method", ["dp_microagg_laplace", "dp_microagg_exponential"])
@pytest.mark.parametrize("eps", [9.25, 10.0, 20.0, 50.0])
def test_a_grid_release_whose_counts_are_nearly_exact_is_refused_free(policy: Any, method: str, eps: float) -> None:
    from veil.generators.transaction import publish

    with pytest.raises(PublicationRefused) as info:
        publish(policy, "sdc", _request(method, eps), progress=False)
    message = info.value.message
    assert f"ε = {eps:g}" in message and "exact" in message and f"ε ≤ {CAP:.2f}" in message, message
    assert info.value.hint is not None and "epsilon=" in info.value.hint and "bins" in info.value.hint
    assert _spent(policy) == 0.0


@pytest.mark.parametrize("eps", [0.5, 9.2])
def test_a_grid_release_within_the_cap_passes_the_plan(policy: Any, eps: float) -> None:
    from veil.generators import gate
    from veil.generators.transaction import get_plugin

    gate.check_plan(get_plugin("sdc").plan(policy, _request("dp_microagg_laplace", eps)))


def test_the_cap_is_where_the_mechanism_releases_exact_counts_nine_times_in_ten() -> None:
    """One cell of 100 rows: its number of released rows is exact with probability 1 − e^(−ε/4) (0.9 at the cap).
    2,000 releases, α = 1e-6 (±0.033 around 0.9); at ε off by ±30 % the rate is 0.95 or 0.83, outside."""
    from veil.generators.sdc import dp_grid_microaggregation

    rng = np.random.default_rng(17)
    x = np.full((100, 1), 5.0)
    trials = 2000
    exact = sum(
        dp_grid_microaggregation(
            x, None, 0, lower=np.array([0.0]), upper=np.array([10.0]), bins=1, epsilon=CAP, mechanism="laplace", rng=rng
        )[2]["rows_out"]
        == 100
        for _ in range(trials)
    )
    assert abs(exact / trials - 0.9) < 0.033, exact / trials
