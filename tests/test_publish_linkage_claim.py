"""Two publications that would each publish a column value by value cannot both pass the linkage check by running at
the same time (s51 A5's rule, ``transaction.check_linkage``, checked under the policy's linkage claim: exclusive for a
publication with a ``--sensitive`` column, shared for one with quasi-identifiers only). Since red team s60 F1 the rule
is policy-wide and compares published values (another source, a renamed column), so the claim is one for the whole
policy, not one per source and column name.

Before the claim, the check read the release log and the publication was recorded minutes later: two processes
publishing ``--sensitive gain`` from one source to two outputs both found no other live publication, and both
landed, which is what the rule exists to prevent.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from veil.errors import InputError, PublicationRefused, VeilError


@pytest.fixture(autouse=True)
def _the_linkage_rule_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests pin the older linkage rule (``check_linkage``, ``check_linkage_values``, the linkage claim) on its
    own, as a second line: the release-history rule (one release without a DP guarantee per population, ever; red team
    s64), which refuses every second k-anonymous release of a population before this rule runs, is switched off here.
    tests/test_publish_release_history.py pins that rule."""
    from veil.generators import transaction

    monkeypatch.setattr(transaction, "check_release_history", lambda policy, plan: None)


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
            # ten gains, each 6 people's: a gain one person alone holds is refused by the gate (red team s60 F2)
            {"age": rng.integers(20, 60, n), "sex": rng.choice(["F", "M"], n), "gain": (rng.permutation(n) % 10) * 100}
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

    with linkage_claim(policy, "people", {"gain"}, {"age"}):  # what `--qi age --sensitive gain` holds
        # the claim is policy-wide (s60 F1): this source, another source, quasi-identifiers only — all wait
        for request in (_request("p2"), _request("s1", table="staff"), _request("p3", sensitive=False)):
            with pytest.raises(InputError, match=r"another publication is running right now .* value by value"):
                publish(policy, "kanon", request, progress=False)
        assert not {"p2", "s1", "p3"} & set(table_names(policy))
    with linkage_claim(policy, "people", (), {"age"}):  # what `--qi age` holds: shared
        publish(policy, "kanon", _request("p3", sensitive=False), progress=False)  # two of quasi-identifiers only
        publish(policy, "kanon", _request("s3", table="staff", sensitive=False), progress=False)
        with pytest.raises(InputError, match=r"another publication is running right now"):
            publish(policy, "kanon", _request("p2", qi="sex"), progress=False)
    publish(policy, "kanon", _request("p2", qi="sex"), progress=False)  # the claim ended with its block


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


# -- through the curator's CLI: `veil publish kanon`, the claim held by another process ------------------------------

_HOLDER = """\
import sys
from veil.generators.transaction import linkage_claim
from veil.policy import load_policy

with linkage_claim(load_policy(sys.argv[1]), sys.argv[2], sys.argv[3].split(","), []):
    print("HELD", flush=True)
    sys.stdin.readline()
"""


@contextlib.contextmanager
def _held_by_another_process(policy_path: Path, source: str, values: str) -> Iterator[None]:
    """Another process holds the claim a running ``veil publish kanon --sensitive VALUES`` of ``source`` holds."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(policy_path), source, values],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "HELD"
        yield
    finally:
        holder.communicate("done\n", timeout=60)
    assert holder.returncode == 0


def _publish_cli(policy_path: Path, *args: str) -> Any:
    from veil.cli.main import cli

    base = ["publish", "kanon", "--policy", str(policy_path), "--algorithm", "mondrian", "--k", "5"]
    return CliRunner().invoke(cli, [*base, *args])


def _recorded(policy: Any) -> set[str | None]:
    from veil.store.releases import list_releases

    return {r.table for r in list_releases(policy, kind="publication")}


#: `veil publish kanon` options that publish a column of ``people`` value by value (``--sensitive``)
VALUE_BY_VALUE = (
    ("--table", "people", "--qi", "age", "--sensitive", "gain"),
    ("--table", "people", "--qi", "sex", "--sensitive", "gain"),
    ("--table", "people", "--qi", "age,sex", "--sensitive", "gain"),
    ("--table", "people", "--qi", "age", "--sensitive", "sex"),
    ("--table", "people", "--qi", "gain", "--sensitive", "sex"),
)


@pytest.mark.parametrize("args", VALUE_BY_VALUE, ids=[f"qi={a[3]}-sensitive={a[5]}" for a in VALUE_BY_VALUE])
def test_veil_publish_kanon_is_refused_free_while_another_process_holds_the_source(policy, args: tuple[str, ...]) -> None:  # type: ignore[no-untyped-def]
    from veil.store.warehouse import table_names

    path = Path(policy.path)
    with _held_by_another_process(path, "people", args[5]):
        res = _publish_cli(path, *args, "--output", "p2")
        assert res.exit_code == 2, res.output
        assert "[22023]" in res.stderr and "another publication is running right now" in res.stderr, res.stderr
        assert "of table 'people' or another table" in res.stderr, res.stderr
        assert "p2" not in table_names(policy) and "p2" not in _recorded(policy)
        # the claim is policy-wide (s60 F1): another source waits too
        staff = ["staff" if a == "people" else a for a in args]
        res = _publish_cli(path, *staff, "--output", "s1")
        assert res.exit_code == 2 and "is running right now" in res.stderr, res.output
        assert "s1" not in table_names(policy) and "s1" not in _recorded(policy)
    res = _publish_cli(path, *args, "--output", "p2")  # the claim ended with the other process's block
    assert res.exit_code == 0, res.output
    assert "p2" in table_names(policy) and "p2" in _recorded(policy)
