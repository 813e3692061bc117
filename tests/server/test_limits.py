"""Unit tests of the server's limits: connection slots, token limits, durations (the login backoff:
test_login_backoff.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from veil.errors import InputError, QueryTooComplex, TooManyConnections
from veil.server.limits import ConnectionSlots, ServerLimits
from veil.server.routing import split
from veil.server.settings import parse_duration


def test_connection_slots() -> None:
    slots = ConnectionSlots(ServerLimits(max_connections=3, max_connections_per_analyst=2))
    for _ in range(3):
        slots.reserve()
    with pytest.raises(TooManyConnections) as info:
        slots.reserve()
    assert info.value.sqlstate == "53300"
    slots.login("alice")
    slots.login("alice")
    with pytest.raises(TooManyConnections, match="analyst 'alice'"):
        slots.login("alice")
    slots.login("bob")
    slots.logout("alice")
    slots.login("alice")
    slots.release()
    slots.reserve()
    assert slots.total == 3


@pytest.mark.parametrize("bad", [{"auth_timeout": -1}, {"statement_timeout": float("nan")}, {"max_connections": 0}])
def test_limits_refuse_bad_values(bad: dict[str, float]) -> None:
    with pytest.raises(InputError):
        ServerLimits(**bad)  # type: ignore[arg-type]


@given(st.integers(min_value=1, max_value=200), st.integers(min_value=1, max_value=80))
def test_token_and_depth_limits_are_exact(terms: int, depth: int) -> None:
    limits = ServerLimits(max_query_tokens=120, max_query_depth=20)
    sql = "SELECT COUNT(*) FROM t WHERE " + "(" * depth + " OR ".join(f"a = {i}" for i in range(terms)) + ")" * depth
    tokens = 8 + 2 * depth + 4 * terms - 1
    deepest = max(depth, 1)
    if tokens > 120 or deepest > 20:
        with pytest.raises(QueryTooComplex):
            split(sql, limits=limits)
    else:
        assert [r.kind for r in split(sql, limits=limits)] == ["query"]


@pytest.mark.parametrize(
    ("text", "seconds"), [("1500", 1.5), ("'250ms'", 0.25), ("2s", 2.0), ("1min", 60.0), ("0", 0.0), ("1 h", 3600.0)]
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["soon", "-5", "5 parsecs", "", "1e400"])
def test_parse_duration_refuses(text: str) -> None:
    with pytest.raises(InputError):
        parse_duration(text)


@given(st.integers(min_value=0, max_value=60), st.integers(min_value=0, max_value=4))
def test_operator_chain_limit_counts_one_bracket_level(chain: int, groups: int) -> None:
    limits = ServerLimits(max_operator_chain=30)
    inner = "a" + " + a" * chain
    # `groups` comma-separated expressions, each in its own brackets: runs never add up across them
    sql = "SELECT " + ", ".join(f"({inner})" for _ in range(groups + 1)) + " FROM t"
    if chain > 30:
        with pytest.raises(QueryTooComplex):
            split(sql, limits=limits)
    else:
        assert split(sql, limits=limits)[0].kind == "query"


@pytest.mark.parametrize(("terms", "refused"), [(200, False), (257, False), (258, True), (1000, True)])
def test_or_chains_count_the_ors_not_the_comparisons(terms: int, refused: bool) -> None:
    sql = "SELECT COUNT(*) FROM t WHERE " + " OR ".join(f"a = {i}" for i in range(terms))
    if refused:
        with pytest.raises(QueryTooComplex):
            split(sql, limits=ServerLimits())
    else:
        assert split(sql, limits=ServerLimits())[0].kind == "query"
