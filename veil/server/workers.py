"""``veil serve --processes N``: N worker processes answering on one port.

One process runs Python on one core at a time (the GIL), and each DP answer is mostly Python, so a
single process caps the server at about one core of answers however many clients wait. With
``--processes N`` the parent

1. builds, before any worker starts, every bounded copy the policy needs (one per private table,
   exactly what the first query on each table would build) and the public mirror, and makes the
   server secret unknown users' SCRAM salts come from;
2. holds the port and starts N worker processes (``spawn``: a fresh interpreter, never a fork of a
   process holding DuckDB's threads), each listening on that port with ``SO_REUSEPORT`` (the kernel
   spreads new connections evenly over them), each with its own event loop, thread pools, query
   sessions and read-only DuckDB connections;
3. waits; on SIGTERM or Ctrl-C it stops the workers (each finishes the charged queries it runs),
   and a worker that dies is started again.

**Workers never write the warehouse.** DuckDB lets many processes open a file read-only but only
one read-write, so a worker's engine refuses to build a bounded copy: a query that would need one
(the policy's bounds for a table changed while serving) is refused with ``F0000`` before anything is
charged, and the message says to restart the server — never answered from raw data.

**The budget stays exact.** Every worker charges through its own handle on the same SQLite ledger,
whose reservation is one ``BEGIN IMMEDIATE`` transaction (read spent, check, write): SQLite's file
lock serialises reservations across processes as the handle's lock does across threads.

**Limits stay server-wide.** Connection counts, login backoff and cancel requests live in shared
memory (:mod:`veil.server.shared`).
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import socket
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from veil.engines.duckdb import DuckDBEngine
from veil.errors import InputError, PolicyError
from veil.policy import Policy, load_policy
from veil.proxy import bounding
from veil.proxy.session import QuerySession
from veil.server.limits import ServerLimits
from veil.server.logtext import server_logger
from veil.server.shared import ProcessShare, SharedState

__all__ = ["ServingEngine", "copy_public_mirror", "prepare_warehouse", "read_only_query_session", "serve_processes"]

logger = server_logger()  # client text clipped, outsiders' lines rate-limited (veil.server.logtext)

#: Workers that exit this many times within the window *before accepting a connection* stop the server (they would
#: only crash again: a broken policy, warehouse or port). An exit after a worker served is started again, never stops
#: the server (one analyst who can make a worker exit — out of memory, say — must not stop it for every analyst: red
#: team s73); repeated ones wait RESTART_BACKOFF_S · 2^(k−2) for the k-th within the window, at most
#: RESTART_BACKOFF_MAX_S, so a crash loop costs little.
_MAX_RESTARTS = 5
_RESTART_WINDOW_S = 60.0
RESTART_BACKOFF_S = 0.5
RESTART_BACKOFF_MAX_S = 30.0


def restart_delay(exits: Sequence[float], now: float, *, served: bool) -> float | None:
    """Seconds to wait before starting a worker again that exited at ``now``, after its earlier exits ``exits``
    (monotonic times; of the same kind: served or not); None: stop the server (:data:`_MAX_RESTARTS` exits before
    serving within :data:`_RESTART_WINDOW_S`)."""
    recent = sum(1 for t in exits if now - t < _RESTART_WINDOW_S)
    if not served:
        return None if recent + 1 > _MAX_RESTARTS else 0.0
    if recent < 2:
        return 0.0
    return min(RESTART_BACKOFF_MAX_S, RESTART_BACKOFF_S * 2.0 ** (recent - 2))


_START_TIMEOUT_S = 120.0


class ServingEngine(DuckDBEngine):
    """A worker process's engine: reads the warehouse, never writes it."""

    writes_warehouse = False

    def materialise(self, name: str, sql: str) -> None:
        raise PolicyError(
            "this query needs a bounded copy of its table that was not built when veil serve started "
            "(the policy's tables or bounds changed since, or the table was loaded after the start)",
            hint="Restart veil serve (with --processes N it builds every bounded copy before its workers start)",
        )

    def stamp_version(self, table: str) -> str:
        raise PolicyError(
            f"table {table!r} was replaced by another tool since veil serve started",
            hint="Restart veil serve (it names the new table's version and builds its bounded copy before its workers start)",
        )

    def drop(self, name: str) -> None:
        raise PolicyError(
            "veil serve worker processes do not change the warehouse",
            hint="Restart veil serve to rebuild the warehouse's bounded copies",
        )


