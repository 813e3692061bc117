"""Red team, session 48: the fixes of the last hour (main at ebc04a8, 2026-11-27) — settings given at login
(``startup_settings``, ``VeilSession.init``), ``SET LOCAL`` ending with its transaction
(``SessionSettings.set_statement(in_transaction=)`` / ``end_transaction``), backend PIDs that wrap within int32
(``VeilServer._allocate_pid``), and a ``--processes N`` worker that refuses a public table whose mirror copy it may
not renew (``ServingEngine.writes_warehouse = False``, ``Env._copy_stale_public``).

The rule under attack: Veil charges the ε that ``SHOW veil.epsilon`` reports, and what a PostgreSQL user asked for;
never silently more. In every finding below ``SHOW`` and the ledger agree (the charge is what SHOW says at the time
of the query): what differs is what the client asked for, by PostgreSQL's rules, and what it is charged. No privacy
loss (the ledger is honest); the analyst's budget is spent up to 5,000× faster than asked, without a word.

Findings (each a class below; all fixed by the lead from this round's prototype, in ``veil/server/settings.py``,
``session.py`` and ``connection.py``):

* A1 (MEDIUM, budget drain with a standard driver pool; wire) a setting given at login does not survive a reset.
  PostgreSQL makes a value from the startup packet (``options='-c …'`` or a startup parameter) the session's
  *reset value* (``set_config_option``: ``makeDefault`` for ``PGC_S_CLIENT``), so ``RESET x``, ``SET x TO DEFAULT``,
  ``RESET ALL`` and ``DISCARD ALL`` go back to it. Veil goes back to the policy default. asyncpg's pool runs
  ``RESET ALL`` (its ``_get_reset_query``) on every connection handed back, so
  ``create_pool(…, server_settings={'veil.epsilon': '0.001'})`` is charged 0.001 for the first checkout and the
  policy default (0.5 here, 500×) for every later one; ``SHOW`` says 0.5 by then, nothing else does. pgbouncer's
  ``server_reset_query = DISCARD ALL`` does the same to libpq's ``options``. Fix (``settings.py``/``session.py``):
  ``VeilSession.init`` records the startup settings as the session's defaults, e.g.
  ``self.settings.login_defaults = {name: value}`` after applying them, and ``SessionSettings.reset(name)`` /
  ``reset("all")`` (so ``RESET``, ``TO DEFAULT``, ``RESET ALL``, ``DISCARD ALL``) re-apply
  ``login_defaults[name]`` (through ``set``) instead of ``None``/``False``/``0.0`` and popping ``values``.
* A2 (LOW, budget surprise; wire) ``COMMIT`` puts back the value from before the transaction's first ``SET LOCAL``
  over a *session* change made after it in the same transaction: ``BEGIN; SET LOCAL veil.epsilon = 5;
  SET veil.epsilon = 0.01; COMMIT`` leaves 0.5 (the default, 50× the 0.01 asked; PostgreSQL: "SET … overrides any
  prior action at same nest level", the SET value holds after COMMIT); ``SET veil.epsilon = 5; BEGIN;
  SET LOCAL veil.epsilon = 0.01; RESET veil.epsilon; COMMIT`` leaves 5 (PostgreSQL: the default, RESET is a SET);
  ``DISCARD ALL`` inside the block is accepted (PostgreSQL: 25001 "cannot run inside a transaction block") and its
  reset undone by the COMMIT. Fix (``settings.py``): ``set`` and ``reset`` with ``apply`` not from a ``SET LOCAL``
  drop the name from ``_transaction_local`` (``reset("all")`` clears it), so only names whose last change in the
  transaction was a ``SET LOCAL`` are put back. (PostgreSQL refuses ``DISCARD ALL`` in a block with 25001, but
  ``tests/server/test_protocol.py`` pins it accepted inside psycopg's implicit transaction, so the clearing in
  ``reset("all")`` is the fix that keeps it.)
* A3 (LOW, budget surprise; wire) ``ROLLBACK TO SAVEPOINT`` keeps a ``SET LOCAL`` made after the savepoint
  (PostgreSQL undoes it). psycopg's nested ``with conn.transaction():`` is a savepoint: an inner block that sets
  ``SET LOCAL veil.epsilon = 5`` and fails leaves the outer block's next query charged 5 where it had asked for
  0.01 (500×). Fix (``session.py`` ``_savepoint`` + ``settings.py``): ``SAVEPOINT`` pushes a snapshot of the
  settings (``epsilon``, ``show_ci``, ``statement_timeout``, the three ``values`` entries and a copy of
  ``_transaction_local``) next to ``conn.savepoints``; ``ROLLBACK TO`` restores the named one's snapshot (keeping
  it), ``RELEASE`` drops the snapshots with their savepoints, ``COMMIT``/``ROLLBACK`` clear them.
* A4 (LOW, budget surprise; wire) a ``SET`` refused for the held-settings limit (53400 "too many parameters set")
  has already changed the setting: ``SessionSettings.set`` assigns ``self.epsilon`` (and ``show_ci``,
  ``statement_timeout``) before ``held.check_setting`` raises. The client is told its ``SET veil.epsilon = 5``
  failed and is charged 5 (10× the 0.5 it still believes in). PostgreSQL changes nothing on a failed SET. Fix
  (``settings.py`` ``set``): call ``held.check_setting(self.values, name, value)`` first (when ``apply``), then
  assign.
* A5 (LOW, budget surprise; wire, asyncpg/hand-made clients) the startup packet's precedence is PostgreSQL's turned
  round, and one spelling is still ignored. (a) ``startup_settings`` applies the packet's own parameters, then
  ``options``; PostgreSQL's ``process_startup_options`` applies ``options`` first and the parameters after them, so
  the parameter wins: ``{'veil.epsilon': '0.001', 'options': '-c veil.epsilon=5'}`` is 5 in Veil (5,000×), 0.001 in
  PostgreSQL. Fix: ``for key, value in [*_startup_options(…), *pairs]``. (b) a key ``OPTIONS`` (or ``Options``) is
  dropped whole (``_PROTOCOL_KEYS`` is compared in lower case, ``params.get("options")`` exactly), with any
  ``-c veil.epsilon=…`` in it: the login succeeds and the default is charged. PostgreSQL matches ``options``
  exactly and refuses the other spelling (an unknown parameter, FATAL). Fix: a key whose lower case is a protocol
  key but is not spelled so is refused (42704) when its value names ``veil``, or read as ``options``.
* A6 (LOW, documented divergence; wire) ``SET LOCAL`` in a multi-statement simple Query (``SET LOCAL
  veil.epsilon = 5; SELECT …``) holds for the rest of the session (docs/server.md: "outside a transaction block it
  holds for the session"). PostgreSQL runs such a string as one implicit transaction block (no warning) and ends
  the ``SET LOCAL`` with it, so a user who scoped a larger ε to one query string is charged it for every later one.
  Fix (``connection.py`` ``_handle_simple_query``): when the string holds more than one statement and
  ``tx_status`` is ``I`` at its end, call ``session.settings.end_transaction()``, and pass ``in_transaction=True``
  for a ``SET LOCAL`` inside such a string (a single ``SET LOCAL`` keeps red team s40's session-wide reading).

Every fix above was first checked with the red team's prototype (~60 lines over ``settings.py``, ``session.py`` and
``connection.py``), which the lead landed.

Held (pinned below): ``SET LOCAL`` through the extended protocol and a psycopg pipeline inside a transaction charges
what ``SHOW`` says and ends at ``COMMIT``; a failed transaction's ``ROLLBACK`` ends it too; startup spellings
(``-c name=value``, ``-cname=value``, ``--name=value``, tabs, backslash escapes, a trailing backslash, duplicates:
the last wins, upper-case parameter names) apply what ``SHOW`` then reports, and what cannot be read (an unknown
``veil.*``, ``veil.budget``, a value of 9,000 digits, 1,000 ``-c`` words naming Veil badly) ends the login with a
typed FATAL in well under a second, after the password only; backend PIDs stay within int32 across the wrap, skip
the PIDs of open connections, and keep naming their own worker (``CancelMailbox.owns``) for N = 1…5, and a cancel
request reaches only the connection whose PID *and* secret it carries; a ``--processes N`` worker (``ServingEngine``)
leaves a public table whose mirror copy is stale out of its catalog, refuses queries naming it with F0000 before any
charge, and answers the others; a public table edited in place by another tool (its version comment kept, so the
mirror copy counts as current) is joined at the multiplicity measured on the warehouse's rows, so one person moves a
worker's join count by no more than its sensitivity.
"""

