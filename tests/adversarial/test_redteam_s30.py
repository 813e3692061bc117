"""Red team, session 30: attacks on the publication and server fixes of sessions 28–29 (PATE's keyed split,
publication column checks, the DP grid, the bounded table-less executor, set_config, the public answer bound,
admission, the fair pools).

Part A holds attacks that succeed on 2026-11-27 (main at 24f9d13): each test FAILS today (the lead fixes the code;
nothing here is marked xfail). Part B holds probes of defences that held (regression tests). Findings (details in
each test's docstring):

* A1 (MEDIUM, availability) admission: the s28 A4 fix protects a "login in progress" for 10 s (``LOGIN_GRACE_S``)
  instead of 2 s, and a connection counts as one as soon as it has sent a *startup message* — which needs no
  credentials. So the s27 A14 lock-out is back, five times longer: anyone on the analysts' address (loopback, a jump
  host, a NAT) opens the free slots and sends ``StartupMessage(user=bob)`` on each, and every other analyst gets 53300
  for 10 s; reopening each socket before it is 10 s old keeps them out for as long as the attacker likes.
"""

from __future__ import annotations

import contextlib
import socket
import time
from pathlib import Path
from typing import Any

import pytest

# ==================================================================================================
# Part A — attacks that succeed today
# ==================================================================================================


@pytest.fixture
def two_logins(tmp_path: Path) -> Path:
    from tests.publish_support import make_warehouse
    from tests.support.attack import set_password

    policy = make_warehouse(tmp_path, n=40)
    set_password(policy, "bob")
    set_password(policy, "carol")
    return policy


def _serve(policy: Path, **limits: Any) -> Any:
    from tests.adversarial.test_redteam_s20 import _serve as serve

    return serve(policy, **limits)


# --- A1. A startup message (no credentials) makes an idle socket a protected "login in progress" for 10 s ----------


def _started_sockets(port: int, count: int, user: str = "bob", *, spread: bool = False) -> list[socket.socket]:
    """``count`` sockets that each sent a StartupMessage and got the server's AuthenticationSASL, then stall
    (``spread``: each from its own loopback address, 127.0.0.2, 127.0.0.3, …)."""
    from tests.support.server import read_message, startup_packet

    out = []
    for i in range(count):
        source = (f"127.0.0.{i + 2}", 0) if spread else None
        sock = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=source)
        sock.sendall(startup_packet(user))
        tag, _ = read_message(sock)
        assert tag == b"R", f"precondition: the server asks for a password (got {tag!r})"
        out.append(sock)
    return out


@pytest.mark.slow
def test_A1_startup_messages_without_credentials_cannot_lock_out_an_analyst_of_the_same_host(two_logins: Path) -> None:
    """MEDIUM (availability; s27 A14 again, through the s28 A4 fix) — interface: ``veil serve`` whose analysts
    connect from one address (loopback, a jump host, a notebook server, a NAT); here ``--max-connections 4`` (the
    same with 100: the attacker needs as many sockets as there are free slots).

    Attack: an outsider with no credentials (or bob, to keep carol out) opens every free slot from the shared address
    and sends a StartupMessage naming any existing user on each — the server answers AuthenticationSASL and waits.
    `veil/server/app.py` ``_serve_client`` sets ``waiting.started = True`` right after ``negotiate`` (the startup
    message), and `veil/server/admission.py` ``_stalest`` lets a newcomer of the same network evict such a "login in
    progress" only after ``LOGIN_GRACE_S`` = 10 s (an idle socket: 2 s). Measured: carol's login 2.5 s later gets
    ``53300 sorry, too many clients already``; she is let in only once a socket is 10 s old, and the attacker, who
    reopens each socket at 9 s, keeps every slot. Before s28's fix the same sockets were evictable after 2 s (s27
    A14's test sends no startup message, so it still passes). Root cause: the startup message is not progress that
    needs a credential — a login "in progress" is indistinguishable from an idle socket until the client answers
    the challenge. A correct system gives carol a slot here: e.g. protect at most one (or a few) logins in progress
    per claimed user name and network, or treat a login that has not answered the server's last message within the
    grace as idle (s28 A4's slow client answered; it was the outsider's *newcomers* that evicted it)."""
    from tests.adversarial.test_redteam_s20 import _login
    from tests.support.attack import PASSWORD

    with _serve(two_logins, max_connections=4, auth_timeout=30.0) as st:
        stalled = _started_sockets(st.port, 4)
        try:
            time.sleep(2.5)  # older than the admission's 2 s grace for idle sockets
            outcome = _login(st.port, "carol", PASSWORD)
        finally:
            for sock in stalled:
                with contextlib.suppress(OSError):
                    sock.close()
    assert outcome == "ok", f"4 stalled startup messages (no credentials) on 127.0.0.1; carol's login ended {outcome!r}"


