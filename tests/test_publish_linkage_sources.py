"""The linkage rule is policy-wide and name-independent (red team s60 F1): a column published value by value by one
live publication may not be published value by value (``--sensitive``, or an ungeneralised quasi-identifier against a
sensitive column) by another of *any* source, *whatever it is called*, when the two publish values in common
(``transaction.check_linkage_values``, on the output, under the policy-wide ``linkage_claim``).

The same people commonly sit in two tables (a yearly snapshot, a copy re-ingested under another name, the column
renamed ``capital_gain``); ``p1 JOIN p2 ON p1.gain = p2.capital_gain`` then gives every row both tables' QIs. Values
each held by 6 people, so the gate's rare-value rule (F2) lets each table through alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from veil.errors import PublicationRefused

_POLICY = """\
[database]
path = "warehouse.duckdb"
[ledger]
path = "ledger.sqlite"
"""

_TABLE = """
[tables.{name}]
privacy_unit = "row"
[tables.{name}.columns]
age = {{ type = "int", lower = 17, upper = 90 }}
sex = {{ type = "category", values = ["F", "M"] }}
job = {{ type = "category", values = ["a", "b", "c"] }}
{gain} = {{ type = "int", lower = 0, upper = 5000 }}
{job} = {{ type = "category", values = ["nurse", "smith", "clerk"] }}
"""


def _people(n: int = 60, seed: int = 51) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "age": rng.integers(20, 60, n),
            "sex": rng.choice(["F", "M"], n),
            "job": rng.choice(["a", "b", "c"], n),
            "gain": (rng.permutation(n) % 10) * 100 + 100,  # ten gains, each 6 people's
            "trade": rng.permutation(np.resize(["nurse", "smith", "clerk"], n)),
        }
    )


def _world(base: Path, gain2: str, trade2: str, *, other_people: bool = False) -> Any:
    """``people`` and ``people_2025`` (``gain`` and ``trade`` named ``gain2``/``trade2`` there): the same people, or
    other people with values of their own (``other_people``: gains in thousands)."""
    from veil.policy import load_policy
    from veil.store.warehouse import write_table

    path = base / "policy.toml"
    path.write_text(
        _POLICY
        + _TABLE.format(name="people", gain="gain", job="trade")
        + _TABLE.format(name="people_2025", gain=gain2, job=trade2),
        encoding="utf-8",
    )
    policy = load_policy(path)
    frame = _people()
    write_table(policy, "people", frame)
    second = _people(seed=7) if other_people else frame
    if other_people:
        second = second.assign(gain=second["gain"] * 10 + 5)  # 1,005 … 10,005: no gain in common
    write_table(policy, "people_2025", second.rename(columns={"gain": gain2, "trade": trade2}))
    return policy


def _kanon(policy: Any, table: str, output: str, qi: list[str], sensitive: list[str]) -> Any:
    from veil.generators.transaction import publish

    request = {"table": table, "algorithm": "mondrian", "k": 5, "qi": qi, "sensitive": sensitive, "output": output}
    return publish(policy, "kanon", request, progress=False)


NAMES = [("gain", "trade"), ("capital_gain", "occupation")]


@pytest.mark.parametrize(("gain2", "trade2"), NAMES, ids=["same_names", "renamed"])
@pytest.mark.parametrize(
    ("first", "second"),
    [
        ((["age"], ["gain"]), (["sex", "job"], ["{gain}"])),  # sensitive in both (the witness)
        ((["age"], ["trade"]), (["sex", "{trade}"], [])),  # sensitive here, an ungeneralised quasi-identifier there
        ((["sex", "trade"], []), (["age"], ["{trade}"])),  # the reverse
        ((["age"], ["trade"]), (["sex"], ["{trade}"])),  # a category sensitive in both
    ],
    ids=["sensitive-sensitive", "sensitive-qi", "qi-sensitive", "category"],
)
def test_a_column_of_the_same_people_in_another_source_is_refused_whatever_its_name(
    tmp_path: Path, gain2: str, trade2: str, first: Any, second: Any
) -> None:
    from veil.store.warehouse import table_names

    policy = _world(tmp_path, gain2, trade2)
    _kanon(policy, "people", "p1", *first)
    qi2 = [c.format(gain=gain2, trade=trade2) for c in second[0]]
    sensitive2 = [c.format(gain=gain2, trade=trade2) for c in second[1]]
    with pytest.raises(PublicationRefused, match=r"of the live publication 'p1' .* of 'people'"):
        _kanon(policy, "people_2025", "p2", qi2, sensitive2)
    assert "p2" not in table_names(policy)
    # retracting the first lets the second through (the rule is about live publications)
    from veil.store.catalog import retract

    retract(policy, "p1")
    _kanon(policy, "people_2025", "p2", qi2, sensitive2)


@pytest.mark.parametrize(("gain2", "trade2"), NAMES, ids=["same_names", "renamed"])
def test_what_shares_no_value_or_only_quasi_identifiers_goes_on(tmp_path: Path, gain2: str, trade2: str) -> None:
    """Other people whose gains share no value with the first table's: published; two tables that only share
    quasi-identifiers (k-anonymity assumes an attacker knows them): published."""
    policy = _world(tmp_path, gain2, trade2, other_people=True)
    _kanon(policy, "people", "p1", ["age"], ["gain"])
    _kanon(policy, "people_2025", "p2", ["sex", "job"], [gain2])
    _kanon(policy, "people", "q1", ["sex", "job"], [])
    _kanon(policy, "people_2025", "q2", ["sex", "job"], [])
