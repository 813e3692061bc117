"""``veil serve --engine-threads``: the DuckDB threads of each server process's warehouse readers (issue 16: with
``--processes N`` each process gets its share of the cores, so N DuckDB pools never hold more threads than cores)."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner

from tests.support.server import FAST_BACKOFF, build_policy, dsn, running_server
from veil.errors import InputError
from veil.policy import load_policy
from veil.server.limits import ServerLimits
from veil.store import warehouse


def _reader_threads(policy_path: Path) -> int:
    cur, _ = warehouse.reader_cursor(load_policy(policy_path))
    row = cur.execute("SELECT current_setting('threads')").fetchone()
    assert row is not None
    return int(row[0])


def test_the_server_sizes_its_readers_and_answers_through_a_change(tmp_path: Path, shared_data: Path) -> None:
    policy = build_policy(tmp_path, shared_data, rows=300)
    default = _reader_threads(policy)
    assert default >= 1  # DuckDB's own default (a thread per core), before any server asked otherwise
    try:
        for threads in (1, 0):  # each server reopens the readers an earlier one sized otherwise
            limits = ServerLimits(engine_threads=threads, **FAST_BACKOFF)  # type: ignore[arg-type]
            with running_server(policy, limits=limits) as st, psycopg.connect(dsn(st.port), autocommit=True) as conn:  # type: ignore[attr-defined]
                conn.execute("SET veil.epsilon = 0.5")
                row = conn.execute("SELECT COUNT(*) FROM adult").fetchone()
                assert row is not None and row[0] > 0  # the sessions' cursors followed the reopened reader
                assert _reader_threads(policy) == (threads or default)
    finally:
        warehouse.set_reader_threads(0)


def test_the_command_line_gives_each_process_its_share(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What ``--engine-threads`` (or its default) hands to the server, through the real option parsing."""
    from tests.support.server import SERVER_POLICY
    from veil.cli.main import cli

    got: list[ServerLimits] = []
    monkeypatch.setattr("veil.server.app.serve", lambda *a, **k: got.append(k["limits"]))
    monkeypatch.setattr("veil.server.workers.serve_processes", lambda *a, **k: got.append(k["limits"]))
    monkeypatch.setattr("veil.server.limits.usable_cores", lambda: 8)
    policy = tmp_path / "policy.toml"
    policy.write_text(SERVER_POLICY, encoding="utf-8")
    for extra in (
        [],
        ["--processes", "2"],
        ["--processes", "3"],
        ["--processes", "2", "--engine-threads", "0"],
        ["--engine-threads", "3"],
    ):
        res = CliRunner().invoke(cli, ["serve", "--policy", str(policy), *extra])
        assert res.exit_code == 0, res.output
    assert [limits.engine_threads for limits in got] == [0, 4, 2, 0, 3]
    res = CliRunner().invoke(cli, ["serve", "--policy", str(policy), "--engine-threads", "-1"])
    assert res.exit_code == 2 and "--engine-threads" in res.output
    with pytest.raises(InputError, match="engine_threads"):
        ServerLimits(engine_threads=-1)
