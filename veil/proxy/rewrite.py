"""Pass 5 — rewrite: the plan as engine SQL trees that compute the raw statistics.

Only SQL generated here, from the validated tree, reaches private data. The private table is
replaced by its bounded copy (:mod:`veil.proxy.bounding`: declared columns only, typed, clamped,
contribution-bounded); HAVING, ORDER BY, LIMIT and DISTINCT are removed (they run later over the
noisy answers); every expression is made total (:mod:`veil.proxy.totality`), so the generated SQL
cannot fail because of the data, and neutral (:mod:`veil.engines.neutral`: ``LOG`` base 10, day of
week 0–6, booleans cast before arithmetic, integer sums widened), so every engine gives the same
answer. The engine renders the trees in its dialect.

>>> from veil.proxy.catalog import Catalog, CatalogTable
>>> from veil.proxy.parse import parse
>>> from veil.proxy.resolve import resolve
>>> from veil.proxy.validate import validate
>>> from veil.proxy.plan import plan
>>> from fractions import Fraction
>>> cat = Catalog({"t": CatalogTable("t", {"x": "int"}, None, False)})
>>> p = plan(validate(resolve(parse("SELECT COUNT(*) FROM t WHERE 1 / x > 0"), cat), cat), cat,
...          epsilon=Fraction(1), contribution=1, partition_delta=Fraction(1, 10**7))
>>> rewrite(p, "_veil_bounded_t", public={}).main.sql(dialect="duckdb")
'SELECT COUNT(*) AS __q0 FROM _veil_bounded_t AS t WHERE TRY(1 / NULLIF(t.x, 0)) > 0'
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import TypeVar

from sqlglot import exp

from veil.engines.neutral import TIME_CAST_TARGETS, TIME_GUARD_NODES, copy_tree, data_type, duckdb_text, neutralise
from veil.errors import InternalError, QueryTooComplex
from veil.proxy import fixed_point
from veil.proxy.bounding import GridColumn
from veil.proxy.plan import QueryPlan, Statistic
from veil.proxy.public_reads import replace_keeping_joins, typed_read
from veil.proxy.totality import BUILT_TOTAL, CANNOT_RAISE, COMBINING_NODES, iso_week_value, make_total, needs_try

E = TypeVar("E", bound=exp.Expression)

__all__ = [
    "GRID_LEFT",
    "GRID_LITERAL",
    "EngineQueries",
    "argument_copies",
    "centred_in_sql",
    "check_generated_size",
    "generated_size_bound",
    "grid_operands",
    "public_query",
    "rewrite",
    "row_bound",
    "row_range",
    "sum_exponent",
    "summed_as_integers",
]


@dataclass(frozen=True)
class EngineQueries:
    main: exp.Select | None  # keys __k0.. then raw quantities __q0..; None when only grid statistics
    quantities: tuple[str, ...]  # SQL of each raw quantity, in column order (for matching)
    stat_inputs: Mapping[int, tuple[int, ...]]  # statistic id → indices into quantities
    grids: tuple[tuple[int, exp.Select], ...]  # (statistic id, histogram query: keys, __b, __n)
    n_keys: int


def _lit(v: Fraction) -> exp.Expression:
    if v.denominator == 1:
        lit = exp.Literal.number(abs(v.numerator))
    else:
        lit = exp.Literal.number(repr(abs(float(v))))
    return exp.Neg(this=lit) if v < 0 else lit


def _with_filter(agg: exp.Expression, filt: exp.Expression | None) -> exp.Expression:
    if filt is None:
        return agg
    return exp.Filter(this=agg, expression=exp.Where(this=filt.copy()))


def _cannot_raise(node: E) -> E:
    """``node``, an operation over clamped values, marked so the raising-work price skips it."""
    node.meta[CANNOT_RAISE] = True
    return node


def _built_total(node: E) -> E:
    """``node``, built total by Veil from operands already total: :func:`make_total` leaves it as it is."""
    node.meta[BUILT_TOTAL] = True
    return node


def _below(v: Fraction) -> float:
    """The largest double ≤ ``v`` (``v`` ≥ 0; the largest finite double when ``v`` is beyond it)."""
    if v > Fraction(sys.float_info.max):
        return sys.float_info.max
    f = float(v)
    return f if Fraction(f) <= v else math.nextafter(f, 0.0)


def _exact_double(v: Fraction) -> bool:
    return abs(v) <= Fraction(sys.float_info.max) and Fraction(float(v)) == v


def _exact_interval(stat: Statistic) -> bool:
    """The centre, the half-width and both bounds are exact doubles: an argument clamped to the bounds then
    stays within them as a double, and ``arg − center`` within ±half-width (rounding is monotone)."""
    c, h = stat.center, stat.half_width
    return all(_exact_double(v) for v in (c, h, c - h, c + h))


def _double(v: float) -> exp.Expression:
    return _cannot_raise(exp.cast(exp.Literal.number(repr(v)), data_type("DOUBLE")))


def _at_most(value: exp.Expression, bound: float, *, below: bool) -> exp.Expression:
    """``value`` clamped to ``[-bound, bound]`` (``below=False``: to ``≤ bound``); NULL stays NULL."""
    ifs = [exp.If(this=exp.GT(this=value.copy(), expression=_double(bound)), true=_double(bound))]
    if below:
        ifs.append(exp.If(this=exp.LT(this=value.copy(), expression=_double(-bound)), true=_double(-bound)))
    return exp.Paren(this=exp.Case(ifs=ifs, default=value))


def _centred(stat: Statistic, square: bool) -> exp.Expression:
    """One row's ``arg − center`` (or its square) in DOUBLE, within ±half-width (half-width²) whatever the rounding.

    The analyst picks an argument's magnitude apart from its width (``x + 1e17``): a fixed-point grid fine
    enough for the magnitude can be coarser than the width (red team s21, A6), and squares taken at the data's
    magnitude would cancel catastrophically. So each row is centred here, and clamped again after the
    subtraction unless the bounds, the centre and the half-width are exact doubles (then rounding, being
    monotone, keeps ``arg − center`` within ±half-width: the clamped argument's double lies within the exact
    bounds); a square is clamped unless rounding keeps it within half-width². Red team s15, A2.

    Veil builds these nodes total (DOUBLE arithmetic never raises), so :func:`make_total` leaves them
    as they are; the argument itself is made total first."""
    if stat.arg is None or stat.upper is None:
        raise InternalError(f"centred statistic {stat.label!r} without its argument or range")
    half = stat.half_width
    arg = make_total(stat.arg)
    as_double = _cannot_raise(exp.cast(exp.Paren(this=arg), data_type("DOUBLE")))
    d: exp.Expression = exp.Paren(this=_cannot_raise(exp.Sub(this=as_double, expression=_double(float(stat.center)))))
    clamp_centred, clamp_square = _centred_clamps(stat)
    if clamp_centred:
        d = _at_most(d, _below(half), below=True)
    if square:
        d = _cannot_raise(exp.Mul(this=d, expression=d.copy()))
        if clamp_square:
            d = _at_most(d, _below(stat.upper), below=False)
    return _built_total(d)


def _centred_clamps(stat: Statistic) -> tuple[bool, bool]:
    """Whether :func:`_centred` clamps the centred value, and its square (see there)."""
    exact = _exact_interval(stat)
    upper = stat.upper if stat.upper is not None else Fraction(0)
    return not exact, not (exact and Fraction(_below(stat.half_width) * _below(stat.half_width)) <= upper)


def summed_as_integers(stat: Statistic) -> bool:
    """An integer SUM, or a centred sum of integers: its argument is a BIGINT, summed exactly as it is."""
    return (stat.kind == "sum" and stat.mechanism == "discrete_laplace") or (stat.kind == "sum_centered" and stat.integral)


def centred_in_sql(stat: Statistic) -> bool:
    """A real centred sum whose range lies away from 0 (``|center| > half-width``): each row is centred in the SQL
    (:func:`_centred`) before it goes on the grid, which is then fine for the half-width, not the magnitude
    (red team s21, A6). A range that holds 0 is summed uncentred and centred exactly afterwards (cheaper)."""
    return stat.kind == "sum_centered" and not stat.integral and abs(stat.center) > stat.half_width


def row_range(stat: Statistic) -> tuple[Fraction, Fraction]:
    """The range of one row's value as it goes on the fixed-point grid: ``±magnitude`` for a SUM (its
    sensitivity needs no more), the uncentred range of a centred sum (``±half-width`` when centred in the SQL),
    ``[0, half-width²]`` for a square. Each range holds 0, so it holds a grid point whatever ``k``."""
    if stat.lower is None or stat.upper is None:
        raise InternalError(f"sum statistic {stat.label!r} without its range")
    if stat.kind == "sum":
        m = max(abs(stat.lower), abs(stat.upper))
        return -m, m
    if stat.kind == "sum_centered" and not centred_in_sql(stat):
        return stat.center + stat.lower, stat.center + stat.upper
    return stat.lower, stat.upper


def row_bound(stat: Statistic) -> Fraction:
    """The most one row adds to a sum statistic in absolute value (after centring): Δ per contributed row."""
    if stat.lower is None or stat.upper is None:
        raise InternalError(f"sum statistic {stat.label!r} without its range")
    return max(abs(stat.lower), abs(stat.upper))


def sum_exponent(stat: Statistic) -> int:
    """The fixed-point exponent ``k`` of a sum statistic's rows (:mod:`veil.proxy.fixed_point`); 0 when they are
    integers summed as they are (:func:`summed_as_integers`)."""
    if summed_as_integers(stat):
        return 0
    return fixed_point.exponent(*row_range(stat))


def _pre_scaled(stat: Statistic, grids: Mapping[str, GridColumn]) -> exp.Column | None:
    """The bounded copy's pre-scaled grid column holding ``_fixed``'s inner value for ``stat``'s argument, if any.

    Only for a bare real column read straight from the copy (``stat.copy_column``, set by the plan) and only when
    the copy's exponent is the statistic's: the copy then holds, row by row, exactly
    ``CAST(FLOOR(CAST(arg AS DOUBLE) · 2^k) AS BIGINT)`` of the same stored value (:mod:`veil.proxy.bounding`)."""
    if stat.copy_column is None or not isinstance(stat.arg, exp.Column):
        return None
    grid = grids.get(stat.copy_column)
    if grid is None or grid.exponent != sum_exponent(stat) or stat.arg.name != stat.copy_column:
        return None
    table = stat.arg.args.get("table")
    column = exp.Column(this=exp.to_identifier(grid.name, quoted=True), table=None if table is None else table.copy())
    column.type = data_type("BIGINT")  # an integer sum: every engine widens it (veil.engines.neutral)
    return column


def _fixed(value: exp.Expression, stat: Statistic, pre_scaled: exp.Column | None = None) -> exp.Expression:
    """One row's ``value`` (within :func:`row_range`) on the grid of ``2**-k``, as a BIGINT within the range.

    ``FLOOR`` keeps a value at or below an upper bound that is an exact double; the grid value is clamped to
    the range only when a bound is no double or the lower bound is off the grid (then ``FLOOR`` could step
    below it). The range holds 0, so it holds a grid point. Every node is built total: the value is a finite
    clamped double and ``|value·2**k| ≤ 2⁶²``. ``pre_scaled`` (:func:`_pre_scaled`) is the bounded copy's column
    already holding ``CAST(FLOOR(CAST(value AS DOUBLE) · 2^k) AS BIGINT)``: read instead of computing it."""
    k = sum_exponent(stat)
    lo, hi = row_range(stat)
    low, high = fixed_point.on_grid(lo, hi, k)
    if not low <= 0 <= high:
        raise InternalError(f"the fixed-point range of {stat.label!r} holds no grid point: [{lo}, {hi}] at k = {k}")
    v: exp.Expression
    if pre_scaled is not None:
        v = pre_scaled
    else:
        as_double = _cannot_raise(exp.cast(exp.Paren(this=value), data_type("DOUBLE")))
        scaled = as_double
        for factor in fixed_point.grid_factors(k):
            scaled = _cannot_raise(exp.Mul(this=scaled, expression=_double(factor)))
        v = _cannot_raise(exp.cast(_cannot_raise(exp.Floor(this=scaled)), data_type("BIGINT")))
    if _fixed_clamped(stat):
        bounds = (exp.Literal.number(abs(b)) if b >= 0 else exp.Neg(this=exp.Literal.number(-b)) for b in (low, high))
        low_lit, high_lit = bounds
        v = exp.Paren(this=exp.Case(ifs=[
            exp.If(this=exp.LT(this=v.copy(), expression=low_lit.copy()), true=low_lit),
            exp.If(this=exp.GT(this=v.copy(), expression=high_lit.copy()), true=high_lit),
        ], default=v))  # fmt: skip
    return _built_total(v)


def _fixed_clamped(stat: Statistic) -> bool:
    """Whether :func:`_fixed` clamps the grid value (a bound is no double, or the lower bound is off the grid)."""
    k = sum_exponent(stat)
    lo, hi = row_range(stat)
    low, _ = fixed_point.on_grid(lo, hi, k)
    return not (_exact_double(lo) and _exact_double(hi) and low == lo * Fraction(2) ** k)


def argument_copies(stat: Statistic) -> int:
    """How many copies of ``stat.arg`` (and of its FILTER) the generated statements hold — what :func:`_quantities`
    (or :func:`_grid`) builds, counted without building it."""
    if stat.kind == "count":
        return 1
    if stat.kind == "grid":
        return 4  # the offset, the NOT NULL test, the bucket grouped and selected
    fixed = 3 if _fixed_clamped(stat) else 1
    if stat.kind == "sum":
        return 1 if summed_as_integers(stat) else fixed
    clamp_centred, clamp_square = _centred_clamps(stat)
    centred = 3 if clamp_centred else 1
    if stat.kind == "sum_centered":
        if centred_in_sql(stat):
            return centred * fixed + 1
        return (1 if summed_as_integers(stat) else fixed) + 1
    if stat.kind == "sumsq_centered":
        return centred * 2 * (3 if clamp_square else 1) * fixed
    raise InternalError(f"no raw quantity for statistic kind {stat.kind!r}")


#: The most nodes the generated statements' copies of the statistics' arguments, and of the statement around them
#: beyond the query's own first statement, may hold (around a second of planning and generating on a loaded 2-core
#: host): VARIANCE of a 160-branch CASE generated 33,000 nodes and took 5 s to explain, free (red team s23, A2); a
#: 450-branch CASE key with 50 MEDIANs, each histogram statement a copy of it, 21 s (red team s26, A2).
MAX_GENERATED_NODES = 20_000
#: Nodes each copy adds around the argument (casts, clamp bounds, CASE branches, the grid scale, TRY).
_COPY_NODES = 40
#: Nodes a statement adds around its copy of the query (select list, histogram bucket, counts, aliases).
_STATEMENT_NODES = 40
#: Nodes whose children make_total may cast (``TRY_CAST(child AS type)``, two nodes more): operands an engine brings
#: to one type (totality.COMBINING_NODES) and values read as conditions.
_CASTING_PARENTS = (*COMBINING_NODES, exp.Where, exp.Having, exp.Join, exp.If, exp.Not, exp.And, exp.Or, exp.Is)
#: An ISO-week field's or unit's guard (totality._guard_iso_week): ``CASE WHEN v BETWEEN lo AND hi THEN v END``
#: with two date casts, around a second copy of its value.
_ISO_GUARD_NODES = 11
_TEMPLATE_LEFT_OUT = frozenset({"expressions", "having", "order", "limit", "offset", "distinct", "group"})


def _grown(node: exp.Expression, cast: bool) -> int:
    """An upper bound on the nodes make_total and neutralise turn ``node`` itself into (its children aside):
    itself, a TRY, a TRY_CAST and its type where its parent may cast it (``cast``), a divisor's ``NULLIF(·, 0)``,
    a DECIMAL cast read as a DOUBLE (or a real cast to an integer rounded), a real literal cast to DOUBLE, a
    boolean read as a number, ILIKE's two LOWERs, LOG's base."""
    if isinstance(node, (exp.Identifier, exp.DataType, exp.DataTypeParam)):
        return 1
    n = 1 + (1 if needs_try(node) else 0) + (2 if cast else 0)
    if isinstance(node, exp.Cast) and node.to.is_type(*TIME_CAST_TARGETS):
        n += TIME_GUARD_NODES  # the guard of a text value (veil.engines.neutral), around it
    elif isinstance(node, (exp.Div, exp.IntDiv, exp.Mod, exp.Cast, exp.ILike)):
        n += 2
    elif isinstance(node, exp.Literal) and not node.is_string:
        n += 2
    elif isinstance(node, (exp.Predicate, exp.Connector, exp.Not, exp.Boolean)):
        n += 2
    elif isinstance(node, exp.Log):
        n += 1
    return n


def _total_nodes(*parts: exp.Expression | None) -> int:
    """An upper bound on the nodes of ``parts`` once made total and neutral (one linear walk, no copy; a value
    under nested ISO-week guards counts once per copy the guards make of it)."""
    total = 0
    stack: list[tuple[exp.Expression, int, bool]] = [(part, 1, True) for part in parts if part is not None]
    while stack:
        node, copies, cast = stack.pop()
        total += copies * _grown(node, cast)
        doubled = iso_week_value(node)
        if doubled is not None:
            total += copies * _ISO_GUARD_NODES
        casts = isinstance(node, _CASTING_PARENTS)
        for key, value in node.args.items():
            for child in value if isinstance(value, list) else [value]:
                if isinstance(child, exp.Expression):
                    stack.append((child, copies * 2 if key == doubled else copies, casts))
    return total


def _statement_nodes(p: QueryPlan, public: Mapping[str, Mapping[str, str]]) -> int:
    """An upper bound on the nodes of one statement's copy of the query around its aggregates (:func:`_template`
    made total: FROM with its joins, derived tables and CTEs, WHERE, each public table read as its catalog types)
    and of its group keys: the main statement keeps the GROUP BY and selects the keys; a histogram copies the
    GROUP BY, then groups by the keys and selects them (:func:`_grid`)."""
    tree = p.analysis.tree
    parts = [v for k, v in tree.args.items() if k not in _TEMPLATE_LEFT_OUT]
    nodes = _total_nodes(*(c for part in parts for c in (part if isinstance(part, list) else [part])))
    for t in tree.find_all(exp.Table):  # typed_read: a subquery of one TRY_CAST per column
        columns = public.get(t.name)
        if columns is not None:
            nodes += 8 + 7 * len(columns)
    group = tree.args.get("group")
    grown_group = _total_nodes(group)
    keys = _total_nodes(*(k.expr for k in p.keys))
    copied_group = sum(1 for _ in group.walk()) if group is not None else 0
    return nodes + max(grown_group + keys, copied_group + 2 * keys) + _STATEMENT_NODES


def _statements(p: QueryPlan) -> int:
    """The statements :func:`rewrite` builds for ``p``: one per quantile histogram, and the main one if any
    statistic is not a histogram."""
    grids = sum(1 for st in p.statistics if st.kind == "grid")
    return grids + (1 if grids < len(p.statistics) else 0)


def _argument_nodes(p: QueryPlan) -> int:
    work = 0
    for st in p.statistics:
        parts = [part for part in (st.arg, st.filter) if part is not None]
        size = sum(1 for part in parts for _ in part.walk())
        guards = sum(1 for part in parts for c in part.find_all(exp.Cast) if c.to.is_type(*TIME_CAST_TARGETS))
        grown = size * 5 // 4 + TIME_GUARD_NODES * guards  # neutralise and make_total wrap some nodes
        work += (grown + _COPY_NODES) * argument_copies(st)
    return work


def generated_size_bound(p: QueryPlan, public: Mapping[str, Mapping[str, str]]) -> int:
    """An upper bound on the nodes the generated statements hold for ``p``: its statistics' arguments and filters
    (:func:`argument_copies` each), and each statement's copy of the query around them (``public``: table → column
    → SQL type, as :func:`rewrite` reads them)."""
    return _argument_nodes(p) + _statements(p) * _statement_nodes(p, public)


def check_generated_size(p: QueryPlan, public: Mapping[str, Mapping[str, str]]) -> None:
    """Before anything is generated: refuse (QueryTooComplex, free) a plan whose statistics' arguments, times the
    copies the generated statements make of them (:func:`argument_copies`), and whose copies of the query around
    them in every statement but the first (one per quantile histogram), hold more than :data:`MAX_GENERATED_NODES`
    nodes. The first statement's copy is the query itself, which the parse limits bound."""
    further = max(0, _statements(p) - 1)
    arguments = _argument_nodes(p)
    copies = further * _statement_nodes(p, public) if further else 0
    work = arguments + copies
    if work > MAX_GENERATED_NODES:
        around = f"; {copies:,} of the query around them, copied into {further} more statements (one per quantile)"
        raise QueryTooComplex(
            f"the query is too large to plan: the generated statements would hold {work:,} nodes of copies "
            f"({arguments:,} of the aggregates' arguments, clamped, centred and once per statistic"
            f"{around if further else ''}), more than the limit of {MAX_GENERATED_NODES:,}",
            hint="Simplify the arguments (e.g. fewer CASE branches; several simpler aggregates instead of one), ask "
            "fewer quantiles per query, or shorten the WHERE, GROUP BY keys and joins around them",
        )


