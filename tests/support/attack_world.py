"""The red team's world: a policy (``tests/fixtures/policies/attack.toml``) over small generated tables.

``build_world(folder)`` writes the policy and its data; ``build_world(folder, drop_target=True)`` builds the
neighbouring database: the same minus every row of one privacy unit (the target, ``id``/``pid`` 123), so a
test can ask whether any outcome differs between the two except through noise. The private tables hold
adversarial rows: NaN, ±inf, int64 extremes, values outside the declared bounds and domains, NULLs, NULL
privacy units, exact duplicate rows and canary strings (``CANARY_…``) that must never appear in an answer
that was not charged for.
"""

from __future__ import annotations

import math
import shutil
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import pandas as pd

POLICY = Path(__file__).resolve().parents[1] / "fixtures" / "policies" / "attack.toml"
TARGET = 123
CANARY = "CANARY_"
INT64_MAX = 9223372036854775807

__all__ = ["CANARY", "POLICY", "TARGET", "World", "build_world", "people_rows", "visits_rows"]


@dataclass(frozen=True)
class World:
    folder: Path
    policy: Path

    @property
    def ledger(self) -> Path:
        return self.folder / "ledger.sqlite"


def _frame(rows: list[dict[str, object]], dtypes: dict[str, str]) -> pd.DataFrame:
    """Column by column, so int64 extremes never pass through a float."""
    cols = list(rows[0])
    return pd.DataFrame({c: pd.array([r[c] for r in rows], dtype=dtypes.get(c, "object")) for c in cols})


def people_rows(drop_target: bool = False) -> pd.DataFrame:
    rows: list[dict[str, object]] = []
    for i in range(1, 37):
        rows.append(
            {
                "id": i,
                "age": 18 + (i * 7) % 60,
                "salary": 1000 * ((i * 13) % 90),
                "score": ((i * 37) % 200 - 100) / 3,
                "big": (i * 104729) % 1000003,
                "name": f"{CANARY}n{i % 9}",
                "sex": "F" if i % 2 else "M",
                "dept": "abc"[i % 3],
                "code": ["1", "2", "3"][i % 3],
                "born": date(1950 + i, 1 + i % 12, 1 + i % 28),
            }
        )
    rows.append(dict(rows[6]))  # an exact duplicate row
    rows += [
        # the target: its data triggers every data-dependent failure the attacks aim at
        {"id": TARGET, "age": 0, "salary": 77516, "score": math.nan, "big": INT64_MAX, "name": f"{CANARY}target",
         "sex": "F", "dept": "a", "code": "1", "born": date(1980, 1, 1)},
        {"id": 124, "age": 120, "salary": 10**12, "score": math.inf, "big": -INT64_MAX, "name": None,
         "sex": None, "dept": "zzz", "code": " 1", "born": None},
        {"id": 125, "age": -5, "salary": -3, "score": -math.inf, "big": 0, "name": f"{CANARY}x",
         "sex": "M", "dept": "c", "code": "01", "born": date(1, 1, 1)},
        {"id": None, "age": None, "salary": None, "score": None, "big": None, "name": None,
         "sex": None, "dept": None, "code": None, "born": None},
    ]  # fmt: skip
    if drop_target:
        rows = [r for r in rows if r["id"] != TARGET]
    return _frame(rows, {"id": "Int64", "age": "Int64", "salary": "Int64", "score": "float64", "big": "Int64"})


def visits_rows(drop_target: bool = False) -> pd.DataFrame:
    rows: list[dict[str, object]] = []
    for pid in range(1, 11):
        for j in range(1 + pid % 5):
            rows.append({"pid": pid, "amount": (pid * 31 + j * 17) % 1000, "device": ["ios", "android", "web"][j % 3],
                         "kind": f"k{(pid + j) % 4}"})  # fmt: skip
    rows += [{"pid": TARGET, "amount": 1000 + 7 * j, "device": "web", "kind": f"{CANARY}{j}"} for j in range(6)]
    rows += [{"pid": None, "amount": 999, "device": "ios", "kind": "k0"} for _ in range(4)]
    rows.append({"pid": 3, "amount": -50, "device": "zzz", "kind": None})
    if drop_target:
        rows = [r for r in rows if r["pid"] != TARGET]
    return _frame(rows, {"pid": "Int64", "amount": "Int64"})


def regions_rows() -> pd.DataFrame:
    return pd.DataFrame({"rid": [1, 1, 2, 3], "rname": ["north", "north-2", "south", "east"]}).astype({"rid": "Int64"})


def codes_rows() -> pd.DataFrame:
    return pd.DataFrame({"code": ["1", "01", " 1", "2"], "label": ["one", "zero-one", "space-one", "two"]})


def build_world(folder: Path, *, drop_target: bool = False, policy_text: str | None = None) -> World:
    """Write the attack policy into ``folder`` and store its tables (the neighbour without the target)."""
    from veil.policy import load_policy
    from veil.store.warehouse import write_table

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "policy.toml"
    if policy_text is None:
        shutil.copyfile(POLICY, path)
    else:
        path.write_text(policy_text, encoding="utf-8")
    policy = load_policy(path)
    write_table(policy, "people", people_rows(drop_target), replace=True)
    write_table(policy, "visits", visits_rows(drop_target), replace=True)
    write_table(policy, "regions", regions_rows(), replace=True, public=True)
    write_table(policy, "codes", codes_rows(), replace=True, public=True)
    return World(folder, path)
