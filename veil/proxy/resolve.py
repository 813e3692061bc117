"""Pass 2 — resolve: every name to what it means, through sqlglot's scopes, then unambiguous by construction.

A table reference is a CTE only where that CTE is in scope (sqlglot's scope rules: a CTE is visible
to the statement after its ``WITH`` and to later sibling CTEs, never inside its own body); every
other reference must be a table of the catalog (policy tables and published tables). The pass then
makes its reading the only possible one: every CTE is renamed to a fresh ``__veil_cte_N`` (the
references to it too), and every base table is written under its canonical catalog name, so the SQL
Veil generates from this tree cannot mean anything else to the engine whatever names the analyst
chose. Columns are qualified against the catalog's schema (not the engine's).

The result counts how many times the private table is read (each reference to a CTE instantiates
its body) — a private table may be read once.

>>> from veil.proxy.catalog import Catalog, CatalogTable
>>> from veil.proxy.parse import parse
>>> cat = Catalog({"adult": CatalogTable("adult", {"age": "int"}, None, False)})
>>> r = resolve(parse("WITH adult AS (SELECT * FROM adult) SELECT COUNT(*) FROM adult"), cat)
>>> r.private_table, r.private_reads
('adult', 1)
>>> r.tree.sql()
'WITH __veil_cte_0 AS (SELECT adult.age AS age FROM adult AS adult) SELECT COUNT(*) AS _col_0 FROM __veil_cte_0 AS adult'
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from sqlglot import exp
from sqlglot.errors import OptimizeError
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers
from sqlglot.optimizer.qualify import qualify
from sqlglot.optimizer.scope import Scope, build_scope, traverse_scope

from veil.errors import (
    InternalError,
    InvalidColumnReference,
    ParseError,
    QueryRejected,
    UnknownColumn,
    UnknownTable,
    Unsupported,
    did_you_mean,
)
from veil.proxy.catalog import Catalog
from veil.proxy.parse import DIALECT

__all__ = ["CTE_PREFIX", "Resolved", "private_reads", "refuse_before_binding", "resolve", "walk_scopes"]

#: Prefix of the names Veil gives CTEs; no catalog table can carry it.
CTE_PREFIX = "__veil_cte_"


@dataclass(frozen=True)
class Resolved:
    """A SELECT whose every table reference is resolved, renamed unambiguously and qualified."""

    sql: str  # the analyst's text
    original: exp.Select  # as parsed (output column names come from here)
    tree: exp.Select  # CTEs renamed, base tables canonical and aliased, columns qualified
    tables: tuple[str, ...]  # catalog tables read (each once, in order of first reference)
    private_table: str | None  # the private table read, or None for a public-only query
    private_reads: int  # how many times it is read (through every reference to a CTE)


def _catalog_name(table: exp.Table, catalog: Catalog) -> str:
    ident = table.this
    raw = ident.name if isinstance(ident, exp.Identifier) else str(table.name)
    quoted = isinstance(ident, exp.Identifier) and ident.quoted
    name = raw if quoted else raw.lower()
    if name not in catalog.tables:
        hint = did_you_mean(name, catalog.tables) or f"Tables: {', '.join(sorted(catalog.tables)) or '(none)'}"
        raise UnknownTable(f"unknown table {raw!r}", hint=hint)
    return name


def _refuse_column_aliases(table: exp.Table) -> None:
    """A table or CTE reference may not rename its columns (``FROM t AS z(a, b)``): in PostgreSQL the list renames
    the columns in order, but the reference is rebuilt here under its alias alone and qualified against the
    catalog's names, so ``z.a`` would read the column *named* ``a`` — another answer than the one asked for, for
    the checks and the engine alike (red team s34, A1). A derived table's list (``(SELECT …) AS z(a, b)``) is
    honoured by qualification and stays allowed."""
    alias = table.args.get("alias")
    if isinstance(alias, exp.TableAlias) and alias.args.get("columns"):
        raise Unsupported(
            f"column aliases on the table reference {table.sql(dialect=DIALECT)!r} are not supported",
            hint="Rename columns in a derived table instead: (SELECT a AS x, b AS y FROM t) AS z",
        )


def _refuse_empty_in(tree: exp.Expression) -> None:
    """An ``IN`` with an empty list (``x IN ()``, ``x NOT IN ()``, ``(a, b) IN ()``) is a syntax error in PostgreSQL;
    sqlglot parses it into an ``IN`` with nothing to compare, which every engine answered as false (or true under
    ``NOT``): an answer PostgreSQL would not give."""
    for node in tree.find_all(exp.In):
        if not any(node.args.get(k) for k in ("expressions", "query", "unnest", "field")):
            raise ParseError(
                f'syntax error at or near ")": {node.sql(dialect=DIALECT)} has an empty list, which PostgreSQL refuses',
                hint="List at least one value, e.g. x IN (1, 2); to match no row, write FALSE",
            )


#: Clauses a parenthesised query may carry after its closing parenthesis, ``((SELECT …) ORDER BY … LIMIT n) AS s``:
#: sqlglot hangs them on the parentheses (an ``exp.Subquery``), where no check of a SELECT's own clauses looks.
_OUTER_CLAUSES = ("order", "limit", "offset", "fetch")


def _refuse_outer_clauses(tree: exp.Expression) -> None:
    """Refuse ORDER BY/LIMIT/OFFSET/FETCH written after a parenthesised query (review of s52: ``FROM ((SELECT pid FROM
    trips) ORDER BY pid DESC LIMIT 3) x`` kept three private rows, so one person in pushed another out, twice the
    planned sensitivity; over a public source the LIMIT ran unmeasured). Written inside the parentheses, the same
    clauses meet every check a SELECT's own clauses meet."""
    for node in tree.find_all(exp.Subquery):
        kept = [k.upper() for k in _OUTER_CLAUSES if node.args.get(k) is not None]
        if kept:
            raise Unsupported(
                f"{'/'.join(kept)} after a parenthesised query is not supported: {node.sql(dialect=DIALECT)[:120]}",
                hint="Write it inside the parentheses: (SELECT … ORDER BY … LIMIT n) AS s",
            )


