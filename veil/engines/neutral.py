"""Engine-neutral SQL: generated trees rewritten so that every engine gives the same answer.

``sqlglot.transpile`` renders a tree in any dialect without error, but not always with the same
meaning. The rewrite pass runs :func:`neutralise` over every generated tree (after
:func:`~veil.proxy.totality.make_total`) so the meaning is fixed *before* an engine renders it:

* ``LOG(x)`` is base 10 (PostgreSQL, DuckDB) but the natural log in Spark: it becomes ``LOG(10, x)``
  (``LN`` stays explicit);
* ``EXTRACT(DOW FROM d)`` is 0–6 with Sunday = 0 in PostgreSQL and DuckDB, 1–7 in Spark: it becomes
  :class:`sqlglot.exp.DayOfWeek`, which each engine renders as 0–6, Sunday = 0;
* a boolean used as a number (``SUM(age > 40)``, ``AVG(married)``, a predicate inside Veil's clamp
  ``CASE``) is cast to an integer — Spark refuses booleans in arithmetic;
* integer arithmetic runs in BIGINT: an integer literal is a 32-bit INTEGER on both engines (``1000000 * 1000000``
  overflows), so when no operand of ``+ - * % //``, unary minus or ``ABS`` is a BIGINT for certain the first is cast
  to one (:func:`_widen`);
* an integer ``SUM`` sums ``DECIMAL(38,0)``: DuckDB widens to HUGEINT itself, Spark errors (ANSI on)
  or wraps silently (ANSI off) on 64-bit overflow;
* a real number cast to an integer is rounded (PostgreSQL, DuckDB); Spark would truncate: the cast
  reads ``CAST(ROUND(x) AS …)``;
* a text value (not a literal) cast to DATE or TIMESTAMP casts only the texts of one ISO subset
  (:data:`ISO_TIME_TEXT`), which every engine reads alike; any other text is NULL (DuckDB drops an offset
  Spark applies, and each reads texts such as ``'infinity'``, ``'2020-1-1'`` or ``'2000-01-01 24:00'``
  where the other answers NULL: red team s45);
* divisions already divide by ``NULLIF(b, 0)`` (:mod:`veil.proxy.totality`): ``x / 0`` is NULL on
  every engine, never an error.

>>> import sqlglot
>>> sql = "SELECT SUM(x > 1), LOG(x), EXTRACT(DOW FROM d) FROM t"
>>> neutralise(sqlglot.parse_one(sql, read="postgres")).sql(dialect="duckdb")
'SELECT SUM(CAST(CAST(x > 1 AS INT) AS DECIMAL(38, 0))), LOG(10, x), DAYOFWEEK(d) FROM t'
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, TypeVar

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect

__all__ = [
    "CANNOT_RAISE",
    "ISO_TIME_LONGEST",
    "ISO_TIME_TEXT",
    "TIME_CAST_TARGETS",
    "TIME_GUARD_NODES",
    "TIME_TEXT",
    "WIDE_SUM",
    "copy_tree",
    "data_type",
    "duckdb_text",
    "guard_time_text",
    "is_boolean",
    "is_integral",
    "is_real",
    "narrow_sums",
    "neutralise",
]

_DUCKDB = Dialect.get_or_raise("duckdb")
E = TypeVar("E", bound=exp.Expression)


def copy_tree(root: E) -> E:
    """A deep copy of ``root``, as ``root.copy()`` makes it, except that each node's inferred type (``_type``,
    set by type annotation, never part of the tree) is shared, not copied.

    ``Expression.copy`` deep-copies every node's type through :mod:`copy`: about 60% of the time of
    each of the ~10 copies a query's passes make of its trees. Nothing modifies a type in place (sqlglot and
    Veil only assign a node a new one), so sharing it is equal to copying it. Comments and meta data (Veil's
    trust marks, whose values are booleans) are copied, so marking the copy never marks the original. A tree
    whose root has no type (not annotated) is copied by ``Expression.copy``, faster for such trees.
    """
    if root._type is None:
        return root.copy()
    new_root = root.__class__()
    stack: list[tuple[exp.Expression, exp.Expression]] = [(root, new_root)]
    while stack:
        node, new = stack.pop()
        if node.comments is not None:
            new.comments = list(node.comments)
        if node._type is not None:
            new._type = node._type
        if node._meta is not None:
            new._meta = dict(node._meta)
        if node._hash is not None:
            new._hash = node._hash
        for key, value in node.args.items():
            if isinstance(value, exp.Expression):
                child = value.__class__()
                stack.append((value, child))
                new.set(key, child)
            elif type(value) is list:
                new.args[key] = []
                for v in value:
                    if isinstance(v, exp.Expression):
                        child = v.__class__()
                        stack.append((v, child))
                        new.append(key, child)
                    else:
                        new.append(key, v)
            else:
                new.args[key] = value
    return new_root


@lru_cache(maxsize=128)
def _parsed_type(text: str) -> exp.DataType:
    return exp.DataType.build(text)


def data_type(text: str) -> exp.DataType:
    """``exp.DataType.build(text)``, a new node each call, with ``text`` parsed once: ``build`` parses its text
    through a new parser at every call (0.1–0.5 ms; Veil builds a few casts to fixed types per query)."""
    return _parsed_type(text).copy()


def duckdb_text(node: exp.Expression, **opts: Any) -> str:
    """``node.sql(dialect="duckdb", **opts)`` through one shared dialect (``sql()`` builds a new
    dialect at every call; the query path generates text ~20 times per query), generating from a
    :func:`copy_tree` of ``node`` (the generator may modify the tree it renders)."""
    return _DUCKDB.generate(copy_tree(node), copy=False, **opts)


#: Marks the cast of an integer SUM's argument to DECIMAL(38,0) (engines that widen natively drop it).
WIDE_SUM = "veil_wide_sum"
#: Marks an operation or cast Veil builds over values that cannot make it fail (clamped values, booleans,
#: public columns): the raising-work price (veil.proxy.expansion) skips it.
CANNOT_RAISE = "veil_cannot_raise"
#: Marks the ``REGEXP_EXTRACT`` that guards a text cast to a date (:func:`guard_time_text`): it matches at most
#: :data:`ISO_TIME_LONGEST` characters, so an engine may read only the first ``ISO_TIME_LONGEST + 1``.
TIME_TEXT = "veil_time_text"

_WIDE = "DECIMAL(38, 0)"
#: EXTRACT parts that mean the 0–6, Sunday = 0 day of the week.
_DOW_PARTS = frozenset({"DOW", "DAYOFWEEK", "WEEKDAY"})
#: Aggregates and scalar functions whose arguments are numbers.
_NUMERIC_CONSUMERS: tuple[type[exp.Expression], ...] = (
    exp.Sum, exp.Avg, exp.Min, exp.Max, exp.Variance, exp.VariancePop, exp.Stddev, exp.StddevPop,
    exp.StddevSamp, exp.Median, exp.Quantile, exp.PercentileCont, exp.PercentileDisc,
    exp.Add, exp.Sub, exp.Mul, exp.Div, exp.IntDiv, exp.Mod, exp.Pow, exp.Neg, exp.Abs, exp.Round,
    exp.Floor, exp.Ceil, exp.Sign, exp.Sqrt, exp.Ln, exp.Log, exp.Exp,
)  # fmt: skip
_COMPARISONS: tuple[type[exp.Expression], ...] = (
    exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.NullSafeEQ, exp.NullSafeNEQ,
)  # fmt: skip
_INT_TYPES = (*exp.DataType.INTEGER_TYPES,)

#: The texts a cast to DATE or TIMESTAMP reads, the same on every engine (checked on DuckDB and Spark, casts to
#: both types, against 24,000 texts: offsets, zone names, BC, signs, one-digit fields, hour 24, second 60, seven
#: fraction digits, leading and trailing white space, ``T``/``t``): ``YYYY-MM-DD``, then optionally ``T`` or one
#: space and ``HH:MM``, ``:SS``, a fraction of up to six digits. Fields in range; a day past its month's end (Feb
#: 30) fits and is NULL on both. Python's ``re`` reads it as RE2 (DuckDB) and Java (Spark) do (``fullmatch``).
ISO_TIME_TEXT = (
    r"[0-9]{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])"
    r"(?:[T ](?:[01][0-9]|2[0-3]):[0-5][0-9](?::[0-5][0-9](?:[.][0-9]{1,6})?)?)?"
)
#: The longest text :data:`ISO_TIME_TEXT` matches (``2000-01-01 12:00:00.123456``).
ISO_TIME_LONGEST = 26
#: The guard's pattern in SQL: anchored at both ends of the text (``\z``, not ``$``: Java's ``$`` also matches
#: before a final line break); no capture group (RE2 finds a whole match twice as fast without one).
_ISO_TIME_SQL = rf"^{ISO_TIME_TEXT}\z"
#: The cast targets whose text operand gets the guard, and the nodes the guard adds around it
#: (``NULLIF(REGEXP_EXTRACT(value, pattern), '')``): the rewrite pass's size bound counts them.
TIME_CAST_TARGETS = (exp.DataType.Type.DATE, exp.DataType.Type.TIMESTAMP, exp.DataType.Type.DATETIME)
TIME_GUARD_NODES = 4
#: Nodes whose value is a text when they are (whatever type annotation could tell).
_TEXT_FUNCTIONS: tuple[type[exp.Expression], ...] = (
    exp.Lower, exp.Upper, exp.Trim, exp.Substring, exp.Left, exp.Right, exp.Replace, exp.Concat, exp.DPipe,
)  # fmt: skip


def _unparen(node: exp.Expression) -> exp.Expression:
    while isinstance(node, exp.Paren):
        node = node.this
    return node


def _branches(node: exp.Expression) -> list[exp.Expression]:
    """The value branches of a CASE / IF / COALESCE-like node (NULL branches left out)."""
    if isinstance(node, exp.Case):
        out = [i.args.get("true") for i in node.args.get("ifs") or []] + [node.args.get("default")]
    elif isinstance(node, exp.If):
        out = [node.args.get("true"), node.args.get("false")]
    elif isinstance(node, (exp.Coalesce, exp.Greatest, exp.Least)):
        out = [node.this, *node.expressions]
    elif isinstance(node, exp.Nullif):
        out = [node.this]
    else:
        return []
    return [b for b in out if b is not None and not isinstance(_unparen(b), exp.Null)]


def is_boolean(node: exp.Expression) -> bool:
    """Is ``node`` a boolean-valued expression (a predicate, a bool column, a CASE of booleans)?"""
    n = _unparen(node)
    if isinstance(n, exp.If) and isinstance(n.parent, exp.Case):
        return False  # a WHEN … THEN … clause, not a value
    if isinstance(n, (exp.Predicate, exp.Connector, exp.Not, exp.Boolean)):
        return True
    if isinstance(n, (exp.Cast, exp.TryCast)):
        return n.to.is_type(exp.DataType.Type.BOOLEAN)
    if isinstance(n, (exp.Case, exp.If, exp.Coalesce, exp.Greatest, exp.Least, exp.Nullif)):
        branches = _branches(n)
        return bool(branches) and all(is_boolean(b) for b in branches)
    if isinstance(n, exp.Try):
        return is_boolean(n.this)
    if not isinstance(n, exp.Column):
        return False  # arithmetic and functions are numbers, text or dates (whatever a lenient annotation says)
    t = n.type
    return t is not None and t.is_type(exp.DataType.Type.BOOLEAN)


def is_integral(node: exp.Expression) -> bool:
    """Is ``node`` an integer-valued expression (booleans cast to integers count)?"""
    n = _unparen(node)
    if isinstance(n, exp.Literal):
        return not n.is_string and n.is_int
    if isinstance(n, (exp.Cast, exp.TryCast)):
        return n.to.is_type(*_INT_TYPES)
    if isinstance(n, exp.Try):
        return is_integral(n.this)
    if isinstance(n, (exp.Case, exp.If, exp.Coalesce, exp.Greatest, exp.Least, exp.Nullif)):
        branches = _branches(n)
        return bool(branches) and all(is_integral(b) or is_boolean(b) for b in branches)
    if isinstance(n, (exp.Add, exp.Sub, exp.Mul, exp.Mod, exp.IntDiv)):
        return is_integral(n.this) and is_integral(n.expression)
    if isinstance(n, (exp.Neg, exp.Abs, exp.Sign)):
        return is_integral(n.this)
    if isinstance(n, (exp.Round, exp.Floor, exp.Ceil)):
        return is_integral(n.this)  # the engine keeps an integer's type whatever the digits
    if isinstance(n, exp.Column):
        t = n.type
        return t is not None and t.is_type(*_INT_TYPES)
    return False


#: Integer operations that overflow in the type of their operands.
_INTEGER_ARITHMETIC: tuple[type[exp.Expression], ...] = (exp.Add, exp.Sub, exp.Mul, exp.IntDiv, exp.Mod, exp.Neg, exp.Abs)


def _bigint(node: exp.Expression) -> bool:
    """Is ``node`` (an integer-valued expression) a BIGINT for certain, once :func:`_widen` has run below it?"""
    n = _unparen(node)
    while isinstance(n, exp.Try):
        n = _unparen(n.this)
    if isinstance(n, (exp.Cast, exp.TryCast)):
        return n.to.is_type(exp.DataType.Type.BIGINT)
    if isinstance(n, exp.Column):
        return n.type is not None and n.type.is_type(exp.DataType.Type.BIGINT)
    if isinstance(n, (exp.Neg, exp.Abs)):
        return _bigint(n.this)
    return isinstance(n, _INTEGER_ARITHMETIC)  # binary integer arithmetic, widened


def _widen(node: exp.Expression) -> None:
    """Integer arithmetic in BIGINT: when no operand is a BIGINT for certain, the first is cast to one (the engine
    brings the other to the wider type). An integer literal is an INTEGER (32 bits), and ``1000000 * 1000000`` would
    overflow, which the engine's TRY makes NULL, where the interval analysis (64 bits, below ±2^62) takes the exact
    value; an analyst's ``CAST(… AS INT)``, SIGN (TINYINT) and a boolean as a number are narrow too."""
    if isinstance(node, (exp.Neg, exp.Abs)):
        operands = [node.this]
    elif isinstance(node, exp.Binary):
        operands = [node.this, node.expression]
    else:
        return
    if not all(is_integral(o) for o in operands) or any(_bigint(o) for o in operands):
        return
    op = operands[0]
    if len(operands) == 1 and isinstance(_unparen(op), exp.Literal):
        return  # -1 cannot overflow
    cast = exp.Cast(this=op.copy(), to=data_type("BIGINT"))
    cast.meta[CANNOT_RAISE] = True  # a narrower integer as a BIGINT
    op.replace(cast)


