"""The plan cache (``veil.proxy.plan_cache``) gives exactly what planning afresh gives, or nothing.

A query whose shape was planned before skips resolve → prepare: its literals are put into the first query's
generated statements and canonical text. Class-level checks:

* for every cached shape and any literals of the lifted kinds and lengths (hypothesis), the state a hit builds has
  the same statements, canonical text, answer-cache key, plan, cost, post-processing, domain and key types as
  planning the same query afresh — so the charge, the noise and the answer cannot differ;
* what is not lifted (other positions, other kinds or lengths, joins, CTEs, columns with declared values, dates,
  booleans) is never a hit with another value;
* a curator's table write, a policy edit or a publication empties the cache: the next query is planned with the
  new bounds, data version and catalog;
* a shape whose probe (a second planning with other literals) disagrees, or refuses, is never cached.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.warehouse import policy_with_tables
from veil.proxy import pipeline, plan_cache
from veil.proxy._testing import exact_session
from veil.proxy.parse import parse
from veil.proxy.session import QuerySession
from veil.store.warehouse import write_table

POLICY = """\
[database]
path = "w.duckdb"
[ledger]
path = "l.sqlite"
[tables.t]
privacy_unit = "row"
[tables.t.columns]
i = {{ type = "int", lower = 0, upper = {upper} }}
iv = {{ type = "int", values = [1, 2, 3] }}
f = {{ type = "float", lower = -5, upper = 5 }}
c = {{ type = "category" }}
cv = {{ type = "category", values = ["a", "b"] }}
b = {{ type = "bool" }}
d = {{ type = "date" }}
[tables.u]
privacy_unit = "pid"
max_rows_per_unit = 3
[tables.u.columns]
pid = {{ type = "int" }}
i = {{ type = "int", lower = 0, upper = 10 }}
c = {{ type = "category" }}
[tables.pub]
public = true
[analysts.a]
epsilon = 1000000
"""

#: Shapes with lifted literals: ``{n}`` a number, ``{s}`` a text (filled per example).
SHAPES = [
    "SELECT COUNT(*) FROM t WHERE i > {n}",
    "SELECT COUNT(*) AS n FROM t WHERE {n} <= i",
    "SELECT AVG(f) FROM t WHERE f >= {n} AND i < {n2}",
    "SELECT SUM(i), COUNT(*) FROM t WHERE NOT (f = {n}) OR c <> '{s}'",
    "SELECT c, COUNT(*) FROM t WHERE c = '{s}' OR i >= {n} GROUP BY c",
    "SELECT cv, SUM(f) AS s FROM t WHERE (i <= {n}) GROUP BY cv HAVING COUNT(*) > 2 ORDER BY s DESC LIMIT 5",
    "SELECT MEDIAN(f) FROM t WHERE i > {n}",
    "SELECT b, QUANTILE_CONT(i, 0.25) FROM t WHERE c != '{s}' GROUP BY b",
    "SELECT COUNT(*) FROM t AS x WHERE x.i > {n} AND x.c = '{s}'",
    "SELECT c, COUNT(*) FROM u WHERE i < {n} GROUP BY c",
    "SELECT SUM(i - {n}) FROM t WHERE i > -{n}",  # neither is lifted (not in the WHERE; negated): no shape
]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return _world(tmp_path_factory.mktemp("plancache"))


def _world(base: Path, upper: int = 10) -> Any:
    n = 60
    t = pd.DataFrame({
        "i": [k % 11 for k in range(n)], "iv": [1 + k % 3 for k in range(n)], "f": [(k % 10) - 4.5 for k in range(n)],
        "c": ["x", "y", "zz"] * (n // 3), "cv": ["a", "b"] * (n // 2), "b": [True, False] * (n // 2),
        "d": [dt.date(2020, 1, 1 + k % 28) for k in range(n)],
    })  # fmt: skip
    u = pd.DataFrame({"pid": [k // 2 for k in range(n)], "i": [k % 11 for k in range(n)], "c": ["x", "y"] * (n // 2)})
    pub = pd.DataFrame({"pk": [1, 2, 3], "pn": ["u", "v", "w"]})
    return policy_with_tables(base, POLICY.format(upper=upper), {"t": t, "u": u}, {"pub": pub})


@pytest.fixture(scope="module")
def session(world: Any) -> Iterator[QuerySession]:
    with exact_session(world, "a") as s:
        yield s


def _cached(session: QuerySession, sql: str) -> pipeline.QueryState:
    """``sql`` planned through the plan cache (filling it on a miss), without running it."""
    return pipeline.run(session._state(sql, 0.5), session._env, until="prepare", cache=True)


def _fresh(session: QuerySession, sql: str) -> pipeline.QueryState:
    return pipeline.run(session._state(sql, 0.5), session._env, until="prepare", cache=False)


def _same(a: pipeline.QueryState, b: pipeline.QueryState) -> None:
    assert a.rendered == b.rendered
    assert a.canonical == b.canonical and a.key == b.key
    assert plan_cache.same_plan(a, b)
    assert a.plan is not None and b.plan is not None
    assert (a.plan.analysis.private_table, a.plan.keys == b.plan.keys) == (b.plan.analysis.private_table, True)


def _number(draw: Any, length: int) -> str:
    return draw(st.from_regex(rf"[0-9]{{{length}}}", fullmatch=True))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    data=st.data(), shape=st.sampled_from(SHAPES), length=st.integers(1, 4), places=st.sampled_from([0, 0, 1, 2]),
    text=st.integers(0, 6),
)  # fmt: skip
def test_a_hit_plans_what_planning_afresh_plans(
    session: QuerySession, data: Any, shape: str, length: int, places: int, text: int
) -> None:
    def fill() -> str:
        chars = st.text(st.sampled_from("xyzab'Q é%_"), min_size=text, max_size=text)
        n, n2 = _grid_mix(data.draw, length, places), _grid_mix(data.draw, length, places)
        return shape.format(n=n, n2=n2, s=data.draw(chars).replace("'", "''"))

    first, second = fill(), fill()
    _cached(session, first)  # plans, probes and remembers the shape
    keys = [plan_cache.lift(parse(sql), session._env.policy, sql) for sql in (first, second)]
    kept = [e for k, e in session._env.plan_cache.items() if keys[0] is not None and k[0] == keys[0].shape]
    if keys[0] is not None and not _grid_classes(keys[0].shape):
        assert kept, first  # (a number on or off a grid may have no other value of its class: 9 for f, bounded by ±5)
    hit = _cached(session, second)
    assert hit.reservation is None and hit.raw is None  # planned only: nothing charged, nothing run
    _same(hit, _fresh(session, second))
    if kept and keys[1] is not None and keys[0] is not None and keys[0].shape == keys[1].shape:
        assert hit.plan is kept[0].state.plan  # it was a hit


def _grid_classes(shape: str) -> list[str]:
    """The grid classes in a shape (``plan_cache._grid_class``: on or off a real column's grid)."""
    return re.findall("[gr]\x00", shape)


#: Shapes comparing the bounded real column ``f`` (bounds ±5: grid exponent k = 59) the ways the rewrite may read
#: on its pre-scaled grid (``f >= v``, ``f < v``, ``v <= f``, ``v > f``) and ways it may not (``<=``, ``>``, ``=``).
GRID_SHAPES = [
    "SELECT SUM(f) FROM t WHERE f >= {n}",
    "SELECT COUNT(*), AVG(f) FROM t WHERE {n} <= f AND f < {n2}",
    "SELECT cv, SUM(f) FROM t WHERE NOT ({n} > f) OR f <= {n2} GROUP BY cv",
    "SELECT MEDIAN(f) FROM t WHERE (f < {n} OR {n2} > f) AND f = {n2}",
    "SELECT COUNT(*) FROM t WHERE f >= {n} AND i < {n2} AND f > {n}",
]


def _grid_mix(draw: Any, whole: int, places: int) -> str:
    """A number of ``whole`` integer digits and ``places`` decimals: its fraction drawn half the time from the
    multiples of ``2**-places`` (on the grid of any ``k >= places``) and otherwise from all ``places``-digit
    fractions (mostly off it); integers of two digits or more lie beyond ``f``'s bounds, where ``v·2**59`` leaves
    ±2**62 and so the grid (:func:`veil.proxy.fixed_point.literal_on_grid`)."""
    head = _number(draw, whole)
    if places == 0:
        return head
    dyadic = [f"{j * 5**places:0{places}d}" for j in range(2**places)]
    tail = draw(st.one_of(st.sampled_from(dyadic), st.from_regex(rf"[0-9]{{{places}}}", fullmatch=True)))
    return f"{head}.{tail}"


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), shape=st.sampled_from(GRID_SHAPES), whole=st.integers(1, 2), places=st.integers(0, 3))
def test_a_hit_plans_what_planning_afresh_plans_with_literals_on_and_off_the_grid(
    session: QuerySession, data: Any, shape: str, whole: int, places: int
) -> None:
    """Literals of one form, some on ``f``'s grid and some not, in any order: each query planned through the cache
    is planned as afresh (a shape kept for a literal off the grid once filled the raw comparison's statements with
    a literal on it, where planning afresh compares the grid column: session 19)."""
    queries = [shape.format(n=_grid_mix(data.draw, whole, places), n2=_grid_mix(data.draw, whole, places)) for _ in range(3)]
    for sql in queries:
        _same(_cached(session, sql), _fresh(session, sql))


