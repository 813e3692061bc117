"""Leftovers of session 17, item 3: the bounded copy reads a date stored as text as the query path reads it.

A declared ``date`` column may be stored as text (a frame of strings, another tool's table). The query path casts a
text value to a date through the neutral render's ISO guard (:data:`veil.engines.neutral.ISO_TIME_TEXT`: any other
text is NULL, on every engine); the bounded copy cast the stored text with a bare ``TRY_CAST``, which DuckDB reads
more loosely (``' 2020-01-01'``, ``'2020-1-1'``, ``'infinity'`` are dates to it, NULL or other dates to Spark). The
copy now casts through the same guard. Witness: neighbouring worlds that differ in one person's text only; the
copy's rows of everyone else are the same, and that person's value is the guard's reading of the text.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from veil.engines.neutral import ISO_TIME_TEXT

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
d = { type = "date" }
[analysts.a]
epsilon = 1000.0
"""

OTHERS = ["2020-01-01", "2020-02-29", "1999-12-31", "2020-03-04 12:30", "0001-01-01"]
#: One person's text, odd ones first: (the text, its reading, the query path's: the guard's)
ODD = ["2020-01-01 junk", "2020-13-01", " 2020-01-01", "", "2020-1-1", "2020-01-01\n", "infinity", "20200101"]
READ = ["2020-01-01", "2020-01-01T23:59:59.5", "9999-12-31"]


def guard_reading(text: str) -> dt.date | None:
    """What the query path reads a text value cast to DATE as (``tests/test_leftovers_s16_casts.py``)."""
    if re.fullmatch(ISO_TIME_TEXT, text) is None:
        return None
    try:
        return dt.datetime.fromisoformat(text).date()
    except ValueError:
        return None


def copy_rows(base: Path, texts: list[str], extra: str = "") -> list[tuple[Any, ...]]:
    """The bounded copy (``u``, ``d``; by ``u``) of a world of one person per text (``extra``: an engine section)."""
    from sqlglot import exp

    from veil.engines import open_engine
    from veil.policy import load_policy
    from veil.proxy.bounding import COPIES, engine_generation
    from veil.store.ledger import Ledger
    from veil.store.warehouse import write_table

    base.mkdir(parents=True)
    (base / "policy.toml").write_text(POLICY + extra, encoding="utf-8")
    policy = load_policy(base / "policy.toml")
    write_table(policy, "t", pd.DataFrame({"u": pd.array(range(len(texts)), dtype="Int64"), "d": texts}))
    engine, ledger = open_engine(policy), Ledger.for_policy(policy)
    try:
        assert dict(engine.table_columns("t"))["d"].upper() in ("VARCHAR", "STRING")  # the date is stored as text
        name = COPIES.table(
            policy.table("t"), engine, ledger, scope=str(policy.database_path), generation=lambda: engine_generation(engine)
        )
        read = exp.select("u", "d").from_(exp.to_identifier(name, quoted=True)).order_by("u")
        return [tuple(r) for r in engine.execute(engine.render(read)).rows]
    finally:
        engine.close()
        ledger.close()


@pytest.fixture(scope="module")
def control(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[Any, ...]]:
    return copy_rows(tmp_path_factory.mktemp("s17b") / "control", [*OTHERS, "2020-05-05"])


@pytest.mark.parametrize("odd", ODD + READ, ids=[repr(t) for t in ODD + READ])
def test_one_persons_text_changes_only_that_persons_value(tmp_path: Path, control: list[tuple[Any, ...]], odd: str) -> None:
    rows = copy_rows(tmp_path / "world", [*OTHERS, odd])
    assert rows[:-1] == control[:-1]  # everyone else's rows, as in the neighbouring world
    assert control[:-1] == [(u, guard_reading(t)) for u, t in enumerate(OTHERS)]
    assert rows[-1] == (len(OTHERS), guard_reading(odd)), f"{odd!r} is read as the query path reads it"
