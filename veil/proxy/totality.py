"""Total expressions: generated SQL that cannot fail because of the data it reads.

A run-time error whose occurrence depends on a row (a division by zero, an overflow, a cast of a
text that is not a number) is a deterministic one-bit oracle on that row, whatever ε is charged.
:func:`make_total` rewrites every partial operation of an expression tree into a total form, each
on its own (DuckDB's common-subexpression elimination may lift a repeated sub-expression out of an
enclosing ``TRY``, so an outer ``TRY`` alone is not enough):

* a value read as a condition (WHERE, ON, HAVING, CASE WHEN, IF, NOT, AND, OR, IS TRUE) that is not a
  boolean becomes ``TRY_CAST(value AS BOOLEAN)`` (an engine would cast it per row, failing on a text
  like ``'x'``);
* ``CAST`` becomes ``TRY_CAST`` (NULL when the value does not convert); a cast to DECIMAL is then
  read as a DOUBLE;
* a number literal with a fraction or an exponent is a DOUBLE (fixed-point arithmetic overflows);
* ``a / b``, ``a // b`` and ``a % b`` divide by ``NULLIF(b, 0)`` and are wrapped in ``TRY``;
* every other operation that can raise — arithmetic (integer overflow), powers, logarithms, square
  roots, exponentials, rounding, date arithmetic, LIKE patterns, string functions with numeric
  arguments — is wrapped in ``TRY`` (NULL on error).

Nodes that cannot raise on any input of the types the validate pass admits (columns, literals,
comparisons of one type family, boolean connectives, CASE, COALESCE, …) are left as they are.

>>> import sqlglot
>>> make_total(sqlglot.parse_one("age % (age - age) = 0 AND CAST(x AS INT) > 1")).sql(dialect="duckdb")
'TRY(age % NULLIF((TRY(age - age)), 0)) = 0 AND TRY_CAST(x AS INT) > 1'
"""

from __future__ import annotations

import re

from sqlglot import exp

from veil.engines.neutral import CANNOT_RAISE, TIME_TEXT, WIDE_SUM, copy_tree, data_type, is_boolean
from veil.proxy.parse import ANONYMOUS_FUNCTIONS

__all__ = [
    "BUILT_TOTAL", "CANNOT_RAISE", "COMBINING_NODES", "TOTAL_NODES", "converts", "iso_week_value", "make_total",
    "needs_try",
    "operand_groups", "raises",
]  # fmt: skip

#: Node types that never raise on operands of one type family (checked by the validate pass).
TOTAL_NODES: tuple[type[exp.Expression], ...] = (
    exp.Column, exp.Literal, exp.Boolean, exp.Null, exp.Paren, exp.Identifier, exp.Star, exp.DataType,
    exp.DataTypeParam, exp.Var, exp.Alias, exp.TableAlias, exp.Table, exp.Tuple,
    exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.NullSafeEQ, exp.NullSafeNEQ, exp.Is, exp.In,
    exp.Between, exp.And, exp.Or, exp.Not, exp.Case, exp.If, exp.Coalesce, exp.Nullif, exp.Greatest,
    exp.Least, exp.Lower, exp.Upper, exp.Length, exp.Trim, exp.Concat, exp.DPipe, exp.Pi, exp.TryCast,
    exp.Try, exp.Extract, exp.Year, exp.Month, exp.Day, exp.DayOfWeek, exp.Quarter,
    exp.Distinct, exp.Ordered, exp.Filter,
    exp.Count, exp.Sum, exp.Avg, exp.Min, exp.Max,
)  # fmt: skip

_DIVISIONS = (exp.Div, exp.IntDiv, exp.Mod)
#: The aggregates sqlglot leaves as ``Anonymous``.
_ANONYMOUS_AGGREGATES = ANONYMOUS_FUNCTIONS
_INTEGER = re.compile(r"[0-9]+")
_INT64_MAX = 2**63 - 1


def _is_int64(text: str) -> bool:
    """A number literal's text is an integer that fits a BIGINT (a minus sign is a separate node)."""
    return bool(_INTEGER.fullmatch(text)) and int(text) <= _INT64_MAX


#: Nodes whose operands an engine casts to one common type, row by row: comparisons and the value
#: choosers. The validate pass admits only number, text, boolean, DATE and TIMESTAMP operands here.
COMBINING_NODES: tuple[type[exp.Expression], ...] = (
    exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.NullSafeEQ, exp.NullSafeNEQ, exp.In, exp.Between,
    exp.Case, exp.If, exp.Coalesce, exp.Greatest, exp.Least, exp.Nullif,
)  # fmt: skip


