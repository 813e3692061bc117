"""Ledger: exact spend under many (concurrent) queries, refusal, cancel, cache, crash visibility."""

from __future__ import annotations

import random
import threading
from fractions import Fraction
from pathlib import Path

import pytest

from veil.errors import BudgetExhausted, InternalError
from veil.store.ledger import Ledger
from veil.store.releases import ReleasedStatistic


def stat(value: float = 1.0) -> ReleasedStatistic:
    return ReleasedStatistic("count(*)", "discrete_laplace", Fraction(1, 10), 1.0, 10.0, value, 30.0, ("Male",))


def test_many_queries_sum_exactly(tmp_path: Path) -> None:
    led = Ledger(tmp_path / "l.sqlite")
    rng = random.Random(0)
    charges = [Fraction(rng.randint(1, 9), rng.choice([3, 7, 10, 11])) for _ in range(200)]
    budget = sum(charges)
    for i, c in enumerate(charges):
        r = led.reserve("alice", c, budget, canonical_sql=f"q{i}", cache_key=f"k{i}")
        led.release(r, answer={"i": i}, statistics=[stat()])
    assert led.spent("alice") == budget
    with pytest.raises(BudgetExhausted, match="remaining of"):
        led.reserve("alice", Fraction(1, 10**9), budget, canonical_sql="x", cache_key="x")
    assert led.spent("alice") == budget  # the refusal charged nothing


def test_concurrent_reservations_never_exceed_budget(tmp_path: Path) -> None:
    path = tmp_path / "l.sqlite"
    budget = Fraction(5)
    ok: list[Fraction] = []
    refused = []

    def worker(seed: int) -> None:
        led = Ledger(path)  # one handle per thread, like separate sessions/processes
        rng = random.Random(seed)
        for _ in range(30):
            c = Fraction(rng.randint(1, 5), 10)
            try:
                r = led.reserve("bob", c, budget, canonical_sql="q", cache_key=str(rng.random()))
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
    assert led.spent("bob") == sum(ok) <= budget
    assert refused, "the budget should have run out"
    assert sum(r["epsilon"] for r in led.reservations("bob") if r["status"] != "cancelled") == sum(ok)


def test_cancel_refunds_and_double_release_is_a_bug(tmp_path: Path) -> None:
    led = Ledger(tmp_path / "l.sqlite")
    r = led.reserve("a", Fraction(1, 2), Fraction(1), canonical_sql="q", cache_key="k")
    led.cancel(r)
    assert led.spent("a") == 0
    with pytest.raises(InternalError, match=r"(?i)this is a bug"):
        led.release(r, answer={}, statistics=[])


def test_crash_between_reserve_and_release_stays_charged(tmp_path: Path) -> None:
    path = tmp_path / "l.sqlite"
    led = Ledger(path)
    led.reserve("a", Fraction(1, 4), Fraction(1), canonical_sql="SELECT 1", cache_key="k")
    led.close()  # "crash": the process dies before release
    again = Ledger(path)
    assert again.spent("a") == Fraction(1, 4)
    (row,) = again.reservations("a")
    assert row["status"] == "reserved"
    assert again.cached_answer("a", "k") is None  # nothing was released


def test_cache_returns_logged_answer_per_analyst(tmp_path: Path) -> None:
    led = Ledger(tmp_path / "l.sqlite")
    r = led.reserve("a", Fraction(1), Fraction(2), canonical_sql="q", cache_key="k")
    rid = led.release(r, answer={"rows": [[41.5]]}, statistics=[stat(41.5)])
    assert led.cached_answer("a", "k") == {"rows": [[41.5]]}
    assert led.cached_answer("b", "k") is None
    rel = led.get_release(rid)
    assert rel.statistics[0].value == 41.5 and rel.statistics[0].group == ("Male",)
    assert rel.epsilon == 1 and rel.kind == "query" and rel.canonical_sql == "q"


def test_publication_records_and_charge(tmp_path: Path) -> None:
    led = Ledger(tmp_path / "l.sqlite")
    pid = led.record(
        kind="publication",
        method="pate",
        params={"teachers": 250},
        metrics={"acc": 0.8},
        epsilon=2.5,
        delta=1e-5,
        charge_to="curator",
        budget=Fraction(3),
    )
    assert led.spent("curator") == Fraction(5, 2)
    rel = led.get_release(pid)
    assert rel.params == {"teachers": 250} and rel.delta == 1e-5
    with pytest.raises(BudgetExhausted):
        led.record(kind="publication", method="pate", params={}, metrics={}, epsilon=1, charge_to="curator", budget=Fraction(3))