@dataclass(frozen=True)
class _NamedColumns:
    """A derived table or CTE whose alias names its columns: ``(SELECT …) AS d(a, b)``, ``WITH c(a, b) AS (…)``."""

    what: str  # 'table "d"' or 'WITH query "c"', as PostgreSQL words it
    names: int
    body: exp.Select
    star: bool  # the body's SELECT list holds a `*` (as written): its width is known only once it is expanded


def _named_columns(tree: exp.Expression) -> list[_NamedColumns]:
    found = []
    for node in tree.find_all(exp.Subquery, exp.CTE):
        alias = node.args.get("alias")
        columns = alias.args.get("columns") if isinstance(alias, exp.TableAlias) else None
        body = node.this
        while isinstance(body, exp.Subquery):  # `((SELECT …)) AS d(a, b)`: the columns of the innermost SELECT
            body = body.this
        if columns and isinstance(body, exp.Select):
            what = f'WITH query "{alias.name}"' if isinstance(node, exp.CTE) else f'table "{alias.name}"'
            found.append(_NamedColumns(what, len(columns), body, _has_star(body)))
    return found


def _has_star(select: exp.Select) -> bool:
    return any(isinstance(e, exp.Star) or (isinstance(e, exp.Column) and e.is_star) for e in select.expressions)


def _check_column_names(named: list[_NamedColumns], *, stars: bool) -> None:
    """A derived table or CTE names at most as many columns as its query has (fewer keep the rest's own names), as in
    PostgreSQL (42P10). sqlglot's qualification dropped the extra names silently, and the query was answered.
    ``stars``: check the bodies holding a ``*`` (their width is known once qualification expanded it) instead of the
    others."""
    for n in named:
        if n.star != stars:
            continue
        width = len(n.body.expressions)
        if n.names > width:
            raise InvalidColumnReference(
                f"{n.what} has {width} columns available but {n.names} columns specified",
                hint=f"Name at most {width} column{'s' if width != 1 else ''}, or add the missing columns to its SELECT list",
            )


