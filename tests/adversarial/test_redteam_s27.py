"""Red team, session 27: publications (the gate, the publish transaction, synthetic tables), the ledger, and
``veil serve``.

Part A holds attacks that succeed on 2026-11-26 (main at 1e072a3): each test is a strict xfail that FAILS today
(the lead removes the mark when fixing). Part B holds probes of defences that held (they pass, and fail if the
defence breaks). Helpers come from the earlier rounds (:mod:`tests.adversarial.test_redteam_s16`,
:mod:`tests.adversarial.test_redteam_s20`, :mod:`tests.publish_support`, :mod:`tests.support.attack`). Findings
(details in each test's docstring):

* A1 (MEDIUM) ``veil publish synth`` without ``--columns`` publishes the columns that implicit-attribute detection
  picks *on the private rows*: whether a column is in the public table (its schema, free to every analyst) says
  whether one person's value differs from everyone else's.
* A2 (MEDIUM, availability) ``SELECT set_config('k<i>', '<1 MB>', false)`` is applied by pg-mimic straight into the
  session's settings dict: SET's bound (256 names, 1 Mi characters; s24 A9) is bypassed, 300 MB kept by one
  connection.
* A3 (LOW) k-anonymity refuses a table, printing the value, when one person's QI category has trailing blanks (the
  flat hierarchy strips its leaves, the encoder looks the raw value up): the outcome depends on one person. A3b: the
  same for one undeclared value (``'HIGH'``) of a sensitive column (the gate refuses it; kRR would read it as NA).
* A4 (MEDIUM, availability) table-less ``SELECT 3 ^ 30000000`` is an exact Python big-integer power on a catalog
  thread: the GIL is held for its whole run, the server answers nobody (15 s measured), no timeout interrupts it.
* A5 (LOW) table-less arithmetic with Python semantics: XX000 "internal error" for a result over 4,300 digits,
  ``CAST(POWER(2, 64) AS BIGINT)`` answered 18446744073709551616, ``1 / 0`` answered NULL.
* A6 (MEDIUM, availability) table-less ``'x' * n`` is Python string repetition: one short statement builds a
  string of any size (50 MB → +289 MB peak RSS; 2·10⁹ would take the host down).
* A7 (LOW) two concurrent publications to one new output without ``--replace`` both succeed: the first is replaced
  silently, both are charged and recorded as publishing the name.
* A8 (LOW) once an account's δ is stored at 1 (reached by rounding up on the 10⁻³⁰ grid), charges of δ < 10⁻³⁰ are
  still accepted, without bound.
* A9 (LOW) ``veil publish kanon|synth --seed -5`` end in tracebacks (no `check_seed`); ``--threads 100000`` and
  huge ``--som-neurons`` likewise (by hand).
* A10 (MEDIUM, availability) table-less (and catalog) ``LIKE '%a%a%a%a%a%a%a%a%b'`` over a long literal: Python
  ``re`` backtracks exponentially in C, holding the GIL: minutes to forever for one ~80-byte statement, beyond every
  timeout, cancel and SIGTERM.
* A11 (LOW) ``kanon --missing leaf``: the gate refuses the ``?`` leaf the method itself produces, once a class's
  QI is all missing (8 missing jobs of 200: refused; 7: published): a documented option fails, and one person's
  missing value decides.
* A12 (LOW) ``kanon --hierarchies``: the gate refuses a hierarchy's inner node (``manual``) in a column whose values
  the policy declares (Mondrian, K-Member); only ranges, sets and ``*`` count as labels.
* A13 (LOW) ``[ledger] path`` naming the policy, the warehouse or a CSV ends in ``sqlite3.DatabaseError`` (exit 1);
  naming the not-yet-created public mirror is accepted and squats the mirror's file.
* A14 (MEDIUM, availability) s24 A3's per-analyst cap is bypassed when analysts share an address: bob's 3 logins
  (the cap of 6) plus 3 idle pre-login sockets fill the server, and carol (same address) gets 53300: admission never
  evicts the newcomer's own network.
* A15 (MEDIUM, availability) a public query's whole answer is materialised in the server: a free 4-way cross join
  of a 60-row published table (13 M rows) needs ~7 GB; 1.5 M rows measured +810 MB peak.
* A16 (LOW) ``veil publish sdc --columns age,AGE`` (a column twice after normalisation, or the target among the
  columns) passes the plan and crashes untyped in ``sanitise``: a DP grid is charged ε = 1 first (s24 A10's class).
* Held (Part B, and by hand): identity cannot be changed after login (``SET ROLE``, ``SET SESSION AUTHORIZATION``,
  ``application_name``, ``options=-c role=…``, ``SET veil.analyst``; ``set_config('veil.epsilon', …)`` changes no
  charge); out-of-place protocol messages (FunctionCall, Copy*, unknown type, bad Describe kind, unknown
  statement/portal, negative parameter length) are typed and the connection answers on; a δ sum rounded up to 1
  reads back and refuses δ ≥ 10⁻³⁰; a 5,000-statement batch is refused whole (54001); recovery in another process
  leaves a publication whose lock a live process holds (s24 A5), and rolls it back once that process is killed. By
  hand: SCRAM binds the startup user (the ``n=``/``a=`` of client-first are
  ignored, verifier looked up by exact name); ``COPY`` refused 42501; ``veil.budget`` shows only the caller; the
  per-connection prepared-statement bound matches real memory (16 MiB counted ≈ 16–19 MiB RSS); DBSCAN's outlier is
  merged (s24 A8 now passes); k-anonymity hides out-of-bound outliers behind open ranges and an undeclared rare
  category behind ``*``; kRR and the DP grid publish only declared values, with declared types, DP row counts;
  PATE's ROC threshold uses the noisy labels only; the publication lock survives concurrent recovery orderings
  (read by hand: finish before unlock, re-read journal rows in abort/commit).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.adversarial.test_redteam_s16 import _publish, _warehouse
from tests.publish_support import people

# ==================================================================================================
# Part A — attacks that succeed today
# ==================================================================================================

# --- A1. A synthetic table's columns are chosen on the private rows: the schema says what one person holds -------


def _implicit_world(drop: list[int]) -> Any:
    """60 people whose job betrays their sex; everyone works 40 hours but person 7 (97); age and gain constant."""
    frame = people(60, seed=3)
    frame["hours"], frame["age"], frame["gain"] = 40, 40, 0
    frame.loc[7, "hours"] = 97
    return frame.drop(index=drop).reset_index(drop=True)


@pytest.mark.slow
def test_A1_synthetic_table_columns_do_not_depend_on_one_person(tmp_path: Path) -> None:
    """MEDIUM (one person decides the public table's schema, at ε = 0) — interface: ``veil publish synth --sensitive
    sex --label income --beta 0.5`` with no ``--columns`` (the documented default: "columns … or None to detect
    them"), then any analyst's catalog (``information_schema.columns``, psql ``\\d``) or ``SELECT *``.

    Mechanism: `plugins/synth.py::sanitise` runs `metrics.implicit.detect_implicit` on the training rows (the private
    source) and publishes ``[sensitive, label, *detection.implicit]``: a column is a candidate when its NMI with the
    sensitive column is at least θ, a deterministic function of the rows. The synthetic *values* come from declared
    domains (s16 A2), the row count from ``--rows`` (s24 A4), but the *set of columns* is the private data's. D: 60
    people, all working 40 hours but person 7 (97 hours); D′: D without person 7. NMI(hours, sex) is 0.018 in D
    (person 7 alone) and 0 in D′, so ``hours`` is published in D and absent in D′: measured through ``publish``
    ``[hours, income, job, sex]`` vs ``[income, job, sex]`` (whenever person 7 falls in the 80 % training part, 2 of
    3 runs; in the third they were in the holdout). The refusal "no implicit-privacy attributes … (candidates
    ['job', 'hours'], τ = 0.533)" likewise depends on the rows and prints exact statistics of them. Sound: publish
    the columns the curator names (``--columns``, or every declared column), never a set chosen on the rows; keep
    detection in ``veil audit implicit``. Run on the plug-in with the whole source as its training part (the
    transaction's 80 % split is random), so the measurement is deterministic."""
    from veil.generators.registry import RunEnv, get_plugin
    from veil.generators.transaction import _finalise, csprng

    request = {"table": "people", "method": "imposter", "sensitive": "sex", "label": "income", "epochs": 1,
               "batch_size": 64, "rows": 100, "beta": 0.5, "seed": 1, "output": "syn"}  # fmt: skip
    published = {}
    for world, drop in (("d", []), ("d_prime", [7])):
        frame = _implicit_world(drop)
        policy = _warehouse(tmp_path / world, frame)
        plugin = get_plugin("synth")
        plan = plugin.plan(policy, request)
        spec = policy.tables["people"]
        generator = csprng()
        env = RunEnv(policy=policy, spec=spec, generator=generator, rng=None, progress=False, seed=1,
                     source_rows=len(frame))  # fmt: skip
        pub = _finalise(plugin.sanitise(plan, frame, env), spec, generator)
        published[world] = sorted(map(str, pub.frame.columns))
    assert published["d"] == published["d_prime"], (
        f"the synthetic table's columns are {published['d']} with person 7 and {published['d_prime']} without"
    )


# --- A2. ``SELECT set_config(...)`` keeps any number of settings of any size: SET's bound is bypassed -------------


@pytest.fixture
def two_logins(tmp_path: Path) -> Path:
    from tests.publish_support import make_warehouse
    from tests.support.attack import set_password

    policy = make_warehouse(tmp_path, n=60)
    set_password(policy, "bob")
    set_password(policy, "carol")
    return policy


def _bob(st: Any) -> Any:
    import psycopg

    from tests.support.attack import PASSWORD

    dsn = f"host=127.0.0.1 port={st.port} user=bob password={PASSWORD} dbname=veil sslmode=disable connect_timeout=10"
    return psycopg.connect(dsn, autocommit=True)


def _outcome(conn: Any, sql: str, params: Any = None) -> Any:
    """Rows, or ``"SQLSTATE: message"`` for an error (the connection stays usable in autocommit)."""
    import psycopg

    try:
        return conn.execute(sql, params).fetchall()
    except psycopg.Error as exc:
        return f"{exc.sqlstate}: {str(exc).splitlines()[0][:160]}"


@pytest.mark.slow
def test_A2_set_config_is_bounded_like_set(two_logins: Path) -> None:
    """MEDIUM (availability: one analyst grows the server without bound) — interface: ``veil serve``, any client:
    ``SELECT set_config('k1', '<1 MB literal>', false)``, ``… 'k2' …``, … (a table-less SELECT).

    Mechanism: s24 A9 bounded what ``SET`` remembers (`settings.SessionSettings.set` → `held.check_setting`: 256
    names, 1 Mi characters, 53400 beyond). But a table-less SELECT is answered by `system._emulated`, which hands it
    to pg-mimic's `middleware.static_select`; its `_substitute_session_functions` applies ``set_config(key, value)``
    straight into ``connection.session_vars`` — the very dict `SessionSettings.values` is — with no check. Measured
    (psycopg, one connection): 300 × ``set_config('k<i>', '<1,000,000 × x>', false)`` were all answered and the
    server process grew by 452 MiB in 26 s; the next plain ``SET foo = 1`` then got 53400 "too many parameters set on
    this connection (301, the limit is 256)" — the bound was already 45 over. Each statement is within
    ``--max-query-bytes``; nothing bounds their number. (Also: ``set_config('veil.epsilon', '1e-300', false)`` is
    accepted and ``current_setting('veil.epsilon')`` then reads ``1e-300`` while queries still use ε = 0.5 —
    misleading, not a bypass: ``SHOW veil.epsilon`` says 0.5.) Sound: route ``set_config`` through
    `SessionSettings.set` (the same parser, bounds and veil.* rules as SET), or refuse it. Checked with small values:
    the 257th distinct name is refused (53400), as SET's is."""
    from veil.server import held

    with _serve_fast(two_logins) as st, _bob(st) as conn:
        outcome = None
        for i in range(held.MAX_SETTINGS + 2):
            outcome = _outcome(conn, f"SELECT set_config('red_team_{i}', 'v', false)")
            if isinstance(outcome, str):
                break
    assert isinstance(outcome, str) and outcome.startswith("53400"), (
        f"{held.MAX_SETTINGS + 2} set_config() calls of distinct names were all kept (last answer {outcome!r}); SET "
        f"refuses the {held.MAX_SETTINGS + 1}th"
    )


def _serve_fast(policy: Path, **limits: Any) -> Any:
    from tests.adversarial.test_redteam_s20 import _serve

    return _serve(policy, **limits)


# --- A3. k-anonymity refuses a table (naming the value) when one person's QI category has stray whitespace ----------


@pytest.mark.slow
@pytest.mark.parametrize("odd", ["F ", "M  "])
def test_A3_kanon_outcome_does_not_depend_on_one_persons_spelling_of_a_category(tmp_path: Path, odd: str) -> None:
    """LOW (a data-dependent refusal that prints one person's value; availability for real data) — interface:
    ``veil publish kanon --qi age,sex --sensitive income --k 5`` on a table where person 9's ``sex`` is ``'F '``
    (trailing blanks, common in fixed-width and CSV exports).

    Mechanism: a QI column without a hierarchy file gets a flat tree built from the data's own values
    (`generalise.QISpace`: ``Hierarchy.flat(series.astype(str).unique())``), and `Hierarchy.from_paths` strips every
    leaf (``p.strip()``) and skips empty ones, but `Hierarchy.encode` then looks up the *raw* values: ``'F '`` is no
    leaf. Measured: ``InputError: value 'F ' of column 'sex' is not a leaf of its hierarchy (flat). Did you mean
    'F'?`` — the publication of 60 rows is refused because of one person's spelling, and the message prints it;
    D′ (person 9's ``sex`` = ``'F'``) publishes. A value outside the declared ``values`` should be handled the same
    way whatever it is (as kRR reads it as NA, s16 A12; or the row dropped as a missing one), not refused by
    accident of its whitespace. Sound: encode with the same normalisation the leaves get (or read an undeclared
    value as missing), so D and D′ end the same way."""
    from veil.errors import VeilError

    outcomes = {}
    for world, value in (("d", odd), ("d_prime", odd.strip() or "F")):
        frame = people(60)
        frame.loc[9, "sex"] = value
        policy = _warehouse(tmp_path / world, frame)
        try:
            _publish(policy, "kanon", {"table": "people", "qi": ["age", "sex"], "sensitive": ["income"], "k": 5,
                                       "algorithm": "mondrian", "output": "pk"})  # fmt: skip
            outcomes[world] = "published"
        except VeilError as exc:
            outcomes[world] = f"{type(exc).__name__}: {exc}"
    assert outcomes["d"] == outcomes["d_prime"], (
        f"person 9's sex {odd!r}: {outcomes['d']!r}; spelled plainly: {outcomes['d_prime']!r}"
    )


@pytest.mark.slow
def test_A3b_kanon_outcome_does_not_depend_on_one_persons_undeclared_sensitive_value(tmp_path: Path) -> None:
    """LOW (the same class as A3, for a sensitive column) — interface: ``veil publish kanon --qi age,sex --sensitive
    income --k 5`` where person 9's ``income`` is ``'HIGH'`` (declared: ``low``, ``high``).

    Mechanism: sensitive columns are published unchanged, and the gate's domain check refuses any value outside the
    declared ``values`` (`gate._out_of_domain`). So D (person 9: ``'HIGH'``) is refused — "column 'income' has value
    'HIGH' outside the declared values", printing it — and D′ (``'high'``) is published (measured). kRR reads such a
    value as NA, data-independently, instead (s16 A12: "a refusal would then depend on one row"). Sound: treat an
    undeclared value of a published column as missing (drop the row or publish NA), whatever it is."""
    from veil.errors import VeilError

    outcomes = {}
    for world, value in (("d", "HIGH"), ("d_prime", "high")):
        frame = people(60)
        frame.loc[9, "income"] = value
        policy = _warehouse(tmp_path / world, frame)
        try:
            _publish(policy, "kanon", {"table": "people", "qi": ["age", "sex"], "sensitive": ["income"], "k": 5,
                                       "algorithm": "mondrian", "output": "pk"})  # fmt: skip
            outcomes[world] = "published"
        except VeilError as exc:
            outcomes[world] = f"{type(exc).__name__}: {exc}"
    assert outcomes["d"] == outcomes["d_prime"], f"income 'HIGH': {outcomes['d']!r}; 'high': {outcomes['d_prime']!r}"


# --- A4. One table-less ``SELECT 3 ^ 30000000`` holds the GIL: every client of the server waits (availability) ------


@pytest.mark.slow
def test_A4_a_table_less_power_does_not_freeze_the_server(two_logins: Path) -> None:
    """MEDIUM (availability: one analyst stalls every connection of the server, repeatably) — interface: ``veil
    serve``, any client after login: ``SELECT 3 ^ 30000000`` (or ``power(3, …)``; 19 bytes).

    Mechanism: a table-less SELECT is a "system" statement (`system.answer` → `_emulated` → pg-mimic's
    `static_select`), evaluated by sqlglot's Python executor on a catalog thread. ``^`` becomes Python's ``**`` on
    ints: an exact big-integer power, one C call that holds the GIL for its whole run (3 ** 10⁷: 3.4 s; 3 ** (3·10⁷):
    ~15 s; 3 ** 10⁸: minutes and ~20 MB per number). The catalog timeout's trace function (`--catalog-timeout`, 5 s)
    only runs between Python calls, so it fires after the power ends; meanwhile no other thread — the event loop
    included — runs. Measured (psycopg, ``--catalog-timeout 5``): bob's ``SELECT 3 ^ 30000000`` ended 57014 after 15.2
    s, and carol's ``SELECT 1`` (answered on the event loop), sent 0.4 s after it, came back at 15.2 s; every client
    waits likewise. (When the power finishes in time, encoding the result raises Python's 4,300-digit limit:
    XX000, see A5.) Sound: evaluate table-less arithmetic with bounded numbers (DOUBLE/NUMERIC semantics, as
    PostgreSQL: ``3 ^ 30000000`` is 22003 "value out of range"), or refuse ``^``/``power`` with an exponent beyond a
    bound before evaluating, or run the evaluator in a process that can be killed. Checked: every ``SELECT 1``
    carol sends while bob's power runs is answered within 1.5 s."""
    waited, ended = _longest_wait_while(two_logins, "SELECT 3 ^ 20000000 AS v")
    assert waited < 1.5, (
        f"carol's SELECT 1 waited {waited:.1f} s while bob's SELECT 3 ^ 20000000 ran ({ended.get('seconds', 0):.1f} s, "
        f"ended {str(ended.get('outcome'))[:60]!r})"
    )


def _longest_wait_while(policy: Path, attack: str) -> tuple[float, dict[str, Any]]:
    """``veil serve`` in its own process (``--catalog-timeout 2``): bob sends ``attack`` while carol pings with
    ``SELECT 1`` every 0.1 s; returns carol's longest wait and how bob's statement ended."""
    import threading

    import psycopg

    from tests.support.attack import PASSWORD

    ended: dict[str, Any] = {}
    with _serve_subprocess(policy, "--catalog-timeout", "2") as (port, _):
        dsn = "host=127.0.0.1 port={port} user={user} password={pw} dbname=veil sslmode=disable connect_timeout=10"
        with (
            psycopg.connect(dsn.format(port=port, user="bob", pw=PASSWORD), autocommit=True) as bob,
            psycopg.connect(dsn.format(port=port, user="carol", pw=PASSWORD), autocommit=True) as carol,
        ):
            carol.execute("SELECT 1").fetchall()

            def run() -> None:
                started = time.monotonic()
                ended["outcome"] = _outcome(bob, attack)
                ended["seconds"] = time.monotonic() - started

            thread = threading.Thread(target=run)
            thread.start()
            waited = 0.0
            while thread.is_alive():  # carol pings while bob's statement runs: the longest wait counts
                started = time.monotonic()
                carol.execute("SELECT 1").fetchall()
                waited = max(waited, time.monotonic() - started)
                time.sleep(0.1)
            thread.join()
    return waited, ended


@contextlib.contextmanager
def _serve_subprocess(policy: Path, *flags: str) -> Iterator[tuple[int, int]]:
    """``veil serve`` in its own process (a server thread in the test process would stall the client with it)."""
    import os
    import re
    import subprocess
    import sys

    log = policy.parent / "serve.log"
    with log.open("w") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "veil.cli.main", "serve", "--policy", str(policy), "--port", "0", *flags],
            stderr=sink,
            stdout=subprocess.DEVNULL,
            env={**os.environ, "VEIL_PROGRESS": "0"},
        )
    try:
        deadline = time.monotonic() + 60
        port = None
        while port is None and time.monotonic() < deadline and proc.poll() is None:
            match = re.search(r"listening on 127\.0\.0\.1:(\d+)", log.read_text())
            port = int(match.group(1)) if match else None
            time.sleep(0.1)
        assert port is not None, log.read_text()[-2000:]
        yield port, proc.pid
    finally:
        proc.terminate()
        proc.wait(30)


