"""Red team, session 15: the query path's less attacked shapes — group-key representatives, partition selection,
less common aggregates, the answer cache and the shape/type of answers.

Same harness idea as sessions 4–14 (:mod:`tests.adversarial.test_redteam_s4`): D and D′ differ in one person (the
target, unit 7) or in one of their values; the same analyst SQL must end the same way on both, and every released
value must differ only through the noise (noise off here: ``veil.proxy._testing.exact_session``).

Part A holds attacks that succeed today (the tests FAIL until Veil is fixed); part B holds probes of defences that
held (they pass, and fail if the defence breaks). Status on 2026-11-26 (DuckDB 2.0, main at a509013):

* A1 (HIGH) the released value of a floating-point group key is the *first row's* spelling of it: DuckDB groups
  -0.0 and 0.0 together and keeps the value of the row it saw first, and `session.exact_keys` keeps it (Python's
  -0.0 == 0.0 merges them too, keeping the first key object). So the sign of a released zero key says something
  about one row — the first row of that group in scan order — exactly, whatever the noise:
  ``SELECT CASE WHEN x > 3 THEN -0.0 ELSE 0.0 END AS g, COUNT(*) FROM t WHERE u >= 7 GROUP BY 1`` over a table
  stored in id order answers g = 0.0 on D and g = -0.0 on D′ (target x = 5), 0.0 for x = 3; the innocent-looking
  ``GROUP BY ROUND(y / 10)`` answers -0.0 iff the first row has y < 0. Every query can ask another predicate, so
  one person's whole row is read back bit by bit at the price of ε per bit (any ε ≥ the minimum). The table's
  storage order is the curator's (ingest order: ids, dates); a WHERE on it picks which person is first.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from tests.adversarial.test_redteam_s4 import POLICY, PUB, TARGET, TARGET_ROW, _base_rows, _frame
from veil.errors import VeilError


class Worlds:
    """D (the base rows, stored in id order) and D′ variants (the target stored at its place in id order)."""

    def __init__(self, base: Path, targets: dict[str, dict[str, Any] | None]) -> None:
        from veil.policy import load_policy
        from veil.proxy._testing import exact_session
        from veil.store.warehouse import write_table

        self.sessions: dict[str, Any] = {}
        for name, target in targets.items():
            rows = _base_rows() if target is None else sorted([*_base_rows(), target], key=lambda r: r["u"])
            folder = base / name
            folder.mkdir()
            (folder / "policy.toml").write_text(POLICY, encoding="utf-8")
            policy = load_policy(folder / "policy.toml")
            write_table(policy, "pub", PUB, replace=True, public=True)
            write_table(policy, "t", _frame(rows), replace=True)
            self.sessions[name] = exact_session(policy, "a")
        self.asked = 0

    def run(self, sql: str, epsilon: Fraction | None = None) -> dict[str, Any]:
        """Each world's answer (rows) or error name, at one fresh ε (never a cached answer)."""
        self.asked += 1
        eps = epsilon if epsilon is not None else Fraction(5) + Fraction(self.asked, 10**6)
        out: dict[str, Any] = {}
        for name, s in self.sessions.items():
            try:
                out[name] = s.execute(sql, epsilon=eps)
            except VeilError as exc:
                out[name] = type(exc).__name__
        return out

    def close(self) -> None:
        for s in self.sessions.values():
            s.close()


@pytest.fixture(scope="module")
def worlds(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worlds]:
    w = Worlds(
        tmp_path_factory.mktemp("s15"),
        {
            "d": None,
            "x5": dict(TARGET_ROW, x=5, y=-1.5),  # the hidden value satisfies the analyst's test
            "x3": dict(TARGET_ROW, x=3, y=1.5),  # it does not
        },
    )
    yield w
    w.close()


def _spelled(v: Any) -> Any:
    """A released value as a client sees it: the sign of a zero included."""
    return repr(v) if isinstance(v, float) else v


# ==================================================================================================
# Part A — attacks that succeed today
# ==================================================================================================

# --- A1. The sign of a released zero group key is one row's --------------------------------------------

SIGNED_ZERO_QUERIES = [
    # an analyst's test on the row that comes first in the group (WHERE u >= 7: the target, stored in id order)
    f"SELECT CASE WHEN x > 3 THEN -0.0 ELSE 0.0 END AS g, COUNT(*) AS n FROM t WHERE u >= {TARGET} GROUP BY 1",
    # targeted by id as well (D: every row gives 0.0)
    f"SELECT CASE WHEN u = {TARGET} AND x > 3 THEN -0.0 ELSE 0.0 END AS g, COUNT(*) AS n FROM t WHERE u >= {TARGET} GROUP BY 1",
    # no constant at all: ROUND of a small negative value is -0.0
    f"SELECT ROUND(y / 10) AS g, COUNT(*) AS n FROM t WHERE u >= {TARGET} GROUP BY 1",
    f"SELECT y * 0 AS g, COUNT(*) AS n FROM t WHERE u >= {TARGET} GROUP BY 1",
    # with another statistic (keys come first, one statistic last)
    f"SELECT CEIL(y / 10) AS g, SUM(x) AS s FROM t WHERE u >= {TARGET} GROUP BY g",
]


@pytest.mark.parametrize("sql", SIGNED_ZERO_QUERIES)
def test_a1_a_released_zero_key_does_not_spell_one_rows_sign(worlds: Worlds, sql: str) -> None:
    out = worlds.run(sql)
    spelled = {
        name: a if isinstance(a, str) else sorted(tuple(_spelled(v) for v in r[:-1]) for r in a.rows) for name, a in out.items()
    }
    # the keys released must not depend on the target's hidden value (x, y) beyond the noise
    assert spelled["x5"] == spelled["x3"], f"released keys depend on one row's value: {spelled}\n  SQL: {sql}"
    assert all(
        math.copysign(1.0, v) > 0 for a in out.values() if not isinstance(a, str) for r in a.rows for v in r if v == 0.0
    ), f"a released zero carries a sign: {spelled}"
