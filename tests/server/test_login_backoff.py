"""The login backoff of ``veil serve`` (red team s16, A7): failures count per (address, user) pair,
per user across addresses and per address; attempts in flight count, so parallel guesses each
wait their own turn; one user's success never clears another's failures; memory is bounded; an
unknown user waits exactly as a known one.

First the rules, on both stores (this process's :class:`LoginThrottle` and the shared-memory
:class:`SharedLoginThrottle` of ``--processes N``) with the clock passed in; then the server, with
real clients (psycopg, and a hand-written client that can pick its loopback source address).
"""

from __future__ import annotations

import ctypes
import multiprocessing
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.server import BOB_PASSWORD, PASSWORD, build_policy, dsn, raw_login, running_server, startup_packet
from veil.server.limits import LoginBackoff, LoginThrottle, LoginTicket, Outcome, ServerLimits
from veil.server.shared import SharedLoginThrottle, SharedState

Make = Callable[..., LoginBackoff]


def _gap(v: int, base: float, maximum: float) -> float:
    """The rule: the wait after ``v`` failures (or attempts in flight) on a key."""
    return 0.0 if v < 2 else min(maximum, base * 2 ** (v - 2))


@pytest.fixture(scope="module")
def _shared_state() -> Iterator[SharedState]:
    state = SharedState(multiprocessing.get_context("spawn"), ServerLimits())
    yield state
    state.close_lock()


@pytest.fixture(scope="module")
def _tiny_state() -> Iterator[SharedState]:
    """Shared tables of 8 slots (2 buckets): nearly every new key forgets another."""
    state = SharedState(multiprocessing.get_context("spawn"), ServerLimits(), throttle_slots=8)
    yield state
    state.close_lock()


@pytest.fixture(scope="module")
def _small_state() -> Iterator[SharedState]:
    state = SharedState(multiprocessing.get_context("spawn"), ServerLimits(), throttle_slots=256)
    yield state
    state.close_lock()


@pytest.fixture(params=["process", "shared"])
def make(request: pytest.FixtureRequest, _shared_state: SharedState) -> Make:
    """A fresh throttle of either store (the shared one's table is wiped each time)."""

    def build(**kwargs: float) -> LoginBackoff:
        if request.param == "process":
            return LoginThrottle(**kwargs)  # type: ignore[arg-type]
        _wipe(_shared_state)
        kwargs.pop("capacity", None)
        return SharedLoginThrottle(_shared_state, **kwargs)  # type: ignore[arg-type]

    return build


def _wipe(state: SharedState) -> None:
    for table in (state.failures, state.trusted, state.overflow):
        ctypes.memset(ctypes.addressof(table), 0, ctypes.sizeof(table))


def _fail(throttle: LoginBackoff, address: str, user: str, now: float) -> int:
    wait, ticket = throttle.try_admit(address, user, now=now)
    assert ticket is not None, f"{user}@{address} not admitted at {now}: wait {wait}"
    return throttle.finish(ticket, Outcome.FAILED, now=now)


def _ok(throttle: LoginBackoff, address: str, user: str, now: float) -> None:
    wait, ticket = throttle.try_admit(address, user, now=now)
    assert ticket is not None, f"{user}@{address} not admitted at {now}: wait {wait}"
    throttle.finish(ticket, Outcome.OK, now=now)


# --- the rules ---------------------------------------------------------------------------------


def test_backoff_doubles_per_failure_and_is_capped(make: Make) -> None:
    throttle = make(base=0.25, maximum=2.0)
    waits = []
    for n in range(1, 8):
        assert _fail(throttle, "a", "carol", now=100.0 * n) == n
        waits.append(throttle.delay("a", "carol", now=100.0 * n))
    assert waits == [_gap(n, 0.25, 2.0) for n in range(1, 8)] == [0, 0.25, 0.5, 1.0, 2.0, 2.0, 2.0]
    assert throttle.delay("a", "carol", now=700 + 1.5) == pytest.approx(0.5)  # the wait runs from the last failure
    assert throttle.try_admit("a", "carol", now=700 + 1.5) == (pytest.approx(0.5), None)  # not admitted, not counted
    assert throttle.delay("b", "dave", now=700) == 0  # another user from another address is not slowed
    many = make(base=1.0, maximum=8.0)
    for n in range(200):  # no overflow, however many
        _fail(many, "a", "carol", now=10.0 * n)
    assert many.delay("a", "carol", now=1990.0) == 8.0


