"""k-ary randomised response (kRR) publication: the IMPOSTER paper's baseline.

Every chosen column is perturbed independently, value by value, with
:func:`veil.mechanisms.randomized_response` (keep with probability e^ε/(e^ε + k − 1), else one of
the other k − 1 domain values uniformly; OS CSPRNG). Only the perturbed columns are returned: the
other columns of the source are never published (they carry no guarantee).

**Guarantee.** Each perturbed cell is ε-local-DP for its column, so a row's perturbed cells
together are (m·ε)-local-DP for m columns (sequential composition); the release record's
``epsilon`` is this total, m·ε (charged to the source table's budget), and
``params["epsilon_per_attribute"]`` is ε. The publication (``veil publish krr``, a plug-in in
:mod:`veil.generators.plugins.krr`) holds the perturbed columns only, rows shuffled.

**Domains.** kRR needs each column's full domain, and it must be *declared*: it is taken from the
policy's ``values`` for the column, or, for an integer column with declared bounds spanning at
most ``max_domain`` values, from every integer in ``[lower, upper]``. A column with neither is
refused (:class:`~veil.errors.InputError`): a domain read from the private data would be
disclosed by the release outside the ε guarantee (randomising a column of names would publish
the names). NA (a missing value) is always one more domain value, whatever the data holds: a domain
that gained NA only when some row was missing would publish that one row's missingness outside the
noise (red team s16, A1). A value outside the declared domain is read as NA too (data-independently,
as queries drop it) instead of refusing the publication, whose refusal would then depend on one row
(A12). Each column's published type comes from the policy, not from the data.

**Rows.** With ``count_epsilon``, the number of published rows is itself ε-DP (red team s16, A5: one
row per source row published the exact count): a discrete-Laplace count (sensitivity 1: sources are
row-level tables), reached by dropping uniformly chosen perturbed rows or adding rows drawn uniformly
from the domains (post-processing of the noisy count).

>>> import pandas as pd, numpy as np
>>> from types import SimpleNamespace
>>> df = pd.DataFrame({"c": ["a", "b"] * 50, "n": range(100)})
>>> specs = {"c": SimpleNamespace(values=("a", "b"))}
>>> out, info = krr_publish(df, ["c"], epsilon=100.0, specs=specs, rng=np.random.default_rng(0))
>>> out["c"].tolist() == df["c"].tolist(), list(out.columns), info["c"]["domain_source"], info["c"]["k"]
(True, ['c'], 'policy values', 3)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from veil import mechanisms
from veil.errors import InputError, did_you_mean
from veil.generators.randomness import private_rng
from veil.mechanisms import randomized_response
from veil.store.declared_types import as_declared

__all__ = ["declared_domain", "keep_probability", "krr_domain", "krr_publish"]

_NA = "__veil_na__"


def keep_probability(epsilon: float, k: int) -> float:
    """P(a value is reported unchanged) = e^ε / (e^ε + k − 1), as :func:`veil.mechanisms.randomized_response` draws it.

    >>> round(keep_probability(1.0, 2), 4)
    0.7311
    """
    return float(mechanisms.keep_probability(epsilon, k))


def declared_domain(name: str, spec: Any, max_domain: int = 1000) -> tuple[list[Any], str]:
    """Column ``name``'s domain from its policy ``spec`` (values, or small integer bounds) and where it
    came from; :class:`InputError` when the policy declares none (never read from the data)."""
    values = getattr(spec, "values", None) if spec is not None else None
    if values:
        return list(values), "policy values"
    if (
        spec is not None
        and getattr(spec, "type", None) == "int"
        and getattr(spec, "bounded", False)
        and spec.upper - spec.lower + 1 <= max_domain
    ):
        return list(range(int(spec.lower), int(spec.upper) + 1)), "policy bounds"
    what = "is not declared in the policy" if spec is None else "has no declared domain in the policy"
    raise InputError(
        f"column {name!r} {what}: kRR needs a declared domain (a domain read from the private data is "
        "published outside the ε guarantee)",
        hint=f"Declare its values (values = [...]) or integer bounds (at most {max_domain} values) in the policy's "
        "[tables.<table>.columns], or drop it from --columns",
    )


def krr_domain(name: str, spec: Any, max_domain: int = 1000) -> tuple[list[Any], str]:
    """The domain kRR randomises column ``name`` over: its declared domain and NA, always."""
    domain, source = declared_domain(name, spec, max_domain)
    return [*domain, _NA], source


def _published(series: pd.Series, spec: Any) -> pd.Series:
    """``series`` (NA as None) in the column's declared type (never the source's dtype: a source column
    is a float when it holds a missing integer, so its dtype would say whether one row is missing)."""
    return as_declared(series, getattr(spec, "type", None))


def _resize(out: pd.DataFrame, domains: Mapping[str, list[Any]], count_epsilon: float, rng: np.random.Generator | None,
            specs: Mapping[str, Any]) -> pd.DataFrame:  # fmt: skip
    """``out`` with a DP number of rows: its count plus discrete-Laplace noise of scale 1/``count_epsilon``."""
    from veil.mechanisms import discrete_laplace

    n = len(out)
    target = max(0, int(discrete_laplace(np.array([n], dtype=np.int64), scale=1.0 / count_epsilon, rng=rng)[0]))
    pick = private_rng() if rng is None else rng
    if target <= n:
        return out.iloc[np.sort(pick.choice(n, size=target, replace=False))].reset_index(drop=True)
    extra = {}
    for name, domain in domains.items():
        drawn = pd.Series([domain[i] for i in pick.integers(0, len(domain), size=target - n)], dtype=object)
        extra[name] = _published(drawn.where(drawn != _NA, None), specs.get(name))
    return pd.concat([out.reset_index(drop=True), pd.DataFrame(extra)], ignore_index=True)


def krr_publish(
    df: pd.DataFrame,
    columns: Sequence[str],
    *,
    epsilon: float,
    specs: Mapping[str, Any] | None = None,
    max_domain: int = 1000,
    count_epsilon: float | None = None,
    rng: np.random.Generator | None = None,
) -> tuple[pd.DataFrame, dict[str, dict[str, Any]]]:
    """Perturb ``columns`` of ``df`` with kRR at ``epsilon`` each; return (the perturbed columns only,
    per-column info). With ``count_epsilon``, the number of rows is ε-DP too (see the module docstring).

    ``specs`` maps column names to policy column specs (for declared domains). ``rng`` is for
    tests only; without it noise comes from the OS CSPRNG.
    """
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or not math.isfinite(epsilon) or epsilon <= 0:
        raise InputError(f"epsilon must be a finite number > 0, got {epsilon!r}", hint="Use e.g. --epsilon 2")
    if not columns:
        raise InputError("no columns to perturb", hint="Pass --columns, e.g. the implicit attributes from `veil audit implicit`")
    if len(set(columns)) != len(columns):
        raise InputError(f"columns repeat: {list(columns)}", hint="Name each column once")
    for name in columns:
        if name not in df.columns:
            raise InputError(
                f"column {name!r} is not in the table", hint=did_you_mean(name, df.columns) or f"Columns: {list(df.columns)}"
            )
    if count_epsilon is not None and (not math.isfinite(count_epsilon) or count_epsilon <= 0):
        raise InputError(f"count_epsilon must be a finite number > 0, got {count_epsilon!r}")
    specs = specs or {}
    out = pd.DataFrame(index=df.index)
    info: dict[str, dict[str, Any]] = {}
    domains: dict[str, list[Any]] = {}
    for name in columns:
        col = df[name]
        domain, source = krr_domain(name, specs.get(name), max_domain)
        in_domain = set(domain)
        values = np.array([v if v in in_domain else _NA for v in col.astype(object).where(col.notna(), _NA)], dtype=object)
        noisy = randomized_response(values, categories=domain, epsilon=epsilon, rng=rng)
        series = pd.Series(noisy, index=df.index, dtype=object)
        out[name] = _published(series.where(series != _NA, None), specs.get(name))
        domains[name] = domain
        info[name] = {
            "k": len(domain),
            "domain_source": source,
            "keep_probability": keep_probability(float(epsilon), len(domain)),
        }
    if count_epsilon is not None:
        out = _resize(out, domains, count_epsilon, rng, specs)
    return out, info
