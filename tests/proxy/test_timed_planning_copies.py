"""A planning under a timer only finds bounded copies; it never builds one (red team s40 A1).

The build reads every raw row, one person's included, so its time is the data's: under ``veil serve``'s statement
timeout a build in the planning made the first query a free 57014 in one world and an answer in its neighbour. The
server builds copies untimed first and plans with ``build_copies=False``; a copy still missing (the policy changed in
between) is a free :class:`CopyNotReady`. A query the server planned as public runs under the timer with
``public_only=True``: if it reads private data by then, it is refused, free, instead of being cut while charged.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.attack_world import build_world
from veil.errors import CopyNotReady
from veil.policy import load_policy
from veil.proxy.session import QuerySession
from veil.store.ledger import Ledger

PRIVATE = "SELECT COUNT(*) FROM people WHERE age > 30"
PUBLIC = "SELECT COUNT(*) FROM regions"


def _charges(world_ledger: Path) -> int:
    with Ledger(world_ledger) as led:
        return len(led.reservations("api"))


def test_a_timed_planning_refuses_free_instead_of_building(tmp_path: Path) -> None:
    world = build_world(tmp_path / "w")
    with QuerySession(load_policy(world.policy), "api") as s:
        for call in (lambda: s.plan(PRIVATE, build_copies=False), lambda: s.describe(PRIVATE, build_copies=False)):
            with pytest.raises(CopyNotReady) as err:
                call()
            assert err.value.sqlstate == "55000" and "nothing was charged" in err.value.message
        assert s._env.build_copies  # restored after the refusal
        assert s.plan(PRIVATE) is False  # untimed: builds the copy
        assert s.plan(PRIVATE.replace("30", "40"), build_copies=False) is False  # now found
        s.describe(PRIVATE, build_copies=False)
    assert _charges(world.ledger) == 0


def test_public_only_refuses_a_private_query_before_any_charge(tmp_path: Path) -> None:
    world = build_world(tmp_path / "w")
    with QuerySession(load_policy(world.policy), "api") as s:
        s.plan(PRIVATE)  # the copy exists: the refusal below is about the query being private, not the copy
        with pytest.raises(CopyNotReady, match="reads private data now"):
            s.execute(PRIVATE, epsilon=0.5, public_only=True)
        answer = s.execute(PUBLIC, public_only=True)
        assert answer.epsilon_charged == 0 and len(answer.rows) == 1
        assert s.execute(PRIVATE, epsilon=0.5).epsilon_charged > 0  # the same query, not planned as public: answered
    assert _charges(world.ledger) == 1
