"""The private rows are never the build side of a join: the generated SQL puts them first, and the planner keeps them there.

A hash join holds its build side in memory, partitioned by the key's hash; every row of one key lands in one partition,
which DuckDB's external hash join cannot split. When the private rows were the build side, the count of private rows
sharing the commonest key decided whether a charged statement was answered or failed with OutOfMemory (red team s74 F2:
a constant key ``x.id * 0 = pub.k * 0``, or a category most rows hold, ``x.c = pub.name``, failed past ~133,000 rows of
~2 KB at the readers' floor; F4: a literal column carried into the build side failed at random). DuckDB picks the build
side by its cardinality estimates (the ``build_side_probe_side`` optimiser), which the analyst steers (``WHERE id % 2 =
0`` is estimated at ~1 row). So, by construction:

* the readers run with that optimiser disabled (``warehouse.SANDBOX_CONFIG``): a join's right child is its build side;
* every join list of a generated statement over private rows (a SELECT's FROM and joins, a bracketed join) starts with
  the source that holds the private table (:func:`private_first`; a CTE over private rows, directly or through other
  CTEs and derived tables, holds them wherever it is referenced: review s24 Y2), so the private rows are the leftmost
  leaf of the join tree DuckDB's join-order optimiser builds, on the probe side of every join above them;
* no condition compares a side reading two relations (``range_lineage``, refused free: review s24 Y1): DuckDB makes
  such a side a hyperedge and joins its relations first, the private rows crossed with a public table on a build side;
* that optimiser's exact solver (DPhyp) keeps relation 0 leftmost, but past 11 relations, or 10,000 connected pairs (a
  clique of 10 relations), it falls back to a greedy solver that put the private rows on the build side in every shape
  tried; a query over private rows may therefore join at most :data:`MAX_PRIVATE_JOIN_RELATIONS` relations in all its
  scopes (:func:`check_relations`, refused free, 54001). Measured on DuckDB 2.0: random connected join graphs of the
  private rows (estimated at 1 row) and 1–13 public tables of 5–100,000 rows, keys spread, constant and few-valued,
  written private-first as comma or JOIN … ON lists: 0 of ~480 with up to 11 relations on the build side, every one of
  ~130 with 12 or 13; cliques: 0 of 90 up to 9 relations, 15 of 15 at 10.

The private side stays the probe side of LEFT joins too (the policy admits only ``private LEFT JOIN public``; with the
optimiser off, DuckDB no longer flips one into a RIGHT join that builds the private rows). A query reads one private
table, once (no private-private joins), so no join has private rows on both sides. ``tests/proxy/test_join_order.py``
checks DuckDB's EXPLAIN of the generated statements over a family of shapes.
"""

from __future__ import annotations

from sqlglot import exp

from veil.errors import QueryTooComplex

__all__ = ["MAX_PRIVATE_JOIN_RELATIONS", "check_relations", "private_first"]

#: The most relations a query over private rows may join in all its scopes (each CTE counted once per reference): a
#: clique of 9 stays within DuckDB's exact join-order solver (9,330 connected pairs of the 10,000 it enumerates), 10
#: did not (see the module docstring).
MAX_PRIVATE_JOIN_RELATIONS = 9


def check_relations(tree: exp.Expression) -> None:
    """Refuse (QueryTooComplex, 54001, free) a query over private rows that joins more relations than
    :data:`MAX_PRIVATE_JOIN_RELATIONS` (``parse.table_references``: every FROM, JOIN, derived table and subquery, each
    CTE counted once per reference). Decided from the query's text alone."""
    from veil.proxy.parse import table_references

    count = table_references(tree)
    if count > MAX_PRIVATE_JOIN_RELATIONS:
        raise QueryTooComplex(
            f"the query joins {count} tables with a private one (every FROM, JOIN, derived table and subquery, each CTE "
            f"counted once per reference), more than the limit of {MAX_PRIVATE_JOIN_RELATIONS} for a query over "
            "private rows",
            hint="Join fewer tables: join the public tables among themselves in a query of their own, publish the "
            "result as a table, and join that",
        )


