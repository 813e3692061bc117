"""Red team, session 57: what landed on main on 2026-11-28 (1c02125..89baaa8) — the one evaluation of a derived public
source (multiplicity's materialisation), intervals only in date arithmetic, Bind parameter counts, per-column linkage
roles.

Each test below FAILS on main at 89baaa8 (nothing is marked xfail: the lead fixes the code and the test turns green).

Findings:

* D1 (MEDIUM, server abuse — threat class 6; free, repeatable, any analyst, every interface) — the materialisation cap
  counts *rows* (``MAX_MATERIALISED_ROWS`` = 2,000,000), not what they hold. A derived public source may select as
  many columns as the statement's tokens allow, and the whole source is written into a temporary table of the
  reader (``CREATE TEMP TABLE … AS``) during the plan pass, before anything is charged and before the join-factor
  check refuses it. Before the materialisation, the probe of that source was a streaming ``COUNT(*)`` (DuckDB prunes
  the unused columns): it held nothing. Measured here (2-core host, DuckDB's own ``duckdb_memory()``): a source of
  121² = 14,641 rows × 301 columns of a 121-row public table holds 41.5 MB for a query that reads one number; with one
  more cross join, 121³ = 1,771,561 rows × 21 columns held 330 MB (0.4 s) and × 81 columns 1.27 GB (5 s), for a
  query then refused free (0A000, "one private row can join up to 14,641 rows … at most 10,000"). Through ``veil
  serve`` and psycopg, within its 4,000-token limit (``y.a c1, y.a c2, …``: 781 columns), 14,641 rows held 106 MB
  and the query was answered; at ~9 bytes a value the same columns over 121³ rows are ~12 GB for one query, and the
  Python API / ``veil query`` limit (250,000 tokens) is far beyond any memory; the default
  ``statement_timeout`` is 0, and the reader's memory limit is DuckDB's default
  (80 % of RAM) unless ``set_reader_memory`` is set, shared by every session of the process: one analyst's free,
  refused query makes every other session's statements fail for lack of memory (or the process is killed).
  Witness (Python API, noise off)::

      SELECT COUNT(*) FROM people t JOIN (SELECT x.a, y.a AS c0, …, y.a AS c299 FROM ages x JOIN ages y ON TRUE) g
        ON g.a = t.age WHERE COALESCE(g.c0, …, g.c299) IS NOT NULL

  Suggested fix: bound what a materialisation holds, not its rows — e.g. rows × columns (cells) ≤ the cap (or an
  estimated byte budget from the catalog types, texts at their declared/observed width), checked by the
  ``CREATE … AS … LIMIT`` itself (``LIMIT ⌊cap / columns⌋ + 1``) so nothing larger is ever built; materialise
  only the columns the generated statements read; and for an *unpinned* source, whose factor is refused past
  ``MAX_JOIN_FACTOR`` anyway, ``LIMIT MAX_JOIN_FACTOR + 1`` (it was materialised to its 1.77 M rows before that
  refusal).

* D2 (HIGH on Spark, LOW on DuckDB; every interface) — an interval value through a text operand of a
  date/time subtraction. ``validate._check_interval_use`` reads each ``-`` while the right (or left) operand is still
  a text literal (not a time value), and the text is converted afterwards to ``CAST('<text>' AS DATE)`` (the
  text-beside-a-date rule), so ``CAST(d AS TIMESTAMP) - '2000-01-01'`` is a difference of two times, an INTERVAL
  (Veil's own group-key check says "has type INTERVAL"), and reaches ``AVG``/``MEDIAN`` in a public source,
  ``EXTRACT(DAY FROM …)``, comparisons and derived-table columns; ``d - '2000-01-01'`` (DATE − DATE, an interval on
  Spark) passes too. Through ``veil serve`` the text is a bound parameter (psycopg ``%s`` → ``$1``, untyped), the
  same literal. The raising aggregate is back: ``AVG(CAST(x.pd AS TIMESTAMP) - '0001-01-01')`` overflows INT32 days
  past 2,926 rows a group (plain DuckDB: "Overflow in addition of INT32 (2147379696 + 733896)"). On DuckDB the
  public source is evaluated on its own now, so its failure is decided by public data (no D/D′ difference found).
  Spark keeps the old path, and there s56 C2 is back: ``SELECT COUNT(g.m) FROM people t JOIN (SELECT x.a,
  AVG(CAST(x.pd AS TIMESTAMP) - '0001-01-01') AS m FROM ages x JOIN ages y ON TRUE GROUP BY x.a) g ON g.a = t.age
  WHERE t.age > 90`` (``ages.pd`` = 9999-12-31) fails after the reservation (XX000, "Arithmetic error", charged) on D
  (one person aged 95) and is answered on D′ (oldest 59) — presumably Spark derives ``g.a > 90`` for the public side
  and skips its aggregate when the private side is empty (AQE); a binary search on the threshold reads the oldest
  person's age, whatever ε each query is charged. Without the ``WHERE``, or with ``WHERE t.pid = 77``, both worlds
  fail alike. DuckDB witness: ``SELECT COUNT(*) FROM t WHERE EXTRACT(DAY FROM CAST(d AS
  TIMESTAMP) - '2000-01-01') > 3`` is answered. Fix: run the interval rule after the text conversions (or treat a
  text literal beside a date/time in ``-`` as a time value: ``_time_valued`` of a string literal whose other operand
  is time-valued), and refuse the converted ``ts - CAST(text AS DATE)`` like ``ts - DATE '…'``.

What held (tried, no witness), on DuckDB with noise off, D/D′ (``tests/adversarial/test_redteam_s56.py``'s C2b world,
``MEDIAN`` of public dates near year 5,877,642 raising) — every placement of the raising source ended alike on D and D′
(refused free, 22000): a CTE referenced twice, one CTE read by two sources, a public source inside a private CTE,
a public source pinned through another public table (and through an expression of it), ``SELECT *`` of a nested
public derived table; aggregates in a private subquery, UNION, LATERAL, subqueries outside FROM and correlated
references (implicit lateral: ``UnknownColumn``) are refused before anything runs. Outer-query aggregates of public
columns need declared bounds. Intervals: 40 spellings — ``GREATEST``/``COALESCE``/``CASE``/``IF``/``NULLIF`` of
timestamps minus a timestamp, derived-table columns, aggregates minus aggregates, ``TRY_CAST``, ``DATE_TRUNC``
differences, typed ``TIMESTAMP`` literals, unary minus, interval times or over a number, ``AGE``/``TO_DAYS``/
``DATE_ADD``/``MAKE_TIMESTAMP``/``LAST_DAY``/``STRPTIME`` (not allowed), ``CAST(… AS INTERVAL)`` — all refused;
``d + INTERVAL (huge) DAY``, ``/ 0`` inside the interval, text intervals, ``EXTRACT(EPOCH …)`` of date arithmetic are
answered (TRY holds); a wire parameter declared INTERVAL (OID 1186) is bound as a text literal, which DuckDB cannot
add to an interval (ambiguous, a bind error). Linkage roles: column case, spaces and quotes are normalised; a
source named in another case, quoted or schema-qualified is refused as "not a table of the policy"; a SOM neuron over
a column another table publishes as ``--sensitive`` was refused by the gate's k on (QIs, neuron) at k = 5 in the
witness's data (not a proof: ``som_columns`` take no role in ``check_linkage``). Materialisation bookkeeping: temp
tables per cursor (one per wire connection), scope-counted drops, a failed creation's placeholder, the generation
check before the reservation; a missing table after the reservation is a bind error, ``before_data`` (refunded).
Bind counts: psycopg (plain, ``prepare=True``, named cursors with int and text parameters), psycopg2 named
cursors, pg8000 (native, prepared, DB-API) and asyncpg (fetch, prepare, cursor) all answer; asyncpg's ``$2`` without
``$1`` fails on its own untyped OID 0 (PostgreSQL refuses that statement at Parse too); ``$n`` inside comments,
strings and dollar-quoted strings is not counted.

Fixed by the lead (2026-11-28): D1 — a materialised source holds at most 2,000,000 values (rows × columns, multiplicity
``MAX_MATERIALISED_VALUES``; a wide source is refused free, or built within it); D2 — a text beside a date or time in
``+``/``-`` is refused (``validate._check_interval_use``), as arithmetic takes typed values only.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.support.warehouse import policy_with_tables

POLICY = """\
[database]
path = "w.duckdb"
[ledger]
path = "l.sqlite"
[tables.people]
privacy_unit = "pid"
max_rows_per_unit = 1
[tables.people.columns]
pid = { type = "int" }
age = { type = "int", lower = 0, upper = 120 }
[tables.ages]
public = true
[tables.ages.columns]
a = { type = "int" }
[analysts.a]
epsilon = 1000000
"""


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from veil.proxy._testing import exact_session

    people = pd.DataFrame({"pid": list(range(1, 41)), "age": [20 + i for i in range(40)]}).astype("Int64")
    ages = pd.DataFrame({"a": list(range(121))}).astype("Int64")  # a public reference table: every age
    policy = policy_with_tables(tmp_path_factory.mktemp("s57d1"), POLICY, {"people": people}, {"ages": ages})
    s = exact_session(policy, "a")
    yield s
    s.close()


def _wide_source_query(columns: int) -> str:
    """A pinned public source of 121² rows and ``columns`` + 1 columns, every one of which the query reads."""
    cols = ", ".join(["x.a", *(f"y.a AS c{i}" for i in range(columns))])
    used = ", ".join(f"g.c{i}" for i in range(columns))
    return (
        f"SELECT COUNT(*) FROM people t JOIN (SELECT {cols} FROM ages x JOIN ages y ON TRUE) g ON g.a = t.age "
        f"WHERE COALESCE({used}) IS NOT NULL"
    )


class _Measured:
    """A spy on the engine's ``create_temp``: (rows, columns, bytes DuckDB's ``duckdb_memory()`` grew by) of each
    materialisation, taken before the query's scope drops it."""

    def __init__(self, engine: Any, monkeypatch: pytest.MonkeyPatch) -> None:
        self.engine, self.create = engine, engine.create_temp
        self.held: list[tuple[int, int, float]] = []
        monkeypatch.setattr(engine, "create_temp", self)

    def _used(self) -> float:
        return float(self.engine._cur().execute("SELECT SUM(memory_usage_bytes) FROM duckdb_memory()").fetchone()[0])

    def __call__(self, name: str, sql: str, max_rows: int) -> int:
        before = self._used()
        rows = int(self.create(name, sql, max_rows))
        columns = len(self.engine._cur().execute(f'SELECT * FROM "{name}" LIMIT 0').description or ())
        self.held.append((rows, columns, self._used() - before))
        return rows

    def check(self) -> None:
        """Each materialisation within the cap: at most ``MAX_MATERIALISED_ROWS`` values (rows × columns), or at most
        what a table at the cap of one 8-byte column holds, twice over (2,000,000 × 16 bytes = 32 MB)."""
        from veil.proxy.multiplicity import MAX_MATERIALISED_ROWS

        cap = MAX_MATERIALISED_ROWS
        over = [(r, c, b) for r, c, b in self.held if r <= cap and r * c > cap and b > 16 * cap]
        assert not over, f"materialisations (rows, columns, bytes) {over} held by one free plan pass; the cap is {cap:,} rows"


