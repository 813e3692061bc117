"""Red team, session 63: the DuckDB query path as it is on main at dbaa4d3 (2026-11-28) — AVG/VARIANCE sharing
COUNT(*), the pooled bounded instances, the free re-plan after a concurrent write, the memory caps, and the classic
classes with fresh variants. Neighbouring worlds D / D′ differ in one privacy unit; noise off (``exact_session``).

Each finding's test was a strict xfail; both findings are fixed (session 20) and their tests pass:

* F1: ``--engine-memory`` (``ServerLimits``) and ``warehouse.set_reader_memory`` refuse a limit below
  ``MIN_READER_MEMORY_MIB`` (256 MiB), at which DuckDB spills these statements instead of failing them; the tests run
  at the floor and find no edge. A temporary folder that cannot take the spill (a full or read-only disk) still fails
  a charged statement: docs/server.md names memory and disk beside time as what the charge does not cover.
* F2: a public answer is built as a temporary table of its bounded instance before the fetch; public key domains and
  post-processed text answers are measured in the engine and refused past ``MAX_HELD_CHARS``.

Findings:

* F1 (MEDIUM: HIGH by effect — one person's membership with certainty for a few charged ε —, but only where the
  private statement cannot spill; threat class 2, a deterministic side channel; every interface, the failure is the
  engine's) — **a charged private run fails on the reader's memory limit, and whether it does is decided by the
  data**. The 128 MiB bound covers public work only; a private statement runs on the warehouse reader under the
  process's DuckDB limit (``veil serve --engine-memory``, default 80 % of memory / 2N, at least 64 MiB;
  ``warehouse.set_reader_memory``). Past the limit DuckDB spills to the reader's temp directory
  (``<warehouse>.tmp``) where it can; where it cannot, the run ends in ``QueryFailed`` (XX000, charged, nothing
  released): an ``OutOfMemory`` error when the limit is too small to spill into (8 MiB here), an ``IO`` error when the
  temp directory cannot be created or is full (``max_temp_directory_size``, a disk quota). The memory a ``COUNT(DISTINCT
  …)`` or a private-key ``GROUP BY`` needs is a step function of the rows it reads, so an analyst finds the edge with a
  binary search on a row filter (``WHERE id < k``, each probe charged ε = 0.001, ~12 probes for 5,000 rows) and then
  asks the one query that is answered in D′ and fails in D (one more row: the target's). Measured on this host
  (DuckDB 2.0): 8 MiB, 1 and 2 threads, 1 KB names — 5 of 5 repeats deterministic at the edge, D fails / D′ answers,
  k − 1 answered in both; through ``veil serve`` and psycopg the same (XX000 vs rows); ``COUNT(DISTINCT name)`` and
  ``GROUP BY name`` step at one row (``COUNT(DISTINCT SUBSTRING(name, 1, 1000))`` at this edge did not: both failed
  from the same k). At 64 MiB, 150,000 distinct 1 KB names: answered (spilled, 4–6 s); the same with the temp path
  blocked: XX000 (IO error) in 0.5 s. At a real server's limit the working set is the analyst's to choose (a public
  join multiplies the distinct values, ``SUBSTRING(…, 1, L)`` sets their size), so whether a deployment is exposed
  depends on its disk, not on the query grammar. Suggested class-level fix: no charged run may end differently
  because of a resource limit one row can cross — bound each private statement's working set *before the
  reservation* from public quantities (a declared maximum row count per private table, enforced when the bounded copy
  is built, times the catalog's per-row bytes and the join multiplicity) and refuse free past what the engine can
  hold or spill; check at start that the reader can spill (a writable temp directory with room for that bound); and
  document memory and disk beside timing among the side channels the charge does not cover.

* F2 (MEDIUM, server abuse — threat class 6: memory; free, any analyst with a login, every interface) — **a public
  answer of GBs passes the 128 MiB bound**. A public-only query runs on a bounded instance whose DuckDB limit is meant
  to refuse "an answer of more than ~128 MiB in the engine" (docs/sql.md), and the row and value caps (100,000 rows,
  1,000,000 values) assume ~0.15–0.6 kB a value. DuckDB holds a *constant* vector once per vector, not once per row:
  a text literal in the select list (``SELECT '<100 KB>' AS v FROM big``), or a one-row public table's text
  concatenated 64 times beside a cross join (``SELECT o.s || … || o.s FROM big b, one o``), is built within the limit
  and expanded row by row only when the answer is fetched into Python — where no bound applies. Measured here: 5,000
  rows × a 100 KB literal answered (500 MB of values, RSS 1.2 GB, 1.7 s); 30,000 rows × 64 KB (a 1 KB public text ×
  64) answered (1.9 GB, RSS 2.8 GB, 11 s); the same 64 KB values made distinct per row (``… || CAST(b.b AS VARCHAR)``,
  10,000 rows, 640 MB) refused 0A000 at 0.4 GB RSS, as documented. A 1 MB literal (one token: within ``veil serve``'s
  1 MiB / 4,000-token limits) × 100,000 rows (``LIMIT 100000`` over any public cross join) is 100 GB for one free
  query; several connections at once multiply it. Suggested class-level fix: bound what the *answer* holds, not what
  the engine's representation holds — fetch it in chunks (Arrow record batches / ``fetchmany``) and refuse, free, once
  the running total of the values' bytes (texts by their length) passes a byte cap (e.g. 64 MiB), before the next chunk
  is converted; or have the engine compute the answer's total bytes first (``SUM(octet_length(…))`` over the same
  ``LIMIT``) and refuse past it. The same check belongs wherever Veil fetches public rows into Python (domains, probes).
  The private path has the same gap one level up (charged, ε ≥ 0.001): a literal answer column beside public group
  keys (``SELECT b.b, '<100 KB>' AS v, COUNT(*) FROM t JOIN big b ON b.b = t.id GROUP BY b.b``) is built by the
  post-processing connection (512 MB limit) as a constant and expanded in Python: 3,000 groups answered (300 MB, RSS
  1.7 GB), **and the release log stores the answer**: the ledger grew by 300 MB for that one query (33,333 groups × a
  1 MB literal, within the 100,000 released values, would write 33 GB for ε = 0.001). There the answer's bytes
  should count toward the released-values cap, or the log should store the post-processing SQL, not its output.
  And a *free* variant before any charge: a public group key built from a literal (``GROUP BY CAST(b.b AS VARCHAR) ||
  '<100 KB>'``) has its domain listed on the warehouse reader (DuckDB's default limit) and fetched whole into Python
  by the prepare pass (``Env.public_domain``), before the released-values check: ``QuerySession.plan`` of 3,000
  such keys held 1.4 GB RSS and charged nothing; the domain may hold 100,000 keys (``MAX_PUBLIC_GROUPS``) of up to
  1 MB each (a ``veil serve`` Describe, or the timed planning, runs it).

What held (tried, no witness; DuckDB 2.0, noise off, neighbours D/D′ with shared salts — ``share_salts``):

* (a) ``_non_null_columns``: the argument must be a bounded base column of the private table (``_trace`` through
  CTEs and derived tables, column lists renaming by position included: ``(SELECT salary AS b, age AS a …) AS s(a, b)``
  read ``s.a`` as salary, correctly); the bounded copy turns NaN into NULL *after* the cast (a text-stored 'NaN'
  too) and clamps ±inf, so no row is non-NULL to the WHERE and NULL to the SUM; a ``USING`` column is a COALESCE,
  never shared; LEFT JOIN onto private data is refused at every depth. Kept as family B1 (hypothesis, 3 × 40
  WHEREs of 27 atoms, NULL/NaN/±inf/±1e308/-0.0/subnormal/out-of-bound rows; fails when the rule is widened).
* (b) the pooled instances: the grammar admits no statement or function that leaves state on an instance (no SET,
  PREPARE, CREATE, sequences, variables, macros, ATTACH; table functions and catalog names refused), each statement
  gets its own cursor and temporary objects die with it, the mirror is attached read-only and the configuration is
  locked after the attach; a failing statement closes its instance; a curator write closes idle instances under the
  mirror's exclusive gate. A materialised source prices a literal's bytes (``SELECT b, '<100 KB>' …`` refused at 670
  rows), unlike the public-only answer (F2).
* (c) the free re-plan: a ``WarehouseChanged`` forced inside ``_execute`` (after the reservation) twice in a row
  refunds the analyst's and the table's accounts each time and the third try charges once (spent 1/2 → 1, one answer).
* (d) the 128 MiB instance bound and the materialisation caps read public data only; their refusals are the same in
  D and D′. The private run's limit is F1.
* (e) name resolution: schema- and catalog-qualified names (``main.``, ``memory.main.``, ``__veil_public.``,
  ``information_schema``, ``pg_catalog``), ``duckdb_tables``, ``_veil_bounded_*``, CTE and alias shadowing at three
  depths, quoted case variants: refused or resolved to the policy's table. Fuzz, 2,100 generated queries over hostile
  worlds (NaN, ±inf, 1e308, ±(2⁶³−1), -0.0, 5e-324, 2,000-character ``é`` text, empty text): numeric expressions
  under SUM/AVG/VARIANCE/STDDEV/MEDIAN/MIN/MAX/COUNT DISTINCT with FILTER, WHERE and GROUP BY, plain/derived/
  LEFT/DISTINCT/unpinned joins with a public table of NaN/-0.0/NULL keys; 600 text and date queries (SUBSTRING/LEFT/
  RIGHT with private positions, STRPOS, casts of text to INT/DATE/TIMESTAMP, EXTRACT of 9 fields, DATE_TRUNC to
  millennium, ``born + INTERVAL (age) DAY``): no pair ended differently, none moved past its sensitivity, no XX000.
  Group keys of ``inf``, NaN, -0.0, 2⁶³−1, DECIMAL(38, 10) and dates past 9999: answered and logged. 34 join shapes
  (pins through derived tables, DISTINCT/GROUP BY/ORDER BY … LIMIT sources, CTEs referenced twice, USING, OR/AND
  pins, casts and TRIM/LOWER in keys): every multiplicity within the plan's. COUNT(DISTINCT unit) variants (through
  a derived column, FILTER, public joins with and without keys) within 1 or c.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

_F1_POLICY = """\
[database]
path = "warehouse.duckdb"
[ledger]
path = "ledger.sqlite"
[tables.t]
privacy_unit = "row"
[tables.t.columns]
id = { type = "int", lower = 0, upper = 10000000 }
name = { type = "category", max_length = 1024 }
[analysts.a]
epsilon = 100000
"""

_F1_ROWS = 5000


def _f1_world(folder: Path, *, target: bool) -> Path:
    """``_F1_ROWS`` people with distinct 1 KB names (ids 0…n−1); D adds the target (id 0, its own name)."""
    from veil.policy import load_policy
    from veil.store.warehouse import write_table

    folder.mkdir(parents=True)
    path = folder / "policy.toml"
    path.write_text(_F1_POLICY, encoding="utf-8")
    names = [f"{i:08d}" * 128 for i in range(_F1_ROWS)]
    ids = list(range(_F1_ROWS))
    if target:
        names.append("Z" * 1024)
        ids.append(0)
    write_table(load_policy(path), "t", pd.DataFrame({"id": ids, "name": names}))
    return path


@pytest.fixture(scope="module")
def f1_sessions(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any]]:
    """Exact sessions on D (with the target) and D′, their bounded copies built under DuckDB's default limit; then the
    readers reopened with 1 thread and 8 MiB (a small ``--engine-memory``), restored afterwards."""
    from veil.errors import InternalError
    from veil.proxy._testing import exact_session
    from veil.store import warehouse

    base = Path(tmp_path_factory.mktemp("s63f1"))
    d = exact_session(_f1_world(base / "d", target=True), "a")
    d_prime = exact_session(_f1_world(base / "dp", target=False), "a")
    for s in (d, d_prime):
        s.execute("SELECT COUNT(*) FROM t", epsilon=1.0)  # builds the bounded copy before the limit is lowered
    before = (warehouse._CONNECTIONS.memory_mib, warehouse._CONNECTIONS.threads)
    warehouse.set_reader_threads(warehouse.MIN_READER_THREADS)
    # the fix: no limit below MIN_READER_MEMORY_MIB (8 MiB, the red team's, is refused); at the floor these spill
    with pytest.raises(InternalError, match="at least"):
        warehouse.set_reader_memory(8)
    warehouse.set_reader_memory(warehouse.MIN_READER_MEMORY_MIB)
    try:
        yield d, d_prime
    finally:
        warehouse.set_reader_memory(before[0])
        warehouse.set_reader_threads(before[1])
        d.close()
        d_prime.close()


def _answered(session: Any, sql: str) -> bool:
    from veil.errors import QueryFailed

    try:
        session.execute(sql, epsilon=0.001)
    except QueryFailed:
        return False
    return True


@pytest.mark.parametrize(
    "shape",
    [
        "SELECT COUNT(DISTINCT name) FROM t WHERE id < {k}",
        "SELECT name, COUNT(*) FROM t WHERE id < {k} GROUP BY name",
        # values inflated to just under MAX_VALUE_BYTES (a 1,024-character name is priced at 4 kB): the largest allowed
        "SELECT COUNT(DISTINCT name || '" + "w" * 11_000 + "') FROM t WHERE id < {k}",
    ],
)
def test_f1_a_charged_run_ends_the_same_way_in_neighbouring_worlds_near_the_engines_memory_limit(
    f1_sessions: tuple[Any, Any], shape: str
) -> None:
    """F1: the analyst's calibration (a binary search on ``k`` over rows that exclude nobody in D′, each probe charged
    ε = 0.001) finds the largest ``k`` that D′ answers; every ``k`` near it must end the same way in D and D′. On main
    D fails at the edge (its one extra row, the target's, is the one past the limit): QueryFailed, charged, and D′
    answers — a deterministic membership bit. A world where nothing reaches the limit has no edge: the search then
    ends at ``_F1_ROWS`` and the comparison holds (the test passes, as a fix that removes the edge should)."""
    from tests.support.attack_neighbours import compare, exact_release

    d, d_prime = f1_sessions
    lo, hi = 1, _F1_ROWS + 1
    if _answered(d_prime, shape.format(k=hi)):
        lo = hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _answered(d_prime, shape.format(k=mid)):
            lo = mid
        else:
            hi = mid
    differing = []
    for k in range(max(1, lo - 2), lo + 3):
        sql = shape.format(k=k)
        outcome_d, outcome_dp = exact_release(d, sql, 0.001), exact_release(d_prime, sql, 0.001)
        if not outcome_d.ok or not outcome_dp.ok:  # both failing alike is no bit; one failing is
            problems = compare(outcome_d, outcome_dp)
            if problems:
                differing.append((k, problems[0][:160]))
    assert not differing, f"edge at k = {lo}: {differing}"


_BIG = "v" * 20_000


@pytest.mark.parametrize(
    "sql",
    [
        f"SELECT COUNT(DISTINCT name || '{_BIG}') FROM t",
        f"SELECT name || '{_BIG}' AS k, COUNT(*) FROM t GROUP BY k",
        f"SELECT COUNT(*) FROM t WHERE name || '{_BIG}' LIKE 'x%'",
        "SELECT COUNT(DISTINCT " + " || ".join(["name"] * 5) + ") FROM t",  # 5 × 4 kB, no literal at all
        f"WITH c AS (SELECT id, '{_BIG}' AS s FROM t) SELECT COUNT(DISTINCT s) FROM c",
        f"SELECT COUNT(DISTINCT UPPER(name || '{'u' * 9_000}')) FROM t",  # case-mapping may lengthen UTF-8 by half
        # review s20 H2: one hash-table row holds every key (each under the cap, 24 kB together; DISTINCT likewise)
        "SELECT name || name AS k0, name || name || name AS k1, COUNT(*) FROM t GROUP BY k0, k1",
        "SELECT COUNT(DISTINCT (name || name, name || name || name)) FROM t",
        # red team s20b F1: a derived row carries all its columns (into a join's build side, a sort): five 4 kB ones
        "SELECT COUNT(*) FROM (SELECT id, "
        + ", ".join(f"CASE WHEN id > -{i} THEN name END AS a{i}" for i in range(1, 6))
        + " FROM t) AS x WHERE "
        + " OR ".join(f"x.a{i} = 'q'" for i in range(1, 6)),
    ],
)
def test_f1_c_a_private_query_whose_values_could_not_spill_is_refused_free(f1_sessions: tuple[Any, Any], sql: str) -> None:
    """F1's class: DuckDB cannot spill a hash table of large strings (2,000 distinct 64 kB keys failed at 256 MiB, 60,000
    of 16 kB spilled), so a charged statement over values past ``MAX_VALUE_BYTES`` could fail or not by the count of
    distinct values. Every such query is refused before the reservation, from the catalog's bounds alone: 0A000, and
    nothing is charged, in both worlds alike."""
    from veil.errors import Unsupported

    d, d_prime = f1_sessions
    for s in (d, d_prime):
        spent = s.budget().spent
        with pytest.raises(Unsupported, match="text value of this query may hold"):
            s.execute(sql, epsilon=0.001)
        assert s.budget().spent == spent


def test_f1_b_through_the_wire_the_edge_query_ends_the_same_way_in_both_servers(tmp_path: Path) -> None:
    """F1 through ``veil serve`` and psycopg: two servers (D with the target, D′ without) run with
    ``ServerLimits(engine_memory_mib=8, engine_threads=1)`` — a small ``--engine-memory`` — and the analyst's edge
    (found over the wire on D′ by a binary search of charged ε = 0.001 probes) must end the same way on both."""
    import psycopg
    from click.testing import CliRunner

    from tests.support.server import FAST_BACKOFF, PASSWORD, dsn, running_server
    from veil.cli.main import cli
    from veil.errors import InputError
    from veil.proxy._testing import exact_session
    from veil.server.limits import MIN_ENGINE_MEMORY_MIB, ServerLimits
    from veil.store import warehouse

    policies = {}
    for name, target in (("d", True), ("dp", False)):
        path = _f1_world(tmp_path / name, target=target)
        with exact_session(path, "a") as s:
            s.execute("SELECT COUNT(*) FROM t", epsilon=1.0)  # the bounded copy, under DuckDB's default limit
        add = ["analyst", "add", "--policy", str(path), "a", "--password-stdin"]
        result = CliRunner().invoke(cli, add, input=PASSWORD + "\n")
        assert result.exit_code == 0, result.output
        policies[name] = path
    before = (warehouse._CONNECTIONS.memory_mib, warehouse._CONNECTIONS.threads)
    with pytest.raises(InputError, match="at least"):  # the fix: --engine-memory 8 is refused at start
        ServerLimits(engine_memory_mib=8)
    limits = ServerLimits(engine_memory_mib=MIN_ENGINE_MEMORY_MIB, engine_threads=2, **FAST_BACKOFF)  # type: ignore[arg-type]
    shape = "SELECT COUNT(DISTINCT name) FROM t WHERE id < {k}"
    try:
        with running_server(policies["d"], limits=limits) as sd, running_server(policies["dp"], limits=limits) as sdp:

            def ends(port: int, k: int) -> str:
                with psycopg.connect(dsn(port, user="a"), autocommit=True) as conn:
                    conn.execute("SET veil.epsilon = '0.001'")
                    try:
                        conn.execute(shape.format(k=k)).fetchall()
                    except psycopg.Error as exc:
                        return str(exc.sqlstate)
                    return "answered"

            lo, hi = 1, _F1_ROWS + 1
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if ends(sdp.port, mid) == "answered":  # type: ignore[attr-defined]
                    lo = mid
                else:
                    hi = mid
            outcomes = {k: (ends(sd.port, k), ends(sdp.port, k)) for k in range(max(1, lo - 2), lo + 3)}  # type: ignore[attr-defined]
    finally:
        warehouse.set_reader_memory(before[0])
        warehouse.set_reader_threads(before[1])
    assert all(a == b for a, b in outcomes.values()), f"edge at k = {lo}: {outcomes}"


_F2_POLICY = """\
[database]
path = "warehouse.duckdb"
[ledger]
path = "ledger.sqlite"
[tables.t]
privacy_unit = "row"
[tables.t.columns]
id = { type = "int", lower = 0, upper = 100 }
[tables.big]
public = true
[tables.big.columns]
b = { type = "int" }
[tables.one]
public = true
[tables.one.columns]
s = { type = "category" }
[analysts.a]
epsilon = 100
"""

#: Rows of ``big`` and the bytes of each answer value: 1,500 × 100,000 bytes = 150 MB, past the 128 MiB bound.
_F2_ROWS, _F2_VALUE = 1500, 100_000
_F2_SHAPES = {
    "a text literal": f"SELECT '{'y' * _F2_VALUE}' AS v FROM big b",
    "a one-row public text, 64 times": "SELECT " + " || ".join(["o.s"] * 64) + " AS v FROM big b, one o",
}


@pytest.fixture(scope="module")
def f2_policy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from veil.policy import load_policy
    from veil.store.warehouse import write_table

    folder = Path(tmp_path_factory.mktemp("s63f2"))
    path = folder / "policy.toml"
    path.write_text(_F2_POLICY, encoding="utf-8")
    policy = load_policy(path)
    write_table(policy, "t", pd.DataFrame({"id": [1, 2]}))
    write_table(policy, "big", pd.DataFrame({"b": range(_F2_ROWS)}), public=True)
    write_table(policy, "one", pd.DataFrame({"s": ["x" * (_F2_VALUE // 64)]}), public=True)
    return path


@pytest.mark.parametrize("shape", sorted(_F2_SHAPES))
def test_f2_a_public_answer_of_more_than_128_mib_is_refused_whatever_its_values_repeat(f2_policy: Path, shape: str) -> None:
    """F2: every public answer holding more than ``MATERIALISING_MEMORY`` (128 MiB) of values is refused, free (the
    documented bound); one whose values differ row by row already is (``… || CAST(b.b AS VARCHAR)``). On main the
    constant shapes are answered: 1,500 rows of 100 kB."""
    import veil as veil_api
    from veil.engines.duckdb import MATERIALISING_MEMORY
    from veil.errors import VeilError

    try:
        with veil_api.connect(f2_policy, analyst="a") as db:
            frame = db.sql(_F2_SHAPES[shape])
    except VeilError as exc:
        assert exc.sqlstate in ("0A000", "54000"), exc
        return
    held = int(frame["v"].str.len().sum())
    assert held <= MATERIALISING_MEMORY, f"answered {len(frame):,} rows holding {held / 2**20:.0f} MiB of text"


@pytest.mark.parametrize(
    "sql",
    [
        f"SELECT COUNT(DISTINCT CAST(b.b AS VARCHAR) || '{'w' * 20_000}') FROM t JOIN big b ON b.b = t.id",
        f"SELECT CAST(b.b AS VARCHAR) || '{'w' * 20_000}' AS k, COUNT(*) FROM t JOIN big b ON b.b = t.id GROUP BY b.b",
    ],
)
def test_f1_d_a_value_of_public_columns_held_per_private_row_is_capped_too(f2_policy: Path, sql: str) -> None:
    """Review s20 H1: a value built from public columns and literals alone, computed on the rows of a join with private
    data, is held once per joined private row; at the 256 MiB floor a COUNT(DISTINCT) of 65 kB such values failed after
    the charge from 1,801 private rows on and was answered below (3 of 3 repeats). Refused free like a private value."""
    from veil.errors import Unsupported
    from veil.proxy._testing import exact_session

    with exact_session(f2_policy, "a") as s:
        spent = s.budget().spent
        with pytest.raises(Unsupported, match="text value of this query may hold"):
            s.execute(sql, epsilon=0.001)
        assert s.budget().spent == spent


def test_f2_b_the_same_answer_with_values_that_differ_row_by_row_is_refused(f2_policy: Path) -> None:
    """Control for F2 (passes on main): the 64 copies made distinct per row build a flat vector, which the bounded
    instance's limit refuses free, as docs/sql.md says."""
    import veil as veil_api
    from veil.errors import Unsupported

    flat = "SELECT " + " || ".join(["o.s"] * 63) + " || CAST(b.b AS VARCHAR) AS v FROM big b, one o"
    with pytest.raises(Unsupported, match="128 MiB"), veil_api.connect(f2_policy, analyst="a") as db:
        db.sql(flat)


