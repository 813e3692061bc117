"""No range join over private rows, decided over the whole query (red team s74 F1).

``validate._check_join_keys`` reads one scope at a time: a derived table or CTE that cross-joins the private table with
a public one (comma, ``CROSS JOIN``, ``ON TRUE``, ``LEFT JOIN … ON TRUE``, an ON that filters one side only) passes it,
and an outer SELECT comparing the two sides' columns (``… FROM (SELECT t.id, pub.k FROM t, pub) s WHERE s.id < s.k``)
passes it too (one source). DuckDB pushes the outer filter down into the cross product and runs an IEJoin or a
piecewise merge join, which hold the private rows in memory without spilling: whether the charged statement failed
was decided by how many rows passed (answered at 122,552 rows, OutOfMemory after the charge at 122,553).

So the rule is checked on the join graph DuckDB plans, not on the text's scopes: every base relation a scope over
private rows reads (each reference path its own relation: a CTE named twice is two), its derived tables and CTEs over
private rows inlined through their columns' lineage (each output column → the relations its expression reads), and a
derived table or CTE over public tables alone one relation (DuckDB evaluates it first into a table of its own,
``multiplicity.Materialised``). Equalities anywhere (each side reading exactly one relation, not the other's; in a
WHERE or an inner join's ON, or a LEFT JOIN's own ON) connect relations, as DuckDB pushes them down into hash-join
keys; then every comparison (``<``, ``<=``, ``>``, ``>=``, ``BETWEEN``, inside NOT, CASE, a SELECT list, HAVING or an
ON, at any scope) whose two sides each read relations and together read relations no equalities connect is refused,
free (0A000), decided by the query's text alone. A WHERE or ON comparison between sides that read relations, one of
which reads two or more, is refused free too (review s24 Y1, :func:`_check_single_sides`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from sqlglot import exp
from sqlglot.optimizer.scope import Scope, build_scope

from veil.errors import Unsupported
from veil.proxy.bounds import own_joins
from veil.proxy.catalog import Catalog
from veil.proxy.multiplicity import conjuncts

__all__ = ["check_range_lineage"]

_Rel = tuple[str, ...]
_COMPARISONS = (exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Between)
#: a scope's clauses whose expressions are checked for comparisons (its FROM and joins hold its sources)
_CLAUSES = ("expressions", "where", "having", "qualify", "group", "order")


class _Graph:
    def __init__(self) -> None:
        self.parent: dict[_Rel, _Rel] = {}
        self.comparisons: list[tuple[frozenset[_Rel], frozenset[_Rel]]] = []

    def find(self, r: _Rel) -> _Rel:
        self.parent.setdefault(r, r)
        while self.parent[r] != r:
            self.parent[r] = self.parent[self.parent[r]]
            r = self.parent[r]
        return r

    def union(self, rels: Iterable[_Rel]) -> None:
        rels = list(rels)
        for r in rels[1:]:
            self.parent[self.find(r)] = self.find(rels[0])


def _reads_private(scope: Scope, catalog: Catalog) -> bool:
    for _node, source in scope.selected_sources.values():
        if isinstance(source, exp.Table):
            t = catalog.tables.get(source.name)
            if t is not None and not t.public:
                return True
        elif isinstance(source, Scope) and _reads_private(source, catalog):
            return True
    return any(_reads_private(u, catalog) for u in scope.set_operation_scopes)


def _lineage(scope: Scope, path: _Rel, catalog: Catalog, graph: _Graph) -> dict[str, frozenset[_Rel]]:
    """Each output column of ``scope`` (reached by ``path``) → the relations its expression reads; records the
    scope's equalities and comparisons in ``graph``. ``""`` maps to every relation the scope reads."""
    if scope.set_operation_scopes:
        every: frozenset[_Rel] = frozenset()
        for i, branch in enumerate(scope.set_operation_scopes):
            every |= _lineage(branch, (*path, f"#{i}"), catalog, graph)[""]
        return {"": every}
    sources: dict[str, dict[str, frozenset[_Rel]]] = {}
    for name, (_node, source) in scope.selected_sources.items():
        if isinstance(source, Scope) and _reads_private(source, catalog):
            sources[name] = _lineage(source, (*path, name), catalog, graph)
        else:  # a base table, or a derived table or CTE over public tables alone (evaluated first, on its own)
            sources[name] = {"": frozenset({(*path, name)})}
    sel = scope.expression
    if not isinstance(sel, exp.Select):
        return {"": frozenset().union(*(m[""] for m in sources.values()))}
    own = {id(c) for c in scope.columns}

    def rels(node: exp.Expression) -> frozenset[_Rel]:
        out: set[_Rel] = set()
        for c in node.find_all(exp.Column):
            if id(c) in own and c.table in sources:
                m = sources[c.table]
                out |= m.get(c.name, m[""])
        return frozenset(out)

    _check_single_sides(sel, rels)
    # equalities: a WHERE's or an inner join's (not reading a LEFT-joined source), and a LEFT JOIN's own ON
    left_joined: set[str] = set()
    conditions: list[exp.Expression] = []
    for join in own_joins(sel):
        if str(join.args.get("side") or "").upper() in ("LEFT", "RIGHT", "FULL"):
            left_joined |= {n for n, (node, _s) in scope.selected_sources.items() if node is join.this or join.this in _up(node)}
            _connect(conjuncts(join.args.get("on")), rels, frozenset(), graph)
        else:
            conditions += conjuncts(join.args.get("on"))
    where = sel.args.get("where")
    conditions += conjuncts(where.this if where is not None else None)
    left_rels = frozenset().union(*(sources[n][""] for n in left_joined if n in sources))
    _connect(conditions, rels, left_rels, graph)
    # comparisons anywhere in the scope's own clauses and join conditions
    places = [sel.args.get(k) for k in _CLAUSES] + [j.args.get("on") for j in own_joins(sel)]
    for place in places:
        for node in place if isinstance(place, list) else [place]:
            if not isinstance(node, exp.Expression):
                continue
            for cmp in node.find_all(*_COMPARISONS):
                if isinstance(cmp, exp.Between):
                    a, b = rels(cmp.this), rels(cmp.args["low"]) | rels(cmp.args["high"])
                else:
                    a, b = rels(cmp.this), rels(cmp.expression)
                if a and b:
                    graph.comparisons.append((a, b))
    every = frozenset().union(*(m[""] for m in sources.values()))
    out = {"": every}
    for e in sel.expressions:
        if e.alias_or_name and not isinstance(e, exp.Star) and not (isinstance(e, exp.Column) and e.is_star):
            out[e.alias_or_name] = rels(e)
    return out


