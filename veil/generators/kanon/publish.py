"""Publish a k-anonymous table from a policy's warehouse: anonymise, audit independently, write, record.

The work is the ``kanon`` plug-in (:mod:`veil.generators.plugins.kanon`) run by the one publish
transaction (:mod:`veil.generators.transaction`). The audit
(:func:`veil.auditor.anonymity.audit_anonymity`) regroups the generalised rows on its own; if any
class is smaller than ``k`` nothing is written and :class:`~veil.errors.PublicationRefused` is
raised. Otherwise the table and its release record (kind ``publication``, method
``kanon-<algorithm>``: parameters, NCP, class-size distribution, audit results, timings, column
protections) appear together; the table is public to analysts.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from veil.errors import InputError

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
    replace: bool = False,
    export: str | Path | None = None,
    progress: bool = True,
    max_share: float | None = None,
) -> dict[str, Any]:
    """Anonymise ``table`` into ``output`` through the publish transaction (plug-in
    :mod:`veil.generators.plugins.kanon`); returns a summary dict. ``export`` also writes the
    published table to a .csv/.parquet file (never over an existing file unless ``replace``); ``max_share``: no
    sensitive value on more than this share of any class (default 0.9, :mod:`veil.generators.kanon.diversity`)."""
    from veil.generators.transaction import publish, refuse_veil_file
    from veil.store.warehouse import export_frame, read_table

    if export is not None:
        if Path(export).suffix.lower() not in (".csv", ".parquet"):
            raise InputError(f"cannot export to {str(export)!r}", hint="Use a .csv or .parquet file name")
        refuse_veil_file(policy, Path(export), "--export")  # never the ledger, warehouse or policy (red team s24, A11)
        if Path(export).exists() and not replace:
            raise InputError(f"file {str(export)!r} already exists", hint="Choose another --export path or pass --replace")
    started = time.perf_counter()
    request = {
        "table": table,
        "output": output,
        "algorithm": algorithm,
        "k": k,
        "qi": list(qi),
        "sensitive": list(sensitive),
        "hierarchies": hierarchies,
        "som_columns": list(som_columns),
        "som_label": som_label,
        "som_neurons": som_neurons,
        "som_epochs": som_epochs,
        "missing": missing,
        "split": split,
        "replace": replace,
    }
    if max_share is not None:
        request["max_share"] = max_share
    result = publish(policy, "kanon", request, progress=progress)
    summary = {**result.as_dict(), "total_seconds": time.perf_counter() - started}
    if export is not None:
        export_frame(read_table(policy, output), export, replace=replace)
    summary["exported"] = str(export) if export is not None else None
    summary["interrupted"] = result.interrupted
    return summary


def kanon_params_from_release(policy: Any, table: str) -> dict[str, Any] | None:
    """The parameters of the k-anonymity publication that wrote ``table`` (None if there is none)."""
    from veil.store.publications import published_tables

    rel = published_tables(policy).get(table)
    if rel is None or not str(rel.method).startswith("kanon-"):
        return None
    return dict(rel.params)