# --- A5. Table-less arithmetic: XX000 for a large result, out-of-range and division by zero answered (LOW) ---------

TABLE_LESS_ERRORS = {
    "big_power": "SELECT 2 ^ 100000 AS v",  # PostgreSQL: 22003; Veil: XX000 "internal error" (int → str limit)
    "bigint_overflow": "SELECT CAST(POWER(2, 64) AS BIGINT) AS v",  # PostgreSQL: 22003; Veil: 18446744073709551616
    "division_by_zero": "SELECT 1 / 0 AS v",  # PostgreSQL: 22012; Veil: NULL
}


@pytest.mark.slow
def test_A5_table_less_arithmetic_errors_are_typed(two_logins: Path) -> None:
    """LOW (typed errors; a client sees a server bug, or a wrong answer) — interface: ``veil serve``, any client.

    Mechanism: table-less SELECTs run on sqlglot's Python executor (see A4) with Python semantics: an int result
    beyond 4,300 digits fails in pg-mimic's encoder (``ValueError: Exceeds the limit (4300 digits) for integer
    string conversion``, logged with a traceback) and reaches the client as ``XX000 internal error in Veil`` (the
    docs: XX000 means a bug); ``CAST(POWER(2, 64) AS BIGINT)`` is answered 18446744073709551616, not a bigint;
    ``1 / 0`` is answered NULL. PostgreSQL answers 22003 (numeric value out of range) and 22012 (division by zero).
    Measured with psycopg: ``{'big_power': 'XX000', 'bigint_overflow': [(18446744073709551616,)],
    'division_by_zero': [(None,)]}``. Sound: every failure typed (never XX000), results within their type."""
    outcomes = {}
    with _serve_fast(two_logins) as st, _bob(st) as conn:
        for name, sql in TABLE_LESS_ERRORS.items():
            outcome = _outcome(conn, sql)
            outcomes[name] = outcome[:5] if isinstance(outcome, str) else outcome
    wrong = {k: v for k, v in outcomes.items() if not (isinstance(v, str) and v != "XX000")}
    assert not wrong, f"table-less arithmetic: {wrong} (a typed SQLSTATE expected for each)"


