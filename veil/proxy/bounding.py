"""Bounded copies: every private table is read through a clamped, contribution-bounded copy.

For each private table Veil keeps one copy per **identity** — a hash of the table's whole policy
spec (columns, types, bounds, declared values, privacy unit, contribution bound), the version of its
data (:meth:`Engine.table_version`) and this module's algorithm — built once and reused by every
later query. The copy holds only the declared columns, each cast to its declared type (``TRY_CAST``:
a value that does not convert becomes NULL), numeric ones clamped to their bounds (NaN becomes
NULL, ±inf the bound). For a user-level table it keeps at most ``max_rows_per_unit`` rows per unit —
the unit column's *stored* value, not its typed or clamped copy, so no cast or bound merges two people —
chosen by a keyed cryptographic hash (SHA-256 of a secret salt and the typed row's content, unit
included), so which rows are kept depends only on that unit's own rows and not on physical order;
rows whose unit is NULL or NaN are dropped (no person can be bounded without an identifier). The SELECT is
built as a neutral tree (:func:`build_tree`) that each engine renders in its dialect; the row's text
reads the same on every engine, so DuckDB and Spark keep the same rows. A declared date column stored as text is
read as the query path reads a text cast to a date (:func:`veil.engines.neutral.guard_time_text`: the texts of one
ISO subset, any other NULL on every engine), not by the engine's own, looser cast. Category (text) values are cut
to the column's ``text_cap`` characters (policy ``max_length``, default 1,024), so the work one person's
text can cause in any query is bounded too.

Each bounded real column also gets its **pre-scaled grid copy** (:func:`grid_columns`):
``CAST(FLOOR(CAST(c AS DOUBLE) · 2^k) AS BIGINT)`` of the copy's own clamped value, with ``k`` the fixed-point
exponent of the column's bounds (:func:`veil.proxy.fixed_point.exponent`). It is the very value the rewrite puts on
the grid for a real SUM/AVG of the bare column (:func:`veil.proxy.rewrite._fixed`), computed once per table version
instead of on every query; the rewrite reads it only where its exponent is the column's. A ``WHERE`` comparison
``c >= v`` or ``c < v`` with a number ``v`` on the grid compares it too (``g >= v·2^k``, the same truth value on every
row: :func:`veil.proxy.rewrite._compare_on_grid`), so a query that filters and sums ``c`` reads one column, not two. Its name
starts with an underscore, which no declared column can (:func:`veil.policy.normalise_name`), and the catalog never
lists it, so no analyst query can name it.

A changed bound, type, unit column or contribution bound changes the identity, so no query ever reads
a copy built for another policy. Salts and identities live in the ledger, not the warehouse.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TypeVar

import sqlglot
from sqlglot import exp

from veil.engines import open_engine
from veil.engines.base import Engine
from veil.engines.neutral import guard_time_text
from veil.errors import CopyNotReady, InternalError, PolicyError, VeilError
from veil.policy import ColumnSpec, Policy, TableSpec
from veil.proxy import fixed_point
from veil.proxy.catalog import SQL_TYPES  # the copy holds each column as the catalog types it
from veil.store.ledger import Ledger
from veil.store.warehouse import mark_ledger

__all__ = [
    "ALGORITHM", "BoundedCopies", "GridColumn", "build_sql", "build_tree", "engine_generation", "grid_columns",
    "grid_value_sql", "prepare", "ready", "spec_identity", "text_dates",
]  # fmt: skip

T = TypeVar("T")

#: Changes whenever the copy's construction changes, so old copies are never reused.
ALGORITHM = "veil-bounded-copy/9"


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _lit(v: object) -> str:
    return repr(float(v)) if isinstance(v, float) else str(int(v))  # type: ignore[call-overload]


_SPEC_FACTS: dict[tuple[int, str], tuple[TableSpec, object]] = {}
_SPEC_FACTS_LOCK = threading.Lock()


def _per_spec(spec: TableSpec, what: str, compute: Callable[[TableSpec], T]) -> T:
    """``compute(spec)``, computed once per spec object (a frozen policy value; every query of a session asks again).
    The cache holds the spec itself, so its id cannot be reused while the entry lives."""
    key = (id(spec), what)
    with _SPEC_FACTS_LOCK:
        hit = _SPEC_FACTS.get(key)
    if hit is not None and hit[0] is spec:
        return hit[1]  # type: ignore[return-value]
    value = compute(spec)
    with _SPEC_FACTS_LOCK:
        if len(_SPEC_FACTS) > 1024:
            _SPEC_FACTS.clear()
        _SPEC_FACTS[key] = (spec, value)
    return value


def spec_identity(spec: TableSpec) -> str:
    """A stable text naming everything in the spec that shapes the copy (and nothing else)."""
    return _per_spec(spec, "identity", _spec_identity)


def _spec_identity(spec: TableSpec) -> str:
    cols = [
        [c.name, c.type, None if c.lower is None else str(c.lower), None if c.upper is None else str(c.upper),
         None if c.values is None else [repr(v) for v in c.values], c.text_cap if c.type == "category" else None]
        for c in spec.columns.values()
    ]  # fmt: skip
    return json.dumps(
        {"table": spec.name, "columns": cols, "unit": spec.privacy_unit, "max_rows": spec.max_rows_per_unit},
        sort_keys=True,
    )


def _typed(col: ColumnSpec) -> str:
    """The column cast to its declared type, numeric ones clamped to their bounds (NULL stays NULL).

    The bounds are cast to the column's type too, so every engine types the CASE as the column (Sail 0.7.2 gives
    a CASE its first branch's type in a table's schema and then writes the wider type it computed).
    """
    q = _q(col.name)
    v = f"TRY_CAST({q} AS {SQL_TYPES[col.type]})"
    if col.type == "float":
        v = f"(CASE WHEN isnan({v}) THEN NULL ELSE {v} END)"
    if col.type == "category":
        # decode(encode(…)): the text without the column's collation (a NOCASE column compared 'alice' and 'ALICE'
        # as one value in every query, and in the partition of units: red team s25, A1/A3/A4)
        v = f"left(decode(encode({v})), {int(col.text_cap)})"
    if col.type in ("int", "float") and col.bounded:
        lo, hi = (f"CAST({_lit(b)} AS {SQL_TYPES[col.type]})" for b in (col.lower, col.upper))
        v = f"(CASE WHEN {v} < {lo} THEN {lo} WHEN {v} > {hi} THEN {hi} ELSE {v} END)"
    return f"{v} AS {q}"


@dataclass(frozen=True)
class GridColumn:
    """The bounded copy's pre-scaled grid copy of a real column: its name in the copy and its exponent ``k``."""

    name: str
    exponent: int


