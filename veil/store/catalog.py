"""The curator's view of the warehouse: each table's status, and withdrawing a publication.

A table is **published** while its latest publication has not been retracted (analysts read it
without noise), **public** when the policy declares it so, and **private** otherwise (analysts
reach it only through DP queries, if the policy declares it). A retraction is a release-log entry
(kind ``retraction``) recorded first; the table then leaves the public mirror, so analysts' queries
on it fail as on an unknown table.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from fractions import Fraction
from typing import Any

from veil.errors import InputError, did_you_mean
from veil.policy import Policy
from veil.store.binding import ledger_exists
from veil.store.ledger import Account, Ledger
from veil.store.publications import published_tables

__all__ = ["TableStatus", "retract", "table_budgets", "table_statuses"]


@dataclass(frozen=True)
class TableStatus:
    table: str
    status: str  # "private" | "public" | "published" | "declared (not loaded)"
    method: str | None = None
    guarantee: str | None = None
    release_id: str | None = None
    epsilon: float | None = None
    columns: dict[str, str] | None = None
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def table_statuses(policy: Policy) -> list[TableStatus]:
    """Every table of the warehouse or the policy, with its status, sorted by name."""
    from veil.store.warehouse import table_names

    present = [t for t in table_names(policy) if not t.startswith("_veil")]
    published = published_tables(policy)
    retracted: dict[str, str] = {}
    if ledger_exists(policy):
        with Ledger.for_policy(policy) as led:
            for rel in led.list_releases("retraction"):
                if rel.table is not None:
                    retracted[rel.table] = rel.id
    out: list[TableStatus] = []
    for name in sorted(set(present) | set(policy.tables)):
        spec = policy.tables.get(name)
        if name in published:
            rel = published[name]
            gate = rel.metrics.get("gate") if isinstance(rel.metrics, dict) else None
            cols = {c: v.get("protection", "") for c, v in (gate or {}).get("columns", {}).items()}
            out.append(
                TableStatus(
                    name,
                    "published",
                    rel.method,
                    str(rel.metrics.get("guarantee", "")) or None,
                    rel.id,
                    None if rel.epsilon is None else float(rel.epsilon),
                    cols or None,
                )
            )
        elif name not in present:
            out.append(TableStatus(name, "declared (not loaded)"))
        elif spec is not None and spec.public:
            out.append(TableStatus(name, "public", note="declared public in the policy"))
        else:
            note = f"publication retracted ({retracted[name]})" if name in retracted else ""
            out.append(TableStatus(name, "private", note=note))
    return out


def retract(policy: Policy, table: str, *, reason: str = "", actor: str = "curator") -> dict[str, Any]:
    """Withdraw ``table``'s publication: record the retraction, then drop it from the public mirror."""
    from veil.store.warehouse import drop_public, mark_ledger

    published = published_tables(policy)
    if table not in published:
        raise InputError(
            f"table {table!r} is not published", hint=did_you_mean(table, published) or "List tables with `veil tables`"
        )
    spec = policy.tables.get(table)
    if spec is not None and spec.public:
        # the session copies a declared public table back into the mirror from the warehouse, which still holds the
        # publication: the retraction would be recorded and the table stay public (red team s42, A3)
        raise InputError(
            f"table {table!r} is declared public in the policy: retracting its publication would leave it public",
            hint=f"Remove [tables.{table}] from the policy (or its public = true) first, then retract",
        )
    with Ledger.for_policy(policy) as led:
        rid = led.record(
            kind="retraction",
            method="retract",
            params={"publication": published[table].id, "reason": reason},
            metrics={},
            table=table,
            actor=actor,
        )
        mark = led.history_mark()
    drop_public(policy, table)
    mark_ledger(policy, mark)  # a stale copy of the ledger without the retraction is refused from now on (best effort)
    return {"release_id": rid, "table": table, "retracted": published[table].id, "status": "private"}


def table_budgets(policy: Policy) -> list[dict[str, Any]]:
    """Each table with a declared cap: its (ε, δ) total, spent and remaining. A cap is per population (red team s66
    F3): spent counts every analyst query and DP publication on any table of its population (the same declared
    ``population``, or either declares none; and tables the policy no longer declares), before the cap was declared
    too; a publication without a DP guarantee of the population ever (live, replaced or retracted) makes ε spent
    unbounded (``inf``) and remaining 0, and ``unbounded_by`` names those releases."""
    out: list[dict[str, Any]] = []
    capped = [n for n, t in sorted(policy.tables.items()) if t.epsilon_total is not None or t.delta_total is not None]
    if not capped:
        return out
    with Ledger.for_policy(policy) as led:
        for name in capped:
            cap = Account.population_cap(policy, name)
            spent, earlier = led.population_spent(cap)
            row: dict[str, Any] = {"table": name, "population": policy.tables[name].population or ""}
            for key, total, used in (("epsilon", cap.epsilon_total, spent.epsilon), ("delta", cap.delta_total, spent.delta)):
                unbounded = key == "epsilon" and bool(earlier)
                row[f"{key}_total"] = None if total is None else float(total)
                row[f"{key}_spent"] = float("inf") if unbounded else float(used)
                left = None if total is None else (Fraction(0) if unbounded else max(total - used, Fraction(0)))
                row[f"{key}_remaining"] = None if left is None else float(left)
            row["unbounded_by"] = list(earlier)
            out.append(row)
    return out
