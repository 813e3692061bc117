"""TLS for ``veil serve``: the server context, and both ways a client starts TLS.

- ``SSLRequest`` (every libpq): the client asks, the server answers ``S`` and upgrades.
- Direct TLS (libpq ≥ 17, ``sslnegotiation=direct``): the client's first bytes are already a TLS
  ClientHello (a handshake record, first byte ``0x16``) with ALPN ``postgresql``. The server reads
  that one record itself (it has to look at the first byte to know), so the upgrade is started
  with those bytes handed to the TLS layer. This uses asyncio's ``SSLProtocol`` the way
  ``loop.start_tls`` does (pinned Python ≥ 3.11; covered by ``tests/server/test_tls.py``).
"""

from __future__ import annotations

import asyncio
import ipaddress
import ssl
from asyncio import sslproto
from pathlib import Path
from typing import Any

from veil.errors import InputError

__all__ = ["ALPN", "TLS_HANDSHAKE", "is_loopback", "make_ssl_context", "start_tls", "start_tls_with_hello"]

#: The ALPN protocol name PostgreSQL clients ask for (required by libpq for direct TLS).
ALPN = "postgresql"
#: First byte of a TLS handshake record: a client starting with it speaks TLS directly.
TLS_HANDSHAKE = 0x16


def make_ssl_context(cert: str | Path, key: str | Path) -> ssl.SSLContext:
    """A server TLS context (TLS 1.2+, ALPN ``postgresql``) from PEM certificate and key files."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_alpn_protocols([ALPN])
    try:
        ctx.load_cert_chain(str(cert), str(key))
    except (OSError, ssl.SSLError) as exc:
        raise InputError(
            f"cannot load the TLS certificate {cert} / key {key}: {exc}",
            hint="Pass PEM files to --tls-cert and --tls-key",
        ) from None
    return ctx


def is_loopback(peer: Any) -> bool:
    """Whether a peer address (``writer.get_extra_info('peername')``) is this machine."""
    if not isinstance(peer, tuple):  # unix socket
        return True
    try:
        return ipaddress.ip_address(str(peer[0]).split("%")[0]).is_loopback
    except ValueError:
        return False


async def start_tls(writer: asyncio.StreamWriter, ctx: ssl.SSLContext, timeout: float | None) -> None:
    """Upgrade after ``SSLRequest`` (the public asyncio way)."""
    await asyncio.wait_for(writer.start_tls(ctx), timeout)


async def start_tls_with_hello(writer: asyncio.StreamWriter, ctx: ssl.SSLContext, hello: bytes, timeout: float | None) -> None:
    """Upgrade a connection whose first record, ``hello`` (the ClientHello), was already read."""
    loop = asyncio.get_running_loop()
    transport: Any = writer.transport
    protocol: Any = writer._protocol  # type: ignore[attr-defined]  # the StreamReaderProtocol
    waiter = loop.create_future()
    ssl_protocol = sslproto.SSLProtocol(loop, protocol, ctx, waiter, True, None, call_connection_made=False)
    transport.pause_reading()
    transport.set_protocol(ssl_protocol)
    ssl_protocol.connection_made(transport)
    view = memoryview(hello)
    while view:
        buf = ssl_protocol.get_buffer(len(view))
        n = min(len(buf), len(view))
        buf[:n] = view[:n]
        ssl_protocol.buffer_updated(n)
        view = view[n:]
    transport.resume_reading()
    try:
        await asyncio.wait_for(waiter, timeout)
    except BaseException:
        transport.close()
        raise
    writer._transport = ssl_protocol._app_transport  # type: ignore[attr-defined]  # as StreamWriter.start_tls does
    protocol._replace_writer(writer)
