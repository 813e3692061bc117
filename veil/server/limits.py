"""Limits of ``veil serve``: what one client may hold, before and after logging in.

:class:`ServerLimits` is the frozen set of numbers (one per ``veil serve`` flag);
:class:`ConnectionSlots` counts open connections (in all, and per analyst) and answers 53300
beyond them; :class:`LoginThrottle` slows failed logins down per (address, user) pair, per user
and per address, counting attempts in flight.

>>> slots = ConnectionSlots(ServerLimits(max_connections=2, max_connections_per_analyst=1))
>>> slots.acquire("alice"); slots.acquire("bob")
>>> slots.acquire("carol")
Traceback (most recent call last):
...
veil.errors.TooManyConnections: sorry, too many clients already (2 connections open, the limit is 2). ...
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import enum
import hashlib
import ipaddress
import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, replace
from pathlib import Path

from veil.errors import InputError, TooManyConnections
from veil.proxy.parse import Limits
from veil.store.warehouse import MIN_READER_MEMORY_MIB, MIN_READER_THREADS

__all__ = [
    "MAX_STARTUP_PACKET",
    "OVERFLOW_SLOTS",
    "ConnectionSlots",
    "LoginBackoff",
    "LoginThrottle",
    "LoginTicket",
    "Outcome",
    "OverflowSlot",
    "ServerLimits",
    "Slots",
    "ThrottleEntry",
    "client_network",
    "pair_user",
    "user_key",
]

#: Overflow slots of the login backoff: what it keeps of keys it forgot to make room (bounded memory).
OVERFLOW_SLOTS = 1 << 16

#: PostgreSQL's own cap on a startup packet (``MAX_STARTUP_PACKET_LENGTH``).
MAX_STARTUP_PACKET = 10_000


#: The least memory ``--engine-memory`` may give one DuckDB connection, in MiB (its default too, on a small machine):
#: below it a charged statement fails on the limit where it would spill, a step one person's row can cross (s63 F1).
MIN_ENGINE_MEMORY_MIB = MIN_READER_MEMORY_MIB


def usable_memory_mib() -> int:
    """The memory this process may use, in MiB: the machine's, or its cgroup's limit where one is set and lower."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for limit in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):  # cgroup v2, v1
        try:
            text = Path(limit).read_text(encoding="ascii").strip()
        except OSError:
            continue
        if text.isdigit():
            total = min(total, int(text))
    return int(total >> 20)


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the platform tells it, else every core)."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else os.cpu_count() or 1


