"""One converter from Veil's values (Fractions, numpy/pandas scalars and arrays, dates) to plain JSON.

>>> import numpy as np
>>> from fractions import Fraction
>>> to_jsonable({"a": np.int64(3), "b": [Fraction(1, 2), float("nan")]})
{'a': 3, 'b': [0.5, None]}
>>> to_jsonable(float("inf"), nan_as_null=False)
inf
>>> to_jsonable([float("-inf"), float("nan")], nonfinite_as_text=True)
['-Infinity', 'NaN']
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

import pandas as pd

__all__ = ["to_jsonable"]


_SPELLING = {math.inf: "Infinity", -math.inf: "-Infinity"}


def to_jsonable(obj: Any, *, nan_as_null: bool = True, nonfinite_as_text: bool = False) -> Any:
    """Plain JSON values for ``obj``; non-finite floats become None unless ``nan_as_null`` is False, or — with
    ``nonfinite_as_text`` — the texts PostgreSQL's ``to_json`` gives them (``"Infinity"``, ``"-Infinity"``, ``"NaN"``),
    which strict JSON readers accept and which no finite value is confused with."""
    if nonfinite_as_text:
        return _nonfinite_as_text(to_jsonable(obj, nan_as_null=False))
    if obj is None or isinstance(obj, (str, bool)):
        return obj
    if isinstance(obj, int) and not isinstance(obj, bool):
        return int(obj)
    if isinstance(obj, (float, Fraction)):
        f = float(obj)
        return None if nan_as_null and not math.isfinite(f) else f
    if isinstance(obj, pd.DataFrame):
        return [to_jsonable(r, nan_as_null=nan_as_null) for r in obj.to_dict(orient="records")]
    if isinstance(obj, Mapping):
        return {str(k): to_jsonable(v, nan_as_null=nan_as_null) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v, nan_as_null=nan_as_null) for v in obj]
    if obj is pd.NA or obj is pd.NaT:
        return None
    if hasattr(obj, "tolist") and callable(obj.tolist):  # numpy scalars and arrays
        return to_jsonable(obj.tolist(), nan_as_null=nan_as_null)
    if hasattr(obj, "isoformat"):
        return obj.isoformat()
    return str(obj)


def _nonfinite_as_text(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return _SPELLING.get(value, "NaN")
    if isinstance(value, dict):
        return {k: _nonfinite_as_text(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_nonfinite_as_text(v) for v in value]
    return value
