"""k-anonymity with missing values: hierarchy folders with ``missing="leaf"``, generator and audit
NCP agreeing whatever column holds the NULLs, journalist risk with NULLs, categorical SOM columns."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from veil.auditor.anonymity import audit_anonymity
from veil.generators.kanon import anonymise

HIER_DIRS = ("clustering_based_k_anon", "arx")


@pytest.fixture(scope="module")
def adult(shared_data) -> pd.DataFrame:
    from veil.datasets import load_adult

    return load_adult().head(900)


def _population(df: pd.DataFrame, qi: list[str]) -> pd.DataFrame:
    return df[qi]  # the audit itself applies the missing-value policy


@pytest.mark.parametrize("folder", HIER_DIRS)
@pytest.mark.parametrize("algorithm", ["mondrian", "mondrian-relaxed", "oka", "kma"])
def test_missing_leaf_works_with_any_hierarchy_folder(adult, shared_data: Path, folder: str, algorithm: str) -> None:
    hier = shared_data / "adult" / "hierarchies" / folder
    qi = ["age", "workclass", "occupation", "race"]
    assert adult["workclass"].isna().any()
    res = anonymise(adult, qi=qi, k=5, algorithm=algorithm, hierarchies=hier, missing="leaf", sensitive=["income"], seed=0)
    assert res.rows_dropped == 0  # the NULLs became the leaf '?', no row lost
    rep = audit_anonymity(
        res.table, qi, sensitive=["income"], hierarchies=hier, population=_population(adult, qi), missing="leaf"
    )
    assert rep.k >= 5 and rep.ncp_percent == pytest.approx(res.ncp_percent, abs=1e-9)


@pytest.mark.parametrize("missing", ["drop", "leaf"])
@pytest.mark.parametrize("where", ["sensitive", "som"])
@pytest.mark.parametrize("with_hierarchy", [False, True])
def test_generator_and_audit_ncp_agree_when_a_non_qi_column_has_nulls(
    adult, shared_data: Path, missing: str, where: str, with_hierarchy: bool
) -> None:
    # rows whose sensitive / SOM value is NULL are dropped by the generator; among them the
    # oldest person and every '?' of workclass, so the table's age range and the '?' leaf differ
    # from the population the audit sees
    df = adult.copy()
    oldest = int(df["age"].idxmax())
    df.loc[oldest, "hours_per_week"] = np.nan
    df.loc[df["workclass"].isna(), "hours_per_week"] = np.nan
    df["hours_cat"] = df["hours_per_week"].map(lambda h: None if pd.isna(h) else ("long" if h > 40 else "short"))
    qi = ["age", "workclass", "sex"]
    hier = shared_data / "adult" / "hierarchies" / "clustering_based_k_anon" if with_hierarchy else None
    kwargs: dict = (
        {"sensitive": ["hours_cat"]}
        if where == "sensitive"
        else {
            "sensitive": ["income"],
            "som_columns": ["hours_per_week", "capital_gain"],
            "som_label": "income",
            "som_neurons": (4, 4, 1),
            "som_epochs": 2,
        }
    )
    res = anonymise(df, qi=qi, k=4, algorithm="mondrian", hierarchies=hier, missing=missing, seed=1, **kwargs)
    rep = audit_anonymity(res.table, qi, hierarchies=hier, population=_population(df, qi), missing=missing)
    # categorical QIs agree exactly; a numeric QI's class reaching the table's oldest row is published open
    # ("[70, inf)", the extreme being one person's value), which the audit can only read as reaching the
    # population's oldest (dropped here): its NCP is at least the generator's
    for col in qi:
        if col == "age":
            assert rep.ncp_per_qi[col] >= res.ncp_per_qi[col] - 1e-9
        else:
            assert rep.ncp_per_qi[col] == pytest.approx(res.ncp_per_qi[col], abs=1e-9), col


def test_categorical_som_columns_are_one_hot_encoded(adult) -> None:
    res = anonymise(
        adult.dropna(),
        qi=["age", "sex"],
        k=5,
        algorithm="mondrian",
        sensitive=["income"],
        som_columns=["workclass", "hours_per_week"],
        som_label="income",
        som_neurons=(4, 8, 4),
        som_epochs=2,
        seed=0,
    )
    assert res.som["neurons"] in (4, 8) and res.table["som_neuron"].between(0, res.som["neurons"] - 1).all()
    assert res.som["encoded_columns"] == {"workclass": "one-hot", "hours_per_week": "numeric"}


@pytest.mark.slow
def test_journalist_risk_with_nulls_in_a_numeric_qi_through_the_cli(adult_policy, tmp_path: Path) -> None:
    from veil.cli.main import cli
    from veil.datasets import load_adult
    from veil.policy import load_policy
    from veil.store.warehouse import write_table

    policy = adult_policy(rows=10)
    df = load_adult().head(2500)
    df.loc[::9, "hours_per_week"] = np.nan
    write_table(load_policy(policy), "adult", df, replace=True)
    runner = CliRunner()
    qi = "age,hours_per_week,sex,workclass"
    res = runner.invoke(
        cli,
        ["publish", "kanon", "--policy", str(policy), "--table", "adult", "--algorithm", "mondrian", "--k", "5",
         "--qi", qi, "--sensitive", "income", "--missing", "leaf", "--output", "adult_k5", "--format", "json"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    res = runner.invoke(cli, ["audit", "kanon", "--policy", str(policy), "--table", "adult_k5", "--format", "json"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    # every published row is among the population's rows, so no class can be rarer in the population
    assert report["k"] >= 5 and report["journalist_max"] <= report["prosecutor_max"] <= 0.2


def test_latin1_hierarchy_files_are_read(tmp_path: Path) -> None:
    from veil.generators.kanon.hierarchies import load_hierarchies

    (tmp_path / "adult_city.csv").write_bytes("Zürich;CH;*\nGenève;CH;*\nMünchen;DE;*\n".encode("latin-1"))
    df = pd.DataFrame({"city": ["Zürich", "Genève", "München", "Zürich"] * 3, "s": list("abcd") * 3})
    assert load_hierarchies(tmp_path, ["city"])["city"].n_leaves == 3
    res = anonymise(df, qi=["city"], k=3, algorithm="mondrian", hierarchies=tmp_path, sensitive=["s"], seed=0)
    rep = audit_anonymity(res.table, ["city"], hierarchies=tmp_path, population=df)
    assert rep.k >= 3 and rep.ncp_percent == pytest.approx(res.ncp_percent)


def test_release_facts_name_every_published_column(adult) -> None:
    df = adult.dropna()
    res = anonymise(
        df, qi=["age", "sex"], k=5, algorithm="mondrian", sensitive=["income"], som_columns=["hours_per_week"],
        som_label="income", som_neurons=(4, 4, 1), som_epochs=2, seed=0,
    )  # fmt: skip
    facts = res.release_facts(["income"])
    named = {*facts["perturbed_columns"], *facts["covered_columns"], *facts["unprotected_columns"]}
    assert named == set(res.table.columns)
    assert facts["min_group_size"] == res.min_class_size >= 5 and facts["unprotected_columns"] == ("som_neuron",)
