"""Ledger: exact (ε, δ) spend under many (concurrent) queries, accounts, refusal, cancel, cache, crash, migration."""

from __future__ import annotations

import random
import sqlite3
import threading
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from veil.errors import BudgetExhausted, InternalError
from veil.store.ledger import Account, Cost, Ledger
from veil.store.records import ReleasedStatistic


def stat(value: float = 1.0) -> ReleasedStatistic:
    return ReleasedStatistic("count(*)", "discrete_laplace", Fraction(1, 10), 1.0, 10.0, value, 30.0, ("Male",))


def analyst(name: str, eps: Fraction, delta: Fraction = Fraction(1, 10**5)) -> Account:
    return Account.analyst(name, eps, delta)


@pytest.mark.slow
def test_many_queries_sum_exactly(tmp_path: Path) -> None:
    led = Ledger(tmp_path / "l.sqlite")
    rng = random.Random(0)
    charges = [Fraction(rng.randint(1, 9), rng.choice([3, 7, 10, 11])) for _ in range(200)]
    budget = sum(charges)
    alice = analyst("alice", budget)
    for i, c in enumerate(charges):
        r = led.reserve(Cost(c), [alice], actor="alice", canonical_sql=f"q{i}", cache_key=f"k{i}")
        led.release(r, answer={"i": i}, statistics=[stat()])
    assert led.spent(alice.key) == Cost(budget)
    with pytest.raises(BudgetExhausted, match="remaining of"):
        led.reserve(Cost(Fraction(1, 10**9)), [alice], actor="alice")
    assert led.spent(alice.key) == Cost(budget)  # the refusal charged nothing


def test_concurrent_reservations_never_exceed_budget(tmp_path: Path) -> None:
    path = tmp_path / "l.sqlite"
    bob = analyst("bob", Fraction(5))
    ok: list[Fraction] = []
    refused = []

    def worker(seed: int) -> None:
        led = Ledger(path)  # one handle per thread, like separate sessions/processes
        rng = random.Random(seed)
        for _ in range(30):
            c = Fraction(rng.randint(1, 5), 10)
            try:
                r = led.reserve(Cost(c), [bob], actor="bob", canonical_sql="q", cache_key=str(rng.random()))
            except BudgetExhausted:
                refused.append(c)
                continue
            led.release(r, answer={}, statistics=[])
            ok.append(c)
        led.close()

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    led = Ledger(path)
    assert led.spent(bob.key).epsilon == sum(ok) <= 5
    assert refused, "the budget should have run out"
    assert sum(r["epsilon"] for r in led.reservations("bob") if r["status"] != "cancelled") == sum(ok)


def test_delta_is_composed_and_refused_when_it_runs_out(tmp_path: Path) -> None:
    led = Ledger(tmp_path / "l.sqlite")
    a = analyst("a", Fraction(100), Fraction(3, 10**7))
    per_query = Cost(Fraction(1, 100), Fraction(1, 10**7))
    for _ in range(3):
        led.release(led.reserve(per_query, [a], actor="a"), answer={}, statistics=[])
    assert led.spent(a.key) == Cost(Fraction(3, 100), Fraction(3, 10**7))
    with pytest.raises(BudgetExhausted, match="δ = 1e-07 but analyst 'a' has δ = 0 remaining"):
        led.reserve(per_query, [a], actor="a")
    led.reserve(Cost(Fraction(1, 100)), [a], actor="a")  # a pure-ε query still fits
    assert led.spent(a.key).delta == Fraction(3, 10**7)


def test_charge_is_all_accounts_or_none(tmp_path: Path) -> None:
    led = Ledger(tmp_path / "l.sqlite")
    alice, bob = analyst("alice", Fraction(10)), analyst("bob", Fraction(10))
    table = Account.table("adult", Fraction(3, 2), None)
    led.reserve(Cost(Fraction(1)), [alice, table], actor="alice")
    with pytest.raises(BudgetExhausted, match=r"needs ε = 1, which a privacy budget shared by every analyst"):
        led.reserve(Cost(Fraction(1)), [bob, table], actor="bob")
    assert led.spent(bob.key) == Cost(Fraction(0))  # bob's own budget was not touched by the refusal
    r = led.reserve(Cost(Fraction(1, 2)), [bob, table], actor="bob")
    assert led.spent(table.key).epsilon == Fraction(3, 2)
    led.cancel(r)
    assert led.spent(table.key).epsilon == 1 and led.spent(bob.key).epsilon == 0


