"""Helpers for the ``veil serve`` tests (no tests here): a real warehouse built with
``veil ingest``, an in-process server on a free loopback port, a hand-written SCRAM client,
and throwaway TLS certificates."""

from __future__ import annotations

import contextlib
import shutil
import socket
import struct
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

PASSWORD = "alice-secret-pw"
BOB_PASSWORD = "bob-secret-pw-1"

SERVER_POLICY = """\
[database]
path = "warehouse.duckdb"
[ledger]
path = "ledger.sqlite"
[defaults]
epsilon_per_query = 0.5

[tables.adult]
privacy_unit = "row"
[tables.adult.columns]
age = { type = "int", lower = 17, upper = 90 }
education_num = { type = "int", lower = 1, upper = 16 }
hours_per_week = { type = "int", lower = 1, upper = 99 }
sex = { type = "category", values = ["Female", "Male"] }
income = { type = "category", values = ["<=50K", ">50K"] }
workclass = { type = "category" }

[analysts.alice]
epsilon = 10.0
[analysts.bob]
epsilon = 1.0
[analysts.carol]
epsilon = 5.0
"""


def build_policy(folder: Path, shared_data: Path, rows: int = 2000) -> Path:
    """Write the policy, ingest the first ``rows`` rows of Adult with ``veil ingest``, and set
    passwords for alice and bob with ``veil analyst add`` (carol has no login)."""
    from veil.cli.main import cli
    from veil.datasets import load_adult

    folder.mkdir(parents=True, exist_ok=True)
    policy = folder / "policy.toml"
    policy.write_text(SERVER_POLICY, encoding="utf-8")
    csv = folder / "adult.csv"
    load_adult().head(rows).to_csv(csv, index=False)
    runner = CliRunner()
    result = runner.invoke(cli, ["ingest", "--policy", str(policy), "--table", "adult", str(csv)])
    assert result.exit_code == 0, result.output
    for name, pw in (("alice", PASSWORD), ("bob", BOB_PASSWORD)):
        result = runner.invoke(cli, ["analyst", "add", "--policy", str(policy), name, "--password-stdin"], input=pw + "\n")
        assert result.exit_code == 0, result.output
    return policy


#: Limits for tests that are not about login backoff: every test logs in from 127.0.0.1, so the
#: default backoff (0.25 s doubling) would slow unrelated tests that check wrong passwords.
FAST_BACKOFF = {"login_backoff_base": 0.001, "login_backoff_max": 0.01}


@contextlib.contextmanager
def running_server(policy_path: Path, **kwargs: object) -> Iterator[object]:
    from veil.policy import load_policy
    from veil.server.app import ServerThread, VeilServer
    from veil.server.limits import ServerLimits

    kwargs.setdefault("limits", ServerLimits(**FAST_BACKOFF))  # type: ignore[arg-type]
    host = str(kwargs.pop("host", "127.0.0.1"))
    server = VeilServer(load_policy(policy_path), **kwargs)  # type: ignore[arg-type]
    with ServerThread(server, host=host, port=0) as st:
        yield st


def dsn(port: int, user: str = "alice", password: str = PASSWORD, **extra: str) -> str:
    parts = {
        "host": "127.0.0.1",
        "port": str(port),
        "user": user,
        "dbname": "veil",
        "password": password,
        "sslmode": "disable",
        "connect_timeout": "10",
    }
    parts.update(extra)
    return " ".join(f"{k}={v}" for k, v in parts.items())


def psql(
    port: int, *commands: str, user: str = "alice", password: str = PASSWORD, sslmode: str = "disable"
) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("psql")
    if exe is None:
        pytest.skip("psql is not installed (apt-get install postgresql-client)")
    args = [exe, "-X", "-v", "ON_ERROR_STOP=0", f"host=127.0.0.1 port={port} user={user} dbname=veil sslmode={sslmode}"]
    for c in commands:
        args += ["-c", c]
    env = {"PGPASSWORD": password, "PATH": "/usr/bin:/bin", "PGCONNECT_TIMEOUT": "10"}
    return subprocess.run(args, capture_output=True, text=True, timeout=60, env=env)


# --- a hand-written client: startup + SCRAM-SHA-256 with any password (even empty) -------------


def _msg(tag: bytes, payload: bytes) -> bytes:
    return tag + struct.pack("!i", len(payload) + 4) + payload


def _read(sock: socket.socket) -> tuple[bytes, bytes]:
    def exact(n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("server closed the connection")
            buf += chunk
        return buf

    head = exact(5)
    return head[:1], exact(struct.unpack("!i", head[1:])[0] - 4)


def _error_code(payload: bytes) -> str | None:
    for field in payload.split(b"\x00"):
        if field[:1] == b"C":
            return field[1:].decode()
    return None


def raw_login(
    port: int, user: str, password: str, *, source: str | None = None, timeout: float = 10
) -> tuple[socket.socket | None, str | None]:
    """Log in speaking the protocol by hand (libpq refuses empty passwords; this does not).
    ``source``: the local address to connect from (e.g. 127.0.0.2, another loopback address).

    Returns (the socket, after ReadyForQuery, or None; SQLSTATE of the ErrorResponse if any)."""
    from scramp import ScramClient

    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout, source_address=(source, 0) if source else None)
    try:
        body = struct.pack("!i", 196608) + b"user\x00" + user.encode() + b"\x00database\x00veil\x00\x00"
        sock.sendall(struct.pack("!i", len(body) + 4) + body)
        tag, payload = _read(sock)
        if tag == b"E":
            return None, _error_code(payload)
        assert tag == b"R" and struct.unpack("!i", payload[:4])[0] == 10, (tag, payload)  # AuthenticationSASL
        client = ScramClient(["SCRAM-SHA-256"], user or "nobody", password)
        first = client.get_client_first().encode()
        sock.sendall(_msg(b"p", b"SCRAM-SHA-256\x00" + struct.pack("!i", len(first)) + first))
        tag, payload = _read(sock)
        if tag == b"E":
            return None, _error_code(payload)
        assert struct.unpack("!i", payload[:4])[0] == 11  # AuthenticationSASLContinue
        client.set_server_first(payload[4:].decode())
        sock.sendall(_msg(b"p", client.get_client_final().encode()))
        authenticated = False
        while True:
            tag, payload = _read(sock)
            if tag == b"E":
                return None, _error_code(payload)
            if tag == b"R" and struct.unpack("!i", payload[:4])[0] == 0:
                authenticated = True
            if tag == b"Z":
                assert authenticated
                result, sock = sock, None  # type: ignore[assignment]
                return result, None
    finally:
        if sock is not None:
            sock.close()


