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

from veil.engines.neutral import duckdb_text, neutralise
from veil.errors import InternalError
from veil.proxy.plan import QueryPlan, Statistic
from veil.proxy.totality import BUILT_TOTAL, CANNOT_RAISE, make_total

E = TypeVar("E", bound=exp.Expression)

__all__ = ["EngineQueries", "public_query", "rewrite"]


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


def _public_cast(column: str, sql_type: str) -> exp.TryCast:
    """A public column read as its catalog type (public data only decides whether it fails: not priced)."""
    return _cannot_raise(exp.TryCast(this=exp.column(exp.to_identifier(column, quoted=True)), to=exp.DataType.build(sql_type)))


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


def _summed_whole(stat: Statistic) -> bool:
    """A centred sum taken whole and centred afterwards, exactly (``session._raw``): an integer argument (an exact
    BIGINT sum), or a real one whose bounds are exact doubles and whose centre is no farther from 0 than its
    half-width — the sum's rounding is then that of any real SUM over the same bounds (docs/sql.md, the
    floating-point summation limit), not magnified by a centre far from 0 (red team s15, A2: ``x + 1e17``)."""
    return stat.integral or (_exact_interval(stat) and abs(stat.center) <= stat.half_width)


def _double(v: float) -> exp.Expression:
    return _cannot_raise(exp.cast(exp.Literal.number(repr(v)), exp.DataType.build("DOUBLE")))


def _at_most(value: exp.Expression, bound: float, *, below: bool) -> exp.Expression:
    """``value`` clamped to ``[-bound, bound]`` (``below=False``: to ``≤ bound``); NULL stays NULL."""
    ifs = [exp.If(this=exp.GT(this=value.copy(), expression=_double(bound)), true=_double(bound))]
    if below:
        ifs.append(exp.If(this=exp.LT(this=value.copy(), expression=_double(-bound)), true=_double(-bound)))
    return exp.Paren(this=exp.Case(ifs=ifs, default=value))


def _centred(stat: Statistic, square: bool) -> exp.Expression:
    """One row's ``arg − center`` (or its square) in DOUBLE, within ±half-width (half-width²) whatever the rounding.

    The analyst picks an argument's magnitude apart from its width (``x + 1e17``): a sum taken at the
    data's magnitude and centred afterwards is rounded to the ulp of ``n·center``, and a clamped value
    whose bounds are no doubles sits up to half an ulp of the centre off its interval. So each row is
    centred here, and clamped again after the subtraction unless the bounds, the centre and the
    half-width are exact doubles (then rounding, being monotone, keeps ``arg − center`` within
    ±half-width: the clamped argument's double lies within the exact bounds). Red team s15, A2.

    Veil builds these nodes total (DOUBLE arithmetic never raises), so :func:`make_total` leaves them
    as they are; the argument itself is made total first."""
    if stat.arg is None or stat.upper is None:
        raise InternalError(f"centred statistic {stat.label!r} without its argument or range")
    half = stat.half_width
    arg = make_total(stat.arg)
    as_double = _cannot_raise(exp.cast(exp.Paren(this=arg), exp.DataType.build("DOUBLE")))
    d: exp.Expression = exp.Paren(this=_cannot_raise(exp.Sub(this=as_double, expression=_double(float(stat.center)))))
    exact = _exact_interval(stat)
    if not exact:
        d = _at_most(d, _below(half), below=True)
    if square:
        d = _cannot_raise(exp.Mul(this=d, expression=d.copy()))
        if not (exact and Fraction(_below(half) * _below(half)) <= stat.upper):
            d = _at_most(d, _below(stat.upper), below=False)
    return _built_total(d)