def test_a_success_clears_only_its_own_pair(make: Make) -> None:
    """bob guesses carol's password from his own address and logs in as himself after each guess:
    carol's wait still doubles. bob's success marks (address, bob) trusted: bob is not slowed by
    the failures counted on his address."""
    throttle = make(base=0.25, maximum=30.0)
    for n in range(1, 7):
        now = 100.0 * n
        _fail(throttle, "a", "carol", now=now)
        _ok(throttle, "a", "bob", now=now + 1)
        assert throttle.delay("a", "bob", now=now + 1) == 0
    assert throttle.delay("a", "carol", now=601.0) == pytest.approx(_gap(6, 0.25, 30) - 1)  # 4 s after the last failure
    assert throttle.delay("b", "carol", now=600.0) == _gap(6, 0.25, 30)  # carol's count, from any address
    assert throttle.delay("a", "dave", now=600.0) == _gap(6, 0.25, 30)  # the address's count, for any new user
    # carol's own success clears her pair (and trusts it) but neither her count elsewhere nor the address's
    throttle = make(base=0.25, maximum=30.0)
    for n in range(3):
        _fail(throttle, "a", "carol", now=100.0 * n)
    _ok(throttle, "a", "carol", now=300.0)
    assert throttle.delay("a", "carol", now=300.0) == 0
    assert throttle.delay("b", "carol", now=300.0) == _gap(3, 0.25, 30)  # from her last admission
    assert throttle.delay("b", "dave", now=300.0) == 0
    assert throttle.delay("a", "dave", now=300.0) == _gap(3, 0.25, 30)


def test_an_ipv6_client_counts_as_its_64(make: Make) -> None:
    """A host holds a whole IPv6 /64: new addresses in it are the same client (pair and address);
    another /64 is another client. IPv4-mapped addresses are their IPv4 address."""
    throttle = make(base=1.0, maximum=30.0)
    for i in range(3):
        _fail(throttle, f"2001:db8:0:1::{i + 1:x}", f"user{i}", now=10.0 * i)  # 3 users, 3 addresses
    assert throttle.delay("2001:db8:0:1:ffff::9", "dave", now=20.0) == 2.0  # the /64's count
    assert throttle.delay("2001:db8:0:2::1", "dave", now=20.0) == 0
    for i in range(3):
        _fail(throttle, "::ffff:10.0.0.7" if i % 2 else "10.0.0.7", "erin", now=10.0 * i)
    assert throttle.delay("10.0.0.7", "erin", now=20.0) == throttle.delay("::ffff:10.0.0.7", "erin", now=20.0) == 2.0


def test_attempts_in_flight_each_wait_their_turn(make: Make) -> None:
    throttle = make(base=1.0, maximum=30.0)
    tickets = [throttle.try_admit("a", "carol", now=0.0) for _ in range(4)]  # no failures yet, 4 at once
    assert [t is not None for _, t in tickets] == [True, True, False, False]  # in flight, each counts as a failure
    assert [w for w, _ in tickets] == [0, 0, 1.0, 1.0]
    for _, ticket in tickets[:2]:
        assert ticket is not None
        throttle.finish(ticket, Outcome.FAILED, now=0.5)
    assert throttle.try_admit("b", "carol", now=1.4) == (pytest.approx(0.1), None)  # carol's count, from anywhere
    wait, third = throttle.try_admit("a", "carol", now=1.5)
    assert third is not None and wait == 0
    # in flight, it counts as a failure: the next waits 2 s from its admission, from any address
    assert throttle.delay("a", "carol", now=1.5) == throttle.delay("b", "carol", now=1.5) == 2.0
    assert throttle.try_admit("a", "carol", now=3.4)[1] is None
    throttle.finish(third, Outcome.FAILED, now=1.6)
    assert throttle.delay("a", "carol", now=1.6) == 2.0  # 3 failures: 2 s after the last


