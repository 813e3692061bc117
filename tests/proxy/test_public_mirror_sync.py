"""Private queries join a public table as the warehouse holds it; its join multiplicity is measured on the public
mirror. The two copies must never differ (red team s23, A1: a reload that left the mirror behind let one person move
a join count by 1,000 against a sensitivity of 1).

The property, for every way a curator (or another tool) can change a public table and every spelling of its name in
the analyst's query: the multiplicity the plan charges for is the warehouse's, and a public-only query reads the
warehouse's rows.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from veil.policy import Policy, load_policy
from veil.proxy._testing import exact_session, plan_of
from veil.store import warehouse

POLICY = """\
[database]
path = "w.duckdb"
[ledger]
path = "l.sqlite"
[tables.t]
privacy_unit = "row"
[tables.t.columns]
x = { type = "int", lower = 0, upper = 10 }
[tables.pub]
public = true
[analysts.a]
epsilon = 1000
"""

UNIQUE = pd.DataFrame({"pk": [1, 2, 3, 5]})
REPEATED = pd.DataFrame({"pk": [1, 2, 3] + [5] * 40})


def _write_unflagged(policy: Policy, path: Path) -> Policy:
    warehouse.write_table(policy, "pub", REPEATED, replace=True)  # `public` left at its default
    return policy


def _reload_while_private(policy: Policy, path: Path) -> Policy:
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace("[tables.pub]\npublic = true\n", "[tables.pub]\n"), encoding="utf-8")
    private = load_policy(path)
    warehouse.write_table(private, "pub", REPEATED, replace=True)
    path.write_text(text, encoding="utf-8")
    return load_policy(path)


def _written_by_another_tool(policy: Policy, path: Path) -> Policy:
    with warehouse.writer(policy) as con:  # no version comment, no table-write record in the ledger
        con.register("incoming", REPEATED)
        con.execute('CREATE OR REPLACE TABLE "pub" AS SELECT * FROM incoming')
    return policy


CHANGES: dict[str, Callable[[Policy, Path], Policy]] = {
    "write without the public flag": _write_unflagged,
    "reloaded while private, declared public again": _reload_while_private,
    "replaced by another tool": _written_by_another_tool,
}

SPELLINGS = [
    "SELECT COUNT(*) FROM t JOIN pub ON pub.pk = t.x",
    "SELECT COUNT(*) FROM t JOIN PUB ON PUB.pk = t.x",
    'SELECT COUNT(*) FROM t JOIN "pub" AS p ON p.pk = t.x',
    "WITH q AS (SELECT pk FROM Pub) SELECT COUNT(*) FROM t JOIN q ON q.pk = t.x",
    "SELECT COUNT(*) FROM t JOIN (SELECT pk FROM pub) AS s ON s.pk = t.x",
]


@pytest.mark.parametrize("change", list(CHANGES))
@pytest.mark.parametrize("sql", SPELLINGS)
def test_join_multiplicity_is_measured_on_the_rows_the_query_joins(tmp_path: Path, change: str, sql: str) -> None:
    path = tmp_path / "policy.toml"
    path.write_text(POLICY, encoding="utf-8")
    policy = load_policy(path)
    warehouse.write_table(policy, "t", pd.DataFrame({"x": [5, 1, 2]}), replace=True)
    warehouse.write_table(policy, "pub", UNIQUE, replace=True, public=True)
    with exact_session(policy, "a") as session:
        before = plan_of(session, sql)
        assert before is not None and before.contribution == 1
        policy = CHANGES[change](policy, path)
    with exact_session(policy, "a") as session:
        plan = plan_of(session, sql)
        assert plan is not None and plan.contribution == 40, (change, sql, plan and plan.contribution)
        assert session.execute("SELECT COUNT(*) FROM pub").rows[0][0] == len(REPEATED)


def test_an_open_session_sees_a_public_table_replaced_by_another_tool(tmp_path: Path) -> None:
    """No ledger record tells the session (the catalog generation does not move): the check before resolving does."""
    path = tmp_path / "policy.toml"
    path.write_text(POLICY, encoding="utf-8")
    policy = load_policy(path)
    warehouse.write_table(policy, "t", pd.DataFrame({"x": [5, 1, 2]}), replace=True)
    warehouse.write_table(policy, "pub", UNIQUE, replace=True, public=True)
    with exact_session(policy, "a") as session:
        sql = SPELLINGS[1]
        assert (plan := plan_of(session, sql)) is not None and plan.contribution == 1
        _written_by_another_tool(policy, path)
        assert (plan := plan_of(session, sql)) is not None and plan.contribution == 40
