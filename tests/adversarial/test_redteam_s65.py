"""Red team, session 65 (redq21): the analyst query path on main at a59be63 (2026-11-28) — the 16 KiB value cap,
held public answers, grid comparisons and the plan cache, widened integer arithmetic and intervals — with the
classic classes tried again. Neighbouring worlds D / D′ differ in one privacy unit; noise off (``exact_session``).

Findings (each test is a strict xfail until fixed):

* F1 (MEDIUM; HIGH by effect — one person's membership with certainty for a few charged ε = 0.001 probes —, where the
  readers run at the memory floor with few threads; threat class 2, every interface, the failure is the engine's) —
  **a grouped ``COUNT(DISTINCT …)`` holds its group keys and its distinct arguments in one hash-table row, which the
  value cap never adds up**: ``expansion.largest_text_value`` bounds "the GROUP BY keys together" and "each DISTINCT's
  arguments together" separately, each at ``MAX_VALUE_BYTES`` (16 KiB), but DuckDB evaluates ``SELECT s, COUNT(DISTINCT
  u) … GROUP BY s`` with a distinct hash table keyed by ``(s, u)``: rows of up to 32 KiB, twice the cap whose premise
  is that a row of at most 16 KiB always spills (red team s63 F1). Measured on this host (DuckDB 2.0, Veil's real path,
  ``set_reader_threads(1)`` and ``set_reader_memory(MIN_READER_MEMORY_MIB)`` = 256 MiB, as s63's F1 test runs): two
  ``category`` columns with ``max_length = 4096`` (priced 16,384 bytes each; the data 4-byte characters, 16,384 bytes),
  ``SELECT s, COUNT(DISTINCT u) FROM t WHERE id < k GROUP BY s`` is planned and charged, answered for k ≤ 3,672 and
  ``QueryFailed`` (XX000, charged, "OutOfMemory" in the log) from k = 3,673, deterministic on repeats (3671 ✓, 3672 ✓,
  3673 ✗, 3674 ✗, 3672 ✓, 3673 ✗): a binary search over rows that exclude the target finds the edge, and the next
  query answers in D′ and fails in D. The same key and distinct sizes in DuckDB alone: 2,000 rows answered, 8,000
  failed (1 thread); at 2 threads 40,000 rows spilled (the edge moves with the thread count, it does not go away).
  Two 12 KiB halves (``s || s || s`` over 1,024-character names) are accepted too. Suggested fix: count a grouped
  DISTINCT's row as the GROUP BY keys plus its arguments (the same ``held`` sum), refuse free past the cap; and
  re-measure the floor for 16 KiB rows at 1 thread, the configuration the floor was not measured at.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

_F1_POLICY = """\
[database]
path = "warehouse.duckdb"
[ledger]
path = "ledger.sqlite"
[tables.t]
privacy_unit = "row"
[tables.t.columns]
id = { type = "int", lower = 0, upper = 10000000 }
s = { type = "category", max_length = 4096 }
u = { type = "category", max_length = 4096 }
n = { type = "int", lower = 0, upper = 10 }
[tables.p]
public = true
[tables.p.columns]
k = { type = "int" }
v = { type = "category" }
[analysts.a]
epsilon = 100000
"""


@pytest.fixture(scope="module")
def f1_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from veil.policy import load_policy
    from veil.proxy._testing import exact_session
    from veil.store.warehouse import write_table

    folder = Path(tmp_path_factory.mktemp("s65f1"))
    path = folder / "policy.toml"
    path.write_text(_F1_POLICY, encoding="utf-8")
    policy = load_policy(path)
    ids = list(range(20))
    frame = {"id": ids, "s": [f"s{i}" for i in ids], "u": [f"u{i}" for i in ids], "n": [i % 10 for i in ids]}
    write_table(policy, "t", pd.DataFrame(frame))
    write_table(policy, "p", pd.DataFrame({"k": list(range(10)), "v": [f"v{i}" for i in range(10)]}), public=True)
    with exact_session(path, "a") as session:
        yield session


@pytest.mark.parametrize(
    "sql",
    [
        # two bare 4,096-character columns: 16,384 bytes each (the cap), one distinct hash-table row of 32 KiB
        "SELECT s, COUNT(DISTINCT u) FROM t GROUP BY s",
        # built values, 12,000 bytes each
        "SELECT LEFT(s, 1000) || LEFT(s, 1000) || LEFT(s, 1000) AS k, "
        "COUNT(DISTINCT LEFT(u, 1000) || LEFT(u, 1000) || LEFT(u, 1000)) FROM t GROUP BY k",
        # two keys and a FILTER
        "SELECT n, LEFT(s, 2000) AS k, COUNT(DISTINCT u) FILTER (WHERE n > 1) FROM t GROUP BY n, k",
    ],
)
def test_f1_a_grouped_distinct_whose_hash_row_passes_the_value_cap_is_refused_free(f1_session: Any, sql: str) -> None:
    """F1's class: one row of a grouped DISTINCT's hash table holds every GROUP BY key and every argument of the
    DISTINCT together; past ``MAX_VALUE_BYTES`` the engine may be unable to spill it (measured: a step at one row at
    the 256 MiB floor, 1 thread), so such a query must be refused before the reservation, free (0A000), as the
    separate keys or arguments past the cap are (``test_redteam_s63.py::test_f1_c…``). On main it is planned and
    charged."""
    from veil.errors import Unsupported

    spent = f1_session.budget().spent
    with pytest.raises(Unsupported, match="text value of this query may hold"):
        f1_session.execute(sql, epsilon=0.001)
    assert f1_session.budget().spent == spent


@pytest.mark.parametrize(
    "sql",
    [
        # each DISTINCT aggregate has its own table keyed by the group's keys and its arguments
        "SELECT s, COUNT(DISTINCT n), COUNT(DISTINCT u) FROM t GROUP BY s",
        # built keys and a built argument, each under the cap, together past it
        "SELECT LEFT(s, 3000) AS k, n, COUNT(DISTINCT LEFT(u, 2000)) FROM t GROUP BY k, n",
    ],
)
def test_f1_class_every_grouped_row_counts_its_keys_with_what_it_holds(f1_session: Any, sql: str) -> None:
    """F1's class: each DISTINCT aggregate's table holds the group's keys with its arguments; past the cap the query
    is refused free. (A text MIN/MAX, whose state would hold a copy beside the keys, is refused for its bounds.)"""
    from veil.errors import Unsupported

    spent = f1_session.budget().spent
    with pytest.raises(Unsupported, match="text value of this query may hold"):
        f1_session.execute(sql, epsilon=0.001)
    assert f1_session.budget().spent == spent


def test_f1_grouped_rows_within_the_cap_stay_answerable(f1_session: Any) -> None:
    """The F1 rule refuses only what passes the cap: the same shapes on short values answer."""
    for sql in (
        "SELECT n, COUNT(DISTINCT LEFT(u, 100)) FROM t GROUP BY n",
        "SELECT LEFT(s, 100) AS k, COUNT(*) FROM t GROUP BY k",
        "SELECT n, COUNT(DISTINCT id) FROM t GROUP BY n",
    ):
        f1_session.execute(sql, epsilon=0.001)
