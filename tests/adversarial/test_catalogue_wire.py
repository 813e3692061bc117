"""The attack catalogue over the PostgreSQL wire: psycopg against a real ``veil serve`` (one per module)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.attack import Server, WireInterface, run_attack, set_password
from tests.support.attack_catalogue import WIRE_AND_CLI, Attack
from tests.support.attack_world import World


@pytest.fixture(scope="module")
def server(world: World) -> Iterator[Server]:
    set_password(world.policy, "wire")
    srv = Server(world.policy, world.folder / "serve.log")
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def wire(server: Server) -> Iterator[WireInterface]:
    iface = WireInterface(server.port)
    yield iface
    iface.close()


@pytest.mark.parametrize("attack", WIRE_AND_CLI, ids=[a.id for a in WIRE_AND_CLI])
def test_attack(wire: WireInterface, world: World, explainer: object, attack: Attack) -> None:
    problems = run_attack(wire, world.ledger, attack, explainer)
    assert not problems, f"{attack.sql}\n" + "\n".join(problems)
