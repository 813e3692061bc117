"""Two publications of one source that would each publish a column value by value cannot both pass the linkage check
by running at the same time (s51 A5's rule, ``transaction.check_linkage``, checked under a per-source claim).

Before the claim, the check read the release log and the publication was recorded minutes later: two processes
publishing ``--sensitive gain`` from one source to two outputs both found no other live publication, and both
landed, which is what the rule exists to prevent.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from veil.errors import InputError, PublicationRefused, VeilError

_POLICY = """\
[database]
path = "warehouse.duckdb"
[ledger]
path = "ledger.sqlite"

[tables.people]
privacy_unit = "row"
[tables.people.columns]
age = { type = "int", lower = 17, upper = 90 }
sex = { type = "category", values = ["F", "M"] }
gain = { type = "int", lower = 0, upper = 5000 }

[tables.staff]
privacy_unit = "row"
[tables.staff.columns]
age = { type = "int", lower = 17, upper = 90 }
sex = { type = "category", values = ["F", "M"] }
gain = { type = "int", lower = 0, upper = 5000 }
"""


@pytest.fixture
def policy(tmp_path: Path):  # type: ignore[no-untyped-def]
    from veil.policy import load_policy
    from veil.store.warehouse import write_table

    (tmp_path / "policy.toml").write_text(_POLICY, encoding="utf-8")
    pol = load_policy(tmp_path / "policy.toml")
    rng = np.random.default_rng(17)
    for table in ("people", "staff"):
        n = 60
        frame = pd.DataFrame(
            {"age": rng.integers(20, 60, n), "sex": rng.choice(["F", "M"], n), "gain": rng.choice(5000, n, replace=False)}
        )
        write_table(pol, table, frame)
    return pol


def _request(output: str, *, qi: str = "age", table: str = "people", sensitive: bool = True) -> dict[str, object]:
    req: dict[str, object] = {"table": table, "algorithm": "mondrian", "k": 5, "qi": [qi], "output": output}
    if sensitive:
        req["sensitive"] = ["gain"]
    return req


def test_a_publication_with_value_columns_waits_for_no_one_it_is_refused_while_another_holds_the_source(policy) -> None:  # type: ignore[no-untyped-def]
    from veil.generators.transaction import linkage_claim, publish
    from veil.store.warehouse import table_names

    with linkage_claim(policy, "people"):
        with pytest.raises(InputError, match=r"another publication of table 'people' .* value by value"):
            publish(policy, "kanon", _request("p2"), progress=False)
        assert "p2" not in table_names(policy)
        # what the claim does not cover goes on: another source, and a publication without value-by-value columns
        publish(policy, "kanon", _request("s1", table="staff"), progress=False)
        publish(policy, "kanon", _request("p3", sensitive=False), progress=False)
    publish(policy, "kanon", _request("p2"), progress=False)  # the claim ended with its block


def test_two_publications_at_once_never_both_land(policy) -> None:  # type: ignore[no-untyped-def]
    """Whatever the timing, at most one of two concurrent ``--sensitive gain`` publications of one source lands; the
    other is refused typed (by the claim when they overlap, by the release log when they do not)."""
    from veil.generators.transaction import publish
    from veil.store.warehouse import table_names

    outcomes: dict[str, object] = {}
    start = threading.Barrier(2)

    def run(output: str, qi: str) -> None:
        start.wait()
        try:
            publish(policy, "kanon", _request(output, qi=qi), progress=False)
            outcomes[output] = "landed"
        except VeilError as exc:
            outcomes[output] = exc

    threads = [threading.Thread(target=run, args=(o, q)) for o, q in (("a1", "age"), ("a2", "sex"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    landed = [o for o, r in outcomes.items() if r == "landed"]
    assert len(outcomes) == 2 and len(landed) == 1, outcomes
    refused = next(r for r in outcomes.values() if r != "landed")
    assert isinstance(refused, (InputError, PublicationRefused)), refused
    assert set(table_names(policy)) & {"a1", "a2"} == set(landed)
