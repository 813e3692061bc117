"""Limits of ``veil serve``: what one client may hold, before and after logging in.

:class:`ServerLimits` is the frozen set of numbers (one per ``veil serve`` flag);
:class:`ConnectionSlots` counts open connections (in all, and per analyst) and answers 53300
beyond them; :class:`LoginThrottle` slows failed logins down per client address.

>>> slots = ConnectionSlots(ServerLimits(max_connections=2, max_connections_per_analyst=1))
>>> slots.acquire("alice"); slots.acquire("bob")
>>> slots.acquire("carol")
Traceback (most recent call last):
...
veil.errors.TooManyConnections: sorry, too many clients already (2 connections open, the limit is 2). ...
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

from veil.errors import InputError, TooManyConnections
from veil.proxy.parse import Limits

__all__ = ["MAX_STARTUP_PACKET", "ConnectionSlots", "LoginThrottle", "ServerLimits"]

#: PostgreSQL's own cap on a startup packet (``MAX_STARTUP_PACKET_LENGTH``).
MAX_STARTUP_PACKET = 10_000


@dataclass(frozen=True)
class ServerLimits:
    """Every limit of the server, in one frozen value (defaults = ``veil serve``'s defaults).

    Times are in seconds; 0 turns a time limit off.
    """

    auth_timeout: float = 60.0
    max_connections: int = 100
    max_connections_per_analyst: int | None = None  # None: only max_connections applies
    statement_timeout: float = 0.0
    max_query_bytes: int = 1 << 20
    max_query_depth: int = 64
    max_query_tokens: int = 4_000
    max_operator_chain: int = 256  # AND/OR/+/=… in a row at one bracket level (parse-tree depth)
    max_planning_seconds: float = 10.0
    catalog_timeout: float = 5.0
    max_message_bytes: int = 4 << 20  # one protocol message after login (a query plus framing)
    workers: int = 8
    catalog_workers: int = 2
    login_backoff_base: float = 0.25  # seconds after the 2nd failure from one address, doubling
    login_backoff_max: float = 30.0

    def __post_init__(self) -> None:
        for name in ("auth_timeout", "statement_timeout", "max_planning_seconds", "catalog_timeout"):
            value = getattr(self, name)
            if not value >= 0:  # also refuses NaN
                raise InputError(f"{name} must be >= 0 seconds, got {value}", hint="Use 0 to turn the limit off")
        for name in (
            "max_connections",
            "max_query_bytes",
            "max_query_depth",
            "max_query_tokens",
            "max_operator_chain",
            "workers",
            "catalog_workers",
        ):
            if getattr(self, name) < 1:
                raise InputError(f"{name} must be at least 1, got {getattr(self, name)}")
        per = self.max_connections_per_analyst
        if per is not None and per < 1:
            raise InputError(f"max_connections_per_analyst must be at least 1, got {per}")

    @property
    def query_limits(self) -> Limits:
        """The pre-parse limits handed to each analyst's query session."""
        return Limits(max_bytes=self.max_query_bytes, max_depth=self.max_query_depth)


class ConnectionSlots:
    """Open connections, in all and per analyst (thread-safe)."""

    def __init__(self, limits: ServerLimits) -> None:
        self._limits = limits
        self._lock = threading.Lock()
        self._total = 0
        self._per: dict[str, int] = {}

    @property
    def total(self) -> int:
        return self._total

    def reserve(self) -> None:
        """Take a slot for a new socket (before login): refused beyond ``max_connections``."""
        with self._lock:
            if self._total >= self._limits.max_connections:
                raise TooManyConnections(
                    f"sorry, too many clients already ({self._total} connections open, "
                    f"the limit is {self._limits.max_connections})",
                    hint="Try again later, or ask the curator to raise veil serve --max-connections",
                )
            self._total += 1

    def release(self) -> None:
        with self._lock:
            self._total = max(0, self._total - 1)

    def login(self, analyst: str) -> None:
        """Count a logged-in connection against its analyst (after :meth:`reserve`)."""
        per = self._limits.max_connections_per_analyst
        with self._lock:
            have = self._per.get(analyst, 0)
            if per is not None and have >= per:
                raise TooManyConnections(
                    f"too many connections for analyst {analyst!r} ({have} open, the limit is {per})",
                    hint="Close another connection, or ask the curator to raise --max-connections-per-analyst",
                )
            self._per[analyst] = have + 1

    def logout(self, analyst: str) -> None:
        with self._lock:
            left = self._per.get(analyst, 0) - 1
            if left > 0:
                self._per[analyst] = left
            else:
                self._per.pop(analyst, None)

    def acquire(self, analyst: str) -> None:
        """:meth:`reserve` then :meth:`login` (the doctest's shorthand)."""
        self.reserve()
        try:
            self.login(analyst)
        except TooManyConnections:
            self.release()
            raise


class LoginThrottle:
    """Failed logins per client address: each failure after the first doubles the wait before
    that address's next login is answered (``base``, ``2·base``, … up to ``maximum`` seconds);
    a success clears it. Memory is bounded (least recently failed addresses are forgotten)."""

    def __init__(self, *, base: float, maximum: float, capacity: int = 10_000) -> None:
        self._base = base
        self._max = maximum
        self._capacity = capacity
        self._lock = threading.Lock()
        self._failures: OrderedDict[str, tuple[int, float]] = OrderedDict()

    def delay(self, address: str, now: float | None = None) -> float:
        """Seconds to wait before answering this address's login attempt."""
        now = time.monotonic() if now is None else now
        with self._lock:
            entry = self._failures.get(address)
        if entry is None:
            return 0.0
        count, last = entry
        if count < 2:
            return 0.0
        wait = min(self._max, self._base * 2 ** (count - 2))
        return max(0.0, last + wait - now)

    def failed(self, address: str, now: float | None = None) -> int:
        """Record a failure; the number of failures in a row from this address."""
        now = time.monotonic() if now is None else now
        with self._lock:
            count = self._failures.pop(address, (0, now))[0] + 1
            self._failures[address] = (count, now)
            while len(self._failures) > self._capacity:
                self._failures.popitem(last=False)
        return count

    def succeeded(self, address: str) -> None:
        with self._lock:
            self._failures.pop(address, None)
