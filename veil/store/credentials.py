"""Analyst logins for ``veil serve``: SCRAM-SHA-256 verifiers, never passwords.

Verifiers live in the ledger's SQLite file, in tables this module owns::

    analyst_credentials(analyst TEXT PRIMARY KEY, verifier TEXT NOT NULL,
                        created_at TEXT NOT NULL, updated_at TEXT NOT NULL)
    server_secrets(name TEXT PRIMARY KEY, secret BLOB NOT NULL, created_at TEXT NOT NULL)

``verifier`` uses PostgreSQL's own ``pg_authid.rolpassword`` format
(``SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>``, base64 parts), so the
server can check a SCRAM proof without ever knowing the password, and a leaked ledger
file does not reveal it.

>>> v = make_verifier("s3cret", iterations=4096, salt=bytes(16))
>>> v.startswith("SCRAM-SHA-256$4096:AAAAAAAAAAAAAAAAAAAAAA==$")
True
>>> parse_verifier(v).iterations
4096
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import sqlite3
import unicodedata
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from veil.errors import AuthError, InputError
from veil.store._sqlite import connect as connect_sqlite

__all__ = [
    "DEFAULT_ITERATIONS",
    "CredentialStore",
    "Verifier",
    "make_verifier",
    "parse_verifier",
]

#: PBKDF2 iterations for new verifiers (PostgreSQL's default is 4096).
DEFAULT_ITERATIONS = 4096
_PREFIX = "SCRAM-SHA-256"
_MIN_PASSWORD_LENGTH = 8

_SCHEMA = """
CREATE TABLE IF NOT EXISTS analyst_credentials (
    analyst    TEXT PRIMARY KEY,
    verifier   TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
)
"""
_SECRETS_SCHEMA = """
CREATE TABLE IF NOT EXISTS server_secrets (
    name       TEXT PRIMARY KEY,
    secret     BLOB NOT NULL,
    created_at TEXT NOT NULL
)
"""


@dataclass(frozen=True)
class Verifier:
    """The parts of a SCRAM-SHA-256 verifier (RFC 5802 / RFC 7677)."""

    iterations: int
    salt: bytes
    stored_key: bytes
    server_key: bytes

    def encode(self) -> str:
        b64 = base64.b64encode
        return (
            f"{_PREFIX}${self.iterations}:{b64(self.salt).decode()}"
            f"${b64(self.stored_key).decode()}:{b64(self.server_key).decode()}"
        )


def _saslprep(password: str) -> str:
    # Full SASLprep (RFC 4013) is what libpq applies; NFKC is its core mapping and is what
    # libpq falls back to as well for the common cases. Passwords are ASCII in practice.
    return unicodedata.normalize("NFKC", password)


def _derive(password: str, salt: bytes, iterations: int) -> Verifier:
    salted = hashlib.pbkdf2_hmac("sha256", _saslprep(password).encode("utf-8"), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
    stored_key = hashlib.sha256(client_key).digest()
    server_key = hmac.new(salted, b"Server Key", hashlib.sha256).digest()
    return Verifier(iterations, salt, stored_key, server_key)


def make_verifier(password: str, *, iterations: int = DEFAULT_ITERATIONS, salt: bytes | None = None) -> str:
    """A SCRAM-SHA-256 verifier string for ``password`` (random 16-byte salt by default)."""
    if iterations < 4096:
        raise InputError(f"SCRAM iterations must be at least 4096, got {iterations}")
    return _derive(password, salt if salt is not None else os.urandom(16), iterations).encode()


def parse_verifier(text: str) -> Verifier:
    """Parse a verifier string written by :func:`make_verifier` (or by PostgreSQL)."""
    try:
        prefix, iter_salt, keys = text.split("$")
        iterations, salt = iter_salt.split(":")
        stored, server = keys.split(":")
        if prefix != _PREFIX:
            raise ValueError(prefix)
        return Verifier(
            int(iterations),
            base64.b64decode(salt, validate=True),
            base64.b64decode(stored, validate=True),
            base64.b64decode(server, validate=True),
        )
    except ValueError:
        raise AuthError("stored credential is not a SCRAM-SHA-256 verifier", hint="Run `veil analyst add` again") from None


def random_verifier(iterations: int = DEFAULT_ITERATIONS) -> Verifier:
    """A verifier for a random secret nobody knows: what unknown users are checked against."""
    return _derive(base64.b64encode(os.urandom(32)).decode(), os.urandom(16), iterations)


class CredentialStore:
    """Analysts' SCRAM verifiers in the ledger's SQLite file."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    @classmethod
    def for_policy(cls, policy: Any) -> CredentialStore:
        """The store in ``policy``'s ledger, once the ledger is checked to be the warehouse's own
        (:func:`veil.store.binding.open_ledger`: a swapped, missing or moved ledger is refused, never created afresh)."""
        from veil.store.ledger import Ledger

        Ledger.for_policy(policy).close()
        return cls(policy.ledger_path)

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        con = connect_sqlite(self.path)
        con.execute(_SCHEMA)
        con.execute(_SECRETS_SCHEMA)
        return con

    def server_secret(self, name: str, size: int = 32) -> bytes:
        """A random secret kept in the ledger file under ``name``, made on first use and the same
        ever after (e.g. what unknown users' SCRAM salts are derived from, so they do not change
        when the server restarts, as real users' salts do not)."""
        now = datetime.now(UTC).isoformat(timespec="seconds")
        con = self._connect()
        try:
            con.execute(
                "INSERT OR IGNORE INTO server_secrets (name, secret, created_at) VALUES (?, ?, ?)",
                (name, os.urandom(size), now),
            )
            row = con.execute("SELECT secret FROM server_secrets WHERE name = ?", (name,)).fetchone()
        finally:
            con.close()
        if row is None or not isinstance(row[0], bytes) or len(row[0]) < 16:
            raise AuthError(f"the server secret {name!r} in {self.path} is damaged", hint="Delete its row to make a new one")
        return bytes(row[0])

    def set_password(self, analyst: str, password: str) -> None:
        """Store (or replace) ``analyst``'s verifier. The password itself is never stored."""
        if not password:
            raise InputError("the password is empty", hint="Give a password of at least 8 characters")
        if len(password) < _MIN_PASSWORD_LENGTH:
            raise InputError(
                f"the password has {len(password)} characters",
                hint=f"Use at least {_MIN_PASSWORD_LENGTH} characters",
            )
        self.set_verifier(analyst, make_verifier(password))

    def set_verifier(self, analyst: str, verifier: str) -> None:
        parse_verifier(verifier)  # refuse anything that is not a verifier (e.g. a plaintext password)
        now = datetime.now(UTC).isoformat(timespec="seconds")
        con = self._connect()
        try:
            con.execute(
                "INSERT INTO analyst_credentials (analyst, verifier, created_at, updated_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT(analyst) DO UPDATE SET verifier = excluded.verifier, updated_at = excluded.updated_at",
                (analyst, verifier, now, now),
            )
        finally:
            con.close()

    def get(self, analyst: str) -> Verifier | None:
        """The stored verifier, or None when ``analyst`` has no login."""
        if not self.path.exists():
            return None
        con = self._connect()
        try:
            row = con.execute("SELECT verifier FROM analyst_credentials WHERE analyst = ?", (analyst,)).fetchone()
        finally:
            con.close()
        return parse_verifier(row[0]) if row else None

    def remove(self, analyst: str) -> bool:
        con = self._connect()
        try:
            return con.execute("DELETE FROM analyst_credentials WHERE analyst = ?", (analyst,)).rowcount > 0
        finally:
            con.close()

    def analysts(self) -> list[str]:
        if not self.path.exists():
            return []
        con = self._connect()
        try:
            return [r[0] for r in con.execute("SELECT analyst FROM analyst_credentials ORDER BY analyst")]
        finally:
            con.close()
