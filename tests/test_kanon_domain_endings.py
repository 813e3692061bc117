"""k-anonymity ends the same way whatever one person's value is (red team s27 A3/A3b/A11/A12): a value outside
its column's declared domain (or hierarchy) is a missing value, never a refusal naming it, and the gate accepts
the method's own labels (a hierarchy's inner nodes, the missing leaf ``?``) in the columns it generalises."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.adversarial.test_redteam_s16 import _publish, _published, _warehouse
from tests.publish_support import people

HIERARCHY = "nurse;care;*\nsmith;manual;*\nclerk;manual;*\n"

#: (column, odd value of person 9, value in D′); every variant must end as D′ does
ODD = {
    "qi_trailing_blank": ("sex", "F ", "F"),
    "qi_leading_blanks": ("sex", "  M", "M"),
    "qi_hierarchy_blank": ("job", "nurse ", "nurse"),
    "qi_hierarchy_undeclared": ("job", "astronaut", "nurse"),
    "qi_hierarchy_case": ("job", "NURSE", "nurse"),
    "sensitive_case": ("income", "HIGH", "high"),
    "sensitive_blank": ("income", "low ", "low"),
    "sensitive_undeclared": ("income", "secret", "low"),
}


def _outcome(policy: Any, request: dict[str, Any]) -> str:
    from veil.errors import VeilError

    try:
        _publish(policy, "kanon", request)
    except VeilError as exc:
        return f"{type(exc).__name__}: {exc}"
    return "published"


#: D′'s ending and published rows, by D′'s frame and request: several cases share one D′ (the three ``job`` cases
#: all write "nurse"; "M" and "low" are person 9's own values, so those D′ are ``people(60)`` itself), and a world
#: built again from the same frame and request publishes the same rows (suite time: 8 of the 32 worlds of the
#: first test, each a warehouse and a publication).
_D_PRIME: dict[tuple[Any, ...], tuple[str, list[tuple[Any, ...]]]] = {}


def _d_prime(base: Path, frame: Any, request: dict[str, Any], sql: str, hierarchy: str = "") -> tuple[str, list[tuple[Any, ...]]]:
    """The ending of ``request`` on a world holding ``frame`` and, when published, ``sql`` on its public mirror;
    computed once per (frame, request, hierarchy file's text) in a test process."""
    plain = {k: v for k, v in request.items() if k != "hierarchies"}
    key = (frame.to_csv(index=False), repr(sorted(plain.items())), hierarchy, sql)  # the CSV is what `_warehouse` ingests
    if key not in _D_PRIME:
        policy = _warehouse(base, frame)
        outcome = _outcome(policy, request)
        _D_PRIME[key] = (outcome, _published(policy, sql) if outcome == "published" else [])
    return _D_PRIME[key]


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(ODD))
@pytest.mark.parametrize("missing", ["drop", "leaf"])
def test_one_persons_value_outside_the_domain_does_not_decide_the_ending(tmp_path: Path, case: str, missing: str) -> None:
    column, odd, plain = ODD[case]
    folder = tmp_path / "hierarchies"
    folder.mkdir()
    (folder / "job.csv").write_text(HIERARCHY, encoding="utf-8")
    request = {"table": "people", "qi": ["age", "sex", "job"], "sensitive": ["income"], "k": 5, "algorithm": "mondrian",
               "hierarchies": str(folder), "missing": missing, "output": "pk"}  # fmt: skip
    sql = "SELECT sex, job, income FROM pk"
    outcomes, shown = {}, []
    for world, value in (("d", odd), ("d_prime", plain)):
        frame = people(60)
        frame.loc[9, column] = value
        if world == "d_prime":
            outcomes[world], rows = _d_prime(tmp_path / world, frame, request, sql, HIERARCHY)
        else:
            policy = _warehouse(tmp_path / world, frame)
            outcomes[world] = _outcome(policy, request)
            rows = _published(policy, sql) if outcomes[world] == "published" else []
        shown += [r for r in rows if odd in r]
    assert outcomes["d"] == outcomes["d_prime"] == "published", outcomes
    assert not shown, shown[:3]


