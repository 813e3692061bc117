"""The text one private row carries through a join is capped (red team s68 F1, ``multiplicity.MAX_JOIN_ROW_BYTES``).

DuckDB's hash join does not spill a build side of large strings the way its GROUP BY does, so a join carrying a
private text within the 15 KiB value cap failed after the charge at an edge one row crossed (15,426 rows answered,
15,427 failed at 256 MiB with 2 threads). The class: every shape that reads a private text across a join — GROUP BY
after the join, a COUNT whose WHERE reads the text, LEFT JOIN, two joins, DISTINCT after the join, the text as an ON
key, a derived table or CTE over the private rows, a public derived source, a comma join, a user-level table's
bounded copy — is refused free when the columns it reads together may pass the cap, by the policy and the query
alone (the world here is a few rows: nothing about the data decides it), and answered when they fit.
Deterministic: no false failures.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from tests.support.warehouse import policy_with_tables
from veil.errors import Unsupported
from veil.proxy import multiplicity
from veil.proxy._testing import exact_session
from veil.proxy.session import QuerySession

#: Characters of the narrow column: 4 bytes each, with one 32-byte key beside it, within the cap.
_NARROW = min(multiplicity.MAX_JOIN_ROW_BYTES // 4 - 8, 504)

_POLICY = f"""\
[database]
path = "w.duckdb"
[ledger]
path = "l.sqlite"
[tables.t]
privacy_unit = "row"
[tables.t.columns]
id = {{ type = "int", lower = 0, upper = 100 }}
wide = {{ type = "category", max_length = 1024 }}
narrow = {{ type = "category", max_length = {_NARROW} }}
[tables.v]
privacy_unit = "u"
max_rows_per_unit = 3
[tables.v.columns]
u = {{ type = "int" }}
id = {{ type = "int", lower = 0, upper = 100 }}
wide = {{ type = "category", max_length = 1024 }}
narrow = {{ type = "category", max_length = {_NARROW} }}
[tables.pub]
public = true
[analysts.a]
epsilon = 1000000
"""

#: Every shape reads ``{c}`` of the private rows across a join; ``{t}`` is the private table.
_SHAPES = {
    "join_group_by": "SELECT x.{c}, COUNT(*) FROM {t} x JOIN pub ON x.id = pub.k GROUP BY x.{c}",
    "join_count_where_text": "SELECT COUNT(*) FROM {t} x JOIN pub ON x.id = pub.k WHERE LENGTH(x.{c}) > 3 OR pub.k < 0",
    "left_join": "SELECT COUNT(*) FROM {t} x LEFT JOIN pub ON x.id = pub.k WHERE x.{c} <> 'z'",
    "two_joins": "SELECT COUNT(*) FROM {t} x JOIN pub ON x.id = pub.k JOIN pub p2 ON x.id = p2.k WHERE x.{c} > 'a'",
    "distinct_after_join": "SELECT COUNT(DISTINCT x.{c}) FROM {t} x JOIN pub ON x.id = pub.k",
    "text_on_key": "SELECT COUNT(*) FROM {t} x JOIN pub ON x.{c} = pub.n",
    "derived_private": "SELECT COUNT(*) FROM (SELECT id, {c} FROM {t}) d JOIN pub ON d.id = pub.k WHERE d.{c} > 'a'",
    "cte_private": "WITH d AS (SELECT id, {c} FROM {t}) SELECT d.{c}, COUNT(*) FROM d JOIN pub ON d.id = pub.k GROUP BY d.{c}",
    "public_derived_source": ("SELECT COUNT(*) FROM {t} x JOIN (SELECT k FROM pub GROUP BY k) q ON x.id = q.k WHERE x.{c} > 'a'"),
    "comma_join": "SELECT COUNT(*) FROM {t} x, pub WHERE x.id = pub.k AND x.{c} > 'a'",
    "join_inside_derived": ("SELECT d.{c}, COUNT(*) FROM (SELECT x.{c} FROM {t} x JOIN pub ON x.id = pub.k) d GROUP BY d.{c}"),
}


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[QuerySession]:
    t = pd.DataFrame({"id": range(20), "wide": [f"w{i}" for i in range(20)], "narrow": [f"n{i}" for i in range(20)]})
    v = t.assign(u=[i // 2 for i in range(20)])
    pub = pd.DataFrame({"k": [i % 20 for i in range(60)], "n": [f"w{i % 20}" for i in range(60)]})
    policy = policy_with_tables(Path(tmp_path_factory.mktemp("joinrow")), _POLICY, {"t": t, "v": v}, {"pub": pub})
    with exact_session(policy, "a") as s:
        yield s


@pytest.mark.parametrize("table", ["t", "v"])
@pytest.mark.parametrize("shape", sorted(_SHAPES))
def test_a_wide_private_text_carried_through_a_join_is_refused_free(session: QuerySession, shape: str, table: str) -> None:
    """A category of 1,024 characters (priced 4,096 bytes) read across a join: refused, free, naming it."""
    spent = session.budget().spent
    with pytest.raises(Unsupported, match=r"joins may carry .* widest column it reads is \w+\.wide"):
        session.execute(_SHAPES[shape].format(c="wide", t=table), epsilon=0.01)
    assert session.budget().spent == spent


@pytest.mark.parametrize("table", ["t", "v"])
@pytest.mark.parametrize("shape", sorted(_SHAPES))
def test_a_narrow_private_text_carried_through_a_join_is_answered(session: QuerySession, shape: str, table: str) -> None:
    """The same shapes over a column declared within the cap are answered (the usability side of the cap)."""
    session.execute(_SHAPES[shape].format(c="narrow", t=table), epsilon=0.01)


def test_narrow_columns_together_past_the_cap_are_refused(session: QuerySession) -> None:
    """The cap holds for the columns a join reads together: two narrow columns (and the key) pass it."""
    spent = session.budget().spent
    sql = "SELECT COUNT(*) FROM t JOIN pub ON t.id = pub.k WHERE t.narrow || t.wide > 'a'"
    with pytest.raises(Unsupported, match="joins may carry"):
        session.execute(sql, epsilon=0.01)
    sql = "SELECT COUNT(*) FROM t JOIN pub ON t.id = pub.k WHERE t.narrow > 'a' AND LENGTH(t.narrow) > 1"
    session.execute(sql, epsilon=0.01)  # one column read twice counts once
    spent = session.budget().spent
    sql = "SELECT COUNT(*) FROM (SELECT id, narrow, 'pad' || narrow AS z FROM t) d JOIN pub ON d.id = pub.k WHERE d.z > d.narrow"
    with pytest.raises(Unsupported, match="joins may carry"):
        session.execute(sql, epsilon=0.01)
    assert session.budget().spent == spent
