"""Class-level tests: the values a query may combine, and the keys it may group by, are exact.

A run-time cast an engine inserts between two types is row by row, and some of those casts fail on some
values only (a DATE beyond year 294247 as a TIMESTAMP, a BIGINT as a DECIMAL(38,37), a 128-bit literal
against a BIGINT column): a deterministic bit about the row that reaches it. And a group key Python
cannot hold exactly (NaN, ±infinity, a date beyond year 9999) would reorder or overwrite groups. So:

* a CAST (and so a typed literal) may only name a type in the admitted set; every operand of a
  comparison or value chooser must have an admitted type (validate pass);
* an integer literal beyond 64 bits is a DOUBLE, like every fractional literal (totality pass);
* operands of a comparison or value chooser with a date or timestamp among them are each TRY_CAST to
  one type (totality pass), so the engine casts nothing implicitly;
* a group key has an admitted engine type, NaN and out-of-range dates fetch as NULL, and engine groups
  that meet in one Python key are merged, never overwritten (the session's ``exact_keys``);
* a private row may join at most ``MAX_JOIN_FACTOR`` public rows.

Each refusal is free; each answer ends the same way on two neighbouring databases (noise off).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import sqlglot
from sqlglot import exp

from veil.errors import InvalidDatetimeFormat, TypeMismatch, Unsupported, VeilError
from veil.policy import load_policy
from veil.proxy._testing import exact_session
from veil.proxy.multiplicity import MAX_JOIN_FACTOR
from veil.proxy.session import exact_keys
from veil.proxy.totality import make_total
from veil.store import warehouse
from veil.store.warehouse import write_table

POLICY = """\
[database]
path = "w.duckdb"
[ledger]
path = "l.sqlite"
[defaults]
epsilon_per_query = 0.01
[tables.t]
privacy_unit = "row"
[tables.t.columns]
u = { type = "int", lower = 0, upper = 1000 }
x = { type = "int", lower = -10, upper = 10 }
y = { type = "float", lower = -5, upper = 5 }
s = { type = "category" }
d = { type = "date" }
[tables.pub]
public = true
[tables.pub.columns]
pk = { type = "int" }
[tables.wide]
public = true
[analysts.a]
epsilon = 1000000
"""

#: the target's row: a date no TIMESTAMP can hold (nor Python), so an implicit DATE → TIMESTAMP cast
#: fails on it (the warehouse stores it as a DATE: see ``sessions``)
TARGET = {"u": 7, "x": 5, "y": 1.0, "s": "s7", "d": "300000-01-01"}


def _rows(with_target: bool) -> list[dict[str, Any]]:
    rows = [{"u": 100 + i, "x": i % 21 - 10, "y": 0.5, "s": f"s{i % 3}", "d": f"2020-01-{1 + i % 28:02d}"} for i in range(60)]
    return [*rows, TARGET] if with_target else rows


def _frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def sessions(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Any]]:
    """Noise-off sessions on D (without the target) and D′ (with it)."""
    out = []
    for name, with_target in (("d", False), ("dp", True)):
        folder: Path = tmp_path_factory.mktemp(f"admitted_{name}")
        (folder / "policy.toml").write_text(POLICY, encoding="utf-8")
        policy = load_policy(folder / "policy.toml")
        write_table(policy, "t", _frame(_rows(with_target)), replace=True)
        write_table(policy, "pub", pd.DataFrame({"pk": range(200)}), replace=True, public=True)
        with warehouse.writer(policy) as con:  # public columns of types Veil does not read
            # the dates stored as DATEs: a text outside ISO form (the target's year 300000) would read as NULL, as the
            # query path reads a text (leftovers s17, item 3)
            con.execute("ALTER TABLE t ALTER d TYPE DATE USING CAST(d AS DATE)")
            con.execute(
                "CREATE OR REPLACE TABLE wide AS SELECT i::BIGINT AS pk, CAST(1.5 AS DECIMAL(38, 37)) AS dec, "
                "i::HUGEINT AS huge, TIMESTAMP '2020-01-01' + i * INTERVAL 1 DAY AS ts, 'x' AS label FROM range(5) r(i)"
            )
        warehouse.copy_to_public(policy, "wide")
        out.append(exact_session(policy, "a"))
    yield out
    for s in out:
        s.close()


def _ending(session: Any, sql: str) -> tuple[Any, ...]:
    before = session.budget().spent
    try:
        session.execute(sql, epsilon=Fraction(1, 10))
    except VeilError as exc:
        return ("refused", type(exc).__name__, session.budget().spent - before)
    return ("answered", session.budget().spent - before)


# --- combining dates and timestamps ---------------------------------------------------------------------

TEMPORAL_OPERANDS = ("d", "d + INTERVAL '1' DAY", "DATE_TRUNC('month', d)", "CAST(d AS TIMESTAMP)", "d - 1")
TEMPORAL_LITERALS = ("DATE '2020-01-05'", "TIMESTAMP '2020-01-05 10:00:00'", "DATE '5877642-06-25'")
COMBINERS = (
    "{a} = {b}", "{a} < {b}", "{a} IN ({b}, {b})", "{a} BETWEEN {b} AND {b}", "COALESCE({a}, {b}) IS NULL",
    "GREATEST({a}, {b}) IS NULL", "LEAST({b}, {a}) IS NULL", "NULLIF({a}, {b}) IS NULL",
    "(CASE WHEN x > 0 THEN {a} ELSE {b} END) IS NULL", "(CASE {a} WHEN {b} THEN 1 END) IS NULL",
)  # fmt: skip


@pytest.mark.parametrize("combiner", COMBINERS)
@pytest.mark.parametrize("operand", TEMPORAL_OPERANDS)
@pytest.mark.parametrize("literal", TEMPORAL_LITERALS)
def test_dates_and_timestamps_combine_without_a_row_dependent_failure(
    sessions: list[Any], combiner: str, operand: str, literal: str
) -> None:
    sql = f"SELECT COUNT(*) FROM t WHERE {combiner.format(a=operand, b=literal)}"
    d, dp = (_ending(s, sql) for s in sessions)
    assert d == dp, sql
    assert d[0] == "answered" or d[2] == 0, d  # a refusal is free


#: operands sqlglot cannot type (date arithmetic, DATE_TRUNC) beside text, dates and numbers
UNKNOWN_TYPED = (
    "DATE_TRUNC('month', d) = 'abc'", "DATE_TRUNC('month', d) = s", "d + INTERVAL '1' HOUR = s",
    "COALESCE(d - 1, DATE '2020-01-01') IS NULL", "(d - 1) IN (DATE '2020-01-01', DATE '5877642-06-25')",
    "d - 1 > TIMESTAMP '2020-01-01'", "DATE_TRUNC('hour', d) BETWEEN 'x' AND s", "(d - d) > 5",
    "GREATEST(d - d, 1e300) IS NULL", "NULLIF(DATE_TRUNC('day', d), NULL) IS NULL",
)  # fmt: skip


@pytest.mark.parametrize("cond", UNKNOWN_TYPED)
def test_operands_of_unknown_type_end_the_same_on_neighbours(sessions: list[Any], cond: str) -> None:
    sql = f"SELECT COUNT(*) FROM t WHERE u = 7 AND {cond}"
    d, dp = (_ending(s, sql) for s in sessions)
    assert d == dp, sql
    assert d[0] == "answered" or d[2] == 0, d


def test_every_operand_of_a_temporal_combiner_is_cast_to_one_type() -> None:
    """The generated tree leaves the engine no implicit cast: DATE when all operands are dates, else
    TIMESTAMP — and a group of numbers only is left as it is (its casts cannot fail)."""
    from sqlglot.optimizer.annotate_types import annotate_types
    from sqlglot.optimizer.qualify import qualify

    schema = {"t": {"d": "DATE", "x": "BIGINT"}}
    for sql, target in (
        ("SELECT d = DATE '2020-01-01' FROM t", "DATE"),
        ("SELECT d < TIMESTAMP '2020-01-01' FROM t", "TIMESTAMP"),
        ("SELECT COALESCE(d, TIMESTAMP '2020-01-01') FROM t", "TIMESTAMP"),
        ("SELECT x = 3 FROM t", None),
        ("SELECT DATE_TRUNC('month', d) = DATE '2020-01-01' FROM t", "TIMESTAMP"),  # sqlglot: unknown type
        ("SELECT d + INTERVAL '1' HOUR > d FROM t", "TIMESTAMP"),
    ):
        tree = annotate_types(qualify(sqlglot.parse_one(sql, read="postgres"), schema=schema), schema=schema)
        node = make_total(tree).expressions[0].unalias()
        operands = [node.this, *(node.expressions if node.expressions else [node.expression])]
        if target is None:
            assert not any(isinstance(o, exp.TryCast) for o in operands), node.sql()
        else:
            assert all(isinstance(o, exp.TryCast) and o.to.sql() == target for o in operands), node.sql()


# --- types a query may name --------------------------------------------------------------------------

NOT_ADMITTED = (
    "CAST(s AS TIME)", "TIME '12:00'", "TIMESTAMPTZ '2020-01-01'", "CAST(d AS TIMESTAMP_NS)",
    "CAST(s AS UUID)", "CAST(s AS JSON)", "CAST(s AS INT[])", "CAST(s AS BLOB)", "CAST(x AS UBIGINT)",
    "CAST(x AS HUGEINT)", "CAST(s AS INTERVAL)",
)  # fmt: skip


@pytest.mark.parametrize("value", NOT_ADMITTED)
def test_values_of_types_outside_the_admitted_set_are_refused_free(sessions: list[Any], value: str) -> None:
    for session in sessions:
        before = session.budget().spent
        with pytest.raises((Unsupported, TypeMismatch)):
            session.execute(f"SELECT COUNT(*) FROM t WHERE {value} IS NOT NULL", epsilon=Fraction(1, 10))
        assert session.budget().spent == before


def test_an_interval_in_date_arithmetic_is_admitted_but_not_as_a_compared_value(sessions: list[Any]) -> None:
    s = sessions[0]
    s.execute("SELECT COUNT(*) FROM t WHERE d + INTERVAL '1' DAY > DATE '2020-01-10'", epsilon=Fraction(1, 10))
    with pytest.raises(TypeMismatch):
        s.execute("SELECT COUNT(*) FROM t WHERE x = INTERVAL '1 day'", epsilon=Fraction(1, 10))


UHUGE = "170141183460469231731687303715884105728"


@pytest.mark.parametrize(
    ("literal", "double"), [("9223372036854775807", False), ("9223372036854775808", True), (UHUGE, True), ("1.5", True)]
)
def test_number_literals_beyond_64_bits_are_doubles(literal: str, double: bool) -> None:
    total = make_total(sqlglot.parse_one(f"SELECT x = {literal} FROM t")).expressions[0]
    assert isinstance(total.expression, exp.Cast) == double, total.sql()


@pytest.mark.parametrize("literal", [UHUGE, "9223372036854775808", "1.2345678901234567890123456789012345678"])
def test_wide_number_literals_end_the_same_on_neighbours(sessions: list[Any], literal: str) -> None:
    for cond in (f"u = 7 AND x = {literal}", f"u = 7 AND x IN (1, {literal})", f"u = 7 AND GREATEST(x, {literal}) IS NULL"):
        sql = f"SELECT COUNT(*) FROM t WHERE {cond}"
        assert _ending(sessions[0], sql) == _ending(sessions[1], sql), sql


# --- group keys ----------------------------------------------------------------------------------------


def test_exact_keys_turn_nan_and_unholdable_dates_into_null_and_leave_the_rest() -> None:
    exact = exact_keys(["DOUBLE", "DATE", "TIMESTAMP", "VARCHAR", "BIGINT"])
    day, moment = dt.date(2020, 1, 1), dt.datetime(2020, 1, 1, 10)
    assert exact((math.nan, day, moment, "nan", 3)) == (None, day, moment, "nan", 3)
    assert exact((1.5, "20000-01-01", "20000-01-01 00:00:00", "x", None)) == (1.5, None, None, "x", None)
    assert exact_keys(["VARCHAR", "BIGINT"]) is tuple  # nothing to fix: no per-row work


@pytest.mark.parametrize(
    "key",
    [
        "CASE WHEN u = 7 THEN CAST('nan' AS DOUBLE) ELSE y END",
        "CASE WHEN u = 7 THEN d ELSE DATE '2020-01-01' END",
    ],
)
def test_groups_move_by_at_most_one_person_whatever_their_keys(sessions: list[Any], key: str) -> None:
    sql = f"SELECT {key} AS g, COUNT(*) AS n FROM t GROUP BY 1"
    d, dp = (s.execute(sql, epsilon=Fraction(1)).rows for s in sessions)
    counts = [dict(r) for r in (d, dp)]
    for g in set(counts[0]) | set(counts[1]):
        assert abs(counts[1].get(g, 0) - counts[0].get(g, 0)) <= 1, (g, counts)
    common = [g for g, _ in d if g in counts[1]]
    assert common == [g for g, _ in dp if g in counts[0]]  # released groups keep their relative order


@pytest.mark.parametrize(
    "key",
    [
        "CASE WHEN u = 7 THEN DATE 'infinity' ELSE DATE '9999-12-31' END",
        "CASE WHEN u = 7 THEN TIMESTAMP '-infinity' ELSE TIMESTAMP '0001-01-01' END",
    ],
)
def test_infinite_date_literals_are_refused_free(sessions: list[Any], key: str) -> None:
    """An infinite date literal was each engine's own constant (leftovers s17, item 2): refused, 22007, on both
    worlds; a stored date Python cannot hold (the target's year 300000) still reaches the group keys through ``d``."""
    for session in sessions:
        before = session.budget().spent
        with pytest.raises(InvalidDatetimeFormat):
            session.execute(f"SELECT {key} AS g, COUNT(*) AS n FROM t GROUP BY 1", epsilon=Fraction(1))
        assert session.budget().spent == before


def test_the_targets_date_is_stored_beyond_what_python_holds(sessions: list[Any]) -> None:
    """The witness above holds only while the target's date reaches the queries (not NULL)."""
    d, dp = (s.execute("SELECT COUNT(*) FROM t WHERE d > DATE '9999-12-31'", epsilon=Fraction(1)).rows for s in sessions)
    assert (d, dp) == (((0,),), ((1,),))


@pytest.mark.parametrize("key", ["CAST(s AS VARCHAR[])", "LIST_VALUE(x)", "MAKE_TIME(1, 2, 3)", "TO_TIMESTAMP(x)", "NOW()"])
def test_group_keys_of_types_python_cannot_hold_exactly_are_refused_free(sessions: list[Any], key: str) -> None:
    for session in sessions:
        before = session.budget().spent
        with pytest.raises(VeilError):
            session.execute(f"SELECT {key} AS g, COUNT(*) FROM t GROUP BY 1", epsilon=Fraction(1, 10))
        assert session.budget().spent == before


# --- public joins --------------------------------------------------------------------------------------


def test_a_private_row_may_join_at_most_max_join_factor_public_rows(sessions: list[Any]) -> None:
    s = sessions[0]
    assert MAX_JOIN_FACTOR < 200 * 200
    s.execute("SELECT COUNT(*) FROM t JOIN pub p1 ON t.u = 7", epsilon=Fraction(1, 10))  # factor 200
    before = s.budget().spent
    with pytest.raises(Unsupported, match="join up to 40,000 rows"):
        s.execute("SELECT COUNT(*) FROM t JOIN pub p1 ON t.u = 7 JOIN pub p2 ON p1.pk >= 0", epsilon=Fraction(1, 10))
    assert s.budget().spent == before
    s.execute("SELECT COUNT(*) FROM t JOIN pub p1 ON t.x = p1.pk JOIN pub p2 ON t.u = p2.pk", epsilon=Fraction(1, 10))


@pytest.mark.parametrize(
    "on", ["t.u + 100 = wide.dec", "COALESCE(t.u + 100, wide.dec) > 0", "t.u + 100 IN (wide.dec, 1)", "t.u + 100 = wide.huge"]
)
def test_public_columns_are_read_as_the_types_the_catalog_gives_them(sessions: list[Any], on: str) -> None:
    """The warehouse stores ``wide.dec`` as DECIMAL(38, 37) (the mirror, and so the catalog, as DOUBLE):
    read raw, DuckDB would cast the private BIGINT ``t.u + 100`` to DECIMAL(38, 37), overflowing only
    when the target's row (u = 7) reaches the comparison."""
    sql = f"SELECT COUNT(*) FROM t JOIN wide ON t.u = 7 AND {on}"
    assert _ending(sessions[0], sql) == _ending(sessions[1], sql)


@pytest.mark.parametrize("on", ["t.s = wide.ts", "t.d = wide.ts"])
def test_public_columns_of_types_veil_does_not_read_cannot_be_named(sessions: list[Any], on: str) -> None:
    """A public TIMESTAMP read as text would make the engine cast private text to a timestamp row by row."""
    sql = f"SELECT COUNT(*) FROM t JOIN wide ON t.x = wide.pk AND {on}"
    endings = [_ending(s, sql) for s in sessions]
    assert endings[0] == endings[1] and endings[0][0] == "refused" and endings[0][2] == 0, endings


def test_public_columns_of_read_types_stay_usable(sessions: list[Any]) -> None:
    for s in sessions:
        s.execute("SELECT COUNT(*) FROM t JOIN wide ON t.x = wide.pk AND wide.label = 'x'", epsilon=Fraction(1, 10))


# --- implicit casts inside TRY, repeated ------------------------------------------------------------------

REPEATED = (
    "SELECT SUM(CASE WHEN EXTRACT(hour FROM d) > 0 THEN 1 ELSE 0 END), "
    "SUM(CASE WHEN EXTRACT(minute FROM d) > 0 THEN 1 ELSE 0 END) FROM t",
    "SELECT COUNT(*) FILTER (WHERE EXTRACT(epoch FROM d) > 0), COUNT(*) FILTER (WHERE EXTRACT(hour FROM d) > 0) FROM t",
    "SELECT COUNT(*) FILTER (WHERE YEAR(d + INTERVAL '1' HOUR) > 2000), "
    "COUNT(*) FILTER (WHERE MONTH(d + INTERVAL '1' HOUR) > 1) FROM t",
    "SELECT s, SUM(CASE WHEN DATE_TRUNC('hour', d) > TIMESTAMP '2020-01-01' THEN 1 ELSE 0 END), "
    "SUM(CASE WHEN DATE_TRUNC('minute', d) > TIMESTAMP '2020-01-01' THEN 1 ELSE 0 END) FROM t GROUP BY s",
    "SELECT SUM(CASE WHEN EXTRACT(hour FROM d) > 0 THEN 1 ELSE 0 END) FROM t WHERE EXTRACT(minute FROM d) >= 0",
)


@pytest.mark.parametrize("sql", REPEATED)
def test_an_implicit_cast_repeated_inside_try_is_not_lifted_out_of_it(sessions: list[Any], sql: str) -> None:
    """The engine casts the DATE ``d`` to a TIMESTAMP inside each TRY; computed once for both uses (common-
    subexpression elimination), the cast would run outside every TRY and fail on the target's date."""
    d, dp = (_ending(s, sql) for s in sessions)
    assert d == dp and d[0] == "answered", (d, dp)
