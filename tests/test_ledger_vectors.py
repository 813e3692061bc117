"""A query release logs each statistic once over its groups (schema version 3) and reads back value by value.

Before, a GROUP BY of 50 groups and 3 statistics logged 150 ``statistics`` rows (each with its own JSON), which cost
more than the query's noise; now it logs 3 ``statistic_vectors`` rows and the groups once. Readers see no change:
:meth:`Ledger.get_release` expands the vectors into one :class:`ReleasedStatistic` per value, in the order the
per-value rows had (statistic by statistic, group by group). Releases logged per value stay readable.
"""

from __future__ import annotations

import math
import sqlite3
from fractions import Fraction
from pathlib import Path

import pytest

from tests.support.attack_world import build_world
from veil.errors import InternalError
from veil.store.ledger import Account, Cost, Ledger
from veil.store.releases import ReleasedStatistic, ReleasedVector

ALICE = Account.analyst("alice", Fraction(10), Fraction(1, 10**5))
GROUPS = (("F", None), ("M", "ü ' \" \\"), ("", 3))


def _vectors() -> tuple[ReleasedVector, ...]:
    return (
        ReleasedVector("count(*)", "discrete_laplace", Fraction(1, 3), 1.0, 3.0, 11.2, (5, -1, 2**62)),
        ReleasedVector("sum(x)", "laplace", Fraction(2, 3), 4.5, 6.75, None, (1.5, math.nan, -1e300)),
    )


def test_vectors_read_back_as_one_statistic_per_value(tmp_path: Path) -> None:
    with Ledger(tmp_path / "l.sqlite") as led:
        r = led.reserve(Cost(Fraction(1)), [ALICE], actor="alice")
        rid = led.release(r, answer={"rows": []}, vectors=_vectors(), groups=GROUPS)
        got = led.get_release(rid).statistics
        old = led.reserve(Cost(Fraction(1)), [ALICE], actor="alice")
        per_value = ReleasedStatistic("count(*)", "discrete_laplace", Fraction(1), 1.0, 1.0, 7, 2.0, ("F",))
        old_rid = led.release(old, answer={"rows": []}, statistics=[per_value])
        assert led.get_release(old_rid).statistics == (per_value,)  # the per-value log is still read
    expected = [s for v in _vectors() for s in v.rows([tuple(g) for g in GROUPS])]
    assert len(got) == 6
    for a, b in zip(got, expected, strict=True):
        same_value = a.value == b.value or (math.isnan(a.value) and math.isnan(b.value))
        assert (a.name, a.mechanism, a.epsilon, a.sensitivity, a.scale, a.ci95, a.group) == (
            b.name, b.mechanism, b.epsilon, b.sensitivity, b.scale, b.ci95, b.group,
        ) and same_value  # fmt: skip
    assert [s.group for s in got[:3]] == [("F", None), ("M", "ü ' \" \\"), ("", 3)]
    assert got[2].value == 2**62 and isinstance(got[2].value, int)


def test_a_vector_that_does_not_match_its_groups_logs_nothing(tmp_path: Path) -> None:
    with Ledger(tmp_path / "l.sqlite") as led:
        r = led.reserve(Cost(Fraction(1)), [ALICE], actor="alice")
        with pytest.raises(InternalError, match="3 values of 'count"):
            led.release(r, answer={"rows": []}, vectors=_vectors()[:1], groups=GROUPS[:2])
        assert [x["status"] for x in led.reservations("alice")] == ["reserved"]  # charged, nothing logged
        assert led.list_releases("query") == []


def test_a_group_by_query_logs_one_row_per_statistic(tmp_path: Path) -> None:
    """Through the query path: the log holds the answer's groups once and one row per statistic; read back, it has
    one statistic per (statistic, released group), whose groups are the answer's keys."""
    from veil.policy import load_policy
    from veil.proxy.session import QuerySession

    world = build_world(tmp_path / "w")
    with QuerySession(load_policy(world.policy), "api") as s:
        ans = s.execute("SELECT dept, COUNT(*), AVG(age) FROM people GROUP BY dept", epsilon=1)
        n_stats = len(s.explain("SELECT dept, COUNT(*), AVG(age) FROM people GROUP BY dept", epsilon=1).statistics)
    assert ans.release_id is not None
    with Ledger(world.ledger) as led:
        stats = led.get_release(ans.release_id).statistics
    keys = [row[0] for row in ans.rows]
    assert sorted(keys) == ["a", "b", "c"]
    assert len(stats) == n_stats * len(keys)
    assert [s.group for s in stats[: len(keys)]] == [(k,) for k in keys]
    db = sqlite3.connect(world.ledger)
    try:
        vectors = db.execute("SELECT COUNT(*) FROM statistic_vectors WHERE release_id = ?", (ans.release_id,)).fetchone()
        per_value = db.execute("SELECT COUNT(*) FROM statistics WHERE release_id = ?", (ans.release_id,)).fetchone()
    finally:
        db.close()
    assert (vectors[0], per_value[0]) == (n_stats, 0)