@pytest.mark.slow
def test_A1b_startup_messages_from_many_addresses_cannot_lock_out_an_analyst(two_logins: Path) -> None:
    """A1 from distinct addresses: the outsider (no credentials) holds each slot from its own network (127.0.0.2 …
    127.0.0.5 here; on IPv6 every /64 of a /56 or /48 is a network) with one stalled StartupMessage. Carol, from
    127.0.0.1, holds none: `PreLogin.victim` finds no network holding 2 more than hers, and a network holding one
    more gives up a login in progress only after 10 s; ``_stalest`` likewise. Measured: 53300 at 2.5 s. The s20 A3
    defence (many sockets from one address) does not apply, and rotating each socket before 10 s keeps every
    analyst out. A correct system admits carol (see A1)."""
    from tests.adversarial.test_redteam_s20 import _login
    from tests.support.attack import PASSWORD

    with _serve(two_logins, max_connections=4, auth_timeout=30.0) as st:
        stalled = _started_sockets(st.port, 4, spread=True)
        try:
            time.sleep(2.5)
            outcome = _login(st.port, "carol", PASSWORD)
        finally:
            for sock in stalled:
                with contextlib.suppress(OSError):
                    sock.close()
    assert outcome == "ok", f"4 stalled startup messages from 4 addresses; carol's login ended {outcome!r}"


# ==================================================================================================
# Part B — defences that held (regression tests)
# ==================================================================================================


def _pate_world(tmp_path: Path, frame: Any) -> tuple[str, Any]:
    """``publish_pate`` (held-out student) on ``frame`` as table ``people``: ("ok", ε charged) or the error's class."""
    from tests.publish_support import POLICY, veil
    from veil.generators.pate import PateConfig
    from veil.generators.pate.release import publish_pate
    from veil.policy import load_policy

    (tmp_path / "policy.toml").write_text(POLICY.format(table_budget=""), encoding="utf-8")
    frame.to_csv(tmp_path / "people.csv", index=False)
    res = veil("ingest", "--policy", tmp_path / "policy.toml", "--table", "people", tmp_path / "people.csv")
    assert res.exit_code == 0, res.output
    config = PateConfig(teachers=5, queries=20, rho=0.5, seed=0, student_epochs=2, student_share=0.5)
    try:
        done = publish_pate(
            load_policy(tmp_path / "policy.toml"),
            table="people",
            label="income",
            output_model=tmp_path / "m.pt",
            features=["age", "hours", "sex"],
            config=config,
            validation=10,
        )
    except Exception as exc:  # the outcome itself is what is compared
        return type(exc).__name__, None
    return "ok", done.epsilon


@pytest.mark.parametrize("world", ["one row", "no known label", "one class", "one odd label", "huge ages"])
def test_B1_pate_outcome_and_charge_do_not_depend_on_the_rows(tmp_path: Path, world: str) -> None:
    """PATE with a held-out student publishes, and charges the same ε, from 40 ordinary rows, one row, rows whose
    labels are all NULL or one class, one undeclared label, or ages beyond the declared bound (keyed split, empty
    teachers abstain, fillers make up ``--queries``): no refusal or error is a membership or value oracle."""
    from tests.publish_support import people

    base = people(40)
    frame = {
        "one row": base.head(1),
        "no known label": base.assign(income=None),
        "one class": base.assign(income="low"),
        "one odd label": base.assign(income=["low"] * 39 + ["HIGH"]),
        "huge ages": base.assign(age=10**15),
    }[world]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    assert _pate_world(tmp_path / "a", base) == _pate_world(tmp_path / "b", frame)


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("SELECT ROUND(5, -30000000)", [(0,)]),
        ("SELECT ROUND(5.5, 9223372036854775807)", [(5.5,)]),
        ("SELECT CAST('1e400' AS DOUBLE PRECISION)", "22003"),
        ("SELECT -9223372036854775808 / -1", "22003"),
        ("SELECT 2 ^ 0.5 ^ 1e300", "22003"),
    ],
)
def test_B2_table_less_numbers_stay_bounded(sql: str, expected: Any) -> None:
    """The bounded executor (``veil/server/bounded.py``): ROUND's digits clamped, casts and powers typed 22003."""
    from tests.server.test_bounded_eval import _evaluate

    started = time.process_time()
    assert _evaluate(sql) == expected
    assert time.process_time() - started < 1.0
