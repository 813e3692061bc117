"""Interval arithmetic over row-level expressions, following columns through CTEs and subqueries.

The interval of an aggregate's argument is computed from the declared bounds of the base columns
it reads; the engine SQL then clamps the argument itself to that interval (see
:mod:`veil.proxy.plan`), so every value aggregated lies inside it whatever the data holds. That
interval gives the aggregate its sensitivity.

>>> Interval(Fraction(-1), Fraction(2)) * Interval(Fraction(3), Fraction(4))
Interval(lo=Fraction(-4, 1), hi=Fraction(8, 1), integral=True, nullable=False)
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from fractions import Fraction

from sqlglot import exp
from sqlglot.optimizer.scope import Scope, traverse_scope

from veil.engines.neutral import CANNOT_RAISE, copy_tree, data_type
from veil.errors import InternalError, Unbounded
from veil.proxy.catalog import Catalog

__all__ = [
    "IntegralRange", "Interval", "base_columns", "expression_interval", "in_doubles", "mark_arithmetic_that_cannot_raise",
    "may_be_null", "own_joins",
    "resolve_column",
]  # fmt: skip


class IntegralRange(Unbounded):
    """An integer sub-expression can leave ±2^62: :func:`in_doubles` computes it in DOUBLE instead."""


_INT_TYPES = {"TINYINT", "SMALLINT", "INT", "INTEGER", "BIGINT", "HUGEINT", "UBIGINT", "UINTEGER"}
_INTEGER_TEXT = re.compile(r"[0-9]+")
_NUM_TYPES = _INT_TYPES | {"DOUBLE", "FLOAT", "REAL", "DECIMAL", "NUMERIC", "DOUBLE PRECISION"}


@dataclass(frozen=True)
class Interval:
    """Every non-NULL value lies in [lo, hi] (an integer when ``integral``); ``nullable``: the engine may answer NULL
    on some row (:func:`may_be_null`; not part of equality)."""

    lo: Fraction
    hi: Fraction
    integral: bool = True
    nullable: bool = field(default=False, compare=False)

    def __add__(self, o: Interval) -> Interval:
        return Interval(self.lo + o.lo, self.hi + o.hi, self.integral and o.integral, self.nullable or o.nullable)

    def __sub__(self, o: Interval) -> Interval:
        return Interval(self.lo - o.hi, self.hi - o.lo, self.integral and o.integral, self.nullable or o.nullable)

    def __mul__(self, o: Interval) -> Interval:
        c = [self.lo * o.lo, self.lo * o.hi, self.hi * o.lo, self.hi * o.hi]
        return Interval(min(c), max(c), self.integral and o.integral, self.nullable or o.nullable)

    def __neg__(self) -> Interval:
        return Interval(-self.hi, -self.lo, self.integral, self.nullable)

    def union(self, o: Interval | None) -> Interval:
        if o is None:
            return self
        return Interval(min(self.lo, o.lo), max(self.hi, o.hi), self.integral and o.integral, self.nullable or o.nullable)

    def or_null(self, nullable: bool = True) -> Interval:
        """This interval, NULL on some rows too when ``nullable``."""
        return Interval(self.lo, self.hi, self.integral, self.nullable or nullable)

    @property
    def magnitude(self) -> Fraction:
        """max |x| over the interval (the sensitivity of a SUM per contributed row)."""
        return max(abs(self.lo), abs(self.hi))

    @property
    def mid(self) -> Fraction:
        return (self.lo + self.hi) / 2

    @property
    def half_width(self) -> Fraction:
        return (self.hi - self.lo) / 2


def _approx(v: Fraction) -> str:
    """A short text for a possibly huge magnitude (never overflows a float)."""
    bits = (abs(v.numerator) // v.denominator).bit_length()  # not str(): Python refuses ints of > 4,300 digits
    return f"{float(v):.3g}" if bits < 997 else f"1e{int((bits - 1) * math.log10(2))}"


def _point(v: Fraction) -> Interval:
    return Interval(v, v, v.denominator == 1)


def _frac(x: float) -> Fraction:
    return Fraction(x) if not isinstance(x, Fraction) else x


def resolve_column(col: exp.Column, scope: Scope) -> tuple[str, exp.Expression | None, Scope | None, str | None]:
    """Follow ``col`` one step: ("table", None, None, table_name) for a base table column,
    ("derived", expression, inner_scope, None) for a CTE/subquery output column."""
    source = scope.sources.get(col.table)
    if isinstance(source, exp.Table):
        return "table", None, None, source.name
    if isinstance(source, Scope):
        for sel in source.expression.selects:
            if sel.alias_or_name == col.name:
                return "derived", sel.unalias(), source, None
    raise Unbounded(f"column {col.sql()} could not be traced to a table", hint="Name columns explicitly in CTEs")


def base_columns(expr: exp.Expression, scope: Scope) -> set[tuple[str, str]]:
    """The base (table, column) pairs an expression reads, through CTEs and subqueries."""
    out: set[tuple[str, str]] = set()
    for col in expr.find_all(exp.Column):
        kind, inner, inner_scope, table = resolve_column(col, scope)
        if kind == "table":
            out.add((str(table), col.name))
        elif inner is not None and inner_scope is not None:
            out |= base_columns(inner, inner_scope)
    return out


def expression_interval(expr: exp.Expression, scope: Scope, catalog: Catalog) -> Interval | None:
    """Bounds of a row-level numeric expression; None when it is always NULL. Raises Unbounded."""
    return _iv(expr, scope, catalog, expr)


def may_be_null(node: exp.Expression, scope: Scope, catalog: Catalog) -> bool:
    """Whether the engine may answer NULL for ``node`` (an expression :func:`expression_interval` bounds) on some row:
    a column (the bounded copy keeps NULLs; an outer join makes them), NULL, NULLIF, a CASE without ELSE, a
    predicate, a remainder by a range that holds 0 (``NULLIF(b, 0)``), a square root of a real (rounding may take it
    below 0, which the engine's TRY makes NULL), a cast whose value may not fit its target, or anything over such an
    operand (COALESCE, GREATEST and LEAST only when every operand may be NULL). Integer arithmetic within the caps
    cannot overflow: the engine computes it in 64 bits (:func:`veil.engines.neutral.neutralise`)."""
    iv = _iv(node, scope, catalog, node)
    return iv is None or iv.nullable


def in_doubles(expr: exp.Expression) -> exp.Expression:
    """``expr`` with every operand of ``+ - * ^`` and unary minus cast to DOUBLE (no 64-bit overflow)."""

    def to_double(node: exp.Expression) -> exp.Expression:
        cast = exp.Cast(this=node, to=data_type("DOUBLE"))
        cast.meta[CANNOT_RAISE] = True  # a number as a DOUBLE cannot fail
        return cast

    def visit(node: exp.Expression) -> exp.Expression:
        if isinstance(node, (exp.Add, exp.Sub, exp.Mul)):
            node.set("this", to_double(node.this))
            node.set("expression", to_double(node.expression))
        elif isinstance(node, (exp.Pow, exp.Neg)):
            node.set("this", to_double(node.this))
        return node

    return copy_tree(expr).transform(visit, copy=False)


def _unbounded(node: exp.Expression, whole: exp.Expression, why: str) -> Unbounded:
    return Unbounded(
        f"cannot bound {whole.sql(dialect='postgres')!r}: {why}",
        hint="Aggregate bounded numeric columns (declared with lower/upper in the policy) through "
        "+, -, *, / by a constant, CASE, LEAST/GREATEST, ABS, ROUND; see docs/sql.md",
    )


Rule = Callable[[exp.Expression, Scope, Catalog, exp.Expression], "Interval | None"]


#: Largest magnitude any integral sub-expression may reach: products and sums of BIGINTs below it
#: never overflow the engine's 64-bit integers (the engine sums into 128 bits).
MAX_INTEGRAL = Fraction(2**62)
#: Largest magnitude any other sub-expression may reach: squares (variance) and sums of any
#: realistic number of rows stay finite doubles, and every bound converts to a Python float.
MAX_REAL = Fraction(10**150)
MAX_BIGINT = Fraction(2**63 - 1)


def _iv(node: exp.Expression, scope: Scope, catalog: Catalog, whole: exp.Expression) -> Interval | None:
    """Dispatch on the node's type through :data:`_RULES` (most specific class first).

    Every sub-expression's range must stay within :data:`MAX_INTEGRAL` / :data:`MAX_REAL`, so the
    engine can evaluate it on any row of the bounded copy without overflowing: an overflow would be
    an error (or an infinity) that depends on a person's value. Wider ranges are refused, before
    anything is charged.
    """
    for cls in type(node).__mro__:
        rule = _RULES.get(cls)
        if rule is not None:
            out = rule(node, scope, catalog, whole)
            if (
                out is not None
                and (node is whole or not isinstance(node, exp.Literal))  # a constant alone cannot overflow
                and out.magnitude > (MAX_INTEGRAL if out.integral else MAX_REAL)
            ):
                cap = "2^62" if out.integral else "1e150"
                what = node.sql(dialect="postgres")
                err = _unbounded(node, whole, f"{what!r} can reach ±{_approx(out.magnitude)}, beyond ±{cap}")
                if out.integral and out.magnitude <= MAX_REAL:
                    raise IntegralRange(err.message, hint=err.hint)
                raise err
            return out
    raise _unbounded(node, whole, f"{node.key.upper()} has no interval rule")


def _args(node: exp.Expression, scope: Scope, catalog: Catalog, whole: exp.Expression, *keys: str) -> list[Interval] | None:
    """Intervals of the named arguments; None when any is always NULL (the result is then NULL too)."""
    out = []
    for key in keys:
        iv = _iv(node.args[key], scope, catalog, whole)
        if iv is None:
            return None
        out.append(iv)
    return out


def _unwrap_rule(node: exp.Expression, scope: Scope, catalog: Catalog, whole: exp.Expression) -> Interval | None:
    return _iv(node.this, scope, catalog, whole)


def _null_rule(node: exp.Expression, scope: Scope, catalog: Catalog, whole: exp.Expression) -> Interval | None:
    return None


def _boolean_rule(node: exp.Expression, scope: Scope, catalog: Catalog, whole: exp.Expression) -> Interval | None:
    # a comparison with a NULL operand is NULL (its operands need not be numbers: not followed); IS … never is
    return Interval(Fraction(0), Fraction(1), True, not isinstance(node, exp.Is))


def _bool_literal_rule(node: exp.Expression, scope: Scope, catalog: Catalog, whole: exp.Expression) -> Interval | None:
    return _point(Fraction(int(bool(node.this))))


def _literal_rule(node: exp.Expression, scope: Scope, catalog: Catalog, whole: exp.Expression) -> Interval | None:
    if not isinstance(node, exp.Literal) or node.is_string:
        raise _unbounded(node, whole, f"{node.sql()} is text")
    text = str(node.this)
    try:
        exponent = Decimal(text).adjusted()
    except InvalidOperation:
        raise _unbounded(node, whole, f"{text!r} is not a number") from None
    if abs(exponent) > 400:  # far beyond every cap (and too costly to hold exactly)
        raise _unbounded(node, whole, f"the literal {text} is out of range")
    value = Fraction(text)
    if text.isdigit():  # an integer literal: BIGINT up to 2^63 − 1 (a constant cannot overflow)
        if value > MAX_BIGINT:
            raise _unbounded(node, whole, f"the integer literal {text} does not fit in 64 bits")
        return Interval(value, value, True)
    return Interval(value, value, False)  # a DOUBLE (see veil.proxy.totality)


def _pi_rule(node: exp.Expression, scope: Scope, catalog: Catalog, whole: exp.Expression) -> Interval | None:
    return Interval(Fraction(math.pi) - Fraction(1, 10**9), Fraction(math.pi) + Fraction(1, 10**9), False)


def _column_rule(node: exp.Expression, scope: Scope, catalog: Catalog, whole: exp.Expression) -> Interval | None:
    if not isinstance(node, exp.Column):
        raise InternalError(f"column rule applied to {node.key}")
    kind, inner, inner_scope, table = resolve_column(node, scope)
    if kind == "derived":
        if inner is None or inner_scope is None:
            raise InternalError("a derived column without its expression")
        iv = _iv(inner, inner_scope, catalog, whole)
        return None if iv is None else iv.or_null()  # an outer join makes NULLs too
    return _base_column(node, str(table), whole, catalog).or_null()  # the bounded copy keeps NULLs


def _base_column(node: exp.Column, table: str, whole: exp.Expression, catalog: Catalog) -> Interval:
    t = catalog.tables[table]
    if t.spec is None or t.public or node.name not in t.spec.columns:
        raise _unbounded(node, whole, f"column {node.name!r} of public table {table!r} has no declared bounds")
    spec = t.spec.columns[node.name]
    if spec.type == "bool":
        return Interval(Fraction(0), Fraction(1), True)
    if spec.type not in ("int", "float") or not spec.bounded:
        raise _unbounded(node, whole, f"column {table}.{node.name} has no declared lower/upper bounds")
    if spec.lower is None or spec.upper is None:
        raise InternalError(f"column {table}.{node.name} is bounded without both bounds")
    return Interval(_frac(spec.lower), _frac(spec.upper), spec.type == "int")


def _neg_rule(node: exp.Expression, scope: Scope, catalog: Catalog, whole: exp.Expression) -> Interval | None:
    a = _iv(node.this, scope, catalog, whole)
    return None if a is None else -a


def _arith_rule(node: exp.Expression, scope: Scope, catalog: Catalog, whole: exp.Expression) -> Interval | None:
    ab = _args(node, scope, catalog, whole, "this", "expression")
    if ab is None:
        return None
    a, b = ab
    return a + b if isinstance(node, exp.Add) else a - b if isinstance(node, exp.Sub) else a * b


def _div_rule(node: exp.Expression, scope: Scope, catalog: Catalog, whole: exp.Expression) -> Interval | None:
    ab = _args(node, scope, catalog, whole, "this", "expression")
    if ab is None:
        return None
    a, b = ab
    if b.lo <= 0 <= b.hi:
        raise _unbounded(node, whole, "the divisor's range contains 0")
    c = [a.lo / b.lo, a.lo / b.hi, a.hi / b.lo, a.hi / b.hi]
    lo, hi = min(c), max(c)
    nullable = a.nullable or b.nullable
    if isinstance(node, exp.IntDiv):
        return Interval(Fraction(math.floor(lo)), Fraction(math.ceil(hi)), True, nullable)
    return Interval(lo, hi, False, nullable)


def _mod_rule(node: exp.Expression, scope: Scope, catalog: Catalog, whole: exp.Expression) -> Interval | None:
    ab = _args(node, scope, catalog, whole, "this", "expression")
    if ab is None:
        return None
    a, b = ab
    m = b.magnitude
    lo = Fraction(0) if a.lo >= 0 else -m
    hi = Fraction(0) if a.hi <= 0 else m
    # the engine divides by NULLIF(b, 0)
    return Interval(lo, hi, a.integral and b.integral, a.nullable or b.nullable or b.lo <= 0 <= b.hi)


def _abs_rule(node: exp.Expression, scope: Scope, catalog: Catalog, whole: exp.Expression) -> Interval | None:
    a = _iv(node.this, scope, catalog, whole)
    if a is None:
        return None
    lo = Fraction(0) if a.lo <= 0 <= a.hi else min(abs(a.lo), abs(a.hi))
    return Interval(lo, a.magnitude, a.integral, a.nullable)


def _sqrt_rule(node: exp.Expression, scope: Scope, catalog: Catalog, whole: exp.Expression) -> Interval | None:
    a = _iv(node.this, scope, catalog, whole)
    if a is None:
        return None
    if a.lo < 0:
        raise _unbounded(node, whole, "SQRT of a range that includes negative numbers")
    # a real rounded just below 0 makes the engine's SQRT raise (NULL under TRY); ABS and integers cannot
    rounded = not a.integral and not isinstance(node.this.unnest(), exp.Abs)
    return Interval(_frac(math.sqrt(a.lo)), _frac(math.sqrt(a.hi)) + Fraction(1, 10**9), False, a.nullable or rounded)


def _pow_rule(node: exp.Expression, scope: Scope, catalog: Catalog, whole: exp.Expression) -> Interval | None:
    ab = _args(node, scope, catalog, whole, "this", "expression")
    if ab is None:
        return None
    a, b = ab
    if b.lo != b.hi or b.lo.denominator != 1 or not 0 <= b.lo <= 8:
        raise _unbounded(node, whole, "only small constant integer powers are supported")
    out = _point(Fraction(1))
    for _ in range(int(b.lo)):
        out = out * a
    if int(b.lo) % 2 == 0 and int(b.lo) > 0:  # an even power is non-negative
        out = Interval(Fraction(0) if a.lo <= 0 <= a.hi else out.lo, out.hi, out.integral)
    return out.or_null(a.nullable)


def _constant_integer(node: exp.Expression | None) -> int | None:
    """The value of an integer literal, negated or not (``2``, ``-1``); None for anything else."""
    if node is None:
        return None
    node = node.unnest()
    sign = 1
    while isinstance(node, exp.Neg):
        sign, node = -sign, node.this.unnest()
    if isinstance(node, exp.Literal) and not node.is_string and _INTEGER_TEXT.fullmatch(str(node.this)):
        return sign * int(str(node.this))
    return None


def _round_rule(node: exp.Expression, scope: Scope, catalog: Catalog, whole: exp.Expression) -> Interval | None:
    """ROUND / FLOOR / CEIL to ``d`` digits: within [floor(lo), ceil(hi)] for ``d ≥ 0``; for ``d < 0`` the engine rounds
    to a multiple of 10^−d (``ROUND(7.25, -1)`` is 10), so the interval widens to the enclosing multiples."""
    a = _iv(node.this, scope, catalog, whole)
    if a is None:
        return None
    decimals = node.args.get("decimals")
    digits = 0 if decimals is None else _constant_integer(decimals)
    if digits is None:
        d = _iv(decimals, scope, catalog, whole)
        if d is None:
            return None  # ROUND(x, NULL) is NULL
        a = a.or_null(d.nullable)
        digits = math.floor(d.lo)
        if digits >= 0:
            digits = 1  # some positive number of digits: not an integer
    if digits < 0:
        if -digits > 400:
            raise _unbounded(node, whole, "ROUND to a negative number of digits beyond -400")
        q = Fraction(10) ** -digits
        return Interval(Fraction(math.floor(a.lo / q)) * q, Fraction(math.ceil(a.hi / q)) * q, True, a.nullable)
    return Interval(Fraction(math.floor(a.lo)), Fraction(math.ceil(a.hi)), digits == 0, a.nullable)


def _sign_rule(node: exp.Expression, scope: Scope, catalog: Catalog, whole: exp.Expression) -> Interval | None:
    a = _iv(node.this, scope, catalog, whole)
    return None if a is None else Interval(Fraction(-1), Fraction(1), True, a.nullable)


def _pick_rule(node: exp.Expression, scope: Scope, catalog: Catalog, whole: exp.Expression) -> Interval | None:
    """COALESCE, GREATEST and LEAST skip a NULL operand, so an operand that may be NULL (:func:`may_be_null`: a column,
    an operation that is NULL where the engine's TRY catches an error, a cast that does not fit) counts only where it is
    there: GREATEST's lower end is that of the operands that are never NULL (the least operand's when every one may
    be), LEAST's upper end likewise; COALESCE takes the hull of its operands up to the first that is never NULL."""
    ivs = [iv for e in [node.this, *node.expressions] if (iv := _iv(e, scope, catalog, whole)) is not None]
    if not ivs:
        return None
    integral = all(iv.integral for iv in ivs)
    nullable = all(iv.nullable for iv in ivs)
    if isinstance(node, exp.Coalesce):
        out = ivs[0]
        for iv in ivs[1:]:
            if not out.nullable:
                break
            out = iv.union(out.or_null(False)).or_null(iv.nullable)
        return out
    sure = [iv for iv in ivs if not iv.nullable]
    if isinstance(node, exp.Greatest):
        lo = max(iv.lo for iv in sure) if sure else min(iv.lo for iv in ivs)
        return Interval(lo, max(iv.hi for iv in ivs), integral, nullable)
    hi = min(iv.hi for iv in sure) if sure else max(iv.hi for iv in ivs)
    return Interval(min(iv.lo for iv in ivs), hi, integral, nullable)


def _nullif_rule(node: exp.Expression, scope: Scope, catalog: Catalog, whole: exp.Expression) -> Interval | None:
    a = _iv(node.this, scope, catalog, whole)
    return None if a is None else a.or_null()


def _branches_rule(node: exp.Expression, scope: Scope, catalog: Catalog, whole: exp.Expression) -> Interval | None:
    if isinstance(node, exp.Case):
        branches = [i.args.get("true") for i in node.args.get("ifs", [])] + [node.args.get("default")]
    else:
        branches = [node.args.get("true"), node.args.get("false")]
    out: Interval | None = None
    null_branch = False  # a missing ELSE, a NULL branch: NULL on the rows that take it
    for b in branches:
        iv = None if b is None else _iv(b, scope, catalog, whole)
        if iv is None:
            null_branch = True
        else:
            out = iv if out is None else out.union(iv)
    return None if out is None else out.or_null(null_branch)


#: The integer types a cast may target, with the magnitude of their most negative value (a value outside their range
#: is NULL: every cast is a TRY_CAST, :mod:`veil.proxy.totality`).
_INT_LIMITS = {"TINYINT": 2**7, "SMALLINT": 2**15, "INT": 2**31, "INTEGER": 2**31, "BIGINT": 2**63, "HUGEINT": 2**127}
#: The largest finite FLOAT (REAL): a larger value does not convert (NULL).
_FLOAT_MAX = Fraction((2 - 2**-23) * 2**127)
#: DECIMAL without a precision is DECIMAL(18, 3) (DuckDB).
_DECIMAL_DEFAULT = (18, 3)


def _cast_target(node: exp.Expression) -> str:
    to_node = node.args.get("to")
    return str(to_node.this.value if isinstance(to_node, exp.DataType) else "").upper()


def _decimal_shape(node: exp.Expression) -> tuple[int, int]:
    """(precision, scale) of a cast to DECIMAL."""
    to_node = node.args.get("to")
    params = [_constant_integer(p.this) for p in to_node.expressions] if isinstance(to_node, exp.DataType) else []
    if not params or any(v is None for v in params):
        return _DECIMAL_DEFAULT
    precision = int(params[0] or 0)
    return precision, int(params[1] or 0) if len(params) > 1 else 0


def _cast_interval(node: exp.Expression, a: Interval) -> tuple[Interval, bool]:
    """The interval of a cast of a value in ``a`` (as the engine casts: an integer rounds, a DECIMAL rounds to its
    scale, a FLOAT to 24 bits) and whether some value of ``a`` does not fit the target (the TRY_CAST is NULL)."""
    to = _cast_target(node)
    if to == "BOOLEAN":
        return Interval(Fraction(0), Fraction(1), True), False
    if to in _INT_TYPES:
        out = Interval(Fraction(math.floor(a.lo)), Fraction(math.ceil(a.hi)), True)
        limit = _INT_LIMITS.get(to)
        unsigned = to.startswith("U")
        fits = (out.lo >= 0 if unsigned else limit is None or out.lo >= -limit) and (limit is None or out.hi <= limit - 1)
        return out, not fits
    if to in ("DECIMAL", "NUMERIC"):
        precision, scale = _decimal_shape(node)
        q = Fraction(10) ** scale
        out = Interval(Fraction(math.floor(a.lo * q)) / q, Fraction(math.ceil(a.hi * q)) / q, False)
        return out, out.magnitude >= Fraction(10) ** (precision - scale)
    if to in ("FLOAT", "REAL"):
        slack = Fraction(1, 2**23)
        out = Interval(a.lo - abs(a.lo) * slack, a.hi + abs(a.hi) * slack, False)
        return out, a.magnitude > _FLOAT_MAX
    return Interval(a.lo, a.hi, False), False


def _cast_rule(node: exp.Expression, scope: Scope, catalog: Catalog, whole: exp.Expression) -> Interval | None:
    a = _iv(node.this, scope, catalog, whole)
    to = _cast_target(node)
    if to not in _NUM_TYPES and to != "BOOLEAN":
        raise _unbounded(node, whole, f"cast to {to} is not numeric")
    if a is None:
        return None
    out, misfits = _cast_interval(node, a)
    return out.or_null(a.nullable or misfits)


#: Interval rule per node type; :func:`_iv` uses the most specific class in the node's MRO.
_RULES: dict[type[exp.Expression], Rule] = {
    exp.Paren: _unwrap_rule,
    exp.Alias: _unwrap_rule,
    exp.Null: _null_rule,
    exp.Boolean: _bool_literal_rule,
    exp.Literal: _literal_rule,
    exp.Pi: _pi_rule,
    exp.Column: _column_rule,
    exp.Predicate: _boolean_rule,
    exp.Connector: _boolean_rule,
    exp.Not: _boolean_rule,
    exp.Neg: _neg_rule,
    exp.Add: _arith_rule,
    exp.Sub: _arith_rule,
    exp.Mul: _arith_rule,
    exp.Div: _div_rule,
    exp.IntDiv: _div_rule,
    exp.Mod: _mod_rule,
    exp.Abs: _abs_rule,
    exp.Sqrt: _sqrt_rule,
    exp.Pow: _pow_rule,
    exp.Round: _round_rule,
    exp.Floor: _round_rule,
    exp.Ceil: _round_rule,
    exp.Sign: _sign_rule,
    exp.Greatest: _pick_rule,
    exp.Least: _pick_rule,
    exp.Coalesce: _pick_rule,
    exp.Nullif: _nullif_rule,
    exp.Case: _branches_rule,
    exp.If: _branches_rule,
    exp.Cast: _cast_rule,
    exp.TryCast: _cast_rule,
}


#: Integer arithmetic whose every result is within this magnitude cannot overflow the engine's INTEGER.
_SAFE_INTEGRAL = Fraction(2**31 - 1)
_ARITH = (exp.Add, exp.Sub, exp.Mul, exp.Neg)
#: Targets a wide value (a private number column, BIGINT or DOUBLE in the bounded copy, or arithmetic over such
#: values and literals) is cast to without failing, given the magnitude its interval must stay within (None: any).
_WIDE_TARGETS: dict[exp.DataType.Type, Fraction | None] = {
    exp.DataType.Type.BIGINT: Fraction(2**62), exp.DataType.Type.INT128: Fraction(2**62),
    exp.DataType.Type.DOUBLE: None, exp.DataType.Type.FLOAT: Fraction(10**38),
    **{t: None for t in exp.DataType.TEXT_TYPES},
}  # fmt: skip


def _wide(node: exp.Expression, scope: Scope, catalog: Catalog) -> bool | None:
    """True for a value of a 64-bit type for certain (a private int or float column of a base table — BIGINT or
    DOUBLE in the bounded copy — or ``+ - *`` and unary minus over such values and literals, at least one of
    them such a value); None for a number literal (DuckDB gives it the other operand's type: SMALLINT * 200 is a
    SMALLINT); False for anything else (a cast, CASE, a function — SIGN is a TINYINT, ROUND of a BIGINT a
    BIGINT —, a CTE or derived column, a public column): its type is not known here."""
    node = node.unnest()
    if isinstance(node, exp.Literal):
        return None if not node.is_string else False
    if isinstance(node, exp.Column):
        source = scope.sources.get(node.table)
        if not isinstance(source, exp.Table):
            return False
        t = catalog.tables.get(source.name)
        if t is None or t.spec is None or t.public or node.name not in t.spec.columns:
            return False
        return t.spec.columns[node.name].type in ("int", "float")
    if isinstance(node, _ARITH):
        kinds = [_wide(child, scope, catalog) for child in (node.this, node.args.get("expression")) if child is not None]
        return all(k is not False for k in kinds) and any(k is True for k in kinds)
    return False


def mark_arithmetic_that_cannot_raise(tree: exp.Expression, catalog: Catalog, mark: str) -> int:
    """Set ``meta[mark]`` on the nodes of ``tree`` that cannot fail on any row of the bounded copy, so the
    raising-work price skips them: each ``+``, ``-``, ``*`` and unary minus over wide values (:func:`_wide`:
    64-bit for certain) and literals whose result the declared bounds keep within ±(2³¹ − 1) (integers) or
    ±10¹⁵⁰ (reals) — the columns are clamped to those bounds, so it cannot overflow — and each cast of such a
    value to BIGINT, HUGEINT, DOUBLE, FLOAT or text. Anything whose engine type is not certain here (narrow
    casts, CASE, functions, CTE columns: red team s13, A1) stays priced. Returns how many were marked."""
    marked = 0
    for scope in traverse_scope(tree):
        inner = {id(s.expression) for s in (*scope.subquery_scopes, *scope.derived_table_scopes, *scope.cte_scopes)}
        for node in scope.expression.find_all(*_ARITH, exp.Cast):
            if in_inner_scope(node, scope.expression, inner) or node.meta.get(mark):
                continue
            if isinstance(node, exp.Cast):
                to = node.args.get("to")
                if isinstance(to, exp.DataType) and to.this in _WIDE_TARGETS and _wide(node.this, scope, catalog):
                    # the value must fit the target too: arithmetic reaches ±10¹⁵⁰, REAL holds ±3.4·10³⁸ (red team s14)
                    limit = _WIDE_TARGETS[to.this]
                    try:
                        iv = None if limit is None else expression_interval(node.this, scope, catalog)
                    except Unbounded:
                        continue
                    if limit is None or iv is None or iv.magnitude <= limit:
                        node.meta[mark] = True
                        marked += 1
                continue
            if not _wide(node, scope, catalog):
                continue
            try:
                iv = expression_interval(node, scope, catalog)
            except Unbounded:
                continue
            if iv is None or iv.magnitude <= (_SAFE_INTEGRAL if iv.integral else MAX_REAL):
                node.meta[mark] = True
                marked += 1
    return marked


def in_inner_scope(node: exp.Expression, top: exp.Expression, inner: set[int]) -> bool:
    """Whether ``node`` lies in a nested scope of ``top`` (measured when that scope's turn comes)."""
    parent = node.parent
    while parent is not None and parent is not top:
        if id(parent) in inner:
            return True
        parent = parent.parent
    return False


def own_joins(sel: exp.Expression) -> list[exp.Join]:
    """Every join of ``sel``'s own FROM clause, wherever it is written: its ``joins``, and those of bracketed joins
    nested in its sources (``FROM (a JOIN b ON …)``, ``a JOIN (b JOIN c ON …) ON …``: sqlglot parses a bracketed join
    as a ``Subquery`` around the first table, which carries the ``joins``), but not those of subqueries, which are
    scopes of their own. Every per-query bound that reads a SELECT's joins reads them through this (red team s71 F1:
    ``sel.args["joins"]`` alone missed a bracketed join and its ON condition)."""
    found: list[exp.Join] = []
    stack: list[exp.Expression] = [sel]
    while stack:
        node = stack.pop()
        for child in node.iter_expressions():
            if isinstance(child, (exp.Select, exp.SetOperation)):
                continue  # another scope: checked on its own
            if isinstance(child, exp.Join):
                found.append(child)
            stack.append(child)
    return found