# --- A6. ``SELECT 'x' * 2000000000``: the table-less evaluator repeats strings without bound (memory) -----------------


@pytest.mark.slow
@pytest.mark.parametrize("sql", ["SELECT LENGTH('x' * 5000000) AS v", "SELECT 'ab' * 3 AS v"])
def test_A6_table_less_string_times_integer_is_refused(two_logins: Path, sql: str) -> None:
    """MEDIUM (availability: one 35-byte statement makes the server allocate gigabytes; an OOM kill ends every
    session) — interface: ``veil serve``, any client after login: ``SELECT 'x' * 2000000000``.

    Mechanism: the same table-less evaluator as A4 (sqlglot's Python executor) maps ``*`` to Python's ``*``, which on
    a str and an int is repetition: ``SELECT 'ab' * 3`` is answered ``'ababab'`` (PostgreSQL: 42883, no operator
    text * integer). Nothing bounds the result: ``--max-query-bytes`` bounds the statement, `held.py` what a
    connection keeps, but not what one answer builds. Measured (server thread and psycopg in one process):
    ``SELECT 'x' * 50000000`` grew the process's peak RSS by 289 MB in 0.75 s (the string, its UTF-8 encoding, the
    DataRow and the client's copy), ``SELECT LENGTH('x' * 50000000)`` by 54 MB for a one-row answer; 2·10⁹
    asks for tens of GB (not run here: it would take the shared test host down). Same root cause as A4: Python
    semantics for SQL operators on unbounded values. Sound: refuse operators on mismatched types as PostgreSQL
    does (typed, 42883), or bound every value the evaluator builds. Checked: the statement is refused, typed."""
    with _serve_fast(two_logins) as st, _bob(st) as conn:
        outcome = _outcome(conn, sql)
    assert isinstance(outcome, str) and not outcome.startswith("XX000"), f"{sql} was answered {str(outcome)[:80]}"


