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
  (many addresses with one idle socket each: the stalest gives way; a login in progress, which
  takes milliseconds, is never cut);
- else the connection that has waited longest for its login, of any network, the newcomer's own
  included, once it has waited longer than ``grace`` (red team s27 A14: analysts who share an
  address — loopback, a jump host, a NAT — are not kept out by idle sockets of that address; one
  analyst's logins are capped by ``--max-connections-per-analyst``, and sockets that never log in
  would otherwise fill the rest).

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
from collections import OrderedDict
from dataclasses import dataclass, field

from veil.server.limits import client_network

__all__ = ["GRACE_S", "PreLogin", "Waiting"]

#: Seconds a connection may wait for its login before an equal share no longer protects it.
GRACE_S = 2.0


@dataclass(eq=False)
class Waiting:
    """One connection that has not logged in (mutable bookkeeping of the event loop, not a value)."""

    network: str
    since: float
    handle: asyncio.Task[None] | None  # the connection's handler, cancelled to evict it
    evicted: bool = field(default=False)  # its slot was handed to a newcomer: do not release it


class PreLogin:
    """This process's connections that have not logged in, per client network, oldest first.
    Used on the event loop only (no lock)."""

    def __init__(self, *, grace: float = GRACE_S) -> None:
        self._grace = grace
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
        best: tuple[int, float] | None = None
        chosen: Waiting | None = None
        for network, conns in self._by_network.items():
            if network == mine or not conns:
                continue
            oldest = next(iter(conns.values()))
            rank = (len(conns), -oldest.since)  # most held, then the longest waiting
            if best is None or rank > best:
                best, chosen = rank, oldest
        if chosen is not None and best is not None:
            held = best[0]
            if held >= have + 2 or (held == have + 1 and now - chosen.since > self._grace):
                return chosen
        return self._stalest(now)

    def _stalest(self, now: float) -> Waiting | None:
        """The connection of any network, the newcomer's own included, that has waited longest for its
        login, once that is longer than the grace (red team s27 A14: analysts sharing an address)."""
        oldest = min((next(iter(c.values())) for c in self._by_network.values() if c), key=lambda w: w.since, default=None)
        if oldest is not None and now - oldest.since > self._grace:
            return oldest
        return None

    def evict(self, waiting: Waiting) -> None:
        """Close ``waiting`` and hand its slot over (the caller now holds it)."""
        self.remove(waiting)
        waiting.evicted = True
        if waiting.handle is not None:
            waiting.handle.cancel()