def refuse_before_binding(tree: exp.Expression) -> None:
    """Refuse, as PostgreSQL does before it binds a name, an empty ``IN ()`` (42601) and a derived table or CTE that
    names more columns than its SELECT list writes out (42P10; one over a ``*`` is checked once qualification has
    expanded it). :func:`resolve` runs it on every query; an edge that evaluates a statement itself (``veil serve``'s
    table-less and catalog statements) runs it too, so both refuse alike."""
    _refuse_empty_in(tree)
    _check_column_names(_named_columns(tree), stars=False)


def _rename_references(tree: exp.Select, catalog: Catalog) -> list[str]:
    """Rename CTEs and canonicalise base tables in place; return the base tables read, in order."""
    root = build_scope(tree)
    if root is None:
        raise Unsupported("the query could not be analysed", hint="See docs/sql.md for supported SQL")
    cte_names: dict[int, str] = {}
    for i, cte in enumerate(tree.find_all(exp.CTE)):
        cte_names[id(cte)] = f"{CTE_PREFIX}{i}"
    handled: set[int] = set()
    tables: list[str] = []
    for scope in traverse_scope(tree):
        try:
            aliases = [s for s in scope.selected_sources]
        except OptimizeError:  # sqlglot's own check of a repeated alias (`FROM t AS a, pub AS a`), untyped
            aliases = [None, None]
        if len(aliases) != len(set(aliases)):
            raise QueryRejected("a FROM clause names the same alias twice", hint="Give every table its own alias")
        for table in scope.tables:
            _refuse_column_aliases(table)
            alias = table.alias_or_name
            source = scope.sources.get(alias)
            if isinstance(source, Scope):
                cte = source.expression.parent
                if not isinstance(cte, exp.CTE) or id(cte) not in cte_names:
                    raise Unsupported(f"the reference to {table.name!r} could not be resolved", hint="See docs/sql.md")
                new = cte_names[id(cte)]
            elif isinstance(source, exp.Table) and source is table:
                new = _catalog_name(table, catalog)
                tables.append(new)
            else:
                raise Unsupported(f"the reference to {table.name!r} could not be resolved", hint="See docs/sql.md")
            table.set("this", exp.to_identifier(new))
            table.set("alias", exp.TableAlias(this=exp.to_identifier(alias)))
            handled.add(id(table))
    for table in tree.find_all(exp.Table):
        if id(table) not in handled:  # a reference outside every scope: never guess what it means
            raise Unsupported(f"the table reference {table.sql(dialect=DIALECT)!r} could not be resolved")
    for cte in tree.find_all(exp.CTE):
        alias = cte.args.get("alias")
        columns = alias.args.get("columns") if isinstance(alias, exp.TableAlias) else None
        cte.set("alias", exp.TableAlias(this=exp.to_identifier(cte_names[id(cte)]), columns=columns))
    return tables


def _unknown_column(msg: str, tree: exp.Expression, catalog: Catalog) -> UnknownColumn:
    col = msg.split("'")[1] if "'" in msg else msg
    used = {t.name for t in tree.find_all(exp.Table)} & set(catalog.tables)
    names = {c for t in used for c in catalog.tables[t].columns} - {col.lower()}
    elsewhere = sorted(t for t in catalog.tables if t not in used and col.lower() in catalog.tables[t].columns)
    hint = did_you_mean(col.lower(), names) or (
        f"It is declared only in table {', '.join(elsewhere)}"
        if elsewhere
        else "Only columns declared in the policy can be queried"
    )
    return UnknownColumn(f"unknown column {col!r}", hint=hint)


