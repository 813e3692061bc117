"""Through ``veil serve`` and a real client: a bounded-copy rebuild in the server's process (another session's table
write and first query) during a charged multi-statement run never leaves a charged failure (review s18b LOW-2).

The interleaving is forced as in ``tests/proxy/test_charged_run_pin.py``: a hook on the engine's ``execute`` of the
server thread that holds the reservation starts the write in another thread at the chosen point.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from tests.proxy.test_charged_run_pin import SHAPES, _build, _Concurrent, _new_data
from tests.support.server import PASSWORD, dsn, running_server
from veil.engines.duckdb import DuckDBEngine
from veil.store.ledger import Ledger

SQL = SHAPES["grouped COUNT+AVG+MEDIAN"][0]


@pytest.fixture()
def served(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    from veil.cli.main import cli

    policy = _build(tmp_path / "w")
    add = ["analyst", "add", "--policy", str(policy), "api", "--password-stdin"]
    result = CliRunner().invoke(cli, add, input=PASSWORD + "\n")
    assert result.exit_code == 0, result.output
    with running_server(policy) as st:
        yield policy, st.port  # type: ignore[attr-defined]


def _spent(policy: Path) -> Any:
    with Ledger(policy.parent / "ledger.sqlite") as led:
        return led.spent("analyst:api").epsilon


def _hook(point: str, concurrent: _Concurrent, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Start ``concurrent`` at ``point`` of the next charged run in the server (the thread that reserved)."""
    charged = threading.local()
    statements: list[str] = []
    reserve, execute = Ledger.reserve, DuckDBEngine.execute

    def reserve_then(self: Ledger, *args: Any, **kwargs: Any) -> Any:
        out = reserve(self, *args, **kwargs)
        charged.on = True
        if point == "after the reservation":
            concurrent.start()
        return out

    def execute_then(self: DuckDBEngine, sql: str) -> Any:
        out = execute(self, sql)
        if getattr(charged, "on", False) and concurrent.thread is None:
            statements.append(sql)
            if point == "between statements":
                concurrent.start()
        return out

    monkeypatch.setattr(Ledger, "reserve", reserve_then)
    monkeypatch.setattr(DuckDBEngine, "execute", execute_then)
    return statements


@pytest.mark.parametrize("point", ["after the reservation", "between statements"])
def test_a_rebuild_in_the_server_never_leaves_a_charged_failure(
    served: tuple[Path, int], monkeypatch: pytest.MonkeyPatch, point: str
) -> None:
    policy, port = served
    with psycopg.connect(dsn(port, user="api"), autocommit=True) as conn:
        assert conn.execute(SQL).fetchall()  # the copy is built: the run below reads it
        concurrent = _Concurrent(policy, _new_data)
        _hook(point, concurrent, monkeypatch)
        before = _spent(policy)
        try:
            rows = conn.execute(SQL.replace("COUNT(*)", "COUNT(*) AS n")).fetchall()  # not the answer cache's
        except psycopg.Error as exc:
            assert exc.sqlstate == "55000", (exc.sqlstate, str(exc))  # CopyNotReady: run it again, free
            assert "nothing was charged" in str(exc)
            assert _spent(policy) == before
            assert point == "after the reservation"
        else:
            assert rows and _spent(policy) > before
            # the write waited for the run's last statement, or (after the reservation) the run was refunded and
            # planned again on the new reader, free (QuerySession.execute retries WarehouseChanged)
            assert point in ("between statements", "after the reservation")
        concurrent.join()
        monkeypatch.undo()
        assert conn.execute(SQL.replace("COUNT(*)", "COUNT(*) AS m")).fetchall()  # asked again, answered
