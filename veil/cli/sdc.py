"""``veil publish sdc`` and ``veil compare``: thin edges over :mod:`veil.generators.sdc`.

See docs/sdc.md for the methods, their parameters and what guarantee each gives.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from veil.cli._common import cli, emit, format_option, policy_option, publish, publish_and_report, run_guarded
from veil.errors import InputError

__all__ = ["compare_command", "publish_sdc_command"]


def _split(value: str | None) -> list[str]:
    return [c.strip() for c in value.split(",") if c.strip()] if value else []


def _context(policy: Any, table: str, columns: list[str], target: str | None, seed: int | None, df: Any) -> Any:
    from veil.generators.plugins.sdc import context

    return context(policy, table, columns, target, seed, df.columns)


@publish.command("sdc")
@policy_option
@click.option("--table", required=True, help="Source table.")
@click.option(
    "--method",
    required=True,
    help="Sanitiser: noise_addition, microagg_mdav, microagg_dbscan, rank_swapping, dp_microagg_laplace, "
    "dp_microagg_exponential, gan, ml_copy (docs/sdc.md).",
)
@click.option("--param", "params", multiple=True, metavar="NAME=VALUE", help="Method parameter (repeatable).")
@click.option("--columns", required=True, help="Comma-separated numeric columns to protect.")
@click.option("--target", default=None, help="Label column: copied, synthesised or used for training (and for DR).")
@click.option("--output", required=True, help="Name of the published table.")
@click.option("--replace", is_flag=True, help="Replace the output table if it exists.")
@click.option("--seed", type=int, default=None, help="Seed for non-DP randomness (SDC noise, clustering, training).")
@format_option
@run_guarded
def publish_sdc_command(
    policy_path: Path,
    table: str,
    method: str,
    params: tuple[str, ...],
    columns: str,
    target: str | None,
    output: str,
    replace: bool,
    seed: int | None,
    fmt: str,
) -> None:
    """Publish TABLE's COLUMNS sanitised with METHOD as a new public table, with a release record.

    Only the columns the method protects are published (a row-aligned filter's label column is not);
    rows are shuffled, values clamped to the policy's bounds, and the release gate checks the result.
    """
    from veil.policy import load_policy

    request = {
        "table": table,
        "method": method,
        "params": list(params),
        "columns": _split(columns),
        "target": target,
        "output": output,
        "replace": replace,
        "seed": seed,
    }
    publish_and_report(load_policy(policy_path), "sdc", request, fmt)


def _compact(params: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in params.items())


@cli.command("compare")
@policy_option
@click.option("--table", required=True, help="Source table.")
@click.option("--columns", required=True, help="Comma-separated numeric columns to protect.")
@click.option("--target", required=True, help="Label column for the disclosure-risk model (and ML copies).")
@click.option(
    "--methods",
    default="all",
    show_default=True,
    help="Comma-separated sanitisers, or 'all' (every registered SDC-family method).",
)
@click.option(
    "--param",
    "params",
    multiple=True,
    metavar="METHOD.NAME=VALUE",
    help="Fix a parameter of one method for the whole sweep, e.g. gan.epochs=300 (repeatable).",
)
@click.option(
    "--plot",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write a PNG scatter of IL vs DR coloured by method, Pareto front marked.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for non-DP randomness.")
@format_option
@run_guarded
def compare_command(
    policy_path: Path,
    table: str,
    columns: str,
    target: str,
    methods: str,
    params: tuple[str, ...],
    plot: Path | None,
    seed: int,
    fmt: str,
) -> None:
    """Sweep each sanitiser's default grid on TABLE; print IL, DR, linkage risk, seconds and the Pareto front."""
    from veil.generators.base import generator_names, get_generator, parse_param_args
    from veil.generators.sdc import compare_methods, plot_tradeoff
    from veil.policy import load_policy
    from veil.store.warehouse import read_table

    policy = load_policy(policy_path)
    names = generator_names(lambda c: c.family == "sdc") if methods.strip().lower() == "all" else _split(methods)
    for n in names:
        get_generator(n)  # unknown names fail before anything runs
    fixed: dict[str, dict[str, Any]] = {}
    for item in params:
        head, sep, rest = item.partition(".")
        if not sep or "=" not in rest:
            raise InputError(f"--param must look like method.name=value, got {item!r}")
        cls = get_generator(head)
        fixed.setdefault(cls.name, {}).update(parse_param_args(cls, [rest]))
    df = read_table(policy, table)
    ctx = _context(policy, table, _split(columns), target, seed, df)
    rows = compare_methods(df, ctx, names, fixed=fixed, seed=seed)
    if plot is not None:
        plot_tradeoff(rows, plot)
    if fmt == "json":
        keys = ("method", "params", "il", "il_mean", "dr", "linkage_risk", "seconds", "epsilon", "pareto")
        emit([{k: r.get(k) for k in keys} for r in rows], fmt)
        return
    shown = [
        {
            "method": r["method"],
            "params": _compact(r["params"]),
            "il": r["il"],
            "il_mean": r["il_mean"],
            "dr": r["dr"],
            "linkage_risk": r["linkage_risk"],
            "seconds": r["seconds"],
            "pareto": "*" if r["pareto"] else "",
            **({"error": r["error"]} if "error" in r else {}),
        }
        for r in rows
    ]
    emit(shown, fmt)
