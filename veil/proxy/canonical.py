"""Canonical form of a query, for the answer cache.

Two queries are the same when their qualified trees print the same (names resolved and lower-cased,
whitespace, keyword case and redundant syntax normalised by sqlglot) and their ε is the same exact
number. The same analyst asking the same canonical query again gets the logged answer at no cost,
which is what stops averaging attacks.

>>> from fractions import Fraction
>>> len(cache_key("SELECT COUNT(*) AS _col_0 FROM t AS t", Fraction(1, 2)))
64
"""

from __future__ import annotations

import hashlib
from fractions import Fraction

from veil.engines.neutral import duckdb_text
from veil.proxy.validate import Analysis

__all__ = ["cache_key", "canonical_sql"]


def canonical_sql(analysis: Analysis) -> str:
    return duckdb_text(analysis.tree, normalize=True, comments=False)


def cache_key(canonical: str, epsilon: Fraction) -> str:
    text = f"{canonical}\x00{epsilon.numerator}/{epsilon.denominator}"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