from __future__ import annotations

import asyncio
import itertools
import multiprocessing
import time
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.support.attack import PASSWORD, set_password, wire_connect
from tests.support.attack import wire_rows as _rows
from tests.support.attack import wire_sqlstate as _sqlstate
from tests.support.warehouse import policy_with_tables

POLICY = """\
[database]
path = "w.duckdb"
[ledger]
path = "l.sqlite"
[defaults]
epsilon_per_query = 0.5
[tables.t]
privacy_unit = "u"
max_rows_per_unit = 1
[tables.t.columns]
u = { type = "int" }
x = { type = "int", lower = 0, upper = 10 }
[analysts.a]
epsilon = 10000
"""

_QUERY_IDS = itertools.count()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("s48")
    frame = pd.DataFrame({"u": pd.array(range(20), dtype="Int64"), "x": pd.array([i % 11 for i in range(20)], dtype="Int64")})
    policy_with_tables(folder, POLICY, {"t": frame})
    set_password(folder / "policy.toml", "a")
    return folder / "policy.toml"


@pytest.fixture(scope="module")
def server(world: Path) -> Iterator[Any]:
    from tests.support.server import running_server

    with running_server(world) as st:
        yield st


def _dsn(port: int, **extra: str) -> str:
    tail = " ".join(f"{k}={v}" for k, v in extra.items())
    return f"host=127.0.0.1 port={port} user=a password={PASSWORD} dbname=veil sslmode=disable connect_timeout=20 {tail}"


