"""The release gate: checks a publication's guarantee on the actual output before anything is written.

Every rule runs on the finalised frame, the one that is written (``transaction._finalise``: clamped, typed, shuffled),
and where it compares the output with the source it takes the source in the same published form
(:func:`~veil.generators.publication.as_published`, the function the output went through): a rule checked on values
the output then changes checks nothing (red team s72 F4/F5: a declared ``int`` column's fractions were diverse and
rare-free as read, and one integer per class once published).

Every publication passes through :func:`check_plan` (before any data is read) and :func:`verify`
(on the finished output). A failed check raises :class:`~veil.errors.PublicationRefused` (exit 2
at the CLI) and the transaction writes nothing. The checks:

* **vacuous parameters** (:func:`check_plan`, from the parameters only, never the data): ``k`` < 2,
  ``noise`` ≤ 0, noise addition's ``a`` < :data:`MIN_NOISE_A`, rank swapping's ``p`` <
  :data:`MIN_SWAP_P`, ``epsilon`` ≤ 0, ∞ or above :data:`MAX_EPSILON` (a DP grid microaggregation's above
  :data:`MAX_GRID_EPSILON`), ``delta`` above
  :data:`MAX_DELTA`, a kRR keep probability above :data:`MAX_KEEP_PROBABILITY`, a PATE student held
  out of the source with a local ε that is ∞ (no noise) or above :data:`MAX_EPSILON`;
* **column provenance**: every column of the table has a recorded protection among
  :data:`~veil.generators.publication.PROTECTIONS` (the transaction has already dropped copied
  columns); a ``sensitive`` column is allowed only in a table with a group guarantee, no value of it may be on more
  than the publication's ``max_share`` (else :data:`MAX_KEEP_PROBABILITY`) of a published group, and its
  ℓ-diversity (distinct values in the smallest-diversity group) and largest share are reported;
* **declared columns**: a column of the source that the policy's table spec does not declare (an
  identifier such as a name, typically) is never published, whatever role it was given;
* **groups**: rows grouped on ``group_columns`` form groups of at least ``min_group`` rows;
* **domains**: numbers within the policy's declared bounds, categories among declared values;
* for methods **without** a DP guarantee only (a data-dependent refusal of a DP release would
  itself leak): a row-aligned ``perturbed``/``randomised`` column may not equal its source in
  every row, nor — outside a group guarantee (MDAV's k-groups cover their shared values) — in more
  than :data:`MAX_KEEP_PROBABILITY` of the rows (noise rounded away on an integer column, red team
  s24 A14). Equality does not measure dependence (a flip is never equal and wholly determined: s64 F1), so
  noise addition's dependence is bounded from its law in the plan, before reading
  (``sdc.check_noise_plan``: the rounded keep probability of its truncated noise at most
  :data:`MAX_KEEP_PROBABILITY`), and its values are published unrounded. A ``synthetic`` table must pass the
  distance-to-closest-record check against training and holdout rows (:func:`veil.metrics.dcr.dcr_check`: exact
  copies over all rows, s64 F8, copies of rows unique in the source, s69 F2, and the source rows nearest to the
  synthetic table, exact or a few values moved, s66 F2, s69 F5, against every synthetic row, s69 F1);
* **rare values** (methods without a DP guarantee only, :func:`check_rare_values`): in every column published
  value by value or perturbed (protection ``sensitive``, ``perturbed`` or ``randomised``) that no group guarantee
  covers, every published value that equals a value of the source, compared exactly as published, is held by at
  least k source rows (a ``sensitive`` one: by k published rows, whatever the source holds) — the publication's k, else
  :data:`MIN_VALUE_HOLDERS` — and a published NULL by k source or output rows: a value one person alone holds would
  otherwise be public exactly when that person is in the source (red team s60 F2: rank swapping's interior values,
  noise rounded away on an int column, a bounded ``--sensitive`` column). Where each output row derives from its
  own source row alone (``Publication.own_values``: noise addition) the rule is per row: only a row that publishes
  its own rare value is refused — a per-value rule would itself tell the person's presence (s60 review).

>>> try:
...     check_plan_values({"k": 1})
... except PublicationRefused as exc:
...     print(str(exc).split(".")[0])
vacuous parameter: k = 1 (a group guarantee needs k ≥ 2)
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from veil.errors import PublicationRefused
from veil.generators.publication import PROTECTIONS, Plan, Publication, as_published

__all__ = ["GateReport", "check_plan", "check_plan_values", "verify"]

#: Largest ε the gate accepts for one publication: e^50 ≈ 5·10²¹ already bounds nothing.
MAX_EPSILON = 50.0

#: Largest keep probability e^ε/(e^ε + k − 1) of a kRR column (from ε and the declared k only): above,
#: nine values in ten or more are published as they are, and a few columns single people out.
MAX_KEEP_PROBABILITY = 0.9

#: Largest ε of a DP grid microaggregation (``dp_microagg_*`` with the grid partition,
#: :func:`veil.generators.sdc.dp_grid_microaggregation`): each cell's count gets Laplace noise of scale 2/ε (ε/2,
#: sensitivity 1) and the cell then holds that count rounded — its exact count with probability 1 − e^(−ε/4). The
#: cap keeps that at most :data:`MAX_KEEP_PROBABILITY` (ε ≤ 4·ln 10 ≈ 9.21); at ε = 50 it was 0.9999963, every
#: cell's true size published nearly always.
MAX_GRID_EPSILON = -4.0 * math.log(1.0 - MAX_KEEP_PROBABILITY)

#: Largest δ the gate accepts for one publication: the project's default δ budget of an analyst (a whole
#: budget on one release), and the scale below which "δ: everything may leak" stays negligible. A larger δ
#: is vacuous and, in PATE's bound, even *lowers* the ε charged (red team s24, A7).
MAX_DELTA = 1e-5

#: Smallest noise level ``a`` of noise addition (noise σ = a · the column's standard deviation): below,
#: rounding or averaging a few values undoes the noise.
MIN_NOISE_A = 0.1

#: Smallest rank-swapping window ``p`` (percent of the ranks): below, values move among a handful of
#: neighbours and each one is published nearly as it is.
MIN_SWAP_P = 5.0

#: Fewest source rows that must hold a value a publication without a DP guarantee and without its own k publishes as
#: it is (:func:`check_rare_values`; noise addition, rank swapping). 5: rank swapping's tail coding already treats
#: the 5th-smallest/largest value as the first that is not an outlier (:data:`veil.generators.sdc.CODED_TAIL`), it
#: is the smallest k the publishing docs recommend, and the threshold rule of statistical-disclosure practice
#: suppresses cells of fewer contributors. A publication with a k of its own (k-anonymity, microaggregation) uses
#: that k instead.
MIN_VALUE_HOLDERS = 5

#: Protections whose published values may be source values taken one by one (see :func:`check_rare_values`).
VALUE_PROTECTIONS = ("sensitive", "perturbed", "randomised")

_PRIVATE_COPY_HINT = (
    "A copy without protection can only be private: keep it in the warehouse with `veil ingest` "
    "(never published), or choose parameters that protect the data"
)


@dataclass(frozen=True)
class GateReport:
    """What the gate checked, recorded with the release under ``metrics["gate"]``."""

    columns: Mapping[str, Mapping[str, str]]
    checks: Mapping[str, float]
    min_group: int | None = None
    l_diversity: Mapping[str, int] = field(default_factory=dict)
    max_share: Mapping[str, float] = field(default_factory=dict)
    unchanged_share: Mapping[str, float] = field(default_factory=dict)
    dcr: Mapping[str, Any] | None = None
    domains: str = "respected"

    def as_dict(self) -> dict[str, Any]:
        return {
            "columns": {k: dict(v) for k, v in self.columns.items()},
            "checks": dict(self.checks),
            "min_group": self.min_group,
            "l_diversity": dict(self.l_diversity),
            "max_share": dict(self.max_share),
            "unchanged_share": dict(self.unchanged_share),
            "dcr": None if self.dcr is None else dict(self.dcr),
            "domains": self.domains,
        }


def check_plan_values(checks: Mapping[str, float]) -> None:
    """Refuse vacuous guarantee parameters (see module docstring)."""
    for name, raw in checks.items():
        v = float(raw)
        value = f"{v:g}"
        if name == "k" and not v >= 2:
            raise PublicationRefused(f"vacuous parameter: k = {value} (a group guarantee needs k ≥ 2)", hint=_PRIVATE_COPY_HINT)
        if name == "noise" and not v > 0:
            raise PublicationRefused(
                f"vacuous parameter: noise level = {value} (it must be > 0: with none the values are published as they are)",
                hint=_PRIVATE_COPY_HINT,
            )
        if name == "noise_a" and not v >= MIN_NOISE_A:
            raise PublicationRefused(
                f"vacuous parameter: noise level a = {value} (it must be at least {MIN_NOISE_A:g}: below, rounding "
                "undoes the noise and the values are published nearly as they are)",
                hint=_PRIVATE_COPY_HINT,
            )
        if name == "swap_p" and not v >= MIN_SWAP_P:
            raise PublicationRefused(
                f"vacuous parameter: rank-swapping window p = {value} % (it must be at least {MIN_SWAP_P:g} %: below, "
                "values are swapped among near-identical neighbours)",
                hint=_PRIVATE_COPY_HINT,
            )
        if name == "count_keep_probability" and not v <= MAX_KEEP_PROBABILITY:
            raise PublicationRefused(
                f"vacuous parameter: the noisy row count keeps its exact value with probability {v:.6g} (at most "
                f"{MAX_KEEP_PROBABILITY:g}: above, the number of rows says whether one person is in the table)",
                hint="Lower the row count's ε",
            )
        if name == "keep_probability" and not v <= MAX_KEEP_PROBABILITY:
            raise PublicationRefused(
                f"vacuous parameter: a randomised-response keep probability of {v:.6g} (at most "
                f"{MAX_KEEP_PROBABILITY:g}: above, almost every value is published as it is)",
                hint="Lower --epsilon: the keep probability is e^ε/(e^ε + k − 1) for a column of k declared values",
            )
        if name == "student_local_epsilon" and not (v > 0 and math.isfinite(v) and v <= MAX_EPSILON):
            raise PublicationRefused(
                f"vacuous guarantee for the student's records: each record held out of the source would be published "
                f"at local ε = {value} (it must be finite and at most {MAX_EPSILON:g}: "
                + ("no local noise" if not math.isfinite(v) else "too little local noise")
                + "), and those people are in the table",
                hint="Pass --student-rho with a smaller ρ (local noise Lap(1/ρ)), or train the student on a public "
                "table (--student-table)",
            )
        if name == "delta" and not (0 <= v <= MAX_DELTA):
            raise PublicationRefused(
                f"vacuous parameter: δ = {value} (it must be at most {MAX_DELTA:g}: δ is the probability that the "
                "guarantee fails, and a large δ even lowers the ε charged)",
                hint=f"Use δ ≤ {MAX_DELTA:g}, e.g. --delta 1e-6",
            )
        if name == "grid_epsilon" and v > MAX_GRID_EPSILON:
            raise PublicationRefused(
                f"vacuous parameter: ε = {value} for a DP grid microaggregation: each cell's number of rows is its exact "
                f"count with probability {-math.expm1(-v / 4):.6g} (1 − e^(−ε/4); at most {MAX_KEEP_PROBABILITY:g}, "
                f"so ε ≤ {MAX_GRID_EPSILON:.2f}: above, the release publishes nearly every cell's true size)",
                hint=f"Pass --param epsilon={math.floor(MAX_GRID_EPSILON * 100) / 100:g} or less (e.g. epsilon=1); for "
                "more accurate cells use fewer bins (more rows per cell for the same noise), not a larger ε",
            )
        if name == "epsilon" and not (v > 0 and math.isfinite(v) and v <= MAX_EPSILON):
            raise PublicationRefused(
                f"vacuous parameter: ε = {value} (it must be > 0 and at most {MAX_EPSILON:g}: beyond, e^ε makes the "
                "guarantee meaningless)",
                hint=_PRIVATE_COPY_HINT,
            )


def check_plan(plan: Plan, min_epsilon: float | None = None) -> None:
    """Checks that need no data: vacuous parameters and a DP cost that is a real guarantee.

    ``min_epsilon`` (the policy's ``[defaults] min_epsilon_per_query``) bounds every ε a DP publication names,
    as it bounds queries: at ε = 1e-300 a DP row count asks for 10¹⁸ rows (red team s20, A2)."""
    check_plan_values(plan.checks)
    if plan.epsilon is not None:
        check_plan_values({"epsilon": float(plan.epsilon)})
    if plan.delta is not None:
        check_plan_values({"delta": float(plan.delta)})
    if min_epsilon is not None:
        for name in ("epsilon", "count_epsilon"):
            v = plan.checks.get(name)
            if v is not None and float(v) < min_epsilon:
                raise PublicationRefused(
                    f"{name} = {float(v):g} is below the policy's minimum ε of {min_epsilon:g}",
                    hint=f"Use ε ≥ {min_epsilon:g} ([defaults] min_epsilon_per_query in the policy)",
                )


def _same_value(v: Any) -> Any:
    """A value as its domain compares it: numbers by value (1 == 1.0 == numpy 1), anything else as text."""
    if isinstance(v, (bool, np.bool_)):
        return str(bool(v))
    if isinstance(v, (int, float, np.integer, np.floating)):
        return float(v)
    return str(v)


def _out_of_domain(
    frame: pd.DataFrame,
    spec: Any,
    plan: Plan,
    protections: Mapping[str, str],
    method_labels: Mapping[str, frozenset[str]] | None = None,
) -> str | None:
    """A published value outside its column's declared ``values`` (of any type) or ``[lower, upper]``.

    Only a column the publication *generalises* (k-anonymity) may hold labels that are not domain values
    ("[20-30)", "{a,b}", "*"), and only labels: a raw value that is neither declared nor such a label is
    refused in every column (red team s16, A6: an int column with declared values was never checked, and
    one label in a column waived the check for all its values). ``method_labels``: the method's own labels of a
    generalised column (:attr:`Publication.labels`: a hierarchy's inner nodes, the missing leaf), accepted there."""
    method_labels = method_labels or {}
    if spec is None:
        return None
    for name in frame.columns:
        col = spec.columns.get(name) if hasattr(spec, "columns") else None
        if col is None:
            continue
        values = frame[name].dropna()
        declared = getattr(col, "values", None)
        if declared:
            allowed = {_same_value(v) for v in declared}
            labels = protections.get(str(name)) == "generalised"
            own = method_labels.get(str(name), frozenset()) if labels else frozenset()
            for v in values.unique():
                if _same_value(v) not in allowed and not (labels and (_is_label_of(v, allowed) or v in own)):
                    return f"column {name!r} has value {v!r} outside the declared values"
        elif getattr(col, "lower", None) is not None and pd.api.types.is_numeric_dtype(values) and len(values):
            lo, hi = float(col.lower), float(col.upper)
            vmin, vmax = float(values.min()), float(values.max())
            if vmin < lo or vmax > hi:
                return f"column {name!r} spans [{vmin:g}, {vmax:g}] outside the declared [{lo:g}, {hi:g}]"
    return None


def _undeclared(columns: Mapping[str, Any], train: pd.DataFrame, spec: Any) -> list[str]:
    """Published columns that come from the source but that its policy spec does not declare."""
    declared = getattr(spec, "columns", None)
    if declared is None:
        return []
    return [c for c in columns if c in train.columns and c not in declared]


def _unowned(columns: Mapping[str, Any], spec: Any, pub: Publication) -> list[str]:
    """Published columns that neither the policy spec declares nor the plug-in names as its own, with a domain
    (:attr:`Publication.own_columns`): nothing would check their values (red team s76 F5)."""
    declared = getattr(spec, "columns", None)
    if declared is None:
        return []
    return [c for c in columns if c not in declared and c not in pub.own_columns]


class _WithOwnColumns:
    """The policy spec's columns and the plug-in's own (:attr:`Publication.own_columns`), for the domain check."""

    def __init__(self, spec: Any, own: Mapping[str, Any]) -> None:
        self.columns = {**dict(own), **dict(getattr(spec, "columns", {}))}


def is_generalised_label(value: Any) -> bool:
    # generalised k-anonymity labels ("[20-30)", "(-inf, 3]", "[5, inf)", "{a,b}", "*") are not domain values
    return isinstance(value, str) and bool(re.fullmatch(r"\*|[\[(].*[\])]|\{.*\}", value))


def _is_label_of(value: Any, allowed: set[Any]) -> bool:
    """Is ``value`` a generalised column's label: a range, a set, ``*``, or the text of one declared value?

    k-anonymity writes every class of a generalised column as text, so a class of the single value 5 reads
    ``'5'`` — the declared value 5 (red team s20, A5)."""
    if is_generalised_label(value):
        return True
    if isinstance(value, str):
        try:
            return float(value) in allowed
        except ValueError:
            return False
    return False


_NULL = "\x00NULL"


def value_key(v: Any) -> Any:
    """One published or source value as the rare-value check compares it: exactly as published — numbers by their
    value (``1 == 1.0 == numpy 1``, no tolerance: a float that differs in its last bit is another value), dates by
    their ISO date, anything else as text, every kind of missing value as one NULL.

    >>> value_key(3), value_key(np.float64(3.0)), value_key("3"), value_key(0.1 + 0.2) == value_key(0.3)
    (3.0, 3.0, '3', False)
    >>> value_key(None) == value_key(float("nan")) == value_key(pd.NA) == value_key(pd.NaT)
    True
    """
    if v is None or v is pd.NA or v is pd.NaT:
        return _NULL
    if isinstance(v, (float, np.floating)) and v != v:
        return _NULL
    if isinstance(v, (pd.Timestamp, np.datetime64)) or hasattr(v, "isoformat"):
        from veil.generators.columns import date_text

        text = date_text(v)
        return _NULL if text is None else text
    return _same_value(v)


def _keys(series: pd.Series) -> pd.Series:
    return series.astype(object).map(value_key)


def rare_values(
    published: pd.Series, source: pd.Series, need: int, *, own: pd.Series | None = None, among_published: bool = False
) -> dict[Any, int]:
    """The distinct values of ``published`` that equal a value of ``source`` held by fewer than ``need`` of its rows,
    each with how many source rows hold it (:func:`value_key` compares them).

    A published NULL counts as held by the source's NULLs or the output's, whichever are more: a method that reads an
    out-of-domain value as missing (k-anonymity) publishes one person's odd value as the table's only NULL.

    ``own`` (row-aligned with ``published``: each output row's own source value): only a row that publishes its own
    value counts — a method whose every output row derives from its own source row alone (noise addition) publishes
    another row's rare value as often with that person as without (red team s60 review, finding 1). A published
    NULL is counted as above. ``among_published``: the values are source values copied (a sensitive column), so a
    value counts as held by the rows that publish it, whatever the source holds — a method that drops rows
    (k-anonymity's suppression, ``--missing drop``) can leave one of five holders alone in the output (finding 2), and
    a value changed on its way out (a fraction in an ``int`` column rounded) equals no source value (red team s72 F5).

    >>> rare_values(pd.Series([1, 2, 2.5, None]), pd.Series([1, 1, 2, None, None]), 2)
    {2.0: 1}
    >>> rare_values(pd.Series([1, 1, None]), pd.Series([1, 1, 9999]), 2) == {value_key(None): 1}
    True
    >>> rare_values(pd.Series([2.0, 1.0]), pd.Series([1.0, 2.0, 2.0]), 2, own=pd.Series([1.0, 2.0]))
    {}
    >>> rare_values(pd.Series([1.0, 2.0]), pd.Series([1.0, 2.0, 2.0]), 2, own=pd.Series([1.0, 1.0])) == {1.0: 1}
    True
    >>> rare_values(pd.Series([7.0, 1.0, 1.0]), pd.Series([7.0, 7.0, 1.0, 1.0]), 2, among_published=True) == {7.0: 1}
    True
    >>> rare_values(pd.Series([97, 40, 40]), pd.Series([97.3, 40.2, 39.8]), 2, among_published=True) == {97.0: 1}
    True
    """
    held = _keys(source).value_counts(dropna=False)
    keys = _keys(published)
    shown = keys.value_counts(dropna=False)
    candidates = keys
    if own is not None:
        same = keys.to_numpy() == _keys(own).to_numpy()
        candidates = keys[same | (keys == _NULL).to_numpy()]
    out: dict[Any, int] = {}
    for key in candidates.unique():
        n = int(held.get(key, 0))
        if key == _NULL:
            n = max(n, int(shown.get(key, 0)))
        if among_published:
            # holders among the published rows, whatever the source holds: a value the output changed on its way out
            # (a fraction rounded, red team s72 F5) equals no source value and would otherwise pass unchecked
            n = int(shown.get(key, 0))
        if 0 < n < need:
            out[key] = n
    return out


def _shown(key: Any) -> str:
    """A :func:`value_key` as a refusal names it: ``NULL``, a number as written (``1234``, ``0.5``), a text quoted."""
    if key == _NULL:
        return "NULL"
    return f"{key:.17g}" if isinstance(key, float) else repr(key)


def check_rare_values(plan: Plan, pub: Publication, frame: pd.DataFrame, train: pd.DataFrame) -> dict[str, int]:
    """Refuse a publication without a DP guarantee that publishes, as it is, a value fewer than k source rows hold
    (see the module docstring); returns the number of distinct values checked per column.

    Every column whose protection is in :data:`VALUE_PROTECTIONS`, except those the group check covers (MDAV's,
    DBSCAN's, k-anonymity's group columns: each published value is shared by at least k output rows, each their
    group's aggregate), compared with the same column of the source rows (``train``; for a row-aligned method,
    ``source_rows`` of it: the rows the method read). Two forms of the rule:

    * per value, where output values are source values moved or copied (rank swapping, a ``sensitive`` column):
      no published value may equal a value fewer than k source rows hold — for a ``sensitive`` column, fewer than k
      *published* rows (a value copied from five rows, four of them dropped by the method, is one person's);
    * per row, where each output row derives from its own source row alone (``pub.own_values``: noise addition):
      no output row may publish, as it is, its own source value when fewer than k source rows hold it. A row whose
      noise lands on *another* row's rare value is published as it would be without that person: refusing (or
      redrawing) every copy of a rare value would empty the histogram around it exactly when its holder is present
      (red team s60 review, finding 1).
    k: the publication's own (``min_group``, or the plan's ``k``), else :data:`MIN_VALUE_HOLDERS`. Never called
    for a DP release: a data-dependent refusal of one would itself leak."""
    need = pub.min_group if pub.min_group is not None else int(plan.checks.get("k", MIN_VALUE_HOLDERS))
    aligned: pd.DataFrame | None = None
    if pub.source_rows is not None:
        if pub.own_values:
            # each output row's own source row, for the per-row rule
            aligned = train.iloc[np.asarray(pub.source_rows)]
        # a row-aligned method's source is the rows it read (a row it left out for a missing value contributes
        # nothing, and a published value that happens to equal its value says nothing about it)
        train = train.iloc[np.unique(np.asarray(pub.source_rows))]
    checked: dict[str, int] = {}
    for name in frame.columns:
        prot = pub.protection(str(name))
        if prot is None or prot.how not in VALUE_PROTECTIONS or name in pub.group_columns or name not in train.columns:
            continue
        rare = rare_values(
            frame[name],
            train[name],
            need,
            own=None if aligned is None else aligned[name].reset_index(drop=True),
            among_published=prot.how == "sensitive",
        )
        checked[str(name)] = len(rare)
        if rare:
            shown = ", ".join(f"{_shown(key)} ({n} row{'s' * (n != 1)})" for key, n in list(rare.items())[:3])
            raise PublicationRefused(
                f"column {name!r} of {pub.method!r} would publish {len(rare)} value{'s' * (len(rare) != 1)} as "
                f"{'they are' if len(rare) != 1 else 'it is'} that fewer than k = {need} source rows hold (e.g. {shown}): "
                "a value one person alone holds would be public exactly when that person is in the source",
                hint="Publish the column coarser (a coarser rounding or generalisation, e.g. as a quasi-identifier), "
                "aggregated (microaggregation: --method microagg_mdav), with more noise, or with a DP method "
                "(veil publish krr, --method dp_microagg_laplace)",
            )
    return checked


def _check_sensitive_combinations(frame: pd.DataFrame, pub: Publication, keys: list[str], need: int) -> None:
    """k holds on every published column but any one sensitive column.

    An attacker who knows all but one of a person's published values singles them out as surely with
    "sensitive" values as with quasi-identifiers: with ``--qi sex`` and every other column sensitive,
    k-anonymity on ``sex`` alone published the raw rows, each unique (red team s16, A10). So each
    sensitive column may stay unknown, but the others count as quasi-identifiers."""
    sensitive = [c for c in pub.sensitive if c in frame.columns]
    if len(sensitive) < 2:
        return
    for s in sensitive:
        others = [c for c in sensitive if c != s]
        smallest = int(frame.groupby(keys + others, dropna=False, sort=False, observed=True).size().min())
        if smallest < need:
            raise PublicationRefused(
                f"the sensitive columns {others} with the quasi-identifiers {keys} single out groups of {smallest} "
                f"rows, below k = {need}: k must hold on every published column but one sensitive column",
                hint="Publish one sensitive column per table, or name the others as quasi-identifiers (--qi) so they are "
                "generalised too",
            )


def _check_max_share(frame: pd.DataFrame, pub: Publication, keys: list[str]) -> dict[str, float]:
    """Per sensitive column, the largest share of a published group (rows equal on ``keys`` and on the other
    sensitive columns) that one value (NULL included) holds, on the published values; a refusal when it is above
    ``pub.max_share`` (else :data:`MAX_KEEP_PROBABILITY`). k-anonymity's algorithms keep every class diverse on the
    values they read; this is the same rule on what is written (red team s72 F4: a declared ``int`` column's fractions
    were distinct when the classes were formed and one integer once published, 28 of 29 classes homogeneous)."""
    sensitive = [c for c in pub.sensitive if c in frame.columns]
    if not sensitive or frame.empty:
        return {}
    limit = pub.max_share if pub.max_share is not None else MAX_KEEP_PROBABILITY
    out: dict[str, float] = {}
    for name in sensitive:
        # the other sensitive columns are quasi-identifiers for this one, as for k (multi-attribute diversity,
        # Machanavajjhala et al.): whoever knows a person's other sensitive value reads this one within the rows that
        # share both (red team s76 F6: s2 gave s1 with certainty in every class of a table 2-diverse on the QIs)
        on = keys + [c for c in sensitive if c != name]
        group = (
            pd.DataFrame({f"g{i}": _keys(frame[c]) for i, c in enumerate(on)})
            .groupby([f"g{i}" for i in range(len(on))], sort=False)
            .ngroup()
        )
        sizes = group.value_counts()
        pairs = pd.DataFrame({"g": group.to_numpy(), "v": _keys(frame[name]).to_numpy()})
        top = pairs.groupby(["g", "v"], sort=False).size().groupby(level=0, sort=False).max()
        share = top / sizes.reindex(top.index).to_numpy()
        out[name] = float(share.max())
        worst = int(share.idxmax())
        if out[name] > limit + 1e-12:
            held, size = int(top.loc[worst]), int(sizes.loc[worst])
            raise PublicationRefused(
                f"a published class of {pub.method!r} (rows equal on {on}) gives one {name!r} value to {held} of its "
                f"{size} rows ({out[name]:.3g}), above the promised max_share={limit:g}: "
                f"{int((share > limit + 1e-12).sum())} of {len(share)} classes are not diverse as published",
                hint="Publish the column coarser or as a quasi-identifier, or check that its declared type fits its "
                "values (a declared int column's fractions are read as whole numbers)",
            )
    return out


def verify(
    plan: Plan,
    pub: Publication,
    *,
    train: pd.DataFrame,
    holdout: pd.DataFrame | None,
    spec: Any,
    generator: np.random.Generator,
) -> GateReport:
    """Check ``pub`` (already finalised by the transaction) against its claimed guarantee."""
    check_plan(plan)
    columns: dict[str, dict[str, str]] = {}
    frame = pub.frame
    if frame is None:
        if pub.model is None:
            raise PublicationRefused(f"publication {pub.method!r} produced neither a table nor a model")
        return GateReport(columns={}, checks=dict(plan.checks))
    if len(frame) == 0:
        raise PublicationRefused(f"publication {pub.method!r} produced no rows", hint="Check the source table and parameters")
    for name in frame.columns:
        prot = pub.protection(str(name))
        if prot is None or prot.how not in PROTECTIONS:
            raise PublicationRefused(
                f"column {name!r} of {plan.output!r} was not produced by the sanitiser and is not covered by its guarantee",
                hint="This is a bug in the plug-in: copied columns must be dropped",
            )
        columns[str(name)] = {"protection": prot.how, "detail": prot.detail}
    if not columns:
        raise PublicationRefused(f"publication {pub.method!r} has no protected column to publish")
    undeclared = _undeclared(columns, train, spec)
    if undeclared:
        raise PublicationRefused(
            f"column {undeclared[0]!r} of the source is not declared in the policy's table spec and may not be "
            f"published by {pub.method!r} (as a sensitive, label, condition or target column or otherwise)",
            hint="Publish only declared columns: declare it in [tables.<table>.columns] if it is not an identifier, "
            "else leave it out",
        )
    unowned = _unowned(columns, spec, pub)
    if unowned:
        raise PublicationRefused(
            f"column {unowned[0]!r} of {plan.output!r} is neither declared in the policy's table spec nor a column "
            f"{pub.method!r} declares as its own with a domain: nothing checks its values",
            hint="This is a bug in the plug-in: publish the policy's columns, or declare the column in "
            "Publication.own_columns with its domain",
        )
    if pub.sensitive and not pub.group_columns:
        raise PublicationRefused(f"sensitive columns {list(pub.sensitive)} are only publishable in a k-anonymous table")

    min_group: int | None = None
    l_div: dict[str, int] = {}
    shares: dict[str, float] = {}
    if pub.group_columns:
        keys = [c for c in pub.group_columns if c in frame.columns]
        grouped = frame.groupby(keys, dropna=False, sort=False, observed=True)
        sizes = grouped.size()
        min_group = int(sizes.min())
        need = pub.min_group if pub.min_group is not None else int(plan.checks.get("k", 2))
        if min_group < need:
            raise PublicationRefused(
                f"the output of {pub.method!r} has a group of {min_group} rows on {keys}, below k = {need}",
                hint="The generator does not meet its own guarantee; report it, or choose other parameters",
            )
        for s in pub.sensitive:
            if s in frame.columns:
                l_div[s] = int(grouped[s].nunique(dropna=False).min())
        shares = _check_max_share(frame, pub, keys)
        _check_sensitive_combinations(frame, pub, keys, need)

    checked_spec = _WithOwnColumns(spec, pub.own_columns) if spec is not None and pub.own_columns else spec
    problem = _out_of_domain(frame, checked_spec, plan, {c: info["protection"] for c, info in columns.items()}, pub.labels)
    if problem is not None:
        raise PublicationRefused(f"{problem} in the output of {pub.method!r}", hint="Values must stay in the policy's domains")

    unchanged: dict[str, float] = {}
    dcr: dict[str, Any] | None = None
    if not plan.is_dp:
        # the source as the output was written: each published column clamped and typed by the same function
        # (red team s72 F4/F5: rounded values compared with fractions, dates with their ISO text, never equal)
        train = as_published(train, pub, spec)
        if pub.source_rows is not None:
            src = train.iloc[np.asarray(pub.source_rows)].reset_index(drop=True)
            for name, info in columns.items():
                if info["protection"] in ("perturbed", "randomised") and name in src.columns:
                    same = frame[name].reset_index(drop=True).eq(src[name]) | (
                        frame[name].isna().to_numpy() & src[name].isna().to_numpy()
                    )
                    unchanged[name] = float(same.mean())
                    if bool(same.all()):
                        raise PublicationRefused(
                            f"column {name!r} of {pub.method!r} equals the source in every row: nothing was protected",
                            hint=_PRIVATE_COPY_HINT,
                        )
                    # a group guarantee (MDAV, DBSCAN) covers its unchanged values: each is shared by its group
                    if not pub.group_columns and unchanged[name] > MAX_KEEP_PROBABILITY:
                        raise PublicationRefused(
                            f"column {name!r} of {pub.method!r} equals the source in {unchanged[name]:.1%} of the rows (at "
                            f"most {MAX_KEEP_PROBABILITY:.0%}: the perturbation, once rounded to the column's declared "
                            "type, leaves almost every value as it is)",
                            hint="Use more noise (a larger a or p): for an integer column of small spread, noise much "
                            "below one unit is rounded away",
                        )
        check_rare_values(plan, pub, frame, train)
        if pub.synthetic:
            if holdout is None or len(holdout) < 10:
                raise PublicationRefused(
                    f"synthetic table {plan.output!r} cannot be checked: the holdout has "
                    f"{0 if holdout is None else len(holdout)} rows",
                    hint="The source table needs more rows",
                )
            from veil.metrics.dcr import dcr_check

            rep = dcr_check(frame, train, as_published(holdout, pub, spec), rng=generator)
            dcr = rep.as_dict()
            if not rep.passed:
                raise PublicationRefused(
                    f"synthetic table {plan.output!r} reproduces its training rows, comes nearer to them than to the "
                    f"holdout, or keeps away from them: of the {rep.exact_copies} source rows it copies exactly, "
                    f"{rep.exact_train_rate:.3f} are training rows (allowed {rep.exact_floor:.3f} to "
                    f"{rep.exact_limit:.3f}), of the {rep.rare_copies} of them no other source row equals "
                    f"{rep.rare_train_rate:.3f} (allowed {rep.rare_floor:.3f} to {rep.rare_limit:.3f}), and of the "
                    f"{rep.nearest_records} source rows nearest to it {rep.near_train_share:.3f} (allowed "
                    f"{rep.share_floor:.3f} to {rep.share_limit:.3f}, {rep.near_side} tail {rep.near_tail:.1e}); "
                    f"training rows are {rep.train_share:.3f} of the source",
                    hint="Train less (fewer epochs) or with more data; the model memorised rows. A filter that drops "
                    "synthetic rows equal or near to training rows betrays them by their absence",
                )
    return GateReport(
        columns=columns,
        checks=dict(plan.checks),
        min_group=min_group,
        l_diversity=l_div,
        max_share=shares,
        unchanged_share=unchanged,
        dcr=dcr,
    )
