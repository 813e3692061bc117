"""The curator's side of the DuckDB warehouse, and the sandboxed reader analysts' queries use.

DuckDB allows only one configuration per database file per process, so this module owns every
connection to a warehouse file in the process:

* :func:`reader` returns the process-wide **sandboxed** connection (read-only, external access
  disabled, extension loading off, configuration locked). Query sessions take ``.cursor()`` from it.
* :func:`writer` (a context manager) closes that reader first, opens a read-write connection for
  the curator, and closes it again; the next :func:`reader` call reopens the sandbox. Sessions notice
  through :func:`reader_generation` (bumped at the close) and take a fresh cursor.
* :func:`holding_writer` (a context manager) keeps the first :func:`writer` connection a block opens
  to a file for the rest of the block: the curator's steps in it share one connection (a publication's
  checks, its staging, commit and mirror copy), instead of paying DuckDB's open and close for each.

>>> import tempfile, pathlib
"""

from __future__ import annotations

import csv
import hashlib
import logging
import os
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from functools import lru_cache
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import duckdb
import pandas as pd

from veil.errors import InputError, InternalError, PolicyError, did_you_mean
from veil.policy import Policy, normalise_name
from veil.store.declared_types import as_stored

if TYPE_CHECKING:
    from veil.store.ledger import HistoryMark

_log = logging.getLogger(__name__)

__all__ = [
    "MIN_READER_THREADS",
    "SANDBOX_CONFIG",
    "VERSION_COMMENT",
    "Warehouse",
    "export_frame",
    "holding_writer",
    "ingest_file",
    "mirror_columns",
    "mirror_version",
    "on_close",
    "read_table",
    "reader",
    "reader_cursor",
    "reader_generation",
    "set_reader_memory",
    "set_reader_threads",
    "stamp_version",
    "table_columns",
    "table_names",
    "write_table",
    "writer",
    "writer_waiting",
    "written_version",
]

SANDBOX_CONFIG: dict[str, str] = {
    "enable_external_access": "false",
    "autoinstall_known_extensions": "false",
    "autoload_known_extensions": "false",
    "allow_community_extensions": "false",
    "allow_unsigned_extensions": "false",
    # DuckDB's common-subexpression elimination computes a repeated sub-expression once, outside the
    # TRY(...) that wraps each use, with the implicit casts the binder put into it: a DATE argument of
    # TRY(date_diff('day', d, TIMESTAMP …)) cast to TIMESTAMP in two aggregates then fails on a date
    # beyond year 294,247 — a failure one row decides. Without it, each TRY holds everything inside it.
    # With ``build_side_probe_side`` DuckDB picks each join's build side by its estimates, which the analyst steers:
    # private rows on the build side failed (OutOfMemory, after the charge) when many shared one key (red team s74
    # F2, F4). Without it the right child is the build side, and the generated SQL puts the private rows first
    # (veil.proxy.join_order).
    "disabled_optimizers": "common_subexpressions,build_side_probe_side",
    "lock_configuration": "true",
}


class _Connections:
    """Every DuckDB connection this process holds to warehouse files: one sandboxed reader per file,
    its generation (bumped when a writer closes it), and one readers/writer gate per file. One
    instance per process (:data:`_CONNECTIONS`): DuckDB allows one configuration per file per process."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.readers: dict[Path, duckdb.DuckDBPyConnection] = {}
        self.generation: dict[Path, int] = {}
        self.gates: dict[Path, _Gate] = {}
        self.threads = 0  # DuckDB threads of the readers (0: DuckDB's default; see set_reader_threads)
        self.memory_mib = 0  # DuckDB memory limit of each connection, in MiB (0: DuckDB's default; set_reader_memory)


class _Gate:
    """Many readers or one writer per warehouse file, within this process.

    Statements on reader cursors run under :func:`reading`; :func:`writer` waits until none runs (and
    lets no new one start) before it closes the reader, so a curator write or a bounded-copy build
    never pulls a connection from under a running query. A charged run holds it from its last check to
    its last statement (``Env.pinned``), so the gate prefers writers: while one waits, a thread that
    holds no read yet waits too (behind the writer), and one that holds one (a pinned run's next
    statement) goes on, so the runs already holding it end, the write runs, and the new ones follow.
    A write thus waits at most for the longest run that held the gate when it asked (``veil serve``
    bounds each by the statement timeout), never for a stream of later ones.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers: dict[int, int] = {}  # thread → nested shared holds
        self._writing = False
        self._owner: int | None = None
        self._waiting = 0  # writers waiting for the readers to end

    def owned_here(self) -> bool:
        """Does this thread hold the writer (its connection open)?"""
        return self._owner == threading.get_ident()

    @property
    def writer_waiting(self) -> bool:
        with self._cond:
            return bool(self._waiting)

    @contextmanager
    def shared(self) -> Iterator[None]:
        me = threading.get_ident()
        if self._owner == me:  # the writer's own thread reading: already exclusive
            yield
            return
        with self._cond:
            if me not in self._readers:  # nested holds in one thread never wait (a writer waits for the outer one)
                while self._writing or self._waiting:
                    self._cond.wait()
            self._readers[me] = self._readers.get(me, 0) + 1
        try:
            yield
        finally:
            with self._cond:
                self._readers[me] -= 1
                if not self._readers[me]:
                    del self._readers[me]
                self._cond.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        me = threading.get_ident()
        if self._owner == me:
            yield
            return
        if me in self._readers:
            raise InternalError("a thread running a statement on the warehouse asked to write it")
        with self._cond:
            self._waiting += 1
            try:
                while self._writing or self._readers:
                    self._cond.wait()
            except BaseException:  # gave up waiting (an interrupt): the readers it held back go on
                self._waiting -= 1
                self._cond.notify_all()
                raise
            self._waiting -= 1
            self._writing, self._owner = True, me
        try:
            yield
        finally:
            with self._cond:
                self._writing, self._owner = False, None
                self._cond.notify_all()


_CONNECTIONS = _Connections()


def _gate(path: Path) -> _Gate:
    with _CONNECTIONS.lock:
        return _CONNECTIONS.gates.setdefault(path, _Gate())


def writer_waiting(policy_or_path: Policy | Path | str) -> bool:
    """Does a curator write in this process wait for this file's gate (for tests and checks)?"""
    return _gate(_db_path(policy_or_path)).writer_waiting


@contextmanager
def reading(policy_or_path: Policy | Path | str) -> Iterator[None]:
    """Hold while running a statement on a reader cursor of this file (see :class:`_Gate`)."""
    with _gate(_db_path(policy_or_path)).shared():
        yield


def warehouse_exists(policy: Policy) -> bool:
    """Is there a warehouse to bind (the DuckDB file; the Spark database, ``veil.store.spark.warehouse_exists``)?"""
    if policy.engine.kind == "spark":
        return bool(_spark().warehouse_exists(policy.engine))
    return policy.database_path.exists()


def _db_path(policy_or_path: Policy | Path | str) -> Path:
    if isinstance(policy_or_path, Policy):
        return policy_or_path.database_path
    return _resolved(str(policy_or_path))


@lru_cache(maxsize=64)
def _resolved(path: str) -> Path:
    """An absolute, symlink-free path (cached: every statement's gate looks its file up)."""
    return Path(path).resolve()


def set_reader_threads(threads: int) -> None:
    """DuckDB worker threads of this process's read-only connections (0: DuckDB's default, one per core).

    ``veil serve --processes N`` gives each worker process its share of the cores: N processes answering 20 clients
    already keep every core busy, and one DuckDB pool per process sized to all of them makes each small query pay
    for threads that only wait (measured in docs/benchmarks.md, "server"). Readers opened with another number are
    closed (after the statements running on them end) and reopened on next use."""
    if threads < 0 or 0 < threads < MIN_READER_THREADS:
        raise InternalError(f"DuckDB threads must be 0 or at least {MIN_READER_THREADS}, got {threads}")
    _reconfigure("threads", threads)


#: The fewest DuckDB threads a reader runs with (review s21 X4): with one thread DuckDB 2.0 did not spill a text
#: GROUP BY's hash table at the memory floor — three 4 kB keys a row were answered at 13,681 distinct rows and failed
#: after the charge at 13,682 (a step one person crosses), and the edge was not monotone in the row's size (10 kB and
#: 12 kB keys failed where 15 kB ones spilled) — while with 2 or 4 threads every shape tried spilled and was answered
#: (120,000 rows of three 4 kB keys; 30,000 single keys of 10, 12 and 15 kB; 40,000 grouped DISTINCTs of 7.5 kB pairs).
#: 0 (DuckDB's default, a thread per core) is raised to it on a one-core host.
MIN_READER_THREADS = 2


