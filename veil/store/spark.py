"""Spark as the storage behind a policy with ``[engine] kind = "spark"``: the process's SparkSession and curator access.

One ``SparkSession`` per process and configuration (pyspark in this process for ``master``, Spark Connect for
``remote``), shared by every :class:`veil.engines.spark.SparkEngine` and by the curator functions here
(``table_names``, ``table_columns``, ``read_table``, ``write_table``), which :mod:`veil.store.warehouse` calls
for Spark policies. Veil's Spark sessions run with ``spark.sql.ansi.enabled = false`` (see
:mod:`veil.engines.spark`). In local mode every table is a Parquet directory
``<warehouse>/<database>.db/<table>``, registered in the session's catalog on start (no Hive metastore:
several Veil processes can share one warehouse).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import logging
import os
import shutil
import threading
import time
import uuid
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from veil.errors import InputError, InternalError
from veil.policy import EngineSpec, Policy

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import SparkSession

__all__ = [
    "bump_writes", "columns_of", "connect_available", "drop", "exists", "forget_remote", "read_table",
    "spark_available", "spark_session", "spec_of", "table_columns", "table_names", "write_table", "writes",
]  # fmt: skip

RECHECK_SECONDS = 60.0

log = logging.getLogger("veil.store.spark")

_lock = threading.RLock()
_sessions: dict[tuple[str | None, str | None, str], SparkSession] = {}  # (master, remote, database)
_roots: dict[tuple[str | None, str | None], SparkSession] = {}  # the first session of each Spark
_active_warehouse: dict[str, Path] = {}  # local mode: the warehouse whose tables the catalog holds, per database
_writes = 0  # bumped by every write through Veil in this process: bounded copies are re-checked at once


def connect_available() -> str | None:
    """None when pyspark's Spark Connect client can load here, else the reason."""
    try:
        with _quiet():
            import pyspark.sql.connect.session  # noqa: F401
    except ImportError as exc:
        return f"pyspark's Connect client cannot load ({exc}); pip install 'veil[spark]'"
    return None


def spark_available() -> str | None:
    """None when a local Spark can start here, else the reason (pyspark or Java missing)."""
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return "pyspark is not installed (pip install 'veil[spark]')"
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return "Java is not installed (Spark needs a JDK 17+)"
    return None


def spec_of(policy: Policy) -> EngineSpec:
    spec = policy.engine
    if spec.kind != "spark":
        raise InternalError("a Spark engine for a policy without [engine] kind = 'spark'")
    return spec


def spark_session(spec: EngineSpec) -> SparkSession:
    """The process's SparkSession for ``spec`` (started on first use; local tables registered).

    One session per Spark (``master`` or ``remote``) and database: the current database is a property of the
    session, so two policies naming different databases of one Spark never read each other's tables. Sessions
    of one local Spark share its context and catalog (``newSession``); a Connect server gets one client
    session per database.
    """
    key = (spec.master, spec.remote, spec.database)
    with _lock:
        cached = _sessions.get(key)
        if cached is not None:
            if spec.remote is None:
                _activate_local(cached, spec)
            return cached
        try:
            with _quiet():
                from pyspark.sql import SparkSession
        except ImportError:
            raise InputError(
                "the policy names a Spark engine but pyspark is not installed", hint="pip install 'veil[spark]'"
            ) from None
        root = _roots.get((spec.master, spec.remote))
        s: Any  # a classic or a Connect SparkSession (the same API for what Veil uses)
        if spec.remote is not None:
            with _quiet():  # the Connect client checks its pandas version on import
                # The Connect session class itself: pyspark's generic builder refuses a remote session in a
                # process that already runs a local Spark (tests; a curator tool holding both).
                try:
                    from pyspark.sql.connect.session import SparkSession as ConnectSession
                except ImportError as exc:  # pyspark without its [connect] extra (grpcio, …)
                    raise InputError(
                        f"the policy names a Spark Connect server but pyspark's Connect client cannot load ({exc})",
                        hint="pip install 'veil[spark]' (it installs pyspark[connect])",
                    ) from None

                remote = ConnectSession.builder.remote(spec.remote)
                s = remote.create()  # never getOrCreate: it returns the process's Connect session, whatever its server
        elif root is not None:
            s = root.newSession()
        else:
            if spec.warehouse is None or spec.master is None:
                raise InternalError("local Spark without a master or warehouse")
            spec.warehouse.mkdir(parents=True, exist_ok=True)
            builder = (
                SparkSession.builder.master(spec.master)
                .appName("veil")
                .config("spark.sql.warehouse.dir", str(spec.warehouse))
                .config("spark.ui.enabled", "false")
                .config("spark.ui.showConsoleProgress", "false")
                .config("spark.sql.shuffle.partitions", str(_local_cores(spec.master)))
                .config("spark.sql.session.timeZone", "UTC")
                .config("spark.driver.extraJavaOptions", f"-Dderby.system.home={spec.warehouse}")
            )
            with _quiet():
                s = builder.getOrCreate()
            s.sparkContext.setLogLevel("FATAL")  # a refused statement is Veil's to report, without its SQL
        _roots.setdefault((spec.master, spec.remote), s)
        s.conf.set("spark.sql.ansi.enabled", "false")
        s.conf.set("spark.sql.execution.arrow.pyspark.enabled", "true")
        s.conf.set("spark.sql.session.timeZone", "UTC")
        if spec.remote is None:
            _activate_local(s, spec)
        else:
            try:
                s.sql(f"CREATE DATABASE IF NOT EXISTS {_q(spec.database)}")
            except Exception as exc:  # a cluster may refuse CREATE; the database then has to exist already
                log.info("CREATE DATABASE %s refused (%s); using it as it is", spec.database, type(exc).__name__)
        s.catalog.setCurrentDatabase(spec.database)
        _sessions[key] = s
    return s