def grid_columns(spec: TableSpec) -> Mapping[str, GridColumn]:
    """Each bounded real column of ``spec`` → its pre-scaled grid column in the bounded copy (a function of the
    spec alone: the copy's identity covers it)."""
    return _per_spec(spec, "grids", _grid_columns)


def _grid_columns(spec: TableSpec) -> Mapping[str, GridColumn]:
    out = {}
    for i, col in enumerate(spec.columns.values()):
        if col.type == "float" and col.bounded:
            k = fixed_point.exponent(Fraction(col.lower), Fraction(col.upper))  # type: ignore[arg-type]
            out[col.name] = GridColumn(f"__veil_grid_{i}", k)
    return out


def grid_value_sql(column_sql: str, k: int) -> str:
    """One row's value on the grid of ``2**-k`` as a BIGINT, as the copy stores it. The rewrite builds the same
    expression as a tree (``rewrite._fixed``, no text parsed per query); ``tests/proxy/test_pre_scaled_grid.py``
    checks the two agree row by row."""
    factors = "".join(f" * CAST({f!r} AS DOUBLE)" for f in fixed_point.grid_factors(k))
    return f"CAST(FLOOR(CAST(({column_sql}) AS DOUBLE){factors}) AS BIGINT)"


def _with_grids(select: str, spec: TableSpec) -> str:
    """``select`` (the copy's declared columns) with each bounded real column's pre-scaled grid copy."""
    grids = grid_columns(spec)
    if not grids:
        return select
    cols = [_q(c) for c in spec.columns]
    cols += [f"{grid_value_sql(_q(c), g.exponent)} AS {_q(g.name)}" for c, g in grids.items()]
    return f"SELECT {', '.join(cols)} FROM ({select}) AS __veil_clamped"