# --- A7. Two publications to one new output without --replace: both succeed, the first is silently replaced ------------


@pytest.mark.slow
def test_A7_concurrent_publications_never_replace_an_output_without_replace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LOW (ledger ↔ warehouse integrity; careless curators, two terminals or a script in parallel) — interface: two
    ``veil publish … --output out`` (no ``--replace``) in two processes at once.

    Mechanism: `transaction.check_output` refuses an existing output without ``--replace`` when the plan is made,
    but nothing holds the name until the commit: publication A stages under ``_veil_stage_<token>``, and B (started
    meanwhile; A's journal row is skipped by B's recovery, as it should, since A holds its lock) finds no table
    ``out``, stages, records and commits; then A records and `warehouse.commit_publication` runs ``DROP TABLE IF
    EXISTS "out"`` and renames its staging table over it. Reproduced by running B inside A's staging step (the real
    `publish`, interleaved). Measured (kRR, ε = 1 each): both returned release ids (``p51e9…`` with column ``job``,
    ``p00d5…`` with ``sex``), both charged ε = 2 to ``table:people``, the release log lists both as publishing
    ``out``, and ``out`` holds ``sex`` only: B's table, reported published, was replaced without ``--replace``
    (analysts who read it meanwhile read a table whose release is now superseded). Sound: the output name is
    claimed (journal row per output, or a lock on it) from the check to the commit, and a second claim without
    ``--replace`` is refused before its charge; or the commit refuses an output created since the check."""
    from veil.errors import VeilError
    from veil.store import warehouse
    from veil.store.releases import list_releases

    policy = _warehouse(tmp_path / "d", people(60))
    stage = warehouse.stage_publication
    outcomes: list[str] = []

    def staged_then_another_publication(pol: Any, *args: Any, **kwargs: Any) -> None:
        stage(pol, *args, **kwargs)
        monkeypatch.setattr(warehouse, "stage_publication", stage)
        try:
            _publish(policy, "krr", {"table": "people", "columns": ["job"], "epsilon": 1.0, "output": "out"})
            outcomes.append("B published")
        except VeilError as exc:
            outcomes.append(f"B refused: {exc}")

    monkeypatch.setattr(warehouse, "stage_publication", staged_then_another_publication)
    try:
        _publish(policy, "krr", {"table": "people", "columns": ["sex"], "epsilon": 1.0, "output": "out"})
        outcomes.append("A published")
    except VeilError as exc:
        outcomes.append(f"A refused: {exc}")
    published = [r.params.get("columns") for r in list_releases(policy, kind="publication") if r.table == "out"]
    assert len(published) <= 1, f"{outcomes}: the release log holds {len(published)} publications of 'out' {published}"


# ==================================================================================================
# Part B — probes of defences that held (they pass today, and fail if the defence breaks)
# ==================================================================================================


@pytest.mark.slow
def test_B1_session_statements_never_change_who_is_charged(two_logins: Path) -> None:
    """bob connects with ``application_name=carol`` and ``options=-c role=carol``, then sends ``SET ROLE carol``,
    ``SET SESSION AUTHORIZATION carol``, ``SET veil.analyst = carol`` (42704) and ``SELECT set_config('veil.epsilon',
    '1e-300', false)``: ``current_user``/``session_user`` stay bob, ``veil.budget`` is bob's, and a private query is
    charged to ``analyst:bob`` at the policy's default ε (1/2), never to carol and never at the set_config value."""
    from fractions import Fraction

    import psycopg

    from tests.support.attack import PASSWORD
    from veil.policy import load_policy
    from veil.store.ledger import Ledger

    with _serve_fast(two_logins) as st:
        dsn = (
            f"host=127.0.0.1 port={st.port} user=bob password={PASSWORD} dbname=carol sslmode=disable "
            "application_name=carol options='-c role=carol'"
        )
        with psycopg.connect(dsn, autocommit=True) as conn:
            for sql in ("SET ROLE carol", "SET SESSION AUTHORIZATION carol"):
                conn.execute(sql)
            assert str(_outcome(conn, "SET veil.analyst = carol")).startswith("42704")
            conn.execute("SELECT set_config('veil.epsilon', '1e-300', false)").fetchall()
            assert conn.execute("SELECT current_user, session_user").fetchone() == ("bob", "bob")
            assert conn.execute("SELECT analyst FROM veil.budget").fetchall() == [("bob",)]
            conn.execute("SELECT COUNT(*) FROM people WHERE age > 30").fetchall()
    with Ledger(load_policy(two_logins).ledger_path) as led:
        assert led.spent("analyst:bob").epsilon == Fraction(1, 2)
        assert led.spent("analyst:carol").epsilon == 0
        assert [r["actor"] for r in led.reservations()] == ["bob"]


