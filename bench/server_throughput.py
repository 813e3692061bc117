"""``veil serve`` throughput: 20 concurrent clients (issue 16's target: ≥ 300 aggregate answers/s on
2 cores) through the PostgreSQL wire protocol, with one server process and with ``--processes 2``,
versus the same handler called in-process, on a 10,000-row table; and isolation: the latency of one
client's cheap query while another client sends pathological ones.

Two query kinds: trivial (``SELECT 42``: routing and protocol only) and an aggregate
(``SELECT sex, COUNT(*), AVG(income) FROM people WHERE income > k GROUP BY sex``, a different
``k`` each time so the answer cache never hides the cost; ε = 0.01 per query). Clients belong
to 4 analysts, 5 clients each; the fourth analyst's budget is deliberately too small, so some of
its queries are refused (VB001) while the others run concurrently. Afterwards the ledger is
checked: each analyst's spent ε equals the sum of its charges exactly (Fractions), equals
(answered queries × the quoted cost), and never exceeds the budget.

Isolation: one client repeats a cheap query (a cached aggregate) and records its latency, first
alone, then while a second client repeats, one kind at a time, a 4-way cross join of ``pg_type`` (stopped at
``--catalog-timeout``), a 250-term OR (planned), a 1,700-term OR (refused before parsing,
54001) and a 1 MiB statement (refused unread, 54000).

Each wire round also prints the server's voluntary context switches per statement (all its processes and
threads): mostly interpreter-lock handoffs between its threads, a measure of that overhead which other work on the
host moves far less than it moves answers/s.

Run: ``.venv/bin/python -m bench.server_throughput [--clients 20 --queries 60 --processes 1,2]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

import psycopg

from veil.datasets import demo_people
from veil.policy import load_policy
from veil.store.credentials import CredentialStore
from veil.store.ledger import Ledger
from veil.store.warehouse import write_table

ANALYSTS = ("ann", "ben", "cat", "dan")
BUDGETS = {"ann": 100, "ben": 100, "cat": 100, "dan": 2}  # dan runs out after 200 queries at ε = 0.01
PASSWORD = "bench-password"
EPSILON = Fraction(1, 100)

POLICY = """\
[database]
path = "warehouse.duckdb"
[ledger]
path = "ledger.sqlite"
[defaults]
epsilon_per_query = 0.5
[tables.people]
[tables.people.columns]
age = { type = "int", lower = 18, upper = 90 }
sex = { type = "category", values = ["Female", "Male"] }
state = { type = "category" }
hours_per_week = { type = "int", lower = 1, upper = 99 }
income = { type = "float", lower = 0, upper = 200000 }
"""

TRIVIAL = "SELECT 42"
AGGREGATE = "SELECT sex, COUNT(*), AVG(income) FROM people WHERE income > {k} GROUP BY sex"
AGGREGATE_PARAM = "SELECT sex, COUNT(*), AVG(income) FROM people WHERE income > %s GROUP BY sex"


def build(folder: Path, rows: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "policy.toml"
    analysts = "".join(f"[analysts.{a}]\nepsilon = {BUDGETS[a]}\n" for a in ANALYSTS)
    path.write_text(POLICY + analysts, encoding="utf-8")
    policy = load_policy(path)
    df = demo_people(rows, seed=0)[["age", "sex", "state", "hours_per_week", "income"]]
    write_table(policy, "people", df, replace=True)
    store = CredentialStore(policy.ledger_path)
    for a in ANALYSTS:
        store.set_password(a, PASSWORD)
    return path


def summarise(latencies: list[float], wall: float, outcomes: list[str]) -> dict[str, Any]:
    lat = sorted(latencies)
    return {
        "qps": len(lat) / wall,
        "aps": outcomes.count("ok") / wall,
        "p50": statistics.median(lat) * 1000,
        "p99": lat[min(len(lat) - 1, round(0.99 * (len(lat) - 1)))] * 1000,
        "ok": outcomes.count("ok"),
        "refused": outcomes.count("VB001"),
        "other": len(outcomes) - outcomes.count("ok") - outcomes.count("VB001"),
    }


# --- through the wire ---------------------------------------------------------------------------


def start_server(policy: Path, *flags: str) -> tuple[subprocess.Popen[str], int]:
    env = {**os.environ, "VEIL_PROGRESS": "0"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "veil.cli.main", "serve", "--policy", str(policy), "--port", "0", *flags],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    assert proc.stderr is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        match = re.search(r"listening on [^:]+:(\d+)", line)
        if match:
            threading.Thread(target=proc.stderr.read, daemon=True).start()  # keep the log pipe drained
            return proc, int(match.group(1))
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise RuntimeError("veil serve did not start")


def tree_cpu(pid: int) -> float:
    """CPU seconds (user + system) of ``pid`` and its descendants so far (Linux /proc)."""
    total, todo = 0.0, [pid]
    tick = os.sysconf("SC_CLK_TCK")
    while todo:
        p = todo.pop()
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, ValueError):
            continue
    return total


def tree_switches(pid: int) -> int:
    """Voluntary context switches of every thread of ``pid`` and its descendants so far (Linux /proc): mostly
    threads handing the interpreter lock to one another (and waiting for the engine or the disk), so fewer per
    statement means less lock switching; a neighbour's load moves it far less than wall-clock rates."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
                for line in (task / "status").read_text().splitlines():
                    if line.startswith("voluntary_ctxt_switches:"):
                        total += int(line.split()[1])
        except (OSError, ValueError):
            continue
    return total