def operand_groups(node: exp.Expression) -> list[list[exp.Expression]]:
    """Groups of operands that an engine brings to one common type (empty for nodes without that rule)."""
    if isinstance(node, exp.In):
        return [[node.this, *node.expressions]]
    if isinstance(node, exp.Between):
        return [[node.this, node.args["low"], node.args["high"]]]
    if isinstance(node, (exp.And, exp.Or, exp.Like, exp.ILike, exp.Is, exp.DPipe)):
        return []
    if isinstance(node, (exp.Predicate, exp.Binary)):
        return [[node.this, node.expression]]
    if isinstance(node, exp.Case):
        ifs = node.args.get("ifs") or []
        groups = [[b for b in [*(i.args.get("true") for i in ifs), node.args.get("default")] if b is not None]]
        if node.this is not None:  # simple CASE x WHEN v …: x = v is compared row by row
            groups.append([node.this, *(i.this for i in ifs)])
        return groups
    if isinstance(node, exp.If):
        return [[b for b in (node.args.get("true"), node.args.get("false")) if b is not None]]
    if isinstance(node, (exp.Coalesce, exp.Greatest, exp.Least)):
        return [[node.this, *node.expressions]]
    if isinstance(node, exp.Nullif):
        return [[node.this, node.expression]]
    return []


def _unparen(node: exp.Expression) -> exp.Expression:
    while isinstance(node, exp.Paren):
        node = node.this
    return node


def _is_unknown(t: exp.DataType | None) -> bool:
    """sqlglot annotated the node but could not tell its type (a node Veil built itself has no annotation)."""
    return t is not None and t.this is exp.DataType.Type.UNKNOWN


def _cast_targets(node: exp.Expression) -> list[exp.DataType | None]:
    """Per operand group of a combining ``node`` (read before its operands are rewritten): the type every
    operand is cast to explicitly, or None for a group the engine combines without a cast that can fail.

    An engine's implicit cast between dates and timestamps fails on some values only (a DATE beyond
    year 294247 as a TIMESTAMP), and the annotated types are sqlglot's guess (``d - INTERVAL …`` is a
    TIMESTAMP in DuckDB; ``DATE_TRUNC`` and date arithmetic are annotated as unknown). So a group with a
    date or timestamp is cast, with TRY_CAST, to DATE when every operand is one, else to TIMESTAMP; a
    group with an operand of unknown type is cast to the type of its known operands (DOUBLE for
    numbers, BOOLEAN, VARCHAR). A cast to the type a value already has is dropped by the engine.
    """
    if not isinstance(node, COMBINING_NODES):
        return []
    out: list[exp.DataType | None] = []
    for ops in operand_groups(node):
        values = [o for o in (_unparen(o) for o in ops) if not isinstance(o, exp.Null)]
        types = [v.type for v in values]
        known = [t for t in types if t is not None and not _is_unknown(t) and t.this is not exp.DataType.Type.NULL]
        temporal = [t for t in known if t.is_type(*exp.DataType.TEMPORAL_TYPES)]
        if temporal:
            all_dates = len(temporal) == len(values) and all(t.is_type(exp.DataType.Type.DATE) for t in temporal)
            out.append(data_type("DATE" if all_dates else "TIMESTAMP"))
        elif any(_is_unknown(t) for t in types) and known:
            if any(t.is_type(*exp.DataType.TEXT_TYPES) for t in known):
                out.append(data_type("VARCHAR"))
            elif all(t.is_type(exp.DataType.Type.BOOLEAN) for t in known):
                out.append(data_type("BOOLEAN"))
            else:
                out.append(data_type("DOUBLE"))
        else:
            out.append(None)
    return out


def _cast_operands(node: exp.Expression, targets: list[exp.DataType | None]) -> None:
    for ops, target in zip(operand_groups(node), targets, strict=True):
        if target is None:
            continue
        for op in ops:
            if isinstance(_unparen(op), exp.Null):
                continue
            cast = exp.TryCast(to=target.copy())
            op.replace(cast)
            cast.set("this", op)


