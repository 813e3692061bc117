"""A column one k-anonymous table of a source publishes as ``--sensitive`` may not be a quasi-identifier of another
live one of that source, nor the reverse (``transaction.check_linkage``, from the release log and the parameters,
before anything is read; and the policy's linkage claim that keeps two such publications from passing it at once).

s51 A5's rule compared ``--sensitive`` columns only. A quasi-identifier left ungeneralised (each class holds one of
its values: ``--qi hours,job`` keeps ``job`` exact wherever k holds without cutting it) is published value by value as
surely, and a generalised one narrows it to a range or a set of values. Joined with a table that publishes the same
column as ``--sensitive``, a person's value is among those both tables give them, and the two can meet in one value
whatever k is: with ``q1 = --qi age --sensitive job`` and ``q2 = --qi hours,job`` (k = 5, 120 people), knowing a
person's age and hours singled out the job of 5 people that neither table singles out alone (the witness below).
Both published until now. Two quasi-identifiers of one column stay allowed: k-anonymity assumes an attacker knows
them, and neither table tells a value the other hides.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from veil.errors import InputError, PublicationRefused


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

[tables.people]
privacy_unit = "row"
[tables.people.columns]
age = { type = "int", lower = 17, upper = 90 }
hours = { type = "int", lower = 1, upper = 99 }
sex = { type = "category", values = ["F", "M"] }
job = { type = "category", values = ["nurse", "smith", "clerk", "baker"] }
gain = { type = "int", lower = 0, upper = 5000 }
"""


def _people(n: int = 120, seed: int = 3) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "age": rng.integers(20, 60, n),
            "hours": rng.integers(20, 60, n),
            "sex": rng.choice(["F", "M"], n),
            "job": rng.choice(["nurse", "smith", "clerk", "baker"], n),
            # gains each 6 or 7 people's: a gain one person alone holds is refused by the gate (red team s60 F2)
            "gain": (rng.permutation(n) % (n // 6)) * 100 + 100,
        }
    )


@pytest.fixture
def policy(tmp_path: Path) -> Any:
    from veil.policy import load_policy
    from veil.store.warehouse import write_table

    (tmp_path / "policy.toml").write_text(_POLICY, encoding="utf-8")
    pol = load_policy(tmp_path / "policy.toml")
    write_table(pol, "people", _people())
    return pol


