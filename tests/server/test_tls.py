"""TLS with a throwaway certificate, and refusal of plaintext from non-loopback peers."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.support.server import (
    PASSWORD,
    build_policy,
    dsn,
    make_cert,
    non_loopback_address,
    query_session_factory,
    running_server,
)
from veil.server.app import make_ssl_context


@pytest.fixture(scope="module")
def policy(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Path:
    return build_policy(tmp_path_factory.mktemp("tls"), request.getfixturevalue("shared_data"), rows=300)


@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return make_cert(tmp_path_factory.mktemp("cert"))


@pytest.fixture(scope="module")
def tls_server(policy: Path, cert: tuple[Path, Path]) -> Iterator[int]:
    ctx = make_ssl_context(*cert)
    with running_server(policy, ssl_context=ctx, query_session_factory=query_session_factory(), host="0.0.0.0") as st:
        yield st.port  # type: ignore[attr-defined]


def test_psycopg_over_tls(tls_server: int, cert: tuple[Path, Path]) -> None:
    with psycopg.connect(dsn(tls_server, sslmode="verify-full", sslrootcert=str(cert[0]))) as conn:
        assert conn.pgconn.ssl_in_use
        cur = conn.execute("SELECT COUNT(*) FROM adult WHERE age > %s", (30,))
        assert isinstance(cur.fetchone()[0], int)


def test_psql_over_tls(tls_server: int, cert: tuple[Path, Path]) -> None:
    exe = shutil.which("psql")
    if exe is None:
        pytest.skip("psql is not installed")
    conninfo = f"host=127.0.0.1 port={tls_server} user=alice dbname=veil sslmode=require"
    out = subprocess.run(
        [exe, "-X", conninfo, "-c", "SELECT analyst FROM veil.budget", "-c", r"\conninfo"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PGPASSWORD": PASSWORD, "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stderr
    assert "alice" in out.stdout and "SSL connection" in out.stdout


def test_plaintext_refused_from_non_loopback_but_tls_accepted(tls_server: int, cert: tuple[Path, Path]) -> None:
    addr = non_loopback_address()
    if addr is None:
        pytest.skip("this machine has no non-loopback address")
    with pytest.raises(psycopg.OperationalError, match="plaintext connections from non-loopback"):
        psycopg.connect(dsn(tls_server, host=addr, sslmode="disable"))
    with psycopg.connect(dsn(tls_server, host=addr, sslmode="require")) as conn:
        assert conn.pgconn.ssl_in_use
    # loopback plaintext stays allowed (local tools, tests)
    with psycopg.connect(dsn(tls_server, sslmode="disable")) as conn:
        assert not conn.pgconn.ssl_in_use


def test_allow_plaintext_flag(policy: Path) -> None:
    addr = non_loopback_address()
    if addr is None:
        pytest.skip("this machine has no non-loopback address")
    kwargs = {"query_session_factory": query_session_factory(), "host": "0.0.0.0"}
    with running_server(policy, **kwargs) as st:
        with pytest.raises(psycopg.OperationalError, match="--allow-plaintext"):
            psycopg.connect(dsn(st.port, host=addr))  # type: ignore[attr-defined]
    with running_server(policy, allow_plaintext=True, **kwargs) as st:
        with psycopg.connect(dsn(st.port, host=addr)) as conn:  # type: ignore[attr-defined]
            assert conn.execute("SELECT analyst FROM veil.budget").fetchone()[0] == "alice"


def test_bad_certificate_files_are_a_clear_error(tmp_path: Path) -> None:
    from veil.errors import InputError

    bogus = tmp_path / "x.pem"
    bogus.write_text("not a certificate")
    with pytest.raises(InputError, match="--tls-cert"):
        make_ssl_context(bogus, bogus)


def test_direct_tls_negotiation(tls_server: int, cert: tuple[Path, Path]) -> None:
    """libpq ≥ 17 with ``sslnegotiation=direct`` starts with a TLS ClientHello (no SSLRequest)."""
    if psycopg.pq.version() < 170000:
        pytest.skip(f"psycopg's libpq {psycopg.pq.version()} has no sslnegotiation=direct")
    extra = {"sslmode": "verify-full", "sslrootcert": str(cert[0]), "sslnegotiation": "direct"}
    with psycopg.connect(dsn(tls_server, **extra), autocommit=True) as conn:
        assert conn.pgconn.ssl_in_use
        assert conn.execute("SELECT analyst FROM veil.budget").fetchone() == ("alice",)


def test_direct_tls_without_a_certificate_is_refused_quickly(policy: Path) -> None:
    """A ClientHello to a server without TLS: refused at once, not left hanging."""
    import socket
    import time

    from tests.support.server import read_message

    with running_server(policy) as st:
        with socket.create_connection(("127.0.0.1", st.port), timeout=5) as sock:  # type: ignore[attr-defined]
            sock.sendall(bytes([0x16, 0x03, 0x01, 0x00, 0x05]) + b"hello")
            t0 = time.monotonic()
            tag, _ = read_message(sock)
            assert tag == b"E" and time.monotonic() - t0 < 3