#: Extended-protocol messages a client may send out of place: each gets a typed error, and the connection answers on.
ODD_MESSAGES = {
    "function_call": (b"F", b"\x00\x00\x04\xd2\x00\x00\x00\x00\x00\x00"),
    "copy_data": (b"d", b"hello"),
    "copy_done": (b"c", b""),
    "copy_fail": (b"f", b"x\x00"),
    "unknown_tag": (b"@", b""),
    "describe_bad_kind": (b"D", b"Zx\x00"),
    "bind_unknown_statement": (b"B", b"\x00nosuch\x00\x00\x00\x00\x00\x00\x00"),
    "execute_unknown_portal": (b"E", b"nosuch\x00\x00\x00\x00\x00"),
}


@pytest.mark.slow
def test_B2_out_of_place_protocol_messages_get_typed_errors(two_logins: Path) -> None:
    """FunctionCall, CopyData/CopyDone/CopyFail outside COPY, an unknown message type, Describe of an unknown kind,
    Bind/Execute of unknown names — each followed by Sync — get a typed ErrorResponse (08P01 or 26000, never XX000)
    and ReadyForQuery, and the same connection then answers ``SELECT 1``."""
    from tests.support.attack import PASSWORD
    from tests.support.server import SYNC, error_code, message, raw_login, read_message

    codes = {}
    with _serve_fast(two_logins) as st:
        for name, (tag, payload) in ODD_MESSAGES.items():
            sock, err = raw_login(st.port, "bob", PASSWORD)
            assert sock is not None, err
            try:
                sock.settimeout(10)
                sock.sendall(message(tag, payload) + SYNC)
                replies = []
                while not replies or replies[-1][0] != b"Z":
                    replies.append(read_message(sock))
                codes[name] = [error_code(p) for t, p in replies if t == b"E"]
                sock.sendall(message(b"Q", b"SELECT 1\x00"))
                answer = []
                while not answer or answer[-1][0] != b"Z":
                    answer.append(read_message(sock))
                assert [t for t, _ in answer] == [b"T", b"D", b"C", b"Z"], (name, answer)
            finally:
                sock.close()
    assert all(c and all(x in ("08P01", "26000") for x in c) for c in codes.values()), codes


def _delta_at_one(led: Any, table: Any) -> None:
    """Two charges whose exact δ sum is 1 − 2/(3·10³⁰) < 1 (each passes the "δ never reaches 1" check), stored
    rounded *up* on the 10⁻³⁰ grid: the stored sum is 1."""
    from fractions import Fraction

    from veil.store.ledger import SPEND_GRID, Cost

    led.reserve(Cost(Fraction(1), 1 - Fraction(4, 3 * SPEND_GRID)), [table], actor="a")
    led.reserve(Cost(Fraction(1), Fraction(1, 3 * SPEND_GRID)), [table], actor="a")


def test_B3_a_delta_sum_rounded_up_to_one_reads_back_and_refuses_delta(tmp_path: Path) -> None:
    """An uncapped table's δ sum whose exact value is below 1 but whose stored value is rounded up to 1: the account
    still reads back (δ < 1, no InternalError), a δ = 0 charge goes on, and a δ = 10⁻⁹ charge is refused typed."""
    from fractions import Fraction

    from veil.errors import BudgetExhausted
    from veil.store.ledger import Account, Cost, Ledger

    table = Account.table("t", None, None)
    with Ledger(tmp_path / "ledger.sqlite") as led:
        _delta_at_one(led, table)
        assert led.spent("table:t").delta < 1
        led.reserve(Cost(Fraction(1), Fraction(0)), [table], actor="a")
        with pytest.raises(BudgetExhausted):
            led.reserve(Cost(Fraction(1), Fraction(1, 10**9)), [table], actor="a")
        assert led.spent("table:t").epsilon == 3


def test_A8_an_account_whose_delta_is_stored_at_one_refuses_every_delta(tmp_path: Path) -> None:
    """LOW (a ledger invariant; needs δ charges with denominators beyond 10³⁰, e.g. ``partition_delta = 1e-31``) —
    interface: any charge (query or publication) on an uncapped table.

    Mechanism: `Ledger._reserve` refuses a δ charge when ``spent.delta + cost.delta >= 1`` on the *read* spend, and
    `Ledger._spent` reads a stored sum of 1 as 1 − 10⁻³⁰ ("so … any δ is refused", its comment; docs/ledger.md: "a
    sum at 1 … reads as exhausted"). But a charge of δ < 10⁻³⁰ passes that check (1 − 10⁻³⁰ + 10⁻³¹ < 1), and
    `_add_spent` rounds the new sum up to the grid: 1 again. So once the stored δ is 1 (reached by rounding, see
    B3), every δ below 10⁻³⁰ is accepted, without bound: measured, 1,000 charges of δ = 10⁻³¹ all reserved, the
    account still reads δ = 1 − 10⁻³⁰ (their exact total would be 10⁻²⁸ beyond). Sound: compare the *stored* sum
    (or the rounded-up new sum) with 1, or refuse any δ > 0 once the stored sum is 1."""
    from fractions import Fraction

    from veil.errors import BudgetExhausted
    from veil.store.ledger import Account, Cost, Ledger

    table = Account.table("t", None, None)
    granted = 0
    with Ledger(tmp_path / "ledger.sqlite") as led:
        _delta_at_one(led, table)
        for _ in range(100):
            try:
                led.reserve(Cost(Fraction(1), Fraction(1, 10**31)), [table], actor="a")
                granted += 1
            except BudgetExhausted:
                break
    assert granted == 0, f"{granted} charges of δ = 1e-31 were reserved on an account whose δ is stored at 1"


# --- A9. ``veil publish kanon|synth --seed -5`` (and other unchecked options) end in tracebacks (LOW) -----------------

