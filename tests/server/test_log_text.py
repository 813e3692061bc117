"""``veil serve``'s log lines about clients are bounded (red team s73 F4): every argument clipped, the lines a client
can cause without logging in rate-limited per client network (``veil.server.logtext``)."""

from __future__ import annotations

import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from veil.server import app, auth, connection, results, session, workers
from veil.server.logtext import BURST, MAX_ARG_CHARS, REFILL_S, ClipClientText, clip, outsider


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _record(msg: str, *args: object, peer: str | None = None) -> logging.LogRecord:
    rec = logging.LogRecord("veil.server", logging.INFO, __file__, 1, msg, args, None)
    if peer is not None:
        for k, v in outsider(peer).items():
            setattr(rec, k, v)
    return rec


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=5_000))
def test_a_clipped_argument_is_short_and_one_line(text: str) -> None:
    out = clip(text)
    assert len(out) <= MAX_ARG_CHARS + 20
    assert "\n" not in out and "\r" not in out
    if len(text) <= MAX_ARG_CHARS and text.isprintable():
        assert out == text


@pytest.mark.parametrize("module", [app, auth, connection, results, session, workers])
def test_every_server_module_logs_through_the_filter(module: object) -> None:
    """By construction: each module's logger is ``veil.server`` with the filter on it."""
    logger = module.logger  # type: ignore[attr-defined]
    assert logger.name == "veil.server"
    assert any(isinstance(f, ClipClientText) for f in logger.filters)


def test_every_string_argument_is_clipped() -> None:
    f = ClipClientText()
    rec = _record("login for user %r from %s: %s (%d)", "u" * 9_900, "10.0.0.1", "x" * 50, 7)
    assert f.filter(rec)
    line = rec.getMessage()
    assert len(line) < 3 * MAX_ARG_CHARS and "(+9700 chars)" in line and line.endswith("(7)")


def test_outsider_lines_are_rate_limited_per_network_and_the_gap_is_reported() -> None:
    clock = _Clock()
    f = ClipClientText(clock=clock)
    passed = [f.filter(_record("abandoned %s", str(i), peer="10.0.0.1")) for i in range(200)]
    assert sum(passed) == BURST and all(passed[:BURST])
    # another network is not starved by the first, nor are lines logged after a login (no outsider mark)
    assert f.filter(_record("abandoned", peer="10.0.0.2"))
    assert all(f.filter(_record("query %s", str(i))) for i in range(100))
    # an IPv6 /64 is one network: its hosts share one bucket
    six = [f.filter(_record("x", peer=f"2001:db8::{i:x}")) for i in range(100)]
    assert sum(six) == BURST
    clock.now += REFILL_S
    rec = _record("abandoned again", peer="10.0.0.1")
    assert f.filter(rec)
    assert f"[{200 - BURST} earlier lines from this network not logged]" in rec.getMessage()
    assert not f.filter(_record("abandoned", peer="10.0.0.1"))  # one token per REFILL_S


