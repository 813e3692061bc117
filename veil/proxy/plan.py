"""Pass 2: decide which noisy statistics a query needs, their sensitivities, and the exact ε cost.

``plan(analysis, catalog, epsilon=..., contribution=..., partition_delta=...)`` returns a frozen
:class:`QueryPlan`. Decomposition (``c`` = rows one privacy unit can contribute, see docs/sql.md):

==========================  ===============================================  ==========================
aggregate                   noisy statistics                                 sensitivity each
==========================  ===============================================  ==========================
COUNT(*), COUNT(x)          count                                            c
COUNT(DISTINCT unit)        count of distinct units                          1
COUNT(DISTINCT x)           count of distinct values                         c
SUM(e)                      sum (discrete Laplace when e is integral)        c·max|e|
AVG(e)                      count(e), Σ(e − mid)                             c, c·(hi − lo)/2
VAR/STDDEV(e)               count(e), Σ(e − mid), Σ(e − mid)²                c, c·w/2, c·(w/2)²
MEDIAN/quantile/MIN/MAX(e)  exponential mechanism over a grid on [lo, hi]    c (rank utility)
private GROUP BY keys       partition selection on a noisy COUNT(*)          c (threshold τ, δ)
==========================  ===============================================  ==========================

The query's ε is split equally over the distinct statistics (identical ones are shared, e.g. the
COUNT(*) of a query also selects partitions), so the cost is exactly ε and equals what EXPLAIN shows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from sqlglot import exp
from sqlglot.optimizer.scope import Scope, build_scope

from veil.errors import QueryRejected, Unbounded, Unsupported
from veil.proxy.analyze import Analysis, aggregate_name
from veil.proxy.bounds import Interval, expression_interval, resolve_column
from veil.proxy.catalog import Catalog

__all__ = ["AggregateSpec", "GroupKey", "QueryPlan", "Statistic", "plan"]

#: Most grid points an exponential-mechanism statistic scores (int columns use every integer up to this).
MAX_GRID = 1000
#: Most combinations of public group keys a query may produce.
MAX_PUBLIC_GROUPS = 100_000


@dataclass(frozen=True)
class Statistic:
    """One noisy number per group, drawn by one mechanism with its own ε share."""

    id: int
    kind: str  # count | sum | sum_centered | sumsq_centered | grid
    label: str  # e.g. "count(*)", "sum(adult.age)"
    arg: str | None  # engine SQL of the (clamped) argument; None for COUNT(*)
    filter: str | None  # engine SQL of a FILTER condition
    distinct: bool
    mechanism: str  # discrete_laplace | laplace | exponential
    sensitivity: Fraction
    epsilon: Fraction
    hidden: bool  # not itself an output cell (AVG's count, partition selection)
    center: Fraction = Fraction(0)
    # grid statistics (exponential mechanism)
    grid_lo: Fraction = Fraction(0)
    grid_step: Fraction = Fraction(1)
    grid_n: int = 0
    target: str = ""  # quantile | min | max
    q: float = 0.5
    count_arg: str | None = None  # sum_centered: SQL whose non-NULL count centres the sum

    @property
    def scale(self) -> float:
        """Noise scale: Laplace b = Δ/ε; exponential mechanism 2Δ/ε (Gumbel/exponential noise)."""
        if self.mechanism == "exponential":
            return float(2 * self.sensitivity / self.epsilon)
        return float(self.sensitivity / self.epsilon)


@dataclass(frozen=True)
class AggregateSpec:
    """One aggregate call of the query and the statistics that answer it."""

    index: int
    name: str  # canonical aggregate name (count, sum, avg, var_samp, quantile, …)
    sql: str  # qualified SQL of the call, as matched in the outer query
    label: str  # human label
    stats: tuple[int, ...]
    interval: Interval | None
    q: float | None = None
    integral: bool = False


@dataclass(frozen=True)
class GroupKey:
    index: int
    sql: str  # qualified engine SQL
    label: str
    domain_sql: str | None  # SQL listing the public domain, or None for private keys
    domain_values: tuple[object, ...] | None = None  # the declared values, when the key is a declared column

    @property
    def public(self) -> bool:
        return self.domain_values is not None or self.domain_sql is not None


@dataclass(frozen=True)
class QueryPlan:
    analysis: Analysis
    epsilon: Fraction
    contribution: int  # c: rows a privacy unit may contribute (after bounding and public joins)
    statistics: tuple[Statistic, ...]
    aggregates: tuple[AggregateSpec, ...]
    keys: tuple[GroupKey, ...]
    public_keys: bool  # every key has a public domain (all declared keys appear)
    partition_stat: int | None  # statistic whose noisy value selects private partitions
    partition_threshold: int | None  # release a group when its noisy count ≥ this
    partition_delta: Fraction | None

    @property
    def cost(self) -> Fraction:
        return sum((s.epsilon for s in self.statistics), Fraction(0))


def _sql(e: exp.Expression) -> str:
    return e.sql(dialect="duckdb")


def _outer_aggregates(select: exp.Select) -> list[exp.Expression]:
    """Aggregate calls of the outermost SELECT (projections, HAVING, ORDER BY), in order, deduplicated."""
    found: dict[str, exp.Expression] = {}
    parts: list[exp.Expression] = list(select.expressions)
    for key in ("having", "order"):
        if select.args.get(key) is not None:
            parts.append(select.args[key])
    for part in parts:
        for node in part.walk():
            if isinstance(node, exp.Filter) and aggregate_name(node.this):
                found.setdefault(_sql(node), node)
            elif aggregate_name(node) and not isinstance(node.parent, exp.Filter):
                if isinstance(node, exp.PercentileCont | exp.PercentileDisc):
                    continue
                found.setdefault(_sql(node), node)
    return list(found.values())


def _agg_parts(node: exp.Expression) -> tuple[str, exp.Expression | None, bool, exp.Expression | None, float | None]:
    """(name, argument, distinct, filter, q) of an aggregate call."""
    filt = None
    if isinstance(node, exp.Filter):
        where = node.expression
        filt = where.this if isinstance(where, exp.Where) else where
        node = node.this
    name = aggregate_name(node)
    assert name is not None
    q: float | None = None
    distinct = False
    if isinstance(node, exp.WithinGroup):
        inner = node.this
        order = node.expression
        ordered = order.expressions if isinstance(order, exp.Order) else []
        if len(ordered) != 1:
            raise Unsupported("WITHIN GROUP needs exactly one ORDER BY expression")
        arg = ordered[0].this
        q = _const_q(inner.this)
        return name, arg, False, filt, q
    if isinstance(node, exp.Anonymous):
        args = node.expressions
        arg = args[0] if args else None
        if name == "quantile":
            if len(args) != 2:
                raise Unsupported(f"{node.name}(x, q) needs two arguments")
            q = _const_q(args[1])
        return name, arg, False, filt, q
    if isinstance(node, (exp.Quantile, exp.ApproxQuantile)):
        return name, node.this, False, filt, _const_q(node.args.get("quantile"))
    if isinstance(node, exp.Median):
        return "quantile", node.this, False, filt, 0.5
    arg = node.this
    if isinstance(arg, exp.Distinct):
        distinct = True
        if len(arg.expressions) != 1:
            raise Unsupported("COUNT(DISTINCT …) takes one expression")
        arg = arg.expressions[0]
    if isinstance(arg, exp.Star):
        if name != "count":
            raise Unsupported(f"{name.upper()}(*) is not an aggregate")
        arg = None
    if name == "count" and node.expressions:
        raise Unsupported("COUNT takes one argument")
    if name in ("min", "max") and node.expressions:
        raise Unsupported(f"{name.upper()} takes one argument")
    return name, arg, distinct, filt, q


def _const_q(node: exp.Expression | None) -> float:
    if isinstance(node, exp.Paren):
        node = node.this
    if not isinstance(node, exp.Literal) or node.is_string:
        raise Unsupported("the quantile must be a number literal between 0 and 1, e.g. 0.5")
    q = float(node.this)
    if not 0 <= q <= 1:
        raise Unsupported(f"quantile {q} is outside [0, 1]", hint="Use a fraction such as 0.9")
    return q


def _clamp_sql(arg_sql: str, iv: Interval) -> str:
    """``arg`` clamped to ``iv``; NULL stays NULL and NaN (above every number in DuckDB) becomes ``hi``.

    The in-range branch comes first: DuckDB evaluates each later WHEN only on the rows not yet
    matched, so the common case costs one range test per row instead of two comparisons.
    """
    lo, hi = _num(iv.lo), _num(iv.hi)
    a = f"({arg_sql})"
    return f"(CASE WHEN {a} BETWEEN {lo} AND {hi} THEN {a} WHEN {a} < {lo} THEN {lo} WHEN {a} > {hi} THEN {hi} ELSE NULL END)"


def _num(v: Fraction) -> str:
    return str(v.numerator) if v.denominator == 1 else repr(float(v))


def _grid(iv: Interval) -> tuple[Fraction, Fraction, int]:
    width = iv.hi - iv.lo
    if width == 0:
        return iv.lo, Fraction(1), 1
    if iv.integral and iv.lo.denominator == 1 and width <= MAX_GRID:
        return iv.lo, Fraction(1), int(width) + 1
    step = width / MAX_GRID
    return iv.lo, step, MAX_GRID + 1


class _Builder:
    def __init__(self, c: int) -> None:
        self.c = c
        self.specs: list[dict[str, object]] = []
        self.index: dict[tuple[object, ...], int] = {}

    def add(self, key: tuple[object, ...], **spec: object) -> int:
        if key in self.index:
            i = self.index[key]
            if not spec.get("hidden", False):
                self.specs[i]["hidden"] = False
            return i
        self.index[key] = len(self.specs)
        self.specs.append(dict(spec))
        return len(self.specs) - 1


def _private_unit_column(arg: exp.Expression, scope: Scope, catalog: Catalog, table: str) -> bool:
    """Is ``arg`` (through CTEs) exactly the privacy-unit column of the private table?"""
    spec = catalog.tables[table].spec
    if spec is None or spec.privacy_unit is None or not isinstance(arg, exp.Column):
        return False
    kind, inner, inner_scope, t = resolve_column(arg, scope)
    if kind == "derived":
        assert inner is not None and inner_scope is not None
        return _private_unit_column(inner, inner_scope, catalog, table)
    return t == table and arg.name == spec.privacy_unit


def _is_bounded_base_column(arg: exp.Expression, scope: Scope, catalog: Catalog, table: str) -> bool:
    """Is ``arg`` (through CTEs) exactly a bounded numeric column of the private table?"""
    if not isinstance(arg, exp.Column):
        return False
    kind, inner, inner_scope, t = resolve_column(arg, scope)
    if kind == "derived":
        assert inner is not None and inner_scope is not None
        return _is_bounded_base_column(inner, inner_scope, catalog, table)
    spec = catalog.tables[str(t)].spec
    if t != table or spec is None or arg.name not in spec.columns:
        return False
    col = spec.columns[arg.name]
    return col.type in ("int", "float") and col.bounded


def _declared_values(key: exp.Expression, scope: Scope, catalog: Catalog) -> tuple[object, ...] | None:
    """The declared values of a key that is (through CTEs) exactly a declared private column."""
    if not isinstance(key, exp.Column):
        return None
    kind, inner, inner_scope, table = resolve_column(key, scope)
    if kind == "derived":
        assert inner is not None and inner_scope is not None
        return _declared_values(inner, inner_scope, catalog)
    t = catalog.tables[str(table)]
    if t.public or t.spec is None or key.name not in t.spec.columns:
        return None
    return t.spec.columns[key.name].values


def _domain_sql(key: exp.Expression, scope: Scope, catalog: Catalog) -> str | None:
    """SQL whose rows are the public domain of a group key, or None if the key is private."""
    sources: dict[str, str] = {}

    def inline(e: exp.Expression, sc: Scope) -> exp.Expression | None:
        e = e.copy()
        for col in list(e.find_all(exp.Column)):
            kind, inner, inner_scope, table = resolve_column(col, sc)
            if kind == "derived":
                assert inner is not None and inner_scope is not None
                sub = inline(inner, inner_scope)
                if sub is None:
                    return None
                repl: exp.Expression = exp.Paren(this=sub)
            else:
                t = catalog.tables[str(table)]
                alias = f"d_{table}_{col.name}"
                if t.public:
                    sources[alias] = f'(SELECT DISTINCT "{col.name}" AS v FROM "{table}") AS {alias}'
                else:
                    cs = t.spec.columns.get(col.name) if t.spec else None
                    if cs is None or cs.values is None:
                        return None
                    values = ", ".join(f"({exp.convert(v).sql(dialect='duckdb')})" for v in cs.values)
                    sources[alias] = f"(VALUES {values}) AS {alias}(v)"
                repl = exp.column("v", table=alias)
            if col is e:
                return repl
            col.replace(repl)
        return e

    inlined = inline(key, scope)
    if inlined is None or not sources:
        return None
    return f"SELECT DISTINCT {_sql(inlined)} AS k FROM {' CROSS JOIN '.join(sources.values())}"


def plan(
    analysis: Analysis,
    catalog: Catalog,
    *,
    epsilon: Fraction,
    contribution: int,
    partition_delta: Fraction,
    clamped_source: bool = False,
) -> QueryPlan:
    """Plan the noisy statistics for a private aggregate query.

    ``clamped_source``: the private table is read from a copy whose bounded columns are already clamped
    (user-level bounding), so a bare column argument needs no clamp in the SQL.
    """
    if analysis.private_table is None:
        raise QueryRejected("a public-only query has no private plan (this is a bug, please report it)")
    if epsilon <= 0:
        raise QueryRejected(f"epsilon must be > 0, got {epsilon}")
    tree = analysis.tree
    scope = build_scope(tree)
    assert scope is not None
    table = analysis.private_table
    c = contribution
    if tree.args.get("distinct"):
        raise Unsupported("SELECT DISTINCT over a private table is not supported", hint="Use GROUP BY")

    # group keys
    group = tree.args.get("group")
    key_exprs: list[exp.Expression] = list(group.expressions) if group is not None else []
    if group is not None and (group.args.get("rollup") or group.args.get("cube") or group.args.get("grouping_sets")):
        raise Unsupported("ROLLUP, CUBE and GROUPING SETS are not supported")
    keys: list[GroupKey] = []
    for i, k in enumerate(key_exprs):
        if any(aggregate_name(n) for n in k.walk()):
            raise Unsupported("aggregates in GROUP BY are not allowed")
        declared = _declared_values(k, scope, catalog)
        domain_sql = None if declared is not None else _domain_sql(k, scope, catalog)
        keys.append(GroupKey(i, _sql(k), k.sql(dialect="duckdb"), domain_sql, declared))
    public_keys = bool(keys) and all(k.public for k in keys)

    b = _Builder(c)
    aggs: list[AggregateSpec] = []
    for idx, node in enumerate(_outer_aggregates(tree)):
        name, arg, distinct, filt, q = _agg_parts(node)
        filt_sql = _sql(filt) if filt is not None else None
        if filt is not None and any(aggregate_name(n) for n in filt.walk()):
            raise Unsupported("aggregates inside FILTER are not allowed")
        if arg is not None and any(aggregate_name(n) for n in arg.walk()):
            raise Unsupported("nested aggregates are not allowed", hint="Aggregate row-level expressions only")
        label = node.sql(dialect="duckdb")
        if name == "count":
            if distinct:
                assert arg is not None
                sens = 1 if _private_unit_column(arg, scope, catalog, table) else c
                sid = b.add(
                    ("count", _sql(arg), filt_sql, True), kind="count", label=label, arg=_sql(arg), filter=filt_sql,
                    distinct=True, mechanism="discrete_laplace", sensitivity=Fraction(sens), hidden=False,
                )  # fmt: skip
            else:
                a = _sql(arg) if arg is not None else None
                sid = b.add(
                    ("count", a, filt_sql, False), kind="count", label=label, arg=a, filter=filt_sql, distinct=False,
                    mechanism="discrete_laplace", sensitivity=Fraction(c), hidden=False,
                )  # fmt: skip
            aggs.append(AggregateSpec(idx, "count", _sql(node), label, (sid,), None, None, True))
            continue
        if arg is None:
            raise Unsupported(f"{name.upper()} needs an argument")
        if distinct:
            raise Unsupported(f"{name.upper()}(DISTINCT …) is not supported", hint="Only COUNT(DISTINCT …)")
        iv = expression_interval(arg, scope, catalog)
        if iv is None:
            raise Unbounded(f"the argument of {label} is always NULL")
        if clamped_source and _is_bounded_base_column(arg, scope, catalog, table):
            arg_sql = _sql(arg)  # already clamped in the bounded copy
        else:
            arg_sql = _clamp_sql(_sql(arg), iv)  # the argument itself is clamped: its interval holds for any data
        if name == "sum":
            mech = "discrete_laplace" if iv.integral else "laplace"
            sid = b.add(
                ("sum", arg_sql, filt_sql), kind="sum", label=f"sum({arg.sql(dialect='duckdb')})", arg=arg_sql,
                filter=filt_sql, distinct=False, mechanism=mech, sensitivity=c * iv.magnitude, hidden=False,
            )  # fmt: skip
            aggs.append(AggregateSpec(idx, "sum", _sql(node), label, (sid,), iv, None, iv.integral))
            continue
        a_label = arg.sql(dialect="duckdb")
        if name in ("avg", "var_samp", "var_pop", "stddev_samp", "stddev_pop"):
            raw_arg = _sql(arg)  # clamping never changes NULL-ness, so the count reads the argument unclamped
            n_id = b.add(
                ("count", raw_arg, filt_sql, False), kind="count", label=f"count({a_label})", arg=raw_arg,
                filter=filt_sql, distinct=False, mechanism="discrete_laplace", sensitivity=Fraction(c), hidden=True,
            )  # fmt: skip
            s_id = b.add(
                ("sum_c", arg_sql, filt_sql), kind="sum_centered", label=f"sum({a_label} - {_num(iv.mid)})",
                arg=arg_sql, filter=filt_sql, distinct=False, mechanism="laplace", sensitivity=c * iv.half_width,
                hidden=True, center=iv.mid, count_arg=raw_arg,
            )  # fmt: skip
            ids: tuple[int, ...] = (n_id, s_id)
            if name != "avg":
                q_id = b.add(
                    ("sumsq_c", arg_sql, filt_sql), kind="sumsq_centered",
                    label=f"sum(({a_label} - {_num(iv.mid)})^2)", arg=arg_sql, filter=filt_sql, distinct=False,
                    mechanism="laplace", sensitivity=c * iv.half_width**2, hidden=True, center=iv.mid,
                )  # fmt: skip
                ids = (n_id, s_id, q_id)
            aggs.append(AggregateSpec(idx, name, _sql(node), label, ids, iv, None, False))
            continue
        # exponential mechanism: quantile / median / min / max
        target = name if name in ("min", "max") else "quantile"
        qv = q if q is not None else 0.5
        lo, step, n = _grid(iv)
        sid = b.add(
            ("grid", target, qv, arg_sql, filt_sql), kind="grid", label=label, arg=arg_sql, filter=filt_sql,
            distinct=False, mechanism="exponential", sensitivity=Fraction(c), hidden=False, grid_lo=lo,
            grid_step=step, grid_n=n, target=target, q=qv,
        )  # fmt: skip
        aggs.append(
            AggregateSpec(idx, "quantile" if target == "quantile" else target, _sql(node), label, (sid,), iv, qv,
                          iv.integral and step == 1 and target != "quantile")
        )  # fmt: skip

    partition_stat = None
    threshold = None
    delta = None
    if keys and not public_keys:
        partition_stat = b.add(
            ("count", None, None, False), kind="count", label="count(*)", arg=None, filter=None, distinct=False,
            mechanism="discrete_laplace", sensitivity=Fraction(c), hidden=True,
        )  # fmt: skip
        delta = partition_delta
    if not b.specs:
        raise Unsupported(
            "the query has no aggregate over the private table",
            hint="Only aggregates are released, e.g. SELECT COUNT(*) FROM " + table,
        )
    k = len(b.specs)
    share = epsilon / k
    stats = tuple(Statistic(id=i, epsilon=share, **spec) for i, spec in enumerate(b.specs))  # type: ignore[arg-type]
    if partition_stat is not None:
        scale = stats[partition_stat].scale
        threshold = c + math.ceil(scale * math.log(c / float(partition_delta)))
    return QueryPlan(
        analysis=analysis,
        epsilon=epsilon,
        contribution=c,
        statistics=stats,
        aggregates=tuple(aggs),
        keys=tuple(keys),
        public_keys=public_keys,
        partition_stat=partition_stat,
        partition_threshold=threshold,
        partition_delta=delta,
    )