UNTYPED_PUBLISH = {
    "kanon_seed": ["kanon", "--qi", "age,sex", "--k", "5", "--seed", "-5", "--output", "o1"],
    "synth_seed": ["synth", "--sensitive", "sex", "--label", "income", "--columns", "job", "--epochs", "1", "--seed",
                   "-5", "--output", "o2"],
    "synth_repeated_column": ["synth", "--sensitive", "sex", "--label", "income", "--columns", "job,job", "--epochs", "1",
                              "--output", "o3"],
}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(UNTYPED_PUBLISH))
def test_A9_publish_options_are_refused_typed(tmp_path: Path, case: str) -> None:
    """LOW (bad input, untyped: the CLI prints a traceback, exit 1) — interface: ``veil publish kanon --seed -5``,
    ``veil publish synth --seed -5``, ``veil publish synth --columns job,job``.

    Mechanism: `base.check_seed` (0 ≤ seed < 2³²; InputError otherwise) is called by ``sdc`` and ``pate`` plans, not
    by ``kanon``'s or ``synth``'s: the seed reaches numpy (``ValueError: expected non-negative integer``) or
    scikit-learn (``InvalidParameterError: The 'random_state' parameter of train_test_split …``). Measured with
    CliRunner: exit 1 with those exceptions (sdc and pate: exit 2, ``InputError: --seed must be an integer between 0
    and 4294967295``); ``--columns job,job`` ends in ``TypeError: the first argument must be callable``. Two more
    unchecked options, by hand only (each harms the shared test process): ``veil publish
    synth --threads 100000`` (``RuntimeError: can't start new thread``; torch keeps the setting, so the process's later
    trainings fail too) and ``veil publish kanon --som-neurons 100000000:100000000`` (``MemoryError`` after trying to
    allocate the map). Nothing is charged (non-DP kinds). Sound: the same `check_seed` in every plan, an upper bound
    on ``--threads`` (e.g. the CPU count) and on SOM neuron counts (e.g. the number of rows), typed."""
    from tests.publish_support import make_warehouse, veil

    policy = make_warehouse(tmp_path, n=80)
    kind, *args = UNTYPED_PUBLISH[case]
    res = veil("publish", kind, "--policy", policy, "--table", "people", *args)
    assert res.exit_code == 2, f"{case}: exit {res.exit_code}, {type(res.exception).__name__}: {res.exception}"


# --- A10. ``SELECT 'aaa…' LIKE '%a%a%a%a%a%a%a%a%b'``: exponential backtracking under the GIL, beyond every timeout --


@pytest.mark.slow
def test_A10_a_table_less_like_pattern_does_not_freeze_the_server(two_logins: Path) -> None:
    """MEDIUM (availability: one analyst freezes the whole server process for minutes to forever with one ~80-byte
    statement; no timeout, cancel or SIGTERM can stop it) — interface: ``veil serve``, any client after login:
    ``SELECT '<56 × a>' LIKE '%a%a%a%a%a%a%a%a%b'`` (table-less), or the same pattern in a catalog query
    (``… FROM pg_class WHERE relname LIKE …``), or a regular expression (``~ '(a+)+$'``).

    Mechanism: table-less and catalog queries run on sqlglot's Python executor (A4), which turns ``LIKE`` into a
    Python regular expression (``.*a.*a…b``) and ``~`` into ``re.search``; Python's ``re`` backtracks, in C, holding
    the GIL for the whole match. Measured with sqlglot's executor alone: 8 ``%a`` on 40 a's 1.8 s, on 48 a's 6.8 s,
    on 56 a's 21.7 s; 9 on 45 a's 20 s, 10 on 50 a's 249 s, and each further ``%a`` multiplies it — 14 on 70 a's did
    not end within the 300 s the probe ran (server thread and client in one process). `--catalog-timeout`'s trace
    function and the statement timeout run only between Python calls, so they fire after the match; SIGTERM's handler
    waits for the GIL too. Sound: evaluate LIKE without backtracking (a linear-time matcher, as PostgreSQL's), bound
    the pattern (wildcards, length) before matching, or refuse LIKE/``~`` in catalog and table-less queries (psql's
    ``\\d pattern`` sends ``~ '^(name)$'`` with the client's pattern: keep those to a safe anchored subset).
    Checked: every ``SELECT 1`` carol sends while bob's 8-wildcard pattern runs over 48 a's is answered within 1.5 s."""
    attack = "SELECT '" + "a" * 48 + "' LIKE '" + "%a" * 8 + "%b' AS v"
    waited, ended = _longest_wait_while(two_logins, attack)
    assert waited < 1.5, (
        f"carol's SELECT 1 waited {waited:.1f} s while bob's LIKE ran ({ended.get('seconds', 0):.1f} s, "
        f"ended {str(ended.get('outcome'))[:60]!r})"
    )


# --- A11. ``kanon --missing leaf``: the gate refuses the "?" leaf it produces, once enough people lack a value -------


@pytest.mark.slow
def test_A11_kanon_missing_leaf_outcome_does_not_depend_on_one_persons_missing_value(tmp_path: Path) -> None:
    """LOW (a documented option fails on real data, and whether it fails depends on one person) — interface: ``veil
    publish kanon --qi job,sex --sensitive income --k 5 --missing leaf`` (the option docs/kanon.md offers to keep rows
    with missing QIs).

    Mechanism: with ``--missing leaf`` a missing categorical QI becomes the leaf ``?`` (`anonymisation.MISSING_LEAF`,
    added to every hierarchy). Once a class's ``job`` values are all missing, the generalised label is ``?`` itself —
    but the gate's domain check accepts in a generalised column only declared values and range/set/``*`` labels
    (`gate._is_generalised_label`), so it refuses: "column 'job' has value '?' outside the declared values". D′: 200
    people, 7 with no ``job`` → published (their jobs generalised to ``*``, 21 rows); D: person 7's job missing too
    (8) → refused (measured; 8 to 20 missing: all refused). So the publication exists or not depending on one
    person's missing value, and ``--missing leaf`` cannot publish a table with a column where k or more people lack a
    value (Mondrian forms their class). Sound: the gate accepts the missing leaf in a generalised column (it is a
    label of the method, like ``*``), or the generator generalises a ``?``-only class to ``*``."""
    from veil.errors import VeilError

    outcomes = {}
    for world, missing in (("d", 8), ("d_prime", 7)):
        frame = people(200)
        frame["job"] = frame["job"].astype(object)
        frame.loc[0 : missing - 1, "job"] = None
        policy = _warehouse(tmp_path / world, frame)
        try:
            _publish(policy, "kanon", {"table": "people", "qi": ["job", "sex"], "sensitive": ["income"], "k": 5,
                                       "algorithm": "mondrian", "missing": "leaf", "output": "pk"})  # fmt: skip
            outcomes[world] = "published"
        except VeilError as exc:
            outcomes[world] = f"{type(exc).__name__}: {str(exc)[:100]}"
    assert outcomes["d"] == outcomes["d_prime"], f"8 missing jobs: {outcomes['d']!r}; 7: {outcomes['d_prime']!r}"


@pytest.mark.slow
def test_A12_kanon_hierarchy_labels_of_a_declared_category_pass_the_gate(tmp_path: Path) -> None:
    """LOW (a documented feature fails whenever the policy declares the column's values) — interface: ``veil
    publish kanon --qi job,age,sex --hierarchies DIR`` with ``DIR/job.csv`` = ``nurse;care;*``, ``smith;manual;*``,
    ``clerk;manual;*`` (ARX format) and ``job`` declared ``values = ["nurse", "smith", "clerk"]``.

    Mechanism: the same narrow label test as A11: in a generalised column the gate accepts declared values and
    range/set/``*`` labels only (`gate._out_of_domain` → `_is_label_of`), so a class generalised to the hierarchy's
    node ``manual`` is "outside the declared values". Measured on 200 people: Mondrian and K-Member refused
    ("column 'job' has value 'manual' outside the declared values"), OKA published (it happened to use ``*``); the
    Adult tests pass only because their policy declares no values for the hierarchy columns. Sound: a generalised
    column may hold its hierarchy's inner nodes (known from the hierarchy file, a public input), checked as such."""
    frame = people(200)
    policy = _warehouse(tmp_path / "d", frame)
    folder = tmp_path / "hierarchies"
    folder.mkdir()
    (folder / "job.csv").write_text("nurse;care;*\nsmith;manual;*\nclerk;manual;*\n", encoding="utf-8")
    result = _publish(policy, "kanon", {"table": "people", "qi": ["job", "age", "sex"], "sensitive": ["income"], "k": 5,
                                        "algorithm": "mondrian", "hierarchies": str(folder), "output": "pk"})  # fmt: skip
    assert result.rows == 200


