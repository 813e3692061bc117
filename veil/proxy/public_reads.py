"""Public tables as Veil's generated SQL reads them: each column cast to the type the catalog gave it.

The analysis typed each public column from the public mirror; the engine reads the stored table, whose type may
differ (a DECIMAL(38, 37), a HUGEINT, a TIMESTAMP read as text, a column retyped in place by another tool) and would
make it cast a private column to that type row by row — a cast that fails on some values only — or compare keys in
another type. Every statement Veil runs over a public table, the generated query and the join-multiplicity probes
alike, reads it through :func:`typed_read`, so the rows the probes measure are the rows the query joins (red team
s25, A2: a key retyped to DOUBLE in place was probed as 801 distinct values and joined as one).

Text is read without the stored column's collation (``decode(encode(…))``, rendered per engine), as the bounded
copy reads private text: a ``COLLATE NOCASE`` public key held ``'p'`` and ``'P'`` as one DISTINCT domain value
while the engine grouped the joined rows under whichever spelling it met first — one person's — and the group
was released as noise around 0 (red team s26, A6).
"""

from __future__ import annotations

from collections.abc import Mapping

from sqlglot import exp

from veil.engines.neutral import CANNOT_RAISE, data_type

__all__ = ["public_column", "read_public_typed", "replace_keeping_joins", "typed_read"]


def public_column(column: str, sql_type: str) -> exp.Expression:
    """A public column read as its catalog type, text without collation (public data only decides whether the
    cast fails: not priced)."""
    cast = exp.TryCast(this=exp.column(exp.to_identifier(column, quoted=True)), to=data_type(sql_type))
    cast.meta[CANNOT_RAISE] = True
    if not cast.to.is_type(*exp.DataType.TEXT_TYPES):
        return cast
    encoded = exp.Encode(this=cast, charset=exp.Literal.string("utf-8"))
    text = exp.Decode(this=encoded, charset=exp.Literal.string("utf-8"))  # valid UTF-8 decoded: cannot fail
    encoded.meta[CANNOT_RAISE] = text.meta[CANNOT_RAISE] = True
    return text


def typed_read(t: exp.Table, columns: Mapping[str, str]) -> exp.Subquery:
    """``t`` read as the catalog types: ``(SELECT TRY_CAST(c AS type) AS c, … FROM t) AS alias``."""
    read = (exp.alias_(public_column(c, ty), exp.to_identifier(c, quoted=True), copy=False) for c, ty in columns.items())
    select = exp.select(*read).from_(exp.Table(this=exp.to_identifier(t.name)))
    return exp.Subquery(this=select, alias=exp.TableAlias(this=exp.to_identifier(t.alias_or_name)))


def read_public_typed(tree: exp.Expression, public: Mapping[str, Mapping[str, str]]) -> None:
    """Replace, in place, every reference to a public table of ``public`` (table → column → SQL type) in ``tree``
    by its :func:`typed_read`."""
    for t in list(tree.find_all(exp.Table)):
        if t.name in public and not t.args.get("db"):
            replace_keeping_joins(t, typed_read(t, public[t.name]))


def replace_keeping_joins(old: exp.Expression, new: exp.Expression) -> None:
    """``old.replace(new)``, ``old``'s ``joins`` moved onto ``new``. sqlglot hangs a bracketed join's joins on its first
    source (``(pub JOIN p2 ON …)`` is a ``Subquery`` around the ``Table`` ``pub`` carrying the join to ``p2``), so a
    replacement that dropped them ran another query: the bracketed join lost its joins and ON conditions, or the
    private table itself (red team s74 F5). Every replacement of a source in a FROM or JOIN goes through here."""
    joins = old.args.get("joins")
    if joins:
        new.set("joins", joins)
    old.replace(new)