def test_f2_c_a_charged_answer_and_its_release_record_stay_bounded(f2_policy: Path) -> None:
    """F2, private path: 1,500 public groups (``big.b``) × a 100 kB literal column. Refused, or an answer and a ledger
    record of at most 128 MiB each; on main both hold ~150 MB."""
    from veil.engines.duckdb import MATERIALISING_MEMORY
    from veil.errors import VeilError
    from veil.proxy._testing import exact_session

    ledger = f2_policy.parent / "ledger.sqlite"
    sql = f"SELECT b.b, '{'y' * _F2_VALUE}' AS v, COUNT(*) AS n FROM t JOIN big b ON b.b = t.id GROUP BY b.b"
    before = ledger.stat().st_size if ledger.exists() else 0
    with exact_session(f2_policy, "a") as s:
        try:
            answer = s.execute(sql, epsilon=0.001)
        except VeilError as exc:
            assert exc.sqlstate in ("0A000", "54000"), exc
            return
    held = sum(len(str(row[1])) for row in answer.rows)
    grown = ledger.stat().st_size - before
    assert held <= MATERIALISING_MEMORY and grown <= MATERIALISING_MEMORY, (
        f"{len(answer.rows):,} groups holding {held / 2**20:.0f} MiB; the ledger grew by {grown / 2**20:.0f} MiB"
    )