def _check_positions(tree: exp.Expression) -> None:
    """Every positional reference (an integer literal as a ``GROUP BY`` or ``ORDER BY`` term) names a column of its
    SELECT list, as in PostgreSQL ("position N is not in select list"). sqlglot's qualify reads position ``0`` as
    Python's index ``-1`` (the *last* column: ``SELECT COUNT(*), sex … GROUP BY 0`` was answered grouped by ``sex``,
    a query PostgreSQL and DuckDB refuse) and crashes with an untyped ``OverflowError`` past 2⁶³ (red team s49 A3)."""
    for select in tree.find_all(exp.Select):
        stars = any(isinstance(e, exp.Star) or (isinstance(e, exp.Column) and e.is_star) for e in select.expressions)
        # a `*` is expanded later: its width is not known here, only that a position must fit an index
        width = (1 << 31) - 1 if stars else len(select.expressions)
        group = select.args.get("group")
        order = select.args.get("order")
        terms = [("GROUP BY", g) for g in (group.expressions if isinstance(group, exp.Group) else [])]
        terms += [("ORDER BY", o.this) for o in (order.expressions if isinstance(order, exp.Order) else [])]
        for clause, term in terms:
            inner = term
            while isinstance(inner, exp.Paren):
                inner = inner.this
            if inner is not term and isinstance(inner, exp.Literal) and inner.is_int:
                # DuckDB reads `GROUP BY (2)` as a position, sqlglot (and so Veil's plan) as a constant (review of s49)
                raise QueryRejected(
                    f"{clause} ({inner.name}) is ambiguous: a position or a constant",
                    hint=f"Write the position without parentheses ({clause} {inner.name}), or name the column",
                )
            if isinstance(term, exp.Literal) and term.is_int and not 1 <= int(term.name) <= width:
                raise QueryRejected(
                    f"{clause} position {term.name} is not in the select list",
                    hint="Name the column, or give its position in the select list, counting from 1",
                )


def _qualify(tree: exp.Select, catalog: Catalog) -> exp.Select:
    _check_positions(tree)
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
            raise _unknown_column(msg, tree, catalog) from None
        if "ambiguous" in msg.lower():
            raise QueryRejected(msg, hint="Prefix the column with its table name") from None
        raise QueryRejected(f"the query could not be resolved: {msg}", hint="Check table and column names") from None
    except RecursionError:
        raise Unsupported("the query is too deeply nested to resolve", hint="Simplify the query") from None
    if not isinstance(out, exp.Select):
        raise Unsupported("only a plain SELECT is supported at the top level", hint="See docs/sql.md")
    _refuse_whole_rows(out)
    return out


def _refuse_whole_rows(tree: exp.Expression) -> None:
    """What would make the engine, not the catalog, decide a query's columns is refused, free (red team s46 A1):

    * a table or alias named where a value belongs (``SELECT pub FROM pub``) is the whole row, every column the
      engine stores, as one value;
    * a ``*`` that qualifying left standing (``* EXCLUDE (k)`` when nothing declared is left, ``* ILIKE '…'``):
      DuckDB expands it over the stored table.

    A public query ran on a public mirror that held every stored column, so both released the columns a policy
    leaves out of a public table, exactly (``SELECT pub FROM pub``, ``SELECT * EXCLUDE (k) FROM pub``). The mirror now
    holds only the declared columns (:func:`veil.store.warehouse.mirror_columns`); this refusal stays for the
    warehouse, which holds them all, and for Spark, where public tables are read in place. ``COUNT(*)`` is the one
    star kept."""
    for node in tree.find_all(exp.TableColumn):
        raise Unsupported(
            f"{node.name!r} names a table, not a column: a whole row is not a value Veil answers",
            hint=f"Name the columns you need (SELECT {node.name}.<column> …), or COUNT(*) to count rows",
        )
    for star in tree.find_all(exp.Star):
        if not isinstance(star.parent, exp.Count) or any(star.args.values()):
            raise Unsupported(
                f"{star.sql(dialect='duckdb')} cannot be expanded over the policy's columns",
                hint="Name the columns you need, or write a plain * (EXCLUDE, ILIKE and the like are not supported)",
            )


def walk_scopes(scope: Scope) -> Iterator[Scope]:
    """``scope`` and every scope it reads through its FROM (each CTE once per reference) and subqueries."""
    yield scope
    for _alias, (_node, source) in scope.selected_sources.items():
        if isinstance(source, Scope):
            yield from walk_scopes(source)
    for sub in scope.subquery_scopes:
        yield from walk_scopes(sub)


