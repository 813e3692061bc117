"""Independent audit of a k-anonymous publication: k, ℓ, t, NCP/GCP, class sizes, re-identification risk.

Works from the *published table alone* (plus, optionally, the hierarchy files and a population
table); it shares no grouping code with the generators in ``veil.generators.kanon``: classes
are the groups of rows with identical published QI values (pandas ``groupby``), generalised
values are parsed back from their published text, and hierarchy files are read by a small
parser of its own.

Measures (each per equivalence class ``E``, then over the table):

* k = smallest class size; the class-size distribution.
* distinct ℓ-diversity = fewest distinct sensitive values in a class.
* t-closeness = largest Earth Mover's Distance between a class's sensitive distribution and the
  table's: equal ground distance (total variation) for categorical values, ordered distance
  ``Σ|cumulative difference| / (m − 1)`` for numeric ones (Li, Li & Venkatasubramanian 2007).
* NCP % as in the SOM paper's reference code: numeric ``(hi − lo) / (max − min)``; categorical
  0 for a leaf, else leaves under the published node / all leaves; averaged over QIs and rows.
  GCP (Ghinita et al.) is the same quantity as a fraction.
* risk (El Emam's models): prosecutor ``1/|E|`` (max, and the mean over records = classes/rows);
  journalist ``1/F_E`` and marketer ``(1/n) Σ_E |E|/F_E`` where ``F_E`` counts the records of a
  population table that match ``E``'s generalised values (without a population, ``F_E = |E|``,
  so journalist = prosecutor and marketer = classes/rows); share of records whose prosecutor
  risk exceeds ``threshold``. A population with fewer matching records than a class has members is
  not the table's source: refused (it would make the risk look like 1/0).

Missing values (``missing=``, the policy the table was published with): with ``"leaf"`` a missing
categorical QI of the population reads ``?`` and every QI tree read from the hierarchy folder
gets the leaf ``?`` under ``*`` (as the generator builds it); population rows with
any other missing QI are left out, and a numeric QI's NCP range is its range over the rest.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from veil.errors import InputError, did_you_mean


def _read_text(path: Path) -> str:
    """A hierarchy file's text: UTF-8 (a BOM dropped), else Latin-1 (ARX writes files in the platform's
    encoding; every byte sequence is valid Latin-1), as the generator reads it."""
    raw = path.read_bytes()
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


__all__ = ["AnonymityReport", "audit_anonymity", "finite_ends", "leaf_counts_from_dir", "parse_generalised"]

_NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_INTERVAL = re.compile(rf"^\s*\[\s*({_NUM})\s*,\s*({_NUM})\s*\]\s*$")
# an interval open at the column's smallest / largest value (the generator never writes that one value)
_OPEN_LOW = re.compile(rf"^\s*\(\s*-inf\s*,\s*({_NUM})\s*\]\s*$")
_OPEN_HIGH = re.compile(rf"^\s*\[\s*({_NUM})\s*,\s*inf\s*\)\s*$")
_OPEN_BOTH = re.compile(r"^\s*\(\s*-inf\s*,\s*inf\s*\)\s*$")
_NUMBER = re.compile(rf"^\s*({_NUM})\s*$")
_MISSING_LEAF = "?"


def _population_rows(population: pd.DataFrame, qi: Sequence[str], missing: str) -> pd.DataFrame:
    """The population's QI columns under the missing-value policy (see module docstring)."""
    absent = [c for c in qi if c not in population.columns]
    if absent:
        raise InputError(f"population table lacks quasi-identifier {absent[0]!r}")
    pop = population[list(qi)].copy()
    if missing == "leaf":
        for col in qi:
            if not pd.api.types.is_numeric_dtype(pop[col]):
                pop[col] = pop[col].astype(object).where(pop[col].notna(), _MISSING_LEAF)
    return pop.dropna().reset_index(drop=True)


