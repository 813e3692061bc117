"""Cheaper steps of an answer's ledger work (session 24, issue 16), each giving exactly what it replaced.

* ``_now``: the release and reservation timestamps, formatted once a second, the same text as ``datetime.now(UTC)``'s
  ``isoformat(timespec="microseconds")`` at every instant;
* ``Ledger.catalog_generation``: remembered while SQLite's ``data_version`` stays put and this handle made no curator
  record; it equals the number read afresh after any interleaving of writes by this handle, another handle and
  another process's connection;
* ``releases._plain``: a list of plain rows checked in one pass, the same verdict as the row-by-row check it replaced.

Deterministic (hypothesis over exact values; no randomised statistic, so no false-failure rate).
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from veil.store import ledger as ledger_module
from veil.store import releases
from veil.store.ledger import Account, Cost, Ledger

# -- _now ------------------------------------------------------------------------------------------------------------

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _reference(ns: int) -> str:
    """What ``datetime.now(UTC).isoformat(timespec="microseconds")`` writes at ``ns`` nanoseconds (floored to µs)."""
    return (_EPOCH + timedelta(microseconds=ns // 1000)).isoformat(timespec="microseconds")


class _Clock:
    def __init__(self, values: list[int]) -> None:
        self.values = iter(values)

    def time_ns(self) -> int:
        return next(self.values)


# instants from 1970 to 9999, and runs of them within one second (the remembered second is reused) and across one
_LAST = 253_402_300_799 * 10**9 + 999_999_999  # 9999-12-31T23:59:59.999999999
_INSTANTS = st.integers(min_value=0, max_value=_LAST)
_RUNS = st.lists(
    st.tuples(_INSTANTS, st.lists(st.integers(min_value=-(10**9), max_value=2 * 10**9), max_size=4)),
    min_size=1,
    max_size=6,
)


@settings(max_examples=300, deadline=None)
@given(runs=_RUNS)
def test_now_writes_what_datetime_writes(runs: list[tuple[int, list[int]]]) -> None:
    instants = [min(_LAST, max(0, base + step)) for base, steps in runs for step in (0, *steps)]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ledger_module, "time", _Clock(instants))
        patch.setattr(ledger_module, "_SECOND", (-1, ""))
        for ns in instants:
            assert ledger_module._now() == _reference(ns)


def test_now_is_the_current_time() -> None:
    before = datetime.now(UTC)
    now = datetime.fromisoformat(ledger_module._now())
    after = datetime.now(UTC)
    assert before <= now <= after


# -- catalog_generation -----------------------------------------------------------------------------------------------


def _fresh_generation(path: Path) -> int:
    with sqlite3.connect(path) as con:
        row = con.execute(
            "SELECT (SELECT COALESCE(MAX(rowid), 0) FROM releases WHERE kind IN ('publication', 'retraction'))"
            " + (SELECT COALESCE(MAX(id), 0) FROM table_writes)"
        ).fetchone()
    con.close()
    return int(row[0])


_ACTIONS = st.lists(
    st.tuples(
        st.sampled_from(["table_write", "publication", "retraction", "query", "cancelled", "raw_write", "read"]),
        st.integers(0, 1),  # which handle
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=25, deadline=None)
@given(actions=_ACTIONS)
def test_the_remembered_catalog_generation_is_the_one_read_afresh(
    tmp_path_factory: pytest.TempPathFactory, actions: list[tuple[str, int]]
) -> None:
    """Two handles on one file (two sessions of a process) and a plain SQLite connection (another process): after
    every step, each handle's generation equals the one read from the file."""
    path = tmp_path_factory.mktemp("gen") / "l.sqlite"
    acct = [Account.analyst("a", Fraction(1000), Fraction(0))]
    with Ledger(path) as one, Ledger(path) as two:
        handles = (one, two)
        for h in handles:
            assert h.catalog_generation() == _fresh_generation(path)
        for action, which in actions:
            h = handles[which]
            if action == "table_write":
                h.record_table_write("t")
            elif action in ("publication", "retraction"):
                h.record(kind=action, method="m", params={}, metrics={}, table="t")
            elif action == "query":
                h.release(h.reserve(Cost(Fraction(1)), acct, actor="a"), answer={"rows": [[1]]})
            elif action == "cancelled":
                h.cancel(h.reserve(Cost(Fraction(1)), acct, actor="a"))
            elif action == "raw_write":  # another process's curator step, by its own connection
                with sqlite3.connect(path) as con:
                    con.execute("INSERT INTO table_writes(table_name, at) VALUES ('u', 'then')")
                con.close()
            for other in handles:
                assert other.catalog_generation() == _fresh_generation(path), (action, which)


def test_a_query_reads_the_generation_in_one_statement_while_nothing_changed(tmp_path: Path) -> None:
    """The point of remembering it: a query's reservation and release do not make the next query read two tables."""
    with Ledger(tmp_path / "l.sqlite") as led:
        acct = [Account.analyst("a", Fraction(10), Fraction(0))]
        led.catalog_generation()
        led.release(led.reserve(Cost(Fraction(1)), acct, actor="a"), answer={})
        seen: list[str] = []
        led._db.set_trace_callback(seen.append)
        led.catalog_generation()
        led._db.set_trace_callback(None)
    assert seen == ["PRAGMA data_version"]


# -- releases._plain --------------------------------------------------------------------------------------------------


def _old_plain(obj: Any) -> bool:
    """``releases._plain`` before session 24 (rows checked one call each)."""
    todo = [obj]
    scalars = releases._PLAIN_SCALARS
    while todo:
        item = todo.pop()
        t = type(item)
        if t in scalars:
            continue
        if t is list or t is tuple:
            if not scalars.issuperset(map(type, item)):
                todo.extend([v for v in item if type(v) not in scalars])
        elif t is dict:
            if any(type(k) is not str for k in item):
                return False
            todo.extend(item.values())
        else:
            return False
    return True


_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True),
    st.text(max_size=3),
    st.fractions(max_denominator=5),  # not plain
    st.integers(0, 5).map(np.int64),  # not plain
    st.floats(allow_nan=False).map(np.float64),  # not plain (a float subclass)
    st.builds(bytes),  # not plain
)
_VALUES = st.recursive(
    _LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=4).map(tuple),
        st.dictionaries(st.one_of(st.text(max_size=2), st.integers(0, 3)), inner, max_size=3),
    ),
    max_leaves=25,
)


@settings(max_examples=200, deadline=None)
@given(value=_VALUES)
def test_plain_gives_the_old_verdict(value: Any) -> None:
    assert releases._plain(value) == _old_plain(value)


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(st.lists(_LEAVES, max_size=4).map(tuple), max_size=6))
def test_plain_gives_the_old_verdict_on_rows(rows: list[tuple[Any, ...]]) -> None:
    for value in (rows, tuple(rows), {"rows": tuple(rows), "ci95": rows}):
        assert releases._plain(value) == _old_plain(value)


# -- a reservation's cap check ----------------------------------------------------------------------------------------

_FRACTIONS = st.fractions(min_value=0, max_value=10**6, max_denominator=10**40)


@settings(max_examples=200, deadline=None)
@given(x=_FRACTIONS, y=_FRACTIONS, limit=_FRACTIONS)
def test_a_cap_check_in_integers_is_the_fraction_sums(x: Fraction, y: Fraction, limit: Fraction) -> None:
    assert ledger_module._sum_exceeds(x, y, limit) == (x + y > limit)
    assert ledger_module._sum_exceeds(x, y, x + y) is False  # at the cap exactly: not over
    assert ledger_module._sum_exceeds(x, y, x + y - Fraction(1, 10**45)) is True
