"""``veil publish sdc``: the SDC-family generators of :mod:`veil.generators.base` (filters, DP
microaggregation, GAN, ML copies) as one publication kind.

Request keys: ``table``, ``method`` (a registered generator), ``params`` (``["k=5", …]``),
``columns`` (numeric columns to protect), ``target``, ``output``, ``replace``, ``seed``.

Provenance: a generator whose output rows are synthetic (``Output.source is None``) produces every
column; a row-aligned filter produces the protected columns only — its label column is a copy and
is dropped from the release (it stays available to the disclosure-risk metric). Generators may
state their columns' protection themselves in ``Output.info["columns"]`` (``{name: protection}``).
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd

from veil.errors import InputError, did_you_mean
from veil.generators.publication import COPIED, PROTECTIONS, ColumnProtection, Plan, Publication
from veil.generators.registry import PublishPlugin, RunEnv, register_plugin
from veil.policy import normalise_name

#: Generators whose rows are synthetic (trained models): they get a holdout for the DCR check.
SYNTHETIC_METHODS = frozenset({"gan", "ml_copy"})


def context(policy: Any, table: str, columns: list[str], target: str | None, seed: int | None, df_columns: Any) -> Any:
    """The generator :class:`~veil.generators.base.Context` for ``table``'s spec and columns."""
    from veil.generators.base import Context
    from veil.policy import normalise_name

    spec = policy.table(table)
    cols = [normalise_name(c) for c in columns]
    tgt = normalise_name(target) if target else None
    for c in [*cols, *([tgt] if tgt else [])]:
        if c not in df_columns:
            raise InputError(f"column {c!r} is not in table {table!r}", hint=did_you_mean(c, df_columns))
    bounds = {
        c: (float(spec.columns[c].lower), float(spec.columns[c].upper))
        for c in cols
        if c in spec.columns and spec.columns[c].lower is not None and spec.columns[c].upper is not None
    }
    categories = {
        c: tuple(spec.columns[c].values) for c in [*cols, *([tgt] if tgt else [])] if c in spec.columns and spec.columns[c].values
    }
    return Context(columns=tuple(cols), target=tgt, bounds=bounds, seed=seed, progress=True, categories=categories)


def check_policy_columns(cls: Any, values: Mapping[str, Any], spec: Any, columns: list[str], target: str | None) -> None:
    """Refuse, from the parameters and the policy alone, what a method that needs declared bounds (every DP
    method) cannot run on: an undeclared or non-numeric column, a column without bounds, an undeclared label
    (or, for the DP grid, one without declared values) and a grid of too many cells.

    The plan calls it, so these refusals come before anything is charged (red team s24, A10)."""
    from veil.generators.sdc import check_grid_cells

    if not (cls.is_dp or cls.needs_bounds):
        return
    if not columns:
        raise InputError(f"method {cls.name!r} needs at least one column", hint="Pass --columns a,b,c")
    declared = spec.columns
    for c in [*columns, *([target] if target else [])]:
        if c not in declared:
            raise InputError(
                f"column {c!r} is not declared in the policy's table {spec.name!r}: {cls.name!r} needs its public domain",
                hint=did_you_mean(c, declared) or "Declare it in [tables.<table>.columns], or choose a declared column",
            )
    for c in columns:
        col = declared[c]
        if not col.is_numeric:
            raise InputError(
                f"column {c!r} is declared {col.type!r}, not a number: {cls.name!r} protects numbers",
                hint="Choose int or float columns (a category column can be the --target)",
            )
        if not col.bounded:
            raise InputError(
                f"method {cls.name!r} needs public bounds for column {c!r}", hint="Declare lower and upper for it in the policy"
            )
        if col.values:
            # the method draws numbers over [lower, upper]; the gate then refused, after the charge, every output whose
            # rounded value missed the declared list (red team s42 A4: three publications charged 3ε, none written)
            raise InputError(
                f"column {c!r} declares values {list(col.values)[:8]}: {cls.name!r} publishes numbers anywhere in "
                f"[{col.lower}, {col.upper}], which the release gate would refuse after the charge",
                hint="Publish it with kRR (veil publish krr), or drop its values from the policy",
            )
    if cls.is_dp and values.get("partition", "grid") == "grid":
        classes = 0
        if target:
            labels = declared[target].values
            if not labels:
                raise InputError(
                    f"label {target!r} has no declared values in the policy: a DP release may not publish a value "
                    "set read from the private data",
                    hint=f"Declare values = [...] for {target!r} in the policy, or drop --target",
                )
            classes = len(labels)
        check_grid_cells(int(values["bins"]), len(columns), classes, labelled=target is not None)


