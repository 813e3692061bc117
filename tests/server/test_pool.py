"""The catalog pool stops a late job at a call boundary of its own choosing: never inside a
garbage-collector callback or a ``__del__`` (which would swallow the stop and print "Exception
ignored"), never in the pool's own bookkeeping, and never in a later job on the same thread."""

from __future__ import annotations

import asyncio
import gc
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import sqlglot

from veil.errors import QueryCancelled
from veil.server.pool import FairExecutor, InterruptiblePool


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


class _Finalised:
    def __del__(self) -> None:
        _spin(0.002)


@pytest.fixture
def unraisable() -> Iterator[list[str]]:
    """Every exception the interpreter had to swallow ("Exception ignored in ...")."""
    seen: list[str] = []
    previous = sys.unraisablehook
    sys.unraisablehook = lambda u: seen.append(f"{u.exc_type.__name__} in {u.object!r}")
    try:
        yield seen
    finally:
        sys.unraisablehook = previous


@pytest.fixture
def slow_gc_callback() -> Iterator[None]:
    """A garbage-collector callback that takes most of the job thread's time."""

    def callback(phase: str, info: dict[str, int]) -> None:
        _spin(0.002)

    gc.callbacks.append(callback)
    try:
        yield
    finally:
        gc.callbacks.remove(callback)


def _busy_in_callbacks(seconds: float) -> int:
    """Parses (the kind of work a catalog query does) while the garbage collector and finalisers
    run Python code on the same thread."""
    end = time.perf_counter() + seconds
    n = 0
    while time.perf_counter() < end:
        sqlglot.parse_one("SELECT relname FROM pg_class WHERE relkind = 'r'")
        _Finalised()
        gc.collect(0)
        n += 1
    return n


@pytest.mark.usefixtures("slow_gc_callback")
@pytest.mark.parametrize("late_after", [0.05, 0.2, 0.5])
def test_late_job_stops_outside_callbacks_and_the_next_job_runs(unraisable: list[str], late_after: float) -> None:
    pool = InterruptiblePool(1, "test-catalog")

    async def scenario() -> tuple[float, int]:
        t0 = time.monotonic()
        with pytest.raises(QueryCancelled, match="ran for more than"):
            await pool.run(late_after, _busy_in_callbacks, 30.0)
        stopped = time.monotonic() - t0
        # the same (only) thread runs the next job to its end: no stop is left over for it
        return stopped, await pool.run(5.0, _busy_in_callbacks, 0.3)

    try:
        stopped, after = asyncio.run(scenario())
    finally:
        pool.shutdown()
    assert stopped < late_after + 1.0, stopped
    assert after > 0
    assert unraisable == []


def test_job_errors_and_results_pass_through() -> None:
    pool = InterruptiblePool(1, "test-catalog")

    def job(x: int) -> tuple[int, object]:
        if x < 0:
            raise ValueError(f"negative: {x}")
        return x * 2, sys.gettrace()

    async def scenario() -> tuple[int, object]:
        with pytest.raises(ValueError, match="negative: -1"):
            await pool.run(1.0, job, -1)
        return await pool.run(1.0, job, 21)

    try:
        doubled, tracer_inside = asyncio.run(scenario())
    finally:
        pool.shutdown()
    assert doubled == 42
    assert tracer_inside is not None  # the job ran under the stop tracer


def test_a_debuggers_tracer_is_put_back_after_a_job() -> None:
    from veil.server.pool import _Job

    def outer_tracer(frame: object, event: str, arg: object) -> None:
        return None

    job = _Job(sys.gettrace, ())
    previous = sys.gettrace()
    sys.settrace(outer_tracer)
    try:
        InterruptiblePool._run_job(job)
        after = sys.gettrace()
    finally:
        sys.settrace(previous)
    assert after is outer_tracer
    assert job.future.result() not in (None, outer_tracer)


# --- fair turns between owners (red team s20, A8) ------------------------------------------------

_JOB_S = 0.3


