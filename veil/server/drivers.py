"""What common drivers send that a plain catalog evaluator would get wrong (JDBC lives in :mod:`jdbc`).

- SQLAlchemy: ``select pg_catalog.version()`` (schema-qualified functions),
  ``relkind = ANY (ARRAY['r', 'p', …])`` (sqlglot's executor has no ``ANY``: it becomes ``IN``),
  ``pg_catalog.pg_table_is_visible(oid)`` (every table Veil lists is visible: ``TRUE``);
- asyncpg: its type-introspection query (which sqlglot cannot parse) is answered from pg-mimic's
  type table with the OIDs bound to ``$1``; and the types of ``$n`` parameters in an analyst
  query are inferred from what they are compared with (:func:`parameter_types`), as
  PostgreSQL's planner would, so drivers that encode by declared type (asyncpg) work.

>>> from sqlglot import parse_one
>>> normalise(parse_one("SELECT pg_catalog.version()", dialect="postgres")).sql("postgres")
"SELECT 'PostgreSQL 16.0, Veil'"
>>> normalise(parse_one("SELECT 1 FROM pg_class WHERE relkind = ANY(ARRAY['r', 'v'])", dialect="postgres")).sql("postgres")
"SELECT 1 FROM pg_class WHERE relkind IN ('r', 'v')"
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import sqlglot
from pg_mimic import BOOL, DATE, FLOAT8, INT8, TEXT
from pg_mimic.typeinfo import TypeInfoStatement
from pg_mimic.typeinfo import is_typeinfo_query as _is_typeinfo
from sqlglot import exp
from sqlglot.tokens import Token, TokenType

from veil.server.results import Result

__all__ = ["is_typeinfo_query", "normalise", "parameter_types", "typeinfo", "values_tables"]

#: The type OID of ``oid[]``.
OID_ARRAY = 1028
#: ``pg_catalog.f()`` calls answered as ``f()`` (others are left to the catalog emulation's own rewrite).
_UNQUALIFIED = {"version", "format_type", "pg_table_is_visible", "pg_type_is_visible", "pg_advisory_unlock_all"}
#: format_type() of the OIDs Veil's answers use.
_TYPE_NAMES = {INT8: "bigint", FLOAT8: "double precision", TEXT: "text", BOOL: "boolean", DATE: "date", 23: "integer"}
#: Session functions with nothing to do here (asyncpg's pool reset calls them): they return NULL.
_NO_OPS = {"pg_advisory_unlock_all"}
_ALWAYS_TRUE = {"pg_table_is_visible", "pg_type_is_visible", "pg_function_is_visible", "has_table_privilege"}
#: Veil column type → the OID a parameter compared with it gets.
_PARAM_OIDS = {"int": FLOAT8, "float": FLOAT8, "category": TEXT, "bool": BOOL, "date": DATE}


def is_typeinfo_query(sql: str) -> bool:
    """asyncpg's recursive type-introspection query."""
    return _is_typeinfo(sql)


async def typeinfo(sql: str, params: Sequence[Any]) -> Result:
    """asyncpg's introspection, for the OIDs bound to its ``$1::oid[]``."""
    statement = TypeInfoStatement(sql)
    columns = await statement.describe()
    rows, _ = await statement.bind(list(params)).execute(0)
    return Result(columns, [tuple(r) for r in rows], f"SELECT {len(rows)}")


def normalise(expr: exp.Expression, *, server_version: str = "16.0") -> exp.Expression:
    """A copy of ``expr`` rewritten into what sqlglot's executor evaluates (see the module doc)."""
    expr = expr.copy()
    for dot in list(expr.find_all(exp.Dot)):
        fn = dot.expression
        if (
            isinstance(dot.this, exp.Identifier)
            and dot.this.name.lower() == "pg_catalog"
            and isinstance(fn, exp.Anonymous)
            and str(fn.this).lower() in _UNQUALIFIED
        ):
            if isinstance(fn, exp.Anonymous):  # parse the bare name again: `version` is a known function
                try:
                    fn = exp.func(str(fn.this), *fn.expressions, dialect="postgres")
                except (ValueError, sqlglot.errors.SqlglotError):
                    pass
            dot.replace(fn)
    for node in list(expr.find_all(exp.CurrentVersion)):  # drivers read the major version from it
        node.replace(exp.Literal.string(f"PostgreSQL {server_version}, Veil"))
    for cast in list(expr.find_all(exp.Cast)):  # '25'::pg_catalog.oid (psql's \\gdesc): OIDs are numbers
        target = cast.to.sql(dialect="postgres").lower().replace('"', "") if cast.to else ""
        if target in ("oid", "pg_catalog.oid", "regtype", "pg_catalog.regtype"):
            cast.replace(exp.cast(cast.this.copy(), exp.DataType.build("bigint")))
    for fn in list(expr.find_all(exp.Anonymous)):
        name = str(fn.this).lower()
        if name == "format_type" and fn.expressions:
            cases = exp.Case(this=fn.expressions[0].copy())
            for oid, type_name in _TYPE_NAMES.items():
                cases = cases.when(exp.Literal.number(oid), exp.Literal.string(type_name))
            fn.replace(cases.else_(exp.Literal.string("text")))
        elif name in _ALWAYS_TRUE:
            fn.replace(exp.true())
        elif name in _NO_OPS:
            fn.replace(exp.null())
    for node in list(expr.find_all(exp.EQ)):
        right = node.expression
        if isinstance(right, exp.Any):
            inner = right.this.this if isinstance(right.this, exp.Paren) else right.this
            if isinstance(inner, exp.Array):
                node.replace(exp.In(this=node.this.copy(), expressions=[e.copy() for e in inner.expressions]))
    return expr


