"""A population cap counts every charge made under its population, whatever the policy declares now (red team s69 F4).

Each charge on a table also records the population the table was declared in *when it was charged* (the account
``under:["TABLE", "POPULATION"]``, charged with the table's own): a cap on population P counts every such record whose
population may hold P's people (:func:`~veil.store.ledger.population_matches`), so re-declaring a table's population
afterwards (to another declared one, to one no table declares, back and forth) never gives a cap its budget back.
Charges recorded before the record existed (schema version 3) count against every cap (their population is unknown).
Deterministic: every outcome follows from the policy and the ledger.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

_AGE = 'age = { type = "int", lower = 17, upper = 90 }\n'


def _text(populations: dict[str, str | None], cap: str = "people") -> str:
    body = '[database]\npath = "warehouse.duckdb"\n[ledger]\npath = "ledger.sqlite"\n'
    for name, pop in populations.items():
        body += f'[tables.{name}]\nprivacy_unit = "row"\n'
        if pop is not None:
            body += f'population = "{pop}"\n'
        if name == cap:
            body += "epsilon_total = 1.0\n"
        body += f"[tables.{name}.columns]\n{_AGE}"
    return body + "[analysts.bob]\nepsilon = 10.0\n"


def _world(tmp: Path, populations: dict[str, str | None]) -> Path:
    from veil.policy import load_policy
    from veil.store.warehouse import write_table

    path = tmp / "policy.toml"
    path.write_text(_text(populations), encoding="utf-8")
    policy = load_policy(path)
    for name in populations:
        write_table(policy, name, pd.DataFrame({"age": np.arange(17, 90)}))
    return path


def _ask(path: Path, table: str, eps: float, k: int) -> bool:
    """Whether a count on ``table`` at ``eps`` is answered (False: BudgetExhausted)."""
    import veil as veil_api
    from veil.errors import BudgetExhausted

    with veil_api.connect(path, analyst="bob") as db:
        try:
            db.sql(f"SELECT COUNT(*) AS n FROM {table} WHERE age > {20 + k}", epsilon=eps)
        except BudgetExhausted:
            return False
    return True


#: the snapshot's population edits after its charge: (declared at the charge, then each later declaration)
_EDITS = [
    ("patients", ["archive"]),  # the red team's edit: to another declared population
    ("patients", ["nobody-declares-this"]),  # to a population no other table declares
    ("patients", ["archive", "patients", "archive"]),  # back and forth
    ("patients", [None, "archive"]),  # through the default population
]


@pytest.mark.parametrize(("first", "edits"), _EDITS)
def test_a_charge_counts_against_its_populations_cap_after_any_edit(tmp_path: Path, first: str, edits: list[str | None]) -> None:
    path = _world(tmp_path, {"people": "patients", "snapshot": first, "archive_t": "archive"})
    assert _ask(path, "snapshot", 0.9, 0)
    for i, pop in enumerate(edits):
        path.write_text(_text({"people": "patients", "snapshot": pop, "archive_t": "archive"}), encoding="utf-8")
        assert not _ask(path, "people", 0.2, i + 1), f"the cap got its budget back after declaring {pop!r}"
    assert _ask(path, "people", 0.05, 9)  # what is left is still spendable (0.95 of 1)


def test_a_charge_made_after_the_edit_counts_under_the_new_population_only(tmp_path: Path) -> None:
    """The edit is honoured forwards: a charge on the snapshot once it is declared "archive" is about archive's people."""
    path = _world(tmp_path, {"people": "patients", "snapshot": "patients"})
    assert _ask(path, "snapshot", 0.3, 0)
    path.write_text(_text({"people": "patients", "snapshot": "archive"}), encoding="utf-8")
    assert _ask(path, "snapshot", 0.9, 1)  # archive's charge: not the patients cap's
    assert _ask(path, "people", 0.6, 2)  # 0.3 + 0.6 of 1
    assert not _ask(path, "people", 0.2, 3)  # 1.1 > 1


def test_an_edit_into_the_caps_population_brings_its_past_charges(tmp_path: Path) -> None:
    """A charge made under the default population (no declaration: anyone) counts against the cap whatever follows."""
    path = _world(tmp_path, {"people": "patients", "snapshot": None})
    assert _ask(path, "snapshot", 0.9, 0)
    path.write_text(_text({"people": "patients", "snapshot": "archive"}), encoding="utf-8")
    assert not _ask(path, "people", 0.2, 1)


def test_budget_shows_the_charges_recorded_under_the_population(tmp_path: Path) -> None:
    from veil.policy import load_policy
    from veil.store.catalog import table_budgets

    path = _world(tmp_path, {"people": "patients", "snapshot": "patients"})
    assert _ask(path, "snapshot", 0.9, 0)
    path.write_text(_text({"people": "patients", "snapshot": "archive"}), encoding="utf-8")
    (row,) = table_budgets(load_policy(path))
    assert row["epsilon_spent"] == pytest.approx(0.9)


@pytest.mark.parametrize(
    ("declared_after", "people_more_answered"),
    [
        ({"people": "patients", "snapshot": "patients"}, False),  # its table still declared in the cap's population
        ({"people": "patients"}, False),  # its table gone from the policy: it may be anyone, counts against every cap
        ({"people": "patients", "snapshot": "archive"}, True),  # its table now declared apart (review s22 Y6)
    ],
    ids=["same", "dropped", "apart"],
)
def test_charges_of_an_older_ledger_count_by_their_tables_declaration(
    tmp_path: Path, declared_after: dict[str, str], people_more_answered: bool
) -> None:
    """A ledger of schema version 3 (no population recorded): its table charges are migrated as of unknown population
    and count by their table's declaration now — against every cap once the table is gone from the policy — not
    against every cap always (review s22 Y6: that spent separate populations' caps for good at the upgrade)."""
    path = _world(tmp_path, {"people": "patients", "snapshot": "patients"})
    assert _ask(path, "snapshot", 0.9, 0)
    db = sqlite3.connect(tmp_path / "ledger.sqlite")  # back to version 3: the records of population removed
    with db:
        db.execute("DELETE FROM accounts WHERE account LIKE 'under:%'")
        db.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
    db.close()
    path.write_text(_text(declared_after), encoding="utf-8")
    assert _ask(path, "people", 0.2, 1) is people_more_answered
    assert _ask(path, "people", 0.05, 2)


def test_a_charge_counts_after_its_table_leaves_the_policy_and_returns_elsewhere(tmp_path: Path) -> None:
    """The snapshot's section dropped (its charge still counts), then declared again in another population."""
    path = _world(tmp_path, {"people": "patients", "snapshot": "patients"})
    assert _ask(path, "snapshot", 0.9, 0)
    path.write_text(_text({"people": "patients"}), encoding="utf-8")
    assert not _ask(path, "people", 0.2, 1)
    path.write_text(_text({"people": "patients", "snapshot": "archive"}), encoding="utf-8")
    assert not _ask(path, "people", 0.2, 2)