@pytest.mark.slow
@pytest.mark.parametrize("missing_jobs", [0, 5, 7, 8, 12, 40])
def test_the_missing_leaf_is_accepted_however_many_lack_a_value(tmp_path: Path, missing_jobs: int) -> None:
    frame = people(120)
    frame["job"] = frame["job"].astype(object)
    frame.loc[0 : missing_jobs - 1, "job"] = None
    policy = _warehouse(tmp_path / "d", frame)
    outcome = _outcome(policy, {"table": "people", "qi": ["job", "sex"], "sensitive": ["income"], "k": 5,
                                "algorithm": "mondrian", "missing": "leaf", "output": "pk"})  # fmt: skip
    assert outcome == "published"
    assert len(_published(policy, "SELECT * FROM pk")) == 120


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["mondrian", "oka", "kma"])
def test_a_hierarchys_inner_nodes_pass_the_gate_and_nothing_else_does(tmp_path: Path, algorithm: str) -> None:
    folder = tmp_path / "hierarchies"
    folder.mkdir()
    (folder / "job.csv").write_text(HIERARCHY, encoding="utf-8")
    policy = _warehouse(tmp_path / "d", people(200))
    outcome = _outcome(policy, {"table": "people", "qi": ["job", "age", "sex"], "sensitive": ["income"], "k": 5,
                                "algorithm": algorithm, "hierarchies": str(folder), "output": "pk"})  # fmt: skip
    assert outcome == "published"
    jobs = {r[0] for r in _published(policy, "SELECT DISTINCT job FROM pk")}
    assert jobs <= {"nurse", "smith", "clerk", "care", "manual", "*"}, jobs


def test_the_gate_accepts_a_method_label_only_in_a_generalised_column(tmp_path: Path) -> None:
    """The gate's own unit: ``manual`` is accepted as a label of a generalised ``job`` and refused in a sensitive one."""
    import pandas as pd

    from tests.adversarial.test_redteam_s16 import POLICY
    from veil.generators.gate import _out_of_domain
    from veil.policy import load_policy

    path = tmp_path / "policy.toml"
    path.write_text(POLICY.format(table_budget=""), encoding="utf-8")
    spec = load_policy(path).table("people")
    frame = pd.DataFrame({"job": ["manual", "nurse"]})
    labels = {"job": frozenset({"manual"})}
    assert _out_of_domain(frame, spec, None, {"job": "generalised"}, labels) is None  # type: ignore[arg-type]
    assert _out_of_domain(frame, spec, None, {"job": "sensitive"}, labels) is not None  # type: ignore[arg-type]
    assert _out_of_domain(frame, spec, None, {"job": "generalised"}, {}) is not None  # type: ignore[arg-type]


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["mondrian", "oka", "kma"])
@pytest.mark.parametrize("holders", [1, 5, 10])
def test_an_undeclared_category_of_a_flat_qi_never_decides_the_ending(tmp_path: Path, algorithm: str, holders: int) -> None:
    """``holders`` people share the undeclared job ``astronaut`` (a QI without hierarchy file): published as D′
    (nurses) is, never showing it (OKA formed an ``astronaut`` class of 10 and the gate refused, naming it)."""
    outcomes, shown = {}, []
    for world, job in (("d", "astronaut"), ("d_prime", "nurse")):
        frame = people(60)
        frame.loc[0 : holders - 1, "job"] = job
        policy = _warehouse(tmp_path / world, frame)
        outcomes[world] = _outcome(policy, {"table": "people", "qi": ["job", "sex"], "sensitive": ["income"], "k": 5,
                                            "algorithm": algorithm, "output": "pk"})  # fmt: skip
        if outcomes[world] == "published":
            rows = _published(policy, "SELECT job FROM pk")
            assert len(rows) == 60
            shown += [r for r in rows if "astronaut" in r]
    assert outcomes["d"] == outcomes["d_prime"] == "published", outcomes
    assert not shown, shown[:3]
