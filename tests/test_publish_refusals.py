"""Publications refused for their parameters, the policy or the source's schema cost nothing, and vacuous
guarantees are refused before the charge (red team s24: A2, A7, A10, A11, A12, A14)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.publish_support import POLICY, people, veil
from veil.errors import InputError, PublicationRefused, VeilError


def _warehouse(base: Path, frame: pd.DataFrame, policy_text: str = POLICY) -> Any:
    from veil.policy import load_policy
    from veil.store.warehouse import ingest_file

    base.mkdir(parents=True, exist_ok=True)
    path = base / "policy.toml"
    path.write_text(policy_text.format(table_budget=""), encoding="utf-8")
    csv = base / "people.csv"
    frame.to_csv(csv, index=False)
    policy = load_policy(path)
    ingest_file(policy, "people", csv)
    return policy


def _publish(policy: Any, kind: str, request: dict[str, Any]) -> Any:
    from veil.generators.transaction import publish

    return publish(policy, kind, request, progress=False)


def _spent(policy: Any) -> tuple[float, float, list[str]]:
    """The table's spend and the statuses of every reservation made on the ledger."""
    from veil.store.ledger import Ledger

    if not policy.ledger_path.exists():
        return 0.0, 0.0, []
    with Ledger.for_policy(policy) as led:
        spent = led.spent("table:people")
        rows = led.reservations("curator")
    return float(spent.epsilon), float(spent.delta), [str(r["status"]) for r in rows]


def _pate(rho: float | None = 0.5, *, delta: float = 1e-5, queries: int = 100, teachers: int = 20) -> Any:
    from veil.generators.pate import PateConfig

    return PateConfig(teachers=teachers, queries=queries, rho=rho, delta=delta, seed=1, student_epochs=5, threads=1)


# --- A10: every refusal from the parameters, the policy or the schema comes before the charge ---------------------

DP_METHODS = ("dp_microagg_laplace", "dp_microagg_exponential")

#: (request fields, a word of the refusal): each refused by the parameters, the policy or the table's schema alone
SCHEMA_REFUSALS: dict[str, tuple[dict[str, Any], str]] = {
    "grid-cells-of-columns": ({"columns": ["age", "hours", "gain"], "params": ["bins=100"]}, "cells"),
    "grid-cells-of-label-classes": ({"columns": ["age", "hours"], "params": ["bins=400"], "target": "income"}, "cells"),
    "unknown-column": ({"columns": ["age", "nonexistent"]}, "not declared"),
    "undeclared-source-column": ({"columns": ["age", "name"]}, "not declared"),
    "category-column": ({"columns": ["age", "sex"]}, "not a number"),
    "undeclared-label": ({"columns": ["age"], "target": "name"}, "not declared"),
    "no-column": ({"columns": []}, "at least one column"),
}


@pytest.mark.parametrize("method", DP_METHODS)
@pytest.mark.parametrize("case", sorted(SCHEMA_REFUSALS))
def test_a_dp_sdc_publication_refused_by_its_parameters_or_schema_charges_nothing(tmp_path: Path, method: str, case: str) -> None:
    policy = _warehouse(tmp_path, people(80))
    fields, word = SCHEMA_REFUSALS[case]
    request = {"table": "people", "method": method, "params": ["epsilon=1.0"], "output": "dpm", **fields}
    request["params"] = ["epsilon=1.0", *fields.get("params", [])]
    with pytest.raises(InputError) as info:
        _publish(policy, "sdc", request)
    assert word in str(info.value), str(info.value)
    assert _spent(policy) == (0.0, 0.0, []), f"{case}: refused, and charged {_spent(policy)}"


def test_a_dp_sdc_publication_that_runs_is_charged(tmp_path: Path) -> None:
    """The twin of the refusals: the same request within the limits is charged its ε."""
    policy = _warehouse(tmp_path, people(80))
    request = {"table": "people", "method": "dp_microagg_laplace", "columns": ["age", "hours"], "params": ["epsilon=1.0"],
               "output": "dpm"}  # fmt: skip
    _publish(policy, "sdc", request)
    assert _spent(policy)[:2] == (1.0, 0.0)


