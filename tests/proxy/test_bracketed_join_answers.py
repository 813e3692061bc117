"""A bracketed join answers exactly as the same join written bare (red team s74 F5).

sqlglot hangs a bracketed join's ``joins`` on its first source; the catalog-typed read of a public table
(``public_reads.typed_read``) replaced that ``Table`` node with a new ``Subquery`` and dropped them, ON conditions and
all, so ``t JOIN (pub JOIN pub AS p2 ON …) ON …`` answered without ``p2`` and ``FROM (pub JOIN t ON …)`` counted the
public table alone. Every source replacement now keeps the joins (``public_reads.replace_keeping_joins``).

The class: every order of three sources (the private table and two public ones), inner joins on equalities (one
filtering), with the first two or the last two bracketed, at the top level, in a derived table and in a CTE; each
bracketed spelling must give the exact (noise-off) answer of the bare one. Deterministic: no false failures.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

_POLICY = """\
[database]
path = "w.duckdb"
[ledger]
path = "l.sqlite"
[tables.t]
privacy_unit = "row"
[tables.t.columns]
id = { type = "int", lower = 0, upper = 1000 }
[tables.pub]
public = true
[analysts.a]
epsilon = 1000000
"""

#: each source and the condition joining it to the sources before it (any order: every pair is connected)
_ON = {
    frozenset({"t", "pub"}): "t.id = pub.k",
    frozenset({"t", "p2"}): "t.id = p2.k AND p2.k < 40",
    frozenset({"pub", "p2"}): "pub.name = p2.name",
}
_SOURCE = {"t": "t", "pub": "pub", "p2": "pub AS p2"}


def _bare_and_bracketed(order: tuple[str, ...]) -> Iterator[tuple[str, str]]:
    a, b, c = order
    ab, abc = _ON[frozenset({a, b})], f"{_ON[frozenset({a, c})]} AND {_ON[frozenset({b, c})]}"
    bare = f"{_SOURCE[a]} JOIN {_SOURCE[b]} ON {ab} JOIN {_SOURCE[c]} ON {abc}"
    yield bare, f"({_SOURCE[a]} JOIN {_SOURCE[b]} ON {ab}) JOIN {_SOURCE[c]} ON {abc}"
    yield bare, f"({_SOURCE[a]} JOIN {_SOURCE[b]} ON {ab} JOIN {_SOURCE[c]} ON {abc})"
    bc, a_bc = _ON[frozenset({b, c})], f"{_ON[frozenset({a, b})]} AND {_ON[frozenset({a, c})]}"
    yield bare, f"{_SOURCE[a]} JOIN ({_SOURCE[b]} JOIN {_SOURCE[c]} ON {bc}) ON {a_bc}"


def _cases() -> Iterator[tuple[str, str]]:
    for order in itertools.permutations(("t", "pub", "p2")):
        for bare, bracketed in _bare_and_bracketed(order):
            yield f"SELECT COUNT(*) FROM {bare}", f"SELECT COUNT(*) FROM {bracketed}"
            yield (
                f"SELECT COUNT(*) FROM (SELECT t.id FROM {bare}) AS q",
                f"SELECT COUNT(*) FROM (SELECT t.id FROM {bracketed}) AS q",
            )
    # public-only joins in a derived table or CTE on the private query's path (materialised, then probed)
    pair, bracketed_pair = "pub JOIN pub AS p2 ON pub.name = p2.name", "(pub JOIN pub AS p2 ON pub.name = p2.name)"
    for inner in (pair, bracketed_pair):
        yield (
            f"WITH w AS (SELECT pub.k FROM {pair}) SELECT COUNT(*) FROM t JOIN w ON t.id = w.k",
            f"WITH w AS (SELECT pub.k FROM {inner}) SELECT COUNT(*) FROM t JOIN w ON t.id = w.k",
        )


_CASES = list(_cases())


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    import pandas as pd

    from tests.support.warehouse import policy_with_tables
    from veil.proxy._testing import exact_session

    base = Path(tmp_path_factory.mktemp("bracketed"))
    t = pd.DataFrame({"id": list(range(100))})
    pub = pd.DataFrame({"k": list(range(100)), "name": [f"n{i % 7}" for i in range(100)]})
    s = exact_session(policy_with_tables(base, _POLICY, {"t": t}, {"pub": pub}), "a")
    try:
        yield s
    finally:
        s.close()


def _exact(session: Any, sql: str) -> object:
    from veil.errors import VeilError

    try:
        return session.execute(sql, epsilon=1.0).rows
    except VeilError as exc:
        return f"{type(exc).__name__} {exc.sqlstate}"


@pytest.mark.parametrize(("bare", "bracketed"), _CASES)
def test_a_bracketed_join_answers_as_the_bare_join(session: Any, bare: str, bracketed: str) -> None:
    expected = _exact(session, bare)
    assert not isinstance(expected, str), expected  # the family is of answered joins
    assert _exact(session, bracketed) == expected
