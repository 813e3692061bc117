"""The plan cache's front (``plan_cache.front_lift``): a query whose token shape was seen before skips parsing, and
gets exactly what parsing and lifting it would give, or nothing.

Class-level checks:

* for the plan cache's shapes with any literals, spacing, comments and spellings (hypothesis), whenever the front
  answers for a query, its shape, grids and literals are those :func:`plan_cache.lift` gives the parsed query, and
  the state planned through the cache equals planning afresh;
* the parse pass's checks on the text still run on a front hit (a text's brackets counted in the nesting limit);
* a token shape whose probe disagrees (a lifted literal's value also spelled elsewhere, unlifted) is never taken.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.proxy.test_plan_cache import GRID_SHAPES, SHAPES, _cached, _fresh, _grid_mix, _same, _world
from veil.errors import QueryTooComplex, VeilError
from veil.proxy import parse as parse_mod
from veil.proxy import pipeline, plan_cache
from veil.proxy._testing import exact_session
from veil.proxy.parse import Limits, parse, scan
from veil.proxy.session import QuerySession


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return _world(tmp_path_factory.mktemp("front"))


@pytest.fixture(scope="module")
def session(world: Any) -> Iterator[QuerySession]:
    with exact_session(world, "a") as s:
        yield s


def _lifted(lifted: plan_cache.Lifted | None) -> Any:
    return None if lifted is None else (lifted.shape, lifted.grids, [(str(x.this), x.is_string) for x in lifted.literals])


def _respelled(draw: Any, sql: str) -> str:
    """``sql`` with other spacing (and sometimes a comment) between its tokens; literals and words unchanged."""
    out, last = [], 0
    for t in scan(sql):
        gap = sql[last : t.start]
        if gap:
            gap = draw(st.sampled_from([" ", "  ", "\n", " /* c */ ", "\t"]))
        out += [gap, sql[t.start : t.end + 1]]
        last = t.end + 1
    return "".join(out) + sql[last:]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    data=st.data(), shape=st.sampled_from(SHAPES + GRID_SHAPES), length=st.integers(1, 3),
    places=st.sampled_from([0, 0, 1, 2]), text=st.integers(0, 5),
)  # fmt: skip
def test_the_front_gives_what_parsing_and_lifting_give(
    session: QuerySession, data: Any, shape: str, length: int, places: int, text: int
) -> None:
    def fill() -> str:
        chars = st.text(st.sampled_from("xyzab'Q é%_()"), min_size=text, max_size=text)
        n, n2 = _grid_mix(data.draw, length, places), _grid_mix(data.draw, length, places)
        sql = shape.format(n=n, n2=n2, s=data.draw(chars).replace("'", "''"))
        return _respelled(data.draw, sql) if data.draw(st.booleans()) else sql

    env = session._env
    queries = [fill() for _ in range(3)]
    for sql in queries:
        front = plan_cache.front_lift(sql, scan(sql), env.plan_front)
        if front is not None:
            assert _lifted(front) == _lifted(plan_cache.lift(parse(sql), env.policy, sql)), sql
        _same(_cached(session, sql), _fresh(session, sql))


def test_a_front_hit_skips_parsing_and_plans_the_same(world: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    parsed: list[str] = []
    real = parse_mod.parse_tokens

    def counting(sql: str, tokens: Any, **kw: Any) -> Any:
        parsed.append(sql)
        return real(sql, tokens, **kw)

    monkeypatch.setattr(pipeline, "parse", lambda sql, **kw: counting(sql, scan(sql, **kw), **kw))
    monkeypatch.setattr(pipeline, "parse_tokens", counting)  # (the parse pass of the scanned tokens)
    with exact_session(world, "a") as s:
        _cached(s, "SELECT c, COUNT(*) FROM t WHERE i > 3 AND c = 'xy' GROUP BY c")  # parsed; front filled
        assert len(parsed) == 1 and any(v is not None for v in s._env.plan_front.values())
        for sql in ("SELECT c, COUNT(*) FROM t WHERE i > 7 AND c = 'zz' GROUP BY c",
                    "SELECT c, COUNT(*)\nFROM t  WHERE i > 0 AND c = 'ab' GROUP BY c"):  # fmt: skip
            before = len(parsed)
            state = _cached(s, sql)
            assert len(parsed) == before, "a front hit parses nothing"
            _same(state, _fresh(s, sql))
        before = len(parsed)
        _cached(s, "SELECT c, COUNT(*) FROM t WHERE i > 7 AND c = 'z''' GROUP BY c")  # an escape: parsed
        assert len(parsed) == before + 1


def test_the_text_checks_still_run_on_a_front_hit(world: Any) -> None:
    """Brackets inside a text count toward the nesting limit (parse._check_size): a lifted text of brackets is refused
    as planning afresh refuses it, though its token shape is a cached one's."""
    with exact_session(world, "a", limits=Limits(max_depth=3)) as s:
        for v in ("xy", "ab"):
            _cached(s, f"SELECT COUNT(*) FROM t WHERE c = '{v}'")
        sql = "SELECT COUNT(*) FROM t WHERE c = '(('"
        assert plan_cache.front_key(scan(sql)) in s._env.plan_front
        with pytest.raises(QueryTooComplex):
            _cached(s, "SELECT COUNT(*) FROM t WHERE c = '(((('")
        with pytest.raises(QueryTooComplex):
            _fresh(s, "SELECT COUNT(*) FROM t WHERE c = '(((('")


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT SUM(i - 3) FROM t WHERE i > 3",  # the lifted value is spelled first where it is not lifted
        "SELECT COUNT(*) FROM t WHERE c || 'x' <> 'y' AND c = 'x'",
    ],
)
def test_a_token_shape_whose_probe_disagrees_is_not_taken(world: Any, sql: str) -> None:
    with exact_session(world, "a") as s:
        try:
            _cached(s, sql)
        except VeilError:
            pass
        assert s._env.plan_front.get(plan_cache.front_key(scan(sql))) is None
        other = sql.replace("3", "4").replace("'x'", "'y'")
        try:
            state = _cached(s, other)
        except VeilError as exc:
            with pytest.raises(type(exc)):
                _fresh(s, other)
        else:
            _same(state, _fresh(s, other))


def test_a_policy_edit_empties_the_front(tmp_path: Any) -> None:
    """The front's shapes are lift's under one policy (which columns it lifts, their grids): a policy edit empties it
    with the plan cache, and the next query of a known token shape is parsed and planned under the new bounds."""
    policy = _world(tmp_path, upper=10)
    with exact_session(policy, "a") as s:
        for v in (1, 2, 12):
            before = _cached(s, f"SELECT SUM(i) FROM t WHERE f > {v}")
        assert len(s._env.plan_front) == 2 and any(e is not None for e in s._env.plan_front.values())
        path = tmp_path / "policy.toml"
        text = path.read_text(encoding="utf-8").replace("lower = 0, upper = 10 }\niv", "lower = 0, upper = 1000 }\niv")
        path.write_text(text, encoding="utf-8")
        after = _cached(s, "SELECT SUM(i) FROM t WHERE f > 3")
        assert before.plan is not None and after.plan is not None
        assert after.plan.statistics[0].sensitivity == 100 * before.plan.statistics[0].sensitivity
        assert len(s._env.plan_front) == 1  # emptied, then "f > 3"'s token shape only
        _same(after, _fresh(s, "SELECT SUM(i) FROM t WHERE f > 3"))
