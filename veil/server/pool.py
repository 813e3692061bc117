"""Bounded worker threads: nothing but protocol framing runs on the server's event loop.

- :class:`WorkerPools` holds two separate pools: ``analyst`` (query sessions: planning, engine
  runs, the ledger) and ``catalog`` (catalog and ``veil.*`` queries on sqlglot's Python executor).
  A catalog query can therefore never take a worker an analyst query needs, and the reverse.
- Both serve their waiting work per owner (the analyst, red team s20 A8/A9): a free thread takes
  the oldest work of the owner with the fewest running (then the one served longest ago), and one
  owner never holds more than all threads but one. However much one analyst sends, from however
  many connections, another analyst's work starts at once or as soon as one running job ends,
  never behind the whole queue. (:class:`_FairQueue`; the analyst pool is :class:`FairExecutor`, a
  ``ThreadPoolExecutor`` that is handed work only when a thread is free.)
- The analyst pool starts work on at most ``busy`` threads at once (each process's share of the
  cores): an answer is mostly Python, and more threads doing Python at once in one process only take
  turns at the interpreter lock, which costs CPU. A job that has run ``long_after`` (50 ms) no longer
  counts, so a long statement never holds up the others for longer than that; ``size`` still bounds
  the threads.
- :class:`InterruptiblePool` runs pure computations that may be stopped from outside. Each job runs
  under a per-thread trace function (``sys.settrace``, called at every Python function call of
  that thread only). Once the job is late it raises at the next call into the code that does the
  work (sqlglot, pg-mimic, Veil), so the stop happens synchronously at a call boundary of our
  choosing: never inside a garbage-collector callback, a ``__del__`` or asyncio's own cleanup,
  and never after the job has ended. It is used for catalog queries only, which touch no shared
  state; analyst sessions are stopped through ``QuerySession.cancel()`` (or ``cancel_public()``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from types import FrameType
from typing import Any, Generic, Protocol, TypeVar

from veil.errors import QueryCancelled

__all__ = ["FairExecutor", "InterruptiblePool", "WorkerPools"]

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


class _Owned(Protocol):
    owner: str
    future: concurrent.futures.Future[Any]


W = TypeVar("W", bound=_Owned)


class _FairQueue(Generic[W]):
    """Work waiting for a thread, per owner (not thread-safe: the caller holds its lock). The next
    is the oldest of the owner below ``cap`` running with the fewest running, then the one served
    longest ago; work cancelled while it waited is dropped."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._queues: dict[str, deque[W]] = {}  # owners with work waiting
        self._running: dict[str, int] = {}
        self._started: dict[str, int] = {}  # when (a tick) each owner last had work started
        self._tick = 0

    def put(self, work: W) -> None:
        self._queues.setdefault(work.owner, deque()).append(work)

    def take(self) -> W | None:
        """The next work to start (counted as running), or None: nothing an owner below its cap waits for."""
        while True:
            eligible = [o for o in self._queues if self._running.get(o, 0) < self.cap]
            if not eligible:
                return None
            owner = min(eligible, key=lambda o: (self._running.get(o, 0), self._started.get(o, 0)))
            queue = self._queues[owner]
            work = queue.popleft()
            if not queue:
                del self._queues[owner]
            if work.future.cancelled():  # stopped while it waited: never run
                continue
            self._tick += 1
            self._started[owner] = self._tick
            self._running[owner] = self._running.get(owner, 0) + 1
            return work

    def finished(self, owner: str) -> None:
        left = self._running.get(owner, 0) - 1
        if left > 0:
            self._running[owner] = left
            return
        self._running.pop(owner, None)
        if owner not in self._queues:
            self._started.pop(owner, None)  # bounded: only owners with work are remembered

    def has_waiting(self) -> bool:
        """Whether any work still waits."""
        return bool(self._queues)

    def drain(self) -> list[W]:
        """Everything still waiting (taken out)."""
        out = [w for q in self._queues.values() for w in q]
        self._queues.clear()
        return out


class InterruptiblePool:
    """``size`` daemon threads; :meth:`run` awaits a call with a timeout and stops it when late.
    A free thread takes the oldest job of the owner with the fewest jobs running (then the one
    served longest ago); one owner holds at most ``size − 1`` threads (1 if ``size`` is 1)."""

    def __init__(self, size: int, name: str) -> None:
        self._ready = threading.Condition()
        self._waiting: _FairQueue[_Job] = _FairQueue(max(1, size - 1))
        self._stopping = False
        self._threads = [threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True) for i in range(size)]
        for t in self._threads:
            t.start()

    def _next(self) -> _Job | None:
        """(Under the condition) the next job; None: stopping and nothing this thread may take."""
        while True:
            job = self._waiting.take()
            if job is not None or self._stopping:
                return job
            self._ready.wait()

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
                    self._waiting.finished(job.owner)
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
            self._waiting.put(job)
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


