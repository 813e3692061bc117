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
the names). NA is one more domain value when the column has missing values.

>>> import pandas as pd, numpy as np
>>> from types import SimpleNamespace
>>> df = pd.DataFrame({"c": ["a", "b"] * 50, "n": range(100)})
>>> specs = {"c": SimpleNamespace(values=("a", "b"))}
>>> out, info = krr_publish(df, ["c"], epsilon=100.0, specs=specs, rng=np.random.default_rng(0))
>>> out["c"].equals(df["c"]), list(out.columns), info["c"]["domain_source"]
(True, ['c'], 'policy values')
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from veil.errors import InputError, did_you_mean
from veil.mechanisms import randomized_response

__all__ = ["declared_domain", "keep_probability", "krr_publish"]

_NA = "__veil_na__"


def keep_probability(epsilon: float, k: int) -> float:
    """P(a value is reported unchanged) = e^ε / (e^ε + k − 1).

    >>> round(keep_probability(1.0, 2), 4)
    0.7311
    """
    return 1.0 / (1.0 + (k - 1) * math.exp(-epsilon))


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


def krr_publish(
    df: pd.DataFrame,
    columns: Sequence[str],
    *,
    epsilon: float,
    specs: Mapping[str, Any] | None = None,
    max_domain: int = 1000,
    rng: np.random.Generator | None = None,
) -> tuple[pd.DataFrame, dict[str, dict[str, Any]]]:
    """Perturb ``columns`` of ``df`` with kRR at ``epsilon`` each; return (the perturbed columns only,
    per-column info).

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
    out = pd.DataFrame(index=df.index)
    info: dict[str, dict[str, Any]] = {}
    for name in columns:
        col = df[name]
        domain, source = declared_domain(name, (specs or {}).get(name), max_domain)
        has_na = bool(col.isna().any())
        if has_na:
            domain = [*domain, _NA]
        if len(domain) < 2:
            raise InputError(f"column {name!r} has a single possible value", hint="kRR needs at least 2; drop it from --columns")
        values = col.astype(object).where(col.notna(), _NA).to_numpy()
        in_domain = set(domain)
        outside = [v for v in pd.unique(values) if v not in in_domain]
        if outside:
            raise InputError(
                f"column {name!r} has value {outside[0]!r} outside its declared domain",
                hint="Fix the policy's values/bounds for this column",
            )
        noisy = randomized_response(values, categories=domain, epsilon=epsilon, rng=rng)
        series = pd.Series(noisy, index=df.index, dtype=object)
        series = series.where(series != _NA, None)
        try:
            out[name] = series.astype(col.dtype)
        except (TypeError, ValueError):
            out[name] = series
        info[name] = {
            "k": len(domain),
            "domain_source": source,
            "keep_probability": keep_probability(float(epsilon), len(domain)),
        }
    return out, info
