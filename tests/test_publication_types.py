"""A published column's type is a function of its declared type alone (red team s20 A4, s16 A1).

A source column's pandas dtype says things about its rows (one missing integer makes it a float, an all-missing
column an object): every generated column is cast by :func:`veil.store.declared_types.as_declared`, whose
output dtype must not depend on the values. And every curator table write moves the ledger's catalog
generation, so open sessions measure public tables again (red team s19 A3).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from veil.generators.gate import _is_label_of, _same_value
from veil.store.declared_types import as_declared
from veil.store.ledger import Ledger

VALUES = st.one_of(
    st.none(),
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=True, allow_infinity=False, width=64),
    st.text(max_size=5),
    st.booleans(),
    st.just(pd.NA),
    st.just(np.nan),
)
TYPES = ["int", "float", "bool", "category", "date"]


@pytest.mark.parametrize("veil_type", TYPES)
@given(values=st.lists(VALUES, max_size=12))
def test_a_declared_columns_dtype_does_not_depend_on_its_values(veil_type: str, values: list[object]) -> None:
    reference = as_declared(pd.Series([], dtype=object), veil_type).dtype
    for dtype in (object, None):
        try:
            series = pd.Series(values, dtype=dtype)
        except (TypeError, ValueError):
            continue
        assert as_declared(series, veil_type).dtype == reference, (values, dtype)


def test_a_missing_integer_does_not_change_a_categorys_text() -> None:
    whole, holed = pd.Series([1, 2, 3]), pd.Series([1, None, 3])  # int64 and float64
    assert as_declared(whole, "category").tolist()[::2] == as_declared(holed, "category").tolist()[::2] == ["1", "3"]


@pytest.mark.parametrize(
    ("label", "ok"),
    [("5", True), ("5.0", True), ("7", False), ("[1-3)", True), ("(-inf, 3]", True), ("[4, inf)", True), ("(-inf, inf)", True),
     ("{1,2}", True), ("*", True), ("x", False), (7, False)],
)  # fmt: skip
def test_a_generalised_columns_labels_of_declared_values_are_accepted(label: object, ok: bool) -> None:
    allowed = {_same_value(v) for v in [1, 2, 3, 4, 5, 6]}
    assert _is_label_of(label, allowed) is ok


def test_every_table_write_moves_the_catalog_generation(tmp_path: Path) -> None:
    from veil.policy import load_policy
    from veil.store.warehouse import write_table

    (tmp_path / "policy.toml").write_text(
        '[database]\npath = "w.duckdb"\n[ledger]\npath = "l.sqlite"\n[tables.regions]\npublic = true\n'
        '[tables.regions.columns]\nstate = { type = "category" }\n',
        encoding="utf-8",
    )
    policy = load_policy(tmp_path / "policy.toml")
    with Ledger.for_policy(policy) as ledger:
        seen = [ledger.catalog_generation()]
        for n in (1, 2):
            write_table(policy, "regions", pd.DataFrame({"state": ["CA"] * n}), replace=True, public=True)
            seen.append(ledger.catalog_generation())  # another handle wrote it: as another process would
    assert seen[0] < seen[1] < seen[2], seen