def _total_node(node: exp.Expression) -> exp.Expression:
    """``node`` (whose children are already total) in a total form."""
    if isinstance(node, exp.Cast):
        to = node.args["to"]
        out = exp.TryCast(this=node.this, to=to)
        if node.meta.get(CANNOT_RAISE):
            out.meta[CANNOT_RAISE] = True
        if isinstance(to, exp.DataType) and to.this in (exp.DataType.Type.DECIMAL, exp.DataType.Type.BIGDECIMAL):
            # rounded and range-checked as the DECIMAL, then used as a DOUBLE (see number literals)
            return exp.TryCast(this=out, to=data_type("DOUBLE"))
        return out
    if isinstance(node, exp.Literal) and not node.is_string and not _is_int64(str(node.this)):
        # a DECIMAL literal makes the arithmetic around it fixed-point, which overflows (even in a
        # comparison, by the common-type cast) at magnitudes that depend on the data; an integer
        # beyond 64 bits is a 128-bit (or unsigned) integer whose common type with a BIGINT column
        # overflows when a row reaches it: use DOUBLE
        return exp.Cast(this=node, to=data_type("DOUBLE"))
    if isinstance(node, _DIVISIONS):
        divisor = node.expression
        node.set("expression", exp.Nullif(this=divisor, expression=exp.Literal.number(0)))
    _guard_iso_week(node)
    return exp.Try(this=node) if needs_try(node) else node


#: Meta mark of a node the rewrite pass built total from operands it made total itself (DOUBLE arithmetic and
#: comparisons over clamped values): :func:`make_total` leaves it and its operands as they are.
BUILT_TOTAL = "veil_built_total"


#: ISO-week fields and units: DuckDB's computation steps past the ends of the DATE range (an error TRY does not
#: catch, red team s12, A3), so they get dates within ±290,000 years only (NULL beyond; valid as TIMESTAMPs too).
ISO_WEEK_PARTS = frozenset({"WEEK", "WEEKOFYEAR", "YEARWEEK", "ISOYEAR"})
_ISO_WEEK_RANGE = ("-290000-01-01", "290000-12-31")


def iso_week_value(node: exp.Expression) -> str | None:
    """The argument key of ``node``'s value when ``node`` is an ISO-week EXTRACT or DATE_TRUNC, whose guard
    (:func:`_guard_iso_week`) holds that value twice; else None. Nested, they copy the innermost value 2ᵏ times:
    the validate pass limits the nesting, the rewrite's price counts the copies."""
    if isinstance(node, exp.Extract):
        part, key = node.this, "expression"
    elif isinstance(node, (exp.TimestampTrunc, exp.DateTrunc)):
        part, key = node.args.get("unit"), "this"
    else:
        return None
    part = part.unnest() if isinstance(part, exp.Expression) else None
    name = str(part.this).upper() if isinstance(part, (exp.Var, exp.Literal)) else None
    return key if name in ISO_WEEK_PARTS else None


def _guard_iso_week(node: exp.Expression) -> None:
    key = iso_week_value(node)
    value = node.args.get(key) if key is not None else None
    if not isinstance(value, exp.Expression):
        return
    lo, hi = (exp.cast(exp.Literal.string(d), data_type("DATE")) for d in _ISO_WEEK_RANGE)
    inside = exp.Between(this=value.copy(), low=lo, high=hi)
    node.set(key, exp.Case(ifs=[exp.If(this=inside, true=value)]))


_TEXT_TYPES = frozenset(exp.DataType.TEXT_TYPES)


def _decimal_target(node: exp.Cast) -> bool:
    to = node.args.get("to")
    return isinstance(to, exp.DataType) and to.this in (exp.DataType.Type.DECIMAL, exp.DataType.Type.BIGDECIMAL)


def raises(node: exp.Expression) -> bool:
    """Whether ``node`` may take an exception path on a row of the generated SQL (priced by the plan pass):
    an operation :func:`make_total` wraps in TRY (unless Veil built it over values that cannot make it raise),
    and a cast to DECIMAL (DuckDB's TRY_CAST of an integer to a too-narrow DECIMAL throws and catches per row,
    3–11 µs against ~5 ns, red team s12, A1), unless it is the widening of an integer sum (38 digits hold any sum)."""
    if node.meta.get(CANNOT_RAISE):
        return False
    if isinstance(node, exp.Cast):
        return _decimal_target(node) and not node.meta.get(WIDE_SUM) and not isinstance(node.this, exp.Literal)
    return needs_try(node)


def converts(node: exp.Expression) -> bool:
    """Whether ``node`` is a cast that may fail on a row without raising (priced lower than :func:`raises`): a
    failing TRY_CAST — text to a number, date or boolean, a number to a narrower one — costs 0.15–1 µs in DuckDB
    against ~5 ns when it succeeds. Not: casts of constants, casts to text (they cannot fail), casts Veil
    builds over values that cannot make them fail, and the casts to DECIMAL :func:`raises` prices. The guard of a text
    cast to a date (``neutral.TIME_TEXT``: a regular-expression match on every row, 0.3–0.7 µs) is priced as one more."""
    if node.meta.get(TIME_TEXT):
        return True
    if not isinstance(node, exp.Cast) or node.meta.get(CANNOT_RAISE) or node.meta.get(WIDE_SUM):
        return False
    if isinstance(node.this, exp.Literal) or _decimal_target(node):
        return False
    to = node.args.get("to")
    return not (isinstance(to, exp.DataType) and to.this in _TEXT_TYPES)


