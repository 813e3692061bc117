"""The table version names the table's current data: unchanged data keeps it, any changed row changes it.

On Spark a file-based table's version is its list of data files (read without scanning the rows); the
bounded copy is keyed by it, so a version that missed a change would answer from stale rows.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from tests.engines.conftest import POLICY, SPARK
from veil.engines import open_engine
from veil.policy import Policy, load_policy
from veil.store.warehouse import write_table

COLUMNS = ["state", "region"]


def _frame(n: int) -> pd.DataFrame:
    return pd.DataFrame({"state": [f"S{i}" for i in range(n)], "region": [f"r{i % 3}" for i in range(n)]})


def _changes(policy: Policy) -> list[tuple[str, Callable[[pd.DataFrame], pd.DataFrame]]]:
    def one_value(df: pd.DataFrame) -> pd.DataFrame:
        out = df.copy()
        out.loc[3, "region"] = "q"
        return out

    return [
        ("one value changed", one_value),
        ("one row added", lambda df: pd.concat([df, _frame(1)], ignore_index=True)),
        ("one row removed", lambda df: df.iloc[1:].reset_index(drop=True)),
        ("values moved between rows", lambda df: df.assign(state=list(df["state"])[::-1])),  # same values, other rows
    ]


def _check(policy: Policy) -> None:
    base = _frame(20)
    write_table(policy, "tv", base, replace=True)
    engine = open_engine(policy)
    try:
        v0 = engine.table_version("tv", COLUMNS)
        assert engine.table_version("tv", COLUMNS) == v0  # nothing changed: the same version (no rebuild)
        seen = {v0}
        for what, change in _changes(policy):
            write_table(policy, "tv", change(base), replace=True)
            v = engine.table_version("tv", COLUMNS)
            assert v not in seen, what
            seen.add(v)
    finally:
        engine.close()


def test_duckdb_table_version(duckdb_policy: Policy) -> None:
    _check(duckdb_policy)


@pytest.mark.slow
def test_spark_table_version(tmp_path: Path, spark_policy: Policy) -> None:  # spark_policy: Spark is available
    (tmp_path / "policy.toml").write_text(POLICY + SPARK + 'database = "tv"\n', encoding="utf-8")
    policy = load_policy(tmp_path / "policy.toml")
    _check(policy)
    engine = open_engine(policy)
    try:
        assert engine.table_version("tv", COLUMNS).startswith("files.")  # read from the file list, not the rows
    finally:
        engine.close()


@pytest.mark.slow
def test_spark_connect_table_version(tmp_path: Path, connect_url: str) -> None:
    import uuid

    from tests.engines.conftest import connect_engine

    (tmp_path / "policy.toml").write_text(POLICY + connect_engine(connect_url, f"veil_tv_{uuid.uuid4().hex[:8]}"),
                                          encoding="utf-8")  # fmt: skip
    _check(load_policy(tmp_path / "policy.toml"))
