"""Red team, session 37: the fixes of sessions 34–36 (main at a3fd685, 2026-11-27) attacked as classes — the typed
source read of publications (``declared_types.as_source``), k-anonymity's ``RangeCost``, the policy watch's stamp,
the answer cache's public-table versions, and the refusal of column alias lists on table references.

Neighbouring worlds differ in one person (person 7) of the small generated warehouse of :mod:`tests.publish_support`,
ingested from CSV as ``veil ingest`` does (``warehouse.ingest_file``). Findings (details in each test's docstring):

* A1 (HIGH) ``veil ingest`` typed a CSV column from every value in it, and a *category* declared with digits
  (``values = ["1", "2"]``) spelled ``01``/``1.0`` in the file was stored as the numbers 1, 2 — unless one person's
  value was not a number, when the whole column was stored as the texts ``'01'``/``'1.0'``. Both readers of a
  category read text: the query path's ``COUNT(*) WHERE grade = '1'`` went from 75 to 0 (sensitivity 1) when person
  7's ``'02'`` became ``'x'``; a kRR publication (``as_source`` maps a stored 1.0 to ``'1'``) published ~10 of 150
  NULL in D and ~125 in D′ (a ``'1.0'`` spelling, person 7 missing vs ``'x'``). s35 A1's fix read the warehouse's
  dtype after the fact, where the information was already gone. Fixed: ``ingest_file`` reads a declared category
  column of a CSV as text, as written, whatever the other rows hold.
* A2 (MEDIUM, careless curator / ordinary deployment) a policy file replaced by pointing its link at a new file
  (``ln -sfn``; a Kubernetes ConfigMap mount, which also deletes the old folder) was never applied to open sessions
  or ``veil serve``: ``load_policy`` resolved the link and the watches (``session._PolicyWatch``,
  ``server.live_policy.LivePolicy``, and ``veil serve``'s worker processes, started with the resolved path) stat'ed
  the old target. A removed analyst kept querying with the old budget until a restart. Fixed: a policy keeps the
  path it was named by (``Policy.source``/``watch_path``); watches stat and re-read that one.
* A3 (MEDIUM: HIGH impact, needs a curator write racing a publication on a Spark policy): s35 A2's re-check under
  the writer covers the DuckDB branch of ``warehouse.write_table`` only. The Spark branch checked "published?" once,
  before a Spark job of seconds, took no lock and never read the journal (``spark_publish.pending``): a publication
  recorded and committed while the job ran was then overwritten by the raw rows, which analysts read directly on
  Spark. Fixed (lead): the raw Spark write holds the output's claim (``warehouse.output_claim``, which a
  publication holds from its plan to its finish) and checks "published?" again inside it.
* Held (by hand): column alias lists on table references in every scope tried — no ``AS``, quoted, ``ONLY``,
  ``USING``, self-joins, inside derived tables in CTEs, scalar subqueries in the select list and ``HAVING``, ``IN``
  subqueries — refused (0A000); ``LATERAL``, ``VALUES``, ``range()``, ``UNNEST``, ``EXISTS``, ``NATURAL JOIN``,
  ``TABLESAMPLE``, ``UNION`` refused before it; partial lists on derived tables/CTEs (``(SELECT x, u FROM t) z(u)``)
  refused as a repeated name, full swapping lists answered within sensitivity. A category declared with numbers is
  refused by the policy parser. The answer cache's public versions read the catalog only (no data). The policy
  stamp's same-size same-tick limit is documented (docs/server.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.adversarial.test_redteam_s16 import _publish, _published, _warehouse
from tests.adversarial.test_redteam_s35 import _TYPED_POLICY
from tests.publish_support import people

# ==================================================================================================
# A1. A category of digits is typed at ingest by every person's value
# ==================================================================================================


def _spelled_world(base: Path, spelling: str, odd: Any) -> Any:
    """150 people whose ``grade`` (a category declared ``["1", "2"]``) is written ``spelling`` (``'0{}'`` → 01, 02)
    in the CSV; person 7's is ``odd``."""
    frame = people(150, seed=1)
    frame["code"] = 1 + (np.arange(150) % 2)
    frame["flag"] = np.arange(150) % 3 == 0
    frame["grade"] = [spelling.format(1 + i % 2) for i in range(150)]
    frame["grade"] = frame["grade"].astype(object)
    frame.loc[7, "grade"] = odd
    return _warehouse(base, frame, policy_text=_TYPED_POLICY)