def _request(output: str, qi: list[str], sensitive: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    return {"table": "people", "algorithm": "mondrian", "k": 5, "qi": qi, "sensitive": sensitive or [], "output": output, **extra}


# -- the witness: what the two tables tell together -------------------------------------------------------------------


def _covers(label: object, value: float) -> bool:
    """Does a published label (a range such as ``[26, 28]`` or ``(-inf, 26]``, or a value) hold ``value``?"""
    m = re.fullmatch(r"([\[(])\s*([^,]+),\s*([^\])]+)([\])])", str(label))
    if m is None:
        return str(label) == str(value)
    lo, hi = float(m.group(2)), float(m.group(3))
    return (value >= lo if m.group(1) == "[" else value > lo) and (value <= hi if m.group(4) == "]" else value < hi)


def _candidates(table: pd.DataFrame, known: str, value: float, column: str) -> set[str]:
    """The values of ``column`` a person could hold in ``table``, knowing only their ``known`` value."""
    return set(table.loc[[_covers(label, value) for label in table[known]], column])


def test_witness_a_sensitive_column_and_an_ungeneralised_quasi_identifier_single_out_people() -> None:
    """Built with the library's k-anonymiser (seeded, no warehouse): each table is 5-anonymous, ``job`` stays exact in
    every class of ``q2``, and the two together single out the job of people neither table singles out alone."""
    from veil.generators.kanon import anonymise

    people = _people()
    q1 = anonymise(people, qi=["age"], k=5, algorithm="mondrian", sensitive=["job"], seed=1).table
    q2 = anonymise(people, qi=["hours", "job"], k=5, algorithm="mondrian", seed=1).table
    assert set(q2["job"]) <= {"nurse", "smith", "clerk", "baker"}  # left ungeneralised: published value by value
    alone = together = 0
    for person in people.itertuples():
        by_age, by_hours = _candidates(q1, "age", person.age, "job"), _candidates(q2, "hours", person.hours, "job")
        assert person.job in by_age & by_hours
        if len(by_age) > 1 and len(by_hours) > 1:
            together += len(by_age & by_hours) == 1
        alone += len(by_age) == 1 or len(by_hours) == 1
    assert together >= 3, (together, alone)


# -- the rule: a column's roles across live publications of one source -------------------------------------------------

#: (the first publication's qi and sensitive, the second's, refused?) — the shared column in every role pair
ROLES = [
    ((["age"], ["job"]), (["hours", "job"], []), True),  # sensitive, then an (ungeneralised) quasi-identifier
    ((["hours", "job"], []), (["age"], ["job"]), True),  # a quasi-identifier, then sensitive
    ((["age"], ["gain"]), (["hours", "gain"], []), True),  # sensitive, then a generalised quasi-identifier
    ((["hours", "gain"], []), (["age"], ["gain"]), True),
    ((["age", "sex"], ["job"]), (["sex", "hours", "job"], []), True),
    ((["age"], ["job"]), (["sex"], ["job"]), True),  # sensitive twice (s51 A5)
    ((["hours", "job"], []), (["age", "job"], []), False),  # a quasi-identifier twice: an attacker knows it anyway
    ((["age"], ["job"]), (["hours", "sex"], ["gain"]), True),  # two sensitive releases of one population (s60 F1)
    ((["age"], ["job"]), (["age", "hours"], []), False),
]
ROLE_IDS = [f"{'+'.join(a[0])}|{'+'.join(a[1])}-then-{'+'.join(b[0])}|{'+'.join(b[1])}" for a, b, _ in ROLES]


@pytest.mark.parametrize(("first", "second", "refused"), ROLES, ids=ROLE_IDS)
def test_a_column_sensitive_in_one_live_table_is_in_no_other(policy: Any, first: Any, second: Any, refused: bool) -> None:
    from veil.generators.transaction import publish
    from veil.store.releases import list_releases
    from veil.store.warehouse import table_names

    publish(policy, "kanon", _request("q1", *first), progress=False)
    recorded = len(list_releases(policy, kind="publication"))
    if not refused:
        publish(policy, "kanon", _request("q2", *second), progress=False)
        assert "q2" in table_names(policy)
        return
    with pytest.raises(PublicationRefused, match=r"'q1' \(.*one value whatever k is") as info:
        publish(policy, "kanon", _request("q2", *second), progress=False)
    assert "q2" not in table_names(policy) and len(list_releases(policy, kind="publication")) == recorded
    # the hint no longer sends the curator to `veil retract q1` or --replace (red team s64 F2: q1 stays public)
    assert "stays public" in (info.value.hint or "") and "veil retract" not in (info.value.hint or ""), info.value.hint
    # this rule alone lets the same output be replaced; the release-history rule refuses it (q1 was public: s64 F2,
    # tests/test_publish_release_history.py)
    publish(policy, "kanon", _request("q1", *second, replace=True), progress=False)


def test_the_check_runs_before_anything_is_read(policy: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Refused from the release log and the parameters: the source is never read for it."""
    from veil.generators import transaction

    transaction.publish(policy, "kanon", _request("q1", ["age"], ["job"]), progress=False)

    def no_read(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the source was read")

    monkeypatch.setattr(transaction, "_read_source", no_read)
    with pytest.raises(PublicationRefused):
        transaction.publish(policy, "kanon", _request("q2", ["hours", "job"]), progress=False)


# -- the claim: two such publications at once ------------------------------------------------------------------------

#: (what the running publication holds: its value columns and its quasi-identifiers, the new request, refused?)
#: The claim is policy-wide since red team s60 F1 (the columns two publications link by are compared by their published
#: values, known only once both are read): one with a sensitive column runs alone; quasi-identifiers only run together.
CLAIMS = [
    (({"job"}, set()), (["hours", "job"], []), True),  # a sensitive column held: no quasi-identifier of it meanwhile
    ((set(), {"job"}), (["age"], ["job"]), True),  # a quasi-identifier held: no sensitive column of it
    (({"job"}, set()), (["age"], ["job"]), True),
    ((set(), {"job"}), (["hours", "job"], []), False),  # two quasi-identifiers of one column may run at once
    ((set(), {"age"}), (["sex"], []), False),  # and of other columns
    (({"job"}, {"age"}), (["age", "hours"], []), True),  # a sensitive column held: whatever the names
    (({"gain"}, {"age"}), (["sex"], ["job"]), True),
]


@pytest.mark.parametrize(("held", "request_", "refused"), CLAIMS)
def test_the_claim_covers_each_column_in_its_role(policy: Any, held: Any, request_: Any, refused: bool) -> None:
    from veil.generators.transaction import linkage_claim, publish
    from veil.store.warehouse import table_names

    values, quasi = held
    with linkage_claim(policy, "people", values, quasi):
        if refused:
            with pytest.raises(InputError, match=r"another publication is running right now"):
                publish(policy, "kanon", _request("q2", *request_), progress=False)
            assert "q2" not in table_names(policy)
        else:
            publish(policy, "kanon", _request("q2", *request_), progress=False)
    if refused:
        publish(policy, "kanon", _request("q2", *request_), progress=False)  # the claim ended with its block