def _show(conn: Any) -> str:
    return str(_rows(conn, "SHOW veil.epsilon")[0][0])


def _spent(world: Path) -> Fraction:
    from veil.store.ledger import Ledger

    ledger = Ledger(world.parent / "l.sqlite")
    try:
        return ledger.spent("analyst:a").epsilon
    finally:
        ledger.close()


def _fresh_query() -> str:
    """A private query no earlier one matched (the answer cache makes a repeat free)."""
    return f"SELECT COUNT(*) FROM t WHERE x > 3 AND u <> {-1 - next(_QUERY_IDS)}"


def _charge(conn: Any, world: Path) -> Fraction:
    before = _spent(world)
    _rows(conn, _fresh_query())
    return _spent(world) - before


# -- A1: login settings do not survive a reset ---------------------------------------------------------------------


class TestA1LoginSettingsDoNotSurviveAReset:
    """MEDIUM: asyncpg's pool resets each connection handed back with RESET ALL; its server_settings then stop."""

    def test_asyncpg_pool_keeps_its_server_settings_on_every_checkout(self, server: Any, world: Path) -> None:
        import asyncpg

        async def checkouts() -> list[Fraction]:
            pool = await asyncpg.create_pool(
                host="127.0.0.1",
                port=server.port,
                user="a",
                password=PASSWORD,
                database="veil",
                ssl=False,
                min_size=1,
                max_size=1,
                server_settings={"veil.epsilon": "0.001"},
            )
            charged = []
            try:
                for _ in range(2):  # one connection: the second checkout is the first one, reset by the pool
                    async with pool.acquire() as conn:
                        before = _spent(world)
                        await conn.fetch(_fresh_query())
                        charged.append(_spent(world) - before)
            finally:
                await pool.close()
            return charged

        assert asyncio.run(checkouts()) == [Fraction(1, 1000)] * 2, "the pool's reset put the policy default back"

    def test_reset_and_discard_all_go_back_to_the_login_value(self, server: Any, world: Path) -> None:
        import psycopg

        with psycopg.connect(_dsn(server.port, options="'-c veil.epsilon=0.001'"), autocommit=True) as conn:
            for sql in ("RESET veil.epsilon", "SET veil.epsilon TO DEFAULT", "RESET ALL", "DISCARD ALL"):
                _rows(conn, "SET veil.epsilon = 2")
                _rows(conn, sql)
                assert _show(conn) == "0.001", f"{sql} went back to {_show(conn)}, not to the login's 0.001"
            assert _charge(conn, world) == Fraction(1, 1000)


# -- A2: COMMIT undoes a session SET made after a SET LOCAL -------------------------------------------------------


