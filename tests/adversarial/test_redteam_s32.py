"""Red team, session 32: attacks on the fixes of session 30–31 (admission's slow logins, the bounded LIKE/regex of
the table-less executor) and on parts no round covered yet (the publication output-claim lock and staging refund,
the fair analyst pool, k-anonymity outside the declared hierarchy).

Part A holds attacks that succeed on 2026-11-27 (main at 925cb9c): each test FAILS today (the lead fixes the code;
nothing here is marked xfail). Part B holds probes of defences that held (regression tests). Findings are listed in
each test's docstring:

* A1 (MEDIUM, availability) a login waiting out a backoff its own (invented) user earned counts as the server's turn:
  4 startup messages for ``mallory`` from 4 networks hold all 4 slots for 10 s each (carol: 53300).
* A2 (MEDIUM, availability) the ``slow_logins`` quota goes to the oldest slow login: one stalled startup sent before
  bob's slow login takes it, and the outsider's newcomers cut bob mid-SCRAM (s28 A4 again).
* A3 (MEDIUM, availability) catalog statements bound each value (1 Mi chars), not the rows: one statement grew the
  server by ~0.3 GB (342 rows) / 1.9 GB (3,249 rows, until the 5 s catalog timeout).
* A4 (LOW, wrong answers) ``LIKE`` with a trailing backslash answers instead of 22025; ``ILIKE`` folds σ/ς/Σ together.
* Held: bounded LIKE on adversarial patterns, escapes, ``_``; 54000 for long regexes; k-anonymity never prints an
  out-of-domain value.
"""

from __future__ import annotations

import contextlib
import socket
import time
from pathlib import Path
from typing import Any

import pytest

# ==================================================================================================
# Part A — attacks that succeed today
# ==================================================================================================


@pytest.fixture
def two_logins(tmp_path: Path) -> Path:
    from tests.publish_support import make_warehouse
    from tests.support.attack import set_password

    policy = make_warehouse(tmp_path, n=40)
    set_password(policy, "bob")
    set_password(policy, "carol")
    return policy


def _serve(policy: Path, **limits: Any) -> Any:
    from tests.adversarial.test_redteam_s20 import _serve as serve

    return serve(policy, **limits)


def _stalled(port: int, user: str, source: str, *, read_challenge: bool) -> socket.socket:
    """A socket from ``source`` that sent a StartupMessage for ``user`` (and read the AuthenticationSASL if
    ``read_challenge``), then says nothing more."""
    from tests.support.server import read_message, startup_packet

    sock = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0))
    sock.sendall(startup_packet(user))
    if read_challenge:
        tag, _ = read_message(sock)
        assert tag == b"R", f"precondition: the server asks for a password (got {tag!r})"
    return sock


def _seed_failures(server: Any, user: str, failures: int, address: str = "127.0.0.99") -> None:
    """``failures`` failed logins of ``user`` (from an attacker's address), the last one just now: what the attacker
    gets over the wire by sending wrong SCRAM proofs for an invented name (each waits its backoff; ~1 min for 8)."""
    from veil.server.limits import Outcome

    now = time.monotonic()
    for i in range(failures):
        at = now - (failures - 1 - i) * 31.0
        wait, ticket = server.throttle.try_admit(address, user, now=at)
        assert ticket is not None, wait
        server.throttle.finish(ticket, Outcome.FAILED, now=at)


# --- A1. The login backoff, which the attacker raises itself, makes stalled startup messages protected again ------