class _ServingSession(QuerySession):
    """A query session that owns the :class:`ServingEngine` it was given."""

    def __init__(self, policy: Policy, analyst: str, **kwargs: Any) -> None:
        engine = ServingEngine(policy)
        try:
            super().__init__(policy, analyst, engine=engine, **kwargs)
        except BaseException:
            engine.close()
            raise
        self._serving_engine = engine

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._serving_engine.close()


def read_only_query_session(policy: Policy, analyst: str, **kwargs: Any) -> QuerySession:
    """A worker process's query session: a :class:`ServingEngine`, closed with the session."""
    return _ServingSession(policy, analyst, **kwargs)


def prepare_warehouse(policy: Policy) -> list[str]:
    """Build every private table's bounded copy and the public mirror (what the workers will only
    read). Returns one line per table that could not be prepared (it is refused when queried)."""
    from veil.server.app import MOCK_SALT_SECRET
    from veil.store.credentials import CredentialStore

    CredentialStore.for_policy(policy).server_secret(MOCK_SALT_SECRET)
    problems: list[str] = []
    if not policy.analysts:
        return problems
    copy_public_mirror(policy)
    problems += [f"table {name!r}: {problem}" for name, problem in bounding.prepare(policy).items()]
    return problems


def copy_public_mirror(policy: Policy) -> None:
    """Copy every table the policy declares public into the public mirror where its copy is absent or stale (written
    since, declared with other columns, made by an earlier :data:`~veil.store.warehouse.MIRROR_FORMAT`), as the first
    query would (``Env.catalog``): ``veil serve`` does it at start, so no analyst's first query pays for the copies.
    A table that cannot be copied is left unserved, with its reason, as there. Nothing to do without analysts."""
    from veil.server import catalog

    if not policy.analysts:
        return
    with QuerySession(policy, sorted(policy.analysts)[0]) as qs:
        catalog.analyst_catalog(qs)


def _ready(index: int, started: Any, served: Any) -> None:
    logger.info("worker process %d (pid %d) is accepting connections", index, os.getpid())
    served.set()  # from now on its exit may be a client's doing: it is started again, never stops the server
    started.release()


def _worker_main(
    share: ProcessShare,
    policy_path: Path,
    address: tuple[str, int],
    tls: tuple[Path, Path] | None,
    allow_plaintext: bool,
    limits: ServerLimits,
    started: Any,
    served: Any,
    log_level: int,
) -> None:
    from veil.server.app import make_ssl_context, serve

    logging.basicConfig(level=log_level, format=f"%(asctime)s %(levelname)s %(name)s[{share.index}]: %(message)s", force=True)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops the workers (SIGTERM)
    policy = load_policy(policy_path)
    ssl_context = make_ssl_context(*tls) if tls is not None else None
    serve(
        policy,
        sock=_listen(*address),
        ssl_context=ssl_context,
        allow_plaintext=allow_plaintext,
        limits=limits,
        ready=lambda _port: _ready(share.index, started, served),
        share=share,
    )


def _family(host: str, port: int) -> socket.AddressFamily:
    info = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    return info[0][0] if info else socket.AF_INET


def _reserve_port(host: str, port: int) -> socket.socket:
    """A bound, not listening, ``SO_REUSEPORT`` socket holding ``host:port`` for the workers.

    The port is first bound without ``SO_REUSEPORT``, so a port another server (or another
    ``veil serve``) holds is refused here instead of being shared with it."""
    family = _family(host, port)
    probe = socket.socket(family, socket.SOCK_STREAM)
    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as asyncio does: TIME_WAIT is no owner
    try:
        probe.bind((host, port))
        port = probe.getsockname()[1]
    finally:
        probe.close()
    held = socket.socket(family, socket.SOCK_STREAM)
    held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    held.bind((host, port))
    return held