def forget_remote(remote: str) -> None:
    """Close this process's sessions on the Connect server ``remote`` (before the server goes away)."""
    with _lock:
        for key in [k for k in _sessions if k[1] == remote]:
            s = _sessions.pop(key)
            try:
                s.stop()
            except Exception as exc:  # the server may be gone already
                log.debug("closing a Spark Connect session failed (%s)", type(exc).__name__)
        _roots.pop((None, remote), None)


def _local_cores(master: str) -> int:
    """Shuffle partitions for ``local[N]``: N (at least 2); 8 for ``local[*]`` or anything else."""
    inner = master.removeprefix("local[").removesuffix("]")
    return max(2, int(inner)) if inner.isdigit() else 8


def _activate_local(s: SparkSession, spec: EngineSpec) -> None:
    """Point the process's catalog at ``spec``'s local warehouse (one local warehouse per database at a time).

    Local tables are Parquet directories registered as external tables: switching warehouses forgets the
    registrations of the previous one (its files stay) and registers the new one's.
    """
    if spec.warehouse is None:
        raise InternalError("local Spark without a warehouse")
    if _active_warehouse.get(spec.database) == spec.warehouse:
        return
    d = _db_dir(spec)
    d.mkdir(parents=True, exist_ok=True)
    s.sql(f"CREATE DATABASE IF NOT EXISTS {_q(spec.database)} LOCATION '{_path_literal(d)}'")
    if spec.database in _active_warehouse:
        for t in s.catalog.listTables(spec.database):
            if not t.isTemporary:
                s.sql(f"DROP TABLE IF EXISTS {_full(spec, t.name)}")  # external: the files stay
    _active_warehouse[spec.database] = spec.warehouse
    _register_local(s, spec)


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _full(spec: EngineSpec, table: str) -> str:
    return f"{_q(spec.database)}.{_q(table)}"


def _db_dir(spec: EngineSpec) -> Path:
    if spec.warehouse is None:
        raise InternalError("local Spark without a warehouse")
    return spec.warehouse / f"{spec.database}.db"


def _location(spec: EngineSpec, table: str) -> Path:
    return _db_dir(spec) / table


def _register_local(s: SparkSession, spec: EngineSpec, only: str | None = None) -> None:
    """Register every Parquet table directory of the local warehouse that the session's catalog lacks."""
    d = _db_dir(spec)
    if not d.is_dir():
        return
    known = {t.name for t in s.catalog.listTables(spec.database)}
    for child in sorted(d.iterdir()):
        name = child.name
        if only is not None and name != only:
            continue
        if not child.is_dir() or ".__veil_" in name or name in known or not any(child.glob("*.parquet")):
            continue
        if name in (_internal("BINDING_TABLE"), _internal("MARK_TABLE")):
            continue  # the ledger's binding and mark: read from their files, never as tables (see below)
        s.sql(f"CREATE TABLE IF NOT EXISTS {_full(spec, name)} USING parquet LOCATION '{_path_literal(child)}'")