@dataclass(frozen=True)
class AnonymityReport:
    """Result of :func:`audit_anonymity` (``as_dict()`` for JSON)."""

    rows: int
    qi: tuple[str, ...]
    k: int
    n_classes: int
    class_sizes: dict[int, int]
    l_diversity: dict[str, int]
    t_closeness: dict[str, float]
    ncp_percent: float
    gcp: float
    ncp_per_qi: dict[str, float]
    prosecutor_max: float
    prosecutor_mean: float
    journalist_max: float
    journalist_mean: float
    marketer: float
    records_at_risk: float
    risk_threshold: float
    population: str
    k_with: dict[str, int] = field(default_factory=dict)

    def is_k_anonymous(self, k: int) -> bool:
        return self.k >= k

    def as_dict(self) -> dict[str, Any]:
        out = {name: getattr(self, name) for name in self.__dataclass_fields__}
        out["qi"] = list(self.qi)
        out["class_sizes"] = {str(s): c for s, c in self.class_sizes.items()}
        return out

    def summary(self) -> dict[str, Any]:
        """Flat headline figures (for a table view)."""
        out: dict[str, Any] = {
            "rows": self.rows,
            "k": self.k,
            "classes": self.n_classes,
            "ncp_percent": round(self.ncp_percent, 4),
            "gcp": round(self.gcp, 6),
        }
        for sa, ell in self.l_diversity.items():
            out[f"l_diversity[{sa}]"] = ell
            out[f"t_closeness[{sa}]"] = round(self.t_closeness[sa], 6)
        for col, kk in self.k_with.items():
            out[f"k_with[{col}]"] = kk
        out.update(
            prosecutor_max=round(self.prosecutor_max, 6),
            prosecutor_mean=round(self.prosecutor_mean, 6),
            journalist_max=round(self.journalist_max, 6),
            journalist_mean=round(self.journalist_mean, 6),
            marketer=round(self.marketer, 6),
            records_at_risk=round(self.records_at_risk, 6),
            population=self.population,
        )
        return out


# ------------------------------------------------------------------------ hierarchy files
def _matching(files: Sequence[Path], want: str) -> list[Path]:
    stems = [(p, p.stem.lower().replace("-", "_")) for p in files]
    exact = [p for p, s in stems if s == want]
    return exact or sorted((p for p, s in stems if s.endswith("_" + want)), key=lambda p: len(p.stem))


def _hierarchy_rows(directory: str | Path | None, columns: Sequence[str]) -> dict[str, list[list[str]]]:
    """Each column's ARX file in ``directory`` as its rows (a leaf, then its ancestors); no file, no entry.

    Files match a column when their stem equals it or ends with ``_<column>`` (``-`` read as ``_``).
    """
    if directory is None:
        return {}
    d = Path(directory)
    if not d.is_dir():
        raise InputError(f"hierarchy directory {str(d)!r} does not exist", hint="Pass the folder used to publish")
    files = sorted(p for p in d.iterdir() if p.suffix in (".csv", ".txt"))
    out: dict[str, list[list[str]]] = {}
    for col in columns:
        hits = _matching(files, col.lower().replace("-", "_"))
        if hits:
            rows = ([x.strip() for x in line.split(";") if x.strip()] for line in _read_text(hits[0]).splitlines())
            out[col] = [parts for parts in rows if parts]
    return out


def leaf_counts_from_dir(directory: str | Path | None, columns: Sequence[str]) -> dict[str, dict[str, int]]:
    """For each column with an ARX file in ``directory``: node label → number of leaves under it.

    Files match a column when their stem equals it or ends with ``_<column>`` (``-`` read as ``_``).
    """
    out: dict[str, dict[str, int]] = {}
    for col, rows in _hierarchy_rows(directory, columns).items():
        counts: dict[str, int] = {}
        for parts in rows:
            for node in set(parts[1:]) | {"*"}:
                counts[node] = counts.get(node, 0) + 1
        counts.update({parts[0]: 1 for parts in rows})
        out[col] = counts
    return out