def _quantities(stat: Statistic, grids: Mapping[str, GridColumn]) -> list[exp.Expression]:
    arg = None if stat.arg is None else copy_tree(stat.arg)
    if stat.kind == "count":
        if arg is None:
            return [_with_filter(exp.Count(this=exp.Star()), stat.filter)]
        inner = exp.Distinct(expressions=[arg]) if stat.distinct else arg
        return [_with_filter(exp.Count(this=inner), stat.filter)]
    if arg is None:
        raise InternalError(f"statistic {stat.label!r} has no argument")
    # real values are summed exactly in fixed point (fixed_point); integers as they are
    if stat.kind == "sum":
        summed = arg if summed_as_integers(stat) else _fixed(make_total(arg), stat, _pre_scaled(stat, grids))
        return [_with_filter(exp.Sum(this=summed), stat.filter)]
    if stat.kind == "sum_centered" and centred_in_sql(stat):
        return [_with_filter(exp.Sum(this=_fixed(_centred(stat, False), stat)), stat.filter)]
    if stat.kind == "sum_centered":
        # the uncentred sum and the count, centred exactly afterwards (session._raw)
        summed = arg if summed_as_integers(stat) else _fixed(make_total(arg), stat, _pre_scaled(stat, grids))
        # counted as the plan counts it: COUNT(*) where the query's WHERE keeps the argument non-NULL (the same number)
        counted = exp.Star() if stat.arg_not_null else arg.copy()
        return [_with_filter(exp.Sum(this=summed), stat.filter), _with_filter(exp.Count(this=counted), stat.filter)]
    if stat.kind == "sumsq_centered":
        return [_with_filter(exp.Sum(this=_fixed(_centred(stat, True), stat)), stat.filter)]
    raise InternalError(f"no raw quantity for statistic kind {stat.kind!r}")