def _path_literal(p: Path) -> str:
    text = str(p)
    if "'" in text or "\\" in text:
        raise InputError(f"the Spark warehouse path {text!r} contains a quote or backslash", hint="Use a plain path")
    return text


def _type_name(dt: Any) -> str:
    """A Spark data type as the engine type name :func:`veil.engines.base.output_type` maps."""
    name = dt.simpleString() if hasattr(dt, "simpleString") else str(dt)
    return _TYPE_NAMES.get(name, name.upper())


_TYPE_NAMES = {
    "tinyint": "TINYINT",
    "smallint": "SMALLINT",
    "int": "INTEGER",
    "bigint": "BIGINT",
    "float": "FLOAT",
    "double": "DOUBLE",
    "string": "VARCHAR",
    "boolean": "BOOLEAN",
    "date": "DATE",
    "timestamp": "TIMESTAMP WITH TIME ZONE",
    "timestamp_ntz": "TIMESTAMP",
    "void": "NULL",
}


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """pyspark warns that it does not yet fully support pandas 3 on every conversion (Arrow does the work)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        yield


def drop(s: SparkSession, spec: EngineSpec, name: str) -> None:
    """Drop a table of Veil's (its local directory too)."""
    s.sql(f"DROP TABLE IF EXISTS {_full(spec, name)}")
    if spec.remote is None:
        loc = _location(spec, name)
        if loc.exists():
            shutil.rmtree(loc)


def writes() -> int:
    """How many writes Veil made through this process (a change invalidates cached table facts)."""
    return _writes


def bump_writes() -> None:
    """Count one write through Veil (tables written, bounded copies built)."""
    global _writes
    with _lock:
        _writes += 1


def exists(spec: EngineSpec, table: str) -> bool:
    """Is ``table`` in ``spec``'s database (a local warehouse directory not yet registered is registered)?"""
    s = spark_session(spec)
    if s.catalog.tableExists(f"{spec.database}.{table}"):
        return True
    if spec.remote is None:
        _register_local(s, spec, only=table)
        return bool(s.catalog.tableExists(f"{spec.database}.{table}"))
    return False


def columns_of(spec: EngineSpec, table: str) -> list[tuple[str, str]]:
    """``(column, engine type)`` of a table; empty when it does not exist."""
    if not exists(spec, table):
        return []
    cols = spark_session(spec).catalog.listColumns(f"{spec.database}.{table}")
    return [(c.name, _TYPE_NAMES.get(c.dataType, c.dataType.upper())) for c in cols]


def table_names(policy: Policy) -> list[str]:
    spec = spec_of(policy)
    s = spark_session(spec)
    return sorted(t.name for t in s.catalog.listTables(spec.database) if not t.isTemporary)


def table_columns(policy: Policy, table: str) -> list[tuple[str, str]]:
    cols = columns_of(policy.engine, table)
    if not cols:
        raise InputError(
            f"table {table!r} is not in the Spark database {policy.engine.database!r}", hint="Load it with `veil ingest` first"
        )
    return cols


def read_table(policy: Policy, table: str, columns: Sequence[str] | None = None, *, python_dates: bool = False) -> pd.DataFrame:
    """The whole table as a DataFrame (curator access: raw values), through Arrow. ``python_dates``: dates and
    timestamps Python cannot hold read as NULL (``warehouse.within_python_dates``), else they are refused."""
    from veil.store.warehouse import within_python_dates

    types = dict(table_columns(policy, table))
    have = list(types)
    for c in columns or []:
        if c not in have:
            raise InputError(f"column {c!r} is not in table {table!r}", hint=f"Columns: {', '.join(have)}")
    spec = spec_of(policy)
    if python_dates:
        cols = ", ".join(within_python_dates(_q(c), types[c]) for c in (columns or have))
    else:
        cols = ", ".join(_q(c) for c in columns) if columns else "*"
    with _quiet():
        rows = spark_session(spec).sql(f"SELECT {cols} FROM {_full(spec, table)}").toArrow()
    _check_python_dates(rows, table)
    return rows.to_pandas()


