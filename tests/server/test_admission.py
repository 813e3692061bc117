"""Connection slots before login (red team s20, A3): one address that opens every slot and never
logs in must not keep other addresses out. When all slots are taken, a newcomer takes the slot of
the oldest connection not logged in of the network holding the most of them, when that is fairer
(:mod:`veil.server.admission`); logged-in connections are never cut, and the newcomer's own network only
once its socket has waited past the grace (red team s27 A14).

The rule first (hypothesis), then the server with real clients: psycopg logging in from 127.0.0.1
while raw sockets from other loopback addresses hold the slots at each stage of a login.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.server import FAST_BACKOFF, build_policy, dsn, read_message, running_server, startup_packet
from veil.server.admission import GRACE_S, LOGIN_GRACE_S, PreLogin
from veil.server.limits import ServerLimits, client_network

# --- the rule ----------------------------------------------------------------------------------

_NETS = ["10.0.0.1", "10.0.0.2", "10.0.0.3", "2001:db8:0:1::5", "2001:db8:0:1::6", "2001:db8:0:2::1"]


@given(
    arrivals=st.lists(st.tuples(st.sampled_from(_NETS), st.floats(0, 5)), max_size=40),
    newcomer=st.sampled_from(_NETS),
    later=st.floats(0, 10),
)
def test_a_victim_is_always_from_a_network_holding_more(arrivals: list[tuple[str, float]], newcomer: str, later: float) -> None:
    """Whatever is waiting, the connection that gives way is the oldest of another network holding
    two more than the newcomer's, or one more past the grace; a network holding two more always
    gives one."""
    pre = PreLogin(grace=GRACE_S)
    since: dict[str, list[float]] = {}
    now = 0.0
    for address, dt in arrivals:
        now += dt
        pre.add(address, handle=None, now=now)
        since.setdefault(client_network(address), []).append(now)
    now += later
    mine = client_network(newcomer)
    have = len(since.get(mine, []))
    victim = pre.victim(newcomer, now=now)
    stalest = min((t for v in since.values() for t in v), default=None)
    if victim is None:
        assert all(len(v) < have + 2 for net, v in since.items() if net != mine)
        assert stalest is None or now - stalest <= GRACE_S  # nobody stale, of any network
        return
    held = len(since[victim.network])
    assert victim.since == min(since[victim.network])
    fair = victim.network != mine and (held >= have + 2 or (held == have + 1 and now - victim.since > GRACE_S))
    assert fair or (victim.since == stalest and now - victim.since > GRACE_S)  # else the stalest of all (s27 A14)


@given(
    arrivals=st.lists(st.tuples(st.sampled_from(_NETS), st.floats(0, 5), st.booleans()), max_size=40),
    newcomer=st.sampled_from(_NETS),
    later=st.floats(0, 20),
)
def test_a_login_in_progress_gives_way_only_after_the_login_grace(
    arrivals: list[tuple[str, float, bool]], newcomer: str, later: float
) -> None:
    """Red team s28 A4: a connection that sent its startup message (a login in progress) is evicted only by a
    newcomer of a network holding two fewer (a hog keeps no more than its share), or by anyone past the login
    grace — and never while an idle socket of its network could go instead."""
    pre = PreLogin(grace=GRACE_S, login_grace=LOGIN_GRACE_S)
    now = 0.0
    waiting = []
    for address, dt, started in arrivals:
        now += dt
        w = pre.add(address, handle=None, now=now)
        w.started = started
        waiting.append(w)
    now += later
    have = pre.held_by(newcomer)
    victim = pre.victim(newcomer, now=now)
    if victim is None or not victim.started:
        return
    held = pre.held_by(victim.network)
    age = now - victim.since
    mine = victim.network == client_network(newcomer)
    assert age > LOGIN_GRACE_S or (not mine and held >= have + 2)
    same_network = [w for w in waiting if w.network == victim.network]
    assert not any(not w.started for w in same_network) or age > LOGIN_GRACE_S  # idle ones of its network first


@given(
    stalls=st.lists(st.tuples(st.sampled_from(_NETS), st.floats(0, 0.3)), min_size=1, max_size=20),
    quota=st.integers(1, 4),
    newcomer=st.sampled_from([*_NETS, "10.0.0.99"]),
)
def test_stalled_startup_messages_keep_at_most_their_quota_of_slots(
    stalls: list[tuple[str, float]], quota: int, newcomer: str
) -> None:
    """Red team s30 A1: a startup message costs no password, so sockets that send one and then keep the server
    waiting (from one address or from many) keep the protection of a login in progress for at most ``slow_logins``
    of them, one a network: past the grace, while more stall, a newcomer of any network finds one to replace."""
    pre = PreLogin(grace=GRACE_S, login_grace=LOGIN_GRACE_S, slow_logins=quota)
    now = 0.0
    for address, dt in stalls:
        now += dt
        w = pre.add(address, handle=None, now=now)
        w.started = True
        w.awaiting_client = lambda since=now: since  # the server has waited for its next message since then
    now += GRACE_S + 0.1
    protected = min(quota, len({client_network(a) for a, _ in stalls}))
    victim = pre.victim(newcomer, now=now)
    assert victim is not None or len(stalls) <= protected


def test_a_login_the_server_holds_is_never_stalled() -> None:
    """A password check holds the turn: however long, it is not the client keeping the server
    waiting, and the login keeps its protection until the login grace."""
    pre = PreLogin(grace=GRACE_S, login_grace=LOGIN_GRACE_S, slow_logins=1)
    logins = [pre.add(f"10.0.0.{i}", handle=None, now=0.0) for i in range(1, 5)]
    for w in logins:
        w.started = True  # awaiting_client: None, the server's turn
    assert pre.victim("10.0.0.9", now=LOGIN_GRACE_S - 0.5) is None
    assert pre.victim("10.0.0.9", now=LOGIN_GRACE_S + 0.5) is logins[0]


def test_a_slow_login_is_not_taken_for_an_idle_socket() -> None:
    pre = PreLogin(grace=GRACE_S, login_grace=LOGIN_GRACE_S)
    idle = [pre.add("10.0.0.2", handle=None, now=0.0) for _ in range(3)]
    bob = pre.add("10.0.0.1", handle=None, now=0.1)
    bob.started = True
    assert pre.victim("10.0.0.2", now=2.5) is idle[0]  # the outsider swaps its own idle sockets
    for w in idle:
        pre.remove(w)
        pre.add("10.0.0.2", handle=None, now=2.5)
    assert pre.victim("10.0.0.2", now=3.0) is None  # its fresh ones, and bob's login in progress: none
    third = pre.victim("10.0.0.9", now=3.0)
    assert third is not None and third.network == "10.0.0.2"  # a third network: the hog's, not bob's
    alone = PreLogin(grace=GRACE_S, login_grace=LOGIN_GRACE_S)
    carol = alone.add("10.0.0.1", handle=None, now=0.0)
    carol.started = True
    assert alone.victim("10.0.0.9", now=GRACE_S + 0.5) is None  # 1 = 0 + 1, but her login is in progress
    assert alone.victim("10.0.0.1", now=GRACE_S + 0.5) is None
    assert alone.victim("10.0.0.9", now=LOGIN_GRACE_S + 0.5) is carol  # a login stalled past the login grace


def test_the_hog_loses_its_oldest_and_cannot_win_it_back() -> None:
    pre = PreLogin(grace=GRACE_S)
    hog = [pre.add("10.0.0.9", handle=None, now=float(i)) for i in range(4)]
    victim = pre.victim("10.0.0.7", now=4.0)
    assert victim is hog[0]
    pre.evict(victim)
    assert victim.evicted and pre.held_by("10.0.0.9") == 3
    assert pre.victim("10.0.0.9", now=3.0) is None  # its own fresh ones: never
    assert pre.victim("10.0.0.9", now=100.0) is hog[1]  # its own stale one: a swap, not one more (s27 A14)
    pre.add("10.0.0.7", handle=None, now=4.0)
    assert pre.victim("10.0.0.7", now=4.0) is hog[1]  # 3 ≥ 1 + 2
    assert pre.victim("10.0.0.8", now=4.0) is hog[1]
    one_each = PreLogin(grace=GRACE_S)
    first = one_each.add("10.0.0.1", handle=None, now=0.0)
    one_each.add("10.0.0.2", handle=None, now=1.0)
    assert one_each.victim("10.0.0.3", now=GRACE_S) is None  # equal shares, nobody stale yet
    assert one_each.victim("10.0.0.3", now=GRACE_S + 0.5) is first


def test_an_ipv6_network_counts_as_its_64() -> None:
    pre = PreLogin()
    for i in range(3):
        pre.add(f"2001:db8:0:1::{i + 1}", handle=None, now=0.0)  # three addresses, one /64
    assert pre.held_by("2001:db8:0:1::ff") == 3
    assert pre.victim("2001:db8:0:1::77", now=0.0) is None  # the same /64: its own
    assert pre.victim("2001:db8:0:2::1", now=0.0) is not None


# --- the server, with real clients ---------------------------------------------------------------


@pytest.fixture(scope="module")
def policy(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Path:
    return build_policy(tmp_path_factory.mktemp("admission"), request.getfixturevalue("shared_data"), rows=100)


def _limits(**kwargs: object) -> ServerLimits:
    return ServerLimits(**{**FAST_BACKOFF, **kwargs})  # type: ignore[arg-type]


def _scram_first(user: str) -> bytes:
    first = b"n,,n=,r=" + b"x" * 24
    body = b"SCRAM-SHA-256\x00" + struct.pack("!i", len(first)) + first
    return b"p" + struct.pack("!i", len(body) + 4) + body


#: what an idle socket has sent when it stops: each stage of a login the server waits in
STAGES = {
    "nothing": b"",
    "half a header": b"\x00\x00\x00",
    "SSLRequest": struct.pack("!ii", 8, 80877103),
    "startup": startup_packet("alice"),
    "SCRAM first message": startup_packet("alice") + _scram_first("alice"),
}


def _hold(port: int, source: str, count: int, stage: bytes) -> list[socket.socket]:
    held = []
    for _ in range(count):
        s = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0))
        if stage:
            s.sendall(stage)
        held.append(s)
    time.sleep(0.3)  # the server has accepted them all
    return held


def _closed_by_server(sockets: list[socket.socket]) -> int:
    """How many of ``sockets`` the server has closed (it may have sent replies before)."""
    closed = 0
    for s in sockets:
        s.setblocking(False)
        try:
            while True:
                data = s.recv(65536)
                if not data:
                    closed += 1
                    break
        except BlockingIOError:
            pass
        except OSError:
            closed += 1
    return closed


def _login(port: int) -> str:
    try:
        with psycopg.connect(dsn(port), autocommit=True) as conn:
            return "ok" if conn.execute("SELECT 1").fetchone() == (1,) else "wrong answer"
    except psycopg.OperationalError as exc:
        return str(exc).strip()


@pytest.fixture
def served(policy: Path) -> Iterator[object]:
    with running_server(policy, limits=_limits(max_connections=12, auth_timeout=60)) as st:
        yield st


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_one_address_holding_every_slot_does_not_keep_others_out(served: object, stage: str) -> None:
    port, server = served.port, served.server  # type: ignore[attr-defined]
    hog = _hold(port, "127.0.0.2", 12, STAGES[stage])
    try:
        assert server.slots.total == 12
        extra = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=("127.0.0.2", 0))
        tag, payload = read_message(extra)  # the hog's next socket: refused, it cannot win a slot back
        extra.close()
        assert tag == b"E" and b"53300" in payload
        for _ in range(3):  # alice logs in (from 127.0.0.1), again and again
            assert _login(port) == "ok"
        assert server.slots.total <= 12
        time.sleep(0.2)
        assert 1 <= _closed_by_server(hog) <= 3  # at most one of the hog's per login of alice (none once one is free)
    finally:
        for s in hog:
            s.close()


def test_the_default_limits_hold_against_100_idle_sockets(policy: Path) -> None:
    with running_server(policy, limits=_limits()) as st:
        port = st.port  # type: ignore[attr-defined]
        assert _login(port) == "ok"
        hog = _hold(port, "127.0.0.2", 100, b"")
        try:
            assert _login(port) == "ok"
        finally:
            for s in hog:
                s.close()


def test_logged_in_connections_are_never_cut(policy: Path) -> None:
    with running_server(policy, limits=_limits(max_connections=3, max_connections_per_analyst=3)) as st:
        port = st.port  # type: ignore[attr-defined]
        conns = [psycopg.connect(dsn(port), autocommit=True) for _ in range(3)]
        try:
            newcomer = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=("127.0.0.2", 0))
            tag, payload = read_message(newcomer)
            assert tag == b"E" and b"53300" in payload
            newcomer.close()
            assert [c.execute("SELECT 1").fetchone() for c in conns] == [(1,)] * 3
        finally:
            for c in conns:
                c.close()


@pytest.mark.slow
def test_equal_shares_give_way_only_after_the_grace(policy: Path) -> None:
    """Three addresses with one idle socket each: a newcomer is refused while they are fresh (a
    login in progress is never cut) and takes the stalest one's slot past the grace."""
    with running_server(policy, limits=_limits(max_connections=3)) as st:
        port = st.port  # type: ignore[attr-defined]
        idle = [_hold(port, f"127.0.0.{i}", 1, b"")[0] for i in (2, 3, 4)]
        try:
            assert "too many clients" in _login(port)
            time.sleep(GRACE_S + 0.2)
            assert _login(port) == "ok"
            time.sleep(0.2)
            assert _closed_by_server(idle) == 1
            assert _closed_by_server(idle[:1]) == 1  # the oldest
        finally:
            for s in idle:
                s.close()