def guarantee_checks(name: str, values: Mapping[str, Any]) -> dict[str, float]:
    """The parameters of generator ``name`` that the gate refuses when vacuous."""
    checks: dict[str, float] = {}
    if name == "microagg_mdav" or (values.get("partition") == "mdav" and "k" in values):
        checks["k"] = float(values["k"])
    if name == "microagg_dbscan":
        # its groups (clusters, noise points and small groups merged) hold at least min_samples rows each: the gate
        # checks it on the output, and the unchanged values they share are covered as MDAV's are (red team s24 A14)
        checks["k"] = float(values["min_samples"])
    if name == "noise_addition":
        checks["noise"] = float(values["a"])
        checks["noise_a"] = float(values["a"])
    if name == "rank_swapping":
        checks["noise"] = float(values["p"])
        checks["swap_p"] = float(values["p"])
    if "epsilon" in values:
        checks["epsilon"] = float(values["epsilon"])
        if name.startswith("dp_microagg") and values.get("partition") == "grid":
            checks["grid_epsilon"] = float(values["epsilon"])  # its cell counts' own cap (gate.MAX_GRID_EPSILON)
    return checks


def _metrics(plan: Plan, clean: pd.DataFrame, out: Any, ctx: Any, *, seed: int) -> dict[str, Any]:
    """IL, DR and linkage risk of the release (curator-only figures of the private rows).

    A DP release ends the same way whatever the rows: a metric its rows cannot give (a label of one class for
    the disclosure risk, an infinite value, too few rows) is recorded as ``None`` with the reason, never raised
    after the charge (a charged failure that one person's value decides is a deterministic bit outside the ε)."""
    from veil.generators.sdc import release_metrics

    if not plan.is_dp:
        return dict(release_metrics(clean, out, ctx, seed=seed))
    try:
        return dict(release_metrics(clean, out, ctx, seed=seed))
    except (InputError, ValueError, FloatingPointError) as exc:
        return {"il": None, "il_mean": None, "dr": None, "linkage_risk": None, "metrics_unavailable": str(exc)}


