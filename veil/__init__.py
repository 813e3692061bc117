"""Veil: differentially private SQL over DuckDB, sanitised publications, and privacy audits.

Public surface (everything else may change)::

    import veil
    db = veil.connect("policy.toml", analyst="alice")
    df = db.sql("SELECT sex, COUNT(*) FROM adult GROUP BY sex")   # df.attrs: ci95, epsilon_charged, …
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from veil.errors import (
    AuthError,
    BudgetExhausted,
    InputError,
    InternalError,
    NotAllowed,
    ParseError,
    PolicyError,
    QueryRejected,
    ReleaseError,
    Unbounded,
    UnknownColumn,
    UnknownTable,
    Unsupported,
    VeilError,
)
from veil.policy import Policy, load_policy

if TYPE_CHECKING:
    from veil.connection import Connection

__version__ = "0.1.0"

__all__ = [
    "AuthError",
    "BudgetExhausted",
    "InputError",
    "InternalError",
    "NotAllowed",
    "ParseError",
    "Policy",
    "PolicyError",
    "QueryRejected",
    "ReleaseError",
    "Unbounded",
    "UnknownColumn",
    "UnknownTable",
    "Unsupported",
    "VeilError",
    "__version__",
    "connect",
    "load_policy",
]


def connect(policy: str | Path | Policy, *, analyst: str) -> Connection:
    """Open an analyst connection: ``db.sql(query)`` returns a pandas DataFrame of DP answers."""
    from veil.connection import Connection

    return Connection(policy, analyst=analyst)
