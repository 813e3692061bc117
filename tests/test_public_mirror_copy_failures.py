"""A public table whose copy into the public mirror fails is left unserved, never a failure of every query.

Red team s51 A3: another tool's table ``ref`` (declared public) held a DATE ``'infinity'`` in a column the policy
leaves out; the copy read every column, pandas could not hold the value, and every analyst query then failed with
DuckDB's conversion error. The copy now reads only the declared columns, and any failure of it leaves the table
unserved: a query naming it is refused with a reason that quotes no value, every other query answers.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from tests.support.warehouse import policy_with_tables
from veil.errors import VeilError
from veil.proxy._testing import exact_session
from veil.store.warehouse import writer

POLICY = """\
[database]
path = "w.duckdb"
[ledger]
path = "l.sqlite"
[tables.people]
privacy_unit = "row"
[tables.people.columns]
age = {{ type = "int", lower = 0, upper = 100 }}
[tables.ref]
public = true
[tables.ref.columns]
{ref_columns}
[analysts.a]
epsilon = 1000
"""


@pytest.mark.parametrize(
    ("ref_columns", "infinity_in"),
    [
        ('k = { type = "int" }', "an undeclared column"),
        ('k = { type = "int" }\nvalid_to = { type = "date" }', "a declared column"),
    ],
)
def test_a_public_table_that_cannot_be_copied_is_unserved_and_other_queries_answer(
    tmp_path: Path, ref_columns: str, infinity_in: str
) -> None:
    policy = policy_with_tables(
        tmp_path, POLICY.format(ref_columns=ref_columns), private={"people": pd.DataFrame({"age": range(30)})}
    )
    with writer(policy) as con:  # another tool's table, as a Postgres export of open-ended validity writes it
        con.execute(
            "CREATE TABLE ref AS SELECT range AS k, CASE WHEN range = 3 THEN DATE 'infinity' ELSE DATE '2030-01-01' "
            "END AS valid_to FROM range(10)"
        )
    with exact_session(policy, "a") as s:
        assert s.execute("SELECT COUNT(*) FROM people").rows == ((30,),), infinity_in
        spent = s.budget().spent
        try:
            rows = s.execute("SELECT COUNT(*) FROM ref").rows
        except VeilError as exc:
            assert "infinity" not in str(exc).lower(), exc
            assert s.budget().spent == spent  # refused free
        else:
            assert rows == ((10,),)
