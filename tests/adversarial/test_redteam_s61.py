"""Red team, session 61: the Spark engine (pyspark ``local[2]``, ANSI off) against DuckDB, neighbouring worlds D / D′
differing in one person (pid 77: age 120, name ``a\\q``, date 9999-12-31), noise off (``exact_session``).

Each test below FAILS on main at 49d6221 (nothing is marked xfail: the lead fixes the code and the test turns green).
One Spark start for the module (both worlds in the one process); measured ~60–90 s on the shared 2-core host.

Findings:

* F3 (HIGH on Spark — a deterministic side channel, threat class 2; every interface: the failure is in the engine) —
  F1's invalid escape is raised only where Spark *generates code for* the LIKE: when it stands above a join (it reads
  both sides, or a public column Spark does not push below the join) and the private side of the join is empty after
  its own filter, adaptive query execution replaces the join by an empty relation and the LIKE is never built.
  ``SELECT COUNT(*) FROM people t JOIN ages p ON p.a = t.age WHERE t.age > {threshold} AND t.name || p.s LIKE '%\\q%'``
  fails after the reservation (QueryFailed XX000, charged) when some person is older than ``threshold`` (D: one
  person aged 120) and is answered when none is (D′: oldest 49; ``threshold`` 200: answered in both). A binary search
  on the threshold reads the oldest person's exact age (7 queries for 0–120), any column's extreme the same way, and
  ``t.pid = 77 AND …`` reads one person's presence: each bit is deterministic, whatever ε is charged. Measured
  2026-11-28 on main 49d6221 (also with ``CASE WHEN p.a > 0 THEN t.name ELSE p.s END LIKE 'a\\q'`` and a
  derived public column ``g.s2 LIKE '%\\qx'``). Suggested fix: F1's fix removes this instance (no LIKE literal Spark
  refuses); class-level, treat any Spark error raised after ``df.schema`` as data-dependent by construction — plan
  the statement fully before the reservation (``df._jdf.queryExecution().executedPlan()`` / an ``EXPLAIN`` of the
  generated SQL with AQE off, so code generation and the optimiser's checks run on no data), and add a conformance
  check that every construct Veil accepts compiles on Spark over empty and non-empty inputs alike.
* F1 (MEDIUM on Spark — accounting/availability, threat class 2/4; every interface, free to trigger) — a ``LIKE`` /
  ``ILIKE`` text literal holding a backslash. Spark's LIKE has ``\\`` as its default escape character, DuckDB's has
  none (PostgreSQL's is ``\\`` too, but Veil's docs and DuckDB match it literally). A backslash before anything other
  than ``_``, ``%`` or ``\\`` is an *invalid escape* for Spark, raised while the statement runs (its optimiser/code
  generation, after ``df.schema`` analysed it): ``SELECT COUNT(*) FROM people WHERE name LIKE '%\\q%'`` passes
  validation, the plan, ``explain`` and the free analysis, reserves ε and then fails (``QueryFailed`` XX000, "its ε
  stays charged"). DuckDB answers it. Same for a public-table column's LIKE in a join with private data. Any analyst
  burns budget, the log reads "a bug in Veil", and every such query is a charged failure.
* F2 (LOW on Spark — correctness; every interface) — the same literal's *meaning*: ``name LIKE 'a\\%'`` is "starts with
  ``a\\``" on DuckDB (1 row in D: ``a\\q``) and "equals ``a%``" on Spark (0 rows). One query, two answers per engine;
  a release on Spark is a statistic of a different predicate than the one the analyst wrote and the docs describe.
  Suggested class-level fix for F1+F2: in :mod:`veil.engines.neutral`, give every LIKE an explicit ``ESCAPE`` (render
  ``LIKE p ESCAPE '\\x01'``-style with a character refused in patterns, or double each backslash in the Spark
  rendering: ``\\`` → ``\\\\``), so both engines match the literal characters; and add LIKE patterns with ``\\``,
  ``%``-adjacent ``\\`` and a trailing ``\\`` to the conformance suite (tests/*conformance*).

What held (Spark D/D′ and DuckDB, noise off, 2026-11-28): ``INTERVAL (expr) unit`` is a free Parse error on Spark
(a legitimate query refused, LOW); ``d + INTERVAL '2000000000' DAY`` a free Arithmetic error (DuckDB answers);
TRY_CAST of texts to INT/BIGINT/DOUBLE/DECIMAL/BOOLEAN/DATE/TIMESTAMP, integer overflow (``* 9223372036854775807``,
``ABS``), ``%``/``/`` by zero, ROUND with scales ±400 and 2^31−1, SUBSTRING/LEFT/RIGHT at ±2^31 positions, NaN from
SQRT, EXP overflow, DATE_TRUNC/EXTRACT of extreme dates: same outcome in both worlds, each in the F3 join shape too.
Public-source multiplicity on Spark (explain's sensitivity ≥ the measured per-person join count in every case):
text→INT/DOUBLE casts of ``'1'``/``'1.0'``/``' 1'``/``'+1'``/``'1e0'`` as keys (121 ≥ 31/46), ``-0.0``/``0.0`` keys
(121 ≥ 121; DISTINCT: 1 ≥ 1), NaN keys (Spark joins NaN = NaN: 121 ≥ 60; DISTINCT: 62 and 2 ≥ 1; MAX(NaN) per
group 2 ≥ 2), UPPER/LOWER/TRIM keys, ORDER BY … LIMIT with ties, GROUP BY counts as keys. One divergence that does not leak:
``EXTRACT(YEAR FROM d + INTERVAL '5000000' YEAR)`` is a year on Spark (dates hold ±5.8 M years), NULL on DuckDB.
"""

