"""Pass 1 — parse: one analyst statement to a syntax tree, within size and depth limits, allow-listed.

``parse(sql, limits=...)`` returns the parsed SELECT. Before sqlglot sees the text, a cheap scan
enforces the size limit (bytes) and the nesting limit (bracket depth): sqlglot's parser is recursive
and holds the GIL, so pathological text is refused before it can cost anything. Then exactly one
SELECT/WITH statement is accepted, and every node of its tree must be of an allowed type
(:data:`ALLOWED_NODES`): sqlglot turns unknown syntax into ``Command``/``Anonymous`` nodes rather
than failing, so anything not listed is refused, naming the function as the analyst wrote it.

>>> parse("SELECT COUNT(*) FROM t").sql()
'SELECT COUNT(*) FROM t'
>>> try:
...     parse("SELECT random() FROM t")
... except NotAllowed as exc:
...     exc.message
'function RANDOM is not allowed'
"""

from __future__ import annotations

import itertools
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ErrorLevel, TokenError
from sqlglot.errors import ParseError as SqlglotParseError
from sqlglot.tokens import Token, TokenType

from veil.errors import NotAllowed, ParseError, QueryTooComplex, QueryTooLarge, UndefinedOperator, Unsupported

__all__ = ["ALLOWED_NODES", "DEFAULT_LIMITS", "DIALECT", "Limits", "parse", "table_references"]

#: Analyst SQL is PostgreSQL.
DIALECT = "postgres"


@dataclass(frozen=True)
class Limits:
    """Hard limits checked before parsing."""

    max_bytes: int = 1 << 20  # 1 MiB of UTF-8
    max_depth: int = 64  # nested brackets
    max_tokens: int = 250_000  # `veil serve`: 4,000 (--max-query-tokens)
    max_operator_chain: int = 256  # AND/OR/+/=… in a row at one bracket level
    max_expression_depth: int = 320  # of the parsed tree (chains in nested brackets add up)
    max_table_references: int = 32  # in all scopes, each CTE's counted once per reference (table_references)


#: The limits a session uses unless told otherwise.
DEFAULT_LIMITS = Limits()

#: Statement keywords analysts may never run (reported by name, before parsing).
_FORBIDDEN_STATEMENTS = {
    "INSERT", "UPDATE", "DELETE", "MERGE", "COPY", "ATTACH", "DETACH", "PRAGMA", "SET", "RESET", "CALL",
    "INSTALL", "LOAD", "CREATE", "DROP", "ALTER", "EXPORT", "IMPORT", "USE", "VACUUM", "CHECKPOINT",
    "TRUNCATE", "GRANT", "REVOKE", "BEGIN", "COMMIT", "ROLLBACK", "DESCRIBE", "SHOW", "SUMMARIZE",
    "EXPLAIN", "ANALYZE", "PREPARE", "EXECUTE", "DEALLOCATE", "UNPIVOT", "PIVOT", "FROM", "TABLE", "VALUES",
}  # fmt: skip

#: Aggregate calls (their use is checked by the validate and plan passes).
AGGREGATE_NODES: tuple[type[exp.Expression], ...] = (
    exp.Count, exp.Sum, exp.Avg, exp.Min, exp.Max, exp.Median, exp.Variance, exp.VariancePop, exp.Stddev,
    exp.StddevPop, exp.StddevSamp, exp.Quantile, exp.ApproxQuantile, exp.PercentileCont, exp.PercentileDisc,
    exp.WithinGroup, exp.Filter,
)  # fmt: skip

