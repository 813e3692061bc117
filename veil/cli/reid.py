"""``veil audit reid``: re-identification audit of a released class mean (thin edge over veil.auditor.reid)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click
import numpy as np

from veil.cli._common import audit, comma_list, emit, format_option, run_guarded
from veil.errors import InputError

ATTACKS = ("growpu", "nnpu", "upu", "kmeans", "floor")


def _int_list(text: str | None) -> tuple[int, ...] | None:
    if not text:
        return None
    try:
        return tuple(int(t) for t in text.split(","))
    except ValueError as exc:
        raise InputError(f"--hidden must be comma-separated integers, got {text!r}", hint="e.g. --hidden 300,300") from exc


@audit.command("reid")
@click.option(
    "--data",
    "data_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Records the attacker sees (.npy, .csv, .parquet; text columns are one-hot encoded).",
)
@click.option(
    "--mean",
    "mean_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="The released class mean (.npy, .csv, .json), one value per feature.",
)
@click.option(
    "--prior",
    type=click.FloatRange(0, 1, min_open=True, max_open=True),
    help="Share of records in the class (from the release's count if omitted there).",
)
@click.option(
    "--method",
    type=click.Choice([*ATTACKS, "oracle", "all"]),
    default="growpu",
    show_default=True,
    help="Attack; 'all' runs every attack (plus the oracle when --truth is known).",
)
@click.option("--classifier", type=click.Choice(["linear", "3lp", "mlp"]), default="linear", show_default=True)
@click.option("--hidden", help="Hidden layer sizes for --classifier mlp, e.g. 300,300.")
@click.option(
    "--truth",
    "truth_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="True membership (1/0 per record) to score the attack.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="First training seed.")
@click.option(
    "--seeds",
    "n_seeds",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Number of seeds (seed, seed+1, ...); with 2 or more the cross-seed stability is reported.",
)
@click.option(
    "--loss",
    type=click.Choice(["logistic", "sigmoid", "linear"]),
    help="growPU training loss (default logistic; uPU/nnPU always use the symmetric sigmoid loss).",
)
@click.option("--t-pre", type=click.IntRange(min=1), help="growPU maximum pre-train steps (default 10000, Table 3).")
@click.option("--t-tune", type=click.IntRange(min=0), help="growPU fine-tune steps (default 10000, Table 3).")
@click.option("--epochs", type=click.IntRange(min=1), help="uPU/nnPU epochs (default 1000).")
@click.option(
    "--report",
    "report_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write a Markdown report (with the Figure-4 plot) here.",
)
@click.option(
    "--output",
    "output_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the predicted membership of every record (first seed) as .csv or .npy.",
)
@click.option(
    "--policy",
    "policy_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Policy TOML: take the mean from Veil's release log (with --release).",
)
@click.option("--release", "release_id", help="Id of a query release of SELECT AVG(c1), ... FROM t WHERE <class>.")
@click.option("--table", help="Table to attack (default: the release's table).")
@click.option("--features", help="Comma-separated feature columns, in mean order (default: the release's AVGs).")
@format_option
@run_guarded
def reid(
    data_path: Path | None,
    mean_path: Path | None,
    prior: float | None,
    method: str,
    classifier: str,
    hidden: str | None,
    truth_path: Path | None,
    seed: int,
    n_seeds: int,
    loss: str | None,
    t_pre: int | None,
    t_tune: int | None,
    epochs: int | None,
    report_path: Path | None,
    output_path: Path | None,
    policy_path: Path | None,
    release_id: str | None,
    table: str | None,
    features: str | None,
    fmt: str,
) -> None:
    """Can a released (noisy) class mean re-identify who is in the class?

    \b
    veil audit reid --data records.npy --mean mean.npy --prior 0.5 --truth labels.npy
    veil audit reid --policy policy.toml --release q_... --features c1,c2
    """
    from veil.auditor import reid as R

    t0 = time.perf_counter()
    context: dict[str, Any] = {}
    truth = None
    if policy_path is not None or release_id is not None:
        if policy_path is None or release_id is None:
            raise InputError("--policy and --release go together", hint="Pass both, or use --data and --mean")
        if data_path is not None or mean_path is not None:
            raise InputError(
                "--data/--mean cannot be combined with --release",
                hint="The release log supplies the mean and the policy's table the records",
            )
        X, mean, prior, truth, context = _from_release(policy_path, release_id, table, features, prior)
    else:
        if data_path is None or mean_path is None:
            raise InputError(
                "missing input: pass --data and --mean (or --policy and --release)",
                hint="veil audit reid --data records.npy --mean mean.npy --prior 0.5",
            )
        X, names = R.load_matrix(data_path)
        mean = R.load_vector(mean_path)
        if prior is None:
            raise InputError("--prior is required with --data", hint="Pass the share of the class, e.g. --prior 0.5")
        if mean.shape[0] != X.shape[1]:
            raise InputError(
                f"--mean has {mean.shape[0]} values but --data has {X.shape[1]} features",
                hint=f"Features in order: {', '.join(names[:8])}{', ...' if len(names) > 8 else ''}",
            )
        context = {"records": str(data_path), "mean": str(mean_path)}
    if truth_path is not None:
        truth = R.truth_labels(R.load_vector(truth_path))
    if method == "oracle" and truth is None:
        raise InputError("the oracle baseline needs the true membership", hint="Pass --truth labels.npy")
    methods = list(ATTACKS) + (["oracle"] if truth is not None else []) if method == "all" else [method]
    params: dict[str, dict[str, Any]] = {}
    hidden_sizes = _int_list(hidden)
    for m in ("growpu", "nnpu", "upu", "oracle"):
        params[m] = {"hidden": hidden_sizes} if hidden_sizes else {}
    if loss is not None:
        params["growpu"]["loss"] = loss
    if t_pre is not None:
        params["growpu"]["t_pre"] = t_pre
    if t_tune is not None:
        params["growpu"]["t_tune"] = t_tune
    if epochs is not None:
        for m in ("nnpu", "upu"):
            params[m]["epochs"] = epochs
    seeds = list(range(seed, seed + n_seeds))
    context.update(
        {
            "records_shape": f"{X.shape[0]} x {X.shape[1]}",
            "prior": round(float(prior), 6),
            "classifier": classifier,
            "seeds": ", ".join(map(str, seeds)),
            "truth": "given" if truth is not None else "not given",
        }
    )
    runs, summary = R.audit(
        X,
        mean,
        prior=float(prior),
        methods=methods,
        classifier=classifier,
        seeds=seeds,
        truth=truth,
        record_every=100 if report_path else 0,
        params=params,
    )
    rows = []
    for m in methods:
        s = summary[m]
        mine = [r for r in runs if r.method == m]
        first = mine[0].summary()
        rows.append(
            {
                "method": m,
                "classifier": s["classifier"],
                "accuracy": s["accuracy_mean"],
                "accuracy_std": s["accuracy_std"] if len(mine) > 1 else None,
                "precision": None if truth is None else float(np.mean([(r.metrics or {})["precision"] for r in mine])),
                "recall": None if truth is None else float(np.mean([(r.metrics or {})["recall"] for r in mine])),
                "predicted_positive": first["predicted_positive"] if len(mine) == 1 else s["predicted_positive_mean"],
                "stability": s["stability"],
                "seconds": round(s["seconds_mean"], 3),
            }
        )
    if output_path is not None:
        _write_predictions(output_path, runs[0].predicted)
    if report_path is not None:
        context["total_seconds"] = round(time.perf_counter() - t0, 1)
        R.write_report(report_path, runs, summary, context)
    emit(rows, fmt, json_data=rows[0] if len(rows) == 1 else rows)


def _write_predictions(path: Path, predicted: np.ndarray) -> None:
    suffix = path.suffix.lower()
    if suffix == ".npy":
        np.save(path, predicted.astype(np.int8))
    elif suffix == ".csv":
        np.savetxt(path, predicted.astype(int), fmt="%d", header="member", comments="")
    else:
        raise InputError(f"unsupported --output type {suffix!r}", hint="Use .csv or .npy")


def _from_release(
    policy_path: Path, release_id: str, table: str | None, features: str | None, prior: float | None
) -> tuple[np.ndarray, np.ndarray, float, np.ndarray | None, dict[str, Any]]:
    from veil.auditor import reid as R
    from veil.policy import load_policy
    from veil.store.releases import get_release
    from veil.store.warehouse import read_table

    policy = load_policy(policy_path)
    release = get_release(policy, release_id)
    wanted = comma_list(features) if features else None
    rm = R.mean_from_release(release, wanted)
    target = table or rm.table
    df = read_table(policy, target)
    lower = {str(c).lower(): c for c in df.columns}
    missing = [f for f in rm.features if f.lower() not in lower]
    if missing:
        from veil.errors import UnknownColumn, did_you_mean

        raise UnknownColumn(
            f"table {target!r} has no column(s) {missing}", hint=did_you_mean(missing[0], list(df.columns)) or "Pass --features"
        )
    cols = [lower[f.lower()] for f in rm.features]
    sub = df[cols]
    bad = [c for c in cols if sub[c].dtype.kind not in "biuf"]
    if bad:
        raise InputError(
            f"feature column(s) {bad} of {target!r} are not numeric", hint="A class mean is over numeric (or one-hot 0/1) columns"
        )
    if sub.isna().any().any():
        raise InputError(f"feature columns of {target!r} contain NULLs", hint="Audit a table without missing values")
    X = sub.to_numpy(dtype=np.float32)
    prior_source = "given (--prior)"
    if prior is None:
        prior_source = "released class count / table rows"
        if rm.count is None:
            raise InputError(f"release {release_id!r} has no count of the class to derive the prior", hint="Pass --prior")
        prior = min(max(rm.count / len(df), 1.0 / len(df)), 1.0 - 1.0 / len(df))
    truth = None
    if rm.predicate is not None:
        try:
            truth = R.truth_from_predicate(df, rm.predicate, target)
        except InputError:
            truth = None  # the attacked table lacks the class column: no truth to score against
    finite = rm.scales[np.isfinite(rm.scales)]
    context = {
        "release": rm.release_id,
        "table": target,
        "class predicate": rm.predicate,
        "features": ", ".join(rm.features) if len(rm.features) <= 12 else f"{len(rm.features)} columns",
        "release epsilon": rm.epsilon,
        "released class count": rm.count,
        "noise scale (median per coordinate)": float(np.median(finite)) if finite.size else None,
        "prior source": prior_source,
    }
    return X, rm.values, float(prior), truth, context
