"""Pass 3 — validate: the resolved query has a shape Veil can answer, and types that cannot fail on data.

Checks, each a refusal before anything runs or is charged:

* shape: subqueries only in FROM (derived tables and CTEs); a private table read at most once (each
  reference to a CTE counts); every SELECT below the outermost one that reads private data is
  row-level (no aggregates, GROUP BY, HAVING, DISTINCT, LIMIT, OFFSET); no LEFT JOIN onto private data;
* types: DuckDB casts between type families at run time, row by row, so ``sex = 1`` or
  ``age = '3x'`` fail only when a row reaches the comparison — a one-bit oracle on the data. Every
  comparison, IN, BETWEEN, CASE/COALESCE/GREATEST/LEAST/NULLIF and arithmetic operand must be in one
  family (number, text, boolean, date/time; booleans compare with numbers); a text literal in a
  number/date/boolean context is converted here, statically, or refused.

The result is an :class:`Analysis` (the validated, qualified tree) for the plan pass, or for a
public-only query the tree to run as written (regenerated from this tree, on the public connection).

>>> from veil.proxy.catalog import Catalog, CatalogTable
>>> from veil.proxy.parse import parse
>>> from veil.proxy.resolve import resolve
>>> cat = Catalog({"t": CatalogTable("t", {"age": "int"}, None, False)})
>>> validate(resolve(parse("SELECT COUNT(*) FROM t WHERE age > '30'"), cat), cat).tree.sql()
'SELECT COUNT(*) AS _col_0 FROM t AS t WHERE t.age > 30'
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterator
from dataclasses import dataclass

from sqlglot import exp
from sqlglot.optimizer.annotate_types import annotate_types
from sqlglot.optimizer.scope import Scope, build_scope, traverse_scope

from veil.engines.neutral import data_type
from veil.errors import (
    InternalError,
    InvalidDatetimeFormat,
    QueryTooComplex,
    TypeMismatch,
    UndefinedOperator,
    Unsupported,
)
from veil.proxy.bounds import in_inner_scope, own_joins
from veil.proxy.catalog import Catalog
from veil.proxy.expansion import Expansion, measure
from veil.proxy.parse import AGGREGATE_NODES, ANONYMOUS_FUNCTIONS, DIALECT
from veil.proxy.resolve import Resolved
from veil.proxy.totality import COMBINING_NODES, iso_week_value, operand_groups

__all__ = ["Analysis", "aggregate_name", "is_aggregate", "validate"]


@dataclass(frozen=True)
class Analysis:
    """A validated, qualified SELECT."""

    sql: str  # the analyst's text
    tree: exp.Select  # resolved, qualified, literals converted to the types they are compared with
    original: exp.Select  # parsed, unqualified (for output column names)
    private_table: str | None  # the one private table read, or None for a public-only query
    tables: tuple[str, ...]  # every catalog table read
    text_bytes: int = 0  # text-literal bytes one row can carry, CTE references expanded (veil.proxy.expansion)
    expanded: int = 0  # the query's size with every CTE / derived-table reference expanded (nodes per row)


_ANON_AGGREGATES = {
    "var": "var_samp",
    "var_samp": "var_samp",
    "quantile_cont": "quantile",
    "quantile_disc": "quantile",
    "std": "stddev_samp",
}
_AGG_NAMES: dict[type[exp.Expression], str] = {
    exp.Count: "count", exp.Sum: "sum", exp.Avg: "avg", exp.Min: "min", exp.Max: "max", exp.Median: "median",
    exp.Variance: "var_samp", exp.VariancePop: "var_pop", exp.Stddev: "stddev_samp", exp.StddevSamp: "stddev_samp",
    exp.StddevPop: "stddev_pop", exp.Quantile: "quantile", exp.ApproxQuantile: "quantile", exp.WithinGroup: "quantile",
}  # fmt: skip


#: How many arguments each function sqlglot leaves unparsed (``exp.Anonymous``) takes: the rest of the query path
#: reads only the ones it expects, so an extra one was dropped silently (red team s49: ``var(age, salary)`` was
#: answered as ``var(age)``; PostgreSQL refuses it, 42883).
_ANON_ARITY = {"var": 1, "var_samp": 1, "std": 1, "quantile_cont": 2, "quantile_disc": 2}


def _check_arity(node: exp.Anonymous) -> None:
    name = str(node.name).lower()
    want, got = _ANON_ARITY.get(name), len(node.expressions)
    if want is not None and got != want:
        raise UndefinedOperator(
            f"function {name}() takes {want} argument{'s' if want > 1 else ''}, got {got}",
            hint=f"Pass one column or expression (e.g. {name}(age))"
            if want == 1
            else f"Pass the column and the fraction (e.g. {name}(age, 0.5))",
        )


def _check_percentile_arity(node: exp.PercentileCont | exp.PercentileDisc) -> None:
    """``PERCENTILE_CONT`` / ``PERCENTILE_DISC`` take one fraction (the column comes in ``WITHIN GROUP``): sqlglot
    keeps a second argument aside, which the rest of the query path never read (``PERCENTILE_CONT(0.5, 0.7)`` was
    answered as the median; PostgreSQL refuses it, 42883)."""
    if node.args.get("expression") is None:
        return
    name = "percentile_cont" if isinstance(node, exp.PercentileCont) else "percentile_disc"
    raise UndefinedOperator(
        f"function {name}() takes 1 argument (the fraction), got 2",
        hint=f"Pass one fraction and the column in WITHIN GROUP (ORDER BY …), e.g. {name}(0.5) WITHIN GROUP "
        "(ORDER BY age); for another fraction, ask for a second percentile",
    )


def aggregate_name(node: exp.Expression) -> str | None:
    """Canonical aggregate name of ``node`` (None if it is not an aggregate call)."""
    if isinstance(node, exp.Anonymous):
        return _ANON_AGGREGATES.get(str(node.name).lower())
    return _AGG_NAMES.get(type(node))


def is_aggregate(node: exp.Expression) -> bool:
    return aggregate_name(node) is not None


# -- shape ---------------------------------------------------------------------------------------


def _reads_private(scope: Scope, catalog: Catalog) -> bool:
    return any(_source_reads_private(source, catalog) for _node, source in scope.selected_sources.values())


def _source_reads_private(source: exp.Table | Scope, catalog: Catalog) -> bool:
    """A table of the policy that is not public, or a CTE/derived table reading one."""
    if isinstance(source, exp.Table):
        t = catalog.tables.get(source.name)
        return t is not None and not t.public
    return isinstance(source, Scope) and _reads_private(source, catalog)


def _side_reads_private(side: exp.Expression, scope: Scope, catalog: Catalog) -> bool:
    """Whether any source of ``scope`` lying inside ``side`` (the right side of a join, however bracketed or
    named: ``t``, ``(t)``, ``((t)) AS z``, ``(t JOIN pub …)``, an unnamed derived table; red team s29 A1) reads a
    private table. Found by where each source's node is in the tree, not by the join's name for it."""
    return any(
        _source_reads_private(source, catalog)
        for node, source in scope.selected_sources.values()
        if node is side or any(parent is side for parent in _ancestors(node))
    )


def _ancestors(node: exp.Expression) -> Iterator[exp.Expression]:
    parent = node.parent
    while parent is not None:
        yield parent
        parent = parent.parent


def _check_output_names(sel: exp.Select) -> None:
    """A CTE or derived table names each output column once (case-insensitively): DuckDB resolves a
    reference to a repeated name to the first such column, sqlglot's qualification, typing and Veil's
    checks to the last — a reference would mean one thing to the checks and another to the engine."""
    seen: set[str] = set()
    for projection in sel.expressions:
        name = projection.alias_or_name.lower()
        if name in seen:
            raise Unsupported(
                f"the column name {projection.alias_or_name!r} appears twice in a subquery or CTE",
                hint="Give each column of a subquery or CTE its own name",
            )
        seen.add(name)


def _check_scopes(tree: exp.Select, catalog: Catalog) -> None:
    for scope in traverse_scope(tree):
        sel = scope.expression
        if not isinstance(sel, exp.Select):
            raise Unsupported(f"{sel.key.upper()} in a subquery is not supported")
        if sel is not tree:
            _check_output_names(sel)
        if scope.is_subquery or scope.is_udtf:
            raise Unsupported(
                "subqueries outside FROM (in WHERE, SELECT, HAVING or ON) are not supported",
                hint="Join a public table or a derived table in FROM instead",
            )
        private = _reads_private(scope, catalog)
        for join in own_joins(sel):
            if str(join.args.get("side") or "").upper() == "LEFT" and _side_reads_private(join.this, scope, catalog):
                raise Unsupported(
                    "LEFT JOIN onto a private table is not supported",
                    hint="Put the private table first: FROM private LEFT JOIN public",
                )
        if scope.expression is tree or not private:
            continue
        aggs = [n for n in sel.find_all(*AGGREGATE_NODES, exp.Anonymous) if is_aggregate(n)]
        if aggs or sel.args.get("group") or sel.args.get("having"):
            raise Unsupported(
                "aggregation inside a subquery or CTE over private data is not supported",
                hint="Only row-level CTEs and subqueries may read a private table; aggregate in the outer SELECT",
            )
        if sel.args.get("distinct") or sel.args.get("limit") or sel.args.get("offset"):
            raise Unsupported(
                "DISTINCT, LIMIT and OFFSET inside a subquery over a private table are not supported",
                hint="Filter rows with WHERE instead",
            )


def _conjuncts(node: exp.Expression | None) -> list[exp.Expression]:
    if node is None:
        return []
    node = node.unnest()
    if isinstance(node, exp.And):
        return _conjuncts(node.this) + _conjuncts(node.expression)
    return [node]


def _check_join_keys(tree: exp.Select, catalog: Catalog) -> None:
    """No range join over private rows (red team s71 F2): in a scope that reads private rows, an inequality between
    sources (``<``, ``<=``, ``>``, ``>=``, ``BETWEEN``, anywhere in an ON or the WHERE) must join sources an equality
    already connects. DuckDB runs a join whose only conditions between its sides are inequalities as an IEJoin or a piecewise
    merge join, which hold the private rows in memory without spilling: the number of rows that pass the WHERE (a
    membership bit) decided whether the query failed after the charge, whatever the width of a row. Beside an equality
    the inequality is a condition of a hash join, which spills. An equality counts when each side reads columns of its
    own sources only (``t.id = pub.k``, ``t.id + 1 = pub.k``), in an inner join's ON or the WHERE, or in the ON of a
    LEFT JOIN (the WHERE's for a LEFT-joined source does not count). Refused free, by the query's text alone."""
    for scope in traverse_scope(tree):
        sel = scope.expression
        names = list(scope.selected_sources)
        if not isinstance(sel, exp.Select) or len(names) < 2 or not _reads_private(scope, catalog):
            continue
        inner = {id(s.expression) for s in (*scope.subquery_scopes, *scope.derived_table_scopes, *scope.cte_scopes)}

        def sources_in(node: exp.Expression, scope: Scope = scope, inner: set[int] = inner, sel: exp.Select = sel) -> set[str]:
            return {
                c.table
                for c in node.find_all(exp.Column)
                if c.table in scope.selected_sources and not in_inner_scope(c, sel, inner)
            }

        left_joined: set[str] = set()
        conditions: list[tuple[exp.Expression, bool]] = []  # (a condition, whether it may join a LEFT-joined source)
        for join in own_joins(sel):
            outer = str(join.args.get("side") or "").upper() in ("LEFT", "RIGHT", "FULL")
            if outer:
                left_joined |= {
                    name
                    for name, (node, _src) in scope.selected_sources.items()
                    if node is join.this or any(p is join.this for p in _ancestors(node))
                }
            conditions += [(c, outer) for c in _conjuncts(join.args.get("on"))]
        where = sel.args.get("where")
        conditions += [(c, False) for c in _conjuncts(where.this if where is not None else None)]
        parent = {name: name for name in names}

        def find(name: str, parent: dict[str, str] = parent) -> str:
            while parent[name] != name:
                name = parent[name]
            return name

        def sides(cond: exp.Expression) -> list[set[str]]:
            if isinstance(cond, exp.Between):
                return [sources_in(cond.this), sources_in(cond.args["low"]) | sources_in(cond.args["high"])]
            return [sources_in(cond.this), sources_in(cond.expression)]

        for cond, may_outer in conditions:
            if not isinstance(cond, exp.EQ):
                continue
            a, b = sides(cond)
            if not a or not b or a & b or (not may_outer and (a | b) & left_joined):
                continue
            for x in a | b:
                parent[find(x)] = find(next(iter(a)))
        # anywhere in a condition: DuckDB turns NOT (a < b) into a >= b, and simplifies a comparison with TRUE
        comparisons = [c for cond, _outer in conditions for c in cond.find_all(exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Between)]
        for cond in comparisons:
            a, b = sides(cond)
            if a and b and len({find(x) for x in a | b}) > 1:
                raise Unsupported(
                    "a join over private data on an inequality alone (a range join) is not supported: the engine holds "
                    "every private row in memory at once for it",
                    hint="Join on an equality key (ON t.k = pub.k; an inequality may stand beside it), or band a "
                    "private number with CASE WHEN x < 10 THEN 'low' … END instead of joining a table of ranges",
                )


# -- types ---------------------------------------------------------------------------------------

_NUMERIC = "number"
_TEXT = "text"
_BOOL = "boolean"
_TIME = "date/time"


def _family(node: exp.Expression) -> str | None:
    """The type family of an annotated expression, or None when unknown/NULL."""
    if isinstance(node, exp.Null):
        return None
    t = node.type
    if t is None or t.this in (exp.DataType.Type.UNKNOWN, exp.DataType.Type.NULL):
        return None
    if t.is_type(*exp.DataType.INTEGER_TYPES, *exp.DataType.REAL_TYPES):
        return _NUMERIC
    if t.is_type(*exp.DataType.TEXT_TYPES):
        return _TEXT
    if t.is_type(exp.DataType.Type.BOOLEAN):
        return _BOOL
    if t.is_type(*exp.DataType.TEMPORAL_TYPES):
        return _TIME
    return None


def _compatible(a: str, b: str) -> bool:
    return a == b or {a, b} == {_NUMERIC, _BOOL}


def _convert_literal(lit: exp.Literal, family: str, context: exp.Expression) -> exp.Expression:
    """A text literal in a ``family`` context, converted statically; refused when it does not convert."""
    text = str(lit.this)
    if family == _NUMERIC:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if math.isfinite(value):
            stripped = text.strip()
            is_int = stripped.lstrip("+-").isdigit()
            return exp.Literal.number(int(stripped) if is_int else repr(value))
    elif family == _BOOL:
        low = text.strip().lower()
        if low in ("true", "t", "yes", "y", "1", "on", "false", "f", "no", "n", "0", "off"):
            return exp.Boolean(this=low in ("true", "t", "yes", "y", "1", "on"))
    elif family == _TIME:
        moment = _iso_time(lit, context)
        if isinstance(moment, dt.datetime):
            return exp.cast(exp.Literal.string(moment.isoformat(sep=" ")), data_type("TIMESTAMP"))
        if moment is not None:
            return exp.cast(exp.Literal.string(moment.isoformat()), data_type("DATE"))
    raise TypeMismatch(
        f"{context.sql(dialect=DIALECT)!r} compares or combines a {family} value with the text {lit.sql(dialect=DIALECT)}",
        hint=f"Write a {family} value (e.g. a number without quotes, or DATE '2020-01-31')",
    )


def _iso_time(lit: exp.Literal, context: exp.Expression) -> dt.date | dt.datetime | None:
    """The date (a text of a date alone) or the date and time a text literal holds, as Python's ``fromisoformat``
    reads it, for the caller to write out again in ISO form: the one spelling every engine reads alike. Python also
    reads ``'20000101'`` and ``'2000-W01-1'``, which DuckDB's cast made NULL (a silent empty answer: red team s45
    A4, s47 B5). None when Python does not read it. A text with a time-zone offset is refused: DuckDB dropped the
    offset, Spark applied it."""
    text = str(lit.this).strip()
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        pass
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is not None:
        raise TypeMismatch(
            f"{context.sql(dialect=DIALECT)!r}: the text {lit.sql(dialect=DIALECT)} has a time-zone offset, which the "
            "engines read differently",
            hint="Write the date or time in ISO form without a time zone, e.g. DATE '2020-01-31' or "
            "TIMESTAMP '2020-01-31 12:00:00'",
        )
    return moment


def _unwrap(node: exp.Expression) -> exp.Expression:
    while isinstance(node, exp.Paren):
        node = node.this
    return node


_T = exp.DataType.Type
#: The types an analyst may write in a CAST (so also in a typed literal such as ``DATE '…'``): the ones
#: whose values every engine holds, compares and hands back exactly. A value of any other type
#: (TIME, TIMESTAMP WITH TIME ZONE, nanosecond timestamps, INTERVAL as a value, UUID, JSON, BLOB,
#: lists, maps, structs, unsigned or 128-bit integers) would be cast to or from its neighbours row by
#: row, and some of those casts fail on some values only.
_CASTABLE = frozenset({
    _T.BOOLEAN, _T.TINYINT, _T.SMALLINT, _T.INT, _T.BIGINT, _T.FLOAT, _T.DOUBLE, _T.DECIMAL,
    _T.VARCHAR, _T.CHAR, _T.TEXT, _T.NVARCHAR, _T.NCHAR, _T.DATE, _T.TIMESTAMP, _T.DATETIME,
})  # fmt: skip


def _check_types(tree: exp.Select, catalog: Catalog) -> exp.Select:
    """Annotate types; convert text literals statically; refuse mixed families and types outside the
    admitted ones. Returns a new tree."""
    work = tree.copy()
    annotate_types(work, schema=catalog.schema(), dialect=DIALECT)
    # innermost first: a converted literal changes nothing above it but its own operand list
    for node in list(work.walk(bfs=False))[::-1]:
        if isinstance(node, (exp.Cast, exp.TryCast)):
            _check_cast_target(node)
            _convert_cast_text(node)
        _check_interval_use(node)
        for ops in operand_groups(node):
            if isinstance(node, COMBINING_NODES):
                _check_admitted(node, ops)
            _check_group(node, ops)
    return work


def _is_interval(node: exp.Expression) -> bool:
    """``node`` (through brackets) is an interval: a literal or constructor, or typed INTERVAL."""
    node = _unwrap(node)
    return isinstance(node, exp.Interval) or (node.type is not None and node.type.this is _T.INTERVAL)


def _time_valued(node: exp.Expression) -> bool:
    """``node`` (through brackets) is a date or time: typed so, truncated to a unit, or a date ± an interval."""
    node = _unwrap(node)
    if isinstance(node, (exp.TimestampTrunc, exp.DateTrunc)):
        return True
    if isinstance(node, (exp.Add, exp.Sub)) and (_is_interval(node.this) or _is_interval(node.expression)):
        return True
    return node.type is not None and node.type.this in _TIME_TYPES


def _maybe_time(node: exp.Expression) -> bool:
    """``node`` is, or may be, a date or time: :func:`_time_valued`, or of a type the annotation could not tell (a
    ``DATE_TRUNC`` behind a derived-table or CTE column has none: red team s58 E2). NULL is no value at all."""
    if _time_valued(node):
        return True
    inner = _unwrap(node)
    if isinstance(inner, (exp.Null, exp.Interval)) or _is_text_literal(inner):
        return False
    return inner.type is None or inner.type.this is _T.UNKNOWN


def _check_interval_use(node: exp.Expression) -> None:
    """An interval is for date arithmetic only: an ``INTERVAL`` stands as an operand of ``+`` (either side) or the
    right operand of ``-``, beside an operand that is not an interval, and no query subtracts two dates or times (an
    interval in DuckDB, and in Spark for dates too). So no expression of any query has an interval *value* that an
    aggregate, a comparison, a projection or another operator could read (red team s56 C2: ``AVG`` of an interval
    overflows in DuckDB, aggregates are never wrapped in ``TRY``, and in a public source whether a group was computed
    at all was the private copy's statistics' choice)."""
    what = None
    if isinstance(node, exp.Interval):
        child, parent = node, node.parent
        while isinstance(parent, exp.Paren):
            child, parent = parent, parent.parent
        if not isinstance(parent, (exp.Add, exp.Sub)) or (isinstance(parent, exp.Sub) and child is not parent.expression):
            what = f"{node.sql(dialect=DIALECT)!r} is used as a value"
        else:
            other = parent.this if child is parent.expression else parent.expression
            if _is_interval(other):
                what = f"{parent.sql(dialect=DIALECT)!r} combines two intervals"
    elif (
        isinstance(node, exp.Sub)
        and not _is_interval(node.expression)
        and _maybe_time(node.this)
        and _maybe_time(node.expression)
    ):
        # (an operand whose type cannot be told counts as a time: a difference of two times is an interval)
        what = f"{node.sql(dialect=DIALECT)!r} subtracts two dates or times (an interval)"
    elif isinstance(node, (exp.Add, exp.Sub)) and any(
        _maybe_time(a) and _is_text_literal(b) for a, b in ((node.this, node.expression), (node.expression, node.this))
    ):
        # a text beside a date or time is read by its content (a date: the difference is an interval; red team s57
        # D2, a bound wire parameter too) and only converted after this check: arithmetic takes typed values
        what = f"{node.sql(dialect=DIALECT)!r} does date arithmetic with a text"
    if what is not None:
        raise TypeMismatch(
            f"{what}: an interval is allowed only in date arithmetic, a date or time plus or minus an INTERVAL",
            hint="Write d + INTERVAL '3' DAY or d - INTERVAL (n) DAY (an interval, never a text) and compare dates; to "
            "compare two dates, compare them directly (e.g. d2 > d1 + INTERVAL '30' DAY) or their EXTRACTed parts",
        )


def _check_cast_target(node: exp.Cast) -> None:
    to = node.args.get("to")
    if isinstance(to, exp.DataType) and to.this not in _CASTABLE:
        raise Unsupported(
            f"{node.sql(dialect=DIALECT)!r}: values of type {to.sql(dialect=DIALECT)} are not supported",
            hint="Use BOOLEAN, INTEGER, BIGINT, DOUBLE, DECIMAL, VARCHAR, DATE or TIMESTAMP",
        )


_TIME_TYPES = frozenset({_T.DATE, _T.TIMESTAMP, _T.DATETIME})


def _convert_cast_text(node: exp.Cast) -> None:
    """A text literal cast to DATE or TIMESTAMP (so also a typed literal, ``DATE '…'``) is written out again in ISO
    form, as a text compared with a date is (:func:`_iso_time`; red team s47, B5: s45 A4's fix converted only texts
    compared with dates). A text Python does not read ('infinity', 'epoch', 'now', a year beyond 9999, BC, Feb 30)
    is refused (22007): each engine read it as its own constant (DuckDB's infinity was NULL on Spark), and the
    neutral render's ISO guard applies to column values only, not to literals."""
    to = node.args.get("to")
    inner = _unwrap(node.this)
    if not (isinstance(to, exp.DataType) and to.this in _TIME_TYPES and isinstance(inner, exp.Literal) and inner.is_string):
        return
    value = _iso_time(inner, node)
    if value is None:
        raise InvalidDatetimeFormat(
            f"{node.sql(dialect=DIALECT)!r}: the text {inner.sql(dialect=DIALECT)} is not a date or time in ISO form, "
            "which the engines would read differently (or not at all)",
            hint="Write a date of the years 1 to 9999 in ISO form, e.g. DATE '2020-01-31' or TIMESTAMP '2020-01-31 "
            "12:00:00'; for an open end leave the condition out, or use DATE '0001-01-01' or DATE '9999-12-31'",
        )
    moment = value if isinstance(value, dt.datetime) else dt.datetime.combine(value, dt.time())
    iso = moment.date().isoformat() if to.this is _T.DATE else moment.isoformat(sep=" ")
    inner.replace(exp.Literal.string(iso))


def _check_admitted(node: exp.Expression, ops: list[exp.Expression]) -> None:
    """Every operand of a comparison or value chooser has an admitted type (or is NULL or a text literal,
    converted below). An operand whose type sqlglot cannot tell (``DATE_TRUNC``, date arithmetic) is
    admitted beside one of a known type: the totality pass casts the group to that type explicitly."""
    known = False
    for op in ops:
        inner = _unwrap(op)
        if isinstance(inner, exp.Null) or _is_text_literal(inner):
            continue
        t = inner.type
        if t is not None and t.this in (_T.NULL, _T.UNKNOWN):
            continue
        if t is None or t.this not in _CASTABLE:
            raise TypeMismatch(
                f"{node.sql(dialect=DIALECT)!r}: {inner.sql(dialect=DIALECT)!r} has type {t.sql(dialect=DIALECT) if t else '?'}",
                hint="Compare numbers, text, booleans, dates or timestamps; cast explicitly, e.g. CAST(x AS DOUBLE)",
            )
        known = True
    unknown = [o for o in ops if (t := _unwrap(o).type) is not None and t.this is _T.UNKNOWN]
    if unknown and not known:
        raise TypeMismatch(
            f"{node.sql(dialect=DIALECT)!r}: the type of {_unwrap(unknown[0]).sql(dialect=DIALECT)!r} cannot be told",
            hint="Cast it explicitly, e.g. CAST(DATE_TRUNC('month', d) AS DATE) or CAST(x AS DOUBLE)",
        )


def _check_group(node: exp.Expression, ops: list[exp.Expression]) -> None:
    """One operand group: a single family (numbers and booleans mix); text literals converted to it."""
    families = {f for f in (_family(_unwrap(o)) for o in ops if not _is_text_literal(o)) if f is not None}
    if len(families) > 1 and not all(_compatible(a, b) for a in families for b in families):
        kinds = " and ".join(sorted(families))
        raise TypeMismatch(
            f"{node.sql(dialect=DIALECT)!r} mixes {kinds} values",
            hint="Compare values of one type; cast explicitly, e.g. CAST(x AS VARCHAR)",
        )
    target = next(iter(families - {_BOOL}), None) or next(iter(families), None)
    if target is None or target == _TEXT:
        return
    for lit in ops:
        inner = _unwrap(lit)
        if isinstance(inner, exp.Literal) and inner.is_string:
            inner.replace(_convert_literal(inner, target, node))


def _is_text_literal(node: exp.Expression) -> bool:
    inner = _unwrap(node)
    return isinstance(inner, exp.Literal) and inner.is_string


def _check_growth(tree: exp.Select) -> None:
    """No function may make a row's text grow faster than the query text does.

    ``REPLACE(x, 't', <100 t's>)`` nested a few times multiplies one row's string by ~10⁸: the query
    then runs for seconds (or exhausts memory) exactly when that row matches a condition, so its
    running time, a statement timeout or an out-of-memory error would answer a question about one
    person. A replacement may therefore be at most as long as a non-empty pattern, both literals;
    every other allowed text function (concatenation, case, trim, substring) grows output by at most
    the size of its own arguments in the query.
    """
    for node in tree.find_all(exp.Replace):
        pattern, replacement = _unwrap(node.expression), _unwrap(node.args.get("replacement") or exp.Literal.string(""))
        literal = all(isinstance(a, exp.Literal) and a.is_string for a in (pattern, replacement))
        if not literal or not pattern.name or len(replacement.name) > len(pattern.name):
            raise Unsupported(
                f"{node.sql(dialect=DIALECT)!r}: REPLACE must use a non-empty literal pattern and a literal "
                "replacement no longer than it",
                hint="A longer replacement can make one row's text grow without bound; compare with LIKE or STRPOS instead",
            )


def validate(resolved: Resolved, catalog: Catalog) -> Analysis:
    """Check the shape and types of a resolved query (free; raises before anything runs)."""
    tree = resolved.tree
    if resolved.private_reads > 1:
        raise Unsupported(
            f"the query reads private table {resolved.private_table!r} {resolved.private_reads} times",
            hint="Read a private table once (self-joins, and a CTE over it used twice, are not supported)",
        )
    if build_scope(tree) is None:
        raise InternalError("a resolved query has no scope")
    _check_scopes(tree, catalog)
    _check_join_keys(tree, catalog)
    _check_growth(tree)
    for node in tree.find_all(exp.Anonymous):
        if str(node.name).lower() not in ANONYMOUS_FUNCTIONS:
            raise InternalError(f"function {node.name!r} passed the allow-list")
        _check_arity(node)
    for percentile in tree.find_all(exp.PercentileCont, exp.PercentileDisc):
        _check_percentile_arity(percentile)
    _check_like_patterns(tree)
    _check_trim_sets(tree)
    _check_date_parts(tree)
    size = _check_expansion(resolved)
    typed = _check_types(tree, catalog)
    return Analysis(
        sql=resolved.sql,
        tree=typed,
        original=resolved.original,
        private_table=resolved.private_table,
        tables=resolved.tables,
        text_bytes=size.text_bytes,
        expanded=size.expanded,
    )


def _check_like_patterns(tree: exp.Expression) -> None:
    """LIKE / ILIKE only with a constant pattern of literal characters and ``%``.

    DuckDB matches such a pattern in time linear in the text (prefix, suffix, contains, ``%``-separated
    segments); a pattern computed per row, or one holding ``_``, takes its generic matcher, whose time is
    |text| × |pattern|: 180 KB of literals made the one row a predicate selects cost 3 s, so the reply time
    answered a question about that row (red team s8, A4). ILIKE is generated as ``LOWER(x) LIKE LOWER(p)``
    (:mod:`veil.engines.neutral`): DuckDB's own ILIKE is quadratic even for a constant pattern.
    """
    for node in tree.find_all(exp.Like, exp.ILike):
        pattern = node.expression.unnest() if node.expression is not None else None
        word = "ILIKE" if isinstance(node, exp.ILike) else "LIKE"
        if not (isinstance(pattern, exp.Literal) and pattern.is_string):
            raise Unsupported(
                f"the pattern of {word} must be a text literal, got {pattern.sql(dialect='duckdb') if pattern else 'nothing'}",
                hint="Write the pattern as a constant such as '%abc%' (a pattern computed per row is matched in "
                "quadratic time, which one row's data could decide)",
            )
        if "_" in str(pattern.this):
            raise Unsupported(
                f"the {word} pattern {str(pattern.this)[:40]!r} holds '_', which Veil does not accept",
                hint="Use only literal characters and % (a '_' makes the engine match in quadratic time); "
                "for a fixed-length match compare LENGTH() and LEFT()/SUBSTRING() instead",
            )


def _check_trim_sets(tree: exp.Expression) -> None:
    """TRIM / LTRIM / RTRIM / BTRIM only with no character set or a constant text literal one.

    DuckDB turns the set into a hash set again for every row it trims, ~40 ns per character: a set computed
    per row from one person's 1,024-character value cost 5 s over that person's rows × a public join, against
    0.01 s for a 2-character value (red team s11, A1), and a public table's long text did the same (A2). A
    literal set's bytes count towards the query's size, which the per-person work bound prices per row.
    """
    for node in tree.find_all(exp.Trim):
        chars = node.expression.unnest() if node.expression is not None else None
        if chars is not None and not (isinstance(chars, exp.Literal) and chars.is_string):
            raise Unsupported(
                f"the characters TRIM removes must be a text literal, got {chars.sql(dialect='duckdb')}",
                hint="Write the set as a constant such as TRIM(BOTH 'x ' FROM s) (a set computed per row is rebuilt "
                "for every row, in time one row's data could decide)",
            )


#: EXTRACT / date_part fields and DATE_TRUNC units the engine computes on every DATE and TIMESTAMP, extreme ones
#: included, without an error TRY cannot catch (checked on the range's ends, and ±infinity, by
#: tests/proxy/test_date_parts.py). Left out: ERA, TIMEZONE*, NS/NANOSECOND, which DuckDB refuses for some
#: values or types even inside TRY — an error one row decides, or one after the charge (red team s12, A3/L3).
#: The ISO-week family is computed on dates within ±290,000 years only (NULL beyond; see totality).
DATE_PARTS = frozenset({
    "YEAR", "QUARTER", "MONTH", "DAY", "DOW", "DAYOFWEEK", "WEEKDAY", "ISODOW", "DOY", "DAYOFYEAR", "WEEK",
    "WEEKOFYEAR", "YEARWEEK", "ISOYEAR", "HOUR", "MINUTE", "SECOND", "MILLISECOND", "MILLISECONDS", "MICROSECOND",
    "MICROSECONDS", "EPOCH", "DECADE", "CENTURY", "MILLENNIUM",
})  # fmt: skip
TRUNC_UNITS = frozenset({
    "YEAR", "QUARTER", "MONTH", "WEEK", "YEARWEEK", "ISOYEAR", "DAY", "HOUR", "MINUTE", "SECOND", "MILLISECOND",
    "MILLISECONDS", "MICROSECOND", "MICROSECONDS", "DECADE", "CENTURY", "MILLENNIUM",
})  # fmt: skip


def date_part_name(node: exp.Expression | None) -> str | None:
    """The field of EXTRACT or the unit of DATE_TRUNC, upper-case, when it is a keyword or text literal."""
    node = node.unnest() if isinstance(node, exp.Expression) else None
    if isinstance(node, exp.Var) or (isinstance(node, exp.Literal) and node.is_string):
        return str(node.this).upper()
    return None


#: The most ISO-week fields and units nested in one another's values: each one's guard holds its value twice
#: (``CASE WHEN v BETWEEN … THEN v END``, :func:`veil.proxy.totality.iso_week_value`), so k nested copy the innermost
#: value 2ᵏ times — 13 nested ``DATE_TRUNC('week', …)`` took 4.8 s to explain, free, and each one more doubled it.
MAX_ISO_WEEK_NESTING = 3


def _check_iso_week_nesting(tree: exp.Expression) -> None:
    stack: list[tuple[exp.Expression, int]] = [(tree, 0)]
    while stack:
        node, nested = stack.pop()
        if iso_week_value(node) is not None:
            nested += 1
            if nested > MAX_ISO_WEEK_NESTING:
                raise Unsupported(
                    f"the query nests ISO-week fields or units (WEEK, YEARWEEK, ISOYEAR) {nested} deep; the limit is "
                    f"{MAX_ISO_WEEK_NESTING}",
                    hint="Nest fewer of them (DATE_TRUNC('week', d) is already a week's first day; truncate it once)",
                )
        stack.extend((child, nested) for child in node.iter_expressions())


def _check_date_parts(tree: exp.Expression) -> None:
    _check_iso_week_nesting(tree)
    for node in tree.find_all(exp.Extract, exp.TimestampTrunc, exp.DateTrunc):
        extract = isinstance(node, exp.Extract)
        part = node.this if extract else node.args.get("unit")
        name = date_part_name(part)
        allowed = DATE_PARTS if extract else TRUNC_UNITS
        if name not in allowed:
            what = "EXTRACT field" if extract else "DATE_TRUNC unit"
            shown = name if name is not None else (part.sql(dialect="duckdb") if isinstance(part, exp.Expression) else "nothing")
            raise Unsupported(
                f"the {what} {shown!r} is not one Veil computes",
                hint=f"Use one of {', '.join(sorted(allowed)).lower()} (others fail on some values even inside TRY)",
            )


#: How much larger than the query as typed its expressions may grow once every reference to a CTE or
#: derived-table column is replaced by what it stands for (and the size below which any ratio is fine).
MAX_EXPANSION_RATIO = 8
MIN_EXPANSION_LIMIT = 20_000


#: The most column values a query may join into text (``||``, CONCAT), references expanded: a chain of n
#: copies of one row's text builds strings of 1, 2, … n times its length, so its work grows with n² times
#: that row's data (600 copies of a 20 KB value: 2.7 s with the row, 0.3 s without).
MAX_CONCATENATED = 64


def _check_expansion(resolved: Resolved) -> Expansion:
    """Refuse a query whose CTE and derived-table columns, or select-list aliases, multiply its expressions
    (see :mod:`veil.proxy.expansion`), or that joins too many column values into text: the work, and so
    the running time, would grow with one row's data. The written size is the query as parsed (before
    qualification inlines select-list aliases), the expanded size the qualified query, references expanded."""
    try:
        size = measure(resolved.tree)
        # below the floor any ratio is fine: the parsed query is measured only when it could matter
        written = measure(resolved.original).written if size.expanded > MIN_EXPANSION_LIMIT else 0
    except RecursionError:
        raise QueryTooComplex(
            "the query's expressions are nested too deeply to check",
            hint="Split long chains of operators (e.g. hundreds of ||, + or AND in a row)",
        ) from None
    if size.concatenated > MAX_CONCATENATED:
        raise Unsupported(
            f"the query joins {size.concatenated:,} column values into text (|| or CONCAT, references to CTE columns "
            f"expanded); the limit is {MAX_CONCATENATED}",
            hint="Concatenate fewer columns (each copy of one row's text adds work that depends on that row)",
        )
    limit = max(MAX_EXPANSION_RATIO * written, MIN_EXPANSION_LIMIT)
    if size.expanded > limit:
        raise Unsupported(
            f"the query's expressions grow to {size.expanded:,} units through references to CTE or derived-table "
            f"columns (each reference repeats the expression behind it); the limit is {limit:,}",
            hint="Reference each CTE column fewer times (e.g. compute v || v once instead of repeating v)",
        )
    return size
