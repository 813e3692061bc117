"""Veil's query-path overhead vs raw DuckDB on the same sandboxed connection, interleaved in one process.

Four queries (COUNT(*), AVG(income), state GROUP BY, sex × diagnosis GROUP BY) on a synthetic table
of 100,000 and 1,000,000 rows (user_id with ~4 rows per user, age 18–90, income 0–200,000, sex,
50 states, 10 diagnoses), row-level and user-level privacy (max_rows_per_unit 5). Every timed query
differs (a varying WHERE bound) so the answer cache cannot hide the cost; each Veil answer includes
its durable ledger write (SQLite WAL; the reservation's fsync runs while the engine does and is waited for before
the answer leaves, docs/ledger.md). Writes the "proxy" section of
docs/benchmarks.md.

Run: ``.venv/bin/python -m bench.proxy_overhead [--rows 100000 1000000] [--reps 15] [--json OUT.json]
[--before BEFORE.json] [--no-write]`` (``--before``: results of an earlier run, e.g. of the previous commit,
shown beside this one; ``--rows 100000 --reps 5 --no-write`` is a quick check).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from bench._report import write_section
from veil.policy import load_policy
from veil.proxy.session import QuerySession
from veil.store import warehouse

STATES = [f"S{i:02d}" for i in range(50)]
DIAGNOSES = [f"D{i}" for i in range(10)]

POLICY = """\
[database]
path = "bench.duckdb"
[ledger]
path = "ledger.sqlite"
[defaults]
epsilon_per_query = 0.001
[tables.people_row]
privacy_unit = "row"
[tables.people_row.columns]
{cols}
[tables.people_user]
privacy_unit = "user_id"
max_rows_per_unit = 5
[tables.people_user.columns]
user_id = {{ type = "int" }}
{cols}
[analysts.bench]
epsilon = 1000000000.0
"""

COLS = f"""age = {{ type = "int", lower = 18, upper = 90 }}
income = {{ type = "float", lower = 0, upper = 200000 }}
sex = {{ type = "category", values = ["F", "M"] }}
state = {{ type = "category", values = {STATES!r} }}
diagnosis = {{ type = "category", values = {DIAGNOSES!r} }}
""".replace("'", '"')

QUERIES = {
    "COUNT(*)": "SELECT COUNT(*) FROM {t} WHERE income >= {b}",
    "AVG(income)": "SELECT AVG(income) FROM {t} WHERE income >= {b}",
    "state GROUP BY": "SELECT state, COUNT(*), AVG(income) FROM {t} WHERE income >= {b} GROUP BY state",
    "sex×diagnosis GROUP BY": "SELECT sex, diagnosis, COUNT(*) FROM {t} WHERE income >= {b} GROUP BY sex, diagnosis",
}


def make_frame(n: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    users = max(n // 4, 1)
    return pd.DataFrame(
        {
            "user_id": rng.integers(0, users, n),
            "age": rng.integers(18, 91, n),
            "income": np.round(rng.gamma(2.0, 25000.0, n).clip(0, 200000), 2),
            "sex": rng.choice(["F", "M"], n),
            "state": rng.choice(STATES, n),
            "diagnosis": rng.choice(DIAGNOSES, n),
        }
    )


def _median_ms(xs: list[float]) -> float:
    return statistics.median(xs) * 1000


#: The query path's passes (veil.proxy.pipeline.PASSES), each timed on its own.
PHASES = ("parse", "resolve", "validate", "plan", "rewrite", "prepare", "reserve", "execute", "noise", "postprocess", "release")


def phase_breakdown(session: QuerySession, sql_tmpl: str, reps: int, cur: Any = None, start: int = 10_000) -> dict[str, float]:
    """Median ms per pass of Veil's answer (each pass of ``PASSES`` wrapped in a timer; bench-only); WHERE bounds
    ``start + i`` (none the timed loop asked: an answer-cache hit would skip most passes)."""
    from veil.proxy import pipeline

    times: dict[str, list[float]] = {k: [] for k in (*PHASES, "total", "raw")}

    def timed(fn: Any, key: str) -> Any:
        def inner(*a: Any, **k: Any) -> Any:
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                times[key].append(time.perf_counter() - t)

        return inner

    saved = pipeline.PASSES
    pipeline.PASSES = tuple((name, timed(fn, name)) for name, fn in saved)
    try:
        for i in range(reps):
            sql = sql_tmpl.format(b=start + i)
            if cur is not None:  # the same SQL raw, just before: the execute pass's yardstick
                t0 = time.perf_counter()
                cur.execute(sql).fetchall()
                times["raw"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            session.execute(sql)
            times["total"].append(time.perf_counter() - t0)
    finally:
        pipeline.PASSES = saved
    return {k: _median_ms(v) if v else 0.0 for k, v in times.items()}


def _no_plan_cache() -> None:
    """``--no-plan-cache``: no query's literals are lifted, so every query is planned afresh (bench-only)."""
    from veil.proxy import plan_cache

    plan_cache.lift = lambda *args, **kwargs: None


def _planned(session: QuerySession, sql: str) -> None:
    """Parse and plan ``sql`` as an answered query would (through the session's plan cache); runs nothing."""
    from veil.proxy import pipeline

    pipeline.run(session._state(sql, None), session._env, until="prepare", cache=True)


