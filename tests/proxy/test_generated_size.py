"""Planning work is bounded by the size of what Veil generates, checked before it is built.

The plan clamps each aggregate argument (up to 16 copies) and the rewrite copies each statistic's clamped argument
again (centred, clamped, squared, once per statistic): VARIANCE of a 160-branch CASE generated 33,000 nodes and took
5 s to explain, free (red team s23, A2). ``rewrite.check_generated_size`` prices each statistic's copies as the
rewrite will make them (``argument_copies``); the property: that price is never below the nodes actually generated
(so the limit bounds the work), over argument shapes, sizes, wrappers and aggregates — and beyond the limit a query
is refused free, quickly.

Every statement also holds its own copy of the statement around the aggregates (FROM with its joins, derived tables
and CTEs, WHERE, GROUP BY, the keys), made total again: one per quantile histogram. A 450-branch CASE key with 50
``MEDIAN(x + i)`` (3,159 tokens) took 21 s to explain, free (red team s26, A2). The price counts those copies too,
and the check refuses past the limit what the statements copy beyond the query's own first statement.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from veil.errors import QueryTooComplex, Unsupported
from veil.policy import load_policy
from veil.proxy import pipeline
from veil.proxy._testing import exact_session
from veil.proxy.catalog import public_types
from veil.proxy.rewrite import generated_size_bound
from veil.store.warehouse import write_table

POLICY = """\
[database]
path = "w.duckdb"
[ledger]
path = "l.sqlite"
[tables.t]
privacy_unit = "row"
[tables.t.columns]
x = { type = "int", lower = 0, upper = 9 }
y = { type = "float", lower = -3.3, upper = 1000.7 }
d = { type = "date" }
[tables.pub]
public = true
[tables.pub.columns]
pk = { type = "int" }
pn = { type = "category" }
pv = { type = "float" }
pd = { type = "date" }
[analysts.a]
epsilon = 1000
"""


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    folder: Path = tmp_path_factory.mktemp("size")
    (folder / "policy.toml").write_text(POLICY, encoding="utf-8")
    policy = load_policy(folder / "policy.toml")
    write_table(policy, "t", pd.DataFrame({"x": [1, 2, 3], "y": [0.5, 7.0, 9.25], "d": ["2020-01-0{i}" for i in (1, 2, 3)]}),
                replace=True)  # fmt: skip
    pub = {"pk": pd.array([1, 2, 3], dtype="Int64"), "pn": ["p", "q", "r"], "pv": [1.5, 2.5, 3.5], "pd": ["2021-01-01"] * 3}
    write_table(policy, "pub", pd.DataFrame(pub), replace=True, public=True)
    with exact_session(policy, "a") as s:
        yield s


def _case(n: int) -> str:
    return "CASE " + " ".join(f"WHEN x = {i % 10} THEN y * {i % 7 + 1}" for i in range(n)) + " END"


AGGREGATES = ["VARIANCE", "SUM", "AVG", "MEDIAN", "COUNT"]
WRAPPERS = ["{}", "ROUND({})", "{} + 1e17", "CAST({} AS REAL)", "FLOOR({} / 3)"]


def _priced_and_built(session: object, sql: str) -> tuple[int, int]:
    state = pipeline.run(session._state(sql, 1), session._env, until="plan")  # type: ignore[attr-defined]
    p = state.plan
    assert p is not None
    price = generated_size_bound(p, public_types(session._env.catalog(), p.analysis.tables))  # type: ignore[attr-defined]
    state = pipeline.run(state, session._env, until="rewrite")  # type: ignore[attr-defined]
    q = state.queries
    built = sum(1 for t in [q.main, *(g for _, g in q.grids)] if t is not None for _ in t.walk())
    return price, built


@pytest.mark.parametrize("agg", AGGREGATES)
@pytest.mark.parametrize("wrap", WRAPPERS)
@pytest.mark.parametrize("n", [3])
def test_the_price_bounds_what_is_generated(session: object, agg: str, wrap: str, n: int) -> None:
    price, built = _priced_and_built(session, f"SELECT {agg}({wrap.format(_case(n))}) FILTER (WHERE x > 1) FROM t")
    # the template (FROM, WHERE, keys, aliases) adds a few nodes per statement beyond the arguments
    assert built <= price + 60, (agg, wrap, price, built)


@pytest.mark.parametrize("sql", [f"SELECT VARIANCE({_case(160)}) FROM t", f"SELECT SUM(ROUND({_case(400)})) FROM t",
                                 f"SELECT MEDIAN(ROUND({_case(60)})) FROM t", f"SELECT AVG({_case(90)}) FROM t"])  # fmt: skip
def test_a_query_past_the_limit_is_refused_free_and_fast(session: object, sql: str) -> None:
    before = session.budget().spent  # type: ignore[attr-defined]
    start = time.thread_time()
    with pytest.raises(QueryTooComplex, match="too large to plan"):
        session.explain(sql, epsilon=1)  # type: ignore[attr-defined]
    assert time.thread_time() - start < 2.0
    with pytest.raises(QueryTooComplex):
        session.execute(sql, epsilon=1)  # type: ignore[attr-defined]
    assert session.budget().spent == before  # type: ignore[attr-defined]


# --- the statement around the aggregates, copied into every statement (red team s26, A2) ----------------------


def _text_case(n: int) -> str:
    return "CASE " + " ".join(f"WHEN x = {i} THEN 'a{i}'" for i in range(n)) + " END"


def _partial_case(n: int) -> str:
    """Divisions, real literals, casts and dates: the nodes make_total grows most."""
    return (
        "CASE "
        + " ".join(f"WHEN y / (x - {i}) > {i}.5 THEN CAST(x AS DECIMAL(10, 2)) + {i} % (x + 1)" for i in range(n))
        + " END"
    )


#: Where the statement around the aggregates grows: (select-list prefix, FROM/WHERE/GROUP BY suffix), by size n.
CLAUSES = {
    "group_by": lambda n: (f"{_text_case(n)} AS g, ", "FROM t GROUP BY 1"),
    "where": lambda n: ("", f"FROM t WHERE {_text_case(n)} = 'a1'"),
    "where_partial": lambda n: ("", f"FROM t WHERE {_partial_case(n)} > 1"),
    # at most 8 public tables: a query over private rows joins at most 9 relations (join_order)
    "joins": lambda n: ("", "FROM t " + " ".join(f"JOIN pub p{i} ON p{i}.pk = t.x" for i in range(min(n, 8)))),
    "public_key": lambda n: ("p0.pn, ", "FROM t " + " ".join(f"JOIN pub p{i} ON p{i}.pk = t.x" for i in range(min(n, 8)))
                             + " GROUP BY p0.pn"),
    "derived": lambda n: ("", f"FROM (SELECT x, y, d FROM t WHERE {_partial_case(n)} <> 0) AS s WHERE s.x > 1"),
    "cte": lambda n: ("", f"FROM t JOIN (SELECT pk FROM pub WHERE {_text_case(n).replace('x =', 'pk =')} <> 'a') AS q "
                      "ON q.pk = t.x"),
    "date_keys": lambda n: ("EXTRACT(WEEK FROM d) AS w, DATE_TRUNC('week', d) AS v, ",
                            f"FROM t WHERE {_partial_case(n)} <> 0 GROUP BY 1, 2"),
}  # fmt: skip


def _quantiles(m: int) -> str:
    return ", ".join(f"{('MEDIAN(x + {0})', 'QUANTILE_CONT(y * {0}, 0.3)')[i % 2].format(i)} AS m{i}" for i in range(m))


@pytest.mark.parametrize("clause", sorted(CLAUSES))
@pytest.mark.parametrize(("n", "m"), [(2, 1), (6, 3), (10, 4)])
def test_the_price_bounds_every_statements_copy_of_the_query(session: object, clause: str, n: int, m: int) -> None:
    prefix, rest = CLAUSES[clause](n)
    price, built = _priced_and_built(session, f"SELECT {prefix}{_quantiles(m)}, SUM(y) AS s {rest}")
    assert built <= price, (clause, n, m, price, built)


@pytest.mark.slow
@pytest.mark.parametrize(
    "sql",
    [
        f"SELECT {_text_case(200)} AS g, {_quantiles(20)} FROM t GROUP BY 1",  # red team s26's, smaller
        f"SELECT {_quantiles(20)} FROM t WHERE {_text_case(200)} = 'a1'",
        f"SELECT {_quantiles(12)} FROM t WHERE {_partial_case(60)} > 1",
        f"SELECT {_quantiles(64)} FROM t " + " ".join(f"JOIN pub p{i} ON p{i}.pk = t.x" for i in range(8)),
    ],
    ids=["group_by", "where", "where_partial", "joins"],
)
def test_many_copies_of_the_query_are_refused_free_and_fast(session: object, sql: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_rewrite(*args: object, **kwargs: object) -> None:
        raise AssertionError("the rewrite was reached: the copies were being made")

    monkeypatch.setattr(pipeline, "rewrite", no_rewrite)  # refused before the copies are made
    before = session.budget().spent  # type: ignore[attr-defined]
    for run in (session.explain, session.execute):  # type: ignore[attr-defined]
        start = time.thread_time()
        with pytest.raises(QueryTooComplex, match="too large to plan"):
            run(sql, epsilon=1)
        assert time.thread_time() - start < 3.0  # 0.5 s on an idle 2-core host (s26: 450 branches × 50, 21 s)
    assert session.budget().spent == before  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT COUNT(*) AS n FROM t WHERE x IN (" + ", ".join(str(i) for i in range(1000)) + ")",  # one statement
        f"SELECT {_text_case(100)} AS g, SUM(y) AS s, COUNT(*) AS n FROM t GROUP BY 1",
        f"SELECT {_quantiles(4)} FROM t WHERE {_text_case(60)} <> 'a1'",
        f"SELECT p0.pn, {_quantiles(3)} FROM t "
        + " ".join(f"JOIN pub p{i} ON p{i}.pk = t.x" for i in range(8))
        + " GROUP BY p0.pn",
    ],
    ids=["in_list", "one_statement_case_key", "four_quantiles", "three_quantiles_eight_joins"],
)
def test_ordinary_queries_with_copies_are_planned(session: object, sql: str) -> None:
    """The query's own first statement is not counted against the limit (the parse limits bound it): a long IN list
    or CASE key in a one-statement query, and a few quantiles over a moderate WHERE, are planned."""
    session.explain(sql, epsilon=1)  # type: ignore[attr-defined]


def _iso_nested(k: int, inner: str = "d") -> str:
    for i in range(k):
        inner = f"DATE_TRUNC('{('week', 'isoyear')[i % 2]}', {inner})"
    return inner


@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("m", [1, 4])
def test_the_price_counts_the_copies_iso_week_guards_make(session: object, k: int, m: int) -> None:
    """An ISO-week field's or unit's guard holds its value twice: nested, 2ᵏ copies, in the key and the WHERE."""
    key = f"EXTRACT(WEEK FROM {_iso_nested(k - 1)})"
    sql = f"SELECT {key} AS w, {_quantiles(m)} FROM t WHERE {_iso_nested(k, 'd')} > DATE '2020-01-01' GROUP BY 1"
    price, built = _priced_and_built(session, sql)
    assert built <= price, (k, m, price, built)


@pytest.mark.parametrize("k", [4, 5, 20])
def test_iso_week_guards_nested_past_the_limit_are_refused_free_and_fast(session: object, k: int) -> None:
    """Each nested guard doubles the generated SQL of the first statement too (13 deep: 4.8 s to explain, free)."""
    start = time.thread_time()
    with pytest.raises(Unsupported, match=f"ISO-week fields or units .* {k if k < 5 else 4} deep; the limit is 3"):
        session.explain(f"SELECT COUNT(*) AS n FROM t WHERE {_iso_nested(k)} > DATE '2020-01-01'", epsilon=1)  # type: ignore[attr-defined]
    assert time.thread_time() - start < 0.5
