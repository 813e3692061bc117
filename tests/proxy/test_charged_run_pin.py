"""A charged run never ends as a charged failure because a curator write in the process rebuilt the bounded copy.

Threat class 4/6 ("a refused query costs nothing"; a charged runtime error is a deterministic bit, never ε-DP).
Review s18b LOW-2: a charged DuckDB run without materialised public sources was not pinned, so another thread of the
process (a policy reload, another session's table write and first query) could rebuild the bounded copy — and drop
the copy the planned statements read — between the plan and the run, or between two statements of one run; the run
then failed charged (QueryFailed, "a bug in Veil"). Every charged DuckDB run now holds the reader in place from a
last check that the reader generation the plan was made on is still current to its last statement: a write before
the check refunds and refuses (CopyNotReady, 55000, "run it again"); a write after it waits for the run to end.

The interleavings are forced deterministically: hooks on the pipeline's passes, the ledger's reservation and the
engine's ``execute`` start the concurrent write in another thread at that point, and wait until it either ended or
waits for the reader gate (``warehouse.writer_waiting``; a fixed-sleep poll is the hang guard, no clock is read).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from veil.errors import CopyNotReady
from veil.policy import load_policy
from veil.proxy import pipeline
from veil.proxy._testing import exact_session
from veil.store import warehouse

POLICY = """
[database]
path = "warehouse.duckdb"
[ledger]
path = "ledger.sqlite"
[defaults]
epsilon_per_query = 0.25

[tables.trips]
privacy_unit = "pid"
max_rows_per_unit = 2
epsilon_total = 1000000
delta_total = 0.5
[tables.trips.columns]
pid = { type = "int", lower = 0, upper = 1000 }
city = { type = "category", values = ["a", "b", "c"] }
fare = { type = "float", lower = 0, upper = FARE_UPPER }

[tables.pick]
public = true
[tables.pick.columns]
key = { type = "category" }
grp = { type = "int" }

[analysts.api]
epsilon = 10000000
delta = 0.9
"""

#: Charged shapes, each with how many statements it runs: several (a grid per quantile beside the main statement), or
#: one that prepare binds ahead (a group key that is not a bare column), or one bound when it runs.
SHAPES = {
    "grouped COUNT+AVG+MEDIAN": ("SELECT city, COUNT(*), AVG(fare), MEDIAN(fare) FROM trips GROUP BY city", 2),
    "quantile beside a count": ("SELECT QUANTILE_CONT(fare, 0.25), COUNT(*) FROM trips", 2),
    "user-level AVG by a derived key": ("SELECT UPPER(city), COUNT(*), AVG(fare) FROM trips GROUP BY UPPER(city)", 1),
    "join with a public table": (
        "SELECT p.grp, COUNT(*), AVG(t.fare), MEDIAN(t.fare) FROM trips t JOIN pick p ON p.key = t.city GROUP BY p.grp",
        2,
    ),
    "COUNT+AVG bound when it runs": ("SELECT COUNT(*), AVG(fare) FROM trips", 1),
}


def _rows(offset: int) -> pd.DataFrame:
    rows = [{"pid": p, "city": "abc"[p % 3], "fare": float((p + offset) % 7)} for p in range(1, 40)]
    return pd.DataFrame(rows).astype({"pid": "Int64"})


def _build(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "policy.toml"
    path.write_text(POLICY.replace("FARE_UPPER", "10"), encoding="utf-8")
    policy = load_policy(path)
    warehouse.write_table(policy, "trips", _rows(0), replace=True)
    pick = pd.DataFrame({"key": ["a", "b", "c"], "grp": pd.array([0, 1, 2], dtype="Int64")})
    warehouse.write_table(policy, "pick", pick, replace=True, public=True)
    return path


def _new_data(path: Path) -> None:
    """Another session's table write and first query: a new data version, its copy built, the old copy dropped."""
    warehouse.write_table(load_policy(path), "trips", _rows(3), replace=True)
    with exact_session(path, "api") as other:
        other._env.bounded_table("trips")


def _new_policy(path: Path) -> None:
    """A policy edit picked up by another session: a new spec, its copy built, the old copy dropped."""
    path.write_text(POLICY.replace("FARE_UPPER", "20"), encoding="utf-8")
    with exact_session(path, "api") as other:
        other._env.bounded_table("trips")


def _public_write(path: Path) -> None:
    """A curator write of the joined public table (the reader reopens; the copy stays): key 'a' now joins two rows, so
    each of its people counts twice in group 0, where the plan measured (and priced) one."""
    pick = pd.DataFrame({"key": ["a", "b", "c", "a"], "grp": pd.array([0, 1, 2, 0], dtype="Int64")})
    warehouse.write_table(load_policy(path), "pick", pick, replace=True, public=True)


WRITES: dict[str, Callable[[Path], None]] = {"new data": _new_data, "policy edit": _new_policy, "public write": _public_write}