def private_reads(tree: exp.Select, catalog: Catalog) -> dict[str, int]:
    """How many times each private table is read, counting every instantiation of a CTE."""
    root = build_scope(tree)
    if root is None:
        raise InternalError("a resolved query has no scope")
    counts: dict[str, int] = {}
    for scope in walk_scopes(root):
        for _alias, (_node, source) in scope.selected_sources.items():
            if isinstance(source, exp.Table):
                t = catalog.tables.get(source.name)
                if t is None:
                    raise InternalError(f"resolved table {source.name!r} is not in the catalog")
                if not t.public:
                    counts[t.name] = counts.get(t.name, 0) + 1
    return counts


def _drop_unused_ctes(tree: exp.Expression) -> None:
    """Remove every CTE that no reference resolves to, until none is left: it contributes nothing to the
    answer, and what is not in the tree never reaches validation or the engine (an unused CTE over the
    private table was counted as a second read and ended in an internal error). "Resolves to" is decided by
    sqlglot's scopes, as the resolution itself (a reference that an inner CTE of the same name shadows does
    not keep the outer one)."""
    if tree.find(exp.CTE) is None:
        return
    while True:
        root = build_scope(tree)
        if root is None:
            return
        used: set[int] = set()
        for scope in root.traverse():
            for _alias, (_node, source) in scope.selected_sources.items():
                if isinstance(source, Scope) and isinstance(source.expression.parent, exp.CTE):
                    used.add(id(source.expression.parent))
        unused = [cte for cte in tree.find_all(exp.CTE) if id(cte) not in used]
        if not unused:
            return
        for cte in unused:
            with_ = cte.parent
            cte.pop()
            if isinstance(with_, exp.With) and not with_.expressions:
                with_.pop()


def _expand_having_aliases(tree: exp.Select, catalog: Catalog) -> None:
    """``HAVING n > 5`` where ``n`` is an output alias (as DuckDB resolves it): use the aliased expression.

    A name that is also a column of a table the query reads keeps meaning that column.
    """
    having = tree.args.get("having")
    if having is None:
        return
    aliases = {p.alias: p.this for p in tree.expressions if isinstance(p, exp.Alias)}
    read = [t.name.lower() for t in tree.find_all(exp.Table) if t.name.lower() in catalog.tables]
    columns = {c for name in read for c in catalog.tables[name].columns}
    for col in list(having.find_all(exp.Column)):
        if not col.table and col.name in aliases and col.name not in columns:
            col.replace(exp.Paren(this=aliases[col.name].copy()))


def resolve(tree: exp.Select, catalog: Catalog, *, sql: str = "") -> Resolved:
    """Resolve ``tree`` (from :func:`veil.proxy.parse.parse`) against ``catalog``."""
    work = tree.copy()
    refuse_before_binding(work)  # unused CTEs too, as PostgreSQL
    _refuse_outer_clauses(work)
    # unquoted names fold to lower case first, as in PostgreSQL: `WITH T AS (…) … FROM t` reads the CTE
    normalize_identifiers(work, dialect=DIALECT)
    starred = [n for n in _named_columns(work) if n.star]  # their width is known once qualified
    _drop_unused_ctes(work)
    _expand_having_aliases(work, catalog)
    try:
        tables = _rename_references(work, catalog)
    except OptimizeError as exc:  # sqlglot's scope analysis refusing the tree: a typed refusal, never a crash
        raise QueryRejected(f"the query could not be resolved: {exc}", hint="Check table names and aliases") from None
    qualified = _qualify(work, catalog)
    _check_column_names([n for n in starred if n.body.root() is qualified], stars=True)
    reads = private_reads(qualified, catalog)
    if len(reads) > 1:
        raise Unsupported(
            f"the query reads more than one private table ({', '.join(sorted(reads))})",
            hint="Join a private table only with public tables",
        )
    private = next(iter(reads), None)
    return Resolved(
        sql=sql,
        original=tree,
        tree=qualified,
        tables=tuple(dict.fromkeys(tables)),
        private_table=private,
        private_reads=reads.get(private, 0) if private else 0,
    )