#: The least DuckDB memory limit a warehouse connection may be given, in MiB (red team s63 F1): below it a charged
#: statement's hash table (COUNT(DISTINCT …), a text GROUP BY) cannot even start to spill, so whether it fails after
#: the charge became a step one person's row could cross (8 MiB: deterministic at one row). At 64 MiB and above DuckDB
#: spilled every shape tried (150,000 distinct 1 kB names, 16 threads); this floor keeps a margin over that.
MIN_READER_MEMORY_MIB = 256


def set_reader_memory(mib: int) -> None:
    """DuckDB memory limit, in MiB, of each of this process's connections to warehouse files (0: DuckDB's default,
    80% of the machine's memory for each one).

    A process holds at most two at once (the warehouse's reader or writer, and the public mirror's), so ``veil serve
    --processes N`` gives each its share, 80% of memory / 2N: with DuckDB's default every one of the 2N could grow to
    80% before its own limit stopped it, and the kernel's OOM killer would end a worker first (red team s44).
    Beyond its limit DuckDB spills to disk or fails the statement with its own error. Readers opened with another
    limit are closed (after the statements running on them end) and reopened on next use."""
    if mib < 0 or 0 < mib < MIN_READER_MEMORY_MIB:
        raise InternalError(f"DuckDB memory limit must be 0 or at least {MIN_READER_MEMORY_MIB} MiB, got {mib}")
    _reconfigure("memory_mib", mib)


def _reconfigure(name: str, value: int) -> None:
    with _CONNECTIONS.lock:
        if getattr(_CONNECTIONS, name) == value:
            return
        setattr(_CONNECTIONS, name, value)
        stale = list(_CONNECTIONS.readers)
    for path in stale:
        with _gate(path).exclusive(), _CONNECTIONS.lock:
            _close_reader(path)


def _sized(
    config: dict[str, str | bool | int | float | list[str]], *, threads: bool = True
) -> dict[str, str | bool | int | float | list[str]]:
    """``config`` with this process's memory limit and (for readers) thread count, where set."""
    if threads:
        config["threads"] = max(MIN_READER_THREADS, _CONNECTIONS.threads or os.cpu_count() or 1)
    if _CONNECTIONS.memory_mib:
        config["memory_limit"] = f"{_CONNECTIONS.memory_mib}MiB"
    return config


def reader(policy: Policy | Path | str) -> duckdb.DuckDBPyConnection:
    """The sandboxed read-only connection for this warehouse (opened on first use)."""
    path = _db_path(policy)
    with _CONNECTIONS.lock:
        con = _CONNECTIONS.readers.get(path)
        if con is None:
            if not path.exists():
                raise PolicyError(
                    f"the warehouse {str(path)!r} does not exist",
                    hint="Load a table first with `veil ingest --policy … --table … FILE`",
                )
            con = duckdb.connect(str(path), read_only=True, config=_sized(dict(SANDBOX_CONFIG)))
            _CONNECTIONS.readers[path] = con
            _CONNECTIONS.generation.setdefault(path, 1)  # bumped when a writer closes the reader
        return con


def reader_cursor(policy: Policy | Path | str) -> tuple[duckdb.DuckDBPyConnection, int]:
    """A new cursor on the sandboxed reader and the reader's generation, taken together under the lock
    (so a concurrent curator write cannot swap the reader between the two)."""
    with _CONNECTIONS.lock:
        con = reader(policy)
        return con.cursor(), _CONNECTIONS.generation[_db_path(policy)]


def reader_generation(policy: Policy | Path | str) -> int:
    """Bumped each time a curator write closes the sandboxed reader; sessions compare it to know when to re-cursor."""
    with _CONNECTIONS.lock:
        return _CONNECTIONS.generation.get(_db_path(policy), 0)


#: Called with a warehouse file's path whenever this process closes its reader of that file (a writer opening it, or a
#: reconfiguration), under the file's exclusive gate: no statement of this process runs on the file meanwhile, so
#: whatever else holds the file open to read it closes here too (:func:`on_close`).
_ON_CLOSE: list[Callable[[Path], None]] = []


def on_close(hook: Callable[[Path], None]) -> None:
    """Call ``hook(path)`` whenever this process closes its connections to read ``path`` before a curator write (or a
    reconfiguration): another module's read-only connections to the file (the bounded instances that evaluate public
    SQL over the mirror, :mod:`veil.engines.duckdb`) close then, so a write never races one and no statement after it
    reads the file as it was. Called under the file's exclusive gate and this module's lock: ``hook`` must not wait."""
    _ON_CLOSE.append(hook)


def _close_reader(path: Path) -> None:
    for hook in _ON_CLOSE:
        hook(path)
    con = _CONNECTIONS.readers.pop(path, None)
    if con is not None:
        _CONNECTIONS.generation[path] = _CONNECTIONS.generation.get(path, 0) + 1  # cursors taken from it are now stale
        con.close()


class _Held(threading.local):
    """This thread's :func:`holding_writer` blocks: per file, the stack that closes its writer connection (opened
    by the block's first :func:`writer`) and the connection, None until then."""

    def __init__(self) -> None:
        self.files: dict[Path, tuple[ExitStack, list[duckdb.DuckDBPyConnection]]] = {}


_HELD = _Held()


@contextmanager
def holding_writer(policy: Policy | Path | str) -> Iterator[None]:
    """Within the block, every :func:`writer` of this thread on this file shares one connection: the first opens it
    (nothing is opened, no file created, if none does) and the block's end closes it. Each step still commits or
    rolls back its own transaction, so what is atomic stays so; only DuckDB's open and close (≈0.1 s, a checkpoint
    at each close) are paid once. The writer lock (:class:`_Gate`) is held from that first open to the block's end:
    hold it around storage steps, never around long work (a publication's generation runs outside it). A nested
    block on the same file is part of the outer one."""
    path = _db_path(policy)
    if path in _HELD.files:
        yield
        return
    stack = ExitStack()
    _HELD.files[path] = (stack, [])
    try:
        with stack:
            yield
    finally:
        del _HELD.files[path]


@contextmanager
def writer(policy: Policy | Path | str) -> Iterator[duckdb.DuckDBPyConnection]:
    """A read-write connection for curator work. Closes this process's reader while it is open. Inside
    :func:`holding_writer` on the same file, the block's one connection."""
    path = _db_path(policy)
    held = _HELD.files.get(path)
    if held is None:
        with _open_writer(path) as con:
            yield con
        return
    stack, opened = held
    if not opened:
        opened.append(stack.enter_context(_open_writer(path)))
    yield opened[0]


@contextmanager
def _open_writer(path: Path) -> Iterator[duckdb.DuckDBPyConnection]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with _gate(path).exclusive(), _CONNECTIONS.lock:
        _close_reader(path)
        try:
            con = duckdb.connect(str(path), config=_sized({}, threads=False))
        except duckdb.IOException as exc:
            raise PolicyError(
                f"cannot open the warehouse {str(path)!r} for writing: {exc}",
                hint="Another process (e.g. `veil serve`) holds it; stop it and retry",
            ) from None
        try:
            # one zone on every host: a column another tool stored as TIMESTAMP WITH TIME ZONE is read into the
            # bounded copy's dates in the session's zone, which is the host's unless set (red team s45, A2); Spark
            # sessions are pinned to UTC too (``veil.store.spark``)
            con.execute("SET TimeZone = 'UTC'")
            yield con
        finally:
            con.close()


def table_names(policy: Policy) -> list[str]:
    """Tables present in the warehouse file (not only those in the policy)."""
    if policy.engine.kind == "spark":
        return _spark().table_names(policy)
    if not policy.database_path.exists():
        return []
    with writer(policy) as con:
        return [r[0] for r in con.execute("SELECT table_name FROM information_schema.tables ORDER BY 1").fetchall()]


def _check_table(con: duckdb.DuckDBPyConnection, table: str) -> None:
    names = [r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()]
    if table not in names:
        raise InputError(
            f"table {table!r} is not in the warehouse",
            hint=did_you_mean(table, names) or "Load it with `veil ingest` first",
        )


