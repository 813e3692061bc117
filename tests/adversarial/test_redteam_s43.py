"""Red team, session 43: privacy breaks that exist when a policy runs on Spark (``[engine] kind = "spark"``,
``local[2]``) but not on DuckDB (main at 631eb10, 2026-11-27).

Neighbouring worlds D and D′ differ in one person (unit 99) of a 30-person table; with noise off
(``veil.proxy._testing.exact_session``) both worlds must end the same way and every released statistic must move by
at most its planned sensitivity. The Spark session is the process's shared one (``veil.store.spark.spark_session``:
one JVM per test run, whichever test starts it). Skipped, with the reason, when Java or pyspark is missing.

Findings (details in each test's docstring):

* A1 (MEDIUM, deterministic side channel; every interface) a date group key beyond year 9999 — one person's
  ``d = 9999-12-31`` under ``GROUP BY d + INTERVAL 1 DAY`` — crashed the query on Spark with an untyped
  ``OverflowError`` (``SparkEngine.execute``: Arrow's ``to_pylist`` cannot make a Python date of year 10000), after
  the reservation, where the neighbour without that person answered. DuckDB hands such a value back as a text and
  the session puts it in the NULL group (``session._in_python_range``). Fixed in ``veil/engines/spark.py``
  (``_python_values``: a date or timestamp Python cannot hold is fetched as NULL, the DuckDB outcome).

Held (probed on both engines, D′ = one person with ``d = 9999-12-31``, ``n = 2⁶³ − 1`` or 2·10⁹, ``f = NaN``,
``s = 'ab\\'``; every pair ended the same way on Spark and on DuckDB, and moved by at most the sensitivity):
``LIKE`` with a column pattern (refused before data), ``d + INTERVAL 1 DAY`` and ``CAST(d AS TIMESTAMP) + INTERVAL
1 DAY`` in ``WHERE`` (Spark's ``try_add``), ``d + INTERVAL 70518960 MONTH`` (Spark's int-day overflow: NULL, no
error), ``n + 1``, ``-n``, ``ABS(n)``, ``n * n``, ``CAST(n AS INT)``, ``n % 0``, ``POWER(2, n)``, ``SQRT``/``LN``/``EXP``
of ``n``, ``SUBSTRING(s, n, n)``, ``CAST(s AS DATE)``; ``SUM``/``AVG``/``STDDEV`` of a float with a NaN (clamped to the
bound on both engines, bit-equal answers); ``MEDIAN``; a declared-category ``GROUP BY``; a DECIMAL literal beyond
2⁶³ in a ``SUM`` (refused unbounded); a TIMESTAMP WITH TIME ZONE group key (refused before data on Spark).
``EXTRACT(EPOCH FROM d)``, ``INTERVAL (n) DAY`` and ``INTERVAL (n) SECOND`` fail on Spark alone but on both worlds
(analysis/parse errors, before data): conformance gaps, not side channels. NULL units (three NULL-unit rows in D′)
are left out on both engines. A text unit column rewritten by Spark as ``STRING COLLATE UTF8_LCASE`` (Spark 4
collations; the s25 A1 class): ``'ALICE'`` with three rows did not displace ``'alice'`` under ``max_rows_per_unit =
1`` (the bounded copy partitions by ``decode(encode(…))``, collation-free on Spark too).
"""

from __future__ import annotations

import datetime as dt
import types
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from veil.errors import VeilError

POLICY = """\
[database]
path = "wh.duckdb"
[ledger]
path = "ledger.sqlite"
[defaults]
epsilon_per_query = 0.5
[tables.t]
privacy_unit = "u"
max_rows_per_unit = 2
[tables.t.columns]
u = { type = "int" }
x = { type = "int", lower = 0, upper = 10 }
f = { type = "float", lower = -10, upper = 10 }
s = { type = "category" }
k = { type = "category", values = ["a", "b", "c"] }
d = { type = "date" }
n = { type = "int" }
[analysts.a]
epsilon = 1000000.0
"""

SPARK = '\n[engine]\nkind = "spark"\nmaster = "local[2]"\nwarehouse = "spark-warehouse"\n'

#: The person only D′ holds: a date on the last day Python can hold, the largest BIGINT, a NaN, a trailing escape.
TARGET = {"u": 99, "x": 10, "f": float("nan"), "s": "ab\\", "k": "a", "d": dt.date(9999, 12, 31), "n": 2**63 - 1}


