"""Red team, session 36: accounting (budgets, refunds, the answer cache, policy changes under live sessions) and the
wire protocol paths (extended protocol, prepared statements, portals, cursors, COPY, batches, transactions, SET).

Part A holds attacks that succeeded on main at 99d2e3c (2026-11-27); each test failed there. Part B holds probes of
defences that held (they pass, and fail if the defence breaks).

Findings (details in each test's docstring):

* A1 (MEDIUM, budget bypass; API, wire) a policy watch stamped the file *when the watch was made*, not when the
  policy it holds was read: ``_PolicyWatch`` (every ``QuerySession``) and ``LivePolicy`` (``veil serve``) took
  ``os.stat`` in their constructors. A policy read before a curator's edit and handed to one of them afterwards was
  taken as the edited file, and kept until the *next* edit: a lowered budget, a removed analyst, a raised minimum ε
  or a new table cap never applied. ``veil serve`` reads the policy, builds every bounded copy (time that grows with
  the warehouse), and only then makes its ``LivePolicy``: an edit made while it starts is ignored for every
  connection. Each wire connection reads the policy, then builds its ``QuerySession`` on the analyst's worker pool,
  where it waits while that analyst's threads are busy (the analyst decides how long): an edit made meanwhile is
  ignored for the whole connection. Fixed: ``load_policy`` records the file's stamp *before* reading it
  (``Policy.file_stamp``) and both watches compare against that.
* A2 (LOW, wrong answers; no privacy loss) the answer cache's key named a public table the query joins by its name
  only: after the curator rewrote that table, the same query got its old answer back, free (old groups, old joins,
  noise for the old multiplicity), in every session. Fixed: the key holds each public table's written version.
* A3 (LOW, budget surprise; wire) ``SHOW veil.epsilon`` named the policy default the session read at its last
  query, not the one its next query is charged after the curator changed ``epsilon_per_query``. Fixed.
* Held (Part B, and by hand over psycopg against a real ``veil serve``): a prepared statement re-executed with new
  parameters is charged once per distinct value (repeats from the cache); Describe and Parse charge nothing;
  ``ROLLBACK`` refunds nothing; ``COPY (SELECT …) TO STDOUT`` is refused free (42501); each statement of a
  simple-query batch is charged once; a pipeline whose second statement fails charges the first only (the third is
  skipped, free); a named (DECLARE) cursor fetched row by row is charged once; asyncpg's ``prepare`` (Parse +
  Describe) is free, its ``fetch`` charged once per distinct value, and its transaction cursor (Execute with a row
  limit, the portal suspended between fetches) charged once; ``SET "veil.epsilon"`` and
  ``set_config('veil.epsilon', …)`` change nothing and ``SHOW veil.epsilon`` always names the ε charged; a DuckDB
  interrupt with no statement running does not carry over to the next statement (a cancel of an idle session cannot
  cut the next charged query); the answer cache's key holds the generated statements, so two queries share an entry
  only when the engine runs the same text on the same bounded copy.
"""

from __future__ import annotations

import itertools
import shutil
from collections.abc import Callable, Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from tests.adversarial.test_redteam_s4 import POLICY, PUB, TARGET_ROW, _base_rows, _frame
from veil.errors import BudgetExhausted, PolicyError, QueryRejected, VeilError

