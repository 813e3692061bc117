"""k-anonymous publication: Mondrian (strict/relaxed), OKA and K-Member, with optional SOM column.

:func:`anonymise` is the pure pandas/numpy entry point (no database); ``publish.py`` wraps it for
a policy's warehouse (table + release record, after the independent audit).

Output rows: the quasi-identifiers (QIs) generalised (numeric → ``[lo, hi]`` text or the value
itself; categorical → a node of the taxonomy tree, ``*`` at the top), the sensitive columns
unchanged, and, with ``som_columns``, one ``som_neuron`` column; every other column is dropped.
Rows are shuffled (a seeded permutation) so the published order does not follow the source's.

Missing values (``missing=``):

* ``"drop"`` (default): rows with a missing QI, sensitive or SOM value are removed before
  anonymising (Adult: 32,561 → 30,162 rows, as in the paper);
* ``"leaf"``: a missing categorical QI becomes its own leaf ``?`` directly under ``*`` (so it
  only ever generalises to ``?`` or ``*``); rows missing a numeric QI, a sensitive or a SOM value
  are still dropped.

>>> import pandas as pd
>>> df = pd.DataFrame({"age": [21, 22, 23, 24, 61, 62, 63, 64], "sex": list("FFMMFFMM"),
...                    "income": list("ab" * 4)})
>>> res = anonymise(df, qi=["age", "sex"], k=2, algorithm="mondrian", sensitive=["income"], seed=0)
>>> sorted(set(res.table["age"])), res.min_class_size
(['[21, 22]', '[23, 24]', '[61, 62]', '[63, 64]'], 2)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from veil.errors import InputError, did_you_mean
from veil.generators.kanon.generalise import QISpace
from veil.generators.kanon.hierarchies import Hierarchy, load_hierarchies
from veil.generators.kanon.kmember import kmember
from veil.generators.kanon.mondrian import mondrian
from veil.generators.kanon.ncp import ncp_per_qi
from veil.generators.kanon.oka import oka

__all__ = ["ALGORITHMS", "MISSING", "SOM_COLUMN", "KAnonResult", "anonymise", "canonical_algorithm"]

#: Algorithm names accepted (aliases map to the first name of each line in ``_ALIASES``).
ALGORITHMS = ("mondrian", "mondrian-relaxed", "oka", "kma")
_ALIASES = {"kmember": "kma", "k-member": "kma", "mondrian-strict": "mondrian", "relaxed-mondrian": "mondrian-relaxed"}
MISSING = ("drop", "leaf")
#: Name of the neuron-index column added by SOM augmentation.
SOM_COLUMN = "som_neuron"


def canonical_algorithm(name: str) -> str:
    """``"kmember"`` → ``"kma"`` etc.; unknown names raise InputError with a suggestion."""
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    if key not in ALGORITHMS:
        raise InputError(
            f"unknown k-anonymity algorithm {name!r}",
            hint=did_you_mean(key, [*ALGORITHMS, *_ALIASES]) or f"Use one of {', '.join(ALGORITHMS)}",
        )
    return key


@dataclass(frozen=True)
class KAnonResult:
    """What :func:`anonymise` produced (the table is already shuffled)."""

    table: pd.DataFrame
    labels: np.ndarray  # equivalence class of each published row
    algorithm: str
    k: int
    qi: tuple[str, ...]
    ncp_percent: float
    ncp_per_qi: dict[str, float]
    class_sizes: dict[int, int]
    seconds: float  # anonymisation algorithm only, wall clock
    cpu_seconds: float  # the same, CPU time of this process (less sensitive to other load)
    rows_in: int
    rows_dropped: int
    som: dict[str, Any] = field(default_factory=dict)

    @property
    def min_class_size(self) -> int:
        return min(self.class_sizes)

    @property
    def n_classes(self) -> int:
        return sum(self.class_sizes.values())


def _resolve_hierarchies(hierarchies: str | Path | Mapping[str, Hierarchy] | None, qi: Sequence[str]) -> dict[str, Hierarchy]:
    if hierarchies is None:
        return {}
    if isinstance(hierarchies, (str, Path)):
        return load_hierarchies(hierarchies, qi)
    return {c: h for c, h in hierarchies.items() if c in qi}


def _clean(
    df: pd.DataFrame, qi: Sequence[str], needed: Sequence[str], hier: dict[str, Hierarchy], missing: str
) -> tuple[pd.DataFrame, dict[str, Hierarchy]]:
    if missing not in MISSING:
        raise InputError(f"unknown missing-value policy {missing!r}", hint="Use --missing drop or --missing leaf")
    if missing == "drop":
        return df.dropna(subset=list(needed)).reset_index(drop=True), hier
    out = df.copy()
    hier = dict(hier)
    for col in qi:
        if out[col].isna().any() and not pd.api.types.is_numeric_dtype(out[col]):
            out[col] = out[col].astype(object).where(out[col].notna(), "?")
            if col in hier:
                hier[col] = hier[col].with_leaf("?")
    return out.dropna(subset=list(needed)).reset_index(drop=True), hier


def anonymise(
    df: pd.DataFrame,
    *,
    qi: Sequence[str],
    k: int,
    algorithm: str = "kma",
    hierarchies: str | Path | Mapping[str, Hierarchy] | None = None,
    sensitive: Sequence[str] = (),
    som_columns: Sequence[str] = (),
    som_label: str | None = None,
    som_neurons: tuple[int, int, int] = (100, 300, 10),
    som_epochs: int = 20,
    missing: str = "drop",
    split: str = "gain",
    seed: int | None = None,
    tick: Callable[[int], None] | None = None,
    som_tick: Callable[[int], None] | None = None,
) -> KAnonResult:
    """k-anonymise ``df`` on ``qi`` with ``algorithm`` (see module docstring for the output).

    ``tick(rows)`` is called as rows are placed in classes; ``som_tick(1)`` per SOM map searched.
    """
    algorithm = canonical_algorithm(algorithm)
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 2:
        raise InputError(f"k must be an integer of at least 2, got {k!r}", hint="Use --k 2 or more")
    qi = list(qi)
    sensitive = list(sensitive)
    som_columns = list(som_columns)
    for col in [*qi, *sensitive, *som_columns, *([som_label] if som_label else [])]:
        if col not in df.columns:
            raise InputError(f"column {col!r} is not in the table", hint=did_you_mean(col, [str(c) for c in df.columns]))
    overlap = set(qi) & set(sensitive)
    if overlap:
        raise InputError(f"column {sorted(overlap)[0]!r} is both a quasi-identifier and sensitive", hint="Pick one role")
    if som_columns and set(som_columns) & set(qi):
        raise InputError("SOM columns must not be quasi-identifiers", hint="The SOM maps columns the QIs leave out")
    hier = _resolve_hierarchies(hierarchies, qi)
    needed = list(dict.fromkeys([*qi, *sensitive, *som_columns, *([som_label] if som_label else [])]))
    clean, hier = _clean(df, qi, needed, hier, missing)
    if len(clean) < k:
        raise InputError(f"only {len(clean)} complete rows, fewer than k={k}", hint="Lower k or use --missing leaf")
    rng = np.random.default_rng(seed)
    space = QISpace(clean, qi, hier)

    start, cpu_start = time.perf_counter(), time.process_time()
    if algorithm in ("mondrian", "mondrian-relaxed"):
        labels = mondrian(space, k, relaxed=algorithm == "mondrian-relaxed", split=split, tick=tick)
    elif algorithm == "oka":
        labels = oka(space, k, rng=rng, tick=tick)
    else:
        labels = kmember(space, k, rng=rng, tick=tick)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start

    table = space.generalised_frame(labels)
    for col in sensitive:
        table[col] = clean[col].to_numpy()
    som_info: dict[str, Any] = {}
    if som_columns:
        from veil.generators.som import choose_neurons, neuron_candidates

        x = clean[som_columns].to_numpy(dtype=np.float64)
        candidates = neuron_candidates(*som_neurons)
        if som_label is not None:
            codes, cats = pd.factorize(clean[som_label], sort=True)
            if len(cats) < 2:
                raise InputError(f"SOM label {som_label!r} has fewer than 2 values", hint="Choose another --som-label")
            model, scores = choose_neurons(x, codes, candidates, epochs=som_epochs, seed=seed, tick=som_tick)
        else:
            from veil.generators.som import fit_som

            model, scores = fit_som(x, candidates[-1], epochs=som_epochs, seed=seed), {}
        idx = model.transform(x)
        table[SOM_COLUMN] = idx
        som_info = {
            "columns": som_columns,
            "neurons": model.n_neurons,
            "neurons_used": len(np.unique(idx)),
            "label": som_label,
            "search": {str(n): round(r, 6) for n, r in scores.items()},
            "quantisation_error": round(model.quantisation_error(x), 6),
        }
    order = rng.permutation(len(table))
    table = table.iloc[order].reset_index(drop=True)
    labels = labels[order]
    sizes = pd.Series(np.bincount(labels)).value_counts().sort_index()
    per_qi = ncp_per_qi(space, labels[np.argsort(order)])
    return KAnonResult(
        table=table,
        labels=labels,
        algorithm=algorithm,
        k=int(k),
        qi=tuple(qi),
        ncp_percent=float(100.0 * per_qi.mean()),
        ncp_per_qi={c: float(100.0 * v) for c, v in zip(qi, per_qi, strict=True)},
        class_sizes={int(s): int(c) for s, c in sizes.items()},
        seconds=seconds,
        cpu_seconds=cpu_seconds,
        rows_in=len(df),
        rows_dropped=len(df) - len(clean),
        som=som_info,
    )
