"""Publish a k-anonymous table from a policy's warehouse: anonymise, audit independently, write, record.

The audit (:func:`veil.auditor.anonymity.audit_anonymity`) regroups the generalised rows on its
own; if any class is smaller than ``k`` nothing is written and :class:`~veil.errors.ReleaseError`
is raised. Otherwise the table is written atomically and a release record (kind
``publication``, method ``kanon-<algorithm>``) holds the parameters, NCP, class-size
distribution, audit results and timings; a publication with ``table=`` is public to analysts.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import pandas as pd

from veil.errors import InputError, InternalError, ReleaseError
from veil.generators.kanon import SOM_COLUMN, anonymise, canonical_algorithm
from veil.generators.kanon.hierarchies import find_hierarchy_files

__all__ = ["NCP_DEFINITION", "kanon_params_from_release", "publish_kanon"]

NCP_DEFINITION = (
    "reference code: numeric (max-min)/domain range; categorical leaves under the LCA / all leaves, "
    "0 for a single leaf; mean over QIs and rows, percent"
)


class _NoBar:
    def update(self, n: int = 1) -> None:
        pass


def _population(df: pd.DataFrame, qi: Sequence[str], missing: str) -> pd.DataFrame:
    pop = df[list(qi)].copy()
    if missing == "leaf":
        for col in qi:
            if not pd.api.types.is_numeric_dtype(pop[col]):
                pop[col] = pop[col].astype(object).where(pop[col].notna(), "?")
    return pop.dropna()


def publish_kanon(
    policy: Any,
    *,
    table: str,
    output: str,
    algorithm: str,
    k: int,
    qi: Sequence[str],
    sensitive: Sequence[str] = (),
    hierarchies: str | Path | None = None,
    som_columns: Sequence[str] = (),
    som_label: str | None = None,
    som_neurons: tuple[int, int, int] = (100, 300, 10),
    som_epochs: int = 20,
    missing: str = "drop",
    split: str = "gain",
    seed: int | None = None,
    replace: bool = False,
    export: str | Path | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Anonymise ``table`` into ``output`` (see module docstring); returns a summary dict."""
    from veil._progress import progress as progress_bar
    from veil.auditor.anonymity import audit_anonymity
    from veil.store.releases import record_release
    from veil.store.warehouse import export_frame, read_table, write_table

    algorithm = canonical_algorithm(algorithm)
    if export is not None and Path(export).suffix.lower() not in (".csv", ".parquet"):
        raise InputError(f"cannot export to {str(export)!r}", hint="Use a .csv or .parquet file name")
    started = time.perf_counter()
    source = read_table(policy, table)
    if som_columns and som_label is None:
        if not sensitive:
            raise InputError("SOM neuron search needs a label column", hint="Pass --som-label or --sensitive")
        som_label = sensitive[0]
    hier_files = find_hierarchy_files(hierarchies, qi) if hierarchies is not None else {}
    n_maps = len(range(som_neurons[0], som_neurons[1] + 1, max(som_neurons[2], 1))) if som_columns else 0
    with (
        progress_bar(total=len(source), desc=f"kanon {algorithm} k={k}", unit="row") as bar,
        progress_bar(total=n_maps, desc="SOM neuron search", unit="map") if n_maps else nullcontext(_NoBar()) as som_bar,
    ):
        result = anonymise(
            source,
            qi=qi,
            k=k,
            algorithm=algorithm,
            hierarchies=hierarchies,
            sensitive=sensitive,
            som_columns=som_columns,
            som_label=som_label,
            som_neurons=som_neurons,
            som_epochs=som_epochs,
            missing=missing,
            split=split,
            seed=seed,
            tick=bar.update,
            som_tick=som_bar.update,
        )
    audit_start = time.perf_counter()
    report = audit_anonymity(
        result.table,
        list(qi),
        sensitive=list(sensitive),
        hierarchies=hierarchies,
        population=_population(source, qi, missing),
        population_name=f"source table {table!r}",
        extra_qi=[SOM_COLUMN] if som_columns else [],
        missing=missing,
    )
    audit_seconds = time.perf_counter() - audit_start
    if report.k < k:
        raise ReleaseError(
            f"refusing to publish {output!r}: the independent audit found a class of {report.k} rows, below k={k}",
            hint="This is a bug in the generator, please report it",
        )
    if abs(report.ncp_percent - result.ncp_percent) > 1e-6:
        raise InternalError(
            f"generator NCP {result.ncp_percent:.6f}% and audit NCP {report.ncp_percent:.6f}% disagree for {output!r}"
        )
    total_seconds = time.perf_counter() - started
    params = {
        "source_table": table,
        "algorithm": algorithm,
        "k": int(k),
        "qi": list(qi),
        "sensitive": list(sensitive),
        "hierarchies": {c: str(p) for c, p in hier_files.items()},
        "hierarchy_dir": str(hierarchies) if hierarchies is not None else None,
        "missing": missing,
        "mondrian_split": split if algorithm.startswith("mondrian") else None,
        "seed": seed,
        "som_columns": list(som_columns),
        "som_label": som_label if som_columns else None,
        "som_neurons": list(som_neurons) if som_columns else None,
    }
    metrics = {
        "ncp_percent": result.ncp_percent,
        "ncp_definition": NCP_DEFINITION,
        "ncp_per_qi": result.ncp_per_qi,
        "class_sizes": {str(s): c for s, c in result.class_sizes.items()},
        "min_class_size": report.k,
        "n_classes": report.n_classes,
        "rows": len(result.table),
        "rows_dropped": result.rows_dropped,
        "seconds": result.seconds,
        "cpu_seconds": result.cpu_seconds,
        "audit_seconds": audit_seconds,
        "total_seconds": total_seconds,
        "audit": report.as_dict(),
        "som": result.som,
    }
    write_table(policy, output, result.table, replace=replace)
    release_id = record_release(
        policy,
        kind="publication",
        method=f"kanon-{algorithm}",
        table=output,
        params=params,
        metrics=metrics,
    )
    if export is not None:
        export_frame(result.table, export)
    return {
        "table": output,
        "k": int(k),
        "ncp_percent": result.ncp_percent,
        "min_class_size": report.k,
        "seconds": result.seconds,
        "release_id": release_id,
        "algorithm": algorithm,
        "rows": len(result.table),
        "rows_dropped": result.rows_dropped,
        "classes": report.n_classes,
        "l_diversity": report.l_diversity,
        "t_closeness": report.t_closeness,
        "prosecutor_max": report.prosecutor_max,
        "journalist_max": report.journalist_max,
        "marketer": report.marketer,
        "som_neurons": result.som.get("neurons"),
        "k_with_som": report.k_with.get(SOM_COLUMN),
        "total_seconds": total_seconds,
        "exported": str(export) if export is not None else None,
    }


def kanon_params_from_release(policy: Any, table: str) -> dict[str, Any] | None:
    """The parameters of the k-anonymity publication that wrote ``table`` (None if there is none)."""
    from veil.store.releases import published_tables

    rel = published_tables(policy).get(table)
    if rel is None or not str(rel.method).startswith("kanon-"):
        return None
    return dict(rel.params)
