"""Progress display for long-running work (tqdm on stderr).

Shown only on an interactive terminal unless ``VEIL_PROGRESS=1``; ``VEIL_PROGRESS=0`` hides it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from typing import Any, TypeVar

from tqdm.auto import tqdm

T = TypeVar("T")

__all__ = ["progress", "progress_enabled"]


def progress_enabled() -> bool:
    flag = os.environ.get("VEIL_PROGRESS")
    if flag is not None:
        return flag not in ("0", "", "false", "no")
    return sys.stderr.isatty()


def progress(iterable: Iterable[T] | None = None, *, total: int | None = None, desc: str = "", **kw: Any) -> Any:
    """A tqdm progress bar (or a silent pass-through when disabled)."""
    return tqdm(iterable, total=total, desc=desc, disable=not progress_enabled(), file=sys.stderr, leave=False, **kw)
