"""Red team, session 62: the surfaces session 19 changed (main at 2f0c26e, 2026-11-28).

Each test in part A FAILS on main at 2f0c26e (nothing is marked xfail). Publications go through the curator's real
transaction (``veil.generators.transaction.publish``); what an analyst reads is asked through ``veil.connect``.

Findings:

* F1 (LOW–MEDIUM, every analyst at ε = 0; the threshold half of s60 review finding 1) noise addition's per-row
  redraw (``sdc.avoid_rare_values``) couples rows through the *count* of holders: a row whose own value fewer than
  ``MIN_VALUE_HOLDERS`` = 5 rows hold is redrawn off it. With five people at 47 hours (the bulk at 35–45) about four
  of their rows publish 47; remove one of them (the neighbour D′, four holders) and *all four* remaining rows are
  redrawn off 47, so the public table holds no 47 at all. One person's presence moves four other people's output
  rows (3–4 vs 0 over seeds 1–3), where a row-aligned method without the rule moves one row (~0.7 in expectation).
  An analyst who knows the target holds 47 (or that the four others do) reads presence off ``COUNT(*) WHERE hours =
  47``. The same threshold flip is in rank swapping's recoding (k holders stay, k − 1 are all recoded to a window
  mean) and in kanon's ``--sensitive`` among-published rule. Suggested class-level fix: a rule whose trigger is the
  number of holders must be applied so that crossing the threshold changes at most the one row of the person who
  crosses it — e.g. decide per row from that row's own value with a data-independent test (redraw every row whose
  noise rounds back to its own value, whatever the count: noise addition never needs to publish a row unchanged),
  or for value-copying methods recode on a data-independent grid instead of by the holder count.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

_HOURS_POLICY = """\
[database]
path = "warehouse.duckdb"
[ledger]
path = "ledger.sqlite"

[tables.people]
privacy_unit = "row"
[tables.people.columns]
age = { type = "int", lower = 17, upper = 90 }
hours = { type = "int", lower = 1, upper = 99 }

[analysts.bob]
epsilon = 2.0
"""


def _analyst(policy: Path, sql: str) -> pd.DataFrame:
    import veil as veil_api

    with veil_api.connect(policy, analyst="bob") as db:
        return db.sql(sql)


def _published_47s(base: Path, holders: int, seed: int) -> int:
    """``noise_addition`` (a = 0.3) of 300 people's hours (35–45), the first ``holders`` of them at 47; the count of
    published 47s an analyst reads (-1: refused, typed, nothing public)."""
    from veil.errors import PublicationRefused
    from veil.generators.transaction import publish
    from veil.policy import load_policy
    from veil.store.warehouse import write_table

    base.mkdir(parents=True, exist_ok=True)
    path = base / "policy.toml"
    path.write_text(_HOURS_POLICY, encoding="utf-8")
    policy = load_policy(path)
    rng = np.random.default_rng(0)
    n = 300
    frame = pd.DataFrame({"age": rng.integers(20, 60, n), "hours": np.clip(np.round(rng.normal(40, 1.5, n)), 35, 45).astype(int)})
    frame.loc[: holders - 1, "hours"] = 47
    write_table(policy, "people", frame)
    request = {"table": "people", "method": "noise_addition", "columns": ["age", "hours"], "params": ["a=0.3"]}
    try:
        publish(policy, "sdc", {**request, "output": "pub", "seed": seed}, progress=False)
    except PublicationRefused:
        return -1
    return int(_analyst(path, "SELECT COUNT(*) FILTER (WHERE hours = 47) AS n FROM pub")["n"].iloc[0])


# ==================================================================================================
# A. Findings (fail on main)
# ==================================================================================================


def test_f1_noise_addition_one_person_moves_only_their_own_row_across_the_holder_threshold(tmp_path: Path) -> None:
    """F1: D has five people at 47 hours, D′ the same minus one of them (four). Noise addition is row-aligned: each
    output row derives from its own source row, so one person's presence may change the published count of 47s by
    at most one (their own row). On main (seed 1) D publishes four 47s and D′ none: the redraw rule, triggered by the
    holder count, moves every other holder's row when one person leaves."""
    with_target = _published_47s(tmp_path / "d", 5, seed=1)
    without = _published_47s(tmp_path / "d_prime", 4, seed=1)
    assert with_target >= 0 and without >= 0, "a refusal here would itself depend on one person (4 vs 5 holders)"
    assert abs(with_target - without) <= 1, (
        f"one person (the fifth holder of 47 hours) changes the published count of 47s by {with_target - without}: "
        f"{with_target} with them, {without} without — the rare-value redraw moved the other holders' rows too"
    )
