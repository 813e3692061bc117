"""Accounting attacks: δ exhaustion, the answer cache, policy changes under open sessions, bad policy numbers.

Each runs through every interface where the interface matters (Python API, CLI, wire against a real
``veil serve``); the ledger is read directly to check what was charged.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import pytest

from tests.support.attack import (
    ApiInterface,
    CliInterface,
    Server,
    WireInterface,
    charged,
    set_password,
    spent,
    wire_connect,
)
from tests.support.attack_world import TARGET, World, build_world

GROUP_BY_PRIVATE = "SELECT name, COUNT(*) FROM people GROUP BY name"


@pytest.fixture(scope="module")
def server(world: World) -> Iterator[Server]:
    for who in ("wire", "dory_wire", "poor"):
        set_password(world.policy, who)
    srv = Server(world.policy, world.folder / "serve.log")
    yield srv
    srv.stop()


_OPEN: list[object] = []


@pytest.fixture(autouse=True)
def _close_interfaces() -> Iterator[None]:
    """Every interface a test opens is closed when it ends (an open psycopg connection warns)."""
    yield
    while _OPEN:
        _OPEN.pop().close()  # type: ignore[attr-defined]


def _interface(kind: str, world: World, server: Server, analyst: str) -> object:
    iface: object
    if kind == "api":
        iface = ApiInterface(world.policy, analyst)
    elif kind == "cli":
        iface = CliInterface(world.policy, analyst)
    else:
        iface = WireInterface(server.port, analyst)
    _OPEN.append(iface)
    return iface


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["api", "cli", "wire"])
def test_delta_is_composed_and_exhausts(kind: str, world: World, server: Server) -> None:
    """δ budget 5e-7, partition selection δ 1e-7: five private-key GROUP BYs fit, the sixth is refused free."""
    analyst = f"dory_{kind}"
    iface = _interface(kind, world, server, analyst)
    me = f"analyst:{analyst}"
    start = spent(world.ledger, analyst)
    for i in range(5):
        out = iface.query(GROUP_BY_PRIVATE, 0.3 + i / 1000)  # type: ignore[attr-defined]
        assert out.ok, out.describe()
    mid = spent(world.ledger, analyst)
    assert charged(start, mid)[me][1] == Fraction(5, 10**7), "each private-key GROUP BY charges δ = 1e-7"
    out = iface.query(GROUP_BY_PRIVATE, 0.4)  # type: ignore[attr-defined]
    end = spent(world.ledger, analyst)
    assert not out.ok and out.sqlstate == "VB001", out.describe()
    assert charged(mid, end)[me] == (0, 0), "a refusal for δ charges nothing"
    out = iface.query("SELECT COUNT(*) FROM people", 0.4)  # type: ignore[attr-defined]
    assert out.ok, f"a pure-ε query still fits once δ is spent: {out.describe()}"


@pytest.mark.parametrize("kind", ["api", "wire"])
def test_cached_answer_is_identical_and_free(kind: str, world: World, server: Server) -> None:
    iface = _interface(kind, world, server, kind)
    sql = "SELECT dept, SUM(salary) FROM people GROUP BY dept"
    first = iface.query(sql, 0.37)  # type: ignore[attr-defined]
    before = spent(world.ledger, kind)
    again = iface.query(sql, 0.37)  # type: ignore[attr-defined]
    after = spent(world.ledger, kind)
    assert first.ok and again.ok
    assert again.rows == first.rows, "the same question gets the same noisy answer (no averaging)"
    assert all(v == (0, 0) for v in charged(before, after).values())


@pytest.mark.slow
def test_lowered_budget_applies_to_open_sessions_and_new_connections(tmp_path: Path) -> None:
    """A curator lowers the budget: the open API session, the open wire connection and a new one all refuse."""
    w = build_world(tmp_path / "w")
    set_password(w.policy, "wire")
    srv = Server(w.policy, tmp_path / "serve.log")
    try:
        api = ApiInterface(w.policy, "api")
        wire = WireInterface(srv.port, "wire")
        _OPEN.extend([api, wire])
        assert api.query("SELECT COUNT(*) FROM people", 0.5).ok
        assert wire.query("SELECT COUNT(*) FROM people", 0.5).ok
        text = w.policy.read_text()
        text = re.sub(r"(\[analysts\.(api|wire)\]\nepsilon = )\d+", r"\g<1>0.6", text)
        w.policy.write_text(text)
        for name, iface in (("open API session", api), ("open wire connection", wire)):
            out = iface.query("SELECT SUM(salary) FROM people", 0.5)  # type: ignore[attr-defined]
            assert not out.ok and out.sqlstate == "VB001", f"{name}: {out.describe()}"
        fresh = WireInterface(srv.port, "wire")
        _OPEN.append(fresh)
        before = spent(w.ledger, "wire")
        out = fresh.query("SELECT AVG(age) FROM people", 0.5)
        after = spent(w.ledger, "wire")
        assert not out.ok and out.sqlstate == "VB001", f"new wire connection after the change: {out.describe()}"
        assert charged(before, after)["analyst:wire"] == (0, 0)
    finally:
        srv.stop()


def _exact_sum(policy: Path, sql: str, eps: float) -> tuple[float, float]:
    """(exact answer, the largest sensitivity the plan used) through the internal exact path."""
    from veil.proxy._testing import exact_session, plan_of

    with exact_session(policy, "api") as s:
        plan = plan_of(s, sql, eps)
        ans = s.execute(sql, epsilon=eps)
    assert plan is not None
    return float(ans.rows[0][0]), max(float(st.sensitivity) for st in plan.statistics)


@pytest.mark.slow
def test_lowered_bound_rebuilds_the_bounded_copy(tmp_path: Path) -> None:
    """After `salary.upper` drops from 200000 to 1000, the target's salary (77516) counts as at most 1000."""
    w = build_world(tmp_path / "w")
    sql = f"SELECT SUM(salary) FROM people WHERE id = {TARGET}"
    before, sens_before = _exact_sum(w.policy, sql, 0.5)
    assert before == 77516 and sens_before == 200000
    w.policy.write_text(w.policy.read_text().replace("salary = { type = \"int\", lower = 0, upper = 200000 }",
                                                     "salary = { type = \"int\", lower = 0, upper = 1000 }"))  # fmt: skip
    after, sens_after = _exact_sum(w.policy, sql, 0.51)
    assert sens_after == 1000
    assert after <= sens_after, f"one person moved the sum by {after} but the noise is sized for {sens_after}"