@settings(max_examples=40, deadline=None)
@given(bins=st.integers(1, 700), d=st.integers(1, 3), classes=st.sampled_from([0, 2, 3]))
def test_the_grid_cell_limit_is_decided_by_the_plan_exactly_at_the_bound(bins: int, d: int, classes: int) -> None:
    """The plan refuses exactly the grids the sanitiser cannot build (bins^d × classes > MAX_GRID_CELLS)."""
    from veil.generators.sdc import MAX_GRID_CELLS, check_grid_cells

    cells = bins**d * max(classes, 1)
    if cells > MAX_GRID_CELLS:
        with pytest.raises(InputError, match="cells"):
            check_grid_cells(bins, d, classes, labelled=classes > 0)
    else:
        assert check_grid_cells(bins, d, classes, labelled=classes > 0) == cells


def test_a_pate_publication_never_refuses_for_the_private_tables_size(tmp_path: Path) -> None:
    """80 rows for 20 teachers and 100 queries: once refused ("too few rows"), a refusal that flipped when one
    person joined (a free membership oracle). It publishes and is charged, whatever the size
    (tests/test_pate_partition.py checks the class on neighbouring tables)."""
    policy = _warehouse(tmp_path, people(80))
    request = {"table": "people", "label": "income", "config": _pate(), "output_model": str(tmp_path / "s.pt")}
    _publish(policy, "pate", request)
    assert _spent(policy)[0] > 0 and (tmp_path / "s.pt").exists()


def test_a_pate_student_table_missing_features_charges_nothing(tmp_path: Path) -> None:
    from veil.store.warehouse import ingest_file

    text = POLICY + '\n[tables.staff]\npublic = true\n[tables.staff.columns]\nage = {{ type = "int", lower = 17, upper = 90 }}\n'
    policy = _warehouse(tmp_path, people(200), text)
    csv = tmp_path / "staff.csv"
    people(150, seed=3)[["age", "sex"]].to_csv(csv, index=False)  # one column alone: DuckDB sniffs "g" as the delimiter
    ingest_file(policy, "staff", csv)
    request = {"table": "people", "label": "income", "features": ["age", "hours"], "config": _pate(None, queries=20),
               "student_table": "staff", "validation": 0, "output_model": str(tmp_path / "s.pt")}  # fmt: skip
    with pytest.raises(InputError, match="lacks feature columns"):
        _publish(policy, "pate", request)
    assert _spent(policy) == (0.0, 0.0, [])


# --- A12: every int and float parameter of every generator refuses what it cannot hold, typed ----------------------


def _numeric_params() -> list[tuple[str, str, type]]:
    from veil.generators.base import generator_names, get_generator

    return [(name, p.name, p.type) for name in generator_names() for p in get_generator(name).params if p.type in (int, float)]


@pytest.mark.parametrize(("method", "param", "kind"), _numeric_params())
@pytest.mark.parametrize("text", ["100000000000000000000", "-100000000000000000000", "9" * 400, "1e400", "-1e400", "nan"])
def test_an_out_of_range_numeric_parameter_is_a_typed_refusal(method: str, param: str, kind: type, text: str) -> None:
    from veil.generators.base import get_generator, parse_param_args

    cls = get_generator(method)
    try:
        cls(**parse_param_args(cls, [f"{param}={text}"]))
    except VeilError:
        return
    except Exception as exc:  # an untyped error is the bug
        raise AssertionError(f"{method} {param}={text[:30]}: {type(exc).__name__}: {exc}") from None
    # accepted: then it is a finite float (the gate bounds ε and the like), or an int within int64
    value = cls(**parse_param_args(cls, [f"{param}={text}"]))[param]
    assert isinstance(value, kind) and math.isfinite(value), f"{method} {param}={text[:30]} accepted as {value!r}"
    assert kind is float or abs(value) < 2**63, f"{method} {param}={text[:30]} accepted as {value!r}"


def test_a_huge_integer_parameter_exits_2_through_the_cli(tmp_path: Path) -> None:
    from tests.publish_support import make_warehouse

    policy = make_warehouse(tmp_path, n=40)
    res = veil("publish", "sdc", "--policy", policy, "--table", "people", "--method", "dp_microagg_laplace",
               "--columns", "age", "--param", "bins=100000000000000000000", "--output", "o")  # fmt: skip
    assert res.exit_code == 2 and "bins" in res.output and "Traceback" not in res.output, res.output