#: The days (since 1970-01-01) of the first and last dates Python holds (years 1–9999); Spark's dates reach about
#: ±5.8 million years.
PYTHON_DAYS = ((dt.date(1, 1, 1) - dt.date(1970, 1, 1)).days, (dt.date(9999, 12, 31) - dt.date(1970, 1, 1)).days)


def _check_python_dates(rows: Any, table: str) -> None:
    """Refuse (:class:`~veil.errors.InputError`, naming the column and the value) an Arrow table holding a date
    Python cannot hold: ``to_pandas`` failed on it with an untyped ``ValueError`` ("year 10000 is out of range")."""
    import numpy as np
    import pyarrow as pa  # type: ignore[import-untyped]
    import pyarrow.compute as pc  # type: ignore[import-untyped]

    first, last = PYTHON_DAYS
    for field, column in zip(rows.schema, rows.columns, strict=True):
        if not pa.types.is_date(field.type):
            continue
        extremes = pc.min_max(pc.cast(column, pa.date32()).cast(pa.int32()))
        for day in (extremes["min"].as_py(), extremes["max"].as_py()):
            if day is not None and not first <= day <= last:
                raise InputError(
                    f"column {field.name!r} of table {table!r} holds the date {np.datetime64(day, 'D')}, beyond the "
                    "years 1 to 9999 that Veil reads",
                    hint="Correct or remove the rows holding such dates, or read the other columns only",
                )


def write_table(policy: Policy, table: str, df: pd.DataFrame, *, replace: bool = False) -> None:
    """Store ``df`` as ``table`` in the Spark database (written aside, then swapped in)."""
    spec = spec_of(policy)
    s = spark_session(spec)
    if exists(spec, table) and not replace:
        raise InputError(f"table {table!r} already exists", hint="Choose another --output name or pass --replace")
    with _quiet():
        incoming = s.createDataFrame(df)
    if spec.remote is not None:
        tmp = f"_veil_incoming_{uuid.uuid4().hex[:12]}"
        incoming.write.format("parquet").mode("overwrite").saveAsTable(f"{spec.database}.{tmp}")
        s.sql(f"DROP TABLE IF EXISTS {_full(spec, table)}")
        s.sql(f"ALTER TABLE {_full(spec, tmp)} RENAME TO {_full(spec, table)}")
    else:
        loc = _location(spec, table)
        tmp_dir = loc.with_name(f"{table}.__veil_incoming_{uuid.uuid4().hex[:12]}")
        incoming.write.mode("overwrite").parquet(str(tmp_dir))
        old = loc.with_name(f"{table}.__veil_old_{uuid.uuid4().hex[:12]}")
        if loc.exists():
            loc.rename(old)
        tmp_dir.rename(loc)
        if old.exists():
            shutil.rmtree(old)
        s.sql(f"DROP TABLE IF EXISTS {_full(spec, table)}")
        s.sql(f"CREATE TABLE {_full(spec, table)} USING parquet LOCATION '{_path_literal(loc)}'")
        s.sql(f"REFRESH TABLE {_full(spec, table)}")
    bump_writes()


# -- the warehouse's ledger (veil.store.binding) -----------------------------------------------------
#
# The Spark database Veil writes to records its ledger as a DuckDB warehouse file does (``_veil_ledger_binding``: the
# ledger's identity; ``_veil_ledger_mark``: the high-water mark of its history). Spark has no transaction spanning two
# writes, so both are written so that no crash can leave a wrong record, only a missing or a lagging one:
#
# * the binding is written once, the winner decided by one atomic step: in local mode one Parquet file written aside
#   (a hidden name, synced) and linked into place with ``os.link`` (fails if a binding is there: two processes binding
#   two ledgers at once cannot both win; without hard links, created in place with ``O_EXCL``, readers waiting out a
#   file not yet whole); on Spark Connect a view created once (``CREATE VIEW`` without ``IF NOT EXISTS``) whose one
#   row is the binding, so every reader agrees on the winner and the loser is refused (never a writer's clock: review
#   s23 Y3); a table of rows an earlier Veil appended is still read, by its earliest row;
# * the mark is append-only: each raise adds one row (local: one Parquet file, written aside and renamed into place;
#   Connect: one ``INSERT``), and the mark is the later of each part over every row (``HistoryMark.merged``), so it
#   never moves back whatever the order of two writers, and a crash leaves the rows written before it. Local mode
#   folds the files into one when they pile up (the merged row written first, then the files it covers removed).
#
# Local mode reads both with pyarrow from the warehouse directory (no Spark statement, no JVM: ``veil budget`` starts
# none); neither directory is registered as a table in the session's catalog. Spark Connect reads them with Spark SQL:
# the binding once per process, the mark at most every ``RECHECK_SECONDS`` (and after this process's own writes).

