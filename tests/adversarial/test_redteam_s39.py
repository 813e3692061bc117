"""Red team s39: the plan cache (``veil.proxy.plan_cache``; ``pipeline.run``/``_remember``/``cache_key_of``).

The cache is sound only if, for every query, a hit gives exactly what planning afresh gives (statements, charge,
refusal-or-answer, answer-cache key) and no stale entry outlives what changes planning.

Findings (each test below fails on main at 6b868f4/bc348b4):

* A1 (MEDIUM; witness ``SELECT COUNT(*) FROM t WHERE i > 300`` then ``… WHERE i > 3.5``) — an integer and a
  decimal number literal of the same length share a shape. The shape keeps a number's kind ("n") and its length,
  but not whether it has a point. The totality pass reads exactly that (``totality._is_int64``: a non-integer
  literal is wrapped in ``CAST(… AS DOUBLE)`` so that no fixed-point DECIMAL arithmetic can overflow), and the
  probe (first digit moved by one, ``300`` → ``400``) never changes it. So after ``… WHERE i > 300`` a hit for
  ``… WHERE i > 3.5`` runs ``t.i > 3.5`` (the DECIMAL comparison totality exists to avoid) where fresh planning
  runs ``t.i > CAST(3.5 AS DOUBLE)``; the reverse order puts a ``CAST(300 AS DOUBLE)`` into the integer query.
  The answer-cache key covers the statements, so one query gets two keys depending on what the session asked
  before: an analyst's repeat of an answered query is charged again and drawn with fresh noise (the answer cache
  misses). A prepared statement ``… WHERE i > $1`` bound with an int8 and then a float8 meets it too (parameters
  are inlined as literals). No answer differs that we could find (DuckDB's BIGINT/DOUBLE vs DECIMAL(≤ 15 digits)
  comparison neither overflows nor rounds), hence MEDIUM, not HIGH. Fix: keep the position of the point (or the
  literal's ``is_int``/``_is_int64``) in the shape, e.g. kind ``n`` for integers and ``d<k>`` for a point after
  k digits, and have the probe keep that pattern. Fixed (lead): a lifted number's form (its digits as ``9`` and
  its point, ``999`` vs ``9.9``) is part of the shape; the probe keeps it.

What held (pinned below as ``test_held_*``; a differential fuzz of ~800 first/second literal pairs over seven
shapes — COUNT, MEDIAN grids, GROUP BY, a per-person table, NOT/OR, two literals on one column — found nothing
else once A1's pairs were left out):

* escaping: quotes, backslashes, comment openers, case, 2- and 4-byte characters in a lifted text give the
  statements, canonical text and answer-cache key that planning afresh gives (the engine and the canonical text
  render the literal on its own exactly as inside the statement; the text work price of a compared literal is 0);
* no pass merges duplicate conjuncts or ranges (``i > 3 AND i > 3`` then ``i > 3 AND i > 7``), so a probe whose
  literals all move alike cannot hide a literal the plan dropped;
* a literal copied into every MEDIAN/QUANTILE grid statement is filled in every copy;
* select aliases named like a column are not lifted; a table alias named like a column is;
* ε is part of the key; repeated hits reuse one PostProcess/plan object without any run leaking into the next;
* a policy edit that declares values for a lifted column empties the cache (the next plan has the domain);
* not attackable: NUL in a literal (BYTESTRING/UNICODESTRING/CHR are refused, so no literal spells a marker);
  the marker token is random per entry; prepared-statement ``$n`` parameters are inlined as text before parse,
  so they meet the same lifting (and A1) as literals typed in; a literal-dependent refusal would need a check
  reading a lifted value, and the only one found is A1's.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.support.warehouse import policy_with_tables
from veil.errors import VeilError
from veil.proxy import pipeline, plan_cache
from veil.proxy._testing import exact_session
from veil.proxy.session import QuerySession

POLICY = """\
[database]
path = "w.duckdb"
[ledger]
path = "l.sqlite"
[tables.t]
privacy_unit = "row"
[tables.t.columns]
i = { type = "int", lower = 0, upper = 10 }
f = { type = "float", lower = -5, upper = 5 }
c = { type = "category" }
[analysts.a]
epsilon = 1000000
"""


def _world(base: Path) -> Any:
    n = 30
    t = pd.DataFrame({"i": [k % 11 for k in range(n)], "f": [(k % 10) - 4.5 for k in range(n)], "c": ["x", "y", "zz"] * (n // 3)})
    return policy_with_tables(base, POLICY, {"t": t}, {})


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return _world(tmp_path_factory.mktemp("rt39"))


@pytest.fixture
def session(world: Any) -> Iterator[QuerySession]:
    with exact_session(world, "a") as s:
        yield s


def _cached(s: QuerySession, sql: str, eps: float = 0.5) -> pipeline.QueryState:
    return pipeline.run(s._state(sql, eps), s._env, until="prepare", cache=True)


def _fresh(s: QuerySession, sql: str, eps: float = 0.5) -> pipeline.QueryState:
    return pipeline.run(s._state(sql, eps), s._env, until="prepare", cache=False)


def _is_hit(s: QuerySession, state: pipeline.QueryState) -> bool:
    return any(state.plan is e.state.plan for e in s._env.plan_cache.values())


def _same_as_fresh(s: QuerySession, first: str, second: str) -> None:
    """``first`` fills the cache; ``second`` planned through it is what planning it afresh gives."""
    _cached(s, first)
    assert s._env.plan_cache, "the first query's shape was not cached: the attack has no entry to hit"
    hit = _cached(s, second)
    fresh = _fresh(s, second)
    assert hit.rendered == fresh.rendered
    assert hit.canonical == fresh.canonical and hit.key == fresh.key
    assert plan_cache.same_plan(hit, fresh)


# -- A1: an integer and a decimal literal of one length share a shape ---------------------------------------------


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("SELECT COUNT(*) FROM t WHERE i > 300", "SELECT COUNT(*) FROM t WHERE i > 3.5"),
        ("SELECT COUNT(*) FROM t WHERE i > 3.5", "SELECT COUNT(*) FROM t WHERE i > 300"),
        ("SELECT AVG(f) FROM t WHERE f <= 1025", "SELECT AVG(f) FROM t WHERE f <= 1.25"),
        ("SELECT MEDIAN(f) FROM t WHERE i < 100", "SELECT MEDIAN(f) FROM t WHERE i < 9.5"),  # grid statements
    ],
)
def test_a1_an_integer_and_a_decimal_literal_share_a_shape(session: QuerySession, first: str, second: str) -> None:
    _same_as_fresh(session, first, second)


def test_a1_a_prepared_statement_bound_with_an_integer_then_a_float(session: QuerySession) -> None:
    """The wire's ``$1`` parameters are inlined as literals before parsing: a dashboard's prepared statement
    bound with ``300`` (int8) and then ``3.5`` (float8) meets A1."""
    from veil.server.routing import bind_parameters

    sql = "SELECT COUNT(*) FROM t WHERE i > $1"
    _same_as_fresh(session, bind_parameters(sql, [300], [20]), bind_parameters(sql, [3.5], [701]))


def test_a1_a_repeated_query_misses_the_answer_cache_after_another_literal_kind(tmp_path: Path) -> None:
    world = _world(tmp_path)
    sql = "SELECT COUNT(*) FROM t WHERE i > 3.5"
    with exact_session(world, "a") as s:
        s.execute(sql, epsilon=0.5)  # planned afresh: answered and kept in the answer cache
    with exact_session(world, "a") as s:
        s.execute("SELECT COUNT(*) FROM t WHERE i > 300", epsilon=0.5)  # caches the shape with the integer's plan
        spent = s.budget().spent
        s.execute(sql, epsilon=0.5)  # the very query answered before: the answer cache must answer it for free
        assert s.budget().spent == spent


# -- held: what the probe and the shape key did stop --------------------------------------------------------------


@pytest.mark.parametrize(
    ("first", "second"),
    [
        # texts the engine and the canonical text escape: quotes, backslashes, comment openers, case, unicode
        ("SELECT COUNT(*) FROM t WHERE c = 'ab'", "SELECT COUNT(*) FROM t WHERE c = ''''''"),
        ("SELECT COUNT(*) FROM t WHERE c = 'ab'", "SELECT COUNT(*) FROM t WHERE c = '\\\\'"),
        ("SELECT COUNT(*) FROM t WHERE c <> 'ab'", "SELECT COUNT(*) FROM t WHERE c <> '/*'"),
        ("SELECT COUNT(*) FROM t WHERE c = 'ab'", "SELECT COUNT(*) FROM t WHERE c = 'AB'"),
        ("SELECT COUNT(*) FROM t WHERE c = 'abcdefghij'", "SELECT COUNT(*) FROM t WHERE c = '2020-01-01'"),  # no date
        ("SELECT COUNT(*) FROM t WHERE 'abcd' = c", "SELECT COUNT(*) FROM t WHERE 'NULL' = c"),
        ("SELECT COUNT(*) FROM t WHERE c = 'a' OR i = 1", "SELECT COUNT(*) FROM t WHERE c = '%' OR i = 0"),
        ("SELECT COUNT(*) FROM t WHERE c = 'ab'", "SELECT COUNT(*) FROM t WHERE c = 'éé'"),  # 4 bytes, not 2
        ("SELECT COUNT(*) FROM t WHERE c = 'ab'", "SELECT COUNT(*) FROM t WHERE c = '\U0001d538b'"),  # a 4-byte character
        # numbers: leading zeros, zero, the same literal twice (no pass merges duplicates or ranges)
        ("SELECT COUNT(*) FROM t WHERE i > 100", "SELECT COUNT(*) FROM t WHERE i > 007"),
        ("SELECT COUNT(*) FROM t WHERE i > 1", "SELECT COUNT(*) FROM t WHERE i > 0"),
        ("SELECT COUNT(*) FROM t WHERE i > 3 AND i > 3", "SELECT COUNT(*) FROM t WHERE i > 3 AND i > 7"),
        ("SELECT COUNT(*) FROM t WHERE c > 'ab' AND c < 'ab'", "SELECT COUNT(*) FROM t WHERE c > 'zz' AND c < 'aa'"),
        # a literal copied into every grid statement of a MEDIAN / QUANTILE
        ("SELECT c, MEDIAN(f), QUANTILE_CONT(i, 0.9) FROM t WHERE i >= 3 GROUP BY c",
         "SELECT c, MEDIAN(f), QUANTILE_CONT(i, 0.9) FROM t WHERE i >= 8 GROUP BY c"),
        # a select alias named like a column, a table alias named like a column: not lifted, or planned afresh
        ("SELECT i AS c, COUNT(*) FROM t WHERE c = 'ab' GROUP BY 1", "SELECT i AS c, COUNT(*) FROM t WHERE c = '12' GROUP BY 1"),
        ("SELECT COUNT(*) FROM t AS c WHERE c.i > 3", "SELECT COUNT(*) FROM t AS c WHERE c.i > 4"),
    ],
)  # fmt: skip
def test_held_a_hit_plans_what_planning_afresh_plans(session: QuerySession, first: str, second: str) -> None:
    try:
        _cached(session, first)
        hit = _cached(session, second)
    except VeilError as exc:
        with pytest.raises(type(exc)):
            _fresh(session, second)
        return
    fresh = _fresh(session, second)
    assert (hit.rendered, hit.canonical, hit.key) == (fresh.rendered, fresh.canonical, fresh.key)
    assert plan_cache.same_plan(hit, fresh)


def test_held_another_epsilon_is_another_entry(session: QuerySession) -> None:
    _cached(session, "SELECT SUM(i) FROM t WHERE i > 3", eps=0.5)
    hit = _cached(session, "SELECT SUM(i) FROM t WHERE i > 4", eps=0.25)
    fresh = _fresh(session, "SELECT SUM(i) FROM t WHERE i > 4", eps=0.25)
    assert hit.plan is not None and fresh.plan is not None
    assert (hit.plan.cost, hit.key) == (fresh.plan.cost, fresh.key)


class _Forgetful(dict[Any, Any]):
    def __setitem__(self, key: Any, value: Any) -> None:
        pass


def test_held_repeated_hits_post_process_as_planning_afresh(world: Any) -> None:
    """The hit reuses one PostProcess / plan object for every query of a shape: nothing the run or the
    post-processing does to it leaks into the next hit."""
    shape = "SELECT c, AVG(f) AS a, COUNT(*) AS n FROM t WHERE i > {} GROUP BY c HAVING COUNT(*) > 2 ORDER BY a DESC LIMIT 2"
    with exact_session(world, "a") as s, exact_session(world, "a") as fresh:
        fresh._env.plan_cache = _Forgetful()
        for bound in (1, 3, 5, 2):
            sql = shape.format(bound)
            assert s.execute(sql, epsilon=0.5).rows == fresh.execute(sql, epsilon=0.25).rows
        assert len(s._env.plan_cache) == 1


def test_held_declaring_values_empties_the_cache(tmp_path: Path) -> None:
    """A policy edit that makes a lifted column one with declared values: the next query is planned afresh."""
    world = _world(tmp_path)
    with exact_session(world, "a") as s:
        _cached(s, "SELECT c, COUNT(*) FROM t WHERE c <> 'x' GROUP BY c")
        assert s._env.plan_cache
        path = tmp_path / "policy.toml"
        text = path.read_text(encoding="utf-8").replace(
            'c = { type = "category" }', 'c = { type = "category", values = ["x", "y"] }'
        )
        path.write_text(text, encoding="utf-8")
        after = _cached(s, "SELECT c, COUNT(*) FROM t WHERE c <> 'y' GROUP BY c")
        fresh = _fresh(s, "SELECT c, COUNT(*) FROM t WHERE c <> 'y' GROUP BY c")
        assert (after.rendered, after.key, after.domain) == (fresh.rendered, fresh.key, fresh.domain)
        assert after.domain is not None  # the declared values are the group domain now