def test_f2_d_a_free_plan_does_not_fetch_a_public_domain_of_more_than_128_mib(f2_policy: Path) -> None:
    """F2 on the free path: ``QuerySession.plan`` (what ``veil serve`` runs, timed, before a charge; a Describe too)
    lists the public key's domain; refused, or the listed keys hold at most 128 MiB. On main they hold 150 MB."""
    from veil.engines.duckdb import MATERIALISING_MEMORY
    from veil.errors import VeilError
    from veil.policy import load_policy
    from veil.proxy.session import QuerySession

    sql = f"SELECT CAST(b.b AS VARCHAR) || '{'y' * _F2_VALUE}' AS k, COUNT(*) AS n FROM t JOIN big b ON b.b = t.id GROUP BY k"
    with QuerySession(load_policy(f2_policy), "a") as s:
        try:
            s.plan(sql, epsilon=0.001)
        except VeilError as exc:
            assert exc.sqlstate in ("0A000", "54000"), exc
            return
        held = sum(len(str(v)) for values in s._env._domains.values() for v in values)
    assert held <= MATERIALISING_MEMORY, f"a free plan listed a public domain holding {held / 2**20:.0f} MiB"


# ==================================================================================================
# B. What held, kept as families (these pass on main)
# ==================================================================================================

