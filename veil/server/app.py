"""``veil serve``: analysts' SQL clients speak to Veil over the PostgreSQL wire protocol.

Built on pg-mimic 0.1.3 (pinned: this module overrides a few of its connection internals).
What Veil adds on top of it:

- logins: SCRAM-SHA-256 against stored verifiers, fail-closed for unknown users
  (:mod:`veil.server.auth`); each connection is one analyst's
  :class:`~veil.proxy.answer.QuerySession`;
- TLS (``SSLRequest`` → ``start_tls``) when a certificate and key are given, and refusal of
  plaintext from non-loopback peers unless ``allow_plaintext``;
- routing by one tokenizer pass (:mod:`veil.server.routing`): analyst queries go to the
  query session (which parses them once), transaction and session statements (``BEGIN``,
  ``SET``, ``RESET``, ``DISCARD``, ``SHOW``) are answered here, catalog queries from the policy
  (:mod:`veil.server.catalog`);
- the budget is charged once per executed portal: Parse and Describe never run the noisy
  query (Describe asks the query session for column types only), and the engine work runs on
  a worker thread so one slow query never stalls other clients;
- errors reach clients as ErrorResponse with the SQLSTATE of :mod:`veil.errors`, and the
  connection stays usable.

Session settings: ``SET veil.epsilon = 0.1`` (ε per query), ``SET veil.show_ci = on`` (adds a
``<col>_ci95`` column after every numeric column), ``SHOW veil.budget`` and
``SELECT * FROM veil.budget`` (spent / remaining ε), ``EXPLAIN <query>`` (plan and cost,
spends nothing).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import ipaddress
import logging
import os
import re
import signal
import ssl
import struct
import threading
from collections.abc import Callable, Sequence
from datetime import date
from fractions import Fraction
from pathlib import Path
from typing import Any

import sqlglot
from pg_mimic import PgServer, ResultColumn
from pg_mimic import messages as pg_messages
from pg_mimic import middleware as pg_middleware
from pg_mimic.connection import Connection, PortalEntry, _field_specs
from pg_mimic.errors import (
    FEATURE_NOT_SUPPORTED,
    IN_FAILED_SQL_TRANSACTION,
    PgError,
)
from pg_mimic.messages import TARGET_STATEMENT
from pg_mimic.results import encode_row
from pg_mimic.session import BaseSession, Portal, Statement
from pg_mimic.stream import ConnectionClosed, PgStream

from veil.errors import InputError, InternalError, NotAllowed, VeilError, did_you_mean
from veil.policy import Policy
from veil.server import catalog
from veil.server.auth import VerifierScramAuth
from veil.server.routing import Route, bind_parameters, route, split
from veil.store.credentials import CredentialStore

__all__ = ["ServerThread", "VeilServer", "make_ssl_context", "serve"]

logger = logging.getLogger(__name__)

#: SQLSTATE for an unknown setting name (PostgreSQL's undefined_object).
UNDEFINED_OBJECT = "42704"
_VEIL_SETTINGS = ("epsilon", "show_ci", "budget")
_SET_RE = re.compile(r"^\s*SET\s+(?:SESSION\s+|LOCAL\s+)?([A-Za-z_][\w.]*)\s*(?:TO|=)\s*(.+?)\s*$", re.I | re.S)
_RESET_RE = re.compile(r"^\s*RESET\s+([A-Za-z_][\w.]*)\s*$", re.I)
_SHOW_RE = re.compile(r"^\s*SHOW\s+([A-Za-z_][\w.]*)\s*$", re.I)
_TX_TAGS = {
    "BEGIN": "BEGIN",
    "START": "BEGIN",
    "COMMIT": "COMMIT",
    "END": "COMMIT",
    "ROLLBACK": "ROLLBACK",
    "ABORT": "ROLLBACK",
    "SAVEPOINT": "SAVEPOINT",
    "RELEASE": "RELEASE",
}
_BOOL_WORDS = {"on": True, "true": True, "1": True, "yes": True, "off": False, "false": False, "0": False, "no": False}
_SHOW_DEFAULTS = {
    "server_encoding": "UTF8",
    "client_encoding": "UTF8",
    "datestyle": "ISO, MDY",
    "timezone": "UTC",
    "search_path": '"$user", public',
    "standard_conforming_strings": "on",
    "integer_datetimes": "on",
    "transaction_isolation": "read committed",
    "default_transaction_isolation": "read committed",
    "transaction_read_only": "on",
    "max_identifier_length": "63",
    "is_superuser": "off",
}


def _settings_hint(name: str) -> str:
    names = [f"veil.{s}" for s in _VEIL_SETTINGS]
    return did_you_mean(name, names) or f"Veil's settings: {', '.join(names)}"


def _pg_error(exc: BaseException) -> PgError:
    """Map any exception to what the client sees: Veil's own message and SQLSTATE, or a bare
    "internal error" (the details go to the server log, never to the client)."""
    if isinstance(exc, PgError):
        return exc
    if isinstance(exc, VeilError):
        fields = {"H": exc.hint} if exc.hint else {}
        return PgError(exc.sqlstate, exc.message, **fields)
    logger.error("internal error answering a client", exc_info=exc)
    return PgError("XX000", "internal error in Veil", H="This is a bug in Veil, please report it with the server log")


# --- results -----------------------------------------------------------------------------


class _Result:
    __slots__ = ("columns", "rows", "tag")

    def __init__(self, columns: list[ResultColumn] | None, rows: list[tuple], tag: str) -> None:
        self.columns = columns
        self.rows = rows
        self.tag = tag


def _convert(value: Any, sql_type: str) -> Any:
    if value is None:
        return None
    if sql_type == "bigint":
        return round(value) if isinstance(value, float) else int(value)
    if sql_type == "double":
        return float(value)
    if sql_type == "boolean":
        return bool(value)
    if sql_type == "date":
        return value if isinstance(value, date) else date.fromisoformat(str(value))
    return str(value)


def _numeric(sql_type: str) -> bool:
    return sql_type in ("bigint", "double")


def _output_columns(columns: Sequence[Any], show_ci: bool) -> list[ResultColumn]:
    out: list[ResultColumn] = []
    for col in columns:
        out.append(ResultColumn(col.name, catalog.SQL_TYPE_OIDS.get(col.sql_type, catalog.TEXT)))
        if show_ci and _numeric(col.sql_type):
            out.append(ResultColumn(f"{col.name}_ci95", catalog.FLOAT8))
    return out


def _answer_rows(answer: Any, show_ci: bool) -> list[tuple]:
    types = [c.sql_type for c in answer.columns]
    ci = answer.ci95
    rows = []
    for r, row in enumerate(answer.rows):
        out: list[Any] = []
        for i, value in enumerate(row):
            out.append(_convert(value, types[i]))
            if show_ci and _numeric(types[i]):
                half = ci[r][i] if ci is not None and ci[r] is not None else None
                out.append(None if half is None else float(half))
        rows.append(tuple(out))
    return rows


def _table_result(table: Any) -> tuple[list[str], list[tuple]]:
    """Accept the shapes a ``.rows()`` may return: a DataFrame, list[dict], or (columns, rows)."""
    if hasattr(table, "to_dict") and hasattr(table, "columns"):  # pandas.DataFrame
        return [str(c) for c in table.columns], [tuple(r) for r in table.itertuples(index=False)]
    if isinstance(table, tuple) and len(table) == 2 and not isinstance(table[0], dict):
        names, rows = table
        return [str(n) for n in names], [tuple(r) for r in rows]
    rows = list(table)
    if rows and isinstance(rows[0], dict):
        names = list(rows[0])
        return names, [tuple(r.get(n) for n in names) for r in rows]
    raise InternalError(f"cannot render an EXPLAIN table of type {type(table).__name__}")


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str, date)):
        return value
    if isinstance(value, Fraction):
        return float(value)
    if hasattr(value, "item"):  # numpy scalar
        return value.item()
    return str(value)


# --- session -------------------------------------------------------------------------------


class VeilSession(BaseSession):
    """One client connection: its analyst, query session, and settings."""

    def __init__(self, server: VeilServer) -> None:
        self.server = server
        self.policy = server.policy
        self.connection: VeilConnection | None = None
        self.analyst: str | None = None
        self.query_session: Any = None
        self.epsilon: Fraction | None = None
        self.show_ci = False
        self._lock = threading.Lock()  # one engine call at a time per session
        self._pending: set[concurrent.futures.Future] = set()
        self._describe_cache: dict[str, Sequence[Any]] = {}

    # engine work runs on the server's worker threads, one at a time per session
    async def _in_worker(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        def call() -> Any:
            with self._lock:
                return fn(*args, **kwargs)

        future = self.server.executor.submit(call)
        self._pending.add(future)
        future.add_done_callback(self._pending.discard)
        return await asyncio.wrap_future(future)

    async def init(self, connection: Any) -> None:
        self.connection = connection
        self.analyst = connection.username
        try:
            self.query_session = await self._in_worker(self.server.query_session_factory, self.policy, self.analyst)
        except Exception as exc:  # tell the client why, then hang up
            err = _pg_error(exc)
            connection.stream.write(
                pg_messages.make_error_response({"S": "FATAL", "V": "FATAL", "C": err.sqlstate, "M": err.message})
            )
            await connection.stream.drain()
            raise ConnectionClosed from exc

    async def close(self) -> None:
        # A client that hung up mid-query: let the running query finish (it is charged only
        # together with its release), then close the query session.
        pending = list(self._pending)
        if pending:
            await asyncio.get_running_loop().run_in_executor(None, concurrent.futures.wait, pending)
        if self.query_session is not None:
            qs, self.query_session = self.query_session, None
            await self._in_worker(qs.close)

    async def schema(self) -> dict:
        return self.server.schema

    async def prepare(self, sql: str, param_oids: list[int | None]) -> Statement:
        try:
            routed = route(sql, self.server.private_names)
        except Exception as exc:
            raise _pg_error(exc) from None
        return VeilStatement(self, routed, param_oids)

    def split(self, sql: str) -> list[Route]:
        return split(sql, self.server.private_names)

    # --- answering one routed statement ---------------------------------------------------

    async def answer(self, r: Route, params: list[Any] | None, param_oids: Sequence[int | None], *, describe: bool) -> _Result:
        """Run (or, with ``describe``, only type) one statement; ``params=None``: not bound yet."""
        try:
            return await self._answer(r, params, param_oids, describe)
        except Exception as exc:  # CancelledError, GeneratorExit, KeyboardInterrupt pass through
            raise _pg_error(exc) from None

    async def _answer(self, r: Route, params: list[Any] | None, oids: Sequence[int | None], describe: bool) -> _Result:
        kind = r.kind
        logger.debug("%s%s [%s] %s", "describe " if describe else "", self.analyst, kind, r.sql)
        if kind == "empty":
            return _Result(None, [], "")
        if kind == "tx":
            return self._tx(r, describe)
        if kind in ("set", "reset", "discard", "deallocate"):
            return self._session_statement(r, describe)
        if kind == "show":
            return await self._show(r)
        sql = bind_parameters(r.sql, params, oids, r.tokens, self.server.numeric_names) if r.has_parameters else r.sql
        if kind == "explain":
            return await self._explain(r, sql)
        if kind == "system":
            result = await self._system(sql)
            if result is not None:
                return result
        qs = self.query_session
        if describe:
            return _Result(_output_columns(await self._describe(r, sql), self.show_ci), [], "SELECT 0")
        answer = await self._in_worker(qs.execute, sql, epsilon=self.epsilon)
        rows = _answer_rows(answer, self.show_ci)
        return _Result(_output_columns(answer.columns, self.show_ci), rows, f"SELECT {len(rows)}")

    async def _describe(self, r: Route, sql: str) -> Sequence[Any]:
        """Column types of an analyst query, without running it. Types do not depend on the bound
        values, so they are asked once per statement text (with NULLs bound) and cached: a
        prepared statement executed many times is planned for Describe only once."""
        cols = self._describe_cache.get(r.sql)
        if cols is not None:
            return cols
        qs = self.query_session
        template = bind_parameters(r.sql, None, (), r.tokens) if r.has_parameters else r.sql
        try:
            cols = await self._in_worker(qs.describe, template)
        except VeilError:
            if template == sql:
                raise
            return await self._in_worker(qs.describe, sql)  # NULLs did not type-check: use the values
        if len(self._describe_cache) >= 256:
            self._describe_cache.clear()
        self._describe_cache[r.sql] = cols
        return cols

    def _tx(self, r: Route, describe: bool) -> _Result:
        tag = _TX_TAGS[r.tokens[0].text.upper()]
        conn = self.connection
        if not describe and conn is not None:
            if tag == "BEGIN":
                conn.tx_status = b"T"
            elif tag in ("COMMIT", "ROLLBACK"):
                if conn.tx_status == b"E":
                    tag = "ROLLBACK"
                conn.tx_status = b"I"
        return _Result(None, [], tag)

    def _session_statement(self, r: Route, describe: bool) -> _Result:
        conn = self.connection
        if conn is None:
            raise InternalError("session statement without a connection")
        if r.kind == "set":
            match = _SET_RE.match(r.sql)
            if match:
                name, value = match.group(1).lower(), match.group(2).strip().strip("'\"")
                if value.upper() == "DEFAULT":
                    if not describe:
                        self._reset(name)
                else:
                    self._set(name, value, apply=not describe)
            return _Result(None, [], "SET")  # anything else (SET TIME ZONE …) touches nothing: accepted
        if r.kind == "reset":
            match = _RESET_RE.match(r.sql)
            if not match:
                raise PgError("42601", f"cannot read {r.sql!r}", H="Write RESET <name> or RESET ALL")
            if not describe:
                self._reset(match.group(1).lower())
            return _Result(None, [], "RESET")
        if r.kind == "discard":
            if not describe:
                self._reset("all")
                conn.statements.clear()
            return _Result(None, [], "DISCARD ALL")
        # DEALLOCATE [PREPARE] name | ALL
        words = [t.text for t in r.tokens[1:] if t.text.upper() != "PREPARE"]
        if not describe:
            if words and words[0].upper() == "ALL":
                conn.statements.clear()
            elif words:
                conn.statements.pop(words[0].strip('"'), None)
        return _Result(None, [], "DEALLOCATE ALL" if words and words[0].upper() == "ALL" else "DEALLOCATE")

    def _set(self, name: str, value: str, *, apply: bool) -> None:
        conn = self.connection
        if conn is None:
            raise InternalError("session statement without a connection")
        if name.startswith("veil."):
            key = name[5:]
            if key == "epsilon":
                try:
                    eps = Fraction(value)
                except (ValueError, ZeroDivisionError):
                    raise InputError(
                        f"veil.epsilon must be a number, got {value!r}", hint="e.g. SET veil.epsilon = 0.1"
                    ) from None
                if eps <= 0:
                    raise InputError(f"veil.epsilon must be > 0, got {value}", hint="e.g. SET veil.epsilon = 0.1")
                if apply:
                    self.epsilon = eps
            elif key == "show_ci":
                flag = _BOOL_WORDS.get(value.lower())
                if flag is None:
                    raise InputError(f"veil.show_ci must be on or off, got {value!r}")
                if apply:
                    self.show_ci = flag
            else:
                raise PgError(UNDEFINED_OBJECT, f'unrecognized configuration parameter "{name}"', H=_settings_hint(name))
        if apply:
            conn.session_vars[name] = value

    def _reset(self, name: str) -> None:
        conn = self.connection
        if conn is None:
            raise InternalError("session statement without a connection")
        if name == "all":
            self.epsilon, self.show_ci = None, False
            conn.session_vars.clear()
            return
        if name == "veil.epsilon":
            self.epsilon = None
        elif name == "veil.show_ci":
            self.show_ci = False
        elif name.startswith("veil."):
            raise PgError(UNDEFINED_OBJECT, f'unrecognized configuration parameter "{name}"', H=_settings_hint(name))
        conn.session_vars.pop(name, None)

    async def _budget(self) -> Any:
        return await self._in_worker(self.query_session.budget)

    async def _show(self, r: Route) -> _Result:
        match = _SHOW_RE.match(r.sql)
        if not match:
            raise PgError("42601", f"cannot read {r.sql!r}", H="Write SHOW <name>, e.g. SHOW veil.budget")
        name = match.group(1).lower()
        conn = self.connection
        if conn is None:
            raise InternalError("session statement without a connection")
        if name == "veil.budget":
            row = catalog.budget_row(await self._budget())
            return _Result(list(catalog.BUDGET_COLUMNS), [tuple(row.values())], "SHOW")
        if name == "veil.epsilon":
            value = str(float(self.epsilon if self.epsilon is not None else self.policy.defaults.epsilon_per_query))
        elif name == "veil.show_ci":
            value = "on" if self.show_ci else "off"
        elif name.startswith("veil."):
            raise PgError(UNDEFINED_OBJECT, f'unrecognized configuration parameter "{name}"', H=_settings_hint(name))
        elif name == "all":
            names = sorted({*_SHOW_DEFAULTS, *conn.session_vars})
            rows = [(n, conn.session_vars.get(n, _SHOW_DEFAULTS.get(n, ""))) for n in names]
            return _Result([ResultColumn("name", catalog.TEXT), ResultColumn("setting", catalog.TEXT)], rows, "SHOW")
        elif name == "server_version":
            value = conn.server.parameter_status.get("server_version", "")
        else:
            value = conn.session_vars.get(name, _SHOW_DEFAULTS.get(name, ""))
        return _Result([ResultColumn(name, catalog.TEXT)], [(value,)], "SHOW")

    async def _explain(self, r: Route, sql: str) -> _Result:
        tokens = r.tokens
        i = 1
        base = tokens[0].start
        while i < len(tokens) and tokens[i].text.upper() in ("ANALYZE", "VERBOSE"):
            i += 1
        if i < len(tokens) and tokens[i].text == "(":  # EXPLAIN (FORMAT TEXT, …): options ignored
            depth = 0
            while i < len(tokens):
                depth += {"(": 1, ")": -1}.get(tokens[i].text, 0)
                i += 1
                if depth == 0:
                    break
        if i >= len(tokens):
            raise PgError("42601", "EXPLAIN needs a query", H="Write EXPLAIN SELECT …")
        offset = tokens[i].start - base
        # ``sql`` may have parameters bound, which shifts offsets after them; the EXPLAIN prefix
        # has none, so its length is unchanged.
        inner = sql[offset:]
        explanation = await self._in_worker(self.query_session.explain, inner, epsilon=self.epsilon)
        names, rows = _table_result(explanation.rows())
        rows = [tuple(_plain(v) for v in row) for row in rows]
        cols, rows = catalog.static_result(names, rows)
        return _Result(cols, rows, "EXPLAIN")

    async def _system(self, sql: str) -> _Result | None:
        """Catalog, ``veil.*`` and table-less SELECTs; None when none of them applies."""
        try:
            expr = sqlglot.parse_one(sql, dialect="postgres")
        except sqlglot.errors.ParseError:
            return None  # the query path reports the syntax error with its position
        _check_executor_safe(expr)
        constant = _constant_select(expr)
        if constant is not None:
            cols, rows = catalog.static_result(*constant)
            return _Result(cols, rows, "SELECT 1")
        if any((t.db or "").lower() == "veil" for t in expr.find_all(sqlglot.exp.Table)):
            cols, rows = catalog.budget_result(expr, await self._budget())
            return _Result(cols, rows, f"SELECT {len(rows)}")
        answered = await self.server.catalog_answer(self, sql, expr)
        if answered is not None:
            cols, rows = answered
            return _Result(cols, rows, f"SELECT {len(rows)}")
        ctx = pg_middleware.MiddlewareContext(self.connection, sql, [])
        ctx._expression = expr  # reuse this parse (pg-mimic would parse again)
        for link in (pg_middleware.asyncpg_typeinfo, pg_middleware.information_schema, pg_middleware.pg_catalog):
            statement = await link(ctx)
            if statement is not None:
                return await _run_static(statement)
        if isinstance(expr, sqlglot.exp.Select) and not list(expr.find_all(sqlglot.exp.Table)):
            database = getattr(self.connection, "database", "") or "veil"
            replacements = {
                sqlglot.exp.CurrentCatalog: sqlglot.exp.Literal.string(database),
                sqlglot.exp.CurrentSchemas: sqlglot.exp.Literal.string("{public}"),
            }
            for node_type, literal in replacements.items():
                for node in list(expr.find_all(node_type)):
                    node.replace(literal.copy())
            ctx._expression = expr
            statement = await pg_middleware.static_select(ctx)
            if statement is not None:
                return await _run_static(statement)
        return None


_SAFE_NAME = re.compile(r"^[A-Za-z0-9_ $.\-]*$")
_SAFE_TYPE = re.compile(r"^[A-Za-z0-9_ .(),\[\]]*$")


def _check_executor_safe(expr: sqlglot.exp.Expression) -> None:
    """Catalog, ``veil.budget`` and table-less SELECTs are evaluated by sqlglot's Python executor,
    which compiles expressions to Python source. Identifiers and type names are pasted into that
    source (a quoted identifier ending in a backslash escapes its closing quote), so only plain
    names may reach it: anything else is refused before it is compiled."""
    exp = sqlglot.exp
    for node in expr.walk():
        if isinstance(node, exp.Identifier) and not _SAFE_NAME.match(str(node.this)):
            raise NotAllowed(
                f"identifier {str(node.this)!r} is not allowed in catalog queries",
                hint="Use names made of letters, digits, spaces and _ $ . -",
            )
        if isinstance(node, exp.DataType) and not _SAFE_TYPE.match(node.sql(dialect="postgres")):
            raise NotAllowed(f"type {node.sql(dialect='postgres')!r} is not allowed in catalog queries")


def _constant_value(node: sqlglot.exp.Expression) -> tuple[bool, Any]:
    exp = sqlglot.exp
    if isinstance(node, exp.Literal):
        if node.is_string:
            return True, str(node.this)
        text = str(node.this)
        try:
            return True, int(text)
        except ValueError:
            return True, float(text)
    if isinstance(node, exp.Neg):
        ok, value = _constant_value(node.this)
        return (True, -value) if ok and isinstance(value, (int, float)) else (False, None)
    if isinstance(node, exp.Boolean):
        return True, bool(node.this)
    if isinstance(node, exp.Null):
        return True, None
    return False, None


def _constant_select(expr: sqlglot.exp.Expression) -> tuple[list[str], list[tuple]] | None:
    """``SELECT 42``, ``SELECT 1 AS ok``: connection pools' pings, answered without an evaluator."""
    if not isinstance(expr, sqlglot.exp.Select) or any(expr.args.get(k) for k in ("from", "where", "group", "having")):
        return None
    names, values = [], []
    for sel in expr.selects:
        node = sel.this if isinstance(sel, sqlglot.exp.Alias) else sel
        ok, value = _constant_value(node)
        if not ok:
            return None
        names.append(sel.alias if isinstance(sel, sqlglot.exp.Alias) else "?column?")
        values.append(value)
    return names, [tuple(values)]