def test_cancel_refunds_and_double_release_is_a_bug(tmp_path: Path) -> None:
    led = Ledger(tmp_path / "l.sqlite")
    a = analyst("a", Fraction(1))
    r = led.reserve(Cost(Fraction(1, 2), Fraction(1, 10**7)), [a], actor="a")
    led.cancel(r)
    assert led.spent(a.key) == Cost(Fraction(0))
    with pytest.raises(InternalError, match=r"(?i)this is a bug"):
        led.release(r, answer={}, statistics=[])


def test_crash_between_reserve_and_release_stays_charged(tmp_path: Path) -> None:
    path = tmp_path / "l.sqlite"
    led = Ledger(path)
    a = analyst("a", Fraction(1))
    led.reserve(Cost(Fraction(1, 4)), [a], actor="a", canonical_sql="SELECT 1", cache_key="k")
    led.close()  # "crash": the process dies before release
    again = Ledger(path)
    assert again.spent(a.key).epsilon == Fraction(1, 4)
    (row,) = again.reservations("a")
    assert row["status"] == "reserved" and row["accounts"] == ("analyst:a",)
    assert again.cached_answer("a", "k") is None  # nothing was released


def test_cache_returns_logged_answer_per_analyst(tmp_path: Path) -> None:
    led = Ledger(tmp_path / "l.sqlite")
    r = led.reserve(Cost(Fraction(1)), [analyst("a", Fraction(2))], actor="a", canonical_sql="q", cache_key="k")
    rid = led.release(r, answer={"rows": [[41.5]]}, statistics=[stat(41.5)])
    assert led.cached_answer("a", "k") == {"rows": [[41.5]]}
    assert led.cached_answer("b", "k") is None
    rel = led.get_release(rid)
    assert rel.statistics[0].value == 41.5 and rel.statistics[0].group == ("Male",)
    assert rel.epsilon == 1 and rel.delta == 0 and rel.kind == "query" and rel.canonical_sql == "q"


def test_publication_record_carries_its_reservation(tmp_path: Path) -> None:
    led = Ledger(tmp_path / "l.sqlite")
    table = Account.table("adult", Fraction(3), Fraction(1, 10**4))
    r = led.reserve(Cost(Fraction(5, 2), Fraction(1, 10**5)), [table], actor="curator", what="publication")
    pid = led.record(kind="publication", method="pate", params={"teachers": 250}, metrics={"acc": 0.8}, reservation=r)
    assert led.spent(table.key) == Cost(Fraction(5, 2), Fraction(1, 10**5))
    rel = led.get_release(pid)
    assert rel.params == {"teachers": 250} and rel.delta == Fraction(1, 10**5) and rel.epsilon == Fraction(5, 2)
    with pytest.raises(BudgetExhausted, match="publication needs"):
        led.reserve(Cost(Fraction(1)), [table], actor="curator", what="publication")
    with pytest.raises(InternalError):
        led.record(kind="publication", method="pate", params={}, metrics={}, reservation=r)  # already released