def test_parallel_attempts_that_succeed_go_ahead_at_once(make: Make) -> None:
    """A connection pool opening 8 connections at once: two are admitted at a time (attempts in
    flight count), each pair as soon as the previous ones succeeded, never after a backoff wait."""
    throttle = make(base=0.25, maximum=30.0)
    now, admitted, rounds = 0.0, 0, 0
    while admitted < 8:
        tickets = [t for _ in range(8 - admitted) if (t := throttle.try_admit("a", "alice", now=now)[1]) is not None]
        assert len(tickets) == min(2, 8 - admitted), (now, len(tickets))
        admitted, rounds = admitted + len(tickets), rounds + 1
        for ticket in tickets:
            throttle.finish(ticket, Outcome.OK, now=now + 0.01)
        now += 0.05  # the next poll of the waiting ones
    assert rounds == 4


def test_an_attempt_that_made_no_guess_costs_nothing(make: Make) -> None:
    throttle = make(base=1.0, maximum=30.0)
    for _ in range(10):  # psql's first try without a password, or a client that hangs up before its proof
        _wait, ticket = throttle.try_admit("a", "alice", now=0.0)
        assert ticket is not None
        throttle.finish(ticket, Outcome.NO_GUESS, now=0.0)
    assert throttle.delay("a", "alice", now=0.0) == 0
    assert throttle.delay("b", "alice", now=0.0) == 0


def test_failures_are_forgotten_after_a_quiet_period(make: Make) -> None:
    throttle = make(base=1.0, maximum=30.0, forget_after=60.0)
    for n in range(5):
        _fail(throttle, "a", "carol", now=float(n * 10))
    assert throttle.delay("a", "carol", now=41.0) == 7.0
    assert throttle.delay("a", "carol", now=40.0 + 61) == 0
    # an attempt in flight left behind (its worker died) stops counting too
    stuck = make(base=1.0, maximum=30.0, forget_after=60.0)
    for _ in range(2):
        assert stuck.try_admit("a", "carol", now=0.0)[1] is not None
    assert stuck.delay("a", "carol", now=30.0) == 0  # 1 s after the second admission: past
    assert stuck.try_admit("a", "carol", now=0.0)[1] is None
    assert stuck.delay("a", "carol", now=61.0) == 0 and stuck.try_admit("a", "carol", now=61.0)[1] is not None


def test_memory_is_bounded_and_forgetting_keeps_the_penalty() -> None:
    """1000 (address, user) pairs failing twice each in a table of 60 keys: the table stays at 60
    and the first pair, long forgotten, still waits as much as the last (its penalty went to the
    overflow slots); only the quiet period (900 s) clears it."""
    throttle = LoginThrottle(base=1.0, maximum=30.0, capacity=60, forget_after=1e6)
    for i in range(1000):  # 1000 pairs, users and addresses, 3 keys each; far enough apart that a key
        # sharing an overflow slot with an earlier one (it waits as long as that one would) is admitted
        _fail(throttle, f"10.0.{i // 256}.{i % 256}", f"user{i}", now=40.0 * i)
        _fail(throttle, f"10.0.{i // 256}.{i % 256}", f"user{i}", now=40.0 * i + 20)
    assert len(throttle) <= 60
    end = 40.0 * 999 + 20
    assert throttle.delay("10.0.3.231", "user999", now=end) == 1.0  # the last one, in the table
    assert throttle.delay("10.0.0.0", "user0", now=20.5) >= 0.5  # the first: forgotten, not forgiven
    assert throttle.delay("10.0.0.0", "user0", now=end + 1e6 + 1) == 0  # after the quiet period


# --- red team s20 A7: a flood of fresh keys must not reset anyone's wait -----------------------------

#: the victims a flood could try to reset: a user guessed at from many addresses (the user key), an
#: address guessing many users (the address key), one (address, user) pair, and a trusted pair
#: guessed at from its own address (its failures count on the pair only)
VICTIMS = ["user", "address", "pair", "trusted pair"]


def _penalise(throttle: LoginBackoff, victim: str, now: float) -> tuple[str, str, float]:
    """Make ``victim`` wait ~30 s; returns the (address, user) probe and the time."""
    for i in range(12):
        address, user = {
            "user": (f"198.51.100.{i + 1}", "alice"),
            "address": ("203.0.113.9", f"user{i}"),
            "pair": ("203.0.113.10", "alice"),
            "trusted pair": ("203.0.113.11", "alice"),
        }[victim]
        if victim == "trusted pair" and i == 0:
            _ok(throttle, address, user, now=now)
        now += throttle.delay(address, user, now=now)
        _fail(throttle, address, user, now=now)
    probe = {
        "user": ("2001:db8:ffff:1::1", "alice"),
        "address": ("203.0.113.9", "someone-new"),
        "pair": ("203.0.113.10", "alice"),
        "trusted pair": ("203.0.113.11", "alice"),
    }[victim]
    return probe[0], probe[1], now