class _Start:
    """Holds every client until all are connected and warm, then starts the clock."""

    def __init__(self, clients: int) -> None:
        self.waiting = clients
        self.go = asyncio.Event()
        self.warm_ok = 0

    async def ready(self, warm_outcome: str) -> None:
        self.warm_ok += warm_outcome == "ok"
        self.waiting -= 1
        if self.waiting == 0:
            self.go.set()
        await self.go.wait()


async def wire_run(port: int, kind: str, clients: int, queries: int, server_pid: int) -> dict[str, Any]:
    latencies: list[float] = []
    outcomes: list[str] = []
    start = _Start(clients)

    async def one(conn: psycopg.AsyncConnection[Any], k: int) -> str:
        try:
            if kind == "trivial":
                await (await conn.execute(TRIVIAL)).fetchall()
            else:
                await (await conn.execute(AGGREGATE_PARAM, (k,))).fetchall()
            return "ok"
        except psycopg.Error as exc:
            return exc.sqlstate or "?"

    async def client(c: int) -> None:
        analyst = ANALYSTS[c % len(ANALYSTS)]
        conninfo = f"host=127.0.0.1 port={port} user={analyst} password={PASSWORD} dbname=veil sslmode=disable"
        async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
            await conn.execute(f"SET veil.epsilon = {EPSILON.numerator}/{EPSILON.denominator}")
            await start.ready(await one(conn, -10 * (c + 1)))  # the session's first query, untimed
            for j in range(queries):
                t0 = time.perf_counter()
                outcome = await one(conn, (c * queries + j) * 10)
                latencies.append(time.perf_counter() - t0)
                outcomes.append(outcome)

    tasks = [asyncio.ensure_future(client(c)) for c in range(clients)]
    await start.go.wait()
    w0, s0, c0, t0 = tree_switches(server_pid), tree_cpu(server_pid), time.process_time(), time.perf_counter()
    await asyncio.gather(*tasks)
    out = summarise(latencies, time.perf_counter() - t0, outcomes)
    out["server_cpu"] = (tree_cpu(server_pid) - s0) / len(latencies) * 1000
    out["switches"] = (tree_switches(server_pid) - w0) / len(latencies)
    out["client_cpu"] = (time.process_time() - c0) / len(latencies) * 1000
    out["warm_ok"] = start.warm_ok
    return out


# --- the same handler, in-process ------------------------------------------------------------------


class _StubConnection:
    """What the handler reads from a wire connection, without a socket."""

    def __init__(self, server: Any, username: str) -> None:
        self.server = server
        self.username = username
        self.database = "veil"
        self.session_vars: dict[str, str] = {}
        self.tx_status = b"I"
        self.statements: dict[str, Any] = {}
        self.pid = 0


