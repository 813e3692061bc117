"""Every scalar type is priced as text at least as long as its longest text in DuckDB (red team s74 F3).

``expansion._scalar_text_bytes`` priced every date/time type at 32 bytes; a TIMESTAMP before year 1 with microseconds
is 33 (``290308-12-22 (BC) 00:00:00.123456``), a TIMESTAMP WITH TIME ZONE up to 39, an INTERVAL 68. The class: each
type the engine can hold, cast to text at its extremes (in UTC and in zones whose offsets have minutes); the price must
cover the longest. Deterministic.
"""

from __future__ import annotations

import duckdb
import pytest
from sqlglot import exp

from veil.proxy.expansion import _scalar_text_bytes

#: type → values at its extremes (DuckDB literals)
_EXTREMES = {
    "TIMESTAMP": ["'290308-12-22 (BC) 00:00:00.123456'", "'294247-01-10 04:00:54.775806'"],
    "TIMESTAMP_NS": ["'1677-09-22 00:00:00.123456789'", "'2262-04-11 23:47:16.854775'"],
    "TIMESTAMPTZ": ["'290308-12-22 (BC) 00:00:00.123456+00'", "'294246-01-10 04:00:54.775806+00'"],
    "DATE": ["'5877642-06-25 (BC)'", "'5881580-07-10'"],
    "TIME": ["'23:59:59.999999'"],
    "TIMETZ": ["'23:59:59.999999-15:59:59'", "'00:00:00.000001+15:59:59'"],
    "INTERVAL": [
        "to_months(-2147483647) + to_days(-2147483647) + to_microseconds(-9223372036854775807)",
        "to_months(2147483647) + to_days(2147483647) + to_microseconds(9223372036854775807)",
    ],
    "UUID": ["'ffffffff-ffff-ffff-ffff-ffffffffffff'"],
    "DOUBLE": ["-1.7976931348623157e308", "-2.2250738585072014e-308", "-1.2345678901234567e-100"],
    "FLOAT": ["-1.17549435e-38", "-3.4028235e38"],
    "BIGINT": ["-9223372036854775808"],
    "UBIGINT": ["18446744073709551615"],
    "HUGEINT": ["-170141183460469231731687303715884105728"],
    "DECIMAL(38, 37)": ["-9.9999999999999999999999999999999999999"],
    "BOOLEAN": ["false"],
}


@pytest.mark.parametrize("type_", sorted(_EXTREMES))
def test_a_scalar_type_is_priced_at_its_longest_text(type_: str) -> None:
    con = duckdb.connect()
    longest = 0
    for zone in ("UTC", "Asia/Kolkata", "America/St_Johns", "Pacific/Kiritimati"):
        con.execute(f"SET TimeZone = '{zone}'")
        for value in _EXTREMES[type_]:
            text = con.execute(f"SELECT CAST(CAST({value} AS {type_}) AS VARCHAR)").fetchone()[0]
            longest = max(longest, len(text.encode()))
    to = exp.DataType.build(type_, dialect="duckdb")
    assert _scalar_text_bytes(to) >= longest, (type_, longest)
