"""Bounded worker threads: nothing but protocol framing runs on the server's event loop.

- :class:`WorkerPools` holds two separate pools: ``analyst`` (query sessions: planning, engine
  runs, the ledger) and ``catalog`` (catalog and ``veil.*`` queries on sqlglot's Python executor).
  A catalog query can therefore never take a worker an analyst query needs, and the reverse.
- :class:`InterruptiblePool` runs pure computations that may be stopped from outside. Each job runs
  under a per-thread trace function (``sys.settrace``, called at every Python function call of
  that thread only). Once the job is late it raises at the next call into the code that does the
  work (sqlglot, pg-mimic, Veil), so the stop happens synchronously at a call boundary of our
  choosing: never inside a garbage-collector callback, a ``__del__`` or asyncio's own cleanup,
  and never after the job has ended. It is used for catalog queries only, which touch no shared
  state; analyst sessions are stopped through ``QuerySession.cancel()``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import queue
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any, TypeVar

from veil.errors import QueryCancelled

__all__ = ["InterruptiblePool", "WorkerPools"]

T = TypeVar("T")


class _Interrupted(BaseException):
    """Raised inside a pool thread whose call ran past its time (never escapes the pool)."""


def _package_dir(name: str) -> str:
    module = sys.modules.get(name) or __import__(name)
    return os.path.dirname(os.path.abspath(module.__file__ or "")) + os.sep


# A late job is stopped only in frames of these packages: the code that does a catalog query's work.
_STOPPABLE = tuple(_package_dir(name) for name in ("sqlglot", "pg_mimic", "veil"))


class _Job:
    __slots__ = ("args", "fn", "future", "late")

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.fn = fn
        self.args = args
        self.future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self.late = False  # set by the event loop; read by the job's thread at each call

    def stop_when_late(self, frame: FrameType, event: str, arg: object) -> None:
        """The job thread's global trace function (returns None: no per-line tracing)."""
        if self.late and frame.f_code.co_filename.startswith(_STOPPABLE) and frame.f_code.co_name != "__del__":
            raise _Interrupted


class InterruptiblePool:
    """``size`` daemon threads; :meth:`run` awaits a call with a timeout and stops it when late."""

    def __init__(self, size: int, name: str) -> None:
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._threads = [threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True) for i in range(size)]
        for t in self._threads:
            t.start()

    def _work(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            self._run_job(job)

    @staticmethod
    def _run_job(job: _Job) -> None:
        if not job.future.set_running_or_notify_cancel():
            return
        failure: BaseException | None = None
        result: Any = None
        outer = sys.gettrace()  # a debugger's or coverage's tracer, put back after the job
        sys.settrace(job.stop_when_late)
        try:
            result = job.fn(*job.args)
        except BaseException as exc:  # no call may run here: the tracer is still set
            failure = exc
        finally:
            sys.settrace(outer)
        if failure is None:
            job.future.set_result(result)
        elif isinstance(failure, _Interrupted):
            job.future.set_exception(QueryCancelled("the catalog query ran out of time"))
        else:  # handed to the awaiting coroutine
            job.future.set_exception(failure)

    async def run(self, timeout: float, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on a pool thread; after ``timeout`` seconds (0: none) it is stopped and
        :class:`~veil.errors.QueryCancelled` is raised."""
        job = _Job(fn, args)
        self._queue.put(job)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(job.future), timeout or None)
        except TimeoutError:
            job.late = True
            job.future.cancel()
            raise QueryCancelled(
                f"the catalog query ran for more than {timeout:g} s and was stopped",
                hint="Ask the catalog for less (fewer joined catalog tables), or raise veil serve --catalog-timeout",
            ) from None
        except asyncio.CancelledError:
            job.late = True
            job.future.cancel()
            raise

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