def test_d1_a_materialisation_holds_no_more_than_the_cap_allows(session: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """MEDIUM (server abuse): the row cap does not bound the memory a materialisation holds. 14,641 rows × 301 columns
    (4.4 M values, 41.5 MB measured) are built in the reader during the free plan pass. On main the query is
    materialised and answered; fixed, it is refused free before the table is built, or built within the cap."""
    from veil.errors import VeilError

    spy = _Measured(session._env.engine, monkeypatch)
    spent = session.budget().spent
    try:
        session.execute(_wide_source_query(300), epsilon=1.0)
    except VeilError as refused:
        assert session.budget().spent == spent, refused  # a refusal here is decided by public data: free
    spy.check()


def test_d1_explain_builds_no_more_than_the_cap_allows(session: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """``explain`` (free, spends nothing) evaluates the same source for itself: an analyst with no budget left can
    still make the reader build it, as often as they like."""
    from veil.errors import VeilError

    spy = _Measured(session._env.engine, monkeypatch)
    try:
        session.explain(_wide_source_query(300), epsilon=1.0)
    except VeilError:
        pass
    spy.check()


# -- D1b (review s18): the value cap did not bound a source of long texts ------------------------------------------------

D1B_POLICY = POLICY.replace('a = { type = "int" }', 'a = { type = "int" }\ntxt = { type = "category" }')


@pytest.mark.parametrize("copies", [1, 20])
def test_d1b_a_materialisation_of_long_texts_holds_no_more_than_the_byte_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, copies: int
) -> None:
    """MEDIUM (server abuse): 3,721 rows × 2 columns (a self-join of 61 rows, the second column 20 copies of a public
    1 KB text) are 7,442 values, far under the value cap, yet held 76 MB of the reader during a free plan pass. The
    cap now counts a bound on each row's bytes (the public text's longest value × 4 per copy): refused free, holding
    at most ``MAX_MATERIALISED_BYTES`` while it is built; one copy (4 MB) is answered."""
    from veil.errors import VeilError
    from veil.proxy._testing import exact_session
    from veil.proxy.multiplicity import MAX_MATERIALISED_BYTES

    people = pd.DataFrame({"pid": list(range(1, 41)), "age": [20 + i for i in range(40)]}).astype("Int64")
    ages = pd.DataFrame({"a": pd.array(range(61), dtype="Int64"), "txt": ["x" * 1000] * 61})
    policy = policy_with_tables(tmp_path, D1B_POLICY, {"people": people}, {"ages": ages})
    cat = " || ".join(["y.txt"] * copies)
    sql = (
        f"SELECT COUNT(*) FROM people t JOIN (SELECT x.a, {cat} AS s FROM ages x JOIN ages y ON TRUE) g "
        "ON g.a = t.age WHERE g.s IS NOT NULL"
    )
    with exact_session(policy, "a") as s:
        spy = _Measured(s._env.engine, monkeypatch)
        spent = s.budget().spent
        try:
            s.execute(sql, epsilon=1.0)
            answered = True
        except VeilError as refused:
            assert s.budget().spent == spent, refused
            answered = False
        assert all(b <= MAX_MATERIALISED_BYTES for _, _, b in spy.held), spy.held
        assert answered == (copies == 1)


# -- D2: an interval value through a text literal subtracted from a date or time ----------------------------------------

#: ``ts - '<text>'`` (or ``'<text>' - ts``) passes ``_check_interval_use`` — the text is not a time value when the
#: rule reads the ``-`` — and is then converted to ``CAST('<text>' AS DATE)`` (the text-beside-a-date conversion):
#: a difference of two times, an INTERVAL (Veil's own group-key refusal names the type: "has type INTERVAL").
D2_INTERVAL_VALUES = [
    # an aggregate of an interval in a public source (s56 C2's shape: AVG of intervals overflows INT32 days)
    "SELECT COUNT(g.m) FROM t JOIN (SELECT k, AVG(CAST(pd AS TIMESTAMP) - '2000-01-01') AS m FROM pub GROUP BY k) g ON g.k = t.a",
    "SELECT COUNT(g.m) FROM t JOIN (SELECT k, MEDIAN(CAST(pd AS TIMESTAMP) - '2000-01-01') AS m FROM pub GROUP BY k) g "
    "ON g.k = t.a",
    # a function, a comparison, a projection of a private interval
    "SELECT COUNT(*) FROM t WHERE EXTRACT(DAY FROM CAST(d AS TIMESTAMP) - '2000-01-01') > 3",
    "SELECT COUNT(*) FROM t WHERE CAST(d AS TIMESTAMP) - '2000-01-01' > CAST(e AS TIMESTAMP) - '2000-01-01'",
    "SELECT COUNT(*) FROM (SELECT CAST(d AS TIMESTAMP) - '2000-01-01' AS iv FROM t) s WHERE s.iv IS NOT NULL",
    "SELECT COUNT(*) FROM t WHERE '2000-01-01' - CAST(d AS TIMESTAMP) IS NULL",
    # in brackets, beside date arithmetic, with a time of day
    "SELECT COUNT(*) FROM t WHERE CAST(d AS TIMESTAMP) - ('2000-01-01') IS NULL",
    "SELECT COUNT(*) FROM t WHERE (CAST(d AS TIMESTAMP) + INTERVAL '1' DAY) - '2000-01-01 10:00:00' IS NULL",
    # DATE - DATE: an interval on Spark (the rule refuses d - e; the text spelling passes)
    "SELECT COUNT(*) FROM t WHERE d - '2000-01-01' IS NULL",
]

D2_POLICY = """\
[database]
path = "w.duckdb"
[ledger]
path = "l.sqlite"
[tables.t]
privacy_unit = "row"
[tables.t.columns]
a = { type = "int", lower = 0, upper = 100 }
d = { type = "date" }
e = { type = "date" }
[tables.pub]
public = true
[tables.pub.columns]
k = { type = "int" }
pd = { type = "date" }
[analysts.a]
epsilon = 1000
[analysts.wire]
epsilon = 1000
"""


@pytest.fixture(scope="module")
def d2_policy(tmp_path_factory: pytest.TempPathFactory) -> Any:
    t = pd.DataFrame(
        {
            "a": pd.array(range(30), dtype="Int64"),
            "d": pd.to_datetime(["2020-01-01"] * 30).date,
            "e": pd.to_datetime(["2021-06-01"] * 30).date,
        }
    )
    pub = pd.DataFrame({"k": pd.array(range(10), dtype="Int64"), "pd": pd.to_datetime(["2010-05-05"] * 10).date})
    return policy_with_tables(tmp_path_factory.mktemp("s57d2"), D2_POLICY, {"t": t}, {"pub": pub})


@pytest.mark.parametrize("sql", D2_INTERVAL_VALUES)
def test_d2_a_text_subtracted_from_a_time_is_no_interval_value(d2_policy: Any, sql: str) -> None:
    """LOW on DuckDB (the rule's defence in depth: a public source is materialised on its own there), HIGH on Spark
    (the rule is its whole defence, see the Spark witness below): an interval value reaches an aggregate, EXTRACT,
    a comparison and a projection. On main each is answered; it must be refused free, as ``d - e`` and
    ``ts - TIMESTAMP '…'`` are (42804)."""
    from veil.errors import VeilError
    from veil.proxy._testing import exact_session

    with exact_session(d2_policy, "a") as s:
        before = s.budget().spent
        with pytest.raises(VeilError) as refused:
            s.execute(sql, epsilon=1.0)
        assert refused.value.sqlstate in ("0A000", "42804"), refused.value
        assert "interval" in str(refused.value).lower(), refused.value
        assert s.budget().spent == before


def test_d2_through_the_wire_with_a_bound_text(d2_policy: Any) -> None:
    """Through ``veil serve``: psycopg binds ``'2000-01-01'`` as an untyped text parameter, the same literal."""
    import psycopg

    from tests.support.attack import set_password, wire_connect
    from tests.support.server import running_server

    policy_file = Path(d2_policy.database_path).parent / "policy.toml"
    set_password(policy_file, "wire")
    with running_server(policy_file) as st:
        conn = wire_connect(st.port, "wire")  # type: ignore[attr-defined]
        try:
            with conn.cursor() as cur, pytest.raises(psycopg.Error) as refused:
                cur.execute("SELECT COUNT(*) FROM t WHERE EXTRACT(DAY FROM CAST(d AS TIMESTAMP) - %s) > 3", ("2000-01-01",))
                cur.fetchall()
            assert refused.value.sqlstate in ("0A000", "42804"), refused.value
        finally:
            conn.close()


# -- D2 on Spark: the interval value decides, through the private side, whether the query fails -----------------------

D2_SPARK_POLICY = """\
[database]
path = "w.duckdb"
[ledger]
path = "l.sqlite"
[engine]
kind = "spark"
master = "local[2]"
warehouse = "spark-warehouse"
[tables.people]
privacy_unit = "pid"
max_rows_per_unit = 1
[tables.people.columns]
pid = { type = "int" }
age = { type = "int", lower = 0, upper = 120 }
[tables.ages]
public = true
[tables.ages.columns]
a = { type = "int" }
pd = { type = "date" }
[analysts.a]
epsilon = 1000000
"""

#: AVG of 121 intervals of ~3.65 M days each (9999-12-31 minus 0001-01-01) overflows Spark's LONG of microseconds.
D2_SPARK_SQL = (
    "SELECT COUNT(g.m) FROM people t JOIN (SELECT x.a, AVG(CAST(x.pd AS TIMESTAMP) - '0001-01-01') AS m FROM ages x "
    "JOIN ages y ON TRUE GROUP BY x.a) g ON g.a = t.age WHERE t.age > {threshold}"
)


@pytest.fixture(scope="module")
def d2_spark_worlds(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    import datetime as dt
    import types

    import veil.proxy.bounding as bounding
    from veil.engines.spark import spark_available
    from veil.policy import load_policy
    from veil.proxy._testing import exact_session
    from veil.store.warehouse import write_table

    reason = spark_available()
    if reason is not None:
        pytest.skip(f"Spark test skipped: {reason}")
    saved = bounding.secrets
    bounding.secrets = types.SimpleNamespace(token_hex=lambda n: "5a" * n)  # type: ignore[assignment]
    base = tmp_path_factory.mktemp("s57d2spark")
    people = pd.DataFrame({"pid": list(range(1, 41)), "age": [20 + i for i in range(40)]})  # ages 20…59
    ages = pd.DataFrame({"a": pd.array(range(121), dtype="Int64"), "pd": [dt.date(9999, 12, 31)] * 121})
    sessions: dict[str, Any] = {}
    try:
        for name, target in (("D", True), ("D'", False)):
            folder = base / ("d" if target else "dp")
            folder.mkdir()
            (folder / "policy.toml").write_text(D2_SPARK_POLICY, encoding="utf-8")
            policy = load_policy(folder / "policy.toml")
            rows = pd.concat([people, pd.DataFrame({"pid": [77], "age": [95]})]) if target else people
            write_table(policy, "people", rows.astype("Int64"), replace=True)
            write_table(policy, "ages", ages, replace=True, public=True)
            sessions[name] = exact_session(policy, "a")
        yield sessions
    finally:
        for s in sessions.values():
            s.close()
        bounding.secrets = saved


def test_d2_on_spark_the_private_side_decides_whether_an_interval_aggregate_fails(d2_spark_worlds: dict[str, Any]) -> None:
    """HIGH on Spark (a deterministic side channel; every interface — the failure is in the engine): with ``WHERE
    t.age > 90``, D (one person aged 95) fails after the reservation (``QueryFailed``, XX000, "Arithmetic error",
    charged) and D′ (oldest 59) is answered: whether the public source's overflowing ``AVG`` of intervals is computed
    is decided by the private rows (Spark infers ``g.a > 90`` on the public side and, with the private side empty,
    never aggregates it). A binary search on the threshold reads the oldest person's exact age (s56 C2, on Spark,
    through D2's interval). Measured 2026-11-28: ~45 s for the Spark start, writes and queries on the 2-core host."""
    from veil.errors import VeilError

    def ending(session: Any) -> str:
        try:
            session.execute(D2_SPARK_SQL.format(threshold=90), epsilon=1.0)
        except VeilError as exc:
            return f"{type(exc).__name__} {exc.sqlstate}"
        return "answered"

    outcomes = {name: ending(s) for name, s in d2_spark_worlds.items()}
    assert outcomes["D"] == outcomes["D'"], outcomes
