"""Leftovers of session 17, items 1, 2 and 5: what PostgreSQL refuses is refused, free, with its SQLSTATE
(item 3, the bounded copy's reading of text dates: ``test_leftovers_s17_bounding.py``; item 4, the DP grid's ε:
``test_leftovers_s17_gate.py``).

* Item 1: an empty ``IN ()`` list (any operand, ``NOT IN``, a row, in any clause, public or private) was answered
  as false; PostgreSQL refuses it as a syntax error (42601). A derived table or CTE given more column names than
  its body has columns (``(SELECT a FROM t) AS d(a, b)``) was answered with the extra names dropped; PostgreSQL
  refuses it: ``table "d" has 1 columns available but 2 columns specified`` (42P10).
* Item 2: a literal cast of a text Python does not read as a date (``DATE 'infinity'``, ``TIMESTAMP '-infinity'``,
  ``DATE 'epoch'``, a year past 9999, BC, Feb 30) was left for each engine to read as its own constant (DuckDB's
  infinity, NULL on Spark). It is refused now (22007), with what to write instead.
* Item 5: ``PERCENTILE_CONT(0.5, 0.7) WITHIN GROUP (ORDER BY x)`` was answered as the median, the second fraction
  dropped silently; it is refused (42883) naming the function and the one argument it takes.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from veil.errors import QueryRejected

POLICY = """\
[database]
path = "wh.duckdb"
[ledger]
path = "ledger.sqlite"
[tables.t]
privacy_unit = "u"
max_rows_per_unit = 1
[tables.t.columns]
u = { type = "int" }
x = { type = "int", lower = 0, upper = 10 }
d = { type = "date" }
[tables.p]
public = true
[tables.p.columns]
a = { type = "int" }
[analysts.a]
epsilon = 1000.0
"""


def _policy(base: Path) -> Any:
    from veil.policy import load_policy
    from veil.store.warehouse import write_table

    (base / "policy.toml").write_text(POLICY, encoding="utf-8")
    policy = load_policy(base / "policy.toml")
    ints = pd.array([1, 2], dtype="Int64")
    write_table(policy, "t", pd.DataFrame({"u": ints, "x": ints, "d": [dt.date(2000, 1, 1)] * 2}))
    write_table(policy, "p", pd.DataFrame({"a": ints}))
    return policy


@pytest.fixture(scope="module")
def policy(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return _policy(tmp_path_factory.mktemp("s17"))


@pytest.fixture(scope="module")
def session(policy: Any) -> Iterator[Any]:
    from veil.proxy._testing import exact_session

    with exact_session(policy, "a") as s:
        yield s


def _refused(session: Any, sql: str) -> QueryRejected:
    before = session.budget().spent
    with pytest.raises(QueryRejected) as info:
        session.execute(sql)
    assert session.budget().spent == before, "a refusal must be free"
    return info.value


# --- item 1: IN () -----------------------------------------------------------------------------------------------

EMPTY_IN = {
    "where": "SELECT COUNT(*) FROM t WHERE x IN ()",
    "not-in": "SELECT COUNT(*) FROM t WHERE x NOT IN ()",
    "row": "SELECT COUNT(*) FROM t WHERE (x, u) IN ()",
    "select-list": "SELECT x IN () AS b, COUNT(*) FROM t GROUP BY 1",
    "having": "SELECT x, COUNT(*) FROM t GROUP BY x HAVING COUNT(*) IN ()",
    "cte": "WITH c AS (SELECT x FROM t WHERE x IN ()) SELECT COUNT(*) FROM c",
    "unused-cte": "WITH c AS (SELECT x FROM t WHERE x IN ()) SELECT COUNT(*) FROM t",
    "public": "SELECT COUNT(*) FROM p WHERE a IN ()",
    "table-less": "SELECT 1 IN ()",
}


@pytest.mark.parametrize("sql", EMPTY_IN.values(), ids=EMPTY_IN.keys())
def test_an_empty_in_list_is_a_syntax_error(session: Any, sql: str) -> None:
    err = _refused(session, sql)
    assert err.sqlstate == "42601"
    assert "IN ()" in err.message and err.hint is not None and "IN (1, 2)" in err.hint


def test_a_listed_in_is_still_answered(session: Any) -> None:
    assert session.execute("SELECT COUNT(*) FROM t WHERE x IN (1)").rows == ((1,),)
    assert session.execute("SELECT COUNT(*) FROM p WHERE a NOT IN (1)").rows == ((1,),)


# --- item 1: too many column names -------------------------------------------------------------------------------

TOO_MANY_NAMES = {
    "derived": ("SELECT COUNT(*) FROM (SELECT x FROM t) AS d(a, b)", 'table "d" has 1 columns available but 2'),
    "double-parens": ("SELECT COUNT(*) FROM ((SELECT x FROM t)) AS d(a, b)", 'table "d" has 1 columns available but 2'),
    "star": ("SELECT COUNT(*) FROM (SELECT * FROM t) AS d(a, b, c, e)", 'table "d" has 3 columns available but 4'),
    "nested": (
        "SELECT COUNT(*) FROM (SELECT * FROM (SELECT x, u FROM t) AS e(p)) AS d(a, b, c)",
        'table "d" has 2 columns available but 3',
    ),
    "inner": ("SELECT COUNT(*) FROM (SELECT * FROM (SELECT x FROM t) AS e(p, q)) AS d", 'table "e" has 1 columns'),
    "cte": ("WITH c(a, b) AS (SELECT x FROM t) SELECT COUNT(*) FROM c", 'WITH query "c" has 1 columns available but 2'),
    "unused-cte": ("WITH c(a, b) AS (SELECT x FROM t) SELECT COUNT(*) FROM t", 'WITH query "c" has 1 columns'),
    "public": ("SELECT COUNT(*) FROM (SELECT a FROM p) AS d(a, b)", 'table "d" has 1 columns available but 2'),
    "table-less": ("SELECT a FROM (SELECT 1 AS a) AS d(a, b)", 'table "d" has 1 columns available but 2'),
}


@pytest.mark.parametrize(("sql", "message"), TOO_MANY_NAMES.values(), ids=TOO_MANY_NAMES.keys())
def test_more_column_names_than_columns_is_refused(session: Any, sql: str, message: str) -> None:
    err = _refused(session, sql)
    assert err.sqlstate == "42P10"
    assert message in err.message and "columns specified" in err.message
    assert err.hint is not None and "Name at most" in err.hint


def test_as_many_or_fewer_names_are_still_answered(session: Any) -> None:
    assert session.execute("SELECT COUNT(a) FROM (SELECT x FROM t) AS d(a)").rows == ((2,),)
    assert session.execute("SELECT COUNT(u) FROM (SELECT x, u FROM t) AS d(a)").rows == ((2,),)  # PostgreSQL keeps u
    assert session.execute("WITH c(a) AS (SELECT x FROM t) SELECT COUNT(a) FROM c").rows == ((2,),)


def test_the_cli_refuses_both_with_their_sqlstate(policy: Any) -> None:
    from click.testing import CliRunner

    from veil.cli.main import cli

    runner = CliRunner()
    for sql, state in (
        ("SELECT COUNT(*) FROM t WHERE x IN ()", "42601"),
        ("SELECT COUNT(*) FROM (SELECT x FROM t) AS d(a, b)", "42P10"),
        ("SELECT COUNT(*) FROM t WHERE d < DATE 'infinity'", "22007"),
        ("SELECT PERCENTILE_CONT(0.5, 0.7) WITHIN GROUP (ORDER BY x) FROM t", "42883"),
    ):
        res = runner.invoke(cli, ["query", "--policy", str(policy.path), "--analyst", "a", "--epsilon", "1", sql])
        assert res.exit_code == 2, (sql, res.output)
        assert f"[{state}]" in res.output, (sql, res.output)


# --- item 2: literal casts of texts Python does not read ----------------------------------------------------------

UNREADABLE = {
    "date-infinity": "SELECT COUNT(*) FROM t WHERE d < DATE 'infinity'",
    "timestamp-minus-infinity": "SELECT COUNT(*) FROM t WHERE d > TIMESTAMP '-infinity'",
    "epoch": "SELECT COUNT(*) FROM t WHERE d > DATE 'epoch'",
    "cast": "SELECT COUNT(*) FROM t WHERE d < CAST('infinity' AS DATE)",
    "cast-paren": "SELECT COUNT(*) FROM t WHERE d < CAST(('Infinity') AS TIMESTAMP)",
    "now": "SELECT COUNT(*) FROM t WHERE d < TIMESTAMP 'now'",
    "today": "SELECT COUNT(*) FROM t WHERE d < DATE 'today'",
    "bc": "SELECT COUNT(*) FROM t WHERE d > DATE '0044-03-15 BC'",
    "year-10000": "SELECT COUNT(*) FROM t WHERE d < DATE '10000-01-01'",
    "feb-30": "SELECT COUNT(*) FROM t WHERE d < DATE '2000-02-30'",
    "select-list": "SELECT DATE 'infinity' AS k, COUNT(*) FROM t GROUP BY 1",
    "public": "SELECT COUNT(*) FROM p WHERE DATE 'infinity' > DATE '2000-01-01'",
    "table-less": "SELECT DATE 'infinity'",
}


@pytest.mark.parametrize("sql", UNREADABLE.values(), ids=UNREADABLE.keys())
def test_a_literal_no_engine_reads_alike_is_refused(session: Any, sql: str) -> None:
    err = _refused(session, sql)
    assert err.sqlstate == "22007"
    assert "is not a date or time in ISO form" in err.message
    assert err.hint is not None and "DATE '9999-12-31'" in err.hint


def test_iso_literals_are_still_answered(session: Any) -> None:
    for sql in (
        "SELECT COUNT(*) FROM t WHERE d < DATE '2000-01-02'",
        "SELECT COUNT(*) FROM t WHERE d < TIMESTAMP '2000-01-01 12:00'",
        "SELECT COUNT(*) FROM t WHERE d = DATE '20000101'",  # Python reads it; written out in ISO form (s16)
        "SELECT COUNT(*) FROM t WHERE d < CAST(' 9999-12-31 ' AS DATE)",
    ):
        assert session.execute(sql).rows == ((2,),), sql


# --- item 5: PERCENTILE_CONT with two fractions -------------------------------------------------------------------

TWO_FRACTIONS = {
    "cont": "SELECT PERCENTILE_CONT(0.5, 0.7) WITHIN GROUP (ORDER BY x) FROM t",
    "disc": "SELECT PERCENTILE_DISC(0.25, 0.75) WITHIN GROUP (ORDER BY x) FROM t",
    "grouped": "SELECT u, PERCENTILE_CONT(0.5, 0.7) WITHIN GROUP (ORDER BY x) FROM t GROUP BY u",
}


@pytest.mark.parametrize("sql", TWO_FRACTIONS.values(), ids=TWO_FRACTIONS.keys())
def test_a_percentile_takes_one_fraction(session: Any, sql: str) -> None:
    err = _refused(session, sql)
    assert err.sqlstate == "42883"
    name = "percentile_disc" if "DISC" in sql else "percentile_cont"
    assert f"{name}() takes 1 argument" in err.message and "got 2" in err.message
    assert err.hint is not None and "WITHIN GROUP (ORDER BY" in err.hint


def test_three_fractions_get_the_same_message(session: Any) -> None:
    err = _refused(session, "SELECT PERCENTILE_CONT(0.5, 0.7, 0.8) WITHIN GROUP (ORDER BY x) FROM t")
    assert err.sqlstate == "42883" and "percentile_cont() takes 1 argument" in err.message


# --- veil serve's table-less statements (veil/server/system.py, the lead's) ----------------------------------------

SERVED = {
    "in": ("SELECT 1 IN ()", "42601"),
    "not-in": ("SELECT 1 NOT IN ()", "42601"),
    "names": ("SELECT a FROM (SELECT 1 AS a) AS d(a, b)", "42P10"),
}


@pytest.mark.parametrize(("sql", "state"), SERVED.values(), ids=SERVED.keys())
def test_veil_serve_refuses_table_less_statements_alike(sql: str, state: str) -> None:
    """``veil serve`` answers table-less statements with sqlglot's executor (``system.answer``): ``SELECT 1 IN ()``
    was false there, ``(SELECT 1 AS a) AS d(a, b)`` 1. The fix: ``resolve.refuse_before_binding(expr)`` in
    ``system._answer`` after ``check_executor_safe``."""
    import types

    from veil.proxy.catalog import Catalog
    from veil.server.system import SystemQuery, answer

    query = SystemQuery(sql=sql, connection=types.SimpleNamespace(database="veil"), catalog=Catalog({}), budget=None)
    with pytest.raises(QueryRejected) as info:
        answer(query)
    assert info.value.sqlstate == state