_ANALYST_B = "[analysts.b]\nepsilon = 1000000\ndelta = 0.5\n"


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One world (policy, warehouse with ``t`` and ``pub``, ledger with passwords for a and b), copied per test."""
    from tests.support.attack import set_password
    from veil.policy import load_policy
    from veil.proxy.session import QuerySession
    from veil.store.warehouse import write_table

    folder = tmp_path_factory.mktemp("s36") / "world"
    folder.mkdir()
    path = folder / "policy.toml"
    path.write_text(POLICY, encoding="utf-8")
    policy = load_policy(path)
    write_table(policy, "pub", PUB, replace=True, public=True)
    write_table(policy, "t", _frame(sorted([*_base_rows(), TARGET_ROW], key=lambda r: r["u"])), replace=True)
    with QuerySession(policy, "a") as s:
        s.explain("SELECT COUNT(*) FROM t")  # the mirror and catalog, once
    for who in ("a", "b"):
        set_password(path, who)
    return folder


def _world(template: Path, tmp_path: Path) -> Path:
    folder = tmp_path / "world"
    shutil.copytree(template, folder)
    return folder / "policy.toml"


# ==================================================================================================
# Part A — attacks that succeeded on main at 99d2e3c
# ==================================================================================================


def _lower_budget(text: str) -> str:
    return text.replace("[analysts.a]\nepsilon = 1000000", "[analysts.a]\nepsilon = 0.1")


def _remove_b(text: str) -> str:
    return text.replace(_ANALYST_B, "")


def _raise_minimum(text: str) -> str:
    return text.replace("epsilon_per_query = 0.01\n", "epsilon_per_query = 1\nmin_epsilon_per_query = 1\n")


def _cap_table(text: str) -> str:
    return text.replace('[tables.t]\nprivacy_unit = "row"\n', '[tables.t]\nprivacy_unit = "row"\nepsilon_total = 0.1\n')


#: A curator's edit, the analyst it concerns, and the refusal it must cause (free) from then on.
EDITS: dict[str, tuple[Callable[[str], str], str, type[VeilError]]] = {
    "budget lowered": (_lower_budget, "a", BudgetExhausted),
    "analyst removed": (_remove_b, "b", PolicyError),
    "minimum epsilon raised": (_raise_minimum, "a", QueryRejected),
    "table cap declared": (_cap_table, "a", BudgetExhausted),
}


def _edit(path: Path, edit: Callable[[str], str]) -> None:
    text = path.read_text(encoding="utf-8")
    edited = edit(text)
    assert edited != text, "the edit did not apply"
    path.write_text(edited, encoding="utf-8")


@pytest.mark.parametrize("name", list(EDITS))
def test_A1_a_session_made_from_a_policy_read_before_an_edit_applies_the_edit(template: Path, tmp_path: Path, name: str) -> None:
    """MEDIUM (budget bypass; the Python API, and every wire connection — see the wire tests below).

    Attack: the curator edits the policy (lowers a budget, removes an analyst, raises the minimum ε, declares a table
    cap) after a policy object was read from the file and before a ``QuerySession`` is made from it. ``_PolicyWatch``
    stamped the file in its constructor, so the edited file counted as the one the session holds: the session
    answered under the old policy (ε = 0.5 charged against a budget lowered to 0.1; a removed analyst answered) until
    the file changed again. Root cause: ``veil/proxy/session.py`` ``_PolicyWatch.__init__`` (``os.stat`` now, not
    when the policy was read). A correct watch compares the file with its stamp from before the read."""
    from veil.policy import load_policy
    from veil.proxy.session import QuerySession

    path = _world(template, tmp_path)
    edit, analyst, refusal = EDITS[name]
    read_before = load_policy(path)
    _edit(path, edit)
    with QuerySession(read_before, analyst) as s, pytest.raises(refusal):
        s.execute("SELECT COUNT(*) AS n FROM t", epsilon=0.5)


def test_A1_the_server_policy_made_from_a_policy_read_before_an_edit_applies_the_edit(template: Path, tmp_path: Path) -> None:
    """MEDIUM: ``veil serve``'s ``LivePolicy`` (every login and every new connection) had the same flaw: ``serve()``
    builds the bounded copies between reading the policy and making the server, and an edit made meanwhile was
    never seen."""
    from veil.policy import load_policy
    from veil.server.live_policy import LivePolicy

    path = _world(template, tmp_path)
    read_before = load_policy(path)
    _edit(path, _remove_b)
    assert "b" not in LivePolicy(read_before).current().analysts


def _psycopg_error(port: int, user: str, sql: str) -> str | None:
    """The SQLSTATE ``user``'s connection (or login) ends with, None if ``sql`` was answered."""
    import psycopg

    from tests.support.attack import wire_connect

    try:
        conn = wire_connect(port, user)
    except psycopg.OperationalError:
        return "login refused"  # libpq reports a refused login without its SQLSTATE
    try:
        with conn.cursor() as cur:
            cur.execute(b"SET veil.epsilon = 0.5")
            cur.execute(sql.encode())
            cur.fetchall()
        return None
    except psycopg.Error as exc:
        return exc.sqlstate
    finally:
        conn.close()