def _row_text(columns: list[str]) -> str:
    """An engine-independent text of a typed row: each value as ``length:text`` (``N`` for NULL), ``|``-joined."""
    parts = [
        f"coalesce(CAST(length(CAST({_q(c)} AS VARCHAR)) AS VARCHAR) || ':' || CAST({_q(c)} AS VARCHAR), 'N')" for c in columns
    ]
    return " || '|' || ".join(parts)


#: Stored column types (DuckDB's and Spark's names, without a length) that hold text.
_TEXT_STORED = frozenset({"VARCHAR", "STRING", "TEXT", "CHAR", "BPCHAR", "NVARCHAR", "NCHAR", "CHARACTER VARYING"})


def text_dates(spec: TableSpec, stored: Sequence[tuple[str, str]]) -> frozenset[str]:
    """The declared ``date`` columns of ``spec`` that the table stores as text (``stored``: the engine's
    :meth:`~veil.engines.base.Engine.table_columns`)."""
    return frozenset(
        name
        for name, kind in stored
        if name in spec.columns and spec.columns[name].type == "date" and kind.split("(")[0].strip().upper() in _TEXT_STORED
    )


def _guard_text_dates(tree: exp.Select, dates: frozenset[str]) -> None:
    """Each cast of a column of ``dates`` (declared dates stored as text) to DATE reads the text as the query path
    does: through the neutral render's one guard, never the engine's own reading (DuckDB's ``TRY_CAST`` read
    ``' 2020-01-01'``, ``'2020-1-1'`` and ``'infinity'`` as dates, which the query path and Spark read as NULL)."""
    for cast in list(tree.find_all(exp.TryCast)):
        if isinstance(cast.this, exp.Column) and cast.this.name in dates and cast.to.is_type(exp.DataType.Type.DATE):
            guard_time_text(cast)


def build_tree(spec: TableSpec, salt: str, dates: frozenset[str] = frozenset()) -> exp.Select:
    """The SELECT producing the bounded copy of ``spec``'s table, as a neutral tree (each engine renders it).

    The rows kept per unit are ranked by SHA-256 of the salt and the typed row's text, which reads the
    same on every engine (integers, text, dates and booleans; doubles as each engine prints them).
    ``dates``: the declared date columns stored as text (:func:`text_dates`).
    """
    if not all(c.isalnum() for c in salt):
        raise InternalError("a bounded-copy salt must be alphanumeric")
    typed = ", ".join(_typed(c) for c in spec.columns.values())
    if spec.privacy_unit is None:
        sql = f"SELECT {typed} FROM {_q(spec.name)}"
    else:
        # rows are bounded per *stored* unit value, never per its typed or clamped copy: a bound or a cast
        # would merge different people into one unit (ids 10, 11, … clamped to 10; '10' and '010' read as one
        # number), and a newcomer would then displace other people's rows instead of adding its own. The
        # partition is the stored value's text without any collation, which tells apart what the engine's
        # equality merges (stored DOUBLE ids 0.0 and -0.0: red team s23, A4; ids 'alice' and 'ALICE' in a NOCASE
        # column: s25, A1)
        unit = _q(spec.privacy_unit)
        key = f"sha256('{salt}' || '|' || {_row_text(list(spec.columns))})"
        cols = ", ".join(_q(c) for c in spec.columns)
        sql = (
            f"SELECT {cols} FROM (SELECT {cols}, row_number() OVER (PARTITION BY decode(encode(CAST(__veil_unit AS VARCHAR))) "
            f"ORDER BY {key}) AS __veil_rn "
            f"FROM (SELECT {typed}, {unit} AS __veil_unit FROM {_q(spec.name)}) AS __veil_typed "
            "WHERE __veil_unit IS NOT NULL AND NOT coalesce(isnan(TRY_CAST(__veil_unit AS DOUBLE)), false)) AS __veil_ranked "
            f"WHERE __veil_rn <= {int(spec.max_rows_per_unit)}"
        )
    tree = sqlglot.parse_one(_with_grids(sql, spec), read="duckdb")
    if not isinstance(tree, exp.Select):
        raise InternalError("the bounded-copy SQL is not a SELECT")
    _guard_text_dates(tree, dates)
    return tree