@dataclass(frozen=True)
class ServerLimits:
    """Every limit of the server, in one frozen value (defaults = ``veil serve``'s defaults).

    Times are in seconds; 0 turns a time limit off.
    """

    auth_timeout: float = 60.0
    max_connections: int = 100
    max_connections_per_analyst: int | None = None  # None: half of max_connections (analyst_cap)
    statement_timeout: float = 0.0
    public_query_timeout: float = 120.0  # work on public data (never a charged private run), whatever the above
    max_query_bytes: int = 1 << 20
    max_query_depth: int = 64
    max_query_tokens: int = 4_000
    max_operator_chain: int = 256  # AND/OR/+/=… in a row at one bracket level (parse-tree depth)
    max_planning_seconds: float = 10.0
    catalog_timeout: float = 5.0
    max_message_bytes: int = 4 << 20  # one protocol message after login (a query plus framing)
    workers: int = 8
    busy_workers: int = 0  # analyst jobs started at once, a long one not counted (veil.server.pool); 0: cores ÷ processes
    engine_threads: int = 0  # DuckDB threads of this process's warehouse readers (0: DuckDB's default, one per core)
    engine_memory_mib: int = 0  # DuckDB memory limit of each warehouse connection (0: DuckDB's default, 80% of RAM)
    catalog_workers: int = 3  # one analyst holds at most all but one (veil.server.pool)
    login_backoff_base: float = 0.25  # seconds after the 2nd failure on a pair, user or address, doubling
    login_backoff_max: float = 30.0
    # what one connection holds between messages (veil.server.held; 53400 beyond, free)
    max_prepared_statements: int = 1_000  # named prepared statements
    max_statement_bytes: int = 16 << 20  # their texts and tokens, as estimated by held.statement_bytes
    max_portals: int = 100  # named portals (they end with their transaction)
    max_cursors: int = 100  # DECLAREd cursors
    max_held_bytes: int = 64 << 20  # named portals' parameters and answers and cursors' answers
    #: what all of one analyst's connections (in one process) hold together, so the connection cap does not multiply
    #: max_held_bytes (red team s73 F3: 50 connections × 64 MiB)
    max_analyst_held_bytes: int = 256 << 20

    def __post_init__(self) -> None:
        for name in ("auth_timeout", "statement_timeout", "public_query_timeout", "max_planning_seconds", "catalog_timeout"):
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
            "max_prepared_statements",
            "max_statement_bytes",
            "max_portals",
            "max_cursors",
            "max_held_bytes",
            "max_analyst_held_bytes",
        ):
            if getattr(self, name) < 1:
                raise InputError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.busy_workers < 0:
            raise InputError(f"busy_workers must be >= 0, got {self.busy_workers}", hint="Use 0 for the cores per process")
        if self.engine_threads < 0 or 0 < self.engine_threads < MIN_READER_THREADS:
            raise InputError(
                f"engine_threads must be 0 or at least {MIN_READER_THREADS}, got {self.engine_threads}",
                hint=f"Use 0 for one per core, or at least {MIN_READER_THREADS}: with one thread DuckDB does not spill a "
                "text GROUP BY's hash table, so a charged statement could fail depending on one person's row",
            )
        if self.engine_memory_mib < 0 or 0 < self.engine_memory_mib < MIN_ENGINE_MEMORY_MIB:
            raise InputError(
                f"engine_memory_mib must be 0 or at least {MIN_ENGINE_MEMORY_MIB} MiB, got {self.engine_memory_mib}",
                hint=f"Use 0 for DuckDB's default, or at least {MIN_ENGINE_MEMORY_MIB}: below it a charged statement can "
                "fail on the limit, where it would spill to disk, depending on one person's row",
            )
        per = self.max_connections_per_analyst
        if per is not None and per < 1:
            raise InputError(f"max_connections_per_analyst must be at least 1, got {per}")

    @property
    def analyst_cap(self) -> int:
        """Logged-in connections one analyst may hold: ``max_connections_per_analyst`` where set, else
        half of ``max_connections`` (at least 1), so one analyst never holds every slot while there are
        two or more (red team s24 A3).

        >>> ServerLimits().analyst_cap, ServerLimits(max_connections=7).analyst_cap, ServerLimits(max_connections=1).analyst_cap
        (50, 3, 1)
        >>> ServerLimits(max_connections=7, max_connections_per_analyst=7).analyst_cap
        7
        """
        per = self.max_connections_per_analyst
        return per if per is not None else max(1, self.max_connections // 2)

    @staticmethod
    def default_engine_threads(processes: int, cores: int | None = None) -> int:
        """``--engine-threads`` when not given: with one process DuckDB's default (0: a thread per core), with N
        processes each its share of the cores, at least :data:`~veil.store.warehouse.MIN_READER_THREADS` (with one
        thread DuckDB did not spill a text GROUP BY at the memory floor: review s21 X4).

        >>> ServerLimits.default_engine_threads(1, 8), ServerLimits.default_engine_threads(2, 2)
        (0, 2)
        >>> ServerLimits.default_engine_threads(3, 8), ServerLimits.default_engine_threads(2, 8)
        (2, 4)
        """
        if processes <= 1:
            return 0
        return max(MIN_READER_THREADS, (cores if cores is not None else usable_cores()) // processes)

    @staticmethod
    def default_busy_workers(processes: int, cores: int | None = None) -> int:
        """``busy_workers`` when 0: each process's share of the cores (at least 1). Analyst jobs are mostly Python,
        which runs on one core per process at a time, so more busy threads than that only switch the interpreter lock.

        >>> [ServerLimits.default_busy_workers(n, 2) for n in (1, 2, 3)]
        [2, 1, 1]
        """
        return max(1, (cores if cores is not None else usable_cores()) // max(processes, 1))

    @staticmethod
    def default_engine_memory(processes: int, memory_mib: int | None = None) -> int:
        """``--engine-memory`` when not given, in MiB: 80% of the memory this process may use, shared by the 2N
        DuckDB connections ``veil serve --processes N`` holds at most at once (each process: the warehouse's and the
        public mirror's), so together they stay within what DuckDB's default gives one (red team s44).

        >>> ServerLimits.default_engine_memory(1, 10_000), ServerLimits.default_engine_memory(4, 24_000)
        (4000, 2400)
        >>> ServerLimits.default_engine_memory(64, 1_000)
        256
        """
        total = memory_mib if memory_mib is not None else usable_memory_mib()
        return max(MIN_ENGINE_MEMORY_MIB, total * 8 // (10 * 2 * max(processes, 1)))

    @property
    def query_limits(self) -> Limits:
        """The pre-parse limits handed to each analyst's query session."""
        return Limits(
            max_bytes=self.max_query_bytes,
            max_depth=self.max_query_depth,
            max_tokens=self.max_query_tokens,
            max_operator_chain=self.max_operator_chain,
        )


class Slots(abc.ABC):
    """Open connections, in all and per analyst: the rules, whatever holds the counts (one process's, or every
    worker process's in shared memory: :class:`~veil.server.shared.SharedConnectionSlots`)."""

    def __init__(self, limits: ServerLimits) -> None:
        self._limits = limits

    @property
    @abc.abstractmethod
    def total(self) -> int:
        """Connections open now (logged in or not)."""

    @abc.abstractmethod
    def _take_total(self) -> int | None:
        """Count one more connection and return ``None``, or return the count that is already at the limit."""

    @abc.abstractmethod
    def release(self) -> None:
        """Give back the slot :meth:`reserve` took."""

    @abc.abstractmethod
    def _take_for(self, analyst: str, cap: int) -> int | None:
        """Count one more of ``analyst``'s connections and return ``None``, or return the count already at ``cap``."""

    @abc.abstractmethod
    def logout(self, analyst: str) -> None:
        """Give back the count :meth:`login` took."""

    def reserve(self) -> None:
        """Take a slot for a new socket (before login): refused beyond ``max_connections``."""
        have = self._take_total()
        if have is not None:
            raise TooManyConnections(
                f"sorry, too many clients already ({have} connections open, the limit is {self._limits.max_connections})",
                hint="Try again later, or ask the curator to raise veil serve --max-connections",
            )

    def login(self, analyst: str) -> None:
        """Count a logged-in connection against its analyst (after :meth:`reserve`)."""
        per = self._limits.analyst_cap
        have = self._take_for(analyst, per)
        if have is not None:
            raise TooManyConnections(
                f"too many connections for analyst {analyst!r} ({have} open, the limit is {per})",
                hint="Close another connection, or ask the curator to raise --max-connections-per-analyst",
            )

    def acquire(self, analyst: str) -> None:
        """:meth:`reserve` then :meth:`login` (the doctest's shorthand)."""
        self.reserve()
        try:
            self.login(analyst)
        except TooManyConnections:
            self.release()
            raise


class ConnectionSlots(Slots):
    """:class:`Slots` of this process (thread-safe)."""

    def __init__(self, limits: ServerLimits) -> None:
        super().__init__(limits)
        self._lock = threading.Lock()
        self._total = 0
        self._per: dict[str, int] = {}

    @property
    def total(self) -> int:
        return self._total

    def _take_total(self) -> int | None:
        with self._lock:
            if self._total >= self._limits.max_connections:
                return self._total
            self._total += 1
            return None

    def release(self) -> None:
        with self._lock:
            self._total = max(0, self._total - 1)

    def _take_for(self, analyst: str, cap: int) -> int | None:
        with self._lock:
            have = self._per.get(analyst, 0)
            if have >= cap:
                return have
            self._per[analyst] = have + 1
            return None

    def logout(self, analyst: str) -> None:
        with self._lock:
            left = self._per.get(analyst, 0) - 1
            if left > 0:
                self._per[analyst] = left
            else:
                self._per.pop(analyst, None)


class Outcome(enum.Enum):
    """How an admitted login attempt ended."""

    OK = "ok"  # the password was right
    FAILED = "failed"  # a password was checked and was wrong (or the client left after sending one)
    NO_GUESS = "no guess"  # the client left before sending a password proof: nothing was checked


@dataclass(frozen=True)
class ThrottleEntry:
    """What the throttle remembers of one key (an (address, user) pair, a user, or an address)."""

    failures: int = 0  # failed logins on this key in a row (forgotten after ``forget_after`` quiet seconds)
    floor: int = 0  # the count its overflow slot held when it was (re)loaded: it never counts less (see _fold)
    pending: int = 0  # attempts admitted and not yet answered: each counts as a failure until it ends
    last: float = 0.0  # the last admission or failure: the wait runs from here
    failed_at: float = 0.0  # the last failure
    trusted: bool = False  # (pair keys) this user has logged in from this address

    @property
    def empty(self) -> bool:
        return not (self.failures or self.pending or self.trusted or self.floor)

    @property
    def count(self) -> int:
        """``v``: failures (never fewer than the floor) and attempts in flight."""
        return max(self.floor, self.failures) + self.pending


@dataclass(frozen=True)
class OverflowSlot:
    """What the login backoff keeps of the keys it forgot that hash to one slot (see ``_fold``)."""

    fingerprint: int = 0  # the most penalised key's (0: none)
    top: int = 0  # its count
    rest: int = 0  # the largest count of the other keys folded here
    last: float = 0.0
    failed_at: float = 0.0


_NO_SLOT = OverflowSlot()


@dataclass(frozen=True)
class LoginTicket:
    """An admitted attempt: the keys it counts against (its pair first). Hand it back to
    :meth:`LoginBackoff.finish` exactly once."""

    keys: tuple[str, ...]


def client_network(address: str) -> str:
    """The address a client is throttled as: an IPv4 address itself, an IPv6 address's /64 (one
    host usually holds a whole /64 and can pick any address in it).

    >>> client_network("10.0.0.7"), client_network("::ffff:10.0.0.7"), client_network("2001:db8:0:1:2:3:4:5")
    ('10.0.0.7', '10.0.0.7', '2001:db8:0:1::/64')
    """
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return address  # "local" (a Unix socket) or anything else: itself
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


def _pair_key(address: str, user: str) -> str:
    return f"p{len(address)}:{address}{user}"  # the length prefix keeps (a, bc) and (ab, c) apart


def user_key(user: str) -> str:
    return f"u:{user}"


def pair_user(key: str) -> str | None:
    """The user of a pair key (:func:`_pair_key`); None for a user's or an address's key.

    >>> pair_user(_pair_key("10.0.0.1", "alice")), pair_user(user_key("alice")), pair_user(_address_key("p1:x"))
    ('alice', None, None)
    """
    length, sep, rest = key[1:].partition(":")
    if not key.startswith("p") or not sep or not length.isdigit():
        return None
    return rest[int(length) :]


def _address_key(address: str) -> str:
    return f"a:{address}"


class LoginBackoff(abc.ABC):
    """Login backoff: the rules; where the entries live is up to the subclass
    (:class:`LoginThrottle` in this process, :class:`~veil.server.shared.SharedLoginThrottle`
    across worker processes).

    Every attempt counts against keys: its (address, user) pair, and, unless that user has logged
    in from that address before (a *trusted* pair), also the user (from any address) and the
    address (for any user); an IPv6 address counts as its /64 (:func:`client_network`). On a key
    with ``v`` = failures + attempts in flight, the next attempt is admitted (its password checked)
    only ``base · 2^(v−2)`` seconds (at most ``maximum``) after the key's last admission or
    failure; ``v < 2`` admits at once. An admitted attempt counts as a failure until it ends, so
    parallel attempts each wait their own turn; it is admitted on all its keys at once, under one
    lock. A success clears only its own pair's failures (and marks the pair
    trusted); the user's and the address's counts fall only when ``forget_after`` seconds pass
    without a failure. Whether the user exists plays no part.

    >>> throttle = LoginThrottle(base=1.0, maximum=8.0)
    >>> for now in (0.0, 0.0, 1.0):  # the 3rd attempt may come 1 s (base) after the 2nd failure
    ...     wait, ticket = throttle.try_admit("10.0.0.7", "carol", now=now)
    ...     throttle.finish(ticket, Outcome.FAILED, now=now)
    1
    2
    3
    >>> throttle.delay("10.0.0.7", "carol", now=1.0)  # 3 failures: 2 s after the last one
    2.0
    >>> throttle.delay("10.0.0.8", "carol", now=1.0)  # from another address: carol's own count
    2.0
    >>> throttle.delay("10.0.0.7", "dave", now=1.0)  # another user from that address: its count
    2.0
    >>> throttle.delay("10.0.0.8", "dave", now=1.0)
    0.0
    """

    def __init__(self, *, base: float, maximum: float, forget_after: float = 900.0, poll: float = 0.05) -> None:
        self._base = base
        self._max = maximum
        self._forget_after = forget_after
        self._poll = poll
        # waiters of this process sleep on an event that the next finished attempt sets (then re-check)
        self._wake: tuple[asyncio.AbstractEventLoop, asyncio.Event] | None = None

    # --- storage (subclasses) --------------------------------------------------------------------

    @abc.abstractmethod
    def _locked(self) -> contextlib.AbstractContextManager[object]:
        """(Subclasses) the lock every read and write of entries happens under."""

    @abc.abstractmethod
    def _lookup(self, key: str) -> ThrottleEntry | None:
        """(Subclasses) the entry of a key the bounded table holds, else None."""

    @abc.abstractmethod
    def _put(self, key: str, entry: ThrottleEntry, now: float) -> None:
        """(Subclasses) store an entry (an empty one: forget the key). A key forgotten to make room
        for another is handed to :meth:`_fold` first."""

    @abc.abstractmethod
    def _overflow_index(self, key: str) -> tuple[int, int]:
        """(Subclasses) a key's overflow slot (in ``range(OVERFLOW_SLOTS)``) and fingerprint (not 0),
        both from one keyed hash."""

    @abc.abstractmethod
    def _overflow_get(self, index: int) -> OverflowSlot:
        """(Subclasses) an overflow slot (empty if never written)."""

    @abc.abstractmethod
    def _overflow_put(self, index: int, slot: OverflowSlot) -> None:
        """(Subclasses) write an overflow slot."""

    # --- rules -----------------------------------------------------------------------------------

    def _get(self, key: str) -> ThrottleEntry:
        """A key's entry: the bounded table's, else what its overflow slot keeps of it."""
        entry = self._lookup(key)
        if entry is not None:
            return entry
        index, fingerprint = self._overflow_index(key)
        slot = self._overflow_get(index)
        if slot.fingerprint == fingerprint and slot.top:  # its own count: it goes on from there
            return ThrottleEntry(failures=slot.top, last=slot.last, failed_at=slot.failed_at)
        return ThrottleEntry(floor=slot.rest, last=slot.last, failed_at=slot.failed_at) if slot.rest else _EMPTY

    def _fold(self, key: tuple[int, int], entry: ThrottleEntry, now: float) -> None:
        """A key forgotten to make room keeps its count in its overflow slot, which every key that
        hashes there shares: the slot keeps the most penalised key's count (with its fingerprint)
        and the largest count of the others. A key loaded from it goes on from the top count if its
        fingerprint is the top's (its own); else its failures count at least the others' largest
        (its ``floor``, a minimum, not a start: keys sharing a slot do not add up). So forgetting a
        key never shortens its wait; another key of the slot may wait as long as the most penalised
        of the others (never shorter than its own count asks), and a flood of fresh keys that fail
        once each leaves its slots at 1 and slows nobody. Trust is never kept."""
        v = entry.count
        if not v:
            return
        index, fingerprint = key
        failed_at = max(entry.failed_at, entry.last) if entry.pending else entry.failed_at
        old = self._overflow_get(index)
        if old.top and now - old.failed_at > self._forget_after:
            old = _NO_SLOT
        if old.fingerprint == fingerprint:
            top, rest, fp = max(old.top, v), old.rest, fingerprint
        elif v > old.top:
            top, rest, fp = v, max(old.rest, old.top), fingerprint
        else:
            top, rest, fp = old.top, max(old.rest, v), old.fingerprint
        self._overflow_put(index, OverflowSlot(fp, top, rest, max(old.last, entry.last), max(old.failed_at, failed_at)))

    def _expire(self, entry: ThrottleEntry, now: float) -> ThrottleEntry:
        if (entry.failures or entry.floor) and now - entry.failed_at > self._forget_after:
            entry = replace(entry, failures=0, floor=0)
        if entry.pending and now - entry.last > self._forget_after:  # left by a worker that died
            entry = replace(entry, pending=0)
        return entry

    def _load(self, key: str, now: float) -> ThrottleEntry:
        return self._expire(self._get(key), now)

    def _wait(self, entry: ThrottleEntry, now: float) -> float:
        v = entry.count
        if v < 2:
            return 0.0
        gap = min(self._max, self._base * 2.0 ** min(v - 2, 64))
        return max(0.0, entry.last + gap - now)

    def _keys(self, address: str, user: str, now: float) -> tuple[tuple[str, ...], list[ThrottleEntry]]:
        address = client_network(address)
        pair_key = _pair_key(address, user)
        pair = self._load(pair_key, now)
        if pair.trusted:
            return (pair_key,), [pair]
        keys = (pair_key, user_key(user), _address_key(address))
        return keys, [pair, *(self._load(k, now) for k in keys[1:])]

    def delay(self, address: str, user: str, now: float | None = None) -> float:
        """Seconds before an attempt of ``user`` from ``address`` would be admitted (admits nothing)."""
        now = time.monotonic() if now is None else now
        with self._locked():
            _, entries = self._keys(address, user, now)
            return max(self._wait(e, now) for e in entries)

    def try_admit(self, address: str, user: str, now: float | None = None) -> tuple[float, LoginTicket | None]:
        """Admit an attempt now, counting it on all its keys: ``(0, ticket)``; else ``(seconds to
        wait at least, None)`` and nothing is counted."""
        now = time.monotonic() if now is None else now
        with self._locked():
            keys, entries = self._keys(address, user, now)
            wait = max(self._wait(e, now) for e in entries)
            if wait > 0:
                return wait, None
            for key, entry in zip(keys, entries, strict=True):
                self._put(key, replace(entry, pending=entry.pending + 1, last=now), now)
        return 0.0, LoginTicket(keys)

    async def admit(self, address: str, user: str) -> LoginTicket:
        """Wait (on the event loop, never blocking it) until the attempt is admitted. The wait is
        re-checked whenever an attempt of this process ends, and at least every ``poll`` seconds
        (or an eighth of the wait; attempts ending in other worker processes are seen then), so
        attempts waiting behind attempts in flight that succeed go ahead at once."""
        while True:
            wait, ticket = self.try_admit(address, user)
            if ticket is not None:
                return ticket
            loop = asyncio.get_running_loop()
            if self._wake is None or self._wake[0] is not loop:
                self._wake = (loop, asyncio.Event())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake[1].wait(), min(wait, max(self._poll, wait / 8)))

    def _notify(self) -> None:
        """Wake this process's waiting attempts (from any thread)."""
        wake, self._wake = self._wake, None
        if wake is None or wake[0].is_closed():
            return
        loop, event = wake
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            event.set()
        else:
            loop.call_soon_threadsafe(event.set)

    def finish(self, ticket: LoginTicket, outcome: Outcome, now: float | None = None) -> int:
        """Record how an admitted attempt ended; returns the pair's failures in a row."""
        now = time.monotonic() if now is None else now
        pair_failures = 0
        with self._locked():
            for i, key in enumerate(ticket.keys):
                entry = self._load(key, now)
                entry = replace(entry, pending=max(0, entry.pending - 1))
                if outcome is Outcome.FAILED:
                    entry = replace(entry, failures=entry.failures + 1, last=now, failed_at=now)
                elif outcome is Outcome.OK and i == 0:
                    entry = replace(entry, failures=0, floor=0, trusted=True)
                self._put(key, entry, now)
                if i == 0:
                    pair_failures = entry.failures
        self._notify()
        return pair_failures


#: Trusted pairs (addresses a user has logged in from) kept per user: a user's own logins from more addresses push out
#: only that user's oldest ones.
TRUSTED_PER_USER = 64


class LoginThrottle(LoginBackoff):
    """:class:`LoginBackoff` in this process (thread-safe). Memory is bounded: beyond ``capacity``
    keys, the least recently used is forgotten, its penalty kept in one of
    :data:`OVERFLOW_SLOTS` overflow slots (:meth:`LoginBackoff._fold`). Trusted pairs, which only
    a successful login makes, are kept per user (at most :data:`TRUSTED_PER_USER` each, only users who logged in
    have any), so failed attempts, however many, never push them out (red team s20 A7), and neither do another
    user's logins from many addresses (red team s44 A4: one LRU of every pair let an analyst untrust another's)."""

    def __init__(
        self,
        *,
        base: float,
        maximum: float,
        capacity: int = 10_000,
        forget_after: float = 900.0,
        poll: float = 0.05,
        trusted_per_user: int = TRUSTED_PER_USER,
    ) -> None:
        super().__init__(base=base, maximum=maximum, forget_after=forget_after, poll=poll)
        self._capacity = capacity
        self._trusted_per_user = trusted_per_user
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, ThrottleEntry] = OrderedDict()
        self._trusted: dict[str, OrderedDict[str, ThrottleEntry]] = {}  # user → their trusted pairs, oldest first
        self._overflow: dict[int, OverflowSlot] = {}
        self._salt = os.urandom(16)  # overflow slots: no client can aim a key at another's slot

    def __len__(self) -> int:
        return len(self._entries) + sum(len(pairs) for pairs in self._trusted.values())

    def _locked(self) -> contextlib.AbstractContextManager[object]:
        return self._lock

    def _lookup(self, key: str) -> ThrottleEntry | None:
        user = pair_user(key)
        pairs = self._trusted.get(user) if user is not None else None
        entry = pairs.get(key) if pairs is not None else None
        return entry if entry is not None else self._entries.get(key)

    def _put(self, key: str, entry: ThrottleEntry, now: float) -> None:
        user = pair_user(key)
        self._entries.pop(key, None)
        mine = self._trusted.get(user) if user is not None else None
        if user is not None and mine is not None:
            mine.pop(key, None)
            if not mine:
                del self._trusted[user]
        if entry.empty:
            return
        if entry.trusted and user is not None:
            pairs = self._trusted.setdefault(user, OrderedDict())
            pairs[key] = entry
            while len(pairs) > self._trusted_per_user:
                old_key, old = pairs.popitem(last=False)
                self._fold(self._overflow_index(old_key), old, now)
            return
        self._entries[key] = entry
        while len(self._entries) > self._capacity:
            old_key, old = self._entries.popitem(last=False)
            self._fold(self._overflow_index(old_key), old, now)

    def _overflow_index(self, key: str) -> tuple[int, int]:
        digest = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=16, key=self._salt).digest()
        return overflow_slot(digest)

    def _overflow_get(self, index: int) -> OverflowSlot:
        return self._overflow.get(index, _NO_SLOT)

    def _overflow_put(self, index: int, slot: OverflowSlot) -> None:
        self._overflow[index] = slot


def overflow_slot(digest: bytes) -> tuple[int, int]:
    """(index, fingerprint) of a 16-byte keyed digest."""
    return int.from_bytes(digest[8:16], "little") % OVERFLOW_SLOTS, int.from_bytes(digest[:8], "little") or 1


_EMPTY = ThrottleEntry()