def test_A1_veil_serve_applies_an_edit_made_while_it_started(template: Path, tmp_path: Path) -> None:
    """MEDIUM (wire): the server is made from the policy read before the edit (what ``serve()`` does after building
    the bounded copies). Before the fix, b (removed) logged in and was answered, and a was charged 0.5 against a
    budget lowered to 0.1."""
    from veil.policy import load_policy
    from veil.server.app import ServerThread, VeilServer

    path = _world(template, tmp_path)
    read_before = load_policy(path)
    _edit(path, lambda t: _lower_budget(_remove_b(t)))
    with ServerThread(VeilServer(read_before), port=0) as st:
        assert _psycopg_error(st.port, "b", "SELECT COUNT(*) AS n FROM t") == "login refused", "a removed analyst logged in"
        assert _psycopg_error(st.port, "a", "SELECT COUNT(*) AS n FROM t") == "VB001", "the lowered budget did not apply"


def test_A1_a_connection_applies_an_edit_made_while_its_session_was_queued(template: Path, tmp_path: Path) -> None:
    """MEDIUM (wire): a connection reads the policy (``VeilSession.init``), then builds its ``QuerySession`` on the
    analyst pool, queued behind the analyst's own running statements for as long as the analyst keeps them running.
    The curator's edit lands in that gap here (the factory edits the file before building the session, as a queued
    job would find it). Before the fix the connection kept a's old budget for its whole life (0.5 charged against a
    budget lowered to 0.1)."""
    from veil.policy import Policy, load_policy
    from veil.proxy.session import QuerySession
    from veil.server.app import ServerThread, VeilServer

    path = _world(template, tmp_path)
    edited: list[bool] = []

    def factory(policy: Policy, analyst: str, **kwargs: Any) -> QuerySession:
        if not edited:
            _edit(path, _lower_budget)
            edited.append(True)
        return QuerySession(policy, analyst, **kwargs)

    with ServerThread(VeilServer(load_policy(path), query_session_factory=factory), port=0) as st:
        assert _psycopg_error(st.port, "a", "SELECT COUNT(*) AS n FROM t") == "VB001", "the lowered budget did not apply"
    assert edited


#: Private queries whose answer depends on a public table's rows: its join keys, its multiplicities, its key domain.
PUBLIC_READS = [
    "SELECT pub.pn, COUNT(*) AS n FROM t JOIN pub ON pub.pk = t.x GROUP BY pub.pn",
    "SELECT COUNT(*) AS n FROM t JOIN pub ON pub.pk = t.x",
    "SELECT COUNT(*) AS n FROM t JOIN (SELECT DISTINCT pk FROM pub WHERE pn <> 'r') AS d ON d.pk = t.x",
]