class TestA2CommitUndoesALaterSessionSet:
    """LOW: the SET after a SET LOCAL is what PostgreSQL keeps after COMMIT; Veil keeps what was there before."""

    def test_set_after_set_local_holds_after_commit(self, server: Any, world: Path) -> None:
        conn = wire_connect(server.port, "a")
        try:
            for sql in ("BEGIN", "SET LOCAL veil.epsilon = 5", "SET veil.epsilon = 0.01", "COMMIT"):
                _rows(conn, sql)
            assert _show(conn) == "0.01"
            assert _charge(conn, world) == Fraction(1, 100)
        finally:
            conn.close()

    def test_reset_after_set_local_holds_after_commit(self, server: Any) -> None:
        conn = wire_connect(server.port, "a")
        try:
            for sql in ("SET veil.epsilon = 5", "BEGIN", "SET LOCAL veil.epsilon = 0.01", "RESET veil.epsilon", "COMMIT"):
                _rows(conn, sql)
            assert _show(conn) == "0.5", "RESET in the transaction was undone by its COMMIT"
        finally:
            conn.close()

    def test_discard_all_in_a_block_is_refused_or_holds(self, server: Any) -> None:
        conn = wire_connect(server.port, "a")
        try:
            for sql in ("SET veil.epsilon = 5", "BEGIN", "SET LOCAL veil.epsilon = 0.01"):
                _rows(conn, sql)
            state = _sqlstate(conn, "DISCARD ALL")
            _rows(conn, "ROLLBACK" if state else "COMMIT")
            assert state == "25001" or _show(conn) == "0.5", f"DISCARD ALL: {state}, then SHOW {_show(conn)}"
        finally:
            conn.close()


# -- A3: ROLLBACK TO SAVEPOINT keeps a SET LOCAL made after the savepoint ------------------------------------------


class TestA3RollbackToSavepointKeepsSetLocal:
    """LOW: psycopg's nested transaction block that failed leaves its SET LOCAL charging the outer block."""

    def test_a_failed_inner_block_takes_its_set_local_with_it(self, server: Any, world: Path) -> None:
        conn = wire_connect(server.port, "a")
        try:
            with conn.transaction():
                conn.execute("SET LOCAL veil.epsilon = 0.01")
                with pytest.raises(ZeroDivisionError), conn.transaction():  # SAVEPOINT … ROLLBACK TO SAVEPOINT
                    conn.execute("SET LOCAL veil.epsilon = 5")
                    raise ZeroDivisionError
                assert _show(conn) == "0.01", f"after the inner block rolled back, SHOW says {_show(conn)}"
                assert _charge(conn, world) == Fraction(1, 100)
        finally:
            conn.close()


# -- A4: a refused SET has already changed the setting -------------------------------------------------------------


class TestA4ARefusedSetIsApplied:
    """LOW: '53400 too many parameters set', and yet the ε of the failed SET is charged."""

    def test_in_process(self) -> None:
        from veil.errors import HeldStateLimit
        from veil.server.held import MAX_SETTINGS
        from veil.server.settings import SessionSettings

        for sql in ("SET veil.epsilon = 5", "SET veil.show_ci = on", "SET statement_timeout = '1s'"):
            settings = SessionSettings({f"x.p{i}": "v" for i in range(MAX_SETTINGS)})
            with pytest.raises(HeldStateLimit):
                settings.set_statement(sql, apply=True)
            assert (settings.epsilon, settings.show_ci, settings.statement_timeout) == (None, False, 0.0), sql

    def test_over_the_wire(self, server: Any, world: Path) -> None:
        from veil.server.held import MAX_SETTINGS

        conn = wire_connect(server.port, "a")
        try:
            with conn.pipeline():
                for i in range(MAX_SETTINGS):
                    conn.execute(f"SET x.p{i} = 'v'")
            assert _sqlstate(conn, "SET veil.epsilon = 5") == "53400"
            assert _show(conn) == "0.5", "the SET was refused, and applied"
            assert _charge(conn, world) == Fraction(1, 2)
        finally:
            conn.close()


# -- A5: startup packet precedence and an ignored spelling ---------------------------------------------------------


