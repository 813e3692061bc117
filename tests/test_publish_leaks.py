"""Release paths never make raw private data public (issue 13, through the CLI).

Every family: the synthetic/randomised/perturbed publications never copy an untransformed column,
rows are shuffled, numbers stay in the policy's domains; ingest and publish never overwrite private
data or a publication without --replace, and never turn private data public. After every publish an
analyst reads every published table.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.publish_support import (
    analyst_reads_every_published_table,
    assert_no_source_column_copied,
    make_warehouse,
    ok_json,
    people,
    publications,
    source,
    table,
    tables,
    veil,
)


@pytest.fixture
def warehouse(tmp_path: Path) -> Path:
    return make_warehouse(tmp_path)


def _publish(policy: Path, kind: str, *args: str) -> dict:
    body = ok_json(veil("publish", kind, "--policy", policy, "--table", "people", "--format", "json", *args))
    analyst_reads_every_published_table(policy)
    return body


@pytest.mark.slow
def test_krr_publishes_only_the_randomised_columns(warehouse: Path) -> None:
    body = _publish(warehouse, "krr", "--columns", "sex,job", "--epsilon", "1", "--output", "p_krr")
    out = table(warehouse, "p_krr")
    # 400 source rows: a discrete-Laplace row count at ε = 1 is within ±25 with probability 1 − 2.8e-11
    assert list(out.columns) == ["sex", "job"] and abs(len(out) - 400) <= 25
    assert body["columns"] == {"sex": "randomised", "job": "randomised"}
    assert_no_source_column_copied(warehouse, "p_krr")
    rel = next(r for r in publications(warehouse) if r.table == "p_krr")
    assert float(rel.epsilon) == 3.0 and rel.metrics["gate"]["columns"]["sex"]["protection"] == "randomised"


@pytest.mark.slow
@pytest.mark.parametrize("method", ["imposter", "gan"])
def test_synth_is_synthetic_in_every_column(warehouse: Path, method: str) -> None:
    args = ["--method", method, "--sensitive", "sex", "--label", "income", "--columns", "job,age"]
    args += ["--epochs", "2", "--batch-size", "64", "--output", f"p_{method}", "--threads", "1"]
    # On this 400-row table (80 holdout rows) the distance-to-closest-record check refuses a fresh model's
    # release now and then (measured: about 1 run in 20; holdout split and training are CSPRNG-random).
    # A refusal writes nothing and is a sound outcome, so up to three independent tries: a spurious
    # failure of this test has probability about 1e-4, and a gate that always refused still fails it.
    for _ in range(3):
        res = veil("publish", "synth", "--policy", warehouse, "--table", "people", "--format", "json", *args)
        if res.exit_code == 0:  # type: ignore[attr-defined]
            break
        assert "reproduces its training rows" in res.output and f"p_{method}" not in tables(warehouse), res.output  # type: ignore[attr-defined]
    body = ok_json(res)
    analyst_reads_every_published_table(warehouse)
    out = table(warehouse, f"p_{method}")
    assert set(out.columns) == {"sex", "income", "job", "age"}  # name, hours, gain dropped
    assert set(body["columns"].values()) == {"synthesised"}
    assert out["age"].between(17, 90).all()
    assert_no_source_column_copied(warehouse, f"p_{method}")
    rel = next(r for r in publications(warehouse) if r.table == f"p_{method}")
    assert rel.metrics["gate"]["dcr"]["passed"] and rel.metrics["holdout_rows"] == 80


@pytest.mark.slow
@pytest.mark.parametrize(
    ("method", "params", "synthetic"),
    [
        ("ml_copy", [], True),
        ("noise_addition", ["--param", "a=2.0"], False),
        ("microagg_mdav", ["--param", "k=5"], False),
        ("rank_swapping", ["--param", "p=20"], False),
    ],
)
def test_sdc_outputs_respect_domains_and_drop_the_copied_label(
    warehouse: Path, method: str, params: list[str], synthetic: bool
) -> None:
    out_name = f"p_{method}"
    body = _publish(
        warehouse, "sdc", "--method", method, *params, "--columns", "age,hours,gain", "--target", "income", "--output", out_name
    )
    out = table(warehouse, out_name)
    assert out["age"].between(17, 90).all() and out["hours"].between(1, 99).all() and out["gain"].between(0, 5000).all()
    if synthetic:
        assert set(out.columns) == {"age", "hours", "gain", "income"}  # the label is the tree's, not a copy
        assert set(body["columns"].values()) == {"synthesised"}
    else:
        assert set(out.columns) == {"age", "hours", "gain"}  # the label was a copy: dropped
        # rows are shuffled: the published order says nothing about the source order
        src = source(warehouse)
        r = np.corrcoef(out["hours"].to_numpy(float), src["hours"].to_numpy(float))[0, 1]
        assert abs(r) < 0.5
    assert_no_source_column_copied(warehouse, out_name)


@pytest.mark.parametrize(
    ("method", "param", "match"),
    [
        ("microagg_mdav", "k=1", "k=1"),
        ("noise_addition", "a=0", "adds no noise"),
        ("rank_swapping", "p=0", "swaps nothing"),
        ("dp_microagg_laplace", "epsilon=1e300", None),
    ],
)
def test_vacuous_parameters_are_refused_and_nothing_is_written(
    warehouse: Path, method: str, param: str, match: str | None
) -> None:
    before = len(publications(warehouse))
    res = veil(
        "publish", "sdc", "--policy", warehouse, "--table", "people", "--method", method, "--param", param,
        "--columns", "age,hours", "--output", "vacuous",
    )  # fmt: skip
    if match is None:  # ε so large it is no guarantee: refused at the edge or by the gate, never published
        assert res.exit_code == 2, res.output
    else:
        assert res.exit_code == 2 and match in res.output, res.output
    assert "vacuous" not in tables(warehouse) and len(publications(warehouse)) == before


@pytest.mark.slow
def test_ingest_never_overwrites_without_replace_nor_a_publication(warehouse: Path, tmp_path: Path) -> None:
    csv = tmp_path / "other.csv"
    people(50, seed=9).to_csv(csv, index=False)
    res = veil("ingest", "--policy", warehouse, "--table", "people", csv)
    assert res.exit_code == 2 and "already exists" in res.output
    assert len(source(warehouse)) == 400
    _publish(warehouse, "krr", "--columns", "sex", "--epsilon", "1", "--output", "p_pub")
    for extra in ([], ["--replace"]):
        res = veil("ingest", "--policy", warehouse, "--table", "p_pub", csv, *extra)
        assert res.exit_code == 2 and "published" in res.output, res.output
    assert list(table(warehouse, "p_pub").columns) == ["sex"]  # still the randomised table
    ok_json(veil("ingest", "--policy", warehouse, "--table", "people", csv, "--replace", "--format", "json"))
    assert len(source(warehouse)) == 50


@pytest.mark.slow
def test_publish_never_overwrites_the_source_or_private_data(warehouse: Path) -> None:
    base = ["publish", "krr", "--policy", warehouse, "--table", "people", "--columns", "sex", "--epsilon", "1"]
    for extra in ([], ["--replace"]):
        res = veil(*base, "--output", "people", *extra)
        assert res.exit_code == 2 and "source" in res.output, res.output
    assert len(source(warehouse).columns) == 7
    ok_json(veil(*base, "--output", "p1", "--format", "json"))
    res = veil(*base, "--output", "p1")
    assert res.exit_code == 2 and "exists as a published table" in res.output
    ok_json(veil(*base, "--output", "p1", "--replace", "--format", "json"))
    assert sum(r.table == "p1" for r in publications(warehouse)) == 2
    analyst_reads_every_published_table(warehouse)


@pytest.mark.slow
def test_no_curator_write_replaces_a_published_table_with_raw_rows(warehouse: Path, tmp_path: Path) -> None:
    """``write_table``, ``Warehouse.write`` and ``veil ingest``/``ingest_file`` all refuse a published name (red team
    s16 A8b: the check lived in ``ingest_file`` only; on Spark analysts read the replaced table itself)."""
    from veil.errors import InputError
    from veil.policy import load_policy
    from veil.store.warehouse import Warehouse, ingest_file, write_table

    _publish(warehouse, "krr", "--columns", "sex", "--epsilon", "1", "--output", "p_krr")
    policy = load_policy(warehouse)
    raw = source(warehouse)
    csv = tmp_path / "raw.csv"
    raw.to_csv(csv, index=False)
    writes = {
        "write_table": lambda: write_table(policy, "p_krr", raw, replace=True),
        "write_table public": lambda: write_table(policy, "p_krr", raw, replace=True, public=True),
        "Warehouse.write": lambda: Warehouse(policy).write("p_krr", raw, replace=True),
        "ingest_file": lambda: ingest_file(policy, "p_krr", csv, replace=True),
    }
    for name, write in writes.items():
        with pytest.raises(InputError, match="is published"):
            write()
        assert list(table(warehouse, "p_krr").columns) == ["sex"], name
    res = veil("ingest", "--policy", warehouse, "--table", "p_krr", str(csv), "--replace")
    assert res.exit_code == 2 and "is published" in res.output
    assert analyst_reads_every_published_table(warehouse).keys() == {"p_krr"}