def _template(p: QueryPlan, source: str, public: Mapping[str, Mapping[str, str]], grids: Mapping[str, GridColumn]) -> exp.Select:
    """The query's FROM/WHERE/GROUP BY over the bounded copy (and public tables read as their catalog
    types, see :func:`_typed`), total, with no select list yet; its WHERE compares on the copy's pre-scaled grid
    columns where that reads the same (:func:`_compare_on_grid`)."""
    table = p.analysis.private_table
    tree = copy_tree(p.analysis.tree)
    for key in ("having", "order", "limit", "offset", "distinct"):
        tree.set(key, None)
    replaced = 0
    alias = None
    for t in list(tree.find_all(exp.Table)):
        if t.name == table:
            alias = t.alias_or_name
            t.set("this", exp.to_identifier(source))
            replaced += 1
        elif t.name in public:
            replace_keeping_joins(t, typed_read(t, public[t.name]))
    if replaced != 1 or alias is None:
        raise InternalError(f"the private table is referenced {replaced} times in a validated query")
    where = tree.args.get("where")
    simple = not tree.args.get("joins") and not any(isinstance(n, _NESTED) for n in tree.walk() if n is not tree)
    if COMPARE_ON_GRID and grids and simple and isinstance(where, exp.Where):
        _compare_on_grid(where.this, alias, grids)
    tree.set("expressions", [exp.Null()])
    return tree