@pytest.mark.parametrize("hidden", [-1, 4097, 10**12, 10**20])
def test_a_student_of_absurd_width_is_refused_by_its_config(hidden: int) -> None:
    from veil.generators.pate import PateConfig

    with pytest.raises(InputError, match="student_hidden"):
        PateConfig(student_hidden=hidden)


# --- A11: a model output is never one of Veil's own files --------------------------------------------------------


def _own_files(policy: Any) -> dict[str, Path]:
    from veil.store.warehouse import public_path

    return {
        "policy": policy.path,
        "ledger": policy.ledger_path,
        "ledger-wal": Path(f"{policy.ledger_path}-wal"),
        "warehouse": policy.database_path,
        "warehouse-wal": Path(f"{policy.database_path}.wal"),
        "mirror": public_path(policy),
    }


@pytest.mark.parametrize("target", ["policy", "ledger", "ledger-wal", "warehouse", "warehouse-wal", "mirror"])
@pytest.mark.parametrize("spelling", ["absolute", "dotdot", "symlink", "hardlink"])
def test_a_model_output_naming_one_of_veils_files_is_refused_whatever_the_spelling(
    tmp_path: Path, target: str, spelling: str
) -> None:
    from veil.generators.registry import get_plugin
    from veil.generators.transaction import check_output

    policy = _warehouse(tmp_path / "d", people(40))
    path = _own_files(policy)[target]
    if spelling == "dotdot":
        path = path.parent / "sub" / ".." / path.name
    elif spelling == "symlink":
        link = tmp_path / "link"
        link.symlink_to(path.parent, target_is_directory=True)
        path = link / path.name
    elif spelling == "hardlink":
        path.touch()  # a -wal file may not exist yet
        link = tmp_path / "other-name"
        link.hardlink_to(path)
        path = link
    request = {"table": "people", "label": "income", "config": _pate(), "output_model": str(path), "replace": True}
    with pytest.raises(InputError, match="Veil's own files"):
        check_output(policy, get_plugin("pate").plan(policy, request))


def test_a_model_whose_sidecar_or_votes_would_be_one_of_veils_files_is_refused(tmp_path: Path) -> None:
    from veil.generators.registry import get_plugin
    from veil.generators.transaction import check_output

    text = POLICY.replace('path = "ledger.sqlite"', 'path = "book.json"')
    policy = _warehouse(tmp_path, people(40), text)
    plugin = get_plugin("pate")
    sidecar = {"table": "people", "label": "income", "config": _pate(), "output_model": str(tmp_path / "book"), "replace": True}
    with pytest.raises(InputError, match="sidecar"):
        check_output(policy, plugin.plan(policy, sidecar))
    text = POLICY.replace('path = "ledger.sqlite"', 'path = "votes.npy"')
    policy = _warehouse(tmp_path / "v", people(40), text)
    votes = {"table": "people", "label": "income", "config": _pate(), "output_model": str(tmp_path / "m.pt"),
             "save_votes": str(tmp_path / "v" / "votes")}  # fmt: skip
    with pytest.raises(InputError, match="--save-votes"):
        plugin.plan(policy, votes)


def test_publish_pate_over_the_ledger_exits_2_and_keeps_the_ledger(tmp_path: Path) -> None:
    from tests.publish_support import make_warehouse

    policy = make_warehouse(tmp_path, n=40)
    before = veil("budget", "--policy", policy, "--format", "json")
    ledger = tmp_path / "ledger.sqlite"
    res = veil("publish", "pate", "--policy", policy, "--table", "people", "--label", "income", "--teachers", "5",
               "--queries", "10", "--validation", "0", "--student-rho", "0.5", "--output-model", ledger)  # fmt: skip
    assert res.exit_code == 2 and "Veil's own files" in res.output, res.output
    after = veil("budget", "--policy", policy, "--format", "json")
    assert after.exit_code == 0 and after.stdout == before.stdout


# --- A2, A7: PATE's held-out student and δ ------------------------------------------------------------------------


def _plan(policy: Any, tmp_path: Path, config: Any, **extra: Any) -> Any:
    from veil.generators import gate
    from veil.generators.registry import get_plugin

    request = {"table": "people", "label": "income", "config": config, "output_model": str(tmp_path / "s.pt"), **extra}
    plan = get_plugin("pate").plan(policy, request)
    gate.check_plan(plan, float(policy.defaults.min_epsilon_per_query))
    return plan


