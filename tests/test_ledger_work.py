"""The ledger's work per answered query: a reservation reads and writes its accounts once each, whatever their number;
the answer's remaining budget comes from the reservation, not a second read; and the spend it keeps stays exact.

Counted in SQL statements (SQLite's trace callback: deterministic, unlike time). Each statement costs its prepare and
step and a round trip through the GIL; a query used to issue one read and one write per account (and one more read per
account for δ), and one more read of the analyst's account after its release.
"""

from __future__ import annotations

import sqlite3
import tempfile
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from fractions import Fraction
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.attack_world import build_world
from veil.errors import BudgetExhausted, InternalError
from veil.store import wal_sync
from veil.store.ledger import Account, Cost, Ledger
from veil.store.releases import ReleasedVector


@contextmanager
def traced(db: sqlite3.Connection) -> Iterator[list[str]]:
    statements: list[str] = []
    db.set_trace_callback(statements.append)
    try:
        yield statements
    finally:
        db.set_trace_callback(None)


def _accounts(n: int, capped: bool) -> list[Account]:
    cap = Fraction(100) if capped else None
    return [Account.analyst("a", Fraction(100), Fraction(1, 10**3))] + [
        Account.table(f"t{i}", cap, Fraction(1, 10**3) if capped else None) for i in range(n - 1)
    ]


@pytest.mark.parametrize("capped", [True, False], ids=["capped", "uncapped"])
@pytest.mark.parametrize("delta", [Fraction(0), Fraction(1, 10**6)], ids=["pure-eps", "with-delta"])
@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_a_reservation_and_its_refund_read_and_write_the_accounts_once(
    tmp_path: Path, n: int, delta: Fraction, capped: bool
) -> None:
    accounts = _accounts(n, capped)
    with Ledger(tmp_path / "l.sqlite") as led:
        led.release(led.reserve(Cost(Fraction(1, 10), delta), accounts, actor="a"), answer={})  # rows exist now
        with traced(led._db) as reserve:
            r = led.reserve(Cost(Fraction(1, 10), delta), accounts, actor="a")
        with traced(led._db) as cancel:
            led.cancel(r)
        for key in (a.key for a in accounts):
            assert led.spent(key) == Cost(Fraction(1, 10), delta)
    reads = [s for s in reserve if "FROM accounts" in s]
    writes = [s for s in reserve if s.startswith("INSERT INTO accounts")]
    assert (len(reads), len(writes), len(reserve)) == (1, 1, 5), reserve
    assert len(cancel) == 5, cancel  # BEGIN, the status, one read, one write, COMMIT


def test_a_reservation_carries_each_accounts_spend_as_committed(tmp_path: Path) -> None:
    accounts = _accounts(3, capped=True)
    with Ledger(tmp_path / "l.sqlite") as led, Ledger(tmp_path / "l.sqlite") as other:
        other.reserve(Cost(Fraction(1, 3)), accounts[1:2], actor="b")  # another session's charge on one table
        r = led.reserve(Cost(Fraction(1, 7), Fraction(1, 10**5)), accounts, actor="a")
        assert r.spent == tuple(led.spent(a.key) for a in accounts)
        assert r.spent[1] == Cost(Fraction(1, 3) + Fraction(1, 7), Fraction(1, 10**5))


def test_an_answer_reports_what_remained_without_reading_the_ledger_again(tmp_path: Path) -> None:
    from veil.policy import load_policy
    from veil.proxy.session import QuerySession

    world = build_world(tmp_path / "w")
    with QuerySession(load_policy(world.policy), "api") as s:
        s.execute("SELECT COUNT(*) FROM people", epsilon=0.5)  # copies built, plan cached
        with traced(s._env.ledger._db) as statements:
            answer = s.execute("SELECT COUNT(*) FROM people WHERE age > 30", epsilon=0.25)
        assert answer.epsilon_remaining == s.budget().remaining
    released = next(i for i, t in enumerate(statements) if t.startswith("INSERT INTO releases"))
    after = [t for t in statements[released:] if "accounts" in t]
    assert after == [], f"the ledger was read again after the release: {after}"