async def inprocess_run(policy_path: Path, kind: str, clients: int, queries: int) -> dict[str, Any]:
    from veil.server.app import VeilServer
    from veil.server.routing import route
    from veil.server.session import VeilSession

    server = VeilServer(load_policy(policy_path))
    latencies: list[float] = []
    outcomes: list[str] = []
    start = _Start(clients)

    async def one(session: VeilSession, k: int) -> str:
        sql = TRIVIAL if kind == "trivial" else AGGREGATE.format(k=k)
        try:
            await session.answer(route(sql, session._names), None, [], describe=False)
            return "ok"
        except Exception as exc:  # PgError with the SQLSTATE
            return str(getattr(exc, "sqlstate", "?"))

    async def client(c: int) -> None:
        analyst = ANALYSTS[c % len(ANALYSTS)]
        session = VeilSession(server)
        await session.init(_StubConnection(server, analyst))
        session.settings.epsilon = EPSILON
        try:
            await start.ready(await one(session, -10 * (c + 1)))  # the session's first query, untimed
            for j in range(queries):
                t0 = time.perf_counter()
                outcome = await one(session, (c * queries + j) * 10)
                latencies.append(time.perf_counter() - t0)
                outcomes.append(outcome)
        finally:
            await session.close()

    tasks = [asyncio.ensure_future(client(c)) for c in range(clients)]
    await start.go.wait()
    c0, t0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*tasks)
    wall = time.perf_counter() - t0
    cpu = time.process_time() - c0
    server.shutdown_executor()
    out = summarise(latencies, wall, outcomes)
    out["server_cpu"] = cpu / len(latencies) * 1000  # handler and the (trivial) client coroutines together
    out["client_cpu"] = 0.0
    out["warm_ok"] = start.warm_ok
    return out


# --- isolation -------------------------------------------------------------------------------------

CHEAP = "SELECT sex, COUNT(*) FROM people WHERE age > 30 GROUP BY sex"
PATHOLOGICAL = (
    ("catalog cross join", "SELECT COUNT(*) FROM pg_catalog.pg_type a, pg_type b, pg_type c, pg_type d"),
    ("250-term OR (planned)", "SELECT COUNT(*) FROM people WHERE " + " OR ".join(f"age = {i}" for i in range(250))),
    (
        "1,700-term OR (refused before parsing)",
        "SELECT COUNT(*) FROM people WHERE " + " OR ".join(f"age = {i}" for i in range(1700)),
    ),
    ("1 MiB statement", "SELECT COUNT(*) FROM people WHERE state = '" + "x" * (1 << 20) + "'"),
)


async def isolation_run(port: int, seconds: float) -> dict[str, Any]:
    """p50/p99 of CHEAP alone, then while another client repeats each PATHOLOGICAL statement in turn."""
    conninfo = f"host=127.0.0.1 port={port} user=ann password={PASSWORD} dbname=veil sslmode=disable"

    async def cheap_for(duration: float) -> list[float]:
        out = []
        async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
            await (await conn.execute(CHEAP)).fetchall()  # charged once; then answered from the release log
            end = time.perf_counter() + duration
            while time.perf_counter() < end:
                t0 = time.perf_counter()
                await (await conn.execute(CHEAP)).fetchall()
                out.append(time.perf_counter() - t0)
        return out

    async def attacker(sql: str, stop: asyncio.Event, got: list[tuple[str, float]]) -> None:
        async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
            while not stop.is_set():
                t0 = time.perf_counter()
                try:
                    await (await conn.execute(sql)).fetchall()
                    code = "ok"
                except psycopg.Error as exc:
                    code = exc.sqlstate or "?"
                got.append((code, time.perf_counter() - t0))

    def pct(xs: list[float], q: float) -> float:
        xs = sorted(xs)
        return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))] * 1000

    def stats(xs: list[float]) -> tuple[int, float, float, float]:
        return len(xs), pct(xs, 0.5), pct(xs, 0.99), max(xs) * 1000

    out: dict[str, Any] = {"alone": stats(await cheap_for(seconds)), "during": {}}
    for name, sql in PATHOLOGICAL:
        stop, got = asyncio.Event(), []
        task = asyncio.ensure_future(attacker(sql, stop, got))
        await asyncio.sleep(0.3)
        during = await cheap_for(seconds)
        stop.set()
        await task
        codes = sorted({c for c, _ in got})
        out["during"][name] = (stats(during), codes, statistics.median(t for _, t in got) * 1000 if got else float("nan"))
    return out


# --- ledger exactness -------------------------------------------------------------------------------


