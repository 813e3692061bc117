"""A library's own exception in a pass before the reservation is a typed, free refusal (red team s49: sqlglot's
``OptimizeError`` on a repeated alias and an ``OverflowError`` on a huge GROUP BY position escaped untyped: a
foreign exception through the Python API, XX000 with a stack trace in the server's log through the wire). After the
reservation nothing changes: the failure is an outcome the charge pays for."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.support.warehouse import policy_with_tables
from veil.errors import InternalError, QueryFailed
from veil.proxy import pipeline
from veil.proxy._testing import exact_session

POLICY = """\
[database]
path = "w.duckdb"
[ledger]
path = "l.sqlite"
[tables.t]
privacy_unit = "row"
[tables.t.columns]
x = { type = "int", lower = 0, upper = 9 }
[analysts.a]
epsilon = 100
"""


@pytest.fixture
def session(tmp_path: Path) -> Iterator[Any]:
    policy = policy_with_tables(tmp_path, POLICY, private={"t": pd.DataFrame({"x": range(10)})})
    with exact_session(policy, "a") as s:
        yield s


def _failing(name: str, error: Exception) -> tuple[tuple[str, pipeline.Pass], ...]:
    def fail(state: Any, env: Any) -> Any:
        raise error

    return tuple((n, fail if n == name else fn) for n, fn in pipeline.PASSES)


@pytest.mark.parametrize("name", ["parse", "resolve", "validate", "plan", "rewrite", "prepare"])
@pytest.mark.parametrize(
    "error", [ValueError("a value 123"), OverflowError("big"), KeyError("a key 789"), TypeError("a type 456")]
)
def test_a_library_error_before_the_reservation_is_typed_and_free(
    session: Any, monkeypatch: pytest.MonkeyPatch, name: str, error: Exception
) -> None:
    monkeypatch.setattr(pipeline, "PASSES", _failing(name, error))
    with pytest.raises(InternalError, match=f"its {name} pass failed \\({type(error).__name__}\\); nothing was charged") as info:
        session.execute("SELECT COUNT(*) FROM t WHERE x > 4", epsilon=1)
    assert str(error) not in str(info.value)  # the library's text is not repeated
    assert session.budget().spent == 0


def test_a_library_error_after_the_reservation_stays_charged(session: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pipeline, "PASSES", _failing("noise", ValueError("v")))
    # typed (red team s67 F4: a raw error once charged), the charge kept: the run may have read the data
    with pytest.raises(QueryFailed, match="its noise pass failed; its ε stays charged") as info:
        session.execute("SELECT COUNT(*) FROM t WHERE x > 4", epsilon=1)
    assert info.value.hint
    assert session.budget().spent == 1