def run(rows: int, reps: int, folder: Path, *, plan_cache: bool = True, base: int = 0) -> list[dict[str, object]]:
    """Measure the four queries at ``rows`` rows; the timed queries' WHERE bounds are ``base + i`` (``base`` 0: below
    nearly every row group's smallest income, so DuckDB's zone maps settle the WHERE; 10000: a bound rows fall on)."""
    (folder / "policy.toml").write_text(POLICY.format(cols=COLS), encoding="utf-8")
    policy = load_policy(folder / "policy.toml")
    df = make_frame(rows)
    warehouse.write_table(policy, "people_row", df.drop(columns=["user_id"]), replace=True)
    warehouse.write_table(policy, "people_user", df, replace=True)
    out = []
    with QuerySession(policy, "bench") as session:
        if not plan_cache:
            _no_plan_cache()
        for table, level in (("people_row", "row"), ("people_user", "user")):
            for name, tmpl in QUERIES.items():
                session.execute(tmpl.format(t=table, b=-1))  # warm-up (builds the bounded copy once)
                cur = warehouse.reader(policy).cursor()
                threads = cur.execute("SELECT current_setting('threads')").fetchone()[0]
                cur.execute(tmpl.format(t=table, b=-2)).fetchall()
                raw_t, veil_t, plan_t, raw_cpu, veil_cpu = [], [], [], [], []
                for i in range(reps):
                    sql = tmpl.format(t=table, b=base + i)
                    t0, c0 = time.perf_counter(), time.process_time()
                    cur.execute(sql).fetchall()
                    t1, c1 = time.perf_counter(), time.process_time()
                    session.execute(sql)
                    t2, c2 = time.perf_counter(), time.process_time()
                    _planned(session, tmpl.format(t=table, b=base + reps + i))
                    t3 = time.perf_counter()
                    raw_t.append(t1 - t0)
                    veil_t.append(t2 - t1)
                    plan_t.append(t3 - t2)
                    raw_cpu.append(c1 - c0)  # CPU of every thread of this process (DuckDB's too)
                    veil_cpu.append(c2 - c1)
                raw, vl = _median_ms(raw_t), _median_ms(veil_t)
                start = 10_000 if base == 0 else base + 2 * reps
                phases = phase_breakdown(session, tmpl.replace("{t}", table), reps, cur, start)
                cur.close()
                out.append(
                    {
                        "rows": rows,
                        "bound_base": base,
                        "privacy": level,
                        "query": name,
                        "raw_ms": raw,
                        "veil_ms": vl,
                        "ratio": vl / raw,
                        "added_ms": vl - raw,
                        "parse_plan_ms": _median_ms(plan_t),
                        "duckdb_threads": threads,
                        "raw_cpu_ms": _median_ms(raw_cpu),
                        "veil_cpu_ms": _median_ms(veil_cpu),
                        "phases": phases,
                    }
                )
                print(out[-1], flush=True)
    return out


