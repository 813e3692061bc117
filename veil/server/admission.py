"""Who gets a connection slot when all are taken: a fair share between client addresses before login.

``--max-connections`` counts every socket from accept, logged in or not, so without more, one
address that opens that many sockets and never logs in keeps every analyst out until
``--auth-timeout`` (red team s20, A3). :class:`PreLogin` remembers the connections of this process
that have not logged in yet, by client network (an IPv4 address, an IPv6 /64:
:func:`~veil.server.limits.client_network`), oldest first. When a new socket finds every slot
taken, it takes the slot of one of them (:meth:`PreLogin.victim`): the oldest connection of the
network that holds the most of them — never one of its own network's, never a logged-in one —

- if that network holds at least two more than the newcomer's (so the shares only get fairer: one
  address with 100 idle sockets loses one to each other address that connects), or
- if it holds one more and that connection has waited for a login longer than ``grace`` seconds
  (many addresses with one idle socket each: the stalest gives way);
- else the connection that has waited longest for its login, of any network, the newcomer's own
  included, once it has waited longer than ``grace`` (red team s27 A14: analysts who share an
  address — loopback, a jump host, a NAT — are not kept out by idle sockets of that address; one
  analyst's logins are capped by ``--max-connections-per-analyst``, and sockets that never log in
  would otherwise fill the rest).

A connection that has sent its startup message has a login in progress while it keeps up: the server holding
the turn (a password check) never counts against it, but once the server has waited longer than ``grace`` for
its next message, or the login has waited that long in the login backoff (which its user name and address earn,
and an outsider raises by failing under them: red team s32 A1), it is a slow login — a congested link, or a
startup message sent only to hold a slot, which costs no password (red team s30 A1: sockets from one or many
addresses that send one and stall kept every analyst out for the login grace, then 10 s, again and again). Of the slow
logins only the one of each network that began its wait last, of at most ``slow_logins`` networks (a quarter of
``--max-connections``), again those that began last, keep the protection of a login in progress; the others are
idle sockets. Last, not first: a stalled startup message sent before a slow analyst's login would otherwise
take its place (red team s32 A2); to take it now an outsider must keep opening fresh ones, which any fair share
of slots by address concedes.
Within a network the idle ones (nothing or only part of a startup message sent, or stalled) go first, and in the
last two rules a login in progress gives way only once it has waited longer than ``login_grace``
(40 s), not ``grace`` — a login over a slow link or held by the login backoff takes seconds, and
without this an outsider swapping its own idle sockets reached the stalest connection: the slow
login (red team s28 A4). Not never: sockets that send a startup message and stall would then hold
their slots until ``--auth-timeout``, the attack of s20 A3 again. A network holding two more than
the newcomer's still gives way at once, its logins in progress too (its share is what is fair).

The evicted connection is closed (its handler is cancelled: an attempt that had sent a password
counts as a failed login, as when a client hangs up) and its slot passes straight to the newcomer,
so open sockets never exceed ``--max-connections``. A network cannot win slots back from itself:
a newcomer takes its own network's slot only from a connection of it that has waited past the grace
(a swap, not one more), so an address that holds more than its share gets 53300 again on every new
socket while its sockets are fresh.

>>> pre = PreLogin(grace=2.0)
>>> hog = [pre.add("10.0.0.9", handle=None, now=0.0) for _ in range(3)]
>>> pre.victim("10.0.0.7", now=0.1) is hog[0]  # 3 ≥ 0 + 2: the hog's oldest gives way
True
>>> pre.victim("10.0.0.9", now=0.1) is None  # never a fresh one of the newcomer's own network
True
>>> pre.victim("10.0.0.9", now=2.5) is hog[0]  # its own stale one: a swap
True
"""

from __future__ import annotations

import asyncio
import math
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from veil.server.limits import client_network

__all__ = ["GRACE_S", "LOGIN_GRACE_S", "PreLogin", "Waiting"]

#: Seconds a connection may wait for its login before an equal share no longer protects it.
GRACE_S = 2.0
#: Seconds a connection whose login is in progress (it sent its startup message) is protected from newcomers of
#: networks holding as many or one more, and from its own network's (red team s28 A4): longer than the login
#: backoff's longest wait (30 s by default; the server passes its own), which anyone raises for an analyst by failing
#: under her name (red team s33 A2: at 10 s her login, held 30 s, was cut every time). Slow logins hold it only
#: within their quota (a quarter of the slots), so stalled sockets cannot hold the rest that long.
LOGIN_GRACE_S = 40.0


@dataclass(eq=False)
class Waiting:
    """One connection that has not logged in (mutable bookkeeping of the event loop, not a value)."""

    network: str
    since: float
    handle: asyncio.Task[None] | None  # the connection's handler, cancelled to evict it
    evicted: bool = field(default=False)  # its slot was handed to a newcomer: do not release it
    started: bool = field(default=False)  # it sent its startup message: its login is in progress (s28 A4)
    #: When the login began waiting on its client (its next message, or the login backoff its claims earned), while
    #: it waits (None while the server holds the turn: a password check, a reply on its way). Red team s30/s32 A1.
    awaiting_client: Callable[[], float | None] = field(default=lambda: None)