def _login_show(port: int, extra: dict[str, str]) -> str | None:
    """SHOW veil.epsilon after a hand-made login with ``extra`` startup parameters; None when the login was refused."""
    from tests.adversarial.test_redteam_s46 import _login_with
    from tests.support.server import _msg, _read

    sock = _login_with(port, "a", PASSWORD, extra)
    if sock is None:
        return None
    try:
        sock.sendall(_msg(b"Q", b"SHOW veil.epsilon\x00"))
        shown = "?"
        while True:
            tag, payload = _read(sock)
            if tag == b"D":
                shown = payload[6:].decode()
            if tag == b"Z":
                return shown
    finally:
        sock.close()


class TestA5StartupPrecedence:
    def test_a_startup_parameter_wins_over_options_as_in_postgresql(self, server: Any) -> None:
        for extra in (
            {"veil.epsilon": "0.001", "options": "-c veil.epsilon=5"},
            {"options": "-c veil.epsilon=5", "veil.epsilon": "0.001"},
        ):
            assert _login_show(server.port, extra) == "0.001", extra

    def test_an_options_key_in_another_case_is_applied_or_refused(self, server: Any) -> None:
        for key in ("OPTIONS", "Options"):
            shown = _login_show(server.port, {key: "-c veil.epsilon=0.001"})
            assert shown in (None, "0.001"), f"{key}: logged in, SHOW says {shown} (the setting was ignored)"


# -- A6: SET LOCAL in a multi-statement Query ---------------------------------------------------------------------


class TestA6SetLocalInAMultiStatementQuery:
    def test_set_local_ends_with_its_query_string(self, server: Any, world: Path) -> None:
        conn = wire_connect(server.port, "a")
        try:
            before = _spent(world)
            conn.execute(f"SET LOCAL veil.epsilon = 5; {_fresh_query()}".encode())  # no parameters: one simple Query
            assert _spent(world) - before == 5
            assert _show(conn) == "0.5"
            assert _charge(conn, world) == Fraction(1, 2)
        finally:
            conn.close()


# == held ==========================================================================================================


class TestHeldSetLocal:
    def test_extended_protocol_and_pipeline_charge_what_show_says_and_end_at_commit(self, server: Any, world: Path) -> None:
        conn = wire_connect(server.port, "a")
        try:
            conn.autocommit = False  # psycopg sends BEGIN first
            before = _spent(world)
            with conn.pipeline():
                conn.execute("SET LOCAL veil.epsilon = '1/4'", prepare=True)
                conn.execute(_fresh_query() + " AND x < %s", [11], prepare=True)
                shown = conn.execute("SHOW veil.epsilon")
            assert shown.fetchone() == ("0.25",) and _spent(world) - before == Fraction(1, 4)
            conn.commit()
            conn.autocommit = True
            assert _show(conn) == "0.5" and _charge(conn, world) == Fraction(1, 2)
            # a failed transaction's ROLLBACK ends it too
            for sql in ("BEGIN", "SET LOCAL veil.epsilon = 3"):
                _rows(conn, sql)
            assert _sqlstate(conn, "SELECT nosuch FROM t") is not None
            _rows(conn, "ROLLBACK")
            assert _show(conn) == "0.5" and _charge(conn, world) == Fraction(1, 2)
        finally:
            conn.close()


