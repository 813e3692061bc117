"""Conformance on Sail (``pysail``, a Rust engine speaking Spark Connect): every construct of docs/sql.md, noise off.

The same check as ``test_connect.py`` (identical answers and column types to DuckDB's, doubles to 1e-9 relative)
against a Sail server started once per test run (``sail_url`` in conftest.py; skipped, with the reason, when pysail
is not installed). Veil talks to it as to any Spark Connect server (``[engine] remote = "sc://…"``). A construct
that Sail 0.7.2 answers differently is marked below with the difference (strict: it fails once Sail agrees).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.errors.exceptions.connect import UnsupportedOperationException

from tests.engines.conftest import POLICY, build, connect_engine, sail_server, save_as_table
from tests.engines.test_conformance import CASES, _rows_equal
from veil.engines import open_engine
from veil.engines.base import EngineError
from veil.policy import Policy
from veil.proxy._testing import exact_session
from veil.proxy.session import QuerySession

pytestmark = pytest.mark.slow

#: Sail 0.7.2's ``try_add``, ``try_subtract``, ``try_multiply`` and ``try_mod`` take integers (and dates or
#: intervals) only; Spark's also take doubles. Veil renders its total arithmetic (``TRY(a - b)``) with them on
#: Spark, so on a DOUBLE the query fails to bind and Sail refuses it (free: an error before any row is read).
#: Veil's quantile histograms (MEDIAN, PERCENTILE_*, MIN/MAX) subtract doubles (its centred moments build their
#: DOUBLE arithmetic total without TRY, so variances run).
_TRY_ON_DOUBLES = pytest.mark.xfail(
    strict=True, raises=EngineError, reason="Sail 0.7.2: try_add/try_subtract/try_multiply/try_mod refuse DOUBLE arguments"
)
SAIL_DIFFERS: dict[str, pytest.MarkDecorator] = {
    name: _TRY_ON_DOUBLES for name in ("median", "percentile_cont", "min_max", "powers_sqrt_pi")
}


@pytest.fixture(scope="module")
def sessions(
    tmp_path_factory: pytest.TempPathFactory, same_salt: None, sail_policy: Policy
) -> Iterator[tuple[QuerySession, QuerySession]]:
    # A DuckDB warehouse and ledger of its own: another module's would answer these queries from its cache.
    duckdb_policy = build(tmp_path_factory.mktemp("sail_duckdb") / "duckdb")
    with exact_session(duckdb_policy, "alice") as d, exact_session(sail_policy, "alice") as s:
        yield d, s


def test_the_server_is_sail(sail_policy: Policy) -> None:
    """The run talks to Sail, not to a Spark that happens to listen on the port (Sail's ``version()`` is its own)."""
    import pysail

    engine = open_engine(sail_policy)
    try:
        assert engine.execute("SELECT version() AS v").rows == [(pysail.__version__,)]
    finally:
        engine.close()


@pytest.mark.parametrize("name", [pytest.param(n, marks=SAIL_DIFFERS.get(n, ())) for n in CASES])
def test_same_answer_on_duckdb_and_sail(name: str, sessions: tuple[QuerySession, QuerySession]) -> None:
    sql = CASES[name]
    duck, sail = sessions
    a, b = duck.execute(sql), sail.execute(sql)
    assert a.columns == b.columns, (sql, a.columns, b.columns)
    assert a.epsilon_charged == b.epsilon_charged
    assert _rows_equal(a.rows, b.rows, "ORDER BY" in sql.upper()), (sql, a.rows, b.rows)
    assert a.rows


def test_sail_differences_name_real_cases() -> None:
    assert set(SAIL_DIFFERS) <= set(CASES)


@pytest.mark.xfail(strict=True, raises=UnsupportedOperationException, reason="Sail 0.7.2 has no ALTER TABLE … RENAME TO")
def test_write_table_on_sail(sail_policy: Policy) -> None:
    """Veil's own ``write_table`` on Sail (``veil ingest``, ``veil publish``): written aside, then renamed in."""
    import pandas as pd

    from veil.store.warehouse import read_table, write_table

    df = pd.DataFrame({"state": ["S1", "S2"], "region": ["r", "s"]})
    write_table(sail_policy, "regions_written", df)
    assert read_table(sail_policy, "regions_written").sort_values("state").reset_index(drop=True).equals(df)


def test_each_connect_server_gets_its_own_session(sail_policy: Policy, tmp_path: Path) -> None:
    """A process with policies on several Connect servers sends each policy's statements to its own server.

    pyspark's ``builder.remote(url).getOrCreate()`` returns any Connect session the process already holds, whatever
    its server. Each Sail server keeps its tables' files in its own directory, so the second server's directory
    shows whether the second policy's table reached it.
    """
    import uuid

    import pandas as pd

    from veil.policy import load_policy

    database = f"veil_apart_{uuid.uuid4().hex[:8]}"
    second_dir = tmp_path / "second_sail"
    with sail_server(second_dir) as second:
        policies = []
        for i, url in enumerate((str(sail_policy.engine.remote), second)):
            d = tmp_path / f"p{i}"
            d.mkdir()
            (d / "policy.toml").write_text(POLICY + connect_engine(url, database), encoding="utf-8")
            policies.append(load_policy(d / "policy.toml"))
        assert not list(second_dir.rglob("*.parquet"))
        for p, n in zip(policies, (7, 11), strict=True):
            save_as_table(p, "regions", pd.DataFrame({"state": [f"S{k}" for k in range(n)], "region": ["r"] * n}))
        assert list(second_dir.rglob("*.parquet")), "the second policy's table was written to another server"
        engines = [open_engine(p) for p in policies]
        try:
            assert [e.execute("SELECT COUNT(*) FROM regions").rows[0][0] for e in engines] == [7, 11]
        finally:
            for e in engines:
                e.close()
