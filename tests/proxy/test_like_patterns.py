"""LIKE / ILIKE accept only a constant pattern of literal characters and ``%`` (red team s8, A4).

DuckDB matches such patterns in linear time; a pattern computed per row, or one holding ``_``, goes through
its generic matcher (|text| × |pattern|), and DuckDB's ILIKE does even for constant patterns — so a reply
time could answer a question about the one row a predicate selects. Refusals are free; ILIKE runs as
``LOWER(x) LIKE LOWER(p)`` with the same answers.
"""

from __future__ import annotations

from collections.abc import Iterator

import duckdb
import pytest

from tests.test_proxy_fixtures import make_proxy_policy, people_frame
from veil.errors import Unsupported
from veil.proxy._testing import exact_session
from veil.proxy.session import QuerySession

REFUSED = [
    "SELECT COUNT(*) FROM people WHERE state LIKE state || '%'",
    "SELECT COUNT(*) FROM people WHERE state LIKE CONCAT('%', sex)",
    "SELECT COUNT(*) FROM people WHERE sex ILIKE LOWER(state)",
    "SELECT COUNT(*) FROM people WHERE state LIKE 'C_'",
    "SELECT COUNT(*) FROM people WHERE NOT state ILIKE '_A%'",
    "SELECT COUNT(*) FILTER (WHERE state LIKE CASE WHEN age > 3 THEN 'a%' ELSE 'b%' END) FROM people",
    "WITH w AS (SELECT state || 'x' AS p FROM people) SELECT COUNT(*) FROM w WHERE 'abc' LIKE p",
]


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[QuerySession]:
    with exact_session(make_proxy_policy(tmp_path_factory.mktemp("like")), "alice") as s:
        yield s


@pytest.mark.parametrize("sql", REFUSED)
def test_patterns_that_are_not_constant_percent_patterns_are_refused_free(session: QuerySession, sql: str) -> None:
    before = session.budget().spent
    with pytest.raises(Unsupported, match="pattern"):
        session.execute(sql, epsilon=1)
    assert session.budget().spent == before


ANSWERED = ["state LIKE 'C%'", "state ILIKE 'c%'", "state ILIKE '%A%'", "NOT state ILIKE 'n%'", "sex LIKE '%ale'"]


@pytest.mark.parametrize("cond", ANSWERED)
def test_constant_percent_patterns_answer_exactly(session: QuerySession, cond: str) -> None:
    ref = duckdb.connect()
    ref.register("people", people_frame())
    want = ref.execute(f"SELECT COUNT(*) FROM people WHERE {cond}").fetchone()[0]
    assert session.execute(f"SELECT COUNT(*) FROM people WHERE {cond}", epsilon=1).rows[0][0] == want
