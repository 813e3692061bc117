"""k-anonymous publication: Mondrian (strict/relaxed), OKA and K-Member, with optional SOM column.

One module per job: :mod:`~veil.generators.kanon.anonymisation` (``KAnonConfig`` → ``anonymise`` →
``KAnonResult``), the algorithms (``mondrian``, ``oka``, ``kmember``), the QI encoding
(``generalise``), taxonomies (``hierarchies``), NCP (``ncp``) and the warehouse wrapper
(``publish``). The names below are re-exported so ``from veil.generators.kanon import anonymise``
keeps working.
"""

from veil.generators.kanon.anonymisation import (
    ALGORITHMS,
    MISSING,
    MISSING_LEAF,
    SOM_COLUMN,
    KAnonConfig,
    KAnonResult,
    anonymise,
    canonical_algorithm,
    population_rows,
)

__all__ = [
    "ALGORITHMS",
    "MISSING",
    "MISSING_LEAF",
    "SOM_COLUMN",
    "KAnonConfig",
    "KAnonResult",
    "anonymise",
    "canonical_algorithm",
    "population_rows",
]
