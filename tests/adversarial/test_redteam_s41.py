"""Red team s41: the ledger off the critical path (``wal_sync``), schema 3's statistic vectors, and timed planning
(``CopyNotReady``, ``public_only``) with the plan cache (main at 57d980f, 2026-11-27).

Findings:

* A1 (LOW; witness ``test_a1_…``; fixed by the lead in ``veil/proxy/pipeline.py``, as proposed below) — an outcome other than
  the answer leaves before its charge is on disk. :meth:`Ledger.reserve` commits with ``synchronous=NORMAL`` and
  starts the WAL's fsync in a worker; only :meth:`Ledger.release` waits for it. A reserved query that ends any other
  way — the engine fails (``QueryFailed``), its statement is cancelled (``QueryCancelled``: "whether a query finishes
  in time may depend on the data", which is what the charge pays for), the post-processing of the noisy answer is
  refused (``QueryRejected``) — raises at once, while the fsync is still running: with a slow disk (the witness
  holds the fsync 0.3 s) the error reaches the client with its charge only in the OS's cache, and a power loss then
  loses the charge of an outcome that was seen. Before 0c5aae7 the reservation committed with ``FULL``, so every
  outcome came after a durable charge. Fix (lead, ``pipeline.run``): when a pass raises while
  ``state.reservation is not None and state.release_id is None``, call ``env.ledger.wait_durable(state.reservation)``
  (public since this round; it raises ``ReleaseError`` if the sync failed) before re-raising, e.g.::

      try:
          state = fn(state, env)
      except BaseException:
          if state.reservation is not None and state.release_id is None:
              env.ledger.wait_durable(state.reservation)
          raise

  (a refunded reservation also waits, harmlessly; ``_reserve`` raising leaves ``state.reservation`` unset).
  The same class on the curator's side (``test_a1_b_…``, fixed in ``veil/store/ledger.py``): a publication refused
  after its charge leaves through a ``finally`` that closes its ledger, and ``Ledger.close`` waited only for release
  rows' fsyncs; it now waits for every reservation's too.
* A2 (LOW; fixed in ``veil/store/ledger.py``; witness ``test_a2_…``) — the worker fsynced ``<path as given>-wal``, or,
  when no such file exists, the database file itself. SQLite names the WAL after the file it opened: through a
  symbolic link ``<target>-wal``, and a relative path is resolved when it opens. Opened through a link (or by a
  relative name after the process changed directory), every reservation's "durable" future synced the database file
  (or another ledger's file of that name) and the answers left with their charges never synced. A policy resolves
  its ``[ledger] path`` when loaded, so ``veil serve`` and the CLI were not affected; the Python API's ``Ledger(path)``
  was. Fix: the ledger syncs the file SQLite reports (``PRAGMA database_list``).
* A3 (LOW; witness ``test_a3_…``; fixed by the lead in ``veil/proxy/session.py``, as proposed below) — the ledger does not
  log what was sent. ``Env.release`` and ``Env._released`` write group keys and answer cells through
  ``to_jsonable(v)``, whose default turns non-finite floats into ``null``: a GROUP BY whose float key reaches ±inf
  (``EXP(x)``, ``POWER(x, 200)``, ``x * 1e306``) is answered with the groups ``inf`` and ``NULL``, logged as two
  groups ``[null]`` (an auditor reading ``release_groups`` or ``get_release`` sees one key twice, and cannot tell
  which values were the NULL group's), and the free repeat from the answer cache returns ``NULL, NULL`` where the
  first answer said ``inf, NULL``. Fix: ``to_jsonable(v, nan_as_null=False)`` in both places (``dumps`` keeps
  ±inf/NaN, and ``json.loads`` reads them back).
* A4 (LOW, server abuse; fixed in ``veil/store/ledger.py`` and ``veil/store/publications.py``; witness
  ``test_a4_…``) — ``published_tables`` replayed the publications by reading the *whole* release log
  (``list_releases()``): every analyst answer ever logged, each with its answer JSON decoded and its statistics read
  (two more statements per release since schema 3). It runs at every catalog build: each new query session — each
  wire connection — and after every publication, retraction or curator write, in every open session. With 20,000
  answers in the ledger one replay took 4.2 s (2-core host, nice 19; 0.17 s at 2,000), so the answers analysts
  are charged for make every later login slower without bound. Fix: ``Ledger.publication_log`` reads only
  publications and retractions (on ``releases_kind``), in commit order: 0.1 ms.

What held (pinned below as ``test_held_*``):

* the answer waits for its reservation's fsync, also on a plan-cache hit;
* schema 3: the logged vectors over ``release_groups`` give, group by group, the values the answer shows — with a NULL
  group, HAVING, ORDER BY … DESC and LIMIT reordering and cutting the rows — and the re-identification audit
  (``mean_from_release``) reads a released class mean as answered;
* timed planning: after a bound is edited, ``plan(build_copies=False)`` does not reuse the plan cache's entry for the
  old bound (its copy name changed: a free ``CopyNotReady``, nothing charged, nothing built), and the planning after
  the build uses the new bound's sensitivity; ``execute(public_only=True)`` of a query that turned private refuses
  free, with the plan cache warm.

Also looked at, no finding: a checkpoint by another connection or process before the worker's fsync (SQLite syncs the
WAL before it checkpoints, the database file after, and restarts the WAL only after both; every connection Veil opens
keeps ``synchronous`` at NORMAL or FULL), the WAL removed at the last close (its frames are then in the synced
database file: the fallback), refunds (committed unsynced: a lost refund leaves the charge), the release row's
fsync and ``Ledger.close`` (waits for them), ``_insert_vectors``' length check (the vectors and groups come from one
index array), ``_timed_planning``'s retry (plans only: no charge either time).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from tests.support.warehouse import policy_with_tables
from veil.engines.base import EngineError
from veil.errors import CopyNotReady, QueryCancelled, QueryFailed, QueryRejected, VeilError
from veil.proxy._testing import exact_session, seeded_session
from veil.store import wal_sync
from veil.store.ledger import Account, Cost, Ledger

POLICY = """\
[database]
path = "w.duckdb"
[ledger]
path = "l.sqlite"
[defaults]
epsilon_per_query = 1
[tables.p]
privacy_unit = "u"
max_rows_per_unit = 1
[tables.p.columns]
u = { type = "int", lower = 0, upper = 100000 }
x = { type = "float", lower = 0, upper = 1000 }
y = { type = "int", values = [0, 1] }
c = { type = "category", values = ["a", "b", "c"] }
[analysts.a]
epsilon = 1000000
"""


def _frame(n: int = 400) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "u": list(range(n)),
            "x": [800.0 if i % 2 else None for i in range(n)],
            "y": [i % 2 for i in range(n)],
            "c": [None if i % 7 == 0 else "abc"[i % 3] for i in range(n)],
        }
    )


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return policy_with_tables(tmp_path_factory.mktemp("rt41"), POLICY, {"p": _frame()})


ALICE = Account.analyst("alice", Fraction(10), Fraction(0))


# -- A1: an outcome other than the answer leaves before its charge is on disk ------------------------------------


def _slow_disk(monkeypatch: pytest.MonkeyPatch, seconds: float) -> list[Future[None]]:
    """Every fsync the ledger starts takes ``seconds`` (a slow disk); the futures, in order."""
    futures: list[Future[None]] = []

    def start(path: Path, *, defer: bool = False) -> Future[None]:
        future: Future[None] = Future()

        def done() -> None:
            try:
                wal_sync.sync_now(path)
            except OSError as exc:
                future.set_exception(exc)
            else:
                future.set_result(None)

        timer = threading.Timer(seconds, done)
        timer.daemon = True
        timer.start()
        futures.append(future)
        return future

    monkeypatch.setattr(wal_sync, "start", start)
    return futures


def _fail_run(message: str) -> Any:
    def run(*args: Any, **kwargs: Any) -> Any:
        raise EngineError(message)

    return run


def _fail_shape(*args: Any, **kwargs: Any) -> Any:
    raise QueryRejected("post-processing of the answer failed (Conversion error)")


@pytest.mark.parametrize(
    ("attribute", "replacement", "error"),
    [
        ("run", _fail_run("the query failed while running (Conversion error)"), QueryFailed),
        ("run", _fail_run("the statement was cancelled"), QueryCancelled),
        ("shape", _fail_shape, QueryRejected),
    ],
    ids=["engine-failure", "cancelled", "post-processing"],
)
def test_a1_an_error_after_the_charge_leaves_only_once_the_charge_is_on_disk(
    world: Any, monkeypatch: pytest.MonkeyPatch, attribute: str, replacement: Any, error: type[VeilError]
) -> None:
    with exact_session(world, "a") as s:
        s.execute("SELECT COUNT(*) FROM p WHERE y = 0", epsilon=0.5)  # the session's ledger and copy are ready
        futures = _slow_disk(monkeypatch, 0.3)
        monkeypatch.setattr(s._env, attribute, replacement)
        before = s.budget().spent
        with pytest.raises(error):
            s.execute("SELECT COUNT(*) FROM p WHERE y = 1", epsilon=0.5)
        durable_when_raised = futures[0].done()
        monkeypatch.undo()
        assert s.budget().spent - before == Fraction(1, 2), "the failed query was not charged"
    assert durable_when_raised, f"{error.__name__} reached the caller while its charge was not yet on disk"


def test_a1_b_a_ledger_closes_only_once_its_charges_are_on_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A publication refused after its charge (the gate, a failed write) leaves through its ``finally``, which closes
    its ledger: ``close`` waited only for release rows' fsyncs, so the refusal reached the curator with the table's
    charge not yet on disk. Now ``close`` waits for every reservation's fsync too."""
    futures = _slow_disk(monkeypatch, 0.3)
    led = Ledger(tmp_path / "l.sqlite")
    led.reserve(Cost(Fraction(1)), [ALICE], actor="alice")
    led.close()
    assert futures and all(f.done() for f in futures), "the ledger closed over a charge not yet on disk"


