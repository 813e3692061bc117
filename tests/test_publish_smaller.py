"""Smaller publication bugs of issue 13, one test each (through the CLI)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.publish_support import make_warehouse, ok_json, publications, veil


def _kanon(policy: Path, *extra: str) -> object:
    return veil(
        "publish", "kanon", "--policy", policy, "--table", "people", "--algorithm", "mondrian", "--k", "5",
        "--qi", "age,job", "--sensitive", "income", "--format", "json", *extra,
    )  # fmt: skip


@pytest.mark.slow
def test_export_never_overwrites_a_file_without_replace(tmp_path: Path) -> None:
    policy = make_warehouse(tmp_path, n=200)
    target = tmp_path / "out.csv"
    target.write_text("keep me\n")
    res = _kanon(policy, "--output", "k1", "--export", str(target))
    assert res.exit_code == 2 and "already exists" in res.output  # type: ignore[attr-defined]
    assert target.read_text() == "keep me\n" and publications(policy) == []
    ok_json(_kanon(policy, "--output", "k1", "--export", str(target), "--replace"))
    assert target.read_text().startswith("age,")


@pytest.mark.slow
def test_hierarchy_paths_are_stored_absolute_and_latin1_files_are_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    policy = make_warehouse(tmp_path, n=200)
    folder = tmp_path / "hier"
    folder.mkdir()
    (folder / "job.csv").write_bytes("nurse;santé;*\nclerk;santé;*\nsmith;métal;*\n".encode("latin-1"))
    monkeypatch.chdir(tmp_path)
    ok_json(_kanon(policy, "--output", "k1", "--hierarchies", "hier"))
    rel = publications(policy)[-1]
    assert rel.params["hierarchy_dir"] == str(folder.resolve())
    assert rel.params["hierarchies"] == {"job": str((folder / "job.csv").resolve())}
    # the audit finds the recorded hierarchy from any working directory
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    audit = veil("audit", "kanon", "--policy", policy, "--table", "k1", "--k", "5", "--format", "json")
    assert audit.exit_code == 0, audit.output
