"""Column lists of a publication request: normalised, each named once (red team s27 A16/A9).

A column named twice (``age,AGE`` after normalisation), or in two roles (an SDC target among the protected
columns, a QI also sensitive), selects a frame with two columns of one name, which crashed after the charge.
Refused here, in every plug-in's plan: before any data is read or anything is charged.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from veil.errors import InputError, PolicyError
from veil.policy import normalise_name


def distinct_columns(columns: Iterable[object], option: str) -> list[str]:
    """``columns`` normalised (as the warehouse names them); InputError when one is named twice.

    >>> distinct_columns(["Age", "job"], "--columns")
    ['age', 'job']
    """
    names = [normalise_name(str(c)) for c in columns]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise InputError(
            f"{option} names {', '.join(map(repr, repeated))} more than once (after normalisation: {names})",
            hint=f"Name each column once in {option}",
        )
    return names


def disjoint_roles(roles: Mapping[str, Iterable[str]]) -> None:
    """InputError when one (normalised) column has two roles, e.g. ``{"--columns": [...], "--target": [...]}``."""
    seen: dict[str, str] = {}
    for option, columns in roles.items():
        for column in columns:
            name = normalise_name(str(column))
            if name in seen and seen[name] != option:
                raise InputError(
                    f"column {name!r} is named both in {seen[name]} and in {option}",
                    hint="Give each column one role",
                )
            seen.setdefault(name, option)


def require_declared_domains(spec: object, columns: Iterable[str], option: str, *, table: str) -> None:
    """PolicyError unless each of ``columns`` has a domain the policy declares: ``values``, a ``bool``, or a number
    with ``lower`` and ``upper``.

    For a column a publication copies value by value (k-anonymity's sensitive columns), or whose published range a
    filter takes from its domain (SDC filters): an open domain would publish values read from the rows, and a value
    one person alone holds (a name, a rare category, an outlier) would then be in the public table exactly when that
    person is in the private one (red team s42, A1/A2). From the policy alone, before any data is read. A column the
    policy does not declare is left to the publication's own refusal (it is never published either).
    """
    declared = getattr(spec, "columns", None) or {}
    where = f"[tables.{table}.columns]"
    for name in columns:
        col = declared.get(name)
        if col is None:
            continue
        kind = getattr(col, "type", None)
        bounded = getattr(col, "lower", None) is not None and getattr(col, "upper", None) is not None
        if getattr(col, "values", None) or kind == "bool" or (kind in ("int", "float") and bounded):
            continue
        what = "lower = ... and upper = ... (its bounds)" if kind in ("int", "float") else "values = [...] (its categories)"
        raise PolicyError(
            f"{option} column {name!r} of table {table!r} has no declared domain: it would be published with values "
            "read from the rows, and a value one person alone holds (a name, a rare category, an outlier) would be "
            "public exactly when that person is in the table",
            hint=f"Declare {what} for {name!r} in {where}, or leave the column out",
        )
