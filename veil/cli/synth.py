"""``veil audit implicit``, ``veil publish synth`` and ``veil publish krr``.

Thin edges over :mod:`veil.auditor.implicit`, :mod:`veil.generators.imposter` and
:mod:`veil.generators.krr`; see docs/imposter.md.
"""

from __future__ import annotations

from pathlib import Path

import click

from veil.cli._common import (
    audit,
    comma_list,
    emit,
    format_option,
    output_table_options,
    policy_option,
    publish,
    publish_and_report,
    refuse_seed,
    refused_seed_option,
    run_guarded,
)
from veil.generators._threads import MAX_THREADS

__all__ = ["audit_implicit_command", "publish_krr_command", "publish_synth_command"]

_UNIT = click.FloatRange(min=0, max=1)


@audit.command("implicit")
@policy_option
@click.option("--table", required=True, help="Table to audit.")
@click.option("--sensitive", required=True, help="The explicit privacy attribute s (e.g. sex).")
@click.option(
    "--theta",
    type=_UNIT,
    default=0.01,
    show_default=True,
    help="NMI threshold θ: attributes with NMI ≥ θ form the candidate set.",
)
@click.option(
    "--beta",
    type=_UNIT,
    default=0.7,
    show_default=True,
    help="Classifier threshold β: the candidates are implicit attributes if τ ≥ β.",
)
@click.option(
    "--metric",
    type=click.Choice(["accuracy", "f1"]),
    default="accuracy",
    show_default=True,
    help="τ: accuracy or macro F1 of the classifier predicting s from the candidates.",
)
@click.option(
    "--normalisation",
    type=click.Choice(["joint", "geometric", "arithmetic", "min", "max"]),
    default="joint",
    show_default=True,
    help="NMI similarity: joint = I/H(x,s) (1 − paper Eq. 7), geometric = I/sqrt(H(x)H(s)), …",
)
@click.option(
    "--bins",
    type=click.IntRange(min=2),
    default=10,
    show_default=True,
    help="Equal-frequency bins for numeric columns with more distinct values than this.",
)
@click.option("--exclude", default=None, help="Comma-separated columns not to score (e.g. the class label).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the classifier's train/test split.")
@click.option(
    "--plot",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also write a bar chart of the NMI scores (PNG).",
)
@format_option
@run_guarded
def audit_implicit_command(
    policy_path: Path,
    table: str,
    sensitive: str,
    theta: float,
    beta: float,
    metric: str,
    normalisation: str,
    bins: int,
    exclude: str | None,
    seed: int,
    plot: Path | None,
    fmt: str,
) -> None:
    """Find the implicit-privacy attributes of SENSITIVE (NMI ≥ θ, then a classifier check τ ≥ β)."""
    from veil.auditor.implicit import detect_implicit, plot_report
    from veil.policy import load_policy
    from veil.store.warehouse import read_table

    df = read_table(load_policy(policy_path), table)
    rep = detect_implicit(
        df,
        sensitive,
        theta=theta,
        beta=beta,
        metric=metric,
        normalisation=normalisation,
        bins=bins,
        exclude=comma_list(exclude),
        seed=seed,
    )
    if plot is not None:
        plot_report(rep, plot)
    if fmt == "json":
        emit(rep.to_dict(), fmt)
        return
    emit(rep.to_frame(), fmt)
    if fmt == "table":
        d = rep.to_dict()
        tau = "n/a (no candidates)" if rep.tau is None else f"{rep.tau:.4f}"
        click.echo(f"\nNMI = {d['normalisation_formula']}; candidates (NMI ≥ {theta:g}): {', '.join(rep.candidates) or 'none'}")
        if rep.accuracy is not None and rep.f1 is not None:
            click.echo(
                f"classifier {metric} τ = {tau} (accuracy {rep.accuracy:.4f}, macro F1 {rep.f1:.4f}, "
                f"majority rate {rep.majority_rate:.4f}, {rep.test_rows} held-out rows) vs β = {beta:g}"
            )
        else:
            click.echo(f"classifier τ = {tau} vs β = {beta:g}")
        click.echo(f"implicit-privacy attributes: {', '.join(rep.implicit) or 'none'}")