def table_columns(policy: Policy, table: str) -> list[tuple[str, str]]:
    """``(column, DuckDB type)`` pairs of a warehouse table."""
    if policy.engine.kind == "spark":
        return _spark().table_columns(policy, table)
    with writer(policy) as con:
        _check_table(con, table)
        rows = con.execute(
            "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = ? ORDER BY ordinal_position",
            [table],
        ).fetchall()
    return [(r[0], r[1]) for r in rows]


#: The first and last day Python's ``datetime`` holds, as SQL (both engines read these literals alike).
PYTHON_DATE_RANGE = "DATE '0001-01-01' AND DATE '9999-12-31'"


#: Scalar types whose every value a DataFrame holds as it is (DuckDB's and Spark's names; a length or an ENUM's values
#: may follow in parentheses). DATE and TIMESTAMP have their own rule (:func:`within_python_dates`); any other type is
#: read as its text.
PYTHON_SCALARS = frozenset(
    {
        *("BOOLEAN", "BOOL", "TINYINT", "BYTE", "SMALLINT", "SHORT", "INT", "INTEGER", "BIGINT", "LONG"),
        *("UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT", "HUGEINT", "UHUGEINT", "DECIMAL", "NUMERIC"),
        *("FLOAT", "REAL", "DOUBLE", "VARCHAR", "STRING", "CHAR", "TEXT", "BLOB", "BINARY", "BYTEA", "UUID", "ENUM"),
    }
)
_SCALAR = re.compile(r"([A-Z]+)\s*(\(.*\))?")


def within_python_dates(column: str, sql_type: str) -> str:
    """The select item reading ``column`` (already quoted) so that every value of it is one a DataFrame holds, in SQL,
    value by value, for DuckDB and Spark alike: a date or timestamp Python cannot hold (``DATE 'infinity'``, a year
    beyond 9999 or before 1) as NULL; a value of a type no DataFrame holds as it is — an INTERVAL (``INTERVAL
    '178000000 years'``: "Could not convert Month to Microseconds"), a TIME WITH TIME ZONE, a nested LIST, STRUCT or
    MAP (one huge INTERVAL inside it), a BIT — as its text (``TRY_CAST … AS STRING``: total, NULL where even that
    fails); :data:`PYTHON_SCALARS` as they are. A whole-table read failed on one such value (red team s53 B3b: a date;
    s60 F3: one person's INTERVAL in an undeclared column), so a DP publication reading it ended with a traceback in
    one world and published in its neighbour.

    >>> print(within_python_dates('"d"', "DATE"))
    CASE WHEN TRY_CAST("d" AS DATE) BETWEEN DATE '0001-01-01' AND DATE '9999-12-31' THEN "d" END AS "d"
    >>> within_python_dates('"n"', "BIGINT"), within_python_dates('"e"', "ENUM('a', 'b')")
    ('"n"', '"e"')
    >>> within_python_dates('"i"', "INTERVAL"), within_python_dates('"l"', "DATE[]")
    ('TRY_CAST("i" AS STRING) AS "i"', 'TRY_CAST("l" AS STRING) AS "l"')
    """
    kind = sql_type.upper().strip()
    scalar = _SCALAR.fullmatch(kind)
    nested = any(ch in kind for ch in "[<") or kind.startswith(("STRUCT", "MAP", "UNION", "ARRAY", "LIST"))
    if not nested and (kind.startswith("DATE") or kind.startswith("TIMESTAMP")):
        return f"CASE WHEN TRY_CAST({column} AS DATE) BETWEEN {PYTHON_DATE_RANGE} THEN {column} END AS {column}"
    if not nested and scalar is not None and scalar.group(1) in PYTHON_SCALARS:
        return column
    return f"TRY_CAST({column} AS STRING) AS {column}"


def read_table(policy: Policy, table: str, columns: Sequence[str] | None = None, *, python_dates: bool = False) -> pd.DataFrame:
    """The whole table as a DataFrame (curator access: raw values, no noise; a DECIMAL or HUGEINT as DuckDB casts it to
    DOUBLE, :func:`_as_double_once`). ``python_dates``: every value a DataFrame holds, whatever one person stored —
    dates and timestamps Python cannot hold read as NULL, values of other types no DataFrame holds as their text
    (:func:`within_python_dates`; a publication's read of its source, which never fails on one value)."""
    if policy.engine.kind == "spark":
        return _spark().read_table(policy, table, columns, python_dates=python_dates)
    with writer(policy) as con:
        _check_table(con, table)
        name = _quoted(table)
        types = {str(r[0]): str(r[1]) for r in con.execute(f"DESCRIBE {name}").fetchall()}
        for c in columns or []:
            if c not in types:
                raise InputError(
                    f"column {c!r} is not in table {table!r}",
                    hint=did_you_mean(c, list(types)) or f"Columns: {', '.join(types)}",
                )
        wanted = list(columns) if columns else list(types)
        items = [
            within_python_dates(_quoted(c), types[c])
            if python_dates and not _wide_number(types[c])
            else _as_double_once(_quoted(c), types[c])
            for c in wanted
        ]
        cols = "*" if items == [_quoted(c) for c in types] else ", ".join(items)
        return con.execute(f"SELECT {cols} FROM {name}").df()


def _wide_number(sql_type: str) -> bool:
    """A DECIMAL or HUGEINT: a type a DataFrame holds as a double."""
    kind = sql_type.upper()
    return kind.startswith("DECIMAL") or kind in ("HUGEINT", "UHUGEINT")


def _as_double_once(column: str, sql_type: str) -> str:
    """The select item reading ``column`` (already quoted) as a DataFrame will hold it: a DECIMAL or HUGEINT cast to
    DOUBLE by DuckDB (rounded once), other columns as they are. DuckDB's DataFrame conversion divides a DECIMAL's
    unscaled integer, already rounded to a double, by 10^scale: for 43% of DECIMAL(38, 10) values near 10⁶ the public
    mirror held another double than a private query reads of the same table (``TRY_CAST(… AS DOUBLE)``,
    :mod:`veil.proxy.public_reads`), so public and private answers disagreed on its values.

    >>> _as_double_once('"v"', "DECIMAL(38,10)")
    'CAST("v" AS DOUBLE) AS "v"'
    >>> _as_double_once('"n"', "BIGINT")
    '"n"'
    """
    return f"CAST({column} AS DOUBLE) AS {column}" if _wide_number(sql_type) else column


def _quoted(name: str) -> str:
    """``name`` as a DuckDB identifier (another tool's table may name a column with a double quote in it).

    >>> _quoted('a"b')
    '"a""b"'
    """
    return '"' + name.replace('"', '""') + '"'


def _refuse_published(policy: Policy, table: str) -> None:
    """A published table is never replaced by the curator's raw data (``veil ingest``, ``write_table``,
    ``Warehouse.write``): on Spark analysts read the table itself (red team s16, A8b). Retract it first."""
    from veil.store.publications import published_tables

    if table in published_tables(policy):
        raise InputError(
            f"table {table!r} is published: writing raw data over it would make that data public",
            hint=f"Choose another table name, or withdraw the publication first with `veil retract {table}`",
        )