def test_version_1_ledger_is_migrated(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    db = sqlite3.connect(path)
    db.executescript(
        """
        CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
        INSERT INTO meta VALUES ('schema_version', '1');
        CREATE TABLE spend(analyst TEXT PRIMARY KEY, spent TEXT NOT NULL);
        INSERT INTO spend VALUES ('alice', '3/4');
        CREATE TABLE reservations(id TEXT PRIMARY KEY, analyst TEXT NOT NULL, epsilon TEXT NOT NULL,
            status TEXT NOT NULL, canonical_sql TEXT, cache_key TEXT, created_at TEXT NOT NULL, finished_at TEXT);
        CREATE INDEX reservations_analyst ON reservations(analyst, status);
        INSERT INTO reservations VALUES ('q1', 'alice', '3/4', 'released', 'q', 'k', '2026-01-01', '2026-01-01');
        CREATE TABLE releases(id TEXT PRIMARY KEY, kind TEXT NOT NULL, method TEXT NOT NULL, actor TEXT NOT NULL,
            created_at TEXT NOT NULL, table_name TEXT, params TEXT NOT NULL, metrics TEXT NOT NULL,
            epsilon TEXT, delta REAL, canonical_sql TEXT, cache_key TEXT, answer TEXT, reservation_id TEXT);
        INSERT INTO releases VALUES ('p1', 'publication', 'pate', 'curator', '2026-01-01', NULL, '{}', '{}',
            '2', 1e-05, NULL, NULL, NULL, NULL);
        """
    )
    db.close()
    led = Ledger(path)
    assert led.spent("analyst:alice") == Cost(Fraction(3, 4))
    (row,) = led.reservations("alice")
    assert row["accounts"] == ("analyst:alice",) and row["delta"] == 0
    assert led.get_release("p1").delta == Fraction(1, 10**5)
    led.reserve(Cost(Fraction(1, 4)), [analyst("alice", Fraction(1))], actor="alice")
    with pytest.raises(BudgetExhausted):
        led.reserve(Cost(Fraction(1, 100)), [analyst("alice", Fraction(1))], actor="alice")


def _open_at_once(path: Path, handles: int) -> list[BaseException]:
    barrier = threading.Barrier(handles)
    errors: list[BaseException] = []

    def open_one() -> None:
        barrier.wait()
        try:
            Ledger(path).close()
        except BaseException as exc:  # the test reports any failure to open
            errors.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(handles)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def test_many_handles_opening_a_new_ledger_at_once_all_open(tmp_path: Path) -> None:
    """Switching a new file to WAL needs it to itself; SQLite then answers "database is locked" at once to
    the others (no busy handler) — as when `veil serve --processes N` starts N workers on one ledger."""
    for attempt in range(8):
        errors = _open_at_once(tmp_path / f"fresh{attempt}.sqlite", 12)
        assert not errors, errors


def _history(path: Path, n: int) -> None:
    """``n`` logged query answers by other analysts and by alice (bulk SQL: a long-running ledger's history)."""
    with sqlite3.connect(path) as db:
        db.executemany(
            "INSERT INTO releases(id, kind, method, actor, created_at, params, metrics, canonical_sql, cache_key, answer) "
            "VALUES (?, 'query', 'query', ?, ?, '{}', '{}', 'q', ?, '{}')",
            [(f"r{i}", ("alice", "bob", "cat")[i % 3], f"2026-01-01T00:00:{i:09d}", f"k{i}") for i in range(n)],
        )


@pytest.mark.parametrize("op", ["cache hit", "cache miss", "reserve and release", "spent"])
def test_each_query_does_work_independent_of_the_ledgers_history(tmp_path: Path, op: str) -> None:
    # Counted in SQLite virtual-machine steps (deterministic, unlike time): the answer cache's lookup once
    # scanned every logged answer (SQLite chose the `kind` index), so every query grew slower with history.
    alice = analyst("alice", Fraction(10**6))
    steps = []
    for n in (30, 30_000):
        led = Ledger(tmp_path / f"{n}.sqlite")
        _history(tmp_path / f"{n}.sqlite", n)
        count = [0]

        def tick(count: list[int] = count) -> int:
            count[0] += 1
            return 0

        led._db.set_progress_handler(tick, 10)
        if op == "cache hit":
            assert led.cached_answer("alice", "k3") == {}
        elif op == "cache miss":
            assert led.cached_answer("alice", "absent") is None
        elif op == "reserve and release":
            r = led.reserve(Cost(Fraction(1, 10)), [alice], actor="alice", canonical_sql="q", cache_key="new")
            led.release(r, answer={"x": 1}, statistics=[stat()])
        else:
            led.spent(alice.key)
        steps.append(count[0])
        led.close()
    assert steps[1] <= 2 * steps[0] + 50, f"{op}: {steps[0]} steps at 30 releases, {steps[1]} at 30,000"


def test_every_declared_table_is_an_account_capped_or_not() -> None:
    """An uncapped table's spend is recorded too, so a cap declared later counts the releases before it (red team
    s16 A3); an undeclared name is no account. The cap itself is per population (red team s66 F3): a charge on any
    table of the capped table's population (here both declare none: one population) must fit it, so it is checked as
    ``population-cap:capped`` (no row of its own) and the table accounts carry no cap."""
    from types import SimpleNamespace

    from veil.store.ledger import accounts_for

    policy = SimpleNamespace(
        tables={
            "capped": SimpleNamespace(epsilon_total=Fraction(3), delta_total=None),
            "open": SimpleNamespace(epsilon_total=None, delta_total=None),
        },
        analyst=lambda name: SimpleNamespace(epsilon=Fraction(10), delta=Fraction(0)),
    )
    keys = [a.key for a in accounts_for(policy, analyst="bob", tables=["capped", "open", "nosuch", "open"])]  # type: ignore[arg-type]
    capped_under, open_under = 'under:["capped", ""]', 'under:["open", ""]'  # the population charged under (s69 F4)
    assert keys == ["analyst:bob", "table:capped", capped_under, "table:open", open_under, "population-cap:capped"]
    accounts = accounts_for(policy, analyst="bob", tables=["open"])  # type: ignore[arg-type]
    assert [(a.key, a.epsilon_total, a.pool is not None) for a in accounts[1:]] == [
        ("table:open", None, False),
        (open_under, None, False),
        ("population-cap:capped", Fraction(3), True),
    ]


def test_a_cap_declared_later_counts_earlier_uncapped_spend(tmp_path: Path) -> None:
    with Ledger(tmp_path / "l.sqlite") as led:
        for _ in range(4):
            r = led.reserve(Cost(Fraction(1), Fraction(0)), [Account.table("t", None, None)], actor="a", canonical_sql="q")
            led.release(r, answer={}, statistics=[])
        with pytest.raises(BudgetExhausted):
            led.reserve(Cost(Fraction(1), Fraction(0)), [Account.table("t", Fraction(3), None)], actor="a", canonical_sql="q")
        assert led.spent("table:t").epsilon == 4


@settings(max_examples=25, deadline=None)
@given(
    others=st.lists(st.fractions(min_value=Fraction(1, 1000), max_value=Fraction(1, 3)), min_size=0, max_size=4),
    ask=st.fractions(min_value=Fraction(2), max_value=Fraction(10**6)),
    delta_cap=st.booleans(),
)
def test_a_shared_accounts_refusal_does_not_depend_on_others_spend(
    tmp_path_factory: pytest.TempPathFactory, others: list[Fraction], ask: Fraction, delta_cap: bool
) -> None:
    """Red team s73 F2 (class): a refusal is free, so what it says may depend only on the asking analyst's own
    account. Two ledgers, one where other analysts spent ``others`` on a shared table account (capped in ε, or in δ)
    and one where nobody did: the spy's refusal (ε or δ too large) reads the same, word for word."""
    messages = []
    for spent_by_others in (others, []):
        led = Ledger(tmp_path_factory.mktemp("l") / "l.sqlite")
        table = Account.table("adult", Fraction(3, 2), Fraction(1, 10**4) if delta_cap else None)
        for i, eps in enumerate(spent_by_others):
            led.reserve(Cost(eps, Fraction(1, 10**6)), [analyst(f"o{i}", Fraction(5)), table], actor=f"o{i}")
        spy = analyst("spy", Fraction(10**7), Fraction(1, 2))
        cost = Cost(Fraction(1, 100), Fraction(1, 10**3)) if delta_cap else Cost(ask)
        with pytest.raises(BudgetExhausted) as info:
            led.reserve(cost, [spy, table], actor="spy")
        messages.append((str(info.value), info.value.hint))
        led.close()
    assert messages[0] == messages[1]


def test_an_uncapped_tables_vacuous_delta_refusal_does_not_quote_others_spend(tmp_path: Path) -> None:
    """The δ refusal of an uncapped table (its analysts' δ together would reach 1) names no amount of theirs."""
    led = Ledger(tmp_path / "l.sqlite")
    table = Account.table("adult", None, None)
    led.reserve(Cost(Fraction(1, 10), Fraction(3, 5)), [analyst("o", Fraction(5), Fraction(3, 5)), table], actor="o")
    with pytest.raises(BudgetExhausted, match="shared by every analyst") as info:
        led.reserve(Cost(Fraction(1, 10), Fraction(9, 20)), [analyst("spy", Fraction(5), Fraction(1, 2)), table], actor="spy")
    assert "0.6" not in str(info.value) and "3/5" not in str(info.value)
