"""`veil compare` treats every publication kind alike: each point goes through the same sanitise → gate
path as `veil publish`, and nothing is written, recorded or charged."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.publish_support import make_warehouse, ok_json, publications, tables, veil


@pytest.fixture
def warehouse(tmp_path: Path) -> Path:
    return make_warehouse(tmp_path, table_budget="epsilon_total = 1")


def test_compare_sweeps_krr_and_kanon_through_the_gate(warehouse: Path) -> None:
    base = ["compare", "--policy", warehouse, "--table", "people", "--format", "json"]
    krr = ok_json(veil(*base, "--kind", "krr", "--columns", "sex,job", "--sweep", "0,0.5,2"))
    assert [r["epsilon"] for r in krr] == [0, 0.5, 2]
    assert krr[0]["gate"].startswith("refused: vacuous parameter: ε = 0")
    assert [r["gate"] for r in krr[1:]] == ["passed", "passed"] and krr[2]["dp_epsilon"] == 6.0  # 2 columns + rows; not charged
    assert krr[1]["keep_probability"]["sex"] < krr[2]["keep_probability"]["sex"]
    kanon_args = ["--kind", "kanon", "--columns", "age,job", "--sensitive", "income", "--param", "algorithm=mondrian"]
    # k-anonymity has no DP guarantee (ε = ∞): the capped table refuses every point, as `veil publish` would (s64 F5)
    capped = ok_json(veil(*base, *kanon_args, "--sweep", "5,20"))
    assert all(r["gate"].startswith("refused:") and "epsilon_total = 1" in r["gate"] for r in capped)
    (warehouse.parent / "open").mkdir()
    uncapped = make_warehouse(warehouse.parent / "open")
    open_base = ["compare", "--policy", uncapped, "--table", "people", "--format", "json"]
    kanon = ok_json(veil(*open_base, *kanon_args, "--sweep", "1,5,20"))
    assert kanon[0]["gate"].startswith("refused: vacuous parameter: k = 1")
    assert [r["min_group"] >= r["k"] for r in kanon[1:]] == [True, True] and kanon[2]["ncp_percent"] >= kanon[1]["ncp_percent"]
    assert set(kanon[1]["l_diversity"]) == {"income"}
    # nothing was written, recorded or charged
    assert tables(warehouse) == ["people"] and publications(warehouse) == []
    assert tables(uncapped) == ["people"] and publications(uncapped) == []
    assert ok_json(veil("budget", "--policy", warehouse, "--format", "json"))["tables"][0]["epsilon_spent"] == 0.0


def test_compare_refuses_an_unknown_kind(warehouse: Path) -> None:
    res = veil("compare", "--policy", warehouse, "--table", "people", "--kind", "krrr", "--columns", "sex")
    assert res.exit_code == 2 and "Did you mean 'krr'" in res.output


@pytest.mark.slow
@pytest.mark.parametrize("name", ["old.png", "old.svg"])
def test_compare_plot_replaces_a_file_only_with_replace(warehouse: Path, name: str) -> None:
    target = warehouse.parent / name
    target.write_bytes(b"old")
    base = ["compare", "--policy", warehouse, "--table", "people", "--columns", "age,hours", "--target", "income",
            "--methods", "noise_addition", "--plot", target]  # fmt: skip
    refused = veil(*base)
    assert refused.exit_code == 2 and "already exists" in refused.output and target.read_bytes() == b"old"
    res = veil(*base, "--replace")
    assert res.exit_code == 0, res.output
    assert target.read_bytes() != b"old" and target.stat().st_size > 100
