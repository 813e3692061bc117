"""The red team's harness: one attack, run through one interface, judged against the ledger.

Three interfaces answer the same catalogue (``tests/support/attack_catalogue.py``):

* ``ApiInterface``: the public Python API, ``veil.connect(policy, analyst="api")``;
* ``CliInterface``: ``veil query`` / ``veil explain`` in-process through Click's ``CliRunner`` (the real command
  objects, argument parsing and exit codes), analyst ``cli``;
* ``WireInterface``: psycopg over the PostgreSQL protocol to a real ``veil serve`` subprocess, analyst ``wire``.

Each interface's analyst has its own ledger account, so the answer cache never crosses interfaces. ``judge``
reads the ledger before and after an attack and checks the expected outcome:

* ``refused``: a typed error (SQLSTATE given, never ``XX000``) and nothing charged, to the analyst or a table;
* ``answered``: a private answer charged exactly the ε asked for and the δ that ``explain`` quotes, on the
  analyst and on every capped table, and equal to what the answer reports; no value of a single unit released;
* ``public``: an exact answer charged nothing that holds no private data (no canary, no internal name);
* ``safe``: any of the three, each judged by its own rule (for attacks whose correct fate is a design choice,
  e.g. an expression that may fail on some data: refused before the charge, or answered — never in between).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any, Protocol

from tests.support.attack_world import CANARY, TARGET

SECRETS = (f"{CANARY}target", f"{CANARY}x", *(f"{CANARY}{j}" for j in range(6)))
"""Values that only one privacy unit holds: they may never appear in any answer (a private key with one unit's
rows passes partition selection with probability at most δ)."""

INTERNAL = ("_veil", "__veil", "salt")
"""Fragments of Veil's internal names: a free (public) answer must never contain them."""

EXPECTATIONS = ("refused", "answered", "public", "safe")
ACCOUNTS = ("analyst:{analyst}", "table:people")
PASSWORD = "red-team-pw-1"


@dataclass(frozen=True)
class Outcome:
    """What an interface returned: rows, or an error with its SQLSTATE."""

    ok: bool
    rows: tuple[tuple[Any, ...], ...] = ()
    sqlstate: str = ""
    message: str = ""
    epsilon_charged: Fraction | None = None  # as the answer reports it (None: the interface does not say)
    crashed: bool = False  # an exception that is not a typed Veil error (a bug whatever else happened)

    def describe(self) -> str:
        if self.ok:
            return f"answered {list(self.rows)[:4]} (ε charged {self.epsilon_charged})"
        kind = "CRASH" if self.crashed else "error"
        return f"{kind} [{self.sqlstate}] {self.message[:300]}"


class Interface(Protocol):
    name: str
    analyst: str

    def query(self, sql: str, epsilon: float | None) -> Outcome: ...

    def explain(self, sql: str, epsilon: float | None) -> Outcome: ...


# --- the Python API ------------------------------------------------------------------------------


class ApiInterface:
    name = "api"

    def __init__(self, policy: Path, analyst: str = "api") -> None:
        import veil

        self.analyst = analyst
        self.db = veil.connect(policy, analyst=analyst)

    def _guard(self, fn: Any) -> Outcome:
        from veil.errors import VeilError

        try:
            return fn()
        except VeilError as exc:
            return Outcome(False, sqlstate=exc.sqlstate, message=f"{type(exc).__name__}: {exc}")
        except Exception as exc:
            return Outcome(False, sqlstate="", message=f"{type(exc).__name__}: {exc}", crashed=True)

    def query(self, sql: str, epsilon: float | None) -> Outcome:
        def run() -> Outcome:
            df = self.db.sql(sql, epsilon=epsilon)
            rows = tuple(tuple(r) for r in df.itertuples(index=False, name=None))
            return Outcome(True, rows, epsilon_charged=Fraction(df.attrs["epsilon_charged"]))

        return self._guard(run)

    def explain(self, sql: str, epsilon: float | None) -> Outcome:
        def run() -> Outcome:
            ex = self.db.explain(sql, epsilon=epsilon)
            return Outcome(True, tuple(tuple(r.values()) for r in ex.rows()), epsilon_charged=Fraction(0))

        return self._guard(run)

    def close(self) -> None:
        self.db.close()


# --- the CLI -------------------------------------------------------------------------------------

_CLI_ERROR = re.compile(r"error \[(\w{5})\] (\w+): (.*)", re.S)