def test_a_flood_of_networks_shares_one_bucket() -> None:
    from veil.server import logtext

    clock = _Clock()
    f = ClipClientText(clock=clock)
    passed = sum(
        f.filter(_record("x", peer=f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}")) for i in range(logtext.MAX_NETWORKS + 500)
    )
    assert passed <= logtext.MAX_NETWORKS + BURST


def test_the_server_wide_bucket_bounds_many_networks_and_forgotten_drops_are_told() -> None:
    """Review s23 Y4/Y7: outsiders holding many networks share one server-wide bucket (GLOBAL_BURST, then
    GLOBAL_RATE a second); a network forgotten (least recently used) has its dropped lines told with a later line."""
    from veil.server import logtext

    clock = _Clock()
    f = ClipClientText(clock=clock)
    passed = sum(f.filter(_record("x", peer=f"2001:db8:0:{i:x}::1")) for i in range(3 * logtext.MAX_NETWORKS))
    assert passed == logtext.GLOBAL_BURST
    clock.now += 10.0
    records = [_record("x", peer=f"2001:db8:1:{i:x}::1") for i in range(1000)]
    logged = [r for r in records if f.filter(r)]
    assert len(logged) == int(10.0 * logtext.GLOBAL_RATE)
    assert "lines from other networks not logged]" in logged[0].getMessage()


def test_each_server_limits_its_own_outsiders() -> None:
    """The buckets are each server's (``VeilServer.log_limiter``), not the process's: a process running several
    servers (tests do) does not drop one server's failed-login lines for another's outsiders (CI, session 23)."""
    from veil.server.logtext import ClipClientText, outsider

    logger_filter, first, second = ClipClientText(), ClipClientText(), ClipClientText()

    def line(limiter: ClipClientText) -> logging.LogRecord:
        rec = logging.LogRecord("veil.server", logging.WARNING, __file__, 1, "failed login", (), None)
        for k, v in outsider("127.0.0.1", limiter).items():
            setattr(rec, k, v)
        return rec

    assert sum(logger_filter.filter(line(first)) for _ in range(500)) == BURST
    assert all(logger_filter.filter(line(second)) for _ in range(BURST))


# --- a logged-in analyst's lines (red team s75 F3) --------------------------------------------------------------------


def test_lines_in_a_logged_in_context_pass_the_analysts_bucket() -> None:
    """After :func:`logged_in` in a context, every line there passes that analyst's bucket of the analysts' limiter
    (its own rates, apart from the outsiders'); another analyst's context has its own; a context without a login is
    not limited; dropped lines are told with the next line logged."""
    import contextvars

    from veil.server.logtext import ANALYST_BURST, ANALYST_REFILL_S, analysts_limiter, logged_in

    clock = _Clock()
    logger_filter, limiter = ClipClientText(), analysts_limiter()
    limiter._clock = clock
    limiter._global[1] = clock.now

    def lines(n: int) -> list[logging.LogRecord]:
        out = []
        for _ in range(n):
            rec = logging.LogRecord("veil.server", logging.WARNING, __file__, 1, "08P01: malformed Bind message", (), None)
            if logger_filter.filter(rec):
                out.append(rec)
        return out

    alice, bob = contextvars.copy_context(), contextvars.copy_context()
    alice.run(logged_in, "alice", limiter)
    bob.run(logged_in, "bob", limiter)
    assert len(alice.run(lines, 1_000)) == ANALYST_BURST
    assert len(bob.run(lines, 10)) == 10  # another analyst's bucket
    assert len(lines(100)) == 100  # no login in this context: not an analyst's line
    clock.now += ANALYST_REFILL_S
    (told,) = alice.run(lines, 5)
    assert f"[{1_000 - ANALYST_BURST} earlier lines from this analyst not logged]" in told.getMessage()


_MALFORMED = {
    # a Bind of the unnamed statement cut short (08P01), after a Parse of it
    "short bind": lambda m: m(b"P", b"\x00SELECT 1\x00\x00\x00") + m(b"B", b"\x00\x00\x00\x00\x00\x01\x00\x00"),
    # a Parse whose text is not UTF-8 (22021)
    "invalid utf-8": lambda m: m(b"P", b"\x00SELECT '\xff\xfe'\x00\x00\x00"),
    # a Bind with more parameters than the statement has (08P01)
    "extra parameters": lambda m: (
        m(b"P", b"\x00SELECT 1\x00\x00\x00") + m(b"B", b"\x00\x00\x00\x00\x00\x01\x00\x00\x00\x01x\x00\x00")
    ),
}


@pytest.mark.parametrize("kind", list(_MALFORMED))
def test_a_logged_in_analyst_cannot_grow_the_log_at_will(
    kind: str, shared_data: object, tmp_path: object, caplog: pytest.LogCaptureFixture
) -> None:
    """300 malformed messages from one logged-in connection are each answered, and logged in at most the analyst's
    burst of lines plus what refills meanwhile; another analyst's next line is still logged (before: one line each,
    3,068 a second from one connection)."""
    from pathlib import Path

    from tests.support.server import PASSWORD, SYNC, build_policy, message, raw_exchange, raw_login, running_server
    from veil.server.logtext import ANALYST_BURST

    policy = build_policy(Path(str(tmp_path)), shared_data, rows=50)  # type: ignore[arg-type]
    with running_server(policy) as st_, caplog.at_level(logging.WARNING, logger="veil.server"):
        sock, err = raw_login(st_.port, "alice", PASSWORD)  # type: ignore[attr-defined]
        other, err2 = raw_login(st_.port, "bob", "bob-secret-pw-1")  # type: ignore[attr-defined]
        assert sock is not None and other is not None, (err, err2)
        try:
            caplog.clear()
            bad = _MALFORMED[kind](message) + SYNC
            sock.sendall(bad * 300)
            errors = 0
            for _ in range(300):
                errors += sum(tag == b"E" for tag, _ in raw_exchange(sock))
            mine = [r for r in caplog.records if "alice@" in r.getMessage()]
            assert not [r for r in caplog.records if "bob@" in r.getMessage()]
            raw_exchange(other, bad)
            theirs = [r for r in caplog.records if "bob@" in r.getMessage()]
        finally:
            sock.close()
            other.close()
    assert errors == 300
    assert 1 <= len(mine) <= ANALYST_BURST + 5, len(mine)
    assert len(theirs) == 1
