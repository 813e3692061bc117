"""A warehouse is bound to its ledger: no way in runs on another one (red team s66 F7).

The ledger holds the warehouse's whole history: budgets spent, releases (the one-release-without-guarantee rule), which
tables are published, the bounded copies' salts. docs/ledger.md documented pointing ``[ledger] path`` at another file
as an ordinary move; a fresh ledger then reopened the population (the refresh difference gave a newcomer's exact
value), reset every budget and let raw rows overwrite a published table. Now the warehouse records its ledger's
random identity on first use and every entry point refuses (``LedgerMismatch``, SQLSTATE F0000, with a hint) a ledger
of another identity, a missing one, a fresh one and one moved away, before anything is read, charged or written. The
one deliberate migration, ``veil move-ledger``, copies the history with the identity. Deterministic: no false failures.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from veil.errors import LedgerMismatch

_COLUMNS = 'age = { type = "int", lower = 17, upper = 90 }\nsex = { type = "category", values = ["F", "M"] }\n'
_HEAD = '[database]\npath = "warehouse.duckdb"\n[ledger]\npath = "{ledger}"\n'
_BODY = f'[tables.people]\nprivacy_unit = "row"\n[tables.people.columns]\n{_COLUMNS}[analysts.bob]\nepsilon = 5.0\n'


def _people(n: int = 80) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    return pd.DataFrame({"age": rng.integers(20, 60, n), "sex": rng.choice(["F", "M"], n)})


def _write_policy(base: Path, ledger: str) -> Path:
    path = base / "policy.toml"
    path.write_text(_HEAD.replace("{ledger}", ledger) + _BODY, encoding="utf-8")
    return path


def _world(base: Path, ledger: str = "ledger.sqlite") -> Path:
    """A warehouse with ``people``, bob's query charged, a k-anonymous publication: history in the ledger."""
    import veil as veil_api
    from veil.generators.transaction import publish
    from veil.policy import load_policy
    from veil.store.warehouse import write_table

    base.mkdir(parents=True, exist_ok=True)
    path = _write_policy(base, ledger)
    policy = load_policy(path)
    write_table(policy, "people", _people())
    with veil_api.connect(path, analyst="bob") as db:
        db.sql("SELECT COUNT(*) FROM people", epsilon=1.0)
    request = {"table": "people", "output": "pub", "algorithm": "mondrian", "k": 5, "qi": ["age", "sex"], "seed": 0}
    publish(policy, "kanon", request, progress=False)
    return path


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _world(tmp_path_factory.mktemp("template"))


def _copy(template: Path, base: Path) -> Path:
    """A copy of the template world (a copied ledger keeps its identity: the copy's warehouse accepts it)."""
    shutil.copytree(template.parent, base)
    return base / "policy.toml"


def _point(path: Path, variant: str) -> Path:
    """Point the policy at another ledger: ``missing`` (no file), ``fresh`` (a new empty ledger), ``swapped`` (another
    warehouse's ledger, with its own history) or ``moved`` (the ledger itself after ``veil move-ledger``)."""
    from veil.policy import load_policy
    from veil.store.binding import move_ledger
    from veil.store.ledger import Ledger

    base = path.parent
    if variant == "missing":
        _write_policy(base, "ledger-2027.sqlite")
    elif variant == "fresh":
        Ledger(base / "fresh.sqlite").close()
        _write_policy(base, "fresh.sqlite")
    elif variant == "swapped":
        other = _world(base / "other")
        _write_policy(base, str(other.parent / "ledger.sqlite"))
    elif variant == "moved":
        move_ledger(load_policy(path), base / "moved.sqlite")  # the policy still names the old (retired) file
    else:
        raise AssertionError(variant)
    return path


def _spent(ledger: Path) -> list[Any]:
    """What a ledger records (reservations and releases), to show a refusal charged and recorded nothing."""
    import sqlite3

    con = sqlite3.connect(ledger)
    try:
        return [con.execute(f"SELECT * FROM {t} ORDER BY 1").fetchall() for t in ("reservations", "releases", "accounts")]
    finally:
        con.close()


def _query(path: Path) -> None:
    import veil as veil_api

    with veil_api.connect(path, analyst="bob") as db:
        db.sql("SELECT COUNT(*) FROM people", epsilon=0.5)


def _budget_cli(path: Path) -> None:
    from veil.cli.main import cli

    result = CliRunner().invoke(cli, ["budget", "--policy", str(path)])
    _raise_from_cli(result)


