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
import logging
import os
import shutil
import threading
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
