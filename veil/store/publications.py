"""The curator-facing API over the release log: record, read and list releases; published tables.

Records live in the ledger's SQLite file (:mod:`veil.store.ledger` owns the schema, documented in
``docs/ledger.md``). Analyst query releases are written by the query path through
:meth:`veil.store.ledger.Ledger.release`; curator publications through :func:`record_release`.
A publication that names a ``table`` makes that table public to analysts until a later
retraction of the same table (or a later publication over it). The log is append-only: a replaced or
retracted publication stays in it, and :func:`publication_history` reads it whole (the publication gate
counts every release ever made, since analysts may have kept a copy of anything once public).
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from veil.policy import Policy
from veil.store.binding import ledger_exists
from veil.store.ledger import Ledger, Reservation
from veil.store.releases import Release, ReleasedStatistic, dumps

__all__ = [
    "Release",
    "ReleasedStatistic",
    "dumps",
    "get_release",
    "list_releases",
    "publication_history",
    "published_tables",
    "record_release",
]


def record_release(
    policy: Policy,
    *,
    kind: str,
    method: str,
    params: Mapping[str, Any],
    metrics: Mapping[str, Any],
    table: str | None = None,
    epsilon: float | Fraction | None = None,
    delta: float | Fraction | None = None,
    actor: str = "curator",
    reservation: Reservation | None = None,
) -> str:
    """Write a release record (a publication, usually) and return its id.

    With ``reservation`` (charged with :meth:`Ledger.reserve` before any randomness was drawn) the
    record carries that reservation's cost and marks it released in the same transaction.
    """
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
            reservation=reservation,
        )


def get_release(policy: Policy, release_id: str) -> Release:
    """The release with this id; :class:`~veil.errors.ReleaseError` if there is none."""
    with Ledger.for_policy(policy) as ledger:
        return ledger.get_release(release_id)


def list_releases(policy: Policy, kind: str | None = None) -> list[Release]:
    """Every release, oldest first, optionally only of one ``kind``."""
    with Ledger.for_policy(policy) as ledger:
        return ledger.list_releases(kind)


def publication_history(policy: Policy) -> list[tuple[Release, str]]:
    """Every publication ever recorded, oldest first, each with its state now: ``"live"``, ``"replaced by <id>"`` (a
    later publication to the same table) or ``"retracted (<id>)"``; a model file's publication is ``"live"`` (a file
    handed out is never taken back). Replaced and retracted publications are in it: they were public, and what
    analysts read then they still have."""
    if not ledger_exists(policy):  # a missing ledger of a bound warehouse is refused, never an empty history
        return []
    with Ledger.for_policy(policy) as ledger:
        log = ledger.publication_log()
    state: dict[str, str] = {}
    latest: dict[str, str] = {}  # table -> id of its latest publication
    for rel in log:
        if rel.kind == "publication":
            state[rel.id] = "live"
            if rel.table is not None:
                if rel.table in latest and state.get(latest[rel.table]) == "live":
                    state[latest[rel.table]] = f"replaced by {rel.id}"
                latest[rel.table] = rel.id
        elif rel.kind == "retraction" and rel.table is not None and rel.table in latest:
            if state.get(latest[rel.table]) == "live":
                state[latest[rel.table]] = f"retracted ({rel.id})"
    return [(rel, state[rel.id]) for rel in log if rel.kind == "publication"]


def published_tables(policy: Policy) -> dict[str, Release]:
    """Tables made public by publications and not retracted since: table name → the latest publication."""
    if not ledger_exists(policy):
        return {}
    out: dict[str, Release] = {}
    with Ledger.for_policy(policy) as ledger:
        for rel in ledger.publication_log():
            if rel.table is None:
                continue
            if rel.kind == "publication":
                out[rel.table] = rel
            elif rel.kind == "retraction":
                out.pop(rel.table, None)
    return out