#: Syntax nodes allowed anywhere (structure and row-level scalar expressions).
ALLOWED_NODES: tuple[type[exp.Expression], ...] = (
    exp.Select, exp.From, exp.Join, exp.Where, exp.Group, exp.Having, exp.Order, exp.Ordered, exp.Limit,
    exp.Offset, exp.Subquery, exp.With, exp.CTE, exp.TableAlias, exp.Table, exp.Identifier, exp.Column,
    exp.Alias, exp.Star, exp.Literal, exp.Boolean, exp.Null, exp.Paren, exp.Distinct, exp.Tuple,
    exp.Add, exp.Sub, exp.Mul, exp.Div, exp.IntDiv, exp.Mod, exp.Neg, exp.Pow,
    exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.NullSafeEQ, exp.NullSafeNEQ, exp.Is, exp.In,
    exp.Between, exp.Like, exp.ILike, exp.And, exp.Or, exp.Not, exp.Case, exp.If, exp.Cast, exp.TryCast,
    exp.DataType, exp.DataTypeParam, exp.Coalesce, exp.Abs, exp.Round, exp.Floor, exp.Ceil, exp.Greatest,
    exp.Least, exp.Sqrt, exp.Ln, exp.Log, exp.Exp, exp.Sign, exp.Lower, exp.Upper, exp.Length, exp.Substring,
    exp.Concat, exp.DPipe, exp.Trim, exp.Extract, exp.Var, exp.Year, exp.Month, exp.Day, exp.DayOfWeek,
    exp.Quarter, exp.TimestampTrunc, exp.DateTrunc, exp.Nullif, exp.StrPosition, exp.Left, exp.Right,
    exp.Replace, exp.Interval, exp.Pi,
    *AGGREGATE_NODES,
)  # fmt: skip

_ALLOWED_TYPES = frozenset(ALLOWED_NODES)

#: Functions sqlglot leaves as ``Anonymous``, allowed by lower-case name (aggregates and aliases).
ANONYMOUS_FUNCTIONS = frozenset({"var", "var_samp", "quantile_cont", "quantile_disc", "std"})

_OPEN = {TokenType.L_PAREN, TokenType.L_BRACKET, TokenType.L_BRACE}
_CLOSE = {TokenType.R_PAREN, TokenType.R_BRACKET, TokenType.R_BRACE}


#: Binary operators by precedence class: a run of one class at one bracket level parses into a tree
#: as deep as the run is long (a looser operator starts the tighter classes' runs again).
_LOGICAL = {TokenType.AND, TokenType.OR}
_COMPARISON_OPS = {TokenType.EQ, TokenType.NEQ, TokenType.LT, TokenType.LTE, TokenType.GT, TokenType.GTE}
_ARITHMETIC = {
    TokenType.PLUS, TokenType.DASH, TokenType.STAR, TokenType.SLASH, TokenType.MOD, TokenType.DPIPE, TokenType.CARET,
    TokenType.AMP, TokenType.PIPE,
}  # fmt: skip
#: Tokens that end an expression (a run of operators starts again after them).
_EXPRESSION_ENDS = {
    TokenType.COMMA, TokenType.SELECT, TokenType.FROM, TokenType.WHERE, TokenType.GROUP_BY, TokenType.HAVING,
    TokenType.ORDER_BY, TokenType.LIMIT, TokenType.OFFSET, TokenType.WHEN, TokenType.THEN, TokenType.ELSE,
    TokenType.END, TokenType.CASE, TokenType.ON, TokenType.UNION, TokenType.SEMICOLON,
}  # fmt: skip


def check_tokens(tokens: Sequence[Token], limits: Limits, *, hint: str = "") -> None:
    """Refuse (QueryTooComplex, free) a statement with more tokens, deeper brackets or longer operator chains than
    ``limits``, before anything parses it: parsing and resolving time grow faster than the query's length (a run
    of 2,500 ``OR`` spent 2.7 s in sqlglot's qualify, red team s23 A2). ``hint`` names the setting that raises a
    limit where there is one (``veil serve`` options)."""
    if len(tokens) > limits.max_tokens:
        raise QueryTooComplex(
            f"the statement has {len(tokens)} tokens, more than the limit of {limits.max_tokens}",
            hint="Shorten it (e.g. GROUP BY a column instead of many OR terms)" + hint,
        )
    depth = deepest = 0
    chains = [[0, 0, 0]]  # per open bracket: logical, comparison, arithmetic operators in a row
    between = [0]  # per open bracket: BETWEENs whose AND is still to come (it joins their bounds, not conditions)
    for tok in tokens:
        kind = tok.token_type
        if kind in _OPEN:
            depth += 1
            deepest = max(deepest, depth)
            chains.append([0, 0, 0])
            between.append(0)
        elif kind in _CLOSE:
            depth -= 1
            if depth < 0:  # no statement closes a bracket it did not open (and later passes assume none does)
                raise ParseError("syntax error at or near ')': it closes no bracket", hint="Check the brackets")
            if len(chains) > 1:
                chains.pop()
                between.pop()
        elif kind in _EXPRESSION_ENDS:
            chains[-1] = [0, 0, 0]
            between[-1] = 0
        elif kind == TokenType.BETWEEN:
            between[-1] += 1
        elif kind == TokenType.AND and between[-1]:
            between[-1] -= 1  # x BETWEEN a AND b: no link of the chain it stands in (red team s25, A5)
        else:
            run = chains[-1]
            if kind in _LOGICAL:
                run[0], run[1], run[2] = run[0] + 1, 0, 0
            elif kind in _COMPARISON_OPS:
                run[1], run[2] = run[1] + 1, 0
            elif kind in _ARITHMETIC:
                run[2] += 1
            else:
                continue
            if max(run) > limits.max_operator_chain:
                raise QueryTooComplex(
                    f"an expression chains more than {limits.max_operator_chain} operators (AND, OR, +, =, …)",
                    hint="Use IN (...) for many alternatives, or GROUP BY a column instead of listing values" + hint,
                )
    if deepest > limits.max_depth:
        raise QueryTooComplex(
            f"the statement nests brackets {deepest} deep, more than the limit of {limits.max_depth}",
            hint="Flatten the expression (e.g. IN (...) or CASE instead of nested brackets)" + hint,
        )


