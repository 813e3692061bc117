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


@pytest.fixture(autouse=True)
def _the_linkage_rule_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests pin the older linkage rule (``check_linkage``, ``check_linkage_values``, the linkage claim) on its
    own, as a second line: the release-history rule (one release without a DP guarantee per population, ever; red team
    s64), which refuses every second k-anonymous release of a population before this rule runs, is switched off here.
    tests/test_publish_release_history.py pins that rule."""
    from veil.generators import transaction

    monkeypatch.setattr(transaction, "check_release_history", lambda policy, plan: None)


_POLICY = """\
[database]
path = "warehouse.duckdb"
[ledger]
path = "ledger.sqlite"
"""

_TABLE = """
[tables.{name}]
privacy_unit = "row"
{population}
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


def _world(base: Path, gain2: str, trade2: str, *, other_people: bool = False, populations: tuple[str, str] | None = None) -> Any:
    """``people`` and ``people_2025`` (``gain`` and ``trade`` named ``gain2``/``trade2`` there): the same people, or
    other people with values of their own (``other_people``: gains in thousands); ``populations`` declared for the
    two, or none (the policy's one default population)."""
    population, population_2025 = (f'population = "{p}"' for p in populations) if populations else ("", "")
    from veil.policy import load_policy
    from veil.store.warehouse import write_table

    path = base / "policy.toml"
    path.write_text(
        _POLICY
        + _TABLE.format(name="people", gain="gain", job="trade", population=population)
        + _TABLE.format(name="people_2025", gain=gain2, job=trade2, population=population_2025),
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
    with pytest.raises(PublicationRefused, match=r"'p1' \(.*of 'people'"):
        _kanon(policy, "people_2025", "p2", qi2, sensitive2)
    assert "p2" not in table_names(policy)
    # retracting the first lets the second through (the rule is about live publications)
    from veil.store.catalog import retract

    retract(policy, "p1")
    _kanon(policy, "people_2025", "p2", qi2, sensitive2)


@pytest.mark.parametrize(("gain2", "trade2"), NAMES, ids=["same_names", "renamed"])
def test_what_shares_no_value_or_only_quasi_identifiers_goes_on(tmp_path: Path, gain2: str, trade2: str) -> None:
    """Other people, declared so (``population``), whose gains share no value with the first table's: published; two
    tables that only share quasi-identifiers (k-anonymity assumes an attacker knows them): published."""
    policy = _world(tmp_path, gain2, trade2, other_people=True, populations=("staff", "staff 2025"))
    _kanon(policy, "people", "p1", ["age"], ["gain"])
    _kanon(policy, "people_2025", "p2", ["sex", "job"], [gain2])
    _kanon(policy, "people", "q1", ["sex", "job"], [])
    _kanon(policy, "people_2025", "q2", ["sex", "job"], [])


@pytest.mark.parametrize("other_people", [False, True], ids=["same_people", "other_people_undeclared"])
def test_two_sensitive_releases_of_one_population_are_refused_whatever_their_values(tmp_path: Path, other_people: bool) -> None:
    """A recoded copy (gain in hundreds) shares no value and no name with the first table's gain, yet an analyst maps one
    to the other and intersects the two groups' values (review of s60's fix): two sensitive releases of one population
    are refused from the parameters, whatever their columns are called or hold; tables that declare no population are
    one population (the conservative reading), so other people must be declared to be published beside them."""
    from veil.policy import load_policy
    from veil.store.warehouse import table_names, write_table

    policy = _world(tmp_path, "gain_hundreds", "occupation", other_people=other_people)
    second = _people(seed=7) if other_people else _people()
    recoded = second.assign(gain_hundreds=second["gain"] // 100).drop(columns=["gain"])  # 1 … 10: no value in common
    write_table(policy, "people_2025", recoded.rename(columns={"trade": "occupation"}), replace=True)
    _kanon(policy, "people", "p1", ["age"], ["gain"])
    with pytest.raises(PublicationRefused, match=r"'p1' \(.*already publishes 'gain'.*default population") as info:
        _kanon(policy, "people_2025", "p2", ["sex", "job"], ["gain_hundreds"])
    assert "p2" not in table_names(policy) and 'population = "..."' in (info.value.hint or "")
    # declared as other people: published beside it
    path = tmp_path / "policy.toml"
    path.write_text(
        path.read_text(encoding="utf-8").replace(
            "[tables.people_2025]\n", '[tables.people_2025]\npopulation = "register 2025"\n'
        ),
        encoding="utf-8",
    )
    _kanon(load_policy(path), "people_2025", "p2", ["sex", "job"], ["gain_hundreds"])


@pytest.mark.parametrize("value", ["", "  ", 3, True, "x" * 201])
def test_a_population_is_a_name(tmp_path: Path, value: Any) -> None:
    from veil.errors import PolicyError
    from veil.policy import load_policy

    path = tmp_path / "policy.toml"
    text = _POLICY + _TABLE.format(name="people", gain="gain", job="trade", population=f"population = {value!r}")
    path.write_text(text.replace("population = True", "population = true"), encoding="utf-8")
    with pytest.raises(PolicyError, match=r"population must be a non-empty name"):
        load_policy(path)


@pytest.mark.parametrize("edit", ["dropped", "renamed", "case"])
def test_a_policy_edit_after_a_release_does_not_make_its_people_other_people(tmp_path: Path, edit: str) -> None:
    """The population a release was published under is recorded with it (review of session 19): dropping its source's
    section from the policy, or declaring another population for it afterwards, leaves it in its population; and a
    population name is read case-folded with its spaces collapsed ("Patients " is "patients")."""
    from veil.policy import load_policy

    policy = _world(tmp_path, "gain", "trade", populations=("patients", "patients"))
    _kanon(policy, "people", "p1", ["age"], ["gain"])
    path = tmp_path / "policy.toml"
    text = path.read_text(encoding="utf-8")
    first = text.index("[tables.people]")
    second = text.index("[tables.people_2025]")
    if edit == "dropped":
        text = text[:first] + text[second:]
    elif edit == "renamed":
        text = text[:second] + text[second:].replace('population = "patients"', 'population = "register"')
        text = text.replace('population = "patients"', 'population = "register"', 1)  # people: now "register" too
        text = text[:second] + text[second:].replace('population = "register"', 'population = "patients"')
    else:
        text = text[:second] + text[second:].replace('population = "patients"', 'population = " Patients "')
    path.write_text(text, encoding="utf-8")
    with pytest.raises(PublicationRefused, match=r"'p1' \(.*already publishes 'gain'"):
        _kanon(load_policy(path), "people_2025", "p2", ["sex", "job"], ["gain"])
