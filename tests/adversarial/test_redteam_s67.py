"""Red team s67: the plan cache's front (token shapes → query shapes) and noise drawn ahead (session 21).

Witnesses (strict xfail until fixed):

* F1 — the front keeps, per token shape, the whole token stream as a tuple of 4-tuples plus the exact text of every
  other number and text token: ~290 KB per 4 KB query, kept also for queries refused free (an unknown column) and
  never planned. 64 per session (``veil serve``: per connection) → ~18 MiB per connection for nothing charged.
* F2 — a plan cache entry (filled by a free ``describe``, as a wire client's Describe) of a 4 KB query holds ~2 MB
  (parse trees, their copies, the marked templates): 64 per connection → ~140 MiB per connection, free; the module's
  own bound is "64 × a few tens of kB". Not from session 21: the plan cache before the front (b4461b8~1) held
  1,968 KiB per entry the same way (the front adds ~300 KiB more per token shape, F1).
* F3 — every query that misses the front (refused by the token limit, a syntax error, a query the cache does not
  lift) is tokenised twice: once by the front's ``scan``, once more by the parse pass. A free refusal of a 1 MiB,
  500k-token query took 1.98 s before the front and 4.8 s after (``veil serve``'s 4,000-token limit is checked after
  tokenising), holding the GIL.
* F4 — ``draw_ahead`` submits to its worker pool after the reservation and outside any guard: when the submit
  itself fails (``RuntimeError: cannot schedule new futures after interpreter shutdown`` — a query in flight while
  ``veil serve`` or a Python program exits — or ``can't start new thread`` at the process's thread limit on the
  pool's first draws), the query is charged and ends with a raw, untyped ``RuntimeError``; a draw that fails in the
  worker falls back to drawing with the values (``take_ahead``), one that fails to start does not.
"""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.proxy.test_plan_cache import _world
from veil.errors import VeilError
from veil.proxy import add_noise, pipeline, plan_cache
from veil.proxy import parse as parse_mod
from veil.proxy._testing import exact_session
from veil.proxy.parse import Limits
from veil.proxy.session import QuerySession

#: The bound the plan cache's docstring states for one entry ("64 × a few tens of kB" per session), generous.
ENTRY_BYTES = 64 * 1024


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return _world(Path(tmp_path_factory.mktemp("s67")))


def _held(fn: Callable[[], None]) -> int:
    """Bytes still allocated after ``fn`` (tracemalloc), once garbage is collected."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        fn()
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def _in_list(n: int, column: str) -> str:
    """A ~4 KB query the plan cache lifts (``i > 5``) with ~2,000 tokens; ``n`` varies its token stream."""
    items = ",".join(["'a'"] * (1000 - n))
    return f"SELECT COUNT(*) FROM t WHERE i > 5 AND {column} IN ({items})"


def test_s67_f1_refused_queries_do_not_fill_the_front_with_megabytes(world: Any) -> None:
    queries = 6
    with exact_session(world, "a") as s:
        with pytest.raises(VeilError):  # warm up (catalog, engines) outside the count
            s.execute(_in_list(999, "nosuch"), epsilon=0.5)
        spent = s.budget().spent

        def refused() -> None:
            for n in range(queries):
                with pytest.raises(VeilError):  # unknown column: refused free, after the front kept its shape
                    s.execute(_in_list(n, "nosuch"), epsilon=0.5)

        held = _held(refused)
        assert s.budget().spent == spent
        assert held <= queries * ENTRY_BYTES, f"{held / queries / 1024:.0f} KiB per refused query held by the front"


def test_s67_f2_free_describes_do_not_fill_the_plan_cache_past_its_budget(world: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Adjusted with the fix (session 21): an entry of a 4 KB query of ~2,000 tokens holds its planned trees, ~1.8 MiB
    (the parse tree and the resolve pass's copy are no longer kept: ~2.1 MiB before), far over ``ENTRY_BYTES``; the
    bound is the session's total, :data:`plan_cache.CACHE_BYTES` (here 3 MiB, so that two such entries pass it) plus
    :data:`plan_cache.FRONT_BYTES`, measured by tracemalloc, and the cache holds the most recent shape."""
    monkeypatch.setattr(plan_cache, "CACHE_BYTES", 3 << 20)  # (read when the session opens)
    queries = 2
    with exact_session(world, "a") as s:
        s.describe(_in_list(999, "c"))  # warm up outside the count
        spent = s.budget().spent

        def described() -> None:
            for n in range(queries):
                s.describe(_in_list(n, "c"))

        held = _held(described)
        cache = s._env.plan_cache
        assert isinstance(cache, plan_cache.Budgeted) and cache.budget == 3 << 20
        assert s.budget().spent == spent and cache.held <= cache.budget and len(cache) < queries + 1
        last = pipeline.run(s._state(_in_list(queries - 1, "c"), 0.5), s._env, until="prepare", cache=True)
        assert any(last.plan is e.state.plan for e in cache.values()), "the most recent shape was forgotten"
        assert held <= cache.budget + plan_cache.FRONT_BYTES, f"{held / 1024:.0f} KiB held by the caches"


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT COUNT(*) FROM t WHERE " + " ".join(["i"] * 5000),  # over the token limit: refused free
        "SELECT COUNT(*) FROM t WHERE i >",  # a syntax error: refused free
        "SELECT COUNT(*) FROM t WHERE i > 1 +",
        "SELECT COUNT(*) FROM t",  # no WHERE: never lifted
        "SELECT c, COUNT(*) FROM t GROUP BY c",
        "SELECT COUNT(*) FROM t WHERE random() > 0.5",  # a function refused by name (the name read from the tokens)
    ],
)
def test_s67_f3_a_query_is_tokenised_once(world: Any, sql: str, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real = parse_mod._tokens

    def counting(text: str) -> Any:
        calls.append(text)
        return real(text)

    monkeypatch.setattr(parse_mod, "_tokens", counting)
    with exact_session(world, "a", limits=Limits(max_tokens=4000)) as s:
        try:
            s.execute(sql, epsilon=0.5)
        except VeilError:
            pass
    assert len(calls) == 1, f"tokenised {len(calls)} times"


class _Refusing:
    """A worker pool that cannot take work (interpreter shutdown, or no thread could be started)."""

    def __init__(self, error: str) -> None:
        self.error = error

    def submit(self, fn: Callable[[], Any]) -> Any:
        raise RuntimeError(self.error)


@pytest.mark.parametrize("error", ["cannot schedule new futures after interpreter shutdown", "can't start new thread"])
@pytest.mark.parametrize(
    "sql",
    ["SELECT COUNT(*) FROM t WHERE i > 3", "SELECT cv, COUNT(*), SUM(i) FROM t GROUP BY cv"],  # no keys; public domain
)
def test_s67_f4_a_draw_ahead_that_cannot_start_is_drawn_with_the_values(
    world: Any, sql: str, error: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(add_noise, "_pool", lambda: _Refusing(error))
    with QuerySession(world, "a") as s:  # production noise: the only source drawn ahead
        spent = s.budget().spent
        try:
            answer = s.execute(sql, epsilon=0.5)
        except VeilError:  # a typed refusal is sound only if it charged nothing
            assert s.budget().spent == spent
        else:
            assert answer.rows