FINDINGS = """\
**Profile of 2026-11-26** (cProfile over 200 calls and per-pass `time.thread_time`, 1M rows, row-level, before
this session's changes): per `COUNT(*)` about 5.5 ms of CPU outside the engine — parse 0.5, resolve 0.5,
validate 0.25, plan 0.3, rewrite 0.6, prepare 1.4 (a DESCRIBE round trip ≈ 0.5 ms, rendering the statement
again, the canonical text), reserve 0.4, noise 0.6, release 0.6 plus its fsync; per `state GROUP BY` (50 groups ×
3 statistics) about 11 ms. A third of the sqlglot time was `deepcopy` (copies before every `sql()`, `alias_`,
`make_total`); OpenDP's exact float sampler cost ≈ 18 µs per value, its integer one ≈ 6 µs, and each call ≈ 0.1–0.2
ms of FFI glue whatever its length.

Changes measured here (vs `before:`, the same script on main at the session's start, idle host):
* generated SQL is rendered once (prepare binds and execute runs the same text; the rewrite no longer copies
  its own trees or re-generates a statement to de-duplicate it);
* a private query of one statement without group keys (COUNT/SUM/AVG/quantile) skips the DESCRIBE round trip:
  an engine error from before reading data while it runs cancels its reservation, so the refusal stays free
  (`tests/proxy/test_bind_refusals.py`; red-teamed: ≈ 24,000 generated expressions over adversarial rows never
  raised a bind-class error at run time); public queries bind when they run; the post-processing is bound once
  per shape;
* float Laplace noise on OpenDP's lattice of 2^k with k = ⌊log₂ Δ⌋ − 76 (about 3× fewer µs per value than the
  default k = −1074; its privacy map is checked against the charged ε). The first version chose k from the
  number of values too, which the red team read back from the released values' binary digits (the number of
  unreleased private groups): k now depends on Δ alone (`tests/adversarial/test_perf_redteam.py`);
* one tokenizer pass per query, no duplicate label generation in the plan, no Fraction hashing per released
  statistic, cached path resolution per statement.

Wall-clock medians swing between runs: two more runs of this script minutes after the table's (same idle host,
21 repetitions) gave COUNT(*) +4.4–5.9 ms, AVG +5.6–7.8 ms, state GROUP BY 2.7–3.1×, sex × diagnosis 2.0–2.1× raw;
the CPU ratios are steadier (COUNT 4.9–5.3× against 7.0–7.3× before, state 1.9–2.3× against 2.4–2.6×).

What remains is fixed per-query cost in pure Python — sqlglot parsing, qualifying and generation (≈ 2–3 ms for a
COUNT, 4–5 ms for a 50-group GROUP BY), OpenDP's samplers (≈ 6 µs per released value plus ≈ 0.15 ms per call), the
ledger's two transactions and one fsync — so the 3 ms COUNT/AVG and 1.5×/2× GROUP BY targets at 1M rows are not
met (at 10M and 100M rows the same queries are 1.0–1.4× raw, see the engines section). Going further needs a plan
cache keyed by the query's shape with literals as parameters, which must redo every literal-dependent check
(bounds, validation, totality, domains) soundly; it was not attempted.

**2026-11-26, third round** (idle host; `before:` is now the previous round's final run, not the session start).
Two more cuts — the parse pass drops per-node source positions (every later tree copy about a third cheaper),
and DuckDB text is generated through one shared sqlglot dialect (`Expression.sql` built a new one per call) —
took 9.7 → 9.1 ms of thread CPU per `GROUP BY sex` answer on 10,000 rows (interleaved A/B in one process). The
same round added privacy checks on this path (a closed type set, explicit date casts, an expansion measure of
the query, exact group keys, DuckDB's common-subexpression elimination off), so at 1M rows the net is flat:
four runs (the table is the last) gave COUNT(*) +3.8–6.6 ms, AVG +5.2–6.5 ms, state GROUP BY 2.6–3.2×, sex ×
diagnosis 1.7–2.0× raw (CPU ratios COUNT 5.0–5.2×, AVG 2.3–2.5×, state 1.9–2.25×), against +6.5 ms, +8.4 ms,
2.98× and 2.05× in the previous round's final run. The targets stay missed.

**2026-11-26, fourth round** (`before:` is the third round's final run; the table is this round's final run, on
a quieter host, 1-minute load 0.8–1.1; an earlier run alongside a red-team helper gave the same picture). A query
grouped only by bare base-table columns (`GROUP BY state`, `sex, diagnosis`) skips the DESCRIBE round trip: its
key types come from the catalog, it binds when it runs, and an engine error from before reading data refunds it as
for keyless queries (`tests/proxy/test_catalog_key_types.py`, and the refund/charge neighbour property now covers
keyed shapes): `prepare` went from 1.7–2.6 ms to 0.2 ms for those queries. The same round added per-query privacy
checks (a bound on the text and the expression work one person's rows cause, LIKE patterns, identifier folding)
costing ~0.2–0.3 ms in `plan`/`resolve`. Net: user-level sex × diagnosis GROUP BY meets its 2× target (1.76×);
row-level sex × diagnosis 1.86×, state GROUP BY 2.7–2.8×, COUNT +4.2–4.3 ms, AVG +5.4–5.5 ms (CPU ratios 4.8–5.0×,
2.3×, 2.0×) stay missed. The answer cache's lookup, which grew with the ledger's history (SQLite scanned every
logged answer), now runs on its own index; it barely shows here (a fresh ledger of ~200 releases) but was 10% of
a server's CPU after 1,500 queries (see the server section).

**2026-11-26, fifth round** (`before:` is the fourth round's final run; the table is this round's final run, on an
idle host, 1-minute load 0.7–1.0; a first run right after the helpers stopped, load 1.8, was ~40% slower in every
pass of the row-level queries, `parse` included, and is not shown). This round added privacy checks only: the
rewrite pass prices the operations of the generated statements that may raise or fail (`measure` over each
statement, ~0.15 ms) and the plan pass marks the arithmetic the bounds keep from overflowing (~0.05 ms), so
`rewrite` went from 0.6–1.2 to 0.8–1.4 ms. Net, within run-to-run drift: COUNT +4.3–4.4 ms, AVG +5.8–5.9 ms,
state GROUP BY 2.73× (both levels), sex × diagnosis 2.05× row-level and 1.81× user-level (the one target met).
No speed work this round.

**2026-11-26, sixth round** (`before:` is the fifth round's final run; the table is this round's last of four runs
minutes apart on an idle host, 1-minute load 0.8–1.0; wall-clock medians swung widely between them — row-level
COUNT +4.8 to +7.6 ms, state GROUP BY 3.0–3.4× — while the CPU ratios stayed within ±0.15). Privacy changes only:
AVG/VAR/STDDEV centre each row in SQL when their centre is far from 0 (an argument such as `x + 1e17`; sums whose
bounds are exact doubles and whose centre is within the half-width of 0, like `income` here, are still summed
whole and centred exactly afterwards: the per-row form cost ~0.5 ms per million rows), released float keys get one
spelling, and each query reads the ledger's publication generation once (~0.03 ms; since the
seventh round its catalog generation, which also counts curator table writes) so a retraction reaches open
sessions. CPU ratios against the fifth round: COUNT 5.1–5.2× (5.0–5.3×), AVG 2.4× (2.3–2.4×), state GROUP BY
2.1–2.2× (2.0×), sex × diagnosis 1.4–1.5× (1.4–1.6×). No target newly met; the per-query Python path is unchanged.

**2026-11-26, seventh round** (`before:` is the sixth round's final run; the table is this round's final run on an
idle host, 1-minute load 0.4–0.8). Privacy changes only, and they cost: real sums are now exact (each row summed as
a BIGINT on a fixed-point grid, `SUM(CAST(FLOOR(x · 2^k) AS BIGINT))`, red team s17 A2), which costs DuckDB about
1.3–1.8 ms more per million rows than `SUM(x)` (measured alone, interleaved, 1M rows, 2 threads) plus some Python to
build the grid nodes; arguments are clamped in DOUBLE/BIGINT. So AVG(income) rose from 2.4× to 3.1–3.2× CPU
(+6 → +7–8 ms wall) and the state GROUP BY, which holds an AVG, from 2.1–2.2× to 2.4–2.5×; COUNT (4.5–5.3×) and
sex × diagnosis (1.4–1.55×) are unchanged within the run-to-run spread. A pre-scaled grid column in
the bounded copy (built once per table version) would make real sums as cheap as BIGINT sums; not done.

**2026-11-26, eighth round** (`before:` is the seventh round's final run; the table is this round's third run, an
idle host, 1-minute load 1.0–1.4). One speed change: the bounded copy now holds each bounded real column's
pre-scaled grid value (`__veil_grid_<i>` = `CAST(FLOOR(CAST(c AS DOUBLE) · 2^k) AS BIGINT)`, computed once per table
version), and a real SUM/AVG of the bare column sums it instead of computing it per row (the same integers, tested
row by row over adversarial bounds and values, `tests/proxy/test_pre_scaled_grid.py`; red-teamed in s25). A spec's
copy identity and grid columns are computed once per spec object. Measured: AVG(income) 2.45–2.53× CPU (3.1–3.2×
before), +5.7–7.4 ms wall (+7.2–8.0 ms); state GROUP BY 2.07–2.21× CPU (2.4–2.5×). Alone, interleaved A/B in one
process on a loaded host, the grid column saved 1.7–2.0 ms per AVG at 1M rows. The same round added privacy checks
on every query (token, operator-chain and tree-depth limits in the parse pass; the argument-copy pricing in plan and
rewrite; a mirror check for queries naming public tables): COUNT(*) 4.7–5.6× CPU (4.5–5.3×), +4.1–5.6 ms, and
sex × diagnosis 1.3–1.65× are flat within the run-to-run spread. The targets stay missed; user-level sex × diagnosis
met its 2× in two of the three runs (1.63×, 1.96×, 2.03×).

**2026-11-27, ninth round** (`before:` is the code at this round's start, run alternately with it: three before/after
pairs minutes apart, then the table's run; a heavily loaded host, 1-minute load 6–9 on 2 cores while measuring, so
every wall time is 2–4× the idle host's and the `release` pass, which holds the one fsync per answer, took 4–8 ms
instead of 0.9). No check was removed or skipped. Three cuts of pure Python: (1) trees are copied without
deep-copying each node's inferred type (`veil.engines.neutral.copy_tree`; `Expression.copy` copied every type
through the `copy` module, ~60% of a copy of an annotated tree) and `duckdb_text` generates from such a copy; (2) a
cast to a fixed type parses its type name once (`data_type`; `DataType.build` parsed it at every call, 20–60 µs);
(3) the reservation stores the spend it read for the budget check inside the same transaction instead of reading it
again, and finishing a reservation is one conditional UPDATE (same transactions, same synchronous=FULL commit of
the release). Thread CPU per pass, paired batches of the two versions in alternation (same minutes): rewrite −0.17
ms (COUNT, AVG) to −0.65 ms (state GROUP BY), prepare −0.05 to −0.15 ms, plan up to −0.3 ms, reserve −0.08 ms,
release −0.03 ms. In the benchmark's own per-pass medians over the three pairs: rewrite 1.59 → 1.42 ms (row COUNT),
4.56 → 2.38 (row AVG), 6.19 → 3.99 (row state), 7.37 → 3.29 (user state); CPU Veil/raw, before → after: row state
GROUP BY 2.36–2.44× → 2.26–2.36×, user state 2.34–2.35× → 1.98–2.23×, user AVG 3.07–3.34× → 2.84–3.03×; COUNT
(5.4–6.7× either way) and sex × diagnosis are flat within the spread. The wall-clock targets stay missed, and on this
host the run-to-run spread (COUNT +11.8 to +24.4 ms added, either version) is larger than anything measured here.
What is left, per COUNT on an idle host (the eighth round's table, docs/benchmarks.md at 24f9d13): ~3.8 ms of
pure-Python passes spread over nine
of them (none above 0.7 ms: sqlglot parse/qualify/annotate/generate, OpenDP's FFI glue ≈ 0.3 ms per call, the
ledger's SQLite statements) plus the release pass, 0.9 ms with its fsync. Not done, each needing the lead's decision:
committing the release with synchronous=NORMAL after an fsync of the reservation overlapped with the engine run
(the charge would still be durable before the answer leaves, the release log row only after the next sync: it saves
the fsync on the critical path, 0.5–5 ms here, but weakens the documented durability of the release log); a plan
cache keyed by the query's shape with literals as parameters (every literal-dependent check redone).

**2026-11-27, tenth round: the plan cache** (`veil.proxy.plan_cache`; the `no plan cache:` columns are the same
script with `--no-plan-cache`, run just before on the same idle host, 1-minute load 0.3–1.3). A query whose shape the
session planned before skips resolve → prepare: the literals no check reads (numbers and short texts compared with
bare int/float/category columns at the top of a one-table WHERE; their kind and digits-and-point form stay in the
shape) are put into the earlier plan's statements, and a shape is kept only after a probe planning with other
literals agreed (docs/architecture.md). Here the first query of each bound's length pays a planning and a probe,
every other one a hit. Measured: added wall time at 1M rows fell by 35–45% (row COUNT +9.7 → +6.3 ms, AVG +12.6 →
+6.5 ms, state GROUP BY 3.19× → 2.40×, sex × diagnosis 2.10× → 1.60×; user-level alike); CPU ratios by about the
same. A hit's own planning costs 0.5 ms of thread CPU (parse 0.3, lifting the literals and filling the templates
0.2), yet the `parse+plan (as answered)` column reads 1.5–2.2 ms of wall time: right after a DuckDB statement
the engine's two threads still hold the two cores for about a millisecond. What is left per COUNT at 1M rows,
per pass (thread CPU): parse 0.7, reserve 0.5, noise 0.4–1.0 (one OpenDP call ≈ 0.3 ms of FFI glue), postprocess
0.2, release 0.5 plus its fsync, and the engine. The targets stay missed; the next levers are the fsync on the
critical path and the DuckDB threads' hand-back (both unmeasured here).
The server benchmark's aggregate (one session, 10,000 rows, the two interleaved, this host) took 17.5 ms of thread CPU
per answer with the cache off and 10.2 ms with it; the server section below was measured with it.

**2026-11-27, eleventh round: the ledger off the critical path** (the `s12 end (2bf86a8)` columns: the previous
commit's code, run just before this one in the same minutes, 1-minute load 1.6 with nothing else running). Two
changes. (1) The reservation commits with `synchronous=NORMAL` and an fsync of the WAL starts at once in a worker
thread (`veil.store.wal_sync`), so the disk wait overlaps the engine run; `release` waits for it before writing the
release row (no answer leaves before its charge is on disk; docs/ledger.md has the durability argument), and the
release row's own sync runs after, off the answer's path. No lock is held during either fsync, so concurrent
sessions no longer queue behind one another's disk wait. (2) A query release logs each statistic once over its
groups (`statistic_vectors`, schema 3) instead of one row per value: 150 rows with their own JSON for a 50-group,
3-statistic answer cost more than the noise. Measured, the `release` pass (median, three back-to-back pairs of
runs at 1M rows): COUNT 1.1–1.7 → 0.35–0.6 ms, AVG 1.0–1.6 → 0.55–0.65, state GROUP BY 2.4–4.2 → 0.9–1.3,
sex × diagnosis 1.5–2.0 → 0.65–1.0. End to end the pairs scatter by ±2 ms from one minute to the next: row COUNT
added +2.9/+4.9/+5.5 → +2.3/+3.9/+6.2 ms, user COUNT +3.1/+2.3/+5.1 → +2.6/+4.8/+3.4, row state GROUP BY 2.46×/2.21×/1.67×
→ 1.85×/2.04×/1.62×, user state 2.00×/2.10×/1.86× → 2.08×/1.72×/1.58×. So COUNT's ≤ 3 ms target is met in the
quietest pair (row +2.3, user +2.6 ms) and not in the others; GROUP BY state stays above 1.5×. Why state GROUP BY
cannot reach 1.5× here: its 150 noisy values cost 2.7 ms of OpenDP sampling on this machine (≈ 15 µs a value on
the OS CSPRNG, plus ≈ 0.3 ms per call), more than half of raw DuckDB's 4.5–9 ms for the whole query; that floor
alone is 1.3–1.6×. The server under 20 clients gained more than one query (fsyncs no longer serialise sessions): see
the server section.

**2026-11-27, session 16: where the sampling floor comes from.** OpenDP's samplers cost ≈ 10–14 µs per noisy
value on this host whatever the scale (1 to 10¹², discrete and lattice Laplace alike; 1,000 values in one call:
10–11 ms), so a 50-group answer's 150 values cost 1.5 ms before any Python glue. `strace -c` over 20,000 draws
counts about 10 `getpid` calls per value: OpenDP takes its randomness from OpenSSL's `RAND_bytes` a few bytes at a
time, and each call checks for a fork. That is inside OpenDP and OpenSSL, not Veil; the brief requires those
samplers on the OS CSPRNG, so this floor stays. Drawing integer noise ahead, in idle time, would take it off an
answer's latency but not off a busy server's CPU (not done).

**2026-11-27, session 17: OpenDP's per-call glue.** What OpenDP's Python binding adds to each call (parsing type
names, wrapping the NumPy input, building a Python list of the release) was 0.15–0.25 ms per call whatever its
length, one call per statistic. `veil.mechanisms._opendp_call` calls the same C functions the binding calls
(`slice_as_object` → `measurement_invoke` → `object_as_slice`) on the same cached measurements, so the samplers, the
privacy map and the CSPRNG are OpenDP's unchanged (tests/test_opendp_call.py compares both ways' releases). Per call,
thread CPU on this host with helpers running: one value 210–260 → 32–47 µs, 50 integers 680–1,100 → 480–520 µs. The
noise pass, the two interleaved in one process over 400 queries at 100,000 rows: AVG 2.04 → 1.11 ms, state GROUP BY
4.18 → 3.24 ms. End to end at 1M rows, three runs back to back on a host slower than the s13/s14 tables' (other
sessions' load; 1-minute load 1.6–2.2): this code, then main at 92e0b70 (the `s16 end` columns), then this code again
(the table): row COUNT +4.17 / +4.91 / +3.84 ms added, row AVG +5.46 / +5.70 / +3.47, row state GROUP BY
1.78× / 2.07× / 1.68×, user state GROUP BY 1.97× / 2.11× / 1.94×. The noise pass's own share is the part that
moved; the targets stay missed (this session also added checks to the parse pass: a call's argument count).

**2026-11-28, session 18: another host, and what is left.** This session's host is much faster than the s13–s17
tables' (a trivial statement in-process: 0.04–0.07 ms of CPU against 0.18 there), so absolute figures moved with it; the
comparison is against main at the s17 end (1c02125, the `s17 end` columns), run alternately with this code in the
same minutes (four runs: this code, s17 end, this code (the table), s17 end; 1-minute load 2.1–2.3, nothing else
running). Changes on this path: the ledger reads and writes its accounts in one statement each and an answer's
remaining ε comes from its reservation (−0.05 to −0.1 ms of thread CPU per answer), released columns are converted one
NumPy call per column (postprocess −0.06 ms for 50 groups), and release rows' fsyncs are shared under load. Added
wall time, this code / s17 end: row COUNT +1.81, +1.82 / +2.21, +1.61 ms; row AVG +2.57, +2.85 / +2.88, +2.61; user
COUNT +1.77, +1.73 / +1.93, +1.92; user AVG +2.43, +2.26 / +2.60, +2.19 — the ≤ 3 ms target is met by both versions
on this host. GROUP BY: user state 1.95×, 1.93× / 2.02×, 1.99× (≤ 2×: met by this code, not quite
by the s17 end), sex × diagnosis 1.38–1.49× either
way (met), row state GROUP BY 2.06×, 2.03× / 2.15×, 2.04×: missed, and not reachable by cutting Python alone. Its
raw query takes 3.5 ms here; 1.5× leaves 1.75 ms for everything Veil adds, and two parts exceed that on their own:
OpenDP's sampling of its 150 noisy values (the noise pass, 1.2 ms: ≈ 8 µs a value on the OS CSPRNG, see session 16)
and the generated statement itself, which reads one more column than the analyst's (the pre-scaled grid of the exact
real sum, and `COUNT(income)` for AVG's count): 1.1–1.2 ms more than the raw query in the per-pass loop.

**2026-11-28, session 19: the row-level GROUP BY's statement and its second count** (measured under load: six agents
on the 2 cores, 1-minute load 8–13 while measuring, so wall times swung 2–6× and the figures that count are CPU
times, each A/B interleaved or alternated in the same minutes with main at a93a6bc; not written to the table). Two
changes to what `state GROUP BY` runs, both decided from the query's text and the policy alone. (1) AVG's count is
the query's `COUNT(*)` when the WHERE keeps AVG's column non-NULL (`income >= b` is never TRUE for a NULL income:
`plan._non_null_columns`), so one noisy count serves both — 150 → 100 noisy values, and ε is split in two instead of
three, so the answer is more accurate for the same charge (`tests/proxy/test_null_rejected_counts.py`: exact answers
equal the unshared plan's over NULL/NaN/±inf data). Noise pass at 100,000 rows, thread CPU: 1.08–1.14 → 0.89–0.90
ms. (2) The statement filtered on `income` and summed its pre-scaled grid, so it read both copies of the column (the
grid is 8 MB of uncompressed BIGINT per million rows; `income` is ALP-compressed). A WHERE `c >= v` / `c < v` with
`v·2^k` an integer now compares the grid, `FLOOR(c·2^k) >= v·2^k`, the same truth value on every row, NULL included
(`rewrite._compare_on_grid`; `tests/proxy/test_grid_comparisons.py` checks it row by row next to every literal and
bound), and the plan cache fills such a literal on its grid. The statement alone at 1M rows, interleaved with the
raw query in one process: process CPU (all DuckDB threads) raw 8.53 ms, before 10.54, after 8.58; wall on the
quieter first minutes of the session (load 0.4): raw 4.04, before 4.47, after 3.61 ms (it reads `state` and the grid,
as the raw query reads `state` and `income`). End to end, 80 queries per run at 1M rows (each beside the raw query),
main and this code alternated, four runs each (row-level `state GROUP BY`): process CPU Veil/raw 1.76, 1.72, 1.70,
1.72 (main) → 1.49, 1.50, 1.46, 1.45; CPU added per answer 6.4–6.9 → 3.8–4.4 ms; the wall ratios (1.60–2.84 →
1.33–1.80) mean little at that load. Row `AVG(income)` gains more (it now reads the grid alone): CPU Veil/raw 2.24,
2.27 → 1.67, 1.66, CPU added 5.3 → 2.7 ms. With the bench's own bounds (`income >= 0…79`, load 5): state CPU
Veil/raw 1.83, 1.83 → 1.58, 1.52, CPU added 5.4–5.7 → 3.5–4.0 ms, while the wall ratios did not separate (1.68,
1.74 → 1.72, 1.63). In this script's per-pass loop (two runs each, load 5–6), `execute` minus the raw query went
from +1.8/+4.1 ms to +0.3/+0.6 ms and `noise` from 1.35–1.38 to 1.12–1.22 ms; this script's own 15-repetition
process-CPU column stayed within its noise (1.67–1.75× → 1.63–1.66×). Whether the ≤ 1.5× wall
target is met needs a run on an idle host; what is left per answer is the sampling of 100 values (≈ 0.5 ms) and
≈ 2 ms of Python (parse, reserve, post-processing, release and the session around them).
At the session's end the grid comparisons were switched off (`rewrite.COMPARE_ON_GRID`: a plan-cache hit could render
the literal on the raw column where planning afresh used the grid); the table above is measured with them off, on a
quiet host, beside the s18 end in the same minutes: row state GROUP BY 1.83×, 1.84× against 1.86×, 1.88× (CPU
1.52–1.53× against 1.53–1.58×).

**2026-11-28, session 20: grid comparisons back on** (measured under load, 1-minute load 4–12 on the 2 cores, so
wall times mean little; CPU times, each A/B alternated in the same minutes; not written to the table). The plan
cache now keys each lifted number compared as `c >= v` / `c < v` with a bounded real column by its side of the
column's grid (on it the statement compares the grid column, off it `c`), and an entry serves no literal on the
other side, so `rewrite.COMPARE_ON_GRID` is on again. Each of this script's four row-level statements at 1M rows,
generated with grid comparisons on and off and run alternately on the same bounded copy (bounds `income >= 10000 +
i`, 40 and then 60 pairs, the same rows; median process CPU, all DuckDB threads, off → on): COUNT(*) 5.14, 4.13 →
2.95, 2.50 ms; AVG(income) 9.20, 7.69 → 7.32, 5.75; state GROUP BY 16.33, 11.66 → 12.84, 9.09; sex×diagnosis GROUP
BY 24.32, 16.91 → 21.47, 15.07. In this script's per-pass loop (the same bounds), `execute` minus the raw query,
median of 5 and of 4 alternated runs (off → on): row state GROUP BY +1.47, +6.74 → −2.31, −1.76 ms; row AVG(income)
+3.03, +2.41 → +1.08, −0.07 ms; user state GROUP BY +1.18, −0.13 → −2.89, −4.37 ms. The table's 15-repetition
columns did not separate (process CPU Veil/raw, off → on: row state GROUP BY 1.51, 1.59 → 1.56, 1.60; row
AVG(income) 1.79, 1.77 → 1.80, 1.79): their bounds `income >= 0…14` lie below nearly every row group's smallest
income, so DuckDB's zone maps (each row group's minimum and maximum) settle that WHERE either way (the four
statements with bounds 0…39 took the same CPU on and off: COUNT(*) 0.41 → 0.42 ms, state GROUP BY 7.55 → 7.33 ms).
**2026-11-28, session 21: noise drawn while the engine runs, and a front for the plan cache** (measured under heavy
load: the 2 cores shared by six agents, 1-minute load 12–30 while measuring, so raw DuckDB wall times ran 3–20× the
quiet host's — row state GROUP BY raw 12–63 ms against 3.3–3.6 ms — and wall ratios swung by ±0.4 between runs of the
same code: they say nothing about the ≤ 1.5× target; not written to the table, which stays the s19 quiet-host run).
Two changes to the serial work of every answer. (1) When the number of groups is fixed by the query and the policy (a
declared or public key domain, as `state` and `sex × diagnosis` here, or no keys) and no partition is selected, the
counts' discrete-Laplace noise is drawn by OpenDP at 0 in a worker thread while DuckDB runs the statement (both
release the GIL) and added exactly afterwards, saturating to i64 as OpenDP does (`add_noise.draw_ahead`,
`mechanisms.DiscreteLaplaceDraw`; used once, by its own query; `tests/test_core_mechanisms.py` checks its law at
α = 10⁻⁶ and rejects a scale off by ±30%, `tests/proxy/test_noise_ahead.py` that answers equal those with noise drawn
with the values). Real sums are still noised with their values: OpenDP rounds the value onto the noise's lattice
itself, and noise drawn at 0 then added in floating point would be another mechanism. (2) The plan cache's front
(`plan_cache.front_lift`): a query whose token stream — numbers and texts by form, everything else exact — was seen
before skips sqlglot's parse and the lift; `parse.scan`'s checks on the text and tokens still run
(`tests/proxy/test_plan_cache_front.py`, hypothesis: the front gives what parse + lift give, and the cached plan equals
a fresh one). Per pass (this script's loop, row-level, 1M rows, two alternated runs each of main at a59be63 and this
code, bounds `income >= 0…` and `>= 10000…`): `noise` for state GROUP BY 1.28–1.37 → 0.89–1.10 ms, for sex × diagnosis
0.43–0.48 → 0.16–0.19 ms; `parse` 0.55–0.62 ms → skipped on every hit. In one process, the same table, 60 interleaved
pairs per query with both changes on and off (row-level, 1M rows, bounds 0…119), two runs (load 12 and 25): the
calling thread's CPU per answer, state GROUP BY 9.97 → 9.36 and 9.10 → 8.50 ms, sex × diagnosis 11.01 → 10.11 and
10.84 → 9.93 ms (−0.6 and −0.9 ms; the front alone −0.6 ms, the noise alone −0.25 to −0.35 ms, one run each at load
~18); wall Veil/raw in the same pairs 1.36 → 1.27 and 1.57 → 1.48 (state), 1.17 → 1.05 and 1.01 → 0.98
(sex × diagnosis). The noise drawn ahead moves CPU off the answer's path, it does not remove it (process CPU ratios
barely move: row state GROUP BY 1.63, 1.57 → 1.53, 1.56 with bounds 0…, 1.36, 1.38 → 1.25, 1.31 with bounds
10000…; sex × diagnosis 1.27, 1.25 → 1.27, 1.23 and 1.14, 1.13 → 1.07, 1.08), so its wall gain depends on a core being
free while DuckDB runs: on an idle 2-core host its threads leave one free in the statement's serial phases, at this
load none is. Whether row-level state GROUP BY now meets ≤ 1.5× wall needs a run on a quiet host (`--rows 1000000
--reps 15`, and `--bound-base 10000` for bounds that rows fall on): with ≈ 0.8–0.9 ms less serial work per answer
against the last quiet-host figures (1.73–1.83× with 3.0–3.6 ms raw, 2.4–2.95 ms added) the expected figure is
≈ 1.45–1.6×: at best just at the target. What is left
serially: the float sums' sampling (≈ 0.5 ms for 50 values), the plan-cache hit's literal fill and cache key
(≈ 0.25 ms), reserve, post-processing and release (≈ 0.3, 0.2, 0.35 ms).

**2026-11-28, session 22: real sums' noise drawn while the engine runs, and a cheaper plan-cache hit** (measured
under the heaviest load of these sessions: the 2 cores shared by six agents running test suites and Spark JVMs,
1-minute load 8–26 while measuring, so raw DuckDB's row state GROUP BY took 8–55 ms against 3.3–3.6 ms on the quiet
host and the wall ratios below say nothing about the ≤ 1.5× target; not written to the table, which stays the s19
quiet-host run). Two cuts of the serial work of every answer, no check removed. (1) The float sum's noise (AVG's sum
here), ≈ 0.5 ms of OpenDP sampling for 50 values, is now drawn in the worker while DuckDB runs, where the number of
groups is fixed by the query and the policy (as for the counts since session 21). Drawing real noise ahead is sound
only as a mechanism OpenDP certifies, value for value: OpenDP's float Laplace on the lattice of 2^k rounds each
value to the nearest multiple of 2^k (ties up), adds discrete-Laplace integer noise of scale scale'·2^−k, and rounds
2^k times the sum to the nearest double (ties to even). With k fixed by the scale alone (k = ⌊log₂ scale'⌋ − 50,
scale' = scale·(1 + 2⁻³⁰)), that integer noise has a scale in [2⁵⁰, 2⁵¹), which OpenDP's i64 discrete-Laplace
sampler draws at the very same rational scale (saturating with probability below exp(−2¹²) a value); it is drawn at
0 in the worker and put on the values in Python integers (`mechanisms.lattice_add`: no floating-point step ever sees
a value and its noise together), and OpenDP's own privacy map of that float measurement for the fixed number of
values must stay within Δ/scale, else the batch is drawn with its values on the old lattice. A batch whose draw did
not happen (worker not started) is released by OpenDP's own float measurement on the same lattice, so the law never
depends on the thread. Tests: the law (KS at α = STAT_ALPHA, rejecting ±30% scales) of both ways and their
two-sample agreement; the rounding onto the lattice equal to OpenDP's (hypothesis: ties, negatives, subnormals,
±1.8e308; it fails with ties rounded down, or with a double-rounded subnormal); the sum's rounding equal to OpenDP's
in law at the ties (chi-square against OpenDP at scale ½, which rejects ties rounded away from zero); and answers
cell for cell equal with the noise drawn ahead or not (`tests/proxy/test_noise_ahead.py`). (2) A plan-cache hit
spelled its one lifted literal through sqlglot twice (statements and canonical text, ~0.05 ms each under this load);
a number of the lifted form or a plain text is now written directly for DuckDB's renderers (hypothesis test against
sqlglot's own output): `plan_cache.hit` 0.32 → 0.16 ms of thread CPU. Measured: the `noise` pass (this script's
per-pass loop, three alternated runs each of main at e9847fd and this code, 1M rows): row state GROUP BY 0.95–1.07 →
0.52–0.63 ms, row AVG(income) 0.52–0.56 → 0.36 ms, user state GROUP BY 1.31–1.51 → 0.57–0.62 ms. In one process, 80
interleaved pairs per query with (1) on and off (load 8.5), then with both on and off (load 15.5) (row-level, 1M
rows, bounds 1…160): the calling thread's CPU per answer, state GROUP BY 10.10 → 9.56 and 11.29 → 10.29 ms,
AVG(income) 5.60 → 5.48 and 6.35 → 6.00 ms; process CPU (all DuckDB threads) 16.18 → 15.64 and 18.59 → 18.00 ms
(state), 8.60 → 8.23 and 8.74 → 8.17 ms (AVG): the i64 sampler at scale 2⁵⁰ costs no more than the float lattice's
at 2⁷⁶, so the work moved off the answer's path is not paid back. This script's 15-repetition columns, three
alternated runs each: process CPU Veil/raw for row state GROUP BY 1.46, 1.52, 1.43 (main) against 1.55, 1.50, 1.60
(this code), within the runs' spread at that load (the CPU added per answer, 4.6–5.4 against 4.6–6.9 ms, likewise).
**Whether row-level state GROUP BY now meets ≤ 1.5× wall is still unmeasured**: no quiet minutes this session.
Against the last quiet-host figures (1.75–1.85× at the s21 end) the serial work per answer is ≈ 0.4–0.6 ms lower,
which at 3.5 ms raw is worth 0.1–0.17×: the expected figure is ≈ 1.6–1.75×, so the target is most likely still
missed. What is left serially on a hit (thread CPU at load 9–23, 20,000 to 200,000 rows): release 0.85–0.9 ms (its
JSON and SQLite insert), reserve 0.4–0.5, noise 0.6 (the counts' and sums' exact additions, clamping, the wait for
the worker), postprocess 0.35–0.4, `parse.scan` 0.2, the front's key and lift 0.15, the hit 0.16.
"""