def _check_tree_depth(tree: exp.Expression, limits: Limits) -> None:
    """Refuse a parsed statement deeper than ``limits.max_expression_depth`` (one linear, iterative walk): operator
    chains within brackets nested inside one another stack up (64 brackets × 256 operators), and the later
    passes' work grows with each column's depth."""
    stack: list[tuple[exp.Expression, int]] = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > limits.max_expression_depth:
            raise QueryTooComplex(
                f"the query's expressions nest more than {limits.max_expression_depth} levels deep",
                hint="Split long chains of operators across fewer bracket levels (e.g. IN (...) instead of OR chains)",
            )
        stack.extend((child, depth + 1) for child in node.iter_expressions())


def table_references(tree: exp.Expression) -> int:
    """The relations ``tree`` joins in all its scopes once every CTE is inlined: each table reference (FROM, joins,
    derived tables, subqueries, both sides of a set operation), each reference to a CTE counted as its body's
    references, and a derived table, subquery or CTE over no table as one. Linear in the tree's size (each CTE is
    counted once; Python integers, so CTEs that double one another cannot overflow).

    >>> table_references(sqlglot.parse_one("WITH c AS (SELECT a.k FROM a JOIN b ON a.k = b.k) "
    ...                                    "SELECT COUNT(*) FROM c JOIN c AS d ON c.k = d.k JOIN t ON t.k = c.k"))
    5
    """
    return _references(tree, {})


def _references(tree: exp.Expression, ctes: dict[str, tuple[str, int]]) -> int:
    """:func:`table_references` with ``ctes`` in scope: lower-case name → (the name as resolve binds it: unquoted
    folded to lower case, quoted as written; references). Recurses once per bracketed query (at most
    :attr:`Limits.max_depth` deep), iterates over everything else."""
    total = 0
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, exp.Table):
            # a name that may be a CTE counts as the CTE
            total += max(1, ctes.get(node.name.lower(), ("", 1))[1])
        elif isinstance(node, exp.Subquery):
            total += max(1, _references(node.this, ctes))
        elif isinstance(with_ := node.args.get("with_"), exp.With):  # seen by its later CTEs and the rest of node
            inner = dict(ctes)
            own: set[str] = set()
            for cte in with_.expressions:
                # names that differ only in case (quoted) are two CTEs, and each binder may pick either (red team
                # s29 A2, s31 A1): such a name counts as the larger; only the very same name shadows an outer CTE
                identifier = cte.args["alias"].this
                exact = identifier.name if identifier.quoted else identifier.name.lower()
                key = exact.lower()
                count = _references(cte.this, inner)
                earlier = inner.get(key)
                if earlier is not None and (earlier[0] != exact or key in own):
                    count = max(count, earlier[1])
                inner[key] = (exact, count)
                own.add(key)
            total += sum(_references(child, inner) for child in node.iter_expressions() if child is not with_)
        else:
            stack.extend(node.iter_expressions())
    return total


