"""Every per-query bound reads a bracketed join as it reads the same join written bare (red team s71 F1).

sqlglot parses ``FROM (t JOIN pub ON …)`` as a ``Subquery`` around the table ``t``, which carries the ``joins``; a
bound that read only a SELECT's own ``joins`` missed the join and its ON condition (text work, value cap, join-row cap,
concatenation limit, expanded size, literal bytes, raising work). The class: a family of ON conditions and of places a
bracketed join can stand (the FROM item, doubly bracketed, the left or right operand of another join, in a derived
table, in a CTE); for each, the figures every bound prices (``expansion.measure``, ``text_work``, ``largest_held``) are
equal on both spellings, and the plan pass ends both the same way (refused with the same error, or planned).
Deterministic: no false failures.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlglot
from sqlglot.optimizer.qualify import qualify

from veil.proxy.expansion import largest_held, measure, text_work

_SCHEMA = {
    "t": {"id": "INT", "c": "VARCHAR", "w": "VARCHAR"},
    "pub": {"k": "INT", "name": "VARCHAR"},
    "u": {"k": "INT", "name": "VARCHAR"},
}
_BYTES = {("t", "c"): 1024, ("t", "w"): 4 * 3832, ("pub", "name"): 64, ("u", "name"): 64}


def _column_bytes(table: str, column: str) -> int:
    return _BYTES.get((table, column), 32)


def _public(table: str) -> bool:
    return table in ("pub", "u")


_CHAIN_200 = "(pub.name || " + " || ".join(["t.c"] * 199) + ")"
#: ON conditions of the join of ``t`` and ``pub``: benign ones and ones some bound refuses.
_ONS = {
    "equality": "t.id = pub.k",
    "literal": "t.id = pub.k AND t.c <> '" + "z" * 3000 + "'",
    "join_row_cap": "t.id = pub.k AND t.w > pub.name",
    "value_cap": "t.id = pub.k AND " + " || ".join(["t.c"] * 16) + " > pub.name",
    "concatenation": f"t.id = pub.k AND {_CHAIN_200} <> pub.name",
    "text_work": "t.id = pub.k AND LOWER(UPPER(LOWER(t.c))) > pub.name",
    "replace": "t.id = pub.k AND REPLACE(t.c, 'a', pub.name) > 'b'",
    "partial": "t.id = pub.k AND CAST(t.c AS INT) > pub.k",
}
#: (bare, bracketed) spellings; ``{on}`` is the join's condition.
_PLACES = {
    "from": (
        "SELECT COUNT(*) FROM t JOIN pub ON {on} WHERE t.id > 1",
        "SELECT COUNT(*) FROM (t JOIN pub ON {on}) WHERE t.id > 1",
    ),
    "from_twice": (
        "SELECT COUNT(*) FROM t JOIN pub ON {on}",
        "SELECT COUNT(*) FROM ((t JOIN pub ON {on}))",
    ),
    "left_operand": (
        "SELECT COUNT(*) FROM t JOIN pub ON {on} JOIN u ON u.k = t.id",
        "SELECT COUNT(*) FROM (t JOIN pub ON {on}) JOIN u ON u.k = t.id",
    ),
    "right_operand": (
        "SELECT COUNT(*) FROM u JOIN t ON u.k = t.id JOIN pub ON {on}",
        "SELECT COUNT(*) FROM u JOIN (t JOIN pub ON {on}) ON u.k = t.id",
    ),
    "nested": (
        "SELECT COUNT(*) FROM u JOIN t ON u.k = t.id JOIN pub ON {on}",
        "SELECT COUNT(*) FROM (u JOIN (t JOIN pub ON {on}) ON u.k = t.id)",
    ),
    "derived_table": (
        "SELECT COUNT(*) FROM (SELECT t.id FROM t JOIN pub ON {on}) AS d",
        "SELECT COUNT(*) FROM (SELECT t.id FROM (t JOIN pub ON {on})) AS d",
    ),
    "cte": (
        "WITH d AS (SELECT t.id, t.c FROM t JOIN pub ON {on}) SELECT COUNT(*) FROM d WHERE d.c <> 'x'",
        "WITH d AS (SELECT t.id, t.c FROM (t JOIN pub ON {on})) SELECT COUNT(*) FROM d WHERE d.c <> 'x'",
    ),
    "group_by": (
        "SELECT t.c, COUNT(*) FROM t JOIN pub ON {on} GROUP BY t.c",
        "SELECT t.c, COUNT(*) FROM (t JOIN pub ON {on}) GROUP BY t.c",
    ),
}
_CASES = [(on, place) for on in sorted(_ONS) for place in sorted(_PLACES)]


def _figures(sql: str) -> tuple[Any, ...]:
    tree = qualify(sqlglot.parse_one(sql, read="postgres"), schema=_SCHEMA)
    return measure(tree), text_work(tree, _column_bytes), largest_held(tree, _column_bytes, _public)


@pytest.mark.parametrize(("on", "place"), _CASES)
def test_a_bracketed_join_is_priced_like_the_bare_join(on: str, place: str) -> None:
    bare, bracketed = (form.format(on=_ONS[on]) for form in _PLACES[place])
    m_bare, w_bare, (held_bare, (row_bare, _)) = _figures(bare)
    m_br, w_br, (held_br, (row_br, _)) = _figures(bracketed)
    assert (m_br, w_br, held_br, row_br) == (m_bare, w_bare, held_bare, row_bare)


_POLICY = """\
[database]
path = "w.duckdb"
[ledger]
path = "l.sqlite"
[tables.t]
privacy_unit = "row"
[tables.t.columns]
id = { type = "int", lower = 0, upper = 1000000 }
c = { type = "category" }
w = { type = "category", max_length = 3832 }
[tables.pub]
public = true
[tables.u]
public = true
[analysts.a]
epsilon = 1000000
"""


@pytest.fixture(scope="module")
def plan_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    import pandas as pd

    from tests.support.warehouse import policy_with_tables
    from veil.proxy._testing import exact_session

    base = Path(tmp_path_factory.mktemp("bracketed"))
    t = pd.DataFrame({"id": list(range(20)), "c": ["v"] * 20, "w": ["w"] * 20})
    pub = pd.DataFrame({"k": list(range(100)), "name": [f"p{i}" for i in range(100)]})
    session = exact_session(policy_with_tables(base, _POLICY, {"t": t}, {"pub": pub, "u": pub}), "a")
    try:
        yield session
    finally:
        session.close()


def _verdict(session: Any, sql: str) -> str:
    from veil.errors import VeilError
    from veil.proxy._testing import plan_of

    try:
        plan_of(session, sql, 0.01)
    except VeilError as exc:
        return f"{type(exc).__name__} {exc.sqlstate}"
    return "planned"


@pytest.mark.parametrize(("on", "place"), _CASES)
def test_a_bracketed_join_ends_the_plan_pass_like_the_bare_join(plan_session: Any, on: str, place: str) -> None:
    bare, bracketed = (form.format(on=_ONS[on]) for form in _PLACES[place])
    assert _verdict(plan_session, bracketed) == _verdict(plan_session, bare)