@pytest.mark.parametrize("rho", [None, 8.0, 1000.0])
def test_a_held_out_student_without_a_sound_local_guarantee_is_refused(tmp_path: Path, rho: float | None) -> None:
    """Default features: age, hours, gain (numeric) and sex, job (categories): Δ = 3 + 2·2 = 7, local ε = 7ρ."""
    policy = _warehouse(tmp_path, people(40))
    with pytest.raises(PublicationRefused, match="local ε"):
        _plan(policy, tmp_path, _pate(rho))


@pytest.mark.parametrize("rho", [0.1, 0.5, 1.0, 2.0, 7.0])
def test_a_held_out_student_is_charged_the_larger_of_the_teachers_and_its_local_epsilon(tmp_path: Path, rho: float) -> None:
    from veil.mechanisms.pate_accounting import data_independent_epsilon

    policy = _warehouse(tmp_path, people(40))
    plan = _plan(policy, tmp_path, _pate(rho))
    teachers = data_independent_epsilon(gamma=0.05, queries=100, delta=1e-5).epsilon
    assert float(plan.epsilon) == pytest.approx(max(teachers, 7 * rho))
    assert plan.checks["student_local_epsilon"] == pytest.approx(7 * rho)


def test_a_public_student_table_needs_no_local_noise_and_is_charged_the_teachers_epsilon(tmp_path: Path) -> None:
    from veil.mechanisms.pate_accounting import data_independent_epsilon

    text = POLICY + '\n[tables.staff]\npublic = true\n[tables.staff.columns]\nage = {{ type = "int", lower = 17, upper = 90 }}\n'
    policy = _warehouse(tmp_path, people(40), text)
    plan = _plan(policy, tmp_path, _pate(None), student_table="staff", features=["age"])
    assert float(plan.epsilon) == pytest.approx(data_independent_epsilon(gamma=0.05, queries=100, delta=1e-5).epsilon)
    assert "student_local_epsilon" not in plan.checks


@pytest.mark.parametrize(("delta", "refused"), [(1e-7, False), (1e-5, False), (1.1e-5, True), (1e-3, True), (0.5, True),
                                                 (0.999, True)])  # fmt: skip
def test_pate_delta_above_the_gates_maximum_is_refused(tmp_path: Path, delta: float, refused: bool) -> None:
    policy = _warehouse(tmp_path, people(40))
    if refused:
        with pytest.raises(PublicationRefused, match="δ"):
            _plan(policy, tmp_path, _pate(delta=delta))
    else:
        assert float(_plan(policy, tmp_path, _pate(delta=delta)).delta) == pytest.approx(delta)


def test_a_vacuous_pate_publication_charges_nothing(tmp_path: Path) -> None:
    policy = _warehouse(tmp_path, people(400))
    for config in (_pate(None), _pate(0.5, delta=0.5)):
        request = {"table": "people", "label": "income", "config": config, "output_model": str(tmp_path / "s.pt")}
        with pytest.raises(PublicationRefused):
            _publish(policy, "pate", request)
    assert _spent(policy) == (0.0, 0.0, [])


# --- A14: a perturbation rounded away is refused ------------------------------------------------------------------


def _gate_verify(unchanged: int, n: int, *, grouped: bool) -> Any:
    from veil.generators import gate
    from veil.generators.publication import ColumnProtection, Plan, Publication

    source = pd.DataFrame({"x": np.arange(n, dtype=np.int64)})
    out = source.copy()
    out.loc[unchanged:, "x"] += 1
    plan = Plan(kind="sdc", method="sdc-test", source="t", output="o", params={})
    pub = Publication(
        method="sdc-test",
        guarantee="test",
        frame=out,
        columns=(ColumnProtection("x", "perturbed"),),
        source_rows=np.arange(n),
        group_columns=("x",) if grouped else (),
        min_group=1 if grouped else None,
    )
    # every value here is one row's: published as it is, the rare-value rule (red team s60 F2) refuses it, which is not
    # what this test is about (tests/test_publish_rare_values.py is)
    with mock.patch.object(gate, "MIN_VALUE_HOLDERS", 1):
        return gate.verify(plan, pub, train=source, holdout=None, spec=None, generator=np.random.default_rng(0))


