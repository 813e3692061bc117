"""Veil on DuckDB and on Spark local, each beside the raw engine's own time for the same analyst SQL.

A synthetic table (user_id with ~4 rows per user, age 18–90, income 0–200,000, sex, 50 states,
10 diagnoses, and ``cell``: 1,000,000 distinct values) is generated inside each engine at 1M and 10M
rows, row-level. Queries: the four proxy-overhead queries (COUNT(*), AVG(income), state GROUP BY,
sex × diagnosis GROUP BY), a private GROUP BY over 1M groups (DP partition selection), and a
median. Each timed query differs (a varying WHERE bound) so the answer cache cannot hide the cost.
"raw" runs the analyst's SQL on the raw table in the same engine, interleaved with Veil. The
bounded copy (clamped, typed) is built once per table version; its build time is reported.

Run: ``.venv/bin/python -m bench.engines [--rows 1000000 10000000] [--reps 3] [--engines duckdb spark]
[--no-write]``. Spark needs pyspark and Java (``pip install 'veil[spark]'``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import sqlglot

from bench._report import write_section
from veil.policy import Policy, load_policy
from veil.proxy.session import QuerySession

POLICY = """\
[database]
path = "bench.duckdb"
[ledger]
path = "ledger.sqlite"
[defaults]
epsilon_per_query = 0.01
[tables.people]
privacy_unit = "row"
[tables.people.columns]
age = {{ type = "int", lower = 18, upper = 90 }}
income = {{ type = "float", lower = 0, upper = 200000 }}
sex = {{ type = "category", values = ["F", "M"] }}
state = {{ type = "category" }}
diagnosis = {{ type = "category", values = ["D0", "D1", "D2", "D3", "D4", "D5", "D6", "D7", "D8", "D9"] }}
cell = {{ type = "int" }}
[analysts.bench]
epsilon = 1000000000.0
{engine}
"""

SPARK = '[engine]\nkind = "spark"\nmaster = "local[2]"\n'

#: Data generated inside the engine (DuckDB dialect; transpiled for Spark). ``i`` runs over range(n).
GENERATE = """
SELECT CAST(i // 4 AS BIGINT) AS user_id,
       CAST(18 + (i * 7919) % 73 AS BIGINT) AS age,
       CAST(((i * 104729) % 200000) AS DOUBLE) AS income,
       CASE WHEN i % 2 = 0 THEN 'F' ELSE 'M' END AS sex,
       'S' || CAST((i * 31) % 50 AS VARCHAR) AS state,
       'D' || CAST((i * 17) % 10 AS VARCHAR) AS diagnosis,
       CAST(i % 1000000 AS BIGINT) AS cell
FROM range({n}) AS r(i)
"""

GENERATE_SPARK = """
SELECT CAST(id DIV 4 AS BIGINT) AS user_id,
       CAST(18 + (id * 7919) % 73 AS BIGINT) AS age,
       CAST((id * 104729) % 200000 AS DOUBLE) AS income,
       CASE WHEN id % 2 = 0 THEN 'F' ELSE 'M' END AS sex,
       concat('S', CAST((id * 31) % 50 AS STRING)) AS state,
       concat('D', CAST((id * 17) % 10 AS STRING)) AS diagnosis,
       CAST(id % 1000000 AS BIGINT) AS cell
FROM range({n})
"""

QUERIES: dict[str, str] = {
    "COUNT(*)": "SELECT COUNT(*) FROM people WHERE age >= {b} AND income > -{u}",
    "AVG(income)": "SELECT AVG(income) FROM people WHERE age >= {b} AND income > -{u}",
    "state GROUP BY": "SELECT state, COUNT(*), AVG(income) FROM people WHERE age >= {b} AND income > -{u} GROUP BY state",
    "sex×diagnosis GROUP BY": "SELECT sex, diagnosis, COUNT(*) FROM people WHERE age >= {b} AND income > -{u}"
    " GROUP BY sex, diagnosis",
    "1M-group GROUP BY": "SELECT cell, COUNT(*) FROM people WHERE age >= {b} AND income > -{u} GROUP BY cell",
    "MEDIAN(income)": "SELECT MEDIAN(income) FROM people WHERE age >= {b} AND income > -{u}",
}


def _policy(directory: Path, engine: str) -> Policy:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "policy.toml").write_text(POLICY.format(engine=SPARK if engine == "spark" else ""), encoding="utf-8")
    return load_policy(directory / "policy.toml")


def _load(policy: Policy, n: int) -> float:
    """Generate the table inside the engine; returns seconds."""
    t = time.perf_counter()
    if policy.engine.kind == "spark":
        from veil.store import spark

        s = spark.spark_session(policy.engine)
        sql = GENERATE_SPARK.format(n=n)
        loc = spark._location(policy.engine, "people")
        s.sql("DROP TABLE IF EXISTS people")
        s.sql(f"CREATE TABLE people USING parquet LOCATION '{loc}' AS {sql}")
    else:
        from veil.store import warehouse

        with warehouse.writer(policy) as con:
            con.execute(f"CREATE OR REPLACE TABLE people AS {GENERATE.format(n=n)}")
    return time.perf_counter() - t


def _raw_runner(policy: Policy) -> Callable[[str], Any]:
    if policy.engine.kind == "spark":
        from veil.store import spark

        s = spark.spark_session(policy.engine)

        def run_spark(sql: str) -> Any:
            text = sqlglot.transpile(sql, read="postgres", write="spark")[0]
            return s.sql(text).toArrow()

        return run_spark
    from veil.store import warehouse

    def run_duckdb(sql: str) -> Any:
        cur, _ = warehouse.reader_cursor(policy)
        return cur.execute(sql).fetchall()

    return run_duckdb


def _median_ms(xs: list[float]) -> float:
    return statistics.median(xs) * 1000


def run(engine: str, n: int, reps: int, base: Path, queries: list[str]) -> list[dict[str, Any]]:
    policy = _policy(base / f"{engine}-{n}", engine)
    load_s = _load(policy, n)
    raw = _raw_runner(policy)
    out: list[dict[str, Any]] = []
    with QuerySession(policy, "bench") as session:
        t = time.perf_counter()
        session.execute("SELECT COUNT(*) FROM people WHERE age >= 17")  # builds the bounded copy
        first_s = time.perf_counter() - t
        t = time.perf_counter()
        session.execute("SELECT COUNT(*) FROM people WHERE age >= 16")
        warm_s = time.perf_counter() - t
        out.append({"engine": engine, "rows": n, "query": "load (generate table)", "raw": load_s * 1000, "veil": None})
        out.append(
            {"engine": engine, "rows": n, "query": "bounded copy build", "raw": None, "veil": max(first_s - warm_s, 0) * 1000}
        )
        for r in out:
            print(r, flush=True)
        bound = 18
        for name, template in QUERIES.items():
            if name not in queries:
                continue
            raws: list[float] = []
            veils: list[float] = []
            for _ in range(reps):
                bound += 1
                sql = template.format(b=18 + bound % 40, u=bound)  # a new text every time: no cache hit
                t = time.perf_counter()
                raw(sql)
                raws.append(time.perf_counter() - t)
                t = time.perf_counter()
                session.execute(sql)
                veils.append(time.perf_counter() - t)
            out.append({"engine": engine, "rows": n, "query": name, "raw": _median_ms(raws), "veil": _median_ms(veils)})
            print(out[-1], flush=True)
    return out


def _fmt(v: float | None) -> str:
    if v is None:
        return "—"
    return f"{v:,.0f}" if v >= 100 else f"{v:.1f}"


def report(results: list[dict[str, Any]], reps: int, load: str) -> str:
    lines = [
        "## engines: Veil on DuckDB and on Spark local, beside each raw engine",
        "",
        f"Median of {reps} runs per cell (interleaved raw/Veil, a different WHERE bound each time: no cache hits); "
        "row-level table generated inside each engine; Spark `local[2]` in the same process (pyspark 4.3, "
        "ANSI off, results through Arrow). Raw = the analyst's SQL on the raw table in the same engine. Veil times "
        "include planning, the durable ledger write, noise and post-processing. The 1M-group query releases only "
        "the groups that pass DP partition selection (most of 1–10 rows do not), but Veil still reads and noises "
        "all of them. "
        f"Machine: a 2-core host shared with ~7 other agents (load average {load}): absolute times drift by up to 3×; "
        "compare within a row.",
        "",
        "| engine | rows | query | raw ms | Veil ms | Veil/raw |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        ratio = f"{r['veil'] / r['raw']:.2f}×" if r["veil"] is not None and r["raw"] else ""
        lines.append(f"| {r['engine']} | {r['rows']:,} | {r['query']} | {_fmt(r['raw'])} | {_fmt(r['veil'])} | {ratio} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 10_000_000])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--engines", nargs="+", default=["duckdb", "spark"], choices=["duckdb", "spark"])
    ap.add_argument("--queries", nargs="*", default=list(QUERIES), help="a subset of the queries (default: all)")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--json", type=Path, help="also save this run's results here")
    ap.add_argument("--merge", type=Path, nargs="*", default=[], help="results of earlier runs to report with this one")
    args = ap.parse_args()
    load0 = os.getloadavg()[0]
    results: list[dict[str, Any]] = []
    for f in args.merge:
        results.extend(json.loads(f.read_text(encoding="utf-8")))
    with tempfile.TemporaryDirectory(prefix="veil-bench-engines-") as d:
        for engine in args.engines:
            if engine == "spark":
                from veil.engines.spark import spark_available

                reason = spark_available()
                if reason is not None:
                    print(f"skipping Spark: {reason}")
                    continue
            for n in args.rows:
                results.extend(run(engine, n, args.reps, Path(d), args.queries))
    if args.json is not None:
        mine = [r for r in results if r not in [x for f in args.merge for x in json.loads(f.read_text(encoding="utf-8"))]]
        args.json.write_text(json.dumps(mine, indent=1), encoding="utf-8")
    md = report(results, args.reps, f"{load0:.1f} at start, {os.getloadavg()[0]:.1f} at end")
    print(md)
    if not args.no_write:
        print(f"wrote {write_section('engines', md)}")


if __name__ == "__main__":
    main()
