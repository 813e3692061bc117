"""Bounded worker threads: nothing but protocol framing runs on the server's event loop.

- :class:`WorkerPools` holds two separate pools: ``analyst`` (query sessions: planning, engine
  runs, the ledger) and ``catalog`` (catalog and ``veil.*`` queries on sqlglot's Python executor).
  A catalog query can therefore never take a worker an analyst query needs, and the reverse.
- :class:`InterruptiblePool` runs pure computations that may be stopped from outside: on timeout
  the running call gets an exception raised inside its thread (``PyThreadState_SetAsyncExc``),
  which the Python executor meets at its next bytecode. It is used for catalog queries only,
  which touch no shared state; analyst sessions are stopped through ``QuerySession.cancel()``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import ctypes
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from veil.errors import QueryCancelled

__all__ = ["InterruptiblePool", "WorkerPools"]

T = TypeVar("T")


class _Interrupted(BaseException):
    """Raised inside a pool thread whose call ran past its time (never escapes the pool)."""


class _Job:
    __slots__ = ("args", "fn", "future", "thread")

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.fn = fn
        self.args = args
        self.future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self.thread: int | None = None


class InterruptiblePool:
    """``size`` daemon threads; :meth:`run` awaits a call with a timeout and stops it when late."""

    def __init__(self, size: int, name: str) -> None:
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._stragglers: set[asyncio.Future[None]] = set()
        self._threads = [threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True) for i in range(size)]
        for t in self._threads:
            t.start()

    def _work(self) -> None:
        while True:
            try:
                job = self._queue.get()
                if job is None:
                    return
                self._run_job(job)
            except _Interrupted:  # delivered after its job ended: nothing to stop any more
                continue

    def _run_job(self, job: _Job) -> None:
        if not job.future.set_running_or_notify_cancel():
            return
        with self._lock:
            job.thread = threading.get_ident()
        try:
            result = job.fn(*job.args)
        except _Interrupted:
            job.future.set_exception(QueryCancelled("the catalog query ran out of time"))
        except BaseException as exc:  # handed to the awaiting coroutine
            job.future.set_exception(exc)
        else:
            job.future.set_result(result)
        finally:
            with self._lock:
                job.thread = None

    def _interrupt(self, job: _Job) -> None:
        with self._lock:
            if job.thread is not None:
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(job.thread), ctypes.py_object(_Interrupted))

    async def run(self, timeout: float, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on a pool thread; after ``timeout`` seconds (0: none) it is stopped and
        :class:`~veil.errors.QueryCancelled` is raised."""
        job = _Job(fn, args)
        self._queue.put(job)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(job.future), timeout or None)
        except TimeoutError:
            job.future.cancel()
            self._interrupt(job)
            self._stragglers.add(asyncio.ensure_future(self._keep_interrupting(job)))
            raise QueryCancelled(
                f"the catalog query ran for more than {timeout:g} s and was stopped",
                hint="Ask the catalog for less (fewer joined catalog tables), or raise veil serve --catalog-timeout",
            ) from None
        except asyncio.CancelledError:
            job.future.cancel()
            self._interrupt(job)
            self._stragglers.add(asyncio.ensure_future(self._keep_interrupting(job)))
            raise

    async def _keep_interrupting(self, job: _Job) -> None:
        """Interrupt again until the call has ended: an exception delivered while its thread ran a
        garbage-collector callback or a ``__del__`` is swallowed there ("Exception ignored")."""
        try:
            for _ in range(200):
                await asyncio.sleep(0.05)
                with self._lock:
                    if job.thread is None:
                        return
                self._interrupt(job)
        finally:
            self._stragglers = {t for t in self._stragglers if not t.done()}

    def shutdown(self) -> None:
        for _ in self._threads:
            self._queue.put(None)


class WorkerPools:
    """The server's thread pools (sizes from :class:`~veil.server.limits.ServerLimits`)."""

    def __init__(self, *, analyst_workers: int, catalog_workers: int) -> None:
        self.analyst = concurrent.futures.ThreadPoolExecutor(max_workers=analyst_workers, thread_name_prefix="veil-analyst")
        self.catalog = InterruptiblePool(catalog_workers, "veil-catalog")

    def shutdown(self) -> None:
        self.analyst.shutdown(wait=True, cancel_futures=False)
        self.catalog.shutdown()
