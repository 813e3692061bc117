"""Internal test paths: exact (noise-off) and seeded sessions. Never reachable from the public API.

Tests and the neighbouring-database tester open sessions through here; ``veil.connect``, the CLI
and ``veil serve`` cannot. ``exact_session`` answers with the exact statistics the plan would noise
(the exponential mechanism returns its best-scoring candidate), so a test can compare the released
value with the sensitivity the plan used.

>>> callable(exact_session) and callable(seeded_session)
True
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from veil.policy import Policy, load_policy
from veil.proxy.add_noise import NoiseSource
from veil.proxy.plan import QueryPlan
from veil.proxy.session import QuerySession

__all__ = ["exact_session", "generated_sql", "plan_of", "seeded_session"]


def _policy(policy: str | Path | Policy) -> Policy:
    return policy if isinstance(policy, Policy) else load_policy(policy)


def exact_session(policy: str | Path | Policy, analyst: str, **kwargs: Any) -> QuerySession:
    """A session whose answers carry no noise (charges and refusals are as in production)."""
    return QuerySession(_policy(policy), analyst, _noise=NoiseSource(exact=True), **kwargs)


def seeded_session(policy: str | Path | Policy, analyst: str, rng: np.random.Generator, **kwargs: Any) -> QuerySession:
    """A session whose noise comes from ``rng`` (same distributions, reproducible draws)."""
    return QuerySession(_policy(policy), analyst, _noise=NoiseSource(rng=rng), **kwargs)


def plan_of(session: QuerySession, sql: str, epsilon: float | None = None) -> QueryPlan | None:
    """The plan the session would use for ``sql`` (None for a public query); runs nothing, spends nothing."""
    from veil.proxy import pipeline

    state = pipeline.run(session._state(sql, epsilon), session._env, until="plan")
    return state.plan


def generated_sql(session: QuerySession, sql: str, epsilon: float | None = None) -> list[str]:
    """Every statement the session would run on the engine for ``sql`` (builds the bounded copy if needed)."""
    from veil.proxy import pipeline

    state = pipeline.run(session._state(sql, epsilon), session._env, until="rewrite")
    if state.rendered is None:
        return [state.public_sql or ""]
    return state.rendered.statements()