# ------------------------------------------------------------------------ parsing
def parse_generalised(values: pd.Series) -> tuple[np.ndarray, np.ndarray] | None:
    """``(lo, hi)`` float arrays if every value is a number, ``[lo, hi]``, ``(-inf, hi]`` or ``[lo, inf)``; else None.

    >>> lo, hi = parse_generalised(pd.Series(["3", "[1, 5]", "2.5", "[6, inf)"]))
    >>> lo.tolist(), hi.tolist()
    ([3.0, 1.0, 2.5, 6.0], [3.0, 5.0, 2.5, inf])
    >>> parse_generalised(pd.Series(["Male", "*"])) is None
    True
    """
    if pd.api.types.is_numeric_dtype(values):
        v = values.to_numpy(dtype=np.float64)
        return v, v.copy()
    uniq = pd.unique(values.astype(str))
    lo_map: dict[str, float] = {}
    hi_map: dict[str, float] = {}
    for text in uniq:
        m = _INTERVAL.match(text)
        if m:
            lo_map[text], hi_map[text] = float(m.group(1)), float(m.group(2))
            continue
        m = _OPEN_LOW.match(text)
        if m:
            lo_map[text], hi_map[text] = -math.inf, float(m.group(1))
            continue
        m = _OPEN_HIGH.match(text)
        if m:
            lo_map[text], hi_map[text] = float(m.group(1)), math.inf
            continue
        if _OPEN_BOTH.match(text):
            lo_map[text], hi_map[text] = -math.inf, math.inf
            continue
        m = _NUMBER.match(text)
        if not m:
            return None
        lo_map[text] = hi_map[text] = float(m.group(1))
    s = values.astype(str)
    return s.map(lo_map).to_numpy(dtype=np.float64), s.map(hi_map).to_numpy(dtype=np.float64)