def _check_table_references(tree: exp.Expression, limits: Limits) -> None:
    """Refuse (QueryTooComplex, free) a statement that joins more relations (:func:`table_references`) than
    ``limits`` allows, before any later pass: the engine's planning time grows much faster than the number of
    relations it joins (red team s26, A1: 200 pinned ``JOIN pub pI ON pI.pk = t.x``, 2,200 tokens, took 17 s to
    run once charged; a derived table of 150 chained self-joins made the free join-factor probe take 7.7 s).
    Measured with DuckDB 2.0 on the shared 2-core host, one small table equi-joined N times on one key, EXPLAIN
    alone: N = 32 → 0.05 s, 64 → 0.15 s, 100 → 0.9 s, 128 → 3 s (chained self-joins alike). Every generated
    statement (the main one, one per quantile, each join-factor probe) plans the joins again, so the limit
    (:attr:`Limits.max_table_references`, 32) keeps each plan near a twentieth of a second."""
    count = table_references(tree)
    if count > limits.max_table_references:
        raise QueryTooComplex(
            f"the query joins {count:,} tables (every FROM, JOIN, derived table and subquery, each CTE counted once "
            f"per reference to it), more than the limit of {limits.max_table_references}",
            hint="Join fewer tables (e.g. join a public table once and select several of its columns, or reference "
            "a CTE fewer times)",
        )


#: Each thread's tokenizer of :data:`DIALECT` (``sqlglot.tokenize`` built one per call, ~40% of a short query's
#: tokenising; one tokenizer runs one ``tokenize`` at a time, so threads do not share one).
_TOKENIZER = threading.local()


def _tokens(sql: str) -> list[sqlglot.tokens.Token]:
    tokenizer = getattr(_TOKENIZER, "tokenizer", None)
    if tokenizer is None:
        tokenizer = _TOKENIZER.tokenizer = Dialect.get_or_raise(DIALECT).tokenizer()
    try:
        tokens = list(tokenizer.tokenize(sql))
        tokenizer.tokenize("")  # it keeps its last text and tokens: an empty one, so it holds nothing of this query
        return tokens
    except TokenError as exc:
        _TOKENIZER.tokenizer = None  # (whatever it kept of the failed text: the next query gets a new one)
        raise ParseError(f"the SQL could not be tokenised: {exc}", hint="Check quotes and brackets") from None
    except BaseException:
        _TOKENIZER.tokenizer = None
        raise


def _check_size(sql: str, limits: Limits) -> None:
    size = len(sql.encode("utf-8", errors="surrogatepass"))
    if size > limits.max_bytes:
        raise QueryTooLarge(
            f"the query is {size} bytes, more than the limit of {limits.max_bytes}",
            hint="Send a shorter query (e.g. group by a column instead of listing many OR terms)",
        )
    if sql.count("(") + sql.count("[") + sql.count("{") <= limits.max_depth:
        return  # no deeper than the opening brackets it holds: within the limit, as the scan below would find
    depth = deepest = 0
    for ch in sql:  # brackets inside string literals count too: a cheap, conservative scan
        if ch in "([{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in ")]}":
            depth -= 1
    if deepest > limits.max_depth:
        raise QueryTooComplex(
            f"the query nests brackets {deepest} deep, more than the limit of {limits.max_depth}",
            hint="Flatten the expression (e.g. use IN (...) or CASE instead of deeply nested brackets)",
        )


#: The most arguments PostgreSQL takes for calls whose sqlglot expression has no slot for one more (sqlglot drops it
#: silently: ``LEFT(city, 1, 2)`` was answered as ``LEFT(city, 1)``, red team s55 A2).
_MAX_ARGUMENTS = {
    "left": 2, "right": 2, "strpos": 2, "floor": 1, "ceil": 1, "ceiling": 1, "length": 1, "substring": 3, "substr": 3,
    "round": 2, "trunc": 2, "abs": 1, "sign": 1, "sqrt": 1, "ln": 1, "exp": 1, "upper": 1, "lower": 1, "lpad": 3,
    "rpad": 3, "replace": 3, "nullif": 2, "mod": 2, "power": 2, "pow": 2, "log": 2, "date_trunc": 3, "date_part": 2,
    "min": 1, "max": 1, "count": 1, "position": 2, "median": 1, "quantile_cont": 2, "quantile_disc": 2,
    "reverse": 1, "md5": 1, "ascii": 1, "chr": 1, "initcap": 1, "cbrt": 1, "degrees": 1, "radians": 1,
}  # fmt: skip


