"""Every date field and truncation unit Veil admits is computed on every date, the range's ends included.

DuckDB's ISO-week computations (WEEK, WEEKOFYEAR, YEARWEEK, ISOYEAR) step past the ends of the DATE range on
its earliest dates, with an error TRY does not catch: a hidden `CASE … THEN DATE '-5877641-06-25'` made one
person's row fail the query, a one-bit answer at any ε, and a person whose own date was that early failed every
such query (red team s12, A3). ERA, TIMEZONE* and NS fail on some values or types even inside TRY, or only after
the charge (L3). Now fields and units come from an allow-list (`validate.DATE_PARTS`, `TRUNC_UNITS`), and the
ISO-week family sees only dates within ±290,000 years (NULL beyond).
"""

from __future__ import annotations

from collections.abc import Iterator

import pandas as pd
import pytest

from tests.support.warehouse import policy_with_tables
from veil.errors import InvalidDatetimeFormat, Unsupported
from veil.proxy._testing import exact_session
from veil.proxy.session import QuerySession
from veil.proxy.validate import DATE_PARTS, TRUNC_UNITS
from veil.store.warehouse import writer

POLICY = """\
[database]
path = "w.duckdb"
[ledger]
path = "l.sqlite"
[tables.t]
privacy_unit = "row"
[tables.t.columns]
d = { type = "date" }
x = { type = "int", lower = 0, upper = 10 }
[analysts.a]
epsilon = 100000
"""

#: The DATE range's ends, ±infinity, ordinary dates and NULL (stored as DATEs: a text outside ISO form would be NULL in
#: the bounded copy, as the query path reads a text; leftovers s17, item 3).
EXTREMES = ["-5877641-06-25", "5881580-07-10", "infinity", "-infinity", "2000-01-01", "1969-12-31", None]


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[QuerySession]:
    frame = pd.DataFrame({"d": EXTREMES, "x": range(len(EXTREMES))})
    policy = policy_with_tables(tmp_path_factory.mktemp("dateparts"), POLICY, {"t": frame})
    with writer(policy) as con:
        con.execute("ALTER TABLE t ALTER d TYPE DATE USING CAST(d AS DATE)")
    with exact_session(policy, "a") as s:
        yield s


@pytest.mark.parametrize("part", sorted(DATE_PARTS))
@pytest.mark.parametrize("operand", ["d", "CAST(d AS TIMESTAMP)", "(d + INTERVAL 1 DAY)"])
def test_every_admitted_field_is_computed_on_every_date(session: QuerySession, part: str, operand: str) -> None:
    sql = f"SELECT COUNT(*) FILTER (WHERE EXTRACT({part} FROM {operand}) IS NOT NULL) AS n FROM t"
    (row,) = session.execute(sql, epsilon=1).rows
    assert row[0] >= 1  # the ordinary dates at least


@pytest.mark.parametrize("unit", sorted(TRUNC_UNITS))
@pytest.mark.parametrize("operand", ["d", "CAST(d AS TIMESTAMP)"])
def test_every_admitted_unit_is_computed_on_every_date(session: QuerySession, unit: str, operand: str) -> None:
    session.execute(f"SELECT COUNT(*) FILTER (WHERE DATE_TRUNC('{unit.lower()}', {operand}) IS NOT NULL) FROM t", epsilon=1)
    session.execute(f"SELECT DATE_TRUNC('{unit.lower()}', {operand}) AS k, COUNT(*) FROM t GROUP BY 1", epsilon=1)


@pytest.mark.parametrize("part", ["WEEK", "ISOYEAR", "YEARWEEK", "WEEKOFYEAR"])
def test_a_hidden_early_date_does_not_decide_the_ending(session: QuerySession, part: str) -> None:
    """The red team's shape: only one person's row (x = 0 holds the earliest date) reaches it. Written as a literal,
    ``DATE '-5877641-06-25'`` is refused now, free (no engine reads it alike: leftovers s17, item 2); the stored
    date still reaches the field."""
    (row,) = session.execute("SELECT COUNT(*) FILTER (WHERE d < DATE '0001-01-01' AND x = 0) FROM t", epsilon=1).rows
    assert row[0] == 1  # the witness: x = 0 holds the earliest date
    early = "CASE WHEN x = 0 THEN d ELSE DATE '2000-01-01' END"
    session.execute(f"SELECT COUNT(*) FILTER (WHERE EXTRACT({part} FROM {early}) > 0) FROM t", epsilon=1)
    session.execute(f"SELECT COUNT(*) FILTER (WHERE DATE_TRUNC('week', {early}) IS NULL) FROM t", epsilon=1)
    literal = "CASE WHEN x = 0 THEN DATE '-5877641-06-25' ELSE DATE '2000-01-01' END"
    before = session.budget().spent
    with pytest.raises(InvalidDatetimeFormat):
        session.execute(f"SELECT COUNT(*) FILTER (WHERE EXTRACT({part} FROM {literal}) > 0) FROM t", epsilon=1)
    assert session.budget().spent == before


def test_iso_week_fields_are_the_engines_on_ordinary_dates(session: QuerySession) -> None:
    (row,) = session.execute(
        "SELECT COUNT(*) FILTER (WHERE EXTRACT(WEEK FROM d) = 52 AND EXTRACT(ISOYEAR FROM d) = 1999) FROM t", epsilon=1
    ).rows
    assert row[0] == 1  # 2000-01-01 is in ISO week 52 of 1999 (and 1969-12-31 in week 1 of 1970)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT COUNT(*) FROM t WHERE EXTRACT(ERA FROM d) = 1",
        "SELECT COUNT(*) FROM t WHERE EXTRACT(TIMEZONE FROM d) = 0",
        "SELECT COUNT(*) FROM t WHERE EXTRACT(TIMEZONE_HOUR FROM d) = 0",
        "SELECT COUNT(*) FROM t WHERE EXTRACT(NANOSECOND FROM d) = 0",
        "SELECT COUNT(*) FROM t WHERE date_part('ns', d) = 0",
        "SELECT COUNT(*) FROM t WHERE DATE_TRUNC('era', d) IS NULL",
        "SELECT COUNT(*) FROM t WHERE DATE_TRUNC('timezone', d) IS NULL",
        "SELECT COUNT(*) FROM t WHERE DATE_TRUNC('timezone_hour', d) IS NULL",
        "SELECT COUNT(*) FROM t WHERE DATE_TRUNC(x, d) IS NULL",  # a column name is read as a unit called 'x'
    ],
)
def test_other_fields_and_units_are_refused_free(session: QuerySession, sql: str) -> None:
    before = session.budget().spent
    with pytest.raises(Unsupported, match=r"EXTRACT field|DATE_TRUNC unit"):
        session.execute(sql, epsilon=1)
    assert session.budget().spent == before