# --- A13. ``[ledger] path`` naming another of Veil's files: untyped sqlite3 errors, or a ledger where the mirror goes ---

LEDGER_TARGETS = {"policy": "policy2.toml", "warehouse": "warehouse.duckdb", "source_csv": "people.csv"}


@pytest.mark.slow
@pytest.mark.parametrize("target", sorted(LEDGER_TARGETS))
def test_A13_a_ledger_path_on_another_file_is_a_typed_policy_error(tmp_path: Path, target: str) -> None:
    """LOW (a careless curator; untyped traceback, exit 1) — interface: a policy whose ``[ledger] path`` names the
    policy file itself, the warehouse or any file that is not an SQLite ledger; then ``veil query`` (or ``veil
    budget``, ``veil publish``, ``veil serve``).

    Mechanism: `Ledger.__init__` opens whatever the path names with SQLite (`store/_sqlite.connect_sqlite`, then
    ``PRAGMA journal_mode=WAL`` and the schema), and nothing checks that it is a ledger or that it is not one of
    Veil's other files (the policy validation compares no paths; s24 A11 protected these files from model outputs
    only). Measured (CliRunner, ``veil query``): ``sqlite3.DatabaseError: file is not a database`` for the policy, the
    warehouse and the CSV; ``OperationalError: unable to open database file`` for ``path = "."``. And ``path =
    "warehouse.public.duckdb"`` (the public mirror's name, before the mirror exists) is *accepted*: the query is
    answered and an SQLite ledger now sits where DuckDB's mirror goes, so every later public query and publication
    mirror step fails. Sound: refuse, typed (PolicyError at load), a ledger path equal to the policy, the warehouse or
    its mirror (and their journals), and report a file that is not a ledger as a PolicyError naming it."""
    from tests.publish_support import make_warehouse, veil

    policy = make_warehouse(tmp_path, n=60)
    other = tmp_path / "policy2.toml"
    other.write_text(policy.read_text().replace('path = "ledger.sqlite"', f'path = "{LEDGER_TARGETS[target]}"'))
    res = veil("query", "--policy", other, "--analyst", "bob", "SELECT COUNT(*) FROM people")
    assert res.exit_code == 2, f"ledger = {target}: exit {res.exit_code}, {type(res.exception).__name__}: {res.exception}"


# --- A14. The per-analyst cap (s24 A3) is bypassed with idle pre-login sockets from the analysts' shared address ---


@pytest.mark.slow
def test_A14_one_analyst_and_idle_sockets_cannot_lock_out_another_analyst_of_the_same_host(two_logins: Path) -> None:
    """MEDIUM (availability; s24 A3 again, through the pre-login slots) — interface: ``veil serve`` on a host whose
    analysts connect from one address (loopback, a jump host, a notebook server, a NAT): here ``--max-connections 6``
    (the same with 100).

    Mechanism: s24 A3 capped one analyst's logged-in connections at half of ``--max-connections`` (3 of 6). The
    other half is free for others — unless someone fills it with sockets that never log in: bob (or any local user,
    no login needed) opens 3 TCP connections and sends nothing. Slots count open sockets, logged in or not; when
    carol connects, `admission.py` may evict a pre-login socket only of *another* network than the newcomer's
    ("the newcomer's own network [is] never cut"), and all of them are on 127.0.0.1. Measured: bob's 4th login got
    53300 (the cap), his 3 idle sockets were accepted, and carol's login 3 s later got ``53300 sorry, too many clients
    already (6 connections open, the limit is 6)``; the idle sockets last ``--auth-timeout`` (60 s) and are reopened
    at will. Sound: a pre-login socket that has waited more than a few seconds may be evicted for any newcomer, own
    network included (it made no progress; the newcomer may be a real login), or pre-login sockets get a share of
    the slots of their own."""
    import socket

    from tests.adversarial.test_redteam_s20 import _login
    from tests.support.attack import PASSWORD

    with _serve_fast(two_logins, max_connections=6) as st:
        held, idle = [], []
        try:
            for _ in range(6):
                try:
                    held.append(_bob(st))
                except Exception:  # the per-analyst cap (53300): expected after 3
                    break
            for _ in range(6 - len(held)):
                idle.append(socket.create_connection(("127.0.0.1", st.port), timeout=10))
            time.sleep(2.5)  # older than the admission's 2 s
            outcome = _login(st.port, "carol", PASSWORD)
        finally:
            for sock in idle:
                sock.close()
            for conn in held:
                conn.close()
    assert outcome == "ok", f"bob holds {len(held)} logins and {len(idle)} idle sockets; carol's login ended {outcome!r}"


@pytest.mark.slow
def test_B4_a_batch_of_many_statements_is_bounded_as_one(two_logins: Path) -> None:
    """A simple-query message of 5,000 × ``SELECT 1;`` (45 KB, each statement answered on the event loop if split) is
    refused as a whole, typed (54001, its 15,000 tokens over the limit of 4,000), before any statement runs."""
    from tests.support.attack import PASSWORD
    from tests.support.server import error_code, message, raw_login, read_message

    with _serve_fast(two_logins) as st:
        sock, err = raw_login(st.port, "bob", PASSWORD)
        assert sock is not None, err
        try:
            sock.settimeout(30)
            sock.sendall(message(b"Q", ("SELECT 1;" * 5000).encode() + b"\x00"))
            replies = []
            while not replies or replies[-1][0] != b"Z":
                replies.append(read_message(sock))
        finally:
            sock.close()
    assert [(t, error_code(p) if t == b"E" else None) for t, p in replies] == [(b"E", "54001"), (b"Z", None)]


_HOLD_LOCK = """
import sys, time
from veil.policy import load_policy
from veil.store import warehouse
with warehouse.publication_lock(load_policy(sys.argv[1]), sys.argv[2]):
    print("locked", flush=True)
    time.sleep(120)
"""


