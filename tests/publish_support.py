"""Shared helpers of the publication tests (a small synthetic warehouse; no shared data needed)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from veil.cli.main import cli

POLICY = """\
[database]
path = "warehouse.duckdb"
[ledger]
path = "ledger.sqlite"

[tables.people]
privacy_unit = "row"
{table_budget}
[tables.people.columns]
age = {{ type = "int", lower = 17, upper = 90 }}
hours = {{ type = "int", lower = 1, upper = 99 }}
gain = {{ type = "int", lower = 0, upper = 5000 }}
sex = {{ type = "category", values = ["F", "M"] }}
job = {{ type = "category", values = ["nurse", "smith", "clerk"] }}
income = {{ type = "category", values = ["low", "high"] }}

[analysts.bob]
epsilon = 2.0
[analysts.carol]
epsilon = 100.0
"""


def people(n: int = 400, seed: int = 0) -> pd.DataFrame:
    """People whose job betrays their sex (an implicit attribute), with a unique name per row."""
    rng = np.random.default_rng(seed)
    sex = rng.choice(["F", "M"], n)
    job = np.where(rng.random(n) < 0.85, np.where(sex == "F", "nurse", "smith"), rng.choice(["nurse", "smith", "clerk"], n))
    age = rng.integers(18, 80, n)
    hours = np.clip(rng.normal(40, 8, n).round(), 1, 99).astype(int)
    income = np.where(hours + rng.normal(0, 5, n) > 42, "high", "low")
    return pd.DataFrame(
        {
            "name": [f"person{i:05d}" for i in range(n)],
            "age": age,
            "hours": hours,
            "gain": rng.integers(0, 3000, n),
            "sex": sex,
            "job": job,
            "income": income,
        }
    )


def make_warehouse(tmp: Path, *, n: int = 400, table_budget: str = "") -> Path:
    path = tmp / "policy.toml"
    path.write_text(POLICY.format(table_budget=table_budget), encoding="utf-8")
    csv = tmp / "people.csv"
    people(n).to_csv(csv, index=False)
    res = CliRunner().invoke(cli, ["ingest", "--policy", str(path), "--table", "people", str(csv)])
    assert res.exit_code == 0, res.output
    return path


def veil(*args: str) -> Any:
    """Run the CLI in-process; returns the click Result."""
    return CliRunner().invoke(cli, [str(a) for a in args])


def ok_json(res: Any) -> Any:
    assert res.exit_code == 0, (res.output, res.exception)
    return json.loads(res.stdout)


def source(policy: Path) -> pd.DataFrame:
    from veil.policy import load_policy
    from veil.store.warehouse import read_table

    return read_table(load_policy(policy), "people")


def table(policy: Path, name: str) -> pd.DataFrame:
    from veil.policy import load_policy
    from veil.store.warehouse import read_table

    return read_table(load_policy(policy), name)


def tables(policy: Path) -> list[str]:
    from veil.policy import load_policy
    from veil.store.warehouse import table_names

    return [t for t in table_names(load_policy(policy)) if not t.startswith("_veil")]


def publications(policy: Path) -> list[Any]:
    from veil.policy import load_policy
    from veil.store.releases import list_releases

    return list_releases(load_policy(policy), kind="publication")


def analyst_reads_every_published_table(policy: Path) -> dict[str, int]:
    """An analyst counts the rows of every published table through the query path (exact: public)."""
    from veil.policy import load_policy
    from veil.store.releases import published_tables

    counts: dict[str, int] = {}
    for name in published_tables(load_policy(policy)):
        res = veil("query", "--policy", policy, "--analyst", "bob", "--format", "json", f"SELECT COUNT(*) AS n FROM {name}")
        assert res.exit_code == 0, (name, res.output)
        body = json.loads(res.stdout)
        counts[name] = int(body["rows"][0][0])
        assert counts[name] == len(table(policy, name)), name
    return counts


def assert_no_source_column_copied(policy: Path, name: str) -> None:
    """No published column equals a source column row by row, and identifying columns never appear."""
    src = source(policy)
    out = table(policy, name)
    assert "name" not in out.columns
    if len(out) == len(src):
        for col in out.columns:
            if col in src.columns:
                assert not out[col].reset_index(drop=True).equals(src[col]), f"{name}.{col} is the source column in source order"


@pytest.fixture
def warehouse(tmp_path: Path) -> Path:
    return make_warehouse(tmp_path)
