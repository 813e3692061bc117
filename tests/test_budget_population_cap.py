"""A table's cap is per population (red team s66 F3, the class).

``[tables.NAME] epsilon_total`` is "the total ε of everything released about the people in it" (docs/policy.md). Tables
of one population may hold the same people (a snapshot, a re-ingested copy), so the cap bounds every charge on any
table of its population — the same declared ``population`` (compared case-folded, spaces collapsed), or either table
declares none (the default matches every population) — and it counts the spend before it was declared: every table's
spend is recorded. A release without a DP guarantee of the population (ε = ∞) is refused while any of its tables is
capped, and one recorded before a cap leaves that cap nothing: DP publications and analysts' queries are then refused
(``BudgetExhausted`` naming the release). Before the fix the cap was read off the source table alone
(``policy.tables[plan.source].epsilon_total``, account ``table:<source>``): an uncapped twin published rank swapping and
spent DP ε beside its capped twin, and a cap declared after rank swapping showed its whole ε remaining.
Deterministic: every outcome here follows from the policy and the ledger (kRR's charge is fixed before it draws).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

_COLUMNS = (
    'age = { type = "int", lower = 17, upper = 90 }\nsex = { type = "category", values = ["F", "M"] }\n'
    'gain = { type = "int", lower = 0, upper = 5000 }\n'
)
_SWAP = {"method": "rank_swapping", "columns": ["gain"], "params": ["p=10"]}


def _text(tables: dict[str, str]) -> str:
    body = '[database]\npath = "warehouse.duckdb"\n[ledger]\npath = "ledger.sqlite"\n'
    for name, extra in tables.items():
        body += f'[tables.{name}]\nprivacy_unit = "row"\n{extra}[tables.{name}.columns]\n{_COLUMNS}'
    return body + "[analysts.bob]\nepsilon = 5.0\n"


def _people(seed: int, n: int = 200) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "age": rng.integers(20, 60, n),
            "sex": rng.choice(["F", "M"], n),
            "gain": rng.permutation(np.repeat(np.arange(40) * 100, n // 40)),
        }
    )


def _world(tmp: Path, tables: dict[str, str]) -> tuple[Path, Any]:
    from veil.policy import load_policy
    from veil.store.warehouse import write_table

    path = tmp / "policy.toml"
    path.write_text(_text(tables), encoding="utf-8")
    policy = load_policy(path)
    for i, name in enumerate(tables):
        write_table(policy, name, _people(i))
    return path, policy


def _krr(policy: Any, table: str, output: str, epsilon: float = 0.25) -> Any:
    """A kRR publication of ``table``'s ``sex``: charges 2·``epsilon`` (the column and the row count)."""
    from veil.generators.transaction import publish

    request = {"table": table, "columns": ["sex"], "epsilon": epsilon, "output": output}
    return publish(policy, "krr", request, progress=False)


def _left(policy: Any) -> dict[str, Any]:
    from veil.store.catalog import table_budgets

    return {row["table"]: row for row in table_budgets(policy)}


# spellings of one population (a capped table and its twin), and populations a capped table shares people with
ONE_POPULATION = [
    ("", ""),  # neither declares one: the default population
    ('population = "patients"\n', 'population = "patients"\n'),
    ('population = "Patients  Ward"\n', 'population = "patients ward"\n'),  # case-folded, spaces collapsed
    ('population = "patients"\n', ""),  # the twin declares none: it may hold anyone, the capped table's people too
    ("", 'population = "patients"\n'),  # the capped table declares none: its cap covers every population
]


@pytest.mark.parametrize(("capped", "twin"), ONE_POPULATION)
def test_a_cap_bounds_every_table_of_its_population(tmp_path: Path, capped: str, twin: str) -> None:
    """DP spend on the uncapped twin counts against the cap (and what does not fit is refused, free), and the twin
    publishes nothing without a DP guarantee."""
    from veil.errors import BudgetExhausted, NonDPReleaseRefused
    from veil.generators.transaction import publish

    _, policy = _world(tmp_path, {"people": f"{capped}epsilon_total = 1.0\n", "people_v2": twin})
    _krr(policy, "people_v2", "k1")  # 0.5 of the cap
    left = _left(policy)["people"]
    assert left["epsilon_spent"] == pytest.approx(0.5) and left["epsilon_remaining"] == pytest.approx(0.5)
    with pytest.raises(BudgetExhausted, match="people"):
        _krr(policy, "people_v2", "k2", epsilon=0.3)  # 0.6 > 0.5 left
    with pytest.raises(NonDPReleaseRefused, match="caps the privacy loss"):
        publish(policy, "sdc", {**_SWAP, "table": "people_v2", "output": "s"}, progress=False)
    assert _left(policy)["people"]["epsilon_spent"] == pytest.approx(0.5)  # the refusals were free


def test_other_declared_populations_are_not_bound(tmp_path: Path) -> None:
    """A table of another declared population neither charges the cap nor is refused by it."""
    from veil.generators.transaction import publish

    tables = {"people": 'population = "patients"\nepsilon_total = 1.0\n', "staff": 'population = "staff"\n'}
    _, policy = _world(tmp_path, tables)
    _krr(policy, "staff", "k1", epsilon=1.0)
    assert _left(policy)["people"]["epsilon_spent"] == 0.0
    publish(policy, "sdc", {**_SWAP, "table": "staff", "output": "s"}, progress=False)
    assert _left(policy)["people"]["unbounded_by"] == []