@settings(max_examples=60, deadline=None)
@given(n=st.integers(2, 400), share=st.floats(0, 1))
def test_the_gate_refuses_a_perturbed_column_unchanged_beyond_the_keep_bound(n: int, share: float) -> None:
    from veil.generators.gate import MAX_KEEP_PROBABILITY

    unchanged = min(n - 1, int(share * n))  # every row unchanged is refused by its own rule
    if unchanged / n > MAX_KEEP_PROBABILITY:
        with pytest.raises(PublicationRefused, match="of the rows"):
            _gate_verify(unchanged, n, grouped=False)
    else:
        assert _gate_verify(unchanged, n, grouped=False).unchanged_share["x"] == pytest.approx(unchanged / n)
    # a group guarantee (MDAV) covers its unchanged values
    assert _gate_verify(unchanged, n, grouped=True).unchanged_share["x"] == pytest.approx(unchanged / n)


def _small_spread(n: int) -> pd.DataFrame:
    frame = people(n)
    frame["hours"] = 40 + np.random.default_rng(1).integers(-4, 5, n)
    return frame


@pytest.mark.slow
def test_noise_addition_on_an_integer_column_of_small_spread_is_never_rounded_back(tmp_path: Path) -> None:
    """hours = 40 + U{−4..4} (σ_x ≈ 2.58), 2,000 rows. The noise's scale is a times half the declared range (1–99:
    49), public, and its values are published unrounded (red team s64 F1: the former per-row redraw off the own value
    published a 0/1 column's complement); so no row equals its source value at a = 0.1 or a = 1 (a continuous draw
    lands on an integer with probability 0)."""
    policy = _warehouse(tmp_path, _small_spread(2000))
    request = {"table": "people", "method": "noise_addition", "columns": ["age", "hours"], "output": "na"}
    weak = _publish(policy, "sdc", {**request, "params": ["a=0.1"]})
    assert weak.gate["unchanged_share"]["hours"] == 0.0
    other = _warehouse(tmp_path / "strong", _small_spread(2000))  # a population gets one release without DP guarantee
    result = _publish(other, "sdc", {**request, "params": ["a=1.0"], "output": "nb"})
    assert result.gate["unchanged_share"]["hours"] == 0.0


@pytest.mark.slow
def test_mdav_unchanged_values_stay_covered_by_its_groups(tmp_path: Path) -> None:
    """MDAV on a column of nine values: most groups hold one value, published unchanged, and k covers them."""
    policy = _warehouse(tmp_path, _small_spread(400))
    request = {"table": "people", "method": "microagg_mdav", "columns": ["hours"], "params": ["k=5"], "output": "mk"}
    result = _publish(policy, "sdc", request)
    assert result.gate["unchanged_share"]["hours"] > 0.9 and result.gate["min_group"] >= 5


def test_a_krr_column_declared_but_not_stored_charges_nothing(tmp_path: Path) -> None:
    """kRR's domains come from the policy (checked in the plan); a declared column the stored table lacks is a
    schema refusal, before the charge."""
    text = POLICY.replace(
        'income = {{ type = "category"', 'tier = {{ type = "category", values = ["a", "b"] }}\nincome = {{ type = "category"'
    )
    policy = _warehouse(tmp_path, people(60), text)
    with pytest.raises(InputError, match=r"'tier' is not in (the )?table"):  # read only the columns it uses (s60 F3)
        _publish(policy, "krr", {"table": "people", "columns": ["sex", "tier"], "epsilon": 1.0, "output": "k"})
    assert _spent(policy) == (0.0, 0.0, [])


@pytest.mark.parametrize("seed", [-5, 2**32, 10**20])
def test_a_seed_no_library_takes_is_refused_before_the_charge(tmp_path: Path, seed: int) -> None:
    """numpy refuses a negative seed, scikit-learn one beyond 32 bits (the DR metric with a target): both ran after
    the charge."""
    from veil.generators.pate import PateConfig

    policy = _warehouse(tmp_path, people(60))
    request = {"table": "people", "method": "dp_microagg_laplace", "columns": ["age"], "params": ["epsilon=1.0"],
               "target": "income", "seed": seed, "output": "o"}  # fmt: skip
    with pytest.raises(InputError, match="--seed"):
        _publish(policy, "sdc", request)
    assert _spent(policy) == (0.0, 0.0, [])
    with pytest.raises(InputError, match="seed"):
        PateConfig(seed=seed)


