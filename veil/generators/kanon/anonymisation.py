"""k-anonymise a DataFrame: :class:`KAnonConfig` (every parameter, frozen) → :func:`anonymise` → :class:`KAnonResult`.

:func:`anonymise` is the pure pandas/numpy entry point (no database); ``publish.py`` wraps it for
a policy's warehouse (table + release record, after the independent audit).

Output rows: the quasi-identifiers (QIs) generalised (numeric → ``[lo, hi]`` text or the value
itself; categorical → a node of the taxonomy tree, ``*`` at the top), the sensitive columns
unchanged, and, with ``som_columns``, one ``som_neuron`` column; every other column is dropped.
Rows are shuffled with the OS CSPRNG (or the test-only ``rng``) so the published order does not
follow the source's.

Missing values (``missing=``):

* ``"drop"`` (default): rows with a missing QI, sensitive or SOM value are removed before
  anonymising (Adult: 32,561 → 30,162 rows, as in the paper);
* ``"leaf"``: a missing categorical QI becomes its own leaf ``?`` directly under ``*`` (so it
  only ever generalises to ``?`` or ``*``); every QI tree read from the hierarchies gets that leaf,
  whether or not the column has NULLs, so the audit (``audit_anonymity(..., missing="leaf")``) rebuilds the
  same trees from the hierarchy folder alone; rows missing a numeric QI, a sensitive or a SOM value
  are still dropped.

NCP divides a numeric QI's interval width by the column's range over the *population*: the
source rows whose QIs are known (after the ``missing`` policy), including rows dropped only
because a sensitive or SOM value is missing, which is the range the audit sees.

>>> import pandas as pd
>>> df = pd.DataFrame({"age": [21, 22, 23, 24, 61, 62, 63, 64], "sex": list("FFMMFFMM"),
...                    "income": list("ab" * 4)})
>>> config = KAnonConfig(qi=("age", "sex"), k=2, algorithm="mondrian", sensitive=("income",), seed=0)
>>> res = anonymise(df, config)
>>> sorted(set(res.table["age"])), res.min_class_size
(['(-inf, 22]', '[23, 24]', '[61, 62]', '[63, inf)'], 2)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from veil.errors import InputError, InternalError, VacuousParameter, did_you_mean
from veil.generators.kanon.diversity import DEFAULT_MAX_SHARE, Diversity, check_max_share, require_feasible
from veil.generators.kanon.generalise import QISpace
from veil.generators.kanon.hierarchies import Hierarchy, load_hierarchies
from veil.generators.kanon.kmember import kmember
from veil.generators.kanon.mondrian import mondrian
from veil.generators.kanon.ncp import ncp_per_qi
from veil.generators.kanon.oka import oka

__all__ = [
    "ALGORITHMS",
    "MISSING",
    "MISSING_LEAF",
    "SOM_COLUMN",
    "KAnonConfig",
    "KAnonResult",
    "anonymise",
    "canonical_algorithm",
    "population_rows",
]

#: Algorithm names accepted (aliases map to the first name of each line in ``_ALIASES``).
ALGORITHMS = ("mondrian", "mondrian-relaxed", "oka", "kma")
_ALIASES = {"kmember": "kma", "k-member": "kma", "mondrian-strict": "mondrian", "relaxed-mondrian": "mondrian-relaxed"}
MISSING = ("drop", "leaf")
#: The leaf a missing categorical QI becomes with ``missing="leaf"``.
MISSING_LEAF = "?"
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
class KAnonConfig:
    """Every parameter of one k-anonymisation (validated on construction; change with ``dataclasses.replace``).

    ``hierarchies``: a folder of taxonomy files, or ``{column: Hierarchy}``; ``som_neurons``:
    ``(lower, upper, step)`` of the neuron-count search; ``missing``: ``"drop"`` or ``"leaf"``;
    ``split``: Mondrian's split rule; ``seed``: algorithmic randomness (OKA/K-Member seeds, SOM); ``grids``: numeric
    QIs' public label grids (without one, a numeric label is its class's ``[min, max]``, library use only);
    ``max_share``: with ``sensitive`` columns, no value may be more than this share of any class, in each sensitive
    column ((α, k)-anonymity, :mod:`~veil.generators.kanon.diversity`; in (0, 0.9], default 0.9).
    """

    qi: tuple[str, ...]
    k: int
    algorithm: str = "kma"
    hierarchies: str | Path | Mapping[str, Hierarchy] | None = None
    sensitive: tuple[str, ...] = ()
    som_columns: tuple[str, ...] = ()
    som_label: str | None = None
    som_neurons: tuple[int, int, int] = (100, 300, 10)
    som_epochs: int = 20
    missing: str = "drop"
    split: str = "gain"
    seed: int | None = None
    #: per numeric QI, its public label grid ``(origin, step, integer)`` (``generalise.public_grid``; the publication
    #: derives it from the declared bounds): labels run between grid cells' ends, never a member's value (s64 F7)
    grids: Mapping[str, tuple[float, float, bool]] | None = None
    #: (α, k)-anonymity's α: the largest share of a class one sensitive value may hold (red team s20b F4)
    max_share: float = DEFAULT_MAX_SHARE

    def __post_init__(self) -> None:
        for name in ("qi", "sensitive", "som_columns"):
            value = getattr(self, name)
            if isinstance(value, str):
                raise InputError(f"{name} must be a sequence of column names, got the string {value!r}")
            object.__setattr__(self, name, tuple(str(c) for c in value))
        object.__setattr__(self, "som_neurons", tuple(int(v) for v in self.som_neurons))
        object.__setattr__(self, "algorithm", canonical_algorithm(self.algorithm))
        k = self.k
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
            raise InputError(f"k must be an integer of at least 2, got {k!r}", hint="Use --k 2 or more")
        if k < 2:
            raise VacuousParameter(
                f"parameter k={k!r} makes classes of one record, i.e. no k-anonymity (use k ≥ 2, e.g. 5)",
                hint="A table published with it would be the private data under a privacy label; "
                "to keep an unprotected copy, write it as a private table instead",
            )
        object.__setattr__(self, "k", int(k))
        object.__setattr__(self, "max_share", check_max_share(self.max_share))
        if self.missing not in MISSING:
            raise InputError(f"unknown missing-value policy {self.missing!r}", hint="Use --missing drop or --missing leaf")
        if not self.qi:
            raise InputError("no quasi-identifiers given", hint="Pass --qi col1,col2,…")
        overlap = set(self.qi) & set(self.sensitive)
        if overlap:
            raise InputError(f"column {sorted(overlap)[0]!r} is both a quasi-identifier and sensitive", hint="Pick one role")
        if set(self.som_columns) & set(self.qi):
            raise InputError("SOM columns must not be quasi-identifiers", hint="The SOM maps columns the QIs leave out")

    @property
    def needed(self) -> list[str]:
        """Every column the anonymisation reads."""
        label = [self.som_label] if self.som_label else []
        return list(dict.fromkeys([*self.qi, *self.sensitive, *self.som_columns, *label]))

    def summary(self) -> dict[str, Any]:
        """JSON-able parameters (hierarchy objects shown by source)."""
        hier = self.hierarchies
        shown = str(hier) if isinstance(hier, (str, Path)) else ({c: h.source for c, h in hier.items()} if hier else None)
        return {
            "qi": list(self.qi),
            "k": self.k,
            "algorithm": self.algorithm,
            "hierarchies": shown,
            "sensitive": list(self.sensitive),
            "som_columns": list(self.som_columns),
            "som_label": self.som_label,
            "som_neurons": list(self.som_neurons),
            "som_epochs": self.som_epochs,
            "missing": self.missing,
            "split": self.split,
            "max_share": self.max_share,
        }


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

    def release_facts(self, sensitive: Sequence[str] = ()) -> dict[str, Any]:
        """What the release gate checks, in the keys the SDC and synthetic methods use:
        ``perturbed_columns`` (the generalised QIs), ``covered_columns`` (the sensitive columns,
        published raw and covered by the k-anonymity of their rows' QIs: report their ℓ-diversity),
        ``unprotected_columns`` (the SOM neuron, a deterministic function of raw columns),
        ``min_group_size`` and ``row_order``."""
        som = (SOM_COLUMN,) if SOM_COLUMN in self.table.columns else ()
        return {
            "perturbed_columns": self.qi,
            "covered_columns": tuple(sensitive),
            "unprotected_columns": som,
            "min_group_size": self.min_class_size,
            "row_order": "csprng",
        }


def _resolve_hierarchies(hierarchies: str | Path | Mapping[str, Hierarchy] | None, qi: Sequence[str]) -> dict[str, Hierarchy]:
    if hierarchies is None:
        return {}
    if isinstance(hierarchies, (str, Path)):
        return load_hierarchies(hierarchies, qi)
    return {c: h for c, h in hierarchies.items() if c in qi}


def population_rows(df: pd.DataFrame, qi: Sequence[str], missing: str) -> pd.DataFrame:
    """The QI columns of the rows a published class can stand for: with ``missing="leaf"`` a missing
    categorical QI reads ``?``; rows with any other missing QI are left out.

    >>> population_rows(pd.DataFrame({"a": [1, None, 3], "s": ["x", None, None]}), ["a", "s"], "leaf")["s"].tolist()
    ['x', '?']
    """
    pop = df[list(qi)].copy()
    if missing == "leaf":
        for col in qi:
            if not pd.api.types.is_numeric_dtype(pop[col]):
                pop[col] = pop[col].astype(object).where(pop[col].notna(), MISSING_LEAF)
    return pop.dropna().reset_index(drop=True)


def _clean(df: pd.DataFrame, config: KAnonConfig, hier: dict[str, Hierarchy]) -> tuple[pd.DataFrame, dict[str, Hierarchy]]:
    if config.missing == "drop":
        return df.dropna(subset=config.needed).reset_index(drop=True), hier
    out = df.copy()
    hier = dict(hier)
    for col in config.qi:
        if not pd.api.types.is_numeric_dtype(out[col]):
            out[col] = out[col].astype(object).where(out[col].notna(), MISSING_LEAF)
        if col in hier:  # every tree, NULLs or not: the audit rebuilds the same trees from the folder
            hier[col] = hier[col].with_leaf(MISSING_LEAF)
    return out.dropna(subset=config.needed).reset_index(drop=True), hier


def _numeric_ends(df: pd.DataFrame, config: KAnonConfig, hier: Mapping[str, Hierarchy]) -> dict[str, tuple[float, float]]:
    """The population's (smallest, largest) value of each numeric QI: the NCP span, and what open ends stand for."""
    pop = population_rows(df, config.qi, config.missing)
    return {
        c: (float(pop[c].min()), float(pop[c].max()))
        for c in config.qi
        if c not in hier and pd.api.types.is_numeric_dtype(pop[c]) and len(pop)
    }


def anonymise(
    df: pd.DataFrame,
    config: KAnonConfig | None = None,
    *,
    tick: Callable[[int], None] | None = None,
    som_tick: Callable[[int], None] | None = None,
    rng: np.random.Generator | None = None,
    **legacy: Any,
) -> KAnonResult:
    """k-anonymise ``df`` as ``config`` says (see module docstring for the output).

    ``tick(rows)`` is called as rows are placed in classes; ``som_tick(1)`` per SOM map searched;
    ``rng`` (tests only) replaces the OS CSPRNG for the row order. The former keyword form
    ``anonymise(df, qi=…, k=…, …)`` still works: the keywords build a :class:`KAnonConfig`.
    """
    if config is None:
        config = KAnonConfig(**legacy)
    elif legacy:
        raise InputError(f"pass either a KAnonConfig or keywords, not both (got {sorted(legacy)})")
    for col in config.needed:
        if col not in df.columns:
            raise InputError(f"column {col!r} is not in the table", hint=did_you_mean(col, [str(c) for c in df.columns]))
    loaded = _resolve_hierarchies(config.hierarchies, config.qi)
    clean, hier = _clean(df, config, loaded)
    k = config.k
    if len(clean) < k:
        raise VacuousParameter(
            f"parameter k={k} cannot be met: only {len(clean)} complete rows, fewer than k",
            hint="Lower k, publish more rows, or use --missing leaf",
        )
    diversity = None
    if config.sensitive:
        # diverse classes by construction; refused (typed, before any class is formed) when the whole table is not
        require_feasible(clean, config.sensitive, config.max_share)
        diversity = Diversity.from_frame(clean, config.sensitive, config.max_share)
    # never from a seed a user typed for a publication (red team s66 F1): a seed is for library use and tests
    if config.seed is None:
        from veil.generators.randomness import private_rng

        algo_rng = private_rng()
    else:
        algo_rng = np.random.default_rng(config.seed)
    space = QISpace(clean, config.qi, hier, ends=_numeric_ends(df, config, loaded), grids=config.grids)

    start, cpu_start = time.perf_counter(), time.process_time()
    if config.algorithm in ("mondrian", "mondrian-relaxed"):
        relaxed = config.algorithm == "mondrian-relaxed"
        labels = mondrian(space, k, relaxed=relaxed, split=config.split, tick=tick, diversity=diversity)
    elif config.algorithm == "oka":
        labels = oka(space, k, rng=algo_rng, tick=tick, diversity=diversity)
    else:
        labels = kmember(space, k, rng=algo_rng, tick=tick, diversity=diversity)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    if diversity is not None and not diversity.labels_ok(labels):
        raise InternalError("a k-anonymous class is not diverse in its sensitive columns", hint="This is a bug, please report it")

    table = space.generalised_frame(labels)
    for col in config.sensitive:
        table[col] = clean[col].to_numpy()
    som_info: dict[str, Any] = {}
    if config.som_columns:
        som_info = _add_som(table, clean, config, som_tick)
    from veil.generators.domain import csprng_permutation

    order = csprng_permutation(len(table), rng)
    table = table.iloc[order].reset_index(drop=True)
    labels = labels[order]
    sizes = pd.Series(np.bincount(labels)).value_counts().sort_index()
    per_qi = ncp_per_qi(space, labels[np.argsort(order)])
    return KAnonResult(
        table=table,
        labels=labels,
        algorithm=config.algorithm,
        k=k,
        qi=config.qi,
        ncp_percent=float(100.0 * per_qi.mean()),
        ncp_per_qi={c: float(100.0 * v) for c, v in zip(config.qi, per_qi, strict=True)},
        class_sizes={int(s): int(c) for s, c in sizes.items()},
        seconds=seconds,
        cpu_seconds=cpu_seconds,
        rows_in=len(df),
        rows_dropped=len(df) - len(clean),
        som=som_info,
    )


def _add_som(
    table: pd.DataFrame, clean: pd.DataFrame, config: KAnonConfig, som_tick: Callable[[int], None] | None
) -> dict[str, Any]:
    """Add the SOM neuron column to ``table`` (in place); the facts for the release record."""
    from veil.generators.som import choose_neurons, fit_som, neuron_candidates, som_matrix

    x, encoded = som_matrix(clean, config.som_columns)
    candidates = neuron_candidates(*config.som_neurons)
    if config.som_label is not None:
        codes, cats = pd.factorize(clean[config.som_label], sort=True)
        if len(cats) < 2:
            raise InputError(f"SOM label {config.som_label!r} has fewer than 2 values", hint="Choose another --som-label")
        model, scores = choose_neurons(x, codes, candidates, epochs=config.som_epochs, seed=config.seed, tick=som_tick)
    else:
        model, scores = fit_som(x, candidates[-1], epochs=config.som_epochs, seed=config.seed), {}
    idx = model.transform(x)
    table[SOM_COLUMN] = idx
    return {
        "columns": list(config.som_columns),
        "encoded_columns": encoded,
        "neurons": model.n_neurons,
        "neurons_used": len(np.unique(idx)),
        "label": config.som_label,
        "search": {str(n): round(r, 6) for n, r in scores.items()},
        "quantisation_error": round(model.quantisation_error(x), 6),
    }