_BINDING_FILE = "part-00000-binding.parquet"
#: Local mode folds the mark's files into one past this many.
MARK_FILES = 4
#: Spark Connect: this process's last read of each database's mark (monotonic time, the mark).
_marks: dict[tuple[str | None, str], tuple[float, Any]] = {}


def warehouse_exists(spec: EngineSpec) -> bool:
    """Does the Spark database hold anything yet (local: its directory; Connect: always, the session creates it)?"""
    return spec.remote is not None or _db_dir(spec).is_dir()


def describe(spec: EngineSpec) -> str:
    """The warehouse as messages name it: the local database directory, or the Connect server's database."""
    return str(_db_dir(spec)) if spec.remote is None else f"{spec.remote} database {spec.database}"


def binding_key(spec: EngineSpec) -> tuple[Any, ...] | None:
    """What identifies one binding's record for this process's cache (None: local, and no binding file)."""
    if spec.remote is not None:
        return ("connect", spec.remote, spec.database)
    path = _location(spec, _internal("BINDING_TABLE")) / _BINDING_FILE
    try:
        st = path.stat()
    except OSError:
        return None
    return (path, st.st_dev, st.st_ino)


def _internal(name: str) -> str:
    from veil.store import binding

    return str(getattr(binding, name))


def _winner(rows: Sequence[tuple[Any, ...]]) -> str | None:
    """The binding among ``(ledger_id, bound_at)`` rows; None without rows. A binding written now has one row; the
    earliest (by time, then id) is kept only to read a table an earlier Veil appended several rows to (review s23 Y3:
    no new binding is decided by a writer's clock)."""
    found = sorted((str(at), str(lid)) for lid, at in rows if lid is not None)
    return found[0][1] if found else None


def _parquet_rows(directory: Path, columns: Sequence[str]) -> list[tuple[Any, ...]] | None:
    """The rows of every visible Parquet file of ``directory`` (None: no directory). A file removed while it is read
    (the mark's files folded by another process) restarts the read: the file that replaced it holds its rows. A file
    that is not a whole Parquet file yet (written in place by :func:`_create_exclusive` on a filesystem without hard
    links) is being written: read again for up to :data:`PARTIAL_WAIT_S` seconds, then a typed error naming it."""
    import pyarrow as pa
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    deadline = time.monotonic() + PARTIAL_WAIT_S
    removed = 0
    while True:
        if not directory.is_dir():
            return None
        rows: list[tuple[Any, ...]] = []
        try:
            for f in sorted(directory.glob("*.parquet")):
                if f.name.startswith((".", "_")):
                    continue
                try:
                    table = pq.read_table(f, columns=list(columns))
                except (pa.ArrowInvalid, OSError) as exc:
                    if isinstance(exc, FileNotFoundError):
                        raise
                    if isinstance(exc, PermissionError):
                        raise _unreadable(f, exc) from None
                    if time.monotonic() < deadline:
                        raise _Partial() from None
                    raise _unreadable(f) from None
                rows += list(zip(*(table.column(c).to_pylist() for c in columns), strict=True))
        except FileNotFoundError:
            removed += 1
            if removed >= 20:
                raise InternalError(f"the files of {str(directory)!r} kept changing while they were read") from None
            continue
        except _Partial:
            time.sleep(0.02)
            continue
        return rows


class _Partial(Exception):
    """A Parquet file of the binding or the mark that is not whole yet (being written in place)."""


#: How long a reader waits for a binding or mark file that is being written in place to be whole.
PARTIAL_WAIT_S = 2.0