def _frame(extra: list[dict[str, Any]]) -> pd.DataFrame:
    rows = [
        {"u": i, "x": i % 10, "f": float(i % 7) - 3, "s": f"s{i % 3}", "k": "abc"[i % 3],
         "d": dt.date(2000, 1, 1) + dt.timedelta(days=i), "n": i}
        for i in range(30)
    ] + extra  # fmt: skip
    df = pd.DataFrame(rows)
    for c in ("u", "x", "n"):
        df[c] = df[c].astype("Int64")
    return df


class Worlds:
    def __init__(self, sessions: dict[str, Any]) -> None:
        self.sessions = sessions

    def ending(self, sql: str) -> dict[str, Any]:
        """How each world ends ``sql``: its rows, or the error's class and SQLSTATE (an untyped crash fails)."""
        out: dict[str, Any] = {}
        for name, s in self.sessions.items():
            try:
                out[name] = ("ok", s.execute(sql, epsilon=Fraction(1)).rows)
            except VeilError as exc:
                out[name] = (type(exc).__name__, exc.sqlstate)
        return out


@pytest.fixture(scope="module")
def spark_worlds(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worlds]:
    import veil.proxy.bounding as bounding
    from veil.engines.spark import spark_available
    from veil.policy import load_policy
    from veil.proxy._testing import exact_session
    from veil.store.warehouse import write_table

    reason = spark_available()
    if reason is not None:
        pytest.skip(f"Spark test skipped: {reason}")
    saved = bounding.secrets
    bounding.secrets = types.SimpleNamespace(token_hex=lambda n: "5a" * n)  # type: ignore[assignment]
    base = tmp_path_factory.mktemp("s43")
    sessions = {}
    try:
        for name, extra in (("D", []), ("D'", [TARGET])):
            d: Path = base / ("d1" if name == "D" else "d2")
            d.mkdir()
            (d / "policy.toml").write_text(POLICY + SPARK, encoding="utf-8")
            policy = load_policy(d / "policy.toml")
            write_table(policy, "t", _frame(extra), replace=True)
            sessions[name] = exact_session(policy, "a")
        yield Worlds(sessions)
    finally:
        for s in sessions.values():
            s.close()
        bounding.secrets = saved


# --- A1. A date group key beyond year 9999 crashed the Spark fetch ---------------------------------------------


def test_A1_on_spark_a_date_key_beyond_9999_ends_both_worlds_the_same_way(spark_worlds: Worlds) -> None:
    """MEDIUM (deterministic side channel; every interface: the crash is in ``SparkEngine.execute``). D′'s one
    person with ``d = 9999-12-31`` made ``GROUP BY d + INTERVAL 1 DAY`` end in an untyped ``OverflowError`` ("date
    value out of range", from Arrow's ``to_pylist``) on Spark, after the reservation; D answered. On DuckDB both
    worlds answer: the out-of-range date comes back as a text and takes the NULL group. Fix: fetch a date or
    timestamp Python cannot hold as NULL (``spark._python_values``)."""
    for sql in ("SELECT k, d + INTERVAL 1 DAY AS g, COUNT(*) AS c FROM t GROUP BY 1, 2",):
        out = spark_worlds.ending(sql)
        assert out["D"][0] == "ok" and out["D'"][0] == "ok", (sql, out)
        before = {r[:-1]: r[-1] for r in out["D"][1]}
        after = {r[:-1]: r[-1] for r in out["D'"][1]}
        for key in set(before) | set(after):
            assert abs(after.get(key, 0) - before.get(key, 0)) <= 2, (sql, key, before, after)


def test_A1_python_values_null_what_python_cannot_hold() -> None:
    """The fetch helper itself, on the limits (no Spark needed): years 1 and 9999 kept, one day beyond NULL."""
    pa = pytest.importorskip("pyarrow")
    from veil.engines.spark import _python_values

    days = pa.array([-719163, -719162, 0, 2932896, 2932897, None], pa.int32()).cast(pa.date32())
    assert _python_values(pa.chunked_array([days])) == [
        None, dt.date(1, 1, 1), dt.date(1970, 1, 1), dt.date(9999, 12, 31), None, None,
    ]  # fmt: skip
    last = 253402300799 * 10**6  # 9999-12-31 23:59:59 UTC, in microseconds
    for tz in (None, "UTC"):
        ts = pa.array([last + 10**6, last, -62135596800 * 10**6, -62135596800 * 10**6 - 1], pa.timestamp("us", tz=tz))
        got = _python_values(ts)
        assert got[0] is None and got[3] is None and got[1].year == 9999 and got[2].year == 1, (tz, got)