def needs_try(node: exp.Expression) -> bool:
    """Whether :func:`make_total` wraps ``node`` in ``TRY`` (the analyst's node, before the rewrite).

    A ``TRY`` costs about 10 ns on a row where its operation succeeds and 7–11 µs where it raises (the
    engine throws and catches an exception), so which rows raise decides the running time: the plan pass
    prices every such node as if it raised on every row one person brings (``TRY_EVALUATIONS``, red team
    s11, A3: a date overflow on one person's 50 rows × a 10,000-row join took 3.5 s against 0.01 s)."""
    if isinstance(node, (exp.Cast, exp.Literal)):
        return False  # a TRY_CAST, a DOUBLE literal: neither raises
    if isinstance(node, (exp.AggFunc, exp.WithinGroup)) or (
        isinstance(node, exp.Anonymous) and str(node.name).lower() in _ANONYMOUS_AGGREGATES
    ):
        # DuckDB refuses an aggregate inside TRY (a binder error): a public subquery's ``HAVING MEDIAN(k) >= 0``
        # failed every query that joined it (red team s55, A3)
        return False
    if isinstance(node, (exp.Interval, *_DIVISIONS)):
        # INTERVAL (value) unit casts its value per row (text, a date, a number beyond 32 bits fail), and an
        # interval literal that cannot be built fails only when a row reaches it
        return True
    return not isinstance(node, TOTAL_NODES) and isinstance(node, (exp.Func, exp.Binary, exp.Unary))


#: Where a value is read as a condition: (node type, argument keys). ``x IS TRUE`` / ``IS FALSE`` too.
_CONDITIONS: tuple[tuple[type[exp.Expression], tuple[str, ...]], ...] = (
    (exp.Where, ("this",)),
    (exp.Having, ("this",)),
    (exp.Join, ("on",)),
    (exp.If, ("this",)),  # CASE WHEN cond THEN … and IF(cond, …)
    (exp.Not, ("this",)),
    (exp.And, ("this", "expression")),
    (exp.Or, ("this", "expression")),
)


def _as_condition(value: exp.Expression) -> exp.Expression:
    """``value`` where a boolean is needed: as it is when it is one, else ``TRY_CAST(value AS BOOLEAN)``.

    An engine casts a non-boolean condition per row (a text ``'x'`` fails, ``'true'`` does not), so
    whether the query fails would depend on one row's text; the TRY_CAST makes it NULL instead."""
    if is_boolean(value) or isinstance(value, exp.Null):
        return value
    return exp.TryCast(this=value, to=data_type("BOOLEAN"))


def _total_conditions(node: exp.Expression) -> None:
    for kind, keys in _CONDITIONS:
        if isinstance(node, kind):
            for key in keys:
                value = node.args.get(key)
                if isinstance(value, exp.Expression):
                    node.set(key, _as_condition(value))
    if isinstance(node, exp.Is) and isinstance(node.expression, exp.Boolean):
        node.set("this", _as_condition(node.this))


def make_total(tree: exp.Expression, *, copy: bool = True) -> exp.Expression:
    """A copy of ``tree`` (``tree`` itself with ``copy=False``) in which every partial operation is total
    (post-order, each node on its own)."""

    def visit(node: exp.Expression) -> exp.Expression:
        if node.meta.get(BUILT_TOTAL):
            return node
        targets = _cast_targets(node)  # from the annotated operands, before they are rewritten
        for key, value in list(node.args.items()):
            if isinstance(value, exp.Expression):
                node.set(key, visit(value))
            elif isinstance(value, list):
                node.set(key, [visit(v) if isinstance(v, exp.Expression) else v for v in value])
        _total_conditions(node)
        if any(t is not None for t in targets):
            _cast_operands(node, targets)
        if isinstance(node, (exp.Select, exp.Subquery, exp.From, exp.Join, exp.Where, exp.Group, exp.Having,
                             exp.Order, exp.With, exp.CTE, exp.Limit, exp.Offset)):  # fmt: skip
            return node
        return _total_node(node)

    return visit(copy_tree(tree) if copy else tree)
