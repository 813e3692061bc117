"""Veil on DuckDB and on Spark local, each beside the raw engine's own time for the same analyst SQL.

A synthetic row-level table (user_id with 4 rows per user, age 18–90, income 0–200,000, sex, 50 states,
10 diagnoses, and ``cell``: 1,000,000 distinct values) is generated inside each engine straight to disk
(DuckDB: ``range()`` into the warehouse file; Spark: ``range()`` into Parquet), never through a Python
frame, so 100M rows need no memory beyond the engine's own. Queries: the four proxy-overhead queries
(COUNT(*), AVG(income), state GROUP BY, sex × diagnosis GROUP BY), a private GROUP BY over 1M groups
(DP partition selection), and a median. Each timed query differs (a varying WHERE bound) so the answer
cache cannot hide the cost. "raw" runs the analyst's SQL on the raw table in the same engine, interleaved
with Veil. The bounded copy (clamped, typed) is built once per table version; its build time is reported.

Each (engine, rows) cell runs in a child process of its own, so its peak memory (the Python process, and
Spark's JVM) is its own. DuckDB also runs the two heaviest raw queries under a small ``memory_limit``
(``--memory-limit``) to show whether it spills or fails. Rows of earlier runs in docs/benchmarks.md whose
(engine, rows) were not rerun are kept, with their dates (``--fresh`` drops them).

Run: ``.venv/bin/python -m bench.engines [--rows 1000000 10000000 100000000] [--reps 3] [--engine duckdb spark]
[--dir DIR] [--cell-timeout 900] [--no-write]``. Spark needs pyspark and Java (``pip install 'veil[spark]'``);
``--driver-memory`` sets its JVM heap (local mode).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlglot

from bench._report import DOC, write_section
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

#: The raw queries run again under DuckDB's ``memory_limit`` (the two with the largest working sets).
HEAVY = ("1M-group GROUP BY", "MEDIAN(income)")


def _policy(directory: Path, engine: str) -> Policy:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "policy.toml").write_text(POLICY.format(engine=SPARK if engine == "spark" else ""), encoding="utf-8")
    return load_policy(directory / "policy.toml")


def _now() -> str:
    return f"{datetime.now(UTC):%Y-%m-%d %H:%M}"


def _disk(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else 0


def _data_path(policy: Policy) -> Path:
    if policy.engine.kind == "spark":
        from veil.store import spark

        return spark._db_dir(policy.engine)
    return Path(policy.database_path)


def _load(policy: Policy, n: int) -> float:
    """Generate the table inside the engine, straight to disk; returns seconds."""
    t = time.perf_counter()
    if policy.engine.kind == "spark":
        from veil.store import spark

        s = spark.spark_session(policy.engine)
        loc = spark._location(policy.engine, "people")
        s.sql("DROP TABLE IF EXISTS people")
        s.sql(f"CREATE TABLE people USING parquet LOCATION '{loc}' AS {GENERATE_SPARK.format(n=n)}")
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


@contextmanager
def _deadline(policy: Policy, seconds: float) -> Iterator[None]:
    """Interrupt every Spark statement still running after ``seconds`` (DuckDB cells are not cut short)."""
    if policy.engine.kind != "spark":
        yield
        return
    from veil.store import spark

    s = spark.spark_session(policy.engine)
    timer = threading.Timer(seconds, s.interruptAll)
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def _timed(policy: Policy, fn: Callable[[], Any], limit: float) -> float | None:
    """Seconds ``fn`` took, or None when it was stopped at ``limit``."""
    t = time.perf_counter()
    try:
        with _deadline(policy, limit):
            fn()
    except Exception as exc:
        took = time.perf_counter() - t
        if took < limit * 0.99:
            raise
        print(f"  stopped after {took:.0f} s ({type(exc).__name__})", flush=True)
        return None
    return time.perf_counter() - t


def _jvm_peak_bytes(policy: Policy) -> int | None:
    """Peak resident memory of Spark's local JVM (VmHWM of the gateway's process)."""
    if policy.engine.kind != "spark" or policy.engine.remote is not None:
        return None
    from veil.store import spark

    s = spark.spark_session(policy.engine)
    proc = getattr(getattr(s.sparkContext, "_gateway", None), "proc", None)
    pid = getattr(proc, "pid", None)
    if pid is None:
        return None
    pids = [pid, *_children(pid)]
    peak = 0
    for p in pids:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peak = max(peak, int(line.split()[1]) * 1024)
        except OSError:
            continue
    return peak or None


def _children(pid: int) -> list[int]:
    try:
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return []
    out = [int(k) for k in kids]
    for k in list(out):
        out.extend(_children(k))
    return out


def run_cell(engine: str, n: int, reps: int, base: Path, queries: list[str], limit: float) -> dict[str, Any]:
    """One (engine, rows) cell: load, bounded copy, the queries; in this process (a child of :func:`main`)."""
    policy = _policy(base / f"{engine}-{n}", engine)
    load_s = _timed(policy, lambda: _load(policy, n), limit * 2)
    if load_s is None:
        return {"rows": [], "memory": {}, "stopped": "load"}
    raw = _raw_runner(policy)
    disk_loaded = _disk(_data_path(policy))
    when = _now()
    out: list[dict[str, Any]] = [
        {"engine": engine, "rows": n, "query": "load (generate table)", "raw": load_s * 1000, "veil": None, "measured": when}
    ]
    print(out[-1], flush=True)
    with QuerySession(policy, "bench") as session:
        first_s = _timed(policy, lambda: session.execute("SELECT COUNT(*) FROM people WHERE age >= 17"), limit * 2)
        if first_s is None:  # the bounded copy did not finish
            out.append({"engine": engine, "rows": n, "query": "bounded copy build", "raw": None, "veil": None,
                        "stopped_s": limit * 2, "measured": when})  # fmt: skip
            return {"rows": out, "memory": {}}
        t = time.perf_counter()
        session.execute("SELECT COUNT(*) FROM people WHERE age >= 16")
        warm_s = time.perf_counter() - t
        out.append({"engine": engine, "rows": n, "query": "bounded copy build", "raw": None,
                    "veil": max(first_s - warm_s, 0) * 1000, "measured": when})  # fmt: skip
        print(out[-1], flush=True)
        bound = 18
        for name, template in QUERIES.items():
            if name not in queries:
                continue
            raws: list[float] = []
            veils: list[float] = []
            stopped = False
            for _ in range(reps):
                bound += 1
                sql = template.format(b=18 + bound % 40, u=bound)  # a new text every time: no cache hit
                r = _timed(policy, lambda sql=sql: raw(sql), limit)
                v = _timed(policy, lambda sql=sql: session.execute(sql), limit)
                if r is None or v is None:
                    stopped = True
                    break
                raws.append(r)
                veils.append(v)
            row: dict[str, Any] = {"engine": engine, "rows": n, "query": name, "raw": None, "veil": None, "measured": _now(),
                                   "reps": reps}  # fmt: skip
            if stopped:
                row["stopped_s"] = limit
            else:
                row["raw"], row["veil"] = statistics.median(raws) * 1000, statistics.median(veils) * 1000
            out.append(row)
            print(row, flush=True)
    memory = {
        "python_peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "jvm_peak": _jvm_peak_bytes(policy),
        "disk_table": disk_loaded,
        "disk_with_copy": _disk(_data_path(policy)),
    }
    print(memory, flush=True)
    return {"rows": out, "memory": memory}


def run_memory_limit(base: Path, n: int, limits: list[str], queries: list[str]) -> list[dict[str, Any]]:
    """The heavy raw queries on the DuckDB cell's file again, in a fresh process, under each ``memory_limit``.

    The table is generated first when the cell's file is gone (``--probe-only`` on a fresh directory).
    """
    import duckdb

    path = base / f"duckdb-{n}" / "bench.duckdb"
    if not path.exists():
        _load(_policy(base / f"duckdb-{n}", "duckdb"), n)
        from veil.store import warehouse

        warehouse._close_reader(path.resolve())  # one configuration per file per process: let go of it
    spill = base / f"duckdb-{n}" / "spill"
    spill.mkdir(exist_ok=True)
    out = []
    for limit in limits:
        con = duckdb.connect(str(path), read_only=True, config={"memory_limit": limit, "temp_directory": str(spill)})
        for name in HEAVY:
            if name not in queries:
                continue
            sql = QUERIES[name].format(b=19, u=1)
            t = time.perf_counter()
            try:
                con.execute(sql).fetchall()
                took: float | None = (time.perf_counter() - t) * 1000
                note = ""
            except duckdb.Error as exc:
                took, note = None, f"failed: {type(exc).__name__}"
            out.append({"engine": "duckdb", "rows": n, "query": f"{name}, raw, memory_limit={limit}", "raw": took,
                        "veil": None, "measured": _now(), "note": note})  # fmt: skip
            print(out[-1], flush=True)
        con.close()
    shutil.rmtree(spill, ignore_errors=True)
    return out


# -- the report ---------------------------------------------------------------------------------------
def _fmt(v: float | None) -> str:
    if v is None:
        return "—"
    return f"{v:,.0f}" if v >= 100 else f"{v:.1f}"


def _gib(b: int | None) -> str:
    return "—" if not b else f"{b / 2**30:.2f} GiB"


_ROW = re.compile(r"^\| (duckdb|spark) \| ([\d,]+) \| (.+?) \| (.*?) \| (.*?) \| (.*?) \|(?: (.*?) \|)?$")
_MEM = re.compile(r"^\| (duckdb|spark) \| ([\d,]+) \| ([^|]+) \| ([^|]+) \| ([^|]+) \| ([^|]+) \| ([^|]+) \|$")


def _num(text: str) -> float | None:
    text = text.strip()
    if text in ("—", "", "stopped") or text.startswith(">"):
        return None
    return float(text.replace(",", ""))


def earlier_results(default_date: str) -> tuple[list[dict[str, Any]], list[str]]:
    """The rows of the current engines section (timings, then memory lines as they stand)."""
    text = DOC.read_text(encoding="utf-8") if DOC.exists() else ""
    if "<!-- begin:engines -->" not in text:
        return [], []
    section = text.split("<!-- begin:engines -->", 1)[1].split("<!-- end:engines -->", 1)[0]
    rows: list[dict[str, Any]] = []
    mem: list[str] = []
    in_mem = False
    for line in section.splitlines():
        if line.startswith("| engine | rows | data on disk"):
            in_mem = True
            continue
        if in_mem:
            if _MEM.match(line):
                mem.append(line)
            continue
        m = _ROW.match(line)
        if m is None:
            continue
        engine, n, query, raw, veil, _ratio, measured = m.groups()
        row: dict[str, Any] = {"engine": engine, "rows": int(n.replace(",", "")), "query": query, "raw": _num(raw),
                               "veil": _num(veil), "measured": measured or default_date}  # fmt: skip
        runs = re.search(r"Median of (\d+) runs per cell(?: \(([^)]*)\))?", section)
        if runs:
            row["reps"] = int(runs.group(1))
            for part in (runs.group(2) or "").split("; "):
                m2 = re.fullmatch(r"(duckdb|spark) ([\d,]+): (\d+)", part)
                if m2 and (m2.group(1), int(m2.group(2).replace(",", ""))) == (engine, row["rows"]):
                    row["reps"] = int(m2.group(3))
        stopped = re.match(r"stopped after (\d+) s", _ratio)
        if stopped:
            row["stopped_s"] = float(stopped.group(1))
        elif _ratio and not _ratio.endswith("×"):
            row["note"] = _ratio
        rows.append(row)
    return rows, mem


def _reps_text(results: list[dict[str, Any]]) -> str:
    """ "Median of 3 runs per cell (spark 100,000,000: 1)": the usual count, then the cells that differ."""
    per_cell: dict[tuple[str, int], int] = {}
    for r in results:
        if "reps" in r or (r["engine"], r["rows"]) not in per_cell:
            per_cell[(r["engine"], r["rows"])] = int(r.get("reps", 3))  # rows of the first report: 3 runs
    if not per_cell:
        return "Median of 3 runs per cell"
    usual = statistics.mode(per_cell.values())
    odd = [f"{e} {n:,}: {k}" for (e, n), k in sorted(per_cell.items()) if k != usual]
    return f"Median of {usual} runs per cell" + (f" ({'; '.join(odd)})" if odd else "")


def report(results: list[dict[str, Any]], memory: list[str], load: str, extra: str) -> str:
    lines = [
        "## engines: Veil on DuckDB and on Spark local, beside each raw engine",
        "",
        f"{_reps_text(results)} (interleaved raw/Veil, a different WHERE bound each time: no cache hits); "
        "row-level table generated inside each engine straight to disk; each (engine, rows) in a process of its own; "
        "Spark `local[2]` in that process (pyspark 4.3, ANSI off, results through Arrow). Raw = the analyst's SQL on "
        "the raw table in the same engine. Veil times include planning, the durable ledger write, noise and "
        "post-processing. The 1M-group query releases only the groups that pass DP partition selection, but Veil "
        "reads and noises all of them. "
        f"Machine: a 2-core, 24 GB host shared with other agents (load average {load}); the heavy runs ran at "
        "`nice -n 15`: absolute times drift by up to 3×; compare within a row.",
        "",
        "| engine | rows | query | raw ms | Veil ms | Veil/raw | measured (UTC) |",
        "|---|---|---|---|---|---|---|",
    ]
    order = {"load (generate table)": 0, "bounded copy build": 1}
    for r in sorted(results, key=lambda r: (r["engine"], r["rows"], order.get(r["query"], 2))):
        if r.get("stopped_s"):
            ratio = f"stopped after {r['stopped_s']:.0f} s"
        elif r.get("note"):
            ratio = r["note"]
        else:
            ratio = f"{r['veil'] / r['raw']:.2f}×" if r["veil"] is not None and r["raw"] else ""
        lines.append(
            f"| {r['engine']} | {r['rows']:,} | {r['query']} | {_fmt(r['raw'])} | {_fmt(r['veil'])} | {ratio} | {r['measured']} |"
        )
    if memory:
        lines += [
            "",
            "Memory and disk per cell (peak resident set of the cell's Python process, which holds DuckDB, and of "
            "Spark's JVM; the warehouse on disk after the load and with the bounded copy):",
            "",
            "| engine | rows | data on disk | with bounded copy | peak RSS (Python) | peak RSS (JVM) | measured (UTC) |",
            "|---|---|---|---|---|---|---|",
            *memory,
        ]
    if extra:
        lines += ["", extra]
    return "\n".join(lines)


def _memory_line(engine: str, n: int, m: dict[str, Any], when: str) -> str:
    return (
        f"| {engine} | {n:,} | {_gib(m.get('disk_table'))} | {_gib(m.get('disk_with_copy'))} | "
        f"{_gib(m.get('python_peak'))} | {_gib(m.get('jvm_peak'))} | {when} |"
    )


def _child(args: argparse.Namespace) -> None:
    engine, n = args.child[0], int(args.child[1])
    if engine == "duckdb" and args.memory_limit_only:
        res: dict[str, Any] = {"rows": run_memory_limit(args.dir, n, args.memory_limit, args.queries), "memory": {}}
    else:
        res = run_cell(engine, n, args.reps, args.dir, args.queries, args.cell_timeout)
    args.out.write_text(json.dumps(res), encoding="utf-8")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 10_000_000])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--engine", "--engines", dest="engines", nargs="+", default=["duckdb", "spark"],
                    choices=["duckdb", "spark"])  # fmt: skip
    ap.add_argument("--queries", nargs="*", default=list(QUERIES), help="a subset of the queries (default: all)")
    ap.add_argument("--dir", type=Path, help="where the tables are generated (default: a temporary directory)")
    ap.add_argument("--keep", action="store_true", help="keep the generated tables")
    ap.add_argument("--cell-timeout", type=float, default=900.0, help="stop a Spark statement after this many s")
    ap.add_argument("--memory-limit", nargs="*", default=["1GB"], help="DuckDB memory_limits for the heavy raw queries")
    ap.add_argument("--probe-only", action="store_true", help="DuckDB: only the heavy raw queries under --memory-limit")
    ap.add_argument("--driver-memory", default="6g", help="Spark local driver heap (PYSPARK_SUBMIT_ARGS)")
    ap.add_argument("--note", type=Path, help="a markdown file of reading notes to end the section with")
    ap.add_argument("--report-only", action="store_true", help="rewrite the section from its rows (and --note)")
    ap.add_argument("--fresh", action="store_true", help="drop the earlier rows of docs/benchmarks.md")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--memory-limit-only", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(args)
        return
    load0 = os.getloadavg()[0]
    started = time.time()
    base = args.dir or Path(tempfile.mkdtemp(prefix="veil-bench-engines-"))
    base.mkdir(parents=True, exist_ok=True)
    results: list[dict[str, Any]] = []
    memory: list[str] = []
    rerun: set[tuple[str, int]] = set()
    reprobed: set[int] = set()  # DuckDB row counts whose memory_limit rows were measured again
    try:
        for engine in [] if args.report_only else args.engines:
            if engine == "spark":
                from veil.engines.spark import spark_available

                reason = spark_available()
                if reason is not None:
                    print(f"skipping Spark: {reason}")
                    continue
            for n in args.rows:
                out = base / f"{engine}-{n}.json"
                if args.probe_only:
                    if engine == "duckdb" and args.memory_limit:
                        reprobed.add(n)
                        subprocess.run([sys.executable, "-m", "bench.engines", "--child", engine, str(n), "--dir",
                                        str(base), "--out", str(out), "--memory-limit", *args.memory_limit,
                                        "--memory-limit-only", "--queries", *args.queries], check=True)  # fmt: skip
                        results.extend(json.loads(out.read_text(encoding="utf-8"))["rows"])
                    continue
                rerun.add((engine, n))
                env = dict(os.environ, PYSPARK_SUBMIT_ARGS=f"--driver-memory {args.driver_memory} pyspark-shell")
                common = ["--reps", str(args.reps), "--dir", str(base), "--out", str(out), "--cell-timeout",
                          str(args.cell_timeout), "--queries", *args.queries]  # fmt: skip
                t = time.time()
                subprocess.run([sys.executable, "-m", "bench.engines", "--child", engine, str(n), *common], env=env,
                               check=True)  # fmt: skip
                res = json.loads(out.read_text(encoding="utf-8"))
                results.extend(res["rows"])
                if res["memory"]:
                    memory.append(_memory_line(engine, n, res["memory"], _now()))
                if engine == "duckdb" and args.memory_limit:
                    subprocess.run([sys.executable, "-m", "bench.engines", "--child", engine, str(n), "--memory-limit",
                                    *args.memory_limit, "--memory-limit-only", *common], check=True)  # fmt: skip
                    results.extend(json.loads(out.read_text(encoding="utf-8"))["rows"])
                print(f"cell {engine} {n:,}: {time.time() - t:.0f} s", flush=True)
                if not args.keep:
                    shutil.rmtree(base / f"{engine}-{n}", ignore_errors=True)
    finally:
        if args.dir is None and not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    if not args.fresh:
        old, old_mem = earlier_results("2026-11-25 23:50")
        results = [
            r
            for r in old
            if (r["engine"], r["rows"]) not in rerun
            and not (r["engine"] == "duckdb" and r["rows"] in reprobed and "memory_limit=" in r["query"])
        ] + results
        kept = [m for m in old_mem if (m.split(" | ")[0].strip("| "), int(m.split(" | ")[1].replace(",", ""))) not in rerun]
        memory = kept + memory
    load = (
        "per run: see below"
        if args.report_only
        else (f"{load0:.1f} at the start of the last run, {os.getloadavg()[0]:.1f} at its end, {time.time() - started:.0f} s")
    )
    md = report(results, memory, load, args.note.read_text(encoding="utf-8") if args.note else "")
    print(md)
    if not args.no_write:
        print(f"wrote {write_section('engines', md)}")


if __name__ == "__main__":
    main()
