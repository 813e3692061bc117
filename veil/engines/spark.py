"""Apache Spark as Veil's engine: pyspark in this process (``master``) or a cluster over Spark Connect (``remote``).

Selected by the policy's ``[engine]`` section (``kind = "spark"``). One ``SparkSession`` per process and
configuration is shared by every :class:`SparkEngine` (sessions of ``veil serve`` included); results come
back through Arrow. Rendering turns Veil's neutral trees into Spark SQL with the same meaning as on DuckDB:

* DuckDB's ``TRY(x)`` (NULL when ``x`` raises) becomes Spark's ``try_add`` / ``try_subtract`` /
  ``try_multiply`` / ``try_mod`` / ``TRY_CAST``; every other operation already answers NULL, NaN or ±inf
  instead of raising, because Veil's Spark sessions run with ``spark.sql.ansi.enabled = false`` (a
  run-time error that depends on a row would be a one-bit oracle);
* the day of week (0–6, Sunday = 0) is ``DAYOFWEEK(d) - 1``;
* integer sums keep the ``DECIMAL(38,0)`` widening of the neutral tree (Spark's ``SUM(BIGINT)`` would wrap).

Metadata comes from the catalog API (Spark has no ``information_schema``); the table version is a count
and two 64-bit hash aggregates over the declared columns. In local mode every table is a Parquet directory
``<warehouse>/<database>.db/<table>``, registered in the session's catalog on start (no Hive metastore:
several Veil processes can share one warehouse).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import time
import uuid
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlglot import exp

from veil.engines.base import EngineError, Result
from veil.engines.neutral import is_real
from veil.errors import InputError, InternalError
from veil.policy import EngineSpec, Policy

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import SparkSession

__all__ = ["SparkEngine", "read_table", "spark_available", "spark_session", "table_columns", "table_names", "write_table"]

#: A table changed outside this process is noticed within this many seconds (its version is re-read).
RECHECK_SECONDS = 60.0

_lock = threading.RLock()
_sessions: dict[tuple[str | None, str | None], SparkSession] = {}
_active_warehouse: dict[str, Path] = {}  # local mode: the warehouse whose tables the catalog holds, per database
_writes = 0  # bumped by every write through this module: bounded copies are re-checked at once

_TRY_FUNCTIONS: dict[type[exp.Expression], str] = {
    exp.Add: "try_add",
    exp.Sub: "try_subtract",
    exp.Mul: "try_multiply",
    exp.Mod: "try_mod",
}


def spark_available() -> str | None:
    """None when a local Spark can start here, else the reason (pyspark or Java missing)."""
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return "pyspark is not installed (pip install 'veil[spark]')"
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return "Java is not installed (Spark needs a JDK 17+)"
    return None


def _spec(policy: Policy) -> EngineSpec:
    spec = policy.engine
    if spec.kind != "spark":
        raise InternalError("a Spark engine for a policy without [engine] kind = 'spark'")
    return spec


def spark_session(spec: EngineSpec) -> SparkSession:
    """The process's SparkSession for ``spec`` (started on first use; local tables registered)."""
    key = (spec.master, spec.remote)
    with _lock:
        s = _sessions.get(key)
        if s is not None:
            if spec.remote is None:
                _activate_local(s, spec)
            return s
        try:
            with _quiet():
                from pyspark.sql import SparkSession
        except ImportError:
            raise InputError(
                "the policy names a Spark engine but pyspark is not installed", hint="pip install 'veil[spark]'"
            ) from None
        builder = SparkSession.builder
        if spec.remote is not None:
            builder = builder.remote(spec.remote)
        else:
            if spec.warehouse is None or spec.master is None:
                raise InternalError("local Spark without a master or warehouse")
            spec.warehouse.mkdir(parents=True, exist_ok=True)
            builder = (
                builder.master(spec.master)
                .appName("veil")
                .config("spark.sql.warehouse.dir", str(spec.warehouse))
                .config("spark.ui.enabled", "false")
                .config("spark.ui.showConsoleProgress", "false")
                .config("spark.sql.shuffle.partitions", str(_local_cores(spec.master)))
                .config("spark.sql.session.timeZone", "UTC")
                .config("spark.driver.extraJavaOptions", f"-Dderby.system.home={spec.warehouse}")
            )
        s = builder.getOrCreate()
        if spec.remote is None:
            s.sparkContext.setLogLevel("FATAL")  # a refused statement is Veil's to report, without its SQL
        s.conf.set("spark.sql.ansi.enabled", "false")
        s.conf.set("spark.sql.execution.arrow.pyspark.enabled", "true")
        s.conf.set("spark.sql.session.timeZone", "UTC")
        _sessions[key] = s
        if spec.remote is None:
            _activate_local(s, spec)
        else:
            try:
                s.sql(f"CREATE DATABASE IF NOT EXISTS {_q(spec.database)}")
            except Exception:  # a cluster may refuse CREATE; the database then has to exist already
                pass
    return s


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


