"""Leftovers of session 16, item 1: a text cast to DATE or TIMESTAMP means the same on every engine.

Red team s45 left it described: DuckDB and Spark read some texts differently — ``'2000-01-01 00:00:00+05:00'`` is
2000-01-01 00:00 on DuckDB (offset ignored) and 1999-12-31 19:00 on Spark; ``'infinity'``, ``'2020-1-1'``,
``' 2020-01-01 '``, ``'2000-01-01 24:00'`` are values on one engine and NULL on the other. The neutral render
(``veil.engines.neutral``) now casts only the texts of one ISO subset (``YYYY-MM-DD``, then optionally ``T`` or a
space and ``HH:MM``, ``:SS``, ``.f`` up to six digits), which both read alike; any other text is NULL on both. These
tests run on DuckDB only (the oracle is Python's reading of the subset); ``test_leftovers_s16_spark.py`` runs the
same queries on both engines.
"""

from __future__ import annotations

import datetime as dt
import re
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import sqlglot
from sqlglot import exp
from sqlglot.optimizer.annotate_types import annotate_types
from sqlglot.optimizer.qualify import qualify

from veil.engines.neutral import CANNOT_RAISE, ISO_TIME_TEXT, neutralise

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
s = { type = "category" }
[analysts.a]
epsilon = 1000000.0
"""

#: Texts the engines read differently (s45), texts in the subset, and near misses of it.
TEXTS = [
    "2000-01-01 00:00:00+05:00", "2000-01-01T00:00:00+05:00", "infinity", "-infinity", "epoch", "0044-03-15 (BC)",
    "2020-1-1", " 2020-01-01 ", "2020-01-01\n", "2000-01-01 24:00", "2000-01-01 24:00:00", "2016-12-31 23:59:60",
    "2000-01-01 12:00:00.1234567", "2000-01-01 1:02", "20000101", "10000-01-01", "2000-02-30", "",
    "2000-01-01", "2000-01-01 12:00", "2000-01-01T12:00", "2000-01-01 12:00:00", "2000-01-01 12:00:00.5",
    "2000-01-01 12:00:00.123456", "1999-12-31 23:59:59", "0001-01-01", "9999-12-31 23:59:59.999999", "2024-02-29",
]  # fmt: skip


def python_reading(text: str) -> dt.datetime | None:
    """What every engine now reads ``text`` as: the subset's texts as Python reads them, anything else NULL."""
    if re.fullmatch(ISO_TIME_TEXT, text) is None:
        return None
    try:
        return dt.datetime.fromisoformat(text)
    except ValueError:  # 2000-02-30: in the subset's shape, not a date (NULL on both engines)
        return None


def policy_in(base: Path, extra: str = "") -> Any:
    """The policy of a warehouse in ``base`` (``extra``: an ``[engine]`` section) holding :data:`TEXTS`."""
    from veil.policy import load_policy
    from veil.store.warehouse import write_table

    base.mkdir(parents=True, exist_ok=True)
    (base / "policy.toml").write_text(POLICY + extra, encoding="utf-8")
    policy = load_policy(base / "policy.toml")
    frame = pd.DataFrame({"u": pd.array(range(len(TEXTS)), dtype="Int64"), "s": TEXTS})
    write_table(policy, "t", frame, replace=True)
    return policy


def queries() -> dict[str, tuple[str, int]]:
    """Name → (query, the exact answer every engine must give)."""
    values = [python_reading(t) for t in TEXTS]
    read = sum(v is not None for v in values)
    noon = dt.datetime(2000, 1, 1, 12)
    return {
        "timestamp_not_null": ("SELECT COUNT(*) FROM t WHERE CAST(s AS TIMESTAMP) IS NOT NULL", read),
        "date_not_null": ("SELECT COUNT(*) FROM t WHERE CAST(s AS DATE) IS NOT NULL", read),
        "timestamp_equal": (
            "SELECT COUNT(*) FROM t WHERE CAST(s AS TIMESTAMP) = TIMESTAMP '2000-01-01 12:00:00'",
            values.count(noon),
        ),
        "date_equal": (
            "SELECT COUNT(*) FROM t WHERE s::date = DATE '2000-01-01'",
            sum(v is not None and v.date() == dt.date(2000, 1, 1) for v in values),
        ),
        "date_before": (
            "SELECT COUNT(*) FROM t WHERE CAST(LOWER(s) AS DATE) < DATE '2000-01-01'",
            sum(v is not None and v.date() < dt.date(2000, 1, 1) for v in values),
        ),
        "nested": (
            "SELECT COUNT(*) FROM t WHERE CAST(CASE WHEN u >= 0 THEN TRIM(s) END AS TIMESTAMP) IS NOT NULL",
            sum(python_reading(t.strip(" ")) is not None for t in TEXTS),
        ),
    }


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    import veil.proxy.bounding as bounding
    from veil.proxy._testing import exact_session

    saved = bounding.secrets
    bounding.secrets = types.SimpleNamespace(token_hex=lambda n: "5a" * n)  # type: ignore[assignment]
    try:
        with exact_session(policy_in(tmp_path_factory.mktemp("s16casts")), "a") as s:
            yield s
    finally:
        bounding.secrets = saved


