"""The bounded instances that evaluate public SQL: reused, yet every statement bounded, fresh and cancellable (e3reuse).

Threat class 6 (server abuse). Since s58 E3 a derived public source on a private query's path is evaluated on a DuckDB
instance of its own over the public mirror, under :data:`veil.engines.duckdb.MATERIALISING_MEMORY` with no disk to
spill to. Opening one cost ~15-20 ms per source, so the instances are now kept for the next statement
(:class:`veil.engines.duckdb._Instances`); what reuse must not lose is tested here:

* a **public-only** query (the answer's row cap applies after the engine has built what it groups or sorts) ran on the
  mirror's reader with no bound: a GROUP BY over a public cross product held 2.3 GB before the cap refused it. It now
  runs on a bounded instance too: the family (GROUP BY, DISTINCT, ORDER BY, COUNT(DISTINCT)) is refused free and typed
  (0A000, or the row cap's 54000) through the API and ``veil query``, the mirror's reader holding at most twice the byte
  cap meanwhile (before: 0.4-0.5 GB each); modest public queries answer as the reader did;
* a curator write to the mirror closes the idle instances before the file is opened to write (no instance holds the
  file, none reads it as it was): the next statement sees the new rows;
* a statement that failed (past the bound, cancelled) closes its instance; a cancel landing after a statement ended
  reaches a closed cursor, never the next statement on the instance;
* statements at once each take an instance of their own, so one analyst's source past the bound never fails
  another's (each has its own memory limit);
* a reused instance is still sandboxed and locked.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import duckdb
import pandas as pd
import pytest

from tests.adversarial.test_redteam_s57 import D1B_POLICY
from tests.support.warehouse import policy_with_tables

#: 121³ = 1,771,561 rows of a 200-character public text (as in test_materialisation_memory.py).
CUBE = "ages x JOIN ages y ON TRUE JOIN ages z ON TRUE"
#: Public-only queries whose blocking operator holds its whole input before the answer's row cap can stop it.
PUBLIC_ONLY = {
    "group by": f"SELECT x.a, MAX(y.txt) AS s FROM {CUBE} GROUP BY x.a, y.a, z.a",
    "distinct": f"SELECT DISTINCT x.a, y.a AS b, z.a AS c, y.txt AS s FROM {CUBE}",
    "order by": f"SELECT x.a, y.txt AS s FROM {CUBE} ORDER BY y.txt, z.a, y.a",
    "count distinct": f"SELECT x.a, COUNT(DISTINCT y.txt || z.a) AS s FROM {CUBE} GROUP BY x.a",
}
#: Modest public-only queries, and what they answer.
MODEST = {
    "SELECT a % 3 AS k, COUNT(*) AS n FROM ages GROUP BY a % 3 ORDER BY k": [(0, 41), (1, 40), (2, 40)],
    "SELECT COUNT(DISTINCT a % 7) AS n FROM ages": [(7,)],
    "SELECT DISTINCT a % 2 AS k FROM ages ORDER BY k": [(0,), (1,)],
    "SELECT a FROM ages ORDER BY a DESC LIMIT 2": [(120,), (119,)],
    "SELECT COUNT(*) AS n FROM ages x JOIN ages y ON x.a = y.a": [(121,)],
}
#: A private query over a modest derived public source (built on a bounded instance).
SOURCED = "SELECT COUNT(*) FROM people t JOIN (SELECT a, MAX(txt) AS s FROM ages GROUP BY a) g ON g.a = t.age"
#: The same over a source past the bound (refused free).
TOO_BIG = f"SELECT COUNT(*) FROM people t JOIN ({PUBLIC_ONLY['group by']}) g ON g.a = t.age WHERE g.s IS NOT NULL"


@pytest.fixture(scope="module")
def policy(tmp_path_factory: pytest.TempPathFactory) -> Any:
    people = pd.DataFrame({"pid": list(range(1, 41)), "age": [20 + i for i in range(40)]}).astype("Int64")
    ages = pd.DataFrame({"a": pd.array(range(121), dtype="Int64"), "txt": [f"{i:03d}" + "x" * 197 for i in range(121)]})
    return policy_with_tables(tmp_path_factory.mktemp("reuse"), D1B_POLICY, {"people": people}, {"ages": ages})


@pytest.fixture()
def session(policy: Any) -> Iterator[Any]:
    from veil.proxy._testing import exact_session

    with exact_session(policy, "a") as s:
        yield s


class _ReaderPeak:
    """A spy on the public engine's ``execute`` sampling the mirror's reader (``duckdb_memory()``, from a second cursor
    of it) every 5 ms while each public-only statement runs: its peak bytes."""

    def __init__(self, session: Any, monkeypatch: pytest.MonkeyPatch) -> None:
        engine = session._env.public_engine
        self.policy, self.run = session._env.policy, engine.execute
        self.peaks: list[float] = []
        monkeypatch.setattr(engine, "execute", self)

    def __call__(self, sql: str) -> Any:
        import time

        from veil.store.warehouse import public_reader_cursor

        side, _ = public_reader_cursor(self.policy)
        peak, stop = [0.0], threading.Event()

        def sample() -> None:
            while not stop.is_set():
                row = side.execute("SELECT SUM(memory_usage_bytes) FROM duckdb_memory()").fetchone()
                peak[0] = max(peak[0], float(row[0]) if row else 0.0)
                time.sleep(0.005)

        thread = threading.Thread(target=sample)
        thread.start()
        try:
            return self.run(sql)
        finally:
            stop.set()
            thread.join()
            self.peaks.append(peak[0])


def _bound() -> int:
    from veil.proxy.multiplicity import MAX_MATERIALISED_BYTES

    return 2 * MAX_MATERIALISED_BYTES


@pytest.mark.parametrize("operator", sorted(PUBLIC_ONLY))
def test_a_public_only_query_is_bounded_and_refused_free_and_typed(
    session: Any, monkeypatch: pytest.MonkeyPatch, operator: str
) -> None:
    """Each blocking operator over 1.77M public rows in a public-only query: refused free (0A000 naming the bound, or
    the answer's row cap, 54000), the mirror's reader holding at most twice the byte cap (before: 0.4-0.5 GB)."""
    from veil.engines.duckdb import MATERIALISING_MEMORY
    from veil.errors import Unsupported, ValueTooLarge

    spy = _ReaderPeak(session, monkeypatch)
    spent = session.budget().spent
    with pytest.raises((Unsupported, ValueTooLarge)) as refused:
        session.execute(PUBLIC_ONLY[operator])
    if isinstance(refused.value, Unsupported):
        assert refused.value.sqlstate == "0A000"
        assert f"more than {MATERIALISING_MEMORY >> 20} MiB of memory" in str(refused.value)
        assert refused.value.hint and "WHERE" in refused.value.hint
    else:
        assert refused.value.sqlstate == "54000"
    assert session.budget().spent == spent
    assert spy.peaks and all(p <= _bound() for p in spy.peaks), [f"{p / 1e6:.0f} MB" for p in spy.peaks]


def test_veil_query_refuses_a_public_only_query_past_the_bound(policy: Any) -> None:
    """``veil query`` goes through the same pipeline: exit 2, the SQLSTATE on stderr, nothing on stdout."""
    from click.testing import CliRunner

    from veil.cli.main import cli

    toml = str(policy.database_path.parent / "policy.toml")
    res = CliRunner().invoke(cli, ["query", "--policy", toml, "--analyst", "a", "--", PUBLIC_ONLY["group by"]])
    assert res.exit_code == 2, res.output
    assert "[0A000]" in res.stderr and "MiB of memory" in res.stderr and res.stdout == "", res.output


@pytest.mark.parametrize("sql", sorted(MODEST))
def test_a_modest_public_only_query_answers_as_before(session: Any, sql: str) -> None:
    assert [tuple(r) for r in session.execute(sql).rows] == MODEST[sql]


def _opens(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Record every bounded instance opened from now on."""
    from veil.engines import duckdb as duckdb_engine

    opened: list[Any] = []
    instance = duckdb_engine._bounded_public_instance

    def recorded(*args: Any) -> Any:
        opened.append(instance(*args))
        return opened[-1]

    monkeypatch.setattr(duckdb_engine, "_bounded_public_instance", recorded)
    return opened


def test_statements_reuse_an_idle_instance(session: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Sources built and public queries run one after another open at most one instance between them."""
    opened = _opens(monkeypatch)
    for _ in range(3):
        assert session.execute(SOURCED, epsilon=1.0).rows
        session.explain(SOURCED, epsilon=1.0)
        assert list(session.execute("SELECT COUNT(*) FROM ages").rows) == [(121,)]
    assert len(opened) <= 1


@pytest.mark.parametrize("write", ["write_table", "copy_to_public", "drop_public"])
def test_a_mirror_write_closes_the_idle_instances_and_the_next_statement_reads_the_new_rows(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, write: str
) -> None:
    """Every way the mirror is written closes the idle instances first (under the mirror's exclusive gate: none is in
    use), so a write never races one and the next statement reads the file as written, not as it was."""
    from veil.engines import duckdb as duckdb_engine
    from veil.engines.base import EngineError
    from veil.proxy._testing import exact_session
    from veil.store import warehouse

    people = pd.DataFrame({"pid": list(range(1, 41)), "age": [20 + i for i in range(40)]}).astype("Int64")
    ages = pd.DataFrame({"a": pd.array(range(121), dtype="Int64"), "txt": ["t"] * 121})
    policy = policy_with_tables(tmp_path, D1B_POLICY, {"people": people}, {"ages": ages})
    with exact_session(policy, "a") as s:
        assert list(s.execute("SELECT COUNT(*) FROM ages").rows) == [(121,)]
        mirror = warehouse.public_path(policy).resolve()
        held = [con for (path, _), cons in duckdb_engine._INSTANCES._idle.items() if path == mirror for con in cons]
        assert held
        fewer = pd.DataFrame({"a": pd.array(range(7), dtype="Int64"), "txt": ["u"] * 7})
        if write == "write_table":
            warehouse.write_table(policy, "ages", fewer, replace=True, public=True)
        elif write == "copy_to_public":
            warehouse.copy_to_public(policy, "ages", fewer)
        else:
            warehouse.drop_public(policy, "ages")
        assert not any(path == mirror for path, _ in duckdb_engine._INSTANCES._idle)
        for con in held:  # closed, not merely set aside
            with pytest.raises(duckdb.ConnectionException, match="closed"):
                con.execute("SELECT 1")
        if write == "drop_public":
            with pytest.raises(EngineError):  # the engine itself (a session copies a missing table back first)
                s._env.public_engine.execute("SELECT COUNT(*) FROM ages")
        else:
            assert list(s.execute("SELECT COUNT(*) FROM ages").rows) == [(7,)]
            assert list(s.execute(SOURCED, epsilon=1.0).rows) == [(0,)]  # ages 0-6 meet no age 20-59


def test_a_failed_statement_closes_its_instance_and_the_next_one_is_answered(
    session: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A statement past the bound fails its instance, which is closed, not put back; the next statement answers."""
    from veil.errors import Unsupported

    opened = _opens(monkeypatch)
    with pytest.raises(Unsupported):
        session.execute(PUBLIC_ONLY["count distinct"])
    with pytest.raises(Unsupported):
        session.execute(TOO_BIG, epsilon=1.0)
    for con in opened:
        with pytest.raises(duckdb.ConnectionException, match="closed"):
            con.execute("SELECT 1")
    assert list(session.execute("SELECT COUNT(*) FROM ages").rows) == [(121,)]
    assert session.execute(SOURCED, epsilon=1.0).rows


def test_a_cancel_after_a_statement_ended_never_reaches_the_next_one(session: Any) -> None:
    """Each statement has a cursor of its own on the reused instance: a late cancel finds it closed."""
    for _ in range(3):
        assert list(session.execute("SELECT COUNT(*) FROM ages").rows) == [(121,)]
        session._env.public_engine.cancel()
        session._env.engine.cancel()
        assert session.execute(SOURCED, epsilon=1.0).rows
        session._env.engine.cancel()


def test_a_cancel_reaches_a_public_only_query_running_on_an_instance(session: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from veil.engines import duckdb as duckdb_engine
    from veil.errors import VeilError

    engine = session._env.public_engine
    cursor = duckdb_engine._build_cursor

    def cancelled_soon(*args: Any) -> Any:
        con = cursor(*args)
        threading.Timer(0.05, engine.cancel).start()
        return con

    monkeypatch.setattr(duckdb_engine, "_build_cursor", cancelled_soon)
    with pytest.raises(VeilError, match="cancelled"):
        session.execute(f"SELECT x.a, COUNT(*) AS n FROM {CUBE} JOIN ages w ON TRUE GROUP BY x.a")  # 2e8 rows


def test_statements_at_once_each_have_an_instance_and_one_past_the_bound_fails_only_itself(
    policy: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two sessions at once: each statement holds an instance of its own (its own memory limit) while it runs, so
    one analyst's source past the bound is refused while the other's modest query is answered."""
    from veil.engines import duckdb as duckdb_engine
    from veil.errors import Unsupported
    from veil.proxy._testing import exact_session

    both = threading.Barrier(2, timeout=30)
    instances: list[int] = []
    cursor = duckdb_engine._build_cursor

    def together(instance: Any) -> Any:
        instances.append(id(instance))
        both.wait()  # both statements hold their instance now
        return cursor(instance)

    monkeypatch.setattr(duckdb_engine, "_build_cursor", together)
    outcome: dict[str, object] = {}

    def run(name: str, sql: str) -> None:
        with exact_session(policy, "a") as s:
            try:
                outcome[name] = list(s.execute(sql).rows)
            except Exception as exc:  # recorded, checked below
                outcome[name] = exc

    threads = [
        threading.Thread(target=run, args=("big", PUBLIC_ONLY["group by"])),
        threading.Thread(target=run, args=("modest", "SELECT COUNT(*) FROM ages")),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert isinstance(outcome["big"], Unsupported), outcome["big"]
    assert outcome["modest"] == [(121,)]
    assert len(set(instances)) == 2


def test_a_reused_instance_is_still_sandboxed_and_locked(session: Any) -> None:
    """After statements ran on it, an idle instance still reads no file and has its own bound, locked."""
    from veil.engines import duckdb as duckdb_engine
    from veil.engines.duckdb import MATERIALISING_MEMORY
    from veil.store.warehouse import public_path

    assert list(session.execute("SELECT COUNT(*) FROM ages").rows) == [(121,)]
    mirror = public_path(session._env.policy)
    threads = session._env.public_engine._threads()
    with duckdb_engine._INSTANCES.using(mirror, threads) as instance:
        cur = duckdb_engine._build_cursor(instance)
        try:
            limit = cur.execute("SELECT current_setting('memory_limit')").fetchall()[0][0]
            assert limit.endswith("MiB") and float(limit[:-3]) <= MATERIALISING_MEMORY >> 20, limit
            with pytest.raises(duckdb.Error):
                cur.execute("SELECT * FROM read_csv('/etc/passwd')").fetchall()
            with pytest.raises(duckdb.Error):
                cur.execute("SET memory_limit = '10GB'")
            with pytest.raises(duckdb.Error):
                cur.execute("SET enable_external_access = true")
        finally:
            cur.close()


def test_mirror_writes_racing_statements_never_fail_one_nor_show_rows_no_write_left(tmp_path: Any) -> None:
    """Sessions running public-only queries and building sources in a loop while the curator rewrites the public table
    again and again: every answer is the row count of a version the table held (never a torn or stale-after-close
    read), no statement fails, and no write waits on or races an instance."""
    from veil.proxy._testing import exact_session
    from veil.store import warehouse

    people = pd.DataFrame({"pid": list(range(1, 41)), "age": [20 + i for i in range(40)]}).astype("Int64")
    policy = policy_with_tables(tmp_path, D1B_POLICY, {"people": people}, {"ages": _ages(60)})
    sizes = [60, 61, 62, 63, 64, 65]
    stop, seen, failed = threading.Event(), set(), []

    def reading() -> None:
        with exact_session(policy, "a") as s:
            while not stop.is_set():
                try:
                    seen.add(s.execute("SELECT COUNT(*) FROM ages").rows[0][0])
                    s.explain(SOURCED, epsilon=1.0)
                except Exception as exc:  # recorded, checked below
                    failed.append(exc)

    readers = [threading.Thread(target=reading) for _ in range(2)]
    for t in readers:
        t.start()
    try:
        for n in sizes[1:] * 2:
            warehouse.write_table(policy, "ages", _ages(n), replace=True, public=True)
    finally:
        stop.set()
        for t in readers:
            t.join()
    assert not failed, failed[:3]
    assert seen <= set(sizes) and seen
    with exact_session(policy, "a") as s:
        assert list(s.execute("SELECT COUNT(*) FROM ages").rows) == [(sizes[-1],)]


def _ages(n: int) -> pd.DataFrame:
    return pd.DataFrame({"a": pd.array(range(n), dtype="Int64"), "txt": ["t"] * n})


def test_a_write_landing_between_a_sources_evaluation_and_its_probe_never_fails_the_probe(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The interleaving the racing test above hits about one run in three, forced: the curator rewrites the public
    table right after a private query's derived public source was evaluated into its temporary table and before the
    probe counts it there. Before: the write reopened the reader, the probe ran on a fresh cursor without the table,
    and ``explain`` failed untyped (``the query could not be run: Catalog error``). Now the query's cursor is held from
    the source's evaluation to its probe: the write waits for them (and the explain answers on one version)."""
    from veil.engines.duckdb import DuckDBEngine
    from veil.proxy._testing import exact_session
    from veil.store import warehouse

    people = pd.DataFrame({"pid": list(range(1, 41)), "age": [20 + i for i in range(40)]}).astype("Int64")
    policy = policy_with_tables(tmp_path, D1B_POLICY, {"people": people}, {"ages": _ages(60)})
    created = DuckDBEngine.create_temp
    writes: list[threading.Thread] = []

    def create_then_write(self: Any, name: str, sql: str, max_rows: int) -> int:
        count = created(self, name, sql, max_rows)
        rewrite = {"replace": True, "public": True}
        write = threading.Thread(target=warehouse.write_table, args=(policy, "ages", _ages(61)), kwargs=rewrite)
        writes.append(write)
        write.start()
        while write.is_alive() and not warehouse.writer_waiting(policy):  # the write either lands or waits on the query
            write.join(0.005)
        return count

    monkeypatch.setattr(DuckDBEngine, "create_temp", create_then_write)
    with exact_session(policy, "a") as s:
        s.explain(SOURCED, epsilon=1.0)
    monkeypatch.setattr(DuckDBEngine, "create_temp", created)
    for write in writes:
        write.join()
    assert writes
    with exact_session(policy, "a") as s:
        assert list(s.execute("SELECT COUNT(*) FROM ages").rows) == [(61,)]
        s.explain(SOURCED, epsilon=1.0)
