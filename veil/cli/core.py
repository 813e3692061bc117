"""Curator basics: ``veil ingest``, ``veil demo``, ``veil releases``."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import click
import pandas as pd

from veil._json import to_jsonable
from veil.cli._common import cli, emit, format_option, policy_option, run_guarded
from veil.policy import load_policy
from veil.store.publications import get_release, list_releases
from veil.store.warehouse import ingest_file


@cli.command()
@policy_option
@click.option("--table", required=True, help="Name of the warehouse table to create or replace.")
@click.argument("source", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--replace", is_flag=True, default=False, help="Replace the table if it exists (never a published table).")
@format_option
@run_guarded
def ingest(policy_path: Path, table: str, source: Path, replace: bool, fmt: str) -> None:
    """Load a CSV/Parquet file into the policy's DuckDB warehouse (column names normalised)."""
    policy = load_policy(policy_path)
    summary = ingest_file(policy, table, source, replace=replace)
    emit(summary, fmt)
    missing = summary["missing_policy_columns"]
    if isinstance(missing, list) and missing:
        click.echo(f"warning: policy columns not in the file: {', '.join(map(str, missing))}", err=True)
    spec = policy.tables.get(table)
    if spec is not None and not spec.public and importlib.util.find_spec("veil.proxy.bounding") is not None:
        # the bounded copy is built here, on the curator's side, so no analyst's first query spends the time
        from veil.proxy.bounding import prepare

        for name, problem in prepare(policy, [table]).items():
            click.echo(f"warning: the bounded copy of {name!r} was not built: {problem}", err=True)


@cli.command()
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("demo"),
    show_default=True,
    help="Folder for the demo warehouse, ledger and policy.",
)
@click.option("--rows", type=click.IntRange(min=100), default=100_000, show_default=True, help="People to generate.")
@click.option("--analyst", default="alice", show_default=True)
@format_option
@run_guarded
def demo(directory: Path, rows: int, analyst: str, fmt: str) -> None:
    """Build a demo warehouse + policy from the built-in generator and run example queries."""
    from veil.demo import DEMO_QUERIES, build_demo

    policy = build_demo(directory, n_people=rows)
    click.echo(f"demo warehouse and policy written to {policy.path}", err=True)
    if importlib.util.find_spec("veil.connection") is None:
        click.echo("(the analyst query path is not installed in this build)", err=True)
        return
    import veil

    with veil.connect(policy.path, analyst=analyst) as db:
        for title, sql in DEMO_QUERIES:
            click.echo(f"\n-- {title}\n{sql}")
            df = db.sql(sql)
            emit(_with_ci_columns(df), fmt)
            click.echo(f"ε charged {float(df.attrs['epsilon_charged']):g}, remaining {float(df.attrs['epsilon_remaining']):g}")


def _with_ci_columns(df: pd.DataFrame) -> pd.DataFrame:
    """The answer with a ``<col>_ci95`` column (95% CI half-width) after each noisy column."""
    ci = df.attrs.get("ci95")
    if not isinstance(ci, pd.DataFrame):
        return df
    out = pd.DataFrame(index=df.index)
    for col in df.columns:
        out[col] = df[col]
        if col in ci.columns and ci[col].notna().any():
            out[f"{col}_ci95"] = ci[col].to_numpy()
    return out


@cli.command()
@policy_option
@click.option("--kind", type=click.Choice(["query", "publication", "retraction"]), default=None)
@click.option("--show", "show", default=None, metavar="ID", help="Print one release's full record (JSON).")
@format_option
@run_guarded
def releases(policy_path: Path, kind: str | None, show: str | None, fmt: str) -> None:
    """List the release log (queries answered, tables published and retracted), or --show one release."""
    policy = load_policy(policy_path)
    if show is not None:
        import dataclasses

        rel = get_release(policy, show)
        body = dataclasses.asdict(rel)
        for key in ("epsilon", "delta"):
            body[key] = None if body[key] is None else float(body[key])
        # the record as logged: an answer cell or group key of ±inf/NaN is shown as PostgreSQL's to_json spells it,
        # not as null (which is also what a NULL group is shown as)
        emit(body, "json", json_data=to_jsonable(body, nonfinite_as_text=True))
        return
    rows = [
        {
            "id": r.id,
            "kind": r.kind,
            "method": r.method,
            "actor": r.actor,
            "created_at": r.created_at,
            "table": r.table,
            "epsilon": None if r.epsilon is None else float(r.epsilon),
            "delta": r.delta,
            "sql": r.canonical_sql,
        }
        for r in list_releases(policy, kind)
    ]
    emit(rows, fmt)
