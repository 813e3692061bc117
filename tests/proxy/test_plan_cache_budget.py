"""The plan cache's byte budget (``plan_cache.Budgeted``, ``deep_size``; red team s67 F1/F2)."""

from __future__ import annotations

import gc
import tracemalloc
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from veil.proxy import plan_cache
from veil.proxy.parse import parse

_OPS = st.lists(st.tuples(st.sampled_from(["keep", "get", "clear"]), st.integers(0, 7), st.integers(0, 120)), max_size=60)


@settings(max_examples=200, deadline=None)
@given(ops=_OPS, budget=st.integers(0, 200), entries=st.integers(1, 5))
def test_a_budgeted_map_holds_at_most_its_budget_and_forgets_the_least_recently_used(
    ops: list[tuple[str, int, int]], budget: int, entries: int
) -> None:
    """Against a model (a list in recency order): after any sequence of keeps, gets and clears the map holds what the
    model holds, at most ``budget`` bytes and ``entries`` entries. Deterministic per example: no false failure."""
    cache = plan_cache.Budgeted(budget, entries)
    model: list[tuple[int, int]] = []  # (key, size), least recently used first
    for op, key, size in ops:
        if op == "keep":
            kept = cache.keep(key, f"v{key}.{size}", size)
            assert kept == (size <= budget)
            if kept:
                model = [(k, s) for k, s in model if k != key]
                while model and (len(model) >= entries or sum(s for _, s in model) + size > budget):
                    model.pop(0)
                model.append((key, size))
        elif op == "get":
            found = [(k, s) for k, s in model if k == key]
            assert (cache.get(key) is None) == (not found)
            if found:
                model = [(k, s) for k, s in model if k != key] + found
        else:
            cache.clear()
            model = []
        assert list(cache) == [k for k, _ in model]
        assert cache.held == sum(s for _, s in model) <= budget and len(cache) <= entries


def test_deep_size_counts_what_a_syntax_tree_holds() -> None:
    """``deep_size`` of a parsed tree is within 25% of what tracemalloc sees it allocate (sqlglot's nodes are compiled
    classes without ``__dict__``: read through their arguments)."""
    sql = "SELECT COUNT(*) FROM t WHERE i > 5 AND c IN (" + ",".join(f"'a{k}'" for k in range(500)) + ")"
    held: list[Any] = [parse(sql.replace("'a", "'b"))]  # warm up (the dialect's parser, its caches) outside the count
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        held.append(parse(sql))
        gc.collect()
        allocated = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    size = plan_cache.deep_size(held[1], 1 << 30)
    assert 0.75 * allocated <= size <= 1.25 * allocated, (size, allocated)
    assert plan_cache.deep_size(held[1], 1000) > 1000  # stops counting past its limit
