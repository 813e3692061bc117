"""A plan-cache hit spells a lifted literal directly where DuckDB's sqlglot dialect would write it as it is.

``plan_cache._literal_texts`` fills a hit's statements and canonical text with its literals; for the DuckDB engine's
renderer and the canonical text's it skips sqlglot for a number of the lifted form (digits, a point, digits) and a
text of plain characters (no quote, no backslash). Here every such literal is checked against what sqlglot writes,
and a renderer it does not know renders every literal itself.
"""

from __future__ import annotations

import duckdb
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlglot import exp

from veil.engines.duckdb import DuckDBEngine
from veil.engines.neutral import duckdb_text
from veil.proxy import plan_cache

_ENGINE = DuckDBEngine(connection=duckdb.connect())

numbers = st.from_regex(r"[0-9]{1,15}(?:\.[0-9]{1,15})?", fullmatch=True)
texts = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=64)


def _sqlglot(lit: exp.Literal) -> tuple[str, str]:
    copy = exp.Literal(this=lit.this, is_string=lit.is_string)
    return _ENGINE.render(copy), duckdb_text(copy, normalize=True, comments=False)


@given(values=st.lists(st.one_of(numbers.map(lambda v: (v, False)), texts.map(lambda v: (v, True))), max_size=6))
@settings(max_examples=150, deadline=None)
def test_literals_are_spelled_as_sqlglot_writes_them(values: list[tuple[str, bool]]) -> None:
    lits = [exp.Literal(this=v, is_string=s) for v, s in values]
    assert plan_cache._literal_texts(lits, _ENGINE.render) == [_sqlglot(lit)[0] for lit in lits]
    assert plan_cache._literal_texts(lits, plan_cache._canonical_literal) == [_sqlglot(lit)[1] for lit in lits]


def test_the_direct_spelling_is_taken_only_for_known_renderers() -> None:
    assert plan_cache._verbatim(_ENGINE.render) and plan_cache._verbatim(plan_cache._canonical_literal)
    seen: list[str] = []

    def other(tree: exp.Expression) -> str:
        seen.append(str(tree.this))
        return "x"

    lits = [exp.Literal.number("12"), exp.Literal.string("ab")]
    assert not plan_cache._verbatim(other)
    assert plan_cache._literal_texts(lits, other) == ["x", "x"] and seen == ["12", "ab"]
    # a text with a quote or a backslash, a number of another form: always sqlglot's
    for lit in (exp.Literal.string("it's"), exp.Literal.string("a\\b"), exp.Literal.number("1e5")):
        assert plan_cache._literal_texts([lit], _ENGINE.render) == [_sqlglot(lit)[0]]