def _listen(host: str, port: int) -> socket.socket:
    """A worker's own listening socket on the shared port: the kernel spreads new connections
    evenly over the workers' sockets (a hash of the client's address and port)."""
    sock = socket.socket(_family(host, port), socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(1024)
    return sock


def serve_processes(
    policy: Policy,
    *,
    processes: int,
    host: str = "127.0.0.1",
    port: int = 6432,
    tls: tuple[Path, Path] | None = None,
    allow_plaintext: bool = False,
    limits: ServerLimits | None = None,
    ready: Callable[[int], None] | None = None,
) -> None:
    """Serve with ``processes`` worker processes until SIGTERM or Ctrl-C."""
    if processes < 2:
        raise InputError(f"serve_processes needs at least 2 processes, got {processes}", hint="Use serve() for one")
    if policy.engine.kind != "duckdb":
        raise InputError(
            f"--processes needs the embedded DuckDB engine; this policy uses {policy.engine.kind!r}",
            hint="Serve a Spark policy with one process (its engine runs queries in parallel itself)",
        )
    limits = limits or ServerLimits()
    if not limits.busy_workers:  # each process's share of the cores
        limits = dataclasses.replace(limits, busy_workers=ServerLimits.default_busy_workers(processes))
    for line in prepare_warehouse(policy):
        logger.warning("not prepared for the workers: %s", line)
    ctx = multiprocessing.get_context("spawn")
    state = SharedState(ctx, limits)
    held = _reserve_port(host, port)
    bound = held.getsockname()[1]
    started = ctx.Semaphore(0)
    level = logging.getLogger().getEffectiveLevel()
    stopping = False

    served: list[Any] = [None] * processes  # per worker: an Event set once it accepts connections

    def start(index: int) -> Any:
        share = ProcessShare(index, processes, state)
        served[index] = ctx.Event()
        proc = ctx.Process(
            target=_worker_main,
            args=(share, policy.watch_path, (host, bound), tls, allow_plaintext, limits, started, served[index], level),
            name=f"veil-serve-{index}",
        )
        proc.start()
        return proc

    def stop(*_args: object) -> None:
        nonlocal stopping
        stopping = True

    previous = signal.signal(signal.SIGTERM, stop)
    workers: list[Any] = []
    exits: dict[bool, collections.deque[float]] = {
        False: collections.deque(maxlen=_MAX_RESTARTS),
        True: collections.deque(maxlen=16),
    }
    pending: dict[int, float] = {}  # workers to start again, and when
    try:
        for i in range(processes):
            workers.append(start(i))
        deadline = time.monotonic() + _START_TIMEOUT_S
        for _ in range(processes):
            while not started.acquire(timeout=0.2):
                if stopping or time.monotonic() > deadline or any(not w.is_alive() for w in workers):
                    raise PolicyError("a veil serve worker process did not start", hint="See the log above for its error")
        if ready is not None:
            ready(bound)
        while not stopping:
            now = time.monotonic()
            wait_s = min([0.5, *(max(0.0, at - now) for at in pending.values())])
            multiprocessing.connection.wait([w.sentinel for i, w in enumerate(workers) if i not in pending], timeout=wait_s)
            for i, w in enumerate(workers):
                if stopping:
                    break
                now = time.monotonic()
                if i in pending:
                    if now >= pending[i]:
                        del pending[i]
                        try:
                            workers[i] = start(i)
                        except OSError as exc:  # spawn's fork/exec (ENOMEM, EAGAIN): try again later (review s23 Y6)
                            retry = restart_delay(exits[True], now, served=True) or RESTART_BACKOFF_S
                            exits[True].append(now)
                            logger.error("starting worker process %d again failed (%s); trying again in %g s", i, exc, retry)
                            pending[i] = now + retry
                    continue
                if w.is_alive():
                    continue
                state.forget(i)  # its sockets are gone: its connections no longer count
                was_serving = served[i].is_set()
                delay = restart_delay(exits[was_serving], now, served=was_serving)
                if delay is None:
                    raise PolicyError(
                        f"veil serve worker processes exited {_MAX_RESTARTS} times within {_RESTART_WINDOW_S:g} s "
                        "before accepting connections",
                        hint="See the log above for their errors",
                    )
                exits[was_serving].append(now)
                logger.error(
                    "worker process %d exited with code %s%s; starting it again%s",
                    i,
                    w.exitcode,
                    "" if was_serving else " before accepting connections",
                    f" in {delay:g} s" if delay else "",
                )
                pending[i] = now + delay
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        for w in workers:
            if w.is_alive():
                w.terminate()  # SIGTERM: each worker finishes the charged queries it runs
        for w in workers:
            w.join(60)
            if w.is_alive():
                w.kill()
        held.close()
        state.close_lock()
