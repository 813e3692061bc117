"""An analyst's query session: the environment the pipeline's passes run in, and its public methods.

``QuerySession(policy, analyst)`` holds one warehouse engine cursor, one public-mirror cursor and one
ledger handle (not shareable across threads). ``.execute(sql, epsilon=None) -> Answer`` runs every
pass of :data:`veil.proxy.pipeline.PASSES`; ``.explain(sql)`` stops after ``plan`` (spends nothing);
``.describe(sql)`` after ``prepare`` (column names and types, nothing run on data, nothing spent);
``.budget()``; ``.cancel()`` interrupts the running statement from another thread (``.cancel_public()`` only
its work on public data); ``.close()``.

The policy is re-read whenever its file changes, before each query: a curator's lowered budget or
changed bounds apply to open sessions at once. Test-only noise sources are reachable only through
:mod:`veil.proxy._testing`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import itertools
import logging
import math
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, TypeVar

import duckdb
import numpy as np
import pandas as pd
import sqlglot
from sqlglot import exp

from veil._json import to_jsonable
from veil.engines import open_engine
from veil.engines.base import Engine, EngineError, Result, output_type
from veil.engines.duckdb import DuckDBEngine
from veil.engines.neutral import duckdb_text
from veil.errors import (
    CopyNotReady,
    InputError,
    InternalError,
    PolicyError,
    QueryRejected,
    UnknownTable,
    Unsupported,
    ValueTooLarge,
    WarehouseChanged,
)
from veil.mechanisms.budget import as_epsilon, format_epsilon
from veil.policy import Policy, file_stamp, load_policy
from veil.proxy import bounding, fixed_point, multiplicity, pipeline, plan_cache
from veil.proxy.add_noise import PRODUCTION, NoiseSource
from veil.proxy.answer import Answer, BudgetStatus, Explanation, OutputColumn, explanation
from veil.proxy.catalog import Catalog, build_catalog, public_types
from veil.proxy.expansion import SCALAR_TEXT_BYTES
from veil.proxy.multiplicity import (
    Materialised,
    Probe,
)
from veil.proxy.parse import DEFAULT_LIMITS, Limits
from veil.proxy.plan import MAX_HELD_CHARS, MAX_PUBLIC_GROUPS, MAX_RELEASED_VALUES, GroupKey, QueryPlan
from veil.proxy.postprocess import FRAME, PostProcess, aggregate_types, finalize_aggregates
from veil.proxy.rewrite import EngineQueries, rewrite
from veil.proxy.validate import Analysis
from veil.store.ledger import Account, Ledger, Reservation, accounts_for
from veil.store.releases import LoggedStatistics, ReleasedVector, published_tables

__all__ = ["Env", "QuerySession"]

log = logging.getLogger("veil.query")

#: How many times :meth:`QuerySession.execute` plans a query again after a free :class:`WarehouseChanged` (another
#: session's first bounded copy, a curator write in this process) before passing it on: each try is free, and a
#: write cannot move the reader between a try's check and its charged run (the run holds the reader).
_REPLANS = 2

T = TypeVar("T")

#: Post-processing runs over at most MAX_RELEASED_VALUES noisy rows: one thread, and a memory limit of its own (the
#: default, 80% of RAM for each of the server's sessions, let many sessions together pass the machine's memory).
_SAFE_POST_CONFIG = {
    "enable_external_access": "false",
    "threads": "1",
    "memory_limit": "512MB",
    "lock_configuration": "true",
}
#: Frame dtypes per wire type: nullable ones, so a NULL group key or value can never fail a conversion.
_DTYPES = {"bigint": "Int64", "double": "float64", "text": "object", "boolean": "boolean", "date": "datetime64[s]"}


#: Result types whose values have a fixed width: an answer of only these holds at most a few bytes per value.
_FIXED_WIDTH = re.compile(
    r'(U?(TINYINT|SMALLINT|INTEGER|BIGINT|HUGEINT)|BOOLEAN|FLOAT|DOUBLE|DECIMAL\(\d+,\d+\)|DATE|TIME|TIMESTAMP.*|INTERVAL|"NULL")'
)
#: The temporary table an answer with text is built into before it is fetched (:func:`_held_rows`).
_POST_ANSWER = "__veil_post"


def _held_rows(con: duckdb.DuckDBPyConnection, sql: str) -> tuple[list[tuple[Any, ...]], list[str]]:
    """The rows and types of a post-processing statement. An answer with a column of text (or any other value of no
    fixed width) is built as a temporary table first, within the connection's memory limit, and refused past
    MAX_HELD_CHARS characters before Python holds it (red team s63 F2: a 100 kB literal beside 1,500 public groups was
    held by DuckDB once, as a constant, and by Python and the ledger's release log once per group, 150 MB)."""
    rel = con.sql(sql)
    types = [str(t) for t in rel.types]
    if all(_FIXED_WIDTH.fullmatch(t) for t in types):
        return con.execute(sql).fetchall(), types
    con.execute(f"CREATE OR REPLACE TEMP TABLE {_POST_ANSWER} AS {sql}")
    try:
        sizes = con.execute(f"SELECT SUM(COALESCE(LENGTH(CAST(COLUMNS(*) AS VARCHAR)), 0)) FROM temp.{_POST_ANSWER}").fetchone()
        held = sum(int(v or 0) for v in sizes or ())
        if held > MAX_HELD_CHARS:
            raise ValueTooLarge(
                f"the answer would hold {held:,} characters of text; Veil answers with at most {MAX_HELD_CHARS:,}",
                hint="Select shorter values, or fewer groups",
            )
        return con.execute(f"SELECT * FROM temp.{_POST_ANSWER}").fetchall(), types
    finally:
        con.execute(f"DROP TABLE IF EXISTS temp.{_POST_ANSWER}")


def _py(v: Any) -> Any:
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        return float(v)
    if isinstance(v, np.bool_):
        return bool(v)
    return v


def _py_column(values: np.ndarray) -> list[Any]:
    """:func:`_py` of each value of a released column, in one call where NumPy gives the same Python values
    (``tolist`` of an integer, real or boolean array)."""
    if values.dtype.kind in "iufb":
        out: list[Any] = values.tolist()
        return out
    return [_py(v) for v in values.tolist()]


#: The types a logged answer's cell keeps as it is (:func:`~veil._json.to_jsonable` would return it unchanged).
_JSON_PLAIN = frozenset({str, int, float, type(None)})


def _json_row(row: Sequence[Any]) -> list[Any]:
    """One answer row as the ledger logs it: ``to_jsonable(v, nan_as_null=False)`` of each value, skipped for a row
    of plain values (the common released row: a text key and numbers), which it would return unchanged."""
    if _JSON_PLAIN.issuperset(map(type, row)):
        return list(row)
    return [to_jsonable(v, nan_as_null=False) for v in row]


def _json_rows(rows: Sequence[tuple[Any, ...]]) -> tuple[tuple[Any, ...], ...]:
    """``tuple(tuple(_json_row(r)) for r in rows)``; when every row is a tuple of plain values (a released answer's
    group keys, the common case) the rows themselves, after one type check over all their cells."""
    if _TUPLE.issuperset(map(type, rows)) and _JSON_PLAIN.issuperset(map(type, itertools.chain.from_iterable(rows))):
        return tuple(rows)
    return tuple(tuple(_json_row(r)) for r in rows)


_TUPLE = frozenset({tuple})
_INT = frozenset({int})


def _object_array(values: list[Any]) -> np.ndarray:
    """``values`` in a one-dimensional object array, each as it is."""
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


#: The types :func:`_py` returns as they are (checked exactly: NumPy's float64 is a float subclass it converts).
_PY_PLAIN = frozenset({str, int, float, bool, type(None)})


def _py_values(values: list[Any]) -> list[Any]:
    """``[_py(v) for v in values]``, with one type check over the list when no value needs converting."""
    if _PY_PLAIN.issuperset(map(type, values)):
        return values
    return [_py(v) for v in values]


def _int(v: Any) -> int:
    """A count or bucket from the engine; NULL (never expected) counts as 0 so nothing here can fail."""
    try:
        return int(v) if v is not None else 0
    except (TypeError, ValueError, OverflowError):
        return 0


def _num(v: Any) -> Any:
    """An exact statistic from the engine as a Python int or finite float (NULL or non-finite: 0)."""
    if v is None or isinstance(v, bool):
        return int(bool(v))
    if isinstance(v, int):
        return v
    try:
        f = float(v)
    except (TypeError, ValueError, OverflowError):
        return 0
    return f if math.isfinite(f) else 0


def _group_order(g: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple((v is None, type(v).__name__, v if v is not None else 0) for v in g)


def _add(a: Any, b: Any) -> Any:
    """One raw quantity (a COUNT or a SUM, NULL for a SUM of no rows) of two merged groups."""
    if a is None:
        return b
    return a if b is None else a + b


def _one_float(v: Any) -> Any:
    """A float key in one spelling per value: NaN (equal to nothing) becomes NULL, and ``-0.0`` becomes ``0.0``.

    An engine groups ``-0.0`` with ``0.0`` and keeps the spelling of whichever row it met first, so the
    sign of a released zero key would be one row's bit, whatever the noise (red team s15, A1)."""
    if isinstance(v, float):
        return None if v != v else v + 0.0
    return v


def _in_python_range(v: Any) -> Any:
    # DuckDB hands back a DATE/TIMESTAMP outside years 1–9999 as a text (and ±infinity as the
    # largest/smallest value Python holds): not a value of the column's type, so the NULL group
    return v if isinstance(v, (dt.date, dt.datetime)) or v is None else None


def exact_keys(engine_types: Sequence[str]) -> Callable[[Sequence[Any]], tuple[Any, ...]]:
    """How one fetched row's group key becomes a dictionary key, as a function of the key types only.

    Groups are ordered and merged in Python, so a key must hash and compare exactly and in one total
    order: a NaN (equal to nothing) becomes NULL, ``-0.0`` becomes ``0.0`` (the engine keeps the first
    row's spelling of a zero key), and a date or timestamp Python cannot hold becomes NULL. Two engine
    groups that meet in one key are *merged* (their counts and sums added, see :func:`_add`) — never one
    overwritten by the other — so this is grouping by the fetched value: each person's rows still lie in
    as many groups as before, and the L1 sensitivity holds."""
    fixes: list[Callable[[Any], Any] | None] = []
    for t in engine_types:
        upper = str(t).upper()
        if upper in ("FLOAT", "DOUBLE", "REAL"):
            fixes.append(_one_float)
        elif upper.startswith(("DATE", "TIMESTAMP")):
            fixes.append(_in_python_range)
        else:
            fixes.append(None)
    if all(f is None for f in fixes):
        return tuple
    return lambda row: tuple(v if f is None else f(v) for f, v in zip(fixes, row, strict=True))


def _readable_published(policy: Policy) -> set[str]:
    """Published tables an analyst may read now: on Spark, not one whose publication is still committing.

    Spark has no public mirror (the public engine reads the Spark database itself), and a publication is
    recorded before its staged table is copied over the output name: until that copy finishes the name
    still holds its old table — raw rows, when the curator replaced an undeclared table (red team s16,
    A8). DuckDB's analysts read the mirror, which only the commit itself fills."""
    published = set(published_tables(policy))
    if policy.engine.kind == "spark":
        from veil.store import warehouse

        published -= {str(row["output"]) for row in warehouse.pending_publications(policy)}
    return published


@dataclass(frozen=True)
class _PostRows:
    rows: list[tuple[Any, ...]]
    types: list[str]


class _PolicyWatch:
    """The policy, re-read when its file changes (mtime, size or inode).

    The file is compared with the stamp it had when ``policy`` was read (``Policy.file_stamp``), not when the
    session was made: a server reads the policy, then builds the session on a worker thread, and an edit in between
    (a lowered budget, a removed analyst) was taken as already read and never applied (red team s36 A1)."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self._stamp = policy.file_stamp if policy.file_stamp is not None else self._stat()

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            return file_stamp(self.policy.watch_path)
        except OSError:
            return None

    def current(self) -> tuple[Policy, bool]:
        """The policy as of now, and whether it changed since the last call."""
        stamp = self._stat()
        if stamp is None or stamp == self._stamp:
            return self.policy, False
        self.policy = load_policy(self.policy.watch_path)
        self._stamp = self.policy.file_stamp or stamp
        return self.policy, True


class Env:
    """Everything the passes may touch: policy, catalog, engines, ledger, noise source, caches."""

    def __init__(self, policy: Policy, analyst: str, engine: Engine | None, noise: NoiseSource, limits: Limits) -> None:
        self._watch = _PolicyWatch(policy)
        self._storage = (policy.database_path, policy.engine)  # what this session's engines read
        self.analyst = analyst
        self.noise = noise
        self.limits = limits
        self.engine: Engine = engine if engine is not None else open_engine(policy)
        self.own_engine = engine is None
        self._public_engine: Engine | None = None
        self._measure_engine: Engine | None = None
        self._ledger: Ledger | None = None
        self._catalog: Catalog | None = None
        self._catalog_publications = -1
        self._post: duckdb.DuckDBPyConnection | None = None
        self._probes: dict[tuple[str, int], int] = {}
        self._domains: dict[tuple[str, int], list[Any]] = {}
        self._post_bound: set[tuple[str, tuple[str, ...], tuple[str, ...]]] = set()
        #: planned shapes (veil.proxy.plan_cache), emptied with the catalog; at most plan_cache.CACHE_BYTES
        self.plan_cache: dict[tuple[str, str], plan_cache.Entry] = plan_cache.Budgeted(plan_cache.CACHE_BYTES)
        #: the plan cache's front (token shapes → query shapes; None: a token shape the front does not take), emptied
        #: with it; at most plan_cache.FRONT_BYTES
        self.plan_front: dict[plan_cache.TokenKey, plan_cache.Front | None] = plan_cache.Budgeted(plan_cache.FRONT_BYTES)
        #: digests of generated statements that bound under this catalog (pipeline._prepare binds each private query
        #: before its reservation, once per statement text: red team s75 F1), emptied with the plan cache
        self.bound_statements: set[bytes] = set()
        #: False while a planning runs under a timer (``veil serve``): a bounded copy is then only found, never built
        self.build_copies = True
        #: per private table, the accounts a charge on it must fit in, with the policy object they were read from
        #: (:meth:`accounts`: read again once the policy is another object, i.e. was reloaded)
        self._accounts: dict[str, tuple[Policy, tuple[Account, ...]]] = {}
        #: the current query's materialised public sources (temporary tables of ``engine``'s cursor) and their
        #: factors, dropped when its outermost pipeline run ends (``query_scope``)
        self._temps: dict[str, int] = {}  # name → rows
        self._temp_sizes: dict[str, tuple[int, int, int]] = {}  # name → (rows, values, bytes) held, for the query's caps
        self._undropped: list[str] = []  # temporary tables whose drop failed (dropped at the next query's start)
        self._temp_factors: dict[tuple[str, str], int] = {}  # (name, probe) → factor
        self._temps_generation: int | None = None  # the generation of the cursor that holds them
        self._scopes = 0
        #: is ``engine`` running work on public data (a materialisation, its probe)? ``cancel_public`` may then
        #: interrupt it: it is before the reservation (guarded by ``_public_lock``, so never a charged run)
        self._public_on_engine = False
        self._public_lock = threading.Lock()

    # -- policy, catalog, engines -------------------------------------------------------------
    @property
    def policy(self) -> Policy:
        return self._watch.policy

    def refresh_policy(self) -> Policy:
        """The current policy (re-read when its file changed), once per query; the catalog of public tables is
        forgotten when the policy changed or a publication, a retraction or a curator's table write was recorded
        since it was built (a retracted name may hold raw rows again: Spark has no public mirror to drop it from,
        red team s17 A4; a public table rewritten from another process has other join multiplicities, s19 A3).
        A policy that names another ledger file is charged from the next query on (s19 A5)."""
        policy, changed = self._watch.current()
        if (policy.database_path, policy.engine) != self._storage:
            # the session's engines, bounded copies and measurements belong to the old warehouse (red team s21, A5)
            raise PolicyError(
                f"the policy now names another warehouse ({policy.database_path}, engine {policy.engine.kind!r}) than "
                f"this session reads ({self._storage[0]}, engine {self._storage[1].kind!r})",
                hint="Reconnect (veil serve: restart it) to read the new warehouse",
            )
        if changed and self._ledger is not None and Path(policy.ledger_path) != self._ledger.path:
            # the policy names another ledger: charge that one, as a new session would (red team s19, A5)
            self._ledger.close()
            self._ledger = None
        published = self.ledger.catalog_generation()
        if published != self._catalog_publications and self._catalog_publications >= 0:
            self._forget_public_data(policy)
        if changed or published != self._catalog_publications:
            self._catalog = None
            self._catalog_publications = published
            self.plan_cache.clear()
            self.plan_front.clear()
            self.bound_statements.clear()
        policy.analyst(self.analyst)  # PolicyError if the analyst was removed
        return policy

    @property
    def public_engine(self) -> Engine:
        if self._public_engine is None:
            self._public_engine = open_engine(self.policy, public=True)
        return self._public_engine

    @property
    def measure_engine(self) -> Engine:
        """Where a private query's public tables are measured (join multiplicities, key domains, text lengths): the
        very rows its statements join. On DuckDB that is the warehouse's copy, not the public mirror (red team s23,
        A1/A1b: the mirror could hold other rows — a table edited in place by another tool keeps its version — and
        one person then moved a join count by 1,000 against a sensitivity of 1); its own cursor of the sandboxed
        warehouse reader, so cancelling work on public data never cuts a charged private run. It runs only SQL Veil
        generates over public tables. Other engines read public and private tables from one database."""
        if self._measure_engine is None:
            if isinstance(self.engine, DuckDBEngine) and self.engine.policy is not None:
                self._measure_engine = open_engine(self.policy)
            else:
                self._measure_engine = self.public_engine
        return self._measure_engine

    @property
    def ledger(self) -> Ledger:
        if self._ledger is None:
            self._ledger = Ledger.for_policy(self.policy)
        return self._ledger

    def _forget_public_data(self, policy: Policy) -> None:
        """After a publication, a retraction or a curator's table write: join multiplicities and key domains
        measured on public tables are measured again (on Spark they were kept until the engine's generation moved,
        up to a minute: red team s18, A2), and an engine that caches tables' file lists re-reads them (A3)."""
        self._probes.clear()
        self._domains.clear()
        names = sorted(set(published_tables(policy)) | set(policy.tables))
        for engine in (self.engine, self._public_engine, self._measure_engine):
            if engine is not None:
                engine.refresh_tables(names)

    def _generation(self, engine: Engine) -> int:
        return bounding.engine_generation(engine)

    def catalog(self, *, refresh: bool = False) -> Catalog:
        if self._catalog is None or refresh:
            policy = self.policy
            names = sorted({n for n, t in policy.tables.items() if t.public} | _readable_published(policy))
            public = {n: dict(self.public_engine.table_columns(n)) for n in names}
            # a table declared public in the policy but absent from the mirror (a warehouse from before
            # the mirror) is copied into it; a *published* table never is: only the publish transaction
            # (and its recovery) puts one there, so a half-done publication can never expose the table
            # its output name still holds in the warehouse
            declared = [n for n, t in policy.tables.items() if t.public]
            copied, unserved = self._copy_stale_public(declared)
            if copied:
                public.update({n: dict(self.public_engine.table_columns(n)) for n in declared})
            for n in unserved:  # no current mirror copy: the table is not served (sync_public says why)
                public.pop(n, None)
            self._catalog = build_catalog(policy, {n: c for n, c in public.items() if c})
        return self._catalog

    def sync_public(self, tables: Iterable[str]) -> None:
        """Before a query naming ``tables`` is resolved: the mirror's copy of each one the policy declares public
        is the warehouse's current version (else copied again, and the catalog rebuilt)."""
        copied, unserved = self._copy_stale_public(
            [t for t in tables if (spec := self.policy.tables.get(t)) is not None and spec.public]
        )
        if unserved:
            message, hint = unserved[min(unserved)]
            raise PolicyError(message, hint=hint)
        if copied:
            self._catalog = None

    def _copy_stale_public(self, tables: Sequence[str]) -> tuple[bool, dict[str, tuple[str, str]]]:
        """Copy into the public mirror each of ``tables`` (declared public) whose mirror copy is absent or is not
        the warehouse's current version. Returns whether any was copied, and — with the reason and what to do —
        the tables left without a current copy: ones this process may not write (a ``veil serve --processes N``
        worker: the warehouse is the parent's, and its writer would fail for every query, red team s44 A2), and
        ones whose copy is refused (a table another tool wrote holding none of its declared columns, red team s47
        B4). They are not served; only a query naming one is refused.

        A private query joins a public table as the warehouse holds it, while its join multiplicities, key domains
        and text lengths are measured on the mirror: the two must hold the same rows (red team s23, A1: a table
        reloaded while private, or by another tool, kept its old mirror copy, and one person moved a join count
        by 1,000 against a sensitivity of 1). The mirror's copy carries the warehouse version it was copied from
        (:func:`veil.store.warehouse.copy_to_public`); both are read off the catalogs, no row is read. A
        *published* table never comes here: only the publish transaction (and its recovery) puts one in the
        mirror, so a half-done publication can never expose the table its output name still holds."""
        if not tables:
            return False, {}  # no public table named: the public engine is not even opened
        public, engine = self.public_engine, self.engine
        if not (isinstance(public, DuckDBEngine) and isinstance(engine, DuckDBEngine)):
            return False, {}  # Spark: public tables are read from the same database the queries run on
        from veil.store import warehouse

        copied, unserved = False, {}
        for n in tables:
            if not engine.table_exists(n):
                continue
            if engine.writes_warehouse:
                version: str | None = engine.table_version(n, [])  # a table another tool wrote gets its version now
            else:  # reading only: a table without Veil's stamp has no version, so no copy of it is current
                written = engine.written_version(n)
                version = None if written is None else f"written.{written}"
            current = None if version is None else warehouse.mirror_version(version, warehouse.mirror_columns(self.policy, n))
            if current is not None and public.table_exists(n) and f"written.{public.written_version(n)}" == current:
                continue
            if not engine.writes_warehouse:
                unserved[n] = (
                    f"table {n} was declared public, or replaced, since veil serve started, and its worker processes "
                    "do not write the warehouse's public copy",
                    "Restart veil serve (it copies every declared public table before its workers start)",
                )
                continue
            try:
                warehouse.copy_to_public(self.policy, n)
            except InputError as exc:
                unserved[n] = (exc.message, exc.hint or "Ask the curator to load the table again with veil ingest")
                continue
            except Exception as exc:
                # any other failure of the copy (a declared DATE column holding 'infinity', which no frame can
                # hold): the table is left unserved, with a reason that quotes no value (red team s51 A3)
                log.warning("public table %s was not copied into the public mirror: %s", n, type(exc).__name__)
                unserved[n] = (
                    f"table {n} could not be copied into the public copy analysts read ({type(exc).__name__})",
                    "Ask the curator to load the table again with veil ingest",
                )
                continue
            copied = True
        return copied, unserved

    def with_catalog(self, fn: Callable[[Catalog], T]) -> T:
        """``fn(catalog)``; once more with a fresh catalog when a table is unknown (published since)."""
        try:
            return fn(self.catalog())
        except UnknownTable:
            return fn(self.catalog(refresh=True))

    def contribution(self, table: str) -> int:
        spec = self.policy.table(table)
        return spec.max_rows_per_unit if spec.privacy_unit is not None else 1

    @property
    def materialises(self) -> bool:
        """Are derived public sources evaluated once, into temporary tables the probes and the query both read
        (:mod:`veil.proxy.multiplicity`)? On DuckDB; Spark measures each by a run of its own (and its rules)."""
        return isinstance(self.engine, DuckDBEngine)

    @contextlib.contextmanager
    def query_scope(self) -> Iterator[None]:
        """One query's pipeline run: the public sources it materialised are dropped when the outermost scope ends
        (answered, refused, explained, described or failed), so temporary tables never pile up on the cursor."""
        engine = self.engine
        if self._scopes == 0 and self._undropped and isinstance(engine, DuckDBEngine):
            # a drop an interrupt cut short at the end of an earlier query: tried again before the next one
            self._undropped = [name for name in self._undropped if not engine.drop_temp(name)]
        self._scopes += 1
        try:
            yield
        finally:
            self._scopes -= 1
            if self._scopes == 0 and self._temps:
                names, self._temps, self._temp_factors, self._temp_sizes = list(self._temps), {}, {}, {}
                if isinstance(engine, DuckDBEngine):
                    self._undropped += [name for name in names if not engine.drop_temp(name)]

    @contextlib.contextmanager
    def _public_work_on_engine(self) -> Iterator[None]:
        with self._public_lock:
            self._public_on_engine = True
        try:
            yield
        finally:
            with self._public_lock:
                self._public_on_engine = False

    def cancel_public_work(self) -> None:
        """Interrupt the query engine's cursor only while it runs work on public data before the reservation."""
        with self._public_lock:
            if self._public_on_engine:
                self.engine.cancel()

    def _materialised_factor(self, probe: Probe, m: Materialised) -> int:
        """``probe``'s factor over the one evaluation of its source: created on the query's own cursor (the only
        connection that sees it), once per query — a second planning of the same query reads the same table — and
        counted there. The cursor is held (:meth:`DuckDBEngine.pinned`) from the generation check to the count: a
        curator write in between would reopen the reader, and the count would run on a new cursor without the table
        (an untyped catalog error, e3race); the write waits for them instead."""
        engine = self.engine
        if not isinstance(engine, DuckDBEngine) or self._scopes == 0:
            raise InternalError("a public source is materialised outside a DuckDB query scope")
        with engine.pinned():
            return self._materialised_factor_pinned(engine, probe, m)

    def _materialised_factor_pinned(self, engine: DuckDBEngine, probe: Probe, m: Materialised) -> int:
        generation = engine.cursor_generation()
        if generation != self._temps_generation:  # a curator write took a new cursor: the old one's tables are gone
            self._temps.clear()
            self._temp_factors.clear()
            self._temp_sizes.clear()
            self._temps_generation = generation
        key = (m.name, probe.sql)
        if key in self._temp_factors:
            return self._temp_factors[key]
        with self._public_work_on_engine():
            others = [size for name, size in self._temp_sizes.items() if name != m.name]
            limit = m.max_rows_beside(others)
            if m.name not in self._temps:
                self._temps[m.name] = limit + 1  # dropped at the scope's end even if creating fails
                if limit > 0:
                    self._temps[m.name] = engine.create_temp(m.name, m.sql, limit)
                self._temp_sizes[m.name] = m.held(min(self._temps[m.name], limit))
            if self._temps[m.name] > limit:
                beside = f", beside the {len(others)} other public subqueries of this query" if others else ""
                raise Unsupported(
                    f"a public subquery joined to private data holds more than {limit:,} rows of {len(m.columns)} "
                    f"columns (up to {m.row_bytes:,} bytes a row){beside}; Veil evaluates such subqueries once, "
                    f"before the query, and holds at most {multiplicity.MAX_MATERIALISED_ROWS:,} rows, "
                    f"{multiplicity.MAX_MATERIALISED_VALUES:,} values and {multiplicity.MAX_MATERIALISED_BYTES >> 20} "
                    "MiB for all of one query's together",
                    hint="Filter the public subqueries with WHERE, select only the columns the query needs, join the "
                    "public tables themselves, or split the query",
                )
            result = engine.execute(probe.sql)
        factor = max(_int(result.rows[0][0]) if result.rows else 0, 1)
        self._temp_factors[key] = factor
        return factor

    def reader_generation(self) -> int:
        """The generation of the query engine's reader now (moved by every curator write in this process that reopened
        it: a table write, a bounded copy built or dropped, a publication); 0 on an engine without one."""
        return self._generation(self.engine)

    def pinned(self) -> contextlib.AbstractContextManager[None]:
        """Hold the query engine's reader in place for a charged run (see :meth:`DuckDBEngine.pinned`): checked current
        inside it (:meth:`plan_current`), the bounded copy, the public tables and the materialised sources the plan was
        made on stay as they are until the run's last statement ends. A curator write in this process waits for it;
        while one waits, no new hold starts (:class:`veil.store.warehouse._Gate`). Spark has no reader to hold."""
        engine = self.engine
        if isinstance(engine, DuckDBEngine):
            return engine.pinned()
        return contextlib.nullcontext()

    def plan_current(self, generation: int | None, materialised: Sequence[Materialised]) -> bool:
        """Is the reader the one the plan was made on (``generation``, read before its first measure of public data),
        with ``materialised`` still on the cursor the query will run on? Always on Spark, which has no reader of this
        process and whose generation also moves with time (a known gap there: a rebuild in the process drops the copy
        a charged Spark run of several statements may still read)."""
        if not isinstance(self.engine, DuckDBEngine):
            return True
        return generation == self.reader_generation() and self.materialisations_current(materialised)

    def check_plan_current(self, generation: int | None, materialised: Sequence[Materialised]) -> None:
        """Refuse, free, a query whose plan was made on another reader than the engine's now (:meth:`plan_current`):
        its statements would read a bounded copy or public rows it was not planned on, or tables no longer there."""
        if not self.plan_current(generation, materialised):
            raise WarehouseChanged(
                "the warehouse changed while the query was planned (a table was written, the policy reloaded or a "
                "bounded copy rebuilt in this server or process); nothing was charged",
                hint="Run the query again",
            )

    def materialisations_current(self, materialised: Sequence[Materialised]) -> bool:
        """Do the temporary tables of ``materialised`` still exist, on the cursor the query will run on? A curator
        write in this process (the query's own first bounded copy, another session's ingest) reopens the reader, and
        the cursor that held them is gone."""
        if not materialised:
            return True
        engine = self.engine
        return (
            isinstance(engine, DuckDBEngine)
            and engine.cursor_generation() == self._temps_generation
            and all(m.name in self._temps for m in materialised)
        )

    def probe(self, probe: Probe) -> int:
        """A public-join multiplicity factor (≥ 1): over a materialised source, on the query's cursor (once per
        query); else on the public connection, cached per generation."""
        if probe.materialised is not None:
            return self._materialised_factor(probe, probe.materialised)
        engine = self.measure_engine
        key = (probe.sql, self._generation(engine))
        if key not in self._probes:
            rows = engine.execute(self._native(probe.sql, engine)).rows
            self._probes[key] = max(_int(rows[0][0]) if rows else 0, 1)
        return self._probes[key]

    def column_text_bytes(self, table: str, column: str) -> int:
        """The most bytes one value of ``table.column`` holds as text: a private category column's text cap × 4
        (UTF-8), a public text column's longest value × 4 (measured on the public connection, cached per
        generation), any other column :data:`~veil.proxy.expansion.SCALAR_TEXT_BYTES`."""
        t = self.catalog().tables.get(table)
        kind = None if t is None else t.columns.get(column)
        if t is None or kind != "category":
            return SCALAR_TEXT_BYTES
        if not t.public:
            spec = t.spec.columns.get(column) if t.spec is not None else None
            return SCALAR_TEXT_BYTES if spec is None else 4 * spec.text_cap
        sql = f'SELECT COALESCE(MAX(LENGTH(CAST("{column}" AS VARCHAR))), 0) FROM "{table}"'
        engine = self.measure_engine
        key = (sql, self._generation(engine))
        if key not in self._probes:
            rows = engine.execute(self._native(sql, engine)).rows
            self._probes[key] = _int(rows[0][0]) if rows else 0
        return max(4 * self._probes[key], SCALAR_TEXT_BYTES)

    @staticmethod
    def _native(sql: str, engine: Engine) -> str:
        """Veil-generated DuckDB SQL text (probes, public domains) in ``engine``'s dialect."""
        if engine.dialect == "duckdb":
            return sql
        return engine.render(sqlglot.parse_one(sql, read="duckdb"))

    def bounded_table(self, table: str) -> str:
        return self.bounded_copy(table)[0]

    def bounded_copy(self, table: str) -> tuple[str, Mapping[str, bounding.GridColumn]]:
        """The bounded copy of ``table`` (built if needed) and its pre-scaled grid columns, from one policy spec."""
        spec = self.policy.table(table)
        name = bounding.COPIES.table(
            spec, self.engine, self.ledger, scope=str(self.policy.database_path),
            generation=lambda: self._generation(self.engine), build=self.build_copies,
        )  # fmt: skip
        return name, bounding.grid_columns(spec)

    def cache_salt(self) -> str:
        """Answers of test-only noise sources live under their own cache keys: a real session never sees one."""
        if self.noise.exact:
            return "\x00exact"
        if self.noise.rng is not None:
            return f"\x00seeded{id(self.noise)}"
        return ""

    def public_versions(self, analysis: Analysis) -> str:
        """The data versions of the public tables a private query reads, for its answer cache key: each table's
        written version (read off the catalog, no row read), or the ledger's catalog generation (moved by every
        curator write, publication and retraction) where a table has none or the engine keeps none."""
        names = sorted(set(analysis.tables) - {analysis.private_table})
        if not names:
            return ""
        engine = self.measure_engine
        versions = [engine.written_version(n) if isinstance(engine, DuckDBEngine) else None for n in names]
        if all(v is not None for v in versions):
            return "\x00" + "\x00".join(f"{n}@{v}" for n, v in zip(names, versions, strict=True))
        return f"\x00catalog@{self._catalog_publications}"  # as read for this query (refresh_policy)

    # -- prepare ----------------------------------------------------------------------------
    def public_domain(self, p: QueryPlan) -> list[tuple[Any, ...]]:
        domains: list[list[Any]] = []
        total = 1
        for k in p.keys:
            if k.domain_values is not None:
                values = list(dict.fromkeys(k.domain_values))
            elif k.domain_sql is not None:
                engine = self.measure_engine
                key = (k.domain_sql, self._generation(engine))
                if key not in self._domains:
                    self._check_domain_sources(k, engine)
                    self._check_domain_text(k, engine)
                    res = engine.execute(self._native(k.domain_sql, engine))
                    exact = exact_keys(res.types[:1])
                    # each value as the engine's groups are keyed (exact_keys), once: two engine values that
                    # meet in one Python value (DATE 'infinity' and 9999-12-31) are one group, released once
                    self._domains[key] = list(dict.fromkeys(exact(r[:1])[0] for r in res.rows))
                values = self._domains[key]
            else:
                raise InternalError(f"group key {k.label} has no public domain")
            domains.append(values)
            total *= max(len(values), 1)
            if total > MAX_PUBLIC_GROUPS:
                raise Unsupported(
                    f"the declared group keys make more than {MAX_PUBLIC_GROUPS} groups", hint="Group by fewer columns"
                )
        per_group = p.released_per_group
        if total * per_group > MAX_RELEASED_VALUES:
            grids = sum(s.released_weight - 1 for s in p.statistics)
            counted = f"; a quantile, MEDIAN, MIN or MAX counts {grids} more for its grid" if grids else ""
            raise Unsupported(
                f"the query would release {total:,} groups × {per_group} values ({len(p.statistics)} statistics and "
                f"{len(p.analysis.tree.expressions)} columns{counted}) = {total * per_group:,} values; Veil releases "
                f"at most {MAX_RELEASED_VALUES:,} per query",
                hint="Group by fewer public columns, or ask for fewer statistics (fewer quantiles) per query",
            )
        out: list[tuple[Any, ...]] = [()]
        for values in domains:
            out = [(*g, v) for g in out for v in values]
        return out

    def _check_domain_text(self, k: GroupKey, engine: Engine) -> None:
        """Refuse (free: public data) a public key whose domain holds more than MAX_HELD_CHARS characters, measured by
        the engine before the domain is fetched (red team s63 F2: a key built from a 100 kB literal, 3,000 groups,
        fetched whole by a free plan, held 1.4 GB; DuckDB keeps a repeated literal once, Python once per row)."""
        sql = f"SELECT SUM(LENGTH(CAST(k AS TEXT))) FROM ({k.domain_sql}) AS __veil_d(k)"
        try:
            res = engine.execute(self._native(sql, engine))
        except EngineError as exc:
            if exc.before_data or "cancelled" in exc.message:
                raise
            # public data only (a DISTINCT of values too large to spill past the engine's memory limit): free
            raise Unsupported(
                f"the public values of the group key {k.label} could not be listed within the engine's memory",
                hint="Group by shorter values (a public column itself, or a SUBSTRING of it)",
            ) from None
        held = int(res.rows[0][0] or 0) if res.rows else 0
        if held > MAX_HELD_CHARS:
            raise ValueTooLarge(
                f"the group key {k.label} has public values of {held:,} characters in all; Veil lists at most "
                f"{MAX_HELD_CHARS:,} characters of a key's values",
                hint="Group by shorter values (a public column itself, or a SUBSTRING of it)",
            )

    def _check_domain_sources(self, k: GroupKey, engine: Engine) -> None:
        """Refuse (free: public data) a public key whose sources combine into more than MAX_PUBLIC_GROUPS rows,
        before the engine builds their product (red team s26 A4: a 2,000-row table's names × keys, 4·10⁶ rows
        fetched whole, took 5 s and 0.8 GB; 6,000 rows exhausted memory)."""
        combinations = 1
        for source in k.domain_sources:
            res = engine.execute(self._native(f"SELECT COUNT(*) FROM ({source}) AS s", engine))
            combinations *= max(int(res.rows[0][0]), 1)
            if combinations > MAX_PUBLIC_GROUPS:
                raise Unsupported(
                    f"the group key {k.label} combines more than {MAX_PUBLIC_GROUPS:,} rows of public tables; "
                    f"Veil lists at most {MAX_PUBLIC_GROUPS:,} groups",
                    hint="Group by the public columns themselves (one key each), or by fewer of them",
                )

    def _postconn(self) -> duckdb.DuckDBPyConnection:
        if self._post is None:
            self._post = duckdb.connect(":memory:", config=dict(_SAFE_POST_CONFIG))
        return self._post

    def frame_types(self, p: QueryPlan, key_types: Sequence[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
        kt = (*key_types, *(["text"] * (len(p.keys) - len(key_types))))
        return kt, tuple(aggregate_types(p))

    def empty_frame(self, p: QueryPlan, key_types: Sequence[str]) -> pd.DataFrame:
        kt, at = self.frame_types(p, key_types)
        data: dict[str, pd.Series] = {}
        for i, t in enumerate(kt):
            data[f"__k{i}"] = pd.Series([], dtype=_DTYPES[t])
        for i, t in enumerate(at):
            data[f"__a{i}"] = pd.Series([], dtype=_DTYPES[t])
            data[f"__ci{i}"] = pd.Series([], dtype="float64")
        return pd.DataFrame(data)

    def run_post(self, post: PostProcess, frame: pd.DataFrame, key_types: Sequence[str]) -> _PostRows:
        con = self._postconn()
        con.register("__veil_raw", frame)
        dates = [f"CAST(__k{i} AS DATE) AS __k{i}" for i, t in enumerate(key_types) if t == "date"]
        inner = f"SELECT * REPLACE ({', '.join(dates)}) FROM __veil_raw" if dates else "SELECT * FROM __veil_raw"
        source = exp.Subquery(this=exp.maybe_parse(inner, dialect="duckdb"), alias=exp.TableAlias(this=exp.to_identifier(FRAME)))
        try:
            rows, types = _held_rows(con, post.sql_over(source))
        except duckdb.Error as exc:
            raise QueryRejected(
                f"post-processing of the answer failed ({type(exc).__name__.replace('Exception', '')} error)",
                hint="Check HAVING / ORDER BY / arithmetic over aggregates",
            ) from None
        finally:
            con.unregister("__veil_raw")
        return _PostRows(rows, types)

    def check_post(self, p: QueryPlan, post: PostProcess, key_types: Sequence[str]) -> None:
        """Run the post-processing over an empty frame: its binding errors are refused free.

        Binding depends only on the post-processing SQL and the frame's column types, so a shape that
        bound once (e.g. the same AVG with another WHERE bound) is not bound again."""
        if post.tree is None:
            return
        key = (duckdb_text(post.tree), *self.frame_types(p, key_types))
        if key in self._post_bound:
            return
        self.run_post(post, self.empty_frame(p, key_types), key_types)
        if len(self._post_bound) >= 1024:
            self._post_bound.clear()
        self._post_bound.add(key)

    # -- reserve ------------------------------------------------------------------------------
    def accounts(self, table: str) -> tuple[Account, ...]:
        """``accounts_for(policy, analyst=…, tables=[table])`` of the current policy (a frozen value: computed once per
        policy object and table)."""
        policy = self.policy
        found = self._accounts.get(table)
        if found is None or found[0] is not policy:
            if len(self._accounts) >= 256:
                self._accounts.clear()
            found = self._accounts[table] = (policy, accounts_for(policy, analyst=self.analyst, tables=[table]))
        return found[1]

    # -- execute ------------------------------------------------------------------------------
    def run(
        self,
        p: QueryPlan,
        queries: EngineQueries,
        rendered: pipeline.Rendered,
        domain: list[tuple[Any, ...]] | None,
        key_types: list[str],
        *,
        checked: bool = True,
    ) -> pipeline.RawResult:
        """Run the generated statements; ``checked=False``: the key types were read off the catalog, not bound."""
        nk = len(p.keys)
        data: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        if rendered.main is not None:
            res = self.engine.execute(rendered.main)
            ran_types = [output_type(t) for t in res.types[:nk]]
            if not checked and ran_types != key_types:
                raise InternalError(f"group keys ran as {ran_types}, not the catalog's {key_types}")
            key_types = ran_types or key_types
            exact = exact_keys(res.types[:nk])
            if exact is tuple and _TUPLE.issuperset(map(type, res.rows)):
                # keys taken as fetched (no float or date key): one dictionary of the rows, each key once (as GROUP BY
                # gives them), else merged one row at a time below
                data = {row[:nk]: row[nk:] for row in res.rows}
                if len(data) != len(res.rows):
                    data = {}
            if not data:
                for row in res.rows:
                    key, values = exact(row[:nk]), tuple(row[nk:])
                    old = data.get(key)
                    data[key] = values if old is None else tuple(map(_add, old, values))
        hist: dict[int, dict[tuple[Any, ...], dict[int, int]]] = {}
        ran: dict[str, dict[tuple[Any, ...], dict[int, int]]] = {}
        for sid, sql in rendered.grids:
            if sql not in ran:
                h: dict[tuple[Any, ...], dict[int, int]] = {}
                grid = self.engine.execute(sql)
                exact = exact_keys(grid.types[:nk])
                for row in grid.rows:
                    cell = h.setdefault(exact(row[:nk]), {})
                    b = _int(row[nk])
                    cell[b] = cell.get(b, 0) + _int(row[nk + 1])
                ran[sql] = h
            hist[sid] = ran[sql]
        if domain is not None:
            groups = domain
        elif nk == 0:
            groups = [()]
        else:
            seen = dict.fromkeys(data)
            for h in hist.values():
                seen.update(dict.fromkeys(h))
            try:
                # one type per key column: the plain tuple order is _group_order's, ~5× faster on 10⁵ groups;
                # it raises only where a NULL meets a value, and then _group_order puts NULLs last
                groups = sorted(seen)
            except TypeError:
                try:
                    groups = sorted(seen, key=_group_order)
                except TypeError:
                    groups = sorted(seen, key=repr)
        return pipeline.RawResult(groups, self._raw(p, queries, groups, data), self._grids(p, groups, hist), key_types)

    def _raw(
        self, p: QueryPlan, queries: EngineQueries, groups: list[tuple[Any, ...]], data: dict[tuple[Any, ...], tuple[Any, ...]]
    ) -> dict[int, np.ndarray]:
        zeros = tuple(0 for _ in queries.quantities)
        qvals = [data.get(g, zeros) for g in groups]
        raw: dict[int, np.ndarray] = {}
        for stat in p.statistics:
            if stat.kind == "grid":
                continue
            idx = queries.stat_inputs[stat.id]
            if stat.mechanism == "discrete_laplace":
                col = [r[idx[0]] for r in qvals]
                if not _INT.issuperset(map(type, col)):  # (the engine's counts are ints: _num keeps those as they are)
                    col = [v if isinstance(v, int) else round(v) for v in map(_num, col)]
                raw[stat.id] = _object_array(col)
                continue
            # an exact fixed-point sum (rewrite._fixed) and its count, kept exact: the noise pass rounds only the
            # groups it releases (add_noise.clamp_raw), so one person's unreleased groups cost O(1) each (s8 A1)
            counts = [r[idx[1]] for r in qvals] if len(idx) == 2 else None
            raw[stat.id] = fixed_point.exact_sums([r[idx[0]] for r in qvals], counts)
        return raw

    def _grids(
        self, p: QueryPlan, groups: list[tuple[Any, ...]], hist: dict[int, dict[tuple[Any, ...], dict[int, int]]]
    ) -> dict[int, list[dict[int, int]]]:
        """Each grid statistic's histogram cells per group, kept sparse: the noise pass makes dense rows only
        for the groups it releases (one person's unreleased groups must cost O(1) each)."""
        empty: dict[int, int] = {}
        return {s.id: [hist.get(s.id, {}).get(g, empty) for g in groups] for s in p.statistics if s.kind == "grid"}

    # -- answers ----------------------------------------------------------------------------
    def alpha(self) -> float:
        return 1.0 - self.policy.defaults.confidence

    def remaining(self, after: Reservation | None = None) -> Fraction:
        """The analyst's ε left; ``after`` a reservation: as committed with its charge (no second read of the ledger)."""
        key = f"analyst:{self.analyst}"
        if after is not None and key in after.accounts and after.spent:
            spent = after.spent[after.accounts.index(key)].epsilon
            return max(self.policy.analyst(self.analyst).epsilon - spent, Fraction(0))
        return self.budget().remaining

    def budget(self) -> BudgetStatus:
        spec = self.policy.analyst(self.analyst)
        spent = self.ledger.spent(f"analyst:{self.analyst}")
        return BudgetStatus(
            self.analyst,
            spec.epsilon,
            spent.epsilon,
            max(spec.epsilon - spent.epsilon, Fraction(0)),
            spec.delta,
            spent.delta,
            max(spec.delta - spent.delta, Fraction(0)),
        )

    def public_answer(self, res: Result) -> Answer:
        cols = tuple(OutputColumn(n, output_type(t)) for n, t in zip(res.names, res.types, strict=True))
        rows = tuple(tuple(_py(v) for v in r) for r in res.rows)
        ci = tuple(tuple(None for _ in r) for r in rows)
        return Answer(cols, rows, ci, Fraction(0), self.remaining(), None, False)

    def from_cache(self, cached: dict[str, Any]) -> Answer:
        cols = tuple(OutputColumn(str(n), str(t)) for n, t in cached["columns"])
        rows = tuple(tuple(r) for r in cached["rows"])
        ci = tuple(tuple(r) for r in cached["ci95"])
        withheld = int(cached.get("withheld_groups", 0))
        return Answer(cols, rows, ci, Fraction(0), self.remaining(), None, True, withheld_groups=withheld)

    def shape(
        self, p: QueryPlan, post: PostProcess, raw: pipeline.RawResult, noisy: dict[int, np.ndarray], withheld: int = 0
    ) -> tuple[Answer, LoggedStatistics]:
        if p.partition_stat is not None and p.partition_threshold is not None:
            idx = np.flatnonzero(np.asarray(noisy[p.partition_stat] >= p.partition_threshold, dtype=bool))
            kept = [raw.groups[i] for i in idx]
            noisy_kept = {sid: v[idx] for sid, v in noisy.items()}
        else:  # every group is released
            kept = list(raw.groups)
            noisy_kept = dict(noisy)
        values, cis = finalize_aggregates(p, noisy_kept, len(kept), self.alpha())
        key_types, agg_types = self.frame_types(p, raw.key_types)
        if post.direct is not None:
            columns, rows, ci_rows = self._direct(post, kept, values, cis, key_types, agg_types)
        else:
            frame = self.empty_frame(p, key_types)
            if kept:
                data: dict[str, Any] = {}
                for i in range(len(p.keys)):
                    data[f"__k{i}"] = pd.Series([g[i] for g in kept], dtype=frame[f"__k{i}"].dtype)
                for i in range(len(p.aggregates)):
                    data[f"__a{i}"] = values[i]
                    data[f"__ci{i}"] = cis[i] if cis[i] is not None else np.full(len(kept), np.nan)
                frame = pd.DataFrame(data)
            res = self.run_post(post, frame, key_types)
            k = len(post.names)
            columns = tuple(OutputColumn(nm, output_type(t)) for nm, t in zip(post.names, res.types[:k], strict=True))
            rows = [tuple(_py(v) for v in r[:k]) for r in res.rows]
            ci_rows = [
                tuple(None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v) for v in r[k:])
                for r in res.rows
            ]
        stats = self._released(p, kept, noisy_kept)
        answer = Answer(columns, tuple(rows), tuple(ci_rows), p.cost, Fraction(0), None, False, withheld_groups=withheld)
        return answer, stats

    def _direct(
        self, post: PostProcess, kept: list[tuple[Any, ...]], values: list[np.ndarray], cis: list[np.ndarray | None],
        key_types: Sequence[str], agg_types: Sequence[str],
    ) -> tuple[tuple[OutputColumn, ...], list[tuple[Any, ...]], list[tuple[float | None, ...]]]:  # fmt: skip
        if post.direct is None:
            raise InternalError("not a direct post-processing")
        n = len(kept)
        cols: list[list[Any]] = []  # column by column (a 50-group answer is 150 cells: one NumPy call per column)
        ci_cols: list[list[float | None]] = []
        for col, src in zip(post.direct, post.ci_sources, strict=True):
            i = int(col[3:])
            if col.startswith("__k"):
                cols.append(_py_values([g[i] for g in kept]))
                ci_cols.append([None] * n)
            else:
                cols.append(_py_column(values[i]))
                c = cis[i]
                ci_cols.append([None] * n if c is None or src is None else c.astype(np.float64).tolist())
        rows: list[tuple[Any, ...]] = list(zip(*cols, strict=True)) if cols else [() for _ in kept]
        ci_rows: list[tuple[float | None, ...]] = list(zip(*ci_cols, strict=True)) if ci_cols else [() for _ in kept]
        types = [key_types[int(c[3:])] if c.startswith("__k") else agg_types[int(c[3:])] for c in post.direct]
        return tuple(OutputColumn(n, t) for n, t in zip(post.names, types, strict=True)), rows, ci_rows

    def _released(self, p: QueryPlan, kept: list[tuple[Any, ...]], noisy: dict[int, np.ndarray]) -> LoggedStatistics:
        from veil.proxy.postprocess import halfwidth

        alpha = self.alpha()
        vectors = tuple(
            ReleasedVector(s.label, s.mechanism, s.epsilon, float(s.sensitivity), s.scale, halfwidth(s, alpha),
                           tuple(noisy[s.id].tolist()))
            for s in p.statistics
        )  # fmt: skip
        # ±inf and NaN keys kept as sent (null is the NULL group's key: red team s41 A3)
        return LoggedStatistics(vectors, _json_rows(kept))

    def release(self, reservation: Reservation, p: QueryPlan, answer: Answer, stats: LoggedStatistics) -> str:
        return self.ledger.release(
            reservation,
            answer={
                "columns": [[c.name, c.sql_type] for c in answer.columns],
                # the answer cache's copy; rows and intervals as tuples, which the ledger writes as JSON lists
                "rows": _json_rows(answer.rows),
                "ci95": answer.ci95,
                "withheld_groups": answer.withheld_groups,
                "epsilon": str(p.cost),
                "delta": str(p.delta),
            },
            vectors=stats.vectors,
            groups=stats.groups,
            method="query",
            table=p.analysis.private_table,
        )

    def close(self) -> None:
        if self.own_engine:
            self.engine.close()
        if self._measure_engine is not None and self._measure_engine is not self._public_engine:
            self._measure_engine.close()
        self._measure_engine = None
        if self._public_engine is not None:
            self._public_engine.close()
            self._public_engine = None
        if self._ledger is not None:
            self._ledger.close()
            self._ledger = None
        if self._post is not None:
            self._post.close()
            self._post = None


class QuerySession:
    """One analyst's session: one engine cursor, one ledger handle. Not thread-safe; use one per thread."""

    def __init__(
        self,
        policy: Policy,
        analyst: str,
        *,
        engine: Engine | None = None,
        limits: Limits = DEFAULT_LIMITS,
        _noise: NoiseSource = PRODUCTION,
    ) -> None:
        policy.analyst(analyst)  # PolicyError for unknown analysts
        self.analyst = analyst
        self._env = Env(policy, analyst, engine, _noise, limits)
        self._busy = threading.Lock()

    @property
    def policy(self) -> Policy:
        return self._env.policy

    def _epsilon(self, epsilon: Fraction | float | None) -> Fraction:
        d = self._env.policy.defaults
        eps = d.epsilon_per_query if epsilon is None else as_epsilon(epsilon)
        if eps < d.min_epsilon_per_query:
            raise QueryRejected(
                f"epsilon {format_epsilon(eps)} is below the minimum of {format_epsilon(d.min_epsilon_per_query)} per query",
                hint="Ask for a larger epsilon (a tiny ε would make a deterministic side channel cost nothing)",
            )
        return eps

    def _state(self, sql: str, epsilon: Fraction | float | None) -> pipeline.QueryState:
        self._env.refresh_policy()
        return pipeline.QueryState(sql=sql, epsilon=self._epsilon(epsilon))

    def budget(self) -> BudgetStatus:
        self._env.refresh_policy()
        return self._env.budget()

    def default_epsilon(self) -> Fraction:
        """The ε a query that names none is charged now (the policy re-read when its file changed, as a query does)."""
        return self._env.refresh_policy().defaults.epsilon_per_query

    @contextlib.contextmanager
    def _copies(self, build: bool) -> Iterator[None]:
        """Planning that may build bounded copies (``build``), or only find them (a planning under a timer, see
        :class:`~veil.errors.CopyNotReady`)."""
        before, self._env.build_copies = self._env.build_copies, build
        try:
            yield
        finally:
            self._env.build_copies = before

    def plan(self, sql: str, *, epsilon: Fraction | float | None = None, build_copies: bool = True) -> bool:
        """Plan ``sql`` as :meth:`execute` will (through the plan cache), running and charging nothing; refuses as
        ``execute`` would before its reservation. True for a public query. (``veil serve`` plans under the statement
        timeout first, with ``build_copies=False``, then runs the private query to its end.)"""
        with self._busy, self._copies(build_copies):
            state = pipeline.run(self._state(sql, epsilon), self._env, until="prepare", cache=True)
        return state.plan is None

    def explain(self, sql: str, *, epsilon: Fraction | float | None = None) -> Explanation:
        """Mechanisms, sensitivities, noise scales, CI half-widths and the exact (ε, δ) cost; spends nothing."""
        state = pipeline.run(self._state(sql, epsilon), self._env, until="plan")
        if state.plan is not None:
            # the statements' shape (a placeholder for the bounded copy: none is built): what `execute` would
            # refuse for its operations that may raise, explain refuses too
            p = state.plan
            pipeline.check_raising_work(p, rewrite(p, "_veil_explain", public_types(self._env.catalog(), p.analysis.tables)))
        return explanation(sql, state.plan, self._env.alpha())

    def describe(self, sql: str, *, build_copies: bool = True) -> tuple[OutputColumn, ...]:
        """Output column names and types without running the query on data or charging (``build_copies=False``: a
        bounded copy not built yet is a free :class:`~veil.errors.CopyNotReady`, as for :meth:`plan`)."""
        # through the plan cache, as the answer will be (a wire client describes each statement before it runs)
        with self._copies(build_copies):
            state = pipeline.run(self._state(sql, None), self._env, until="prepare", cache=True)
        if state.plan is None:
            if state.public_sql is None:
                raise InternalError("describe without a query")
            res = self._env.public_engine.describe(state.public_sql)
            return tuple(OutputColumn(n, output_type(t)) for n, t in zip(res.names, res.types, strict=True))
        p, post = state.plan, state.post
        if post is None:
            raise InternalError("describe before rewrite")
        key_types, agg_types = self._env.frame_types(p, state.key_types)
        if post.direct is not None:
            types = [key_types[int(c[3:])] if c.startswith("__k") else agg_types[int(c[3:])] for c in post.direct]
            return tuple(OutputColumn(n, t) for n, t in zip(post.names, types, strict=True))
        post_rows = self._env.run_post(post, self._env.empty_frame(p, key_types), key_types)
        n = len(post.names)
        return tuple(OutputColumn(nm, output_type(t)) for nm, t in zip(post.names, post_rows.types[:n], strict=True))

    def execute(self, sql: str, *, epsilon: Fraction | float | None = None, public_only: bool = False) -> Answer:
        """Answer one SELECT, charging exactly what :meth:`explain` quotes (or nothing for a cached answer).

        ``public_only``: the caller planned ``sql`` as a public query (``veil serve`` then runs it under the statement
        timeout); if it reads private data now (the policy changed in between), it is refused before anything is
        charged, never run under the timer (:class:`~veil.errors.CopyNotReady`)."""
        with self._busy:
            state = self._state(sql, epsilon)
            if public_only:
                with self._copies(False):
                    state = pipeline.run(state, self._env, until="prepare", cache=True)
                if state.plan is not None:
                    raise CopyNotReady(
                        "the query reads private data now (the policy changed since it was planned); nothing was charged",
                        hint="Run the query again",
                    )
                state = pipeline.run(state, self._env, after="prepare")
            else:
                for attempt in range(_REPLANS + 1):
                    try:
                        state = pipeline.run(state, self._env)
                        break
                    except WarehouseChanged:  # free; another write in this process moved the reader: plan again
                        if attempt == _REPLANS:
                            raise
                        state = self._state(sql, epsilon)
        if state.answer is None:
            raise InternalError("the pipeline ended without an answer")
        a = state.answer
        if state.release_id is None:
            return a
        remaining = self._env.remaining(after=state.reservation)
        # (dataclasses.replace's answer, built directly: replace costs ~15 µs a call; tests/proxy/test_answer_path_cuts_s24)
        return Answer(a.columns, a.rows, a.ci95, a.epsilon_charged, remaining, state.release_id, False, a.withheld_groups)

    def cancel(self) -> None:
        """Interrupt the statement this session is running (safe to call from another thread)."""
        self._env.engine.cancel()
        self.cancel_public()

    def cancel_public(self) -> None:
        """Interrupt only work on public data (a public-only query, or a private query's planning probes and
        public group domains, all before its reservation): never a charged private query's engine run, which
        runs on the warehouse engine's own cursor (safe to call from another thread, also when nothing runs)."""
        for engine in {id(e): e for e in (self._env._public_engine, self._env._measure_engine) if e is not None}.values():
            engine.cancel()
        self._env.cancel_public_work()  # a public source being materialised on the query's cursor, if one is

    def close(self) -> None:
        self._env.close()

    def __enter__(self) -> QuerySession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
