"""The neighbouring-database tester: generated data, generated neighbours, generated queries, noise off.

Hypothesis draws a small database D (adversarial values: NULL, NaN, ±inf, 1e300, out-of-range values, zero
divisors, duplicate rows, NULL units, keys outside the declared domain) and a neighbour D′ = D plus one privacy
unit (a fresh unit, a NULL-unit row, a copy of an existing row under a new unit, a unit with more rows than
``max_rows_per_unit``), and queries from the grammar Veil accepts: aggregates over expressions, FILTER,
WHERE, GROUP BY declared/private/public-table keys, joins with public tables (plain, derived, CTE), row-level
CTEs and subqueries, row-level and user-level tables. Each query runs on D and D′ through the internal exact
path (``veil.proxy._testing.exact_session``) under the same bounding salt, and :func:`compare` asserts that
both end the same way, with the same plan, and that no released statistic moves by more than the plan's
sensitivity (L1 over all groups).

Size: ``VEIL_NEIGHBOUR_EXAMPLES`` databases (default 8) × ``VEIL_NEIGHBOUR_QUERIES`` queries (default 16) in
CI; the nightly-size run is ``VEIL_NEIGHBOUR_EXAMPLES=500 VEIL_NEIGHBOUR_QUERIES=40`` (see docs/testing.md).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.attack_neighbours import compare, exact_release, share_salts

EXAMPLES = int(os.environ.get("VEIL_NEIGHBOUR_EXAMPLES", "8"))
QUERIES = int(os.environ.get("VEIL_NEIGHBOUR_QUERIES", "16"))

POLICY = """\
[database]
path = "w.duckdb"
[ledger]
path = "l.sqlite"
[defaults]
epsilon_per_query = 1.0

[tables.t]
privacy_unit = "row"
[tables.t.columns]
u = { type = "int", lower = 0, upper = 100 }
x = { type = "int", lower = -10, upper = 10 }
y = { type = "float", lower = -5, upper = 5 }
k = { type = "category", values = ["a", "b"] }
s = { type = "category" }

[tables.tu]
privacy_unit = "u"
max_rows_per_unit = 2
[tables.tu.columns]
u = { type = "int", lower = 0, upper = 100 }
x = { type = "int", lower = -10, upper = 10 }
y = { type = "float", lower = -5, upper = 5 }
k = { type = "category", values = ["a", "b"] }
s = { type = "category" }

[tables.pub]
public = true
[tables.pub.columns]
pk = { type = "int" }
pn = { type = "category" }

