"""A client that hangs up mid-query, a cancelled query, and many concurrent clients: every
charge in the ledger has its release, the budget is never exceeded, and the server keeps serving."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import psycopg
import pytest

from tests.support.server import build_policy, dsn, running_server
from veil.policy import load_policy
from veil.proxy.session import QuerySession
from veil.store.ledger import Ledger


class SlowSession(QuerySession):
    """The real query session, with a pause before each execution (so a client can leave mid-query)."""

    started = threading.Event()
    finished = threading.Event()
    pause = 0.0

    def execute(self, sql, *, epsilon=None):  # type: ignore[no-untyped-def]
        SlowSession.started.set()
        time.sleep(SlowSession.pause)
        try:
            return super().execute(sql, epsilon=epsilon)
        finally:
            SlowSession.finished.set()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[tuple[Path, int]]:
    policy = build_policy(tmp_path_factory.mktemp("resilience"), request.getfixturevalue("shared_data"), rows=1000)
    with running_server(policy, query_session_factory=SlowSession) as st:
        yield policy, st.port  # type: ignore[attr-defined]


def _assert_every_charge_released(policy_path: Path, analyst: str, interrupted: str | None = None) -> Fraction:
    """Every charge has its release, except (``interrupted``) a query the server interrupted in the
    engine after its reservation: charged, nothing released (docs/server.md)."""
    policy = load_policy(policy_path)
    with Ledger.for_policy(policy) as ledger:
        rows = ledger.reservations(analyst)
        spent = ledger.spent(f"analyst:{analyst}").epsilon
        released_ids = {r.id for r in ledger.list_releases()}
    unanswered = [r for r in rows if r["status"] == "reserved"]
    assert all(interrupted is not None and interrupted in (r["canonical_sql"] or "") for r in unanswered), rows
    assert len(unanswered) <= 1
    rows = [r for r in rows if r not in unanswered]
    charged = [r for r in rows if r["status"] != "cancelled"]
    assert spent == sum((r["epsilon"] for r in charged + unanswered), Fraction(0))
    # every other charged reservation has its release record
    with Ledger.for_policy(policy) as ledger:
        by_reservation = {
            row[0] for row in ledger._db.execute("SELECT reservation_id FROM releases WHERE reservation_id IS NOT NULL")
        }
    assert {r["id"] for r in charged} <= by_reservation
    assert released_ids
    assert spent <= policy.analyst(analyst).epsilon
    return spent


def _wait_idle(policy_path: Path, analyst: str, timeout: float = 20.0) -> None:
    policy = load_policy(policy_path)
    for _ in range(int(timeout / 0.05)):  # at least ``timeout`` s: a poll count (a hang guard needs no quiet machine)
        with Ledger.for_policy(policy) as ledger:
            if all(r["status"] != "reserved" for r in ledger.reservations(analyst)):
                return
        time.sleep(0.05)


def test_client_disconnecting_mid_query(served: tuple[Path, int]) -> None:
    policy, port = served
    conn = psycopg.connect(dsn(port), autocommit=True)
    SlowSession.pause, SlowSession.started, SlowSession.finished = 0.4, threading.Event(), threading.Event()
    conn.pgconn.send_query(b"SELECT COUNT(*) FROM adult WHERE age > 44")
    while conn.pgconn.flush():
        time.sleep(0.005)
    assert SlowSession.started.wait(10)
    # hang up abruptly while the query runs
    sock = socket.socket(fileno=os.dup(conn.pgconn.socket))
    sock.shutdown(socket.SHUT_RDWR)
    sock.close()
    conn.close()
    assert SlowSession.finished.wait(20)  # the engine work was not abandoned half-way
    _wait_idle(policy, "alice")
    assert _assert_every_charge_released(policy, "alice") > 0
    SlowSession.pause = 0.0
    with psycopg.connect(dsn(port), autocommit=True) as again:  # the server keeps serving
        assert isinstance(again.execute("SELECT COUNT(*) FROM adult WHERE age > 45").fetchone()[0], int)


def test_cancelled_query(served: tuple[Path, int]) -> None:
    policy, port = served
    SlowSession.pause, SlowSession.started = 0.5, threading.Event()
    with psycopg.connect(dsn(port), autocommit=True) as conn:
        timer = threading.Timer(0.2, conn.cancel_safe)
        timer.start()
        with pytest.raises(psycopg.errors.QueryCanceled):
            conn.execute("SELECT COUNT(*) FROM adult WHERE age > 46")
        timer.join()
        SlowSession.pause = 0.0
        # runs after the cancelled call has returned (one call at a time per session)
        assert isinstance(conn.execute("SELECT COUNT(*) FROM adult WHERE age > 47").fetchone()[0], int)
    # a charged private query is not cut by a cancel request (that would be a one-bit oracle): it
    # finishes and its release is in the log
    _assert_every_charge_released(policy, "alice")


def test_concurrent_clients_never_overspend(served: tuple[Path, int]) -> None:
    """bob (ε = 1) runs 8 clients × 4 distinct queries at ε = 0.05: exactly 20 fit."""
    from tests.support.server import BOB_PASSWORD

    policy, port = served
    SlowSession.pause = 0.0
    outcomes: list[str] = []
    lock = threading.Lock()

    def client(k: int) -> None:
        with psycopg.connect(dsn(port, user="bob", password=BOB_PASSWORD), autocommit=True) as conn:
            conn.execute("SET veil.epsilon = 0.05")
            for j in range(4):
                try:
                    conn.execute("SELECT COUNT(*) FROM adult WHERE age > %s", (20 + 4 * k + j,)).fetchone()
                    result = "ok"
                except psycopg.Error as exc:
                    result = exc.sqlstate or "?"
                with lock:
                    outcomes.append(result)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(outcomes) == 32
    assert outcomes.count("ok") == 20 and outcomes.count("VB001") == 12, outcomes
    spent = _assert_every_charge_released(policy, "bob")
    assert spent == Fraction(1)