_REAL_TYPES = (*exp.DataType.REAL_TYPES,)


def is_real(node: exp.Expression) -> bool:
    """Is ``node`` a non-integer number (DOUBLE, DECIMAL, a division, a root …)?"""
    n = _unparen(node)
    if isinstance(n, exp.Literal):
        return not n.is_string and not n.is_int
    if isinstance(n, (exp.Cast, exp.TryCast)):
        return n.to.is_type(*_REAL_TYPES)
    if isinstance(n, exp.Try):
        return is_real(n.this)
    if isinstance(n, (exp.Div, exp.Sqrt, exp.Ln, exp.Log, exp.Exp, exp.Pow, exp.Pi, exp.Avg)):
        return True
    if isinstance(n, (exp.Add, exp.Sub, exp.Mul, exp.Mod)):
        return is_real(n.this) or is_real(n.expression)
    if isinstance(n, (exp.Neg, exp.Abs, exp.Sign, exp.Round, exp.Floor, exp.Ceil)):
        return is_real(n.this)
    if isinstance(n, (exp.Case, exp.If, exp.Coalesce, exp.Greatest, exp.Least, exp.Nullif)):
        return any(is_real(b) for b in _branches(n))
    t = n.type
    return t is not None and t.is_type(*_REAL_TYPES)


