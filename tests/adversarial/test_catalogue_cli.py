"""The attack catalogue through the CLI: ``veil query`` and ``veil explain`` (Click's real commands, in-process)."""

from __future__ import annotations

import pytest

from tests.support.attack import CliInterface, run_attack
from tests.support.attack_catalogue import WIRE_AND_CLI, Attack
from tests.support.attack_world import World


@pytest.fixture(scope="module")
def cli(world: World) -> CliInterface:
    return CliInterface(world.policy)


@pytest.mark.parametrize("attack", WIRE_AND_CLI, ids=[a.id for a in WIRE_AND_CLI])
def test_attack(cli: CliInterface, world: World, explainer: object, attack: Attack) -> None:
    problems = run_attack(cli, world.ledger, attack, explainer)
    assert not problems, f"{attack.sql}\n" + "\n".join(problems)
