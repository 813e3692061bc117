"""Attacks only the wire can make: concurrent connections racing for one budget, and bound parameters."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import pytest

from tests.support.attack import Outcome, Server, charged, judge, set_password, spent, wire_connect
from tests.support.attack_world import World


@pytest.fixture(scope="module")
def server(world: World) -> Iterator[Server]:
    for who in ("wire", "poor"):
        set_password(world.policy, who)
    srv = Server(world.policy, world.folder / "serve.log")
    yield srv
    srv.stop()


@pytest.mark.slow
def test_concurrent_connections_cannot_overspend(world: World, server: Server) -> None:
    """`poor` has ε = 0.01; eight connections ask 0.003 each at once: at most three are answered."""
    results: list[Outcome] = []
    lock = threading.Lock()
    conns = [wire_connect(server.port, "poor") for _ in range(8)]

    def ask(i: int) -> None:
        import psycopg

        conn = conns[i]
        try:
            with conn.cursor() as cur:
                cur.execute("SET veil.epsilon = 0.003")
                cur.execute(f"SELECT COUNT(*) FROM people WHERE age > {i}".encode())
                out = Outcome(True, tuple(cur.fetchall()))
        except psycopg.Error as exc:
            out = Outcome(False, sqlstate=exc.sqlstate or "", message=str(exc))
        with lock:
            results.append(out)

    before = spent(world.ledger, "poor")
    threads = [threading.Thread(target=ask, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for c in conns:
        c.close()
    cost = charged(before, spent(world.ledger, "poor"))["analyst:poor"]
    answered = [r for r in results if r.ok]
    refused = [r for r in results if not r.ok]
    assert len(results) == 8
    assert all(r.sqlstate == "VB001" for r in refused), [r.describe() for r in refused]
    assert len(answered) <= 3, f"{len(answered)} answers of ε = 0.003 from a budget of 0.01"
    assert cost[0] == Fraction(3, 1000) * len(answered) <= Fraction(1, 100)


PARAMS: list[Any] = [77515, 2**70, -(2**70), float("nan"), float("inf"), 1e300, "77515", "x", None, True]


@pytest.mark.parametrize("param", PARAMS, ids=[repr(p) for p in PARAMS])
def test_bound_parameters(world: World, server: Server, param: Any) -> None:
    """A bound parameter in a private query: refused free, or answered and charged exactly (never XX000)."""
    import psycopg

    conn = wire_connect(server.port, "wire")
    sql = "SELECT COUNT(*) FROM people WHERE salary > %s"
    eps = 0.31 + PARAMS.index(param) / 1000
    before = spent(world.ledger, "wire")
    try:
        with conn.cursor() as cur:
            cur.execute(f"SET veil.epsilon = {eps}")
            cur.execute(sql, [param])
            out = Outcome(True, tuple(cur.fetchall()))
    except psycopg.Error as exc:
        out = Outcome(False, sqlstate=exc.sqlstate or "", message=str(exc))
    finally:
        conn.close()
    cost = charged(before, spent(world.ledger, "wire"))
    v = judge("safe", out, cost, analyst="wire", epsilon=Fraction(eps), delta=Fraction(0), sql=sql)
    assert v.ok, v.why


_T = "'" + "t" * 100 + "'"
_BLOWUP = "LENGTH(REPLACE(REPLACE(REPLACE(REPLACE({s}, 't', {t}), 't', {t}), 't', {t}), 't', {t}))"


@pytest.mark.slow
def test_statement_timeout_is_no_oracle(world: World, server: Server) -> None:
    """An oracle pair: two queries that differ only in whether a condition on the target holds (salary = 77516
    or 77517). Nested REPLACE multiplies a matching row's string 10⁸-fold, so with an analyst-chosen
    `statement_timeout` one would be cancelled (57014, ε charged) and the other answered: a deterministic bit
    about one person. Both must end the same way."""
    import psycopg

    outcomes = []
    for salary in (77516, 77517):
        s = f"CASE WHEN salary = {salary} THEN name ELSE '' END"
        sql = f"SELECT COUNT(*) FROM people WHERE {_BLOWUP.format(s=s, t=_T)} > 0"
        conn = wire_connect(server.port, "wire")
        try:
            with conn.cursor() as cur:
                cur.execute(f"SET veil.epsilon = {0.0421 + salary % 2 / 1000}")
                cur.execute("SET statement_timeout = 400")
                cur.execute(sql.encode())
                cur.fetchall()
                outcomes.append("answered")
        except psycopg.Error as exc:
            outcomes.append(f"error {exc.sqlstate}")
        finally:
            conn.close()
    assert outcomes[0] == outcomes[1], f"target's salary = 77516: {outcomes[0]}; = 77517: {outcomes[1]}"
