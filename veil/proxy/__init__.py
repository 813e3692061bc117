"""The analyst query path: one pass per module, each a pure function over frozen values.

Order of the passes for one query (orchestrated by :class:`veil.proxy.answer.QuerySession`):
``catalog`` (what may be named) → ``analyze`` (parse, refuse non-SELECT, allow-list, qualify) →
``plan`` (noisy statistics, sensitivities from ``bounds``, exact ε) → ``canonical`` (answer cache key) →
ledger reservation → ``rewrite`` (engine SQL; ``bounding`` for user-level tables) → ``engine`` (sandboxed
DuckDB) → ``noise`` (``veil.mechanisms``) → ``postprocess`` (aggregates, CIs, HAVING/ORDER BY/LIMIT) → release.
"""

PASSES: tuple[str, ...] = (
    "catalog",
    "analyze",
    "plan",
    "canonical",
    "rewrite",
    "engine",
    "noise",
    "postprocess",
    "answer",
)