@pytest.mark.parametrize(
    "queries",
    [
        ["SELECT SUM(f) FROM t WHERE f >= 0.3", "SELECT SUM(f) FROM t WHERE f >= 0.5"],  # off the grid, then on it
        ["SELECT SUM(f) FROM t WHERE f >= 0.5", "SELECT SUM(f) FROM t WHERE f >= 0.3"],  # on, then off
        ["SELECT SUM(f) FROM t WHERE f < 7", "SELECT SUM(f) FROM t WHERE f < 9"],  # 9·2**59 > 2**62: off the grid
        ["SELECT SUM(f) FROM t WHERE f < 0.75", "SELECT SUM(f) FROM t WHERE f < 0.70", "SELECT SUM(f) FROM t WHERE -0.75 > f"],
        ["SELECT COUNT(*) FROM t WHERE 1.3 <= f", "SELECT COUNT(*) FROM t WHERE 1.5 <= f",
         "SELECT COUNT(*) FROM t WHERE 2.3 <= f", "SELECT COUNT(*) FROM t WHERE 2.5 <= f"],
        ["SELECT COUNT(*) FROM t WHERE 1.25 > f OR f >= 2.10", "SELECT COUNT(*) FROM t WHERE 1.25 > f OR f >= 2.50",
         "SELECT COUNT(*) FROM t WHERE 1.20 > f OR f >= 2.50", "SELECT COUNT(*) FROM t WHERE 1.20 > f OR f >= 2.10"],
    ],
)  # fmt: skip
def test_literals_on_and_off_the_grid_share_no_statements(world: Any, queries: list[str]) -> None:
    with exact_session(world, "a") as s:
        for _ in range(2):  # the second round hits the entries the first one kept
            for sql in queries:
                _same(_cached(s, sql), _fresh(s, sql))


