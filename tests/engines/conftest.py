"""Fixtures for the engine tests: the same warehouse on DuckDB and on Spark ``local[2]`` (one Spark per run)."""

from __future__ import annotations

import types
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.test_proxy_fixtures import REGIONS, visits_frame
from veil.policy import Policy, load_policy

POLICY = """\
[database]
path = "wh.duckdb"
[ledger]
path = "ledger.sqlite"
[defaults]
epsilon_per_query = 0.5
[tables.people]
privacy_unit = "row"
[tables.people.columns]
age = { type = "int", lower = 17, upper = 90 }
income = { type = "float", lower = 0, upper = 200000 }
sex = { type = "category", values = ["Female", "Male", "Other"] }
state = { type = "category" }
zip = { type = "int" }
age_offset = { type = "int", lower = -5, upper = 5 }
married = { type = "bool" }
born = { type = "date" }
hours = { type = "int", lower = 1, upper = 99 }
[tables.visits]
privacy_unit = "user_id"
max_rows_per_unit = 5
[tables.visits.columns]
user_id = { type = "int" }
amount = { type = "float", lower = 0, upper = 100 }
kind = { type = "category", values = ["a", "b", "c"] }
[tables.regions]
public = true
[analysts.alice]
epsilon = 100000.0
"""

SPARK = '\n[engine]\nkind = "spark"\nmaster = "local[2]"\nwarehouse = "spark-warehouse"\n'


def people(n: int = 4000, seed: int = 11) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    age = rng.integers(17, 91, n)
    df = pd.DataFrame(
        {
            "age": age,
            "income": np.round((rng.gamma(2.0, 20000.0, n) + age * 100.0).clip(0, 250000), 2),
            "sex": rng.choice(["Female", "Male"], n),
            "state": rng.choice(["CA", "NY", "TX", "WA", "OR", "ZZ"], n, p=[0.3, 0.25, 0.2, 0.12, 0.08, 0.05]),
            "zip": rng.integers(10000, 99999, n),
            "age_offset": rng.integers(-5, 6, n),
            "married": rng.random(n) < 0.4,
            "born": (pd.Timestamp("1940-01-01") + pd.to_timedelta(rng.integers(0, 25000, n), unit="D")).date,
            "hours": rng.integers(1, 100, n),
        }
    )
    df.loc[rng.random(n) < 0.05, "income"] = np.nan
    return df


def build(directory: Path, extra: str = "") -> Policy:
    from veil.store.warehouse import write_table

    directory.mkdir(parents=True, exist_ok=True)
    (directory / "policy.toml").write_text(POLICY + extra, encoding="utf-8")
    policy = load_policy(directory / "policy.toml")
    write_table(policy, "people", people(), replace=True)
    write_table(policy, "visits", visits_frame(), replace=True)
    write_table(policy, "regions", REGIONS, replace=True)
    return policy


@pytest.fixture(scope="session")
def same_salt() -> Iterator[None]:
    """Both engines rank a unit's rows with one fixed salt, so they keep the same rows (test-only)."""
    import veil.proxy.bounding as bounding

    saved = bounding.secrets
    bounding.secrets = types.SimpleNamespace(token_hex=lambda n: "5a" * n)  # type: ignore[assignment]
    yield
    bounding.secrets = saved


@pytest.fixture(scope="session")
def duckdb_policy(tmp_path_factory: pytest.TempPathFactory, same_salt: None) -> Policy:
    return build(tmp_path_factory.mktemp("conformance") / "duckdb")


@pytest.fixture(scope="session")
def spark_policy(tmp_path_factory: pytest.TempPathFactory, same_salt: None) -> Policy:
    from veil.engines.spark import spark_available

    reason = spark_available()
    if reason is not None:
        pytest.skip(f"Spark conformance skipped: {reason}")
    return build(tmp_path_factory.mktemp("conformance") / "spark", SPARK)