def _unreadable(f: Path, denied: PermissionError | None = None) -> Exception:
    from veil.errors import PolicyError

    if denied is not None:
        return PolicyError(
            f"cannot read the ledger's record {str(f)!r} in the Spark warehouse: {denied.strerror or denied}",
            hint="Let this user read the warehouse directory's files, then retry",
        )
    return PolicyError(
        f"the ledger's record {str(f)!r} in the Spark warehouse is not a whole Parquet file: a Veil process stopped "
        "while writing it, or it was damaged",
        hint="If no Veil process is using this warehouse now, move that file aside and retry (a binding file that "
        "was never whole bound nothing: the next use binds the warehouse to the ledger it opens)",
    )


#: ``errno`` values of a directory fsync that a filesystem refuses as unsupported (ignored, as SQLite does).
_NO_DIR_SYNC = frozenset((errno.EINVAL, errno.EPERM, errno.EACCES, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EISDIR, errno.EBADF))


def _sync_dir(directory: Path) -> None:
    """fsync ``directory`` (so a new name in it survives a power loss); a filesystem that refuses a directory fsync
    (vfat, some FUSE and SMB mounts: EINVAL, EPERM…) is left as it is, as SQLite does."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError as exc:
        if exc.errno in _NO_DIR_SYNC:
            return
        raise
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in _NO_DIR_SYNC:
            raise
    finally:
        os.close(fd)


def _write_fd(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.fsync(fd)


def _create_exclusive(path: Path, data: bytes) -> bool:
    """``data`` written as the new file ``path`` (``O_CREAT | O_EXCL``: False when ``path`` exists), then synced. For
    filesystems without hard links: the name exists before its bytes are whole, so readers treat a file that is not a
    whole Parquet file as being written (:func:`_parquet_rows`); a crash here leaves it so (refused, named)."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    try:
        _write_fd(fd, data)
    finally:
        os.close(fd)
    return True


