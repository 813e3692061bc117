"""Fixtures for the red team's suite: one world per module, one session per interface, shared."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.support.attack_world import World, build_world

if TYPE_CHECKING:
    from tests.engines.conftest import OutsideSpark


@pytest.fixture(scope="module", autouse=True)
def _close_ledgers() -> Iterator[None]:
    yield
    from tests.support.attack import close_ledgers

    close_ledgers()


@pytest.fixture(scope="session")
def outside_spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OutsideSpark]:
    """The run's other process with a local Spark of its own (``OutsideSpark``; Spark tests only: skipped
    without Spark)."""
    from tests.engines.conftest import OutsideSpark
    from veil.engines.spark import spark_available

    reason = spark_available()
    if reason is not None:
        pytest.skip(f"Spark test skipped: {reason}")
    outside = OutsideSpark(tmp_path_factory.mktemp("outside_spark") / "stderr.log")
    yield outside
    outside.close()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    return build_world(tmp_path_factory.mktemp("world"))


@pytest.fixture(scope="module")
def explainer(world: World) -> Iterator[object]:
    """A plain session on the same world, used only to ask ``explain`` what a query should cost (free)."""
    from veil.policy import load_policy
    from veil.proxy.session import QuerySession

    s = QuerySession(load_policy(world.policy), "api")
    yield _Explainer(s)
    s.close()


class _Explainer:
    def __init__(self, session: object) -> None:
        self.session = session

    def explain(self, sql: str, epsilon: float | None = None) -> object:
        return self.session.explain(sql, epsilon=epsilon)  # type: ignore[attr-defined]


def neighbour_worlds(base: Path) -> tuple[World, World]:
    return build_world(base / "d"), build_world(base / "d_prime", drop_target=True)
