"""Column lists of a publication request: normalised, each named once (red team s27 A16/A9).

A column named twice (``age,AGE`` after normalisation), or in two roles (an SDC target among the protected
columns, a QI also sensitive), selects a frame with two columns of one name, which crashed after the charge.
Refused here, in every plug-in's plan: before any data is read or anything is charged.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pandas as pd

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


_ISO_DATE = re.compile(r"\s*(\d{4})-(\d{1,2})-(\d{1,2})(?:[T ].*)?")


def date_text(v: Any) -> str | None:
    """One value of a declared ``date`` column as the ISO text of its date (``'1970-01-02'``), or None when it is no
    date: a date-time is its own wall-clock date (its zone and time of day dropped, as the query path's cast to DATE
    reads it), a text its leading ``YYYY-MM-DD``, bytes as UTF-8 text. A function of the value alone.

    >>> date_text(pd.Timestamp("1970-01-02 03:00", tz="Asia/Kolkata")), date_text("1970-01-02T23:59:59+05:30")
    ('1970-01-02', '1970-01-02')
    >>> date_text(dt.date(1, 1, 1)), date_text(np.datetime64("NaT")), date_text("x"), date_text(19700102)
    ('0001-01-01', None, None, None)
    >>> date_text(pd.Timestamp(np.datetime64("20000-01-01", "us"))), date_text(np.datetime64("20000-01-01"))
    (None, None)
    """
    if isinstance(v, (bytes, bytearray)):
        try:
            v = bytes(v).decode("utf-8")
        except UnicodeDecodeError:
            return None
    if isinstance(v, np.datetime64):
        v = None if np.isnat(v) else str(v)  # its own text: any year NumPy holds, no conversion that can overflow
    if v is None or v is pd.NaT or v is pd.NA:
        return None
    if isinstance(v, dt.datetime):
        try:
            return v.date().isoformat()  # the wall-clock date, also of a zoned pd.Timestamp
        except (NotImplementedError, ValueError, OverflowError):
            # a pd.Timestamp outside Python's years 1–9999 (another tool's DATE '20000-01-01' reads as one): no date
            # Python holds, so none, as for a NumPy value of such a year (red team s53 B3: one person's such date
            # made every publication of the table, DP ones too, fail with pandas' NotImplementedError)
            return None
    if isinstance(v, dt.date):
        return v.isoformat()
    if isinstance(v, str):
        m = _ISO_DATE.fullmatch(v)
        if m is None:
            return None
        try:
            return dt.date(int(m[1]), int(m[2]), int(m[3])).isoformat()
        except ValueError:
            return None
    return None


def source_dates(frame: pd.DataFrame, spec: object) -> pd.DataFrame:
    """``frame`` (a publication's source rows) with each declared ``date`` column read value by value as the ISO text
    of its date (:func:`date_text`; missing when it is none).

    The rows come with the dtype the warehouse gave the column, which follows every value in it: a column of midnight
    date-times was read as ``datetime64`` and rendered ``'1970-01-01'``, but one person's time of day (``03:00``) made
    pandas render every value ``'1970-01-01 00:00:00'``, and one person's text made the column VARCHAR, rendered the
    same way. k-anonymity's flat tree labels a date QI with those texts, so everyone's published date changed because
    of one person (red team s51, A1: ``COUNT(*) WHERE born = '1970-01-01'`` on the public table went from 20 to 0).
    """
    columns = getattr(spec, "columns", None) or {}
    out = frame
    for name, col in columns.items():
        if getattr(col, "type", None) != "date" or name not in frame.columns:
            continue
        if out is frame:
            out = frame.copy()
        out[name] = pd.Series([date_text(v) for v in frame[name].astype(object)], index=frame.index, dtype=object)
    return out
