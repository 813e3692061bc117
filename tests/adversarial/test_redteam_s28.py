"""Red team, session 28: attacks on the fixes landed in session 27's last hour (bounded table-less evaluation,
collation-free public reads, public key domains, public answer bound, admission, publications).

Part A holds attacks that succeed on 2026-11-26 (main at 7152eb1): each test is a strict xfail that FAILS today
(the lead removes the mark when fixing). Part B holds probes of defences that held. Findings (details in each
test's docstring):

* A1 (MEDIUM, availability) table-less/catalog evaluation: ``ARRAY_TO_STRING`` (sqlglot's ``ARRAYTOSTRING``, and
  ``ARRAY_CAT``) is left unbounded in the executor's ENV: nested derived tables over a catalog table multiply a
  text ×15 per level. A 520-byte statement built 1.37·10⁹ characters in the server (2 s, measured through psycopg);
  one more level is 2·10¹⁰ (the host's memory). The ``MAX_TEXT`` bound covers ``||``/``CONCAT`` only. Same for
  ``ARRAY_CAT`` (×4 per level; an 18-level statement had the evaluating process OOM-killed).
* A3 (MEDIUM, availability, free) the public answer bound (``bounded_public``: LIMIT 100,001, 54000 beyond) counts
  rows, not cells: ``SELECT a.pk * 1.5, … (600 times) FROM pub a, pub p0, …, pub p7 LIMIT 100000`` (3,629 tokens,
  within ``veil serve``'s 4,000) over a 4-row public table is answered with 60 M cells: 27 s and peak RSS 230 MB →
  3.5 GB (in-process, measured); without the LIMIT it is refused only after 100,001 rows × 600 columns were
  fetched (200 columns: +800 MB for the refusal).
* A4 (MEDIUM, availability) admission: an outsider with no credentials, from another address, keeps out any analyst
  whose login takes longer than the 2 s grace (TLS over a high-latency link: ~6 round trips; a login waiting out
  the login backoff, which the outsider can itself raise by failing as that user): with the server's slots full
  of its own fresh idle sockets, each new socket of the outsider evicts the stalest pre-login connection — the
  analyst's, mid-SCRAM. Measured: bob paused 2.6 s after AuthenticationSASL; the outsider's 4 new sockets
  (127.0.0.2) closed his connection.
* A5 (HIGH, guarantee) PATE's held-out student on a table with a privacy unit (``max_rows_per_unit = 5``): a
  person's rows are all the student's (role keyed by unit) and each is sent as its own ε_local-LDP record (query
  order by content), but the plan charges one record's ε_local: measured 5 records × ε_local 2 = 10 for the
  person, charged 7.79.
* A6 (LOW, wrong answers) a public key read through a derived table's aggregate (``JOIN (SELECT pk, MAX(pn) AS g
  FROM pub GROUP BY pk) d … GROUP BY d.g``) gets the aggregate over the whole table as its domain: one group
  released instead of four (``COUNT(*) AS g``: none).
* A2 (LOW, availability) table-less ``ROUND(5, -30000000)`` is Python's ``round(int, ndigits)``, which computes
  ``10 ** 30000000`` exactly: the catalog timeout answers 57014 after 5 s but the pool thread runs on (45 s
  measured for -3·10⁷; -10⁹ is hours), so a handful of statements take every catalog thread (other connections
  were still answered at once: the event loop held).
* Held (Part B, and by hand): nested ``||`` through derived tables is refused at 1 MiB; float powers and casts
  beyond bigint are 22003; a slow login completes when no newcomer arrives (A4's control). By hand: public text
  keys through scalar subqueries, ``IN``/``EXISTS`` subqueries, ``UNION`` in a CTE and a second read of the
  private table in a derived key source are refused typed (0A000/42501); keys mixing a declared private int with
  public columns (``pub.pk * 1.1 + t.f``, ``pub.pk + t.f / 3``, ``pub.pn || CAST(t.f * 0.5 AS VARCHAR)``) release
  the engine's groups; ``REPEAT``/``LPAD``/``STRING_AGG`` are refused on the public path and nested ``||`` is
  priced (0A000); Sail 0.7.2 evaluates ``DECODE(ENCODE(CAST(… AS STRING), 'utf-8'), 'utf-8')`` and non-ANSI casts
  to NULL; ``~`` with alternation goes to RE2; the PATE teachers' shard and role are keyed by the unit id.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.server.test_bounded_eval import _evaluate

# ==================================================================================================
# Part A — attacks that succeed today
# ==================================================================================================


def _nested(step: str, levels: int, source: str = "(SELECT 'abcdefgh' AS x) AS t") -> str:
    """``LENGTH`` of a text rebuilt by ``step`` (an expression of ``x``) once per nested derived table."""
    inner = source
    for _ in range(levels):
        inner = f"(SELECT {step} AS x FROM {inner}) AS t"
    return f"SELECT LENGTH(x) AS n FROM {inner}"


def _amplified(levels: int) -> str:
    """A text multiplied ×15 per level by ``ARRAY_TO_STRING(ARRAY[x × 8], x)``."""
    return _nested("ARRAY_TO_STRING(ARRAY[x,x,x,x,x,x,x,x], x)", levels)


def test_A1_array_to_string_cannot_build_text_beyond_the_bound() -> None:
    """MEDIUM (availability) — interface: ``veil serve``, any logged-in client, a catalog statement.

    Attack: ``SELECT LENGTH(x) AS n FROM (SELECT ARRAY_TO_STRING(ARRAY[x,x,x,x,x,x,x,x], x) AS x FROM (… FROM
    (SELECT 'abcdefgh' AS x FROM pg_catalog.pg_namespace WHERE nspname = 'public') AS t) …) AS t`` — routed as a
    system statement (it names ``pg_catalog``), evaluated by sqlglot's executor. Each level multiplies the text
    ×15; ``bounded.install`` replaced ``CONCAT``/``||``/``CONCAT_WS`` with the 1 MiB bound but left
    ``ARRAYTOSTRING`` (``separator.join``) and ``ARRAYCONCAT`` as Python's. Measured through psycopg: 5 levels
    6,075,000 chars (0.4 s), 6 levels 91,125,000, 7 levels 1,366,875,000 (2 s, >1.4 GB held by the server); 8
    levels would be 2·10¹⁰ characters. Root cause: ``veil/server/bounded.py`` ``_BOUNDED`` (lines ~369–389)
    bounds a list of known operators instead of admitting a list of bounded ones (every ENV name not replaced is
    still Python's). Here in-process (the executor alone, as ``tests/server/test_bounded_eval.py``): 6 levels must be
    refused 54000 (text over ``MAX_TEXT``)."""
    assert _evaluate(_amplified(6)) == "54000"


def test_A1_array_cat_cannot_build_arrays_beyond_the_bound() -> None:
    """A1's twin: ``ARRAY_CAT(ARRAY_CAT(x, x), ARRAY_CAT(x, x))`` per nested derived table multiplies a list ×4 per
    level (sqlglot's ``ARRAYCONCAT``, Python list concatenation). 10 levels: 4,194,304 elements, built; 18 levels
    (a 1.4 KB statement) had this test's process killed by the kernel's OOM killer. Must be refused 54000."""
    sql = _nested("ARRAY_CAT(ARRAY_CAT(x, x), ARRAY_CAT(x, x))", 10, "(SELECT ARRAY[1, 2, 3, 4] AS x) AS t")
    assert _evaluate(sql.replace("SELECT LENGTH(x) AS n FROM", "SELECT x FROM", 1)) == "54000"


def test_A2_round_to_huge_negative_digits_is_refused_at_once() -> None:
    """LOW (availability) — interface: ``veil serve``, table-less ``SELECT ROUND(5, -30000000) AS v``.

    sqlglot's ``ROUND`` is ``round(this, ndigits=decimals)``; for an integer and negative ``ndigits`` CPython
    computes ``10 ** -ndigits`` exactly (the same big-integer power s27 A4 closed for ``^``). Measured: -3·10⁶
    1.75 s, -8·10⁶ 5 s in-process; through the server -3·10⁷ answered 57014 after the 5 s catalog timeout while the
    pool thread ran on 45 s (``FairExecutor.run`` cancels the future, not the thread); -10⁹ runs for hours, and a
    few such statements hold every catalog thread. Root cause: ``veil/server/bounded.py`` ``_BOUNDED`` has no
    ``ROUND``. Run in a child process: it must answer (typed refusal or a value) within 3 s."""
    code = (
        "import sys; sys.path.insert(0, '.');"
        "from tests.server.test_bounded_eval import _evaluate;"
        "print('ready', flush=True);"
        "print(_evaluate('SELECT ROUND(5, -30000000)'), flush=True)"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        ready = child.stdout.readline().strip()  # the imports, however loaded the machine, are not timed
        try:
            out, err = child.communicate(timeout=3)
        except subprocess.TimeoutExpired:
            answer = "still running after 3 s"
        else:
            answer = out.strip() or f"{ready} {err[-300:]}"
    finally:
        child.kill()
        child.communicate()
    assert answer in {"22003", "54000", "[(0,)]"}


_WIDE_CHILD = """
import resource, sys, tempfile
from fractions import Fraction
from pathlib import Path
sys.path.insert(0, '.')
from tests.adversarial.test_redteam_s4 import POLICY, _base_rows, _frame
from tests.adversarial.test_redteam_s26 import CASED_PUB
from veil.policy import load_policy
from veil.proxy._testing import exact_session
from veil.store.warehouse import write_table
d = Path(tempfile.mkdtemp())
(d / 'policy.toml').write_text(POLICY, encoding='utf-8')
policy = load_policy(d / 'policy.toml')
write_table(policy, 'pub', CASED_PUB, replace=True, public=True)
write_table(policy, 't', _frame(_base_rows()), replace=True)
with exact_session(policy, 'a') as s:
    s.execute('SELECT a.pk FROM pub a, pub b', epsilon=Fraction(1))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    try:
        outcome = len(s.execute(sys.argv[1], epsilon=Fraction(1)).rows)
    except Exception as exc:
        outcome = getattr(exc, 'sqlstate', type(exc).__name__)
    print(outcome, (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)
"""


@pytest.mark.slow
def test_A3_a_wide_public_answer_is_bounded_in_cells() -> None:
    """MEDIUM (availability, free) — interface: every (API, ``veil serve``): a public-only query.

    ``bounded_public`` (``veil/proxy/pipeline.py`` ~171) adds ``LIMIT 100001`` and ``_check_public_rows`` refuses
    beyond 100,000 rows, but nothing bounds the columns: each select item is one more Python object per row, and
    only the token limit (4,000 in ``veil serve``) bounds the items. Measured in-process over a 4-row public table
    cross-joined 9 times: 600 × ``a.pk * 1.5`` with ``LIMIT 100000`` answered, 27 s, peak RSS 230 MB → 3.5 GB; 200
    columns without LIMIT refused 54000 after +800 MB. The same with s27 A15's published 60-row table over the wire
    (the answer is also encoded for the client). Sound: bound rows × columns (or bytes) before fetching, from the
    select list's width. Here (child process): 100 columns × 100,000 rows (10 M cells) must be refused, or cost
    the process under 150 MB."""
    cols = ", ".join("a.pk * 1.5" for _ in range(100))
    sql = f"SELECT {cols} FROM pub a, " + ", ".join(f"pub p{i}" for i in range(8)) + " LIMIT 100000"
    done = subprocess.run([sys.executable, "-c", _WIDE_CHILD, sql], timeout=240, capture_output=True, text=True, check=False)
    outcome, grown = done.stdout.split() if done.stdout.strip() else (done.stderr[-300:], "0")
    assert outcome == "54000" or int(grown) < 150, f"answered {outcome} rows, peak RSS +{grown} MB"


def _slow_login(port: int, user: str, password: str, pause: float) -> str:
    """A SCRAM login whose client pauses ``pause`` seconds after the server's AuthenticationSASL (a slow link)."""
    import socket
    import struct

    from scramp import ScramClient

    from tests.support.server import error_code, message, read_message, startup_packet

    sock = socket.create_connection(("127.0.0.1", port), timeout=15)
    try:
        sock.sendall(startup_packet(user))
        tag, payload = read_message(sock)
        if tag != b"R":
            return f"startup: {error_code(payload)}"
        time.sleep(pause)
        client = ScramClient(["SCRAM-SHA-256"], user, password)
        first = client.get_client_first().encode()
        sock.sendall(message(b"p", b"SCRAM-SHA-256\x00" + struct.pack("!i", len(first)) + first))
        tag, payload = read_message(sock)
        if tag != b"R":
            return f"sasl: {error_code(payload)}"
        client.set_server_first(payload[4:].decode())
        sock.sendall(message(b"p", client.get_client_final().encode()))
        while (tag := read_message(sock)[0]) != b"Z":
            if tag == b"E":
                return "final: error"
        return "ok"
    except (ConnectionError, OSError) as exc:
        return f"closed: {type(exc).__name__}"
    finally:
        sock.close()


def _outsider_and_slow_login(tmp_path: Path, newcomers: int) -> str:
    """The outsider's idle sockets and newcomers against bob's login paused 2.6 s."""
    import socket
    import threading

    from tests.adversarial.test_redteam_s20 import _serve
    from tests.publish_support import make_warehouse
    from tests.support.attack import PASSWORD, set_password

    policy = make_warehouse(tmp_path, n=20)
    set_password(policy, "bob")
    idle: list[socket.socket] = []

    def outsider(started: float) -> None:
        time.sleep(max(0.0, started + 2.2 - time.monotonic()))
        for _ in range(newcomers):
            with contextlib.suppress(OSError):
                idle.append(socket.create_connection(("127.0.0.1", st.port), timeout=5, source_address=("127.0.0.2", 0)))
            time.sleep(0.1)

    with _serve(policy, max_connections=4) as st:
        try:
            for _ in range(3):
                idle.append(socket.create_connection(("127.0.0.1", st.port), timeout=5, source_address=("127.0.0.2", 0)))
            time.sleep(0.1)
            churn = threading.Thread(target=outsider, args=(time.monotonic(),))
            churn.start()
            outcome = _slow_login(st.port, "bob", PASSWORD, pause=2.6)
            churn.join()
        finally:
            for sock in idle:
                sock.close()
    return outcome


@pytest.mark.slow
def test_A4_an_outsider_cannot_evict_a_login_in_progress(tmp_path: Path) -> None:
    """MEDIUM (availability) — interface: ``veil serve`` (``--max-connections 4``; the same at 100).

    The outsider (no credentials, 127.0.0.2) holds 3 idle sockets; bob (127.0.0.1) connects into the last slot and
    his client pauses 2.6 s after AuthenticationSASL (a satellite or congested link: TLS plus SCRAM are ~6 round
    trips; or a login held by the login backoff, ``login_backoff_max`` 30 s, which anyone raises by failing as
    bob). At 2.2 s the outsider opens 4 new sockets, 0.1 s apart: `PreLogin.victim` (``veil/server/admission.py``
    ~98–113) finds no network with 2 more than the outsider's, then ``_stalest``: the connection of any network
    waiting longest past the grace — the outsider's own three (swaps), then bob's, mid-login, cancelled. The s27 A14
    fix ("a login in progress, which takes milliseconds, is never cut") assumes every login is fast; ``_stalest``
    cannot tell an idle socket (no startup message) from a login in progress. Sound: evict only sockets that have
    not sent a startup packet (or that sent nothing for the grace), never one that answered the last challenge."""
    outcome = _outsider_and_slow_login(tmp_path, newcomers=4)
    assert outcome == "ok", f"bob's login ended {outcome!r}"


# --- A5. PATE's held-out student: a person with several rows sends several local-DP records, charged as one ----

_UNIT_POLICY = """\
[database]
path = "warehouse.duckdb"
[ledger]
path = "ledger.sqlite"

[tables.people]
privacy_unit = "pid"
max_rows_per_unit = 5
[tables.people.columns]
pid = { type = "int", lower = 0, upper = 1000 }
age = { type = "int", lower = 17, upper = 90 }
hours = { type = "int", lower = 1, upper = 99 }
sex = { type = "category", values = ["F", "M"] }
income = { type = "category", values = ["low", "high"] }

[analysts.bob]
epsilon = 100.0
"""


def test_A5_pate_charges_every_student_record_of_one_person(tmp_path: Path) -> None:
    """HIGH (guarantee; the charge understates one person's loss ×max_rows_per_unit) — interface: ``veil publish pate
    --table people`` without ``--student-table`` on a table with ``privacy_unit = "pid"``, ``max_rows_per_unit = 5``.

    The held-out student's records are people of the table (s24 A2): the plan charges ``max(ε_teachers, ε_local)``
    with ``ε_local`` = ``student_local_epsilon`` — the local ε of *one record* (``ldp_guarantee(...)["per_record"]``,
    ``veil/generators/plugins/pate.py`` ~83–121). The role is keyed by the unit id (all of a person's rows are the
    student's together), but ``student_queries`` (``veil/generators/pate/run.py`` ~262) then queries records chosen
    by their *content* hashes: every one of the person's 5 rows is sent to the teachers (privatised independently,
    each ``ε_local``-LDP), and the student is trained on all 5 — the person's loss is 5·ε_local by composition,
    charged ε_local. ``max_rows_per_unit`` is read nowhere in ``veil/generators``. Measured (``--queries 200
    --student-share 0.99 --student-rho 0.5``): the target's 5 rows are all among the 200 queried records, each
    ε_local = 2; the plan charges 7.79 (the teachers' bound, ≥ ε_local); the person's loss as a student is 10.
    Sound: charge ``max_rows_per_unit × ε_local`` (the per-record
    bound composes over a unit's rows), or send at most one record per unit."""
    from veil.generators.pate import FeatureEncoder, PateConfig, student_queries
    from veil.generators.pate.split import student_split
    from veil.generators.registry import get_plugin
    from veil.policy import load_policy

    (tmp_path / "policy.toml").write_text(_UNIT_POLICY, encoding="utf-8")
    policy = load_policy(tmp_path / "policy.toml")
    features = ["age", "hours", "sex"]
    config = PateConfig(teachers=2, queries=200, rho=0.5, seed=0, student_share=0.99, student_epochs=1)
    request = {"table": "people", "label": "income", "features": features, "config": config, "validation": 0,
               "output_model": str(tmp_path / "m.pt")}  # fmt: skip
    plan = get_plugin("pate").plan(policy, request)
    local = float(plan.checks["student_local_epsilon"])
    # 40 people × 5 rows; person 7's rows are distinct (ages 20..24)
    rng = np.random.default_rng(0)
    frame = pd.DataFrame(
        {
            "pid": np.repeat(np.arange(40), 5),
            "age": rng.integers(30, 80, 200),
            "hours": rng.integers(1, 99, 200),
            "sex": rng.choice(["F", "M"], 200),
            "income": rng.choice(["low", "high"], 200),
        }
    )
    frame.loc[frame.pid == 7, "age"] = np.arange(20, 25)
    # the plug-in's own path (``sanitise``): roles by unit, then the queried records
    encoder = FeatureEncoder.from_columns(policy.table("people").columns, features)
    x_all = encoder.transform(frame)
    y_all = (frame["income"] == "high").to_numpy().astype(int)
    # lead: the plug-in's split (``student_split``, one record per person on the student's side since the fix)
    s_idx, _ = student_split(x_all, y_all, groups=frame["pid"].to_numpy(), share=config.student_share, seed=0)
    pool = s_idx[: min(config.queries, len(s_idx))]
    sent, _ = student_queries(x_all[pool], y_all[pool], encoder=encoder, config=config, rng=np.random.default_rng(1))
    target = x_all[frame.index[frame.pid == 7].to_numpy()]
    rows_sent = sum(bool(np.any(np.all(np.isclose(sent, row), axis=1))) for row in target)
    assert 7 in set(frame["pid"].to_numpy()[s_idx].tolist()), "precondition: the person is the student's"
    assert float(plan.epsilon) >= rows_sent * local, (
        f"person 7 sent {rows_sent} records of ε_local {local:.4g} each; the plan charges {float(plan.epsilon):.4g}"
    )


# --- A6. A public key read through a derived table's aggregate gets the aggregate of the whole source as domain ---


def test_A6_a_public_key_through_a_derived_aggregate_lists_the_engines_groups(tmp_path: Path) -> None:
    """LOW (wrong answers, no leak: the domain is public data) — interface: every (the plan's ``_domain_sql``).

    ``SELECT d.g, COUNT(*) FROM t JOIN (SELECT pk, MAX(pn) AS g FROM pub GROUP BY pk) d ON d.pk = t.x GROUP BY 1``
    is planned as a public key; `plan._domain_sql` (``veil/proxy/plan.py`` ~404–446) inlines the derived column's
    expression ``MAX(pn)`` into ``SELECT DISTINCT MAX(d0.pn) FROM (SELECT DISTINCT pn FROM pub) AS d0``: one value
    (``'q'``), the aggregate over the whole table, not per ``pk`` group. Measured (noise off): released
    ``{'q': 4}`` where ``GROUP BY pub.pn`` releases ``{'p': 4, 'P': 4, 'q': 4, 'Q': 0}`` (the engine's groups are the
    same); with ``COUNT(*) AS g`` nothing is released at all. Sound: refuse a public key whose derived path holds
    an aggregate, DISTINCT, LIMIT or GROUP BY (or run the derived table itself as the domain source)."""
    from tests.adversarial.test_redteam_s4 import POLICY, _base_rows, _frame
    from tests.adversarial.test_redteam_s26 import CASED_PUB
    from veil.policy import load_policy
    from veil.proxy._testing import exact_session
    from veil.store.warehouse import write_table

    (tmp_path / "policy.toml").write_text(POLICY, encoding="utf-8")
    policy = load_policy(tmp_path / "policy.toml")
    write_table(policy, "pub", CASED_PUB, replace=True, public=True)
    write_table(policy, "t", _frame(_base_rows()), replace=True)
    direct = "SELECT pub.pn AS g, COUNT(*) AS n FROM t JOIN pub ON pub.pk = t.x GROUP BY 1"
    derived = "SELECT d.g, COUNT(*) AS n FROM t JOIN (SELECT pk, MAX(pn) AS g FROM pub GROUP BY pk) d ON d.pk = t.x GROUP BY 1"
    from veil.proxy._testing import plan_of

    with exact_session(policy, "a") as s:
        expected = {r[0]: float(r[1]) for r in s.execute(direct, epsilon=Fraction(1)).rows}
        released = {r[0]: float(r[1]) for r in s.execute(derived, epsilon=Fraction(1)).rows}
        planned = plan_of(s, derived, Fraction(1))
    # lead: the fix plans such a key as private (partition selection: an aggregate is no function of one source
    # row); a public key must list the engine's groups
    assert planned is not None
    assert not planned.keys[0].public or released == expected, (released, expected)


# ==================================================================================================
# Part B — defences that held
# ==================================================================================================


@pytest.mark.slow
def test_B2_a_slow_login_completes_when_no_newcomer_arrives(tmp_path: Path) -> None:
    """A4's control: the same full server and paused login, no newcomer: bob logs in (the pause is within
    ``--auth-timeout``)."""
    assert _outsider_and_slow_login(tmp_path, newcomers=0) == "ok"


@pytest.mark.parametrize(
    "sql",
    [
        _nested("x || x || x || x", 10),
        "SELECT 10 ^ 400 AS v",
        "SELECT CAST(9.3e18 AS BIGINT) AS v",
    ],
    ids=["concat-nested", "pow-float", "cast-bigint"],
)
def test_B1_concatenation_and_numbers_stay_bounded(sql: str) -> None:
    """Nested ``||`` through derived tables is refused at 1 MiB; a float power overflow and a cast beyond
    bigint are 22003."""
    started = time.process_time()
    assert _evaluate(sql) in {"54000", "22003"}
    assert time.process_time() - started < 2