def test_a_shape_keeps_one_entry_on_the_grid_and_one_off_it(world: Any) -> None:
    on, off = "SELECT SUM(f) FROM t WHERE f >= 0.5", "SELECT SUM(f) FROM t WHERE f >= 0.3"
    with exact_session(world, "a") as s:
        _cached(s, on), _cached(s, off)
        assert len(s._env.plan_cache) == 2  # two shapes: neither query's planning replaced the other's entry
        for sql in (on, off, "SELECT SUM(f) FROM t WHERE f >= 2.5", "SELECT SUM(f) FROM t WHERE f >= 2.1"):
            state = _cached(s, sql)
            assert any(state.plan is e.state.plan for e in s._env.plan_cache.values()), sql  # a hit
            _same(state, _fresh(s, sql))
        assert len(s._env.plan_cache) == 2


def test_an_entry_serves_no_literal_on_the_other_side_of_its_grid(world: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The hit check alone (the shapes' grid classes taken out, so both sides share one key): a literal on the other
    side of its grid from the entry's misses and is planned afresh; one on the same side hits."""
    monkeypatch.setattr(plan_cache, "_grid_class", lambda *a: "")
    with exact_session(world, "a") as s:
        for value, on_grid in (("0.3", False), ("0.5", True), ("0.3", False), ("0.7", False), ("1.5", True)):
            sql = f"SELECT SUM(f) FROM t WHERE f >= {value}"
            before = list(s._env.plan_cache.values())
            state = _cached(s, sql)
            (entry,) = s._env.plan_cache.values()
            assert (entry.on_grid != (), entry.off_grid != ()) == (on_grid, not on_grid)
            was_hit = bool(before) and state.plan is before[0].state.plan
            assert was_hit == (bool(before) and (before[0].on_grid != ()) == on_grid), value
            _same(state, _fresh(s, sql))


class _Forgetful(dict[Any, Any]):
    """A plan cache that never keeps anything: every query planned afresh."""

    def __setitem__(self, key: Any, value: Any) -> None:
        pass


def test_a_hit_skips_planning_and_answers_the_same(world: Any) -> None:
    with exact_session(world, "a") as s, exact_session(world, "a") as fresh:
        fresh._env.plan_cache = _Forgetful()
        s.execute("SELECT c, COUNT(*) FROM t WHERE i > 3 GROUP BY c", epsilon=0.5)
        entry = next(iter(s._env.plan_cache.values()))
        hit = _cached(s, "SELECT c, COUNT(*) FROM t WHERE i > 7 GROUP BY c")
        assert hit.plan is entry.state.plan  # reused, not planned again
        for bound in (0, 5, 9):
            sql = f"SELECT c, COUNT(*) FROM t WHERE i > {bound} GROUP BY c"
            assert s.execute(sql, epsilon=0.5).rows == fresh.execute(sql, epsilon=0.25).rows  # ε: not the cached answer
        assert len(s._env.plan_cache) == 1


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("SELECT COUNT(*) FROM t WHERE i > 3", "SELECT COUNT(*) FROM t WHERE i > 30"),  # another length
        ("SELECT COUNT(*) FROM t WHERE i > 3", "SELECT COUNT(*) FROM t WHERE i > 3.5"),  # another kind
        ("SELECT COUNT(*) FROM t WHERE c = 'x'", "SELECT COUNT(*) FROM t WHERE c = 'yy'"),
        ("SELECT COUNT(*) FROM t WHERE iv = 1", "SELECT COUNT(*) FROM t WHERE iv = 2"),  # declared values
        ("SELECT COUNT(*) FROM t WHERE cv = 'a'", "SELECT COUNT(*) FROM t WHERE cv = 'b'"),
        ("SELECT COUNT(*) FROM t WHERE d > '2020-01-05'", "SELECT COUNT(*) FROM t WHERE d > '2020-01-06'"),  # a date
        ("SELECT COUNT(*) FROM t WHERE b = 1", "SELECT COUNT(*) FROM t WHERE b = 0"),  # a boolean
        ("SELECT COUNT(*) FROM t WHERE i + 1 > 3", "SELECT COUNT(*) FROM t WHERE i + 1 > 4"),  # not a bare column
        ("SELECT SUM(i + 1) FROM t WHERE i > 3", "SELECT SUM(i + 2) FROM t WHERE i > 3"),  # not in WHERE
        ("SELECT COUNT(*) FROM t WHERE i > 1e1", "SELECT COUNT(*) FROM t WHERE i > 2e1"),  # an exponent
        ("SELECT i AS c, COUNT(*) FROM t WHERE c = '12' GROUP BY 1", "SELECT i AS c, COUNT(*) FROM t WHERE c = '13' GROUP BY 1"),
        ("SELECT i AS c, COUNT(*) FROM t WHERE c = '12' GROUP BY 1", "SELECT i AS c, COUNT(*) FROM t WHERE c = 'ab' GROUP BY 1"),
        ("SELECT COUNT(*) FROM t WHERE i IN (1, 2)", "SELECT COUNT(*) FROM t WHERE i IN (1, 3)"),
        ("SELECT COUNT(*) FROM t WHERE i BETWEEN 1 AND 2", "SELECT COUNT(*) FROM t WHERE i BETWEEN 1 AND 3"),
        ("SELECT COUNT(*) FROM t WHERE c LIKE 'x%'", "SELECT COUNT(*) FROM t WHERE c LIKE 'y%'"),
        ("SELECT COUNT(*) FROM t WHERE i = '3'", "SELECT COUNT(*) FROM t WHERE i = '4'"),  # text against a number
        ("WITH v AS (SELECT * FROM t) SELECT COUNT(*) FROM v WHERE i > 3",
         "WITH v AS (SELECT * FROM t) SELECT COUNT(*) FROM v WHERE i > 4"),
        ("SELECT COUNT(*) FROM t WHERE i > (SELECT 3)", "SELECT COUNT(*) FROM t WHERE i > (SELECT 4)"),  # refused
        ("SELECT COUNT(*) FROM (SELECT * FROM t WHERE i > 3) AS v", "SELECT COUNT(*) FROM (SELECT * FROM t WHERE i > 4) AS v"),
        ("SELECT COUNT(*) FROM t JOIN pub ON t.i = pub.pk WHERE i > 3",
         "SELECT COUNT(*) FROM t JOIN pub ON t.i = pub.pk WHERE i > 4"),
    ],
)  # fmt: skip
def test_what_is_not_lifted_is_never_a_hit_with_another_value(world: Any, first: str, second: str) -> None:
    from veil.errors import VeilError

    with exact_session(world, "a") as s:
        try:
            _cached(s, first)
        except VeilError:
            pass
        entries = dict(s._env.plan_cache)
        try:
            state = _cached(s, second)
        except VeilError as exc:
            with pytest.raises(type(exc)):
                _fresh(s, second)
            return
        assert all(state.plan is not e.state.plan for e in entries.values())
        _same(state, _fresh(s, second))


