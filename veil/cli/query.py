"""Analyst commands: ``veil query``, ``veil explain``, ``veil budget`` (thin edges over QuerySession)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
import pandas as pd

from veil.cli._common import cli, emit, format_option, policy_option, run_guarded
from veil.policy import load_policy
from veil.proxy.session import QuerySession

F = TypeVar("F", bound=Callable[..., Any])

analyst_option = click.option("--analyst", required=True, help="Analyst name from the policy's [analysts] table.")
epsilon_option = click.option(
    "--epsilon",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="ε to spend on this query (default: [defaults].epsilon_per_query).",
)


def sql_command_options(fn: F) -> F:
    """What ``veil query`` and ``veil explain`` both take: --policy, --analyst, --epsilon, --format and the SQL."""
    for option in reversed((policy_option, analyst_option, epsilon_option, format_option, click.argument("sql"))):
        fn = option(fn)
    return fn


@cli.command()
@sql_command_options
@run_guarded
def query(policy_path: Path, analyst: str, epsilon: float | None, fmt: str, sql: str) -> None:
    """Answer an aggregate SQL query with differential privacy and charge the analyst's budget."""
    with QuerySession(load_policy(policy_path), analyst) as session:
        ans = session.execute(sql, epsilon=epsilon)
    names = [c.name for c in ans.columns]
    if fmt == "json":
        emit(None, fmt, json_data=ans.to_dict())
        return
    rows = [dict(zip(names, r, strict=True)) for r in ans.rows]
    if fmt == "table":
        for row, ci in zip(rows, ans.ci95, strict=True):
            for name, hw in zip(names, ci, strict=True):
                if hw is not None:
                    row[f"{name} ±95%"] = hw
    emit(rows if rows else pd.DataFrame(columns=names), fmt)  # no groups released: header only
    if fmt == "table":
        note = " (cached: identical query answered before, no charge)" if ans.cached else ""
        click.echo(f"ε charged {float(ans.epsilon_charged):g}, remaining {float(ans.epsilon_remaining):g}{note}", err=True)
    for text in ans.notes:  # (the JSON document carries them as "notes")
        click.echo(f"NOTE: {text}", err=True)


@cli.command()
@sql_command_options
@run_guarded
def explain(policy_path: Path, analyst: str, epsilon: float | None, fmt: str, sql: str) -> None:
    """Show each noisy statistic's mechanism, sensitivity, noise scale, 95% CI and exact ε; spends nothing."""
    with QuerySession(load_policy(policy_path), analyst) as session:
        ex = session.explain(sql, epsilon=epsilon)
    if fmt == "json":
        emit(
            None,
            fmt,
            json_data={
                "epsilon": float(ex.epsilon),
                "epsilon_exact": str(ex.epsilon),
                "public": ex.public,
                "contribution_bound": ex.contribution,
                "partition_threshold": ex.partition_threshold,
                "partition_delta": None if ex.partition_delta is None else float(ex.partition_delta),
                "statistics": ex.rows(),
            },
        )
        return
    emit(ex.rows() or [{"statistic": "(public tables only: exact, no noise)", "epsilon": 0.0}], fmt)
    if fmt == "table":
        extra = ""
        if ex.partition_threshold is not None:
            extra = (
                f"; private group keys: a group is shown when its noisy count ≥ {ex.partition_threshold}"
                f" (δ = {float(ex.partition_delta or 0):g})"
            )
        click.echo(f"total ε = {float(ex.epsilon):g} (exact {ex.epsilon}){extra}", err=True)


@cli.command()
@policy_option
@click.option("--analyst", default=None, help="Analyst name from the policy (default: every analyst).")
@format_option
@run_guarded
def budget(policy_path: Path, analyst: str | None, fmt: str) -> None:
    """Show analysts' and tables' total, spent and remaining ε and δ (table caps cover every analyst
    query and DP publication on the table)."""
    from veil.store.catalog import table_budgets

    policy = load_policy(policy_path)
    names = [analyst] if analyst is not None else sorted(policy.analysts)
    people = []
    for name in names:
        with QuerySession(policy, name) as session:
            people.append(session.budget().to_dict())
    tables = table_budgets(policy)
    if fmt == "json":
        body = {**people[0], "tables": tables} if analyst is not None else {"analysts": people, "tables": tables}
        emit(None, fmt, json_data=body)
        return
    emit(people[0] if analyst is not None and fmt == "table" else people, fmt)
    if tables:
        click.echo("")
        emit(tables, fmt)