@pytest.mark.parametrize("twin", [False, True])
def test_a_cap_declared_later_counts_an_earlier_release_without_guarantee(tmp_path: Path, twin: bool) -> None:
    """Rank swapping (ε = ∞) of the population, then a cap: the cap shows nothing left and names the release, and DP
    publications and analysts' queries on any table of the population are refused, naming it."""
    import veil as veil_api
    from veil.errors import BudgetExhausted
    from veil.generators.transaction import publish
    from veil.policy import load_policy

    path, policy = _world(tmp_path, {"people": "", "people_v2": ""})
    first = publish(policy, "sdc", {**_SWAP, "table": "people_v2" if twin else "people", "output": "s"}, progress=False)
    path.write_text(path.read_text().replace("[tables.people]\n", "[tables.people]\nepsilon_total = 1.0\n"))
    policy = load_policy(path)
    left = _left(policy)["people"]
    assert left["epsilon_remaining"] == 0.0 and left["epsilon_spent"] == float("inf")
    assert left["unbounded_by"] == [first.release_id]
    for table in ("people", "people_v2"):
        with pytest.raises(BudgetExhausted, match=first.release_id):
            _krr(policy, table, f"k_{table}")
        with veil_api.connect(path, analyst="bob") as db, pytest.raises(BudgetExhausted, match=first.release_id):
            db.sql(f"SELECT COUNT(*) FROM {table}")


def test_a_cap_declared_later_counts_earlier_dp_spend_of_its_population(tmp_path: Path) -> None:
    """DP spend on the twin and analysts' queries before the cap are counted by it (every table's spend is recorded)."""
    import veil as veil_api
    from veil.policy import load_policy

    path, policy = _world(tmp_path, {"people": "", "people_v2": ""})
    _krr(policy, "people_v2", "k1")  # 0.5
    with veil_api.connect(path, analyst="bob") as db:
        db.sql("SELECT COUNT(*) FROM people_v2", epsilon=0.25)
    path.write_text(path.read_text().replace("[tables.people]\n", "[tables.people]\nepsilon_total = 1.0\n"))
    left = _left(load_policy(path))["people"]
    assert left["epsilon_spent"] == pytest.approx(0.75) and left["epsilon_remaining"] == pytest.approx(0.25)


def test_concurrent_dp_publications_of_one_population_share_its_cap(tmp_path: Path) -> None:
    """Two curators publish at once (threads, each its own policy and ledger handle) from the two tables of one capped
    population, each 0.6 of a cap of 1: the charges serialise on the ledger (the population's spend is read in the
    charging transaction) and exactly one is refused (``BudgetExhausted``), whatever the order."""
    from veil.errors import BudgetExhausted
    from veil.policy import load_policy

    path, _ = _world(tmp_path, {"people": "epsilon_total = 1.0\n", "people_v2": ""})
    start = threading.Barrier(2)
    outcomes: list[str] = []

    def curator(table: str) -> None:
        policy = load_policy(path)
        start.wait()
        try:
            _krr(policy, table, f"k_{table}", epsilon=0.3)
            outcomes.append("published")
        except BudgetExhausted:
            outcomes.append("BudgetExhausted")

    threads = [threading.Thread(target=curator, args=(t,)) for t in ("people", "people_v2")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert sorted(outcomes) == ["BudgetExhausted", "published"]
    assert _left(load_policy(path))["people"]["epsilon_spent"] == pytest.approx(0.6)


def test_a_capped_dp_publication_does_not_run_beside_one_without_guarantee(tmp_path: Path) -> None:
    """A release without DP guarantee in flight (started under a policy without the cap: an edit meanwhile) holds the
    population's claim; a DP publication under the cap is refused typed and free until it is recorded, where its
    charge then sees it. A DP publication of a population without a cap does not wait."""
    from veil.errors import InputError
    from veil.generators.publication import Plan
    from veil.generators.transaction import history_claim

    tables = {"people": 'population = "patients"\nepsilon_total = 1.0\n', "staff": 'population = "staff"\n'}
    _, policy = _world(tmp_path, tables)
    non_dp = Plan(kind="sdc", method="rank_swapping", source="people_v2", output="s", params={}, checks={}, dp=False)
    with history_claim(policy, non_dp):  # source not in the policy: it may hold anyone
        with pytest.raises(InputError, match="running right now"):
            _krr(policy, "people", "k1")
        _krr(policy, "staff", "k2")  # no cap on staff's population
    assert _left(policy)["people"]["epsilon_spent"] == 0.0
    _krr(policy, "people", "k1")
    assert _left(policy)["people"]["epsilon_spent"] == pytest.approx(0.5)


@pytest.mark.parametrize("population", ["", "cohort 2026"])
@pytest.mark.parametrize("table", ["people", "o_brien", "t"])
def test_the_cap_refusal_quotes_the_table_once(tmp_path: Path, table: str, population: str) -> None:
    """Review s21: the population cap's refusal read "table 'people''s cap" (the name's repr, then "'s"). Each table name
    and population: the message quotes the table's name once, with no doubled apostrophe, and still names the cap, the
    population and the remaining budget."""
    from fractions import Fraction

    from veil.errors import BudgetExhausted
    from veil.policy import load_policy
    from veil.store.ledger import Cost, Ledger, accounts_for

    extra = "epsilon_total = 1.0\n" + (f'population = "{population}"\n' if population else "")
    path = tmp_path / "policy.toml"
    path.write_text(_text({table: extra}), encoding="utf-8")
    policy = load_policy(path)
    with Ledger(tmp_path / "ledger.sqlite") as led, pytest.raises(BudgetExhausted) as info:
        led.reserve(Cost(Fraction(2)), accounts_for(policy, tables=[table]), actor="curator", what="a publication")
    message = str(info.value)
    assert "''" not in message and f"'{table}'" in message, message
    assert "cap" in message and (population or "default population") in message, message