@pytest.mark.parametrize("spelling", ["0{}", "{}.0"])
def test_A1_one_persons_text_never_respells_everyones_category_on_the_query_path(tmp_path: Path, spelling: str) -> None:
    """HIGH — interface: Python API (the SQL path every interface shares). D: person 7's ``grade`` is the file's
    spelling of 2; D′: ``'x'``. ``SELECT COUNT(*) … WHERE grade = '1'`` counts person 0, 2, 4, … in both (person 7
    is not among them): with noise off it must move by at most 1. Before the fix: 75 in D, 0 in D′ (``'01'``)."""
    from veil.proxy._testing import exact_session

    counts = {}
    for world, odd in (("d", spelling.format(2)), ("d2", "x")):
        session = exact_session(_spelled_world(tmp_path / world, spelling, odd), "bob")
        counts[world] = session.execute("SELECT COUNT(*) FROM people WHERE grade = '1'", epsilon=0.5).rows[0][0]
    assert abs(counts["d"] - counts["d2"]) <= 1, counts


def test_A1_one_persons_text_never_respells_everyones_category_in_a_publication(tmp_path: Path) -> None:
    """HIGH — interface: ``veil publish krr`` (Python publish API). D: person 7's ``grade`` missing; D′: ``'x'``
    (missing to the policy too), the others ``1.0``/``2.0``. kRR at ε = 2.5 over {1, 2, NA} must publish from the
    same distribution: before the fix ~10 of 150 NULL in D (a stored 1.0 read as ``'1'``) and ~125 in D′ (the text
    ``'1.0'``, outside the domain). Either both read in the domain or both outside; never 10 against 125."""
    nulls = {}
    for world, odd in (("d", None), ("d2", "x")):
        policy = _spelled_world(tmp_path / world, "{}.0", odd)
        _publish(policy, "krr", {"table": "people", "columns": ["grade"], "epsilon": 2.5, "output": "pub_grade"})
        nulls[world] = _published(policy, "SELECT count(*) FILTER (WHERE grade IS NULL) FROM pub_grade")[0][0]
    # a kept value turns NULL with probability 0.07 (~10), a value outside the domain stays NULL with 0.86 (~129):
    # the two worlds must sit on the same side of 60
    assert (nulls["d"] < 60) == (nulls["d2"] < 60), nulls


# ==================================================================================================
# A2. A policy replaced by pointing its link at a new file is never applied
# ==================================================================================================


