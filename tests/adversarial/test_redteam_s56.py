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
"""

from __future__ import annotations

from collections.abc import Iterator
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
