"""Per-row work the data can make 1,000× dearer is priced at its dearest, before the charge.

Two classes from red team s11:

* **A TRY that raises.** Every partial operation of the generated SQL is wrapped in ``TRY`` (NULL instead of
  an error, :mod:`veil.proxy.totality`). DuckDB evaluates a raising ``TRY`` by throwing and catching an
  exception, 7–11 µs a row against ~10 ns, so which of one person's rows overflow decided the running time
  (3–6 s against 0.01 s). The plan pass now counts each such operation as raising on every row one person
  brings (:data:`TRY_EVALUATIONS`), and ``measure`` counts them from the same rule ``make_total`` uses
  (:func:`needs_try`).
* **A TRIM character set computed per row.** DuckDB rebuilds the set for every row; a set taken from one
  person's 1,024-character value cost 5 s. The set must now be a text literal.
"""

from __future__ import annotations

from collections.abc import Iterator

import duckdb
import pandas as pd
import pytest
import sqlglot
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from sqlglot import exp
from sqlglot.optimizer.qualify import qualify

from tests.engines.test_conformance import CASES
from tests.support.warehouse import policy_with_tables
from veil.errors import Unsupported, VeilError
from veil.proxy._testing import exact_session, generated_sql
from veil.proxy.expansion import measure
from veil.proxy.multiplicity import MAX_PERSON_EVALUATIONS, TRY_EVALUATIONS
from veil.proxy.session import QuerySession
from veil.proxy.totality import make_total

SCHEMA = {"t": {"s": "VARCHAR", "x": "BIGINT", "d": "DATE", "f": "DOUBLE"}, "p": {"n": "VARCHAR", "k": "BIGINT"}}

EXPRESSIONS = [
    "t.x + 1 > 2",
    "t.x * 4611686018427387904 > 0",
    "(t.x - 3) * (t.x + 4) / (t.x % 7) > 0",
    "t.d + INTERVAL '292100' YEAR > DATE '2000-01-01'",
    "t.d + INTERVAL (t.s) DAY > DATE '2000-01-01'",
    "DATE_TRUNC('month', t.d) = DATE '2000-01-01'",
    "POWER(t.f, 2) + SQRT(t.f) + LN(t.f) + EXP(t.f) > 1",
    "ROUND(t.f / 3, 2) = ABS(-t.f)",
    "CAST(t.s AS BIGINT) > 2 AND CAST(t.x AS DOUBLE) < 3.5",
    "SUBSTRING(t.s, t.x, 2) = LEFT(p.n, t.x)",
    "COALESCE(t.x, 0) BETWEEN 1 AND 2 AND t.s IN ('a', 'b') AND LOWER(t.s) = 'a'",
    "-t.x < 1e300",
    "CASE WHEN t.x > 1 THEN t.x * 2 ELSE t.x % 2 END > 0",
]


def _tries(tree: exp.Expression) -> int:
    return sum(1 for _ in make_total(tree).find_all(exp.Try))


@pytest.mark.parametrize("where", EXPRESSIONS)
def test_measure_counts_every_try_the_rewrite_emits(where: str) -> None:
    tree = qualify(sqlglot.parse_one(f"SELECT COUNT(*) FROM t, p WHERE {where}"), schema=SCHEMA)
    assert measure(tree).partial == _tries(tree)


@pytest.fixture(scope="module")
def corpus_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[QuerySession]:
    from tests.engines.conftest import build

    with exact_session(build(tmp_path_factory.mktemp("corpus")), "alice") as s:
        yield s


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_try_of_the_generated_sql_is_priced(corpus_session: QuerySession, name: str) -> None:
    """The conformance corpus (every construct of docs/sql.md): each TRY the engine runs wraps an operation
    that ``measure`` counts, so the raising-work bound sees all of them."""
    for sql in generated_sql(corpus_session, CASES[name]):
        tree = sqlglot.parse_one(sql, read="duckdb")
        assert sum(1 for _ in tree.find_all(exp.Try)) <= measure(tree).partial, sql