def write_table(policy: Policy, table: str, df: pd.DataFrame, *, replace: bool = False, public: bool = False) -> None:
    """Store ``df`` as ``table`` (atomically: the old table, if replaced, stays until the new one is complete).

    ``public``: the table is public (or published) and is written to the public mirror too. A table the policy
    declares public always is, whatever the flag: a private query joins the warehouse's copy while its join
    multiplicity is measured on the mirror's, so the two must never differ (red team s23, A1).
    """
    if table.startswith("_veil"):
        raise InputError(f"table name {table!r} is reserved for Veil's internal tables", hint="Choose another name")
    if normalise_name(table) != table:
        raise InputError(f"table name {table!r} is not a plain SQL name", hint=f"Use {normalise_name(table)!r}")
    _refuse_published(policy, table)
    spec = policy.tables.get(table)
    public = public or (spec is not None and spec.public)
    if spec is not None:
        df = _declared_names(df, table, spec.columns)
        df = as_stored(df, spec)  # a column's stored type never follows one person's value
    declared = mirror_columns(policy, table)
    if declared is not None and policy.engine.kind != "spark":
        _declared_only(df, table, declared)  # before anything is written: the mirror could not hold it
    if policy.engine.kind == "spark":
        # Spark has no writer lock: the raw write holds the output's claim, which a publication holds from its plan
        # to its finish, and checks again inside it (red team s35/s37: a raw write of seconds that began before a
        # publication's record overwrote the published table, which analysts read directly on Spark)
        with output_claim(policy, table, raw_write=True):
            _refuse_published(policy, table)
            # as on DuckDB: the Spark database is bound to its ledger before its first table (a ledger swapped or a
            # stale copy is refused here, before anything is written); the mark is raised after the table is in place
            # (a crash between leaves it lagging: accepted, raised at the next curator step)
            _spark().spark_session(policy.engine)  # the database exists (local: its directory) before it is bound
            with _ledger_for(policy) as led:
                mark = led.history_mark()
            _spark().write_table(policy, table, df, replace=replace)
            _spark().write_mark(policy, mark)
    else:
        with holding_writer(policy):  # the write and the mirror copy's stamp on one connection
            with writer(policy) as con:
                # again under the writer: a publication to ``table`` may have staged (journal row), been recorded or
                # committed since the check above, and its last step copies the warehouse's table into the mirror
                # (red team s35, A2: a raw write landing there was published, names included)
                _refuse_published(policy, table)
                if _pending_output(con, table):
                    raise InputError(
                        f"table {table!r} is being published right now: writing raw data over it would make that data public",
                        hint="Choose another table name, or wait and withdraw the publication with `veil retract`",
                    )
                found = con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = ?", [table]).fetchone()
                exists = found[0] if found else 0
                if exists and not replace:
                    raise InputError(f"table {table!r} already exists", hint="Choose another --output name or pass --replace")
                # the warehouse is bound to its ledger before its first table (creating the ledger if need be): a
                # ledger swapped later is refused, never read as an empty history (red team s66 F7)
                with _ledger_for(policy) as led:
                    mark = led.history_mark()  # what the ledger holds now: a later stale copy of it is refused
                _replace_from_frame(con, table, df, mark=mark)
            mirror = _mirror_copy(policy, table, df) if public else None
        if mirror is not None:
            _write_mirror(policy, table, *mirror)
    _record_write(policy, table)


def _ledger_for(policy: Policy) -> Any:
    from veil.store.ledger import Ledger

    return Ledger.for_policy(policy)


# -- the warehouse's ledger (veil.store.binding) -----------------------------------------------------


def _binding_of(con: duckdb.DuckDBPyConnection) -> str | None:
    from veil.store.binding import BINDING_TABLE

    found = con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE schema_name = 'main' AND table_name = ?", [BINDING_TABLE]
    ).fetchone()
    if not found or not found[0]:
        return None
    row = con.execute(f"SELECT ledger_id FROM {_quoted(BINDING_TABLE)} LIMIT 1").fetchone()
    return None if row is None or row[0] is None else str(row[0])


def read_ledger_binding(policy: Policy) -> str | None:
    """The ledger identity the warehouse file records (None: not bound, or no file). Read on this thread's writer
    when it holds one (DuckDB refuses a read-only connection beside it), else on the sandboxed reader."""
    if policy.engine.kind == "spark":
        found: str | None = _spark().read_binding(policy)
        return found
    path = _db_path(policy)
    if not path.exists():
        return None
    if _gate(path).owned_here():
        with writer(policy) as con:
            return _binding_of(con)
    with reading(policy):
        cur, _ = reader_cursor(policy)
        try:
            return _binding_of(cur)
        finally:
            cur.close()