#: On: a WHERE ``c >= v`` / ``c < v`` of a bounded real column with a number on its grid compares the copy's
#: pre-scaled grid column (:func:`_compare_on_grid`). Whether a literal is on the grid changes the statements, so the
#: plan cache keys each lifted literal by it and checks it on a hit (:mod:`veil.proxy.plan_cache`; session 19 found
#: a hit filling a raw comparison's statements with a literal on the grid, where planning afresh compared the grid).
COMPARE_ON_GRID = True

#: Meta key of a literal :func:`_compare_on_grid` put on a grid (its exponent ``k``): the plan cache fills it with
#: ``fixed_point.literal_on_grid`` of the query's own literal (:mod:`veil.proxy.plan_cache`).
GRID_LITERAL = "veil_grid_exponent"
#: Meta key of a literal :func:`_compare_on_grid` could have put on a grid of ``2**-k`` but left as it is (its
#: value is off that grid): a plan-cache entry holding it serves no literal that is on the grid (they are compared
#: on the grid column instead).
GRID_LEFT = "veil_grid_left"
#: Nodes that make a query more than one plain SELECT: its WHERE's columns might not be the copy's.
_NESTED = (exp.Subquery, exp.Select, exp.Union, exp.Intersect, exp.Except, exp.Join, exp.Lateral, exp.Values, exp.CTE)
#: ``column OP literal`` that reads the same on the column's grid, each with the OP of ``literal OP column`` it equals.
_ON_GRID: dict[type[exp.Expression], type[exp.Expression]] = {exp.GTE: exp.LTE, exp.LT: exp.GT}