class TestHeldStartup:
    @pytest.mark.parametrize(
        ("options", "shown"),
        [
            ("-c\tveil.epsilon=0.125", "0.125"),
            ("-cveil.epsilon=0.125", "0.125"),
            ("--veil.epsilon=0.125", "0.125"),
            ("-c veil.epsilon=0.001 -c veil.epsilon=0.125", "0.125"),  # the last one wins, as in PostgreSQL
            ("-c veil.epsilon=0.125\\", "0.125"),  # a trailing backslash escapes nothing
            ("-c VEIL.EPSILON=0.125", "0.125"),
        ],
    )
    def test_spellings_apply_what_show_reports(self, options: str, shown: str) -> None:
        from veil.server.settings import SessionSettings, startup_settings

        settings = SessionSettings({})
        for name, value in startup_settings({"user": "a", "options": options}):
            settings.set(name, value, apply=True)
        assert settings.show("veil.epsilon", default_epsilon=Fraction(1, 2), server_version="").rows == [(shown,)]

    @pytest.mark.parametrize(
        "params",
        [
            {"options": "-c veil.budget=1"},
            {"veil.budget": "1"},
            {"options": "-c veil.epsilon=" + "1" * 9000},
            {"options": " ".join(["-c veil"] * 1000)},
            {"options": "-c veil.epsilon=0.1 -c veil.epsilon=0"},  # a bad later value is not hidden by a good one
        ],
    )
    def test_what_cannot_be_read_ends_the_login_typed_and_fast(self, server: Any, params: dict[str, str]) -> None:
        import psycopg

        from veil.errors import VeilError
        from veil.server.settings import startup_settings

        began = time.thread_time()
        with pytest.raises(VeilError):
            startup_settings({"user": "a", **params})
        assert time.thread_time() - began < 0.5
        if set(params) == {"options"}:
            with pytest.raises(psycopg.OperationalError) as caught:
                psycopg.connect(_dsn(server.port, options="'" + params["options"] + "'"), autocommit=True)
            assert "XX000" not in str(caught.value) and "Traceback" not in str(caught.value)

    def test_startup_settings_are_read_only_after_the_password(self, server: Any) -> None:
        """A bad setting with a wrong password is a failed login (28P01), not a settings error: no work before it."""
        import psycopg

        bad = f"host=127.0.0.1 port={server.port} user=a password=wrong-password dbname=veil sslmode=disable"
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            psycopg.connect(bad + " options='-c veil.epsilon=nonsense'", autocommit=True)


class _FakeConnection:
    def __init__(self, secret: int) -> None:
        self.secret = secret
        self.cancelled = 0

    def request_cancel(self) -> None:
        self.cancelled += 1


@pytest.mark.parametrize("count", [1, 2, 3, 5])
def test_held_backend_pids_wrap_within_int32_and_keep_their_worker(count: int) -> None:
    from pg_mimic.server import PgServer

    from veil.server.app import VeilServer
    from veil.server.limits import ServerLimits
    from veil.server.shared import PID_BASE, CancelMailbox, ProcessShare, SharedState, backend_pid

    state = SharedState(multiprocessing.get_context("spawn"), ServerLimits())
    try:
        for index in range(count):
            share = ProcessShare(index, count, state) if count > 1 else None
            server = VeilServer.__new__(VeilServer)  # only the pid numbering and cancel routing: no policy, no sockets
            PgServer.__init__(server, session_factory=lambda: None)
            server.share = share
            server.mailbox = CancelMailbox(share) if share is not None else None
            slots = (2**31 - PID_BASE) // count
            server._next_pid = PID_BASE + slots - 2  # two startups before the wrap
            wrapped = [PID_BASE + k if share is None else backend_pid(PID_BASE + k, share) for k in range(2)]
            open_conns = {pid: _FakeConnection(secret=7 + k) for k, pid in enumerate(wrapped)}
            server._connections.update(open_conns)  # type: ignore[arg-type]  # still open from 2³¹ startups ago
            pids = [server._allocate_pid() for _ in range(4)]
            assert all(PID_BASE <= p < 2**31 for p in pids), pids
            assert len(set(pids)) == 4 and not set(pids) & set(wrapped), (pids, wrapped)
            if share is not None:
                assert all(CancelMailbox(share).owns(p) for p in pids), pids
                others = [ProcessShare(i, count, state) for i in range(count) if i != index]
                assert not any(CancelMailbox(o).owns(p) for o in others for p in pids)
            # a cancel request reaches only the connection whose pid and secret it carries
            server.cancel(wrapped[0], 8)  # the other connection's secret
            server.cancel(wrapped[1], 7)
            assert [c.cancelled for c in open_conns.values()] == [0, 0]
            server.cancel(wrapped[0], 7)
            assert [c.cancelled for c in open_conns.values()] == [1, 0]
    finally:
        state.close_lock()


# -- held: a worker (ServingEngine) and the public mirror ---------------------------------------------------------

