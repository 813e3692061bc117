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
  :data:`REFILL_S` seconds, and a server-wide bucket (:data:`GLOBAL_BURST`, then :data:`GLOBAL_RATE` a second: a
  client holding many networks does not multiply the rate); lines dropped are counted and the next line of that
  network says how many. At most :data:`MAX_NETWORKS` buckets are kept, the least recently used forgotten first (and
  every bucket full again, swept once per MAX_NETWORKS new networks); a forgotten network's dropped lines are told
  with the next line logged.
- every line logged while a logged-in connection is served (its task, and the callbacks it schedules: a context
  variable set at login, :func:`logged_in`) passes a token bucket of its analyst in the server's analysts' limiter
  (:data:`ANALYST_BURST` lines at once, then one per :data:`ANALYST_REFILL_S` seconds; all analysts together
  :data:`ANALYST_GLOBAL_BURST`, then :data:`ANALYST_GLOBAL_RATE` a second, apart from the outsiders' budget so that an
  analyst's lines never crowd out failed logins), its dropped lines told likewise (red team s75 F3: a logged-in
  analyst's malformed messages were logged one line each, 3,068 lines a second from one connection, ~29 GB a day).
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from collections import OrderedDict
from typing import Any

from veil.server.limits import client_network

__all__ = [
    "ANALYST_BURST",
    "ANALYST_GLOBAL_BURST",
    "ANALYST_GLOBAL_RATE",
    "ANALYST_REFILL_S",
    "BURST",
    "GLOBAL_BURST",
    "GLOBAL_RATE",
    "MAX_ARG_CHARS",
    "REFILL_S",
    "ClipClientText",
    "clip",
    "install",
    "logged_in",
    "outsider",
    "server_logger",
]

#: Characters of one log argument kept (PostgreSQL's names are at most 63 bytes; error messages a few hundred).
MAX_ARG_CHARS = 200

#: Lines a client network may cause before its login completes, at once, then one per REFILL_S seconds.
BURST = 20
REFILL_S = 6.0

#: Lines all outsiders together may cause, at once, then GLOBAL_RATE a second (review s23 Y4: a client holding many
#: networks, an IPv6 /48 say, multiplied the per-network rate): at most ~170,000 lines (~45 MB) a day.
GLOBAL_BURST = 100
GLOBAL_RATE = 2.0

#: Lines one logged-in analyst's connections may cause, at once, then one per ANALYST_REFILL_S seconds.
ANALYST_BURST = 50
ANALYST_REFILL_S = 1.0
#: Lines all logged-in analysts together may cause, at once, then ANALYST_GLOBAL_RATE a second (~430,000 lines a day).
ANALYST_GLOBAL_BURST = 200
ANALYST_GLOBAL_RATE = 5.0

#: The analyst whose connection is being served, and its server's analysts' limiter (set at login: :func:`logged_in`).
_CLIENT: contextvars.ContextVar[tuple[str, ClipClientText] | None] = contextvars.ContextVar("veil_client", default=None)

#: Client networks whose buckets are kept, least recently used forgotten first (their unlogged lines are told with
#: the next line logged).
MAX_NETWORKS = 4096


def clip(text: str, limit: int = MAX_ARG_CHARS) -> str:
    """``text`` cut to ``limit`` characters, control characters escaped (one log line stays one line)."""
    cut = text[:limit]
    if any(c < " " or c == "\x7f" for c in cut):
        cut = cut.encode("unicode_escape").decode("ascii")[:limit]
    return cut if len(text) <= limit else f"{cut}…(+{len(text) - limit} chars)"


def outsider(peer: str, limiter: ClipClientText | None = None) -> dict[str, Any]:
    """``extra=`` for a line a client can cause without logging in: it is rate-limited per client network, by
    ``limiter``'s buckets (each server keeps its own: a process's servers — tests start many — share none), else by
    the logger's filter's own."""
    extra: dict[str, Any] = {"veil_outsider": client_network(peer)}
    if limiter is not None:
        extra["veil_limiter"] = limiter
    return extra


def logged_in(analyst: str, limiter: ClipClientText) -> None:
    """From now on in this task's context (a connection's, after its login), every line passes ``analyst``'s bucket
    of ``limiter`` (the server's analysts' limiter: :func:`analysts_limiter`)."""
    _CLIENT.set((f"analyst {analyst}", limiter))


def analysts_limiter() -> ClipClientText:
    """A limiter with the analysts' rates (the module docstring)."""
    return ClipClientText(
        burst=ANALYST_BURST,
        refill_s=ANALYST_REFILL_S,
        global_burst=ANALYST_GLOBAL_BURST,
        global_rate=ANALYST_GLOBAL_RATE,
        who="analyst",
    )


class ClipClientText(logging.Filter):
    """Clips a record's string arguments and rate-limits its outsider and analyst lines (the module docstring)."""

    def __init__(
        self,
        *,
        burst: int = BURST,
        refill_s: float = REFILL_S,
        clock: Any = time.monotonic,
        global_burst: int = GLOBAL_BURST,
        global_rate: float = GLOBAL_RATE,
        who: str = "network",
    ) -> None:
        super().__init__()
        self._burst, self._refill, self._clock = burst, refill_s, clock
        self._global_burst, self._global_rate, self.who = global_burst, global_rate, who
        self._lock = threading.Lock()
        # network -> [tokens, when they were counted, lines dropped since its last logged one]; least recently used first
        self._buckets: OrderedDict[str, list[float]] = OrderedDict()
        self._global = [float(global_burst), clock()]
        self._forgotten = 0  # lines dropped by networks forgotten since: told with the next line logged
        self._new = 0  # networks added since the last sweep

    def filter(self, record: logging.LogRecord) -> bool:
        network = getattr(record, "veil_outsider", None)
        owner = getattr(record, "veil_limiter", None)
        if not isinstance(network, str):
            client = _CLIENT.get()
            if client is not None:
                network, owner = client
        if isinstance(network, str):
            limiter = owner if isinstance(owner, ClipClientText) else self
            taken = limiter._take(network)
            if taken is None:
                return False
            dropped, forgotten = taken
            if dropped:
                record.msg = f"{record.msg} [{dropped} earlier lines from this {limiter.who} not logged]"
            if forgotten:
                record.msg = f"{record.msg} [{forgotten} lines from other {limiter.who}s not logged]"
        if isinstance(record.args, tuple):
            record.args = tuple(clip(a) if isinstance(a, str) else a for a in record.args)
        elif isinstance(record.args, dict):
            record.args = {k: clip(v) if isinstance(v, str) else v for k, v in record.args.items()}
        return True

    def _take(self, network: str) -> tuple[int, int] | None:
        """A token of ``network``'s bucket and of the server-wide one: (lines this network dropped before, lines
        forgotten networks dropped), both then reset; or None when either bucket is empty (the line is dropped)."""
        now = self._clock()
        with self._lock:
            bucket = self._buckets.get(network)
            if bucket is None:
                self._new += 1
                if self._new >= MAX_NETWORKS:  # amortised: one sweep per MAX_NETWORKS new networks (review s23 Y5)
                    self._new = 0
                    self._forget_full(now)
                while len(self._buckets) >= MAX_NETWORKS:  # least recently used first (review s23 Y7)
                    _, old = self._buckets.popitem(last=False)
                    self._forgotten += int(old[2])
                bucket = self._buckets[network] = [float(self._burst), now, 0]
            else:
                self._buckets.move_to_end(network)
            tokens = min(float(self._burst), bucket[0] + (now - bucket[1]) / self._refill)
            spare = min(float(self._global_burst), self._global[0] + (now - self._global[1]) * self._global_rate)
            bucket[1] = self._global[1] = now
            if tokens < 1.0 or spare < 1.0:
                bucket[0], self._global[0] = tokens, spare
                bucket[2] += 1
                return None
            bucket[0], self._global[0] = tokens - 1.0, spare - 1.0
            dropped, forgotten = int(bucket[2]), self._forgotten
            bucket[2], self._forgotten = 0, 0
            return dropped, forgotten

    def _forget_full(self, now: float) -> None:
        """Forget the networks whose buckets are full again (their dropped lines, if any, told with the next line)."""
        full = [n for n, (tokens, at, _) in self._buckets.items() if tokens + (now - at) / self._refill >= self._burst]
        for n in full:
            self._forgotten += int(self._buckets.pop(n)[2])


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