def _operands(pred: exp.Expression) -> list[exp.Expression]:
    out: list[exp.Expression] = []
    for value in pred.args.values():
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, exp.Expression):
                out.append(v)
    return out


def _check_single_sides(sel: exp.Select, rels: Callable[[exp.Expression], frozenset[_Rel]]) -> None:
    """Refuse (Unsupported, 0A000, free) a WHERE or join condition of a scope over private rows holding a comparison
    (any predicate, at any depth) between sides that read relations, one of which reads more than one (review s24
    Y1): DuckDB's join-order optimiser makes such a side a hyperedge of its join graph, joins its relations first (the
    private rows crossed with a public table) and builds a hash join or a cross product on that product, whatever
    order the text lists. A predicate with one side reading relations (``t.s || pub.n LIKE 'a%'``, ``t.id - pub.k >=
    0``) is a filter, no edge of that graph: admitted."""
    places = [sel.args.get("where")] + [j.args.get("on") for j in own_joins(sel)]
    for place in places:
        if place is None:
            continue
        for pred in place.find_all(exp.Predicate):
            sides = [(side, rels(side)) for side in _operands(pred)]
            if sum(1 for _s, r in sides if r) < 2:
                continue  # a filter (the other sides read no relation): no edge of DuckDB's join graph
            for side, read in sides:
                if len(read) > 1:
                    raise Unsupported(
                        "a condition over private data compares an expression that reads two tables at once "
                        f"({side.sql()}): the engine would join those tables first and hold the product in memory",
                        hint="Compare columns of one table with columns of another (t.k = pub.k, t.k + 1 = pub.k); "
                        "combine two tables' columns in a derived table over the public tables alone, or in the SELECT "
                        "list",
                    )


def _up(node: exp.Expression) -> list[exp.Expression]:
    out = []
    while node.parent is not None:
        node = node.parent
        out.append(node)
    return out


def _connect(
    conditions: list[exp.Expression], rels: Callable[[exp.Expression], frozenset[_Rel]], outer: frozenset[_Rel], graph: _Graph
) -> None:
    """Each equality of ``conditions`` whose sides read disjoint relations, none of ``outer`` (LEFT-joined ones, for a
    WHERE or an inner join's ON), connects them: DuckDB pushes it down as a hash-join key."""
    for cond in conditions:
        if isinstance(cond, exp.EQ):
            a, b = rels(cond.this), rels(cond.expression)
            # one relation a side (review s24 Y1: a side reading two, refused anyway, is no hash-join key between them)
            if len(a) == 1 and len(b) == 1 and a != b and not (a | b) & outer:
                graph.union(a | b)


def check_range_lineage(tree: exp.Expression, catalog: Catalog) -> None:
    """Refuse (Unsupported, 0A000, free) a query over private rows with a comparison whose sides read relations no
    equalities connect, over the whole query (see the module docstring)."""
    root = build_scope(tree)
    if root is None or not _reads_private(root, catalog):
        return
    graph = _Graph()
    _lineage(root, (), catalog, graph)
    for a, b in graph.comparisons:
        if len({graph.find(r) for r in a | b}) > 1:
            raise Unsupported(
                "a join over private data on an inequality alone (a range join) is not supported, also when the "
                "inequality compares the columns of a derived table or CTE that joins its sources with no equality: "
                "the engine holds every private row in memory at once for it",
                hint="Join on an equality key (ON t.k = pub.k; an inequality may stand beside it), or band a private "
                "number with CASE WHEN x < 10 THEN 'low' … END instead of joining a table of ranges",
            )