@pytest.mark.slow
def test_A1_a_login_backoff_the_attacker_raised_does_not_protect_its_stalled_sockets(two_logins: Path) -> None:
    """MEDIUM (availability; s30 A1b again, through the s30 fix) — interface: ``veil serve`` (``--max-connections
    4``; the same at 100 with 100 networks — every /64 of one IPv6 /56 is a network).

    Attack: the outsider first fails ~8 logins as an invented user ``mallory`` (wrong SCRAM proofs; cheap: the
    backoff only slows *mallory*). Then from each of 4 networks (127.0.0.2 … 127.0.0.5) it opens one socket and
    sends ``StartupMessage(user=mallory)`` — and nothing else. Every one of them now waits in ``LoginBackoff.admit``
    (``veil/server/connection.py`` ``_login``) for mallory's 30 s turn: ``BufferedStream.awaiting_since`` is None
    there ("the server holds the turn"), so `PreLogin._in_progress` (``veil/server/admission.py``) counts each as a
    login that keeps up, protected for ``LOGIN_GRACE_S`` = 10 s, outside the ``slow_logins`` quota that the s30 fix
    added for exactly these stalled startup messages. Measured: carol (127.0.0.1) 2.5 s later gets 53300; rotating
    each socket before 10 s keeps every analyst out. Root cause: the backoff wait of an attempt is counted as the
    server's turn whoever caused it — but a wait the attempt's own keys (its user, its address) earned by failing is
    the client's doing. A correct system admits carol: a login waiting for a backoff its own untrusted keys earned
    (or any login past the grace that has not answered a challenge) is a slow login, subject to the quota."""
    from tests.adversarial.test_redteam_s20 import _login
    from tests.support.attack import PASSWORD

    with _serve(two_logins, max_connections=4, auth_timeout=30.0, login_backoff_base=0.25, login_backoff_max=30.0) as st:
        _seed_failures(st.server, "mallory", 10)
        held = [_stalled(st.port, "mallory", f"127.0.0.{i + 2}", read_challenge=False) for i in range(4)]
        try:
            time.sleep(2.5)  # past the 2 s grace: the s30 fix would now treat stalled logins as idle sockets
            outcome = _login(st.port, "carol", PASSWORD)
        finally:
            for sock in held:
                with contextlib.suppress(OSError):
                    sock.close()
    assert outcome == "ok", f"4 startup messages waiting out mallory's backoff; carol's login ended {outcome!r}"


# --- A2. The slow-login quota goes to the oldest: one older stalled startup message takes bob's protection ---------


@pytest.mark.slow
def test_A2_one_older_stalled_startup_cannot_take_a_slow_logins_protection(tmp_path: Path) -> None:
    """MEDIUM (availability; s28 A4 again, through the s30 fix) — interface: ``veil serve`` (``--max-connections 4``:
    quota ``slow_logins`` = 1; at 100 the quota is 25 and the attacker needs 25 networks with one stalled socket
    each, older than bob's login).

    Attack: the outsider (no credentials) first sends one StartupMessage from 127.0.0.3 and stalls, then holds two
    idle sockets from 127.0.0.2; bob (127.0.0.1) connects into the last slot and his client pauses 2.6 s after
    AuthenticationSASL (s28 A4's slow link). Both logins are now "slow" (the server has waited > 2 s for them);
    ``PreLogin._in_progress`` keeps the protection for the *oldest* slow login of at most ``slow_logins``
    networks — the outsider's stalled socket, which costs nothing and connected first — so bob's login counts as an
    idle socket. At 2.2 s the outsider opens new sockets from 127.0.0.2: ``_stalest`` swaps its own two, then cuts
    bob mid-SCRAM. Without the one stalled socket bob's login completes (s28 B2). Root cause: the quota is handed
    out by age, and a stalled socket that never answered a challenge ranks above a login that answered one. A
    correct system completes bob's login: rank slow logins by progress (a login that answered the server's
    challenge before one that never did), or never let a slot-holder that sent no credential take the quota."""
    import threading

    from tests.adversarial.test_redteam_s28 import _slow_login
    from tests.publish_support import make_warehouse
    from tests.support.attack import PASSWORD, set_password

    policy = make_warehouse(tmp_path, n=20)
    set_password(policy, "bob")
    idle: list[socket.socket] = []

    def outsider(started: float) -> None:
        time.sleep(max(0.0, started + 2.2 - time.monotonic()))
        for _ in range(4):
            with contextlib.suppress(OSError):
                idle.append(socket.create_connection(("127.0.0.1", st.port), timeout=5, source_address=("127.0.0.2", 0)))
            time.sleep(0.1)

    with _serve(policy, max_connections=4) as st:
        try:
            idle.append(_stalled(st.port, "nobody", "127.0.0.3", read_challenge=True))
            for _ in range(2):
                idle.append(socket.create_connection(("127.0.0.1", st.port), timeout=5, source_address=("127.0.0.2", 0)))
            time.sleep(0.1)
            churn = threading.Thread(target=outsider, args=(time.monotonic(),))
            churn.start()
            outcome = _slow_login(st.port, "bob", PASSWORD, pause=2.6)
            churn.join()
        finally:
            for sock in idle:
                sock.close()
    assert outcome == "ok", f"bob's login ended {outcome!r}"


