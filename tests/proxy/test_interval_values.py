"""An INTERVAL is for date arithmetic only (red team s56 C2): no query may compute an interval *value* — one that an
aggregate, a comparison, a projection or another operator could read — on either engine.

``AVG`` of an interval raises in DuckDB once a group's days pass 2³¹ (``MEDIAN`` of intervals raised too), and
aggregates are never wrapped in ``TRY``: where such an aggregate sat in a public source, whether the query failed
was decided by which groups the engine computed, which DuckDB chose from the private copy's statistics. On DuckDB the
public source is now evaluated once on its own (multiplicity); this rule takes interval values away everywhere, so the
class is closed on every engine. Intervals reach SQL two ways: an ``INTERVAL`` literal or constructor, and a difference
of two time values (``ts - ts``, ``d - DATE_TRUNC(…)``, ``(d + INTERVAL 1 DAY) - d``; ``DATE - DATE`` too, a number of
days in DuckDB and an interval in Spark)."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from tests.support.warehouse import policy_with_tables

POLICY = """\
[database]
path = "w.duckdb"
[ledger]
path = "l.sqlite"
[tables.t]
privacy_unit = "row"
[tables.t.columns]
a = { type = "int", lower = 0, upper = 100 }
d = { type = "date" }
e = { type = "date" }
[tables.pub]
public = true
[tables.pub.columns]
k = { type = "int" }
pd = { type = "date" }
[analysts.a]
epsilon = 1000
"""


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Any:
    t = pd.DataFrame(
        {
            "a": pd.array(range(30), dtype="Int64"),
            "d": pd.to_datetime(["2020-01-01"] * 30).date,
            "e": pd.to_datetime(["2021-06-01"] * 30).date,
        }
    )
    pub = pd.DataFrame({"k": pd.array(range(10), dtype="Int64"), "pd": pd.to_datetime(["2010-05-05"] * 10).date})
    return policy_with_tables(tmp_path_factory.mktemp("ivt"), POLICY, {"t": t}, {"pub": pub})


#: An interval used as a value: read by an aggregate, an operator, a projection, a comparison or a function.
INTERVAL_VALUES = [
    "SELECT COUNT(g.m) FROM t JOIN (SELECT k, AVG(INTERVAL (k * 1000) DAY) AS m FROM pub GROUP BY k) g ON g.k = t.a",
    "SELECT COUNT(g.m) FROM t JOIN (SELECT k, MEDIAN(INTERVAL (k) DAY) AS m FROM pub GROUP BY k) g ON g.k = t.a",
    "SELECT COUNT(g.m) FROM t JOIN (SELECT k, MAX(INTERVAL '1' DAY * k) AS m FROM pub GROUP BY k) g ON g.k = t.a",
    "SELECT COUNT(g.m) FROM t JOIN (SELECT k, INTERVAL (k) DAY AS m FROM pub) g ON g.k = t.a",
    "SELECT COUNT(g.m) FROM t JOIN (SELECT k, AVG(pd - DATE_TRUNC('month', pd)) AS m FROM pub GROUP BY k) g ON g.k = t.a",
    "SELECT COUNT(g.m) FROM t JOIN (SELECT k, AVG((pd + INTERVAL 1 DAY) - pd) AS m FROM pub GROUP BY k) g ON g.k = t.a",
    "SELECT COUNT(*) FROM t WHERE d + INTERVAL '1' DAY * a > DATE '2020-01-05'",
    "SELECT COUNT(*) FROM t WHERE d + (INTERVAL '1' DAY + INTERVAL '2' DAY) > DATE '2020-01-05'",
    "SELECT COUNT(*) FROM t WHERE d - DATE_TRUNC('month', e) > INTERVAL '3' DAY",
    "SELECT COUNT(*) FROM t WHERE (CAST(d AS TIMESTAMP) - CAST(e AS TIMESTAMP)) IS NULL",
    "SELECT COUNT(*) FROM t WHERE INTERVAL '1' DAY - d > DATE '2020-01-05'",
    "SELECT COUNT(*) FROM t WHERE -INTERVAL '1' DAY IS NOT NULL",
    "SELECT COUNT(g.m) FROM t JOIN (SELECT k, MAX(pd - pd) AS m FROM pub GROUP BY k) g ON g.k = t.a",
    "SELECT COUNT(*) FROM t WHERE EXTRACT(DAY FROM INTERVAL (a) DAY) > 3",
    "SELECT COUNT(*) FROM t WHERE COALESCE(INTERVAL (a) DAY, INTERVAL '1' DAY) IS NOT NULL",
    "SELECT COUNT(*) FROM t WHERE d + CASE WHEN a > 3 THEN INTERVAL '1' DAY ELSE INTERVAL '2' DAY END > DATE '2020-01-05'",
]

#: Date arithmetic, which stays allowed.
DATE_ARITHMETIC = [
    "SELECT COUNT(*) FROM t WHERE d + INTERVAL '1' DAY > DATE '2020-01-05'",
    "SELECT COUNT(*) FROM t WHERE d - INTERVAL (a) DAY > DATE '2019-12-05'",
    "SELECT COUNT(*) FROM t WHERE INTERVAL '1' DAY + d > DATE '2019-12-05'",
    "SELECT COUNT(*) FROM t WHERE (d + INTERVAL '1' DAY) + INTERVAL '2' MONTH > DATE '2019-12-05'",
    "SELECT COUNT(*) FROM t WHERE d + (INTERVAL '1' DAY) > DATE '2019-12-05'",
    "SELECT COUNT(*) FROM t JOIN pub ON pub.k = t.a WHERE pub.pd + INTERVAL '1' YEAR < t.d",
]


@pytest.mark.parametrize("sql", INTERVAL_VALUES)
def test_an_interval_value_is_refused_free(world: Any, sql: str) -> None:
    from veil.errors import VeilError
    from veil.proxy._testing import exact_session

    with exact_session(world, "a") as s:
        before = s.budget().spent
        with pytest.raises(VeilError) as refused:
            s.execute(sql, epsilon=1.0)
        assert refused.value.sqlstate in ("0A000", "42804"), refused.value
        assert "interval" in str(refused.value).lower()
        assert s.budget().spent == before


@pytest.mark.parametrize("sql", DATE_ARITHMETIC)
def test_date_arithmetic_is_answered(world: Any, sql: str) -> None:
    from veil.proxy._testing import exact_session

    with exact_session(world, "a") as s:
        assert s.execute(sql, epsilon=1.0).rows
