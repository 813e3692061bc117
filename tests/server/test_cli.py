"""End to end through the command line: ``veil ingest`` → ``veil analyst add`` → ``veil serve``
(a real subprocess on a free port) → psql."""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.support.server import build_policy, psql
from veil.policy import load_policy


def test_veil_serve_subprocess_answers_psql(tmp_path: Path, shared_data: Path) -> None:
    policy = build_policy(tmp_path, shared_data, rows=300)
    with contextlib.closing(sqlite3.connect(load_policy(policy).ledger_path)) as db, db:
        db.execute("DELETE FROM bounded_copies")  # as if the table were loaded without `veil ingest`
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "veil.cli.main", "serve", "--policy", str(policy), "--port", "0"),
            *("--statement-timeout", "30", "--max-connections", "10", "--max-connections-per-analyst", "3"),
            *("--auth-timeout", "20", "--max-query-tokens", "3000", "--catalog-timeout", "4", "--workers", "4"),
            *("--public-query-timeout", "60", "--busy-workers", "2"),
        ],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "VEIL_PROGRESS": "0"},
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        assert proc.stderr is not None
        port = None
        banner = []
        while port is None:  # each read blocks until a line or EOF; a hung start-up meets pytest-timeout
            line = proc.stderr.readline()
            banner.append(line)
            match = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
            if match:
                port = int(match.group(1))
            elif not line:  # stderr closed: the server is exiting
                proc.wait(60)
                break
        assert port is not None, "".join(banner)
        assert "alice" in "".join(banner)
        # the bounded copy was built before the server listened, not by the first analyst's query
        with contextlib.closing(sqlite3.connect(load_policy(policy).ledger_path)) as db:
            assert "adult" in {r[0] for r in db.execute("SELECT source FROM bounded_copies")}
        out = psql(port, "SET veil.epsilon = 0.2", "SELECT COUNT(*) AS n FROM adult", "SHOW veil.budget")
        assert out.returncode == 0, out.stderr
        assert "(1 row)" in out.stdout and "9.8" in out.stdout  # 10 - 0.2 remaining
    finally:
        proc.terminate()
        proc.wait(30)
        if proc.stderr is not None:
            proc.stderr.close()  # else the pipe is garbage-collected in a later test (ResourceWarning)


def test_serve_refuses_half_a_tls_pair(tmp_path: Path) -> None:
    from tests.support.server import SERVER_POLICY
    from veil.cli.main import cli

    policy = tmp_path / "policy.toml"
    policy.write_text(SERVER_POLICY, encoding="utf-8")
    cert = tmp_path / "c.pem"
    cert.write_text("x")
    res = CliRunner().invoke(cli, ["serve", "--policy", str(policy), "--tls-cert", str(cert)])
    assert res.exit_code == 2 and "--tls-key" in res.output


@pytest.mark.parametrize("args", [["serve", "--help"], ["analyst", "add", "--help"]])
def test_help(args: list[str]) -> None:
    from veil.cli.main import cli

    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0 and "--policy" in res.output


@pytest.mark.parametrize(
    "flags",
    [
        ("--auth-timeout", "-1"),
        ("--max-connections", "0"),
        ("--statement-timeout", "nan"),
        ("--max-query-bytes", "0"),
        ("--public-query-timeout", "-5"),
    ],
)
def test_serve_refuses_bad_limits(tmp_path: Path, flags: tuple[str, str]) -> None:
    from veil.cli.main import cli

    policy = tmp_path / "policy.toml"
    from tests.support.server import SERVER_POLICY

    policy.write_text(SERVER_POLICY, encoding="utf-8")
    result = CliRunner().invoke(cli, ["serve", "--policy", str(policy), "--port", "0", *flags])
    assert result.exit_code != 0
    assert flags[0] in result.output