@publish.command("synth")
@policy_option
@click.option("--table", required=True, help="Source table.")
@click.option(
    "--method",
    type=click.Choice(["imposter", "gan"]),
    default="imposter",
    show_default=True,
    help="imposter: VAE + CGAN + D2; gan: the same model with λ = 0 (no D2 pressure).",
)
@click.option("--sensitive", required=True, help="The explicit privacy attribute s (condition of G, target of D2).")
@click.option("--label", default=None, help="Class label to keep real and condition G on (e.g. income).")
@click.option(
    "--lambda",
    "lam",
    type=click.FloatRange(min=0),
    default=None,
    help="Weight λ of D2's game (default 1.0 for imposter; gan forces 0).",
)
@click.option("--epochs", type=click.IntRange(min=1), default=30, show_default=True, help="Training epochs.")
@click.option("--batch-size", type=click.IntRange(min=2), default=500, show_default=True)
@click.option(
    "--theta", type=_UNIT, default=0.01, show_default=True, help="Detection threshold θ (reported, never decides columns)."
)
@click.option(
    "--beta", type=_UNIT, default=0.7, show_default=True, help="Detection threshold β (reported, never decides columns)."
)
@click.option(
    "--columns",
    default=None,
    help="Comma-separated implicit attributes to regenerate (default: every declared column with a domain; "
    "θ/β detection is only reported, see `veil audit implicit`).",
)
@click.option(
    "--rows",
    type=click.IntRange(min=1),
    default=None,
    help="Rows of the synthetic table (public; default 10,000, never the source's size).",
)
@refused_seed_option
@output_table_options
@click.option(
    "--threads",
    type=click.IntRange(min=1, max=MAX_THREADS),
    default=None,
    help="torch CPU threads for training (default: torch's own choice). Use 1 on a shared host.",
)
@format_option
@run_guarded
def publish_synth_command(
    policy_path: Path,
    table: str,
    method: str,
    sensitive: str,
    label: str | None,
    lam: float | None,
    epochs: int,
    batch_size: int,
    theta: float,
    beta: float,
    columns: str | None,
    rows: int | None,
    seed: str | None,
    output: str,
    replace: bool,
    threads: int | None,
    fmt: str,
) -> None:
    """Publish a synthetic table: the implicit attributes of SENSITIVE generated by IMPOSTER (or the λ = 0
    GAN ablation), the sensitive column and label drawn uniformly over their declared values; other columns
    dropped. Every published column needs a declared domain in the policy (values, or lower/upper)."""
    refuse_seed(seed, "veil publish synth")  # red team s66 F1
    if threads is not None:  # the CLI edge may set it; library code never does
        import torch
        from threadpoolctl import threadpool_limits

        torch.set_num_threads(threads)
        threadpool_limits(threads)  # OpenMP/BLAS pools of the scikit-learn classifier checks
    from veil.errors import InputError
    from veil.policy import load_policy

    if method == "gan" and lam not in (None, 0.0):
        raise InputError(
            f"--method gan is IMPOSTER with λ = 0; got --lambda {lam}", hint="Drop --lambda, or use --method imposter"
        )
    request = {
        "table": table,
        "method": method,
        "sensitive": sensitive,
        "label": label,
        "lam": 0.0 if method == "gan" else (1.0 if lam is None else lam),
        "epochs": epochs,
        "batch_size": batch_size,
        "theta": theta,
        "beta": beta,
        "columns": comma_list(columns),
        "rows": rows,
        "output": output,
        "replace": replace,
    }
    publish_and_report(load_policy(policy_path), "synth", request, fmt)


@publish.command("krr")
@policy_option
@click.option("--table", required=True, help="Source table.")
@click.option("--columns", required=True, help="Comma-separated columns to perturb (e.g. the implicit attributes).")
@click.option(
    "--epsilon",
    type=click.FloatRange(min=0, min_open=True),
    required=True,
    help="ε per attribute; the release records the row total (ε × number of columns).",
)
@output_table_options
@format_option
@run_guarded
def publish_krr_command(
    policy_path: Path, table: str, columns: str, epsilon: float, output: str, replace: bool, fmt: str
) -> None:
    """Publish COLUMNS of TABLE with k-ary randomised response (the IMPOSTER paper's baseline).

    Only the randomised columns are published (rows shuffled); ε × columns is charged to the table's budget.
    """
    from veil.policy import load_policy

    request = {"table": table, "columns": comma_list(columns), "epsilon": epsilon, "output": output, "replace": replace}
    publish_and_report(load_policy(policy_path), "krr", request, fmt)