def check_ledger(policy_path: Path, answered: dict[str, int]) -> list[str]:
    """Per analyst: spent == Σ charges == answered × quoted cost ≤ budget (exact Fractions)."""
    from veil.proxy.session import QuerySession

    policy = load_policy(policy_path)
    with QuerySession(policy, ANALYSTS[0]) as qs:
        cost = qs.explain(AGGREGATE.format(k=0), epsilon=EPSILON).epsilon
    lines = []
    with Ledger.for_policy(policy) as ledger:
        for a in ANALYSTS:
            rows = ledger.reservations(a)
            bad = [r for r in rows if r["status"] == "reserved"]
            assert not bad, f"{a}: a charge without its release: {bad[:3]}"
            charges = sum((r["epsilon"] for r in rows if r["status"] != "cancelled"), Fraction(0))
            spent = ledger.spent(f"analyst:{a}").epsilon
            assert spent == charges, (a, spent, charges)
            assert spent == answered[a] * cost, (a, spent, answered[a], cost)
            assert spent <= policy.analyst(a).epsilon, (a, spent)
            lines.append(f"{a}: {answered[a]} answered × ε {cost} = {spent} ≤ budget {policy.analyst(a).epsilon}")
    return lines


def answered_per_analyst(policy_path: Path) -> dict[str, int]:
    policy = load_policy(policy_path)
    with Ledger.for_policy(policy) as ledger:
        return {a: sum(r["status"] != "cancelled" for r in ledger.reservations(a)) for a in ANALYSTS}


def setup_name(processes: int) -> str:
    return "wire" if processes == 1 else f"wire, {processes} processes"