# --- after login: one analyst never holds every slot (red team s24 A3) -------------------------


@given(total=st.integers(1, 500), per=st.one_of(st.none(), st.integers(1, 600)), analysts=st.integers(1, 4))
def test_by_default_one_analyst_leaves_slots_for_the_others(total: int, per: int | None, analysts: int) -> None:
    """Each analyst logs in until refused, in turn: with the default per-analyst cap (half, at least
    one) the first never fills a server of two or more slots, and the second always gets in; an
    explicit cap is exactly what is allowed."""
    from veil.errors import TooManyConnections
    from veil.server.limits import ConnectionSlots

    limits = ServerLimits(max_connections=total, max_connections_per_analyst=per)
    slots = ConnectionSlots(limits)
    held = []
    for who in range(analysts):
        n = 0
        while True:
            try:
                slots.acquire(f"analyst{who}")
            except TooManyConnections:
                break
            n += 1
        held.append(n)
    cap = per if per is not None else max(1, total // 2)
    assert held[0] == min(cap, total)
    assert sum(held) == min(total, cap * analysts)
    if per is None and total >= 2:
        assert held[0] < total
        if analysts > 1:
            assert held[1] >= 1


@pytest.mark.parametrize("total", [2, 5, 6])
def test_one_analysts_logged_in_connections_leave_room_for_another(policy: Path, total: int) -> None:
    """alice opens connections (a pool, a loop) until the server refuses one, and keeps them: bob
    still logs in and is answered; alice's refusal (53300) names the per-analyst limit."""
    from tests.support.server import BOB_PASSWORD

    with running_server(policy, limits=_limits(max_connections=total)) as st:
        port = st.port  # type: ignore[attr-defined]
        held: list[psycopg.Connection] = []
        try:
            with pytest.raises(psycopg.OperationalError, match="too many connections for analyst 'alice'") as info:
                for _ in range(total):
                    held.append(psycopg.connect(dsn(port), autocommit=True))
            assert "max-connections-per-analyst" in str(info.value)  # the hint names the flag
            assert len(held) == max(1, total // 2)
            with psycopg.connect(dsn(port, user="bob", password=BOB_PASSWORD), autocommit=True) as bob:
                assert bob.execute("SELECT 1").fetchone() == (1,)
            assert [c.execute("SELECT 1").fetchone() for c in held] == [(1,)] * len(held)
        finally:
            for c in held:
                c.close()
