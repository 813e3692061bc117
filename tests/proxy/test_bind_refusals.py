"""Class-level test: generated SQL that the engine cannot bind is refused and costs nothing.

The prepare pass binds queries with group keys or several statements before charging; a private
query of one statement without keys binds when it runs, and its engine error from before reading
data refunds the reservation (``veil.proxy.pipeline._execute``). Either way the analyst's spent
(ε, δ) must not move, the refusal is the engine's typed ``EngineError`` (SQLSTATE 22000), and the
ledger keeps no open reservation. Every wrapper (row-level functions the validator lets through
with a column of the wrong type) × every aggregate shape × with and without group keys.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from veil.engines.base import EngineError
from veil.policy import load_policy
from veil.proxy.session import QuerySession
from veil.store.ledger import Ledger
from veil.store.warehouse import write_table

POLICY = """\
[database]
path = "warehouse.duckdb"
[ledger]
path = "ledger.sqlite"
[defaults]
epsilon_per_query = 0.5
[tables.t]
privacy_unit = "row"
[tables.t.columns]
age = { type = "int", lower = 0, upper = 100 }
income = { type = "float", lower = 0, upper = 1000 }
sex = { type = "category", values = ["F", "M"] }
[analysts.ann]
epsilon = 100
"""

#: row-level conditions over a column of the wrong type that pass validation but not DuckDB's binder
UNBINDABLE = ("LENGTH(age) > 1", "age LIKE 'a%'", "SUBSTRING(age, 1, 2) = '1'", "YEAR(age) = 2000")
SHAPES = (
    "SELECT COUNT(*) FROM t WHERE {c}",
    "SELECT SUM(income) FROM t WHERE {c}",
    "SELECT AVG(income), COUNT(*) FROM t WHERE {c}",
    "SELECT sex, COUNT(*) FROM t WHERE {c} GROUP BY sex",
    "SELECT MEDIAN(income) FROM t WHERE {c}",
)


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[QuerySession]:
    d: Path = tmp_path_factory.mktemp("bind")
    (d / "policy.toml").write_text(POLICY, encoding="utf-8")
    policy = load_policy(d / "policy.toml")
    rng = np.random.default_rng(0)
    write_table(
        policy,
        "t",
        pd.DataFrame({"age": rng.integers(0, 100, 200), "income": rng.uniform(0, 1000, 200), "sex": rng.choice(["F", "M"], 200)}),
    )
    with QuerySession(policy, "ann") as s:
        yield s


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("cond", UNBINDABLE)
def test_unbindable_generated_sql_is_refused_free(session: QuerySession, shape: str, cond: str) -> None:
    before = session.budget()
    with pytest.raises(EngineError) as info:
        session.execute(shape.format(c=cond))
    assert info.value.before_data
    assert info.value.sqlstate == "22000"
    after = session.budget()
    assert (after.spent, after.delta_spent) == (before.spent, before.delta_spent)
    with Ledger.for_policy(session.policy) as ledger:
        assert all(r["status"] != "reserved" for r in ledger.reservations("ann"))


def test_a_bindable_twin_is_charged(session: QuerySession) -> None:
    """The same shapes with a bindable condition are answered and charged (the refund is not a free pass)."""
    before = session.budget().spent
    answer = session.execute("SELECT COUNT(*) FROM t WHERE LENGTH(sex) > 0")
    assert answer.epsilon_charged > 0
    assert session.budget().spent == before + answer.epsilon_charged
