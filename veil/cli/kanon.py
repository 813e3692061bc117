"""``veil publish kanon``, ``veil audit kanon``, ``veil audit utility`` (thin edges over the library)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from veil.cli._common import (
    audit,
    comma_list,
    emit,
    exit_if_interrupted,
    format_option,
    output_table_options,
    policy_option,
    publish,
    refuse_seed,
    refused_seed_option,
    run_guarded,
)
from veil.errors import InputError

__all__ = ["audit_kanon_command", "audit_utility_command", "publish_kanon_command"]

_ALGORITHMS = ["mondrian", "mondrian-relaxed", "oka", "kma", "kmember"]


def _neurons(text: str) -> tuple[int, int, int]:
    parts = text.split(":")
    try:
        values = [int(p) for p in parts]
    except ValueError:
        values = []
    if len(values) == 2:
        values.append(10)
    if len(values) != 3:
        raise InputError(f"--som-neurons must look like LOWER:UPPER[:STEP], got {text!r}", hint="e.g. 100:300:10")
    return values[0], values[1], values[2]


@publish.command("kanon")
@policy_option
@click.option("--table", required=True, help="Source table in the warehouse.")
@click.option(
    "--algorithm",
    type=click.Choice(_ALGORITHMS),
    default="kma",
    show_default=True,
    help="mondrian (strict), mondrian-relaxed, oka (one-pass k-means) or kma (K-Member; alias kmember).",
)
@click.option("--k", "k", type=click.IntRange(min=2), required=True, help="Smallest equivalence-class size.")
@click.option("--qi", required=True, help="Comma-separated quasi-identifiers (generalised).")
@click.option(
    "--sensitive",
    default="",
    help="Comma-separated sensitive columns (published unchanged, every class diverse: see --max-share).",
)
@click.option(
    "--hierarchies",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="Folder of ARX hierarchy files (leaf;parent;…;*); QIs without a file get a flat tree.",
)
@click.option("--som-columns", default="", help="Comma-separated numeric columns mapped to one SOM neuron column.")
@click.option("--som-label", default=None, help="Label the neuron count is chosen by (default: first --sensitive).")
@click.option(
    "--som-neurons",
    default="100:300:10",
    show_default=True,
    help="Neuron counts searched, LOWER:UPPER[:STEP] (the curator's bounds).",
)
@click.option("--som-epochs", type=click.IntRange(min=1), default=20, show_default=True, help="Batch-SOM epochs.")
@click.option(
    "--missing",
    type=click.Choice(["drop", "leaf"]),
    default="drop",
    show_default=True,
    help="drop: remove rows with missing values; leaf: missing categorical QI becomes leaf '?'.",
)
@click.option(
    "--mondrian-split",
    type=click.Choice(["gain", "median"]),
    default="gain",
    show_default=True,
    help="Mondrian cut rule: NCP gain (default) or the original widest-QI median.",
)
@click.option(
    "--max-share",
    type=float,
    default=None,
    help="With --sensitive (refused without): no value on more than this share of any class ((α,k)-anonymity; in "
    "(0, 0.9], default 0.9).",
)
@refused_seed_option
@output_table_options
@click.option(
    "--export",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also write the published table to this .csv or .parquet file (an existing file needs --replace).",
)
@format_option
@run_guarded
def publish_kanon_command(
    policy_path: Path,
    table: str,
    algorithm: str,
    k: int,
    qi: str,
    sensitive: str,
    hierarchies: Path | None,
    som_columns: str,
    som_label: str | None,
    som_neurons: str,
    som_epochs: int,
    missing: str,
    mondrian_split: str,
    max_share: float | None,
    seed: str | None,
    output: str,
    replace: bool,
    export: Path | None,
    fmt: str,
) -> None:
    """Publish a k-anonymous version of a table (audited independently before it is written)."""
    from veil.generators.kanon.publish import publish_kanon
    from veil.policy import load_policy

    refuse_seed(seed, "veil publish kanon")  # red team s66 F1
    policy = load_policy(policy_path)
    summary = publish_kanon(
        policy,
        table=table,
        output=output,
        algorithm=algorithm,
        k=k,
        qi=comma_list(qi),
        sensitive=comma_list(sensitive),
        hierarchies=hierarchies,
        som_columns=comma_list(som_columns),
        som_label=som_label,
        som_neurons=_neurons(som_neurons),
        som_epochs=som_epochs,
        missing=missing,
        split=mondrian_split,
        max_share=max_share,
        replace=replace,
        export=export,
    )
    headline = {key: summary[key] for key in ("table", "k", "ncp_percent", "min_class_size", "seconds")}
    emit(summary, fmt, json_data=headline)
    exit_if_interrupted(bool(summary.get("interrupted")), summary.get("release_id"))


@audit.command("kanon")
@policy_option
@click.option("--table", required=True, help="Published table to audit.")
@click.option("--qi", default=None, help="Quasi-identifiers (default: those recorded with the publication).")
@click.option("--sensitive", default=None, help="Sensitive columns (default: those recorded with the publication).")
@click.option(
    "--hierarchies",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="Hierarchy folder used to publish (default: the recorded one).",
)
@click.option(
    "--population",
    default=None,
    help="Table of the population for journalist/marketer risk (default: the recorded source table).",
)
@click.option("--no-population", is_flag=True, default=False, help="Use the published table as the population.")
@click.option(
    "--extra-qi", default=None, help="Also report k with these columns added to the QIs (default: som_neuron if present)."
)
@click.option(
    "--k", "k", type=click.IntRange(min=1), default=None, help="Required k: exit with status 1 if the table is not k-anonymous."
)
@click.option(
    "--risk-threshold",
    type=click.FloatRange(0, 1),
    default=0.2,
    show_default=True,
    help="Records whose prosecutor risk exceeds this count as at risk.",
)
@format_option
@run_guarded
def audit_kanon_command(
    policy_path: Path,
    table: str,
    qi: str | None,
    sensitive: str | None,
    hierarchies: Path | None,
    population: str | None,
    no_population: bool,
    extra_qi: str | None,
    k: int | None,
    risk_threshold: float,
    fmt: str,
) -> None:
    """Verify a published table: k, ℓ-diversity, t-closeness, NCP/GCP, class sizes, re-identification risk."""
    from veil.auditor.anonymity import audit_anonymity
    from veil.generators.kanon import SOM_COLUMN
    from veil.generators.kanon.publish import kanon_params_from_release
    from veil.policy import load_policy
    from veil.store.warehouse import read_table

    policy = load_policy(policy_path)
    recorded = kanon_params_from_release(policy, table) or {}
    qi_cols = comma_list(qi) or list(recorded.get("qi") or [])
    if not qi_cols:
        raise InputError(f"no quasi-identifiers for {table!r}", hint="Pass --qi (no k-anonymity release records them)")
    sa_cols = comma_list(sensitive) if sensitive is not None else list(recorded.get("sensitive") or [])
    hier = hierarchies if hierarchies is not None else recorded.get("hierarchy_dir")
    published = read_table(policy, table)
    extra = comma_list(extra_qi) if extra_qi is not None else ([SOM_COLUMN] if SOM_COLUMN in published.columns else [])
    pop_name = None if no_population else (population or recorded.get("source_table"))
    pop = read_table(policy, pop_name, qi_cols) if pop_name else None
    report = audit_anonymity(
        published,
        qi_cols,
        sensitive=sa_cols,
        hierarchies=hier,
        population=pop,  # the audit applies the recorded missing-value policy to it
        missing=str(recorded.get("missing") or "drop"),
        population_name=f"table {pop_name!r}" if pop_name else "",
        extra_qi=extra,
        risk_threshold=risk_threshold,
    )
    emit(report.summary(), fmt, json_data=report.as_dict())
    if k is not None and report.k < k:
        click.echo(f"NOT {k}-anonymous: smallest class has {report.k} rows", err=True)
        sys.exit(1)


@audit.command("utility")
@policy_option
@click.option("--table", required=True, help="Table to evaluate (published or original).")
@click.option("--label", required=True, help="Binary label to predict (e.g. income).")
@click.option("--features", default=None, help="Comma-separated feature columns (default: every other column).")
@click.option("--positive", default=None, help="Positive label value (default: the rarer one).")
@click.option("--baseline", default=None, help="Also evaluate this table (e.g. the original) for comparison.")
@click.option("--baseline-features", default=None, help="Feature columns of --baseline (default: same as --features).")
@click.option(
    "--models",
    default=",".join(["naive_bayes", "logistic_regression", "decision_tree", "random_forest", "gradient_boosting", "mlp"]),
    show_default=True,
    help="Comma-separated models.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the 60/20/20 split and the models.")
@format_option
@run_guarded
def audit_utility_command(
    policy_path: Path,
    table: str,
    label: str,
    features: str | None,
    positive: str | None,
    baseline: str | None,
    baseline_features: str | None,
    models: str,
    seed: int,
    fmt: str,
) -> None:
    """Income-prediction utility: accuracy, precision, recall, F1 of six models on a 60/20/20 split."""
    import pandas as pd

    from veil.auditor.utility import utility_report
    from veil.policy import load_policy
    from veil.store.warehouse import read_table

    policy = load_policy(policy_path)
    model_list = comma_list(models)
    runs = [(table, comma_list(features) or None)]
    if baseline:
        runs.append((baseline, comma_list(baseline_features) or comma_list(features) or None))
    frames = []
    for name, feats in runs:
        df = read_table(policy, name)
        rep = utility_report(df, label=label, features=feats, positive=positive, models=model_list, seed=seed)
        rep.insert(0, "table", name)
        frames.append(rep)
    emit(pd.concat(frames, ignore_index=True), fmt)