def _whole(node: exp.Expression) -> bool:
    """Is ``node`` a real that is already a whole number (ROUND without digits, FLOOR, CEIL)?"""
    n = _unparen(node)
    while isinstance(n, exp.Try):
        n = _unparen(n.this)
    return isinstance(n, (exp.Floor, exp.Ceil)) or (isinstance(n, exp.Round) and n.args.get("decimals") is None)


def _numeric_context(node: exp.Expression) -> bool:
    """Is ``node`` (a boolean expression) used where a number is expected?"""
    child: exp.Expression = node
    parent = node.parent
    while isinstance(parent, exp.Paren):
        child, parent = parent, parent.parent
    if parent is None:
        return False
    if isinstance(parent, _NUMERIC_CONSUMERS):
        return True
    if isinstance(parent, exp.Between):
        return not all(is_boolean(parent.args[k]) for k in ("this", "low", "high") if parent.args.get(k) is not None)
    if isinstance(parent, _COMPARISONS):
        other = parent.expression if child is parent.this else parent.this
        return not is_boolean(other) and not isinstance(_unparen(other), exp.Null)
    if isinstance(parent, exp.In):
        return not all(is_boolean(e) for e in [parent.this, *parent.expressions])
    holder = parent.parent if isinstance(parent, exp.If) and isinstance(parent.parent, exp.Case) else parent
    if isinstance(holder, (exp.Case, exp.If, exp.Coalesce, exp.Greatest, exp.Least, exp.Nullif)):
        if isinstance(parent, exp.If) and child is parent.this and isinstance(holder, exp.Case):
            return False  # a WHEN condition
        if isinstance(holder, exp.If) and child is holder.this:
            return False
        return any(not is_boolean(b) for b in _branches(holder))
    return False