def _has_table(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    found = con.execute("SELECT count(*) FROM duckdb_tables() WHERE schema_name = 'main' AND table_name = ?", [name]).fetchone()
    return bool(found and found[0])


def _mark_of(con: duckdb.DuckDBPyConnection) -> HistoryMark | None:
    from veil.store.binding import MARK_TABLE
    from veil.store.ledger import HistoryMark

    if not _has_table(con, MARK_TABLE):
        return None
    row = con.execute(
        f"SELECT reservation_seq, reservation_id, release_seq, release_id FROM {_quoted(MARK_TABLE)} LIMIT 1"
    ).fetchone()
    return None if row is None else HistoryMark(int(row[0]), str(row[1]), int(row[2]), str(row[3]))


def write_ledger_mark(con: duckdb.DuckDBPyConnection, mark: HistoryMark | None) -> None:
    """Raise the warehouse's high-water mark of its ledger's history to ``mark`` (inside the caller's transaction on
    the writer; each part only moves forward). ``mark`` must come from the bound ledger *after* its records were
    committed and synced (:meth:`~veil.store.ledger.Ledger.history_mark`): the mark may lag the ledger, never lead it."""
    from veil.store.binding import MARK_TABLE

    if mark is None:
        return
    con.execute(
        f"CREATE TABLE IF NOT EXISTS {_quoted(MARK_TABLE)}(reservation_seq BIGINT NOT NULL, reservation_id VARCHAR "
        "NOT NULL, release_seq BIGINT NOT NULL, release_id VARCHAR NOT NULL, marked_at VARCHAR NOT NULL)"
    )
    old = _mark_of(con)
    new = mark if old is None else mark.merged(old)
    if new == old:
        return
    con.execute(f"DELETE FROM {_quoted(MARK_TABLE)}")
    con.execute(
        f"INSERT INTO {_quoted(MARK_TABLE)} VALUES (?, ?, ?, ?, ?)",
        [new.reservation_seq, new.reservation_id, new.release_seq, new.release_id, _stamp_now()],
    )


def mark_ledger(policy: Policy, mark: HistoryMark | None) -> bool:
    """:func:`write_ledger_mark` in a transaction of its own, where a step wrote no warehouse table of its own (a
    retraction, ``veil serve``'s start): best effort. Nothing is written when the mark would not move; when the
    warehouse cannot be opened for writing (another process holds it: a running ``veil serve``) the mark is left where
    it is and False returned — a mark that lags only accepts a copy a little staler, it never refuses the ledger."""
    if mark is None:
        return False
    if policy.engine.kind == "spark":
        try:
            _spark().write_mark(policy, mark)
        except Exception as exc:  # best effort, as below: a lagging mark only accepts a copy a little staler
            _log.warning("the ledger's high-water mark was not raised in %s: %s", _spark().describe(policy.engine), exc)
            return False
        return True
    if not policy.database_path.exists():
        return False
    try:
        old = read_ledger_mark(policy)
        if old is not None and mark.merged(old) == old:
            return True
        with writer(policy) as con:
            con.execute("BEGIN TRANSACTION")
            try:
                write_ledger_mark(con, mark)
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise
    except PolicyError as exc:  # the file could not be opened (another process holds it)
        _log.warning("the ledger's high-water mark was not raised in %s: %s", policy.database_path, exc.message)
        return False
    return True


def read_ledger_mark(policy: Policy) -> HistoryMark | None:
    """The warehouse's high-water mark of its ledger's history (None: none yet, or no warehouse file). Read at every
    ledger open, so it leaves no connection open behind it: on this thread's writer when it holds one, on the
    sandboxed reader when this process has it open, else on a read-only connection of its own, closed at once (the
    process-wide reader, left open, would hold the file against every other process's writer: a process that only
    ran ``veil analyst add`` kept ``veil serve`` from building its bounded copies)."""
    if policy.engine.kind == "spark":
        mark: HistoryMark | None = _spark().read_mark(policy)
        return mark
    path = _db_path(policy)
    if not path.exists():
        return None
    if _gate(path).owned_here():
        with writer(policy) as con:
            return _mark_of(con)
    stamp = _file_stamp(path)
    with _MARKS_LOCK:
        seen = _MARKS.get(path)
    if stamp is not None and seen is not None and seen[0] == stamp:
        return seen[1]
    mark = _read_mark_fresh(policy, path)
    if stamp is not None:  # taken before the read: a write meanwhile changes it, and the next open reads again
        with _MARKS_LOCK:
            _MARKS[path] = (stamp, mark)
    return mark


#: The mark last read per warehouse file, with the file's and its WAL's stamp (device, inode, size, mtime in ns) taken
#: just before the read: a mark changes only with a write to one of them (or the file replaced), so an unchanged stamp
#: means an unchanged mark, and a ledger open does not pay a DuckDB connection (~18 ms of CPU) to read it again.
_MARKS: dict[Path, tuple[tuple[tuple[int, int, int, int] | None, ...], HistoryMark | None]] = {}
_MARKS_LOCK = threading.Lock()


def _file_stamp(path: Path) -> tuple[tuple[int, int, int, int] | None, ...] | None:
    out: list[tuple[int, int, int, int] | None] = []
    for p in (path, path.with_name(path.name + ".wal")):
        try:
            st = p.stat()
        except FileNotFoundError:
            out.append(None)
            continue
        except OSError:
            return None
        out.append((st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(out) if out[0] is not None else None


def _read_mark_fresh(policy: Policy, path: Path) -> HistoryMark | None:
    with reading(policy):
        with _CONNECTIONS.lock:
            open_reader = _CONNECTIONS.readers.get(path)
            cur = open_reader.cursor() if open_reader is not None else None
        if cur is None:
            try:
                cur = duckdb.connect(str(path), read_only=True, config=_sized(dict(SANDBOX_CONFIG)))
            except duckdb.IOException as exc:
                raise PolicyError(
                    f"cannot open the warehouse {str(path)!r} to read its ledger's mark: {exc}",
                    hint="Another process holds it for writing; retry when it is done",
                ) from None
        try:
            return _mark_of(cur)
        finally:
            cur.close()


def _stamp_now() -> str:
    from datetime import UTC, datetime

    return datetime.now(UTC).isoformat(timespec="seconds")


def _veil_history(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Tables that show the warehouse was used with a ledger: Veil's internal tables and tables Veil wrote."""
    from veil.store.binding import BINDING_TABLE, MARK_TABLE

    rows = con.execute("SELECT table_name, comment FROM duckdb_tables() WHERE schema_name = 'main' ORDER BY 1").fetchall()
    return [
        str(name)
        for name, comment in rows
        if name not in (BINDING_TABLE, MARK_TABLE)
        and (str(name).startswith("_veil") or (isinstance(comment, str) and comment.startswith(VERSION_COMMENT)))
    ]


def bind_ledger(policy: Policy, ledger: Any) -> None:
    """Record ``ledger``'s identity in the (existing, DuckDB) warehouse if it records none yet; check it otherwise.

    A warehouse that shows Veil's history (tables Veil wrote, bounded copies, a publication journal) is not bound to a
    ledger that holds no record at all: its releases, published tables and budgets were in another ledger, and would
    be orphaned (:class:`~veil.errors.LedgerMismatch`)."""
    from veil.store import binding

    if policy.engine.kind == "spark":
        _bind_spark(policy, ledger)
        return
    with writer(policy) as con:
        found = _binding_of(con)
        if found is None:
            history = _veil_history(con)
            if history and not ledger.has_history():
                raise _orphaned(policy, history)
            identity, at, where = binding.binding_row(ledger)
            con.execute("BEGIN TRANSACTION")
            try:
                con.execute(
                    f"CREATE TABLE IF NOT EXISTS {_quoted(binding.BINDING_TABLE)}"
                    "(ledger_id VARCHAR NOT NULL, bound_at VARCHAR NOT NULL, ledger_path VARCHAR NOT NULL)"
                )
                con.execute(f"INSERT INTO {_quoted(binding.BINDING_TABLE)} VALUES (?, ?, ?)", [identity, at, where])
                write_ledger_mark(con, ledger.history_mark())
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise
            found = identity
    binding.check_identity(policy, ledger, found)
    binding.bound(policy, found)


def _orphaned(policy: Policy, history: Sequence[str]) -> Exception:
    """An unbound warehouse with Veil's ``history`` refused to a ledger without any record."""
    from veil.errors import LedgerMismatch
    from veil.store.binding import warehouse_name

    return LedgerMismatch(
        f"the warehouse {warehouse_name(policy)!r} holds tables Veil wrote ({', '.join(history[:5])}) but "
        f"the ledger {str(policy.ledger_path)!r} has no record of any: its budgets, releases and published "
        "tables would be forgotten",
        hint="Point [ledger] path at the ledger this warehouse was used with",
    )


def _bind_spark(policy: Policy, ledger: Any) -> None:
    """:func:`bind_ledger` for a Spark database (``veil.store.spark``: no transaction spans two writes there). The
    binding first (one record, first writer wins: a process that lost a race to bind another ledger is refused), then
    the mark; a crash between leaves the database bound without a mark, which only lags (the next curator step raises
    it). The binding read back is the one checked."""
    from veil.store import binding

    spark = _spark()
    found = spark.read_binding(policy)
    if found is None:
        history = spark.veil_history(policy)
        if history and not ledger.has_history():
            raise _orphaned(policy, history)
        binding.check_history(policy, ledger)  # a mark left without its binding still names the ledger's history
        found = spark.write_binding(policy, binding.binding_row(ledger))
        binding.check_identity(policy, ledger, found)
        spark.write_mark(policy, ledger.history_mark())
    binding.check_identity(policy, ledger, found)
    binding.bound(policy, found)


def _pending_output(con: duckdb.DuckDBPyConnection, table: str) -> bool:
    """Does a publication that has not finished (a journal row) write ``table``?"""
    return any(row[1] == table for row in _journal_rows(con))


def _record_write(policy: Policy, table: str) -> None:
    """Tell open sessions (other processes too) that ``table`` changed: they re-read the catalog and measure its
    join multiplicities and key domains again (red team s19, A3: on Spark a public table rewritten from another
    process kept its old multiplicity, and the noise was scaled to 1/40 of one person's influence)."""
    from veil.store.ledger import Ledger

    with Ledger.for_policy(policy) as ledger:
        ledger.record_table_write(table)


#: Prefix of the table comment naming the version of the rows Veil wrote (see :func:`written_version`).
VERSION_COMMENT = "veil-version:"


def _replace_from_frame(
    con: duckdb.DuckDBPyConnection,
    table: str,
    df: pd.DataFrame,
    version: str | None = None,
    *,
    mark: HistoryMark | None = None,
) -> None:
    """``CREATE OR REPLACE`` ``table`` with ``df``'s rows, in one transaction (all or nothing), with the ledger's
    high-water ``mark`` (the warehouse only, never the mirror: :func:`write_ledger_mark`).

    The new table's comment names a version of its rows (``version``, else a fresh random one), committed with
    them: the query path identifies the table's data by it (:func:`written_version`) instead of reading every
    row, so no analyst's query spends time that grows with the raw table (one person's rows included). The
    public mirror's copy of a table carries the version of the warehouse's rows it was copied from."""
    token = secrets.token_hex(16) if version is None else version
    if not token.isalnum():
        raise InternalError(f"a table version must be alphanumeric, got {token!r}")
    con.execute("BEGIN TRANSACTION")
    try:
        try:
            con.register("_veil_incoming", df)
            con.execute(f'CREATE OR REPLACE TABLE "{table}" AS SELECT * FROM _veil_incoming')
        except _UNSTORABLE as exc:
            # one value of a column DuckDB cannot hold with the others (a tz-aware timestamp among naive ones, a True
            # among ints in a column the policy does not declare): refused, typed (red team s38, A5)
            raise InputError(
                f"table {table!r} cannot be stored: a column holds values DuckDB cannot store together "
                f"({type(exc).__name__}: {str(exc).splitlines()[0][:200]})",
                hint="Give each column of the frame one type (e.g. `df[c].astype(str)` for a free-text column, "
                "timestamps all with or all without a time zone)",
            ) from None
        con.unregister("_veil_incoming")
        con.execute(f"COMMENT ON TABLE \"{table}\" IS '{VERSION_COMMENT}{token}'")
        write_ledger_mark(con, mark)
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise


#: DuckDB's errors for a frame it cannot register or store (a value of one column that does not fit the others).
_UNSTORABLE = (
    duckdb.ConversionException,
    duckdb.TypeMismatchException,
    duckdb.NotImplementedException,
    duckdb.InvalidInputException,
)


def written_version(con: duckdb.DuckDBPyConnection, table: str) -> str | None:
    """The version Veil gave ``table``'s rows when it wrote them, read from the catalog (no row is read);
    ``None`` for a table Veil did not write (created by another tool, or replaced since: a new table has no
    comment). A table *edited in place* by another tool keeps its comment: load data with ``veil ingest``."""
    row = con.execute("SELECT comment FROM duckdb_tables() WHERE schema_name = 'main' AND table_name = ?", [table]).fetchone()
    comment = row[0] if row is not None else None
    if isinstance(comment, str) and comment.startswith(VERSION_COMMENT):
        token = comment[len(VERSION_COMMENT) :]
        if token.isalnum():
            return token
    return None


def stamp_version(policy: Policy, table: str) -> str:
    """``table``'s written version, naming one now (a new random token in its comment) if it has none: a table
    another tool wrote is identified from then on without reading a row. Run under the writer lock, so two
    processes stamping at once agree on one version."""
    with writer(policy) as con:
        version = written_version(con, table)
        if version is None:
            version = secrets.token_hex(16)
            con.execute(f"COMMENT ON TABLE {_quoted(table)} IS '{VERSION_COMMENT}{version}'")
        return version


def export_frame(df: pd.DataFrame, path: str | Path, *, replace: bool = False) -> Path:
    """Write ``df`` to ``.csv`` or ``.parquet`` by extension; an existing file is kept unless ``replace``."""
    p = Path(path)
    suffix = p.suffix.lower()
    if p.exists() and not replace:
        raise InputError(f"file {str(p)!r} already exists", hint="Choose another --export path or pass --replace")
    if suffix == ".csv":
        df.to_csv(p, index=False)
    elif suffix == ".parquet":
        df.to_parquet(p, index=False)
    else:
        raise InputError(f"cannot export to {str(p)!r}: unknown extension {suffix!r}", hint="Use .csv or .parquet")
    return p


#: The delimiters a CSV may use; never a space, which a column's name or value may hold.
CSV_DELIMITERS = ",;\t|"


def _csv_sep(path: Path) -> str:
    """The file's delimiter: one of :data:`CSV_DELIMITERS`, sniffed from its first lines; ``","`` for a file whose
    header line holds none of them (one column). Sniffing among every character picked a letter or a digit of a
    one-column file (``x`` over ``0…4`` was read as ``Unnamed: 0``, ``Unnamed: 1``: red team s47, B4), or the space
    of a one-column header such as ``full name`` (two columns, ``full`` and ``name``)."""
    with path.open(encoding="utf-8", errors="replace") as fh:
        first = fh.readline()
        sample = first + "".join(fh.readline() for _ in range(20))
    present = [d for d in CSV_DELIMITERS if d in first]
    if not present:
        return ","
    try:
        return csv.Sniffer().sniff(sample, delimiters=CSV_DELIMITERS).delimiter
    except csv.Error:  # no delimiter with a consistent count per line: the header's most frequent one
        return max(present, key=first.count)


def _read_source(path: Path, text: frozenset[str] = frozenset()) -> pd.DataFrame:
    """The file's rows; in a CSV, the columns whose normalised names are in ``text`` are read as text, as written.

    Otherwise a column is typed from every value in it: a category declared ``["1", "2"]`` spelled ``01``/``1.0`` in
    the file was stored as the numbers 1, 2 — unless one person's value was not a number, and then as the texts
    ``'01'``/``'1.0'`` for everyone. The query path and publications read a category as text, so one person's value
    decided whether everyone else's matched a declared value (red team s37, A1: a count moved by 75, kRR published
    120 of 150 NULL).
    """
    from veil.datasets import ADULT_COLUMNS, is_adult_file, read_adult_file

    suffix = path.suffix.lower()
    if suffix == ".parquet":
        # integer columns as pandas' nullable integers: by default one null makes a whole int64 column float64, and
        # every identifier beyond 2**53 is rounded (red team s38, A1: 150 people's ids became 2 units)
        return pd.read_parquet(path, dtype_backend="numpy_nullable")
    if is_adult_file(path):
        try:
            return read_adult_file(path)
        except ValueError:  # pandas' IntCastingNaNError too: one person's '?' or text in a numeric field
            raise InputError(
                f"{str(path)!r} is in Adult's format, but a numeric field (age, fnlwgt, education-num, capital-gain, "
                "capital-loss, hours-per-week) holds a value that is not a whole number (or '?')",
                hint="Fix or remove those rows, or give the file a header line and ingest it as CSV",
            ) from None
    if suffix in (".csv", ".txt", ".data", ".tsv", ""):
        sep = _csv_sep(path)
        header = pd.read_csv(path, sep=sep, engine="python", nrows=0)
        as_text = {c: str for c in header.columns if normalise_name(str(c)) in text}
        df = pd.read_csv(path, sep=sep, engine="python", skipinitialspace=True, na_values=["?"], dtype=as_text or None)
        if all(str(c).strip().lstrip("-").replace(".", "").isdigit() for c in df.columns):
            raise InputError(
                f"{str(path)!r} has no header row (first line {list(df.columns)[:3]}…)",
                hint=f"Add a header line with column names (Adult's are {', '.join(ADULT_COLUMNS[:3])}, …)",
            )
        return df
    raise InputError(f"cannot ingest {str(path)!r}: unknown format {suffix!r}", hint="Use CSV or Parquet")


def ingest_file(policy: Policy, table: str, path: str | Path, *, replace: bool = False) -> dict[str, object]:
    """Load a CSV/Parquet file into the warehouse as ``table``; column names are normalised.

    An existing table is replaced only with ``replace``; a published table never (raw data would
    become public under its release): retract it first. Adult's headerless ``adult.data``/
    ``adult.test`` are recognised and get Adult's column names. Returns a summary: rows, columns,
    and the policy-declared columns that the file lacks.
    """
    p = Path(path)
    if not p.exists():
        raise InputError(f"file {str(p)!r} does not exist", hint="Check the path")
    _refuse_published(policy, table)
    if not replace and table in table_names(policy):
        raise InputError(f"table {table!r} already exists in the warehouse", hint="Choose another --table name or pass --replace")
    spec = policy.tables.get(table)
    declared = spec.columns.items() if spec is not None else ()
    # declared category, int, float and bool columns are read as written; ``write_table`` stores them (``as_stored``)
    # value by value, whatever the other rows hold: pandas reads an int column with one gap as floats (ids beyond
    # 2**53 rounded), and a 0/1 column spelled 1.0 as numbers unless one value is text (red team s38, A1/A3)
    df = _read_source(p, frozenset(name for name, col in declared if col.type in ("category", "int", "float", "bool")))
    mapping = {c: normalise_name(str(c)) for c in df.columns}
    if len(set(mapping.values())) != len(mapping):
        raise InputError(f"column names of {str(p)!r} collide after normalisation: {mapping}")
    df = df.rename(columns=mapping)
    write_table(policy, table, df, replace=replace, public=spec is not None and spec.public)
    missing: list[str] = []
    if table in policy.tables:
        missing = [c for c in policy.tables[table].columns if c not in df.columns]
    return {"table": table, "rows": len(df), "columns": list(df.columns), "missing_policy_columns": missing}


def _spark_publish() -> ModuleType:
    """The publish transaction's storage steps on Spark (journal in the ledger file, see that module)."""
    from veil.store import spark_publish

    return spark_publish


def _spark() -> ModuleType:
    """The Spark store (a policy with ``[engine] kind = "spark"`` keeps its tables there)."""
    from veil.store import spark

    return spark


# -- the public mirror ---------------------------------------------------------------------------
# Analyst SQL over public data runs on a separate DuckDB file that holds only public and published
# tables: a connection to it cannot see private tables, Veil's internal tables or their catalog
# entries, whatever the SQL says.


def public_path(policy: Policy) -> Path:
    """The public mirror's file, next to the warehouse (``warehouse.duckdb`` → ``warehouse.public.duckdb``)."""
    return policy.database_path.with_name(policy.database_path.stem + ".public.duckdb")


def copy_to_public(policy: Policy, table: str, df: pd.DataFrame | None = None) -> None:
    """Write ``table`` (``df``, the rows just written to the warehouse, or the warehouse's copy) into the public
    mirror, replacing an older copy; the mirror's copy carries the warehouse's version of the table, so a session
    can tell a stale mirror copy from a current one without reading a row."""
    if policy.engine.kind == "spark":
        return  # public tables are read from the Spark database itself
    with holding_writer(policy):  # the stamp and the read on one connection, closed before the mirror's opens
        version, frame = _mirror_copy(policy, table, df)
    _write_mirror(policy, table, version, frame)


def _mirror_copy(policy: Policy, table: str, df: pd.DataFrame | None) -> tuple[str, pd.DataFrame]:
    """The version and rows :func:`copy_to_public` writes into the mirror (stamping the warehouse's table)."""
    if table.startswith("_veil"):
        raise InputError(f"table name {table!r} is reserved for Veil's internal tables", hint="Choose another name")
    version = stamp_version(policy, table)
    declared = mirror_columns(policy, table)
    if df is not None:
        frame = df
    elif declared is None:
        frame = read_table(policy, table)
    else:  # the declared columns only: an undeclared one is never read (red team s51 A3: another tool's DATE
        # 'infinity' in a column the policy leaves out failed the copy, and with it every analyst's query)
        spelled = {c.lower() for c in declared}
        stored = [c for c, _ in table_columns(policy, table) if c.lower() in spelled]
        frame = read_table(policy, table, stored) if stored else pd.DataFrame()
    if declared is not None:  # only what the policy declares: no query on the mirror can name the rest
        frame = _declared_only(frame, table, declared)
    return mirror_version(version, declared), frame


def _write_mirror(policy: Policy, table: str, version: str, frame: pd.DataFrame) -> None:
    """Replace the mirror's copy of ``table``. Callers hold no warehouse writer here: a thread holding one (and with
    it this module's lock) while it waits for the mirror's running statements to end could wait on a thread that
    runs one and waits for that lock."""
    with writer(public_path(policy)) as con:
        _replace_from_frame(con, table, frame, version)


def _declared_names(frame: pd.DataFrame, table: str, declared: Iterable[str]) -> pd.DataFrame:
    """``frame`` with each column that names a declared column in another case renamed to the declared spelling, as
    DuckDB matches names: the stored-form rules (:func:`~veil.store.declared_types.as_stored`: dates, numbers, the
    unit) then apply to it, not only to exact spellings (review of s47 B4: a frame's zoned ``D`` for a declared
    ``date`` ``d`` was stored as it came). Two columns naming one declared column are refused."""
    spelled = {c.lower(): c for c in declared}
    named: dict[str, object] = {}
    for c in frame.columns:
        target = spelled.get(str(c).lower())
        if target is None:
            continue
        if target in named:
            raise InputError(
                f"table {table!r}: the frame's columns {named[target]!r} and {c!r} both name the declared column {target!r}",
                hint="Keep one of them (column names match regardless of case)",
            )
        named[target] = c
    renames = {c: t for t, c in named.items() if c != t}
    return frame.rename(columns=renames) if renames else frame


def _declared_only(frame: pd.DataFrame, table: str, declared: Sequence[str]) -> pd.DataFrame:
    """``frame``'s columns the policy declares, under their declared names. Names match case-insensitively, as
    DuckDB matches them (a frame's ``K`` is the declared ``k``: matched exactly, the mirror lost the column, and a
    table of none made every analyst's query fail, red team s47 B4); a frame holding none of them is refused."""
    spelled = {c.lower(): c for c in declared}
    keep = {c: spelled[str(c).lower()] for c in frame.columns if str(c).lower() in spelled}
    if not keep:
        raise InputError(
            f"table {table!r} holds none of the columns the policy declares for it ({', '.join(declared)})",
            hint="Name the frame's columns as the policy does, or declare the table's columns in the policy",
        )
    return frame[list(keep)].rename(columns=keep)


def mirror_columns(policy: Policy, table: str) -> tuple[str, ...] | None:
    """The columns the public mirror holds of ``table``: for a table the policy declares public with a column list,
    those columns (the catalog lets no query name the others, and the mirror cannot hand them to a construct that
    reads whole rows: red team s46 A1, ``SELECT t FROM t``, ``* EXCLUDE``); None: every column (a publication, whose
    columns are all sanitised, or a public table declared without columns)."""
    spec = policy.tables.get(table)
    if spec is None or not spec.public or not spec.columns:
        return None
    return tuple(spec.columns)


def mirror_version(version: str, columns: Sequence[str] | None) -> str:
    """The version a mirror copy of ``version``'s rows carries: with its column list folded in, so a copy made
    under another list of declared columns is stale (copied again) after a policy edit.

    A copy also carries :data:`MIRROR_FORMAT`, the way its rows were read: a copy an earlier format made (DECIMAL read
    through pandas, rounded twice) is stale too (review s18).

    >>> mirror_version("ab12", None) == mirror_version("ab12", None), mirror_version("ab12", ["k"]) != "ab12"
    (True, True)
    """
    tagged = f"{version}f{MIRROR_FORMAT}"
    if columns is None:
        return tagged
    return f"{tagged}c{hashlib.sha256(chr(0).join(columns).encode()).hexdigest()[:16]}"


#: How a mirror copy's rows are read (bumped when that changes, so copies made before are copied again): 2, wide numbers
#: read with DuckDB's own cast to DOUBLE (:func:`_as_double_once`).
MIRROR_FORMAT = 2


def drop_public(policy: Policy, table: str) -> None:
    """Remove ``table`` from the public mirror (a retraction)."""
    if policy.engine.kind == "spark":
        return
    path = public_path(policy)
    if path.exists():
        with writer(path) as con:
            con.execute(f'DROP TABLE IF EXISTS "{table}"')


def public_reader_cursor(policy: Policy) -> tuple[duckdb.DuckDBPyConnection, int]:
    """A cursor on the sandboxed, read-only connection of the public mirror, and its generation."""
    path = public_path(policy)
    with _CONNECTIONS.lock:
        con = reader(path)
        return con.cursor(), _CONNECTIONS.generation[path]


def ensure_public(policy: Policy) -> None:
    """Create the (empty) public mirror if the warehouse has none yet. Processes starting at once may race to create
    it: one that finds the file locked by another's creation waits until the file exists."""
    path = public_path(policy)
    for _ in range(200):
        if path.exists():
            return
        try:
            with writer(path):
                return
        except PolicyError:
            time.sleep(0.05)  # another process is creating it (DuckDB holds the file's lock meanwhile)
    if not path.exists():
        raise PolicyError(f"cannot create the public mirror {str(path)!r}", hint="Another process holds it; retry")


def public_reader_generation(policy: Policy) -> int:
    return reader_generation(public_path(policy))


# -- two-phase publication: stage, record (in the ledger), commit, mirror --------------------------
# (a Spark policy runs the same steps through veil.store.spark_publish)
# A publication is first written under a staging name together with a journal row, in one DuckDB
# transaction; the caller then records the release in the ledger; then one DuckDB transaction renames
# the staging table over the output and marks the journal row committed; then the public mirror is
# updated and the journal row removed. `pending_publications` lists what a crash left behind, so the
# publish transaction's recovery can roll each one forward (release recorded) or back (not recorded).

JOURNAL = "_veil_publish_journal"
_JOURNAL_DDL = (
    f"CREATE TABLE IF NOT EXISTS {JOURNAL}(token VARCHAR PRIMARY KEY, output VARCHAR NOT NULL, "
    "staging VARCHAR NOT NULL, artifact VARCHAR NOT NULL, state VARCHAR NOT NULL, release_id VARCHAR)"
)


def staging_name(token: str) -> str:
    return f"_veil_stage_{token}"


def _lock_path(policy: Policy, token: str) -> Path:
    if not token.isalnum():
        raise InternalError(f"a publication token must be alphanumeric, got {token!r}")
    return policy.ledger_path.with_name(f"{policy.ledger_path.name}.publish-{token}.lock")


@contextmanager
def publication_lock(policy: Policy, token: str) -> Iterator[None]:
    """Held by the process running publication ``token`` from before it stages until it finished: an OS file lock,
    released by the OS if the process dies, so another process's recovery can tell a publication in flight from
    one a crash left behind (:func:`publication_in_flight`; red team s24, A5: a concurrent `veil tables` rolled back
    a running publication, which then recorded its release anyway, its table gone)."""
    import fcntl

    path = _lock_path(policy, token)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        path.unlink(missing_ok=True)
        os.close(fd)


@contextmanager
def output_claim(policy: Policy, output: str, *, raw_write: bool = False, shared: bool = False) -> Iterator[None]:
    """Claim a publication's output (table name or model path) for this process until the block ends: a second
    publication to the same output, in any process, is refused typed before its charge (red team s27 A7: two
    publications to one new name both passed the existence check, both were charged, and the later commit silently
    replaced the earlier table). An OS file lock (non-blocking), freed by the OS when the process dies.
    ``raw_write``: the claim is a curator's raw write to a Spark table (:func:`write_table`). ``shared``: a claim
    other shared claims of the name do not refuse (only an exclusive one does, and it is refused by them)."""
    import fcntl
    import hashlib

    digest = hashlib.sha256(output.encode("utf-8")).hexdigest()[:24]
    path = policy.ledger_path.with_name(f"{policy.ledger_path.name}.output-{digest}.lock")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    try:
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except BlockingIOError:
            if raw_write:
                raise InputError(
                    f"table {output!r} is being published or written right now: raw data over it could become public",
                    hint="Choose another table name, or wait and withdraw the publication with `veil retract`",
                ) from None
            raise InputError(
                f"--output {output!r} is being published or written by another process right now",
                hint="Wait for it to finish, then publish under another name or pass --replace",
            ) from None
        yield
    finally:
        os.close(fd)  # the lock file stays: unlinking it could let two processes lock two different files


def publication_in_flight(policy: Policy, token: str) -> bool:
    """Is publication ``token`` still running in some process (its :func:`publication_lock` held)?"""
    import fcntl

    path = _lock_path(policy, token)
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


class OutputExists(InputError):
    """A publication's output appeared after its check and it may not replace it (raised before its release is
    recorded; the publish transaction refunds its charge: the refusal depends on the warehouse's names only)."""


def stage_publication(
    policy: Policy,
    token: str,
    output: str,
    frame: pd.DataFrame | None,
    *,
    staging_file: str = "",
    replace: bool = True,
) -> None:
    """Write ``frame`` under its staging name (or note a staged model file) and a journal row, atomically.

    Without ``replace``, an output table that exists now (created since the publication checked it, e.g. by a
    ``veil ingest``) or that another staged publication will commit is refused (:class:`OutputExists`), in the same
    transaction: the commit's ``DROP TABLE IF EXISTS`` then never replaces a table unasked (red team s27 A7)."""
    if policy.engine.kind == "spark":
        _spark_publish().stage(policy, token, output, staging_name(token), frame, staging_file)
        return
    with writer(policy) as con:
        con.execute("BEGIN TRANSACTION")
        try:
            con.execute(_JOURNAL_DDL)
            if frame is not None and not replace:
                taken = con.execute("SELECT table_name FROM information_schema.tables WHERE table_name = ?", [output]).fetchall()
                claimed = con.execute(f"SELECT token FROM {JOURNAL} WHERE output = ?", [output]).fetchall()
                if taken or claimed:
                    raise OutputExists(
                        f"--output {output!r} was created while this publication ran: it is not replaced without "
                        "--replace (nothing was published, nothing is charged)",
                        hint="Publish under another --output name or pass --replace",
                    )
            if frame is not None:
                con.register("_veil_incoming", frame)
                con.execute(f'CREATE TABLE "{staging_name(token)}" AS SELECT * FROM _veil_incoming')
                con.unregister("_veil_incoming")
            con.execute(
                f"INSERT INTO {JOURNAL} VALUES (?, ?, ?, ?, 'staged', NULL)",
                [
                    token,
                    output,
                    staging_name(token) if frame is not None else staging_file,
                    "table" if frame is not None else "model",
                ],
            )
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise


def pending_publications(policy: Policy) -> list[dict[str, str | None]]:
    """Journal rows left by publications that did not finish (token, output, staging, artifact, state, release_id)."""
    if policy.engine.kind == "spark":
        return _spark_publish().pending(policy)
    if not policy.database_path.exists():
        return []
    with writer(policy) as con:
        rows = _journal_rows(con)
    keys = ("token", "output", "staging", "artifact", "state", "release_id")
    return [dict(zip(keys, r, strict=True)) for r in rows]


def _journal_rows(con: duckdb.DuckDBPyConnection) -> list[tuple[str | None, ...]]:
    """The journal's rows (token, output, staging, artifact, state, release_id); none before the first publication."""
    found = con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = ?", [JOURNAL]).fetchone()
    if found is None or not found[0]:
        return []
    return con.execute(f"SELECT token, output, staging, artifact, state, release_id FROM {JOURNAL}").fetchall()


def commit_publication(
    policy: Policy, token: str, release_id: str, *, strict: bool = False, mark: HistoryMark | None = None
) -> None:
    """Rename the staged table over its output (or move the staged model file) and mark the journal row
    committed, raising the ledger's high-water ``mark`` (taken after the release was recorded) in the same
    transaction. Idempotent: a row already committed is left as it is. ``strict`` (the publishing process itself):
    a journal row that is gone is an error, never a silent success."""
    if policy.engine.kind == "spark":
        _spark_publish().commit(policy, token, release_id, mark=mark)
        return
    with writer(policy) as con:
        row = con.execute(f"SELECT output, staging, artifact, state FROM {JOURNAL} WHERE token = ?", [token]).fetchone()
        if row is None and strict:
            raise InternalError(f"publication {token} lost its staged output before its commit (release {release_id})")
        if row is None or row[3] == "committed":
            return
        output, staging, artifact, _ = row
        if artifact == "model":
            if Path(staging).exists():
                Path(staging).replace(output)
                side = Path(staging + ".json")
                if side.exists():
                    side.replace(output + ".json")
        con.execute("BEGIN TRANSACTION")
        try:
            if artifact == "table":
                con.execute(f'DROP TABLE IF EXISTS "{output}"')
                con.execute(f'ALTER TABLE "{staging}" RENAME TO "{output}"')
            con.execute(f"UPDATE {JOURNAL} SET state = 'committed', release_id = ? WHERE token = ?", [release_id, token])
            write_ledger_mark(con, mark)
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise


def finish_publication(policy: Policy, token: str) -> None:
    """After the commit: copy the table into the public mirror and drop the journal row."""
    if policy.engine.kind == "spark":
        _spark_publish().finish(policy, token)
        return
    with holding_writer(policy):  # the journal's read, the stamp and the table's read on one connection
        rows = [r for r in pending_publications(policy) if r["token"] == token]
        if not rows:
            return
        mirror = _mirror_copy(policy, str(rows[0]["output"]), None) if rows[0]["artifact"] == "table" else None
    if mirror is not None:
        _write_mirror(policy, str(rows[0]["output"]), *mirror)
    with writer(policy) as con:
        con.execute(f"DELETE FROM {JOURNAL} WHERE token = ?", [token])


def abort_publication(policy: Policy, token: str) -> None:
    """Drop a staged publication whose release was never recorded."""
    if policy.engine.kind == "spark":
        _spark_publish().abort(policy, token)
        return
    rows = [r for r in pending_publications(policy) if r["token"] == token]
    if not rows or rows[0]["state"] != "staged":
        return
    staging = str(rows[0]["staging"])
    if rows[0]["artifact"] == "model":
        for p in (Path(staging), Path(staging + ".json")):
            p.unlink(missing_ok=True)
    with writer(policy) as con:
        con.execute("BEGIN TRANSACTION")
        try:
            if rows[0]["artifact"] == "table":
                con.execute(f'DROP TABLE IF EXISTS "{staging}"')
            con.execute(f"DELETE FROM {JOURNAL} WHERE token = ?", [token])
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise


class Warehouse:
    """One policy's warehouse as an object: its DuckDB file, its public mirror, and the curator's
    operations on them (the module-level functions are the same operations, kept for existing callers).

    """

    def __init__(self, policy: Policy) -> None:
        self.policy = policy

    @property
    def path(self) -> Path:
        return self.policy.database_path

    @property
    def public_path(self) -> Path:
        return public_path(self.policy)

    def table_names(self, *, internal: bool = False) -> list[str]:
        """Tables in the file; Veil's internal ``_veil*`` tables only with ``internal``."""
        return [t for t in table_names(self.policy) if internal or not t.startswith("_veil")]

    def columns(self, table: str) -> list[tuple[str, str]]:
        return table_columns(self.policy, table)

    def read(self, table: str, columns: Sequence[str] | None = None) -> pd.DataFrame:
        return read_table(self.policy, table, columns)

    def write(self, table: str, df: pd.DataFrame, *, replace: bool = False, public: bool = False) -> None:
        write_table(self.policy, table, df, replace=replace, public=public)

    def ingest(self, table: str, path: str | Path, *, replace: bool = False) -> dict[str, object]:
        return ingest_file(self.policy, table, path, replace=replace)

    def copy_to_public(self, table: str, df: pd.DataFrame | None = None) -> None:
        copy_to_public(self.policy, table, df)

    def drop_public(self, table: str) -> None:
        drop_public(self.policy, table)

    def ensure_public(self) -> None:
        ensure_public(self.policy)

    def stage(self, token: str, output: str, frame: pd.DataFrame | None, *, staging_file: str = "") -> None:
        stage_publication(self.policy, token, output, frame, staging_file=staging_file)

    def pending(self) -> list[dict[str, str | None]]:
        return pending_publications(self.policy)

    def commit(self, token: str, release_id: str) -> None:
        commit_publication(self.policy, token, release_id)

    def finish(self, token: str) -> None:
        finish_publication(self.policy, token)

    def abort(self, token: str) -> None:
        abort_publication(self.policy, token)
