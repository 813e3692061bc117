"""A publication's read of its source never fails on one person's value, and reads only the columns it uses (red team
s60 F3: a DP publication read every column, and DuckDB's DataFrame conversion raised on one person's huge INTERVAL in
an undeclared column — refused free, untyped, in one world, published in its neighbour).

Families: every type a DataFrame cannot hold as it is (INTERVAL, TIME WITH TIME ZONE, nested values holding one, a
nested date beyond Python's years), in an undeclared column and in a declared one the publication does not use; both
DP methods; and the read itself (``warehouse.read_table(python_dates=True)``) on all of them at once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.publish_support import POLICY, people

#: (SQL for person 7's odd value, SQL for everyone else's): a value no DataFrame holds as it is, and a plain one.
ODD_VALUES = {
    "interval_months": ("INTERVAL '178000000 years'", "INTERVAL '1 month'"),
    "interval_days": ("INTERVAL '200000000 days'", "INTERVAL '1 day'"),
    "timetz": ("TIMETZ '12:00:00+05'", "TIMETZ '12:00:00+00'"),
    "struct_of_interval": ("{'t': INTERVAL '178000000 years'}", "{'t': INTERVAL '1 month'}"),
    "list_of_dates": ("[DATE 'infinity']", "[DATE '2000-01-01']"),
}

DP_REQUESTS = [
    ("krr", {"columns": ["sex"], "epsilon": 1.0}),
    ("sdc", {"method": "dp_microagg_laplace", "columns": ["age"], "params": ["epsilon=1"]}),
]


def _policy_with(base: Path, odd: str, plain: str, *, person_7_odd: bool) -> Any:
    from veil.policy import load_policy
    from veil.store.warehouse import writer

    base.mkdir(parents=True, exist_ok=True)
    path = base / "policy.toml"
    path.write_text(POLICY.format(table_budget=""), encoding="utf-8")
    policy = load_policy(path)
    value = odd if person_7_odd else plain
    with writer(policy) as con:
        con.register("incoming", people(60))
        con.execute(
            f"CREATE TABLE people AS SELECT *, CASE WHEN name = 'person00007' THEN {value} ELSE {plain} END AS extra "
            "FROM incoming"
        )
    return policy


def _outcome(policy: Any, kind: str, request: dict[str, Any]) -> str:
    from veil.generators.transaction import publish

    try:
        publish(policy, kind, {"table": "people", "output": "pub", **request}, progress=False)
    except Exception as exc:  # the outcome, whatever it is
        return type(exc).__name__
    return "published"


@pytest.mark.parametrize(("kind", "request_"), DP_REQUESTS, ids=["krr", "dp_grid"])
@pytest.mark.parametrize("odd_type", sorted(ODD_VALUES))
def test_a_dp_publication_ends_the_same_way_whatever_one_persons_value_of_another_column(
    tmp_path: Path, kind: str, request_: dict[str, Any], odd_type: str
) -> None:
    odd, plain = ODD_VALUES[odd_type]
    with_odd = _outcome(_policy_with(tmp_path / "d", odd, plain, person_7_odd=True), kind, request_)
    without = _outcome(_policy_with(tmp_path / "d_prime", odd, plain, person_7_odd=False), kind, request_)
    assert with_odd == without == "published", (with_odd, without)


@pytest.mark.parametrize(("kind", "request_"), [*DP_REQUESTS, ("kanon", {"qi": ["age"], "k": 5, "sensitive": ["sex"]})])
def test_a_publication_reads_only_the_columns_it_uses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, request_: dict[str, Any]
) -> None:
    from veil.store import warehouse

    policy = _policy_with(tmp_path, "INTERVAL '1 day'", "INTERVAL '1 day'", person_7_odd=False)
    read: list[Any] = []
    real = warehouse.read_table

    def spy(policy: Any, table: str, columns: Any = None, **kwargs: Any) -> Any:
        read.append((table, None if columns is None else tuple(columns)))
        return real(policy, table, columns, **kwargs)

    monkeypatch.setattr(warehouse, "read_table", spy)
    assert _outcome(policy, kind, request_) == "published"
    source_reads = [cols for table, cols in read if table == "people"]
    assert source_reads and all(cols is not None and "extra" not in cols and "name" not in cols for cols in source_reads)


def test_the_publication_read_holds_every_value_of_every_type(tmp_path: Path) -> None:
    """All the odd values at once, each in its own column: the read returns every row (odd values as text or NULL,
    never an exception), and the plain columns as they are."""
    from veil.policy import load_policy
    from veil.store.warehouse import read_table, writer

    path = tmp_path / "policy.toml"
    path.write_text(POLICY.format(table_budget=""), encoding="utf-8")
    policy = load_policy(path)
    items = ", ".join(f"{odd} AS {name}" for name, (odd, _) in ODD_VALUES.items())
    with writer(policy) as con:
        con.execute(f"CREATE TABLE people AS SELECT 7 AS age, 'F' AS sex, {items}, DATE 'infinity' AS born")
    frame = read_table(policy, "people", python_dates=True)
    assert len(frame) == 1 and int(frame["age"].iloc[0]) == 7 and frame["sex"].iloc[0] == "F"
    assert frame["born"].isna().all()
    assert "178000000 years" in str(frame["interval_months"].iloc[0])
