"""``veil serve --engine-threads``: the DuckDB threads of each server process's warehouse readers (issue 16: with
``--processes N`` each process gets its share of the cores, so N DuckDB pools never hold more threads than cores)."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner

from tests.support.server import FAST_BACKOFF, build_policy, dsn, running_server
from veil.errors import InputError, InternalError
from veil.policy import load_policy
from veil.server.limits import ServerLimits
from veil.store import warehouse


def _reader_setting(policy_path: Path, name: str) -> str:
    cur, _ = warehouse.reader_cursor(load_policy(policy_path))
    row = cur.execute(f"SELECT current_setting('{name}')").fetchone()
    assert row is not None
    return str(row[0])


def _reader_threads(policy_path: Path) -> int:
    return int(_reader_setting(policy_path, "threads"))


def test_the_server_sizes_its_readers_and_answers_through_a_change(tmp_path: Path, shared_data: Path) -> None:
    policy = build_policy(tmp_path, shared_data, rows=300)
    default = _reader_threads(policy)
    default_memory = _reader_setting(policy, "memory_limit")
    assert default >= 1  # DuckDB's own default (a thread per core), before any server asked otherwise
    try:
        for threads, mib in ((3, 300), (0, 0)):  # each server reopens the readers an earlier one sized otherwise
            limits = ServerLimits(engine_threads=threads, engine_memory_mib=mib, **FAST_BACKOFF)  # type: ignore[arg-type]
            with running_server(policy, limits=limits) as st, psycopg.connect(dsn(st.port), autocommit=True) as conn:  # type: ignore[attr-defined]
                conn.execute("SET veil.epsilon = 0.5")
                row = conn.execute("SELECT COUNT(*) FROM adult").fetchone()
                assert row is not None and row[0] > 0  # the sessions' cursors followed the reopened reader
                assert _reader_threads(policy) == (threads or default)
                assert _reader_setting(policy, "memory_limit") == (f"{mib}.0 MiB" if mib else default_memory)
    finally:
        warehouse.set_reader_threads(0)
        warehouse.set_reader_memory(0)


def test_the_command_line_gives_each_process_its_share(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What ``--engine-threads`` (or its default) hands to the server, through the real option parsing."""
    from tests.support.server import SERVER_POLICY
    from veil.cli.main import cli

    got: list[ServerLimits] = []
    monkeypatch.setattr("veil.server.app.serve", lambda *a, **k: got.append(k["limits"]))
    monkeypatch.setattr("veil.server.workers.serve_processes", lambda *a, **k: got.append(k["limits"]))
    monkeypatch.setattr("veil.server.limits.usable_cores", lambda: 8)
    monkeypatch.setattr("veil.server.limits.usable_memory_mib", lambda: 24_000)
    policy = tmp_path / "policy.toml"
    policy.write_text(SERVER_POLICY, encoding="utf-8")
    for extra in (
        [],
        ["--processes", "2"],
        ["--processes", "3"],
        ["--processes", "2", "--engine-threads", "0"],
        ["--engine-threads", "3"],
        ["--processes", "2", "--engine-memory", "0"],
        ["--engine-memory", "1000"],
    ):
        res = CliRunner().invoke(cli, ["serve", "--policy", str(policy), *extra])
        assert res.exit_code == 0, res.output
    assert [limits.engine_threads for limits in got] == [0, 4, 2, 0, 3, 4, 0]
    # 80% of memory over the two connections of each process (red team s44: 2N instances at 80% each)
    assert [limits.engine_memory_mib for limits in got] == [9_600, 4_800, 3_200, 4_800, 9_600, 0, 1_000]
    for option in ("--engine-threads", "--engine-memory"):
        res = CliRunner().invoke(cli, ["serve", "--policy", str(policy), option, "-1"])
        assert res.exit_code == 2 and option in res.output
    with pytest.raises(InputError, match="engine_threads"):
        ServerLimits(engine_threads=-1)
    with pytest.raises(InputError, match="at least 2"):  # review s21 X4: one thread did not spill a text GROUP BY
        ServerLimits(engine_threads=1)
    assert ServerLimits.default_engine_threads(2, 2) == 2 and ServerLimits.default_engine_threads(4, 2) == 2
    with pytest.raises(InputError, match="engine_memory_mib"):
        ServerLimits(engine_memory_mib=-1)
    # below the floor a charged statement fails where it would spill (red team s63 F1): refused at start, by name
    res = CliRunner().invoke(cli, ["serve", "--policy", str(policy), "--engine-memory", "8"])
    assert res.exit_code != 0 and "256" in res.output, res.output
    for mib in (1, 8, 255):
        with pytest.raises(InputError, match="at least 256"):
            ServerLimits(engine_memory_mib=mib)
        with pytest.raises(InternalError, match="at least 256"):
            warehouse.set_reader_memory(mib)


def test_a_reader_spills_beyond_its_memory_limit_in_the_sandbox(tmp_path: Path) -> None:
    """A limit well below what a statement needs is not a failure that depends on the data's size: the sandboxed
    read-only reader spills to the warehouse's temporary folder (external access off does not stop it)."""
    path = tmp_path / "w.duckdb"
    with warehouse.writer(path) as con:
        con.execute("CREATE TABLE t AS SELECT range AS k, range % 7 AS v FROM range(8000000)")
    try:
        warehouse.set_reader_memory(256)
        cur, _ = warehouse.reader_cursor(path)
        assert cur.execute("SELECT current_setting('memory_limit')").fetchone() == ("256.0 MiB",)
        row = cur.execute("SELECT COUNT(*), SUM(s) FROM (SELECT k, SUM(v) AS s FROM t GROUP BY k)").fetchone()
        assert row == (8_000_000, sum(k % 7 for k in range(8_000_000)))
    finally:
        warehouse.set_reader_memory(0)
