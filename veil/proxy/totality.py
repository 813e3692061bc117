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

from veil.engines.neutral import is_boolean

__all__ = ["TOTAL_NODES", "make_total"]

#: Node types that never raise on operands of one type family (checked by the validate pass).
TOTAL_NODES: tuple[type[exp.Expression], ...] = (
    exp.Column, exp.Literal, exp.Boolean, exp.Null, exp.Paren, exp.Identifier, exp.Star, exp.DataType,
    exp.DataTypeParam, exp.Var, exp.Alias, exp.TableAlias, exp.Table, exp.Tuple,
    exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.NullSafeEQ, exp.NullSafeNEQ, exp.Is, exp.In,
    exp.Between, exp.And, exp.Or, exp.Not, exp.Case, exp.If, exp.Coalesce, exp.Nullif, exp.Greatest,
    exp.Least, exp.Lower, exp.Upper, exp.Length, exp.Trim, exp.Concat, exp.DPipe, exp.Pi, exp.TryCast,
    exp.Try, exp.Interval, exp.Extract, exp.Year, exp.Month, exp.Day, exp.DayOfWeek, exp.Quarter,
    exp.Distinct, exp.Ordered, exp.Filter,
    exp.Count, exp.Sum, exp.Avg, exp.Min, exp.Max,
)  # fmt: skip

_DIVISIONS = (exp.Div, exp.IntDiv, exp.Mod)
_INTEGER = re.compile(r"[0-9]+")


def _total_node(node: exp.Expression) -> exp.Expression:
    """``node`` (whose children are already total) in a total form."""
    if isinstance(node, exp.Cast):
        to = node.args["to"]
        out = exp.TryCast(this=node.this, to=to)
        if isinstance(to, exp.DataType) and to.this in (exp.DataType.Type.DECIMAL, exp.DataType.Type.BIGDECIMAL):
            # rounded and range-checked as the DECIMAL, then used as a DOUBLE (see number literals)
            return exp.TryCast(this=out, to=exp.DataType.build("DOUBLE"))
        return out
    if isinstance(node, exp.Literal) and not node.is_string and not _INTEGER.fullmatch(str(node.this)):
        # a DECIMAL literal makes the arithmetic around it fixed-point, which overflows (even in a
        # comparison, by the common-type cast) at magnitudes that depend on the data: use DOUBLE
        return exp.Cast(this=node, to=exp.DataType.build("DOUBLE"))
    if isinstance(node, _DIVISIONS):
        divisor = node.expression
        node.set("expression", exp.Nullif(this=divisor, expression=exp.Literal.number(0)))
        return exp.Try(this=node)
    if isinstance(node, TOTAL_NODES) or not isinstance(node, (exp.Func, exp.Binary, exp.Unary)):
        return node
    return exp.Try(this=node)


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
    return exp.TryCast(this=value, to=exp.DataType.build("BOOLEAN"))


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
        for key, value in list(node.args.items()):
            if isinstance(value, exp.Expression):
                node.set(key, visit(value))
            elif isinstance(value, list):
                node.set(key, [visit(v) if isinstance(v, exp.Expression) else v for v in value])
        _total_conditions(node)
        if isinstance(node, (exp.Select, exp.Subquery, exp.From, exp.Join, exp.Where, exp.Group, exp.Having,
                             exp.Order, exp.With, exp.CTE, exp.Limit, exp.Offset)):  # fmt: skip
            return node
        return _total_node(node)

    return visit(tree.copy() if copy else tree)