@pytest.mark.parametrize("sql", PUBLIC_READS)
def test_A2_the_answer_cache_is_not_reused_after_a_public_table_it_read_was_rewritten(
    template: Path, tmp_path: Path, sql: str
) -> None:
    """LOW (wrong answers; no privacy loss; every interface — the cache is in the ledger).

    Attack: ask a private query that joins a public table, let the curator rewrite that table (``veil ingest`` /
    ``write_table``: new keys, a key repeated five times), ask again. The answer cache's key held the canonical SQL,
    the ε and the generated statements — which name the private table's bounded copy (its data version and policy
    spec) but name a public table only by its name — so the old answer came back at no cost: the old groups (a new
    key's group missing), counts joined on the old rows, noise scaled for the old multiplicity (sensitivity 1 where
    the plan now says 5), in this session and in every new one. Asking again cannot reveal more than the logged
    answer did, so nothing leaks; but docs/ledger.md promises an answer is reused only for the same data. Root
    cause: ``veil/proxy/pipeline.py`` ``_prepare`` (the cache key). Fixed: the key also holds the written version
    of every public table the query reads (the ledger's catalog generation where a table has none)."""
    import pandas as pd

    from veil.policy import load_policy
    from veil.proxy._testing import exact_session
    from veil.store.warehouse import write_table

    path = _world(template, tmp_path)
    policy = load_policy(path)
    with exact_session(policy, "a") as s:
        first = s.execute(sql, epsilon=1)
        assert first.epsilon_charged == 1
        rewritten = pd.DataFrame(
            {"pk": pd.array([1, 2, 2, 2, 2, 2, 3, 4], dtype="Int64"), "pn": ["p", "q", "q", "q", "q", "q", "r", "z"]}
        )
        write_table(policy, "pub", rewritten, replace=True, public=True)
        again = s.execute(sql, epsilon=1)
        assert again.epsilon_charged == 1, f"answered from the cache after pub was rewritten: {again.rows}"
        with exact_session(load_policy(path), "a") as fresh:
            assert fresh.execute(sql, epsilon=1).rows == again.rows
        assert s.execute(sql, epsilon=1).epsilon_charged == 0, "the same query on the same data is cached"


def test_A3_show_epsilon_names_the_default_the_next_query_is_charged_after_a_policy_edit(template: Path, tmp_path: Path) -> None:
    """LOW (a budget surprise; no privacy loss; wire).

    Attack (on the analyst): the curator raises ``epsilon_per_query`` from 0.01 to 0.5 while a connection is open.
    ``SHOW veil.epsilon`` answered from the policy the session read at its last query (0.01), while the next query
    re-read the file and was charged 0.5: fifty times what the server had just said. Root cause:
    ``veil/server/session.py`` ``_show`` (``query_session.policy``, never refreshed). Fixed: SHOW re-reads the policy
    as a query does (``QuerySession.default_epsilon``)."""
    from tests.support.attack import wire_connect
    from veil.policy import load_policy
    from veil.server.app import ServerThread, VeilServer

    path = _world(template, tmp_path)
    with ServerThread(VeilServer(load_policy(path)), port=0) as st:
        conn = wire_connect(st.port, "a")
        try:
            conn.execute(b"SELECT COUNT(*) AS n FROM t").fetchall()
            assert conn.execute(b"SHOW veil.epsilon").fetchone()[0] == "0.01"
            _edit(path, lambda t: t.replace("epsilon_per_query = 0.01\n", "epsilon_per_query = 0.5\n"))
            shown = Fraction(conn.execute(b"SHOW veil.epsilon").fetchone()[0])
            before = _spent(path, "a")
            conn.execute(b"SELECT SUM(x) AS n FROM t").fetchall()
            assert (shown, _spent(path, "a") - before) == (Fraction(1, 2), Fraction(1, 2))
        finally:
            conn.close()


# ==================================================================================================
# Part B — defences that held
# ==================================================================================================


@pytest.fixture(scope="module")
def served(template: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path]]:
    """A real ``veil serve`` (subprocess) on a copy of the world; (port, policy path)."""
    from tests.support.attack import Server

    path = _world(template, tmp_path_factory.mktemp("s36served"))
    srv = Server(path, path.parent / "serve.log")
    try:
        yield srv.port, path
    finally:
        srv.stop()


def _spent(path: Path, analyst: str) -> Any:
    from tests.support.attack import spent

    return spent(path.parent / "l.sqlite", analyst).by_account[f"analyst:{analyst}"][0]