_SHARE_POLICY = """\
[database]
path = "warehouse.duckdb"
[ledger]
path = "ledger.sqlite"
[tables.m]
privacy_unit = "row"
[tables.m.columns]
x = { type = "float", lower = -1000, upper = 1000 }
y = { type = "float", lower = 0.5, upper = 2.5 }
i = { type = "int", lower = -50, upper = 50 }
s = { type = "category" }
g = { type = "category", values = ["a", "b"] }
[analysts.a]
epsilon = 1000000
"""


@pytest.fixture(scope="module")
def share_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A world whose numeric columns hold every value a WHERE might let through as "not NULL": NULL, NaN, ±inf,
    ±1e308, -0.0, the smallest subnormal, values past the bounds, and ordinary values."""
    from veil.policy import load_policy
    from veil.proxy._testing import exact_session
    from veil.store.warehouse import write_table

    folder = Path(tmp_path_factory.mktemp("s63share"))
    path = folder / "policy.toml"
    path.write_text(_SHARE_POLICY, encoding="utf-8")
    odd = [None, float("nan"), float("inf"), float("-inf"), 1e308, -1e308, -0.0, 5e-324, 2000.0, -2000.0]
    xs = odd + [float(v) for v in range(-30, 30, 3)]
    ys = [*odd, 0.5, 1.0, 2.5, 1.75] * 3
    n = len(xs)
    ints = pd.array([None, -(2**63) + 1, 2**63 - 1, 0, 60, -60, *range(-20, 20)], dtype="Int64")
    frame = pd.DataFrame(
        {
            "x": xs,
            "y": ys[:n],
            "i": ints[:n],
            "s": [None, "", "zz", "é" * 30, "a"] * (n // 5) + ["b"] * (n % 5),
            "g": (["a", "b", None, "c"] * n)[:n],
        }
    )
    write_table(load_policy(path), "m", frame)
    with exact_session(path, "a") as s:
        yield s


_ATOMS = [
    "m.{c} > 0", "m.{c} >= -0.0", "m.{c} <> 1", "m.{c} = 1.5", "m.{c} < 1e300", "m.{c} <= -1e300", "0 < m.{c}",
    "m.{c} IS NOT NULL", "NOT m.{c} IS NULL", "(m.{c} > -5)", "m.{c} IS DISTINCT FROM 1", "m.{c} BETWEEN -1 AND 1",
    "m.{c} IN (1, 2)", "COALESCE(m.{c}, 0) >= 0", "m.{c} > 'NaN'", "m.{c} <> 'NaN'", "m.{c} > '-inf'",
    "m.{c} * 0 = 0", "m.{c} + 0 > 0", "m.s = 'zz'", "m.g = 'a'", "m.s IS NULL", "m.{c} IS NULL", "NOT (m.{c} > 0)",
    "m.{c} > 0 OR m.s = 'zz'", "m.{c} = m.{c}", "m.{c} >= m.{o}",
]  # fmt: skip


@pytest.mark.parametrize("column", ["x", "y", "i"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_b1_a_shared_count_is_the_count_of_the_argument_under_every_where(share_session: Any, column: str, data: Any) -> None:
    """(a) held: wherever the plan lets ``AVG``/``VARIANCE`` of a bare column share the query's ``COUNT(*)``
    (``plan._non_null_columns``), that count equals ``COUNT(column)`` under the same WHERE, on a world of NULL, NaN,
    ±inf, ±1e308, -0.0 and out-of-bound values (the bounded copy reads NaN as NULL and clamps the rest). Exact, noise
    off: deterministic, no false failures. Refusals must agree between the two queries' shapes' ends."""
    from tests.support.attack_neighbours import exact_release

    other = {"x": "y", "y": "i", "i": "x"}[column]
    atoms = data.draw(st.lists(st.sampled_from(_ATOMS), min_size=1, max_size=3))
    where = " AND ".join(a.format(c=column, o=other) for a in atoms)
    agg = data.draw(st.sampled_from(["AVG", "VARIANCE", "STDDEV"]))
    grouped = data.draw(st.booleans())
    key, group = ("m.g, ", " GROUP BY m.g") if grouped else ("", "")
    shared = exact_release(share_session, f"SELECT {key}{agg}(m.{column}) FROM m WHERE {where}{group}", 1.0)
    counted = exact_release(share_session, f"SELECT {key}COUNT(m.{column}) FROM m WHERE {where}{group}", 1.0)
    assert shared.ok == counted.ok, (where, shared.describe(), counted.describe())
    if not shared.ok:
        return
    count_stat = next(st_ for st_ in shared.plan.statistics if st_.kind == "count")
    assert shared.values[count_stat.id] == counted.values[0], (where, shared.values, counted.values)


def test_b1_b_the_family_above_exercises_the_shared_count(share_session: Any) -> None:
    """So that B1 cannot pass vacuously: a plain comparison with a literal does share (one count statistic, the
    query's ``COUNT(*)``), and an ``OR`` does not."""
    from veil.proxy._testing import plan_of

    shared = plan_of(share_session, "SELECT AVG(m.x), COUNT(*) FROM m WHERE m.x > 0", 1.0)
    assert shared is not None and [s.label for s in shared.statistics if s.kind == "count"] == ["count(*)"]
    apart = plan_of(share_session, "SELECT AVG(m.x), COUNT(*) FROM m WHERE m.x > 0 OR m.s = 'zz'", 1.0)
    assert apart is not None and len([s for s in apart.statistics if s.kind == "count"]) == 2


def test_f2_e_through_the_wire_a_public_answer_of_more_than_128_mib_is_refused(f2_policy: Path) -> None:
    """F2 through ``veil serve`` and psycopg (the literal is one token, well within ``--max-query-tokens`` and the 1 MiB
    statement limit): refused (0A000 or 54000), or at most 128 MiB of values."""
    import psycopg
    from click.testing import CliRunner

    from tests.support.server import FAST_BACKOFF, PASSWORD, dsn, running_server
    from veil.cli.main import cli
    from veil.engines.duckdb import MATERIALISING_MEMORY
    from veil.server.limits import ServerLimits

    add = ["analyst", "add", "--policy", str(f2_policy), "a", "--password-stdin"]
    result = CliRunner().invoke(cli, add, input=PASSWORD + "\n")
    assert result.exit_code == 0, result.output
    with running_server(f2_policy, limits=ServerLimits(**FAST_BACKOFF)) as st:  # type: ignore[arg-type]
        with psycopg.connect(dsn(st.port, user="a"), autocommit=True) as conn:  # type: ignore[attr-defined]
            try:
                rows = conn.execute(_F2_SHAPES["a text literal"]).fetchall()
            except psycopg.Error as exc:
                assert exc.sqlstate in ("0A000", "54000"), exc
                return
    held = sum(len(r[0]) for r in rows)
    assert held <= MATERIALISING_MEMORY, f"the server sent {len(rows):,} rows holding {held / 2**20:.0f} MiB"
