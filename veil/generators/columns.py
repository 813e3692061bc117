"""Column lists of a publication request: normalised, each named once (red team s27 A16/A9).

A column named twice (``age,AGE`` after normalisation), or in two roles (an SDC target among the protected
columns, a QI also sensitive), selects a frame with two columns of one name, which crashed after the charge.
Refused here, in every plug-in's plan: before any data is read or anything is charged.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from veil.errors import InputError
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
