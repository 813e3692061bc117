"""The red team's own judges can fail: each catches the bug it exists for (mutation checks of the harness)."""

from __future__ import annotations

import dataclasses
from fractions import Fraction
from pathlib import Path

import pytest

from tests.support.attack import Outcome, judge
from tests.support.attack_neighbours import compare, exact_release, share_salts
from tests.support.attack_world import build_world

Q = Fraction(1, 4)
ME = "analyst:api"
TABLE = "table:people"


def _cost(eps: Fraction = Fraction(0), delta: Fraction = Fraction(0), table: bool = True) -> dict[str, tuple[Fraction, Fraction]]:
    return {ME: (eps, delta), TABLE: (eps, delta) if table else (Fraction(0), Fraction(0))}


@pytest.mark.parametrize(
    ("expect", "outcome", "cost", "why"),
    [
        ("refused", Outcome(False, sqlstate="0A000"), _cost(Q), "refused but charged"),
        ("refused", Outcome(False, sqlstate="XX000"), _cost(), "internal error"),
        ("safe", Outcome(False, message="ZeroDivisionError", crashed=True), _cost(Q), "crashed"),
        ("refused", Outcome(True, ((1,),)), _cost(Q), "expected a refusal"),
        ("answered", Outcome(True, ((1,),)), _cost(), "free one"),
        ("answered", Outcome(True, ((1,),)), _cost(Q / 2), "was charged"),
        ("answered", Outcome(True, ((1,),), epsilon_charged=Q / 2), _cost(Q), "reports"),
        ("answered", Outcome(True, ((1,),)), _cost(Q, Fraction(1, 10**7)), "δ"),
        ("answered", Outcome(True, ((1,),)), _cost(Q, table=False), "table people"),
        ("answered", Outcome(True, (("CANARY_target", 1),)), _cost(Q), "only one unit holds"),
        ("public", Outcome(True, (("CANARY_n3",),)), _cost(), "private data"),
        ("public", Outcome(True, (("_veil_bounded_people_abc",),)), _cost(), "internal names"),
        ("safe", Outcome(False, sqlstate="42P01", message="no table _veil_bounded_people_1f"), _cost(), "message"),
    ],
)
def test_judge_catches(expect: str, outcome: Outcome, cost: dict[str, tuple[Fraction, Fraction]], why: str) -> None:
    v = judge(expect, outcome, cost, analyst="api", epsilon=Q, delta=Fraction(0), sql="SELECT 1")
    assert not v.ok and why in v.why, v.why


def test_judge_accepts_the_right_outcomes() -> None:
    assert judge("refused", Outcome(False, sqlstate="0A000"), _cost(), analyst="api", epsilon=Q, delta=None).ok
    assert judge("answered", Outcome(True, ((3,),), epsilon_charged=Q), _cost(Q), analyst="api", epsilon=Q, delta=Fraction(0)).ok
    assert judge("public", Outcome(True, (("north",),)), _cost(), analyst="api", epsilon=Q, delta=None).ok


@pytest.mark.slow
def test_neighbour_compare_catches_an_undercounted_sensitivity(tmp_path: Path) -> None:
    """The same release with every sensitivity divided by 4 must be flagged (the join repeats rows 4×)."""
    from veil.proxy._testing import exact_session

    d, d_prime = build_world(tmp_path / "d"), build_world(tmp_path / "dp", drop_target=True)
    s, s_prime = exact_session(d.policy, "api"), exact_session(d_prime.policy, "api")
    try:
        share_salts(s, s_prime)
        sql = "SELECT SUM(p.salary), COUNT(*) FROM people p, regions r WHERE p.id = 123"
        a, b = exact_release(s, sql, 0.5), exact_release(s_prime, sql, 0.5)
        assert compare(a, b) == []
        stats = tuple(dataclasses.replace(st, sensitivity=st.sensitivity / 4) for st in a.plan.statistics)
        weaker = dataclasses.replace(a, plan=dataclasses.replace(a.plan, statistics=stats))
        problems = compare(weaker, dataclasses.replace(b, plan=weaker.plan))
        assert len([p for p in problems if "moved by" in p]) == 2, problems
        assert compare(a, dataclasses.replace(b, ok=False, sqlstate="XX000")), "an outcome that differs is flagged"
    finally:
        s.close()
        s_prime.close()