def _is_cancel(exc: BaseException) -> bool:
    text = f"{type(exc).__name__} {exc}".lower()
    return "cancel" in text or "interrupt" in text


class SparkEngine:
    """Runs Veil's SQL on the policy's Spark database (one per session; the SparkSession is shared)."""

    dialect = "spark"

    def __init__(self, policy: Policy, *, public: bool = False) -> None:
        self._policy = policy
        self._spec = _spec(policy)
        self._public = public
        self._tag = f"veil-{uuid.uuid4().hex}"
        self._session: SparkSession | None = None

    @property
    def policy(self) -> Policy:
        return self._policy

    @property
    def session(self) -> SparkSession:
        s = spark_session(self._spec)  # also re-points a local catalog at this policy's warehouse
        if self._session is None:
            s.catalog.setCurrentDatabase(self._spec.database)
            self._session = s
        return s

    def generation(self) -> int:
        """Changes after a write through this process, and every :data:`RECHECK_SECONDS` (outside writes)."""
        return _writes * 10**12 + int(time.monotonic() // RECHECK_SECONDS)

    # -- rendering ----------------------------------------------------------------------------------
    def render(self, tree: exp.Expression) -> str:
        """Spark SQL of a neutral tree, with DuckDB's meaning (see the module docstring)."""
        t = tree.copy()
        for node in list(t.find_all(exp.Floor, exp.Ceil, exp.DateTrunc, exp.TimestampTrunc)):
            if isinstance(node, (exp.Floor, exp.Ceil)):
                if is_real(node.this):  # Spark's FLOOR/CEIL of a double is a BIGINT; DuckDB's a DOUBLE
                    node.replace(exp.Cast(this=node.copy(), to=exp.DataType.build("DOUBLE")))
            else:  # DuckDB's DATE_TRUNC is a TIMESTAMP without time zone
                node.replace(exp.Cast(this=node.copy(), to=exp.DataType.build("TIMESTAMP_NTZ", dialect="spark")))
        for node in list(t.find_all(exp.Try, exp.TryCast, exp.DayOfWeek, exp.Extract)):
            if isinstance(node, exp.TryCast):
                node.set("safe", True)
            elif isinstance(node, exp.DayOfWeek):
                node.replace(exp.Paren(this=exp.Sub(this=exp.Anonymous(this="DAYOFWEEK", expressions=[node.this]),
                                                     expression=exp.Literal.number(1))))  # fmt: skip
            elif isinstance(node, exp.Extract) and str(node.this.name).upper() == "ISODOW":
                node.set("this", exp.var("DAYOFWEEK_ISO"))
            elif isinstance(node, exp.Try):
                inner = node.this
                fn = _TRY_FUNCTIONS.get(type(inner))
                if fn is not None:
                    node.replace(exp.Anonymous(this=fn, expressions=[inner.this, inner.expression]))
                else:
                    node.replace(inner)
        return t.sql(dialect=self.dialect)

    # -- running ------------------------------------------------------------------------------------
    def _analyse(self, sql: str) -> Any:
        """The DataFrame of ``sql``, analysed (binding errors raised here read no data)."""
        try:
            df = self.session.sql(sql)
            _ = df.schema
        except Exception as exc:
            if _is_cancel(exc):
                raise EngineError("the statement was cancelled", hint="Run it again, or raise the statement timeout") from None
            raise EngineError(
                f"the query could not be run: {type(exc).__name__.replace('Exception', '')} error",
                hint="Check that values are compared with columns of the same type",
                before_data=True,
            ) from None
        return df

    def execute(self, sql: str) -> Result:
        s = self.session
        s.addTag(self._tag)
        try:
            df = self._analyse(sql)
            names = tuple(f.name for f in df.schema.fields)
            types = tuple(_type_name(f.dataType) for f in df.schema.fields)
            try:
                with _quiet():
                    table = df.toArrow()
            except Exception as exc:
                if _is_cancel(exc):
                    raise EngineError(
                        "the statement was cancelled", hint="Run it again, or raise the statement timeout"
                    ) from None
                raise EngineError(
                    f"the query failed while running ({type(exc).__name__.replace('Exception', '')} error)",
                    hint="This is a bug in Veil: generated SQL must not fail on data; please report it",
                ) from None
        finally:
            s.removeTag(self._tag)
        cols = [c.to_pylist() for c in table.columns]
        rows = list(zip(*cols, strict=True)) if cols else []
        return Result(names, types, rows)

    def describe(self, sql: str) -> Result:
        df = self._analyse(sql)
        return Result(tuple(f.name for f in df.schema.fields), tuple(_type_name(f.dataType) for f in df.schema.fields), [])

    # -- metadata -----------------------------------------------------------------------------------
    def table_exists(self, table: str) -> bool:
        s = self.session
        if s.catalog.tableExists(f"{self._spec.database}.{table}"):
            return True
        if self._spec.remote is None:
            _register_local(s, self._spec, only=table)
            return bool(s.catalog.tableExists(f"{self._spec.database}.{table}"))
        return False

    def table_columns(self, table: str) -> list[tuple[str, str]]:
        if not self.table_exists(table):
            return []
        return [
            (c.name, _TYPE_NAMES.get(c.dataType, c.dataType.upper()))
            for c in self.session.catalog.listColumns(f"{self._spec.database}.{table}")
        ]

    def table_version(self, table: str, columns: Sequence[str]) -> str:
        """Row count, a 128-bit sum of per-row xxhash64s (equal rows do not cancel) and an XOR of Murmur3 hashes."""
        s = self.session
        if self._spec.remote is None:
            s.sql(f"REFRESH TABLE {_full(self._spec, table)}")
        cols = ", ".join(_q(c) for c in columns)
        res = self.execute(
            f"SELECT count(*), coalesce(sum(CAST(xxhash64({cols}) AS DECIMAL(38,0))), 0), "
            f"coalesce(bit_xor(CAST(hash({cols}) AS BIGINT)), 0) FROM {_full(self._spec, table)}"
        )
        n, h, x = res.rows[0]
        return f"{int(n):x}.{int(h):x}.{int(x) & (2**64 - 1):x}"

    def materialise(self, name: str, sql: str) -> None:
        """``CREATE TABLE … USING parquet AS`` (Spark removes a half-written table when the statement fails)."""
        global _writes
        if self._public:
            raise InternalError("only the warehouse engine materialises tables")
        s = self.session
        where = ""
        if self._spec.remote is None:
            loc = _location(self._spec, name)
            if loc.exists():
                shutil.rmtree(loc)
            where = f" LOCATION '{_path_literal(loc)}'"
        try:
            s.sql(f"CREATE TABLE {_full(self._spec, name)} USING parquet{where} AS {sql}")
        except Exception as exc:
            self.drop(name)
            raise EngineError(
                f"the bounded copy {name!r} could not be built ({type(exc).__name__.replace('Exception', '')} error)",
                hint="This is a bug in Veil: generated SQL must not fail on data; please report it",
            ) from None
        with _lock:
            _writes += 1

    def drop(self, name: str) -> None:
        if self._public:
            raise InternalError("only the warehouse engine drops tables")
        _drop(self.session, self._spec, name)

    def cancel(self) -> None:
        if self._session is not None:
            try:
                self._session.interruptTag(self._tag)
            except Exception:  # the session may be stopping: nothing left to cancel
                pass

    def close(self) -> None:
        self._session = None  # the SparkSession is shared by the process


def _drop(s: SparkSession, spec: EngineSpec, name: str) -> None:
    s.sql(f"DROP TABLE IF EXISTS {_full(spec, name)}")
    if spec.remote is None:
        loc = _location(spec, name)
        if loc.exists():
            shutil.rmtree(loc)


# -- curator access (ingest, publications): the same functions as veil.store.warehouse --------------------


def table_names(policy: Policy) -> list[str]:
    spec = _spec(policy)
    s = spark_session(spec)
    return sorted(t.name for t in s.catalog.listTables(spec.database) if not t.isTemporary)


def table_columns(policy: Policy, table: str) -> list[tuple[str, str]]:
    cols = SparkEngine(policy).table_columns(table)
    if not cols:
        raise InputError(
            f"table {table!r} is not in the Spark database {policy.engine.database!r}", hint="Load it with `veil ingest` first"
        )
    return cols


def read_table(policy: Policy, table: str, columns: Sequence[str] | None = None) -> pd.DataFrame:
    """The whole table as a DataFrame (curator access: raw values), through Arrow."""
    have = [c for c, _ in table_columns(policy, table)]
    for c in columns or []:
        if c not in have:
            raise InputError(f"column {c!r} is not in table {table!r}", hint=f"Columns: {', '.join(have)}")
    spec = _spec(policy)
    cols = ", ".join(_q(c) for c in columns) if columns else "*"
    with _quiet():
        return spark_session(spec).sql(f"SELECT {cols} FROM {_full(spec, table)}").toArrow().to_pandas()


def write_table(policy: Policy, table: str, df: pd.DataFrame, *, replace: bool = False) -> None:
    """Store ``df`` as ``table`` in the Spark database (written aside, then swapped in)."""
    global _writes
    spec = _spec(policy)
    s = spark_session(spec)
    engine = SparkEngine(policy)
    if engine.table_exists(table) and not replace:
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
    with _lock:
        _writes += 1
