"""Leftovers of session 17 on Spark (``local[2]``, the run's one JVM), item 3: the bounded copy reads a date stored
as text as the query path does, on Spark too (``test_leftovers_s17_bounding.py`` on DuckDB): one world holding every
text of that test, each person's copied value the guard's reading of their text (Spark's own cast read
``' 2020-01-01'`` and ``'2020-01-01\\n'`` as dates; DuckDB read ``'2020-1-1'`` and ``'infinity'`` too)."""

from __future__ import annotations

import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.test_leftovers_s17_bounding import ODD, OTHERS, READ, copy_rows, guard_reading

pytestmark = pytest.mark.slow

SPARK = '\n[engine]\nkind = "spark"\nmaster = "local[2]"\nwarehouse = "spark-warehouse"\n'


@pytest.fixture(scope="module")
def fixed_salt() -> Iterator[None]:
    import veil.proxy.bounding as bounding
    from veil.engines.spark import spark_available

    reason = spark_available()
    if reason is not None:
        pytest.skip(f"Spark test skipped: {reason}")
    saved = bounding.secrets
    bounding.secrets = types.SimpleNamespace(token_hex=lambda n: "5a" * n)  # type: ignore[assignment]
    try:
        yield
    finally:
        bounding.secrets = saved


def test_spark_copies_text_dates_as_the_query_path_reads_them(fixed_salt: None, tmp_path: Path) -> None:
    texts = [*OTHERS, *ODD, *READ]
    rows: list[tuple[Any, ...]] = copy_rows(tmp_path / "spark", texts, SPARK)
    assert rows == [(u, guard_reading(t)) for u, t in enumerate(texts)]