def test_held_the_answer_waits_for_the_charge_also_on_a_plan_cache_hit(world: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    with exact_session(world, "a") as s:
        s.execute("SELECT COUNT(*) FROM p WHERE x > 100", epsilon=0.25)  # fills the plan cache
        assert s._env.plan_cache, "no plan-cache entry: the hit below would not be one"
        futures = _slow_disk(monkeypatch, 0.3)
        s.execute("SELECT COUNT(*) FROM p WHERE x > 200", epsilon=0.25)
        assert futures and futures[0].done(), "the answer left before its charge was on disk"


# -- A2: the worker synced another file than the WAL SQLite writes --------------------------------------------------


def _synced_files(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    synced: list[tuple[int, int]] = []
    real = os.fsync

    def spy(fd: int) -> None:
        st = os.fstat(fd)
        synced.append((st.st_dev, st.st_ino))
        real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    return synced


def _identity(path: Path) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_dev, st.st_ino


@pytest.mark.parametrize("how", ["symbolic-link", "relative-path-then-chdir"])
def test_a2_the_charge_is_synced_in_the_wal_sqlite_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    real_dir, other = tmp_path / "real", tmp_path / "elsewhere"
    real_dir.mkdir()
    other.mkdir()
    if how == "symbolic-link":
        (tmp_path / "link.sqlite").symlink_to(real_dir / "l.sqlite")
        opened: Path = tmp_path / "link.sqlite"
    else:
        monkeypatch.chdir(real_dir)
        opened = Path("l.sqlite")
    led = Ledger(opened)
    try:
        if how != "symbolic-link":
            monkeypatch.chdir(other)
            Ledger(Path("l.sqlite")).close()  # another ledger of the same name where the process now runs
        synced = _synced_files(monkeypatch)
        reservation = led.reserve(Cost(Fraction(1)), [ALICE], actor="alice")
        assert reservation.durable is not None
        reservation.durable.result(30)
        wal = _identity(real_dir / "l.sqlite-wal")
        assert wal in synced, f"the reservation's fsync did not reach the WAL its commit wrote ({how})"
        synced.clear()
        led.release(reservation, answer={"rows": []})
        led.close()  # waits for the release row's fsync
        assert wal in synced, f"the release row's fsync did not reach the WAL ({how})"
    finally:
        led.close()


# -- A3: the ledger logs another answer than the one sent -------------------------------------------------------


@pytest.mark.parametrize("key", ["EXP(x)", "x * 1e306", "-POWER(x, 200)"])
def test_a3_the_log_and_the_answer_cache_keep_what_was_sent(world: Any, key: str) -> None:
    sql = f"SELECT {key} AS g, COUNT(*) AS n FROM p GROUP BY {key}"
    with exact_session(world, "a") as s:
        first = s.execute(sql, epsilon=0.5)
        assert first.release_id is not None
        with Ledger(world.ledger_path) as led:
            logged = led.get_release(first.release_id)
        repeat = s.execute(sql, epsilon=0.5)
    keys = [row[0] for row in first.rows]
    assert any(isinstance(k, float) and np.isinf(k) for k in keys) and None in keys, f"no ±inf and NULL groups: {keys}"
    groups = [st.group for st in logged.statistics]
    assert len(set(map(repr, groups))) == len(groups), f"the log names one group twice: {groups}"
    assert repeat.cached and repeat.rows == first.rows, f"the free repeat says {repeat.rows}, the answer said {first.rows}"


def test_a3_releases_show_prints_the_logged_non_finite_values(world: Any) -> None:
    """`veil releases --show ID` (what an auditor reads) shows ±inf as PostgreSQL's to_json spells it, not as the
    ``null`` a NULL group is shown as, and stays strict JSON."""
    import json

    from click.testing import CliRunner

    from veil.cli.main import cli

    sql = "SELECT EXP(x) AS g, COUNT(*) AS shown FROM p GROUP BY EXP(x)"  # not an earlier test's (a free repeat)
    with exact_session(world, "a") as s:
        release_id = s.execute(sql, epsilon=0.5).release_id
    assert release_id is not None
    out = CliRunner().invoke(cli, ["releases", "--policy", str(world.path), "--show", str(release_id)])
    assert out.exit_code == 0, out.output
    shown = json.loads(out.output, parse_constant=lambda c: pytest.fail(f"not strict JSON: {c}"))
    groups = [st["group"] for st in shown["statistics"]]
    assert ["Infinity"] in groups and [None] in groups, f"the groups shown: {groups}"


# -- A4: every catalog build read every answer ever logged ------------------------------------------------------


def test_a4_replaying_publications_reads_no_query_release(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from veil.store.publications import published_tables

    policy = policy_with_tables(tmp_path, POLICY)
    with Ledger(policy.ledger_path) as led:
        for i in range(3):  # the answers of an analyst (millions, in a ledger that has served for a while)
            r = led.reserve(Cost(Fraction(1, 10)), [ALICE], actor="alice", cache_key=str(i))
            led.release(r, answer={"rows": [[i]]})
        for kind, table in [("publication", "a"), ("publication", "b"), ("retraction", "a"), ("publication", "a"),
                            ("retraction", "b")]:  # fmt: skip
            led.record(kind=kind, method="m", params={}, metrics={}, table=table)
    read: list[str] = []
    row_to_release = Ledger._row_to_release

    def spy(self: Ledger, row: tuple[Any, ...]) -> Any:
        read.append(row[1])
        return row_to_release(self, row)

    monkeypatch.setattr(Ledger, "_row_to_release", spy)
    assert sorted(published_tables(policy)) == ["a"]
    assert "query" not in read, f"the replay of publications read {read.count('query')} analyst answers"


# -- held: schema 3 logs what the answer shows ----------------------------------------------------------------


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT c, COUNT(*) AS n FROM p GROUP BY c ORDER BY n DESC",
        "SELECT x, COUNT(*) AS n FROM p GROUP BY x ORDER BY x DESC NULLS FIRST",  # private keys, a NULL group
        "SELECT c, COUNT(*) AS n FROM p GROUP BY c HAVING COUNT(*) > 60 ORDER BY c DESC NULLS FIRST LIMIT 2",
        "SELECT c, y, COUNT(*) AS n FROM p WHERE x > 10 OR x IS NULL GROUP BY c, y ORDER BY n, c DESC",
    ],
)
def test_held_logged_vectors_give_each_group_the_value_the_answer_shows(world: Any, sql: str) -> None:
    with seeded_session(world, "a", np.random.default_rng(41)) as s:
        answer = s.execute(sql, epsilon=0.5)
    assert answer.release_id is not None
    with Ledger(world.ledger_path) as led:
        logged = led.get_release(answer.release_id)
    counts = {st.group: st.value for st in logged.statistics if st.name.lower().startswith("count")}
    assert len(counts) == len([st for st in logged.statistics if st.name.lower().startswith("count")])
    nk = len(answer.columns) - 1
    assert answer.rows, "no row answered: nothing to compare"
    if "GROUP BY x" in sql:
        assert [row[0] for row in answer.rows] == [None, 800.0], answer.rows
    for row in answer.rows:
        key = tuple(row[:nk])
        assert key in counts, f"the answer's group {key} is not in the log {sorted(counts, key=repr)}"
        assert counts[key] == row[-1], f"group {key}: answered {row[-1]}, logged {counts[key]}"
    assert logged.answer is not None and [tuple(r) for r in logged.answer["rows"]] == [tuple(r) for r in answer.rows]


def test_held_the_audit_reads_a_released_class_mean_as_answered(world: Any) -> None:
    from veil.auditor.reid import mean_from_release

    with seeded_session(world, "a", np.random.default_rng(7)) as s:
        answer = s.execute("SELECT AVG(x) AS m, COUNT(*) AS n FROM p WHERE y = 1", epsilon=0.5)
    with Ledger(world.ledger_path) as led:
        mean = mean_from_release(led.get_release(answer.release_id or ""))
    assert mean.features == ("x",)
    assert mean.values[0] == pytest.approx(answer.rows[0][0], rel=1e-12)
    assert mean.count == answer.rows[0][1]


# -- held: timed planning after a policy edit, with the plan cache warm ----------------------------------------


@pytest.fixture
def editable(tmp_path: Path) -> Iterator[Any]:
    yield policy_with_tables(tmp_path, POLICY, {"p": _frame(60)})


def _edit(policy: Any, old: str, new: str) -> None:
    path = Path(policy.watch_path)
    text = path.read_text(encoding="utf-8")
    assert old in text
    path.write_text(text.replace(old, new), encoding="utf-8")
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # a stamp that moved, whatever the clock


def test_held_a_timed_planning_after_a_bound_edit_never_hits_the_old_plan(editable: Any) -> None:
    sql = "SELECT SUM(x) FROM p WHERE x > {}"
    with exact_session(editable, "a") as s:
        s.execute(sql.format(100), epsilon=0.5)
        assert s._env.plan_cache, "no plan-cache entry to go stale"
        spent = s.budget().spent
        _edit(editable, "upper = 1000 }", "upper = 2000 }")
        with pytest.raises(CopyNotReady):
            s.plan(sql.format(200), epsilon=0.5, build_copies=False)
        assert s.budget().spent == spent
        s.plan(sql.format(200), epsilon=0.5)  # the untimed build (what veil serve runs before planning again)
        s.plan(sql.format(300), epsilon=0.5, build_copies=False)
        explained = s.explain(sql.format(300), epsilon=0.5)
        answer = s.execute(sql.format(300), epsilon=0.5)
    sensitivities = {float(row["sensitivity"]) for row in explained.rows() if "sum" in str(row["statistic"]).lower()}
    assert sensitivities and max(sensitivities) >= 1000, f"the planning kept the old bound's sensitivity: {sensitivities}"
    assert answer.rows[0][0] == pytest.approx(800.0 * 30)


def test_held_public_only_refuses_a_query_that_turned_private_with_the_cache_warm(tmp_path: Path) -> None:
    text = POLICY + '[tables.r]\npublic = true\n[tables.r.columns]\nk = { type = "int" }\n'
    policy = policy_with_tables(tmp_path, text, {"p": _frame(60)}, {"r": pd.DataFrame({"k": [1, 2, 3]})})
    with exact_session(policy, "a") as s:
        assert s.plan("SELECT COUNT(*) FROM r WHERE k > 1", build_copies=False)
        s.execute("SELECT COUNT(*) FROM r WHERE k > 1", public_only=True)
        spent = s.budget().spent
        _edit(policy, "public = true\n", 'privacy_unit = "row"\n')
        with pytest.raises(VeilError) as refused:
            s.execute("SELECT COUNT(*) FROM r WHERE k > 2", public_only=True)
        assert isinstance(refused.value, CopyNotReady), refused.value
        assert s.budget().spent == spent