def _constant(node: exp.Expression) -> tuple[bool, Any]:
    if isinstance(node, exp.Cast) and node.to is not None and node.to.is_type("bigint", "int"):
        ok, value = _constant(node.this)
        try:
            return (True, int(value)) if ok and value is not None else (ok, value)
        except ValueError:
            return False, None
    if isinstance(node, exp.Literal):
        return True, (str(node.this) if node.is_string else float(node.this) if "." in str(node.this) else int(node.this))
    if isinstance(node, exp.Neg):
        ok, value = _constant(node.this)
        return (True, -value) if ok and isinstance(value, (int, float)) else (False, None)
    if isinstance(node, exp.Null):
        return True, None
    return False, None


def values_tables(expr: exp.Expression) -> tuple[exp.Expression, dict[str, list[dict[str, Any]]]] | None:
    """``FROM (VALUES (…), …) AS s(a, b)`` of constants → a table ``s`` for sqlglot's executor
    (which cannot scan VALUES); psql's ``\\gdesc`` sends this. None when there is none to inline."""
    found = [v for v in expr.find_all(exp.Values) if v.args.get("alias") is not None]
    if not found:
        return None
    expr = expr.copy()
    tables: dict[str, list[dict[str, Any]]] = {}
    for values in [v for v in expr.find_all(exp.Values) if v.args.get("alias") is not None]:
        alias = values.args["alias"]
        name, columns = alias.name, [c.name for c in alias.columns]
        rows = []
        for tup in values.expressions:
            items = tup.expressions if isinstance(tup, exp.Tuple) else [tup]
            pairs = [_constant(v) for v in items]
            if len(items) != len(columns) or not all(ok for ok, _ in pairs):
                return None
            rows.append({c: v for c, (_, v) in zip(columns, pairs, strict=True)})
        tables[name] = rows
        values.replace(exp.Table(this=exp.to_identifier(name)))
    return expr, tables


_COMPARE = {
    TokenType.EQ,
    TokenType.NEQ,
    TokenType.GT,
    TokenType.GTE,
    TokenType.LT,
    TokenType.LTE,
    TokenType.BETWEEN,
    TokenType.AND,
    TokenType.IN,
    TokenType.L_PAREN,
    TokenType.COMMA,
    TokenType.PLUS,
    TokenType.DASH,
    TokenType.STAR,
    TokenType.SLASH,
}


def parameter_types(tokens: Sequence[Token], column_types: Mapping[str, str]) -> dict[int, int]:
    """``{n: oid}`` for the ``$n`` placeholders whose type the query implies: the Veil type of the
    column a placeholder is compared with (``age > $1``, ``sex IN ($1, $2)``, ``x BETWEEN $1 AND $2``),
    bigint after ``LIMIT``/``OFFSET``; unlisted ones stay unknown (the driver then sends text)."""
    out: dict[int, int] = {}
    toks = list(tokens)
    for i, tok in enumerate(toks[:-1]):
        nxt = toks[i + 1]
        if tok.token_type != TokenType.PARAMETER or nxt.token_type != TokenType.NUMBER:
            continue
        n = int(nxt.text)
        if i > 0 and toks[i - 1].text.upper() in ("LIMIT", "OFFSET"):
            out[n] = INT8
            continue
        j = i - 1
        while j >= 0 and (toks[j].token_type in _COMPARE or toks[j].token_type in (TokenType.NUMBER, TokenType.PARAMETER)):
            j -= 1
        if j >= 0 and j < i - 1:
            vtype = column_types.get(toks[j].text.lower())
            if vtype in _PARAM_OIDS:
                out[n] = _PARAM_OIDS[vtype]
                continue
        # `$1 < age`: look right
        k = i + 2
        while k < len(toks) and toks[k].token_type in _COMPARE and toks[k].token_type not in (TokenType.AND, TokenType.COMMA):
            k += 1
        if k > i + 2 and k < len(toks):
            vtype = column_types.get(toks[k].text.lower())
            if vtype in _PARAM_OIDS:
                out[n] = _PARAM_OIDS[vtype]
    return out
