"""The generated clamp keeps every value's meaning: in range → itself, below → lo, above → hi, NULL → NULL.

The reference is the textbook form ``CASE WHEN x < lo THEN lo WHEN x > hi THEN hi ELSE x END``; the
generated SQL tests the in-range case first (cheaper per row) and must agree with it on value and
type, including NaN (DuckDB orders it above every number, so it becomes ``hi``) and ±infinity.
"""

from __future__ import annotations

import itertools
from fractions import Fraction

import duckdb
import pytest
import sqlglot

from veil.proxy.bounds import Interval
from veil.proxy.plan import _clamp, _num

VALUES = [
    "NULL",
    "NULL::DOUBLE",
    "NULL::INTEGER",
    "'nan'::DOUBLE",
    "'nan'::FLOAT",
    "'inf'::DOUBLE",
    "'-inf'::DOUBLE",
    "-0.0::DOUBLE",
    "-5.5",
    "0",
    "7::INTEGER",
    "-3::BIGINT",
    "100.25",
    "200000",
    "250000.5",
    "99999999999::BIGINT",
    "2.5::DECIMAL(5,2)",
    "1.5::FLOAT",
]
INTERVALS = [
    Interval(Fraction(0), Fraction(200000), False),
    Interval(Fraction(-5), Fraction(10)),
    Interval(Fraction(1, 2), Fraction(7, 3), False),
    Interval(Fraction(0), Fraction(1)),
    Interval(Fraction(3), Fraction(3)),
]


def _clamp_sql(arg: str, iv: Interval) -> str:
    return _clamp(sqlglot.parse_one(arg, read="duckdb"), iv).sql(dialect="duckdb")


def _reference(arg: str, iv: Interval) -> str:
    lo, hi = _num(iv.lo).sql(dialect="duckdb"), _num(iv.hi).sql(dialect="duckdb")
    return f"(CASE WHEN ({arg}) < {lo} THEN {lo} WHEN ({arg}) > {hi} THEN {hi} ELSE ({arg}) END)"


@pytest.fixture(scope="module")
def con() -> duckdb.DuckDBPyConnection:
    c = duckdb.connect(":memory:")
    yield c
    c.close()


def test_clamp_matches_reference_on_edge_values(con: duckdb.DuckDBPyConnection) -> None:
    for v, iv in itertools.product(VALUES, INTERVALS):
        arg = f"({v})"
        got = con.execute(f"SELECT {_clamp_sql(arg, iv)} AS x, typeof(x)").fetchall()
        want = con.execute(f"SELECT {_reference(arg, iv)} AS x, typeof(x)").fetchall()
        assert repr(got) == repr(want), (v, iv)


def test_clamp_bounds_every_value_of_a_column(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(
        "CREATE OR REPLACE TABLE t AS SELECT CASE WHEN i % 7 = 0 THEN NULL ELSE (i - 500) * 3.7 END AS x FROM range(1000) r(i)"
    )
    iv = Interval(Fraction(-100), Fraction(250), False)
    n, nulls, lo, hi = con.execute(
        f"SELECT count(c), count(*) - count(c), min(c), max(c) FROM (SELECT {_clamp_sql('x', iv)} AS c FROM t)"
    ).fetchone()
    assert nulls == con.execute("SELECT count(*) - count(x) FROM t").fetchone()[0] > 0  # NULL stays NULL
    assert (lo, hi) == (-100, 250) and n == 1000 - nulls