def _is_text(node: exp.Expression) -> bool:
    """Is ``node`` a text-valued expression (a text column, literal or function, a CASE choosing texts)?"""
    n = _unparen(node)
    while isinstance(n, exp.Try):
        n = _unparen(n.this)
    if isinstance(n, exp.Literal):
        return n.is_string
    if isinstance(n, exp.RegexpExtract):
        return False  # a guard already built (never an analyst's: not an allowed function)
    t = n.type
    if t is not None and t.this not in (exp.DataType.Type.UNKNOWN, exp.DataType.Type.NULL):
        return t.is_type(*exp.DataType.TEXT_TYPES)
    if isinstance(n, _TEXT_FUNCTIONS):
        return True
    return any(_is_text(b) for b in _branches(n))


def guard_time_text(cast: exp.Cast) -> None:
    """``cast`` (a text value to DATE or TIMESTAMP) reads only the texts of :data:`ISO_TIME_TEXT`: the value becomes
    ``NULLIF(REGEXP_EXTRACT(value, '^…\\z'), '')``, its whole match (group 0: DuckDB's default, the Spark render
    names it), or NULL when it does not match (an empty text would be a failing cast, ten times dearer than NULL).

    The value is not copied (nested casts stay linear), and the guard never raises. It reads the text in place of the
    cast, which now reads at most 26 characters (the guard at most 27 on Spark): on DuckDB (one thread) a text
    outside the subset costs about a tenth of the plain cast (which failed on it), a text of the subset the match
    (0.3–0.7 µs) more than the cast; the price (:func:`veil.proxy.totality.converts`) counts the cast.

    The one reading of a text as a date: :func:`neutralise` puts it on the casts of the query path, the bounded copy
    (:func:`veil.proxy.bounding.build_tree`) on its cast of a declared date column stored as text."""
    guard = exp.RegexpExtract(this=cast.this, expression=exp.Literal.string(_ISO_TIME_SQL))
    guard.meta[CANNOT_RAISE] = True
    guard.meta[TIME_TEXT] = True
    cast.set("this", exp.Nullif(this=guard, expression=exp.Literal.string("")))