def test_a_policy_edit_empties_the_cache(tmp_path: Path) -> None:
    policy = _world(tmp_path, upper=10)
    with exact_session(policy, "a") as s:
        before = _cached(s, "SELECT SUM(i) FROM t WHERE f > 1")
        assert s._env.plan_cache
        path = tmp_path / "policy.toml"
        text = path.read_text(encoding="utf-8").replace("lower = 0, upper = 10 }\niv", "lower = 0, upper = 1000 }\niv")
        path.write_text(text, encoding="utf-8")
        after = _cached(s, "SELECT SUM(i) FROM t WHERE f > 2")
        assert before.plan is not None and after.plan is not None
        assert after.plan.statistics[0].sensitivity == 100 * before.plan.statistics[0].sensitivity
        _same(after, _fresh(s, "SELECT SUM(i) FROM t WHERE f > 2"))


def test_a_table_write_empties_the_cache_and_reads_the_new_rows(tmp_path: Path) -> None:
    policy = _world(tmp_path)
    with exact_session(policy, "a") as s:
        assert s.execute("SELECT COUNT(*) FROM t WHERE i > 3", epsilon=0.5).rows == ((36,),)  # k % 11 > 3: 7 of 11
        frame = pd.DataFrame({"i": [9] * 5, "iv": [1] * 5, "f": [0.0] * 5, "c": ["x"] * 5, "cv": ["a"] * 5,
                              "b": [True] * 5, "d": [dt.date(2020, 1, 1)] * 5})  # fmt: skip
        write_table(policy, "t", frame, replace=True)
        assert s.execute("SELECT COUNT(*) FROM t WHERE i > 4", epsilon=0.5).rows == ((5,),)


