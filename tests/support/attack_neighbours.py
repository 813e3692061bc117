"""Neighbouring databases, noise off: does a released statistic move by more than the plan says it can?

``exact_release(session, sql, epsilon)`` runs the pipeline of an exact session (``veil.proxy._testing``) up to
``execute`` and returns the plan with the exact per-group values the noise pass would receive (clamped the same
way), or the refusal. ``compare(d, d_prime)`` checks, for two databases differing in one privacy unit:

* both end the same way: both answered, or both refused with the same SQLSTATE (a refusal that depends on one
  unit's data is a one-bit oracle, whatever ε was charged);
* both plans are the same (sensitivities and ε shares come from the policy and public data only);
* for every statistic, the L1 distance over all groups (a missing group counts as 0) is at most the
  sensitivity the plan used; for exponential-mechanism statistics, the sum over groups of the largest change
  of any candidate's utility is at most the sensitivity.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

__all__ = ["Release", "compare", "exact_release"]

TOLERANCE = 1e-9


@dataclass(frozen=True)
class Release:
    ok: bool
    sqlstate: str = ""
    message: str = ""
    public: bool = False
    cached: bool = False
    plan: Any = None
    values: dict[int, dict[tuple[Any, ...], float]] = field(default_factory=dict)
    scores: dict[int, dict[tuple[Any, ...], np.ndarray]] = field(default_factory=dict)

    def describe(self) -> str:
        if self.ok:
            return "public" if self.public else f"answered {self.values}"
        return f"refused [{self.sqlstate}] {self.message[:200]}"


def exact_release(session: Any, sql: str, epsilon: float | None = None) -> Release:
    from veil.errors import VeilError
    from veil.proxy import pipeline
    from veil.proxy.add_noise import clamp_raw, grid_row, grid_scores

    try:
        state = pipeline.run(session._state(sql, epsilon), session._env, until="execute")
    except VeilError as exc:
        return Release(False, exc.sqlstate, f"{type(exc).__name__}: {exc}")
    except Exception as exc:
        return Release(False, "CRASH", f"{type(exc).__name__}: {exc}")
    if state.plan is None:
        return Release(True, public=True)
    if state.raw is None:
        return Release(True, cached=True, plan=state.plan)
    raw = state.raw
    values: dict[int, dict[tuple[Any, ...], float]] = {}
    scores: dict[int, dict[tuple[Any, ...], np.ndarray]] = {}
    for stat in state.plan.statistics:
        if stat.kind == "grid":
            cells = raw.grids[stat.id]
            scores[stat.id] = {g: grid_scores(stat, grid_row(stat, cells[i])) for i, g in enumerate(raw.groups)}
        else:
            clamped = clamp_raw(stat, raw.raw[stat.id])
            values[stat.id] = {g: float(clamped[i]) for i, g in enumerate(raw.groups)}
    return Release(True, plan=state.plan, values=values, scores=scores)


def _plan_signature(plan: Any) -> tuple[Any, ...]:
    return (
        plan.epsilon,
        plan.contribution,
        plan.partition_threshold,
        plan.partition_delta,
        tuple((s.id, s.kind, s.mechanism, s.sensitivity, s.epsilon, s.grid_n, s.grid_lo, s.grid_step) for s in plan.statistics),
    )


def _norm_group(g: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(None if isinstance(v, float) and math.isnan(v) else v for v in g)


def plan_claims(plan: Any) -> list[str]:
    """What the plan claims about its own cost, checked: the ε shares add up to the charge, and partition
    selection's threshold keeps a group made only of one unit's rows below δ."""
    problems: list[str] = []
    total = sum((s.epsilon for s in plan.statistics), Fraction(0))
    if total != plan.epsilon:
        problems.append(f"the statistics' ε shares add up to {total}, the query charges {plan.epsilon}")
    if plan.partition_threshold is not None:
        stat = next((s for s in plan.statistics if s.id == plan.partition_stat), None)
        if stat is None or plan.partition_delta is None:
            return [*problems, "private keys without a partition statistic or δ"]
        c = plan.contribution
        r = math.exp(-float(stat.epsilon) / float(stat.sensitivity))  # discrete Laplace, scale Δ/ε
        k = plan.partition_threshold - c  # the noise a group of c rows needs to be released
        p_release = c * r**k / (1 + r) if k > 0 else 1.0
        if p_release > float(plan.partition_delta) * (1 + 1e-9):
            problems.append(
                f"partition selection: a group of ≤ {c} rows passes τ = {plan.partition_threshold} with probability "
                f"up to {p_release:.3g} > δ = {float(plan.partition_delta):.3g}"
            )
    return problems


def compare(d: Release, d_prime: Release) -> list[str]:
    """What is wrong about the pair (empty: the neighbours are indistinguishable except through noise)."""
    problems: list[str] = []
    if d.ok != d_prime.ok or (not d.ok and d.sqlstate != d_prime.sqlstate):
        return [f"the outcome depends on one unit: D {d.describe()} / D' {d_prime.describe()}"]
    if "CRASH" in (d.sqlstate, d_prime.sqlstate):
        return [f"crashed: {d.describe()}"]
    if not d.ok or d.public or d.cached or d_prime.cached:
        return []
    problems += plan_claims(d.plan)
    if _plan_signature(d.plan) != _plan_signature(d_prime.plan):
        problems.append(f"the plan depends on one unit: {_plan_signature(d.plan)} vs {_plan_signature(d_prime.plan)}")
    for stat in d.plan.statistics:
        sens = float(stat.sensitivity)
        if stat.kind == "grid":
            a, b = d.scores.get(stat.id, {}), d_prime.scores.get(stat.id, {})
            a = {_norm_group(k): v for k, v in a.items()}
            b = {_norm_group(k): v for k, v in b.items()}
            zero = np.zeros(stat.grid_n)
            from veil.proxy.add_noise import grid_scores

            empty = grid_scores(stat, zero)
            moved = sum(float(np.max(np.abs(a.get(g, empty) - b.get(g, empty)))) for g in set(a) | set(b))
        else:
            a, b = d.values.get(stat.id, {}), d_prime.values.get(stat.id, {})
            a = {_norm_group(k): v for k, v in a.items()}
            b = {_norm_group(k): v for k, v in b.items()}
            moved = sum(abs(a.get(g, 0.0) - b.get(g, 0.0)) for g in set(a) | set(b))
        if moved > sens * (1 + TOLERANCE) + TOLERANCE:
            problems.append(
                f"{stat.label} ({stat.kind}, {stat.mechanism}) moved by {moved:g} over all groups between neighbours; "
                f"the plan's sensitivity is {sens:g} (contribution bound c = {d.plan.contribution})"
            )
    return problems


def fraction(x: float) -> Fraction:
    return Fraction(x)


def share_salts(session: Any, neighbour: Any) -> None:
    """Give ``neighbour``'s bounded copies the salt of ``session``'s (call before ``neighbour`` builds any).

    The per-unit row choice is keyed by a secret salt drawn when a copy is first built; differential privacy
    must hold for every fixed salt, so the two databases are compared under the same one (with independent
    salts every unit's kept rows would differ, which says nothing about one unit).
    """
    import hashlib

    from veil.proxy.bounding import ALGORITHM, spec_identity

    def identity(env: Any, spec: Any) -> str:
        version = env.engine.table_version(spec.name, list(spec.columns))
        return hashlib.sha256(f"{ALGORITHM}\x00{spec_identity(spec)}\x00{version}".encode()).hexdigest()

    env, env_n = session._env, neighbour._env
    for spec in env.policy.tables.values():
        if spec.public:
            continue
        env.bounded_table(spec.name)
        known = env.ledger.bounded_copy(identity(env, spec))
        if known is None:
            raise RuntimeError(f"no bounded copy recorded for {spec.name}: the test's identity formula is stale")
        ident_n = identity(env_n, env_n.policy.table(spec.name))
        env_n.ledger.record_bounded_copy(ident_n, spec.name, f"_veil_bounded_{spec.name}_{ident_n[:24]}", known[1])
