"""An account's δ never grows to 1, however small the charges (red team s27 A8): the check compares the sum as it
will be stored (rounded up on the 10⁻³⁰ grid) with 1, and a stored sum of 1 (an older ledger) refuses every δ > 0
while charges of δ = 0 go on."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest

from veil.errors import BudgetExhausted
from veil.store.ledger import SPEND_GRID, Account, Cost, Ledger

TINY = [Fraction(1, 10**31), Fraction(1, 10**300), Fraction(1, 3 * SPEND_GRID), Fraction(1, SPEND_GRID)]


@pytest.mark.parametrize("stored", ["1", "1000001/1000000", str(1 - Fraction(1, SPEND_GRID))])
@pytest.mark.parametrize("delta", TINY)
def test_an_account_at_the_top_of_the_delta_grid_refuses_every_positive_delta(
    tmp_path: Path, stored: str, delta: Fraction
) -> None:
    table = Account.table("t", None, None)
    with Ledger(tmp_path / "ledger.sqlite") as led:
        led.reserve(Cost(Fraction(1), Fraction(0)), [table], actor="a")
        led._db.execute("UPDATE accounts SET delta_spent = ? WHERE account = 'table:t'", (stored,))  # an older ledger
        led._db.commit()
        with pytest.raises(BudgetExhausted):
            led.reserve(Cost(Fraction(1), delta), [table], actor="a")
        led.reserve(Cost(Fraction(1), Fraction(0)), [table], actor="a")
        assert led.spent("table:t").epsilon == 2 and led.spent("table:t").delta < 1


@pytest.mark.parametrize("delta", TINY)
def test_many_tiny_deltas_stop_below_one(tmp_path: Path, delta: Fraction) -> None:
    """From 1 − 3·10⁻³⁰, charges of a tiny δ are granted only while the stored (rounded-up) sum stays below 1: their
    exact total stays below 3·10⁻³⁰, never without bound."""
    table = Account.table("t", None, None)
    granted = 0
    with Ledger(tmp_path / "ledger.sqlite") as led:
        led.reserve(Cost(Fraction(1), 1 - Fraction(3, SPEND_GRID)), [table], actor="a")
        for _ in range(12):
            try:
                led.reserve(Cost(Fraction(1), delta), [table], actor="a")
            except BudgetExhausted:
                break
            granted += 1
        assert led.spent("table:t").delta < 1
    assert granted * delta < Fraction(3, SPEND_GRID)
