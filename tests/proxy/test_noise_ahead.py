"""Noise drawn while the engine runs (add_noise.draw_ahead): the same answers as noise drawn with the values.

An integer draw is OpenDP's discrete-Laplace sampler at 0, added exactly afterwards (its law:
tests/test_core_mechanisms.py, ``test_discrete_laplace_drawn_ahead_has_the_right_law``); a real one is OpenDP's i64
discrete Laplace at 0 on the fixed lattice, put on the values in exact arithmetic (``mechanisms.LaplaceLatticeDraw``;
its law and its equality with OpenDP's float Laplace on that lattice: ``test_real_noise_drawn_ahead_has_the_right_law``,
``test_the_exact_addition_rounds_*``). Here the samplers are replaced by deterministic ones that add a known noise
per position, so a query answered with its noise drawn ahead must equal, cell for cell, the same query answered with
the noise drawn with the values; and a draw is used by its own query only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.test_proxy_fixtures import make_proxy_policy
from veil import mechanisms
from veil.errors import CopyNotReady, InternalError
from veil.mechanisms import noise as noise_mod
from veil.policy import Policy
from veil.proxy import add_noise, pipeline
from veil.proxy.session import QuerySession

#: (query, integer noise drawn ahead, real noise drawn ahead): statistics over a declared domain (sex) or without keys
#: are drawn ahead; partition selection (state has no declared values) draws its noise with the values
QUERIES = [
    ("SELECT COUNT(*) FROM people WHERE age >= {b}", True, False),
    ("SELECT sex, COUNT(*) FROM people WHERE age >= {b} GROUP BY sex", True, False),
    ("SELECT sex, COUNT(*), AVG(income), SUM(age) FROM people WHERE income >= {b} GROUP BY sex", True, True),
    ("SELECT sex, COUNT(*), COUNT(income) FROM people WHERE age < {b} + 60 GROUP BY sex", True, False),
    ("SELECT AVG(income) FROM people WHERE age >= {b}", True, True),
    ("SELECT SUM(income) FROM people WHERE age >= {b}", False, True),
    ("SELECT state, COUNT(*) FROM people WHERE age >= {b} GROUP BY state", False, False),
    ("SELECT state, COUNT(*), AVG(income) FROM people WHERE age >= {b} GROUP BY state", False, False),
]


class _Now:
    """An executor that runs each task at once (the worker always began: the draw is always used)."""

    def submit(self, fn: Callable[[], Any]) -> Future[Any]:
        f: Future[Any] = Future()
        f.set_result(fn())
        return f


def _fake_int(scale: float) -> Callable[[np.ndarray], np.ndarray]:
    return lambda arr: arr + 7 * np.arange(1, len(arr) + 1, dtype=np.int64) + int(scale)


def _fake_float(scale: float, sensitivity: float | None, n: int) -> Callable[[np.ndarray], np.ndarray]:
    return lambda arr: arr + 0.25 * np.arange(1, len(arr) + 1) + scale


@pytest.fixture(scope="module")
def worlds(tmp_path_factory: pytest.TempPathFactory) -> tuple[Policy, Policy]:
    # two ledgers: the answer cache of one never answers for the other
    return make_proxy_policy(tmp_path_factory.mktemp("ahead")), make_proxy_policy(tmp_path_factory.mktemp("inline"))


def _fake_fixed(values: Any, *, scale: float, sensitivity: float) -> np.ndarray:
    # the fixed lattice's mechanism drawn with the values, with the integer noise the fake sampler gives a draw
    lattice = mechanisms.fixed_lattice(scale, sensitivity, len(values))
    assert lattice is not None
    return noise_mod.lattice_add(np.asarray(values), _fake_int(lattice.t)(np.zeros(len(values), dtype=np.int64)), lattice.k)


@pytest.fixture
def spies(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, list[Any]]]:
    seen: dict[str, list[Any]] = {"drawn": [], "added": [], "real drawn": [], "real added": [], "real now": []}
    monkeypatch.setattr(noise_mod, "_discrete_laplace_call", _fake_int)
    monkeypatch.setattr(noise_mod, "_laplace_call", _fake_float)
    monkeypatch.setattr(add_noise, "_pool", lambda: _Now())
    real_draw, real_add = mechanisms.discrete_laplace_draw, noise_mod.DiscreteLaplaceDraw.add
    real_lattice_draw, real_lattice_add = mechanisms.laplace_lattice_draw, noise_mod.LaplaceLatticeDraw.add

    def draw(n: int, *, scale: float) -> Any:
        d = real_draw(n, scale=scale)
        seen["drawn"].append(d)
        return d

    def add(self: Any, values: Any) -> np.ndarray:
        seen["added"].append(self)
        return real_add(self, values)

    def lattice_draw(n: int, *, scale: float, sensitivity: float) -> Any:
        d = real_lattice_draw(n, scale=scale, sensitivity=sensitivity)
        seen["real drawn"].append(d)
        return d

    def lattice_add(self: Any, values: Any) -> np.ndarray:
        seen["real added"].append(self)
        return real_lattice_add(self, values)

    def fixed_now(values: Any, *, scale: float, sensitivity: float) -> np.ndarray:
        seen["real now"].append(scale)
        return _fake_fixed(values, scale=scale, sensitivity=sensitivity)

    monkeypatch.setattr(mechanisms, "discrete_laplace_draw", draw)
    monkeypatch.setattr(noise_mod.DiscreteLaplaceDraw, "add", add)
    monkeypatch.setattr(mechanisms, "laplace_lattice_draw", lattice_draw)
    monkeypatch.setattr(noise_mod.LaplaceLatticeDraw, "add", lattice_add)
    monkeypatch.setattr(mechanisms, "laplace_fixed", fixed_now)
    yield seen


@pytest.mark.parametrize(("sql", "ahead", "real"), QUERIES, ids=[q for q, _, _ in QUERIES])
@pytest.mark.parametrize("b", [20, 45])
def test_answers_equal_noise_drawn_with_the_values(
    worlds: tuple[Policy, Policy],
    spies: dict[str, list[Any]],
    monkeypatch: pytest.MonkeyPatch,
    sql: str,
    ahead: bool,
    real: bool,
    b: int,
) -> None:
    with QuerySession(worlds[0], "alice") as s:
        drawn = s.execute(sql.format(b=b))
    assert bool(spies["added"]) == ahead
    assert spies["added"] == spies["drawn"], "each draw is added once, by the query that drew it"
    assert bool(spies["real added"]) == real and not spies["real now"]
    assert spies["real added"] == spies["real drawn"], "each real draw is added once, by the query that drew it"
    monkeypatch.setattr(pipeline, "draw_ahead", lambda *a, **k: None)
    with QuerySession(worlds[1], "alice") as s:
        inline = s.execute(sql.format(b=b))
    assert bool(spies["real now"]) == real, "drawn with the values, on the same lattice"
    assert (drawn.columns, drawn.rows, drawn.ci95) == (inline.columns, inline.rows, inline.ci95)
    assert not drawn.cached and not inline.cached


def test_a_failed_run_drops_its_draw(
    worlds: tuple[Policy, Policy], spies: dict[str, list[Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    sql = "SELECT sex, COUNT(*) FROM people WHERE age >= {b} GROUP BY sex"
    with QuerySession(worlds[0], "alice") as s:
        real_run = s._env.run

        def fails(*a: Any, **k: Any) -> Any:
            raise CopyNotReady("a curator write", hint="run it again")

        monkeypatch.setattr(s._env, "run", fails)
        with pytest.raises(CopyNotReady):
            s.execute(sql.format(b=31))
        assert len(spies["drawn"]) == 1 and spies["added"] == []
        monkeypatch.setattr(s._env, "run", real_run)
        s.execute(sql.format(b=32))
    assert len(spies["drawn"]) == 2 and spies["added"] == [spies["drawn"][1]]


def test_a_draw_is_added_once_exactly_and_saturates_as_opendp() -> None:
    d = mechanisms.discrete_laplace_draw(3, scale=2.0)
    assert d is not None
    d._noise = np.array([2**63 - 1, -(2**63), 5], dtype=np.int64)
    out = d.add(np.array([2**62, -(2**62), -7], dtype=np.int64))
    assert out.tolist() == [2**63 - 1, -(2**63), -2]
    with pytest.raises(InternalError):
        d.add(np.zeros(3, dtype=np.int64))
    e = mechanisms.discrete_laplace_draw(3, scale=2.0)
    assert e is not None
    with pytest.raises(InternalError):
        e.add(np.zeros(4, dtype=np.int64))


@pytest.mark.parametrize(("n", "scale"), [(0, 1.0), (3, 0.0), (3, 2.0**57)])
def test_no_draw_ahead_where_discrete_laplace_draws_with_the_values(n: int, scale: float) -> None:
    assert mechanisms.discrete_laplace_draw(n, scale=scale) is None


def test_opendp_saturates_as_the_draw_does() -> None:
    """The draw's saturation (DiscreteLaplaceDraw.add) is OpenDP's own: noise added to i64's bounds stays at them,
    never wraps (with wrapping, each value would wrap with probability ½: all 200 kept is a 2⁻²⁰⁰ chance)."""
    top = mechanisms.discrete_laplace(np.full(200, 2**63 - 1, dtype=np.int64), scale=1e6)
    bottom = mechanisms.discrete_laplace(np.full(200, -(2**63), dtype=np.int64), scale=1e6)
    assert (top > 2**62).all() and (top == 2**63 - 1).any()
    assert (bottom < -(2**62)).all() and (bottom == -(2**63)).any()


def test_test_noise_sources_draw_with_the_values(tmp_path: Path) -> None:
    from veil.proxy._testing import plan_of
    from veil.proxy.add_noise import NoiseSource, draw_ahead

    policy = make_proxy_policy(tmp_path)
    with QuerySession(policy, "alice") as s:
        p = plan_of(s, "SELECT COUNT(*) FROM people", 1.0)
    assert draw_ahead(p, 1, NoiseSource(exact=True)) is None
    assert draw_ahead(p, 1, NoiseSource(rng=np.random.default_rng(0))) is None
    assert draw_ahead(p, None) is None
