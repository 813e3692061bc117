"""The public surface gives no test switches, and released answers stay inside what is possible."""

from __future__ import annotations

import inspect

import pytest

from tests.support.attack import ApiInterface
from tests.support.attack_world import TARGET, World


@pytest.mark.parametrize(
    "kwargs",
    [{"noise_off_for_tests": True}, {"_rng": 1}, {"_noise": None}, {"rng": 1}, {"exact": True}, {"seed": 0}],
    ids=lambda k: next(iter(k)),
)
def test_connect_has_no_test_switches(world: World, kwargs: dict[str, object]) -> None:
    import veil

    with pytest.raises(TypeError):
        veil.connect(world.policy, analyst="api", **kwargs)  # type: ignore[arg-type]


def test_public_signatures_have_no_noise_parameters() -> None:
    import veil
    from veil.connection import Connection

    for fn in (veil.connect, Connection.__init__, Connection.sql, Connection.explain):
        names = set(inspect.signature(fn).parameters)
        assert not names & {"rng", "_rng", "noise", "_noise", "exact", "seed", "noise_off_for_tests"}, (fn, names)


@pytest.mark.slow
def test_released_values_stay_in_their_possible_range(world: World) -> None:
    """At the minimum ε, noise dwarfs the data: counts and non-negative sums must still never go below 0,
    and an average stays within its column's bounds (post-processing, free)."""
    api = ApiInterface(world.policy, "api")
    queries = {
        f"SELECT COUNT(*) FROM people WHERE id = {TARGET}": (0, None),
        f"SELECT SUM(salary) FROM people WHERE id = {TARGET}": (0, None),
        f"SELECT AVG(age) FROM people WHERE id = {TARGET}": (0, 120),
        "SELECT dept, COUNT(*), SUM(age) FROM people GROUP BY dept": (0, None),
        "SELECT COUNT(DISTINCT pid) FROM visits": (0, None),
    }
    try:
        for i in range(8):
            for sql, (lo, hi) in queries.items():
                out = api.query(sql, 0.001 + i / 10**6)
                assert out.ok, out.describe()
                for row in out.rows:
                    for v in row:
                        if isinstance(v, (int, float)) and not isinstance(v, bool):
                            assert v >= lo, f"{sql}: released {v} < {lo}"
                            assert hi is None or v <= hi, f"{sql}: released {v} > {hi}"
    finally:
        api.close()