def _quantities(stat: Statistic) -> list[exp.Expression]:
    arg = None if stat.arg is None else stat.arg.copy()
    if stat.kind == "count":
        if arg is None:
            return [_with_filter(exp.Count(this=exp.Star()), stat.filter)]
        inner = exp.Distinct(expressions=[arg]) if stat.distinct else arg
        return [_with_filter(exp.Count(this=inner), stat.filter)]
    if arg is None:
        raise InternalError(f"statistic {stat.label!r} has no argument")
    if stat.kind == "sum":
        return [_with_filter(exp.Sum(this=arg), stat.filter)]
    if stat.kind == "sum_centered" and _summed_whole(stat):
        # a sum and a count, centred exactly with fractions afterwards (session._raw)
        return [_with_filter(exp.Sum(this=arg), stat.filter), _with_filter(exp.Count(this=arg.copy()), stat.filter)]
    if stat.kind in ("sum_centered", "sumsq_centered"):
        return [_with_filter(exp.Sum(this=_centred(stat, stat.kind == "sumsq_centered")), stat.filter)]
    raise InternalError(f"no raw quantity for statistic kind {stat.kind!r}")


def _typed(t: exp.Table, columns: Mapping[str, str]) -> exp.Subquery:
    """A public table read as the catalog types it: ``(SELECT TRY_CAST(c AS type) AS c, … FROM t) AS alias``.

    The analysis typed each public column from the public mirror; the engine reads the stored table,
    whose type may differ (a DECIMAL(38, 37), a HUGEINT, a TIMESTAMP read as text) and would make it
    cast a private column to that type row by row — a cast that fails on some values only. A cast to
    the type a column already has costs nothing."""
    select = exp.select(
        *(
            exp.alias_(_public_cast(c, sql_type), exp.to_identifier(c, quoted=True), copy=False)
            for c, sql_type in columns.items()
        )
    ).from_(exp.Table(this=exp.to_identifier(t.name)))  # fmt: skip
    return exp.Subquery(this=select, alias=exp.TableAlias(this=exp.to_identifier(t.alias_or_name)))


def _template(p: QueryPlan, source: str, public: Mapping[str, Mapping[str, str]]) -> exp.Select:
    """The query's FROM/WHERE/GROUP BY over the bounded copy (and public tables read as their catalog
    types, see :func:`_typed`), total, with no select list yet."""
    table = p.analysis.private_table
    tree = p.analysis.tree.copy()
    for key in ("having", "order", "limit", "offset", "distinct"):
        tree.set(key, None)
    replaced = 0
    for t in list(tree.find_all(exp.Table)):
        if t.name == table:
            t.set("this", exp.to_identifier(source))
            replaced += 1
        elif t.name in public:
            t.replace(_typed(t, public[t.name]))
    if replaced != 1:
        raise InternalError(f"the private table is referenced {replaced} times in a validated query")
    tree.set("expressions", [exp.Null()])
    return tree


def _finish(tree: exp.Select, columns: list[exp.Expression]) -> exp.Select:
    """``tree`` (the caller's own copy, changed in place) selecting ``columns``, total and neutral."""
    tree.set("expressions", columns)
    out = neutralise(make_total(tree, copy=False))
    if not isinstance(out, exp.Select):
        raise InternalError("make_total changed a SELECT into something else")
    return out


def rewrite(p: QueryPlan, source: str, public: Mapping[str, Mapping[str, str]]) -> EngineQueries:
    """Engine SQL trees for ``p``, reading the private table from ``source`` (its bounded copy) and each
    public table of ``public`` (table → column → SQL type) as those types."""
    template = _template(p, source, public)
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
        for q in _quantities(stat):
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
    g = template.copy()
    arg = exp.Paren(this=stat.arg.copy())
    # over the clamped argument: |arg − lo| ≤ the bounds' width (≤ 2·10¹⁵), a non-zero step: nothing can raise
    offset = _cannot_raise(exp.Sub(this=arg, expression=_lit(stat.grid_lo)))
    scaled = _cannot_raise(exp.Div(this=exp.Paren(this=offset), expression=_lit(stat.grid_step)))
    bucket = _cannot_raise(exp.cast(_cannot_raise(exp.Round(this=scaled)), exp.DataType.build("BIGINT")))
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
