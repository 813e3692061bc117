"""The reader gate of a warehouse file prefers writers: a charged run's pin cannot starve a curator write.

A charged DuckDB run holds the gate from its last check to its last statement (``Env.pinned``). With many sessions
the holds overlap; a gate that let new readers in while a write waited would let the write wait forever. While a
write waits, a thread that holds no read waits behind it; a thread that holds one (the pinned run's next statement)
goes on — so the run ends, the write runs, and the new readers follow (no deadlock, no starvation).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from veil.store import warehouse


def _until(condition: threading.Event | None = None, *, waiting: Path | None = None) -> None:
    """Hang guard: poll (a fixed sleep, no clock) until ``condition`` is set or a writer waits on ``waiting``."""
    for _ in range(1000):
        if (condition is not None and condition.is_set()) or (waiting is not None and warehouse.writer_waiting(waiting)):
            return
        time.sleep(0.01)
    raise AssertionError("the other thread never got there")


def test_a_waiting_write_goes_before_new_readers_and_after_the_held_ones(tmp_path: Path) -> None:
    path = tmp_path / "w.duckdb"
    order: list[str] = []
    held, release = threading.Event(), threading.Event()

    def pinned_run() -> None:
        with warehouse.reading(path):
            held.set()
            release.wait(10)
            with warehouse.reading(path):  # the run's next statement, while the write waits: not held back
                order.append("held run's next statement")

    def write() -> None:
        with warehouse._gate(warehouse._db_path(path)).exclusive():
            order.append("write")

    def new_query() -> None:
        with warehouse.reading(path):
            order.append("new query")

    threads = [threading.Thread(target=pinned_run)]
    threads[0].start()
    _until(held)
    threads.append(threading.Thread(target=write))
    threads[1].start()
    _until(waiting=path)
    entered = threading.Event()
    threads.append(threading.Thread(target=lambda: (new_query(), entered.set())))
    threads[2].start()
    assert not entered.wait(0.2), "a new reader went in while a write waited (the write could wait forever)"
    release.set()
    for t in threads:
        t.join(10)
        assert not t.is_alive(), "deadlock"
    assert order == ["held run's next statement", "write", "new query"]
    assert not warehouse.writer_waiting(path)


def test_a_stream_of_overlapping_reads_does_not_starve_a_write(tmp_path: Path) -> None:
    """Readers that keep the gate held between them (each starts before the last ends) let a waiting write in once
    the ones holding it when it asked have ended."""
    path = tmp_path / "w.duckdb"
    wrote, stop = threading.Event(), threading.Event()
    turns = [0]

    def reader(first: threading.Event) -> None:
        while not stop.is_set() and turns[0] < 400:
            with warehouse.reading(path):
                first.set()
                turns[0] += 1
                time.sleep(0.002)

    ready = [threading.Event(), threading.Event()]
    readers = [threading.Thread(target=reader, args=(e,)) for e in ready]
    for t in readers:
        t.start()
    for e in ready:
        _until(e)

    def write() -> None:
        with warehouse._gate(warehouse._db_path(path)).exclusive():
            wrote.set()

    writer = threading.Thread(target=write)
    writer.start()
    writer.join(10)
    stop.set()
    for t in readers:
        t.join(10)
    assert wrote.is_set() and turns[0] < 400, f"the write waited through {turns[0]} reads"
