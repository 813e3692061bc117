"""A policy file and its tables in a folder: the fixture most query-path tests start from."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

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