class CliInterface:
    name = "cli"

    def __init__(self, policy: Path, analyst: str = "cli") -> None:
        from click.testing import CliRunner

        self.analyst = analyst
        self.policy = policy
        self.runner = CliRunner()

    def _invoke(self, command: str, sql: str, epsilon: float | None) -> tuple[Outcome, str]:
        from veil.cli.main import cli

        args = [command, "--policy", str(self.policy), "--analyst", self.analyst, "--format", "json"]
        if epsilon is not None:
            args += ["--epsilon", repr(epsilon)]
        res = self.runner.invoke(cli, [*args, "--", sql])
        if res.exception is not None and not isinstance(res.exception, SystemExit):
            exc = res.exception
            return Outcome(False, message=f"{type(exc).__name__}: {exc}", crashed=True), ""
        if res.exit_code != 0:
            m = _CLI_ERROR.search(res.stderr)
            if m is None:  # Click's own usage errors (exit 2, "Invalid value for '--epsilon'") are refusals too
                return Outcome(False, sqlstate="22023" if "Invalid value" in res.stderr else "", message=res.stderr), ""
            return Outcome(False, sqlstate=m.group(1), message=f"{m.group(2)}: {m.group(3)}"), ""
        return Outcome(True), res.stdout

    def query(self, sql: str, epsilon: float | None) -> Outcome:
        out, stdout = self._invoke("query", sql, epsilon)
        if not out.ok:
            return out
        data = json.loads(stdout)
        rows = tuple(tuple(r) for r in data["rows"])
        return Outcome(True, rows, epsilon_charged=Fraction(str(data["epsilon_charged"])))

    def explain(self, sql: str, epsilon: float | None) -> Outcome:
        out, stdout = self._invoke("explain", sql, epsilon)
        if not out.ok:
            return out
        data = json.loads(stdout)
        return Outcome(True, tuple(tuple(r.values()) for r in data["statistics"]), epsilon_charged=Fraction(0))

    def close(self) -> None:
        pass


# --- the wire ------------------------------------------------------------------------------------


class Server:
    """A real ``veil serve`` subprocess on a free loopback port (``python -m veil.cli.main serve --port 0``)."""

    def __init__(self, policy: Path, log: Path) -> None:
        self.log = log
        self._log = log.open("w")
        env = dict(os.environ, VEIL_PROGRESS="0", PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "veil.cli.main", "serve", "--policy", str(policy), "--port", "0"],
            stdout=subprocess.DEVNULL,
            stderr=self._log,
            env=env,
        )
        self.port = self._wait_port()

    def _wait_port(self) -> int:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            text = self.log.read_text(errors="replace")
            m = re.search(r"listening on [\d.]+:(\d+)", text)
            if m:
                return int(m.group(1))
            if self.proc.poll() is not None:
                raise RuntimeError(f"veil serve exited with {self.proc.returncode}:\n{text}")
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"veil serve did not start within 60 s:\n{self.log.read_text(errors='replace')}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._log.close()


def set_password(policy: Path, analyst: str, password: str = PASSWORD) -> None:
    from click.testing import CliRunner

    from veil.cli.main import cli

    res = CliRunner().invoke(cli, ["analyst", "add", "--policy", str(policy), analyst, "--password-stdin"], input=password + "\n")
    if res.exit_code != 0:
        raise RuntimeError(f"veil analyst add {analyst} failed: {res.output}")


def wire_connect(port: int, analyst: str, password: str = PASSWORD) -> Any:
    import psycopg

    dsn = f"host=127.0.0.1 port={port} user={analyst} password={password} dbname=veil sslmode=disable connect_timeout=20"
    return psycopg.connect(dsn, autocommit=True)


def wire_rows(conn: Any, sql: str) -> list[tuple[Any, ...]]:
    """The rows of one simple-protocol statement on a wire connection (none for a statement without a result)."""
    with conn.cursor() as cur:
        cur.execute(sql.encode())
        return cur.fetchall() if cur.description is not None else []


def wire_sqlstate(conn: Any, sql: str) -> str | None:
    """The SQLSTATE a wire statement is refused with, or None when it answers."""
    import psycopg

    try:
        wire_rows(conn, sql)
    except psycopg.Error as exc:
        return exc.sqlstate
    return None


