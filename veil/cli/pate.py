"""``veil publish pate`` and ``veil audit pate`` (thin edges over veil.generators.pate / veil.auditor.pate_privacy)."""

from __future__ import annotations

from pathlib import Path

import click

from veil.cli._common import audit, comma_list, emit, format_option, policy_option, publish, publish_and_report, run_guarded
from veil.errors import InputError

__all__ = ["audit_pate_command", "publish_pate_command"]

_POS = click.FloatRange(min=0, min_open=True)
_DELTA = click.FloatRange(min=0, max=1, min_open=True, max_open=True)


@publish.command("pate")
@policy_option
@click.option("--table", required=True, help="Private table the teachers learn from (curator A).")
@click.option("--label", required=True, help="Label column; its declared values are the classes (2nd = positive).")
@click.option(
    "--features", default=None, help="Comma-separated feature columns (default: every column with declared bounds or values)."
)
@click.option(
    "--teachers",
    type=click.IntRange(min=1),
    default=250,
    show_default=True,
    help="Number of teachers, each trained on a disjoint shard.",
)
@click.option("--gamma", type=_POS, default=0.05, show_default=True, help="Aggregation noise Lap(1/γ).")
@click.option(
    "--queries", type=click.IntRange(min=2), default=1000, show_default=True, help="Student records sent to the ensemble (T)."
)
@click.option("--student-rho", type=_POS, default=None, help="Curator B's local noise Lap(1/ρ) on each encoded student feature.")
@click.option(
    "--no-student-noise",
    is_flag=True,
    default=False,
    help="Send the student's records without local noise (no guarantee for the student: only with --student-table).",
)
@click.option(
    "--ldp-encoding",
    type=click.Choice(["box", "l1"]),
    default="box",
    show_default=True,
    help="box: noise each [0,1]-scaled feature; l1: L1-normalise each record first (paper's 2ρ-LDP).",
)
@click.option(
    "--delta", type=_DELTA, default=1e-5, show_default=True, help="δ of the (ε, δ) guarantee (the gate refuses δ above 1e-5)."
)
@click.option("--student-table", default=None, help="Public table of student records (default: hold rows out of --table).")
@click.option(
    "--student-share",
    type=float,
    default=None,
    help="Without --student-table: share of --table's people held out for the student, each by a keyed hash of "
    "their own row [default: 0.1].",
)
@click.option(
    "--validation",
    type=click.IntRange(min=0),
    default=1000,
    show_default=True,
    help="Labelled student rows kept for validation metrics.",
)
@click.option(
    "--student-hidden",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Hidden units of the student (0 = logistic regression).",
)
@click.option(
    "--threshold",
    type=click.Choice(["roc", "argmax"]),
    default="roc",
    show_default=True,
    help="Binary labels: pick the decision threshold on the ROC curve (max TPR−FPR).",
)
@click.option(
    "--seed",
    type=int,
    default=0,
    show_default=True,
    help="Seed of non-private randomness (shards, sampling, student init); DP noise uses the OS CSPRNG.",
)
@click.option(
    "--output-model",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Where to save the student (torch state dict) and its JSON sidecar (<path>.json).",
)
@click.option(
    "--save-votes",
    default=None,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also save the private teacher vote counts (.npy, curator only) for `veil audit pate --votes`.",
)
@format_option
@run_guarded
def publish_pate_command(
    policy_path: Path,
    table: str,
    label: str,
    features: str | None,
    teachers: int,
    gamma: float,
    queries: int,
    student_rho: float | None,
    no_student_noise: bool,
    ldp_encoding: str,
    delta: float,
    student_table: str | None,
    student_share: float | None,
    validation: int,
    student_hidden: int,
    threshold: str,
    seed: int,
    output_model: Path,
    save_votes: Path | None,
    fmt: str,
) -> None:
    """Publish a student model trained by PATE from a private table (charged to the ledger as (ε, δ))."""
    from veil.generators.pate import DEFAULT_STUDENT_SHARE, PateConfig
    from veil.policy import load_policy

    if student_share is not None and student_table is not None:
        raise InputError(
            f"--student-share {student_share:g} holds people out of --table, but --student-table {student_table!r} "
            "gives the student's records",
            hint="Pass one of --student-share and --student-table",
        )
    if (student_rho is None) == (not no_student_noise):
        raise InputError("choose the student's local noise", hint="Pass --student-rho RHO, or --no-student-noise")
    config = PateConfig(
        teachers=teachers,
        gamma=gamma,
        queries=queries,
        rho=student_rho,
        ldp_encoding=ldp_encoding,  # type: ignore[arg-type]
        delta=delta,
        student_hidden=student_hidden,
        threshold=threshold,  # type: ignore[arg-type]
        seed=seed,
        student_share=DEFAULT_STUDENT_SHARE if student_share is None else student_share,
    )
    request = {
        "table": table,
        "label": label,
        "features": comma_list(features) if features else None,
        "config": config,
        "student_table": student_table,
        "validation": validation,
        "save_votes": save_votes,
        "output_model": output_model,
    }
    publish_and_report(load_policy(policy_path), "pate", request, fmt)
    click.echo(
        f"load it with: from veil.generators.pate import load_student; model = load_student({str(output_model)!r})", err=True
    )


@audit.command("pate")
@click.option("--gamma", type=_POS, required=True, help="Aggregation noise parameter γ (noise Lap(1/γ)).")
@click.option("--queries", type=click.IntRange(min=1), default=None, help="Answered student queries T.")
@click.option("--delta", type=_DELTA, required=True, help="δ of the (ε, δ) guarantee.")
@click.option(
    "--votes",
    default=None,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Teacher vote counts (.npy or .csv, one row per query) for the data-dependent ε.",
)
@click.option(
    "--orders",
    type=click.IntRange(min=1),
    default=8,
    show_default=True,
    help="Moments accountant orders λ = 1..N for the data-dependent bound.",
)
@format_option
@run_guarded
def audit_pate_command(gamma: float, queries: int | None, delta: float, votes: Path | None, orders: int, fmt: str) -> None:
    """Privacy loss of a PATE release: data-independent ε (Eq. 12) and, with --votes, data-dependent ε."""
    from veil.auditor.pate_privacy import audit_pate, load_votes

    counts = load_votes(votes) if votes is not None else None
    report = audit_pate(gamma=gamma, queries=queries, delta=delta, votes=counts, orders=range(1, orders + 1))
    if fmt == "json":
        emit(report.to_dict(), fmt)
        return
    emit(list(report.rows), fmt)
    if report.votes is not None and fmt == "table":
        stats = {k: v for k, v in report.votes.items() if k != "log_moments"}
        click.echo("")
        emit(stats, fmt)