#: Tokens after which a name followed by ``(`` is not a call: an alias's or a CTE's column list (``AS log(a, b)``,
#: ``FROM t exp(a, b)``, ``(VALUES …) abs(a, b)``), a star's ``REPLACE``/``EXCLUDE`` list after another list.
_NOT_BEFORE_A_CALL = {
    TokenType.ALIAS, TokenType.WITH, TokenType.VAR, TokenType.IDENTIFIER, TokenType.R_PAREN, TokenType.NUMBER,
    TokenType.STRING,
}  # fmt: skip
#: Tokens before a ``*`` that make it a star (``SELECT *``, ``t.*``), not a product: ``* REPLACE (…)`` is no call.
_BEFORE_A_STAR = {TokenType.SELECT, TokenType.COMMA, TokenType.DOT, TokenType.DISTINCT, TokenType.ALL, TokenType.L_PAREN}


def _called(tokens: Sequence[Token], paren: int) -> str | None:
    """The listed function (:data:`_MAX_ARGUMENTS`) the ``(`` at ``tokens[paren]`` opens the arguments of, or None."""
    if paren == 0:
        return None
    name_tok = tokens[paren - 1]
    name = name_tok.text.lower()
    if name not in _MAX_ARGUMENTS or name_tok.token_type == TokenType.STRING:
        return None
    if paren >= 2:
        before = tokens[paren - 2].token_type
        if before in _NOT_BEFORE_A_CALL:
            return None
        if before == TokenType.STAR and (paren < 3 or tokens[paren - 3].token_type in _BEFORE_A_STAR):
            return None
    return name


def _check_call_arguments(tokens: Sequence[Token]) -> None:
    """Refuse (42883) a call to one of :data:`_MAX_ARGUMENTS`'s functions with more top-level arguments than PostgreSQL
    takes, counted in the token stream before sqlglot parses (and drops) them: one pass, each bracket's commas counted
    on a stack. A name with a column list before ``AS (`` (a CTE) is no call."""
    names: list[str | None] = []  # per open bracket: the listed function it opens the arguments of, or None
    commas: list[int] = []  # per open bracket: the commas at its level
    for j, tok in enumerate(tokens):
        kind = tok.token_type
        if kind in _OPEN:
            names.append(_called(tokens, j) if kind == TokenType.L_PAREN else None)
            commas.append(0)
        elif kind == TokenType.COMMA and commas:
            commas[-1] += 1
        elif kind in _CLOSE and names:
            name, given = names.pop(), commas.pop() + 1
            if name is None or given <= _MAX_ARGUMENTS[name]:
                continue
            ahead = [t.token_type for t in tokens[j + 1 : j + 3]]
            if ahead == [TokenType.ALIAS, TokenType.L_PAREN]:  # `WITH a AS (…), log(x, y, z) AS (…)`
                continue
            most = _MAX_ARGUMENTS[name]
            raise UndefinedOperator(
                f"function {name}() takes at most {most} argument{'s' if most > 1 else ''}, got {given}",
                hint="See docs/sql.md for each function's arguments",
            )


def _statement_keyword(tokens: list[sqlglot.tokens.Token]) -> str | None:
    for tok in tokens:
        if tok.token_type == TokenType.SEMICOLON:
            continue
        if tok.token_type in _OPEN:
            return "("
        return tok.text.upper()
    return None


def function_name(node: exp.Expression, sql: str, tokens: Sequence[Token] | None = None) -> str:
    """The name the analyst wrote for a function node (``RANDOM``, not sqlglot's ``RAND``; ``NOW``, not
    ``CURRENT_TIMESTAMP``): the called name in the text (its tokens ``tokens``, when known) that parses to the node's
    type."""
    if isinstance(node, exp.Anonymous):
        return str(node.name).upper()
    tokens = _tokens(sql) if tokens is None else tokens
    called = [t.text for t, nxt in itertools.pairwise(tokens) if nxt.token_type == TokenType.L_PAREN]
    for name in dict.fromkeys(called):
        try:
            probe = sqlglot.parse_one(f"SELECT {name}()", read=DIALECT, error_level=ErrorLevel.IGNORE)
        except (SqlglotParseError, TokenError):
            continue
        if isinstance(probe, exp.Select) and probe.expressions and type(probe.expressions[0]) is type(node):
            return name.upper()
    names = [n.upper() for n in (type(node).sql_names() if hasattr(type(node), "sql_names") else [])]
    return names[0] if names else node.key.upper()


