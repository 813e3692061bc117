"""Analyst logins: SCRAM-SHA-256 verifiers (never passwords), fail-closed for unknown users,
wrong and empty passwords refused with 28P01, ``veil analyst add`` end to end."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner

from tests.support.server import (
    PASSWORD,
    build_policy,
    dsn,
    psql,
    query_session_factory,
    raw_scram_login,
    running_server,
)
from veil.store.credentials import CredentialStore, make_verifier, parse_verifier


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[tuple[Path, int]]:
    shared = request.getfixturevalue("shared_data")
    policy = build_policy(tmp_path_factory.mktemp("auth"), shared, rows=500)
    with running_server(policy, query_session_factory=query_session_factory()) as st:
        yield policy, st.port  # type: ignore[attr-defined]


def test_ledger_holds_a_scram_verifier_not_the_password(served: tuple[Path, int]) -> None:
    policy, _ = served
    ledger = policy.parent / "ledger.sqlite"
    con = sqlite3.connect(ledger)
    try:
        rows = dict(con.execute("SELECT analyst, verifier FROM analyst_credentials").fetchall())
    finally:
        con.close()
    assert set(rows) == {"alice", "bob"}
    assert rows["alice"].startswith("SCRAM-SHA-256$4096:")
    assert PASSWORD.encode() not in ledger.read_bytes()
    v = parse_verifier(rows["alice"])
    assert len(v.salt) == 16 and len(v.stored_key) == 32 and len(v.server_key) == 32


def test_verifier_matches_postgresql_format() -> None:
    # The verifier PostgreSQL 16 computes for password "pencil" with this salt and 4096 iterations
    # (RFC 7677's test vector password; same PBKDF2/HMAC derivation).
    salt = bytes.fromhex("5b6d99686fd40e2bb7dc67cc1a6cf7e2")
    v = parse_verifier(make_verifier("pencil", salt=salt))
    from scramp import ScramMechanism

    salt2, stored, server, iterations = ScramMechanism("SCRAM-SHA-256").make_auth_info("pencil", 4096, salt)
    assert (v.salt, v.stored_key, v.server_key, v.iterations) == (salt2, stored, server, iterations)


def test_right_password_logs_in_as_that_analyst(served: tuple[Path, int]) -> None:
    _, port = served
    assert raw_scram_login(port, "alice", PASSWORD) == (True, None)  # hand-written client: positive control
    with psycopg.connect(dsn(port)) as conn:
        assert conn.execute("SELECT analyst FROM veil.budget").fetchone()[0] == "alice"


@pytest.mark.parametrize(
    ("user", "password"),
    [
        ("alice", "wrong-password"),
        ("alice", ""),  # libpq will not send an empty password; the hand-written client does
        ("mallory", ""),  # unknown user, empty password: the stock pg-mimic gap
        ("mallory", "anything"),
        ("carol", ""),  # in the policy, but has no login
        ("", ""),
    ],
)
def test_bad_logins_fail_closed(served: tuple[Path, int], user: str, password: str) -> None:
    _, port = served
    ok, sqlstate = raw_scram_login(port, user, password)
    assert not ok
    assert sqlstate == "28P01"


def test_psql_wrong_password_and_unknown_user(served: tuple[Path, int]) -> None:
    _, port = served
    out = psql(port, "SELECT 1", password="nope-nope-nope")
    assert out.returncode != 0 and "password authentication failed" in out.stderr
    out = psql(port, "SELECT 1", user="mallory")
    assert out.returncode != 0 and "password authentication failed" in out.stderr
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(dsn(port, user="bob", password=PASSWORD))


def test_analyst_add_cli(tmp_path: Path) -> None:
    from tests.support.server import SERVER_POLICY
    from veil.cli.main import cli

    policy = tmp_path / "policy.toml"
    policy.write_text(SERVER_POLICY, encoding="utf-8")
    runner = CliRunner()
    res = runner.invoke(cli, ["analyst", "add", "--policy", str(policy), "alicia", "--password-stdin"], input="x" * 12)
    assert res.exit_code == 2 and "alice" in res.output  # unknown analyst, with a suggestion
    res = runner.invoke(cli, ["analyst", "add", "--policy", str(policy), "carol", "--password-stdin"], input="short\n")
    assert res.exit_code == 2 and "at least 8" in res.output
    res = runner.invoke(cli, ["analyst", "add", "--policy", str(policy), "carol"], input="carol-pass-1\ncarol-pass-1\n")
    assert res.exit_code == 0, res.output
    store = CredentialStore(tmp_path / "ledger.sqlite")
    assert store.analysts() == ["carol"]
    assert store.get("carol") is not None and store.get("dave") is None
    res = runner.invoke(cli, ["analyst", "remove", "--policy", str(policy), "carol"])
    assert res.exit_code == 0 and store.analysts() == []


def test_the_empty_password_probe_detects_the_stock_gap() -> None:
    """The probe above can fail: against pg-mimic's stock SCRAM set-up it gets in."""
    import asyncio
    import threading
    import time

    from pg_mimic import PgServer, ScramSha256AuthPlugin, Session, SimpleIdentityProvider

    ready = threading.Event()
    box: dict[str, object] = {}

    def run() -> None:
        loop = asyncio.new_event_loop()
        server = PgServer(
            session_factory=Session,
            auth_plugin_factory=lambda _u: ScramSha256AuthPlugin(),
            identity_provider=SimpleIdentityProvider({"alice": "s3cret-s3cret"}),
        )
        srv = loop.run_until_complete(server.start_server(host="127.0.0.1", port=0))
        box["port"], box["loop"], box["server"] = srv.sockets[0].getsockname()[1], loop, server
        ready.set()
        loop.run_forever()
        loop.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    ready.wait(10)
    try:
        assert raw_scram_login(box["port"], "mallory", "") == (True, None)  # type: ignore[arg-type]
    finally:
        # let the stock handler finish with the closed socket before its loop stops (else its task is destroyed
        # pending and the unclosed socket's ResourceWarning fails whichever test comes next)
        time.sleep(0.3)
        loop = box["loop"]
        loop.call_soon_threadsafe(box["server"].close)  # type: ignore[attr-defined]
        loop.call_soon_threadsafe(loop.stop)  # type: ignore[attr-defined]
        thread.join(10)