@pytest.mark.parametrize("method", ["dp_microagg_laplace", "dp_microagg_exponential"])
def test_dp_mdav_groups_larger_than_the_table_charge_nothing(tmp_path: Path, method: str) -> None:
    """The MDAV partition's k against the number of complete rows: a size check, before the charge."""
    policy = _warehouse(tmp_path, people(40))
    request = {"table": "people", "method": method, "columns": ["age"], "output": "o",
               "params": ["epsilon=1.0", "partition=mdav", "k=50"]}  # fmt: skip
    with pytest.raises(VeilError, match="k"):
        _publish(policy, "sdc", request)
    assert _spent(policy) == (0.0, 0.0, [])
    _publish(policy, "sdc", {**request, "params": ["epsilon=1.0", "partition=mdav", "k=10"]})
    assert _spent(policy)[0] == 1.0


def test_a_pate_student_table_smaller_than_the_queries_charges_nothing(tmp_path: Path) -> None:
    from veil.store.warehouse import ingest_file

    text = POLICY + '\n[tables.staff]\npublic = true\n[tables.staff.columns]\nage = {{ type = "int", lower = 17, upper = 90 }}\n'
    policy = _warehouse(tmp_path, people(200), text)
    csv = tmp_path / "staff.csv"
    people(15, seed=3)[["age", "sex"]].to_csv(csv, index=False)  # one column alone: DuckDB sniffs "g" as the delimiter
    ingest_file(policy, "staff", csv)
    request = {"table": "people", "label": "income", "features": ["age"], "config": _pate(None, queries=20),
               "student_table": "staff", "validation": 0, "output_model": str(tmp_path / "s.pt")}  # fmt: skip
    with pytest.raises(InputError, match="15 records but 20 queries"):  # the public table's size: public
        _publish(policy, "pate", request)
    assert _spent(policy) == (0.0, 0.0, [])
    many = {**request, "config": _pate(None, queries=10, teachers=500)}  # 500 teachers, 200 private rows: empty ones abstain
    _publish(policy, "pate", many)
    assert _spent(policy)[0] > 0


def test_a_constant_pate_feature_is_refused_in_the_plan(tmp_path: Path) -> None:
    text = POLICY.replace('gain = {{ type = "int", lower = 0, upper = 5000 }}', 'gain = {{ type = "int", lower = 3, upper = 3 }}')
    policy = _warehouse(tmp_path, people(40).assign(gain=3), text)
    with pytest.raises(InputError, match="lower == upper"):
        _plan(policy, tmp_path, _pate(0.1), features=["age", "gain"])


@pytest.mark.slow
def test_dbscan_microaggregation_groups_are_checked_by_the_gate(tmp_path: Path) -> None:
    """DBSCAN's groups (min_samples rows at least) are a group guarantee the gate verifies on the output, as MDAV's."""
    policy = _warehouse(tmp_path, _small_spread(400))
    request = {"table": "people", "method": "microagg_dbscan", "columns": ["age", "hours"], "output": "db",
               "params": ["eps=0.5", "min_samples=10"]}  # fmt: skip
    with pytest.raises(VeilError, match="min_samples"):  # refused by the gate, nothing recorded: the next one may go
        _publish(policy, "sdc", {**request, "params": ["eps=0.5", "min_samples=1000"], "output": "db2"})
    result = _publish(policy, "sdc", request)
    assert result.gate["min_group"] >= 10


def test_a_kanon_export_naming_one_of_veils_files_is_refused_before_publishing(tmp_path: Path) -> None:
    from veil.generators.kanon.publish import publish_kanon

    text = POLICY.replace('path = "ledger.sqlite"', 'path = "ledger.csv"')
    policy = _warehouse(tmp_path, people(60), text)
    before = policy.ledger_path.read_bytes() if policy.ledger_path.exists() else None
    with pytest.raises(InputError, match="Veil's own files"):
        publish_kanon(policy, table="people", output="pk", algorithm="mondrian", qi=["age", "sex"], k=5,
                      export=policy.ledger_path, replace=True, progress=False)  # fmt: skip
    assert (policy.ledger_path.read_bytes() if policy.ledger_path.exists() else None) == before
