"""The relations one query joins are bounded by its shape, before anything plans or runs it.

DuckDB's planning time grows much faster than the number of relations it joins: 200 pinned ``JOIN pub pI ON pI.pk =
t.x`` (2,200 tokens) took 17 s to run once charged, and a derived table of 150 chained self-joins made the free
join-factor probe take 7.7 s (red team s26, A1). The parse pass counts the relations in every scope with each CTE
reference expanded (``parse.table_references``) and refuses past ``Limits.max_table_references``, free: the same
check for the API, the CLI and `veil serve` (whose sessions parse with the same limit). Each family below is exact
at the limit: one relation fewer is accepted, one more refused, whatever the shape that holds them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from fractions import Fraction
from pathlib import Path

import pandas as pd
import pytest
import sqlglot
from click.testing import CliRunner

from veil.cli.main import cli
from veil.errors import QueryTooComplex
from veil.policy import load_policy
from veil.proxy._testing import exact_session
from veil.proxy.parse import DEFAULT_LIMITS, Limits, parse, table_references
from veil.server.limits import ServerLimits
from veil.store.warehouse import write_table

LIMIT = DEFAULT_LIMITS.max_table_references


def _star(n: int) -> str:
    """t and n − 1 pinned joins of one public table: n relations."""
    return "SELECT COUNT(*) AS n FROM t " + " ".join(f"JOIN pub p{i} ON p{i}.pk = t.x" for i in range(1, n))


def _commas(n: int) -> str:
    return "SELECT COUNT(*) AS n FROM t, " + ", ".join(f"pub p{i}" for i in range(1, n)) + " WHERE p1.pk = t.x"


def _chained_derived(n: int) -> str:
    """A derived table of n − 1 chained self-joins of a public table, joined to t (red team s26's probe)."""
    inner = "SELECT p1.pk AS pk FROM pub p1 " + " ".join(f"JOIN pub p{i} ON p{i}.pk = p{i - 1}.pk" for i in range(2, n))
    return f"SELECT COUNT(*) AS n FROM t JOIN ({inner}) AS d ON d.pk = t.x"


def _nested_derived(n: int) -> str:
    """Derived tables nested in one another, each joining up to three more public tables: n relations."""
    sql, joined, level = "SELECT p1.pk AS pk FROM pub p1", 2, 0
    while joined < n:
        level += 1
        more = range(joined, min(joined + 3, n))
        joins = " ".join(f"JOIN pub p{i} ON p{i}.pk = d{level}.pk" for i in more)
        sql = f"SELECT d{level}.pk AS pk FROM ({sql}) AS d{level} {joins}"
        joined += len(more)
    return f"SELECT COUNT(*) AS n FROM t JOIN ({sql}) AS d ON d.pk = t.x"


def _cte_referenced(n: int) -> str:
    """A CTE of two public tables referenced k times (plus the rest joined directly): each reference counts 2."""
    k, rest = divmod(n - 1, 2)
    cte = "WITH c AS (SELECT a.pk AS pk FROM pub a JOIN pub b ON a.pk = b.pk) "
    refs = " ".join(f"JOIN c c{i} ON c{i}.pk = t.x" for i in range(k))
    more = " ".join(f"JOIN pub p{i} ON p{i}.pk = t.x" for i in range(rest))
    return f"{cte}SELECT COUNT(*) AS n FROM t {refs} {more}"


def _cte_chain(n: int) -> str:
    """Each CTE joins the previous one to one more table: the last, referenced once, stands for n − 1 relations."""
    ctes = ["c1 AS (SELECT pk FROM pub)"]
    ctes += [f"c{i} AS (SELECT c{i - 1}.pk AS pk FROM c{i - 1} JOIN pub p ON p.pk = c{i - 1}.pk)" for i in range(2, n)]
    return f"WITH {', '.join(ctes)} SELECT COUNT(*) AS n FROM t JOIN c{n - 1} AS c ON c.pk = t.x"


def _subqueries(n: int) -> str:
    """Public subqueries in WHERE (refused later by validate; still counted, and counted first)."""
    where = " AND ".join(f"t.x IN (SELECT pk FROM pub p{i})" for i in range(1, n))
    return f"SELECT COUNT(*) AS n FROM t WHERE {where}"


SHAPES: dict[str, Callable[[int], str]] = {
    "star": _star, "commas": _commas, "chained_derived": _chained_derived, "nested_derived": _nested_derived,
    "cte_referenced": _cte_referenced, "cte_chain": _cte_chain, "subqueries": _subqueries,
}  # fmt: skip


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("n", [LIMIT - 1, LIMIT, LIMIT + 1, LIMIT + 2, 4 * LIMIT])
def test_the_relations_are_counted_and_limited_exactly(shape: str, n: int) -> None:
    sql = SHAPES[shape](n)
    assert table_references(sqlglot.parse_one(sql, read="postgres")) == n
    if n <= LIMIT:
        parse(sql)
        return
    with pytest.raises(QueryTooComplex) as info:
        parse(sql)
    assert f"joins {n:,} tables" in info.value.message and f"limit of {LIMIT}" in info.value.message
    assert info.value.hint and info.value.sqlstate == "54001"


@pytest.mark.parametrize("levels", [4, 5, 6, 60])
def test_ctes_that_double_one_another_are_counted_in_full_and_refused_quickly(levels: int) -> None:
    ctes = ["c0 AS (SELECT pk FROM pub)"]
    ctes += [f"c{i} AS (SELECT a.pk AS pk FROM c{i - 1} a JOIN c{i - 1} b ON a.pk = b.pk)" for i in range(1, levels + 1)]
    sql = f"WITH {', '.join(ctes)} SELECT COUNT(*) AS n FROM t JOIN c{levels} AS c ON c.pk = t.x"
    assert table_references(sqlglot.parse_one(sql, read="postgres")) == 2**levels + 1
    start = time.thread_time()
    if 2**levels + 1 <= LIMIT:
        parse(sql)
    else:
        with pytest.raises(QueryTooComplex, match=f"joins {2**levels + 1:,} tables"):
            parse(sql)
    assert time.thread_time() - start < 0.5


@pytest.mark.parametrize(
    ("sql", "count"),
    [
        ("SELECT 1 FROM a UNION ALL SELECT 1 FROM b JOIN c ON true", 3),  # both sides of a set operation
        ("SELECT 1 FROM a EXCEPT (SELECT 1 FROM b INTERSECT SELECT 1 FROM c)", 3),
        ("WITH c AS (SELECT 1 FROM a, b) SELECT 1 FROM c UNION SELECT 1 FROM c", 4),  # a WITH over a set operation
        ("WITH c AS (SELECT 1) SELECT 1 FROM c, c AS d, (SELECT 2) AS e", 3),  # relations over no table count once
        ("WITH c AS (SELECT 1 FROM a, b) SELECT 1 FROM t", 1),  # a CTE nothing references joins nothing
        # an inner WITH shadows the outer CTE of its name, for its own query only
        ("WITH c AS (SELECT 1 FROM a, b, d) SELECT 1 FROM c, (WITH c AS (SELECT 1 FROM a) SELECT 1 FROM c) AS x", 4),
        ("WITH C AS (SELECT 1 FROM a, b) SELECT 1 FROM c, c", 4),  # names fold to lower case
        # quoted names differing only in case: each reference counts as the larger (red team s29 A2)
        ('WITH "A" AS (SELECT 1 FROM a, b), "a" AS (SELECT 1) SELECT 1 FROM "A", "A"', 4),
        ('WITH "a" AS (SELECT 1), "A" AS (SELECT 1 FROM a, b) SELECT 1 FROM "a"', 2),
        ("WITH c AS (SELECT 1 FROM a, b), e AS (SELECT 1 FROM c, c) SELECT 1 FROM e, e", 8),
        ("SELECT (SELECT MAX(pk) FROM pub) FROM t WHERE EXISTS (SELECT 1 FROM pub, pub q)", 4),
    ],
)
def test_every_scope_is_counted(sql: str, count: int) -> None:
    assert table_references(sqlglot.parse_one(sql, read="postgres")) == count


def test_the_limit_is_a_setting_the_server_keeps() -> None:
    """`veil serve`'s sessions parse with its query limits: the table limit is kept (not reset by its token limits)."""
    assert ServerLimits().query_limits.max_table_references == LIMIT
    assert ServerLimits(max_query_tokens=4000).query_limits.max_table_references == LIMIT
    parse(_star(LIMIT + 5), limits=Limits(max_table_references=LIMIT + 5))
    with pytest.raises(QueryTooComplex):
        parse(_star(LIMIT + 5), limits=ServerLimits().query_limits)


POLICY = """\
[database]
path = "w.duckdb"
[ledger]
path = "l.sqlite"
[tables.t]
privacy_unit = "row"
[tables.t.columns]
x = { type = "int", lower = 0, upper = 9 }
[tables.pub]
public = true
[tables.pub.columns]
pk = { type = "int" }
[analysts.a]
epsilon = 1000
"""


@pytest.fixture(scope="module")
def policy_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder: Path = tmp_path_factory.mktemp("refs")
    (folder / "policy.toml").write_text(POLICY, encoding="utf-8")
    policy = load_policy(folder / "policy.toml")
    write_table(policy, "t", pd.DataFrame({"x": list(range(10))}), replace=True)
    write_table(policy, "pub", pd.DataFrame({"pk": pd.array([1, 2, 3], dtype="Int64")}), replace=True, public=True)
    return folder / "policy.toml"


@pytest.fixture(scope="module")
def session(policy_path: Path) -> Iterator[object]:
    with exact_session(load_policy(policy_path), "a") as s:
        yield s


@pytest.mark.parametrize("shape", ["star", "chained_derived", "cte_referenced"])
def test_a_query_past_the_limit_is_refused_free_and_fast_at_every_interface(
    session: object, policy_path: Path, shape: str
) -> None:
    sql = SHAPES[shape](LIMIT + 1)
    before = session.budget().spent  # type: ignore[attr-defined]
    for run in (session.explain, session.execute):  # type: ignore[attr-defined]
        start = time.thread_time()
        with pytest.raises(QueryTooComplex, match="joins"):
            run(sql, epsilon=Fraction(1, 100))
        assert time.thread_time() - start < 0.5
    assert session.budget().spent == before  # type: ignore[attr-defined]
    res = CliRunner().invoke(cli, ["explain", "--policy", str(policy_path), "--analyst", "a", "--", sql])
    assert res.exit_code == 2 and "54001" in res.output and f"limit of {LIMIT}" in res.output, res.output


def test_a_query_at_the_limit_is_answered(session: object, policy_path: Path) -> None:
    """At the limits the query is planned, charged and answered: the limits refuse only what is past them. A query
    over private rows has the tighter limit of ``join_order.MAX_PRIVATE_JOIN_RELATIONS`` (session 24: past it DuckDB's
    greedy join orderer could put the private rows on a join's build side), and is refused free one past it."""
    from veil.errors import QueryTooComplex
    from veil.proxy.join_order import MAX_PRIVATE_JOIN_RELATIONS

    assert MAX_PRIVATE_JOIN_RELATIONS < LIMIT
    ans = session.execute(_star(MAX_PRIVATE_JOIN_RELATIONS), epsilon=Fraction(1, 100))  # type: ignore[attr-defined]
    assert len(ans.rows) == 1
    before = session.budget().spent  # type: ignore[attr-defined]
    with pytest.raises(QueryTooComplex) as refused:
        session.execute(_star(MAX_PRIVATE_JOIN_RELATIONS + 1), epsilon=Fraction(1, 100))  # type: ignore[attr-defined]
    assert refused.value.sqlstate == "54001"
    assert session.budget().spent == before  # type: ignore[attr-defined]
    sql = _star(MAX_PRIVATE_JOIN_RELATIONS + 1)
    res = CliRunner().invoke(cli, ["explain", "--policy", str(policy_path), "--analyst", "a", "--", sql])
    assert res.exit_code == 2 and "54001" in res.output, res.output
    assert f"limit of {MAX_PRIVATE_JOIN_RELATIONS}" in res.output, res.output