async def _run_static(statement: Statement) -> _Result:
    columns = await statement.describe()
    rows, _ = await statement.bind([]).execute(0)
    return _Result(columns, [tuple(r) for r in rows], f"SELECT {len(rows)}")


class VeilStatement(Statement):
    def __init__(self, session: VeilSession, routed: Route, param_oids: list[int | None]) -> None:
        self.session = session
        self.route = routed
        self.sql = routed.sql
        self.param_oids = param_oids
        self._columns: list[ResultColumn] | None = None
        self._described = False

    async def describe(self) -> list[ResultColumn] | None:
        if not self._described:
            result = await self.session.answer(self.route, None, self.param_oids, describe=True)
            self._columns, self._described = result.columns, True
        return self._columns

    def bind(self, params: list[Any]) -> VeilPortal:
        return VeilPortal(self, list(params))


class VeilPortal(Portal):
    """A bound statement. Its first ``execute`` runs the query once; later calls only drain rows."""

    def __init__(self, statement: VeilStatement, params: list[Any]) -> None:
        self.statement = statement
        self.params = params
        self.result: _Result | None = None
        self.described: list[ResultColumn] | None = None
        self._described = False
        self._offset = 0

    async def describe(self) -> list[ResultColumn] | None:
        if self.result is not None:
            return self.result.columns
        if not self._described:
            st = self.statement
            r = await st.session.answer(st.route, self.params, st.param_oids, describe=True)
            self.described, self._described = r.columns, True
        return self.described

    @property
    def columns(self) -> list[ResultColumn] | None:
        if self.result is None:
            return self.described
        if self._described and self.described is not None and self.result.columns is not None:
            if len(self.described) == len(self.result.columns):
                return self.described  # keep the types the client was told at Describe
        return self.result.columns

    def tag(self) -> str:
        if self.result is None:
            raise InternalError("command tag asked before the portal ran")
        return self.result.tag

    async def execute(self, max_rows: int) -> tuple[list[tuple], bool]:
        if self.result is None:
            st = self.statement
            self.result = await st.session.answer(st.route, self.params, st.param_oids, describe=False)
        rows = self.result.rows
        end = len(rows) if max_rows <= 0 else min(len(rows), self._offset + max_rows)
        chunk = rows[self._offset : end]
        self._offset = end
        return chunk, max_rows > 0 and end < len(rows)