def _as_int(node: exp.Expression) -> exp.Expression:
    cast = exp.Cast(this=node, to=data_type("INT"))
    cast.meta[CANNOT_RAISE] = True  # a boolean as 0/1
    return cast


def neutralise(tree: exp.Expression) -> exp.Expression:
    """``tree`` with the meaning of every engine-dependent construct fixed (modified in place and returned)."""
    # DuckDB's ILIKE takes its generic, quadratic matcher even for a constant pattern; LIKE over LOWER does not
    for node in list(tree.find_all(exp.ILike)):
        node.replace(exp.Like(this=exp.Lower(this=node.this), expression=exp.Lower(this=node.expression)))
    for node in list(tree.find_all(exp.Log, exp.Extract)):
        if isinstance(node, exp.Log) and node.args.get("expression") is None:
            node.replace(exp.Log(this=exp.Literal.number(10), expression=node.this))
        elif isinstance(node, exp.Extract) and str(node.this.name).upper() in _DOW_PARTS:
            node.replace(exp.DayOfWeek(this=node.expression))
    # a real cast to an integer rounds (PostgreSQL, DuckDB); Spark would truncate
    for node in list(tree.find_all(exp.Cast, exp.TryCast)):
        if node.to.is_type(*_INT_TYPES) and is_real(node.this) and not _whole(node.this):
            node.set("this", exp.Round(this=node.this))
        elif node.to.is_type(*TIME_CAST_TARGETS) and _is_text(node.this) and not isinstance(_unparen(node.this), exp.Literal):
            guard_time_text(node)  # a literal is the same on every row: the validate pass writes it in ISO form
    # deepest first: an outer cast then copies the inner ones
    targets = [n for n in tree.walk() if not isinstance(n.parent, exp.Paren) and is_boolean(n) and _numeric_context(n)]
    for n in reversed(targets):
        n.replace(_as_int(n.copy()))
    for n in list(tree.find_all(*_INTEGER_ARITHMETIC, bfs=False))[::-1]:  # deepest first
        _widen(n)
    for s in list(tree.find_all(exp.Sum)):
        arg = s.this
        if arg is not None and is_integral(arg):
            wide = exp.Cast(this=arg, to=data_type(_WIDE))
            wide.meta[WIDE_SUM] = True
            s.set("this", wide)
    return tree


def narrow_sums(tree: exp.Expression) -> exp.Expression:
    """``tree`` without the ``DECIMAL(38,0)`` widening of integer sums, for engines that widen themselves.

    DuckDB's ``SUM(BIGINT)`` is a HUGEINT (no overflow below 2¹²⁷), about 10× faster than a DECIMAL sum.
    """
    for node in list(tree.find_all(exp.Cast)):
        if node.meta.get(WIDE_SUM):
            node.replace(node.this)
    return tree
