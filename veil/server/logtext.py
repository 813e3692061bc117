"""What ``veil serve`` writes to its log about clients is bounded: every argument is clipped, and the lines anyone can
cause without logging in are rate-limited per client network (red team s73 F4).

A startup packet may claim a user name of ~10,000 bytes, and a login that ends before a password is sent counts
nothing for the login backoff (a psql prompting for its password does just that): the server logged the whole name
at INFO each time, so one client with no login grew the log by ~3 MB/s, a disk filled in days. So, by construction
for every line of the ``veil.server`` logger (not per call site):

- :class:`ClipClientText`, a filter on that logger, replaces each string argument of a record by its first
  :data:`MAX_ARG_CHARS` characters (control characters escaped, the number cut noted) — a user or database name, an
  address, an error message quoting a value; the message templates are Veil's own;
- a line logged with ``extra=outsider(peer)`` (what a client can cause before its login completes: refused or timed
  out startups, abandoned or failed logins, evictions) passes a token bucket of its client network (an IPv4 address,
  an IPv6 /64, :func:`~veil.server.limits.client_network`): :data:`BURST` lines at once, then one per
  :data:`REFILL_S` seconds; lines dropped are counted and the next line of that network says how many. Networks are
  forgotten when their bucket is full again, at most :data:`MAX_NETWORKS` are kept (a flood of networks shares one
  bucket past that).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from veil.server.limits import client_network

__all__ = ["BURST", "MAX_ARG_CHARS", "REFILL_S", "ClipClientText", "clip", "install", "outsider", "server_logger"]

#: Characters of one log argument kept (PostgreSQL's names are at most 63 bytes; error messages a few hundred).
MAX_ARG_CHARS = 200

#: Lines a client network may cause before its login completes, at once, then one per REFILL_S seconds.
BURST = 20
REFILL_S = 6.0

#: Client networks whose buckets are kept; past that, newcomers share one bucket.
MAX_NETWORKS = 4096

_OVERFLOW = "(other networks)"


def clip(text: str, limit: int = MAX_ARG_CHARS) -> str:
    """``text`` cut to ``limit`` characters, control characters escaped (one log line stays one line)."""
    cut = text[:limit]
    if any(c < " " or c == "\x7f" for c in cut):
        cut = cut.encode("unicode_escape").decode("ascii")[:limit]
    return cut if len(text) <= limit else f"{cut}…(+{len(text) - limit} chars)"


def outsider(peer: str) -> dict[str, str]:
    """``extra=`` for a line a client can cause without logging in: it is rate-limited per client network."""
    return {"veil_outsider": client_network(peer)}


class ClipClientText(logging.Filter):
    """Clips a record's string arguments and rate-limits its outsider lines (the module docstring)."""

    def __init__(self, *, burst: int = BURST, refill_s: float = REFILL_S, clock: Any = time.monotonic) -> None:
        super().__init__()
        self._burst, self._refill, self._clock = burst, refill_s, clock
        self._lock = threading.Lock()
        self._buckets: dict[str, tuple[float, float, int]] = {}  # network -> (tokens, at, lines dropped)

    def filter(self, record: logging.LogRecord) -> bool:
        network = getattr(record, "veil_outsider", None)
        if isinstance(network, str):
            dropped = self._take(network)
            if dropped is None:
                return False
            if dropped:
                record.msg = f"{record.msg} [{dropped} earlier lines from this network not logged]"
        if isinstance(record.args, tuple):
            record.args = tuple(clip(a) if isinstance(a, str) else a for a in record.args)
        elif isinstance(record.args, dict):
            record.args = {k: clip(v) if isinstance(v, str) else v for k, v in record.args.items()}
        return True

    def _take(self, network: str) -> int | None:
        """A token of ``network``'s bucket: the lines it dropped before (then 0), or None when it has none."""
        now = self._clock()
        with self._lock:
            if network not in self._buckets and len(self._buckets) >= MAX_NETWORKS:
                self._forget_full(now)
                if len(self._buckets) >= MAX_NETWORKS:
                    network = _OVERFLOW
            tokens, at, dropped = self._buckets.get(network, (float(self._burst), now, 0))
            tokens = min(float(self._burst), tokens + (now - at) / self._refill)
            if tokens < 1.0:
                self._buckets[network] = (tokens, now, dropped + 1)
                return None
            self._buckets[network] = (tokens - 1.0, now, 0)
            return dropped

    def _forget_full(self, now: float) -> None:
        full = [
            n
            for n, (tokens, at, dropped) in self._buckets.items()
            if not dropped and tokens + (now - at) / self._refill >= self._burst
        ]
        for n in full:
            del self._buckets[n]


_INSTALLED = threading.Lock()


def install(logger: logging.Logger) -> logging.Logger:
    """``logger`` with one :class:`ClipClientText` (added once)."""
    with _INSTALLED:
        if not any(isinstance(f, ClipClientText) for f in logger.filters):
            logger.addFilter(ClipClientText())
    return logger


def server_logger() -> logging.Logger:
    """The logger of every ``veil.server`` module: ``veil.server``, with its :class:`ClipClientText`."""
    return install(logging.getLogger("veil.server"))