# --- connection ------------------------------------------------------------------------------


class _BufferedStream(PgStream):
    """Collects a reply's messages and sends them in one write at Sync/Query/Flush (the protocol
    allows a server to buffer until then), instead of one system call per message."""

    _LIMIT = 1 << 16

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        super().__init__(reader, writer)
        self._buffer = bytearray()

    def write(self, data: bytes) -> None:
        self._buffer += data
        if len(self._buffer) >= self._LIMIT:
            self.writer.write(bytes(self._buffer))
            self._buffer.clear()

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    async def drain(self) -> None:
        if self._buffer:
            self.writer.write(bytes(self._buffer))
            self._buffer.clear()
        await self.writer.drain()


def _ends_tx(r: Route) -> bool:
    return r.kind == "tx" and r.tokens[0].text.upper() in ("COMMIT", "END", "ROLLBACK", "ABORT")


class VeilConnection(Connection):
    """pg-mimic's connection with Veil's routing: one tokenizer pass per simple query, lazy
    Describe (types only, never the noisy run) and one engine run per executed portal."""

    session: VeilSession
    tx_status: bytes

    async def run(self) -> None:
        try:
            await super().run()
        except (ConnectionError, OSError):  # the client hung up; its session is already closed
            pass

    async def _command_loop(self) -> None:
        """pg-mimic's loop, flushing replies only at Sync, Query and Flush (one write per round trip)."""
        while True:
            tag, payload = await self.stream.read_message()
            if tag == pg_messages.TERMINATE:
                await self.stream.drain()
                return
            self._current_task = asyncio.ensure_future(self._dispatch(tag, payload))
            try:
                await self._current_task
            except asyncio.CancelledError:
                self.stream.write(
                    pg_messages.make_error_response(
                        {"S": "ERROR", "V": "ERROR", "C": "57014", "M": "canceling statement due to user request"}
                    )
                )
                if self.tx_status != b"I":
                    self.tx_status = b"E"
                self._ignore_until_sync = True
            finally:
                self._current_task = None
            if tag in (pg_messages.QUERY, pg_messages.SYNC):
                self.stream.write(pg_messages.make_ready_for_query(self.tx_status))
                self._ignore_until_sync = False
            if tag in (pg_messages.QUERY, pg_messages.SYNC, pg_messages.FLUSH):
                await self.stream.drain()

    async def _handle_simple_query(self, sql: str) -> None:
        for r in self.session.split(sql):
            await self._simple_one(r)

    async def _simple_one(self, r: Route) -> None:
        if r.kind == "empty":
            self.stream.write(pg_messages.make_empty_query_response())
            return
        if self.tx_status == b"E" and not _ends_tx(r):
            raise PgError(
                IN_FAILED_SQL_TRANSACTION,
                "current transaction is aborted, commands ignored until end of transaction block",
            )
        portal = VeilStatement(self.session, r, []).bind([])
        rows, _ = await portal.execute(0)
        columns = portal.columns
        if columns is not None:
            self.stream.write(pg_messages.make_row_description(_field_specs(columns)))
            for row in rows:
                self.stream.write(pg_messages.make_data_row(encode_row(row, columns)))
        self.stream.write(pg_messages.make_command_complete(portal.tag()))

    async def _handle_bind(self, parsed: Any) -> None:
        statement = self._get_statement(parsed.statement_name)
        param_oids = getattr(statement, "param_oids", [])
        params = [
            self._decode_param(value, _format_code(parsed.param_format_codes, i), param_oids, i)
            for i, value in enumerate(parsed.params)
        ]
        portal = statement.bind(params)
        self.portals[parsed.portal_name] = PortalEntry(portal, None, statement.sql, parsed.result_format_codes)
        self.stream.write(pg_messages.make_bind_complete())

    async def _handle_describe(self, parsed: Any) -> None:
        format_codes: list[int] = []
        if parsed.kind == TARGET_STATEMENT:
            statement = self._get_statement(parsed.name)
            oids = [oid if oid is not None else 0 for oid in getattr(statement, "param_oids", [])]
            n_params = _count_params(statement)
            oids = (oids + [0] * n_params)[: max(len(oids), n_params)]
            self.stream.write(pg_messages.make_parameter_description(oids))
            columns = await statement.describe()
        else:
            entry = self._get_portal(parsed.name)
            portal = entry.portal
            columns = await portal.describe() if isinstance(portal, VeilPortal) else entry.columns
            entry.columns = columns
            format_codes = entry.result_format_codes
        if columns is None:
            self.stream.write(pg_messages.make_no_data())
        else:
            self.stream.write(pg_messages.make_row_description(_field_specs(columns, format_codes)))

    async def _handle_execute(self, parsed: Any) -> None:
        entry = self._get_portal(parsed.portal_name)
        portal = entry.portal
        if self.tx_status == b"E" and not (isinstance(portal, VeilPortal) and _ends_tx(portal.statement.route)):
            raise PgError(
                IN_FAILED_SQL_TRANSACTION,
                "current transaction is aborted, commands ignored until end of transaction block",
            )
        rows, suspended = await portal.execute(parsed.max_rows)
        entry.rows_returned += len(rows)
        columns = portal.columns if isinstance(portal, VeilPortal) else entry.columns
        if columns is not None:
            for row in rows:
                try:
                    values = encode_row(row, columns, entry.result_format_codes)
                except (ValueError, TypeError, OverflowError) as e:
                    raise PgError(FEATURE_NOT_SUPPORTED, str(e)) from None
                self.stream.write(pg_messages.make_data_row(values))
        if suspended:
            self.stream.write(pg_messages.make_portal_suspended())
        else:
            tag = portal.tag() if isinstance(portal, VeilPortal) else "SELECT"
            if tag.startswith("SELECT "):
                tag = f"SELECT {entry.rows_returned}"
            self.stream.write(pg_messages.make_command_complete(tag))


