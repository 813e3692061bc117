"""Leftovers of session 16's reviews, items 2–4 (item 1: ``test_leftovers_s16_casts.py``; Spark:
``test_leftovers_s16_spark.py``).

* Item 2: a text with a time-zone offset was refused by two near-copies of one conversion with two messages
  (compared with a date: "compares or combines a date/time value with the text …"; cast: "is not a date or time
  every engine reads alike"); one helper (``validate._iso_time``) now reads both, with one message.
* Item 3: ``veil ingest`` of a one-column CSV whose header holds a space (``full name``) split it into two columns
  (``_one_column_sep`` counted a space as a delimiter, and pandas' sniffer then took it): a CSV's delimiter is now
  one of ``, ; TAB |``, never a space.
* Item 4: ``BoundedCopies.ready`` remembered any PolicyError for the reader's generation, a passing one too (the
  warehouse's writer held by another process): every timed planning then refused with it until the generation
  moved. Only a reason that stands for the generation (the table lacks a declared column; a process that never
  writes the warehouse) is remembered now.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from veil.errors import CopyNotReady, PolicyError, TypeMismatch

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


def _policy(base: Path) -> Any:
    from veil.policy import load_policy
    from veil.store.warehouse import write_table

    (base / "policy.toml").write_text(POLICY, encoding="utf-8")
    policy = load_policy(base / "policy.toml")
    write_table(policy, "t", pd.DataFrame({"u": pd.array([1, 2], dtype="Int64"), "d": [dt.date(2000, 1, 1)] * 2}))
    return policy


# --- item 2 -----------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from veil.proxy._testing import exact_session

    with exact_session(_policy(tmp_path_factory.mktemp("s16")), "a") as s:
        yield s


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT COUNT(*) FROM t WHERE d = '2000-01-01 00:00+05:00'",
        "SELECT COUNT(*) FROM t WHERE d < CAST('2000-01-01 00:00+05:00' AS TIMESTAMP)",
        "SELECT COUNT(*) FROM t WHERE d < TIMESTAMP '2000-01-01T00:00:00+05:00'",
    ],
    ids=["compared", "cast", "typed-literal"],
)
def test_an_offset_is_refused_with_one_message(session: Any, sql: str) -> None:
    before = session.budget().spent
    with pytest.raises(TypeMismatch) as info:
        session.execute(sql)
    assert session.budget().spent == before
    assert "has a time-zone offset, which the engines read differently" in info.value.message
    assert info.value.hint is not None and info.value.hint.startswith("Write the date or time in ISO form without a time zone")


def test_compared_and_cast_texts_are_written_out_alike(session: Any) -> None:
    """The one helper still writes both in ISO form (Python's reading of ``'20000101'`` and a week date)."""
    for sql in (
        "SELECT COUNT(*) FROM t WHERE d = '20000101'",
        "SELECT COUNT(*) FROM t WHERE d = DATE '20000101'",
        "SELECT COUNT(*) FROM t WHERE d = CAST('1999-W52-6' AS DATE)",
        "SELECT COUNT(*) FROM t WHERE d = TIMESTAMP '2000-01-01'",
    ):
        assert session.execute(sql).rows == ((2,),), sql


# --- item 3 -----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "columns"),
    [
        ("full name\nAda Lovelace\nAlan Turing\n", ["full name"]),
        ("x\n0\n1\n", ["x"]),
        ("full name;age\nAda Lovelace;36\n", ["full name", "age"]),
        ("full name,age\nAda Lovelace,36\nAlan Turing,41\n", ["full name", "age"]),
        ("a\tb c\n1\t2 3\n", ["a", "b c"]),
        ("a|b\n1|2\n", ["a", "b"]),
    ],
    ids=["one-column-space", "one-column", "semicolon", "comma", "tab", "pipe"],
)
def test_a_space_never_delimits_a_csv(tmp_path: Path, text: str, columns: list[str]) -> None:
    from veil.store.warehouse import _read_source

    path = tmp_path / "f.csv"
    path.write_text(text, encoding="utf-8")
    assert list(_read_source(path).columns) == columns


# --- item 4 -----------------------------------------------------------------------------------------------------------


def test_a_passing_refusal_is_not_remembered_for_the_generation(tmp_path: Path) -> None:
    """The first untimed preparation meets a passing PolicyError (the writer is held elsewhere); the timed planning
    after it is told to retry (CopyNotReady), not refused with the stale reason, and the next preparation builds."""
    from veil.engines.duckdb import DuckDBEngine
    from veil.proxy.bounding import BoundedCopies
    from veil.store.ledger import Ledger

    policy = _policy(tmp_path)

    class Locked(DuckDBEngine):
        held = True

        def materialise(self, name: str, sql: str) -> None:
            if self.held:
                raise PolicyError("cannot open the warehouse for writing", hint="Another process holds it; retry")
            super().materialise(name, sql)

    engine, ledger, copies = Locked(policy), Ledger.for_policy(policy), BoundedCopies()
    spec = policy.table("t")
    args: dict[str, Any] = {"scope": "w", "generation": lambda: 1}
    try:
        copies.ready(spec, engine, ledger, **args)
        with pytest.raises(CopyNotReady):
            copies.table(spec, engine, ledger, build=False, **args)
        engine.held = False
        copies.ready(spec, engine, ledger, **args)
        assert copies.known(spec, **args)
    finally:
        engine.close()
        ledger.close()


def test_a_missing_column_is_remembered_for_the_generation(tmp_path: Path) -> None:
    """A reason of the table's schema stands for the generation: remembered, and the timed planning gives it."""
    from veil.engines.duckdb import DuckDBEngine
    from veil.policy import load_policy
    from veil.proxy.bounding import BoundedCopies
    from veil.store.ledger import Ledger

    _policy(tmp_path)
    (tmp_path / "policy.toml").write_text(POLICY.replace('d = { type = "date" }', 'd = { type = "date" }\ne = { type = "int" }'))
    policy = load_policy(tmp_path / "policy.toml")
    engine, ledger, copies = DuckDBEngine(policy), Ledger.for_policy(policy), BoundedCopies()
    spec = policy.table("t")
    args: dict[str, Any] = {"scope": "w", "generation": lambda: 1}
    try:
        copies.ready(spec, engine, ledger, **args)
        with pytest.raises(PolicyError, match="no column 'e'"):
            copies.table(spec, engine, ledger, build=False, **args)
    finally:
        engine.close()
        ledger.close()
