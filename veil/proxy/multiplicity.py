"""How many times one private row can appear in a query's FROM: the public-join multiplicity.

A private row joined with public sources appears once per combination of matching public rows, so
every statistic's sensitivity is multiplied by a bound on that number. The bound is computed over
the whole FROM tree, not the top level only: along the path of scopes from the outer SELECT down to
the private table, every other source of each scope (a public table, or a derived table or CTE that
reads only public tables — at any depth) contributes a factor:

* the largest number of its rows that share one value of its **pins** — the columns it is equated
  to, by a top-level conjunct of WHERE or ON, with a column of the private row's source, both bare base-table
  columns (through bare projections of derived tables and CTEs) of the same catalog type, so the engine compares
  them as they are (an implicit cast could make '1', '01' and ' 1' all match one integer, and an expression the
  engine computes as a DOUBLE widens an integer key: those never pin);
* or its row count when nothing pins it (public-to-public equalities never pin: each public alias is
  bounded on its own, so chains of public joins are bounded by the product).

The factors are :class:`Probe` values: SQL over public data only, run by the session before anything is
charged. A factor is at least 1, so a race with a curator's write can only over-count.

A factor bounds the query only if the query joins the very rows the probe counted. A public base table does:
it holds the same rows on every read within one generation of the engine, and the probes are cached per
generation. A *derived* public source (a derived table or CTE over public tables) is SQL, and two runs of it
may keep other rows: ties under ``LIMIT`` in DuckDB's parallel sort, parallel float sums rounding otherwise, MIN
or MAX of a DOUBLE picking 0.0 or -0.0, ``DISTINCT ON`` (red teams s52, s55). So, with ``materialise=True``
(DuckDB), each derived public source is evaluated **once**, into a temporary table of the connection the query
runs on (:class:`Materialised`; built on an instance of its own under a memory limit, so whatever operators the
source holds, building it is bounded: :meth:`~veil.engines.duckdb.DuckDBEngine.create_temp`); its probe counts that
table's rows, and :func:`read_materialised` makes the generated statements read the same table instead of the
source's SQL. Whatever the engine's runs would do, the
query joins exactly the rows the factor was measured on: the class is closed by construction, not by listing
its constructs. On Spark (``materialise=False``) the source is measured by a run of its own, as before, and the
rules below (:func:`_row_choices`, :func:`_order_dependent_choices`, a top-level ``LIMIT`` measured without it)
are what keeps the factor sound; on DuckDB they stay as defence in depth.

>>> from veil.proxy.catalog import Catalog, CatalogTable
>>> from veil.proxy.parse import parse
>>> from veil.proxy.resolve import resolve
>>> from veil.proxy.validate import validate
>>> cat = Catalog({"p": CatalogTable("p", {"id": "int"}, None, False), "r": CatalogTable("r", {"rid": "int"}, None, True)})
>>> q = "SELECT COUNT(*) FROM p, (SELECT rid FROM r) r1 JOIN r r2 ON r2.rid = p.id"
>>> for pr in probes(validate(resolve(parse(q), cat), cat), cat):
...     print(pr.source, "|", pr.sql)
r1 | SELECT COUNT(*) FROM (SELECT r.rid AS rid FROM (SELECT TRY_CAST("rid" AS BIGINT) AS "rid" FROM r) AS r) AS __veil_src
r2 | SELECT COALESCE(MAX(__veil_n), 0) FROM (SELECT COUNT(*) AS __veil_n FROM (SELECT TRY_CAST("rid" AS BIGINT) AS "rid" \
FROM r) AS __veil_src WHERE NOT __veil_src.rid IS NULL GROUP BY __veil_src.rid) AS __veil_groups
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from sqlglot import exp
from sqlglot.optimizer.scope import Scope, build_scope

from veil.engines.neutral import duckdb_text, neutralise
from veil.errors import InternalError, Unbounded, Unsupported
from veil.proxy.bounds import own_joins, resolve_column
from veil.proxy.catalog import Catalog, public_types
from veil.proxy.expansion import SCALAR_TEXT_BYTES, output_bytes
from veil.proxy.public_reads import read_public_typed
from veil.proxy.resolve import CTE_PREFIX
from veil.proxy.totality import make_total
from veil.proxy.validate import Analysis

__all__ = [
    "MATERIALISED",
    "MAX_GROUPED_CONTRIBUTION",
    "MAX_GROUPED_VALUES",
    "MAX_JOINED_TEXT_BYTES",
    "MAX_JOIN_FACTOR",
    "MAX_JOIN_ROW_BYTES",
    "MAX_MATERIALISED_BYTES",
    "MAX_MATERIALISED_ROWS",
    "MAX_MATERIALISED_VALUES",
    "MAX_PERSON_EVALUATIONS",
    "MAX_TEXT_WORK",
    "MAX_VALUE_BYTES",
    "Materialised",
    "Probe",
    "check_factor",
    "check_grouped_contribution",
    "check_join_row",
    "check_person_work",
    "check_value_bytes",
    "conjuncts",
    "private_path",
    "probes",
    "read_materialised",
]


#: The most rows of public sources one private row may join (the product of the factors). A private
#: row joined with more makes the engine's work, and so the answer's running time, depend on that one
#: row: ``JOIN pub p1 ON t.id = 7 AND t.x > 3 JOIN pub p2 ON TRUE …`` took 0.01 s without the row and
#: 5 s with it (|pub| = 3,000, three joins). The factor is computed from public data only, so the
#: refusal is free and the same whatever the private data holds.
MAX_JOIN_FACTOR = 10_000
#: The most text-literal bytes one private row may carry into the rows it joins, in all: a 0.9 MB
#: literal only one person's row selects, concatenated with a column of each of 10,000 joined rows,
#: took 2–4 s with that row and 0.07 s without.
MAX_JOINED_TEXT_BYTES = 16 << 20


def check_factor(factor: int, text_bytes: int = 0) -> None:
    """Refuse a query whose public-join multiplicity exceeds :data:`MAX_JOIN_FACTOR`, or whose text
    literals times that multiplicity exceed :data:`MAX_JOINED_TEXT_BYTES`."""
    if factor > MAX_JOIN_FACTOR:
        raise Unsupported(
            f"one private row can join up to {factor:,} rows of public tables; Veil allows at most {MAX_JOIN_FACTOR:,}",
            hint="Join each public table on an equality between its key and a private column (e.g. ON p.id = t.pid)",
        )
    if factor > 1 and text_bytes * factor > MAX_JOINED_TEXT_BYTES:
        raise Unsupported(
            f"one private row can carry {text_bytes:,} bytes of text literals into each of up to {factor:,} joined "
            f"rows; Veil allows {MAX_JOINED_TEXT_BYTES:,} bytes in all",
            hint="Use shorter text literals, or pin the join with an equality on a key",
        )


#: The most rows one privacy unit may bring into a query with group keys (its rows kept by the bounded
#: copy × the public-join multiplicity). Each such row can open a group of its own, and every group the
#: engine returns, released or not, costs Python some work: on a user-level table with 30 rows per unit and
#: a 10,000-row join, one person's 300,000 groups took 2.4 s against 0.01 s without them (red team s7, A4).
#: At this ceiling one person adds at most 1,000 groups (milliseconds), and such a query's counts already
#: carry noise of scale ≥ 1,000/ε.
MAX_GROUPED_CONTRIBUTION = 1_000
#: The most values one unit may add to a grouped query's fetched result: its groups × the query's
#: statistics. Each group carries every statistic through the fetch and Python's per-value conversions:
#: 1,000 groups × 1,000 SUMs took 13 s against 4 s without the person (red team s8, A1).
MAX_GROUPED_VALUES = 20_000


def check_grouped_contribution(contribution: int, keys: int, statistics: int = 1) -> None:
    """Refuse (free: policy, public data and the query's shape only) a grouped query in which one unit brings
    more than :data:`MAX_GROUPED_CONTRIBUTION` rows, or more than :data:`MAX_GROUPED_VALUES` values."""
    if not keys:
        return
    if contribution > MAX_GROUPED_CONTRIBUTION:
        raise Unsupported(
            f"one person can bring up to {contribution:,} rows into this grouped query (rows per person × public-join "
            f"multiplicity); Veil allows at most {MAX_GROUPED_CONTRIBUTION:,} when grouping",
            hint="Pin the public join with an equality on its key, or group after a query without the join",
        )
    if contribution * statistics > MAX_GROUPED_VALUES:
        raise Unsupported(
            f"one person can bring {contribution:,} groups × {statistics:,} statistics into this grouped query; Veil "
            f"allows at most {MAX_GROUPED_VALUES:,} values when grouping",
            hint="Ask for fewer statistics per query, or pin the public join with an equality on its key",
        )


#: The most bytes of text one person's rows may make the engine build, over every statement of a query
#: (:func:`veil.proxy.expansion.text_work` per row × the rows one unit brings × the join multiplicity × the
#: statements, one per quantile grid besides the main one). 64 copies of a 4 KB value, case-mapped five times
#: over a 10,000-row join, took 88 s and 6 GB against 0.04 s without that person (red team s8, A3); the
#: same work repeated by 50 quantile grids, or by 50 rows of one unit, took 4 s (s9, A2 and A3).
#: 64 MiB of copying is tens of milliseconds.
MAX_TEXT_WORK = 64 << 20
#: The most expression nodes the engine may evaluate over one person's rows in all a query's statements
#: (the query's size, CTE references expanded, × those rows): a fifth of a second of vectorised work at most
#: (GREATEST over 150 short texts × 500,000 of one person's joined rows, 7.5·10⁷ evaluations, took 0.9 s).
MAX_PERSON_EVALUATIONS = 2 * 10**7
#: What one operation the generated SQL wraps in ``TRY`` is priced at, in node evaluations: DuckDB evaluates a
#: TRY whose operation raises by throwing and catching an exception, 7–11 µs a row against ~10 ns when it does
#: not, and which rows raise is the data's choice (red team s11, A3: a date or integer overflow on one person's
#: 50 rows × a 10,000-row join took 3.2–6 s against 0.01 s). So every such operation counts as raising on
#: every row one person brings.
TRY_EVALUATIONS = 1_000
#: What one cast that may fail without raising is priced at: a failing TRY_CAST (text to a number, a date or a
#: boolean; a number to a narrower one) costs DuckDB 0.15–1 µs against ~5 ns when it succeeds.
CAST_EVALUATIONS = 100


#: The most bytes one text value of a private query may hold (any group key, DISTINCT argument or operand, by the
#: catalog's bounds: a category column's cap × 4, a literal's bytes, a concatenation the sum of its parts). DuckDB
#: cannot spill a hash table of large strings: at its 256 MiB floor (``warehouse.MIN_READER_MEMORY_MIB``) 2,000
#: distinct 64 kB keys failed the statement where 60,000 of 16 kB spilled and were answered (2 and 16 threads), so
#: whether a charged statement of large values failed was a step one person's row could cross (red team s63 F1).
#: The edge is a hash-table row of 16 KiB: at one thread DuckDB 2.0 spilled 20,000 distinct values of 16,382 bytes and
#: failed on 16,384, and two 12 kB keys of one row failed where two 8 kB ones spilled (red team s65 F1/F2), so the cap
#: keeps a 1 KiB margin below it.
MAX_VALUE_BYTES = 15 << 10


def check_value_bytes(largest: int) -> None:
    """Refuse (free: the query's shape, the policy, public data) a private query one of whose text values may hold
    more than :data:`MAX_VALUE_BYTES` bytes."""
    if largest > MAX_VALUE_BYTES:
        raise Unsupported(
            f"a text value of this query may hold {largest:,} bytes; in a query over private data Veil allows "
            f"{MAX_VALUE_BYTES:,} (the engine could not spill more to disk, so whether it ran would depend on the data)",
            hint="Put fewer or shorter text columns in one GROUP BY or DISTINCT (a curator can declare a category's "
            "`values` or a smaller `max_length` in the policy), use shorter literals, or concatenate fewer or shorter "
            "columns (SUBSTRING shortens one)",
        )


#: The most bytes of text one private row may carry through a join (every column a join's scope reads of the private
#: rows together, by the catalog's bounds: a category column's ``max_length`` × 4; see
#: :func:`veil.proxy.expansion.largest_join_row`). DuckDB 2.0's hash join does not spill a build side of large strings
#: the way its GROUP BY does: at the readers' floor (256 MiB, 2 threads) a join of 20,000 rows of 15,360 bytes failed
#: (a GROUP BY of 30,000 such rows spilled), and the witness's join + GROUP BY of 15,328-byte texts was answered at
#: 15,426 rows and failed after the charge at 15,427 (red team s68 F1). Measured on DuckDB alone with 4 public rows a
#: key, ``COUNT(*) … WHERE LENGTH(t.c) > 3``: 4,096-byte rows failed at 200,000 (answered at 70,000), 3,072-byte rows
#: were answered at 300,000, 2,048-byte rows at 600,000 and 1,200,000 (2.4 GB), 1,024-byte rows at 1,500,000; and
#: 400,000 rows of 2,048 bytes were answered joined into a GROUP BY of the text, a COUNT(DISTINCT) of it, and two
#: joins. The cap keeps a margin of a third below the largest size that always spilled (3,072 bytes). Session 24, with
#: build rows that really hold the bytes (a column read after the join with a public one, ``x.z || CAST(pub.k AS
#: VARCHAR) > x.c``; a computed key ``x.c || '<lit>' > CAST(pub.k AS VARCHAR)``; a 1,000-byte column beside its
#: concatenation as a key): 2,048 bytes answered at 3,000,000 rows in each form, 3,072 at 1,000,000 and 3,000,000,
#: 4,096 failed at 1,000,000. A computed key counts towards the row (``expansion._computed_keys``).
MAX_JOIN_ROW_BYTES = 2 << 10


def check_join_row(row: int, column: str) -> None:
    """Refuse (free: the query's shape, the policy, public data) a private query one of whose joins may carry more than
    :data:`MAX_JOIN_ROW_BYTES` bytes of text of one private row; ``column`` names the widest column it reads."""
    if row > MAX_JOIN_ROW_BYTES:
        raise Unsupported(
            f"a row this query joins may carry {row:,} bytes of text, the values its join conditions compute included "
            f"(the widest column it reads is {column}); in a "
            f"join over private data Veil allows {MAX_JOIN_ROW_BYTES:,} (the engine cannot spill a join of longer rows "
            "to disk, so whether it ran would depend on the data)",
            hint=f"Read fewer or shorter text columns in the query's joins (a category column counts 4 bytes a character "
            f"of its `max_length`: a curator can declare `max_length` of at most {MAX_JOIN_ROW_BYTES // 4 - 8} or the "
            "column's `values`), compare shorter computed texts across the join (a condition's computed side, such as "
            "a || b, is held beside the columns it reads), or group or filter on the text in a query without the join",
        )


def check_person_work(rows: int, nodes: int, text: int) -> None:
    """Refuse (free: the query's shape, the policy, public data) a query whose work over one person's rows —
    ``rows`` = rows per unit × join multiplicity × statements — passes :data:`MAX_PERSON_EVALUATIONS` node
    evaluations or :data:`MAX_TEXT_WORK` bytes of text (``text`` bytes per row)."""
    rows = max(rows, 1)
    if text * rows > MAX_TEXT_WORK:
        raise Unsupported(
            f"one person's rows can make the engine build about {text * rows:,} bytes of text ({text:,} per row × "
            f"{rows:,} rows over all the query's statements); Veil allows {MAX_TEXT_WORK:,}",
            hint="Concatenate, case-map or REPLACE less text per row, ask for fewer quantiles, or pin the public join "
            "with an equality on its key",
        )
    if nodes * rows > MAX_PERSON_EVALUATIONS:
        raise Unsupported(
            f"one person's rows can make the engine evaluate about {nodes * rows:,} expression nodes ({nodes:,} per "
            f"row × {rows:,} rows over all the query's statements); Veil allows {MAX_PERSON_EVALUATIONS:,}",
            hint="Write a shorter query, ask for fewer quantiles, or pin the public join with an equality on its key",
        )


def check_raising_work(rows: int, raising: int, casts: int = 0) -> None:
    """Refuse (free) a query whose generated statements hold, per row (CTE references expanded, all statements
    together), ``raising`` operations that may raise and ``casts`` casts that may fail, when — priced at
    :data:`TRY_EVALUATIONS` and :data:`CAST_EVALUATIONS` each over ``rows`` = one person's rows (per unit × join
    multiplicity) — they pass :data:`MAX_PERSON_EVALUATIONS`."""
    work = max(rows, 1) * (raising * TRY_EVALUATIONS + casts * CAST_EVALUATIONS)
    if work > MAX_PERSON_EVALUATIONS:
        raise Unsupported(
            f"the generated SQL evaluates {raising:,} operations that may raise (arithmetic, dates, functions, "
            f"divisions) and {casts:,} casts that may fail on each of one person's {max(rows, 1):,} rows; one that "
            f"fails costs the engine about {TRY_EVALUATIONS:,} (a cast {CAST_EVALUATIONS:,}) ordinary operations, "
            f"so this may cost {work:,}, and Veil allows {MAX_PERSON_EVALUATIONS:,}",
            hint="Use fewer arithmetic or date operations, or statistics that need fewer (VARIANCE and quantiles add "
            "some), or pin the public join with an equality on its key",
        )


#: The most rows one derived public source may hold when it is materialised (a temporary table of the query's
#: connection, in the reader's memory): a source with more is refused, free (public data only). A pinned source
#: may hold many rows and join few per key; an unpinned one is refused past :data:`MAX_JOIN_FACTOR` anyway.
MAX_MATERIALISED_ROWS = 2_000_000
#: The most values (rows × columns) one materialised source may hold: the row cap alone let a source of 81 columns
#: hold 1.27 GB of the reader's memory before its refusal (red team s57 D1; about 9 bytes a value), free and at will.
#: 2,000,000 values are ~20 MB of numbers, as much as a one-column source at the row cap; a wider source holds
#: proportionally fewer rows.
MAX_MATERIALISED_VALUES = 2_000_000
#: The most bytes one materialised source may hold, by the catalog's bound on each row
#: (:func:`~veil.proxy.expansion.output_bytes`: a public text column's longest value × 4, its concatenations summed, a
#: number 32): a 61-row public table of 1 KB texts concatenated 20 times over a self-join held 76 MB in 3,721 rows, far
#: under the value cap (review s18). 64 MiB is the value cap's worth of numbers.
#:
#: These caps bound what a materialisation *keeps*. What *building* it holds — a GROUP BY's groups, a DISTINCT's or
#: COUNT(DISTINCT)'s hash table, a MEDIAN's values, a sort, a join's build side: every operator that consumes its whole
#: input before the ``LIMIT`` can stop it — is bounded by the engine: DuckDB evaluates each source on an instance of its
#: own under :data:`~veil.engines.duckdb.MATERIALISING_MEMORY` (twice this cap), with no disk to spill to, and a source
#: that needs more is refused free (red team s58 E3: 1.77M groups over a 121-row public table held 2.1 GB).
MAX_MATERIALISED_BYTES = 64 << 20
#: Meta key on the ``SELECT`` of a derived public source that is materialised: the temporary table's name. Copies of
#: the tree keep it, so the rewrite's statements are found to read the table (:func:`read_materialised`).
MATERIALISED = "veil_materialised"
_TEMP_PREFIX = "__veil_pub_"


@dataclass(frozen=True)
class Materialised:
    """A derived public source evaluated once, into temporary table ``name`` of the query's connection.

    ``sql`` (DuckDB) returns the source's rows with positional column names ``c0, c1, …``; ``columns`` are the
    source's own names, in order, under which the probe and the statements read them back."""

    name: str
    sql: str
    columns: tuple[str, ...]
    row_bytes: int = SCALAR_TEXT_BYTES  # a bound on the bytes of one of its rows (:func:`output_bytes`)

    @property
    def max_rows(self) -> int:
        """The most rows this source may hold: :data:`MAX_MATERIALISED_ROWS`, fewer for a wide one
        (:data:`MAX_MATERIALISED_VALUES` values, :data:`MAX_MATERIALISED_BYTES` bytes)."""
        by_values = MAX_MATERIALISED_VALUES // max(1, len(self.columns))
        by_bytes = MAX_MATERIALISED_BYTES // max(1, self.row_bytes)
        return max(1, min(MAX_MATERIALISED_ROWS, by_values, by_bytes))

    def max_rows_beside(self, held: Iterable[tuple[int, int, int]]) -> int:
        """The most rows this source may hold beside the ``held`` ones (rows, values, bytes of each source the same
        query already materialised): the caps bound all of one query's sources together, not each (red team s62 F2:
        N sources of 64 MiB each, one-to-one joins, held N × 64 MiB of the reader for the whole query); 0 when nothing
        is left."""
        rows = values = size = 0
        for r, v, b in held:
            rows, values, size = rows + r, values + v, size + b
        by_rows = MAX_MATERIALISED_ROWS - rows
        by_values = (MAX_MATERIALISED_VALUES - values) // max(1, len(self.columns))
        by_bytes = (MAX_MATERIALISED_BYTES - size) // max(1, self.row_bytes)
        return max(0, min(self.max_rows, by_rows, by_values, by_bytes))

    def held(self, rows: int) -> tuple[int, int, int]:
        """What ``rows`` rows of this source hold: (rows, values, a bound on their bytes)."""
        return rows, rows * len(self.columns), rows * self.row_bytes

    def read(self) -> exp.Select:
        """``SELECT c0 AS <name0>, … FROM <temporary table>``: the source's rows under its own column names."""
        cols = [exp.alias_(exp.column(f"c{i}"), c, quoted=True) for i, c in enumerate(self.columns)]
        return exp.select(*cols).from_(exp.Table(this=exp.to_identifier(self.name, quoted=True)))


@dataclass(frozen=True)
class Probe:
    """SQL over public data whose one value bounds how many rows of one public source join a private row."""

    source: str  # the alias of the public source, for messages
    sql: str  # DuckDB SQL returning one integer
    #: the temporary table the probe reads (created first, on the query's connection); None: a base table, or Spark
    materialised: Materialised | None = None


def conjuncts(cond: exp.Expression | None) -> list[exp.Expression]:
    """The top-level AND-ed terms of ``cond``."""
    if cond is None:
        return []
    cond = cond.unnest()
    if isinstance(cond, exp.And):
        return [c for part in cond.flatten() for c in conjuncts(part)]
    return [cond]


def _reads_private(source: exp.Expression | Scope, catalog: Catalog) -> bool:
    if isinstance(source, exp.Table):
        t = catalog.tables.get(source.name)
        if t is None:
            raise InternalError(f"resolved table {source.name!r} is not in the catalog")
        return not t.public
    if isinstance(source, Scope):
        return any(_reads_private(s, catalog) for _a, (_n, s) in source.selected_sources.items())
    return False


def private_path(root: Scope, catalog: Catalog) -> list[tuple[Scope, str]]:
    """(scope, alias of its source on the way to the private table), from the outer SELECT down."""
    for alias, (_node, source) in root.selected_sources.items():
        if isinstance(source, exp.Table) and _reads_private(source, catalog):
            return [(root, alias)]
        if isinstance(source, Scope) and _reads_private(source, catalog):
            return [(root, alias), *private_path(source, catalog)]
    return []


def _base_type(col: exp.Column, scope: Scope, catalog: Catalog) -> str | None:
    """The catalog type of the base-table column ``col`` is, through derived tables and CTEs that project it bare
    (no expression, no parentheses); None for anything else.

    Both sides of a pin are read as their catalog types (the bounded copy, and public tables through their
    catalog-typed reads), so two base columns of one type are compared as they are. An expression's type is
    never inferred for a pin: sqlglot types ``x * 2**57 / 1`` as an integer where the engine computes a DOUBLE and
    widens the public key to compare, so 193 public ids that round to one double matched one person's row against a
    planned multiplicity of 1 (red team s23, A3)."""
    for _ in range(64):  # bracket depth bounds the nesting of derived tables
        try:
            kind, inner, inner_scope, table = resolve_column(col, scope)
        except Unbounded:
            return None
        if kind == "table":
            t = catalog.tables.get(str(table))
            return None if t is None else t.columns.get(col.name)
        if not isinstance(inner, exp.Column) or inner_scope is None:
            return None
        col, scope = inner, inner_scope
    return None


def _pin_conditions(sel: exp.Expression, public_alias: str) -> list[exp.Expression | None]:
    """The conditions that filter joined rows of ``public_alias``: WHERE, the ON of every inner join, and
    the ON of an outer join only for that join's own table (a LEFT JOIN keeps every row of the sources
    before it, matched or not, so its ON bounds nothing else)."""
    conds: list[exp.Expression | None] = []
    for j in own_joins(sel):  # a bracketed join's too (red team s71 F1): every row it outputs satisfies its ON
        side = str(j.args.get("side") or "").upper()
        if not side or j.alias_or_name == public_alias:
            conds.append(j.args.get("on"))
    where = sel.args.get("where")
    conds.append(where.this if where is not None else None)
    return conds


def _pins(scope: Scope, public_alias: str, private_alias: str, catalog: Catalog) -> list[str]:
    sel = scope.expression
    conds = _pin_conditions(sel, public_alias)
    pins: list[str] = []
    for cond in conds:
        for term in conjuncts(cond):
            if not isinstance(term, exp.EQ):
                continue
            a, b = term.this.unnest(), term.expression.unnest()
            for x, y in ((a, b), (b, a)):
                if (
                    isinstance(x, exp.Column)
                    and isinstance(y, exp.Column)
                    and x.table == public_alias
                    and y.table == private_alias
                    and (kind := _base_type(x, scope, catalog)) is not None
                    and kind == _base_type(y, scope, catalog)
                ):
                    pins.append(x.name)
    return sorted(set(pins))


def _cte_definitions(tree: exp.Select) -> dict[str, exp.CTE]:
    return {cte.alias: cte for cte in tree.find_all(exp.CTE)}


def _with_needed_ctes(body: exp.Expression, ctes: dict[str, exp.CTE]) -> list[exp.CTE]:
    """The CTE definitions ``body`` reads (transitively), each after the ones it reads."""
    order: list[str] = []

    def visit(node: exp.Expression, seen: tuple[str, ...]) -> None:
        for t in node.find_all(exp.Table):
            name = t.name
            if name.startswith(CTE_PREFIX) and name in ctes and name not in order:
                if name in seen:
                    raise InternalError(f"CTE {name} reads itself")
                visit(ctes[name].this, (*seen, name))
                if name not in order:
                    order.append(name)

    visit(body, ())
    return [ctes[n].copy() for n in order]


def _row_choices(node: exp.Expression) -> list[str]:
    """The constructs under ``node`` that keep a subset of rows the data does not determine: ``LIMIT``/``OFFSET``
    (which rows, when the ``ORDER BY`` has ties or there is none) and ``DISTINCT ON`` (which row of each key)."""
    found = []
    for sel in node.find_all(exp.Select):
        if sel.args.get("limit") is not None or sel.args.get("offset") is not None:
            found.append("LIMIT/OFFSET")
        distinct = sel.args.get("distinct")
        if isinstance(distinct, exp.Distinct) and distinct.args.get("on") is not None:
            found.append("DISTINCT ON")
    found += ["FETCH" for _ in node.find_all(exp.Fetch)]
    # any LIMIT/OFFSET left below the top level, wherever sqlglot hangs it (resolve refuses one after a parenthesised
    # query; this keeps the rule whole should another form carry one)
    found += ["LIMIT/OFFSET" for _ in node.find_all(exp.Limit, exp.Offset)]
    return found


#: Aggregates whose value depends on the order the engine combines rows in: DuckDB adds the partial sums of its
#: threads in the order they finish (a DOUBLE sum of 400,000 rows took five values in 20 runs) and merges t-digests
#: the same way. Measured on one run, a row choice made with such a value (``HAVING SUM(x) = v``, a join or a filter
#: on it) bounds nothing about the next run (red team s52, A2).
ORDER_DEPENDENT = (exp.Sum, exp.Avg, exp.Variance, exp.VariancePop, exp.Stddev, exp.StddevPop, exp.StddevSamp, exp.ApproxQuantile)
#: Aggregates that return one of their inputs (or interpolate between two), exact on integers, text and dates. On a
#: DOUBLE they are not: 0.0 and -0.0 compare equal, so MAX/MIN keep whichever a thread saw first and a parallel sort
#: orders them per run, yet they convert to text ('0.0', '-0.0') and divide (±inf) differently. ``HAVING
#: CAST(MAX(x) AS VARCHAR) = '-0.0'`` over 600,000 public rows kept its groups in 12 of 15 runs (red team s55, A1).
SELECTING = (
    exp.Min, exp.Max, exp.Median, exp.Quantile, exp.PercentileCont, exp.PercentileDisc, exp.WithinGroup, exp.Anonymous,
)  # fmt: skip
#: The catalog types on which a selecting aggregate's value is the same on every run.
_EXACT_TYPES = frozenset({"int", "category", "date", "bool"})


def _run_dependent(agg: exp.Expression, scopes: dict[int, Scope], catalog: Catalog) -> bool:
    """May ``agg`` (an aggregate of a public source) take another value on another run of the same data? Always for
    :data:`ORDER_DEPENDENT`; for :data:`SELECTING` unless its argument is a bare column of an exact catalog type."""
    if isinstance(agg, ORDER_DEPENDENT):
        return True
    if isinstance(agg, exp.Anonymous) and str(agg.name).lower() not in {"quantile_cont", "quantile_disc"}:
        return False  # var/std are refused as ORDER_DEPENDENT's kin below; others are not aggregates
    arg = agg.expressions[0] if isinstance(agg, exp.Anonymous) and agg.expressions else agg.this
    arg = arg.unnest() if isinstance(arg, exp.Expression) else arg
    sel = agg.find_ancestor(exp.Select)
    scope = scopes.get(id(sel)) if sel is not None else None
    if not isinstance(arg, exp.Column) or scope is None:
        return True
    return _base_type(arg, scope, catalog) not in _EXACT_TYPES


def _order_dependent_choices(
    body: exp.Expression, defs: list[exp.Expression], scopes: dict[int, Scope], catalog: Catalog
) -> bool:
    """Does an aggregate of the public source ``body`` (or of a CTE it reads; both the query's own nodes) whose value
    may change from run to run (:func:`_run_dependent`) decide which rows the source holds? Only its top-level select
    list may hold one, and then with no ``HAVING`` or ``DISTINCT`` there (a value in a column neither keeps nor drops
    a row; the pins read bare columns only)."""
    kinds = (*ORDER_DEPENDENT, *SELECTING, exp.Variance)
    if any(_run_dependent(a, scopes, catalog) or _is_var(a) for d in defs for a in d.find_all(*kinds)):
        return True
    filtered = body.args.get("having") is not None or body.args.get("distinct") is not None
    for agg in body.find_all(*kinds):
        if not (_run_dependent(agg, scopes, catalog) or _is_var(agg)):
            continue
        child: exp.Expression = agg
        while child.parent is not None and child.parent is not body:
            child = child.parent
        if filtered or child.parent is None or child.arg_key != "expressions":
            return True
    return False


def _is_var(node: exp.Expression) -> bool:
    return isinstance(node, exp.Anonymous) and str(node.name).lower() in {"var", "var_samp", "std"}


def _source_select(
    node: exp.Expression,
    source: exp.Table | Scope,
    ctes: dict[str, exp.CTE],
    scopes: dict[int, Scope],
    catalog: Catalog,
    public: dict[str, dict[str, str]] | None = None,
    column_bytes: Callable[[str, str], int] | None = None,
) -> tuple[exp.Expression, int | None, Materialised | None]:
    """A FROM item reading just this public source, aliased ``__veil_src``, a cap on its rows (or None), and — with
    ``public`` (the catalog types of the public tables: materialising, DuckDB) — the :class:`Materialised` it reads.

    Materialised, a derived source is evaluated once, as written (its ``LIMIT``, ``OFFSET``, ``DISTINCT ON`` too):
    the probe counts the rows of that one evaluation, and the query joins the same rows (:func:`read_materialised`).
    The rules below still refuse what they refused (defence in depth); only the top-level choice is no longer
    measured without it, as the table holds the rows the query joins and nothing else.

    A source whose own top level keeps a subset of its rows the data does not determine (``ORDER BY … LIMIT n`` with
    ties, ``LIMIT`` without ``ORDER BY``, ``OFFSET``, ``DISTINCT ON``) is measured *without* that choice: each run of
    the engine may keep other rows (DuckDB's parallel sort orders ties differently from run to run), so the rows one
    run of the probe counted bound nothing about the run that answers the query (red team s52, A1: a probe saw 100
    distinct keys and planned ×1 while the query joined 100 rows of one key, 100× the planned sensitivity). Every
    run keeps a sub-multiset of the source without the choice, so its count per pin value bounds them all, and so
    does ``n`` (returned as the cap) for a literal ``LIMIT n``. The same choice anywhere deeper in the source, or in
    a CTE it reads, can change the rows above it in any direction (a join with the chosen rows), and is refused."""
    alias = exp.TableAlias(this=exp.to_identifier("__veil_src"))
    if isinstance(source, exp.Table):
        return exp.Table(this=exp.to_identifier(source.name), alias=alias), None, None
    whole = source.expression.copy()
    whole.set("with_", None)
    body = source.expression.copy()
    body.set("with_", None)
    cap = None
    if isinstance(body, exp.Select):
        limit = body.args.get("limit")
        value = limit.expression if isinstance(limit, exp.Limit) else None
        if isinstance(value, exp.Literal) and value.is_int:
            cap = max(int(value.this), 0)
        distinct = body.args.get("distinct")
        body.set("limit", None)
        body.set("offset", None)
        if isinstance(distinct, exp.Distinct) and distinct.args.get("on") is not None:
            body.set("distinct", None)
    needed = _with_needed_ctes(source.expression, ctes)
    own_with = source.expression.args.get("with_")
    defs = needed + ([c.copy() for c in own_with.expressions if c.alias not in {n.alias for n in needed}] if own_with else [])
    chosen = _row_choices(body) + [c for d in defs for c in _row_choices(d.this)]
    originals = [ctes[c.alias].this for c in needed if c.alias in ctes]
    originals += [c.this for c in own_with.expressions if c.alias not in {n.alias for n in needed}] if own_with else []
    if _order_dependent_choices(source.expression, originals, scopes, catalog):
        raise Unsupported(
            "a public subquery or CTE joined to private data keeps or drops rows by a SUM, AVG, VARIANCE, STDDEV or "
            "APPROX_QUANTILE, or a MIN, MAX, MEDIAN or quantile of a real number or an expression (in HAVING, DISTINCT, "
            "a nested subquery or a CTE): the engine rounds those, or picks between 0.0 and -0.0, in an order that "
            "changes from run to run, so how many rows one private row joins cannot be bounded before the query runs",
            hint="Aggregate public data only in the select list of the joined subquery itself, or use COUNT, or MIN, "
            "MAX or MEDIAN of an integer, text or date column",
        )
    if chosen:
        raise Unsupported(
            f"a public subquery or CTE joined to private data uses {chosen[0]} below its top level: the rows it keeps "
            "are not determined by the data (ties, parallel execution), so how many rows one private row joins cannot "
            "be bounded before the query runs",
            hint="Use LIMIT, OFFSET or DISTINCT ON only at the top level of the joined subquery, or filter with WHERE",
        )
    if public is not None:
        m = _materialised(source.expression, whole, defs, public, column_bytes or _scalar_bytes)
        source.expression.meta[MATERIALISED] = m.name
        return exp.Subquery(this=m.read(), alias=alias), None, m
    if defs:
        body.set("with_", exp.With(expressions=defs))
    return exp.Subquery(this=body, alias=alias), cap, None


def _materialised(
    original: exp.Expression,
    whole: exp.Expression,
    defs: list[exp.CTE],
    public: dict[str, dict[str, str]],
    column_bytes: Callable[[str, str], int],
) -> Materialised:
    """The one evaluation of a derived public source: ``whole`` (its ``SELECT``, row choices and all) with the CTE
    definitions it reads, each public table read as its catalog types and every operation total, as the generated
    query would compute it; its columns renamed ``c0, c1, …`` (a source may repeat a name)."""
    if defs:
        whole.set("with_", exp.With(expressions=[d.copy() for d in defs]))
    row_bytes = SCALAR_TEXT_BYTES * max(1, len(original.named_selects))
    if isinstance(whole, exp.Select):
        row_bytes = max(row_bytes, output_bytes(whole, column_bytes))
    read_public_typed(whole, public)
    body = duckdb_text(neutralise(make_total(whole, copy=False)))
    columns = tuple(original.named_selects)
    if not columns or any(not c or c == "*" for c in columns):
        raise InternalError(f"a resolved public source has unnamed columns: {columns}")
    positional = ", ".join(f"c{i}" for i in range(len(columns)))
    sql = f"SELECT * FROM ({body}) AS __veil_src({positional})"
    name = _TEMP_PREFIX + hashlib.sha256(f"{sql}\x00{columns}".encode()).hexdigest()[:24]
    return Materialised(name, sql, columns, row_bytes)


def read_materialised(tree: exp.Expression, materialised: tuple[Materialised, ...]) -> None:
    """In place: each derived public source of ``tree`` (a generated statement) marked :data:`MATERIALISED` reads its
    temporary table instead of running its SQL again. Every one of ``materialised`` must be found, or the statement
    would join rows no probe counted: an :class:`~veil.errors.InternalError` then (before the reservation, free)."""
    by_name = {m.name: m for m in materialised}
    found: set[str] = set()
    for node in list(tree.find_all(exp.Select)):
        name = node.meta.get(MATERIALISED)
        if name is None:
            continue
        m = by_name.get(name)
        if m is None:
            raise InternalError(f"a generated statement reads public source {name}, which was not materialised")
        node.replace(m.read())
        found.add(name)
    missing = sorted(set(by_name) - found)
    if missing:
        raise InternalError(f"a generated statement does not read the materialised public sources {missing}")


def _scalar_bytes(table: str, column: str) -> int:
    return SCALAR_TEXT_BYTES


def probes(
    analysis: Analysis,
    catalog: Catalog,
    *,
    materialise: bool = False,
    column_bytes: Callable[[str, str], int] | None = None,
) -> list[Probe]:
    """One probe per public source on the private path of ``analysis`` (empty for a plain table).

    With ``materialise`` each derived public source's probe reads a :class:`Materialised` evaluation of it, and its
    ``SELECT`` in ``analysis.tree`` is marked :data:`MATERIALISED` for :func:`read_materialised`."""
    root = build_scope(analysis.tree)
    if root is None:
        raise InternalError("a validated query has no scope")
    ctes = _cte_definitions(analysis.tree)
    scopes = {id(sc.expression): sc for sc in root.traverse()}
    public = public_types(catalog, analysis.tables)
    out: list[Probe] = []
    for scope, private_alias in private_path(root, catalog):
        for alias, (node, source) in scope.selected_sources.items():
            if alias == private_alias:
                continue
            if _reads_private(source, catalog):
                raise InternalError("two sources of one scope read private data")
            src, cap, m = _source_select(node, source, ctes, scopes, catalog, public if materialise else None, column_bytes)
            pins = _pins(scope, alias, private_alias, catalog)
            if pins:
                cols = [exp.column(p, table="__veil_src") for p in pins]
                inner = (
                    exp.select(exp.alias_(exp.Count(this=exp.Star()), "__veil_n"))
                    .from_(src)
                    .where(exp.and_(*(exp.Not(this=exp.Is(this=c.copy(), expression=exp.Null())) for c in cols)))
                    .group_by(*cols)
                )
                probe = exp.select("COALESCE(MAX(__veil_n), 0)").from_(inner.subquery("__veil_groups"))
            else:
                probe = exp.select(exp.Count(this=exp.Star())).from_(src)
            if cap is not None:  # a literal LIMIT n keeps at most n rows, whichever
                probe = exp.select(exp.Least(this=probe.subquery(), expressions=[exp.Literal.number(cap)]))
            # the public source as the engine computes it inside the generated query: each public table read as
            # its catalog types (public_reads), total and neutral (DOUBLE literals, TRY, explicit casts), so a pin
            # matches the rows the engine will join
            read_public_typed(probe, public)
            sql = duckdb_text(neutralise(make_total(probe, copy=False)))
            out.append(Probe(alias, sql, m))
    return out
