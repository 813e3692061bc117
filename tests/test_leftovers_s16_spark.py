"""Leftovers of session 16 on Spark (``local[2]``, the run's one JVM): items 1 and 5.

* Item 1 (red team s45, left): a text cast to DATE or TIMESTAMP gave different answers on DuckDB and Spark for some
  texts; the queries of ``test_leftovers_s16_casts.py`` now answer alike on both, and as Python reads the subset.
* Item 5: the curator's ``read_table`` on a Spark policy failed with an untyped ``ValueError`` ("year 10000 is out of
  range") on a table holding a date beyond 9999; it now refuses with a typed ``InputError`` naming the column and
  the value.
"""

from __future__ import annotations

import datetime as dt
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.test_leftovers_s16_casts import policy_in, queries
from veil.errors import InputError

pytestmark = pytest.mark.slow

SPARK = '\n[engine]\nkind = "spark"\nmaster = "local[2]"\nwarehouse = "spark-warehouse"\n'


@pytest.fixture(scope="module")
def spark_policy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    import veil.proxy.bounding as bounding
    from veil.engines.spark import spark_available

    reason = spark_available()
    if reason is not None:
        pytest.skip(f"Spark test skipped: {reason}")
    saved = bounding.secrets
    bounding.secrets = types.SimpleNamespace(token_hex=lambda n: "5a" * n)  # type: ignore[assignment]
    try:
        yield policy_in(tmp_path_factory.mktemp("s16spark"), extra=SPARK)
    finally:
        bounding.secrets = saved


def test_a_text_cast_to_a_date_answers_alike_on_spark(spark_policy: Any) -> None:
    """Before: 4 of the 6 queries answered otherwise on Spark than on DuckDB (s45: offsets applied, ``'2020-1-1'``
    and ``' 2020-01-01 '`` read as dates, ``'infinity'`` NULL)."""
    from veil.proxy._testing import exact_session

    with exact_session(spark_policy, "a") as s:
        for name, (sql, expected) in queries().items():
            assert s.execute(sql).rows == ((expected,),), (name, sql)


def test_spark_read_table_refuses_a_date_beyond_9999_naming_it(spark_policy: Any, tmp_path: Path) -> None:
    from veil.store import spark as store
    from veil.store.warehouse import read_table, write_table

    write_table(spark_policy, "far", pd.DataFrame({"k": [1, 2], "d": [dt.date(2000, 1, 1), dt.date(9999, 12, 31)]}), replace=True)
    session = store.spark_session(store.spec_of(spark_policy))
    full = store._full(store.spec_of(spark_policy), "far")
    assert len(read_table(spark_policy, "far")) == 2  # up to 9999-12-31: read
    session.sql(f"INSERT INTO {full} SELECT 3, date_add(DATE '9999-12-31', 1)")
    session.sql(f"REFRESH TABLE {full}")
    with pytest.raises(InputError, match=r"'d'.*10000-01-01"):
        read_table(spark_policy, "far")
    assert len(read_table(spark_policy, "far", ["k"])) == 3  # the other columns still read
    # a publication's read of its source (red team s53 B3b): the far date reads as no date, the rows stay
    read = read_table(spark_policy, "far", python_dates=True).sort_values("k")
    assert read["d"].isna().tolist() == [False, False, True], read