def _write_parquet(path: Path, columns: dict[str, Any]) -> bool:
    """One row written as the Parquet file ``path``, never over another: aside under a hidden name, synced, then
    linked into place (False when ``path`` already exists; on a filesystem without hard links — ``os.link`` refused:
    vfat/exFAT, many FUSE and SMB mounts — created in place with ``O_EXCL`` instead, first writer winning just the
    same). The directory is synced after. Any other failure of the filesystem is a typed
    :class:`~veil.errors.PolicyError` naming the path."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = pa.BufferOutputStream()
    pq.write_table(pa.table({k: [v] for k, v in columns.items()}), sink)
    data = bytes(sink.getvalue())
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.tmp")
        fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        try:
            try:
                _write_fd(fd, data)
            finally:
                os.close(fd)
            try:
                os.link(tmp, path)
            except FileExistsError:
                return False
            except OSError:  # no hard links on this filesystem
                if not _create_exclusive(path, data):
                    return False
        finally:
            tmp.unlink(missing_ok=True)
        _sync_dir(path.parent)
    except OSError as exc:
        from veil.errors import PolicyError

        raise PolicyError(
            f"cannot write the ledger's record {str(path)!r} in the Spark warehouse: {exc.strerror or exc}",
            hint="Check that the warehouse directory is writable by this user and its filesystem is mounted "
            "read-write (Veil needs to create files there exclusively), then retry",
        ) from None
    return True


@contextlib.contextmanager
def _on_connect(spec: EngineSpec, what: str) -> Iterator[None]:
    """A failure of the Connect server while Veil reads or writes the ledger's binding or mark, typed
    (:class:`~veil.errors.PolicyError`, refused before anything else runs): the server is down, or refuses the table."""
    from veil.errors import PolicyError, VeilError

    try:
        yield
    except VeilError:
        raise
    except Exception as exc:
        raise PolicyError(
            f"cannot {what} on {describe(spec)} ({type(exc).__name__}): the ledger cannot be checked against it",
            hint="Check that the Spark Connect server is reachable and that Veil may create tables in the policy's "
            "database, then retry",
        ) from None


def _values(row: dict[str, Any]) -> str:
    """``row``'s values as Spark SQL literals (integers as they are, texts quoted: a backslash and a quote escaped).
    Literals, not parameter markers (``args=``), which not every Spark Connect server reads."""

    def one(value: Any) -> str:
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
        return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"

    return ", ".join(one(v) for v in row.values())


def _create_internal(s: SparkSession, spec: EngineSpec, name: str, columns: str) -> None:
    s.sql(f"CREATE TABLE IF NOT EXISTS {_full(spec, name)} ({columns}) USING parquet")


_BINDING_COLUMNS = "ledger_id STRING, bound_at STRING, ledger_path STRING"
_MARK_COLUMNS = "reservation_seq BIGINT, reservation_id STRING, release_seq BIGINT, release_id STRING, marked_at STRING"
_MARK_NAMES = ("reservation_seq", "reservation_id", "release_seq", "release_id")


def read_binding(policy: Policy) -> str | None:
    """The ledger identity the Spark database records (None: not bound)."""
    spec = spec_of(policy)
    name = _internal("BINDING_TABLE")
    if spec.remote is None:
        rows = _parquet_rows(_location(spec, name), ("ledger_id", "bound_at"))
        return _winner(rows or [])
    with _on_connect(spec, "read the ledger's binding"):
        s = spark_session(spec)
        if not s.catalog.tableExists(f"{spec.database}.{name}"):
            return None
        return _winner([tuple(r) for r in s.sql(f"SELECT ledger_id, bound_at FROM {_full(spec, name)}").collect()])


def write_binding(policy: Policy, row: tuple[str, str, str]) -> str:
    """Record the binding ``row`` (identity, time, ledger path) unless one is recorded; the binding now (the winner).

    The winner is decided by one atomic step of the filesystem or the catalog, never by a writer's clock: locally the
    exclusive creation of the binding file; on Spark Connect the creation of the view ``_veil_ledger_binding`` whose
    one row is the binding (``CREATE VIEW`` without ``IF NOT EXISTS``: the catalog creates a name once, a second
    creator gets TABLE_OR_VIEW_ALREADY_EXISTS, and a view's row is in the catalog entry itself, unlike a ``CREATE
    TABLE … AS SELECT``, whose data files are written at the table's location before the catalog entry and could be
    overwritten by a losing creator's). Every binder then reads the one binding back (review s23 Y3)."""
    spec = spec_of(policy)
    name = _internal("BINDING_TABLE")
    identity, at, where = row
    row_values = {"ledger_id": identity, "bound_at": at, "ledger_path": where}
    if spec.remote is None:
        _write_parquet(_location(spec, name) / _BINDING_FILE, row_values)
    elif read_binding(policy) is None:
        with _on_connect(spec, "write the ledger's binding"):
            s = spark_session(spec)
            select = ", ".join(f"{_values({k: v})} AS {k}" for k, v in row_values.items())
            try:
                s.sql(f"CREATE VIEW {_full(spec, name)} AS SELECT {select}")
            except Exception:
                if not s.catalog.tableExists(f"{spec.database}.{name}"):
                    raise  # not another binder's view: the server refused (typed by _on_connect)
    found = read_binding(policy)
    if found is None:
        if spec.remote is not None:
            raise _empty_binding(spec, name)
        raise InternalError(f"the ledger's binding was written to {describe(spec)} but cannot be read back")
    return found


def _empty_binding(spec: EngineSpec, name: str) -> Exception:
    """An empty binding table on Connect: an earlier Veil's binding (a table, then a row appended) interrupted between
    its two steps. Nothing is bound; which ledger to bind is the curator's call, so it is refused, named."""
    from veil.errors import PolicyError

    return PolicyError(
        f"{describe(spec)} holds an empty {name} table, left by an interrupted binding of an earlier Veil version: the "
        "warehouse is bound to no ledger, and an empty table cannot record one atomically",
        hint=f"If no Veil process is using this database now, run `DROP TABLE {_full(spec, name)}` on the Spark "
        "server and retry: the next use binds the database to the ledger it opens",
    )


def _merged(rows: Sequence[tuple[Any, ...]]) -> Any:
    from veil.store.ledger import HistoryMark

    mark = None
    for res_seq, res_id, rel_seq, rel_id in rows:
        one = HistoryMark(int(res_seq), str(res_id), int(rel_seq), str(rel_id))
        mark = one if mark is None else mark.merged(one)
    return mark


def read_mark(policy: Policy) -> Any:
    """The Spark database's high-water mark of its ledger's history (a ``HistoryMark``; None: none yet)."""
    spec = spec_of(policy)
    name = _internal("MARK_TABLE")
    if spec.remote is None:
        return _merged(_parquet_rows(_location(spec, name), _MARK_NAMES) or [])
    key = (spec.remote, spec.database)
    with _lock:
        cached = _marks.get(key)
    if cached is not None and time.monotonic() - cached[0] < RECHECK_SECONDS:
        return cached[1]
    mark = None
    with _on_connect(spec, "read the ledger's high-water mark"):
        s = spark_session(spec)
        if s.catalog.tableExists(f"{spec.database}.{name}"):
            mark = _merged([tuple(r) for r in s.sql(f"SELECT {', '.join(_MARK_NAMES)} FROM {_full(spec, name)}").collect()])
    with _lock:
        _marks[key] = (time.monotonic(), mark)
    return mark


def write_mark(policy: Policy, mark: Any) -> None:
    """Raise the Spark database's high-water mark to ``mark`` (a ``HistoryMark`` taken from the bound ledger after its
    commit was synced; None: nothing). One row appended; nothing when the mark would not move."""
    if mark is None:
        return
    spec = spec_of(policy)
    name = _internal("MARK_TABLE")
    old = read_mark(policy)
    if old is not None and mark.merged(old) == old:
        return
    if old is None and not mark.reservation_id and not mark.release_id:
        return  # a ledger without a reservation or a release: a mark naming nothing would check nothing
    if spec.remote is None:
        directory = _location(spec, name)
        _write_parquet(_new_mark_file(directory), _mark_row(mark))
        _fold_marks(directory)
        return
    with _on_connect(spec, "write the ledger's high-water mark"):
        s = spark_session(spec)
        _create_internal(s, spec, name, _MARK_COLUMNS)
        s.sql(f"INSERT INTO {_full(spec, name)} VALUES ({_values(_mark_row(mark))})")
    with _lock:
        _marks[(spec.remote, spec.database)] = (time.monotonic(), mark if old is None else mark.merged(old))


def _mark_row(mark: Any) -> dict[str, Any]:
    return {
        "reservation_seq": mark.reservation_seq,
        "reservation_id": mark.reservation_id,
        "release_seq": mark.release_seq,
        "release_id": mark.release_id,
        "marked_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }


def _new_mark_file(directory: Path) -> Path:
    """A new file of the mark's rows (named by time, so a listing reads them in the order they were written)."""
    return directory / f"part-{time.time_ns():020d}-{uuid.uuid4().hex[:12]}.parquet"


def _fold_marks(directory: Path) -> None:
    """Past :data:`MARK_FILES` files, write their merged mark as one file, then remove the files it covers (a reader
    that loses one to the removal reads again, and finds the merged file)."""
    files = [f for f in sorted(directory.glob("*.parquet")) if not f.name.startswith((".", "_"))]
    if len(files) <= MARK_FILES:
        return
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows: list[tuple[Any, ...]] = []
    for f in files:
        try:
            table = pq.read_table(f, columns=list(_MARK_NAMES))
        except FileNotFoundError:  # folded by another process meanwhile: its merged file covers it
            continue
        except (pa.ArrowInvalid, OSError):  # being written in place (no hard links): fold another time
            return
        rows += list(zip(*(table.column(c).to_pylist() for c in _MARK_NAMES), strict=True))
    mark = _merged(rows)
    if mark is None:
        return
    _write_parquet(_new_mark_file(directory), _mark_row(mark))
    for f in files:
        f.unlink(missing_ok=True)


def veil_history(policy: Policy) -> list[str]:
    """Tables that show the Spark database was used with a ledger: Veil's internal tables (bounded copies, a
    publication's staging table), the binding and the mark aside. Tables a curator loaded with ``veil ingest`` carry
    no mark of Veil's on Spark, so a warehouse whose only trace is those is bound to any ledger (docs/ledger.md)."""
    spec = spec_of(policy)
    skip = {_internal("BINDING_TABLE"), _internal("MARK_TABLE")}
    if spec.remote is None:
        d = _db_dir(spec)
        names = [c.name for c in d.iterdir() if c.is_dir() and ".__veil_" not in c.name] if d.is_dir() else []
    else:
        with _on_connect(spec, "list the database's tables"):
            s = spark_session(spec)
            names = [t.name for t in s.catalog.listTables(spec.database) if not t.isTemporary]
    return sorted(n for n in names if n.startswith("_veil") and n not in skip)
