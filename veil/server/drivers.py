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
'SELECT VERSION()'
>>> normalise(parse_one("SELECT 1 FROM pg_class WHERE relkind = ANY(ARRAY['r', 'v'])", dialect="postgres")).sql("postgres")
"SELECT 1 FROM pg_class WHERE relkind IN ('r', 'v')"
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pg_mimic import BOOL, DATE, FLOAT8, INT8, TEXT
from pg_mimic.typeinfo import TypeInfoStatement
from pg_mimic.typeinfo import is_typeinfo_query as _is_typeinfo
from sqlglot import exp
from sqlglot.tokens import Token, TokenType

from veil.server.results import Result

__all__ = ["is_typeinfo_query", "normalise", "parameter_types", "typeinfo"]

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


def normalise(expr: exp.Expression) -> exp.Expression:
    """A copy of ``expr`` rewritten into what sqlglot's executor evaluates (see the module doc)."""
    expr = expr.copy()
    for dot in list(expr.find_all(exp.Dot)):
        if (
            isinstance(dot.this, exp.Identifier)
            and dot.this.name.lower() == "pg_catalog"
            and isinstance(dot.expression, exp.Func)
        ):
            dot.replace(dot.expression)
    for fn in list(expr.find_all(exp.Anonymous)):
        if str(fn.this).lower() in _ALWAYS_TRUE:
            fn.replace(exp.true())
    for node in list(expr.find_all(exp.EQ)):
        right = node.expression
        if isinstance(right, exp.Any):
            inner = right.this.this if isinstance(right.this, exp.Paren) else right.this
            if isinstance(inner, exp.Array):
                node.replace(exp.In(this=node.this.copy(), expressions=[e.copy() for e in inner.expressions]))
    return expr


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