WORKER_POLICY = """\
[database]
path = "w.duckdb"
[ledger]
path = "l.sqlite"
[defaults]
epsilon_per_query = 0.5
[tables.t]
privacy_unit = "row"
[tables.t.columns]
x = { type = "int", lower = 0, upper = 10 }
[tables.pub]
public = true
[tables.pub.columns]
pk = { type = "int" }
pn = { type = "category" }
[analysts.a]
epsilon = 100
"""
PUB = pd.DataFrame({"pk": pd.array([1, 2, 3], dtype="Int64"), "pn": ["p", "q", "r"]})
JOIN_COUNT = "SELECT COUNT(*) AS n FROM t JOIN pub ON pub.pk = t.x"


def _worker_world(folder: Path, xs: list[int]) -> Path:
    policy_with_tables(folder, WORKER_POLICY, {"t": pd.DataFrame({"x": pd.array(xs, dtype="Int64")})}, {"pub": PUB})
    return folder / "policy.toml"


def test_held_a_worker_refuses_a_stale_mirror_copy_free_and_answers_the_rest(tmp_path: Path) -> None:
    from veil.errors import PolicyError
    from veil.policy import load_policy
    from veil.proxy import bounding
    from veil.proxy._testing import exact_session
    from veil.server.workers import ServingEngine
    from veil.store.ledger import Ledger
    from veil.store.warehouse import write_table

    path = _worker_world(tmp_path, [1, 2, 3, 5])
    # reloaded while private (warehouse only, a new version), then declared public again: the mirror keeps 3 rows
    path.write_text(WORKER_POLICY.replace("[tables.pub]\npublic = true\n", "[tables.pub]\n"), encoding="utf-8")
    big = pd.DataFrame({"pk": pd.array([5] * 1000, dtype="Int64"), "pn": ["z"] * 1000})
    write_table(load_policy(path), "pub", big, replace=True)
    path.write_text(WORKER_POLICY, encoding="utf-8")
    policy = load_policy(path)
    assert bounding.prepare(policy) == {}  # what veil serve --processes N builds before its workers start
    engine = ServingEngine(policy)
    try:
        with exact_session(policy, "a", engine=engine) as s:
            assert "pub" not in s._env.catalog().tables
            for sql in (
                "SELECT COUNT(*) FROM pub",
                JOIN_COUNT,
                "SELECT pn, COUNT(*) FROM t JOIN pub ON pub.pk = t.x GROUP BY pn",
            ):
                with pytest.raises(PolicyError, match="declared public, or replaced"):
                    s.execute(sql)
            ledger = Ledger(tmp_path / "l.sqlite")
            try:
                assert ledger.spent("analyst:a").epsilon == 0
            finally:
                ledger.close()
            assert s.execute("SELECT COUNT(*) FROM t").rows == ((4,),)
    finally:
        engine.close()


@pytest.mark.slow
def test_held_a_worker_joins_a_table_edited_in_place_at_the_warehouse_multiplicity(tmp_path: Path) -> None:
    """The s23 A1b class on a worker's session: the mirror copy counts as current (the version comment survives an
    in-place INSERT), the join reads the warehouse's 1,003 rows, and so must the multiplicity probe."""
    from veil.policy import load_policy
    from veil.proxy._testing import exact_session, plan_of
    from veil.server.workers import ServingEngine, prepare_warehouse
    from veil.store import warehouse

    counts: dict[str, int] = {}
    contribution = 0
    for name, xs in (("d", [1, 2, 3]), ("x5", [1, 2, 3, 5])):  # D′ adds one person with x = 5
        path = _worker_world(tmp_path / name, xs)
        policy = load_policy(path)
        with warehouse.writer(policy) as con:  # another tool's in-place edit: the version comment stays
            con.execute("INSERT INTO pub SELECT 5, 'z' FROM range(1000)")
        assert prepare_warehouse(policy) == []  # as veil serve --processes N does before its workers start
        engine = ServingEngine(policy)
        try:
            with exact_session(policy, "a", engine=engine) as s:
                assert s.execute("SELECT COUNT(*) FROM pub").rows == ((3,),)  # the mirror's copy: stale, yet current
                counts[name] = int(s.execute(JOIN_COUNT, epsilon=Fraction(1)).rows[0][0])
                plan = plan_of(s, JOIN_COUNT, Fraction(1))
                contribution = max(contribution, plan.contribution if plan is not None else 0)
        finally:
            engine.close()
    moved = abs(counts["x5"] - counts["d"])
    assert moved == 1000 and moved <= contribution, f"one person moved the count by {moved}, sensitivity {contribution}"
