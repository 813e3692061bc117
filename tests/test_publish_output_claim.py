"""A publication's output is claimed from its check to its commit (red team s27 A7): a second publication to the
same output is refused before its charge, and an output created meanwhile by something else (``veil ingest``) is
never replaced without ``--replace`` — that publication is refused and refunded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.adversarial.test_redteam_s16 import _publish, _warehouse
from tests.publish_support import people

REQUESTS: dict[str, tuple[str, dict[str, Any]]] = {
    "krr": ("krr", {"table": "people", "columns": ["sex"], "epsilon": 1.0}),
    "kanon": ("kanon", {"table": "people", "qi": ["age", "sex"], "sensitive": ["income"], "k": 5,
                        "algorithm": "mondrian"}),
    "sdc_dp": ("sdc", {"table": "people", "method": "dp_microagg_laplace", "columns": ["age"],
                       "params": ["epsilon=1.0"]}),
}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(REQUESTS))
@pytest.mark.parametrize("replace", [False, True])
def test_a_second_publication_to_a_claimed_output_is_refused_before_its_charge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str, replace: bool
) -> None:
    from veil.errors import InputError
    from veil.store import warehouse
    from veil.store.ledger import Ledger

    policy = _warehouse(tmp_path / "d", people(60))
    kind, request = REQUESTS[case]
    stage = warehouse.stage_publication
    inner: list[str] = []
    spent_before: list[Any] = []

    def stage_then_second(pol: Any, *args: Any, **kwargs: Any) -> None:
        stage(pol, *args, **kwargs)
        monkeypatch.setattr(warehouse, "stage_publication", stage)
        with Ledger.for_policy(policy) as led:
            spent_before.append(led.spent("table:people").epsilon)
        with pytest.raises(InputError, match="being published or written by another process") as caught:
            _publish(policy, kind, {**request, "output": "out", "replace": replace})
        inner.append(str(caught.value))
        with Ledger.for_policy(policy) as led:
            assert led.spent("table:people").epsilon == spent_before[0]  # the refusal cost nothing

    monkeypatch.setattr(warehouse, "stage_publication", stage_then_second)
    first = _publish(policy, kind, {**request, "output": "out"})
    assert inner and first.release_id


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(REQUESTS))
def test_an_output_created_meanwhile_is_never_replaced_and_the_charge_is_refunded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    from veil.store import warehouse
    from veil.store.ledger import Ledger
    from veil.store.releases import list_releases

    policy = _warehouse(tmp_path / "d", people(60))
    kind, request = REQUESTS[case]
    stage = warehouse.stage_publication

    def ingest_then_stage(pol: Any, *args: Any, **kwargs: Any) -> None:
        warehouse.write_table(pol, "out", people(3)[["age"]])  # another writer took the name since the check
        stage(pol, *args, **kwargs)

    monkeypatch.setattr(warehouse, "stage_publication", ingest_then_stage)
    with pytest.raises(warehouse.OutputExists, match="was created while this publication ran"):
        _publish(policy, kind, {**request, "output": "out"})
    assert warehouse.read_table(policy, "out").shape == (3, 1)
    assert warehouse.pending_publications(policy) == []
    assert [r for r in list_releases(policy, kind="publication") if r.table == "out"] == []
    with Ledger.for_policy(policy) as led:
        assert led.spent("table:people").epsilon == 0
        assert {r["status"] for r in led.reservations()} <= {"cancelled"}