@pytest.mark.slow
def test_B5_recovery_in_another_process_leaves_an_in_flight_publication_alone(tmp_path: Path) -> None:
    """s24 A5's fix across real processes: a child process holds publication ``token``'s lock (as a running
    ``veil publish`` does from staging to finish) while its table is staged; the parent's `transaction.recover` (what
    ``veil tables`` runs first) skips it and the staged table stays. Once the child is killed (SIGKILL: the OS frees
    the lock), the next recovery rolls it back (no release recorded)."""
    import signal
    import subprocess
    import sys

    from veil.generators import transaction
    from veil.store import warehouse

    policy = _warehouse(tmp_path / "d", people(30))
    token = "b5token0"
    child = subprocess.Popen([sys.executable, "-c", _HOLD_LOCK, str(policy.path), token], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "locked"
        warehouse.stage_publication(policy, token, "out", people(5)[["age"]])
        assert transaction.recover(policy) == []
        assert [r["token"] for r in warehouse.pending_publications(policy)] == [token]
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(30)
        if child.stdout is not None:
            child.stdout.close()
    assert transaction.recover(policy) == ["rolled back out"]
    assert warehouse.pending_publications(policy) == []


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["mondrian", "oka", "kma"])
def test_B6_kanon_hides_one_persons_outlier_and_rare_category(tmp_path: Path, algorithm: str) -> None:
    """Person 7 alone has the undeclared job ``astronaut`` and person 8 the out-of-bounds age 150: the k-anonymous
    table (QIs age, job, sex; k = 5) never shows either value — the age sits in an open range (``[74, inf)``) and the
    job under ``*`` — and its column types are the declared ones (generalised QIs as text)."""
    from tests.adversarial.test_redteam_s16 import _published

    frame = people(60)
    frame.loc[7, "job"] = "astronaut"
    frame.loc[8, "age"] = 150
    policy = _warehouse(tmp_path / "d", frame)
    _publish(policy, "kanon", {"table": "people", "qi": ["age", "job", "sex"], "sensitive": ["income"], "k": 5,
                               "algorithm": algorithm, "output": "pk"})  # fmt: skip
    rows = _published(policy, "SELECT age, job, sex, income FROM pk")
    shown = [r for r in rows if any("150" in str(v) or "astronaut" in str(v) for v in r)]
    assert len(rows) == 60 and not shown, shown[:3]
    types = dict(_published(policy, "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = 'pk'"))
    assert types == {"age": "VARCHAR", "job": "VARCHAR", "sex": "VARCHAR", "income": "VARCHAR"}, types


# --- A15. A public query's answer is unbounded: one analyst's free cross join of a published table OOMs the server ---


def _peak_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM"))


@pytest.mark.slow
def test_A15_a_public_cross_join_does_not_grow_the_server_without_bound(tmp_path: Path) -> None:
    """MEDIUM (availability: one analyst, free, takes the whole server down) — interface: ``veil serve``, any client:
    ``SELECT a.age, b.age, c.age, d.sex FROM pk a, pk b, pk c, pk d`` on a published (public) table ``pk`` of 60
    rows: 60⁴ ≈ 13 M rows; a 5-way join, 778 M.

    Mechanism: a public-only query runs on the public engine and its whole answer is fetched into Python
    (`pipeline` → ``env.public_engine.execute(public_sql)`` → ``public_answer``) before the first row is sent; the
    per-connection bounds (`held.py`) count portals and cursors, and docs/server.md allows "at most that plus one
    answer … however large"; ``--public-query-timeout`` (120 s) bounds the engine's time, not the answer's size, and
    DuckDB makes millions of joined rows per second. Public queries cost nothing, so nothing else bounds them.
    Measured on a ``veil serve`` process (4-way join restricted to ``d.age = a.age``, 1,519,200 rows of 4 short
    columns): peak RSS 212 → 1,022 MB (+810 MB, 16 s); the full 4-way join would need ~7 GB, the 5-way far more —
    the kernel's OOM killer ends the server and every analyst's session (not run: it would take the shared test host
    down). Sound: stream public answers to the client (fetch in chunks under the unread-replies bound), or refuse
    (typed, 54000/53400) an answer beyond a row/byte limit before materialising it. Checked: a 4-way join restricted
    to 626,400 rows (+348 MB today) grows the server's peak RSS by less than 150 MB."""
    from tests.support.attack import PASSWORD, set_password
    from tests.support.server import message, raw_login, read_message

    policy = _warehouse(tmp_path / "d", people(60))
    _publish(policy, "kanon", {"table": "people", "qi": ["age", "sex"], "sensitive": ["income"], "k": 5,
                               "algorithm": "mondrian", "output": "pk"})  # fmt: skip
    set_password(policy.path, "bob")
    sql = "SELECT a.age, b.age, c.age, d.sex FROM pk a, pk b, pk c, pk d WHERE d.age = a.age AND d.sex = 'F'"
    with _serve_subprocess(policy.path) as (port, pid):
        sock, err = raw_login(port, "bob", PASSWORD)
        assert sock is not None, err
        try:
            before = _peak_kib(pid)
            sock.settimeout(300)
            sock.sendall(message(b"Q", sql.encode() + b"\x00"))
            rows = 0
            while (tag := read_message(sock)[0]) != b"Z":
                rows += tag == b"D"
            grown = (_peak_kib(pid) - before) / 1024
        finally:
            sock.close()
    assert grown < 150, f"a public answer of {rows:,} rows grew the server's peak RSS by {grown:.0f} MB"


# --- A16. ``--columns age,AGE`` (a column twice after normalisation): a DP publication is charged, then crashes ------

REPEATED_COLUMNS = {
    "dp_grid_spellings": ("dp_microagg_laplace", ["age", "AGE"], None, ["epsilon=1.0"]),
    "dp_grid_repeated": ("dp_microagg_laplace", ["age", "age"], None, ["epsilon=1.0"]),
    "mdav_target_in_columns": ("microagg_mdav", ["hours", "age"], "age", ["k=5"]),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(REPEATED_COLUMNS))
def test_A16_repeated_columns_are_refused_typed_before_the_charge(tmp_path: Path, case: str) -> None:
    """LOW (budget lost on a typo, untyped traceback; s24 A10's class) — interface: ``veil publish sdc --method
    dp_microagg_laplace --columns age,AGE --param epsilon=1`` (or ``age,age``; or ``--columns hours,age --target age``
    for any SDC method).

    Mechanism: the SDC plan normalises the names (`normalise_name`: ``AGE`` → ``age``) but never checks that they are
    distinct, nor that the target is not also a protected column (kRR's plan refuses repeats, s20 A6). `check_source`
    runs the generator's `check_context` on the source frame, whose single ``age`` column passes; then, after the
    reservation, `sdc.clean_input` selects ``data[['age', 'age']]`` — a frame with two ``age`` columns — and
    `check_context` (``clean[c].dtype`` on a DataFrame) raises ``AttributeError: 'DataFrame' object has no attribute
    'dtype'``. Measured: ``table:people`` charged ε = 1 with the reservation left ``reserved`` (nothing released), the
    CLI prints a traceback (exit 1). Sound: the plan refuses a column named twice (after normalisation) and a target
    among the columns, typed (InputError), before anything is charged."""
    from veil.errors import VeilError
    from veil.store.ledger import Ledger

    method, columns, target, params = REPEATED_COLUMNS[case]
    policy = _warehouse(tmp_path / "d", people(80))
    request = {"table": "people", "method": method, "columns": columns, "target": target, "params": params, "output": "o"}
    try:
        _publish(policy, "sdc", request)
        outcome = "published"
    except VeilError as exc:
        outcome = f"typed: {type(exc).__name__}"
    except Exception as exc:  # the bug: an untyped crash
        outcome = f"untyped: {type(exc).__name__}: {exc}"
    with Ledger.for_policy(policy) as led:
        spent = led.spent("table:people").epsilon
    assert outcome.startswith("typed") and spent == 0, f"{case}: {outcome}; table:people charged ε = {spent}"