class _Concurrent:
    """One curator write in another thread, started at a hook point, and waited for until it ended or waits for the
    reader gate (a charged run holds it)."""

    def __init__(self, path: Path, write: Callable[[Path], None]) -> None:
        self.path, self.write = path, write
        self.thread: threading.Thread | None = None
        self.error: list[BaseException] = []

    def _target(self) -> None:
        try:
            self.write(self.path)
        except BaseException as exc:  # reported by the test
            self.error.append(exc)

    def start(self) -> None:
        if self.thread is not None:
            return
        self.thread = threading.Thread(target=self._target, daemon=True)
        self.thread.start()
        policy = load_policy(self.path)
        for _ in range(1000):  # hang guard: 10 s of polls
            if not self.thread.is_alive() or warehouse.writer_waiting(policy):
                return
            time.sleep(0.01)
        raise AssertionError("the concurrent write neither ended nor waited for the reader gate")

    def join(self) -> None:
        if self.thread is None:
            raise AssertionError("the hook never fired: the interleaving was not exercised")
        self.thread.join(timeout=30)
        assert not self.thread.is_alive(), "the concurrent write never ended (a deadlock with the pin?)"
        assert not self.error, self.error


def _spent(session: Any) -> Any:
    return session._env.ledger.spent("analyst:api").epsilon


def _hook(point: str, session: Any, concurrent: _Concurrent, monkeypatch: pytest.MonkeyPatch, statements: list[str]) -> None:
    """Start ``concurrent`` at ``point`` of the next charged query on ``session``."""
    env = session._env
    charged = threading.Event()
    reserve = env.ledger.reserve

    def reserve_then(*args: Any, **kwargs: Any) -> Any:
        out = reserve(*args, **kwargs)
        charged.set()
        if point == "after the reservation":
            concurrent.start()
        return out

    monkeypatch.setattr(env.ledger, "reserve", reserve_then)
    if point == "after prepare":
        prepare = dict(pipeline.PASSES)["prepare"]

        def prepare_then(state: Any, e: Any) -> Any:
            out = prepare(state, e)
            concurrent.start()
            return out

        passes = tuple((n, prepare_then if n == "prepare" else f) for n, f in pipeline.PASSES)
        monkeypatch.setattr(pipeline, "PASSES", passes)
    execute = env.engine.execute

    def execute_then(sql: str) -> Any:
        out = execute(sql)
        if charged.is_set():
            statements.append(sql)
            if point == "between statements":
                concurrent.start()
        return out

    monkeypatch.setattr(env.engine, "execute", execute_then)


POINTS = ("after prepare", "after the reservation", "between statements")


@pytest.fixture()
def world(tmp_path: Path) -> Iterator[Path]:
    yield _build(tmp_path / "w")


#: Every shape against a rebuild of its copy (new data), at every point; the two other writes against a shape of two
#: statements with and without a public table.
CASES = [
    (shape, write, point)
    for shape, (_, count) in SHAPES.items()
    for write in WRITES
    for point in POINTS
    if (write == "new data" or shape in ("grouped COUNT+AVG+MEDIAN", "join with a public table"))
    and (count > 1 or point != "between statements")
]


@pytest.mark.parametrize(("shape", "write", "point"), CASES)
def test_a_concurrent_write_never_leaves_a_charged_failure(
    world: Path, monkeypatch: pytest.MonkeyPatch, shape: str, write: str, point: str
) -> None:
    """Refused free before the pin (the plan's reader is gone), answered from one reader after it (the write
    waits); never charged and failed."""
    sql, count = SHAPES[shape]
    with exact_session(world, "api") as s:
        s.execute(sql)  # the copy is built and the plan cached: the query below plans as it would in steady use
        concurrent, statements = _Concurrent(world, WRITES[write]), []
        _hook(point, s, concurrent, monkeypatch, statements)
        before = _spent(s)
        try:
            answer = s.execute(sql, epsilon=0.5)
        except CopyNotReady as exc:  # refused: free, typed, "run it again"
            assert exc.sqlstate == "55000" and "nothing was charged" in exc.message, exc.message
            assert (exc.hint or "").startswith("Run the query again")
            assert _spent(s) == before
        else:  # answered: charged once, from one generation of the copy and of the public table
            assert answer.rows and _spent(s) > before
            assert len(statements) == count, statements
            if "JOIN pick" in sql:  # one version of the public table, the one its plan measured: the old one (one
                # row per key) or, after a free re-plan on the new reader (WarehouseChanged, retried), the write's
                got = sorted(row[:2] for row in answer.rows)
                assert got in ([(0, 13), (1, 13), (2, 13)], [(0, 26), (1, 13), (2, 13)]), answer.rows
        concurrent.join()
        monkeypatch.undo()
        assert s.execute(sql, epsilon=0.5).rows  # asked again, answered


def test_a_write_that_waits_for_a_charged_run_lets_it_finish_and_then_runs(world: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The run that holds the pin answers from the copy it planned on; the write then runs, and the next query reads
    the new copy (no deadlock, no charged failure)."""
    sql = SHAPES["grouped COUNT+AVG+MEDIAN"][0]
    with exact_session(world, "api") as s:
        s.execute(sql)
        concurrent, statements = _Concurrent(world, _new_data), []
        _hook("between statements", s, concurrent, monkeypatch, statements)
        first = s.execute(sql, epsilon=0.5)  # not the answer cache's: run and charged
        concurrent.join()
        assert len(statements) == 2
        monkeypatch.undo()
        after = s.execute(sql, epsilon=0.6)
        assert first.rows != after.rows  # the first read the old data throughout, the second the new