def _cpu_ratio(r: dict[str, Any]) -> str:
    if not r.get("raw_cpu_ms"):
        return "–"
    return f"{r['veil_cpu_ms'] / r['raw_cpu_ms']:.2f}×"


def verdict(results: list[dict[str, Any]]) -> list[str]:
    """The issue's targets at 1M rows, checked against these results (wall-clock medians)."""
    big = [r for r in results if r["rows"] == max(x["rows"] for x in results)]
    out = []
    for r in big:
        if "GROUP BY" in r["query"]:
            limit = 1.5 if r["privacy"] == "row" else 2.0
            ok = r["ratio"] <= limit
            mark = "met" if ok else "missed"
            out.append(f"- {r['privacy']}-level {r['query']}: {r['ratio']:.2f}× raw (target ≤ {limit}×) — {mark}")
        else:
            ok = r["added_ms"] <= 3.0
            mark = "met" if ok else "missed"
            out.append(f"- {r['privacy']}-level {r['query']}: +{r['added_ms']:.2f} ms (target ≤ 3 ms) — {mark}")
    pp = max(r["parse_plan_ms"] for r in big)
    out.append(f"- parse+plan: ≤ {pp:.2f} ms median in every query (target ≤ 2 ms) — {'met' if pp <= 2 else 'missed'}")
    return out