@pytest.mark.parametrize("old_target", ["kept", "deleted"])
def test_A2_a_policy_swapped_through_its_link_is_applied_to_live_sessions(tmp_path: Path, old_target: str) -> None:
    """MEDIUM (careless curator; a revoked analyst keeps querying) — interfaces: Python API session and ``veil
    serve``'s ``LivePolicy``. ``policy.toml`` is a link to ``v1/policy.toml``; the curator removes analyst ``a`` by
    writing ``v2/policy.toml`` and pointing the link at it atomically (``ln -sfn``; a Kubernetes ConfigMap mount does
    exactly this, and deletes the old folder). ``load_policy`` resolved the link and the watches stat'ed the
    resolved file, which never changes (or vanishes: then the old policy was kept for good): ``a`` kept querying
    with v1's budget until a restart. The next query after the swap must read v2."""
    import os

    from tests.adversarial.test_redteam_s4 import POLICY as P4
    from tests.adversarial.test_redteam_s4 import _base_rows, _frame
    from veil.errors import VeilError
    from veil.policy import load_policy
    from veil.proxy._testing import exact_session
    from veil.server.live_policy import LivePolicy
    from veil.store.warehouse import write_table

    revoked = P4.replace("[analysts.a]\nepsilon = 1000000\ndelta = 0.5\n", "")
    assert revoked != P4
    for version, text in (("v1", P4), ("v2", revoked)):
        (tmp_path / version).mkdir()
        # the stores outside the versioned folders, as a deployment keeps them
        (tmp_path / version / "policy.toml").write_text(
            text.replace('"w.duckdb"', '"../w.duckdb"').replace('"l.sqlite"', '"../l.sqlite"')
        )
    link = tmp_path / "policy.toml"
    os.symlink("v1/policy.toml", link)
    policy = load_policy(link)
    write_table(policy, "t", _frame(_base_rows()), replace=True)
    session, live = exact_session(policy, "a"), LivePolicy(policy)
    session.execute("SELECT COUNT(*) FROM t", epsilon=1)
    os.symlink("v2/policy.toml", tmp_path / "next")
    os.replace(tmp_path / "next", link)
    if old_target == "deleted":
        (tmp_path / "v1" / "policy.toml").unlink()
    assert "a" not in live.current().analysts
    with pytest.raises(VeilError):
        session.execute("SELECT COUNT(*) FROM t WHERE x > 0", epsilon=1)
    session.close()


# ==================================================================================================
# A3. A raw write to a Spark table waits for no publication: it holds the output's claim instead
# ==================================================================================================


def test_A3_a_raw_write_racing_a_publication_on_a_spark_policy_is_refused_before_any_engine_work(tmp_path: Path) -> None:
    """A publication to ``p_out`` holds its output claim from plan to finish; a curator's raw write of ``p_out`` on
    a Spark policy is refused typed while it does, before Spark is touched (no JVM starts: the suite's conftest fails
    a test outside the Spark group that starts one). Once free, the claim is taken by the raw write itself."""
    import fcntl
    import hashlib
    import os

    from tests.adversarial.test_redteam_s16 import POLICY, SPARK_ENGINE
    from veil.errors import InputError
    from veil.policy import load_policy
    from veil.store import warehouse

    path = tmp_path / "policy.toml"
    path.write_text(POLICY.format(table_budget="") + SPARK_ENGINE, encoding="utf-8")
    policy = load_policy(path)
    frame = people(10)
    with warehouse.output_claim(policy, "p_out"):  # a publication to p_out, in flight
        with pytest.raises(InputError, match="is being published or written right now") as refused:
            warehouse.write_table(policy, "p_out", frame, replace=True)
        assert "p_out" in str(refused.value)
    calls: list[str] = []

    class Store:
        def write_table(self, pol: Any, table: str, df: Any, *, replace: bool) -> None:
            digest = hashlib.sha256(table.encode("utf-8")).hexdigest()[:24]
            lock = pol.ledger_path.with_name(f"{pol.ledger_path.name}.output-{digest}.lock")
            fd = os.open(lock, os.O_RDWR)
            try:  # the raw write holds the claim while it writes: a publication to the name is refused meanwhile
                with pytest.raises(BlockingIOError):
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            finally:
                os.close(fd)
            calls.append(table)

        def spark_session(self, spec: Any) -> None:  # the Spark database's binding (session 23): not this test's
            return None

        def write_mark(self, pol: Any, mark: Any) -> None:
            return None

    class Ledger:  # the ledger's binding to the Spark database is tests/engines/test_spark_ledger_binding.py's
        def __enter__(self) -> Ledger:
            return self

        def __exit__(self, *exc: object) -> None:
            return None

        def history_mark(self) -> None:
            return None

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(warehouse, "_spark", lambda: Store())
        mp.setattr(warehouse, "_ledger_for", lambda pol: Ledger())
        mp.setattr(warehouse, "_record_write", lambda pol, table: None)
        warehouse.write_table(policy, "p_out", frame, replace=True)
    assert calls == ["p_out"]