@pytest.mark.slow
def test_lowered_bound_applies_to_an_open_session(tmp_path: Path) -> None:
    from veil.proxy._testing import exact_session, plan_of

    w = build_world(tmp_path / "w")
    sql = f"SELECT SUM(salary) FROM people WHERE id = {TARGET}"
    with exact_session(w.policy, "api") as s:
        assert s.execute(sql, epsilon=0.5).rows[0][0] == 77516
        w.policy.write_text(w.policy.read_text().replace("upper = 200000", "upper = 1000"))
        plan = plan_of(s, sql, 0.52)
        value = s.execute(sql, epsilon=0.52).rows[0][0]
    assert plan is not None and max(float(st.sensitivity) for st in plan.statistics) == 1000
    assert value <= 1000


@pytest.mark.slow
def test_switched_unit_column_rebuilds_the_bounded_copy(tmp_path: Path) -> None:
    """visits: unit pid (3 rows each) → unit device (1 row each): at most 3 rows remain, one per device."""
    w = build_world(tmp_path / "w")
    with_pid, _ = _exact_sum(w.policy, "SELECT COUNT(*) FROM visits", 0.5)
    text = w.policy.read_text().replace(
        'privacy_unit = "pid"\nmax_rows_per_unit = 3', 'privacy_unit = "device"\nmax_rows_per_unit = 1'
    )
    w.policy.write_text(text)
    with_device, sens = _exact_sum(w.policy, "SELECT COUNT(*) FROM visits", 0.51)
    assert sens == 1
    assert with_pid > 3 and with_device <= 4, f"{with_device} rows for 3 declared devices (+ out-of-domain): stale copy"


@pytest.mark.parametrize(
    ("where", "value"),
    [
        ("[analysts.api]\nepsilon = 100000\ndelta", "nan"),
        ("[analysts.api]\nepsilon = 100000\ndelta", "inf"),
        ("[analysts.api]\nepsilon = 100000\ndelta", "-0.1"),
        ("[analysts.api]\nepsilon = 100000\ndelta", "1.5"),
        ("[analysts.api]\nepsilon", "nan"),
        ("[analysts.api]\nepsilon", "inf"),
        ("partition_delta", "nan"),
        ("partition_delta", "inf"),
        ("partition_delta", "0"),
        ("min_epsilon_per_query", "nan"),
        ("epsilon_per_query", "inf"),
        ('[tables.people]\nprivacy_unit = "row"\nepsilon_total', "nan"),
        ('[tables.people]\nprivacy_unit = "row"\nepsilon_total', "inf"),
        ("delta_total", "nan"),
        ("delta_total", "inf"),
    ],
)
def test_bad_policy_numbers_are_policy_errors(tmp_path: Path, where: str, value: str) -> None:
    from tests.support.attack_world import POLICY
    from veil.errors import PolicyError
    from veil.policy import load_policy

    text = POLICY.read_text()
    key = where.rsplit("\n", 1)[-1]
    head = where.rsplit("\n", 1)[0] + "\n" if "\n" in where else ""
    pattern = re.compile(re.escape(head) + r"(" + re.escape(key) + r" = )[^\n]+")
    assert pattern.search(text), f"fixture lacks {where!r}"
    path = tmp_path / "policy.toml"
    path.write_text(pattern.sub(lambda m: head + m.group(1) + value, text, count=1))
    with pytest.raises(PolicyError) as info:
        load_policy(path)
    assert info.value.sqlstate == "F0000"