def grid_operands(node: exp.Expression) -> tuple[exp.Expression, exp.Expression, type[exp.Expression]] | None:
    """``(column side, literal side, OP)`` of a comparison that reads the same on a grid when its literal is on it:
    ``x >= y`` and ``x < y`` as they stand, ``y <= x`` and ``y > x`` flipped (the OP is then ``>=`` or ``<``); None
    for any other node. (The plan cache classifies its lifted literals with the same test.)"""
    op = type(node)
    if op in _ON_GRID:
        return node.this, node.expression, op
    for o, flipped in _ON_GRID.items():
        if op is flipped:
            return node.expression, node.this, o
    return None


def _compare_on_grid(node: exp.Expression, alias: str, grids: Mapping[str, GridColumn]) -> None:
    """In place, through ``AND``/``OR``/``NOT``/parentheses: each ``c >= v`` or ``c < v`` (also ``v <= c``, ``v > c``)
    of a bare bounded real column ``c`` of the copy (qualified ``alias``) with a plain number ``v`` (or ``-v``) becomes
    ``g >= N`` or ``g < N`` on its pre-scaled grid column ``g = FLOOR(c · 2**k)`` (:mod:`veil.proxy.bounding`), where
    ``N = v · 2**k`` is an integer (:func:`veil.proxy.fixed_point.literal_on_grid`; else the comparison stays, and
    its literal is marked :data:`GRID_LEFT`): the same truth value on every row, NULL included, so the statement reads
    one column where it read two (the column for the WHERE and its grid for the sum). ``c`` is the copy's clamped
    value and ``g`` is computed from it, so a raw value beyond the bounds compares the same way on both. From the
    query's text and the policy's bounds alone."""
    if isinstance(node, exp.And | exp.Or):
        _compare_on_grid(node.this, alias, grids)
        _compare_on_grid(node.expression, alias, grids)
        return
    if isinstance(node, exp.Not | exp.Paren):
        _compare_on_grid(node.this, alias, grids)
        return
    operands = grid_operands(node)
    if operands is None:
        return
    column, literal, op = operands
    negative = isinstance(literal, exp.Neg)
    if negative:
        literal = literal.this  # -v: v on the grid, negated (the plan cache lifts no negated literal: -v stays in the shape)
    if not isinstance(column, exp.Column) or column.table != alias or not isinstance(literal, exp.Literal):
        return
    grid = grids.get(column.name)
    if grid is None or literal.is_string:
        return
    n = fixed_point.literal_on_grid(str(literal.this), grid.exponent)
    if n is None:
        literal.meta[GRID_LEFT] = grid.exponent
        return
    table = column.args.get("table")
    g = exp.Column(this=exp.to_identifier(grid.name, quoted=True), table=None if table is None else table.copy())
    g.type = data_type("BIGINT")
    value = exp.Literal.number(n)
    value.meta.update(literal.meta)  # the plan cache's mark of a lifted literal (veil.proxy.plan_cache.PARAM)
    value.meta[GRID_LITERAL] = grid.exponent
    node.replace(op(this=g, expression=exp.Neg(this=value) if negative else value))