# --- A3. Each value of a catalog query is bounded, the rows holding them are not: one statement holds gigabytes --


def _doubled_text(levels: int = 16, seed: str = "aaaaaaaaaaaaaaa") -> str:
    """A derived table of one row whose ``x`` is ``seed`` doubled ``levels`` times (15 × 2¹⁶ = 983,040 characters,
    under the 1 Mi bound of one value)."""
    inner = f"(SELECT '{seed}' AS x FROM pg_catalog.pg_namespace WHERE nspname = 'public') AS t"
    for _ in range(levels):
        inner = f"(SELECT x || x AS x FROM {inner}) AS t"
    return inner[: -len(" AS t")]


def _peak_rss_during(run: Any) -> tuple[Any, int]:
    """(what ``run()`` returned, the process's peak resident memory growth in MB while it ran)."""
    import threading

    def rss() -> int:
        status = Path("/proc/self/status").read_text()
        return int(status.split("VmRSS:")[1].split()[0]) // 1024

    base, peak, done = rss(), [0], threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], rss())
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        out = run()
    finally:
        done.set()
        sampler.join()
    return out, peak[0] - base


@pytest.mark.slow
def test_A3_a_catalog_query_cannot_hold_hundreds_of_megabytes_of_text(two_logins: Path) -> None:
    """MEDIUM (availability) — interface: ``veil serve``, any logged-in analyst, one catalog statement.

    Attack: ``SELECT MAX(LENGTH(y)), COUNT(y) FROM (SELECT a.x || b.typname AS y FROM (<one row, x of 983,040
    characters, built by 16 nested x || x>) AS a, (SELECT b1.typname FROM pg_catalog.pg_type b1, pg_catalog.pg_type
    b2) AS b) AS u`` — routed as a system statement (it names ``pg_catalog``) and evaluated by sqlglot's Python
    executor, which materialises the derived table ``u``: every row holds a fresh ~1 MB text. ``bounded.py`` bounds
    each *value* at 1 Mi characters (``MAX_TEXT``) but nothing bounds what a statement's rows hold together.
    Measured through psycopg: 1,140 rows (a 3rd table filtered) grew the server by ~1.1 GB in 4 s and answered; the
    full 3,249-row cross join grew it by 1.9 GB before ``--catalog-timeout`` (5 s) stopped it with 57014; three
    catalog threads × that is ~6 GB from three statements of ~2 kB (and glibc keeps much of it after). Here: 342
    rows (``pg_type`` × ``pg_attribute``), ~340 MB. Root cause: ``veil/server/bounded.py`` bounds values, not the
    executor's tables (``sqlglot.executor`` builds each intermediate table in full). A correct system bounds the
    characters and elements a catalog statement holds in all (e.g. a few × ``MAX_TEXT``, 54000 beyond), so this
    statement is refused (or answered) without the server growing by more than ~100 MB."""
    import psycopg

    from tests.support.attack import PASSWORD

    sql = (
        f"SELECT MAX(LENGTH(y)) AS n, COUNT(y) AS c FROM (SELECT a.x || b.typname AS y FROM {_doubled_text()} AS a, "
        "(SELECT b1.typname FROM pg_catalog.pg_type b1, pg_catalog.pg_attribute b2) AS b) AS u"
    )
    dsn = "host=127.0.0.1 port={} user=bob password={} dbname=veil sslmode=disable connect_timeout=10"
    with _serve(two_logins) as st, psycopg.connect(dsn.format(st.port, PASSWORD), autocommit=True) as conn:
        conn.execute("SELECT COUNT(*) FROM pg_catalog.pg_type").fetchall()  # warm: the catalog is built once

        def run() -> Any:
            try:
                return conn.execute(sql).fetchall()
            except psycopg.Error as exc:
                return exc.sqlstate

        outcome, grown = _peak_rss_during(run)
    assert grown < 150, f"one catalog statement grew the server by {grown} MB (answer {outcome!r})"


