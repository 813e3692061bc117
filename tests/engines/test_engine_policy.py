"""The ``[engine]`` policy section and the Spark renderer (no Spark needed for these)."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlglot

from veil.engines import open_engine
from veil.engines.duckdb import DuckDBEngine
from veil.engines.neutral import neutralise
from veil.engines.spark import SparkEngine
from veil.errors import PolicyError
from veil.policy import load_policy
from veil.proxy.totality import make_total

BASE = """\
[tables.t]
privacy_unit = "row"
[tables.t.columns]
x = { type = "int", lower = 0, upper = 10 }
[analysts.a]
epsilon = 1
"""


def _load(tmp_path: Path, engine: str) -> object:
    p = tmp_path / "policy.toml"
    p.write_text(BASE + engine, encoding="utf-8")
    return load_policy(p)


def test_no_engine_section_is_duckdb(tmp_path: Path) -> None:
    pol = _load(tmp_path, "")
    assert pol.engine.kind == "duckdb"  # type: ignore[attr-defined]
    assert isinstance(open_engine(pol), DuckDBEngine)  # type: ignore[arg-type]
    assert _load(tmp_path, '[engine]\nkind = "duckdb"\n').engine == pol.engine  # type: ignore[attr-defined]


def test_spark_local_and_remote(tmp_path: Path) -> None:
    local = _load(tmp_path, '[engine]\nkind = "spark"\nmaster = "local[2]"\nwarehouse = "wh"\ndatabase = "veil_db"\n')
    spec = local.engine  # type: ignore[attr-defined]
    assert (spec.kind, spec.master, spec.remote, spec.database) == ("spark", "local[2]", None, "veil_db")
    assert spec.warehouse == (tmp_path / "wh").resolve()
    assert isinstance(open_engine(local), SparkEngine)  # type: ignore[arg-type]
    default_wh = _load(tmp_path, '[engine]\nkind = "spark"\nmaster = "local[1]"\n').engine  # type: ignore[attr-defined]
    assert default_wh.warehouse == (tmp_path / "spark-warehouse").resolve() and default_wh.database == "default"
    remote = _load(tmp_path, '[engine]\nkind = "spark"\nremote = "sc://h:15002"\n').engine  # type: ignore[attr-defined]
    assert (remote.remote, remote.master, remote.warehouse) == ("sc://h:15002", None, None)


@pytest.mark.parametrize(
    ("section", "fragment"),
    [
        ('kind = "sparq"', "'duckdb' or 'spark'"),
        ('kind = "spark"', "exactly one of master"),
        ('kind = "spark"\nmaster = "local[1]"\nremote = "sc://h:1"', "exactly one of master"),
        ('kind = "spark"\nremote = "h:1"', "sc://host:port"),
        ('kind = "spark"\nremote = "sc://h:1"\nwarehouse = "w"', "local) mode only"),
        ('kind = "spark"\nmaster = "local[1]"\ndatabase = "my-db"', "plain SQL name"),
        ('kind = "duckdb"\nmaster = "local[1]"', "only to kind = 'spark'"),
        ('kind = "spark"\nmaster = "local[1]"\nthreads = "2"', "threads"),
        ("kind = 3", "must be a string"),
    ],
)
def test_bad_engine_sections(tmp_path: Path, section: str, fragment: str) -> None:
    with pytest.raises(PolicyError) as info:
        _load(tmp_path, f"[engine]\n{section}\n")
    assert fragment in str(info.value)


def _spark_sql(tmp_path: Path, sql: str) -> str:
    pol = _load(tmp_path, '[engine]\nkind = "spark"\nmaster = "local[1]"\n')
    tree = neutralise(make_total(sqlglot.parse_one(sql, read="postgres")))
    return SparkEngine(pol).render(tree)  # type: ignore[arg-type]


def test_spark_rendering_keeps_duckdb_meaning(tmp_path: Path) -> None:
    sql = _spark_sql(
        tmp_path,
        "SELECT SUM(CAST(x AS BIGINT) + 1), COUNT(*) FILTER (WHERE EXTRACT(DOW FROM d) = 0 AND LOG(x) > 1"
        " AND CAST(s AS BIGINT) > 2 AND x * 2 > 1 AND x % 3 = 1 AND x / 0 IS NULL AND EXTRACT(ISODOW FROM d) = 7) FROM t",
    )
    assert "SUM(CAST(TRY_ADD(TRY_CAST(x AS BIGINT), 1) AS DECIMAL(38, 0)))" in sql
    assert "(DAYOFWEEK(d) - 1) = 0" in sql
    assert "LOG(10, x)" in sql and "TRY_CAST(s AS BIGINT)" in sql
    assert "TRY_MULTIPLY(x, 2)" in sql and "TRY_MOD(x, NULLIF(3, 0))" in sql and "x / NULLIF(0, 0)" in sql
    assert "EXTRACT(DAYOFWEEK_ISO FROM d)" in sql
    assert "TRY(" not in sql.upper().replace("TRY_", "")
