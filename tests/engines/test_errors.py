"""Every engine splits its failures the same way: before reading data (free refusal) or while running.

Binding errors (unknown column, wrong types) raise ``EngineError(before_data=True)`` from ``describe``
and ``execute``; a failure while rows are read raises ``before_data=False``; neither carries the engine's
text (which could quote data).
"""

from __future__ import annotations

import pytest

from veil.engines import open_engine
from veil.engines.base import EngineError
from veil.policy import Policy

BINDING = ["SELECT nope FROM people", "SELECT age FROM people GROUP BY sex", "SELECT SUM(sex, age) FROM people"]


def _check(policy: Policy, runtime_sql: str) -> None:
    engine = open_engine(policy)
    try:
        for sql in BINDING:
            for call in (engine.describe, engine.execute):
                with pytest.raises(EngineError) as info:
                    call(sql)
                assert info.value.before_data, sql
        with pytest.raises(EngineError) as info:
            engine.execute(runtime_sql)
        assert not info.value.before_data
        assert "x-secret" not in str(info.value)
        assert engine.describe("SELECT age FROM people").names == ("age",)
    finally:
        engine.close()


def test_duckdb_error_split(duckdb_policy: Policy) -> None:
    _check(duckdb_policy, "SELECT CAST(sex || 'x-secret' AS INTEGER) FROM people")


@pytest.mark.slow
def test_spark_error_split(spark_policy: Policy) -> None:
    _check(spark_policy, "SELECT raise_error(concat(sex, 'x-secret')) FROM people")