class WireInterface:
    name = "wire"

    def __init__(self, port: int, analyst: str = "wire") -> None:
        self.analyst = analyst
        self.port = port
        self.conn = wire_connect(port, analyst)

    def _run(self, sql: str, epsilon: float | None) -> Outcome:
        import psycopg

        try:
            with self.conn.cursor() as cur:
                if epsilon is None:
                    cur.execute("RESET veil.epsilon")
                else:
                    cur.execute(f"SET veil.epsilon = {epsilon!r}")
        except psycopg.Error as exc:
            return Outcome(False, sqlstate=exc.sqlstate or "", message=str(exc))
        try:
            with self.conn.cursor() as cur:
                cur.execute(sql.encode())  # bytes: psycopg sends it as written (no %-placeholders)
                rows = tuple(tuple(r) for r in cur.fetchall()) if cur.description is not None else ()
            return Outcome(True, rows)
        except psycopg.Error as exc:
            if self.conn.closed:
                self.conn = wire_connect(self.port, self.analyst)
                return Outcome(False, sqlstate=exc.sqlstate or "", message=f"connection lost: {exc}", crashed=True)
            return Outcome(False, sqlstate=exc.sqlstate or "", message=str(exc))

    def query(self, sql: str, epsilon: float | None) -> Outcome:
        return self._run(sql, epsilon)

    def explain(self, sql: str, epsilon: float | None) -> Outcome:
        return self._run(f"EXPLAIN {sql}", epsilon)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.close()


# --- the ledger and the judge ----------------------------------------------------------------------


@dataclass(frozen=True)
class Spent:
    by_account: dict[str, tuple[Fraction, Fraction]] = field(default_factory=dict)


_LEDGERS: dict[Path, Any] = {}


def close_ledgers() -> None:
    """Close the ledger handles :func:`spent` keeps open (at the end of each test module)."""
    while _LEDGERS:
        _LEDGERS.popitem()[1].close()


def spent(ledger: Path, analyst: str) -> Spent:
    """What the ledger file says ``analyst`` and the capped table have spent (read, never written)."""
    from veil.store.ledger import Ledger

    led = _LEDGERS.get(ledger)
    if led is None:
        led = _LEDGERS[ledger] = Ledger(ledger)
    out = {}
    for tmpl in ACCOUNTS:
        key = tmpl.format(analyst=analyst)
        c = led.spent(key)
        out[key] = (c.epsilon, c.delta)
    return Spent(out)


def charged(before: Spent, after: Spent) -> dict[str, tuple[Fraction, Fraction]]:
    return {
        k: (after.by_account[k][0] - before.by_account[k][0], after.by_account[k][1] - before.by_account[k][1])
        for k in after.by_account
    }


def _cells(rows: Sequence[Sequence[Any]]) -> Iterator[str]:
    for r in rows:
        for v in r:
            yield str(v)


def secrets_in(rows: Sequence[Sequence[Any]], sql: str = "") -> list[str]:
    return [c for c in _cells(rows) if any(s in c for s in SECRETS) and c not in sql]


def private_in(rows: Sequence[Sequence[Any]], sql: str = "") -> list[str]:
    """Cells of a free answer that hold private data or internal names (a literal of the query itself aside)."""
    bad = []
    for c in _cells(rows):
        if c in sql:
            continue
        if CANARY in c or any(f in c for f in INTERNAL) or c in ("77516", str(TARGET * 1000)):
            bad.append(c)
    return bad


def close_enough(a: Fraction, b: Fraction) -> bool:
    """ε asked as a float may be stored as its exact binary value or as its shortest decimal."""
    return a == b or math.isclose(float(a), float(b), rel_tol=1e-12, abs_tol=0)


@dataclass(frozen=True)
class Verdict:
    ok: bool
    why: str