def _format_code(codes: list[int], index: int) -> int:
    if not codes:
        return 0
    return codes[0] if len(codes) == 1 else codes[index]


def _count_params(statement: Statement) -> int:
    r = getattr(statement, "route", None)
    if r is None:
        return 0
    numbers = [
        int(r.tokens[i + 1].text)
        for i, t in enumerate(r.tokens[:-1])
        if t.token_type.name == "PARAMETER" and r.tokens[i + 1].token_type.name == "NUMBER"
    ]
    return max(numbers, default=0)


# --- server ----------------------------------------------------------------------------------


def make_ssl_context(cert: str | Path, key: str | Path) -> ssl.SSLContext:
    """A server TLS context (TLS 1.2+) from PEM certificate and key files."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(str(cert), str(key))
    except (OSError, ssl.SSLError) as exc:
        raise InputError(
            f"cannot load the TLS certificate {cert} / key {key}: {exc}",
            hint="Pass PEM files to --tls-cert and --tls-key",
        ) from None
    return ctx


def _default_query_session(policy: Policy, analyst: str) -> Any:
    from veil.proxy.answer import QuerySession

    return QuerySession(policy, analyst)


def _is_loopback(peer: Any) -> bool:
    if not isinstance(peer, tuple):  # unix socket
        return True
    try:
        return ipaddress.ip_address(str(peer[0]).split("%")[0]).is_loopback
    except ValueError:
        return False


class VeilServer(PgServer):
    """The wire server for one policy. ``query_session_factory(policy, analyst)`` makes each
    connection's query session (default: :class:`veil.proxy.answer.QuerySession`)."""

    def __init__(
        self,
        policy: Policy,
        *,
        ssl_context: ssl.SSLContext | None = None,
        allow_plaintext: bool = False,
        query_session_factory: Callable[[Policy, str], Any] | None = None,
        credentials: CredentialStore | None = None,
        workers: int = 8,
    ) -> None:
        self.policy = policy
        self.ssl_context = ssl_context
        self.allow_plaintext = allow_plaintext
        self.query_session_factory = query_session_factory or _default_query_session
        self.credentials = credentials or CredentialStore(policy.ledger_path)
        self.executor = concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="veil-serve")
        self.schema = catalog.policy_schema(policy)
        self.numeric_names = frozenset(
            c.lower() for t in policy.tables.values() for c, spec in t.columns.items() if spec.type in ("int", "float")
        )
        self.private_names = frozenset(
            {t.lower() for t in policy.tables} | {c.lower() for t in policy.tables.values() for c in t.columns}
        )
        super().__init__(
            session_factory=lambda: VeilSession(self),
            auth_plugin_factory=VerifierScramAuth.factory(self._lookup),
            server_version="16.0 (Veil)",
        )

    def _lookup(self, user: str) -> Any:
        if user not in self.policy.analysts:
            self.credentials.get(user)  # same work as for a known user
            return None
        return self.credentials.get(user)

    async def catalog_answer(self, session: VeilSession, sql: str, expr: Any) -> tuple[list[ResultColumn], list[tuple]] | None:
        """Hook for client-specific catalog shapes (pgjdbc, DBeaver)."""
        from veil.server.jdbc import answer as jdbc_answer

        return jdbc_answer(self.policy, session.connection, sql, expr)

    def shutdown_executor(self) -> None:
        self.executor.shutdown(wait=True, cancel_futures=False)

    async def _handle_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        stream = _BufferedStream(reader, writer)
        try:
            startup = await self._negotiate_startup(stream)
        except (ConnectionClosed, ConnectionError, OSError, ssl.SSLError):
            return
        if startup is None:
            return
        params, tls = startup
        if not tls and not self.allow_plaintext and not _is_loopback(writer.get_extra_info("peername")):
            hint = "Connect with sslmode=require" if self.ssl_context else "Start veil serve with --tls-cert/--tls-key"
            stream.write(
                pg_messages.make_error_response(
                    {
                        "S": "FATAL",
                        "V": "FATAL",
                        "C": "28000",
                        "M": "plaintext connections from non-loopback addresses are refused",
                        "H": f"{hint}, or (on a trusted network only) with --allow-plaintext",
                    }
                )
            )
            await stream.drain()
            return
        session = self.session_factory()
        if inspect.isawaitable(session):
            session = await session
        pid = self._allocate_pid()
        secret = struct.unpack("!i", os.urandom(4))[0]
        connection = VeilConnection(stream, session, self, pid, secret, params)
        connection.tls = tls
        self._connections[pid] = connection
        try:
            await connection.run()
        finally:
            self._connections.pop(pid, None)

    async def _negotiate_startup(self, stream: PgStream) -> tuple[dict[str, str], bool] | None:
        code, payload = await stream.read_startup_packet()
        tls = False
        if code == pg_messages.SSL_REQUEST_CODE:
            if self.ssl_context is None:
                stream.write(b"N")
                await stream.drain()
            else:
                stream.write(b"S")
                await stream.drain()
                await stream.writer.start_tls(self.ssl_context)
                tls = True
            code, payload = await stream.read_startup_packet()
        if code == pg_messages.GSSENC_REQUEST_CODE:
            stream.write(b"N")
            await stream.drain()
            code, payload = await stream.read_startup_packet()
            if code == pg_messages.SSL_REQUEST_CODE and self.ssl_context is not None and not tls:
                stream.write(b"S")
                await stream.drain()
                await stream.writer.start_tls(self.ssl_context)
                tls = True
                code, payload = await stream.read_startup_packet()
        if code == pg_messages.CANCEL_REQUEST_CODE:
            pid, secret = pg_messages.parse_cancel_request(payload)
            self.cancel(pid, secret)
            return None
        return pg_messages.parse_startup_message(payload), tls