def build_sql(spec: TableSpec, salt: str, dialect: str = "duckdb", dates: frozenset[str] = frozenset()) -> str:
    """:func:`build_tree` rendered in ``dialect`` (for reading; engines render the tree themselves)."""
    return build_tree(spec, salt, dates).sql(dialect=dialect)


class BoundedCopies:
    """Finds or builds the bounded copy of a private table; caches names per engine generation."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._names: dict[tuple[str, int, str], str] = {}
        #: copies :func:`ready` could not prepare, per warehouse, engine generation and spec: not tried again by it until
        #: one of them changes (a query on such a table still tries, and refuses), with the policy's reason when there
        #: is one that stands that long (a table without a declared column; a ``veil serve`` worker, which never
        #: builds: red team s44 A3); a refusal that may pass (the writer held elsewhere) is not remembered
        self._unready: dict[tuple[str, int, str], PolicyError | None] = {}

    def table(
        self, spec: TableSpec, engine: Engine, ledger: Ledger, *, scope: str, generation: Callable[[], int], build: bool = True
    ) -> str:
        """The name of the bounded copy of ``spec`` (built if needed). ``scope`` names the warehouse. ``build=False``
        (a planning under a timer): a copy that is not built yet raises :class:`~veil.errors.CopyNotReady` instead of
        being built (the build reads the raw table, so its time is data's to decide: red team s40 A1)."""
        if spec.public:
            raise InternalError(f"public table {spec.name!r} has no bounded copy")
        ident = spec_identity(spec)
        key = (scope, generation(), ident)
        with self._lock:
            name = self._names.get(key)
        if name is not None:
            return name
        version = engine.table_version(spec.name, list(spec.columns))
        identity = hashlib.sha256(f"{ALGORITHM}\x00{ident}\x00{version}".encode()).hexdigest()
        name = f"_veil_bounded_{spec.name}_{identity[:24]}"
        known = ledger.bounded_copy(identity)
        if known is None or not engine.table_exists(known[0]):
            stored = engine.table_columns(spec.name)  # the schema, read only to build (a version names one)
            _check_columns(spec, stored)
            if not build:
                with self._lock:
                    reason = self._unready.get(key)
                if reason is not None:
                    # the untimed preparation just before could not build it, for a reason of the policy or of this
                    # process (a worker of `veil serve --processes N`): "run the query again" would never be answered
                    # (red team s44 A3). Rows never decide a PolicyError, so saying it tells nothing of them.
                    raise PolicyError(reason.message, hint=reason.hint)
                raise CopyNotReady(
                    f"the table {spec.name!r} changed (its policy or its data) just before this query was planned, and "
                    "its bounded copy is not built yet; nothing was charged",
                    hint="Run the query again",
                )
            salt = known[1] if known is not None else secrets.token_hex(32)
            engine.materialise(name, engine.render(build_tree(spec, salt, text_dates(spec, stored))))
            for old in ledger.record_bounded_copy(identity, spec.name, name, salt):
                if old != name:
                    engine.drop(old)
        else:
            name = known[0]
        with self._lock:
            self._names[(scope, generation(), ident)] = name
        return name

    def known(self, spec: TableSpec, *, scope: str, generation: Callable[[], int]) -> bool:
        """Has this process found or built ``spec``'s bounded copy for the engine's current generation? (A look-up:
        no statement, no ledger read.)"""
        key = (scope, generation(), spec_identity(spec))
        with self._lock:
            return key in self._names

    def ready(self, spec: TableSpec, engine: Engine, ledger: Ledger, *, scope: str, generation: Callable[[], int]) -> None:
        """Find or build ``spec``'s copy unless this process knows it already, or failed to prepare it for this
        warehouse, generation and spec (remembered: a look-up next time)."""
        key = (scope, generation(), spec_identity(spec))
        with self._lock:
            if key in self._names or key in self._unready:
                return
        reason: PolicyError | None = None
        try:
            if engine.table_exists(spec.name):
                self.table(spec, engine, ledger, scope=scope, generation=generation)
                return
        except VeilError as exc:
            if type(exc) is PolicyError:  # the policy's or this process's reason, never an engine's (rows may decide those)
                if not _stands(spec, engine):
                    # it may pass (the warehouse's writer held by another process): not remembered, so the timed
                    # planning asks for a retry (CopyNotReady) and the next preparation tries again
                    return
                reason = exc
        key = (scope, generation(), spec_identity(spec))  # the generation as the planning will read it (a reader
        # this look opened for the first time numbered it: 0 before, 1 after)
        with self._lock:
            if len(self._unready) >= 1024:
                self._unready.clear()
            self._unready[key] = reason


def _stands(spec: TableSpec, engine: Engine) -> bool:
    """Does a refusal to prepare ``spec``'s copy stand until the engine's generation or the spec changes? It does in a
    process that never writes the warehouse (a ``veil serve`` worker), and when the table lacks a declared column
    (its schema changes only with a write, which moves the generation); any other may pass (a writer held
    elsewhere)."""
    if not getattr(engine, "writes_warehouse", True):
        return True
    try:
        return bool(_missing_columns(spec, engine.table_columns(spec.name)))
    except VeilError:
        return False


def _missing_columns(spec: TableSpec, stored: Sequence[tuple[str, str]]) -> list[str]:
    """The columns the policy declares that the warehouse's table (``stored``: its columns and their types) lacks
    (its schema, not its data)."""
    have = {name for name, _ in stored}
    return [c for c in spec.columns if c not in have]


def _check_columns(spec: TableSpec, stored: Sequence[tuple[str, str]]) -> None:
    """The warehouse's table has every column the policy declares (its schema, not its data)."""
    missing = _missing_columns(spec, stored)
    if missing:
        raise PolicyError(
            f"table {spec.name!r} in the warehouse has no column {', '.join(map(repr, missing))}, which the policy declares",
            hint=f"Load a file with these columns (`veil ingest --replace --table {spec.name} …`), or remove them from "
            "the policy",
        )


#: One cache per process (sessions share copies).
COPIES = BoundedCopies()


def engine_generation(engine: Engine) -> int:
    """The engine's generation (bumped when a curator write in this process reopened its reader), else 0."""
    gen = getattr(engine, "generation", None)
    return int(gen()) if callable(gen) else 0


def ready(policy: Policy, engine: Engine, ledger: Ledger) -> None:
    """Find or build the bounded copy of every private table of ``policy`` that the warehouse holds, as a session
    will ask for it (same engine, ledger, scope and generation as ``Env.bounded_copy``): what ``veil serve`` runs,
    untimed, before it plans a query under a timer, so that no timer covers the build, which reads the raw table
    (red team s40 A1). A copy this process knows costs a look-up; a table that cannot be prepared (absent, columns
    missing) is left to the query that names it, which refuses as before."""
    scope = str(policy.database_path)

    def generation() -> int:
        return engine_generation(engine)

    for spec in policy.tables.values():
        if not spec.public:
            COPIES.ready(spec, engine, ledger, scope=scope, generation=generation)


def prepare(policy: Policy, tables: Sequence[str] | None = None) -> dict[str, str]:
    """Build (or find) the bounded copy of each private table of ``tables`` (default: every private table
    of the policy), for the curator's side: `veil ingest` after loading a table, `veil serve` before it
    listens. Work that grows with the raw table then never lands in an analyst's query. Returns, per table
    that could not be prepared (absent from the warehouse, say), why; a query on it builds or refuses then."""
    names = sorted(n for n, t in policy.tables.items() if not t.public) if tables is None else list(tables)
    problems: dict[str, str] = {}
    engine = open_engine(policy)
    ledger = Ledger.for_policy(policy)
    try:
        # the warehouse's high-water mark of the ledger is raised to the charges recorded so far (after the engine's
        # and the ledger's close: it writes the warehouse): a backup of the ledger from before them is refused from
        # then on (review s21 X2; queries themselves never write the warehouse)
        mark = ledger.history_mark()
        for name in names:
            spec = policy.table(name)
            if spec.public:
                continue
            if not engine.table_exists(name):
                problems[name] = "the table is not in the warehouse yet"
                continue
            try:
                COPIES.table(spec, engine, ledger, scope=str(policy.database_path), generation=lambda: engine_generation(engine))
            except VeilError as exc:
                problems[name] = exc.message
    finally:
        engine.close()
        ledger.close()
    mark_ledger(policy, mark)
    return problems
