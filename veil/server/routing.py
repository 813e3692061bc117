"""Routing one client statement without parsing it twice.

The wire server must decide, for every statement, whether it is an analyst query (sent to
:class:`veil.proxy.answer.QuerySession`, which parses it), a session or transaction
statement (answered here), or a catalog/system query (answered from the policy schema,
parsed once by sqlglot for the catalog evaluator). That decision only needs sqlglot's
tokenizer (≈4× cheaper than a parse), which also splits simple-query batches on top-level
semicolons and finds ``$n`` placeholders, keeping the client's SQL text byte-for-byte
otherwise (so the answer cache sees the same canonical query).

>>> [r.kind for r in split("BEGIN; SELECT COUNT(*) FROM adult; SHOW veil.budget")]
['tx', 'query', 'show']
>>> bind_parameters("SELECT COUNT(*) FROM t WHERE sex = $1 AND age > $2", ["O'Neil", "30"], [None, 23])
"SELECT COUNT(*) FROM t WHERE sex = 'O''Neil' AND age > 30"
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Protocol

from sqlglot.dialects.postgres import Postgres
from sqlglot.errors import TokenError
from sqlglot.tokens import Token, TokenType

from veil.errors import InputError, ParseError, QueryTooLarge, Unsupported
from veil.proxy.parse import Limits
from veil.proxy.parse import check_tokens as check_query_tokens

__all__ = ["MAX_PARAMETERS", "Route", "bind_parameters", "check_parameter_numbers", "check_tokens", "route", "split"]

_DIALECT = Postgres()

_TX_WORDS = {"BEGIN", "START", "COMMIT", "END", "ROLLBACK", "ABORT", "SAVEPOINT", "RELEASE"}
_SIMPLE_KINDS = {
    "SET": "set",
    "RESET": "reset",
    "DISCARD": "discard",
    "SHOW": "show",
    "DEALLOCATE": "deallocate",
    "DECLARE": "declare",
    "FETCH": "fetch",
    "MOVE": "fetch",
    "CLOSE": "close",
    "UNLISTEN": "unlisten",
}
_EXPANDED_COMMANDS = {"EXPLAIN", "DECLARE", "FETCH", "MOVE"}
_SYSTEM_SCHEMAS = {"pg_catalog", "information_schema"}

# Parameter type OIDs (PostgreSQL's): how a bound value becomes a SQL literal.
_INT_OIDS = {20, 21, 23, 26}
_FLOAT_OIDS = {700, 701, 1700}
_BOOL_OID = 16
_DATE_OID = 1082
_NUMBER_RE = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")
#: The most parameters one statement may have (PostgreSQL's: a Bind message counts them in 16 bits).
MAX_PARAMETERS = 65_535


@dataclass(frozen=True)
class Route:
    """One statement: its text, its tokens, and what kind of statement it is.

    kind is one of ``empty``, ``tx``, ``set``, ``reset``, ``discard``, ``show``, ``deallocate``,
    ``declare``/``fetch``/``close`` (cursors), ``unlisten``, ``explain``, ``system`` (catalog,
    ``veil.*`` or a table-less SELECT: answered without the engine) or ``query`` (an analyst
    query for the DP engine).
    """

    kind: str
    sql: str
    tokens: tuple[Token, ...] = field(default=(), repr=False)

    @property
    def has_parameters(self) -> bool:
        return any(t.token_type == TokenType.PARAMETER for t in self.tokens)


def _tokenize(sql: str) -> list[Token] | None:
    try:
        return _DIALECT.tokenize(sql)
    except TokenError:
        return None


def _classify(sql: str, tokens: Sequence[Token], private_names: frozenset[str]) -> str:
    if not tokens:
        return "empty"
    first = tokens[0].text.upper()
    if first in _TX_WORDS:
        return "tx"
    if first in _SIMPLE_KINDS:
        return _SIMPLE_KINDS[first]
    if first == "EXPLAIN":
        return "explain"
    if first not in {"SELECT", "WITH", "(", "VALUES", "TABLE"}:
        return "query"  # INSERT, COPY, ATTACH, ...: the query path rejects them with the right SQLSTATE
    has_from = False
    for i, tok in enumerate(tokens):
        if tok.token_type == TokenType.FROM:
            has_from = True
        if tok.token_type in (TokenType.STRING, TokenType.NUMBER):
            continue
        word = tok.text.lower()
        if word in _SYSTEM_SCHEMAS:
            return "system"
        if word.startswith("pg_") and word not in private_names:
            return "system"
        if word == "veil" and i + 1 < len(tokens) and tokens[i + 1].token_type == TokenType.DOT:
            return "system"
    return "query" if has_from else "system"


def _expand_commands(sql: str, tokens: list[Token]) -> list[Token] | None:
    """sqlglot tokenizes ``EXPLAIN <rest>`` (and ``DECLARE``, ``FETCH``) as a keyword + one STRING;
    tokenize ``<rest>`` too."""
    out: list[Token] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        out.append(tok)
        if (
            tok.text.upper() in _EXPANDED_COMMANDS
            and (i == 0 or tokens[i - 1].token_type == TokenType.SEMICOLON)
            and i + 1 < len(tokens)
            and tokens[i + 1].token_type == TokenType.STRING
        ):
            start, end = tok.end + 1, tokens[i + 1].end + 1
            inner = _tokenize(sql[start:end])
            if inner is None:
                return None
            out.extend(
                Token(t.token_type, t.text, line=t.line, col=t.col, start=t.start + start, end=t.end + start, comments=t.comments)
                for t in inner
            )
            i += 2
            continue
        i += 1
    return out


class TokenLimits(Protocol):
    max_query_depth: int
    max_query_tokens: int
    max_operator_chain: int


def check_tokens(tokens: Sequence[Token], limits: TokenLimits) -> None:
    """Refuse (54001) a statement with more tokens, deeper brackets or longer operator chains than the server's
    limits, before anything parses it (:func:`veil.proxy.parse.check_tokens`; every query session checks the same)."""
    parse_limits = Limits(
        max_depth=limits.max_query_depth, max_tokens=limits.max_query_tokens, max_operator_chain=limits.max_operator_chain
    )
    check_query_tokens(tokens, parse_limits, hint=", or ask the curator to raise `veil serve`'s limit")


def check_parameter_numbers(tokens: Sequence[Token]) -> None:
    """Refuse a ``$n`` whose number is not plain digits (42601) or is above :data:`MAX_PARAMETERS` (54000), before
    anything reads it: every later reader of ``$n`` (parameter types, counts, binding) may then trust it is small.
    Red team s54 A1: ``LIMIT $10000000`` padded ten million parameter types on the event loop."""
    for i, tok in enumerate(tokens[:-1]):
        nxt = tokens[i + 1]
        if tok.token_type != TokenType.PARAMETER or nxt.token_type != TokenType.NUMBER:
            continue
        text = nxt.text
        if not (text.isascii() and text.isdigit()):
            raise ParseError(f'trailing junk after parameter at or near "${text[:20]}"', hint="Write $1, $2, …")
        if len(text.lstrip("0")) > len(str(MAX_PARAMETERS)) or int(text) > MAX_PARAMETERS:
            raise QueryTooLarge(
                f"parameter ${text[:20]} is out of range: a statement has at most {MAX_PARAMETERS} parameters",
                hint="Number parameters $1, $2, … up to the number bound",
            )


def split(sql: str, private_names: frozenset[str] = frozenset(), limits: TokenLimits | None = None) -> list[Route]:
    """Split a simple-query string into routed statements (empty ones dropped unless all are),
    refusing any that exceeds ``limits`` (:func:`check_tokens`)."""
    tokens = _tokenize(sql)
    if tokens is not None and any(t.text.upper() in _EXPANDED_COMMANDS for t in tokens):
        tokens = _expand_commands(sql, tokens)
    if tokens is None:  # e.g. an unterminated string: let the query path report the position
        return [Route("query", sql.strip())]
    if limits is not None:
        check_tokens(tokens, limits)
    check_parameter_numbers(tokens)
    routes: list[Route] = []
    current: list[Token] = []
    for tok in [*tokens, None]:
        if tok is None or tok.token_type == TokenType.SEMICOLON:
            if current:
                text = sql[current[0].start : current[-1].end + 1]
                routes.append(Route(_classify(text, current, private_names), text, tuple(current)))
            current = []
        else:
            current.append(tok)
    return routes or [Route("empty", "")]


def route(sql: str, private_names: frozenset[str] = frozenset(), limits: TokenLimits | None = None) -> Route:
    """Route one statement (extended protocol: a Parse message holds exactly one)."""
    routes = split(sql, private_names, limits)
    if len(routes) > 1:
        raise ParseError(
            f"a prepared statement holds {len(routes)} statements",
            hint="Send one statement per Parse message",
        )
    return routes[0]


def literal(value: object, oid: int | None) -> str:
    """A bound parameter value (text, as pg-mimic decodes it) as a SQL literal of its type."""
    if value is None:
        return "NULL"
    if isinstance(value, list):
        raise Unsupported("array parameters are not supported", hint="Bind scalar values")
    if oid is None:  # a driver that decoded a typed binary value: its Python type says what it is
        if isinstance(value, bool):
            oid = _BOOL_OID
        elif isinstance(value, int):
            oid = 20
        elif isinstance(value, float):
            oid = 701
        elif isinstance(value, date):
            oid = _DATE_OID
    text = value.isoformat() if isinstance(value, date) else str(value)
    if oid in _INT_OIDS:
        try:
            return str(int(text))
        except ValueError:
            raise InputError(f"parameter {text!r} is not an integer") from None
    if oid in _FLOAT_OIDS:
        if not _NUMBER_RE.match(text.strip()) or not math.isfinite(float(text)):
            raise InputError(f"parameter {text!r} is not a finite number")
        return text.strip()
    if oid == _BOOL_OID:
        return "TRUE" if text.lower() in {"t", "true", "1", "on", "yes"} else "FALSE"
    if oid == _DATE_OID:
        try:
            return f"DATE '{date.fromisoformat(text).isoformat()}'"
        except ValueError:
            raise InputError(f"parameter {text!r} is not a date (YYYY-MM-DD)") from None
    if "\x00" in text:
        raise InputError("a text parameter contains a NUL character")
    return "'" + text.replace("'", "''") + "'"


_COMPARISON = {
    TokenType.EQ,
    TokenType.NEQ,
    TokenType.GT,
    TokenType.GTE,
    TokenType.LT,
    TokenType.LTE,
    TokenType.PLUS,
    TokenType.DASH,
    TokenType.STAR,
    TokenType.SLASH,
    TokenType.BETWEEN,
    TokenType.AND,
}


def _numeric_context(toks: Sequence[Token], i: int, numeric_names: frozenset[str]) -> bool:
    """Whether the placeholder at ``toks[i]`` is compared with a numeric column (``age > $1``,
    ``age BETWEEN $1 AND $2``): what PostgreSQL's type inference would conclude for an
    untyped parameter."""
    j = i - 1
    while j >= 0 and toks[j].token_type in _COMPARISON | {TokenType.NUMBER, TokenType.PARAMETER}:
        j -= 1
    return j >= 0 and j < i - 1 and toks[j].text.lower() in numeric_names


def bind_parameters(
    sql: str,
    params: Sequence[object] | None,
    param_oids: Sequence[int | None] = (),
    tokens: Sequence[Token] | None = None,
    numeric_names: frozenset[str] = frozenset(),
) -> str:
    """Inline ``$n`` placeholders as typed literals; ``params=None`` binds NULLs (for Describe).

    An untyped parameter (OID 0) that looks like a number and is compared with a column named
    in ``numeric_names`` becomes a number, as PostgreSQL would infer; otherwise a string.
    """
    toks = list(tokens) if tokens is not None else _tokenize(sql)
    if not toks:
        return sql
    out: list[str] = []
    pos = 0
    base = toks[0].start if tokens is not None else 0
    for i, tok in enumerate(toks):
        if tok.token_type != TokenType.PARAMETER or i + 1 >= len(toks):
            continue
        nxt = toks[i + 1]
        if nxt.token_type != TokenType.NUMBER or nxt.start != tok.end + 1:
            continue
        index = int(nxt.text) - 1
        if params is None:
            lit = "NULL"
        elif not 0 <= index < len(params):
            raise InputError(f"the query uses ${index + 1} but {len(params)} parameter(s) were bound")
        else:
            oid = param_oids[index] if index < len(param_oids) else None
            value = params[index]
            if (
                oid is None
                and isinstance(value, str)
                and _NUMBER_RE.match(value.strip())
                and _numeric_context(toks, i, numeric_names)
            ):
                oid = 701
            lit = literal(value, oid)
        out.append(sql[pos : tok.start - base])
        out.append(lit)
        pos = nxt.end + 1 - base
    out.append(sql[pos:])
    return "".join(out)
