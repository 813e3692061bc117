"""Every catalogue attack on two neighbouring databases (the target unit removed), noise off.

The outcome (answered / refused with which SQLSTATE) must not depend on the target, the plan must be the same,
and every released statistic may move by at most the sensitivity the plan used (L1 over all groups). This is
where data-dependent errors show as oracles and under-counted join multiplicities as sensitivity violations.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.attack_catalogue import ATTACKS, Attack
from tests.support.attack_neighbours import compare, exact_release, share_salts
from tests.support.attack_world import build_world

CASES = [a for a in ATTACKS if a.cls not in ("sandbox", "catalog", "internal") and a.sql]


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[object, object]]:
    from veil.proxy._testing import exact_session

    base: Path = tmp_path_factory.mktemp("neighbours")
    d, d_prime = build_world(base / "d"), build_world(base / "d_prime", drop_target=True)
    s, s_prime = exact_session(d.policy, "api"), exact_session(d_prime.policy, "api")
    share_salts(s, s_prime)
    yield s, s_prime
    s.close()
    s_prime.close()


@pytest.mark.parametrize("attack", CASES, ids=[a.id for a in CASES])
def test_neighbours_indistinguishable(pair: tuple[object, object], attack: Attack) -> None:
    s, s_prime = pair
    d = exact_release(s, attack.sql, attack.epsilon)
    d_prime = exact_release(s_prime, attack.sql, attack.epsilon)
    problems = compare(d, d_prime)
    assert not problems, f"{attack.sql}\n" + "\n".join(problems)
