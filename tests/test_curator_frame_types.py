"""A curator's pandas frame stores each declared column in a type that never follows one person's value.

``warehouse.write_table`` (the Python curator API; ``veil ingest`` goes through it too) used to store a frame's
dtypes as pandas inferred them from every row. One person's missing ``grade`` made an integer column a float one:
the category ``1`` was stored as ``1.0``, and ``COUNT(*) WHERE grade = '1'`` went from 75 to 0 (the s37 A1 class,
through the frame path; lead, session 12). One ``True`` among numbers failed the write with an engine error.

Neighbouring worlds differ in person 7 alone: every answer (noise off) must move by at most one person's count.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from tests.adversarial.test_redteam_s35 import _TYPED_POLICY
from tests.publish_support import people
from veil.policy import load_policy
from veil.proxy._testing import exact_session
from veil.store.warehouse import write_table

#: Person 7's value in the neighbouring world: missing, text, a boolean, a fraction, a number spelled as text.
ODD = [None, "x", True, 2.5, "2"]
#: (column, its ordinary values, queries whose exact answers one person moves by at most 1)
COLUMNS = {
    "grade": ("category", ["SELECT COUNT(*) FROM people WHERE grade = '1'", "SELECT COUNT(*) FROM people WHERE grade = '2'"]),
    "code": ("int", ["SELECT COUNT(*) FROM people WHERE code = 1", "SELECT COUNT(*) FROM people WHERE code = 2"]),
    "flag": ("bool", ["SELECT COUNT(*) FROM people WHERE flag", "SELECT COUNT(*) FROM people WHERE NOT flag"]),
}


def _world(base: Path, column: str, odd: Any, *, ordinary: bool) -> Any:
    base.mkdir(parents=True)
    (base / "policy.toml").write_text(_TYPED_POLICY.format(table_budget=""), encoding="utf-8")
    policy = load_policy(base / "policy.toml")
    frame = people(150, seed=1)
    frame["code"] = 1 + (np.arange(150) % 2)
    frame["flag"] = np.arange(150) % 3 == 0
    frame["grade"] = 1 + (np.arange(150) % 2)  # a category of digits, as pandas reads it: numbers
    if not ordinary:
        values = frame[column].astype(object) if odd is not None else frame[column].astype(float)
        values[7] = odd if odd is not None else np.nan
        frame[column] = pd.Series(list(values)) if odd is not None else values  # a frame as pandas would build it
    write_table(policy, "people", frame, replace=True)
    return policy


# (a boolean column with a missing value stays an object column of booleans: not a neighbour pair of two dtypes)
CASES = [(c, odd) for c in COLUMNS for odd in ODD if not (c == "flag" and odd is None)]


@pytest.mark.parametrize(("column", "odd"), CASES, ids=[f"{c}-{odd!r}" for c, odd in CASES])
def test_one_persons_value_never_retypes_a_column(tmp_path: Path, column: str, odd: Any) -> None:
    queries = COLUMNS[column][1]
    answers = {}
    for world, ordinary in (("d", True), ("d2", False)):
        session = exact_session(_world(tmp_path / world, column, odd, ordinary=ordinary), "bob")
        answers[world] = [session.execute(q, epsilon=0.5).rows[0][0] for q in queries]
    for q, a, b in zip(queries, answers["d"], answers["d2"], strict=True):
        assert abs(a - b) <= 1, (q, answers)
