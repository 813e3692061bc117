"""Pass 1: parse, refuse everything but one SELECT, allow-list the syntax tree, qualify names.

``analyze(sql, catalog)`` returns an :class:`Analysis` holding the qualified tree. Every rejection
is a typed :class:`~veil.errors.QueryRejected` raised before anything runs or is charged.

>>> from veil.proxy.catalog import Catalog, CatalogTable
>>> cat = Catalog({"t": CatalogTable("t", {"age": "int"}, None, False)})
>>> analyze("SELECT COUNT(*) FROM t", cat).private_table
't'
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.errors import OptimizeError, TokenError
from sqlglot.errors import ParseError as SqlglotParseError
from sqlglot.optimizer.qualify import qualify
from sqlglot.optimizer.scope import Scope, build_scope, traverse_scope
from sqlglot.tokens import TokenType

from veil.errors import NotAllowed, ParseError, QueryRejected, UnknownColumn, UnknownTable, Unsupported, did_you_mean
from veil.proxy.catalog import Catalog

__all__ = ["AGGREGATE_NAMES", "Analysis", "aggregate_name", "analyze"]

DIALECT = "postgres"

#: Statement keywords analysts may never run (reported by name, before parsing).
_FORBIDDEN_STATEMENTS = {
    "INSERT", "UPDATE", "DELETE", "MERGE", "COPY", "ATTACH", "DETACH", "PRAGMA", "SET", "RESET", "CALL",
    "INSTALL", "LOAD", "CREATE", "DROP", "ALTER", "EXPORT", "IMPORT", "USE", "VACUUM", "CHECKPOINT",
    "TRUNCATE", "GRANT", "REVOKE", "BEGIN", "COMMIT", "ROLLBACK", "DESCRIBE", "SHOW", "SUMMARIZE",
    "EXPLAIN", "ANALYZE", "PREPARE", "EXECUTE", "DEALLOCATE", "UNPIVOT", "PIVOT", "FROM",
}  # fmt: skip

#: Syntax nodes allowed anywhere (structure and row-level scalar expressions).
_ALLOWED_NODES: tuple[type[exp.Expression], ...] = (
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
    exp.Replace, exp.BitwiseAnd, exp.Interval,
    # aggregates (only in the outermost SELECT, checked separately)
    exp.Count, exp.Sum, exp.Avg, exp.Min, exp.Max, exp.Median, exp.Variance, exp.VariancePop, exp.Stddev,
    exp.StddevPop, exp.StddevSamp, exp.Quantile, exp.ApproxQuantile, exp.PercentileCont, exp.PercentileDisc,
    exp.WithinGroup, exp.Filter,
)  # fmt: skip

#: Aggregate functions sqlglot leaves as ``Anonymous``, allowed by lower-case name.
_ANONYMOUS_AGGREGATES = {"var", "var_samp", "quantile_cont", "quantile_disc"}

#: Every aggregate Veil answers, by canonical name.
AGGREGATE_NAMES = (
    "count", "sum", "avg", "min", "max", "median", "var_samp", "var_pop", "stddev_samp", "stddev_pop", "quantile",
)  # fmt: skip

_AGG_TYPES = (
    exp.Count, exp.Sum, exp.Avg, exp.Min, exp.Max, exp.Median, exp.Variance, exp.VariancePop, exp.Stddev,
    exp.StddevPop, exp.StddevSamp, exp.Quantile, exp.ApproxQuantile, exp.WithinGroup,
)  # fmt: skip


def aggregate_name(node: exp.Expression) -> str | None:
    """Canonical aggregate name of ``node`` (None if it is not an aggregate call)."""
    if isinstance(node, exp.Anonymous):
        name = str(node.name).lower()
        return {"var": "var_samp", "var_samp": "var_samp", "quantile_cont": "quantile", "quantile_disc": "quantile"}.get(name)
    table = {
        exp.Count: "count", exp.Sum: "sum", exp.Avg: "avg", exp.Min: "min", exp.Max: "max", exp.Median: "median",
        exp.Variance: "var_samp", exp.VariancePop: "var_pop", exp.Stddev: "stddev_samp",
        exp.StddevSamp: "stddev_samp", exp.StddevPop: "stddev_pop", exp.Quantile: "quantile",
        exp.ApproxQuantile: "quantile", exp.WithinGroup: "quantile",
    }  # fmt: skip
    return table.get(type(node))


def is_aggregate(node: exp.Expression) -> bool:
    return aggregate_name(node) is not None


@dataclass(frozen=True)
class Analysis:
    """A validated, qualified SELECT."""

    sql: str  # the analyst's text
    tree: exp.Select  # qualified (every column is table.column, every table aliased)
    original: exp.Select  # parsed, unqualified (for output column names)
    private_table: str | None  # the one private table read, or None for a public-only query
    tables: tuple[str, ...]  # every catalog table read


def _statement_keyword(sql: str) -> str | None:
    try:
        tokens = sqlglot.tokenize(sql, read=DIALECT)
    except TokenError as exc:
        raise ParseError(f"the SQL could not be tokenised: {exc}", hint="Check quotes and brackets") from None
    for tok in tokens:
        if tok.token_type in (TokenType.SEMICOLON,):
            continue
        if tok.token_type == TokenType.L_PAREN:
            return "("
        return tok.text.upper()
    return None


def _parse(sql: str) -> exp.Expression:
    if not isinstance(sql, str) or not sql.strip():
        raise ParseError("the query is empty", hint="Send one SELECT statement")
    keyword = _statement_keyword(sql)
    if keyword is None:
        raise ParseError("the query is empty", hint="Send one SELECT statement")
    if keyword in _FORBIDDEN_STATEMENTS:
        raise NotAllowed(
            f"{keyword} statements are not allowed",
            hint="Analysts may only run one aggregate SELECT (e.g. SELECT COUNT(*) FROM t)",
        )
    if keyword not in ("SELECT", "WITH", "("):
        raise NotAllowed(f"statement {keyword!r} is not allowed", hint="Send one SELECT statement")
    try:
        statements = [s for s in sqlglot.parse(sql, read=DIALECT) if s is not None]
    except SqlglotParseError as exc:
        first = exc.errors[0] if exc.errors else {}
        desc = str(first.get("description", "syntax error"))
        line, col = first.get("line"), first.get("col")
        near = first.get("highlight") or ""
        where = f" at line {line}, column {col}" if line is not None else ""
        near_txt = f" near {near!r}" if near else ""
        raise ParseError(
            f"syntax error{where}{near_txt}: {desc}",
            hint="Check the SQL around that position; Veil accepts PostgreSQL syntax",
        ) from None
    except TokenError as exc:
        raise ParseError(f"the SQL could not be tokenised: {exc}", hint="Check quotes and brackets") from None
    if len(statements) != 1:
        raise NotAllowed(f"the query holds {len(statements)} statements", hint="Send exactly one SELECT statement per query")
    return statements[0]


def _allow_list(tree: exp.Expression) -> None:
    for node in tree.walk():
        if isinstance(node, exp.Anonymous):
            if str(node.name).lower() in _ANONYMOUS_AGGREGATES:
                continue
            raise NotAllowed(
                f"function {node.name!r} is not allowed",
                hint="Use standard aggregates and scalar functions; file and table functions are never allowed",
            )
        if isinstance(node, exp.Command):
            raise NotAllowed(f"statement {node.name!r} is not allowed", hint="Send one SELECT statement")
        if isinstance(node, (exp.Union, exp.Intersect, exp.Except)):
            raise Unsupported(f"set operation {node.key.upper()} is not supported", hint="Run each SELECT as its own query")
        if isinstance(node, exp.Window):
            raise Unsupported("window functions are not supported", hint="Use GROUP BY aggregates")
        if isinstance(node, exp.Func) and not isinstance(node, _ALLOWED_NODES):
            name = node.sql_name() if hasattr(node, "sql_name") else node.key
            raise NotAllowed(
                f"function {name} is not allowed",
                hint="File readers, table functions and non-deterministic functions are never allowed",
            )
        if not isinstance(node, _ALLOWED_NODES):
            raise Unsupported(f"SQL construct {node.key.upper()} is not supported", hint="See docs/sql.md")
        if isinstance(node, exp.Table):
            if not isinstance(node.this, exp.Identifier) or node.args.get("db") or node.args.get("catalog"):
                raise NotAllowed(
                    f"table reference {node.sql(dialect=DIALECT)!r} is not allowed",
                    hint="Name a table of the policy, without schema or file path",
                )


def _check_tables(tree: exp.Expression, catalog: Catalog) -> list[str]:
    cte_names = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
    used: list[str] = []
    for table in tree.find_all(exp.Table):
        name = table.name if table.this.quoted else table.name.lower()
        if name in cte_names:
            continue
        if name not in catalog.tables:
            raise UnknownTable(
                f"unknown table {table.name!r}",
                hint=did_you_mean(name, catalog.tables) or f"Tables: {', '.join(sorted(catalog.tables)) or '(none)'}",
            )
        used.append(name)
    return used


def _qualify(tree: exp.Expression, catalog: Catalog) -> exp.Select:
    try:
        out = qualify(
            tree,
            schema=catalog.schema(),
            dialect=DIALECT,
            quote_identifiers=False,
            validate_qualify_columns=True,
            identify=False,
        )
    except OptimizeError as exc:
        msg = str(exc)
        if "could not be resolved" in msg:
            col = msg.split("'")[1] if "'" in msg else msg
            used = {t.name.lower() for t in tree.find_all(exp.Table)} & set(catalog.tables)
            names = {c for t in used for c in catalog.tables[t].columns} - {col.lower()}
            elsewhere = sorted(t for t in catalog.tables if t not in used and col.lower() in catalog.tables[t].columns)
            hint = did_you_mean(col.lower(), names) or (
                f"It is declared only in table {', '.join(elsewhere)}"
                if elsewhere
                else "Only columns declared in the policy can be queried"
            )
            raise UnknownColumn(f"unknown column {col!r}", hint=hint) from None
        if "ambiguous" in msg.lower():
            raise QueryRejected(f"{msg}", hint="Prefix the column with its table name") from None
        raise QueryRejected(f"the query could not be resolved: {msg}", hint="Check table and column names") from None
    if not isinstance(out, exp.Select):
        raise Unsupported("only a plain SELECT is supported at the top level", hint="See docs/sql.md")
    return out


def _check_inner_scopes(tree: exp.Select, catalog: Catalog) -> None:
    """Every SELECT below the outermost one must be row-level: no aggregates, grouping, DISTINCT or LIMIT."""
    root = build_scope(tree)
    if root is None:
        raise Unsupported("the query could not be analysed", hint="See docs/sql.md for supported SQL")
    for scope in traverse_scope(tree):
        if scope.expression is tree:
            continue
        sel = scope.expression
        if not isinstance(sel, exp.Select):
            raise Unsupported(f"{sel.key.upper()} in a subquery is not supported")
        if scope.is_subquery and not scope.is_derived_table and not scope.is_cte:
            raise Unsupported(
                "subqueries outside FROM (in WHERE, SELECT or HAVING) are not supported",
                hint="Use a JOIN with a public table or a CTE in FROM",
            )
        private = any(_reads_private(scope, catalog, t) for t in [sel])
        aggs = [n for n in sel.find_all(exp.AggFunc, exp.Anonymous) if is_aggregate(n)]
        if private and (aggs or sel.args.get("group") or sel.args.get("having")):
            raise Unsupported(
                "aggregation inside a subquery or CTE is not supported",
                hint="Only row-level CTEs and subqueries may read a private table; aggregate in the outer SELECT",
            )
        if private and (sel.args.get("distinct") or sel.args.get("limit") or sel.args.get("offset")):
            raise Unsupported(
                "DISTINCT, LIMIT and OFFSET inside a subquery over a private table are not supported",
                hint="Filter rows with WHERE instead",
            )


def _reads_private(scope: Scope, catalog: Catalog, _sel: exp.Expression) -> bool:
    for src in scope.sources.values():
        if isinstance(src, exp.Table):
            t = catalog.tables.get(src.name)
            if t is not None and not t.public:
                return True
        elif isinstance(src, Scope) and _reads_private(src, catalog, src.expression):
            return True
    return False


_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.In, exp.Between)


def _literal_fits(text: str, dtype: exp.DataType) -> bool:
    if dtype.is_type(*exp.DataType.INTEGER_TYPES, *exp.DataType.REAL_TYPES):
        try:
            float(text)
        except ValueError:
            return False
        return True
    if dtype.is_type(exp.DataType.Type.BOOLEAN):
        return text.strip().lower() in ("true", "false", "t", "f", "1", "0", "yes", "no")
    return True


def _check_literal_types(tree: exp.Select, catalog: Catalog) -> None:
    """Refuse comparisons of a numeric/boolean column with text that cannot convert (free, before running)."""
    pairs = []
    for cmp in tree.find_all(*_COMPARISONS):
        lits = [n for n in cmp.iter_expressions() if isinstance(n, exp.Literal) and n.is_string]
        if isinstance(cmp, exp.In):
            lits += [n for n in cmp.expressions if isinstance(n, exp.Literal) and n.is_string]
        if lits and isinstance(cmp.this, exp.Column):
            pairs.append((cmp.this, lits))
    if not pairs:
        return
    from sqlglot.optimizer.annotate_types import annotate_types

    annotate_types(tree, schema=catalog.schema(), dialect=DIALECT)
    for col, lits in pairs:
        for lit in lits:
            if col.type is not None and not _literal_fits(str(lit.this), col.type):
                raise QueryRejected(
                    f"column {col.name!r} is {col.type.sql(dialect=DIALECT)} but is compared with text {lit.sql()}",
                    hint="Compare with a value of the column's type, e.g. a number without quotes",
                )


def analyze(sql: str, catalog: Catalog) -> Analysis:
    """Parse and validate one analyst SELECT against ``catalog``."""
    tree = _parse(sql)
    _allow_list(tree)
    if not isinstance(tree, exp.Select):
        raise Unsupported(f"{tree.key.upper()} at the top level is not supported", hint="Send one SELECT statement")
    used = _check_tables(tree, catalog)
    private = sorted({t for t in used if not catalog.tables[t].public})
    if len(private) > 1 or (private and used.count(private[0]) > 1):
        raise Unsupported(
            f"the query reads private table(s) {', '.join(private)} more than once",
            hint="Join a private table only with public tables; self-joins on private data are not supported",
        )
    if private and any(isinstance(p, exp.Star) for p in tree.expressions):
        raise Unsupported(
            "SELECT * over a private table is not allowed: only aggregates are released",
            hint="Ask for aggregates, e.g. SELECT COUNT(*), AVG(age) FROM " + private[0],
        )
    qualified = _qualify(tree.copy(), catalog)
    if private:
        _check_inner_scopes(qualified, catalog)
    _check_literal_types(qualified, catalog)
    return Analysis(
        sql=sql,
        tree=qualified,
        original=tree,
        private_table=private[0] if private else None,
        tables=tuple(dict.fromkeys(used)),
    )