def judge(
    expect: str,
    outcome: Outcome,
    cost: dict[str, tuple[Fraction, Fraction]],
    *,
    analyst: str,
    epsilon: Fraction,
    delta: Fraction | None,
    sqlstates: Sequence[str] = (),
    private_table: str | None = "people",
    sql: str = "",
) -> Verdict:
    """Is ``outcome`` (with the ledger change ``cost``) what an attack expecting ``expect`` may end in?"""
    me = f"analyst:{analyst}"
    total_eps = sum((e for e, _ in cost.values()), Fraction(0))
    total_delta = sum((d for _, d in cost.values()), Fraction(0))
    if outcome.crashed:
        return Verdict(False, f"crashed with an untyped error: {outcome.describe()}; ledger change {cost}")
    if not outcome.ok:
        if outcome.sqlstate in ("XX000", ""):
            return Verdict(False, f"internal error instead of a typed refusal: {outcome.describe()}; ledger {cost}")
        if total_eps or total_delta:
            return Verdict(False, f"refused but charged {cost}: {outcome.describe()}")
        if expect in ("answered", "public"):
            return Verdict(False, f"expected {expect}, got {outcome.describe()}")
        leaked = [f for f in (*SECRETS, "77516", "_veil_bounded", "salt") if f in outcome.message and f not in sql]
        if leaked:
            return Verdict(False, f"the refusal's message holds private data or internal names {leaked}: {outcome.message}")
        if sqlstates and outcome.sqlstate not in sqlstates:
            return Verdict(False, f"refused with SQLSTATE {outcome.sqlstate}, expected one of {sqlstates}: {outcome.describe()}")
        return Verdict(True, "refused free")
    # answered
    if expect == "refused":
        return Verdict(False, f"expected a refusal, got {outcome.describe()}; ledger {cost}")
    eps_me, delta_me = cost.get(me, (Fraction(0), Fraction(0)))
    if eps_me == 0 and delta_me == 0 and total_eps == 0:
        if expect == "answered":
            return Verdict(False, f"expected a charged private answer, got a free one: {outcome.describe()}")
        leaked = private_in(outcome.rows, sql)
        if leaked:
            return Verdict(False, f"free answer holds private data or internal names {leaked[:5]}")
        return Verdict(True, "public, free, clean")
    if expect == "public":
        return Verdict(False, f"expected a free public answer, got a charge {cost}: {outcome.describe()}")
    if not close_enough(eps_me, epsilon):
        return Verdict(False, f"asked ε = {float(epsilon)!r}, the analyst was charged {eps_me}")
    if outcome.epsilon_charged is not None and outcome.epsilon_charged != eps_me:
        return Verdict(False, f"the answer reports ε = {outcome.epsilon_charged}, the ledger charged {eps_me}")
    if delta is not None and delta_me != delta:
        return Verdict(False, f"explain quotes δ = {delta}, the analyst was charged δ = {delta_me}")
    if private_table is not None and f"table:{private_table}" in cost:
        t_eps, t_delta = cost[f"table:{private_table}"]
        if (t_eps, t_delta) != (eps_me, delta_me):
            return Verdict(False, f"table {private_table} charged {(t_eps, t_delta)}, analyst {(eps_me, delta_me)}")
    others = {k: v for k, v in cost.items() if k != me and k != f"table:{private_table}" and (v[0] or v[1])}
    if others:
        return Verdict(False, f"unexpected accounts charged: {others}")
    leaked = secrets_in(outcome.rows, sql)
    if leaked:
        return Verdict(False, f"a value only one unit holds was released: {leaked[:5]}")
    return Verdict(True, "answered, charged exactly")


def expected_delta(explainer: Any, sql: str, epsilon: float | None) -> Fraction | None:
    """δ that ``explain`` quotes for the query (None when explain refuses it)."""
    from veil.errors import VeilError

    try:
        return Fraction(explainer.explain(sql, epsilon=epsilon).delta)
    except VeilError:
        return None
    except Exception:
        return None


def run_attack(iface: Interface, ledger: Path, attack: Any, explainer: Any) -> list[str]:
    """Run ``attack`` (query, then EXPLAIN) through ``iface``; the list of what went wrong (empty: held)."""
    problems: list[str] = []
    eps = attack.epsilon
    asked = Fraction(eps) if eps is not None and math.isfinite(eps) else Fraction(0)
    if eps is None:
        asked = Fraction(explainer.session.policy.defaults.epsilon_per_query)
    delta = expected_delta(explainer, attack.sql, eps)
    before = spent(ledger, iface.analyst)
    out = iface.query(attack.sql, eps)
    after = spent(ledger, iface.analyst)
    v = judge(
        attack.expect, out, charged(before, after), analyst=iface.analyst, epsilon=asked, delta=delta,
        sqlstates=attack.sqlstates, private_table=attack.table, sql=attack.sql,
    )  # fmt: skip
    if not v.ok:
        problems.append(f"query via {iface.name}: {v.why}")
    before = after
    ex = iface.explain(attack.sql, eps)
    after = spent(ledger, iface.analyst)
    cost = charged(before, after)
    if any(e or d for e, d in cost.values()):
        problems.append(f"EXPLAIN via {iface.name} charged {cost}")
    if ex.crashed or (not ex.ok and ex.sqlstate in ("XX000", "")):
        problems.append(f"EXPLAIN via {iface.name} failed internally: {ex.describe()}")
    if ex.ok and (secrets_in(ex.rows, attack.sql) or any("77516" in c for c in _cells(ex.rows))):
        problems.append(f"EXPLAIN via {iface.name} released private values: {ex.describe()}")
    return problems