# --- running it --------------------------------------------------------------------------------


class ServerThread:
    """Run a :class:`VeilServer` on its own event loop in a background thread (tests, benchmarks).

    >>> # with ServerThread(VeilServer(policy)) as st: psycopg.connect(port=st.port, ...)
    """

    def __init__(self, server: VeilServer, host: str = "127.0.0.1", port: int = 0) -> None:
        self.server = server
        self.host = host
        self.port = port
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    def start(self) -> int:
        self._thread = threading.Thread(target=self._run, name="veil-serve-loop", daemon=True)
        self._thread.start()
        self._ready.wait(30)
        if self._error is not None:
            raise self._error
        return self.port

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            srv = loop.run_until_complete(self.server.start_server(host=self.host, port=self.port))
            self.port = srv.sockets[0].getsockname()[1]
        except BaseException as exc:
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    def stop(self) -> None:
        loop = self._loop
        if loop is None or self._thread is None:
            return

        async def _close() -> None:
            tasks = list(self.server._tasks)
            self.server.close()
            if tasks:  # let connections close their query sessions
                await asyncio.wait(tasks, timeout=10)

        asyncio.run_coroutine_threadsafe(_close(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        self._thread.join(10)
        self.server.shutdown_executor()

    def __enter__(self) -> ServerThread:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve(
    policy: Policy,
    *,
    host: str = "127.0.0.1",
    port: int = 6432,
    ssl_context: ssl.SSLContext | None = None,
    allow_plaintext: bool = False,
    ready: Callable[[int], None] | None = None,
) -> None:
    """Serve until interrupted (Ctrl-C / SIGTERM)."""
    server = VeilServer(policy, ssl_context=ssl_context, allow_plaintext=allow_plaintext)

    async def main() -> None:
        srv = await server.start_server(host=host, port=port)
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        # SIGTERM stops the loop from inside it (raising from a signal handler could land anywhere in
        # asyncio's own code and leave shutdown waiting forever).
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        if ready is not None:
            ready(srv.sockets[0].getsockname()[1])
        serving = asyncio.ensure_future(server.serve_forever())
        stopping = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait({serving, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            loop.remove_signal_handler(signal.SIGTERM)
            for task in (serving, stopping):
                task.cancel()
            server.close()

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown_executor()
