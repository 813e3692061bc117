"""``veil publish sdc`` and ``veil compare``: thin edges over :mod:`veil.generators.sdc`.

See docs/sdc.md for the methods, their parameters and what guarantee each gives.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from veil.cli._common import (
    cli,
    comma_list,
    emit,
    format_option,
    policy_option,
    publish,
    publish_and_report,
    refuse_seed,
    refused_seed_option,
    run_guarded,
)
from veil.errors import InputError

__all__ = ["compare_command", "publish_sdc_command"]


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
@refused_seed_option
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
    seed: str | None,
    fmt: str,
) -> None:
    """Publish TABLE's COLUMNS sanitised with METHOD as a new public table, with a release record.

    Only the columns the method protects are published (a row-aligned filter's label column is not);
    rows are shuffled, values clamped to the policy's bounds, and the release gate checks the result.
    """
    from veil.policy import load_policy

    refuse_seed(seed, "veil publish sdc")  # red team s66 F1
    request = {
        "table": table,
        "method": method,
        "params": list(params),
        "columns": comma_list(columns),
        "target": target,
        "output": output,
        "replace": replace,
    }
    publish_and_report(load_policy(policy_path), "sdc", request, fmt)


def _compact(params: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in params.items())


PLOT_FORMATS = (".png", ".pdf", ".svg")


def _check_plot_path(path: Path, replace: bool) -> None:
    """``--plot`` must name a known image format and, without ``--replace``, no existing file."""
    if path.suffix.lower() not in PLOT_FORMATS:
        raise InputError(
            f"--plot {str(path)!r} has the extension {path.suffix or '(none)'!r}, not an image format Veil writes",
            hint=f"Use one of {', '.join(PLOT_FORMATS)}",
        )
    if path.exists() and not replace:
        raise InputError(
            f"--plot {str(path)!r} already exists; compare never overwrites a file",
            hint="Pass --replace to overwrite it, or choose another path",
        )


@cli.command("compare")
@policy_option
@click.option(
    "--kind",
    default="sdc",
    show_default=True,
    help="Publication kind to sweep: sdc (every SDC-family method), krr (ε), kanon (k), synth (λ).",
)
@click.option("--table", required=True, help="Source table.")
@click.option("--columns", required=True, help="Columns to protect (sdc: numeric; krr: randomised; kanon: QIs; synth: implicit).")
@click.option("--target", default=None, help="Label column (sdc: disclosure-risk model and ML copies; synth: the label).")
@click.option("--sensitive", default=None, help="kanon: sensitive columns; synth: the sensitive attribute.")
@click.option(
    "--sweep", "sweep_values", default=None, help="Values of the kind's swept parameter, e.g. 0.5,1,2 (krr/kanon/synth)."
)
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
    help="Fix a parameter of one method for the whole sweep, e.g. gan.epochs=300 (repeatable); for krr, kanon and "
    "synth: NAME=VALUE of the publication, e.g. algorithm=mondrian or epochs=5.",
)
@click.option(
    "--plot",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write a scatter of IL vs DR coloured by method, Pareto front marked (.png, .pdf or .svg; an existing file "
    "needs --replace).",
)
@click.option("--replace", "replace_plot", is_flag=True, default=False, help="Replace an existing --plot file.")
@click.option(
    "--seed",
    type=int,
    default=0,
    show_default=True,
    help="Seed of the curator-only metrics (IL/DR pairing, classifier); the methods draw fresh randomness.",
)
@format_option
@run_guarded
def compare_command(
    policy_path: Path,
    kind: str,
    table: str,
    columns: str,
    target: str | None,
    sensitive: str | None,
    sweep_values: str | None,
    methods: str,
    params: tuple[str, ...],
    plot: Path | None,
    replace_plot: bool,
    seed: int,
    fmt: str,
) -> None:
    """Sweep publications on TABLE without writing anything. ``--kind sdc``: each sanitiser's default grid
    with IL, DR, linkage risk, seconds and the Pareto front; other kinds: the kind's parameter, each point
    run through the same sanitise → gate path as `veil publish` (verdict, DCR, groups, ℓ-diversity)."""
    from veil.generators.base import generator_names, get_generator, parse_param_args
    from veil.generators.sdc import compare_methods, plot_tradeoff
    from veil.policy import load_policy
    from veil.store.warehouse import read_table

    if plot is not None:
        _check_plot_path(plot, replace_plot)
    policy = load_policy(policy_path)
    if kind != "sdc":
        _compare_kind(policy, kind, table, comma_list(columns), target, sensitive, sweep_values, params, seed, fmt)
        return
    if target is None:
        raise InputError("--kind sdc needs --target (the label of the disclosure-risk model)", hint="Pass --target <column>")
    names = generator_names(lambda c: c.family == "sdc") if methods.strip().lower() == "all" else comma_list(methods)
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
    ctx = _context(policy, table, comma_list(columns), target, seed, df)
    rows = compare_methods(df, ctx, names, fixed=fixed, seed=seed)
    if plot is not None:
        _check_plot_path(plot, replace_plot)  # again: the sweep took a while
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


def _value(text: str) -> Any:
    import json

    try:
        return json.loads(text)
    except ValueError:
        return text


def _compare_kind(
    policy: Any,
    kind: str,
    table: str,
    columns: list[str],
    target: str | None,
    sensitive: str | None,
    sweep_values: str | None,
    params: tuple[str, ...],
    seed: int,
    fmt: str,
) -> None:
    from veil.generators.registry import get_plugin
    from veil.generators.transaction import evaluate

    plugin = get_plugin(kind)
    base: dict[str, Any] = {"table": table, "output": "_veil_compare", "seed": seed}
    if kind == "krr":
        base["columns"] = columns
    elif kind == "kanon":
        base.update(qi=columns, sensitive=comma_list(sensitive))
    elif kind == "synth":
        if not sensitive:
            raise InputError("--kind synth needs --sensitive", hint="Pass the sensitive attribute, e.g. --sensitive sex")
        base.update(columns=columns, sensitive=sensitive, label=target)
    else:
        raise InputError(f"veil compare cannot sweep kind {kind!r}", hint="Use sdc, krr, kanon or synth")
    for item in params:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InputError(f"--param must look like name=value, got {item!r}")
        base[key.strip()] = _value(value.strip())
    values = tuple(_value(v) for v in comma_list(sweep_values))
    rows = [{plugin.sweep_param: r[plugin.sweep_param], **evaluate(policy, kind, r)} for r in plugin.sweep(base, values)]
    keys = [plugin.sweep_param, "method", "gate", "rows", "dp_epsilon", "min_group", "l_diversity", "dcr_share", "seconds"]
    extra = {"krr": ["keep_probability"], "kanon": ["ncp_percent"], "synth": ["sensitive_accuracy_after"]}[kind]
    emit([{k: r.get(k) for k in [*keys, *extra]} for r in rows], fmt)