@pytest.mark.parametrize("store", ["process", "shared"])
@pytest.mark.parametrize("victim", VICTIMS)
@pytest.mark.parametrize("flood", ["fresh /64s and names", "one /48, one name each", "fresh names from one /64"])
def test_a_flood_of_fresh_keys_never_shortens_a_wait(store: str, victim: str, flood: str, _small_state: SharedState) -> None:
    """Red team s20 A7: junk attempts with fresh keys (each fails once) fill the bounded table
    (here 300 keys in one process, 256 shared slots; the red team's test floods the real sizes)
    many times over. The victim's wait before
    the flood never gets shorter; a trusted pair stays trusted (bob logs in at once from his
    address, whatever his user key counts)."""
    if store == "process":
        throttle: LoginBackoff = LoginThrottle(base=0.25, maximum=30.0, capacity=300)
    else:
        _wipe(_small_state)
        throttle = SharedLoginThrottle(_small_state, base=0.25, maximum=30.0)
    _ok(throttle, "192.0.2.1", "bob", now=0.0)
    for i in range(6):  # bob's name is guessed at from elsewhere: his user key waits
        _fail(throttle, f"192.0.2.{100 + i}", "bob", now=float(i * 40))
    address, user, now = _penalise(throttle, victim, 1_000.0)
    before = throttle.delay(address, user, now=now)
    assert before >= 25.0, before
    for i in range(3_000):
        junk_address, junk_user = {
            "fresh /64s and names": (f"2001:db8:{i >> 16:x}:{i & 0xFFFF:x}::1", f"x{i}"),
            "one /48, one name each": (f"2001:db8:7:{i:x}::1", f"x{i % 5000}"),
            "fresh names from one /64": ("2001:db8:8:1::1", f"x{i}"),
        }[flood]
        _wait, ticket = throttle.try_admit(junk_address, junk_user, now=now)
        if ticket is not None:
            throttle.finish(ticket, Outcome.FAILED, now=now)
    assert throttle.delay(address, user, now=now) >= before
    assert throttle.delay("192.0.2.1", "bob", now=now) == 0  # trust is never pushed out by failures


# Hypothesis: whatever a crowd does (many addresses, attempts in parallel, other users logging in
# and failing, clients leaving before their proof), the k-th password of carol (who never logs in)
# is checked no sooner than base·2^(k−3) (at most `maximum`) after the (k−1)-th.

_ADDRESSES = ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"]
_event = st.one_of(
    st.tuples(st.just("arrive"), st.sampled_from(_ADDRESSES), st.sampled_from(["carol", "bob", "dave", "x1", "x2", "x3"])),
    st.tuples(st.just("end"), st.integers(0, 50), st.sampled_from(list(Outcome))),
    st.tuples(st.just("tick"), st.floats(0.0, 3.0), st.just(None)),
)


@pytest.mark.parametrize("kind", ["process", "shared", "process, 4 keys", "shared, 8 slots"])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=st.lists(_event, max_size=120))
def test_carols_guesses_are_spaced_whatever_the_crowd_does(
    kind: str, events: list[tuple[str, object, object]], _shared_state: SharedState, _tiny_state: SharedState
) -> None:
    base, maximum = 0.25, 2.0
    if kind == "process":
        throttle: LoginBackoff = LoginThrottle(base=base, maximum=maximum)
    elif kind == "process, 4 keys":  # every new key forgets another (red team s20 A7)
        throttle = LoginThrottle(base=base, maximum=maximum, capacity=4)
    elif kind == "shared":
        _wipe(_shared_state)
        throttle = SharedLoginThrottle(_shared_state, base=base, maximum=maximum)
    else:
        _wipe(_tiny_state)
        throttle = SharedLoginThrottle(_tiny_state, base=base, maximum=maximum)
    now = 0.0
    waiting: list[tuple[str, LoginTicket, float]] = []
    guesses: list[float] = []  # when each of carol's checked passwords was admitted
    for what, a, b in events:
        if what == "tick":
            now += float(a)  # type: ignore[arg-type]
        elif what == "arrive":
            _, ticket = throttle.try_admit(str(a), str(b), now=now)
            if ticket is not None:
                waiting.append((str(b), ticket, now))
        elif waiting:
            user, ticket, admitted = waiting.pop(int(a) % len(waiting))  # type: ignore[call-overload]
            outcome = b if user != "carol" or b is not Outcome.OK else Outcome.FAILED  # carol never gets in
            throttle.finish(ticket, outcome, now=now)  # type: ignore[arg-type]
            if user == "carol" and outcome is Outcome.FAILED:
                guesses.append(admitted)
    guesses += [admitted for user, _, admitted in waiting if user == "carol"]  # in flight: checked later
    guesses.sort()
    for k in range(2, len(guesses)):
        assert guesses[k] - guesses[k - 1] >= _gap(k, base, maximum) - 1e-9, (k, guesses)


