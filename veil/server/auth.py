"""Fail-closed SCRAM-SHA-256 login for ``veil serve``.

pg-mimic's stock identity provider hands out plaintext passwords and lets unknown users in
(with any password under MD5/cleartext, with an empty one under SCRAM). This plug-in instead
checks the client's proof against the analyst's stored verifier
(:mod:`veil.store.credentials`). An unknown user, or an analyst the policy no longer lists,
runs the same exchange against a verifier of a random secret, with a salt derived from the
user name and a secret kept in the ledger file (``server_secrets``, so the salt is the same on
every attempt and across restarts, like a real user's), and is refused whatever it sends. The
server never holds a password. Failed logins are logged and slowed down by the connection
(:mod:`veil.server.connection`), not here.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
from collections.abc import Callable

from pg_mimic import AuthPlugin
from pg_mimic import messages as pg_messages
from pg_mimic.errors import INVALID_PASSWORD, PgError
from pg_mimic.stream import PgStream
from scramp import ScramException, ScramMechanism

from veil.server.logtext import server_logger
from veil.store.credentials import Verifier, random_verifier

__all__ = ["VerifierScramAuth"]

logger = server_logger()  # client text clipped, outsiders' lines rate-limited (veil.server.logtext)

_MECHANISM = "SCRAM-SHA-256"
# libpq sends `n=` (empty user name) in client-first: the user travelled in the startup packet.
# scramp insists on a non-empty name, so parse with a placeholder and sign the original bytes.
_PLACEHOLDER = "veil"

VerifierLookup = Callable[[str], Verifier | None]


def _set_client_first(server: object, client_first: str) -> None:
    parts = client_first.split(",")
    if len(parts) < 3 or parts[2] != "n=":
        server.set_client_first(client_first)  # type: ignore[attr-defined]
        return
    server.set_client_first(",".join([*parts[:2], "n=" + _PLACEHOLDER, *parts[3:]]))  # type: ignore[attr-defined]
    server.client_first_bare = ",".join(parts[2:])  # type: ignore[attr-defined]


class VerifierScramAuth(AuthPlugin):
    """SCRAM-SHA-256 against stored verifiers; ``lookup(user)`` returns None for "no such login".

    ``lookup`` runs in a worker thread (it reads SQLite). On success :attr:`authenticated`
    holds the user name; :attr:`proof_received` tells the login backoff whether a password was
    checked at all (a client that leaves before sending its proof made no guess).
    """

    def __init__(self, lookup: VerifierLookup, *, mock_secret: bytes, mock_verifier: Verifier) -> None:
        self._lookup = lookup
        self._mock_secret = mock_secret
        self._mock = mock_verifier
        self.authenticated: str | None = None
        self.proof_received = False  # the client sent its proof (a password guess was checked)

    @classmethod
    def factory(cls, lookup: VerifierLookup, secret: bytes) -> Callable[[str], VerifierScramAuth]:
        """One plug-in per connection; ``secret`` (persistent) derives unknown users' salts."""
        mock = random_verifier()
        return lambda _username: cls(lookup, mock_secret=secret, mock_verifier=mock)

    def _mock_for(self, username: str) -> Verifier:
        salt = hmac.new(self._mock_secret, username.encode("utf-8"), hashlib.sha256).digest()[:16]
        return Verifier(self._mock.iterations, salt, self._mock.stored_key, self._mock.server_key)

    async def authenticate(self, stream: PgStream, username: str, identity_provider: object) -> bool:
        try:
            verifier = await asyncio.get_running_loop().run_in_executor(None, self._lookup, username) if username else None
        except Exception:  # a corrupt row must not let anyone in, nor crash the server
            logger.exception("credential lookup failed for user %r", username)
            verifier = None
        known = verifier is not None
        used = verifier if verifier is not None else self._mock_for(username)

        def auth_fn(_user: str) -> tuple[bytes, bytes, bytes, int]:
            return used.salt, used.stored_key, used.server_key, used.iterations

        server = ScramMechanism(_MECHANISM).make_server(auth_fn)
        stream.write(pg_messages.make_authentication_sasl([_MECHANISM]))
        await stream.drain()
        tag, payload = await stream.read_message()
        if tag != pg_messages.PASSWORD:
            raise PgError(INVALID_PASSWORD, "expected a SASLInitialResponse")
        try:
            mechanism, client_first = pg_messages.parse_sasl_initial_response(payload)
            if mechanism != _MECHANISM:
                return False
            _set_client_first(server, client_first.decode("utf-8"))
            stream.write(pg_messages.make_authentication_sasl_continue(server.get_server_first().encode("utf-8")))
            await stream.drain()
            tag, payload = await stream.read_message()
            if tag != pg_messages.PASSWORD:
                raise PgError(INVALID_PASSWORD, "expected a SASLResponse")
            self.proof_received = True
            server.set_client_final(payload.decode("utf-8"))
            server_final = server.get_server_final()
        except (ScramException, UnicodeDecodeError, ValueError, IndexError):
            return False
        if not known:  # unreachable without the random secret; fail closed regardless
            return False
        stream.write(pg_messages.make_authentication_sasl_final(server_final.encode("utf-8")))
        await stream.drain()
        self.authenticated = username
        return True