def to_markdown(
    results: list[dict[str, object]],
    reps: int,
    before: list[dict[str, object]] | None = None,
    load: str = "not recorded",
    before_label: str = "before",
) -> str:
    prev = {(b["rows"], b["privacy"], b["query"]): b for b in before or []}
    threads = ", ".join(sorted({str(r.get("duckdb_threads", "?")) for r in results}))
    lines = [
        "## proxy: Veil query overhead vs raw DuckDB",
        "",
        f"Median of {reps} interleaved runs per cell, each query with a different WHERE bound (no answer-cache hits; "
        "the plan cache, `veil.proxy.plan_cache`, plans each bound's shape once and reuses it, as in production); "
        "Veil time includes parse, plan, the ledger reservation and its fsync (run while the engine runs, waited for "
        "before the answer leaves), noise, post-processing and the release log. Raw = the same SQL on the same sandboxed DuckDB "
        f"connection, so both use the same DuckDB threads ({threads}). CPU Veil/raw: median process CPU time "
        f"(all threads), steadier than wall time on this shared 2-core host (1-minute load average {load} "
        "while measuring), where absolute wall times drift up to 3× with other load; ratios matter.",
        "",
        "| rows | privacy | query | raw ms | Veil ms | Veil/raw | added ms | parse+plan ms (as answered) | CPU Veil/raw |"
        + (f" {before_label}: Veil/raw | {before_label}: added ms | {before_label}: CPU Veil/raw |" if prev else ""),
        "|---|---|---|---|---|---|---|---|---|" + ("---|---|---|" if prev else ""),
    ]
    for r in results:
        b = prev.get((r["rows"], r["privacy"], r["query"]))
        extra = ""
        if prev:
            extra = f" {b['ratio']:.2f}× | {b['added_ms']:.2f} | {_cpu_ratio(b)} |" if b else " – | – | – |"
        lines.append(
            f"| {r['rows']:,} | {r['privacy']} | {r['query']} | {r['raw_ms']:.2f} | {r['veil_ms']:.2f} | "
            f"{r['ratio']:.2f}× | {r['added_ms']:.2f} | {r['parse_plan_ms']:.2f} | {_cpu_ratio(r)} |" + extra
        )
    lines += [
        "",
        "Where Veil's time goes (median ms per pass of `veil.proxy.pipeline.PASSES`, same runs' conditions; "
        "`prepare` builds/binds the generated statements, `reserve` and `release` are the SQLite transactions "
        "(release waits for the reservation's fsync first), `execute` the engine, `noise` the OpenDP samplers). "
        "Each pass's median is over the queries it ran in: the planning passes (resolve to prepare) run only for the "
        "first query of a shape and its probe, as every later one is a plan cache hit that skips them, and `parse` "
        "only for the first query of a token shape (since session 21 the cache's front skips it too), so their "
        "columns are the cost of a miss; `total` is every query's:",
        "",
        "| rows | privacy | query | raw (same loop) | " + " | ".join(PHASES) + " | total |",
        "|---|---|---|---|" + "---|" * (len(PHASES) + 1),
    ]
    for r in results:
        ph = r["phases"]
        cells = " | ".join(f"{ph.get(k, 0.0):.2f}" for k in ("raw", *PHASES, "total"))
        lines.append(f"| {r['rows']:,} | {r['privacy']} | {r['query']} | {cells} |")
    lines += [
        "",
        "Targets at 1M rows (issue 16): GROUP BY ≤ 1.5× raw (row-level), ≤ 2× (user-level); COUNT/AVG ≤ 3 ms added; "
        "parse+plan ≤ 2 ms median. Peers on the same queries and machine type (../shared/notes/peers.md): "
        "SmartNoise SQL 2.5–83× raw (row-level), 20–480× (user-level); Qrlew 28–744×.",
        "User-level bounding is a bounded copy built once per table version (not timed above: it is built in the "
        "warm-up query), so a user-level query reads a smaller, pre-clamped table.",
        "",
        "Targets checked on this run (1M rows, wall-clock medians):",
        "",
        *verdict(results),  # type: ignore[arg-type]
        "",
        "The notes below are from the profile of 2026-11-26 (before that day's changes); the per-pass table above "
        "is what this run measured.",
        "",
        FINDINGS,
    ]
    if prev:
        lines += [
            "",
            f"`{before_label}:` columns: the same script "
            + (
                "with the plan cache off (`--no-plan-cache`: every query planned afresh), run just before this one on "
                "the same host."
                if before_label == "no plan cache"
                else "on the code before this round of changes, run alternately with it (before/after per table size, "
                "minutes apart, same host)."
            ),
        ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--no-write", action="store_true", help="print only; do not touch docs/benchmarks.md")
    ap.add_argument("--json", type=Path, help="also write the results to this JSON file")
    ap.add_argument("--before", type=Path, help="JSON results of an earlier run, shown beside these")
    ap.add_argument("--render", type=Path, help="do not measure: render the results saved by --json in this file")
    ap.add_argument("--no-plan-cache", action="store_true", help="plan every query afresh (for an A/B with --before)")
    ap.add_argument("--before-label", default="before", help="the heading of the --before columns")
    ap.add_argument(
        "--bound-base", type=int, default=0, help="WHERE bounds base + i (default 0: settled by zone maps; try 10000)"
    )
    args = ap.parse_args()
    results = []
    load_before = os.getloadavg()[0]
    if args.render:
        results = json.loads(args.render.read_text(encoding="utf-8"))
    for n in [] if args.render else args.rows:
        with tempfile.TemporaryDirectory() as d:
            results += run(n, args.reps, Path(d), plan_cache=not args.no_plan_cache, base=args.bound_base)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1), encoding="utf-8")
    before = json.loads(args.before.read_text(encoding="utf-8")) if args.before else None
    load = "not recorded" if args.render else f"{load_before:.1f} at start, {os.getloadavg()[0]:.1f} at end"
    md = to_markdown(results, args.reps, before, load, args.before_label)
    print(md)
    if not args.no_write:
        write_section("proxy", md)


if __name__ == "__main__":
    main()