from __future__ import annotations

import types
from collections.abc import Iterator
from typing import Any

import pandas as pd
import pytest

POLICY = """\
[database]
path = "w.duckdb"
[ledger]
path = "l.sqlite"
{engine}
[tables.people]
privacy_unit = "pid"
max_rows_per_unit = 1
[tables.people.columns]
pid = {{ type = "int" }}
age = {{ type = "int", lower = 0, upper = 120 }}
name = {{ type = "category" }}
[tables.ages]
public = true
[tables.ages.columns]
a = {{ type = "int" }}
s = {{ type = "category" }}
[analysts.a]
epsilon = 1000000
"""

SPARK = '[engine]\nkind = "spark"\nmaster = "local[2]"\nwarehouse = "spark-warehouse"'


def _people(target: bool) -> pd.DataFrame:
    n = 30
    rows = pd.DataFrame({"pid": list(range(1, n + 1)), "age": [20 + i for i in range(n)], "name": [f"n{i}" for i in range(n)]})
    if target:
        rows = pd.concat([rows, pd.DataFrame({"pid": [77], "age": [120], "name": ["a\\q"]})], ignore_index=True)
    rows["pid"] = rows["pid"].astype("Int64")
    rows["age"] = rows["age"].astype("Int64")
    return rows


AGES = pd.DataFrame({"a": pd.array(range(121), dtype="Int64"), "s": [f"p{i}" if i % 2 else "a\\q" for i in range(121)]})


@pytest.fixture(scope="module")
def worlds(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[tuple[str, str], Any]]:
    """Sessions on ("spark" | "duckdb", "D" | "D'"), noise off."""
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
    base = tmp_path_factory.mktemp("s61spark")
    sessions: dict[tuple[str, str], Any] = {}
    try:
        for kind, engine in (("spark", SPARK), ("duckdb", "")):
            for name, target in (("D", True), ("D'", False)):
                folder = base / f"{kind}-{'d' if target else 'dp'}"
                folder.mkdir()
                (folder / "policy.toml").write_text(POLICY.format(engine=engine), encoding="utf-8")
                policy = load_policy(folder / "policy.toml")
                write_table(policy, "people", _people(target), replace=True)
                write_table(policy, "ages", AGES, replace=True, public=True)
                sessions[(kind, name)] = exact_session(policy, "a")
        yield sessions
    finally:
        for s in sessions.values():
            s.close()
        bounding.secrets = saved