def test_B1_wire_paths_charge_once_per_executed_answer_and_never_refund(served: tuple[int, Path]) -> None:
    """psycopg on ``veil serve`` (ε = 1/2 a query): Parse and Describe are free; a prepared statement is charged once
    per distinct parameter value (a repeat is the cached answer); ROLLBACK refunds nothing; COPY is refused free;
    each statement of a batch is charged; a pipeline stops charging at its first error; a DECLAREd cursor read
    row by row is charged once."""
    import psycopg
    from psycopg import pq

    from tests.support.attack import wire_connect

    port, path = served
    half = Fraction(1, 2)
    conn = wire_connect(port, "b")
    try:
        conn.execute(b"SET veil.epsilon = 0.5")

        def charged(step: Callable[[], object]) -> Any:
            before = _spent(path, "b")
            step()
            return _spent(path, "b") - before

        # Parse + Describe (statement and portal) through libpq: types only, nothing run
        def describe() -> None:
            pg = conn.pgconn
            assert pg.prepare(b"s36", b"SELECT COUNT(*) AS n FROM t WHERE x = $1").status == pq.ExecStatus.COMMAND_OK
            assert pg.describe_prepared(b"s36").status == pq.ExecStatus.COMMAND_OK

        assert charged(describe) == 0
        sql = "SELECT COUNT(*) AS n FROM t WHERE x = %s"
        assert charged(lambda: conn.execute(sql, (1,), prepare=True).fetchall()) == half
        assert charged(lambda: conn.execute(sql, (2,), prepare=True).fetchall()) == half
        assert charged(lambda: conn.execute(sql, (1,), prepare=True).fetchall()) == 0, "a repeat was charged again"

        def rolled_back() -> None:
            conn.autocommit = False
            conn.execute(b"SELECT COUNT(*) AS n FROM t WHERE x = 3").fetchall()
            conn.rollback()
            conn.autocommit = True

        assert charged(rolled_back) == half, "ROLLBACK refunded a computed answer"

        def copy() -> None:
            with pytest.raises(psycopg.Error) as err, conn.cursor().copy(b"COPY (SELECT COUNT(*) FROM t WHERE x = 4) TO STDOUT"):
                pass
            assert err.value.sqlstate == "42501"

        assert charged(copy) == 0

        def batch() -> None:
            cur = conn.cursor()
            cur.execute(b"SELECT COUNT(*) AS n FROM t WHERE x = -1; SELECT COUNT(*) AS n FROM t WHERE x = -2")
            assert cur.nextset()

        assert charged(batch) == 2 * half

        def pipeline() -> None:
            with pytest.raises(psycopg.Error), conn.pipeline() as p:
                conn.execute(b"SELECT COUNT(*) AS n FROM t WHERE x = -3")
                conn.execute(b"SELECT nosuch FROM t")
                conn.execute(b"SELECT COUNT(*) AS n FROM t WHERE x = 0")
                p.sync()

        assert charged(pipeline) == half

        def named_cursor() -> None:
            with conn.transaction(), conn.cursor(name="nc") as nc:
                nc.itersize = 1
                nc.execute(b"SELECT k, COUNT(*) AS n FROM t GROUP BY k")
                assert nc.fetchone() is not None and len(nc.fetchall()) == 1

        assert charged(named_cursor) == half
    finally:
        conn.close()


_FRESH = itertools.count(100)


@pytest.mark.parametrize(
    "statement",
    [
        'SET "veil.epsilon" = 0.25',
        "SET veil . epsilon = 0.25",
        "SELECT set_config('veil.epsilon', '0.25', false)",
        "SET veil.epsilon = '0.25'",
    ],
)
def test_B2_show_epsilon_names_what_the_next_query_is_charged(served: tuple[int, Path], statement: str) -> None:
    """Whatever spelling of SET the server accepts, SHOW veil.epsilon and the charge agree."""
    from fractions import Fraction

    from tests.support.attack import wire_connect

    port, path = served
    conn = wire_connect(port, "b")
    try:
        conn.execute(b"RESET veil.epsilon")
        conn.execute(statement.encode())
        shown = Fraction(str(conn.execute(b"SHOW veil.epsilon").fetchone()[0]))
        before = _spent(path, "b")
        conn.execute(f"SELECT COUNT(*) AS n FROM t WHERE x = {next(_FRESH)}".encode()).fetchall()  # never cached
        assert _spent(path, "b") - before == shown
    finally:
        conn.close()