# --- A4. LIKE/ILIKE of the table-less executor differ from PostgreSQL's -----------------------------------------


@pytest.mark.parametrize(
    ("sql", "postgres"),
    [
        ("SELECT 'a\\' LIKE 'a\\'", "22025"),  # a pattern ending in the escape character is an error
        ("SELECT 'ΣA' ILIKE 'ςa'", [(False,)]),  # lower('Σ') = 'σ' ≠ 'ς': PostgreSQL's ILIKE folds with lower()
    ],
)
def test_A4_like_in_catalog_queries_answers_as_postgresql(sql: str, postgres: Any) -> None:
    """LOW (wrong answers) — interface: ``veil serve``, a catalog or table-less statement (sqlglot's executor with
    ``veil/server/bounded.py`` ``like``).

    (1) ``'a\\' LIKE 'a\\'``: PostgreSQL refuses a pattern ending in the escape character (22025 "LIKE pattern must
    not end with escape character"); Veil's ``_LIKE_TOKEN`` takes the trailing backslash literally and answers
    true. (2) ``ILIKE`` is Python's ``re.IGNORECASE``, which treats σ, ς and Σ as one letter (and other multi-fold
    sets); PostgreSQL compares ``lower()`` of both sides, and ``lower('Σ')`` is ``'σ'``, not ``'ς'``: false. A
    correct system answers as PostgreSQL: 22025 for (1) (or the bounded LIKE refuses it typed), and folds with
    ``str.lower`` on both sides for (2)."""
    from tests.server.test_bounded_eval import _evaluate

    assert _evaluate(sql) == postgres


# ==================================================================================================
# Part B — defences that held (regression tests)
# ==================================================================================================


@pytest.mark.parametrize(
    ("text", "pattern", "expected"),
    [
        ("a" * 5000, "%a" * 3000 + "%b", False),  # many wildcards: no backtracking
        ("a" * 200, "%" * 100_000 + "a", True),  # a run of % is one token
        ("ab", "_" * 100_000, False),  # read no further than the text is long
        ("a_c", "a\\_c", True),
        ("abc", "a\\_c", False),
        ("a%c", "a\\%c", True),
        ("ab%", "%\\%", True),
        ("x\ny", "x_y", True),  # _ matches a newline
        ("x\ny", "x%y", True),
    ],
)
def test_B1_bounded_like_is_linear_and_matches_postgresql(text: str, pattern: str, expected: bool) -> None:
    """The bounded LIKE: adversarial patterns answer at once, escapes and ``_`` as PostgreSQL."""
    from veil.server.bounded import like

    started = time.process_time()
    assert like(text, pattern) is expected
    assert time.process_time() - started < 1.0


def test_B2_a_long_regular_expression_is_refused_typed() -> None:
    """``~`` with a pattern over 10,000 characters: 54000 before compiling."""
    from tests.server.test_bounded_eval import _evaluate

    assert _evaluate(f"SELECT 'a' ~ '{'a' * 10_001}'") == "54000"


@pytest.mark.slow
def test_B3_kanon_never_publishes_an_out_of_domain_value(tmp_path: Path) -> None:
    """k-anonymity (Mondrian, k = 5) over ages, hours and sex, with one person's age 987,654, another's hours
    −4,242 and another's sex 'X-secret' (all outside the declared domains): the output names none of them (the
    extremes generalise into open intervals, the undeclared category into the leaf '?'), and the table is
    published whole."""
    from tests.adversarial.test_redteam_s16 import _publish, _published, _warehouse
    from tests.publish_support import people

    frame = people(120)
    frame.loc[3, "age"] = 987654
    frame.loc[4, "hours"] = -4242
    frame.loc[5, "sex"] = "X-secret"
    policy = _warehouse(tmp_path / "d", frame)
    request = {"table": "people", "k": 5, "qi": ["age", "hours", "sex"], "sensitive": ["income"], "algorithm": "mondrian"}
    _publish(policy, "kanon", {**request, "output": "p_k"})
    text = repr(_published(policy, "SELECT * FROM p_k"))
    assert not [s for s in ("987654", "4242", "X-secret") if s in text]