[analysts.a]
epsilon = 1000000
delta = 0.5
"""

PUB = pd.DataFrame({"pk": pd.array([1, 1, 2, 0], dtype="Int64"), "pn": ["p", "q", "r", "z"], "pt": ["1", "01", " 1", "2"]})

# --- data -------------------------------------------------------------------------------------------

X = st.one_of(st.none(), st.integers(-12, 12), st.sampled_from([0, 1000, -1000, 2**62]))
Y = st.one_of(
    st.none(),
    st.sampled_from([0.0, -0.5, 4.9, math.nan, math.inf, -math.inf, 1e300, -1e300, 5e-324]),
    st.floats(-6, 6, allow_nan=False),
)
K = st.sampled_from(["a", "b", "zzz", None])
S = st.sampled_from(["s1", "s2", "s3", None])
U = st.one_of(st.none(), st.integers(1, 4))


def _row(u: Any, x: Any, y: Any, k: Any, s: Any) -> dict[str, Any]:
    return {"u": u, "x": x, "y": y, "k": k, "s": s}


ROW = st.builds(_row, U, X, Y, K, S)


@st.composite
def databases(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[dict[str, Any]], str]:
    """(rows of D, the added unit's rows, how the neighbour was made)."""
    rows = draw(st.lists(ROW, min_size=1, max_size=8))
    how = draw(st.sampled_from(["fresh", "fresh_many", "null_unit", "copy", "existing_value"]))
    if how == "fresh":
        added = [dict(draw(ROW), u=50)]
    elif how == "fresh_many":
        added = [dict(r, u=50) for r in draw(st.lists(ROW, min_size=2, max_size=5))]
    elif how == "null_unit":
        added = [dict(r, u=None) for r in draw(st.lists(ROW, min_size=1, max_size=3))]
    elif how == "copy":
        added = [dict(draw(st.sampled_from(rows)), u=50)]
    else:  # a new unit holding an existing unit's values (zero divisors, extremes…)
        base = draw(st.sampled_from(rows))
        added = [dict(base, u=51, x=draw(st.sampled_from([0, 10, -10, None])))]
    return rows, added, how


def _frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    cols = ["u", "x", "y", "k", "s"]
    types = {"u": "Int64", "x": "Int64", "y": "float64"}
    return pd.DataFrame({c: pd.array([r[c] for r in rows], dtype=types.get(c, "object")) for c in cols})


class Pair:
    """Two worlds (D and D′) whose private tables are rewritten for every example; sessions stay open."""

    def __init__(self, base: Path) -> None:
        from veil.policy import load_policy
        from veil.proxy._testing import exact_session
        from veil.store.warehouse import write_table

        self.policies = []
        for name in ("d", "dp"):
            folder = base / name
            folder.mkdir()
            path = folder / "policy.toml"
            path.write_text(POLICY, encoding="utf-8")
            policy = load_policy(path)
            write_table(policy, "pub", PUB, replace=True, public=True)
            self.policies.append(policy)
        self.sessions = [exact_session(p, "a") for p in self.policies]
        self.asked = 0

    def load(self, rows: list[dict[str, Any]], added: list[dict[str, Any]]) -> None:
        from veil.store.warehouse import write_table

        for policy, data in zip(self.policies, (rows, rows + added), strict=True):
            write_table(policy, "t", _frame(data), replace=True)
            write_table(policy, "tu", _frame(data), replace=True)
        share_salts(*self.sessions)

    def epsilon(self) -> float:
        """A fresh ε per query: the answer cache never answers (each query is run on the data at hand)."""
        self.asked += 1
        return 1.0 + self.asked * 1e-6

    def close(self) -> None:
        for s in self.sessions:
            s.close()


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Any:
    p = Pair(tmp_path_factory.mktemp("property"))
    yield p
    p.close()


# --- queries ----------------------------------------------------------------------------------------

EXPRS = [
    "m.x", "m.y", "m.x * 2", "m.x + m.y", "ABS(m.x)", "CASE WHEN m.k = 'a' THEN m.x ELSE 0 END", "m.x > 0",
    "m.x / 3", "m.x % 3", "COALESCE(m.x, 0)", "-m.y", "m.y * m.y", "LEAST(m.x, 5)", "ROUND(m.y)", "m.x / m.x",
    "CAST(m.y AS INTEGER)", "m.x * m.x * m.x", "1 / NULLIF(m.x, 0)", "SQRT(ABS(m.y))", "m.y / 2 + 1",
    "EXP(m.x)", "LN(ABS(m.x) + 1)", "POWER(m.y, 2)", "m.y ^ 3", "SIGN(m.y)", "GREATEST(m.x, m.y)",
    "CASE WHEN m.y > 0 THEN m.y ELSE m.x END", "CEIL(m.y * 10) / 10", "m.x - m.x", "1", "m.u",
    "CASE WHEN m.s = 's1' THEN 1e15 ELSE 0 END", "COALESCE(m.y, m.x, 0) * 1000", "-m.x * 1000000000",
]  # fmt: skip
CONDS = [
    "m.x > 0", "m.k = 'a'", "m.y IS NULL", "m.s = 's1'", "m.x BETWEEN -3 AND 3", "m.y > m.x", "m.x % 2 = 0",
    "m.u = 50", "m.u IS NULL", "1 / m.x > 0", "CAST(m.y AS INTEGER) = 0", "m.s IN ('s1', 's2')",
]  # fmt: skip
AGGS = [
    "COUNT(*)", "COUNT(m.x)", "COUNT(DISTINCT m.u)", "COUNT(DISTINCT m.x)", "SUM({e})", "AVG({e})",
    "MEDIAN({e})", "MIN({e})", "MAX({e})", "VARIANCE({e})", "quantile_cont({e}, 0.25)", "STDDEV({e})",
    "SUM(DISTINCT {e})", "AVG(DISTINCT {e})", "COUNT(DISTINCT {e})", "PERCENTILE_DISC(0.5) WITHIN GROUP (ORDER BY {e})",
    "VAR_POP({e})", "STDDEV_POP({e})", "quantile_disc({e}, 0.9)", "MIN(DISTINCT {e})",
]  # fmt: skip
KEYS = [
    None,
    None,
    "m.k",
    "m.s",
    "m.x",
    "pub.pn",
    "m.x > 0",
    "m.k, m.s",
    "m.u",
    "ROUND(m.y)",
    "CASE WHEN m.k = 'a' THEN 1 ELSE 2 END",
    "m.k, pub.pn",
    "pub.pk",
]
SOURCES = [
    "{t} AS m",
    "{t} AS m JOIN pub ON pub.pk = m.x",
    "{t} AS m, pub",
    "{t} AS m, (SELECT pk FROM pub) AS p2",
    "{t} AS m JOIN (SELECT pk, pn FROM pub) AS pub ON pub.pk = m.x",
    "(SELECT * FROM {t} WHERE y IS NOT NULL) AS m",
    "(SELECT * FROM {t}) AS m, pub, pub AS pub2",
    "{t} AS m LEFT JOIN pub ON pub.pk = m.u",
    "{t} AS m JOIN pub ON pub.pt = CAST(m.x AS VARCHAR)",
    "{t} AS m JOIN pub ON CAST(pub.pt AS INTEGER) = m.x",
    "{t} AS m, pub, pub AS pub2 WHERE pub.pk = pub2.pk AND pub.pk = m.x",
    "{t} AS m, (SELECT a.pk, a.pn FROM pub a, pub b) AS pub",
    "{t} AS m JOIN pub ON pub.pk = m.y",
    "(SELECT * FROM {t} AS i JOIN pub ON pub.pk = i.x) AS m",
]  # fmt: skip


@st.composite
def queries(draw: st.DrawFn) -> str:
    table = draw(st.sampled_from(["t", "tu"]))
    src = draw(st.sampled_from(SOURCES)).format(t=table)
    key = draw(st.sampled_from(KEYS))
    if key is not None and "pub." in key and "pub" not in src.replace("{t}", ""):
        key = "m.k"
    aggs = []
    for _ in range(draw(st.integers(1, 2))):
        agg = draw(st.sampled_from(AGGS)).format(e=draw(st.sampled_from(EXPRS)))
        if draw(st.booleans()) and draw(st.booleans()):
            agg += f" FILTER (WHERE {draw(st.sampled_from(CONDS))})"
        aggs.append(agg)
    where = f" WHERE {draw(st.sampled_from(CONDS))}" if draw(st.booleans()) else ""
    select = ", ".join(([key] if key else []) + aggs)
    group = f" GROUP BY {key}" if key else ""
    having = ""
    if key and draw(st.integers(0, 3)) == 0:  # an aggregate only in HAVING is a hidden statistic
        having = f" HAVING {draw(st.sampled_from(AGGS)).format(e=draw(st.sampled_from(EXPRS)))} > 0"
    sql = f"SELECT {select} FROM {src}{where}{group}{having}"
    if draw(st.integers(0, 4)) == 0:  # the same, through a CTE
        sql = f"WITH c AS (SELECT * FROM {table}) " + sql.replace(f"FROM {table} ", "FROM c ", 1).replace(
            f"FROM {table})", "FROM c)", 1
        )
    return sql


@pytest.mark.slow
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(db=databases(), qs=st.lists(queries(), min_size=QUERIES, max_size=QUERIES))
def test_neighbouring_databases(pair: Pair, db: tuple[list[dict[str, Any]], list[dict[str, Any]], str], qs: list[str]) -> None:
    rows, added, how = db
    pair.load(rows, added)
    s, s_prime = pair.sessions
    failures = []
    for sql in qs:
        # in the row-level table one row is one unit: a neighbour of several rows is not a neighbour there
        if len(added) != 1 and ("FROM t " in sql + " " or "FROM t)" in sql):
            continue
        eps = pair.epsilon()
        problems = compare(exact_release(s, sql, eps), exact_release(s_prime, sql, eps))
        if problems:
            failures.append(f"{sql}\n  neighbour ({how}): + {added}\n  " + "\n  ".join(problems))
    assert not failures, f"D = {rows}\n" + "\n".join(failures)
