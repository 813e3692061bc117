"""A policy file and its tables in a folder: the fixture most query-path tests start from."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pandas as pd

from veil.policy import Policy, load_policy
from veil.store.warehouse import write_table


def policy_with_tables(
    folder: Path,
    policy_text: str,
    private: Mapping[str, pd.DataFrame] | None = None,
    public: Mapping[str, pd.DataFrame] | None = None,
) -> Policy:
    """Write ``policy_text`` as ``folder/policy.toml``, load it, and store each table (public ones in the mirror too)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "policy.toml").write_text(policy_text, encoding="utf-8")
    policy = load_policy(folder / "policy.toml")
    for name, frame in (private or {}).items():
        write_table(policy, name, frame, replace=True)
    for name, frame in (public or {}).items():
        write_table(policy, name, frame, replace=True, public=True)
    return policy


def copied_session(
    folder: Path,
    policy_text: str,
    private: Mapping[str, pd.DataFrame],
    public: Mapping[str, pd.DataFrame] | None = None,
    analyst: str = "a",
) -> Any:
    """An exact session (noise off, ``veil.proxy._testing.exact_session``) of ``analyst`` over
    :func:`policy_with_tables`, each private table's bounded copy built (a charged ``COUNT(*)`` at ε = 1): built
    before :func:`readers_at_the_floor` lowers the readers, so only the statements under test run at the floor."""
    from veil.proxy._testing import exact_session

    session = exact_session(policy_with_tables(folder, policy_text, private, public), analyst)
    for name in private:
        session.execute(f"SELECT COUNT(*) FROM {name}", epsilon=1.0)
    return session


@contextmanager
def readers_at_the_floor() -> Iterator[None]:
    """This process's DuckDB readers at Veil's floor (``MIN_READER_MEMORY_MIB``: 256 MiB, ``MIN_READER_THREADS``: 2)
    inside the block, its settings back after it: the regime where a charged join spills or fails after the charge
    (red team s63, s68, s71)."""
    from veil.store import warehouse

    before = (warehouse._CONNECTIONS.memory_mib, warehouse._CONNECTIONS.threads)
    warehouse.set_reader_threads(warehouse.MIN_READER_THREADS)
    warehouse.set_reader_memory(warehouse.MIN_READER_MEMORY_MIB)
    try:
        yield
    finally:
        warehouse.set_reader_memory(before[0])
        warehouse.set_reader_threads(before[1])