def private_first(tree: exp.Expression, source: str) -> None:
    """In place: in every join list of ``tree`` (a generated statement), move the source holding the table ``source``
    (the private table's bounded copy) to the front, where every join before it is inner (comma, ``CROSS`` or ``INNER
    JOIN``). A join list whose earlier joins are not all inner (``pub LEFT JOIN p2 … JOIN t …``) becomes the private
    source joined to the bracketed earlier part (``t JOIN (pub LEFT JOIN p2 …) ON …``). The same rows are joined:
    inner joins commute, and each moved ON condition ends up at a join where every source it names is in scope."""
    names = _private_ctes(tree, source)
    holders: list[exp.Expression] = [s for s in tree.find_all(exp.Select) if s.args.get("from_")]
    holders += [n for n in tree.find_all(exp.Table, exp.Subquery) if n.args.get("joins")]
    for holder in holders:
        _reorder(holder, names)


def _private_ctes(tree: exp.Expression, source: str) -> frozenset[str]:
    """``source`` and the name of every CTE of ``tree`` whose body reads it, directly or through other CTEs or derived
    tables (review s24 Y2: a join source ``__veil_cte_0 AS x`` shows no bounded copy's name; resolved to a fixed
    point, so a CTE referencing a CTE that references the copy counts). CTE names the generated SQL writes
    (``__veil_cte_N``) shadow no table; a name reused by CTEs at two levels counts as private if either body is."""
    ctes = [(c.alias_or_name, c.this) for c in tree.find_all(exp.CTE)]
    names = {source}
    grew = True
    while grew:
        grew = False
        for name, body in ctes:
            if name not in names and any(t.name in names for t in body.find_all(exp.Table)):
                names.add(name)
                grew = True
    return frozenset(names)


def _first(holder: exp.Expression) -> exp.Expression:
    if isinstance(holder, exp.Select):
        return holder.args["from_"].this
    return holder


def _holds(node: exp.Expression, names: frozenset[str]) -> bool:
    """Whether ``node`` reads one of the tables or CTEs ``names`` (:func:`_private_ctes`), the joins hanging on it (a
    bracketed join's) aside."""
    joins = node.args.get("joins")
    if joins:
        node.set("joins", None)
    try:
        return any(t.name in names for t in node.find_all(exp.Table))
    finally:
        if joins:
            node.set("joins", joins)


def _inner(join: exp.Join) -> bool:
    kind = (join.args.get("kind") or "").upper()
    return (
        not join.args.get("side")
        and kind in ("", "INNER", "CROSS")
        and not join.args.get("using")
        and not join.args.get("method")
    )


def _reorder(holder: exp.Expression, names: frozenset[str]) -> None:
    joins: list[exp.Join] = list(holder.args.get("joins") or [])
    if not joins:
        return
    first = _first(holder)
    if _holds(first, names):
        return
    at = next((i for i, j in enumerate(joins) if _holds(j.this, names)), None)
    if at is None or not _inner(joins[at]):
        return
    private = joins[at].this
    before, after = joins[:at], joins[at + 1 :]
    condition = joins[at].args.get("on")
    bracket, key = holder.parent, holder.arg_key  # a bracketed join's first source sits in the bracket
    if isinstance(holder, exp.Select):
        holder.args["from_"].set("this", None)
    else:
        holder.set("joins", None)
    private.pop()
    if all(_inner(j) for j in before):
        # flat: private, first, the sources before it; every ON before it (and its own) on the last of them
        conditions = [c for c in (*(j.args.get("on") for j in before), condition) if c is not None]
        moved = [first, *(j.this for j in before)]
        new_joins = [exp.Join(this=s, kind="CROSS") for s in moved[:-1]]
        on = exp.and_(*conditions, copy=False) if conditions else None
        new_joins.append(exp.Join(this=moved[-1], on=on) if on is not None else exp.Join(this=moved[-1], kind="CROSS"))
    else:
        # the earlier part, bracketed as it was written, joined to the private source on the private join's ON
        first.set("joins", before)
        group = exp.Subquery(this=first)
        new_joins = [exp.Join(this=group, on=condition) if condition is not None else exp.Join(this=group, kind="CROSS")]
    new_joins += after
    if isinstance(holder, exp.Select):
        holder.args["from_"].set("this", private)
        holder.set("joins", new_joins)
    else:
        # a bracketed join: the joins hang on its first source, the bracket's child
        if bracket is not None:
            bracket.set(key, private)
        private.set("joins", new_joins)