def finite_ends(
    lo: np.ndarray, hi: np.ndarray, low: float | None = None, high: float | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """``lo``/``hi`` with open ends (±inf) at ``low``/``high`` (default: the smallest/largest finite end)."""
    ends = np.concatenate([lo, hi])
    finite = ends[np.isfinite(ends)]
    low = float(finite.min()) if low is None and len(finite) else (0.0 if low is None else low)
    high = float(finite.max()) if high is None and len(finite) else (0.0 if high is None else high)
    return np.where(np.isneginf(lo), low, lo), np.where(np.isposinf(hi), high, hi)


def _emd(class_ids: np.ndarray, n_classes: int, values: pd.Series) -> float:
    """Largest EMD between a class's distribution of ``values`` and the whole table's."""
    codes, cats = pd.factorize(values, sort=True, use_na_sentinel=False)
    m = len(cats)
    if m <= 1:
        return 0.0
    hist = np.bincount(class_ids * m + codes, minlength=n_classes * m).reshape(n_classes, m).astype(np.float64)
    p = hist / hist.sum(axis=1, keepdims=True)
    q = np.bincount(codes, minlength=m) / len(codes)
    if pd.api.types.is_numeric_dtype(values):
        emd = np.abs(np.cumsum(p - q, axis=1)).sum(axis=1) / (m - 1)
    else:
        emd = 0.5 * np.abs(p - q).sum(axis=1)
    return float(emd.max())


# ------------------------------------------------------------------------ population matching
def _population_counts(
    classes: pd.DataFrame,
    qi: Sequence[str],
    population: pd.DataFrame,
    leaf_counts: Mapping[str, Mapping[str, int]],
    directory_labels: Mapping[str, Mapping[str, set[str]]],
) -> np.ndarray:
    """For each class (row of ``classes``: its generalised QI values), the number of population rows it matches."""
    pop_groups = population[list(qi)].astype(str).value_counts(dropna=False).reset_index()
    weights = pop_groups["count"].to_numpy(dtype=np.float64)
    n_cls, n_pop = len(classes), len(pop_groups)
    covers: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # per QI: class codes, population codes, cover
    for col in qi:
        cls_vals = classes[col].astype(str)
        pop_vals = pop_groups[col].astype(str)
        parsed = parse_generalised(cls_vals)
        cls_codes, cls_uniq = pd.factorize(cls_vals)
        pop_codes, pop_uniq = pd.factorize(pop_vals)
        cover = np.zeros((len(cls_uniq), len(pop_uniq)), dtype=bool)
        if parsed is not None and all(_NUMBER.match(v) for v in pop_uniq):
            lo, hi = parse_generalised(pd.Series(cls_uniq, dtype=object))  # type: ignore[misc]
            pv = np.array([float(v) for v in pop_uniq])
            cover = (pv[None, :] >= lo[:, None]) & (pv[None, :] <= hi[:, None])
        else:
            under = directory_labels.get(col, {})
            for i, label in enumerate(cls_uniq):
                if label == "*":
                    cover[i, :] = True
                elif label in under:
                    cover[i, :] = np.isin(pop_uniq, list(under[label]))
                else:
                    cover[i, :] = pop_uniq == label
        covers.append((cls_codes, pop_codes, cover))
    out = np.zeros(n_cls)
    step = max(1, 2_000_000 // max(n_pop, 1))
    for s in range(0, n_cls, step):
        match = np.ones((min(step, n_cls - s), n_pop), dtype=bool)
        for cls_codes, pop_codes, cover in covers:
            match &= cover[cls_codes[s : s + step]][:, pop_codes]
        out[s : s + step] = match.astype(np.float64) @ weights
    return out


def _leaves_under_from_dir(directory: str | Path | None, columns: Sequence[str]) -> dict[str, dict[str, set[str]]]:
    out: dict[str, dict[str, set[str]]] = {}
    for col, rows in _hierarchy_rows(directory, columns).items():
        under: dict[str, set[str]] = {}
        for parts in rows:
            for node in parts[1:]:
                under.setdefault(node, set()).add(parts[0])
        out[col] = under
    return out


# ------------------------------------------------------------------------ main entry
def audit_anonymity(
    table: pd.DataFrame,
    qi: Sequence[str],
    *,
    sensitive: Sequence[str] = (),
    hierarchies: str | Path | None = None,
    population: pd.DataFrame | None = None,
    population_name: str = "the published table",
    extra_qi: Sequence[str] = (),
    risk_threshold: float = 0.2,
    missing: str = "drop",
) -> AnonymityReport:
    """Audit ``table`` (published rows) for k-anonymity and related measures (module docstring).

    >>> t = pd.DataFrame({"age": ["[20, 29]"] * 3 + ["41"] * 2, "sex": ["*"] * 3 + ["F"] * 2,
    ...                   "income": ["<=50K", ">50K", "<=50K", ">50K", ">50K"]})
    >>> r = audit_anonymity(t, ["age", "sex"], sensitive=["income"])
    >>> r.k, r.n_classes, r.l_diversity, r.class_sizes
    (2, 2, {'income': 1}, {2: 1, 3: 1})
    """
    qi = list(qi)
    if not qi:
        raise InputError("no quasi-identifiers given to audit", hint="Pass --qi col1,col2,…")
    for col in [*qi, *sensitive, *extra_qi]:
        if col not in table.columns:
            raise InputError(
                f"column {col!r} is not in the published table", hint=did_you_mean(col, [str(c) for c in table.columns])
            )
    n = len(table)
    if n == 0:
        raise InputError("the published table has no rows", hint="Audit a non-empty table")
    if missing not in ("drop", "leaf"):
        raise InputError(f"unknown missing-value policy {missing!r}", hint="Use drop or leaf (as when publishing)")
    if population is not None:
        population = _population_rows(population, qi, missing)

    keys = table[qi].astype(str)
    class_ids = keys.groupby(qi, sort=False, dropna=False).ngroup().to_numpy()
    n_classes = int(class_ids.max()) + 1
    sizes = np.bincount(class_ids, minlength=n_classes)
    k = int(sizes.min())
    dist = pd.Series(sizes).value_counts().sort_index()
    class_sizes = {int(s): int(c) for s, c in dist.items()}

    l_div: dict[str, int] = {}
    t_close: dict[str, float] = {}
    for sa in sensitive:
        codes, _ = pd.factorize(table[sa], use_na_sentinel=False)
        pairs = np.unique(class_ids.astype(np.int64) * (int(codes.max()) + 1) + codes)
        l_div[sa] = int(np.bincount(pairs // (int(codes.max()) + 1), minlength=n_classes).min())
        t_close[sa] = _emd(class_ids, n_classes, table[sa])

    # NCP from the published values
    leaf_counts = leaf_counts_from_dir(hierarchies, qi)
    if missing == "leaf":
        for tree in leaf_counts.values():
            if _MISSING_LEAF not in tree:
                tree[_MISSING_LEAF] = 1
                tree["*"] = tree.get("*", 0) + 1
    per_qi: dict[str, float] = {}
    for col in qi:
        parsed = None if col in leaf_counts else parse_generalised(table[col])  # a tree wins, as in the generator
        if parsed is not None:
            lo, hi = parsed
            if population is not None and col in population and pd.api.types.is_numeric_dtype(population[col]):
                lo, hi = finite_ends(lo, hi, float(population[col].min()), float(population[col].max()))
                span = float(population[col].max() - population[col].min())
            else:
                lo, hi = finite_ends(lo, hi)
                span = float(np.nanmax(hi) - np.nanmin(lo))
            per_qi[col] = float(np.mean((hi - lo) / span)) if span > 0 else 0.0
            continue
        vals = table[col].astype(str)
        counts = leaf_counts.get(col)
        if counts is not None:
            total = counts.get("*", max(counts.values()))
            unknown = sorted(set(vals.unique()) - set(counts))
            if unknown:
                raise InputError(
                    f"published value {unknown[0]!r} of {col!r} is not a node of its hierarchy",
                    hint=did_you_mean(unknown[0], counts) or "Audit with the hierarchy folder used to publish",
                )
            leaf = {label for label, c in counts.items() if c == 1 and label != "*"}
            cost = vals.map(lambda v, c=counts, t=total, lf=leaf: 0.0 if v in lf else c[v] / t)
        else:  # flat tree: a leaf costs 0, '*' costs 1
            cost = (vals == "*").astype(np.float64)
        per_qi[col] = float(cost.mean())
    ncp = float(np.mean(list(per_qi.values())))

    # risk
    inv = 1.0 / sizes
    prosecutor_max = float(inv.max())
    prosecutor_mean = n_classes / n
    at_risk = float(np.mean(inv[class_ids] > risk_threshold))
    if population is not None:
        first = np.unique(class_ids, return_index=True)[1]
        classes = table.iloc[first][qi].reset_index(drop=True)
        big_f = _population_counts(classes, qi, population, leaf_counts, _leaves_under_from_dir(hierarchies, qi))
        short = np.flatnonzero(big_f < sizes)  # class i: id i (np.unique order)
        if len(short):
            shown = {c: classes.iloc[short[0]][c] for c in qi}
            raise InputError(
                f"the population has {int(big_f[short[0]])} rows matching a published class of "
                f"{int(sizes[short[0]])} rows ({shown}): it is not the table's source",
                hint="Audit against the table it was published from, with the same missing-value policy",
            )
        journalist = 1.0 / big_f
        journalist_max = float(journalist.max())
        journalist_mean = float((sizes / big_f).sum() / n)
        marketer = journalist_mean
    else:
        journalist_max, journalist_mean, marketer = prosecutor_max, prosecutor_mean, prosecutor_mean

    k_with: dict[str, int] = {}
    for col in extra_qi:
        extra = table[[*qi, col]].astype(str).groupby([*qi, col], dropna=False).size()
        k_with[col] = int(extra.min())

    return AnonymityReport(
        rows=n,
        qi=tuple(qi),
        k=k,
        n_classes=n_classes,
        class_sizes=class_sizes,
        l_diversity=l_div,
        t_closeness=t_close,
        ncp_percent=100.0 * ncp,
        gcp=ncp,
        ncp_per_qi={c: 100.0 * v for c, v in per_qi.items()},
        prosecutor_max=prosecutor_max,
        prosecutor_mean=prosecutor_mean,
        journalist_max=journalist_max,
        journalist_mean=journalist_mean,
        marketer=marketer,
        records_at_risk=at_risk,
        risk_threshold=risk_threshold,
        population=population_name if population is not None else "none (population = the published table)",
        k_with=k_with,
    )