def _finish(tree: exp.Select, columns: list[exp.Expression]) -> exp.Select:
    """``tree`` (the caller's own copy, changed in place) selecting ``columns``, total and neutral."""
    tree.set("expressions", columns)
    out = neutralise(make_total(tree, copy=False))
    if not isinstance(out, exp.Select):
        raise InternalError("make_total changed a SELECT into something else")
    return out


def rewrite(
    p: QueryPlan,
    source: str,
    public: Mapping[str, Mapping[str, str]],
    grid_columns: Mapping[str, GridColumn] | None = None,
) -> EngineQueries:
    """Engine SQL trees for ``p``, reading the private table from ``source`` (its bounded copy, whose pre-scaled
    grid columns are ``grid_columns``: :func:`veil.proxy.bounding.grid_columns`) and each public table of ``public``
    (table → column → SQL type) as those types."""
    template = _template(p, source, public, grid_columns or {})
    quantities: list[exp.Expression] = []
    texts: list[str] = []
    stat_inputs: dict[int, tuple[int, ...]] = {}
    grids: list[tuple[int, exp.Select]] = []
    keys = [exp.alias_(k.expr.copy(), f"__k{i}", copy=False) for i, k in enumerate(p.keys)]
    for stat in p.statistics:
        if stat.kind == "grid":
            grids.append((stat.id, _grid(p, template, stat)))
            continue
        idx = []
        for q in _quantities(stat, grid_columns or {}):
            text = duckdb_text(q)
            if text not in texts:
                texts.append(text)
                quantities.append(q)
            idx.append(texts.index(text))
        stat_inputs[stat.id] = tuple(idx)
    main = None
    if quantities:
        # the template's last use (each grid took its own copy): no copy; each quantity is a fresh tree
        main = _finish(template, [*keys, *(exp.alias_(q, f"__q{i}", copy=False) for i, q in enumerate(quantities))])
    return EngineQueries(main, tuple(texts), stat_inputs, tuple(grids), len(p.keys))