def scram_salt(port: int, user: str) -> str:
    """The salt the server offers ``user`` in its SCRAM server-first message (then hangs up)."""
    from scramp import ScramClient

    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(startup_packet(user))
        tag, payload = _read(sock)
        assert tag == b"R" and struct.unpack("!i", payload[:4])[0] == 10, (tag, payload)
        client = ScramClient(["SCRAM-SHA-256"], user, "irrelevant-password")
        first = client.get_client_first().encode()
        sock.sendall(_msg(b"p", b"SCRAM-SHA-256\x00" + struct.pack("!i", len(first)) + first))
        tag, payload = _read(sock)
        assert tag == b"R" and struct.unpack("!i", payload[:4])[0] == 11, (tag, payload)
        fields = dict(part.split("=", 1) for part in payload[4:].decode().split(","))
        return fields["s"]


def startup_packet(user: str, **extra: str) -> bytes:
    """A protocol 3.0 StartupMessage."""
    body = struct.pack("!i", 196608) + b"user\x00" + user.encode() + b"\x00database\x00veil\x00"
    for key, value in extra.items():
        body += key.encode() + b"\x00" + value.encode() + b"\x00"
    body += b"\x00"
    return struct.pack("!i", len(body) + 4) + body


def read_message(sock: socket.socket) -> tuple[bytes, bytes]:
    """One backend message (tag, payload); ConnectionError when the server closed the socket."""
    return _read(sock)


def error_code(payload: bytes) -> str | None:
    """The SQLSTATE of an ErrorResponse payload."""
    return _error_code(payload)


def error_message(payload: bytes) -> str:
    for field in payload.split(b"\x00"):
        if field[:1] == b"M":
            return field[1:].decode()
    return ""


def message(tag: bytes, payload: bytes) -> bytes:
    """A frontend message: tag, length, payload."""
    return _msg(tag, payload)


def add_public_table(policy_path: Path) -> None:
    """Declare and ingest a small public table ``regions`` (region, population)."""
    from veil.cli.main import cli

    with policy_path.open("a", encoding="utf-8") as f:
        f.write("\n[tables.regions]\npublic = true\n")
    csv = policy_path.parent / "regions.csv"
    csv.write_text("region,population\nnorth,120\nsouth,340\neast,75\n", encoding="utf-8")
    result = CliRunner().invoke(cli, ["ingest", "--policy", str(policy_path), "--table", "regions", str(csv)])
    assert result.exit_code == 0, result.output


def raw_scram_login(port: int, user: str, password: str) -> tuple[bool, str | None]:
    """(got AuthenticationOk, SQLSTATE of the ErrorResponse if any) for a hand-written login."""
    sock, sqlstate = raw_login(port, user, password)
    if sock is None:
        return False, sqlstate
    sock.sendall(_msg(b"X", b""))
    sock.close()
    return True, None


def raw_exchange(sock: socket.socket, *messages: bytes) -> list[tuple[bytes, bytes]]:
    """Send extended-protocol messages (ending with Sync) and read up to ReadyForQuery."""
    sock.sendall(b"".join(messages))
    out = []
    while True:
        tag, payload = _read(sock)
        out.append((tag, payload))
        if tag == b"Z":
            return out


def parse_msg(sql: str, name: str = "") -> bytes:
    return _msg(b"P", name.encode() + b"\x00" + sql.encode() + b"\x00" + struct.pack("!h", 0))


def bind_msg(portal: str = "", statement: str = "") -> bytes:
    return _msg(b"B", portal.encode() + b"\x00" + statement.encode() + b"\x00" + struct.pack("!hhh", 0, 0, 0))


def execute_msg(portal: str = "", max_rows: int = 0) -> bytes:
    return _msg(b"E", portal.encode() + b"\x00" + struct.pack("!i", max_rows))


def describe_portal_msg(portal: str = "") -> bytes:
    return _msg(b"D", b"P" + portal.encode() + b"\x00")


SYNC = _msg(b"S", b"")


def make_cert(folder: Path) -> tuple[Path, Path]:
    """A throwaway self-signed certificate for CN=localhost (openssl CLI)."""
    exe = shutil.which("openssl")
    if exe is None:
        pytest.skip("openssl CLI not installed")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            exe,
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=IP:127.0.0.1,DNS:localhost",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


def non_loopback_address() -> str | None:
    """An address of this machine that is not loopback, or None."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))  # TEST-NET-1: nothing is sent
            addr = s.getsockname()[0]
    except OSError:
        return None
    return None if addr.startswith("127.") else addr


def query_session_factory() -> object:
    """The real analyst query path."""
    from veil.proxy.session import QuerySession

    return QuerySession