@pytest.mark.parametrize("name", sorted(queries()))
def test_a_text_cast_to_a_date_reads_only_the_iso_subset(session: Any, name: str) -> None:
    """Before: DuckDB read ``'infinity'``, ``'2020-1-1'``, ``' 2020-01-01 '``, ``'2000-01-01 24:00'`` and the texts
    with an offset (dropping it) as dates, where Spark read them as NULL or moved them by the offset."""
    sql, expected = queries()[name]
    assert session.execute(sql).rows == ((expected,),), sql


def _neutral(sql: str) -> exp.Expression:
    schema = {"t": {"s": "VARCHAR", "d": "DATE"}}
    tree = qualify(sqlglot.parse_one(sql, read="postgres"), schema=schema, dialect="postgres")
    return neutralise(annotate_types(tree, schema=schema, dialect="postgres"))


def test_the_guard_is_built_once_and_never_priced_as_raising() -> None:
    """The cast of a text column reads ``NULLIF(REGEXP_EXTRACT(s, '^…\\z'), '')`` — the operand is not copied, so nested casts
    do not double it — marked as unable to raise (it never does); a date column, a cast to text and a literal (the
    same on every row; the validate pass writes it in ISO form, and Veil's own guards cast literals beyond the
    subset, e.g. the ISO-week range's ends) are left alone."""
    from veil.proxy.expansion import measure

    tree = _neutral("SELECT TRY_CAST(TRY_CAST(TRY_CAST(s AS DATE) AS VARCHAR) AS TIMESTAMP) FROM t")
    guards = list(tree.find_all(exp.RegexpExtract))
    assert len(guards) == 2 and all(g.meta.get(CANNOT_RAISE) for g in guards)
    assert sum(1 for _ in tree.find_all(exp.Column)) == 1  # s, once
    m = measure(tree)
    assert m.partial == 0 and m.casts >= 2  # never priced as raising; each cast to a date as one that may fail
    assert not list(_neutral("SELECT TRY_CAST(d AS TIMESTAMP), TRY_CAST(s AS VARCHAR) FROM t").find_all(exp.RegexpExtract))
    literals = _neutral("SELECT TRY_CAST('-290000-01-01' AS DATE), TRY_CAST('2000-01-01 12:00:00' AS TIMESTAMP) FROM t")
    assert not list(literals.find_all(exp.RegexpExtract))


def test_the_subset_is_at_most_26_characters() -> None:
    """The Spark render reads the guard's text through its first 27 characters (Java's ``find`` would otherwise
    try every position of a long text): no text of the subset is longer than 26."""
    from veil.engines.neutral import ISO_TIME_LONGEST

    assert ISO_TIME_LONGEST == len("2000-01-01 12:00:00.123456") == 26
    assert re.fullmatch(ISO_TIME_TEXT, "2000-01-01 12:00:00.1234567") is None


@pytest.mark.parametrize("casts", [1, 20, 40])
@pytest.mark.parametrize("where", ["filter", "argument"])
def test_the_size_price_counts_each_text_casts_guard(session: Any, casts: int, where: str) -> None:
    """The rewrite's price of the generated statements (``generated_size_bound``, which refuses a query too large to
    plan before anything is built) counts the guard each text→date cast gains: without it, 20 casts in an aggregate's
    argument built more nodes than the price said."""
    from veil.proxy import pipeline
    from veil.proxy.catalog import public_types
    from veil.proxy.rewrite import generated_size_bound

    cond = " OR ".join(f"CAST(s AS DATE) = DATE '2000-01-{1 + i % 28:02d}'" for i in range(casts))
    sql = (
        f"SELECT COUNT(*) FILTER (WHERE {cond}) FROM t"
        if where == "filter"
        else f"SELECT SUM(CASE WHEN {cond} THEN 1 ELSE 0 END) FROM t"
    )
    state = pipeline.run(session._state(sql, 1), session._env, until="plan")
    assert state.plan is not None
    price = generated_size_bound(state.plan, public_types(session._env.catalog(), state.plan.analysis.tables))
    state = pipeline.run(state, session._env, until="rewrite")
    built = sum(1 for t in [state.queries.main, *(g for _, g in state.queries.grids)] if t is not None for _ in t.walk())
    assert built <= price + 60, (price, built)  # the template around the arguments: a few nodes per statement