def _grid(p: QueryPlan, template: exp.Select, stat: Statistic) -> exp.Select:
    if stat.arg is None:
        raise InternalError(f"grid statistic {stat.label!r} has no argument")
    g = copy_tree(template)
    arg = exp.Paren(this=stat.arg.copy())
    # over the clamped argument: |arg − lo| ≤ the bounds' width (≤ 2·10¹⁵), a non-zero step: nothing can raise
    offset = _cannot_raise(exp.Sub(this=arg, expression=_lit(stat.grid_lo)))
    scaled = _cannot_raise(exp.Div(this=exp.Paren(this=offset), expression=_lit(stat.grid_step)))
    bucket = _cannot_raise(exp.cast(_cannot_raise(exp.Round(this=scaled)), data_type("BIGINT")))
    cond: exp.Expression = exp.Not(this=exp.Is(this=arg.copy(), expression=exp.Null()))
    if stat.filter is not None:
        cond = exp.and_(cond, exp.Paren(this=stat.filter.copy()))
    where = g.args.get("where")
    g.set("where", exp.Where(this=exp.and_(exp.Paren(this=where.this), cond) if where is not None else cond))
    keys = [k.expr.copy() for k in p.keys]
    g.set("group", exp.Group(expressions=[*keys, bucket.copy()]))
    cols = [*(exp.alias_(k.copy(), f"__k{i}") for i, k in enumerate(keys)), exp.alias_(bucket, "__b"),
            exp.alias_(exp.Count(this=exp.Star()), "__n")]  # fmt: skip
    return _finish(g, cols)


def public_query(tree: exp.Select) -> exp.Select:
    """A public-only query as it will run on the public connection: regenerated from the tree, total."""
    out = neutralise(make_total(tree))
    if not isinstance(out, exp.Select):
        raise InternalError("make_total changed a SELECT into something else")
    return out