# --- the server, with real clients ---------------------------------------------------------------


@pytest.fixture(scope="module")
def policy(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Path:
    return build_policy(tmp_path_factory.mktemp("backoff"), request.getfixturevalue("shared_data"), rows=100)


def _limits(base: float, maximum: float, **kwargs: float) -> ServerLimits:
    return ServerLimits(login_backoff_base=base, login_backoff_max=maximum, **kwargs)  # type: ignore[arg-type]


def _psycopg_login(port: int, user: str, password: str) -> tuple[str, float]:
    """("ok" | "bad password" | the error), seconds until the server answered."""
    t0 = time.monotonic()
    try:
        psycopg.connect(dsn(port, user, password, connect_timeout="20")).close()
        out = "ok"
    except psycopg.OperationalError as exc:
        out = "bad password" if "password authentication failed" in str(exc) else str(exc)
    return out, time.monotonic() - t0


def _raw(port: int, user: str, password: str, source: str) -> tuple[str, float]:
    t0 = time.monotonic()
    sock, sqlstate = raw_login(port, user, password, source=source, timeout=20)
    if sock is not None:
        sock.close()
    return ("ok" if sock is not None else "bad password" if sqlstate == "28P01" else str(sqlstate)), time.monotonic() - t0


@pytest.mark.slow
def test_own_logins_between_guesses_do_not_reset_the_backoff(policy: Path) -> None:
    """bob guesses alice's password with psycopg, logging in as himself after each guess: alice's
    waits still double (0, 0, 0.2, 0.4, 0.8 s), bob's own logins are not slowed."""
    with running_server(policy, limits=_limits(0.2, 1.6)) as st:
        port = st.port  # type: ignore[attr-defined]
        guesses, own = [], []
        for i in range(5):
            guesses.append(_psycopg_login(port, "alice", f"wrong-guess-{i}"))
            own.append(_psycopg_login(port, "bob", BOB_PASSWORD))
    assert [g[0] for g in guesses] == ["bad password"] * 5 and [o[0] for o in own] == ["ok"] * 5, (guesses, own)
    assert guesses[3][1] >= 0.35 and guesses[4][1] >= 0.75, guesses
    assert max(t for _, t in own) < 0.6, own  # trusted pair: alice's failures on the address do not slow bob


@pytest.mark.slow
def test_parallel_guesses_each_wait_their_own_turn(policy: Path) -> None:
    """After 2 failures, 8 parallel psycopg guesses are answered one after another, each after its own
    wait (0.1, 0.2, 0.4, 0.4, … s), not all after one."""
    base, maximum = 0.1, 0.4
    with running_server(policy, limits=_limits(base, maximum, auth_timeout=20)) as st:
        port = st.port  # type: ignore[attr-defined]
        assert [_psycopg_login(port, "alice", f"seq-{i}")[0] for i in range(2)] == ["bad password"] * 2
        results: list[tuple[str, float]] = [("not run", 0.0)] * 8
        t0 = time.monotonic()

        def go(i: int) -> None:
            out, _ = _psycopg_login(port, "alice", f"par-{i}")
            results[i] = (out, time.monotonic() - t0)

        threads = [threading.Thread(target=go, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    assert [r[0] for r in results] == ["bad password"] * 8, results
    answered = sorted(t for _, t in results)
    due = [sum(_gap(v, base, maximum) for v in range(2, 3 + k)) for k in range(8)]  # 0.1, 0.3, 0.7, 1.1, …
    assert all(a >= d - 0.05 for a, d in zip(answered, due, strict=True)), list(zip(answered, due, strict=True))


@pytest.mark.slow
def test_a_pool_of_parallel_logins_is_not_slowed(policy: Path) -> None:
    """8 psycopg connections of alice opened at once (a connection pool starting) all get in
    promptly with the default backoff: attempts in flight wait only until the first ones succeed."""
    with running_server(policy, limits=ServerLimits()) as st:
        port = st.port  # type: ignore[attr-defined]
        results: list[tuple[str, float]] = [("not run", 0.0)] * 8

        def go(i: int) -> None:
            results[i] = _psycopg_login(port, "alice", PASSWORD)

        threads = [threading.Thread(target=go, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    assert [r[0] for r in results] == ["ok"] * 8, results
    assert max(t for _, t in results) < 1.5, results  # one after another with backoff: 0.25 + 0.5 + … ≥ 15 s


@pytest.mark.slow
def test_a_user_is_slowed_across_addresses_but_not_locked_out(policy: Path) -> None:
    """Guesses at alice from five loopback addresses, one each: her count is shared (waits 0, 0,
    0.1, 0.2, 0.4 s). Meanwhile alice logs in at once from the address she used before, bob from a
    new address is not slowed, and alice from a new address gets in within the cap."""
    with running_server(policy, limits=_limits(0.1, 0.8)) as st:
        port = st.port  # type: ignore[attr-defined]
        assert _raw(port, "alice", PASSWORD, "127.0.0.1")[0] == "ok"  # her usual address
        guesses = [_raw(port, "alice", f"wrong-{i}", f"127.0.0.{10 + i}") for i in range(5)]
        own = _raw(port, "alice", PASSWORD, "127.0.0.1")
        other = _raw(port, "bob", BOB_PASSWORD, "127.0.0.20")
        new = _raw(port, "alice", PASSWORD, "127.0.0.21")
    assert [g[0] for g in guesses] == ["bad password"] * 5, guesses
    assert guesses[3][1] >= 0.15 and guesses[4][1] >= 0.35, guesses
    assert own[0] == "ok" and own[1] < 0.6, own
    assert other[0] == "ok" and other[1] < 0.6, other
    assert new[0] == "ok" and new[1] < 0.8 + 1.0, new


@pytest.mark.slow
def test_unknown_and_known_users_wait_the_same(policy: Path) -> None:
    """Five wrong guesses each at alice (known), carol (in the policy, no login) and mallory (no such
    analyst), each from its own address: the waits match attempt by attempt."""
    users = {"alice": "127.0.0.31", "carol": "127.0.0.32", "mallory": "127.0.0.33"}
    with running_server(policy, limits=_limits(0.1, 0.8)) as st:
        port = st.port  # type: ignore[attr-defined]
        took: dict[str, list[float]] = {u: [] for u in users}
        for user, source in users.items():
            for i in range(5):
                out, t = _raw(port, user, f"wrong-{i}", source)
                assert out == "bad password", (user, out)
                took[user].append(t)
    for user in users:
        assert took[user][4] >= 0.35, took
        for i in range(5):
            assert abs(took[user][i] - took["alice"][i]) < 0.2, took


@pytest.mark.slow
def test_hanging_up_before_the_proof_costs_nothing(policy: Path) -> None:
    """A client that leaves after the server's SCRAM request, before sending a proof (libpq does so
    when it has no password yet), made no guess: 6 such visits leave the next login unslowed."""
    with running_server(policy, limits=_limits(0.2, 1.6)) as st:
        port = st.port  # type: ignore[attr-defined]
        for _ in range(6):
            with socket.create_connection(("127.0.0.1", port), timeout=10, source_address=("127.0.0.41", 0)) as sock:
                sock.sendall(startup_packet("alice"))
                assert sock.recv(1) == b"R"  # AuthenticationSASL: admitted; now hang up
        out, took = _raw(port, "alice", "wrong", "127.0.0.41")
        assert out == "bad password" and took < 0.5, (out, took)  # 6 counted failures would wait 1.6 s
        ok, took_ok = _raw(port, "alice", PASSWORD, "127.0.0.41")
        assert ok == "ok" and took_ok < 0.5, (ok, took_ok)