def test_refused_queries_leave_no_reservation(world: World) -> None:
    """A refusal leaves nothing in the ledger: no reservation row, not only a zero balance."""
    from veil.store.ledger import Ledger

    api = ApiInterface(world.policy, "api")
    _OPEN.append(api)
    with Ledger(world.ledger) as led:
        n = len(led.reservations("api"))
    for sql in ("SELECT * FROM people", "SELECT COUNT(*) FROM people WHERE my_udf(age) = 1", "SELECT SUM(name) FROM people"):
        assert not api.query(sql, 0.5).ok
    out = api.query("SELECT SUM(salary) FROM people", 1e-300)
    assert not out.ok
    with Ledger(world.ledger) as led:
        assert len(led.reservations("api")) == n


def test_minimum_epsilon_through_the_wire(world: World, server: Server) -> None:
    """`SET veil.epsilon` below the minimum is refused (or the query is), free; exactly the minimum works."""
    conn = wire_connect(server.port, "wire")
    before = spent(world.ledger, "wire")
    import psycopg

    with conn.cursor() as cur:
        try:
            cur.execute("SET veil.epsilon = 1e-300")
            cur.execute(b"SELECT COUNT(*) FROM people WHERE age > 33")
            refused = False
        except psycopg.Error as exc:
            refused = exc.sqlstate not in (None, "XX000")
    assert refused
    assert all(v == (0, 0) for v in charged(before, spent(world.ledger, "wire")).values())
    with conn.cursor() as cur:
        cur.execute("SET veil.epsilon = 0.001")
        cur.execute(b"SELECT COUNT(*) FROM people WHERE age > 34")
        cur.fetchall()
    assert charged(before, spent(world.ledger, "wire"))["analyst:wire"][0] == Fraction(1, 1000)
    conn.close()


@pytest.mark.slow
def test_table_cap_composes_all_analysts(tmp_path: Path) -> None:
    """`people` capped at ε = 1: `api` spends 0.6, then `cli` asking 0.6 is refused free (the table's shared cap is short),
    while `visits` (uncapped, declared another population: a cap binds every table of its population, red team s66
    F3, and a table that declares none may hold anyone) still answers `cli`."""
    text = build_world(tmp_path / "src").policy.read_text().replace("epsilon_total = 1000000", "epsilon_total = 1")
    text = text.replace("[tables.people]\n", '[tables.people]\npopulation = "people"\n')
    text = text.replace("[tables.visits]\n", '[tables.visits]\npopulation = "visitors"\n')
    w = build_world(tmp_path / "w", policy_text=text)
    api, cli = ApiInterface(w.policy, "api"), CliInterface(w.policy, "cli")
    _OPEN.extend([api, cli])
    assert api.query("SELECT COUNT(*) FROM people", 0.6).ok
    before = spent(w.ledger, "cli")
    out = cli.query("SELECT SUM(salary) FROM people", 0.6)
    assert not out.ok and out.sqlstate == "VB001", out.describe()
    # the refusal is the shared budget's, naming no account nor amount (red team s73 F2, review s23 Y1)
    assert "shared by every analyst" in out.message and "remaining" not in out.message, out.message
    assert all(v == (0, 0) for v in charged(before, spent(w.ledger, "cli")).values())
    assert cli.query("SELECT SUM(amount) FROM visits", 0.6).ok


def test_rollback_does_not_refund(world: World, server: Server) -> None:
    """A query answered inside a transaction stays charged after ROLLBACK (its answer was computed)."""
    conn = wire_connect(server.port, "wire")
    try:
        before = spent(world.ledger, "wire")
        with conn.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute("SET veil.epsilon = 0.123")
            cur.execute(b"SELECT COUNT(*) FROM people WHERE age > 44")
            cur.fetchall()
            cur.execute("ROLLBACK")
        assert charged(before, spent(world.ledger, "wire"))["analyst:wire"] == (Fraction(123, 1000), 0)
    finally:
        conn.close()