def _jobs_each(size: int, flooders: int) -> int:
    """Jobs each flooder queues: more than two rounds of every thread (first come, first served, carol would start
    no sooner than 0.5 s after she asked, past every bound below), at most 8; and more than one owner may hold."""
    return min(8, -(-3 * size // flooders))


def _start_delays(size: int, flooders: int) -> tuple[float, int]:
    """``flooders`` owners each queue :func:`_jobs_each` jobs of 0.3 s; 0.1 s later carol queues one.
    Returns how long carol's job waited to start, and the most threads one owner held at once."""
    jobs_each = _jobs_each(size, flooders)
    pool = InterruptiblePool(size, "test-fair")
    held: dict[str, int] = {}
    most = [0]
    lock = threading.Lock()

    def job(owner: str) -> float:
        with lock:
            held[owner] = held.get(owner, 0) + 1
            most[0] = max(most[0], held[owner])
        try:
            started = time.monotonic()
            _spin(_JOB_S if owner != "carol" else 0.01)
            return started
        finally:
            with lock:
                held[owner] -= 1

    async def scenario() -> float:
        floods = [
            asyncio.ensure_future(pool.run(30.0, job, f"flooder{f}", owner=f"flooder{f}"))
            for _ in range(jobs_each)
            for f in range(flooders)
        ]
        await asyncio.sleep(0.1)
        asked = time.monotonic()
        started = await pool.run(30.0, job, "carol", owner="carol")
        await asyncio.gather(*floods)
        return started - asked

    try:
        return asyncio.run(scenario()), most[0]
    finally:
        pool.shutdown()


@pytest.mark.slow
@pytest.mark.parametrize(("size", "flooders"), [(2, 1), (3, 1), (3, 2), (2, 3)])
def test_another_owner_waits_for_at_most_one_job(size: int, flooders: int) -> None:
    """However many jobs other owners queue, carol's starts at once while a thread is free to her
    (one owner holds at most size − 1), else as soon as one job ends, never behind the queue
    (first come, first served, she would wait for two or three rounds of jobs: 0.5–0.8 s here)."""
    delay, most = _start_delays(size, flooders)
    assert most <= max(1, size - 1)
    if flooders * max(1, size - 1) < size:  # a thread the flooders cannot take
        assert delay < 0.2, delay
    else:
        assert delay < _JOB_S + 0.2, delay


@pytest.mark.slow
def test_a_lone_owner_uses_all_threads_but_one_and_stopped_jobs_never_run() -> None:
    pool = InterruptiblePool(3, "test-fair")
    ran: list[int] = []
    running = [0, 0]  # now, most
    lock = threading.Lock()

    def job(i: int) -> None:
        with lock:
            running[0] += 1
            running[1] = max(running[1], running[0])
        _spin(0.5)  # far longer than the limit: the first two are still running when the others' time is up
        with lock:
            running[0] -= 1
            ran.append(i)

    async def scenario() -> None:
        queued = [asyncio.ensure_future(pool.run(0.15, job, i, owner="bob")) for i in range(6)]
        outcomes = await asyncio.gather(*queued, return_exceptions=True)
        assert sum(isinstance(o, QueryCancelled) for o in outcomes) >= 2, outcomes  # stopped while queued
        await asyncio.sleep(1.0)

    try:
        asyncio.run(scenario())
    finally:
        pool.shutdown()
    assert running[1] == 2  # all threads but one, no more
    assert len(ran) <= 4, ran  # the jobs stopped in the queue never ran


# --- the analyst pool: the same fair turns, with a concurrent.futures interface ------------------


def _executor_start_delay(size: int, flooders: int) -> tuple[float, int]:
    pool = FairExecutor(size, "test-fair-analyst")
    held: dict[str, int] = {}
    most = [0]
    lock = threading.Lock()

    def job(owner: str, seconds: float) -> float:
        with lock:
            held[owner] = held.get(owner, 0) + 1
            most[0] = max(most[0], held[owner])
        started = time.monotonic()
        time.sleep(seconds)  # an engine run: the GIL is released
        with lock:
            held[owner] -= 1
        return started

    try:
        floods = [
            pool.submit(job, f"f{f}", _JOB_S, owner=f"f{f}") for _ in range(_jobs_each(size, flooders)) for f in range(flooders)
        ]
        time.sleep(0.1)
        asked = time.monotonic()
        started = pool.submit(job, "carol", 0.0, owner="carol").result(30)
        for fut in floods:
            fut.result(30)
        return started - asked, most[0]
    finally:
        pool.shutdown()


@pytest.mark.slow
@pytest.mark.parametrize(("size", "flooders"), [(2, 1), (4, 1), (4, 2), (3, 3)])
def test_the_analyst_pool_serves_another_owner_within_one_job(size: int, flooders: int) -> None:
    delay, most = _executor_start_delay(size, flooders)
    assert most <= max(1, size - 1)
    if flooders * max(1, size - 1) < size:
        assert delay < 0.1, delay
    else:
        assert delay < _JOB_S + 0.1, delay


def test_the_analyst_pool_shuts_down_like_a_thread_pool() -> None:
    ran: list[int] = []

    def job(i: int) -> int:
        time.sleep(0.05)
        ran.append(i)
        return i

    pool = FairExecutor(2, "test-fair-analyst")
    futures = [pool.submit(job, i, owner="bob") for i in range(4)]
    assert futures[3].cancel()  # still waiting: cancelled, never run
    pool.shutdown(wait=True)  # the rest still run
    assert [f.result() for f in futures[:3]] == [0, 1, 2] and sorted(ran) == [0, 1, 2]
    with pytest.raises(RuntimeError):
        pool.submit(job, 9)
    dropping = FairExecutor(2, "test-fair-analyst")
    futures = [dropping.submit(job, i, owner="bob") for i in range(4)]
    dropping.shutdown(wait=False, cancel_futures=True)  # veil serve's stop: the waiting work is dropped
    time.sleep(0.3)
    assert [f.cancelled() for f in futures] == [False, True, True, True]  # bob held 1 of 2 threads
    assert futures[0].result() == 0


@pytest.mark.parametrize("failing_starts", [(0,), (1,), (0, 1, 2)])
def test_a_thread_that_cannot_start_fails_its_job_and_never_blocks_shutdown(failing_starts: tuple[int, ...]) -> None:
    """The OS may refuse a new thread ("can't start new thread" under memory or thread limits): the job
    handed to it fails with that error, the slot is given back, and shutdown(wait=True) still returns
    (it waited forever for a job that never ran: a whole test run hung on it)."""
    pool = FairExecutor(2, "test-fair-start")
    real = pool._executor.submit
    calls = {"n": 0}

    def flaky(fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] - 1 in failing_starts:
            raise RuntimeError("can't start new thread")
        return real(fn, *args, **kwargs)

    pool._executor.submit = flaky  # type: ignore[method-assign]
    futures = [pool.submit(lambda i=i: i, owner=f"o{i}") for i in range(3)]
    done = threading.Event()
    stopper = threading.Thread(target=lambda: (pool.shutdown(wait=True), done.set()), daemon=True)
    stopper.start()
    assert done.wait(5), "shutdown(wait=True) hung after a thread failed to start"
    failed = [f for f in futures if f.exception(timeout=1) is not None]
    assert len(failed) == len(failing_starts) and all("start new thread" in str(f.exception()) for f in failed)
    assert [f.result() for f in futures if f not in failed] == [i for i, f in enumerate(futures) if f not in failed]