def _publish(path: Path) -> None:
    from veil.generators.transaction import publish
    from veil.policy import load_policy

    request = {"table": "people", "output": "pub2", "algorithm": "mondrian", "k": 5, "qi": ["age", "sex"], "seed": 0}
    publish(load_policy(path), "kanon", request, progress=False)


def _ingest(path: Path) -> None:
    from veil.policy import load_policy
    from veil.store.warehouse import write_table

    write_table(load_policy(path), "people", _people(81), replace=True)


def _ingest_cli(path: Path) -> None:
    from veil.cli.main import cli

    csv = path.parent / "people.csv"
    _people(81).to_csv(csv, index=False)
    result = CliRunner().invoke(cli, ["ingest", "--policy", str(path), "--table", "people", "--replace", str(csv)])
    _raise_from_cli(result)


def _serve_cli(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``veil serve`` checks the ledger before it listens (``serve`` itself is replaced: it must never be reached)."""
    import veil.server.app as app
    from veil.cli.main import cli

    def never(*_: Any, **__: Any) -> None:
        raise AssertionError("veil serve started on a ledger that is not the warehouse's")

    monkeypatch.setattr(app, "serve", never)
    result = CliRunner().invoke(cli, ["serve", "--policy", str(path), "--port", "0"])
    _raise_from_cli(result)


def _analyst_add(path: Path) -> None:
    from veil.cli.main import cli

    result = CliRunner().invoke(cli, ["analyst", "add", "--policy", str(path), "--password-stdin", "bob"], input="pw-12345678\n")
    _raise_from_cli(result)


def _serve_workers(path: Path) -> None:
    """What ``veil serve --processes N`` runs before it starts its workers."""
    from veil.policy import load_policy
    from veil.server.workers import prepare_warehouse

    prepare_warehouse(load_policy(path))


def _tables_and_retract(path: Path) -> None:
    from veil.policy import load_policy
    from veil.store.catalog import retract, table_statuses

    policy = load_policy(path)
    try:
        table_statuses(policy)
    finally:
        retract(policy, "pub")


def _raise_from_cli(result: Any) -> None:
    if result.exit_code == 0:
        return
    if "error [F0000] LedgerMismatch" in result.output:
        raise LedgerMismatch(result.output, hint=result.output)  # (the CLI prints the message and its hint)
    raise AssertionError(f"exit {result.exit_code}: {result.output}") from result.exception


ENTRIES: dict[str, Callable[..., None]] = {
    "query": _query,
    "budget": _budget_cli,
    "publish": _publish,
    "ingest": _ingest,
    "ingest_cli": _ingest_cli,
    "serve": _serve_cli,
    "serve_workers": _serve_workers,
    "analyst_add": _analyst_add,
    "tables_retract": _tables_and_retract,
}


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["missing", "fresh", "swapped", "moved"])
def test_every_entry_point_refuses_a_ledger_that_is_not_the_warehouses(
    template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variant: str
) -> None:
    """Each variant × every entry point: refused with LedgerMismatch (F0000, a hint); the warehouse's own ledger records
    nothing new, a missing ledger is not created, and the warehouse's tables are as they were."""
    from veil.policy import load_policy
    from veil.store.warehouse import read_table

    path = _copy(template, tmp_path / "w")
    own = path.parent / "ledger.sqlite"
    _point(path, variant)
    named = load_policy(path).ledger_path
    before = _spent(own)
    people = read_table(load_policy(path), "people")
    for name, entry in ENTRIES.items():
        args = (path, monkeypatch) if name == "serve" else (path,)
        with pytest.raises(LedgerMismatch) as caught:
            entry(*args)
        hint = caught.value.hint or ""
        assert caught.value.sqlstate == "F0000" and "ledger" in hint.lower(), (name, caught.value)
        assert variant != "missing" or not named.exists(), f"{name}: the missing ledger was created"
    assert _spent(own) == before
    pd.testing.assert_frame_equal(read_table(load_policy(path), "people"), people)


@pytest.mark.slow
def test_a_session_open_when_the_ledger_is_swapped_refuses_its_next_query(template: Path, tmp_path: Path) -> None:
    """A session (``veil.connect``, as ``veil serve``'s) reads the policy at each query: the query after the curator
    points ``[ledger] path`` at a fresh file is refused, and the fresh file is charged nothing."""
    import veil as veil_api

    path = _copy(template, tmp_path / "w")
    with veil_api.connect(path, analyst="bob") as db:
        db.sql("SELECT COUNT(*) FROM people", epsilon=0.5)
        _point(path, "missing")
        with pytest.raises(LedgerMismatch):
            db.sql("SELECT COUNT(*) FROM people", epsilon=0.25)
    assert not (path.parent / "ledger-2027.sqlite").exists()


@pytest.mark.slow
def test_a_session_open_across_a_move_writes_nothing_to_the_old_file(template: Path, tmp_path: Path) -> None:
    """A live session keeps its ledger handle until the policy names another file: after ``veil move-ledger`` (before
    the curator repoints the policy) its next query is refused, never charged to the old file alone — the moved copy
    would lack that charge; once repointed, the same session charges the new file."""
    import veil as veil_api
    from veil.policy import load_policy
    from veil.store.binding import move_ledger

    path = _copy(template, tmp_path / "w")
    with veil_api.connect(path, analyst="bob") as db:
        db.sql("SELECT COUNT(*) FROM people", epsilon=0.5)
        move_ledger(load_policy(path), tmp_path / "moved.sqlite")
        old = _spent(path.parent / "ledger.sqlite")
        with pytest.raises(LedgerMismatch, match="moved to"):
            db.sql("SELECT COUNT(*) FROM people", epsilon=0.25)
        assert _spent(path.parent / "ledger.sqlite") == old
        _write_policy(path.parent, str(tmp_path / "moved.sqlite"))
        db.sql("SELECT COUNT(*) FROM people", epsilon=0.25)
        assert db.budget().spent == Fraction(7, 4)  # 1 (the template's) + 0.5 + 0.25


@pytest.mark.slow
def test_move_ledger_keeps_the_history_and_retires_the_old_file(template: Path, tmp_path: Path) -> None:
    """``veil move-ledger`` copies the ledger with its identity: pointed at the copy, the warehouse's budgets and release
    history are all there (bob's spend, the publication: a second release without guarantee is still refused), and
    the old file is refused from then on (it can never come back as a shorter history)."""
    from veil.cli.main import cli
    from veil.errors import NonDPReleaseRefused
    from veil.policy import load_policy
    from veil.store.publications import publication_history

    path = _copy(template, tmp_path / "w")
    history = [r.id for r, _ in publication_history(load_policy(path))]
    result = CliRunner().invoke(cli, ["move-ledger", "--policy", str(path), str(tmp_path / "disk2" / "ledger.sqlite")])
    assert result.exit_code == 0, result.output
    with pytest.raises(LedgerMismatch, match="moved to"):
        _query(path)
    _write_policy(path.parent, str(tmp_path / "disk2" / "ledger.sqlite"))
    policy = load_policy(path)
    assert [r.id for r, _ in publication_history(policy)] == history
    import veil as veil_api

    with veil_api.connect(path, analyst="bob") as db:
        assert db.budget().spent == 1
    with pytest.raises(NonDPReleaseRefused):
        _publish(path)


@pytest.mark.slow
def test_an_unbound_warehouse_with_veil_history_is_not_bound_to_an_empty_ledger(template: Path, tmp_path: Path) -> None:
    """A warehouse written before the binding existed (simulated: its binding dropped) is bound by its first use — to
    its own ledger, with records; a ledger with no record at all is refused (the published tables' records would be
    orphaned), and a fresh world (warehouse and ledger created together) binds as before."""
    import duckdb

    from veil.policy import load_policy
    from veil.store.binding import BINDING_TABLE, warehouse_ledger_id
    from veil.store.ledger import Ledger

    path = _copy(template, tmp_path / "w")
    con = duckdb.connect(str(path.parent / "warehouse.duckdb"))
    con.execute(f"DROP TABLE {BINDING_TABLE}")
    con.close()
    _point(path, "fresh")
    with pytest.raises(LedgerMismatch, match="has no record"):
        _query(path)
    _write_policy(path.parent, "ledger.sqlite")
    _query(path)
    with Ledger(path.parent / "ledger.sqlite") as own:
        assert warehouse_ledger_id(load_policy(path)) == own.identity
    fresh = _world(tmp_path / "fresh")  # (the template too: created together, bound at the first write)
    with Ledger(fresh.parent / "ledger.sqlite") as led:
        assert warehouse_ledger_id(load_policy(fresh)) == led.identity