def one_round(tmp: Path, r: int, args: argparse.Namespace) -> tuple[dict[tuple[str, str], dict[str, Any]], list[str]]:
    """One interleaved round on fresh ledgers: for each query kind, in-process, then the wire with
    each process count; then the ledger checks of every setup."""
    results: dict[tuple[str, str], dict[str, Any]] = {}
    setups = ["in-process", *(setup_name(n) for n in args.processes)]
    policies = {name: build(tmp / f"r{r}-{i}", args.rows) for i, name in enumerate(setups)}
    servers: dict[str, tuple[subprocess.Popen[str], int]] = {}
    try:
        for n in args.processes:
            servers[setup_name(n)] = start_server(policies[setup_name(n)], "--processes", str(n), *args.server_flags.split())
        for kind in ("trivial", "aggregate"):
            for name in setups:
                if name == "in-process":
                    res = asyncio.run(inprocess_run(policies[name], kind, args.clients, args.queries))
                else:
                    proc, port = servers[name]
                    res = asyncio.run(wire_run(port, kind, args.clients, args.queries, proc.pid))
                results[(name, kind)] = res
                print(
                    f"round {r} {kind:9} {name:22} {res['qps']:7.0f} q/s {res['aps']:7.0f} answers/s  "
                    f"cpu {res['server_cpu']:5.2f} + {res['client_cpu']:4.2f} ms  "
                    f"p50 {res['p50']:6.1f} ms  p99 {res['p99']:6.1f} ms  "
                    + (f"switches {res['switches']:4.1f}  " if "switches" in res else "")
                    + f"ok {res['ok']} refused {res['refused']} "
                    f"other {res['other']}  (load {os.getloadavg()[0]:.1f})",
                    flush=True,
                )
    finally:
        for proc, _port in servers.values():
            proc.terminate()
            proc.wait(60)
    lines = []
    for name in setups:
        answered = answered_per_analyst(policies[name])
        lines += [f"round {r}, {name} — {line}" for line in check_ledger(policies[name], answered)]
        agg = results[(name, "aggregate")]
        assert sum(answered.values()) == agg["ok"] + agg["warm_ok"], (name, answered, agg)
    return results, lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--queries", type=int, default=60)
    parser.add_argument("--processes", default="1,2", help="comma-separated `veil serve --processes` counts to measure")
    parser.add_argument("--isolation-seconds", type=float, default=10.0)
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; the median ratio is reported")
    parser.add_argument(
        "--server-flags", default="", help="more `veil serve` options for the wire setups, e.g. '--engine-threads 2'"
    )
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/benchmarks.md alone")
    args = parser.parse_args()
    args.processes = [int(n) for n in str(args.processes).split(",")]
    load_start = os.getloadavg()
    niceness = os.nice(0)
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    rounds: list[dict[tuple[str, str], dict[str, Any]]] = []
    ledger_lines: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(1, args.rounds + 1):
            res, lines = one_round(Path(tmp), r, args)
            rounds.append(res)
            ledger_lines += lines
        iso_policy = build(Path(tmp) / "isolation", args.rows)
        proc, port = start_server(iso_policy, "--catalog-timeout", "2")
        try:
            iso = asyncio.run(isolation_run(port, args.isolation_seconds))
        finally:
            proc.terminate()
            proc.wait(30)
    load_end = os.getloadavg()
    print("isolation", iso)
    for line in ledger_lines:
        print(line)
    setups = ["in-process", *(setup_name(n) for n in args.processes)]
    rows = []
    for kind in ("trivial", "aggregate"):
        key = "qps" if kind == "trivial" else "aps"
        for name in setups:
            med = {
                k: statistics.median(x[(name, kind)][k] for x in rounds) for k in (key, "p50", "p99", "server_cpu", "client_cpu")
            }
            if name == "in-process":
                ratio = ""
            else:
                ratios = [x[(name, kind)][key] / x[("in-process", kind)][key] for x in rounds]
                ratio = f"**{statistics.median(ratios):.2f}×** ({', '.join(f'{q:.2f}' for q in ratios)})"
            last = rounds[-1][(name, kind)]
            cpu = med["server_cpu"] + med["client_cpu"]
            cores = statistics.median(
                (x[(name, kind)]["server_cpu"] + x[(name, kind)]["client_cpu"]) * x[(name, kind)]["qps"] / 1000 for x in rounds
            )
            rows.append(
                f"| {kind} | {name} | {med[key]:.0f} | {ratio} | {med['server_cpu']:.2f}"
                + (f" + {med['client_cpu']:.2f}" if name != "in-process" else "")
                + f" | {cores:.2f} | {2000 / cpu:.0f} | {med['p50']:.1f} / {med['p99']:.1f} | "
                f"{last['ok']} / {last['refused']} |"
            )
    n0, p50, p99, mx = iso["alone"]
    iso_rows = [f"| nothing (alone) | | | {n0} | {p50:.1f} | {p99:.1f} | {mx:.1f} |"]
    for name, ((n, p50, p99, mx), codes, attack_ms) in iso["during"].items():
        iso_rows.append(f"| {name} | {', '.join(codes)} | {attack_ms:.0f} | {n} | {p50:.1f} | {p99:.1f} | {mx:.1f} |")
    best = max(statistics.median(x[(name, "aggregate")]["aps"] for x in rounds) for name in setups)

    def agg_cpu(name: str) -> float:
        return statistics.median(x[(name, "aggregate")]["server_cpu"] + x[(name, "aggregate")]["client_cpu"] for x in rounds)

    md = "\n".join(
        [
            "## server: `veil serve` throughput (wire vs in-process, 1 and 2 processes)",
            "",
            f"{args.clients} concurrent clients × {args.queries} queries each on a {args.rows:,}-row table, "
            f"{args.rounds} interleaved rounds on fresh ledgers (medians; per-round ratios in brackets) "
            f"(`bench/server_throughput.py`, run {started}). Wire: psycopg 3 async clients (extended protocol, "
            "server-side parameters, all in one client process) → `veil serve` in a separate process, "
            "with one process and with `--processes N` (N worker processes listening on the port with "
            "SO_REUSEPORT, each with its own query sessions; docs/server.md). In-process: the same handler "
            "(`VeilSession.answer`, same worker pool) called directly in one process, no sockets. "
            "Aggregate = `SELECT sex, COUNT(*), AVG(income) … WHERE income > k GROUP BY sex`, "
            "a different `k` per query (no cache hits), ε = 0.01, "
            "counted in answers/s (refusals excluded). Steady state: every client connects and has its session's "
            "first query answered (untimed, but charged and checked below) before the clock starts; trivial = "
            "`SELECT 42`, in statements/s. CPU per answer: "
            "user + system CPU of the server's processes (all workers) and of the client process, from /proc, "
            'divided by the statements run; in-process, the one process\'s CPU. "2 cores ÷ CPU per answer" is '
            "the rate the two cores would sustain if nothing else ran on them (an upper bound: GIL waits, the "
            "ledger's lock and scheduling are not in it); cores used = CPU per statement × statements/s.",
            "",
            "| query | setup | answers/s (trivial: statements/s) | vs in-process | CPU ms per answer (server + "
            "clients) | cores used | 2 cores ÷ CPU per answer | p50 / p99 ms | answered / refused (VB001), last round |",
            "|---|---|---|---|---|---|---|---|---|",
            *rows,
            "",
            f"Issue 16's target: ≥ 300 aggregate answers/s with 20 clients on 2 cores. Best here: **{best:.0f}**"
            + (" (met)." if best >= 300 else " (not met on this host; see below)."),
            "",
            "Ledger after the run (checked by the script; it fails otherwise): every charge has its release, "
            "spent = Σ charges = answered × quoted cost, never above the budget (`dan` is given too little "
            "on purpose, so part of its queries are refused while the others keep running):",
            "",
            *[f"- {line}" for line in ledger_lines],
            "",
            "Where the time goes: each aggregate answer is several ms of Python under the GIL (plan, rewrite, "
            "noise, release log; `bench/proxy_overhead.py`) plus a synced SQLite commit of the ledger, so one "
            "process answers at most about one core's worth of queries however many clients wait, in-process "
            "and through the wire alike (p50 ≫ single-query latency: clients queue). The wire adds little per "
            "query: a trivial statement costs the server "
            f"{statistics.median(x[(setups[1], 'trivial')]['server_cpu'] for x in rounds):.2f} ms of CPU "
            "(Describe is planned once per prepared statement; replies go out in one write per round trip), and "
            "under 20 aggregate clients the event loop holds the GIL a few % of the time (py-spy). `--processes 2` "
            "runs two such interpreters, so answers can use both cores. 300 answers/s on 2 cores needs at most "
            f"{2000 / 300:.1f} ms of CPU per answer, server and clients together; measured here: "
            f"{min(agg_cpu(n) for n in setups):.1f} ms. Within that budget the rate is still short of it because "
            "each process runs `--workers` (8) analyst threads under one interpreter lock: on 2 cores their "
            "switching costs about a millisecond of CPU per answer and keeps the processes from using both cores "
            "fully (the session 18 paragraph below measures `--workers 1` and 2).",
            "",
            "2026-11-26, fourth round: CPU per aggregate answer fell from 16.2–17.4 ms (the 02:44 UTC run) to "
            "10.3–10.9 ms. Most of it was the answer cache's lookup: SQLite chose the `kind` index and scanned "
            "every logged answer, so each query cost time linear in the ledger's history (2 ms at 4,500 releases; "
            "this benchmark logs about 1,200 per round); it now runs on its own index (a test counts SQLite steps "
            "at 30 and 30,000 releases). The rest: `GROUP BY sex` skips the DESCRIBE round trip (its key is a bare "
            "base-table column whose type the catalog gives; the statement binds when it runs, and an engine error "
            "from before reading data refunds the reservation as for keyless queries). On this run a red-team "
            "helper used about one core, so `--processes 2` got 1.1 cores: the rate is core-bound, not a measure "
            "of what two free cores give (at most 2 cores ÷ CPU per answer ≈ 180–190/s). The 300/s target stays "
            "missed."
            " Fewer analyst threads help on 2 cores: in-process, 20 clients, two runs each, `--workers 2` gave "
            "8.7–8.9 ms of CPU per answer, 112–115 answers/s and p99 270–300 ms against 9.5–9.8 ms, 100–105/s and"
            " p99 470–670 ms with the default 8 (Python work holds the GIL; more threads than cores only add "
            "switching). The default stays 8 so that long engine statements do not queue the others; set "
            "`--workers` near the core count for short aggregates.",
            "",
            "2026-11-26, fifth round (idle host, no helper running): 117 answers/s with `--processes 2`, 85 "
            "through one process, 93 in-process; 10.7–11.9 ms of server CPU per answer (the checks this round "
            "added cost ~0.2 ms of it). The bound two free cores give is 158–179/s; the 300/s target stays "
            "missed: it needs ≤ 6.7 ms of CPU per answer, and what is left is spread over the passes (no one of "
            "them above ~2 ms).",
            "",
            "2026-11-27, twelfth round (after the ledger change of the proxy section's eleventh round: a query's "
            "fsync runs in a worker thread, outside the ledger's lock, while the engine runs, and a release logs each "
            "statistic once over its groups). Two rounds each of the code before (2bf86a8) and after, one after the "
            "other, on a host with nothing else running (the load averages below are this benchmark's own 20 "
            "clients): aggregate answers/s with `--processes 2` went from 84 (the old code's one measured round: "
            "the benchmark then stopped, its ledger check finding one of the low-budget analyst's reservations still "
            "`reserved` after the round; not seen with the new code nor in earlier runs, cause not found) to 122 in both "
            "rounds, "
            "in-process 89 → 104–125, one process 82 → 92–102. CPU per answer did not fall (11.7–12.0 ms of server "
            "CPU): the gain is waiting, not work, since sessions no longer queue behind one another's fsync under "
            "the ledger's lock. The table above, a third run right after, gave 135/s with `--processes 2`. The 300/s "
            "target stays missed.",
            "",
            "2026-11-27, thirteenth round: `veil serve` now sizes each process's DuckDB thread pool (`--engine-"
            "threads`, by default the cores divided by `--processes`, so 1 per process here with 2 processes; before, "
            "each process's DuckDB kept a thread per core, 4 threads on 2 cores, and each small query paid for threads"
            ' that only waited). Same code measured both ways, with nothing else running: a run with `--server-flags "'
            '--engine-threads 2"` (the old pool size) just before the table above and one just after, 2 rounds each, '
            "gave 107–118 and 97–115 answers/s with `--processes 2` at 12.6–14.4 ms of server CPU per answer; the "
            "default gave 129–138 answers/s at 10.4–11.0 ms (the table above). In-process (one pool of DuckDB's "
            "default size, unchanged) gave 93–100. Also this round: a catalog build (every new connection) no longer "
            "reads every logged answer (red team s41 A4: 4 s per connection at 20,000 logged answers; this benchmark "
            "logs about 1,200 a round, so it mattered little here). The 300/s target stays missed: it needs at most "
            "6.7 ms of CPU per answer, server and clients together; measured 11.0–11.6 ms.",
            "",
            "2026-11-27, session 17: the noise pass calls OpenDP's C API directly (proxy section: 0.15–0.25 ms less "
            "per OpenDP call; this aggregate makes three calls, its groups are declared so partition selection draws "
            "none); this session also added checks on the wire (Bind's format counts, held parameter bytes) and in "
            "the parse pass. A run of three rounds just before the table above, on a host that other sessions kept "
            "busier than the thirteenth round's (the proxy section's same-minutes A/B: main at 92e0b70 was 10–20% "
            "slower end to end than there), gave 109–140 answers/s with `--processes 2`, 91–102 through one "
            "process, 102–124 in-process, at 10.6–13.0 ms of server CPU per answer. The 300/s target stays missed.",
            "",
            "2026-11-28, session 18, on a much faster host than the s13–s17 tables' (a trivial statement in-process "
            "costs 0.04–0.07 ms of CPU here against 0.18 there; compare only within this paragraph). This code against "
            "main at the s17 end (1c02125), alternately, nothing else running: `--processes 2` gave 246–253 answers/s "
            "at 5.3–5.4 ms of server CPU per answer (two rounds), the s17 end 234–255 at 5.5–5.9 ms (five rounds); "
            "in-process 212–221 against 218. The ledger's fewer statements and shared release fsyncs are the change "
            "here (proxy section). What decides the rate on 2 cores is the analyst thread pool: with `--processes 2`, "
            "one round per setting in turn, twice, `--server-flags '--workers N'`: N = 1 gave 299 and 306 answers/s "
            "(328–335 statements/s with the refusals) at 4.9 ms of CPU per answer and p99 144–156 ms; N = 2 gave 275 and "
            "281 at 5.0–5.2 ms (p99 162–164 ms); the default N = 8 gave 228 and 235 at 5.8–6.0 ms (p99 428–562 ms). "
            "Sixteen Python threads on 2 cores spend the difference on switching the interpreter lock. So the 300/s "
            "target is reached, just (299 and 306), with one analyst thread per process on this host, and missed at "
            "the default; the default "
            "stays 8 because one thread per process queues every client of that process behind a long statement "
            "(docs/server.md, `--workers`).",
            "",
            "2026-11-28, session 19, same host, quiet (1-minute load 1.3–2.5): the analyst pool now starts Python work on "
            "at most cores ÷ processes threads at once, a job past 50 ms not counted (`--busy-workers`, docs/server.md), "
            "with `--workers` still 8, so a long statement no longer queues the other clients of its process. One round "
            "each with `--processes 2`, in the same minutes: main at the s18 end (a93a6bc) gave 312 answers/s at 4.52 ms "
            "of server CPU per answer (p99 459 ms); this code 362 and 372 answers/s at 4.06–4.11 ms (p99 95–165 ms, 25–27 "
            "voluntary context switches per statement), and 350–370 in the three rounds of the table above. The 300/s "
            "target is met at the default `--workers` with `--processes 2`; one process stays near one core's worth "
            "(225–230 through the wire).",
            "",
            "2026-11-28, session 22: does the DuckDB thread floor of 2 (session 21, `warehouse.MIN_READER_THREADS`: with "
            "`--processes 2` on 2 cores each process now runs 2 DuckDB threads where it ran 1) cost throughput? Measured "
            "on a heavily loaded host (six agents, test suites and Spark JVMs; 1-minute load 2.3 rising to 15 in the "
            "first series and 10–26 in the second), so the absolute rates are a third to a tenth of the quiet-host "
            "table's and the comparison is round by round, each setup in turn in the same minutes, `--processes 2`, one "
            "round each: the session-19 code (beb58e8, the table's), main at e9847fd (floor 2), and main with the floor "
            "set back to 1 (a bench-only copy; the floor itself stays). First series, answers/s (server CPU ms per "
            "answer): s19 137, 112, 63 (7.55, 7.56, 8.70); main 158, 145, 71 (6.92, 5.72, 7.36); main with 1 thread 160, "
            "139, 42 (6.80, 6.89, 7.99). Second series, with this session's noise change (b42f96d): main 91, 56, 44 "
            "(6.66, 8.79, 9.19); this code 94, 40, 32 (6.58, 8.53, 7.53); main with 1 thread 82, 45, 52 (6.74, 7.01, "
            "7.88). No regression from the floor shows: main beside its 1-thread copy is ahead in four rounds of six, and "
            "main beside the s19 code ahead in all three, with less CPU per answer. That is what the statement predicts: "
            "the aggregate reads a 10,000-row table, one DuckDB row group, so a second DuckDB thread has no work in it "
            "and only waits. Whether the rate is still ≥ 300/s on a quiet host was not measurable this session (no quiet "
            "minutes); nothing in these rounds points to a change against the 350–370/s of session 19."
            " This session's final code (41f004d) beside main, two rounds each in turn at load 14–19: 135 and 95 "
            "answers/s (7.07, 8.75 ms) against 126 and 119 (7.95, 7.42 ms), within the rounds' spread.",
            "",
            "### Isolation: one client's cheap query while another sends pathological ones",
            "",
            f"`{CHEAP}` (cached after its first answer) repeated for {args.isolation_seconds:g} s by one client, "
            "alone and then while a second client repeats each statement below in turn (`veil serve "
            "--catalog-timeout 2`, one process, other limits at their defaults). Before this server's isolation "
            "work, the catalog cross join froze every client for ~58 s and a 1 MB statement made the server "
            "unreachable for minutes (issue 14).",
            "",
            "| the other client repeats | its answer (SQLSTATE) | its median ms | cheap queries | cheap p50 ms | "
            "cheap p99 ms | cheap max ms |",
            "|---|---|---|---|---|---|---|",
            *iso_rows,
            "",
            f"Caveat: a 2-core host shared with other work (1/5/15-minute load averages {load_start[0]:.1f} / "
            f"{load_start[1]:.1f} / {load_start[2]:.1f} at the start, {load_end[0]:.1f} / {load_end[1]:.1f} / "
            f"{load_end[2]:.1f} at the end; with nothing else running the load would stay near 2 while this runs; "
            f"this run's scheduling priority: nice {niceness}); "
            '"cores used" is how much of the 2 cores the setup actually got: `--processes 2` can only beat one '
            'process when a second core is free for it, which is what "2 cores ÷ CPU per answer" assumes; '
            "clients, server processes and DuckDB share those cores (DuckDB threads: `--engine-threads` at its "
            "default, one per process with 2 processes, DuckDB's own with one). "
            "Absolute numbers drift with load by ±30% between minutes; ratios are measured interleaved, round by "
            "round.",
        ]
    )
    if not args.no_write:
        from bench._report import write_section

        print(write_section("server", md))
    else:
        print(md)


if __name__ == "__main__":
    main()
