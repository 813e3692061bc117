"""``veil tables``, ``veil retract`` and ``veil move-ledger``: what the warehouse holds, who may read it, its ledger.

Thin edges over :mod:`veil.store.catalog`.
"""

from __future__ import annotations

from pathlib import Path

import click

from veil.cli._common import cli, emit, format_option, policy_option, run_guarded

__all__ = ["move_ledger_command", "retract_command", "tables_command"]


@cli.command("tables")
@policy_option
@format_option
@run_guarded
def tables_command(policy_path: Path, fmt: str) -> None:
    """List every table with its status: private, public, or published (method, guarantee, release id)."""
    from veil.generators.transaction import recover
    from veil.policy import load_policy
    from veil.store.catalog import table_statuses

    policy = load_policy(policy_path)
    recover(policy)
    rows = [s.as_dict() for s in table_statuses(policy)]
    if fmt == "json":
        emit(rows, fmt)
        return
    emit([{k: v for k, v in r.items() if k != "columns"} for r in rows], fmt)


@cli.command("retract")
@policy_option
@click.argument("table")
@click.option("--reason", default="", help="Why the publication is withdrawn (kept in the release log).")
@format_option
@run_guarded
def retract_command(policy_path: Path, table: str, reason: str, fmt: str) -> None:
    """Withdraw the publication of TABLE: analysts' queries on it then fail as an unknown table."""
    from veil.generators.transaction import recover
    from veil.policy import load_policy
    from veil.store.catalog import retract

    policy = load_policy(policy_path)
    recover(policy)
    emit(retract(policy, table, reason=reason), fmt)


@cli.command("move-ledger")
@policy_option
@click.argument("destination", type=click.Path(path_type=Path))
@format_option
@run_guarded
def move_ledger_command(policy_path: Path, destination: Path, fmt: str) -> None:
    """Move the ledger to DESTINATION, its whole history and identity with it; the old file is kept for the record only.

    The warehouse accepts only its own ledger (a fresh or missing one would forget every budget and release): this
    is the one way to move it. Then point [ledger] path at DESTINATION."""
    from veil.policy import load_policy
    from veil.store.binding import move_ledger

    policy = load_policy(policy_path)
    emit(move_ledger(policy, destination), fmt)
