"""``veil publish kanon``: a k-anonymous table (Mondrian, OKA, K-Member), audited independently.

Request keys: ``table``, ``output``, ``algorithm``, ``k``, ``qi``, ``sensitive``, ``hierarchies``,
``som_columns``, ``som_label``, ``som_neurons``, ``som_epochs``, ``missing``, ``split``, ``seed``,
``replace``, ``max_share``. The release holds the generalised QIs, the sensitive columns (unchanged, in classes
diverse by construction: no value on more than ``max_share`` of any class, :mod:`veil.generators.kanon.diversity`;
ℓ-diversity and t-closeness reported) and the SOM neuron column, nothing else.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from veil.errors import InputError, InternalError, PublicationRefused
from veil.generators.publication import ColumnProtection, Plan, Publication
from veil.generators.registry import PublishPlugin, RunEnv, register_plugin


@register_plugin
class KAnonPlugin(PublishPlugin):
    kind = "kanon"
    summary = "k-anonymity by generalisation (Mondrian, OKA, K-Member), optional SOM neuron column"

    sweep_param = "k"
    sweep_values = (2, 5, 10, 25)

    def plan(self, policy: Any, request: Mapping[str, Any]) -> Plan:
        from veil.generators.base import check_seed
        from veil.generators.columns import disjoint_roles, distinct_columns, require_declared_domains
        from veil.generators.kanon import canonical_algorithm
        from veil.generators.kanon.diversity import DEFAULT_MAX_SHARE, check_max_share
        from veil.generators.som import neuron_candidates

        algorithm = canonical_algorithm(request.get("algorithm", "kma"))
        hier = request.get("hierarchies")
        qi = distinct_columns(request["qi"], "--qi")
        sensitive = distinct_columns(request.get("sensitive") or [], "--sensitive")
        som_columns = distinct_columns(request.get("som_columns") or [], "--som-columns")
        disjoint_roles({"--qi": qi, "--sensitive": sensitive})
        # a sensitive column is published value by value: only values the policy declares, never the rows' own
        # (red team s42 A1: a declared open category `name` as --sensitive published every person's name)
        require_declared_domains(policy.tables.get(request["table"]), sensitive, "--sensitive", table=request["table"])
        # a numeric QI's labels are drawn on a grid of its declared bounds (s64 F7): without bounds its labels would be
        # its classes' [min, max], one person's value at an end; a hierarchy file generalises it by its tree instead
        # (only a QI the folder has a file for: the others get no tree, and were labelled [min, max], red team s66 F5)
        from veil.generators.kanon.hierarchies import find_hierarchy_files

        with_tree = set(find_hierarchy_files(hier, qi)) if hier is not None else set()
        spec = policy.tables.get(request["table"])
        numeric = [
            c for c in qi if c not in with_tree and getattr(getattr(spec, "columns", {}).get(c), "type", None) in ("int", "float")
        ]
        require_declared_domains(spec, numeric, "--qi", table=request["table"])
        som_label = request.get("som_label")
        som_label = None if som_label is None else distinct_columns([som_label], "--som-label")[0]
        _require_declared(policy.tables.get(request["table"]), [*som_columns, *([som_label] if som_label else [])])
        som_neurons = [int(v) for v in request.get("som_neurons") or (100, 300, 10)]
        if som_columns:
            neuron_candidates(*som_neurons)  # bounded, typed, before the data is read (s27 A9)
        # (α, k)-anonymity's α, checked before anything is read (red team s20b F4: classes diverse by construction);
        # it bounds the sensitive columns only: given without any it would be silently ignored (review s21)
        if request.get("max_share") is not None and not sensitive:
            raise InputError(
                f"--max-share {request['max_share']!r} bounds each class's share of a --sensitive column's value, and "
                "no --sensitive column is named: it would have no effect",
                hint="Name the sensitive columns with --sensitive (published unchanged, every class diverse), or drop "
                "--max-share",
            )
        max_share = check_max_share(request.get("max_share", DEFAULT_MAX_SHARE))
        # a request's seed is checked (typed) but reaches no draw and is not recorded: the random cluster seeds and the
        # row order come from the OS CSPRNG (red team s66 F1); `veil publish kanon --seed` is refused
        check_seed(request.get("seed"))
        return Plan(
            kind=self.kind,
            method=f"kanon-{algorithm}",
            source=request["table"],
            output=request["output"],
            replace=bool(request.get("replace")),
            params={
                "algorithm": algorithm,
                "k": int(request["k"]),
                "qi": qi,
                "sensitive": sensitive,
                "hierarchy_dir": None if hier is None else str(Path(hier).resolve()),
                "missing": request.get("missing", "drop"),
                "mondrian_split": request.get("split", "gain") if algorithm.startswith("mondrian") else None,
                "som_columns": som_columns,
                "som_label": som_label,
                "som_neurons": som_neurons,
                "som_epochs": int(request.get("som_epochs", 20)),
                "max_share": max_share,
            },
            checks={"k": float(request["k"])},
            # only the columns it uses (red team s60 F3)
            columns=tuple(dict.fromkeys([*qi, *sensitive, *som_columns, *([som_label] if som_label else [])])),
        )

    def sanitise(self, plan: Plan, data: pd.DataFrame, env: RunEnv) -> Publication:
        from contextlib import nullcontext

        from veil._progress import progress as progress_bar
        from veil.auditor.anonymity import audit_anonymity
        from veil.generators.kanon import MISSING_LEAF, SOM_COLUMN, anonymise
        from veil.generators.kanon.hierarchies import find_hierarchy_files, load_hierarchy
        from veil.generators.kanon.publish import NCP_DEFINITION, _NoBar, _population
        from veil.policy import ColumnSpec

        p = plan.params
        qi, sensitive, k, hierarchies = p["qi"], p["sensitive"], p["k"], p["hierarchy_dir"]
        som_columns, som_label = p["som_columns"], p["som_label"]
        declared = env.spec.columns if env.spec is not None else None
        for name in [*qi, *sensitive, *som_columns, *([som_label] if som_label else [])]:
            if declared is not None and name in data.columns and name not in declared:
                raise PublicationRefused(
                    f"column {name!r} is not declared in the policy's table spec: it may not be published (as a "
                    "quasi-identifier, sensitive, SOM or SOM label column)",
                    hint="Declare it in [tables.<table>.columns] if it is not an identifier, else leave it out",
                )
        if som_columns and som_label is None:
            if not sensitive:
                from veil.errors import InputError

                raise InputError("SOM neuron search needs a label column", hint="Pass --som-label or --sensitive")
            som_label = sensitive[0]
        hier_files = find_hierarchy_files(hierarchies, qi) if hierarchies is not None else {}
        trees = {c: load_hierarchy(f) for c, f in hier_files.items()}
        data = _within_domains(data, qi, sensitive, env.spec, trees)
        neurons = tuple(p["som_neurons"])
        n_maps = len(range(neurons[0], neurons[1] + 1, max(neurons[2], 1))) if som_columns else 0
        started = time.perf_counter()
        with (
            progress_bar(total=len(data), desc=f"kanon {p['algorithm']} k={k}", unit="row") as bar,
            progress_bar(total=n_maps, desc="SOM neuron search", unit="map") if n_maps else nullcontext(_NoBar()) as som_bar,
        ):
            result = anonymise(
                data,
                qi=qi,
                k=k,
                algorithm=p["algorithm"],
                hierarchies=hierarchies,
                sensitive=sensitive,
                som_columns=som_columns,
                som_label=som_label,
                som_neurons=neurons,
                som_epochs=p["som_epochs"],
                missing=p["missing"],
                split=p["mondrian_split"] or "gain",
                seed=None,  # OKA's and K-Member's random choices: 256 fresh bits (red team s66 F1)
                grids=_label_grids(env.spec, qi, trees),
                max_share=p["max_share"],
                tick=bar.update,
                som_tick=som_bar.update,
            )
        group_columns = [*qi, *([SOM_COLUMN] if som_columns else [])]
        shares = _require_diverse(result.table, group_columns, list(sensitive), p["max_share"], plan.output, som_columns)
        audit_start = time.perf_counter()
        report = audit_anonymity(
            result.table,
            list(qi),
            sensitive=list(sensitive),
            hierarchies=hierarchies,
            population=_population(data, qi, p["missing"]),
            population_name=f"source table {plan.source!r}",
            extra_qi=[SOM_COLUMN] if som_columns else [],
            missing=p["missing"],
        )
        audit_seconds = time.perf_counter() - audit_start
        if report.k < k:
            raise PublicationRefused(
                f"refusing to publish {plan.output!r}: the independent audit found a class of {report.k} rows, below k={k}",
                hint="This is a bug in the generator, please report it",
            )
        if abs(report.ncp_percent - result.ncp_percent) > 1e-6:
            raise InternalError(
                f"generator NCP {result.ncp_percent:.6f}% and audit NCP {report.ncp_percent:.6f}% disagree for {plan.output!r}"
            )
        columns = [ColumnProtection(c, "generalised", "hierarchy" if c in hier_files else "range / flat tree") for c in qi]
        columns += [
            ColumnProtection(
                c,
                "sensitive",
                f"unchanged; covered by {k}-anonymity in classes whose commonest value is at most {p['max_share']:g} of "
                f"their rows ((α, k)-anonymity, α = {p['max_share']:g}; ℓ-diversity and t-closeness reported)",
            )
            for c in sensitive
        ]
        if som_columns:
            columns.append(ColumnProtection(SOM_COLUMN, "generalised", f"SOM neuron of {', '.join(som_columns)}"))
        metrics = {
            "ncp_percent": result.ncp_percent,
            "ncp_definition": NCP_DEFINITION,
            "ncp_per_qi": result.ncp_per_qi,
            "class_sizes": {str(s): c for s, c in result.class_sizes.items()},
            "min_class_size": report.k,
            "n_classes": report.n_classes,
            "rows_dropped": result.rows_dropped,
            "seconds": result.seconds,
            "cpu_seconds": result.cpu_seconds,
            "audit_seconds": audit_seconds,
            "total_seconds": time.perf_counter() - started,
            "audit": report.as_dict(),
            "som": result.som,
            "max_share": p["max_share"],
            "sensitive_max_share": shares,
        }
        return Publication(
            method=plan.method,
            frame=result.table,
            columns=tuple(columns),
            # the SOM neuron is published, so k must hold for the classes it forms with the QIs too
            group_columns=(*qi, *([SOM_COLUMN] if som_columns else [])),
            min_group=k,
            sensitive=tuple(sensitive),
            max_share=float(p["max_share"]),  # enforced again by the gate, on the published values (red team s72 F4)
            guarantee=f"{k}-anonymity on the quasi-identifiers {', '.join([*qi, *([SOM_COLUMN] if som_columns else [])])} "
            f"(no DP); sensitive columns unchanged, no value on more than {p['max_share']:g} of any class",
            # the SOM neuron is the plug-in's own column (no policy declares it): its domain, the neuron indices
            own_columns=(
                {SOM_COLUMN: ColumnSpec(SOM_COLUMN, "int", 0.0, float(int(result.som["neurons"]) - 1))} if som_columns else {}
            ),
            params={
                "hierarchies": {c: str(Path(f).resolve()) for c, f in hier_files.items()},
                "som_label": som_label if som_columns else None,
            },
            metrics=metrics,
            # the method's own labels (public: the hierarchy files and the option), accepted by the gate (s27 A11/A12)
            labels={
                c: frozenset(
                    (set(trees[c].nodes) - set(trees[c].leaves) if c in trees else set())
                    | ({MISSING_LEAF} if p["missing"] == "leaf" or _declared_flat(env.spec, c, trees) else set())
                )
                for c in qi
            },
            extra={
                "k": int(k),
                "ncp_percent": result.ncp_percent,
                "min_class_size": report.k,
                "seconds": result.seconds,
                "algorithm": p["algorithm"],
                "rows_dropped": result.rows_dropped,
                "classes": report.n_classes,
                "l_diversity": report.l_diversity,
                "t_closeness": report.t_closeness,
                "prosecutor_max": report.prosecutor_max,
                "journalist_max": report.journalist_max,
                "marketer": report.marketer,
                "som_neurons": result.som.get("neurons"),
                "k_with_som": report.k_with.get(SOM_COLUMN),
            },
        )


def _require_declared(spec: Any, columns: list[str]) -> None:
    """InputError, from the policy alone (before anything is read or run), for a ``--som-columns`` or ``--som-label``
    column the policy does not declare: the published SOM neuron is a function of those columns (and its number of
    neurons is chosen with the label), so an undeclared column, an identifier or a value analysts may not even count,
    would reach the public table through it (red team s51, A2)."""
    declared = getattr(spec, "columns", None)
    if declared is None:
        return  # not a table of the policy: the transaction refuses it
    for name in columns:
        if name not in declared:
            from veil.errors import InputError

            raise InputError(
                f"column {name!r} is not declared in the policy's table spec: the published SOM neuron column may not be "
                "computed from it (--som-columns, --som-label)",
                hint="Declare it in [tables.<table>.columns] if analysts may learn about it, else leave it out",
            )


def _require_diverse(
    table: pd.DataFrame, groups: list[str], sensitive: list[str], max_share: float, output: str, som_columns: list[str]
) -> dict[str, float]:
    """Per sensitive column, the largest share of a published class (rows equal on ``groups``) one value holds; a
    refusal when one is above ``max_share``. The algorithms make every class diverse by construction (red team s20b
    F4: the NULL that used to blank a > 90 % class marked its composition, and nothing is suppressed now), so without
    a SOM column this cannot happen; the SOM neuron splits classes further (it is grouped on like a QI), and a
    (QIs, neuron) class that is not diverse refuses the table, as one below k does."""
    from veil.generators.kanon.diversity import worst_shares

    shares = worst_shares(table, groups, sensitive)
    for name, share in shares.items():
        if share <= max_share + 1e-12:
            continue
        if som_columns:
            raise PublicationRefused(
                f"refusing to publish {output!r}: with the SOM neuron column, a class of the QIs and som_neuron holds one "
                f"{name!r} value on {share:.3g} of its rows, above max_share={max_share:g}",
                hint="Use fewer SOM neurons (--som-neurons), a larger k, or publish without --som-columns",
            )
        raise InternalError(
            f"a published class of {output!r} holds one {name!r} value on {share:.3g} of its rows, above {max_share:g}"
        )
    return shares


def _within_domains(data: pd.DataFrame, qi: list[str], sensitive: list[str], spec: Any, trees: Mapping[str, Any]) -> pd.DataFrame:
    """The rows as k-anonymity reads them: a value outside its declared domain is a missing value, whatever it is
    (red team s27 A3/A3b: one person's ``'F '`` or undeclared ``'HIGH'`` refused the whole table, naming the value,
    while ``'F'``/``'high'`` published). Categories are compared without surrounding blanks (as hierarchy leaves
    are read); a QI with a hierarchy file keeps the file's leaves only; a sensitive column (published unchanged)
    keeps its declared ``values``, or its declared ``[lower, upper]``. Missing values then follow ``--missing``
    (dropped, or the leaf ``?`` for a categorical QI), as they would for a NULL."""
    from veil.generators.gate import _same_value
    from veil.generators.kanon import MISSING_LEAF

    out = data.copy()
    columns = spec.columns if spec is not None else {}
    for name in dict.fromkeys([*qi, *sensitive]):
        if name not in out.columns:
            continue
        series = out[name]
        if name in qi and getattr(columns.get(name), "type", None) == "bool":
            # a category of its two declared values, as text: numpy refused to subtract booleans when the audit measured
            # the QI's span, and every table with a bool QI ended in a TypeError (red team s51, A4)
            series = series.astype(object).map(lambda v: None if pd.isna(v) else str(bool(v)))
        if not pd.api.types.is_numeric_dtype(series):
            series = series.map(lambda v: v.strip() if isinstance(v, str) else v)
        keep = series.notna()
        if name in qi and name not in trees and pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series):
            # ±inf is no number of any declared domain: missing, as queries read it (red team s35 A4: one person's inf
            # made every NCP NaN and the population match refuse the table)
            keep &= np.isfinite(series.astype("float64"))
            if getattr(columns.get(name), "type", None) == "int":
                # an int QI is read as the query path reads it, a whole number (one person's 2.5, stored as text, is 3,
                # half away from zero as DuckDB casts the text): its cell on the grid is then a cell of integers, as
                # the audit reads it (red team s66 F5: Mondrian published that person's [2.5, 3])
                x = series.astype("float64")
                series = np.sign(x) * np.floor(np.abs(x) + 0.5)
        if name in trees:
            keep &= series.astype(str).isin(set(trees[name].leaves))
        col = columns.get(name)
        declared = getattr(col, "values", None) if col is not None else None
        if name in qi and name not in trees and declared and not pd.api.types.is_numeric_dtype(series):
            # a flat tree is built from the values: an undeclared one becomes the unknown leaf "?" (generalised like
            # any leaf, accepted by the gate), never a class labelled with it (OKA published k people's
            # "astronaut" class as such, and the gate refused the table naming it)
            allowed = {_same_value(v) for v in declared}
            odd = series.map(lambda v, ok=allowed: not pd.isna(v) and _same_value(v) not in ok).astype(bool)
            series = series.astype(object).where(~odd, MISSING_LEAF)
        if name in sensitive and col is not None:
            if declared:
                allowed = {_same_value(v) for v in declared}
                keep &= series.map(lambda v, ok=allowed: not pd.isna(v) and _same_value(v) in ok).astype(bool)
            elif getattr(col, "lower", None) is not None and pd.api.types.is_numeric_dtype(series):
                keep &= series.between(float(col.lower), float(col.upper))
        if keep.all():
            out[name] = series
        elif pd.api.types.is_integer_dtype(series):
            out[name] = series.astype("Int64").where(keep)
        elif pd.api.types.is_numeric_dtype(series):
            out[name] = series.where(keep)
        else:
            out[name] = series.astype(object).where(keep, None)
    return out


def _label_grids(spec: Any, qi: list[str], trees: Mapping[str, Any]) -> dict[str, tuple[float, float, bool]]:
    """Each numeric QI's public label grid, from its declared bounds alone (``generalise.public_grid``): a class's
    label runs from its smallest member's grid cell start to its largest member's cell end, so an interior value one
    person alone holds is never a label's end (red team s64 F7: Mondrian's ``[900, 1234]``, OKA's ``[1234, 2100]``,
    K-Member's ``[2300, 2567]``). A QI with a hierarchy file is generalised by its tree instead."""
    from veil.generators.kanon.generalise import public_grid

    columns = getattr(spec, "columns", None) or {}
    grids: dict[str, tuple[float, float, bool]] = {}
    for name in qi:
        col = columns.get(name)
        if name in trees or col is None or getattr(col, "type", None) not in ("int", "float"):
            continue
        if col.bounded:
            grids[name] = public_grid(float(col.lower), float(col.upper), integer=col.type == "int")
        elif getattr(col, "values", None):
            # an int column declared by its values: the grid of their range (one person's 2.5 or undeclared 7 among
            # them was a label's end, red team s66 F5)
            values = [float(v) for v in col.values]
            grids[name] = public_grid(min(values), max(values), integer=col.type == "int")
    return grids


def _declared_flat(spec: Any, column: str, trees: Mapping[str, Any]) -> bool:
    """A QI with declared values and no hierarchy file: its undeclared values are published as the leaf ``?``."""
    col = spec.columns.get(column) if spec is not None else None
    return column not in trees and bool(getattr(col, "values", None))
