"""PATE from a policy table: read the table, encode by the declared domains, run, save the model and
record the release (:func:`publish_pate`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from veil.errors import InputError
from veil.generators.pate.encoding import FeatureEncoder
from veil.generators.pate.run import PateConfig, PateResult, run_pate

# --------------------------------------------------------------------------- publication from a policy table


@dataclass(frozen=True)
class PatePublication:
    """What ``veil publish pate`` did: the release id, where the model went, and the result."""

    release_id: str
    model_path: Path
    result: PateResult
    params: Mapping[str, Any]

    def summary(self) -> dict[str, Any]:
        m = self.result.metrics
        keys = (
            "epsilon_data_independent",
            "lambda_data_independent",
            "epsilon_data_dependent",
            "ensemble_accuracy_before_noise",
            "ensemble_accuracy_after_noise",
            "student_accuracy",
            "student_tpr",
            "student_tnr",
            "student_threshold",
            "student_ldp_epsilon_per_record",
            "teacher_train_seconds",
        )
        out: dict[str, Any] = {"release_id": self.release_id, "model": str(self.model_path), "delta": self.params["delta"]}
        out.update({k: m[k] for k in keys if k in m})
        return out


def _label_classes(column: Any, label: str) -> tuple[Any, ...]:
    values = getattr(column, "values", None)
    if not values or len(values) < 2:
        raise InputError(
            f"label column {label!r} has no declared values (need at least two classes)",
            hint=f'Declare values = [...] for {label!r} in the policy, e.g. values = ["<=50K", ">50K"]',
        )
    return tuple(values)


def publish_pate(
    policy: Any,
    *,
    table: str,
    label: str,
    output_model: str | Path,
    features: Sequence[str] | None = None,
    config: PateConfig,
    student_table: str | None = None,
    validation: int = 1000,
    save_votes: str | Path | None = None,
    progress: bool = True,
    rng: np.random.Generator | None = None,
) -> PatePublication:
    """Train PATE from ``table`` (curator A), privatise the student's records (curator B), save the
    student model, and write a release record charged with the data-independent ``(ε, δ)``.

    Student records come from ``student_table`` when given, else ``queries + validation`` rows
    (whole privacy units) are held out of ``table`` at random and the rest feed the teachers.
    Features are encoded from the policy's declared bounds/values only.
    """
    from veil.store.releases import record_release
    from veil.store.warehouse import read_table

    spec = policy.table(table)
    classes = _label_classes(spec.column(label), label)
    unit = spec.privacy_unit
    skip = {label, unit}
    if features is None:
        features = [
            n
            for n, c in spec.columns.items()
            if n not in skip and ((c.type in ("int", "float") and c.bounded and c.lower != c.upper) or c.values)
        ]
    features = list(features)
    if not features:
        raise InputError(
            f"no usable feature columns in table {table!r}",
            hint="Pass --features with columns that have declared bounds or values",
        )
    for f in features:
        spec.column(f)
        if f in skip:
            raise InputError(f"{f!r} cannot be a feature: it is the label or the privacy unit")
    encoder = FeatureEncoder.from_columns(spec.columns, features)
    if isinstance(validation, bool) or not isinstance(validation, int) or validation < 0:
        raise InputError(f"validation must be an integer ≥ 0, got {validation!r}")

    cols = features + [label] + ([unit] if unit else [])
    df = read_table(policy, table, cols)
    known = df[label].isin(list(classes))
    dropped = int((~known).sum())
    df = df[known].reset_index(drop=True)
    y_all = np.array([classes.index(v) for v in df[label].tolist()], dtype=int)
    groups = df[unit].to_numpy() if unit else np.arange(len(df))
    algo = np.random.default_rng(config.seed)

    if student_table is None:
        need = config.queries + validation
        uniq = np.unique(groups)
        order = algo.permutation(len(uniq))
        chosen: list[Any] = []
        taken = 0
        sizes = dict(zip(*np.unique(groups, return_counts=True), strict=True))
        for u in uniq[order]:
            if taken >= need:
                break
            chosen.append(u)
            taken += int(sizes[u])
        student_mask = np.isin(groups, np.array(chosen))
        if (~student_mask).sum() < config.teachers:
            raise InputError(
                f"table {table!r} has {len(df)} usable rows: too few for {need} student rows and {config.teachers} teachers",
                hint="Lower --queries, --validation or --teachers",
            )
        s_idx = np.flatnonzero(student_mask)
        s_idx = s_idx[algo.permutation(len(s_idx))]
        Xs_all = encoder.transform(df.iloc[s_idx])
        ys_all = y_all[s_idx]
        teach = np.flatnonzero(~student_mask)
        X_t, y_t, g_t = encoder.transform(df.iloc[teach]), y_all[teach], groups[teach]
        student_source = f"{len(s_idx)} rows held out of {table!r}"
    else:
        sdf = read_table(policy, student_table)
        missing = [f for f in features if f not in sdf.columns]
        if missing:
            raise InputError(f"student table {student_table!r} lacks feature columns {missing}")
        sdf = sdf.sample(frac=1.0, random_state=int(algo.integers(2**31))).reset_index(drop=True)
        Xs_all = encoder.transform(sdf)
        ys_all = None
        if label in sdf.columns:
            ok = sdf[label].isin(list(classes)).to_numpy()
            ys_all = np.array([classes.index(v) if k else -1 for v, k in zip(sdf[label], ok, strict=True)])
        X_t, y_t, g_t = encoder.transform(df), y_all, groups
        student_source = f"table {student_table!r} ({len(sdf)} rows)"
    n_val = min(validation, max(0, len(Xs_all) - config.queries))
    X_val = Xs_all[:n_val] if ys_all is not None and n_val else None
    y_val = ys_all[:n_val] if ys_all is not None and n_val else None
    X_pool = Xs_all[n_val:]
    y_pool = ys_all[n_val:] if ys_all is not None else None
    if y_val is not None and np.any(y_val < 0):
        keep = y_val >= 0
        X_val, y_val = X_val[keep], y_val[keep]  # type: ignore[index]
    if y_pool is not None and np.any(y_pool < 0):
        y_pool = None  # unlabelled records: no ensemble-accuracy metric

    result = run_pate(
        X_t,
        y_t,
        X_pool,
        X_val,
        y_val,
        encoder=encoder,
        classes=classes,
        config=config,
        y_student=y_pool,
        groups=g_t if unit else None,
        rng=rng,
        progress=progress,
    )
    model_path = Path(output_model)
    params: dict[str, Any] = {
        "table": table,
        "label": label,
        "features": features,
        "classes": list(classes),
        "teachers": config.teachers,
        "teacher_model": f"logistic regression (L2, C={config.teacher_C})",
        "gamma": config.gamma,
        "queries": config.queries,
        "student_rho": config.rho,
        "ldp_encoding": config.ldp_encoding,
        "delta": config.delta,
        "student_source": student_source,
        "teacher_rows": len(X_t),
        "validation_rows": 0 if y_val is None else len(y_val),
        "dropped_rows_unknown_label": dropped,
        "student_hidden": config.student_hidden,
        "threshold": config.threshold,
        "seed": config.seed,
        "model_path": str(model_path.resolve()),
        "accountant_orders": list(config.orders),
    }
    metrics = dict(result.metrics)
    metrics["note"] = (
        "epsilon charged = data-independent bound (Eq. 12); epsilon_data_dependent reads the private "
        "votes and is not itself differentially private; accuracies use labelled validation rows"
    )
    release_id = record_release(
        policy,
        kind="publication",
        method="pate",
        params=params,
        metrics=metrics,
        epsilon=result.epsilon_independent.epsilon,
        delta=config.delta,
    )
    if save_votes is not None:
        np.save(Path(save_votes), result.counts, allow_pickle=False)
    description = {
        "release_id": release_id,
        **{
            k: params[k]
            for k in (
                "table",
                "label",
                "features",
                "teachers",
                "gamma",
                "queries",
                "student_rho",
                "ldp_encoding",
                "delta",
                "student_source",
            )
        },
        "epsilon": result.epsilon_independent.epsilon,
        "ldp": dict(result.ldp),
    }
    result.student.save(model_path, description=description)
    return PatePublication(release_id=release_id, model_path=model_path, result=result, params=params)
