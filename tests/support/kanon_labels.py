"""Reading published k-anonymity labels (``[a, b]``, ``(a, b]``, a bare value) and checking their ends against a
public grid (``veil.generators.kanon.generalise.public_grid``): shared by the label tests of red team s64 F7 and s66 F5."""

from __future__ import annotations

from typing import Any

import numpy as np


def label_ends(label: Any) -> list[float]:
    """The numeric ends of a label: both ends of an interval, or the value itself."""
    text = str(label).strip()
    if text[:1] in "[(" and "," in text:
        return [float(t.strip()) for t in text[1:-1].split(",")]
    return [float(text)]


def on_grid(v: float, grid: tuple[float, float, bool]) -> bool:
    """``v`` is a cell's start, a cell's end (its last integer on an int grid), or an open end."""
    origin, step, integer = grid
    if np.isinf(v):
        return True
    starts = (v - origin) / step
    ends = (v + (1.0 if integer else 0.0) - origin) / step
    return bool(np.isclose(starts, np.rint(starts)) or np.isclose(ends, np.rint(ends)))
