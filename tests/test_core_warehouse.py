"""Warehouse: ingest with name mapping, the sandboxed reader, reader/writer hand-over in one process."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pandas as pd
import pytest
from click.testing import CliRunner

from veil.cli.main import cli
from veil.errors import InputError
from veil.policy import load_policy
from veil.store.warehouse import ingest_file, read_table, reader, reader_generation, write_table

from .conftest import ADULT_POLICY


@pytest.fixture
def policy(tmp_path: Path):
    p = tmp_path / "policy.toml"
    p.write_text(ADULT_POLICY, encoding="utf-8")
    return load_policy(p)


def test_ingest_adult_maps_hyphenated_names(policy, shared_data: Path) -> None:
    summary = ingest_file(policy, "adult", shared_data / "adult" / "adult.data")
    assert summary["rows"] == 32561
    assert "hours_per_week" in summary["columns"] and summary["missing_policy_columns"] == []
    df = read_table(policy, "adult", ["age", "hours_per_week"])
    assert df["age"].between(17, 90).all()


def test_ingest_csv_with_header(policy, tmp_path: Path) -> None:
    src = tmp_path / "x.csv"
    src.write_text("Person-ID,Hours-per-week\n1,40\n2,?\n", encoding="utf-8")
    ingest_file(policy, "x", src)
    df = read_table(policy, "x")
    assert list(df.columns) == ["person_id", "hours_per_week"]
    assert df["hours_per_week"].isna().sum() == 1


def test_reader_is_sandboxed(policy) -> None:
    write_table(policy, "t", pd.DataFrame({"a": [1, 2]}))
    con = reader(policy).cursor()
    assert con.execute("SELECT sum(a) FROM t").fetchone()[0] == 3
    with pytest.raises(duckdb.PermissionException):
        con.execute("SELECT * FROM read_csv('/etc/passwd')").fetchall()
    with pytest.raises(duckdb.Error):
        con.execute("CREATE TABLE u AS SELECT 1").fetchall()
    with pytest.raises(duckdb.Error):
        con.execute("SET enable_external_access = true")


def test_writer_hands_over_from_reader(policy) -> None:
    write_table(policy, "t", pd.DataFrame({"a": [1]}))
    reader(policy)
    gen = reader_generation(policy)
    write_table(policy, "t", pd.DataFrame({"a": [1, 2, 3]}), replace=True)
    assert reader(policy).cursor().execute("SELECT count(*) FROM t").fetchone()[0] == 3
    assert reader_generation(policy) == gen + 1


def test_write_refuses_overwrite_and_reserved_names(policy) -> None:
    write_table(policy, "t", pd.DataFrame({"a": [1]}))
    with pytest.raises(InputError, match="already exists"):
        write_table(policy, "t", pd.DataFrame({"a": [2]}))
    with pytest.raises(InputError, match="reserved"):
        write_table(policy, "_veil_x", pd.DataFrame({"a": [2]}))


def test_cli_ingest_and_releases(tmp_path: Path, shared_data: Path) -> None:
    p = tmp_path / "policy.toml"
    p.write_text(ADULT_POLICY, encoding="utf-8")
    runner = CliRunner()
    res = runner.invoke(
        cli, ["ingest", "--policy", str(p), "--table", "adult", str(shared_data / "adult" / "adult.data"), "--format", "json"]
    )
    assert res.exit_code == 0, res.output
    assert '"rows": 32561' in res.output
    res = runner.invoke(cli, ["ingest", "--policy", str(p), "--table", "bad-name", str(shared_data / "adult" / "adult.data")])
    assert res.exit_code == 2 and "not a plain SQL name" in res.output
    res = runner.invoke(cli, ["releases", "--policy", str(p), "--format", "json"])
    assert res.exit_code == 0 and res.output.strip() == "[]"
