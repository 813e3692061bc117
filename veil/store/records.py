"""Former home of the release records, now :mod:`veil.store.releases` (kept for existing imports)."""

from __future__ import annotations

from veil.store.releases import Release, ReleasedStatistic, dumps

__all__ = ["Release", "ReleasedStatistic", "dumps"]
