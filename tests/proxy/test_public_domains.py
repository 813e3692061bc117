"""A public group key's domain: one source per table reference (two aliases of one table are two rows, also through
CTEs), the tuples that exist (not every column's values crossed), counted before the engine builds the product,
and the groups × statistics a query releases bounded (red team s26 A3, A4, A5).

The oracle: with noise off, the released groups are exactly the key's values over the public tables' rows
(computed in Python), each with its exact count; refusals are free (the budget does not move).
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import pandas as pd
import pytest

from tests.support.warehouse import policy_with_tables
from veil.errors import Unsupported
from veil.policy import Policy
from veil.proxy._testing import exact_session
from veil.proxy.plan import MAX_PUBLIC_GROUPS, MAX_RELEASED_VALUES

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
[tables.pub.columns]
pk = { type = "int" }
pn = { type = "category" }
[tables.big]
public = true
[tables.big.columns]
pk = { type = "int" }
pn = { type = "category" }
[analysts.a]
epsilon = 1000000
delta = 0.5
"""

ROWS = 7
PUB = pd.DataFrame({"pk": pd.array([1, 2, 3], dtype="Int64"), "pn": ["a", "b", "a"]})
BIG = pd.DataFrame({"pk": pd.array(range(400), dtype="Int64"), "pn": [f"n{i}" for i in range(400)]})


@pytest.fixture(scope="module")
def policy(tmp_path_factory: pytest.TempPathFactory) -> Policy:
    t = pd.DataFrame({"x": pd.array(range(ROWS), dtype="Int64")})
    return policy_with_tables(tmp_path_factory.mktemp("domains"), POLICY, {"t": t}, {"pub": PUB, "big": BIG})


def _pairs(f: object) -> dict[object, float]:
    """Each key value over two independent rows of pub, with ROWS private rows each."""
    out: dict[object, float] = {}
    for a, b in itertools.product(PUB.itertuples(), repeat=2):
        k = f(a, b)  # type: ignore[operator]
        out[k] = out.get(k, 0) + ROWS
    return out


CASES = {
    "two-aliases": (
        "SELECT p1.pk - p2.pk AS g, COUNT(*) FROM t CROSS JOIN pub p1 CROSS JOIN pub p2 GROUP BY 1",
        _pairs(lambda a, b: a.pk - b.pk),
    ),
    "one-cte-twice": (
        "WITH c AS (SELECT pk FROM pub) SELECT c1.pk * 10 + c2.pk AS g, COUNT(*) FROM t CROSS JOIN c c1 CROSS JOIN c c2 "
        "GROUP BY 1",
        _pairs(lambda a, b: a.pk * 10 + b.pk),
    ),
    "derived-twice": (
        "SELECT d1.pn || d2.pn AS g, COUNT(*) FROM t CROSS JOIN (SELECT pn FROM pub) d1 CROSS JOIN (SELECT pn FROM pub) d2 "
        "GROUP BY 1",
        _pairs(lambda a, b: a.pn + b.pn),
    ),
    "one-alias-twice": (
        "SELECT p.pk * 10 + p.pk AS g, COUNT(*) FROM t CROSS JOIN pub p GROUP BY 1",
        {11: ROWS, 22: ROWS, 33: ROWS},
    ),
    "existing-pairs-only": (
        "SELECT p.pn || CAST(p.pk AS VARCHAR) AS g, COUNT(*) FROM t CROSS JOIN pub p GROUP BY 1",
        {"a1": ROWS, "b2": ROWS, "a3": ROWS},
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_released_groups_are_the_keys_values_over_the_public_rows(policy: Policy, case: str) -> None:
    sql, truth = CASES[case]
    with exact_session(policy, "a") as s:
        got = {r[0]: float(r[1]) for r in s.execute(sql, epsilon=1).rows}
    assert got == {k: float(v) for k, v in truth.items()}


@pytest.mark.parametrize(
    "sql",
    [
        # 400 × 400 rows of public tables behind one key (joins pinned: one row each): refused before the engine
        # builds 160,000 rows
        "SELECT b1.pk * 1000 + b2.pk AS g, COUNT(*) FROM t JOIN big b1 ON b1.pk = t.x JOIN big b2 ON b2.pk = t.x GROUP BY 1",
        "SELECT b1.pn || b2.pn AS g, COUNT(*) FROM t JOIN big b1 ON b1.pk = t.x JOIN big b2 ON b2.pk = t.x GROUP BY 1",
        # groups × statistics: 3⁵ groups × 420 statistics
        "SELECT p0.pk, p1.pk, p2.pk, p3.pk, p4.pk, "
        + ", ".join(f"COUNT(*) FILTER (WHERE x > {i})" for i in range(420))
        + " FROM t CROSS JOIN pub p0 CROSS JOIN pub p1 CROSS JOIN pub p2 CROSS JOIN pub p3 CROSS JOIN pub p4 "
        "GROUP BY p0.pk, p1.pk, p2.pk, p3.pk, p4.pk",
    ],
)
def test_too_many_groups_or_values_are_refused_free_and_fast(policy: Policy, sql: str) -> None:
    assert 400 * 400 > MAX_PUBLIC_GROUPS and 3**5 * 420 > MAX_RELEASED_VALUES
    with exact_session(policy, "a") as s:
        before = s.budget().spent
        start = time.process_time()
        with pytest.raises(Unsupported, match=r"groups|values"):
            s.execute(sql, epsilon=1)
        assert time.process_time() - start < 5.0
        assert s.budget().spent == before


def test_a_key_over_one_big_public_table_is_listed(policy: Policy, tmp_path: Path) -> None:
    """The sources' count is a product over table references: one 400-row table is fine."""
    with exact_session(policy, "a") as s:
        rows = s.execute("SELECT b.pn || '-' AS g, COUNT(*) FROM t CROSS JOIN big b GROUP BY 1", epsilon=1).rows
    assert len(rows) == 400 and {float(r[1]) for r in rows} == {float(ROWS)}


@pytest.mark.parametrize(
    "derived",
    [
        "(SELECT pk, MAX(pn) AS g FROM pub GROUP BY pk)",
        "(SELECT pk, COUNT(*) AS g FROM pub GROUP BY pk)",
        "(SELECT pk, MIN(pn) AS g FROM pub GROUP BY pk)",
    ],
)
def test_a_key_through_a_derived_aggregate_is_no_public_key(policy: Policy, derived: str) -> None:
    """An aggregate over a public source is no function of one source row (window functions are refused): its
    values cannot be listed from the source's rows (red team s28 A6 listed MAX over the whole table, one value);
    such a key is private."""
    from veil.proxy._testing import plan_of

    sql = f"SELECT d.g, COUNT(*) FROM t JOIN {derived} d ON d.pk = t.x GROUP BY 1"
    with exact_session(policy, "a") as s:
        planned = plan_of(s, sql, 1)
    assert planned is not None and not planned.keys[0].public
