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

  Its jobs are queued per owner (the analyst); a free thread serves the owner with the fewest jobs
  running (then the one served longest ago), and one owner never holds more than all threads but
  one (red team s20, A8): however many catalog queries one analyst keeps sending, from however
  many connections, another analyst's query starts at once or after one job ends (each ends by
  ``--catalog-timeout``), never behind the whole queue.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import sys
import threading
from collections import deque
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
    __slots__ = ("args", "fn", "future", "late", "owner")

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...], owner: str = "") -> None:
        self.fn = fn
        self.args = args
        self.owner = owner
        self.future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self.late = False  # set by the event loop; read by the job's thread at each call

    def stop_when_late(self, frame: FrameType, event: str, arg: object) -> None:
        """The job thread's global trace function (returns None: no per-line tracing)."""
        if self.late and frame.f_code.co_filename.startswith(_STOPPABLE) and frame.f_code.co_name != "__del__":
            raise _Interrupted


class InterruptiblePool:
    """``size`` daemon threads; :meth:`run` awaits a call with a timeout and stops it when late.
    A free thread takes the oldest job of the owner with the fewest jobs running (then the one
    served longest ago); one owner holds at most ``size − 1`` threads (1 if ``size`` is 1)."""

    def __init__(self, size: int, name: str) -> None:
        self._cap = max(1, size - 1)
        self._ready = threading.Condition()
        self._queues: dict[str, deque[_Job]] = {}  # owners with jobs waiting
        self._running: dict[str, int] = {}
        self._started: dict[str, int] = {}  # when (a tick) each owner last had a job started
        self._tick = 0
        self._stopping = False
        self._threads = [threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True) for i in range(size)]
        for t in self._threads:
            t.start()

    def _next(self) -> _Job | None:
        """(Under the condition) the next job: of the owner below its cap with the fewest jobs
        running, then the one served longest ago. None: stopping and nothing this thread may take."""
        while True:
            eligible = [o for o in self._queues if self._running.get(o, 0) < self._cap]
            if not eligible:
                if self._stopping:
                    return None
                self._ready.wait()
                continue
            owner = min(eligible, key=lambda o: (self._running.get(o, 0), self._started.get(o, 0)))
            jobs = self._queues[owner]
            job = jobs.popleft()
            if not jobs:
                del self._queues[owner]
            if job.future.cancelled():  # stopped while it waited: never run
                continue
            self._tick += 1
            self._started[owner] = self._tick
            self._running[owner] = self._running.get(owner, 0) + 1
            return job

    def _work(self) -> None:
        while True:
            with self._ready:
                job = self._next()
            if job is None:
                return
            try:
                self._run_job(job)
            finally:
                with self._ready:
                    left = self._running[job.owner] - 1
                    if left:
                        self._running[job.owner] = left
                    else:
                        del self._running[job.owner]
                        if job.owner not in self._queues:
                            self._started.pop(job.owner, None)  # bounded: only owners with work
                    self._ready.notify_all()

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

    async def run(self, timeout: float, fn: Callable[..., T], *args: Any, owner: str = "") -> T:
        """``fn(*args)`` on a pool thread, in ``owner``'s turn; after ``timeout`` seconds (0: none;
        its time in the queue counts) it is stopped and :class:`~veil.errors.QueryCancelled` is raised."""
        job = _Job(fn, args, owner)
        with self._ready:
            self._queues.setdefault(owner, deque()).append(job)
            self._ready.notify()
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
        """The threads end once no queued job is left for them."""
        with self._ready:
            self._stopping = True
            self._ready.notify_all()


class WorkerPools:
    """The server's thread pools (sizes from :class:`~veil.server.limits.ServerLimits`)."""

    def __init__(self, *, analyst_workers: int, catalog_workers: int) -> None:
        self.analyst = concurrent.futures.ThreadPoolExecutor(max_workers=analyst_workers, thread_name_prefix="veil-analyst")
        self.catalog = InterruptiblePool(catalog_workers, "veil-catalog")

    def shutdown(self) -> None:
        self.analyst.shutdown(wait=True, cancel_futures=False)
        self.catalog.shutdown()
