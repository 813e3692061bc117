"""The size of a synthetic table: a public parameter, never the private table's size.

A synthetic table (IMPOSTER, ML copy, the SDC GAN) holds no source row, but its *number* of rows is
public to every analyst (``SELECT COUNT(*)``, free). Were it the source's size N (or any function of
it), whether one person is in the private table would be read off the public one at ε = 0. So every
synthetic generator draws exactly ``rows`` rows, a curator's parameter (``--param rows=5000``, ``veil
publish synth --rows 5000``) whose default :data:`DEFAULT_ROWS` is data-independent.

>>> check_rows(5000, "ml_copy")
5000
>>> try:
...     check_rows(0, "ml_copy")
... except InputError as exc:
...     print(type(exc).__name__)
InputError
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from veil.errors import InputError
from veil.generators.base import Param

__all__ = ["DEFAULT_ROWS", "MAX_ROWS", "ROWS_PARAM", "check_rows"]

#: Rows of a synthetic table when the curator does not choose (public, the same for every source).
DEFAULT_ROWS = 10_000
#: The most rows one synthetic table may have (memory of the sampling step).
MAX_ROWS = 10_000_000


@dataclass(frozen=True)
class _RowsParam(Param):
    """:class:`Param` for ``rows``: an integer in ``[1, MAX_ROWS]``, checked before the generic conversion (a bool,
    a fraction, NaN, a string that is not an integer, an integer of any size outside the range: InputError)."""

    def coerce(self, value: Any, method: str) -> Any:
        where = f"parameter {self.name!r} of {method!r}"
        out: Any = value
        if isinstance(out, np.integer):
            out = int(out)
        if isinstance(out, str):
            try:
                out = int(out.strip())
            except ValueError:
                raise InputError(f"{where} must be an int, got {value!r}", hint=self.help) from None
        if isinstance(out, float) and math.isfinite(out) and out.is_integer():
            out = int(out)
        if isinstance(out, bool) or not isinstance(out, int):
            raise InputError(f"{where} must be an int, got {value!r}", hint=self.help)
        if not 1 <= out <= MAX_ROWS:
            raise InputError(f"{where} must be from 1 to {MAX_ROWS:,}, got {out!r}", hint=self.help)
        return super().coerce(out, method)


ROWS_PARAM = _RowsParam(
    "rows",
    int,
    DEFAULT_ROWS,
    help=(
        f"rows of the synthetic table, 1 to {MAX_ROWS:,} (public: the size of a synthetic table never depends on the "
        f"source's; default {DEFAULT_ROWS:,})"
    ),
    lower=1,
    upper=MAX_ROWS,
)


def check_rows(value: Any, method: str) -> int:
    """``value`` as the row count of a synthetic table of ``method``; InputError unless an integer in
    ``[1, MAX_ROWS]`` (a bool, a fraction, a string that is not an integer are refused)."""
    return int(ROWS_PARAM.coerce(value, method))