def test_a_shape_whose_probe_disagrees_or_refuses_is_not_cached(world: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    with exact_session(world, "a") as s:
        sql = "SELECT COUNT(*) FROM t WHERE i > 3"
        real = pipeline._plan_again

        def other_cost(state: pipeline.QueryState, env: Any) -> pipeline.QueryState:
            out = real(state, env)
            assert out.plan is not None
            return pipeline.replace(out, plan=pipeline.replace(out.plan, epsilon=out.plan.epsilon * 2))

        monkeypatch.setattr(pipeline, "_plan_again", other_cost)
        _cached(s, sql)
        assert not s._env.plan_cache

        def refuses(state: pipeline.QueryState, env: Any) -> pipeline.QueryState:
            from veil.errors import Unsupported

            raise Unsupported("a literal-dependent refusal")

        monkeypatch.setattr(pipeline, "_plan_again", refuses)
        _cached(s, sql)
        assert not s._env.plan_cache
        monkeypatch.setattr(pipeline, "_plan_again", real)
        _cached(s, sql)
        assert s._env.plan_cache


def test_probe_values_keep_kind_and_length_and_differ() -> None:
    from sqlglot import exp

    for text in ("0", "9", "5", "19", "99", "0.5", "9.25", "123456789012345"):
        (value,) = plan_cache.probe_values([exp.Literal.number(text)])
        assert len(value) == len(text) and value != text and plan_cache._NUMBER.fullmatch(value)
    for text in ("x", "ab", "xx y"):
        (value,) = plan_cache.probe_values([exp.Literal.string(text)])
        assert len(value) == len(text) and value != text
    # on a grid's side: f bounded by ±5 (k = 59; 9·2**59 > 2**62), income by [0, 200000] (k = 44; 2**18 = 262144)
    for text, k in (("05", 59), ("0.5", 59), ("0.3", 59), ("8", 59), ("262143.5", 44), ("162143.3", 44), ("09", 59)):
        (value,) = plan_cache.probe_values([exp.Literal.number(text)], [k])
        assert len(value) == len(text) and value != text and plan_cache._NUMBER.fullmatch(value)
        assert plan_cache._grid_class(value, k) == plan_cache._grid_class(text, k), (text, value)
    assert plan_cache.probe_values([exp.Literal.number("9")], [59]) == ["8"]  # the only one-digit integer off it
