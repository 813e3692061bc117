"""Conformance: every construct of docs/sql.md gives the same answer, with the same types, on DuckDB and Spark.

Both warehouses hold the same tables (a row-level table with int, float, text, bool and date columns, a
user-level table whose units have more rows than ``max_rows_per_unit``, a public table); both engines build
their bounded copies with one salt (test-only), so they keep the same rows. Sessions run with noise off
(:func:`veil.proxy._testing.exact_session`): any difference is a difference of meaning between the SQL the
engines ran. Doubles are compared to 1e-9 relative (sums of doubles depend on the order of addition);
rows are compared in order when the query has ORDER BY, as multisets otherwise.

One Spark ``local[2]`` session serves the whole test run; the module is skipped, with the reason, only when
pyspark or Java is missing.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Iterator
from typing import Any

import pytest

from veil.policy import Policy
from veil.proxy._testing import exact_session
from veil.proxy.session import QuerySession

pytestmark = pytest.mark.slow

CASES: dict[str, str] = {
    # aggregates
    "count_star": "SELECT COUNT(*) FROM people",
    "count_column": "SELECT COUNT(income) FROM people",
    "count_distinct_unit": "SELECT COUNT(DISTINCT user_id) FROM visits",
    "count_distinct_unit_grouped": "SELECT kind, COUNT(DISTINCT user_id) FROM visits GROUP BY kind",
    "count_distinct_value": "SELECT COUNT(DISTINCT state) FROM people",
    "sum_int": "SELECT SUM(age) FROM people",
    "sum_float": "SELECT SUM(income) FROM people",
    "avg": "SELECT AVG(age), AVG(income) FROM people",
    "variances": "SELECT VARIANCE(age), VAR_SAMP(age), VAR_POP(income), STDDEV(age), STDDEV_SAMP(hours),"
    " STDDEV_POP(age) FROM people",
    "var_std_aliases": "SELECT VAR(age), STD(income) FROM people",
    "median": "SELECT MEDIAN(age), MEDIAN(income) FROM people",
    "percentile_cont": "SELECT PERCENTILE_CONT(0.9) WITHIN GROUP (ORDER BY income) FROM people",
    "percentile_disc": "SELECT PERCENTILE_DISC(0.25) WITHIN GROUP (ORDER BY age) FROM people",
    "quantile_cont": "SELECT quantile_cont(hours, 0.75) FROM people",
    "min_max": "SELECT MIN(age), MAX(age), MIN(income), MAX(hours) FROM people",
    "user_level_sum": "SELECT kind, SUM(amount), AVG(amount) FROM visits GROUP BY kind",
    # argument expressions
    "arithmetic": "SELECT SUM(age * 2 + age_offset), AVG(income / 12), SUM(age - hours), SUM(-age) FROM people",
    "division_range": "SELECT AVG(income / age) FROM people",
    "modulo": "SELECT SUM(age % 7) FROM people",
    "math_functions": "SELECT SUM(ABS(age_offset)), SUM(ROUND(income / 1000)), SUM(FLOOR(income / 7)), SUM(CEIL(income / 7)),"
    " SUM(SIGN(age_offset)) FROM people",
    "pick_functions": "SELECT SUM(LEAST(age, 60)), SUM(GREATEST(age, 30)), AVG(COALESCE(income, 0)), SUM(NULLIF(age_offset, 0))"
    " FROM people",
    "case_if": "SELECT SUM(CASE WHEN sex = 'Female' THEN 1 ELSE 0 END), AVG(CASE WHEN age > 40 THEN income END) FROM people",
    "cast_numeric": "SELECT SUM(CAST(income AS BIGINT)), AVG(CAST(age AS DOUBLE)) FROM people",
    "integer_literal_arithmetic": "SELECT AVG(COALESCE(1000000 * 1000000, age)), SUM(GREATEST(age, 100000 * 100000)),"
    " SUM(CAST(age AS INT) * 1000000 * 1000), AVG(GREATEST(income, age - 1000)) FROM people",
    "powers_sqrt_pi": "SELECT SUM(age_offset * age_offset), AVG(POWER(age_offset, 2)), AVG(SQRT(age)), SUM(PI() * age_offset)"
    " FROM people",
    "booleans_as_numbers": "SELECT SUM(age > 40), AVG(married), SUM(married), AVG(CASE WHEN married THEN 1 ELSE 0 END)"
    " FROM people",
    "filter": "SELECT COUNT(*) FILTER (WHERE married), AVG(age) FILTER (WHERE sex = 'Male'),"
    " MEDIAN(hours) FILTER (WHERE age < 30) FROM people",
    # WHERE predicates and row-level functions
    "where_predicates": "SELECT COUNT(*) FROM people WHERE age BETWEEN 30 AND 50 AND state IN ('CA', 'NY')"
    " AND income IS NOT NULL",
    "where_like": "SELECT COUNT(*) FROM people WHERE state LIKE 'N%' OR state ILIKE 'w%'",
    "where_log_ln_exp": "SELECT COUNT(*) FILTER (WHERE LOG(hours) > 1.5), COUNT(*) FILTER (WHERE LN(hours) > 1.5),"
    " COUNT(*) FILTER (WHERE EXP(age_offset) > 2), COUNT(*) FILTER (WHERE LOG(2, hours) > 4) FROM people",
    "where_division_by_zero": "SELECT COUNT(*) FROM people WHERE age / (age - age) IS NULL AND age % (age - age) IS NULL",
    "where_dates": "SELECT COUNT(*) FILTER (WHERE EXTRACT(DOW FROM born) = 0),"
    " COUNT(*) FILTER (WHERE EXTRACT(YEAR FROM born) < 1970), COUNT(*) FILTER (WHERE EXTRACT(MONTH FROM born) = 2),"
    " COUNT(*) FILTER (WHERE born > DATE '1980-06-01') FROM people",
    "where_strings": "SELECT COUNT(*) FROM people WHERE LOWER(sex) = 'male' AND LENGTH(state) = 2 AND UPPER(state) = state"
    " AND SUBSTRING(state, 1, 1) <> 'Q' AND TRIM(state) || '!' <> 'X!' AND LEFT(state, 1) <> 'Q' AND RIGHT(state, 1) <> 'Q'"
    " AND REPLACE(state, 'A', 'a') <> 'x' AND CONCAT(state, sex) <> 'x'",
    "where_boolean_column": "SELECT COUNT(*) FROM people WHERE married AND NOT (age < 20)",
    # on / off the real column's pre-scaled grid (k = 44 for income's bounds), and beyond its bounds
    "where_float_grid": "SELECT COUNT(*), SUM(income) FROM people WHERE income >= 25000 AND 60000.5 > income"
    " AND NOT (income < 30000.3) AND income < 240000.25",
    "where_cast": "SELECT COUNT(*) FROM people WHERE CAST(age AS VARCHAR) LIKE '4%'",
    "where_nullsafe": "SELECT COUNT(*) FROM people WHERE income IS DISTINCT FROM NULL",
    # group keys
    "group_declared_key": "SELECT sex, COUNT(*), AVG(age) FROM people GROUP BY sex",
    "group_private_key": "SELECT state, COUNT(*), SUM(hours) FROM people GROUP BY state",
    "group_two_keys": "SELECT sex, married, COUNT(*) FROM people GROUP BY sex, married",
    "group_expression": "SELECT age / 10 AS decade, COUNT(*) FROM people GROUP BY age / 10",
    "group_floor_expression": "SELECT FLOOR(age / 10) AS decade, COUNT(*) FROM people GROUP BY 1",
    "group_by_position_alias": "SELECT state AS s, COUNT(*) FROM people GROUP BY s",
    "group_dow": "SELECT EXTRACT(DOW FROM born) AS dow, COUNT(*) FROM people GROUP BY 1",
    "group_year": "SELECT EXTRACT(YEAR FROM born) AS y, COUNT(*) FROM people WHERE born < DATE '1945-01-01' GROUP BY 1",
    "group_date_trunc": "SELECT DATE_TRUNC('year', born) AS y, COUNT(*) FROM people WHERE born < DATE '1946-01-01' GROUP BY 1",
    "group_bool_key": "SELECT married, COUNT(*), MEDIAN(age) FROM people GROUP BY married",
    # post-processing
    "having": "SELECT state, COUNT(*) AS n FROM people GROUP BY state HAVING n > 300",
    "order_limit_offset": "SELECT state, COUNT(*) AS n FROM people GROUP BY state ORDER BY n DESC, state LIMIT 3 OFFSET 1",
    "aggregate_arithmetic": "SELECT COUNT(*) * 2 + 1, 100.0 * COUNT(*) FILTER (WHERE married) / COUNT(*), ROUND(AVG(age), 1)"
    " FROM people",
    # FROM shapes
    "cte": "WITH older AS (SELECT * FROM people WHERE age > 30) SELECT COUNT(*), AVG(hours) FROM older",
    "nested_subquery": "SELECT COUNT(*) FROM (SELECT age FROM (SELECT * FROM people WHERE married) AS a WHERE age < 60) AS b",
    "join_public": "SELECT r.region, COUNT(*) FROM people p JOIN regions r ON p.state = r.state GROUP BY r.region",
    "left_join_public": "SELECT COUNT(*), COUNT(r.region) FROM people p LEFT JOIN regions r ON p.state = r.state",
    "comma_join": "SELECT COUNT(*) FROM people p, regions r WHERE p.state = r.state AND r.region = 'West'",
    "cte_over_public": "WITH w AS (SELECT state FROM regions WHERE region = 'West') SELECT COUNT(*) FROM people JOIN w"
    " ON people.state = w.state",
    # the private source written after public ones: the generated SQL lists it first (join_order.private_first)
    "public_first_join": "SELECT COUNT(*) FROM regions r JOIN people p ON p.state = r.state WHERE r.region = 'West'",
    "public_left_join_first": "SELECT COUNT(*) FROM regions r LEFT JOIN regions r2 ON r.state = r2.state"
    " JOIN people p ON p.state = r.state",
    # public-only
    "public_select": "SELECT state, region FROM regions ORDER BY state",
    "public_aggregate": "SELECT region, COUNT(*) FROM regions GROUP BY region ORDER BY region",
    "public_distinct": "SELECT DISTINCT region FROM regions",
}


@pytest.fixture(scope="module")
def sessions(duckdb_policy: Policy, spark_policy: Policy) -> Iterator[tuple[QuerySession, QuerySession]]:
    with exact_session(duckdb_policy, "alice") as d, exact_session(spark_policy, "alice") as s:
        yield d, s


def _same_value(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        if a is None or b is None:
            return a is b
        fa, fb = float(a), float(b)
        return (math.isnan(fa) and math.isnan(fb)) or math.isclose(fa, fb, rel_tol=1e-9, abs_tol=1e-9)
    return type(a) is type(b) and a == b


def _key(row: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple((v is None, round(v, 6) if isinstance(v, float) else v) for v in row)


def _rows_equal(a: tuple[Any, ...], b: tuple[Any, ...], ordered: bool) -> bool:
    ra, rb = list(a), list(b)
    if not ordered:
        ra.sort(key=_key)
        rb.sort(key=_key)
    return len(ra) == len(rb) and all(
        len(x) == len(y) and all(_same_value(u, v) for u, v in zip(x, y, strict=True)) for x, y in zip(ra, rb, strict=True)
    )


@pytest.mark.parametrize("name", list(CASES))
def test_same_answer_on_duckdb_and_spark(name: str, sessions: tuple[QuerySession, QuerySession]) -> None:
    sql = CASES[name]
    duck, spark = sessions
    a = duck.execute(sql)
    b = spark.execute(sql)
    assert a.columns == b.columns, (sql, a.columns, b.columns)
    assert a.epsilon_charged == b.epsilon_charged
    assert _rows_equal(a.rows, b.rows, "ORDER BY" in sql.upper()), (sql, a.rows, b.rows)
    assert a.rows, "every case answers at least one row"


def test_values_keep_python_types(sessions: tuple[QuerySession, QuerySession]) -> None:
    """Dates come back as dates and booleans as booleans from both engines."""
    duck, spark = sessions
    for s in (duck, spark):
        rows = s.execute("SELECT DATE_TRUNC('year', born) AS y, married, COUNT(*) FROM people WHERE born < DATE '1941-01-01'"
                         " GROUP BY 1, 2").rows  # fmt: skip
        assert all(isinstance(r[0], datetime.date) and isinstance(r[1], bool) for r in rows)