#: sqlglot's refusal of a function call with more arguments than its expression holds.
_TOO_MANY_ARGUMENTS = re.compile(r"The number of provided arguments \((\d+)\) is greater than the maximum")
#: The calls sqlglot refuses that way that take one fraction in PostgreSQL (the token pass,
#: :func:`_check_call_arguments`, refuses the calls :data:`_MAX_ARGUMENTS` lists before sqlglot sees them).
_ONE_FRACTION = frozenset({"percentile_cont", "percentile_disc"})
_CALLED = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*\($")


def _called_function(context: str) -> str | None:
    """The name of the innermost call still open at the end of ``context`` (the SQL before sqlglot's error)."""
    depth = 0
    for i in range(len(context) - 1, -1, -1):
        ch = context[i]
        if ch == ")":
            depth += 1
        elif ch == "(":
            if depth == 0:
                m = _CALLED.search(context[: i + 1])
                return m.group(1).lower() if m else None
            depth -= 1
    return None


def _syntax_error(exc: SqlglotParseError) -> ParseError | UndefinedOperator:
    first = exc.errors[0] if exc.errors else {}
    desc = str(first.get("description", "syntax error"))
    too_many = _TOO_MANY_ARGUMENTS.match(desc)
    name = _called_function(str(first.get("start_context") or "")) if too_many else None
    if too_many and name is not None:
        got = int(too_many.group(1))
        if name in _ONE_FRACTION:
            return UndefinedOperator(
                f"function {name}() takes 1 argument (the fraction), got {got}",
                hint=f"Pass one fraction and the column in WITHIN GROUP (ORDER BY …), e.g. {name}(0.5) WITHIN GROUP "
                "(ORDER BY age)",
            )
        return UndefinedOperator(
            f"function {name}() does not take {got} arguments", hint="See docs/sql.md for each function's arguments"
        )
    line, col = first.get("line"), first.get("col")
    near = first.get("highlight") or ""
    where = f" at line {line}, column {col}" if line is not None else ""
    near_txt = f" near {near!r}" if near else ""
    return ParseError(
        f"syntax error{where}{near_txt}: {desc}",
        hint="Check the SQL around that position; Veil accepts PostgreSQL syntax",
    )


def _allow_list(tree: exp.Expression, sql: str, tokens: Sequence[Token]) -> None:
    for node in tree.walk():
        if isinstance(node, exp.Anonymous):
            if str(node.name).lower() in ANONYMOUS_FUNCTIONS:
                continue
            raise NotAllowed(
                f"function {function_name(node, sql, tokens)} is not allowed",
                hint="Use standard aggregates and scalar functions; file and table functions are never allowed",
            )
        if isinstance(node, exp.Command):
            raise NotAllowed(f"statement {node.name!r} is not allowed", hint="Send one SELECT statement")
        if isinstance(node, (exp.Union, exp.Intersect, exp.Except)):
            raise Unsupported(f"set operation {node.key.upper()} is not supported", hint="Run each SELECT as its own query")
        if isinstance(node, exp.Window):
            raise Unsupported("window functions are not supported", hint="Use GROUP BY aggregates")
        # exact node types: a subclass of an allowed node is another construct (CONCAT_WS is a Concat
        # that repeats its separator between every two arguments, so nesting it multiplies one row's text)
        if isinstance(node, exp.Func) and type(node) not in _ALLOWED_TYPES:
            raise NotAllowed(
                f"function {function_name(node, sql, tokens)} is not allowed",
                hint="File readers, table functions and non-deterministic functions are never allowed",
            )
        if type(node) not in _ALLOWED_TYPES:
            raise Unsupported(f"SQL construct {node.key.upper()} is not supported", hint="See docs/sql.md")
        if isinstance(node, exp.Table) and (
            not isinstance(node.this, exp.Identifier) or node.args.get("db") or node.args.get("catalog")
        ):
            raise NotAllowed(
                f"table reference {node.sql(dialect=DIALECT)!r} is not allowed",
                hint="Name a table of the policy, without schema or file path",
            )
        if isinstance(node, exp.With) and node.args.get("recursive"):
            raise Unsupported("WITH RECURSIVE is not supported", hint="Use plain WITH (non-recursive CTEs)")
        if isinstance(node, exp.Join):
            _check_join(node)


def _check_join(join: exp.Join) -> None:
    side = str(join.args.get("side") or "").upper()
    kind = str(join.args.get("kind") or "").upper()
    method = str(join.args.get("method") or "").upper()
    if method or kind in ("SEMI", "ANTI", "ASOF", "POSITIONAL") or side in ("RIGHT", "FULL"):
        what = " ".join(w for w in (method, side, kind) if w) or "this"
        raise Unsupported(f"{what} JOIN is not supported", hint="Use JOIN … ON, CROSS JOIN or LEFT JOIN … ON")
    if kind not in ("", "INNER", "CROSS", "OUTER"):
        raise Unsupported(f"{kind} JOIN is not supported", hint="Use JOIN … ON, CROSS JOIN or LEFT JOIN … ON")


def parse(sql: str, *, limits: Limits = DEFAULT_LIMITS) -> exp.Select:
    """Parse one analyst SELECT; refuse anything else (free, before anything runs)."""
    return parse_tokens(sql, scan(sql, limits=limits), limits=limits)


def scan(sql: str, *, limits: Limits = DEFAULT_LIMITS) -> list[Token]:
    """The first half of :func:`parse`: every check it makes before sqlglot parses, and the tokens it parses (the plan
    cache's front, :func:`veil.proxy.plan_cache.front_lift`, reads them too)."""
    if not isinstance(sql, str) or not sql.strip():
        raise ParseError("the query is empty", hint="Send one SELECT statement")
    _check_size(sql, limits)
    tokens = _tokens(sql)
    check_tokens(tokens, limits)
    keyword = _statement_keyword(tokens)
    if keyword is None:
        raise ParseError("the query is empty", hint="Send one SELECT statement")
    if keyword in _FORBIDDEN_STATEMENTS:
        raise NotAllowed(
            f"{keyword} statements are not allowed",
            hint="Analysts may only run one aggregate SELECT (e.g. SELECT COUNT(*) FROM t)",
        )
    if keyword not in ("SELECT", "WITH", "("):
        raise ParseError(f"syntax error at or near {keyword!r}", hint="Send one SELECT statement")
    _check_call_arguments(tokens)
    return tokens


def parse_tokens(sql: str, tokens: list[Token], *, limits: Limits = DEFAULT_LIMITS) -> exp.Select:
    """The second half of :func:`parse`: ``tokens`` (:func:`scan`'s, of ``sql``) parsed and the tree checked."""
    try:
        # the tokens of the checks above, parsed as they are (one tokenizer pass per query)
        statements = [s for s in Dialect.get_or_raise(DIALECT).parser().parse(tokens, sql) if s is not None]
    except SqlglotParseError as exc:
        raise _syntax_error(exc) from None
    except (TokenError, RecursionError):
        raise ParseError("the SQL could not be parsed", hint="Check quotes and brackets") from None
    if len(statements) != 1:
        raise NotAllowed(f"the query holds {len(statements)} statements", hint="Send exactly one SELECT statement per query")
    tree = statements[0]
    _check_tree_depth(tree, limits)
    _allow_list(tree, sql, tokens)
    _check_table_references(tree, limits)
    if not isinstance(tree, exp.Select):
        raise Unsupported(f"{tree.key.upper()} at the top level is not supported", hint="Send one SELECT statement")
    _forget_meta(tree)
    return tree


def _forget_meta(tree: exp.Expression) -> None:
    """Forget every node's meta data and comments: where it stood in the text (only parse errors cite it;
    every later pass copies the tree several times, and these per-node dicts were a third of each copy's
    cost) and anything the analyst wrote into it. sqlglot reads ``/* sqlglot.meta KEY */`` after a node as
    ``node.meta[KEY] = True``, the very dict that holds Veil's own trust marks (``BUILT_TOTAL``,
    ``CANNOT_RAISE``, ``WIDE_SUM``): an analyst's comment could mark a cast as built total and make a query
    fail on one row (red team s17, A1). Comments never reach generated SQL either."""
    for node in tree.walk():
        node._meta = None
        node.comments = None
