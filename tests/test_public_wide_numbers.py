"""A public table another tool wrote with DECIMAL or HUGEINT columns: what analysts read of it.

The public mirror's copy is written from a DataFrame (``warehouse.read_table``), so such a column arrives there as a
DOUBLE, and the catalog (typed from the mirror) calls it ``float``. Values beyond 2⁵³ meet (HUGEINT 2⁵³ and 2⁵³ + 1
are one DOUBLE). That cannot change a private answer's sensitivity or group domain: a private query joins the
*warehouse's* table, and its join-multiplicity probes and key domains read the same rows through the same
``TRY_CAST(… AS DOUBLE)`` (``proxy/public_reads.py``, ``Env.measure_engine``), so the keys that meet in the query
meet in the probe too (pinned below, D against each neighbour).

What did differ: DuckDB's DataFrame conversion of a DECIMAL divides its unscaled integer, rounded to a double, by
10^scale — two roundings — where ``CAST(… AS DOUBLE)`` rounds once. For 43% of DECIMAL(38, 10) values near 10⁶ the
mirror held another double than the private path reads (``1000001.000000792`` against ``1000001.0000007919``), so a
public-only answer listed values no private answer's group carries, and ``WHERE p.v = <that value>`` matched nothing
in a private query. ``read_table`` now reads DECIMAL and HUGEINT columns with DuckDB's own cast.
"""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

B = 2**53
#: the public rows' DECIMAL(38, 10) values: the first three are ones DuckDB's DataFrame conversion rounded differently
WIDE = ["1000001.0000007919", "1000003.0000023757", "1000005.0000039595", "0.1"]

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
k = { type = "int" }
j = { type = "int" }
[tables.p]
public = true
[analysts.a]
epsilon = 1000.0
"""


def _world(base: Path, drop: int | None = None) -> Any:
    from veil.policy import load_policy
    from veil.store.warehouse import write_table, writer

    base.mkdir(parents=True, exist_ok=True)
    (base / "policy.toml").write_text(POLICY, encoding="utf-8")
    policy = load_policy(base / "policy.toml")
    private = pd.DataFrame({"u": [1, 2, 3, 4, 5], "k": [B, B + 1, B + 2, 7, 7], "j": [0, 1, 2, 3, 3]})
    write_table(policy, "t", private[private["u"] != drop].reset_index(drop=True))
    with writer(policy) as con:  # another tool's table: DECIMAL and HUGEINT columns, as it typed them
        con.execute("CREATE TABLE p (k HUGEINT, g DECIMAL(38, 0), v DECIMAL(38, 10), h DECIMAL(18, 3), j INTEGER)")
        for i, v in enumerate(WIDE):
            con.execute(f"INSERT INTO p VALUES ({B + i}, {B + 1 - i}, '{v}', '{10**14 + i}.001', {i})")
        con.execute("INSERT INTO p VALUES (7, 7, '2.5', '1.5', 3)")
    return policy


@pytest.fixture(scope="module")
def worlds(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[int | None, Any]]:
    """D (every private row) and each neighbour D − {u}; an exact session on each."""
    from veil.proxy._testing import exact_session

    base = tmp_path_factory.mktemp("wide")
    sessions = {drop: exact_session(_world(base / str(drop), drop), "a") for drop in (None, 1, 2, 3, 4, 5)}
    yield sessions
    for s in sessions.values():
        s.close()


def _warehouse_doubles(policy: Any, column: str) -> list[float]:
    """What the private path reads of ``p.column``: the warehouse's value cast once to DOUBLE."""
    from veil.store.warehouse import writer

    with writer(policy) as con:
        return [r[0] for r in con.execute(f"SELECT DISTINCT TRY_CAST({column} AS DOUBLE) AS x FROM p ORDER BY x").fetchall()]


@pytest.mark.parametrize("column", ["k", "g", "v", "h"])
def test_public_answers_hold_the_values_private_answers_read(worlds: dict[int | None, Any], column: str) -> None:
    """The mirror's copy of each DECIMAL/HUGEINT column is the warehouse's value cast once to DOUBLE: what a public-only
    query lists is what a private query's group carries (failed for ``v`` and ``h``: values one or more ulps apart)."""
    session = worlds[None]
    public = [r[0] for r in session.execute(f"SELECT DISTINCT {column} FROM p ORDER BY {column}").rows]
    assert public == _warehouse_doubles(session.policy, column)
    grouped = session.execute(f"SELECT p.{column}, COUNT(*) FROM t JOIN p ON t.j = p.j GROUP BY p.{column}", epsilon=1.0)
    assert sorted(r[0] for r in grouped.rows) == public  # one group per public value, no other label


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT COUNT(*) FROM t JOIN p ON t.k = p.k",  # HUGEINT keys beyond 2⁵³ meet as DOUBLEs
        "SELECT COUNT(*) FROM t JOIN p ON t.k = p.g",  # DECIMAL(38, 0) the same
        "SELECT p.g, COUNT(*) FROM t JOIN p ON t.k = p.k GROUP BY p.g",
        "SELECT p.v, COUNT(*) FROM t JOIN p ON t.j = p.j GROUP BY p.v",
        "SELECT p.h, COUNT(*) FROM t JOIN p ON t.k = p.k GROUP BY p.h",
    ],
)
def test_precision_lost_keys_keep_private_answers_within_their_sensitivity(worlds: dict[int | None, Any], sql: str) -> None:
    """Each neighbour's exact answer, group by group, is within the planned sensitivity of D's, and every group is a
    value of the public domain the plan listed (the public column as the query reads it)."""
    from veil.proxy._testing import plan_of

    d = worlds[None]
    plan = plan_of(d, sql, 1.0)
    assert plan is not None and len(plan.statistics) == 1
    sensitivity = plan.statistics[0].sensitivity
    answers = {drop: dict((r[:-1], r[-1]) for r in s.execute(sql, epsilon=1.0).rows) for drop, s in worlds.items()}
    for drop, answer in answers.items():
        assert set(answer) == set(answers[None]), (drop, answer)  # a public domain: the same groups in every world
        for group, n in answer.items():
            assert abs(Fraction(n) - Fraction(answers[None][group])) <= sensitivity, (drop, group, sensitivity)
    if "GROUP BY" in sql:
        column = sql.split("GROUP BY p.")[1]
        assert sorted(g[0] for g in answers[None]) == _warehouse_doubles(d.policy, column)
    assert max(abs(sum(a.values()) - sum(answers[None].values())) for a in answers.values()) > 0  # a row mattered


def test_a_mirror_copied_before_the_one_rounding_is_copied_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Review s18: a mirror copy carries how its rows were read, so one an earlier format made (DECIMAL rounded twice
    through pandas) no longer counts as current for the same table version and is copied again."""
    from veil.store import warehouse

    now = warehouse.mirror_version("written.ab12", ["k", "v"]), warehouse.mirror_version("written.ab12", None)
    monkeypatch.setattr(warehouse, "MIRROR_FORMAT", warehouse.MIRROR_FORMAT - 1)
    before = warehouse.mirror_version("written.ab12", ["k", "v"]), warehouse.mirror_version("written.ab12", None)
    assert now[0] != before[0] and now[1] != before[1]
