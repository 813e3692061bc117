"""``veil publish synth``: IMPOSTER (or its λ = 0 GAN ablation) as a fully synthetic table.

Request keys: ``table``, ``method`` ("imposter" | "gan"), ``sensitive``, ``label``, ``lam``,
``epochs``, ``batch_size``, ``theta``, ``beta``, ``columns`` (implicit attributes, or None for every
declared column with a declared domain), ``rows``, ``seed``, ``output``, ``replace``. The model
trains on 80 % of the rows; the release (the sensitive column, the label and the implicit
attributes, all synthetic) is checked against the other 20 % (distance to closest record) by the
gate.

The release has exactly ``rows`` rows (default :data:`~veil.generators.synthetic_size.DEFAULT_ROWS`),
validated in :meth:`SynthPlugin.plan`: the size of a synthetic table is public and never the source's
(which would say whether one person is in it); choose it with ``--rows`` (``--param rows`` in ``veil
compare``).

Every published column needs a declared domain (``values`` for categories, ``lower``/``upper`` for
numbers; :func:`veil.generators.tabular_encoding.declared_domains`): the release holds declared
values only and its conditions are uniform over them. The sensitive column, the label and the
columns named in ``columns`` are checked in :meth:`SynthPlugin.plan` (policy only, before any data is
read).

The published columns are the policy's and the request's only, never the rows' (red team s27 A1): without
``columns``, every declared column with a declared domain (sensitive and label aside) is synthesised.
Implicit-privacy detection (NMI, θ, β) still runs on the training rows, as a report recorded in the
release's metrics for the curator (the ledger), never deciding a column or refusing: a column chosen by an
NMI one person moves made the public table's schema say what that person holds.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from veil.errors import InputError, PolicyError, VeilError
from veil.generators.publication import ColumnProtection, Plan, Publication
from veil.generators.registry import PublishPlugin, RunEnv, register_plugin
from veil.generators.synthetic_size import DEFAULT_ROWS, check_rows

HOLDOUT = 0.2


@register_plugin
class SynthPlugin(PublishPlugin):
    kind = "synth"
    summary = "IMPOSTER / GAN: a synthetic table whose implicit attributes do not betray a sensitive one"

    sweep_param = "lam"
    sweep_values = (0.0, 1.0)

    def plan(self, policy: Any, request: Mapping[str, Any]) -> Plan:
        method = request.get("method", "imposter")
        if method not in ("imposter", "gan"):
            raise InputError(f"unknown method {method!r}", hint="Use 'imposter' or 'gan' (λ = 0)")
        lam = 0.0 if method == "gan" else float(request.get("lam", 1.0))
        params = {
            "method": method,
            "lambda": lam,
            "sensitive": request["sensitive"],
            "label": request.get("label"),
            "epochs": int(request.get("epochs", 30)),
            "batch_size": int(request.get("batch_size", 500)),
            "theta": float(request.get("theta", 0.01)),
            "beta": float(request.get("beta", 0.7)),
            "columns": _distinct_columns(request.get("columns") or []),
            "rows": check_rows(DEFAULT_ROWS if request.get("rows") is None else request["rows"], "synth"),
            # curator-only detection metrics at most: never a draw of the release, never recorded (red team s66 F1)
            "_seed": request.get("seed"),
        }
        from veil.generators.columns import disjoint_roles

        disjoint_roles(
            {
                "--sensitive": [params["sensitive"]],
                "--label": [params["label"]] if params["label"] else [],
                "--columns": params["columns"],
            }
        )
        spec = policy.table(request["table"])
        if spec is not None:
            from veil.generators.tabular_encoding import declared_domains

            cond = [params["sensitive"], *([params["label"]] if params["label"] else [])]
            declared_domains(spec, cond, categorical=cond, table=request["table"])  # PolicyError if open
            declared_domains(spec, params["columns"], table=request["table"])
            if not params["columns"]:
                params["columns"] = _default_columns(spec, cond, request["table"])
        from veil.generators.base import check_seed

        params["_seed"] = check_seed(params["_seed"])
        return Plan(
            kind=self.kind,
            method=method,
            source=request["table"],
            output=request["output"],
            replace=bool(request.get("replace")),
            params=params,
            holdout=HOLDOUT,
        )

    def sanitise(self, plan: Plan, data: pd.DataFrame, env: RunEnv) -> Publication:
        from veil.generators.imposter import Imposter
        from veil.generators.randomness import torch_seed
        from veil.metrics.implicit import detect_implicit

        p = plan.params
        sensitive, label, seed = p["sensitive"], p["label"], p["_seed"]
        cond = [sensitive] + ([label] if label else [])
        for name in cond:
            if name not in data.columns:
                from veil.errors import did_you_mean

                raise InputError(f"column {name!r} is not in the table", hint=did_you_mean(name, data.columns))
        declared = env.spec.columns if env.spec is not None else None
        if declared is not None:
            # only declared columns may be published: an undeclared one (an identifier) is never a condition
            for name in [*cond, *p["columns"]]:
                if name not in declared:
                    raise InputError(
                        f"column {name!r} is not declared in the policy's table spec: it may not be published "
                        "(as a condition, sensitive or implicit column)",
                        hint="Declare it in [tables.<table>.columns] if it is not an identifier, else leave it out",
                    )
        undeclared = [str(c) for c in data.columns if declared is not None and c not in declared]
        # columns without a declared domain (open categories, unbounded numbers) can never be published
        open_ = [str(c) for c in data.columns if str(c) not in undeclared and not _has_domain(env.spec, str(c))]
        data = data.dropna(subset=cond).reset_index(drop=True)
        implicit = list(p["columns"])
        if not implicit:  # no spec: the plan could not list the declared columns
            raise PolicyError(
                f"no columns to synthesise besides {cond}: table {plan.source!r} has no spec in the policy",
                hint="Name the implicit attributes with --columns and declare their domains",
            )
        missing = [c for c in implicit if c not in data.columns]
        if missing:  # the source's schema only (no synthetic kind is charged)
            raise InputError(
                f"columns {missing} are not in table {plan.source!r}",
                hint="Name existing columns with --columns",
            )
        # a report for the curator (recorded in the ledger): it never chooses a column nor refuses (s27 A1)
        try:
            detection = detect_implicit(
                data,
                sensitive,
                theta=p["theta"],
                beta=p["beta"],
                exclude=[*([label] if label else []), *undeclared, *(c for c in open_ if c not in cond)],
                seed=seed,
            )
        except VeilError:
            detection = None
        # training from 63 bits of the publication's private generator (the model is never released, the seed never
        # recorded); the released rows' conditions, latent noise and drawn categories from that generator itself, 256
        # bits of the OS CSPRNG — never the curator's seed (red team s66 F1)
        model_seed = torch_seed(env.generator)
        model = Imposter(
            implicit=implicit,
            sensitive=sensitive,
            label=label,
            lam=p["lambda"],
            epochs=p["epochs"],
            batch_size=p["batch_size"],
            seed=model_seed,
            domains=_domains(env, plan.source, [*cond, *implicit], cond),
        )
        t0 = time.perf_counter()
        model.fit(data)
        seconds = time.perf_counter() - t0
        released = model.publish(data, rng=env.generator, rows=p["rows"])
        after = detect_implicit(released, sensitive, theta=0.0, beta=p["beta"], columns=implicit, seed=seed)
        how = "G(z | s" + (", y)" if label else ")") + f", λ = {p['lambda']}"
        columns = [
            ColumnProtection(c, "synthesised", "drawn uniformly over the declared values (no frequency of the rows used)")
            for c in cond
        ]
        columns += [ColumnProtection(c, "synthesised", how) for c in implicit]
        metrics = {
            "nmi_before": {a.name: a.nmi for a in detection.scores} if detection else None,
            "detected_implicit": list(detection.implicit) if detection else None,
            "detection_tau": detection.tau if detection else None,
            "nmi_after": {a.name: a.nmi for a in after.scores},
            "sensitive_accuracy_before": detection.accuracy if detection else None,
            "sensitive_accuracy_after": after.accuracy,
            "sensitive_f1_after": after.f1,
            "majority_rate": after.majority_rate,
            "d2_accuracy_last_epoch": model.history[-1].d2_accuracy,
            "train_seconds": round(seconds, 2),
            "epoch_seconds_median": round(float(np.median([h.seconds for h in model.history])), 3),
        }
        return Publication(
            method=p["method"],
            frame=released,
            columns=tuple(columns),
            synthetic=True,
            guarantee=(
                "no formal guarantee: a synthetic table (conditions drawn uniformly over their declared values, implicit "
                "attributes generated within their declared domains); checked against a holdout for reproduced "
                "training rows; other columns dropped"
            ),
            params={**model.params(), "rows": p["rows"]},
            metrics=metrics,
            extra={**model.params(), "implicit": implicit, **metrics},
        )


def _distinct_columns(columns: Any) -> list[str]:
    """``columns`` normalised, refused (InputError, before anything is read) when one is named twice."""
    from veil.generators.columns import distinct_columns

    return distinct_columns(columns, "--columns")


def _default_columns(spec: Any, cond: list[str], table: str) -> list[str]:
    """Every declared column with a declared domain but the conditions: the policy's choice, never the rows'."""
    chosen = [str(c) for c in spec.columns if str(c) not in cond and _has_domain(spec, str(c))]
    if not chosen:
        raise PolicyError(
            f"table {table!r} declares no column with a domain besides {cond}: nothing to synthesise",
            hint="Declare values (categories) or lower/upper (numbers) for the implicit attributes, or name them with --columns",
        )
    return chosen


def _has_domain(spec: Any, column: str) -> bool:
    from veil.generators.tabular_encoding import declared_domains

    try:
        declared_domains(spec, [column])
    except PolicyError:
        return False
    return True


def _domains(env: RunEnv, table: str, columns: list[str], categorical: list[str]) -> Any:
    """The declared domains of the published columns (policy only; PolicyError for an open one)."""
    from veil.generators.tabular_encoding import declared_domains

    if env.spec is None:
        raise PolicyError(
            f"table {table!r} has no spec in the policy: a synthetic table may only hold declared values",
            hint=f"Declare [tables.{table}.columns] with values/lower/upper for every published column",
        )
    return declared_domains(env.spec, columns, categorical=categorical, table=table)
