"""User-level bounding counts rows per *stored* unit value: no declared type, bound or text cap merges people.

The bounded copy keeps at most ``max_rows_per_unit`` rows per unit. If it partitioned by the unit's typed
copy, every cast or clamp that maps two stored ids to one value (a bound below some ids, '10' and '010' read
as one number, two long ids equal in their first ``max_length`` characters) would merge different people, and
a newcomer would displace other people's rows instead of adding its own: twice the planned sensitivity (red
team s7, A2). With noise off, COUNT(*) must be Σ min(c, rows of each stored id) whatever the declaration.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from veil.policy import load_policy
from veil.proxy._testing import exact_session
from veil.store.warehouse import write_table

C = 2
POLICY = """\
[database]
path = "w.duckdb"
[ledger]
path = "l.sqlite"
[tables.t]
privacy_unit = "pid"
max_rows_per_unit = {c}
[tables.t.columns]
pid = {unit}
x = {{ type = "int", lower = 0, upper = 10 }}
[analysts.a]
epsilon = 1000
"""

LONG = "p" * 40
#: (the unit's declaration, stored ids, the pandas dtype they are stored with)
CASES: list[tuple[str, list[Any], str]] = [
    ('{ type = "int", lower = 0, upper = 10 }', list(range(21)), "Int64"),  # ids above the bound
    ('{ type = "int", lower = 5, upper = 6 }', [-3, 0, 5, 6, 9, 10**12], "Int64"),
    ('{ type = "int" }', ["10", "010", " 10", "1e1", "ten"], "object"),  # texts one number to the cast
    ('{ type = "float" }', [0.5, 1.5, float("nan"), -0.0, 2.0], "float64"),  # NaN: no person, dropped
    ('{ type = "int" }', [0.0, -0.0, 1.0], "float64"),  # stored ±0 are two units, though equal as numbers (s23 A4)
    ('{ type = "category", max_length = 4 }', [LONG + "a", LONG + "b", "pppp", "q"], "object"),  # equal after the cap
    ('{ type = "date" }', ["2020-01-01", "2020-1-1", "01/01/2020", "x"], "object"),
]


def _expected(ids: list[Any], rows_each: list[int]) -> int:
    kept = 0
    for i, n in zip(ids, rows_each, strict=True):
        if i is None or (isinstance(i, float) and i != i):
            continue
        kept += min(C, n)
    return kept


@pytest.mark.parametrize(("unit", "ids", "dtype"), CASES)
def test_rows_are_bounded_per_stored_unit(tmp_path: Path, unit: str, ids: list[Any], dtype: str) -> None:
    (tmp_path / "policy.toml").write_text(POLICY.format(c=C, unit=unit), encoding="utf-8")
    policy = load_policy(tmp_path / "policy.toml")
    rows_each = [1 + k % 4 for k in range(len(ids))]  # 1 to 4 rows per person
    pids = [i for i, n in zip(ids, rows_each, strict=True) for _ in range(n)]
    frame = pd.DataFrame({"pid": pd.array(pids, dtype=dtype), "x": range(len(pids))})
    write_table(policy, "t", frame, replace=True)
    with exact_session(policy, "a") as s:
        got = s.execute("SELECT COUNT(*) FROM t", epsilon=1).rows[0][0]
    assert got == _expected(ids, rows_each)