class PreLogin:
    """This process's connections that have not logged in, per client network, oldest first.
    Used on the event loop only (no lock)."""

    def __init__(self, *, grace: float = GRACE_S, login_grace: float = LOGIN_GRACE_S, slow_logins: int = 1) -> None:
        self._grace = grace
        self._login_grace = login_grace
        self._slow_logins = slow_logins
        self._by_network: dict[str, OrderedDict[int, Waiting]] = {}

    def __len__(self) -> int:
        return sum(len(v) for v in self._by_network.values())

    def held_by(self, address: str) -> int:
        """Connections not logged in of ``address``'s network."""
        return len(self._by_network.get(client_network(address), ()))

    def add(self, address: str, *, handle: asyncio.Task[None] | None, now: float) -> Waiting:
        waiting = Waiting(client_network(address), now, handle)
        self._by_network.setdefault(waiting.network, OrderedDict())[id(waiting)] = waiting
        return waiting

    def remove(self, waiting: Waiting) -> None:
        """It logged in, or its socket closed (idempotent)."""
        conns = self._by_network.get(waiting.network)
        if conns is None:
            return
        conns.pop(id(waiting), None)
        if not conns:
            del self._by_network[waiting.network]

    def victim(self, address: str, *, now: float) -> Waiting | None:
        """The connection that gives its slot to a newcomer from ``address`` (see the module), or None."""
        mine = client_network(address)
        have = len(self._by_network.get(mine, ()))
        busy = self._in_progress(now)
        best: tuple[tuple[int, float], Waiting] | None = None
        for network, conns in self._by_network.items():
            held = len(conns)
            if network == mine or held < have + 1:
                continue
            if held >= have + 2:
                chosen = self._oldest(conns, busy, now=now, idle_after=-math.inf, login_after=-math.inf)
            else:
                chosen = self._oldest(conns, busy, now=now, idle_after=self._grace, login_after=self._login_grace)
            if chosen is not None and (best is None or (held, -chosen.since) > best[0]):
                best = ((held, -chosen.since), chosen)
        if best is not None:
            return best[1]
        return self._stalest(busy, now)

    def _in_progress(self, now: float) -> set[int]:
        """The logins in progress (ids): connections that sent their startup message and keep up (they have not
        kept the server waiting longer than the grace), and of those that do — a slow link, or a startup message
        sent only to hold a slot, which costs no password (red team s30 A1) — the one of each network whose wait
        began last, of at most ``slow_logins`` networks, those whose wait began last (s32 A2)."""
        busy: set[int] = set()
        slow: list[tuple[float, Waiting]] = []
        for conns in self._by_network.values():
            latest: tuple[float, Waiting] | None = None
            for waiting in conns.values():
                if not waiting.started:
                    continue
                since = waiting.awaiting_client()
                if since is None or now - since <= self._grace:
                    busy.add(id(waiting))
                elif latest is None or since > latest[0]:
                    latest = (since, waiting)
            if latest is not None:
                slow.append(latest)
        slow.sort(key=lambda pair: pair[0], reverse=True)
        busy.update(id(w) for _, w in slow[: self._slow_logins])
        return busy

    @staticmethod
    def _oldest(
        conns: OrderedDict[int, Waiting], busy: set[int], *, now: float, idle_after: float, login_after: float
    ) -> Waiting | None:
        """The oldest idle connection of ``conns`` waiting longer than ``idle_after``, else the oldest whose
        login is in progress once it has waited longer than ``login_after`` (red team s28 A4)."""
        first_login: Waiting | None = None
        for waiting in conns.values():  # oldest first
            if id(waiting) not in busy:
                return waiting if now - waiting.since > idle_after else None
            if first_login is None:
                first_login = waiting
        if first_login is not None and now - first_login.since > login_after:
            return first_login
        return None

    def _stalest(self, busy: set[int], now: float) -> Waiting | None:
        """The idle connection of any network, the newcomer's own included, that has waited longest, once that is
        longer than the grace (red team s27 A14: analysts sharing an address); else the login in progress that has
        waited longest, once that is longer than the login grace (s28 A4: a slow login is not an idle socket)."""
        waiting = [w for conns in self._by_network.values() for w in conns.values()]
        idle = min((w for w in waiting if id(w) not in busy), key=lambda w: w.since, default=None)
        if idle is not None and now - idle.since > self._grace:
            return idle
        login = min((w for w in waiting if id(w) in busy), key=lambda w: w.since, default=None)
        if login is not None and now - login.since > self._login_grace:
            return login
        return None

    def evict(self, waiting: Waiting) -> None:
        """Close ``waiting`` and hand its slot over (the caller now holds it)."""
        self.remove(waiting)
        waiting.evicted = True
        if waiting.handle is not None:
            waiting.handle.cancel()
