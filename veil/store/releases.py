"""Release records: every answer and publication Veil ever let out, with its privacy cost.

Records live in the ledger's SQLite file (see :mod:`veil.store.ledger` for the schema, documented in
``docs/ledger.md``). Analyst query releases are written by the query path through
:meth:`veil.store.ledger.Ledger.release`; curator publications through :func:`record_release`.
A publication that names a ``table`` makes that table public to analysts.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from veil._json import to_jsonable
from veil.policy import Policy

__all__ = [
    "Release",
    "ReleasedStatistic",
    "get_release",
    "list_releases",
    "published_tables",
    "record_release",
]


@dataclass(frozen=True)
class ReleasedStatistic:
    """One noisy number inside an analyst query release."""

    name: str  # e.g. "sum(age)" or "count(*)"
    mechanism: str  # "laplace", "discrete_laplace", "exponential", "partition_selection", "exact"
    epsilon: Fraction
    sensitivity: float
    scale: float
    value: Any  # the released (noisy) value
    ci95: float | None = None
    group: tuple[Any, ...] = ()


@dataclass(frozen=True)
class Release:
    id: str
    kind: str  # "query" | "publication"
    method: str
    actor: str
    created_at: str  # ISO-8601 UTC
    table: str | None
    params: Mapping[str, Any]
    metrics: Mapping[str, Any]
    epsilon: Fraction | None
    delta: float | None
    canonical_sql: str | None = None
    answer: Mapping[str, Any] | None = None
    statistics: tuple[ReleasedStatistic, ...] = ()


_PLAIN_SCALARS = frozenset({str, int, float, bool, type(None)})


def _plain(obj: Any) -> bool:
    """Is ``obj`` already plain JSON (exact types: str-keyed dicts, lists, tuples, str/int/float/bool/None)?"""
    t = type(obj)
    if t in _PLAIN_SCALARS:
        return True
    if t is list or t is tuple:
        return all(_plain(v) for v in obj)
    if t is dict:
        return all(type(k) is str and _plain(v) for k, v in obj.items())
    return False


def dumps(obj: Any) -> str:
    """JSON text for the ledger (sorted keys; numpy/pandas/Fraction values converted; NaN kept)."""
    t = type(obj)
    if t is int or (t is float and math.isfinite(obj)):
        return repr(obj)  # what json.dumps writes for an int or a finite float (the common released value)
    if _plain(obj):
        return json.dumps(obj, sort_keys=True, allow_nan=True)
    return json.dumps(to_jsonable(obj, nan_as_null=False), sort_keys=True, allow_nan=True)


def record_release(
    policy: Policy,
    *,
    kind: str,
    method: str,
    params: Mapping[str, Any],
    metrics: Mapping[str, Any],
    table: str | None = None,
    epsilon: float | Fraction | None = None,
    delta: float | None = None,
    actor: str = "curator",
    charge_to: str | None = None,
) -> str:
    """Write a release record (a publication, usually) and return its id.

    With ``charge_to`` naming an analyst, ``epsilon`` is charged to that analyst's budget in
    the same transaction (refused with :class:`~veil.errors.BudgetExhausted` if it does not fit).
    """
    from veil.store.ledger import Ledger

    with Ledger.for_policy(policy) as ledger:
        return ledger.record(
            kind=kind,
            method=method,
            params=params,
            metrics=metrics,
            table=table,
            epsilon=epsilon,
            delta=delta,
            actor=actor,
            charge_to=charge_to,
        )


def get_release(policy: Policy, release_id: str) -> Release:
    """The release with this id; :class:`~veil.errors.ReleaseError` if there is none."""
    from veil.store.ledger import Ledger

    with Ledger.for_policy(policy) as ledger:
        return ledger.get_release(release_id)


def list_releases(policy: Policy, kind: str | None = None) -> list[Release]:
    """Every release, oldest first, optionally only of one ``kind``."""
    from veil.store.ledger import Ledger

    with Ledger.for_policy(policy) as ledger:
        return ledger.list_releases(kind)


def published_tables(policy: Policy) -> dict[str, Release]:
    """Tables made public by publications: table name → the latest publication that wrote it."""
    if not policy.ledger_path.exists():
        return {}
    out: dict[str, Release] = {}
    for rel in list_releases(policy, kind="publication"):
        if rel.table:
            out[rel.table] = rel
    return out
