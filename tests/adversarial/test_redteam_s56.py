"""Red team, session 56: the plan cache, public-join multiplicity, deterministic side channels and accounting on the
analyst query path (main at 1c02125, 2026-11-28).

Each test below FAILS on main at 1c02125 (nothing is marked xfail: the lead fixes the code and the test turns green).

Findings:

* C1 (LOW, a free work bound skipped through the plan cache; the Python API and ``veil serve``, whose sessions keep
  their plan cache between queries — ``veil query`` runs one query per process, so its cache is always cold) — the shape
  of a lifted text literal keeps its length in *characters* (``t64``), but two checks of the plan pass read its
  length in UTF-8 *bytes*: :func:`veil.proxy.expansion.text_work` (``MAX_TEXT_WORK``, 64 MiB of text one person's rows
  may make the engine build) and :func:`veil.proxy.expansion.measure` (``expanded``, priced against
  ``MAX_PERSON_EVALUATIONS``). The probe changes every character to an ASCII ``x``/``y``, so it never sees another
  byte length. A query planned afresh is refused (``Unsupported`` 0A000, "one person's rows can make the engine build
  about 67,108,868 bytes of text … Veil allows 67,108,864") and the same query sent after one with an ASCII literal
  of the same character length is a cache hit and is answered: the bound is skipped, and whether a query is refused
  depends on the session's history instead of its text and the policy. Fix: keep each lifted text's UTF-8 byte length
  in its form (``f"t{len(s)}b{len(s.encode())}"``), or lift only ASCII texts, and have the probe keep byte lengths
  (replace each character by one of the same UTF-8 width).
* C2 (HIGH, a deterministic side channel that reads one person's value exactly; every interface) — a public derived
  table may hold an aggregate in its select list (s52/s55 keep ``AVG``/``MEDIAN`` there: "a value in a column keeps
  or drops no row"), and ``make_total`` never wraps an aggregate (s55 A3). ``AVG`` of an ``INTERVAL`` raises in
  DuckDB when a group's days overflow INT32 ("Overflow in addition of INT32"; plain DuckDB's ``MEDIAN`` of intervals
  also raised, "Could not convert Day to Microseconds", on other values), and whether the
  engine aggregates that group at all is decided by the *private* side: DuckDB derives a filter on the join key from
  the bounded copy's column statistics (its min/max zonemaps; ``Filters: a <= <max age>`` on the public scan, below
  the aggregate; a WHERE on another column does not narrow it: ``WHERE t.pid = 5`` still fails on D), so public groups
  outside the private column's range are never aggregated. With a public reference table ``ages(a)`` = 0…120 and
  ``people.age`` bounded [0, 120]::

      SELECT COUNT(g.m) FROM people t JOIN (SELECT x.a, AVG(INTERVAL (x.a * m) DAY) AS m FROM ages x
        JOIN ages y ON TRUE GROUP BY x.a) g ON g.a = t.age

  with m = ⌊2³¹ / (121·T)⌋ + 1 makes exactly the groups a ≥ T overflow (121 rows each): the query fails
  (``QueryFailed``, XX000, charged) iff max(age) ≥ T, and is answered otherwise — noise plays no part. D has the
  target at age 95 (the oldest), D′ drops him (max 59): T = 60 and T = 90 fail on D and answer on D′; T = 96 answers
  on both. Seven such queries (binary search on T) give the oldest person's exact age, whatever ε each is charged;
  the same with MIN through the lower end, and with ``WHERE t.age < X`` narrowing the range. Fix: (1) refuse an
  aggregate of an INTERVAL (or of anything but a number, text, date or bool column) anywhere, public sources
  included — intervals are for date arithmetic; and, since any runtime error of a public source is now read
  through the private side, (2) make every public-source aggregate total or evaluate public sources independently of
  the private side (materialise them before the join, e.g. a ``MATERIALIZED`` CTE / a temporary table built in the
  plan pass, so no filter derived from the bounded copy reaches them).

Fixed by the lead (2026-11-28): C1 — the plan cache lifts only ASCII texts (characters = bytes); C2 — an interval is
allowed only in date arithmetic (``validate._check_interval_use``: no interval value exists for an aggregate to read,
every engine), and the class behind it is closed on DuckDB by evaluating each derived public source once, on its own
(multiplicity's materialisation): C2b below is the same side channel through ``MEDIAN`` of a public date column, an
aggregate of admitted types that raises on dates near year 5,877,642, failing on main at b8416ca.
What held (tried, no witness): the plan cache otherwise — number literals of one digit pattern across the INT32/INT64
boundary, leading zeros, 15+15-digit decimals, equal literals (the probe keeps equalities), quotes and backslashes in
texts, shapes forged with a marker (no literal can hold its NUL: ``E'\\x00'``/``U&'…'`` are refused), a select-list alias
named like the column, describe/explain through the cache; public-join multiplicity (GROUP BY ALL in public sources
and in the outer query, USING, ``OR FALSE``, renamed and duplicated bare projections, ``* EXCLUDE/REPLACE``,
``HAVING COUNT``, MAX of an int, ORDER BY … LIMIT … OFFSET, aggregates as values) — every plan covered both worlds;
GROUP BY ALL in a private subquery is refused; extra arguments in 40 spellings are 42883 or a syntax error; one
person's DATE 5877642-06-25 / 290309 BC / infinity in every date function, comparison with TIMESTAMP, DATE_TRUNC,
EXTRACT, casts and keys: both worlds end alike and move within c; mixed public/private keys and key expressions
(NULLIF, CASE on the unit, LEFT(…, 0), UPPER) within c; public columns declared with bounds still get TRY around
arithmetic; TRY around repeated sub-expressions (DuckDB's CSE) held.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.support.warehouse import policy_with_tables

# -- C1: a lifted text's byte length is read by the plan pass, and the shape keeps only its characters -------------

C1_POLICY = """\
[database]
path = "w.duckdb"
[ledger]
path = "l.sqlite"
[tables.t]
privacy_unit = "row"
[tables.t.columns]
i = { type = "int", lower = 0, upper = 10 }
c = { type = "category" }
d = { type = "category", max_length = 1 }
[analysts.a]
epsilon = 1000000
"""


@pytest.fixture(scope="module")
def c1_policy(tmp_path_factory: pytest.TempPathFactory) -> Any:
    t = pd.DataFrame({"i": [k % 11 for k in range(40)], "c": ["x", "y"] * 20, "d": ["a"] * 40})
    return policy_with_tables(tmp_path_factory.mktemp("s56c1"), C1_POLICY, {"t": t})


def _lower(depth: int) -> str:
    return "LOWER(" * depth + "c" + ")" * depth + " = 'z'"


#: Terms whose text work (``expansion.text_work``) fills the 64 MiB bound to the byte with the ASCII literal last:
#: LOWER chains (1.5× per level over a 4 KB category value), ``c = ''`` (256) and ``d = '<33…64 x>'`` (2–4).
#: Found greedily from the measured weights; the sum is exactly ``MAX_TEXT_WORK`` with ``c = '<64 × x>'``.
def _filler(weight: Any) -> list[str]:
    from veil.proxy.multiplicity import MAX_TEXT_WORK

    blocks = [_lower(k) for k in range(21, 0, -1)] + ["c = ''"] + ["d = '" + "x" * n + "'" for n in (64, 48, 33)]
    terms: list[str] = []
    left = MAX_TEXT_WORK - weight([], "'" + "x" * 64 + "'")
    for block in blocks:
        w = weight([block], None)
        while 0 < w <= left:
            terms.append(block)
            left -= w
    assert left == 0, left
    return terms


def _c1_query(terms: list[str], literal: str | None) -> str:
    tail = [] if literal is None else [f"c = {literal}"]
    return "SELECT COUNT(*) FROM t WHERE " + " AND ".join(terms + tail)


@pytest.fixture(scope="module")
def c1_queries(c1_policy: Any) -> Iterator[tuple[str, str]]:
    from veil.proxy import pipeline
    from veil.proxy._testing import exact_session
    from veil.proxy.expansion import text_work

    with exact_session(c1_policy, "a") as s:

        def weight(terms: list[str], literal: str | None) -> int:
            state = pipeline.run(s._state(_c1_query(terms, literal), 0.5), s._env, until="validate", cache=False)
            assert state.analysis is not None
            return text_work(state.analysis.tree, s._env.column_text_bytes)

        terms = _filler(weight)
    ascii_literal, wide_literal = "'" + "x" * 64 + "'", "'" + "é" * 64 + "'"  # 64 characters each; 64 and 128 bytes
    yield _c1_query(terms, ascii_literal), _c1_query(terms, wide_literal)


@pytest.fixture(autouse=True)
def _no_value_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    """These queries sit at the text-work bound through 21 nested LOWERs, which the largest-value bound of session 20
    (``multiplicity.MAX_VALUE_BYTES``, ×1.5 per case mapping) refuses first; lifted here so they test what they test."""
    from veil.proxy import multiplicity

    monkeypatch.setattr(multiplicity, "MAX_VALUE_BYTES", 1 << 40)


def test_c1_a_cache_hit_never_answers_what_planning_afresh_refuses(c1_policy: Any, c1_queries: tuple[str, str]) -> None:
    """LOW: ``SELECT COUNT(*) FROM t WHERE LOWER(…21…(c)…) = 'z' AND … AND c = '<64 × é>'`` (1,083 characters) is
    refused afresh — its text work is 4 bytes over the 64 MiB bound — but answered right after the same query with
    ``c = '<64 × x>'`` (exactly at the bound), whose shape it shares. The outcome must not depend on what the
    session asked before: both sessions must refuse it, free."""
    from veil.errors import Unsupported
    from veil.proxy._testing import exact_session

    ascii_query, wide_query = c1_queries
    assert len(ascii_query) == len(wide_query) < 4096  # the plan cache takes both
    with exact_session(c1_policy, "a") as fresh:
        with pytest.raises(Unsupported, match="bytes of text"):
            fresh.execute(wide_query, epsilon=0.5)
    with exact_session(c1_policy, "a") as warm:
        warm.execute(ascii_query, epsilon=0.5)  # at the bound: answered, planned, probed and cached
        assert warm._env.plan_cache
        spent = warm.budget().spent
        with pytest.raises(Unsupported, match="bytes of text"):
            warm.execute(wide_query, epsilon=0.5)
        assert warm.budget().spent == spent


@pytest.mark.parametrize("wide", ["é", "€", "😀", "ß"])
def test_c1_a_shape_keeps_every_length_a_check_reads(c1_policy: Any, wide: str) -> None:
    """The class: a lifted text's shape must tell apart every length a planning check reads — characters (the
    category's cut) and UTF-8 bytes (text work, expanded size). Two texts of one character length and different byte
    lengths must not share a shape (or must not be lifted)."""
    from veil.proxy import plan_cache
    from veil.proxy.parse import parse
    from veil.proxy.session import QuerySession

    sqls = [f"SELECT COUNT(*) FROM t WHERE c = '{ch * 8}'" for ch in ("x", wide)]
    with QuerySession(c1_policy, "a") as s:
        lifted = [plan_cache.lift(parse(q), s._env.policy, q) for q in sqls]
    if all(x is not None for x in lifted):
        assert lifted[0].shape != lifted[1].shape  # type: ignore[union-attr]


# -- C2: a public source's runtime error is decided by the private side's statistics --------------------------------

C2_POLICY = """\
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
[analysts.wire]
epsilon = 1000000
"""
C2_TARGET_AGE = 95


def _c2_world(folder: Path, *, target: bool) -> Any:
    people = pd.DataFrame({"pid": list(range(1, 41)), "age": [20 + i for i in range(40)]})  # ages 20…59
    if target:
        people = pd.concat([people, pd.DataFrame({"pid": [77], "age": [C2_TARGET_AGE]})])
    people = people.astype({"pid": "Int64", "age": "Int64"})
    ages = pd.DataFrame({"a": list(range(121))}).astype({"a": "Int64"})  # a public reference table: every age
    return policy_with_tables(folder, C2_POLICY, {"people": people}, {"ages": ages})


def c2_query(threshold: int) -> str:
    """Fails iff some age ≥ ``threshold`` is in the private column's range: each group a has 121 rows (the cross join),
    so its sum of days 121·a·m overflows INT32 exactly for a ≥ threshold."""
    m = 2**31 // (121 * threshold) + 1
    assert 121 * threshold * m > 2**31 - 1 >= 121 * (threshold - 1) * m
    return (
        f"SELECT COUNT(g.m) FROM people t JOIN (SELECT x.a, AVG(INTERVAL (x.a * {m}) DAY) AS m FROM ages x "
        f"JOIN ages y ON TRUE GROUP BY x.a) g ON g.a = t.age"
    )


@pytest.fixture(scope="module")
def c2_pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any]]:
    from tests.support.attack_neighbours import share_salts
    from veil.proxy._testing import exact_session

    base = tmp_path_factory.mktemp("s56c2")
    d = exact_session(_c2_world(base / "d", target=True), "a")
    d_prime = exact_session(_c2_world(base / "dp", target=False), "a")
    share_salts(d, d_prime)
    yield d, d_prime
    d.close()
    d_prime.close()


def _outcome(session: Any, sql: str) -> str:
    from veil.errors import VeilError

    try:
        session.execute(sql, epsilon=1.0)
    except VeilError as exc:
        return f"{type(exc).__name__} {exc.sqlstate}"
    return "answered"


@pytest.mark.parametrize("threshold", [60, 90, 96])
def test_c2_a_public_sources_error_never_depends_on_the_private_side(c2_pair: tuple[Any, Any], threshold: int) -> None:
    """HIGH: the query fails (QueryFailed, charged) on D — the target, aged 95, is the oldest — and is answered on
    D′ (oldest 59) for T = 60 and T = 90; both answer at T = 96: a binary search on T reads the oldest person's exact
    age. Both worlds must end the same way (refused free alike, or answered alike)."""
    d, d_prime = c2_pair
    sql = c2_query(threshold)
    assert _outcome(d, sql) == _outcome(d_prime, sql)


def test_c2_an_interval_is_never_aggregated(c2_pair: tuple[Any, Any]) -> None:
    """The fix's first line: an aggregate of an INTERVAL (AVG overflows INT32 days, MEDIAN fails to convert days to
    microseconds) is refused before anything is charged, in a public source as anywhere, alike on D and D′."""
    from veil.errors import VeilError

    d, d_prime = c2_pair
    for agg in ("AVG", "MEDIAN"):
        sql = (
            f"SELECT COUNT(g.m) FROM people t JOIN (SELECT x.a, {agg}(INTERVAL (x.a) DAY) AS m FROM ages x "
            "GROUP BY x.a) g ON g.a = t.age"
        )
        for session in (d, d_prime):
            before = session.budget().spent
            with pytest.raises(VeilError):
                session.execute(sql, epsilon=1.0)
            assert session.budget().spent == before


def test_c2_through_the_wire(tmp_path: Path) -> None:
    """Through ``veil serve`` and psycopg (real noise): T = 90 is XX000 with the target, answered without him."""
    from tests.support.attack import set_password, wire_connect, wire_sqlstate
    from tests.support.server import running_server

    states = []
    for name, target in (("d", True), ("dp", False)):
        _c2_world(tmp_path / name, target=target)
        policy = tmp_path / name / "policy.toml"
        set_password(policy, "wire")
        with running_server(policy) as st:
            conn = wire_connect(st.port, "wire")  # type: ignore[attr-defined]
            try:
                states.append(wire_sqlstate(conn, c2_query(90)))
            finally:
                conn.close()
    assert states[0] == states[1], states


# -- C2b: the class behind C2, through an aggregate of admitted types (lead, after the interval rule) ---------------

C2B_POLICY = C2_POLICY.replace('a = { type = "int" }', 'a = { type = "int" }\nd = { type = "date" }')


def _c2b_world(folder: Path, *, target: bool) -> Any:
    """C2's world, the public table with a date column whose groups a ≥ 90 hold dates near DuckDB's end of time
    (written by a curator's own tool): ``MEDIAN`` of two of them interpolates through a cast that raises."""
    import datetime as dt

    import duckdb

    people = pd.DataFrame({"pid": list(range(1, 41)), "age": [20 + i for i in range(40)]})
    if target:
        people = pd.concat([people, pd.DataFrame({"pid": [77], "age": [C2_TARGET_AGE]})])
    people = people.astype({"pid": "Int64", "age": "Int64"})
    ages = pd.DataFrame({"a": [a for a in range(121) for _ in range(2)], "d": [dt.date(2000, 1, 1)] * 242})
    policy = policy_with_tables(folder, C2B_POLICY, {"people": people}, {"ages": ages.astype({"a": "Int64"})})
    con = duckdb.connect(str(policy.database_path))
    try:
        con.execute("UPDATE ages SET d = DATE '5877642-06-25' - CAST(a AS INTEGER) WHERE a >= 90")
    finally:
        con.close()
    return policy


def test_c2b_a_public_sources_failure_is_decided_by_public_data_alone(tmp_path: Path) -> None:
    """HIGH class, DuckDB: any aggregate that can raise, in a public derived source, raised or not as the private copy's
    statistics pruned its groups. ``MEDIAN`` of a public date column (admitted; it interpolates through a cast that
    fails on dates near year 5,877,642) failed (charged, XX000) iff max(age) ≥ 90 — the target's age. The source is now
    evaluated once on its own (multiplicity's materialisation): the outcome is the same on D and D′ (here refused free:
    the public data alone make it fail)."""
    from tests.support.attack_neighbours import share_salts
    from veil.proxy._testing import exact_session

    sql = "SELECT COUNT(g.m) FROM people t JOIN (SELECT a, MEDIAN(d) AS m FROM ages GROUP BY a) g ON g.a = t.age"
    d = exact_session(_c2b_world(tmp_path / "d", target=True), "a")
    d_prime = exact_session(_c2b_world(tmp_path / "dp", target=False), "a")
    try:
        share_salts(d, d_prime)
        spent = d.budget().spent
        outcomes = [_outcome(s, sql) for s in (d, d_prime)]
        assert outcomes[0] == outcomes[1], outcomes
        if outcomes[0] != "answered":
            assert d.budget().spent == spent  # a refusal decided by public data is free
    finally:
        d.close()
        d_prime.close()
