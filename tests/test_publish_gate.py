"""The release gate checks each guarantee on the actual output (through the CLI) and table budgets cap
every DP publication of a table."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.publish_support import analyst_reads_every_published_table, make_warehouse, ok_json, publications, tables, veil


@pytest.fixture
def warehouse(tmp_path: Path) -> Path:
    return make_warehouse(tmp_path)


def _sdc(policy: Path, method: str, *extra: str, output: str = "out") -> object:
    return veil(
        "publish", "sdc", "--policy", policy, "--table", "people", "--method", method, "--columns", "age,hours,gain",
        "--output", output, "--format", "json", *extra,
    )  # fmt: skip


def _refused(policy: Path, res: object, match: str, before: int) -> None:
    assert res.exit_code == 2 and "PublicationRefused" in res.output and match in res.output, res.output  # type: ignore[attr-defined]
    assert "out" not in tables(policy) and len(publications(policy)) == before


@pytest.mark.slow
def test_a_group_smaller_than_k_is_refused(warehouse: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import veil.generators.sdc as sdc

    # a broken MDAV that claims k = 5 for groups of 4
    monkeypatch.setattr(sdc, "mdav", lambda x, k: np.arange(len(x)) // 4)
    _refused(warehouse, _sdc(warehouse, "microagg_mdav", "--param", "k=5"), "group of 4 rows", 0)


def test_a_perturbation_that_changes_nothing_is_refused(warehouse: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import veil.generators.sdc as sdc

    # a broken perturbation that returns its input (and moved nothing into the domain)
    monkeypatch.setattr(sdc, "_noise_in_domain", lambda x, a, rng, lo, hi: (x.copy(), np.zeros(x.shape[1], dtype=np.int64)))
    _refused(warehouse, _sdc(warehouse, "noise_addition", "--param", "a=0.5"), "equals the source in every row", 0)


@pytest.mark.slow
def test_a_synthetic_table_that_copies_its_training_rows_is_refused(warehouse: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import veil.generators.mlcopy as mlcopy

    monkeypatch.setattr(mlcopy, "ml_copy", lambda x, y, **kw: (x.copy(), y.copy()))  # a "model" that memorised
    res = _sdc(warehouse, "ml_copy", "--target", "income")
    _refused(warehouse, res, "reproduces its training rows", 0)


@pytest.mark.slow
def test_a_synthetic_table_passes_with_its_dcr_recorded(warehouse: Path) -> None:
    ok_json(_sdc(warehouse, "ml_copy", "--target", "income"))
    rel = publications(warehouse)[-1]
    dcr = rel.metrics["gate"]["dcr"]
    assert dcr["passed"] and dcr["near_train_share"] <= dcr["share_limit"] and rel.metrics["holdout_rows"] == 80
    analyst_reads_every_published_table(warehouse)


@pytest.mark.slow
def test_kanon_reports_l_diversity_and_lists_each_column(warehouse: Path) -> None:
    body = ok_json(
        veil(
            "publish", "kanon", "--policy", warehouse, "--table", "people", "--algorithm", "mondrian", "--k", "5",
            "--qi", "age,sex", "--sensitive", "income", "--output", "out", "--format", "json",
        )
    )  # fmt: skip
    assert body["min_class_size"] >= 5
    rel = publications(warehouse)[-1]
    gate = rel.metrics["gate"]
    assert gate["columns"]["age"]["protection"] == "generalised" and gate["columns"]["income"]["protection"] == "sensitive"
    assert set(gate["columns"]) == {"age", "sex", "income"} and gate["min_group"] >= 5
    assert 1 <= gate["l_diversity"]["income"] <= 2
    assert "name" not in pd.DataFrame(columns=list(gate["columns"])).columns
    analyst_reads_every_published_table(warehouse)


def test_kanon_k1_is_refused(warehouse: Path) -> None:
    res = veil("publish", "kanon", "--policy", warehouse, "--table", "people", "--k", "1", "--qi", "age", "--output", "out")
    assert res.exit_code == 2 and "out" not in tables(warehouse)


def test_gate_refuses_out_of_domain_categories() -> None:
    from types import SimpleNamespace

    from veil.errors import PublicationRefused
    from veil.generators import gate
    from veil.generators.publication import ColumnProtection, Plan, Publication

    spec = SimpleNamespace(columns={"sex": SimpleNamespace(values=("F", "M"), lower=None, upper=None)})
    plan = Plan(kind="x", method="x", source="s", output="o", params={})
    frame = pd.DataFrame({"sex": ["F", "M", "X"] * 10})
    pub = Publication(method="x", guarantee="", frame=frame, columns=(ColumnProtection("sex", "synthesised"),), synthetic=False)
    with pytest.raises(PublicationRefused, match="'X' outside the declared values"):
        gate.verify(plan, pub, train=frame, holdout=None, spec=spec, generator=np.random.default_rng(0))
    unlisted = Publication(method="x", guarantee="", frame=frame.assign(extra=1), columns=pub.columns)
    with pytest.raises(PublicationRefused, match="not produced by the sanitiser"):
        gate.verify(plan, unlisted, train=frame, holdout=None, spec=spec, generator=np.random.default_rng(0))


@pytest.mark.parametrize("eps", ["0", "-1", "inf", "nan", "51"])
def test_vacuous_epsilon_is_refused_for_every_dp_kind(warehouse: Path, eps: str) -> None:
    krr = veil("publish", "krr", "--policy", warehouse, "--table", "people", "--columns", "sex", "--epsilon", eps, "--output=out")
    dp = _sdc(warehouse, "dp_microagg_laplace", "--param", f"epsilon={eps}")
    for res in (krr, dp):
        assert res.exit_code == 2, res.output
    assert "out" not in tables(warehouse) and publications(warehouse) == []


# -- table budgets ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_dp_publications_are_charged_to_the_table_budget(tmp_path: Path) -> None:
    policy = make_warehouse(tmp_path, table_budget="epsilon_total = 4")
    krr = ["publish", "krr", "--policy", policy, "--table", "people", "--columns", "sex,job", "--epsilon", "1", "--format=json"]
    ok_json(veil(*krr, "--output", "k1"))  # 3 of 4 (two columns and the row count)
    res = veil(*krr, "--output", "k2")  # 3 more: over the cap
    assert res.exit_code == 2 and "BudgetExhausted" in res.output and "table 'people'" in res.output, res.output
    assert "k2" not in tables(policy)
    ok_json(veil(*krr[:-3], "--columns", "sex", "--epsilon", "0.5", "--format", "json", "--output", "k3"))  # exactly 4
    dp = _sdc(policy, "dp_microagg_laplace", "--param", "epsilon=0.5", output="d1")
    assert dp.exit_code == 2 and "BudgetExhausted" in dp.output
    budget = ok_json(veil("budget", "--policy", policy, "--format", "json"))
    assert budget["tables"] == [
        {"table": "people", "population": "", "epsilon_total": 4.0, "epsilon_spent": 4.0, "epsilon_remaining": 0.0,
         "delta_total": None, "delta_spent": 0.0, "delta_remaining": None, "unbounded_by": []}
    ]  # fmt: skip
    assert {a["analyst"] for a in budget["analysts"]} == {"bob", "carol"}
    # the analyst's queries on the table draw from the same cap: nothing is left
    res = veil("query", "--policy", policy, "--analyst", "carol", "--epsilon", "0.1", "SELECT COUNT(*) FROM people")
    # refused free, naming no shared account nor its amount (red team s73 F2, review s23 Y1)
    assert res.exit_code == 2 and "shared by every analyst" in res.output and "remaining" not in res.output
    text = veil("budget", "--policy", policy, "--analyst", "bob")
    assert text.exit_code == 0 and "people" in text.output
    analyst_reads_every_published_table(policy)


@pytest.mark.slow
def test_a_publication_actor_who_is_an_analyst_is_charged_too(tmp_path: Path) -> None:
    from veil.generators.transaction import publish
    from veil.policy import load_policy

    policy_path = make_warehouse(tmp_path)
    policy = load_policy(policy_path)
    request = {"table": "people", "columns": ["sex"], "epsilon": 0.75, "output": "k1"}  # 1.5 with the row count
    publish(policy, "krr", request, actor="bob", progress=False)
    with pytest.raises(Exception, match="analyst 'bob'"):
        publish(policy, "krr", {**request, "output": "k2"}, actor="bob", progress=False)
    budget = ok_json(veil("budget", "--policy", policy_path, "--analyst", "bob", "--format", "json"))
    assert budget["epsilon_spent"] == 1.5


@pytest.mark.slow
def test_unchanged_check_follows_rows_when_the_source_has_missing_values(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import veil.generators.sdc as sdc
    from tests.publish_support import people

    policy = make_warehouse(tmp_path)
    df = people(400)
    df.loc[df.index % 7 == 0, "hours"] = np.nan  # rows the generator never sees
    csv = tmp_path / "holes.csv"
    df.to_csv(csv, index=False)
    ok_json(veil("ingest", "--policy", policy, "--table", "people", csv, "--replace", "--format", "json"))
    # a broken perturbation that returns its input (and moved nothing into the domain)
    monkeypatch.setattr(sdc, "_noise_in_domain", lambda x, a, rng, lo, hi: (x.copy(), np.zeros(x.shape[1], dtype=np.int64)))
    _refused(policy, _sdc(policy, "noise_addition", "--param", "a=0.5"), "equals the source in every row", 0)


@pytest.mark.slow
def test_pate_is_charged_to_the_table_budget_and_refused_before_training_when_short(tmp_path: Path) -> None:
    policy = make_warehouse(tmp_path, table_budget="epsilon_total = 6")
    model = tmp_path / "student.pt"
    args = [
        "publish", "pate", "--policy", policy, "--table", "people", "--label", "income", "--features", "age,hours,sex",
        "--teachers", "5", "--queries", "50", "--validation", "0", "--student-rho", "0.5", "--format", "json",
    ]  # fmt: skip
    body = ok_json(veil(*args, "--output-model", model))
    rel = publications(policy)[-1]
    assert body["release_id"] == rel.id and rel.table is None and model.exists()
    assert json.loads(Path(str(model) + ".json").read_text())["description"]["release_id"] == rel.id
    spent = ok_json(veil("budget", "--policy", policy, "--format", "json"))["tables"][0]["epsilon_spent"]
    assert spent == pytest.approx(float(rel.epsilon)) and spent > 3  # a second one does not fit in 6
    second = tmp_path / "second.pt"
    res = veil(*args, "--output-model", second)
    assert res.exit_code == 2 and "BudgetExhausted" in res.output and "table 'people'" in res.output, res.output
    assert not list(tmp_path.glob("second.pt*")) and len(publications(policy)) == 1


@pytest.mark.parametrize(
    ("checks", "refused"),
    [
        ({"noise_a": 0.099}, True),
        ({"noise_a": 0.1}, False),
        ({"swap_p": 4.9}, True),
        ({"swap_p": 5.0}, False),
        ({"keep_probability": 0.90001}, True),
        ({"keep_probability": 0.9}, False),
    ],
)
def test_vacuous_parameter_thresholds(checks: dict[str, float], refused: bool) -> None:
    from veil.errors import PublicationRefused
    from veil.generators import gate

    if refused:
        with pytest.raises(PublicationRefused, match="vacuous parameter"):
            gate.check_plan_values(checks)
    else:
        gate.check_plan_values(checks)


@pytest.mark.parametrize("k", [2, 3, 10, 74])
def test_krr_refusal_follows_the_keep_probability_of_the_declared_domain(k: int) -> None:
    """Data-independent: the plan (no data read) is refused exactly when e^ε/(e^ε + k − 1) > 0.9, k counting the
    declared values and NA (always in a kRR domain)."""
    from types import SimpleNamespace

    from veil.errors import PublicationRefused
    from veil.generators import gate
    from veil.generators.krr import keep_probability
    from veil.generators.plugins.krr import KRRPlugin

    spec = SimpleNamespace(columns={"c": SimpleNamespace(values=tuple(range(k)))})
    policy = SimpleNamespace(table=lambda name: spec)
    for eps in (0.5, 1.0, 2.0, 2.2, 3.0, 5.0, 8.0, 16.0):
        plan = KRRPlugin().plan(policy, {"table": "t", "columns": ["c"], "epsilon": eps, "output": "o"})
        if keep_probability(eps, k + 1) > gate.MAX_KEEP_PROBABILITY:
            with pytest.raises(PublicationRefused, match="keep probability"):
                gate.check_plan(plan)
        else:
            gate.check_plan(plan)


@pytest.mark.parametrize(
    ("declared", "published", "protection", "refused"),
    [
        ((1, 2, 3), [1, 2, 999], "randomised", True),  # an int column with declared values (red team s16 A6)
        ((1, 2, 3), [1.0, 2.0, 3.0], "randomised", False),  # the same numbers as floats
        ((True, False), [True, False], "randomised", False),
        (("a", "b"), ["a", "b", "c"], "generalised", True),  # a raw value beside labels is still checked
        (("a", "b"), ["a", "{a,b}", "*"], "generalised", False),  # k-anonymity labels in a generalised column
        (("a", "b"), ["a", "{a,b}"], "randomised", True),  # …but only there
        (("a", "b"), ["a", "x*"], "generalised", True),  # a raw value holding '*' is no label
        ((1, 2), [1, "[1, 2]"], "generalised", False),
    ],
)
def test_published_values_stay_in_the_declared_values(
    declared: tuple[object, ...], published: list[object], protection: str, refused: bool
) -> None:
    from types import SimpleNamespace

    import pandas as pd

    from veil.generators.gate import _out_of_domain

    spec = SimpleNamespace(columns={"c": SimpleNamespace(values=declared, lower=None, upper=None)})
    problem = _out_of_domain(pd.DataFrame({"c": published}), spec, None, {"c": protection})  # type: ignore[arg-type]
    assert (problem is not None) == refused, problem
