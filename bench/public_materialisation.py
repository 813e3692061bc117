"""What evaluating a derived public source once (a temporary table both its probe and the query read) adds to a query.

A private table of ``--rows`` rows (user-level, 5 rows per unit) joined on a pinned key with a derived public source:
``small`` (50 states, a filter), ``large`` (``--public`` rows of zip codes, a filter). Every query differs (a varying
WHERE bound on the private table) so the answer cache cannot hide the cost. The two paths run interleaved in one
process, on one session each: *once* (the materialisation, DuckDB's default now) and *twice* (the source measured by
a probe of its own, cached per generation, and run again by the query — the path Spark keeps). Reported: median wall
and CPU (``time.thread_time``: DuckDB's own threads are not in it, so the wall is the figure; the CPU shows the Python
side) per query, and the difference.

Run: ``.venv/bin/python -m bench.public_materialisation [--rows 100000] [--public 100000] [--reps 15]``
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from bench._report import write_section
from veil.policy import load_policy
from veil.proxy.session import Env, QuerySession
from veil.store import warehouse

POLICY = """\
[database]
path = "bench.duckdb"
[ledger]
path = "ledger.sqlite"
[defaults]
epsilon_per_query = 0.001
[tables.people]
privacy_unit = "user_id"
max_rows_per_unit = 5
[tables.people.columns]
user_id = { type = "int" }
age = { type = "int", lower = 18, upper = 90 }
state = { type = "category" }
zip = { type = "int" }
[tables.states]
public = true
[tables.states.columns]
state = { type = "category" }
region = { type = "category" }
[tables.zips]
public = true
[tables.zips.columns]
zip = { type = "int" }
state = { type = "category" }
pop = { type = "int" }
[analysts.bench]
epsilon = 1000000000.0
"""

QUERIES = {
    "small": "SELECT COUNT(*) FROM people p JOIN (SELECT state, region FROM states WHERE region <> 'R9') s "
    "ON s.state = p.state WHERE p.age >= {v}",
    "large": "SELECT COUNT(*) FROM people p JOIN (SELECT zip, pop FROM zips WHERE pop > 100) z ON z.zip = p.zip "
    "WHERE p.age >= {v}",
    "base": "SELECT COUNT(*) FROM people p JOIN states s ON s.state = p.state WHERE p.age >= {v}",
}


def build(folder: Path, rows: int, public: int) -> Path:
    rng = np.random.default_rng(7)
    path = folder / "policy.toml"
    path.write_text(POLICY, encoding="utf-8")
    policy = load_policy(path)
    states = [f"S{i:02d}" for i in range(50)]
    people = pd.DataFrame(
        {
            "user_id": rng.integers(0, rows // 4, rows),
            "age": rng.integers(18, 91, rows),
            "state": rng.choice(states, rows),
            "zip": rng.integers(0, public, rows),
        }
    )
    warehouse.write_table(policy, "people", people, replace=True)
    warehouse.write_table(
        policy, "states", pd.DataFrame({"state": states, "region": [f"R{i % 10}" for i in range(50)]}), replace=True,
        public=True,
    )  # fmt: skip
    zips = pd.DataFrame({"zip": np.arange(public), "state": rng.choice(states, public), "pop": rng.integers(0, 10_000, public)})
    warehouse.write_table(policy, "zips", zips, replace=True, public=True)
    return path


def timed(session: QuerySession, sql: str, eps: float) -> tuple[float, float]:
    w, c = time.perf_counter(), time.thread_time()
    session.execute(sql, epsilon=eps)
    return time.perf_counter() - w, time.thread_time() - c


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--public", type=int, default=100_000)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--no-write", action="store_true", help="print only; leave docs/benchmarks.md alone")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        policy = build(Path(tmp), args.rows, args.public)
        once = QuerySession(load_policy(policy), "bench")
        twice = QuerySession(load_policy(policy), "bench")
        twice._env.__class__ = type("TwiceEnv", (Env,), {"materialises": property(lambda self: False)})
        results: dict[str, dict[str, list[tuple[float, float]]]] = {}
        k = 0
        for name, sql in QUERIES.items():
            for s in (once, twice):  # warm: bounded copy, catalog, probe cache of the twice path
                k += 1
                s.execute(sql.format(v=18), epsilon=0.001 + k * 1e-9)
            res: dict[str, list[tuple[float, float]]] = {"once": [], "twice": []}
            for rep in range(args.reps):
                for label, s in (("once", once), ("twice", twice)) if rep % 2 else (("twice", twice), ("once", once)):
                    k += 1
                    res[label].append(timed(s, sql.format(v=19 + rep % 60), 0.001 + k * 1e-9))
            results[name] = res
        once.close()
        twice.close()
    print(f"rows={args.rows} public={args.public} reps={args.reps}")
    print(f"{'query':<6} {'once wall ms':>13} {'twice wall ms':>14} {'Δ wall ms':>10} {'once cpu ms':>12} {'twice cpu ms':>13}")
    lines = [
        "## public-materialisation: a derived public source evaluated once",
        "",
        f"`bench/public_materialisation.py`, {args.rows:,} private rows (user-level), a derived public source joined on a "
        f"pinned key (`small`: 50 states; `large`: {args.public:,} zip codes, filtered), {args.reps} interleaved "
        "repetitions, medians. *Once*: the source is evaluated into a temporary table both its probe and the query read "
        "(DuckDB's path, since 2026-11-28); *twice*: measured by a probe of its own (cached per generation) and run "
        "again by the query (the path Spark keeps). CPU is the Python thread's (`time.thread_time`; DuckDB's own "
        "threads are not in it).",
        "",
        "| source | once wall ms | twice wall ms | added ms | once CPU ms | twice CPU ms |",
        "|---|---|---|---|---|---|",
    ]
    for name, res in results.items():
        med: dict[str, Any] = {
            k: (statistics.median(w for w, _ in v) * 1e3, statistics.median(c for _, c in v) * 1e3) for k, v in res.items()
        }
        print(
            f"{name:<6} {med['once'][0]:>13.2f} {med['twice'][0]:>14.2f} {med['once'][0] - med['twice'][0]:>10.2f} "
            f"{med['once'][1]:>12.2f} {med['twice'][1]:>13.2f}"
        )
        lines.append(
            f"| {name} | {med['once'][0]:.2f} | {med['twice'][0]:.2f} | {med['once'][0] - med['twice'][0]:+.2f} | "
            f"{med['once'][1]:.2f} | {med['twice'][1]:.2f} |"
        )
    if not args.no_write:
        print("wrote", write_section("public-materialisation", "\n".join(lines)))


if __name__ == "__main__":
    main()
