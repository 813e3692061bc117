"""``veil demo``: build a demo warehouse and policy from the package's own generator."""

from __future__ import annotations

from pathlib import Path

from veil.datasets import demo_people, demo_states, demo_visits
from veil.policy import Policy, load_policy
from veil.store.warehouse import write_table

__all__ = ["DEMO_QUERIES", "build_demo"]

DEMO_POLICY = """\
# Veil demo policy: synthetic census-like people, their clinic visits, and a public table of states.
[database]
path = "warehouse.duckdb"

[ledger]
path = "ledger.sqlite"

[defaults]
epsilon_per_query = 0.5

[tables.people]                       # one row per person: row-level privacy
privacy_unit = "row"
[tables.people.columns]
age = { type = "int", lower = 18, upper = 90 }
sex = { type = "category", values = ["Female", "Male"] }
state = { type = "category" }          # undeclared keys: DP partition selection
education_years = { type = "int", lower = 6, upper = 20 }
occupation = { type = "category" }
hours_per_week = { type = "int", lower = 1, upper = 99 }
income = { type = "float", lower = 0, upper = 200000 }
married = { type = "bool" }

[tables.visits]                       # several rows per person: user-level privacy
privacy_unit = "person_id"
max_rows_per_unit = 5
[tables.visits.columns]
person_id = { type = "int" }
age = { type = "int", lower = 18, upper = 90 }
sex = { type = "category", values = ["Female", "Male"] }
state = { type = "category" }
diagnosis = { type = "category", values = ["asthma", "diabetes", "flu", "fracture", "hypertension", \
"migraine", "none", "obesity", "pneumonia", "sprain"] }
cost = { type = "float", lower = 0, upper = 20000 }

[tables.states]                       # public reference data: no noise, no budget
public = true
[tables.states.columns]
state = { type = "category" }
region = { type = "category" }

[analysts.alice]
epsilon = 10.0

[analysts.bob]
epsilon = 2.0
"""

DEMO_QUERIES: tuple[tuple[str, str], ...] = (
    ("How many people, and their average income?", "SELECT COUNT(*) AS n, AVG(income) AS avg_income FROM people"),
    ("Income by sex (public keys)", "SELECT sex, COUNT(*) AS n, AVG(income) AS avg_income FROM people GROUP BY sex"),
    ("Median age", "SELECT MEDIAN(age) AS median_age FROM people"),
    (
        "Visits by region (join with a public table, user-level privacy)",
        "SELECT s.region, COUNT(*) AS visits FROM visits v JOIN states s ON v.state = s.state "
        "GROUP BY s.region ORDER BY visits DESC",
    ),
    (
        "Diabetes share by sex",
        "SELECT sex, AVG(CASE WHEN diagnosis = 'diabetes' THEN 1 ELSE 0 END) AS diabetes_share FROM visits GROUP BY sex",
    ),
)


def build_demo(directory: str | Path, *, n_people: int = 100_000, seed: int = 0, overwrite: bool = True) -> Policy:
    """Write ``policy.toml`` and a warehouse with people/visits/states into ``directory``."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    policy_path = d / "policy.toml"
    if overwrite:
        for name in ("warehouse.duckdb", "warehouse.duckdb.wal", "ledger.sqlite", "ledger.sqlite-wal", "ledger.sqlite-shm"):
            (d / name).unlink(missing_ok=True)
    policy_path.write_text(DEMO_POLICY, encoding="utf-8")
    policy = load_policy(policy_path)
    people = demo_people(n_people, seed=seed)
    write_table(policy, "people", people, replace=True)
    write_table(policy, "visits", demo_visits(people, seed=seed + 1), replace=True)
    write_table(policy, "states", demo_states(), replace=True)
    return policy
