"""``veil publish krr``: k-ary randomised response on chosen columns (:mod:`veil.generators.krr`).

Request keys: ``table``, ``columns`` (list), ``epsilon`` (per attribute), ``output``, ``replace``.
The release is the perturbed columns only (rows shuffled), ε = m·ε per row for m columns, plus ε_c for
the number of rows (a discrete-Laplace count: the exact count would say whether one person is in the
table, red team s16 A5), so m·ε + ε_c charged to the source table's budget, with ε_c = min(ε, 2.94): the count
is exact with probability tanh(ε_c/2) ≤ 0.9, the gate's bound for a kept value (red team s20, A1).

Every column's domain must be declared in the policy (:func:`veil.generators.krr.declared_domain`;
checked before any data is read), and the plan records the largest keep probability
e^ε/(e^ε + k − 1) over the columns (``checks["keep_probability"]``, from ε and the declared k
only) so that the gate refuses a vacuous ε (:data:`veil.generators.gate.MAX_KEEP_PROBABILITY`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd

from veil.errors import InputError, did_you_mean
from veil.generators.krr import keep_probability, krr_domain
from veil.generators.publication import ColumnProtection, Plan, Publication
from veil.generators.registry import PublishPlugin, RunEnv, register_plugin
from veil.policy import normalise_name

#: The largest ε the row count takes: its discrete-Laplace noise is 0 with probability tanh(ε/2) ≈ 0.8996 here, within
#: the gate's MAX_KEEP_PROBABILITY (0.9) for kept values.
COUNT_EPSILON_MAX = 2.94


def exact(value: float) -> Fraction:
    """The decimal a curator typed, exactly (``0.1`` → 1/10, not the binary float)."""
    return Fraction(repr(float(value)))


@register_plugin
class KRRPlugin(PublishPlugin):
    kind = "krr"
    summary = "k-ary randomised response per column (ε-local-DP per attribute)"

    sweep_param = "epsilon"
    sweep_values = (0.5, 1.0, 2.0, 4.0)

    def plan(self, policy: Any, request: Mapping[str, Any]) -> Plan:
        # the names as the policy and the source frame spell them: a refusal for a spelling comes before the
        # reservation (red team s20, A6)
        columns = tuple(normalise_name(str(c)) for c in request.get("columns") or ())
        if not columns:
            raise InputError(
                "no columns to perturb", hint="Pass --columns, e.g. the implicit attributes from `veil audit implicit`"
            )
        if len(set(columns)) != len(columns):
            raise InputError(f"columns repeat: {list(columns)}", hint="Name each column once")
        eps = float(request["epsilon"])
        per = exact(eps) if np.isfinite(eps) else Fraction(0)
        checks: dict[str, float] = {"epsilon": eps}
        spec = policy.table(request["table"])
        keep: list[float] = []
        for c in columns:
            col = spec.columns.get(normalise_name(c))
            if col is None and did_you_mean(c, spec.columns):
                raise InputError(f"column {c!r} is not declared in the policy", hint=did_you_mean(c, spec.columns))
            domain, _ = krr_domain(c, col)
            if math.isfinite(eps) and eps > 0:
                keep.append(keep_probability(eps, len(domain)))
        if keep:
            checks["keep_probability"] = max(keep)
        # the row count's ε: the attributes' ε, but never so large that the count is exact more often than the
        # gate allows a value to be kept (P(noise = 0) = tanh(ε/2); red team s20, A1)
        count_eps = min(eps, COUNT_EPSILON_MAX) if math.isfinite(eps) else eps
        count = exact(count_eps) if math.isfinite(count_eps) else Fraction(0)
        checks["count_epsilon"] = count_eps
        if math.isfinite(count_eps) and count_eps > 0:
            checks["count_keep_probability"] = math.tanh(count_eps / 2)
        return Plan(
            kind=self.kind,
            method="krr",
            source=request["table"],
            output=request["output"],
            replace=bool(request.get("replace")),
            params={"columns": list(columns), "epsilon_per_attribute": eps, "count_epsilon": count_eps},
            checks=checks,
            epsilon=per * len(columns) + count,
            delta=Fraction(0),
            columns=columns,  # only what it publishes (red team s60 F3)
        )

    def check_source(self, plan: Plan, data: pd.DataFrame, env: RunEnv) -> None:
        """A declared column missing from the stored table is refused before the charge (red team s24, A10)."""
        for name in plan.params["columns"]:
            if name not in data.columns:
                raise InputError(
                    f"column {name!r} is not in the table {plan.source!r}",
                    hint=did_you_mean(name, data.columns) or f"Columns: {list(data.columns)}",
                )

    def sanitise(self, plan: Plan, data: pd.DataFrame, env: RunEnv) -> Publication:
        from veil.generators.krr import krr_publish

        columns = list(plan.params["columns"])
        specs = dict(env.spec.columns) if env.spec is not None else {}
        eps = plan.params["epsilon_per_attribute"]
        count_eps = float(plan.params.get("count_epsilon", eps))
        out, info = krr_publish(data, columns, epsilon=float(eps), specs=specs, count_epsilon=count_eps, rng=env.rng)
        return Publication(
            method="krr",
            frame=out,
            columns=tuple(
                ColumnProtection(c, "randomised", f"k-ary randomised response, ε = {eps}, k = {info[c]['k']}") for c in columns
            ),
            source_rows=None,  # rows dropped or added to a DP count: no longer aligned with the source
            guarantee=(
                f"each row is {float(eps) * len(columns):g}-local-DP ({eps} per attribute × {len(columns)} columns) and "
                f"the number of rows {count_eps:g}-DP ({float(plan.epsilon or 0):g} in all); only the randomised columns "
                "are published, rows shuffled"
            ),
            params={"domains": {c: {"k": i["k"], "source": i["domain_source"]} for c, i in info.items()}},
            metrics={"keep_probability": {c: i["keep_probability"] for c, i in info.items()}},
            extra={
                "keep_probability": {c: round(i["keep_probability"], 4) for c, i in info.items()},
                "epsilon_total": float(plan.epsilon or 0),
                "epsilon_per_attribute": eps,
                "count_epsilon": count_eps,
                "domains": {c: {"k": i["k"], "source": i["domain_source"]} for c, i in info.items()},
            },
        )