@register_plugin
class SDCPlugin(PublishPlugin):
    kind = "sdc"
    summary = "statistical disclosure control: noise, microaggregation, rank swapping, DP microaggregation, GAN, ML copy"

    def plan(self, policy: Any, request: Mapping[str, Any]) -> Plan:
        from veil.generators.base import check_seed, get_generator, parse_param_args

        cls = get_generator(request["method"])
        gen = cls(**parse_param_args(cls, request.get("params") or ()))
        values = gen.params_dict()
        from veil.generators.columns import disjoint_roles, distinct_columns

        columns = distinct_columns(request.get("columns") or [], "--columns")
        target = normalise_name(str(request["target"])) if request.get("target") else None
        disjoint_roles({"--columns": columns, "--target": [target] if target else []})  # s27 A16, before the charge
        table = request["table"]
        check_seed(request.get("seed"))
        spec = policy.table(table)  # unknown tables fail here
        check_policy_columns(cls, values, spec, columns, target)
        # every method's published range comes from the policy: a filter on a column without declared bounds took the
        # rows' own [min, max] as its domain (red team s42 A2: one person's outlier widened the public column 300-fold)
        from veil.generators.columns import require_declared_domains

        if cls.name == "noise_addition":
            from veil.generators.sdc import check_noise_plan

            check_noise_plan(float(values["a"]), spec, columns)  # from the request and the policy alone (s64 F1, F6, F9)
        require_declared_domains(spec, columns, "--columns", table=table)
        eps = Fraction(repr(float(values["epsilon"]))) if cls.is_dp else None
        return Plan(
            kind=self.kind,
            method=f"sdc-{cls.name}",
            source=table,
            output=request["output"],
            replace=bool(request.get("replace")),
            # a request's seed seeds the curator-only metrics at most: never a draw of the release, never recorded (the
            # `_` key), red team s66 F1 (`veil publish sdc --seed` is refused)
            params={**values, "method": cls.name, "columns": columns, "target": target, "_seed": request.get("seed")},
            checks=guarantee_checks(cls.name, values),
            epsilon=eps,
            delta=Fraction(0) if cls.is_dp else None,
            dp=bool(cls.is_dp and values.get("partition", "grid") != "mdav"),
            holdout=0.2 if cls.name in SYNTHETIC_METHODS else 0.0,
            # only the columns it uses (red team s60 F3: one person's value in another column decided a DP release's
            # outcome); a method given no --columns (a GAN, an ML copy) reads the table's numbers as before
            columns=tuple([*columns, *([target] if target else [])]) or None,
        )

    def check_source(self, plan: Plan, data: pd.DataFrame, env: RunEnv) -> None:
        """The generator's own schema check (columns present, numeric where it needs numbers, bounds declared),
        before anything is charged (red team s24, A10)."""
        from veil.generators.base import get_generator

        p = dict(plan.params)
        cls = get_generator(p.pop("method"))
        columns, target, seed = p.pop("columns"), p.pop("target"), p.pop("_seed")
        ctx = context(env.policy, plan.source, columns, target, seed, data.columns)
        gen = cls(**p)
        gen.check_context(ctx, data)
        # the number of complete rows the generator will see: too few for a release that is not DP as a whole, or
        # for MDAV's k; a DP release refuses on none (its min_rows is 0: a refusal that flips when one person
        # joins is a membership oracle outside the ε)
        from veil.generators.sdc import complete_rows

        complete = int(complete_rows(data, ctx).sum())
        if complete < gen.min_rows():
            raise InputError(f"method {cls.name!r} needs at least {gen.min_rows()} complete rows, got {complete}")
        if "k" in plan.checks and complete < int(plan.checks["k"]):
            from veil.generators.sdc import refuse_vacuous

            raise refuse_vacuous(
                "min_samples" if "min_samples" in p else "k", int(plan.checks["k"]),
                f"cannot be met: the table has {complete} complete rows, fewer than that (use a smaller value)",
                method=cls.name,
            )  # fmt: skip

    def sanitise(self, plan: Plan, data: pd.DataFrame, env: RunEnv) -> Publication:
        from veil.generators.base import get_generator
        from veil.generators.sdc import clean_input, complete_rows

        p = dict(plan.params)
        cls = get_generator(p.pop("method"))
        columns, target, seed = p.pop("columns"), p.pop("target"), p.pop("_seed")
        gen = cls(**p)
        ctx = context(env.policy, plan.source, columns, target, seed, data.columns)
        if env.rng is not None:
            from dataclasses import replace

            ctx = replace(ctx, rng=env.rng)
        if seed is None:  # the metrics' own seed (their pairing, their classifier): no draw of the release uses it
            from dataclasses import replace

            ctx = replace(ctx, seed=int(env.generator.integers(2**31)))
        clean = clean_input(data, ctx)
        kept = np.flatnonzero(complete_rows(data, ctx))  # positions of clean's rows in data
        out = gen.run(clean, ctx)
        metrics: dict[str, Any] = _metrics(plan, clean, out, ctx, seed=int(ctx.seed or 0))
        metrics.update(rows_in=len(clean), rows_out=len(out.frame), info=dict(out.info))
        stated = out.info.get("columns") if isinstance(out.info.get("columns"), Mapping) else None
        prot: list[ColumnProtection] = []
        for name in out.frame.columns:
            name = str(name)
            if stated and name in stated and stated[name] in (*PROTECTIONS, COPIED):
                prot.append(ColumnProtection(name, stated[name], cls.summary))
            elif out.source is None:
                prot.append(ColumnProtection(name, "synthesised", cls.summary))
            elif name in ctx.columns:
                prot.append(ColumnProtection(name, "perturbed", cls.summary))
            else:
                prot.append(ColumnProtection(name, COPIED))
        group_k = plan.checks.get("k")
        return Publication(
            method=plan.method,
            frame=out.frame,
            columns=tuple(prot),
            synthetic=out.source is None and not plan.is_dp,
            source_rows=None if out.source is None else kept[np.asarray(out.source)],
            own_values=out.source is not None and out.info.get("own_values") is True,
            group_columns=tuple(ctx.columns) if group_k is not None else (),
            min_group=None if group_k is None else int(group_k),
            guarantee=out.guarantee,
            unrounded=() if gen.rounds_integers else tuple(c for c in ctx.columns if c in out.frame.columns),
            metrics=metrics,
            extra={
                "il": metrics.get("il"),
                "il_mean": metrics.get("il_mean"),
                "dr": metrics.get("dr"),
                "linkage_risk": metrics.get("linkage_risk"),
                "rows_in": len(clean),
                "rows_out": len(out.frame),
                "params": gen.params_dict(),
            },
        )
