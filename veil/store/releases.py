"""Release records: every answer, publication and retraction Veil ever let out, with its privacy cost.

Plain frozen values and their JSON text; this module imports nothing else of Veil but the leaf
JSON converter, so every layer can read records without import cycles. The ledger
(:mod:`veil.store.ledger`) writes and reads them; the curator's functions over the log
(``record_release``, ``get_release``, ``list_releases``, ``published_tables``) live in
:mod:`veil.store.publications` (still reachable here by name, imported on first use).

>>> dumps({"b": 1, "a": [0.5, None]})
'{"a": [0.5, null], "b": 1}'
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from veil._json import to_jsonable

__all__ = ["LoggedStatistics", "Release", "ReleasedStatistic", "ReleasedVector", "dumps"]

_FORWARDED = frozenset({"get_release", "list_releases", "published_tables", "record_release"})


def __getattr__(name: str) -> Any:
    # the curator API moved to veil.store.publications (which imports the ledger); imported lazily so this
    # module stays free of other Veil imports and of cycles
    if name in _FORWARDED:
        from veil.store import publications

        return getattr(publications, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True)
class ReleasedStatistic:
    """One noisy number inside an analyst query release."""

    name: str  # e.g. "sum(age)" or "count(*)"
    mechanism: str  # "laplace", "discrete_laplace", "exponential", "exact"
    epsilon: Fraction
    sensitivity: float
    scale: float
    value: Any  # the released (noisy) value
    ci95: float | None = None
    group: tuple[Any, ...] = ()


@dataclass(frozen=True)
class ReleasedVector:
    """One noisy statistic of an analyst query release over all its released groups: ``values[i]`` is the value for
    the release's ``i``-th group. The ledger logs it as one row (:meth:`~veil.store.ledger.Ledger.release`) and reads
    it back as one :class:`ReleasedStatistic` per group."""

    name: str
    mechanism: str
    epsilon: Fraction
    sensitivity: float
    scale: float
    ci95: float | None
    values: tuple[Any, ...]  # plain JSON values (``ndarray.tolist()``), NaN kept

    def rows(self, groups: Sequence[tuple[Any, ...]]) -> list[ReleasedStatistic]:
        """One :class:`ReleasedStatistic` per group, in the groups' order."""
        if len(groups) != len(self.values):
            raise ValueError(f"{len(self.values)} values of {self.name!r} for {len(groups)} groups")
        return [
            ReleasedStatistic(self.name, self.mechanism, self.epsilon, self.sensitivity, self.scale, v, self.ci95, g)
            for v, g in zip(self.values, groups, strict=True)
        ]


@dataclass(frozen=True)
class LoggedStatistics:
    """What a query release logs beside its answer: each statistic's values over the released ``groups`` (the group
    keys as plain JSON values, in the answer's order)."""

    vectors: tuple[ReleasedVector, ...]
    groups: tuple[tuple[Any, ...], ...]


@dataclass(frozen=True)
class Release:
    id: str
    kind: str  # "query" | "publication" | "retraction"
    method: str
    actor: str
    created_at: str  # ISO-8601 UTC
    table: str | None
    params: Mapping[str, Any]
    metrics: Mapping[str, Any]
    epsilon: Fraction | None
    delta: Fraction | None
    canonical_sql: str | None = None
    answer: Mapping[str, Any] | None = None
    statistics: tuple[ReleasedStatistic, ...] = ()


_PLAIN_SCALARS = frozenset({str, int, float, bool, type(None)})
_SEQUENCES = frozenset({list, tuple})


def _plain(obj: Any) -> bool:
    """Is ``obj`` already plain JSON (exact types: str-keyed dicts, lists, tuples, str/int/float/bool/None)?"""
    todo = [obj]  # (a loop, not recursion: an answer holds thousands of cells, each checked once)
    scalars = _PLAIN_SCALARS
    while todo:
        item = todo.pop()
        t = type(item)
        if t in scalars:
            continue
        if t is list or t is tuple:
            # a row of plain cells (the common container) is checked in one call, and so is a list of such rows (an
            # answer's rows and intervals: one pass over every cell, not one call per row); only what is not a plain
            # scalar is looked into
            kinds = set(map(type, item))
            if kinds <= scalars:
                continue
            if kinds <= _SEQUENCES and scalars.issuperset(map(type, itertools.chain.from_iterable(item))):
                continue
            todo.extend([v for v in item if type(v) not in scalars])
        elif t is dict:
            if any(type(k) is not str for k in item):
                return False
            todo.extend(item.values())
        else:
            return False
    return True


#: ``json.dumps(obj, sort_keys=True, allow_nan=True)`` without building an encoder per call (the same text).
_ENCODE = json.JSONEncoder(sort_keys=True, allow_nan=True).encode


def dumps(obj: Any) -> str:
    """JSON text for the ledger (sorted keys; numpy/pandas/Fraction values converted; NaN kept). A tuple is written
    as a list."""
    t = type(obj)
    if t is int or (t is float and math.isfinite(obj)):
        return repr(obj)  # what json.dumps writes for an int or a finite float (the common released value)
    if t is dict and not obj:
        return "{}"  # a query release's params and metrics
    if _plain(obj):
        return _ENCODE(obj)
    return _ENCODE(to_jsonable(obj, nan_as_null=False))
