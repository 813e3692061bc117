"""``veil serve``: analysts' SQL clients speak to Veil over the PostgreSQL wire protocol.

Built on pg-mimic 0.1.3 (pinned: Veil overrides a few of its connection internals). This module
only puts the parts together; each has its own module:

- :mod:`~veil.server.connection`: framing with size limits, startup, login, the message loop;
- :mod:`~veil.server.tls`: certificates, ``SSLRequest`` and direct TLS;
- :mod:`~veil.server.auth`: fail-closed SCRAM-SHA-256 against stored verifiers;
- :mod:`~veil.server.limits`: connection slots, login backoff, every limit's value;
- :mod:`~veil.server.session`: one connection's analyst, settings and statements;
- :mod:`~veil.server.routing`: one tokenizer pass decides what a statement is;
- :mod:`~veil.server.system`, :mod:`~veil.server.catalog`, :mod:`~veil.server.jdbc`,
  :mod:`~veil.server.drivers`: catalog and ``veil.*`` answers, driver compatibility;
- :mod:`~veil.server.pool`: the bounded worker pools (nothing heavy runs on the event loop);
- :mod:`~veil.server.live_policy`: the policy as the file is now.

The query pipeline itself is :class:`veil.proxy.session.QuerySession`, one per connection.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import secrets
import signal
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pg_mimic import PgServer
from pg_mimic.stream import ConnectionClosed

from veil.errors import InternalError, InvalidEncoding, PlaintextRefused, ProtocolViolation, TooManyConnections
from veil.policy import Policy
from veil.proxy import bounding
from veil.server import held
from veil.server.admission import LOGIN_GRACE_S, PreLogin, Waiting
from veil.server.auth import VerifierScramAuth
from veil.server.connection import BufferedStream, VeilConnection, fatal, negotiate
from veil.server.limits import ConnectionSlots, LoginThrottle, ServerLimits, Slots
from veil.server.live_policy import LivePolicy
from veil.server.logtext import ClipClientText, analysts_limiter, outsider, server_logger
from veil.server.pool import WorkerPools
from veil.server.session import VeilSession
from veil.server.shared import (
    PID_BASE,
    CancelMailbox,
    ProcessShare,
    SharedConnectionSlots,
    SharedLoginThrottle,
    backend_pid,
)
from veil.server.tls import is_loopback, make_ssl_context
from veil.store import warehouse
from veil.store.credentials import CredentialStore

__all__ = ["ServerThread", "VeilServer", "make_ssl_context", "serve"]

logger = server_logger()  # client text clipped, outsiders' lines rate-limited (veil.server.logtext)

#: Name of the ledger-file secret unknown users' SCRAM salts are derived from.
MOCK_SALT_SECRET = "scram-unknown-user-salt"

QuerySessionFactory = Callable[..., Any]

_CANCEL_POLL_S = 0.02


def _default_query_session(policy: Policy, analyst: str, **kwargs: Any) -> Any:
    from veil.proxy.session import QuerySession

    return QuerySession(policy, analyst, **kwargs)


def _peer_address(writer: asyncio.StreamWriter) -> str:
    peer = writer.get_extra_info("peername")
    return str(peer[0]) if isinstance(peer, tuple) else "local"


class VeilServer(PgServer):
    """The wire server for one policy file. ``query_session_factory(policy, analyst, limits=…)``
    makes each connection's query session (default: :class:`veil.proxy.session.QuerySession`)."""

    def __init__(
        self,
        policy: Policy,
        *,
        ssl_context: ssl.SSLContext | None = None,
        allow_plaintext: bool = False,
        query_session_factory: QuerySessionFactory | None = None,
        credentials: CredentialStore | None = None,
        limits: ServerLimits | None = None,
        share: ProcessShare | None = None,
    ) -> None:
        self.limits = limits or ServerLimits()
        warehouse.set_reader_threads(self.limits.engine_threads)
        warehouse.set_reader_memory(self.limits.engine_memory_mib)
        self.live_policy = LivePolicy(policy)
        self.ssl_context = ssl_context
        self.allow_plaintext = allow_plaintext
        self.credentials = credentials or CredentialStore.for_policy(policy)
        self._credentials_lock = threading.Lock()
        self.pools = WorkerPools(
            analyst_workers=self.limits.workers,
            catalog_workers=self.limits.catalog_workers,
            busy_workers=self.limits.busy_workers or ServerLimits.default_busy_workers(1),
        )
        self.share = share
        # this process's connections not logged in (fair share of slots)
        self.log_limiter = ClipClientText()  # this server's buckets for its outsiders' log lines (veil.server.logtext)
        self.analyst_log_limiter = analysts_limiter()  # and for its logged-in analysts' lines (red team s75 F3)
        self.prelogin = PreLogin(
            slow_logins=max(1, self.limits.max_connections // 4),
            login_grace=max(LOGIN_GRACE_S, self.limits.login_backoff_max + 10.0),
        )
        self.slots: Slots
        self.throttle: LoginThrottle | SharedLoginThrottle
        base, maximum = self.limits.login_backoff_base, self.limits.login_backoff_max
        if share is None:
            self.query_session_factory = query_session_factory or _default_query_session
            self.slots = ConnectionSlots(self.limits)
            self.throttle = LoginThrottle(base=base, maximum=maximum)
            self.mailbox: CancelMailbox | None = None
        else:  # one of several worker processes (veil.server.workers)
            from veil.server.workers import read_only_query_session

            self.query_session_factory = query_session_factory or read_only_query_session
            self.slots = SharedConnectionSlots(share, self.limits)
            self.throttle = SharedLoginThrottle(share.state, base=base, maximum=maximum)
            self.mailbox = CancelMailbox(share)
        secret = self.credentials.server_secret(MOCK_SALT_SECRET)
        super().__init__(
            session_factory=lambda: VeilSession(self),
            auth_plugin_factory=VerifierScramAuth.factory(self._lookup, secret),
            server_version="16.0 (Veil)",
        )

    @property
    def policy(self) -> Policy:
        """The policy as its file is now."""
        return self.live_policy.current()

    def _lookup(self, user: str) -> Any:
        """The verifier of a user the current policy lists, else None (same work either way), read from the ledger
        the current policy names: after the curator points ``[ledger] path`` at another file, the old file's passwords no
        longer log in (red team s22, A4) — and unless that file is the warehouse's own ledger, moved, nothing logs in
        (``LedgerMismatch``, red team s66 F7)."""
        policy = self.live_policy.current()
        verifier = self._credentials_for(policy).get(user)
        return verifier if user in policy.analysts else None

    def _credentials_for(self, policy: Policy) -> CredentialStore:
        with self._credentials_lock:
            if Path(policy.ledger_path) != self.credentials.path:
                self.credentials = CredentialStore.for_policy(policy)
            return self.credentials

    def shutdown_executor(self) -> None:
        self.pools.shutdown()

    def _allocate_pid(self) -> int:
        """Backend PIDs (the key of a CancelRequest) tell which worker process owns the connection, and stay within
        an int32 (``BackendKeyData``; red team s44 A5: pg-mimic's counter passed 2³¹). They are drawn at random (the
        OS CSPRNG) within [PID_BASE, 2³¹), skipping the PIDs of open connections: pg-mimic's counter counted every
        startup, so ``pg_backend_pid()`` told one analyst how many connections the others had made meanwhile (red team
        s73)."""
        share = self.share
        slots = (2**31 - PID_BASE) // (share.count if share is not None else 1)
        for _ in range(len(self._connections) + 64):
            local = PID_BASE + secrets.randbelow(slots)
            pid = local if share is None else backend_pid(local, share)
            if pid not in self._connections:
                return pid
        raise InternalError(f"no backend PID is free: {len(self._connections)} connections are open")

    def held_by(self, analyst: str, but: object = None) -> int:
        """What ``analyst``'s logged-in connections in this process (but ``but``) hold between messages: their named
        statements, portals, cursors and savepoints, caches and settings (``max_analyst_held_bytes``, :mod:`veil.server.held`)."""
        total = 0
        for conn in list(self._connections.values()):
            if conn is but or not getattr(conn, "logged_in", False) or conn.username != analyst:
                continue
            session = getattr(conn, "session", None)
            if session is not None and hasattr(session, "held_bytes"):
                total += int(session.held_bytes()) + held.statements_bytes(conn.statements)
                total += int(session.cache_bytes()) if hasattr(session, "cache_bytes") else 0
        return total

    def cancel(self, pid: int, secret: int) -> None:
        if self.mailbox is not None and not self.mailbox.owns(pid):
            self.mailbox.post(pid, secret)  # another worker process's connection
            return
        super().cancel(pid, secret)

    async def collect_cancels(self, *, orphaned: Callable[[], None]) -> None:
        """Worker processes: apply the cancel requests other processes received for this one's
        connections; call ``orphaned`` (stop serving) once the parent process is gone."""
        mailbox = self.mailbox
        if mailbox is None:
            return
        # The parent that spawned this process, watched through the pipe multiprocessing keeps to it
        # (not a pid read here: the parent may already be gone before this first runs).
        parent = multiprocessing.parent_process()
        while True:
            await asyncio.sleep(_CANCEL_POLL_S)
            for pid, secret in mailbox.collect():
                super().cancel(pid, secret)
            if parent is not None and not parent.is_alive():
                logger.error("the veil serve parent process is gone; this worker stops")
                orphaned()
                return

    def _take_slot(self, peer: str) -> None:
        """A slot for a new socket: a free one, else (:mod:`~veil.server.admission`) the slot of a
        connection not logged in of a network holding more than its share; else 53300."""
        try:
            self.slots.reserve()
        except TooManyConnections:
            now = time.monotonic()
            victim = self.prelogin.victim(peer, now=now)
            if victim is None:
                raise
            held = self.prelogin.held_by(victim.network)
            self.prelogin.evict(victim)
            logger.warning(
                "all %d connection slots taken: closed a connection from %s not logged in after %.1f s "
                "(its network held %d of them) to make room for %s",
                self.limits.max_connections,
                victim.network,
                now - victim.since,
                held,
                peer,
                extra=outsider(peer, self.log_limiter),
            )

    async def _handle_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        stream = BufferedStream(reader, writer)
        peer = _peer_address(writer)
        try:
            self._take_slot(peer)
        except TooManyConnections as exc:
            logger.warning("refused a connection from %s: %s", peer, exc.message, extra=outsider(peer, self.log_limiter))
            await fatal(stream, exc.sqlstate, exc.message, exc.hint)
            return
        waiting = self.prelogin.add(peer, handle=asyncio.current_task(), now=time.monotonic())
        try:
            await self._serve_client(stream, writer, peer, waiting)
        finally:
            self.prelogin.remove(waiting)
            if not waiting.evicted:  # an evicted connection's slot went to the newcomer
                self.slots.release()

    async def _serve_client(self, stream: BufferedStream, writer: asyncio.StreamWriter, peer: str, waiting: Waiting) -> None:
        try:
            startup = await asyncio.wait_for(negotiate(self, stream), self.limits.auth_timeout or None)
        except TimeoutError:
            logger.warning("startup timed out for a connection from %s", peer, extra=outsider(peer, self.log_limiter))
            await fatal(stream, ProtocolViolation.sqlstate, "canceling authentication due to timeout")
            return
        except (ProtocolViolation, InvalidEncoding) as exc:
            logger.warning("refused a connection from %s: %s", peer, exc.message, extra=outsider(peer, self.log_limiter))
            await fatal(stream, exc.sqlstate, exc.message, exc.hint)
            return
        except (ConnectionClosed, ConnectionError, OSError, ssl.SSLError, EOFError):
            return
        if startup is None:  # a CancelRequest, handled
            return
        waiting.started = True  # a login in progress, no longer an idle socket (admission, red team s28 A4)
        waiting.awaiting_client = lambda: stream.awaiting_since  # while it keeps up (s30 A1)
        if not startup.tls and not self.allow_plaintext and not is_loopback(writer.get_extra_info("peername")):
            hint = "Connect with sslmode=require" if self.ssl_context else "Start veil serve with --tls-cert/--tls-key"
            await fatal(
                stream,
                PlaintextRefused.sqlstate,
                "plaintext connections from non-loopback addresses are refused",
                f"{hint}, or (on a trusted network only) with --allow-plaintext",
            )
            return
        session = VeilSession(self)
        pid = self._allocate_pid()
        secret = struct.unpack("!i", os.urandom(4))[0]
        connection = VeilConnection(stream, session, self, pid, secret, startup, peer)
        connection.on_login = lambda: self.prelogin.remove(waiting)
        self._connections[pid] = connection
        try:
            await connection.run()
        finally:
            self._connections.pop(pid, None)


# --- running it --------------------------------------------------------------------------------


def _loop_exception_handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """Socket errors the loop meets on its own (e.g. accept() at the descriptor limit, which asyncio
    retries) are logged in one line, not with a traceback each time."""
    exc = context.get("exception")
    if isinstance(exc, OSError):
        logger.warning("%s: %s", context.get("message", "socket error"), exc)
    else:
        loop.default_exception_handler(context)


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
        loop.set_exception_handler(_loop_exception_handler)
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
            # Connection tasks still pending (a client that never hung up) end here, on this loop,
            # rather than being destroyed pending when the loop closes.
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.wait(pending, timeout=10))
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

        asyncio.run_coroutine_threadsafe(_close(), loop).result(15)
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
    limits: ServerLimits | None = None,
    ready: Callable[[int], None] | None = None,
    sock: socket.socket | None = None,
    share: ProcessShare | None = None,
) -> None:
    """Serve until interrupted (Ctrl-C / SIGTERM). ``sock``: a listening socket to accept on
    (instead of binding ``host:port``); ``share``: this is one of several worker processes."""
    if share is None:  # a worker process's parent prepared them before it started
        # the public mirror is copied and bounded copies are built before the first analyst connects, as for
        # `--processes N`: work that grows with a raw table (one person's rows included) never lands in an
        # analyst's query, and after a mirror-format bump the first queries do not each copy a public table
        from veil.server.workers import copy_public_mirror

        copy_public_mirror(policy)
        for table, problem in bounding.prepare(policy).items():
            logger.warning("bounded copy of %r not built at start (%s); the first query on it builds it", table, problem)
    server = VeilServer(policy, ssl_context=ssl_context, allow_plaintext=allow_plaintext, limits=limits, share=share)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(_loop_exception_handler)
        if sock is not None:
            srv = await server.start_server(sock=sock)
        else:
            srv = await server.start_server(host=host, port=port)
        stop = asyncio.Event()
        # SIGTERM stops the loop from inside it (raising from a signal handler could land anywhere in
        # asyncio's own code and leave shutdown waiting forever).
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        if ready is not None:
            ready(srv.sockets[0].getsockname()[1])
        serving = asyncio.ensure_future(server.serve_forever())
        stopping = asyncio.ensure_future(stop.wait())
        cancels = asyncio.ensure_future(server.collect_cancels(orphaned=stop.set))
        try:
            await asyncio.wait({serving, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            loop.remove_signal_handler(signal.SIGTERM)
            for task in (serving, stopping, cancels):
                task.cancel()
            server.close()

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
    finally:
        # Worker threads still running a query finish it (charge and release are written together);
        # a query still waiting for a worker is dropped.
        server.pools.analyst.shutdown(wait=False, cancel_futures=True)
        server.pools.catalog.shutdown()
