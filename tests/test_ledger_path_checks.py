"""``[ledger] path`` must name a ledger of its own (red team s27 A13): another of Veil's files is refused when the
policy is loaded, and a file that is not an SQLite ledger is a typed PolicyError when opened — never
``sqlite3.DatabaseError``, never an SQLite file squatting the public mirror's place."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.publish_support import POLICY

VEIL_FILES = ["policy.toml", "warehouse.duckdb", "warehouse.public.duckdb", "warehouse.duckdb.wal",
              "warehouse.public.duckdb.wal", ".", "sub/../policy.toml"]  # fmt: skip


def _write(tmp_path: Path, ledger: str) -> Path:
    path = tmp_path / "policy.toml"
    path.write_text(POLICY.format(table_budget="").replace('path = "ledger.sqlite"', f'path = "{ledger}"'), encoding="utf-8")
    return path


@pytest.mark.parametrize("ledger", VEIL_FILES)
def test_a_ledger_on_another_of_veils_files_is_refused_at_load(tmp_path: Path, ledger: str) -> None:
    from veil.errors import PolicyError
    from veil.policy import load_policy

    (tmp_path / "sub").mkdir()
    with pytest.raises(PolicyError, match=r"\[ledger\] path"):
        load_policy(_write(tmp_path, ledger))
    assert not (tmp_path / "warehouse.public.duckdb").exists()


@pytest.mark.parametrize("content", [b"age,sex\n30,F\n", b"[database]\n", bytes(range(256)) * 8, b"\x00" * 4096])
def test_a_file_that_is_not_a_ledger_is_a_typed_error(tmp_path: Path, content: bytes) -> None:
    from veil.errors import PolicyError
    from veil.store.ledger import Ledger

    path = tmp_path / "not_a_ledger.sqlite"
    path.write_bytes(content)
    with pytest.raises(PolicyError, match=r"not a Veil ledger|cannot be opened"):
        Ledger(path).close()


def test_a_new_or_existing_ledger_still_opens(tmp_path: Path) -> None:
    from veil.store.ledger import Ledger

    for _ in range(2):
        with Ledger(tmp_path / "ledger.sqlite") as led:
            assert led.spent("table:t").epsilon == 0