def _ending(session: Any, sql: str) -> tuple[str, Any]:
    """("answered", rows) or (error class and SQLSTATE, whether ε was charged)."""
    from veil.errors import VeilError

    before = session.budget().spent
    try:
        answer = session.execute(sql, epsilon=1.0)
    except VeilError as exc:
        return f"{type(exc).__name__} {exc.sqlstate}", session.budget().spent > before
    return "answered", answer.rows


#: F1: a backslash before a character Spark's LIKE does not escape (and the same in a public column's LIKE).
F1_QUERIES = [
    "SELECT COUNT(*) FROM people WHERE name LIKE '%\\q%'",
    "SELECT COUNT(*) FROM people WHERE name ILIKE '%\\Q%'",
    "SELECT COUNT(*) FROM people t JOIN ages p ON p.a = t.age WHERE p.s LIKE '%\\q%'",
]


@pytest.mark.parametrize("sql", F1_QUERIES)
def test_spark_like_with_a_backslash_is_no_charged_failure(worlds: dict[tuple[str, str], Any], sql: str) -> None:
    """F1 (MEDIUM): DuckDB answers; Spark reserved ε and then failed (QueryFailed XX000, charged). A query either is
    answered, or is refused before its charge — on every engine."""
    for world in ("D", "D'"):
        outcome, detail = _ending(worlds[("spark", world)], sql)
        assert outcome == "answered" or detail is False, (world, outcome, "charged" if detail else "free")


#: F3: whether the LIKE is built depends on whether any private row passes the private side's filter.
F3_SQL = "SELECT COUNT(*) FROM people t JOIN ages p ON p.a = t.age WHERE {condition} AND t.name || p.s LIKE '{pattern}'"
F3_CASES = [
    ("t.age > 110", "%\\q%"),  # the oldest person is older than 110
    ("t.age > 119", "%\\q%"),
    ("t.pid = 77", "%\\q%"),  # person 77 is in the table
    ("t.age > 110", "x\\"),  # a trailing backslash
]


@pytest.mark.parametrize(("condition", "pattern"), F3_CASES)
def test_spark_whether_a_query_fails_does_not_depend_on_one_person(
    worlds: dict[tuple[str, str], Any], condition: str, pattern: str
) -> None:
    """F3 (HIGH): D (person 77, aged 120) and D′ (without them; oldest 49) end the same way — both answered, or both
    refused the same way. Measured on main: D QueryFailed XX000 (charged), D′ answered."""
    sql = F3_SQL.format(condition=condition, pattern=pattern)
    d = _ending(worlds[("spark", "D")], sql)
    d_prime = _ending(worlds[("spark", "D'")], sql)
    assert d[0] == d_prime[0], {"D": d, "D'": d_prime}


#: F2: the same literal, two meanings (DuckDB: a backslash is a character; Spark: it escapes the next one).
F2_QUERIES = [
    "SELECT COUNT(*) FROM people WHERE name LIKE 'a\\%'",
    "SELECT COUNT(*) FROM people WHERE name ILIKE 'A\\%'",
    "SELECT COUNT(*) FROM people WHERE name LIKE 'a\\\\q'",
]


@pytest.mark.parametrize("sql", F2_QUERIES)
def test_spark_like_with_a_backslash_means_what_it_means_on_duckdb(worlds: dict[tuple[str, str], Any], sql: str) -> None:
    """F2 (LOW): with noise off, one query on the same data answers the same on both engines."""
    spark = _ending(worlds[("spark", "D")], sql)
    duck = _ending(worlds[("duckdb", "D")], sql)
    assert spark == duck, {"spark": spark, "duckdb": duck}
