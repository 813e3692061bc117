"""What building a materialised public source may hold: bounded by construction, whatever its operators (s58 E3).

Threat class 6 (server abuse). A derived public source on a query's private path is evaluated once, before anything is
charged, with ``LIMIT max_rows + 1``. The limit bounds the rows it *keeps*; a blocking operator of the source consumes
its whole input before the limit can stop it: a GROUP BY or DISTINCT keeps every group, an ORDER BY or a window sorts
or partitions every row, a UNION/INTERSECT/EXCEPT keeps a hash table of its operands, a join keeps its build side. On
the query's own reader such a build took 0.5–2.1 GB for a free, refused ``explain`` (1.77 million groups over a
121-row public table). Listing the operators (a static cost bound) would bound only the ones listed; the engine now
evaluates every public source on an instance of its own under a memory limit
(:data:`veil.engines.duckdb.MATERIALISING_MEMORY`, no disk to spill to), so a build that needs more fails there, free,
as an :class:`~veil.errors.Unsupported` naming the bound.

The family below is one cross product of a 121-row public table (1.77 million rows of a 200-byte text) fed to each
blocking operator in turn, written as a derived table, a CTE, and nested one level deeper: each is refused free with
the ledger unchanged, or answered, and in both cases the query's reader held at most twice the byte cap while it was
built (s58's ``_Peak`` spy; before the fix 0.40–0.51 GB for a free ``explain``: GROUP BY 509 MB, COUNT(DISTINCT) 455 MB,
ORDER BY 464 MB, MEDIAN 404 MB). The evaluating instance itself is bounded by its ``memory_limit``, DuckDB's to
enforce: its setting, its sandbox and the refusal past it are tested below. Window functions, set
operations and subqueries outside FROM are refused by the grammar before anything is built; they stay in the family.
Legitimate sources (a grouped public table, DISTINCT over a public column, a modest join) are still answered.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.adversarial.test_redteam_s57 import D1B_POLICY
from tests.adversarial.test_redteam_s58 import _Peak
from tests.support.warehouse import policy_with_tables

#: 121³ = 1,771,561 rows of a 200-character public text: 0.35 GB of text before any operator keeps a copy of it.
CUBE = "ages x JOIN ages y ON TRUE JOIN ages z ON TRUE"

#: One blocking operator over the cube each, as a derived public source with columns ``a`` (joined to the private
#: ``age``) and ``s``.
BLOCKING = {
    "group by": f"SELECT x.a, MAX(y.txt) AS s FROM {CUBE} GROUP BY x.a, y.a, z.a",
    "distinct": f"SELECT DISTINCT x.a, y.a AS b, z.a AS c, y.txt AS s FROM {CUBE}",
    "order by": f"SELECT x.a, y.txt AS s FROM {CUBE} ORDER BY y.txt, z.a, y.a",
    "count distinct": f"SELECT x.a, COUNT(DISTINCT y.txt || z.a) AS s FROM {CUBE} GROUP BY x.a",
    "median": f"SELECT x.a, MEDIAN(y.txt || z.a) AS s FROM {CUBE} GROUP BY x.a",
    "in subquery": f"SELECT w.a, w.txt AS s FROM ages w WHERE w.txt IN (SELECT y.txt || z.a FROM {CUBE})",
    # refused before they are built today (window functions, set operations, subqueries outside FROM): the bound holds
    # for them too should the grammar open them
    "window": f"SELECT x.a, COUNT(*) OVER (PARTITION BY y.txt ORDER BY z.a) AS s FROM {CUBE}",
    "union": f"SELECT x.a, y.txt || z.a AS s FROM {CUBE} UNION SELECT x.a, y.txt || z.a AS s FROM {CUBE}",
    "intersect": f"SELECT x.a, y.txt || z.a AS s FROM {CUBE} INTERSECT SELECT x.a, y.txt || z.a AS s FROM {CUBE}",
    "except": f"SELECT x.a, y.txt || z.a AS s FROM {CUBE} EXCEPT SELECT x.a, z.txt || y.a AS s FROM {CUBE}",
    # a range join (a sort or nested loop over a side the cube feeds)
    "range join": f"SELECT w.a, q.s FROM ages w JOIN (SELECT x.a, y.txt || z.a AS s FROM {CUBE}) q ON q.a > w.a",
}
#: Each source where the query reads it: a derived table, a CTE, and one level deeper (a derived table inside a CTE).
NESTINGS = {
    "derived": "SELECT COUNT(*) FROM people t JOIN ({source}) g ON g.a = t.age WHERE g.s IS NOT NULL",
    "cte": "WITH g AS ({source}) SELECT COUNT(*) FROM people t JOIN g ON g.a = t.age WHERE g.s IS NOT NULL",
    "nested": "WITH g AS (SELECT i.a, i.s FROM ({source}) i WHERE i.a >= 0) "
    "SELECT COUNT(*) FROM people t JOIN g ON g.a = t.age WHERE g.s IS NOT NULL",
}
#: Sources that must still be answered (all small: a grouped public table, DISTINCT over a public column, a join).
LEGITIMATE = [
    "SELECT a, COUNT(*) AS s FROM ages GROUP BY a",
    "SELECT a, MAX(txt) AS s FROM ages GROUP BY a",
    "SELECT DISTINCT a, a AS s FROM ages",
    "SELECT x.a, y.txt AS s FROM ages x JOIN ages y ON x.a = y.a",
    "SELECT x.a, COUNT(*) AS s FROM ages x JOIN ages y ON TRUE GROUP BY x.a",
    "SELECT a, MEDIAN(a) AS s FROM ages GROUP BY a ORDER BY a",
]


@pytest.fixture(scope="module")
def policy(tmp_path_factory: pytest.TempPathFactory) -> Any:
    people = pd.DataFrame({"pid": list(range(1, 41)), "age": [20 + i for i in range(40)]}).astype("Int64")
    ages = pd.DataFrame({"a": pd.array(range(121), dtype="Int64"), "txt": [f"{i:03d}" + "x" * 197 for i in range(121)]})
    return policy_with_tables(tmp_path_factory.mktemp("e3"), D1B_POLICY, {"people": people}, {"ages": ages})


@pytest.fixture()
def session(policy: Any) -> Iterator[Any]:
    from veil.proxy._testing import exact_session

    with exact_session(policy, "a") as s:
        yield s


def _bound() -> int:
    from veil.proxy.multiplicity import MAX_MATERIALISED_BYTES

    return 2 * MAX_MATERIALISED_BYTES


#: Every operator at every nesting through a free ``explain``; through ``execute`` as a derived table.
CASES = [(o, n, "explain") for o in sorted(BLOCKING) for n in sorted(NESTINGS)]
CASES += [(o, "derived", "execute") for o in sorted(BLOCKING)]


@pytest.mark.parametrize(("operator", "nesting", "how"), CASES)
def test_a_blocking_operator_of_a_public_source_builds_within_the_bound(
    policy: Any, session: Any, monkeypatch: pytest.MonkeyPatch, operator: str, nesting: str, how: str
) -> None:
    """Each blocking operator over 1.77M public rows, at each nesting: refused free (0A000, naming the bound, the
    ledger unchanged) or answered, and the reader held at most twice the byte cap while it was built."""
    from veil.errors import Unsupported, VeilError

    spy = _Peak(session._env.engine, policy, monkeypatch)
    spent = session.budget().spent
    sql = NESTINGS[nesting].format(source=BLOCKING[operator])
    try:
        getattr(session, how)(sql, epsilon=1.0)
    except Unsupported as refused:
        assert refused.sqlstate == "0A000"
        assert session.budget().spent == spent, refused
        if "MiB of memory" in str(refused):
            assert "GROUP BY" in str(refused) and refused.hint and "WHERE" in refused.hint
    except VeilError as other:  # any other refusal must be free too
        assert session.budget().spent == spent, other
    assert all(p <= _bound() for p in spy.peaks), [f"{p / 1e6:.0f} MB" for p in spy.peaks]


@pytest.mark.parametrize("operator", ["group by", "count distinct", "median", "order by"])
def test_a_source_past_the_memory_bound_is_refused_free_with_the_bound_named(
    session: Any, monkeypatch: pytest.MonkeyPatch, operator: str
) -> None:
    """The operators whose state grows with their input are refused, free, by the bound itself (a DISTINCT under the
    LIMIT stops early on DuckDB 2.0 and is refused by the row cap instead)."""
    from veil.engines.duckdb import MATERIALISING_MEMORY
    from veil.errors import Unsupported

    spent = session.budget().spent
    with pytest.raises(Unsupported, match=f"more than {MATERIALISING_MEMORY >> 20} MiB of memory") as refused:
        session.execute(NESTINGS["derived"].format(source=BLOCKING[operator]), epsilon=1.0)
    assert refused.value.sqlstate == "0A000"
    assert session.budget().spent == spent


@pytest.mark.parametrize("source", LEGITIMATE)
def test_a_modest_public_source_is_still_answered(session: Any, source: str) -> None:
    """Grouping, DISTINCT, a join and UNION over a modest public table are evaluated and answered as before."""
    res = session.execute(NESTINGS["derived"].format(source=source), epsilon=1.0)
    assert res.rows


def test_the_bound_is_the_instance_s_own_not_the_readers(session: Any) -> None:
    """The evaluation runs on an instance of its own: the reader's memory limit is untouched, and the instance cannot
    read files (the analyst's SQL runs there)."""
    import duckdb

    from veil.engines.duckdb import MATERIALISING_MEMORY, _bounded_public_instance
    from veil.store.warehouse import public_path

    con = _bounded_public_instance(public_path(session._env.policy), 1)
    try:
        limit = con.execute("SELECT current_setting('memory_limit')").fetchall()[0][0]
        assert limit.endswith("MiB") and float(limit[:-3]) <= MATERIALISING_MEMORY >> 20, limit
        assert con.execute("SELECT COUNT(*) FROM ages").fetchall() == [(121,)]
        with pytest.raises(duckdb.Error):
            con.execute("SELECT * FROM read_csv('/etc/passwd')").fetchall()
        with pytest.raises(duckdb.Error):
            con.execute("SET memory_limit = '10GB'")
    finally:
        con.close()


def test_cancel_reaches_a_source_being_built(session: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The statement timeout's cancel (``engine.cancel``) interrupts the evaluation on its own instance: the query is
    refused free, as a cancel of the query's cursor was."""
    from veil.engines import duckdb as duckdb_engine
    from veil.errors import VeilError

    engine = session._env.engine
    cursor = duckdb_engine._build_cursor  # one per evaluation, on a reused instance (e3reuse)

    def cancelled_soon(*args: Any) -> Any:
        con = cursor(*args)
        threading.Timer(0.05, engine.cancel).start()
        return con

    monkeypatch.setattr(duckdb_engine, "_build_cursor", cancelled_soon)
    slow = f"SELECT x.a, COUNT(*) AS s FROM {CUBE} JOIN ages w ON TRUE GROUP BY x.a"  # 2e8 rows, little memory
    spent = session.budget().spent
    with pytest.raises(VeilError, match="cancelled"):
        session.execute(NESTINGS["derived"].format(source=slow), epsilon=1.0)
    assert session.budget().spent == spent


def test_materialised_rows_keep_the_types_the_query_binds(tmp_path: Path) -> None:
    """The rows cross from the evaluating instance through Arrow; the temporary table takes the types the query's own
    cursor binds the source to (a HUGEINT sum stays a HUGEINT, not Arrow's DECIMAL(38, 0))."""
    from veil.proxy._testing import exact_session

    people = pd.DataFrame({"pid": list(range(1, 41)), "age": [20 + i for i in range(40)]}).astype("Int64")
    ages = pd.DataFrame({"a": pd.array(range(5), dtype="Int64"), "txt": ["t"] * 5})
    policy = policy_with_tables(tmp_path, D1B_POLICY, {"people": people}, {"ages": ages})
    with exact_session(policy, "a") as s:
        engine = s._env.engine
        sql = "SELECT * FROM (SELECT a, SUM(a) AS s, MAX(txt) AS m, NULL AS n FROM ages GROUP BY a) AS v(c0, c1, c2, c3)"
        assert engine.create_temp("__veil_pub_types", sql, 10) == 5
        types = engine.execute("DESCRIBE temp.__veil_pub_types").rows
        assert [(r[0], r[1]) for r in types] == [(r[0], r[1]) for r in engine.execute(f"DESCRIBE {sql}").rows]
        assert engine.execute("SELECT SUM(c1) FROM temp.__veil_pub_types").rows == [(10,)]
        engine.drop_temp("__veil_pub_types")
