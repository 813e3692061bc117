"""The attack catalogue through the public Python API (``veil.connect``), query and EXPLAIN."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.attack import ApiInterface, run_attack
from tests.support.attack_catalogue import ATTACKS, Attack
from tests.support.attack_world import World


@pytest.fixture(scope="module")
def api(world: World) -> Iterator[ApiInterface]:
    iface = ApiInterface(world.policy)
    yield iface
    iface.close()


@pytest.mark.parametrize("attack", ATTACKS, ids=[a.id for a in ATTACKS])
def test_attack(api: ApiInterface, world: World, explainer: object, attack: Attack) -> None:
    problems = run_attack(api, world.ledger, attack, explainer)
    assert not problems, f"{attack.sql}\n" + "\n".join(problems)
