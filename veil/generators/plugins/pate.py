"""``veil publish pate``: a student model trained by PATE from a private table (a model file, not a table).

Request keys: ``table``, ``label``, ``features`` (or None), ``config`` (a
:class:`~veil.generators.pate.PateConfig`), ``student_table``, ``validation``, ``save_votes``,
``output_model``, ``replace``. The data-independent ``(ε, δ)`` bound is known from γ, the number
of queries and δ alone: it is reserved on the source table's budget before training.

Without ``student_table`` the student's records are people of the table held out of the teachers: a row
is the student's iff the keyed hash of its own identity falls below ``config.student_share``
(:mod:`veil.generators.pate.split`), each sent to the teachers (and trained on) with curator B's local
noise, ε_local-LDP per record (:func:`~veil.generators.pate.ldp_guarantee`). The table is then charged
``max(ε_teachers, ε_local)`` (parallel composition over the two disjoint groups of people, valid because
each person's group is a function of that person alone), and the gate refuses a held-out student without
local noise (``rho=None``: ε_local = ∞) or with a vacuous ε_local (red team s24, A2).

No outcome depends on the private table except through the noise: every refusal follows from the
parameters, the policy or the public student table (its schema and size), all before the charge (A10);
the private table's size never refuses anything (a refusal that flips when one person joins is a free
membership oracle). Teachers' shards are keyed hashes too (one person changes one teacher; an empty
shard abstains), exactly ``queries`` records are always sent (domain fillers when the held-out people are
fewer: :func:`~veil.generators.pate.student_queries`), and the published description states no count
of private rows.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from veil.errors import InputError
from veil.generators.publication import ModelArtifact, Plan, Publication
from veil.generators.registry import PublishPlugin, RunEnv, register_plugin


def _check_student_table(policy: Any, student: str | None) -> None:
    """The student's records come from a *public* table (the PATE setting), or from rows held out of the source.

    A private table's records would be read whole (raw without student noise), its labels scored, and a
    model trained on them published, with nothing charged to that table (red team s16, A11)."""
    if student is None:
        return
    spec = policy.tables.get(student)
    if spec is None or student.startswith("_veil") or not spec.public:
        what = "is not a table of the policy" if spec is None or student.startswith("_veil") else "is private"
        raise InputError(
            f"--student-table {student!r} {what}: the student learns from public records only",
            hint="Declare a public table (public = true) for the student's records, or leave --student-table out to "
            "hold rows out of --table (charged with it)",
        )


def _features(spec: Any, label: str, features: list[str] | None) -> list[str]:
    unit = spec.privacy_unit
    skip = {label, unit}
    if features is None:
        features = [
            n
            for n, c in spec.columns.items()
            if n not in skip and ((c.type in ("int", "float") and c.bounded and c.lower != c.upper) or c.values)
        ]
    from veil.generators.columns import distinct_columns

    features = distinct_columns(features, "--features")  # a feature named twice: refused before the charge (s27 A16)
    if not features:
        raise InputError(
            f"no usable feature columns in table {spec.name!r}",
            hint="Pass --features with columns that have declared bounds or values",
        )
    for f in features:
        spec.column(f)
        if f in skip:
            raise InputError(f"{f!r} cannot be a feature: it is the label or the privacy unit")
    return features


def student_local_epsilon(spec: Any, features: list[str], config: Any) -> float:
    """The local ε of each student record held out of the source (∞ without local noise)."""
    from veil.generators.pate import FeatureEncoder, ldp_guarantee

    encoder = FeatureEncoder.from_columns(spec.columns, features)
    per_record = ldp_guarantee(encoder, config.rho, config.ldp_encoding)["per_record"]
    return math.inf if per_record is None else float(per_record)


@register_plugin
class PatePlugin(PublishPlugin):
    kind = "pate"
    summary = "PATE: a student model labelled by noisy teacher votes ((ε, δ)-DP for the teachers' table)"
    artifact = "model"

    def plan(self, policy: Any, request: Mapping[str, Any]) -> Plan:
        from veil.generators.pate import FeatureEncoder
        from veil.generators.pate.release import _label_classes
        from veil.mechanisms.pate_accounting import data_independent_epsilon

        config = request["config"]
        table, label = request["table"], request["label"]
        spec = policy.table(table)
        classes = _label_classes(spec.column(label), label)
        features = _features(spec, label, request.get("features"))
        validation = request.get("validation", 1000)
        if isinstance(validation, bool) or not isinstance(validation, int) or validation < 0:
            raise InputError(f"validation must be an integer ≥ 0, got {validation!r}")
        bound = data_independent_epsilon(gamma=config.gamma, queries=config.queries, delta=config.delta)
        _check_student_table(policy, request.get("student_table"))
        FeatureEncoder.from_columns(spec.columns, features)  # a feature the encoder refuses, refused before the charge
        unit = spec.privacy_unit
        checks: dict[str, float] = {"epsilon": bound.epsilon}
        charged = float(bound.epsilon)
        if request.get("student_table") is None:
            # the student's records are people of the table: their local ε is charged too (red team s24, A2)
            local = student_local_epsilon(spec, features, config)
            checks["student_local_epsilon"] = local
            if math.isfinite(local):
                charged = max(charged, local)
        save_votes = request.get("save_votes")
        if save_votes is not None:
            from veil.generators.transaction import refuse_veil_file

            votes = Path(save_votes)
            refuse_veil_file(policy, votes if votes.suffix == ".npy" else Path(f"{votes}.npy"), "--save-votes")
        return Plan(
            kind=self.kind,
            method="pate",
            source=table,
            output=str(request["output_model"]),
            artifact="model",
            replace=bool(request.get("replace")),
            params={
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
                "student_hidden": config.student_hidden,
                "threshold": config.threshold,
                "seed": config.seed,
                "student_share": config.student_share if request.get("student_table") is None else None,
                "model_path": str(Path(request["output_model"]).resolve()),
                "accountant_orders": list(config.orders),
                "student_table": request.get("student_table"),
                "validation": validation,
                "save_votes": None if request.get("save_votes") is None else str(request["save_votes"]),
                "_config": config,
            },
            checks=checks,
            epsilon=Fraction(repr(charged)),
            delta=Fraction(repr(float(config.delta))),
            columns=tuple(features + [label] + ([unit] if unit else [])),
        )

    def check_source(self, plan: Plan, data: pd.DataFrame, env: RunEnv) -> None:
        from veil.store.warehouse import read_table, table_columns

        p = plan.params
        if p["student_table"] is None:
            return  # nothing here may depend on the private table's size or values (see the module docstring)
        config = p["_config"]
        student = p["student_table"]
        names = {name for name, _ in table_columns(env.policy, student)}
        missing = [f for f in p["features"] if f not in names]
        if missing:
            raise InputError(f"student table {student!r} lacks feature columns {missing}")
        records = len(read_table(env.policy, student, [p["features"][0]]))  # a public table: its size is public
        if records < config.queries:
            raise InputError(
                f"the student table {student!r} has {records} records but {config.queries} queries were asked",
                hint="Lower --queries or give the student more records",
            )

    def sanitise(self, plan: Plan, data: pd.DataFrame, env: RunEnv) -> Publication:
        from veil.generators.pate import FeatureEncoder, run_pate
        from veil.generators.pate.split import student_split
        from veil.store.warehouse import read_table

        p = dict(plan.params)
        config = p.pop("_config")
        spec = env.spec
        label, features, classes = p["label"], p["features"], tuple(p["classes"])
        unit = spec.privacy_unit
        encoder = FeatureEncoder.from_columns(spec.columns, features)
        known = data[label].isin(list(classes))
        dropped = int((~known).sum())
        df = data[known].reset_index(drop=True)
        y_all = np.array([classes.index(v) for v in df[label].tolist()], dtype=int)
        groups = df[unit].to_numpy() if unit else None
        algo = np.random.default_rng(config.seed)
        validation = p["validation"]
        x_all = encoder.transform(df)
        if p["student_table"] is None:
            # each person's role is a keyed hash of their own row (unit): never of who else is present
            # (one record per person on the student's side: a person's local ε is one record's, s28 A5)
            s_idx, teach = student_split(x_all, y_all, groups=groups, share=config.student_share, seed=config.seed)
            n_q = min(config.queries, len(s_idx))
            xs_all, ys_all = x_all[s_idx], y_all[s_idx]
            x_t, y_t, g_t = x_all[teach], y_all[teach], None if groups is None else groups[teach]
            student_source = (
                f"the people of {plan.source!r} whose keyed hash of their own row falls below the student share "
                f"{config.student_share:g} (the others feed the teachers)"
            )
            x_pool, y_pool = xs_all[:n_q], ys_all[:n_q]
            x_val, y_val = xs_all[n_q : n_q + validation], ys_all[n_q : n_q + validation]
            if not len(y_val):
                x_val = y_val = None
        else:
            sdf = read_table(env.policy, p["student_table"])
            missing = [f for f in features if f not in sdf.columns]
            if missing:
                raise InputError(f"student table {p['student_table']!r} lacks feature columns {missing}")
            sdf = sdf.sample(frac=1.0, random_state=int(algo.integers(2**31))).reset_index(drop=True)
            xs_all = encoder.transform(sdf)
            ys_all = None
            if label in sdf.columns:
                ok = sdf[label].isin(list(classes)).to_numpy()
                ys_all = np.array([classes.index(v) if k else -1 for v, k in zip(sdf[label], ok, strict=True)])
            x_t, y_t, g_t = x_all, y_all, groups
            student_source = f"public table {p['student_table']!r} ({len(sdf)} rows)"  # a public size
            n_val = min(validation, max(0, len(xs_all) - config.queries))
            x_val = xs_all[:n_val] if ys_all is not None and n_val else None
            y_val = ys_all[:n_val] if ys_all is not None and n_val else None
            x_pool = xs_all[n_val:]
            y_pool = ys_all[n_val:] if ys_all is not None else None
            if y_val is not None and np.any(y_val < 0):
                keep = y_val >= 0
                x_val, y_val = x_val[keep], y_val[keep]  # type: ignore[index]
            if y_pool is not None and np.any(y_pool < 0):
                y_pool = None
        result = run_pate(
            x_t, y_t, x_pool, x_val, y_val, encoder=encoder, classes=classes, config=config,
            y_student=y_pool, groups=g_t, rng=env.rng, progress=env.progress,
        )  # fmt: skip
        if p["save_votes"] is not None:
            np.save(Path(p["save_votes"]), result.counts, allow_pickle=False)
        params = {k: v for k, v in p.items() if k not in ("validation", "student_table", "save_votes")} | {
            "student_source": student_source,
            "teacher_rows": len(x_t),
            "validation_rows": 0 if y_val is None else len(y_val),
            "dropped_rows_unknown_label": dropped,
        }
        metrics = dict(result.metrics)
        metrics["note"] = (
            "epsilon charged = data-independent bound (Eq. 12); epsilon_data_dependent reads the private "
            "votes and is not itself differentially private; accuracies use labelled validation rows"
        )
        description = {
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
        } | {"epsilon": result.epsilon_independent.epsilon, "ldp": dict(result.ldp)}
        final = Path(plan.output).resolve()

        def write(staging: Path) -> list[Path]:
            result.student.save(staging, description=description)
            side = Path(str(staging) + ".json")
            body = json.loads(side.read_text())
            body["load"] = f"from veil.generators.pate import load_student; model = load_student({str(final)!r})"
            side.write_text(json.dumps(body, indent=2, default=str) + "\n")
            return [staging, side]

        m = result.metrics
        keys = (
            "epsilon_data_independent", "lambda_data_independent", "epsilon_data_dependent",
            "ensemble_accuracy_before_noise", "ensemble_accuracy_after_noise", "student_accuracy", "student_tpr",
            "student_tnr", "student_threshold", "student_ldp_epsilon_per_record", "teacher_train_seconds",
        )  # fmt: skip
        return Publication(
            method="pate",
            guarantee=(
                f"(ε = {result.epsilon_independent.epsilon:.4g}, δ = {config.delta:g})-DP for the teachers' table "
                "(data-independent moments bound)"
                + (
                    f"; each held-out student record {plan.checks['student_local_epsilon']:.4g}-local-DP "
                    f"(ε = {float(plan.epsilon or 0):.4g} charged to the table)"
                    if "student_local_epsilon" in plan.checks
                    else ""
                )
                + "; the model holds no training rows"
            ),
            model=ModelArtifact(write=write, description=description),
            params=params,
            metrics=metrics,
            extra={"delta": config.delta, **{k: m[k] for k in keys if k in m}},
        )