def _done(path: Path, *, defer: bool = False) -> Future[None]:
    f: Future[None] = Future()
    f.set_result(None)
    return f


_COSTS = st.builds(
    Cost,
    st.fractions(min_value=0, max_value=2, max_denominator=10**6),
    st.sampled_from([Fraction(0), Fraction(1, 10**6), Fraction(1, 3 * 10**5)]),
)
_OPS = st.lists(
    st.tuples(st.sampled_from(["release", "cancel", "hold"]), st.integers(0, 1), st.sets(st.integers(0, 3)), _COSTS),
    min_size=1,
    max_size=14,
)


@settings(max_examples=40, deadline=None)
@given(ops=_OPS)
def test_spend_is_the_exact_sum_of_what_stands_across_handles(ops: list[tuple[str, int, set[int], Cost]]) -> None:
    """Two handles on one file take turns (a row the other handle rewrote is read afresh): every account's spend is the
    exact sum of the charges not refunded, a refusal charges nothing, and no cap is ever passed."""
    caps = [
        Account.analyst("a", Fraction(3), Fraction(1, 10**5)),
        Account.table("capped", Fraction(2), Fraction(2, 10**6)),
        Account.table("open", None, None),
        Account.analyst("b", Fraction(5, 2), Fraction(0)),
    ]
    expected = {a.key: Cost(Fraction(0)) for a in caps}
    with tempfile.TemporaryDirectory() as tmp, mock.patch.object(wal_sync, "start", _done):
        handles = [Ledger(Path(tmp) / "l.sqlite"), Ledger(Path(tmp) / "l.sqlite")]
        for what, h, chosen, cost in ops:
            accounts = [caps[i] for i in sorted(chosen)]
            fits = all(
                (a.epsilon_total is None or expected[a.key].epsilon + cost.epsilon <= a.epsilon_total)
                and (a.delta_total is None or expected[a.key].delta + cost.delta <= a.delta_total)
                for a in accounts
            )
            try:
                r = handles[h].reserve(cost, accounts, actor="x")
            except BudgetExhausted:
                assert not fits
                continue
            assert fits
            for a in accounts:
                expected[a.key] = expected[a.key] + cost
            assert r.spent == tuple(expected[a.key] for a in accounts)
            if what == "cancel":
                handles[1 - h].cancel(r)
                for a in accounts:
                    expected[a.key] = Cost(expected[a.key].epsilon - cost.epsilon, expected[a.key].delta - cost.delta)
            elif what == "release":
                handles[1 - h].release(r, answer={}, vectors=[], groups=[])
        for led in handles:
            assert {a.key: led.spent(a.key) for a in caps} == expected
            led.close()


@given(eps=st.fractions(min_value=-2, max_value=2), delta=st.fractions(min_value=-2, max_value=2))
def test_a_cost_is_valid_exactly_when_its_epsilon_and_delta_are_in_range(eps: Fraction, delta: Fraction) -> None:
    if eps >= 0 and 0 <= delta < 1:
        assert Cost(eps, delta).delta == delta
    else:
        with pytest.raises(InternalError, match="out of range"):
            Cost(eps, delta)


def test_a_release_logs_its_vectors_in_a_fixed_number_of_statements(tmp_path: Path) -> None:
    vector = ReleasedVector("count(*)", "discrete_laplace", Fraction(1, 10), 1.0, 10.0, 30.0, (3.0,))
    with Ledger(tmp_path / "l.sqlite") as led:
        r = led.reserve(Cost(Fraction(1, 10)), _accounts(2, capped=False), actor="a")
        with traced(led._db) as statements:
            led.release(r, answer={"rows": [[3]]}, vectors=[vector], groups=[()])
        (release,) = led.list_releases("query")
    assert len(statements) == 6, statements  # BEGIN, the status, the release, its groups, its vector, COMMIT
    assert [s.value for s in release.statistics] == [3.0]