class _Work:
    __slots__ = ("args", "fn", "future", "kwargs", "owner")

    def __init__(self, owner: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.owner = owner
        self.fn = fn
        self.args = args
        self.kwargs = kwargs
        self.future: concurrent.futures.Future[Any] = concurrent.futures.Future()


class FairExecutor:
    """A thread pool (``concurrent.futures.ThreadPoolExecutor`` underneath: its threads, its
    shutdown) whose waiting work is served per owner: a free thread takes the oldest work of the
    owner with the fewest running (then the one served longest ago), and one owner holds at most
    ``size − 1`` threads (1 if ``size`` is 1). Work is handed to the threads only when one is free,
    so nothing waits in the executor's own first-come queue.

    ``busy``: at most this many jobs start and run at once (default ``size``), but a job that has run
    ``long_after`` seconds no longer counts, so more start beside it, up to ``size`` threads. A few
    busy threads per core spend less on switching the interpreter lock than ``size`` of them, while a
    long statement (in the engine, or a long planning) never holds up the others for longer than
    ``long_after``. A watcher thread, only when ``busy < size``, starts waiting work once the busy
    jobs have all run that long."""

    def __init__(self, size: int, name: str, *, busy: int | None = None, long_after: float = 0.05) -> None:
        self._size = size
        self._busy_cap = size if busy is None else max(1, min(busy, size))
        self._long_after = long_after
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=size, thread_name_prefix=name)
        self._lock = threading.Lock()  # guards everything below
        self._idle = threading.Condition(self._lock)
        self._watch = threading.Condition(self._lock)
        self._waiting: _FairQueue[_Work] = _FairQueue(max(1, size - 1))
        self._running = 0  # jobs handed to a thread
        self._short: dict[_Work, float] = {}  # those still counted busy: when each started (monotonic)
        self._closed = False  # no new work
        self._dropping = False  # work not started yet is cancelled, not started
        self._parked = False  # the watcher waits without a deadline
        if self._busy_cap < size:
            threading.Thread(target=self._watcher, name=f"{name}-watch", daemon=True).start()

    def submit(self, fn: Callable[..., T], /, *args: Any, owner: str = "", **kwargs: Any) -> concurrent.futures.Future[T]:
        """``fn(*args, **kwargs)`` on a thread, in ``owner``'s turn."""
        work = _Work(owner, fn, args, kwargs)
        with self._lock:
            if self._closed:
                raise RuntimeError("cannot schedule new work after shutdown")
            self._waiting.put(work)
            ready = self._dispatch()
        self._start(ready)
        return work.future

    def _start(self, ready: list[_Work]) -> None:
        """Hand each of ``ready`` to a thread. When the OS refuses a thread (``can't start new
        thread``), that work fails with the error and its slot goes to the next waiting work (tried in
        turn), so nothing is left waiting for a thread that will never run."""
        pending = list(ready)
        while pending:
            w = pending.pop(0)
            try:
                self._executor.submit(self._run, w)
            except RuntimeError as exc:
                if w.future.set_running_or_notify_cancel():
                    w.future.set_exception(exc)
                with self._lock:
                    self._ended(w)
                    pending.extend(self._dispatch())
                    self._idle.notify_all()

    def _dispatch(self) -> list[_Work]:
        """(Under the lock) the work to start now, one per free thread while fewer than ``busy`` run."""
        out: list[_Work] = []
        now = -1.0
        while self._running < self._size and len(self._short) < self._busy_cap and not self._dropping:
            work = self._waiting.take()
            if work is None:
                break
            if now < 0:
                now = time.monotonic()
            self._running += 1
            self._short[work] = now
            out.append(work)
        if self._parked and self._short and self._waiting.has_waiting():
            self._parked = False
            self._watch.notify()
        return out

    def _ended(self, work: _Work) -> None:
        """(Under the lock) ``work`` no longer holds a thread."""
        self._running -= 1
        self._short.pop(work, None)
        self._waiting.finished(work.owner)

    def _watcher(self) -> None:
        """Starts waiting work beside busy jobs that have run ``long_after`` seconds."""
        while True:
            with self._lock:
                while True:
                    if self._closed and not self._running and not self._waiting.has_waiting():
                        return
                    blocked = len(self._short) >= self._busy_cap and self._running < self._size
                    if not (blocked and self._waiting.has_waiting()):
                        self._parked = True
                        self._watch.wait(1.0 if self._closed else None)
                        self._parked = False
                        continue
                    now = time.monotonic()
                    due = min(self._short.values()) + self._long_after
                    if due > now:
                        self._watch.wait(due - now)
                        continue
                    for work, began in list(self._short.items()):
                        if began + self._long_after <= now:
                            del self._short[work]
                    ready = self._dispatch()
                    break
            self._start(ready)

    def _run(self, work: _Work) -> None:
        try:
            if work.future.set_running_or_notify_cancel():
                try:
                    result = work.fn(*work.args, **work.kwargs)
                except BaseException as exc:
                    work.future.set_exception(exc)
                else:
                    work.future.set_result(result)
        finally:
            with self._lock:
                self._ended(work)
                ready = self._dispatch()
                self._idle.notify_all()
            self._start(ready)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Take no new work. ``cancel_futures``: work not started yet is cancelled (else it still
        runs); ``wait``: return once the work has ended (as ``ThreadPoolExecutor.shutdown``)."""
        with self._lock:
            self._closed = True
            self._watch.notify()
            left: list[_Work] = []
            if cancel_futures:
                self._dropping = True
                left = self._waiting.drain()
        for work in left:
            work.future.cancel()
        if wait:
            with self._lock:
                while self._running or (not self._dropping and self._waiting.has_waiting()):
                    self._idle.wait()
        self._executor.shutdown(wait=wait, cancel_futures=cancel_futures)


class WorkerPools:
    """The server's thread pools (sizes from :class:`~veil.server.limits.ServerLimits`)."""

    def __init__(self, *, analyst_workers: int, catalog_workers: int, busy_workers: int | None = None) -> None:
        self.analyst = FairExecutor(analyst_workers, "veil-analyst", busy=busy_workers)
        self.catalog = InterruptiblePool(catalog_workers, "veil-catalog")

    def shutdown(self) -> None:
        self.analyst.shutdown(wait=True, cancel_futures=False)
        self.catalog.shutdown()