def test_references_carry_the_tries_behind_them() -> None:
    q = "WITH w AS (SELECT x * 2 + 1 AS v FROM t) SELECT COUNT(*) FROM w WHERE v > 0 AND v < 9 AND v <> 4"
    tree = qualify(sqlglot.parse_one(q), schema=SCHEMA)
    assert measure(tree).partial >= 2 * 3  # the CTE's two operations, behind each of three references


POLICY = """\
[database]
path = "w.duckdb"
[ledger]
path = "l.sqlite"
[tables.t]
privacy_unit = "u"
max_rows_per_unit = 50
[tables.t.columns]
u = { type = "int" }
s = { type = "category", max_length = 256 }  # read across a join: at most 504 characters (multiplicity.MAX_JOIN_ROW_BYTES)
x = { type = "int", lower = 0, upper = 10 }
d = { type = "date" }
[tables.pub]
public = true
[analysts.a]
epsilon = 1000
"""


#: A public table of 2,000 rows: unpinned, it multiplies one person's rows by 2,000.
PUB = pd.DataFrame({"k": range(2000), "n": ["q"] * 2000})


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[QuerySession]:
    rows = pd.DataFrame({"u": [i // 2 for i in range(40)], "s": ["a", "b"] * 20, "x": range(40), "d": pd.Timestamp("2000-01-01")})
    policy = policy_with_tables(tmp_path_factory.mktemp("raising"), POLICY, {"t": rows}, {"pub": PUB})
    with exact_session(policy, "a") as s:
        yield s


RAISING_OVER_A_JOIN = [
    # 50 rows × 2,000 joined rows × 1,000 per operation that may raise: 10⁸ > 2·10⁷ with one operation
    "SELECT COUNT(*) FROM t CROSS JOIN pub p WHERE t.d + INTERVAL '292100' YEAR > DATE '2000-01-01'",
    "SELECT COUNT(*) FILTER (WHERE (t.x - 3) * 4611686018427387904 > 0) FROM t CROSS JOIN pub p",
    "SELECT COUNT(*) FROM t CROSS JOIN pub p WHERE p.k / t.x > 1",
    "SELECT SUM(t.x) FROM t CROSS JOIN pub p WHERE t.d + INTERVAL (t.s) DAY > DATE '2000-01-01'",
]


@pytest.mark.parametrize("sql", RAISING_OVER_A_JOIN)
def test_operations_that_may_raise_over_one_persons_joined_rows_are_refused_free(session: QuerySession, sql: str) -> None:
    before = session.budget().spent
    with pytest.raises(Unsupported, match="may raise"):
        session.execute(sql, epsilon=1)
    assert session.budget().spent == before


ANSWERED = [
    "SELECT COUNT(*) FROM t WHERE t.x * 2 + 1 > 3",  # 50 rows × a few operations: far below the ceiling
    "SELECT COUNT(*) FROM t WHERE t.d + INTERVAL '1' YEAR > DATE '2000-06-01'",
    "SELECT COUNT(*) FROM t JOIN pub p ON p.k = t.x WHERE p.k * 2 > t.x",  # pinned: one joined row
    "SELECT COUNT(*) FROM t CROSS JOIN pub p WHERE t.x = p.k",  # comparisons over the join do not raise
]


@pytest.mark.parametrize("sql", ANSWERED)
def test_ordinary_arithmetic_is_answered(session: QuerySession, sql: str) -> None:
    session.execute(sql, epsilon=1)


def test_the_price_is_what_the_docs_say() -> None:
    assert TRY_EVALUATIONS == 1_000 and MAX_PERSON_EVALUATIONS == 2 * 10**7


COMPUTED_SETS = [
    "TRIM(BOTH t.s FROM p.n)",
    "TRIM(BOTH p.n FROM t.s)",
    "LTRIM(t.s, t.s)",
    "RTRIM(p.n, LOWER(t.s))",
    "BTRIM(t.s, t.s || 'x')",
    "TRIM(LEADING (t.s) FROM p.n)",
    "TRIM(TRAILING CAST(t.x AS VARCHAR) FROM p.n)",
]


@pytest.mark.parametrize("expr", COMPUTED_SETS)
def test_a_computed_trim_set_is_refused_free(session: QuerySession, expr: str) -> None:
    before = session.budget().spent
    with pytest.raises(Unsupported, match="TRIM removes must be a text literal"):
        session.execute(f"SELECT COUNT(*) FROM t JOIN pub p ON p.k = t.x WHERE {expr} = ''", epsilon=1)
    assert session.budget().spent == before


def test_a_computed_trim_set_behind_a_cte_is_refused(session: QuerySession) -> None:
    sql = "WITH w AS (SELECT s AS chars, x FROM t) SELECT COUNT(*) FROM w WHERE TRIM(BOTH chars FROM 'abc') = ''"
    with pytest.raises(Unsupported, match="TRIM removes must be a text literal"):
        session.execute(sql, epsilon=1)


@pytest.mark.parametrize(
    "expr", ["TRIM(t.s)", "TRIM(BOTH 'ab' FROM t.s)", "LTRIM(t.s, 'a')", "RTRIM(t.s)", "TRIM(LEADING ('a') FROM t.s)"]
)
def test_literal_trim_sets_are_answered(session: QuerySession, expr: str) -> None:
    session.execute(f"SELECT COUNT(*) FROM t WHERE {expr} = 'b'", epsilon=1)


# --- Arithmetic the declared bounds keep from overflowing is not priced (red team s12, L2) ---------------------

BOUNDED_POLICY = POLICY.replace(
    'x = { type = "int", lower = 0, upper = 10 }',
    'x = { type = "int", lower = -1000, upper = 1000 }\ny = { type = "int", lower = 0, upper = 2000000 }\n'
    'f = { type = "float", lower = -1e6, upper = 1e6 }',
)
#: Every corner of the bounds (interval arithmetic's extremes for + - *), as the bounded copy holds them.
CORNERS = pd.DataFrame(
    [(u, s, x, y, f) for u, (x, y, f) in enumerate(
        [(x, y, f) for x in (-1000, 0, 1000) for y in (0, 2000000) for f in (-1e6, 1e6)])
     for s in ("a",)],
    columns=["u", "s", "x", "y", "f"],
).assign(d=pd.Timestamp("2000-01-01"))  # fmt: skip


@pytest.fixture(scope="module")
def bounded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[QuerySession]:
    policy = policy_with_tables(tmp_path_factory.mktemp("bounded"), BOUNDED_POLICY, {"t": CORNERS}, {"pub": PUB})
    with exact_session(policy, "a") as s:
        yield s


def test_bounded_arithmetic_over_a_large_join_is_answered(bounded: QuerySession) -> None:
    # 50 rows × 2,000 joined rows: priced as raising, this was refused; the bounds keep x + 1, y * 3 - x exact
    bounded.execute("SELECT COUNT(*) FROM t CROSS JOIN pub p WHERE t.x + 1 <> p.k AND t.y * 3 - t.x > 0", epsilon=1)


@pytest.mark.parametrize(
    "where",
    [
        "t.y * t.y * t.y > 0",  # 8·10¹⁸: past INTEGER, so priced
        "t.x * 4611686018427387904 > 0",  # a literal past the bounds
        "p.k + 1 > 0",  # a public column has no declared bounds
        "t.d + INTERVAL '1' DAY > DATE '2000-01-01'",  # date arithmetic
    ],
)
def test_arithmetic_the_bounds_do_not_cover_is_still_priced(bounded: QuerySession, where: str) -> None:
    with pytest.raises(Unsupported, match="may raise"):
        bounded.execute(f"SELECT COUNT(*) FROM t CROSS JOIN pub p WHERE {where}", epsilon=1)


_LEAVES = st.sampled_from(
    ["t.x", "t.y", "t.f", "CAST(t.y AS INTEGER)", "CAST(t.x AS SMALLINT)", "1", "7", "1000", "65536", "2147483647", "0.5", "1e10"]
)


def _arith(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.tuples(children, st.sampled_from(["+", "-", "*"]), children).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        children.map(lambda c: f"(-{c})"),
        st.tuples(children, st.sampled_from(["REAL", "BIGINT", "DOUBLE", "VARCHAR"])).map(lambda t: f"CAST({t[0]} AS {t[1]})"),
    )


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(expr=st.recursive(_LEAVES, _arith, max_leaves=6))
@example(expr="(CAST(t.x AS SMALLINT) * 1000)")  # DuckDB keeps SMALLINT * literal a SMALLINT (red team s13, A1)
@example(expr="((CAST(t.x AS SMALLINT) * 7) * 7)")
@example(expr="((CAST(t.y AS INTEGER) * 1000) + t.x)")
@example(expr="CAST((t.x * 1e38) AS REAL)")  # REAL holds ±3.4·10³⁸ (red team s14)
@example(expr="CAST((t.y * 4611686018427387) AS BIGINT)")
def test_arithmetic_marked_as_unable_to_raise_never_raises_on_the_bounds(bounded: QuerySession, expr: str) -> None:
    """Soundness of the mark: every marked node, run without TRY over every corner of the bounds (the rows the
    bounded copy can hold at the extremes), returns without an error in DuckDB."""
    from veil.proxy import pipeline
    from veil.proxy.totality import CANNOT_RAISE

    try:
        state = pipeline.run(bounded._state(f"SELECT COUNT(*) FROM t WHERE {expr} > 0", 1), bounded._env, until="plan")
    except VeilError:
        return  # refused (e.g. a bound past 2^62): nothing runs
    assert state.analysis is not None
    table = bounded._env.bounded_table("t")
    con = duckdb.connect()
    con.execute(f"ATTACH '{bounded._env.policy.database_path}' AS w (READ_ONLY)")
    for node in state.analysis.tree.find_all(exp.Add, exp.Sub, exp.Mul, exp.Neg, exp.Cast):
        if node.meta.get(CANNOT_RAISE):
            total = make_total(node)  # its operands total (each priced on its own), the marked node itself bare
            bare = total.this if isinstance(total, exp.Try) else total
            if isinstance(bare, exp.TryCast):  # a failing TRY_CAST is slow, not an error: run the plain CAST
                bare = exp.Cast(this=bare.this, to=bare.args["to"])
            con.execute(f"SELECT {bare.sql(dialect='duckdb')} FROM w.{table} AS t").fetchall()  # raises if unsound
    con.close()


# --- Casts that may fail without raising (0.15–1 µs against ~5 ns) ---------------------------------------------


@pytest.mark.parametrize(
    "where",
    [
        "CAST(t.x * 1000000 AS SMALLINT) IS NULL AND CAST(t.x * 100 AS TINYINT) IS NULL",  # to a narrower number
        "CAST(t.x AS TINYINT) + CAST(t.x AS SMALLINT) > 0",
        "CAST(t.x * 1000000 AS DATE) IS NULL AND CAST(t.x AS BOOLEAN)",
    ],
)
def test_casts_that_may_fail_over_one_persons_joined_rows_are_priced(session: QuerySession, where: str) -> None:
    # 50 rows × 2,000 joined rows × 100 per cast: 10⁷ per cast, so three pass 2·10⁷ (one in each conjunct,
    # plus the last); text casts are usually refused sooner, by the text-work bound
    before = session.budget().spent
    with pytest.raises(Unsupported, match="casts that may fail"):
        session.execute(f"SELECT COUNT(*) FROM t CROSS JOIN pub p WHERE {where} AND CAST(t.x AS SMALLINT) > 0", epsilon=1)
    assert session.budget().spent == before


def test_casts_veil_builds_and_casts_to_text_are_not_priced(session: QuerySession) -> None:
    from veil.proxy import pipeline

    sql = "SELECT AVG(t.x), VARIANCE(t.x), MEDIAN(t.x) FROM t CROSS JOIN pub p WHERE CAST(t.x AS VARCHAR) <> p.n"
    state = pipeline.run(session._state(sql, 1), session._env, until="rewrite")
    assert state.queries is not None
    trees = [t for t in (state.queries.main, *(g for _, g in state.queries.grids)) if t is not None]
    assert sum(measure(t).casts for t in trees) == 0 and sum(measure(t).partial for t in trees) == 0
