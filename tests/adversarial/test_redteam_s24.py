"""Red team, session 24: publications (the gate, `transaction._finalise`, k-anonymity, PATE), the ledger/budget, and
``veil serve``.

Part A holds attacks that succeed on 2026-11-26 (main at 62e85ae): each test FAILS today and passes once fixed.
Part B holds probes of defences that held (they pass, and fail if the defence breaks). Helpers come from the earlier
rounds (:mod:`tests.adversarial.test_redteam_s16`, :mod:`tests.adversarial.test_redteam_s20`,
:mod:`tests.publish_support`, :mod:`tests.support.attack`). Findings (details in each test's docstring):

* A1 (MEDIUM) a k-anonymous table's *sensitive* int column is published as DOUBLE or BIGINT depending on whether a
  person who is not in the table (dropped for a missing value) had that value missing: `_finalise` types only
  perturbed/synthesised/randomised columns from the policy.
* A2 (MEDIUM) PATE with the student's records held out of the private source: ``rho=None`` (no local noise) or a
  vacuous ρ passes the gate, and the charge counts the teachers' ε only: the held-out people's records train the
  published student with no (or a vacuous) guarantee and nothing charged for them.
* A3 (MEDIUM, availability) with the default ``--max-connections-per-analyst`` (none), one analyst's logged-in
  connections take every slot and every other analyst gets 53300 (admission never evicts logged-in connections).
* A4 (MEDIUM) a synthetic table's row count is a deterministic function of the private table's size (IMPOSTER: N,
  ML copy: N − round(0.2·N)): whether one person is in the source is read by ``COUNT(*)`` on a public table, free.
* A5 (MEDIUM) `transaction.recover` in another curator process (``veil tables``, ``veil publish``, ``veil retract``)
  rolls back a publication that is between staging and recording; the publication is then recorded and charged,
  reports success, and no table exists (on Spark the output name keeps its old, possibly raw, contents).
* A6 (MEDIUM, availability) an uncapped table's δ is the sum of every analyst's δ; once it reaches 1 (e.g.
  ``partition_delta = 0.25``, two analysts with δ budgets of 0.6, four private-key GROUP BYs) `Ledger._spent` raises
  InternalError for every later query and publication on the table, permanently.
* A7 (LOW) PATE's δ is never checked for vacuity (δ = 0.999 passes the gate and *lowers* the ε charged to 0.54).
* A8 (HIGH) DBSCAN microaggregation publishes a lone noise point (the outlier) as its own group: their exact values.
* A9 (MEDIUM, availability) a connection's named prepared statements (and portals, cursors) are kept without any
  bound: 150 Parse messages of 1 MiB grow the one server process by ~300 MiB; an analyst exhausts its memory.
* A10 (LOW) DP publications refused for their parameters or schema inside ``sanitise`` (DP grid cell count, unknown
  or non-numeric column, PATE's too-few-rows) stay charged: ε = 1 (or PATE's 5.3) per refusal, nothing released.
* A11 (LOW) a model publication's ``--output-model … --replace`` may name the ledger (or warehouse, mirror, policy):
  the model file is moved over it and every budget, charge and password is gone.
* A12 (LOW) an integer generator parameter beyond int64 (``bins=10**20``) escapes the plan as an untyped TypeError.
* A13 (LOW) `published_tables` replays the release log in wall-clock order: a retraction stamped earlier than its
  publication (the clock stepped back) is undone and the table counts as published again.
* A14 (MEDIUM) noise addition at the gate's minimum a = 0.1 on an integer column of small spread is undone by
  `_finalise`'s rounding: 95 % of the column published unchanged, and the gate (which refuses only 100 %) passes.
* Held (Part B, and by hand): concurrent reservations on one capped table from several handles; SPEND_GRID
  rounding never refunds more than was charged; refused outputs and sub-minimum ε charge nothing; a live wire
  session follows the policy (analyst removed → F0000 for every statement, none charged; SET veil.epsilon below
  the minimum refused free); a retracted table is unknown to an open session, free; bound parameters in catalog,
  ``veil.budget`` and table-less queries stay literals; a pipeline skips, uncharged, what follows a refused
  statement. By hand: catalog queries give no sizes or statistics
  (``reltuples`` −1, ``pg_stats`` empty, size functions refused); multi-statement
  batches (a later statement's refusal leaves the earlier answer in the cache, re-asked free), prepared statements
  with int/float/text parameters (one cache entry per value), COPY and ``veil.budget`` of another analyst refused
  or empty, a private table joined with a self cross join of a published table refused above 10,000 rows per
  person, kRR's and the DP grid's domains and row counts, MDAV/DP-MDAV group sizes, k-anonymous QI labels (the same
  on D and D′ of A1).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.adversarial.test_redteam_s16 import _publish, _published, _warehouse
from tests.publish_support import POLICY, people

# ==================================================================================================
# Part A — attacks that succeed today
# ==================================================================================================

# --- A1. A k-anonymous table's sensitive column type says whether a dropped person's value was missing ----------


def _types(policy: Any, table: str) -> dict[str, str]:
    sql = f"SELECT column_name, data_type FROM information_schema.columns WHERE table_name = '{table}'"
    return dict(_published(policy, sql))


def _rows(policy: Any, table: str) -> list[tuple[Any, ...]]:
    return sorted(_published(policy, f'SELECT * FROM "{table}"'), key=repr)


@pytest.mark.slow
def test_A1_kanon_sensitive_column_type_does_not_say_which_value_of_a_dropped_person_was_missing(tmp_path: Path) -> None:
    """MEDIUM (deterministic, one bit per sensitive column, about a person who is not even in the table) — interface:
    ``veil publish kanon --sensitive hours`` (default ``--missing drop``), then any analyst's catalog
    (``information_schema.columns``, psql ``\\d``) or a typed fetch.

    Mechanism: rows with a missing QI or sensitive value are dropped before anonymising (`anonymisation._clean`,
    ``dropna``). A source BIGINT column with one NULL reaches pandas as ``float64`` and stays so after the row is
    dropped; `anonymise` copies the sensitive column as it is (``clean[col].to_numpy()``) and
    `transaction._finalise` gives the declared type only to perturbed/synthesised/randomised columns (the s20 A4
    fix), not to ``sensitive`` (nor ``generalised``) ones. D: person 7's ``age`` (a QI) is NULL; D′: person 7's
    ``hours`` (the sensitive column) is NULL. Person 7 is dropped in both, the remaining rows are identical, and
    Mondrian is deterministic on them: both tables hold exactly the same multiset of rows (59), yet ``hours`` is
    BIGINT in D and DOUBLE in D′ (measured: ``{'hours': 'BIGINT'}`` vs ``{'hours': 'DOUBLE'}``). So the published
    table says which of a dropped person's values was missing. Sound: every published column of a policy column
    typed from the policy (``as_declared``), whatever its protection."""
    worlds = {}
    for world, column in (("d", "age"), ("d_prime", "hours")):
        frame = people(60)
        # two hours, each about 30 people's (pubgate: hours one person alone holds are refused by the s60 F2 rule)
        frame["hours"] = np.where(frame["hours"] >= 40, 45, 35)
        frame[column] = frame[column].astype(object)
        frame.loc[7, column] = None
        policy = _warehouse(tmp_path / world, frame)
        _publish(policy, "kanon", {"table": "people", "qi": ["age", "sex"], "sensitive": ["hours"], "k": 5,
                                   "algorithm": "mondrian", "output": "pk"})  # fmt: skip
        worlds[world] = (_types(policy, "pk"), _rows(policy, "pk"))
    (types_d, rows_d), (types_dp, rows_dp) = worlds["d"], worlds["d_prime"]
    assert [tuple(map(str, r)) for r in rows_d] == [tuple(str(v).removesuffix(".0") for v in r) for r in rows_dp], (
        "precondition: the two tables hold the same rows"
    )
    assert types_d == types_dp, f"the published column types differ: D {types_d} vs D′ {types_dp}"


# --- A2. PATE's held-out student records: no local noise passes the gate, and their ε is never charged ----------


def _pate_plan(policy: Any, tmp_path: Path, rho: float | None) -> Any:
    from veil.generators.pate import PateConfig
    from veil.generators.registry import get_plugin

    config = PateConfig(teachers=20, queries=100, rho=rho, seed=1)
    request = {"table": "people", "label": "income", "config": config, "output_model": str(tmp_path / "student.pt")}
    return get_plugin("pate").plan(policy, request)


@pytest.mark.parametrize("rho", [None, 1000.0])
def test_A2_pate_student_held_out_of_the_source_is_protected_and_charged(tmp_path: Path, rho: float | None) -> None:
    """MEDIUM — interface: ``veil publish pate --no-student-noise`` (or ``--student-rho 1000``) without
    ``--student-table``; the student model file is published.

    Mechanism: without ``--student-table`` the student's records are rows held out of the private source
    (`plugins/pate.py::sanitise`, ``s_idx``); each is sent to the teachers and trained on as
    ``privatise_records(Xs, rho)``, i.e. with local noise Lap(1/ρ) — or raw with ``rho=None``. The published
    student (an MLP/logistic model and its ROC threshold) is then a deterministic function of those people's raw
    feature vectors, and the guarantee only covers the teachers' rows. The gate checks ρ for nothing (`check_plan`
    sees only the teachers' data-independent ε) and the reservation is that ε alone (`plan.epsilon`): the held-out
    people's local ε (``ldp_guarantee(...)["per_record"]``: ∞ without noise, 2·ρ·features with ``rho=1000``) is
    neither refused as vacuous nor charged to ``table:people``. Measured: both plans pass ``check_plan`` and reserve
    ε ≈ the teachers' bound only. Sound: refuse a student held out of the source without local noise (and a local ε
    above the gate's maximum), or charge the table max(teachers' ε, the student records' local ε) (parallel
    composition over disjoint people)."""
    from veil.errors import InputError, PublicationRefused
    from veil.generators import gate
    from veil.generators.pate import FeatureEncoder, ldp_guarantee

    policy = _warehouse(tmp_path / "d", people(80))
    try:
        plan = _pate_plan(policy, tmp_path, rho)
        gate.check_plan(plan, float(policy.defaults.min_epsilon_per_query))
    except (PublicationRefused, InputError):
        return  # refused, free: sound
    spec = policy.tables["people"]
    encoder = FeatureEncoder.from_columns(spec.columns, plan.params["features"])
    local = ldp_guarantee(encoder, rho)["per_record"]
    local_eps = float("inf") if local is None else float(local)
    assert float(plan.epsilon) >= local_eps, (
        f"PATE with the student held out of the source at rho={rho}: the gate passed it and it reserves ε = "
        f"{float(plan.epsilon):.4g} (the teachers' bound), while each held-out student record is published at local "
        f"ε = {local_eps:g}"
    )


# --- A3. One analyst's logged-in connections lock every other analyst out (MEDIUM, availability) ----------------


@pytest.fixture
def two_logins(tmp_path: Path) -> Path:
    from tests.publish_support import make_warehouse
    from tests.support.attack import set_password

    policy = make_warehouse(tmp_path, n=60)
    set_password(policy, "bob")
    set_password(policy, "carol")
    return policy


@pytest.mark.slow
def test_A3_one_analyst_cannot_hold_every_connection_slot_after_login(two_logins: Path) -> None:
    """MEDIUM (availability; insider) — interface: ``veil serve`` with its default limits (here
    ``--max-connections 6`` to keep it quick; the same with the default 100 and 100 connections).

    Mechanism: ``--max-connections-per-analyst`` defaults to none (`limits.ServerLimits`), and the fair share of
    `admission.py` evicts only connections that have not logged in ("logged-in connections … are never cut"). So
    bob, an analyst with a password, opens ``--max-connections`` connections (a pool, or a loop; 6 in 0.23 s) and
    holds them idle: carol, with her own password, gets ``53300 sorry, too many clients already`` for as long as bob
    keeps them — one analyst takes the server down for the others, which docs/server.md says cannot happen ("every
    limit below holds before and after login"). Sound: a default per-analyst cap below ``--max-connections`` (or a
    share of slots kept for analysts holding none, or evicting the idlest connection of the analyst holding the
    most)."""
    import psycopg

    from tests.adversarial.test_redteam_s20 import _login, _serve
    from tests.support.attack import PASSWORD

    dsn = "host=127.0.0.1 port={port} user=bob password={pw} dbname=veil sslmode=disable connect_timeout=10"
    with _serve(two_logins, max_connections=6) as st:
        held = []
        try:
            for _ in range(6):
                try:
                    held.append(psycopg.connect(dsn.format(port=st.port, pw=PASSWORD), autocommit=True))
                except psycopg.OperationalError:
                    break  # a per-analyst cap: sound
            outcome = _login(st.port, "carol", PASSWORD)
        finally:
            for conn in held:
                conn.close()
    assert outcome == "ok", f"while bob held {len(held)} logged-in connections, carol's login ended: {outcome!r}"


# --- A4. A synthetic table's row count is the private table's exact size (MEDIUM) -------------------------------

SIZE_REQUESTS = {
    "imposter": ("synth", {"method": "imposter", "sensitive": "sex", "label": "income", "columns": ["job"], "epochs": 1,
                           "batch_size": 64}),
    "ml_copy": ("sdc", {"method": "ml_copy", "columns": ["age", "hours"], "target": "sex"}),
}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("method", sorted(SIZE_REQUESTS))
def test_A4_synthetic_table_row_count_does_not_say_whether_one_person_is_in_the_source(tmp_path: Path, method: str) -> None:
    """MEDIUM (membership at ε = 0) — interface: ``veil publish synth`` (IMPOSTER) or ``veil publish sdc --method
    ml_copy``, then any analyst's ``SELECT COUNT(*) FROM <published>`` (exact, free: the table is public).

    Mechanism: IMPOSTER samples ``rows=env.source_rows`` rows (`plugins/synth.py`: the private table's exact size
    N), ML copy ``n_out = len(data)`` (`mlcopy.py`: the training part, N − round(0.2·N)). The synthetic rows carry
    no one's values, but their *number* is a deterministic function of the source's size, so whether person 7 is in
    the private table is read off the public table at no cost, whereas the same count asked of the private table
    costs ε and comes with noise. Measured: D (60 people) → IMPOSTER 60 rows, ML copy 48; D′ (D without person 7,
    59) → 59 and 47 (every run); the SDC GAN likewise samples one row per training row inside the declared domains
    (`gan.train_gan`, ``n_out`` None; by reading, not run: slow). kRR's count was made DP for exactly this (red
    team s16 A5); synthetic tables were left out. Sound: a synthetic table's size chosen by the curator (a parameter,
    data-independent) or a DP count charged to the table; the test asks the published sizes of D and D′ to be equal."""
    from tests.adversarial.test_redteam_s20 import _publish_until_it_passes_the_gate

    kind, request = SIZE_REQUESTS[method]
    counts = {}
    for world, drop in (("d", []), ("d_prime", [7])):
        frame = people(60).drop(index=drop).reset_index(drop=True)
        policy = _warehouse(tmp_path / world, frame)
        _publish_until_it_passes_the_gate(policy, kind, {**request, "table": "people", "output": "synthetic"})
        counts[world] = _published(policy, "SELECT COUNT(*) FROM synthetic")[0][0]
    assert counts["d"] == counts["d_prime"], (
        f"{method}: the published table has {counts['d']} rows with person 7 in the source and {counts['d_prime']} without"
    )


# --- A5. A concurrent `veil tables` (any recovery) rolls back an in-flight publication, which is then recorded ---


def test_A5_recovery_in_another_process_never_leaves_a_recorded_publication_without_its_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MEDIUM (ledger ↔ warehouse desync; charged without release) — interface: two curator processes, e.g. a
    long ``veil publish`` and ``veil tables`` (or another ``veil publish`` / ``veil retract``) started meanwhile.

    Mechanism: every publish, ``veil tables`` and ``veil retract`` first runs `transaction.recover`, which rolls
    back every journal row whose token is not in the release log — it cannot tell a publication that crashed from
    one that is running in another process between `warehouse.stage_publication` (journal row + staged table
    committed) and `ledger.record`. The running publication then records its release (the reservation is marked
    released, the table account charged), `commit_publication` finds no journal row and returns silently, and so
    does `finish_publication`: ``publish`` reports success (release id, rows, ε) while the table exists neither in
    the warehouse nor in the public mirror, and ``veil tables`` lists it as published. With ``--replace`` the old
    table stays under the name the ledger now attributes to the new release; on Spark, whose analysts read the
    output name itself once no journal row is pending (`session._readable_published`), the name keeps whatever
    it held — raw rows when it replaced an undeclared table (red team s16 A8). Reproduced deterministically by
    running the other process's recovery right after staging (the real `recover`, interleaved). Measured: kRR at
    ε = 1 → ``recover`` said ``['rolled back p_sex']``; publish returned release ``p…`` with 60 rows and ε = 2
    charged to ``table:people``; ``published_tables`` lists ``p_sex``; the mirror has no such table. Sound:
    recovery leaves a journal row whose publication is alive (a lease or lock per token), and a commit whose
    journal row is gone fails before the release is recorded (or the release records only what was written)."""
    from veil.errors import VeilError
    from veil.generators import transaction
    from veil.store import warehouse
    from veil.store.publications import published_tables

    policy = _warehouse(tmp_path / "d", people(60))
    stage = warehouse.stage_publication
    recovered: list[str] = []

    def staged_then_another_curator_process_recovers(pol: Any, *args: Any, **kwargs: Any) -> None:
        stage(pol, *args, **kwargs)
        recovered.extend(transaction.recover(pol))  # what `veil tables` in another process does first

    monkeypatch.setattr(warehouse, "stage_publication", staged_then_another_curator_process_recovers)
    try:
        result = _publish(policy, "krr", {"table": "people", "columns": ["sex"], "epsilon": 1.0, "output": "p_sex"})
    except VeilError:
        assert "p_sex" not in published_tables(policy), "a failed publication was recorded as published"
        return
    monkeypatch.undo()
    try:
        rows = _published(policy, "SELECT COUNT(*) FROM p_sex")[0][0]
    except Exception as exc:
        rows = f"missing ({type(exc).__name__})"
    assert rows == result.rows, (
        f"recovery in another process did {recovered}; publish then returned {result.release_id} with {result.rows} "
        f"rows (ε = {result.epsilon} charged) and the ledger lists {sorted(published_tables(policy))} as published, "
        f"but the public table p_sex is {rows}"
    )


# --- A6. A table account whose δ adds up to 1 bricks the table for everyone (MEDIUM, availability) --------------

DELTA_POLICY = (
    POLICY.replace('job = {{ type = "category", values = ["nurse", "smith", "clerk"] }}', 'job = {{ type = "category" }}')
    .replace("[tables.people]", "[defaults]\npartition_delta = 0.25\n\n[tables.people]")
    .replace("[analysts.bob]\nepsilon = 2.0", "[analysts.bob]\nepsilon = 2.0\ndelta = 0.6")
    .replace("[analysts.carol]\nepsilon = 100.0", "[analysts.carol]\nepsilon = 100.0\ndelta = 0.6")
)


def test_A6_the_tables_delta_adding_up_to_one_never_breaks_its_ledger(tmp_path: Path) -> None:
    """MEDIUM (availability for every analyst, permanent; a ledger invariant) — interface: the Python API
    (``veil.connect(...).sql``), the CLI and ``veil serve`` alike (XX000 "internal error" on the wire).

    Mechanism: every query on a table also charges the table's account ``table:NAME``, capped or not (red team
    s16 A3), so an uncapped table's δ is the sum of every analyst's δ on it. Each analyst's δ is capped (< 1), the
    table's sum is not, and `Ledger._spent` rebuilds it as ``Cost(ε, δ)``, whose constructor raises
    ``InternalError("Cost out of range")`` for δ ≥ 1. Policy (valid: every figure < 1): ``partition_delta = 0.25``,
    bob and carol with ``delta = 0.6``; ``job`` without declared values (private keys). bob and carol each run two
    private-key GROUP BYs (δ = 0.25 each, within their own budgets): the fourth reservation stores
    ``table:people`` δ = 1, and from then on *every* query on ``people`` by anyone — ``SELECT COUNT(*)``, which
    charges no δ — fails with ``InternalError: Cost out of range: ε = 2/5, δ = 1`` (measured), and so does every
    publication from it; declaring ``delta_total`` later does not help (the read fails first). Only editing the
    ledger by hand repairs it. The same sum is reached by DP publications: PATE's δ (any value < 1; the gate checks
    no δ for vacuity) charges the table too. Sound: a charge that would bring an account's δ to 1 or beyond is
    refused (typed, ``BudgetExhausted``) or the stored sums are read without Cost's range check; either way the
    next query ends typed (answered or refused), never with InternalError."""
    import veil
    from veil.errors import InternalError, VeilError

    policy = _warehouse(tmp_path / "d", people(200), policy_text=DELTA_POLICY)
    for analyst in ("bob", "carol"):
        with veil.connect(policy.path, analyst=analyst) as db:
            for i in range(2):
                try:
                    db.sql(f"SELECT job, COUNT(*) FROM people WHERE age > {20 + i} GROUP BY job", epsilon=0.1)
                except VeilError:
                    pass  # a typed refusal of one of these is sound too
    with veil.connect(policy.path, analyst="carol") as db:
        try:
            db.sql("SELECT COUNT(*) FROM people", epsilon=0.1)
            outcome = "answered"
        except InternalError as exc:
            outcome = f"InternalError: {exc}"
        except VeilError:
            outcome = "refused, typed"
    assert not outcome.startswith("InternalError"), f"after four private-key GROUP BYs carol's COUNT(*) ended: {outcome}"


# --- A7. PATE's δ is never checked for vacuity: δ = 0.999 passes the gate and lowers the ε charged (LOW) ---------


@pytest.mark.parametrize("delta", [0.5, 0.999])
def test_A7_pate_with_a_vacuous_delta_is_refused_before_anything_is_charged(tmp_path: Path, delta: float) -> None:
    """LOW (a vacuous guarantee published as DP; curator-side) — interface: ``veil publish pate --delta 0.999``
    (the CLI accepts any δ in (0, 1)).

    Mechanism: the gate refuses vacuous ε (≤ 0, > 50, below the policy's minimum) and vacuous k, noise and keep
    probabilities, but checks no δ (`gate.check_plan`). PATE's data-independent bound trades δ for ε, so a larger δ
    *lowers* the ε charged: with γ = 0.05 and 100 queries, δ = 1e-5 → ε = 5.30, δ = 0.5 → 1.68, δ = 0.999 → 0.54
    (measured, `pate_accounting.data_independent_epsilon`). A δ of 0.999 allows publishing every teacher's labels
    as they are with probability 0.999; the release is recorded and reported as "(ε = 0.545, δ = 0.999)-DP" and
    charges the table ε = 0.54 (and δ, which then feeds A6). Sound: the gate refuses δ above a fixed maximum (as it
    does ε above 50), from the parameters only, before anything is charged."""
    from veil.errors import InputError, PublicationRefused
    from veil.generators import gate
    from veil.generators.pate import PateConfig
    from veil.generators.registry import get_plugin

    policy = _warehouse(tmp_path / "d", people(80))
    config = PateConfig(teachers=20, queries=100, rho=0.5, delta=delta, seed=1)
    request = {"table": "people", "label": "income", "config": config, "output_model": str(tmp_path / "student.pt")}
    try:
        plan = get_plugin("pate").plan(policy, request)
        gate.check_plan(plan, float(policy.defaults.min_epsilon_per_query))
    except (PublicationRefused, InputError):
        return
    raise AssertionError(
        f"PATE at δ = {delta} passed the gate: it would charge ε = {float(plan.epsilon):.3g}, δ = {float(plan.delta):g}"
    )


# --- A8. DBSCAN microaggregation publishes a lone outlier's exact values (HIGH) ----------------------------------


@pytest.mark.slow
def test_A8_dbscan_microaggregation_never_publishes_one_persons_values_alone(tmp_path: Path) -> None:
    """HIGH (a published row is one person's raw values) — interface: ``veil publish sdc --method microagg_dbscan
    --columns age,hours --param eps=1.0 --param min_samples=10`` (eps = 1.0 is on the method's own sweep grid),
    then any analyst's ``SELECT * FROM mdb`` (public, free).

    Mechanism: DBSCAN's clusters hold at least ``min_samples`` rows, and its noise points are "averaged together
    as one group, as in the paper's code" (`sdc.replace_by_centroids`: label −1 is one group). When a single
    person is noise — the outlier, i.e. the most identifiable person — that group has one member and its
    "centroid" is their exact record. The gate has no group check for DBSCAN (`plugins/sdc.py` sets
    ``group_columns`` only for a ``k`` parameter) and refuses a perturbed column only when *every* row equals its
    source; the record's ``min_group_size`` (1) is not checked. Data: the publication tests' 200 people with
    person 7 moved to age 89 and 97 hours a week (everyone else has 18–79 and hours near 40): the release has 199 rows at the
    centroid (50, 40) and one row (89, 97) — person 7, exactly (measured; unchanged share 0.03 / 0.06, so the
    gate passed). The same class as rank swapping's published extremes (red team s16 A9). Sound: a noise group
    smaller than ``min_samples`` is merged into the nearest cluster (or the release refused), so every published
    value is shared by at least ``min_samples`` rows."""
    from veil.errors import PublicationRefused

    frame = people(200)
    frame.loc[7, ["age", "hours"]] = [89, 97]
    policy = _warehouse(tmp_path / "d", frame)
    request = {"table": "people", "method": "microagg_dbscan", "columns": ["age", "hours"],
               "params": ["eps=1.0", "min_samples=10"], "output": "mdb"}  # fmt: skip
    try:
        _publish(policy, "sdc", request)
    except PublicationRefused:
        return
    groups = _published(policy, "SELECT age, hours, COUNT(*) AS n FROM mdb GROUP BY age, hours ORDER BY n LIMIT 3")
    assert groups[0][2] >= 10, (
        f"the published DBSCAN microaggregation holds {groups[0][:2]} in {groups[0][2]} row(s): person 7's raw "
        f"values are (89, 97); smallest groups {groups}"
    )


# ==================================================================================================
# Part B — probes of defences that held (they pass today, and fail if the defence breaks)
# ==================================================================================================


def test_B1_concurrent_reservations_never_overspend_a_capped_table() -> None:
    """Four threads, each with its own ledger handle (as `veil serve --processes` workers have), race 25
    reservations of ε = 1/3 each on one table capped at ε = 10 plus their own analyst accounts: exactly 30 are
    granted, the rest refused with BudgetExhausted, and the stored spend is exactly 10 (SQLite's BEGIN IMMEDIATE
    serialises the read-check-write)."""
    import tempfile
    import threading
    from fractions import Fraction

    from veil.errors import BudgetExhausted
    from veil.store.ledger import Account, Cost, Ledger

    path = Path(tempfile.mkdtemp()) / "ledger.sqlite"
    Ledger(path).close()
    table = Account.table("people", Fraction(10), None)
    granted: list[int] = []
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        with Ledger(path) as led:
            me = Account.analyst(f"a{i}", Fraction(100), Fraction(1, 10**5))
            for _ in range(25):
                try:
                    led.reserve(Cost(Fraction(1, 3)), [me, table], actor=f"a{i}")
                    granted.append(i)
                except BudgetExhausted:
                    pass
                except BaseException as exc:
                    errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with Ledger(path) as led:
        spent = led.spent("table:people").epsilon
        per_analyst = sum(led.spent(f"analyst:a{i}").epsilon for i in range(4))
    assert not errors, errors
    assert len(granted) == 30 and spent == 10 and per_analyst == 10, (len(granted), spent, per_analyst)


def test_B2_spend_rounding_never_refunds_more_than_was_charged() -> None:
    """Charges with coprime ~40-digit denominators (beyond SPEND_GRID) and refunds of half of them: the stored
    spend stays at or above the exact sum of what is still charged, and within 1e-25 of it."""
    import random
    import tempfile
    from fractions import Fraction

    from veil.store.ledger import Account, Cost, Ledger

    rnd = random.Random(24)
    with Ledger(Path(tempfile.mkdtemp()) / "l.sqlite") as led:
        acct = Account.analyst("bob", Fraction(1000), Fraction(1, 10**5))
        exact = Fraction(0)
        for i in range(60):
            q = rnd.randrange(10**39, 10**40) | 1
            cost = Cost(Fraction(rnd.randrange(1, q // 100), q))
            r = led.reserve(cost, [acct], actor="bob")
            if i % 2:
                led.cancel(r)
            else:
                exact += cost.epsilon
        stored = led.spent(acct.key).epsilon
    assert exact <= stored <= exact + Fraction(1, 10**25), (float(stored - exact), stored.denominator)


def test_B3_a_refused_output_charges_nothing(tmp_path: Path) -> None:
    """A kRR publication whose --output exists (no --replace), names the source, a private table or ``_veil*``, or
    asks ε below the policy's minimum, is refused before the reservation: ``table:people`` stays at 0."""
    from veil.errors import PublicationRefused, VeilError
    from veil.store.ledger import Ledger

    policy = _warehouse(tmp_path / "d", people(60))
    _publish(policy, "krr", {"table": "people", "columns": ["sex"], "epsilon": 1.0, "output": "p_sex"})
    with Ledger.for_policy(policy) as led:
        before = led.spent("table:people")
    for output, eps in (("p_sex", 1.0), ("people", 1.0), ("_veil_x", 1.0), ("P_Sex", 1.0), ("p_other", 1e-4)):
        with pytest.raises((VeilError, PublicationRefused)):
            _publish(policy, "krr", {"table": "people", "columns": ["sex"], "epsilon": eps, "output": output})
    with Ledger.for_policy(policy) as led:
        assert led.spent("table:people") == before


@pytest.mark.slow
def test_B4_a_live_wire_session_follows_the_policy(two_logins: Path) -> None:
    """bob's open connection: ``SET veil.epsilon`` below the minimum is refused at the query (free); after the
    curator removes ``[analysts.bob]`` from the policy, every statement of bob's live session — a fresh query, one
    whose answer is cached, ``SHOW veil.budget``, EXPLAIN — is refused with F0000, none charged; carol is served."""
    import psycopg

    from tests.adversarial.test_redteam_s20 import _serve
    from tests.support.attack import PASSWORD
    from veil.policy import load_policy
    from veil.store.ledger import Ledger

    def spent(who: str) -> Any:
        with Ledger(load_policy(two_logins).ledger_path) as led:
            return led.spent(f"analyst:{who}").epsilon

    dsn = "host=127.0.0.1 port={port} user={who} password={pw} dbname=veil sslmode=disable connect_timeout=10"
    with _serve(two_logins) as st:
        with psycopg.connect(dsn.format(port=st.port, who="bob", pw=PASSWORD), autocommit=True) as bob:
            bob.execute("SET veil.epsilon = 0.0005")
            with pytest.raises(psycopg.Error):
                bob.execute("SELECT COUNT(*) FROM people").fetchall()
            assert spent("bob") == 0
            bob.execute("RESET veil.epsilon")
            bob.execute("SELECT COUNT(*) FROM people WHERE age > 20").fetchall()
            charged = spent("bob")
            time.sleep(0.05)
            two_logins.write_text(two_logins.read_text().replace("[analysts.bob]\nepsilon = 2.0\n", ""))
            for sql in ("SELECT COUNT(*) FROM people WHERE age > 21", "SELECT COUNT(*) FROM people WHERE age > 20",
                        "SHOW veil.budget", "EXPLAIN SELECT COUNT(*) FROM people"):  # fmt: skip
                with pytest.raises(psycopg.Error) as err:
                    bob.execute(sql).fetchall()
                assert err.value.sqlstate == "F0000", (sql, err.value.sqlstate)
            assert spent("bob") == charged
        with psycopg.connect(dsn.format(port=st.port, who="carol", pw=PASSWORD), autocommit=True) as carol:
            assert carol.execute("SELECT COUNT(*) FROM people").fetchone() is not None


def test_B5_a_retracted_table_is_unknown_to_an_open_session(tmp_path: Path) -> None:
    """An analyst session opened while ``p_sex`` is published reads it; after ``retract`` (another handle, as
    another process would) the same session's next query on it is refused as an unknown table, free."""
    import veil
    from veil.errors import VeilError
    from veil.store.catalog import retract

    policy = _warehouse(tmp_path / "d", people(60))
    _publish(policy, "krr", {"table": "people", "columns": ["sex"], "epsilon": 1.0, "output": "p_sex"})
    with veil.connect(policy.path, analyst="carol") as db:
        assert len(db.sql("SELECT sex, COUNT(*) FROM p_sex GROUP BY sex")) >= 1
        retract(policy, "p_sex", reason="probe")
        before = db.budget().spent
        with pytest.raises(VeilError):
            db.sql("SELECT sex, COUNT(*) FROM p_sex GROUP BY sex")
        assert db.budget().spent == before


# --- A9. One connection's prepared statements grow the server's memory without bound (MEDIUM, availability) ----


def _rss_mib() -> float:
    import os

    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


@pytest.mark.slow
def test_A9_prepared_statements_of_one_connection_are_bounded(two_logins: Path) -> None:
    """MEDIUM (availability; any analyst after login) — interface: ``veil serve``, the extended protocol (psycopg's
    ``pgconn.prepare``; any driver's named statements).

    Mechanism: every Parse of a named statement is kept in the connection's ``statements`` dict (pg-mimic's
    `_handle_parse`), with its routed token list, until the connection closes or the client closes it; nothing
    bounds their number or total size — only each statement's text (``--max-query-bytes``, 1 MiB) and token count.
    bob parses 150 named statements of 1 MiB each (a long string literal: few tokens) without executing any
    (nothing is charged): the server process grows by ~2 MiB per statement (measured: 200 statements in 1.2 s,
    +402 MiB RSS), and the connection answers on. Repeated on a few connections (no per-analyst cap, A3), one
    analyst exhausts the server's memory within minutes and the one process serving everyone is killed. The same
    holds for named portals and DECLAREd cursors (each holds its whole answer). Sound: a per-connection cap on
    prepared statements / portals / cursors and on their total bytes (refused with 54000 or 53400), so one
    connection's protocol state is bounded. Checked: within 150 × 1 MiB statements the server refuses one, or its
    resident memory grows by less than 100 MiB."""
    import psycopg

    from tests.adversarial.test_redteam_s20 import _serve
    from tests.support.attack import PASSWORD

    pad = "x" * (1000 * 1024)
    refused = ""
    with _serve(two_logins) as st:
        dsn = f"host=127.0.0.1 port={st.port} user=bob password={PASSWORD} dbname=veil sslmode=disable"
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("SELECT 1").fetchall()
            start = _rss_mib()
            for i in range(150):
                sql = f"SELECT COUNT(*) FROM people WHERE job = '{pad}{i}'"
                res = conn.pgconn.prepare(f"s{i}".encode(), sql.encode())
                if res.status != psycopg.pq.ExecStatus.COMMAND_OK:
                    refused = f"statement {i}: {(res.error_message or b'').decode(errors='replace')[:120]}"
                    break
            grown = _rss_mib() - start
    assert refused or grown < 100, f"150 prepared statements of 1 MiB each were all kept: the server grew {grown:.0f} MiB"


# --- A10. DP publications refused for their parameters or the schema are charged (LOW) --------------------------

REFUSED_AFTER_CHARGE = {
    "dp_grid_too_many_cells": ("sdc", {"method": "dp_microagg_laplace", "columns": ["age", "hours", "gain"],
                                       "params": ["epsilon=1.0", "bins=100"], "output": "dpm"}),
    "dp_grid_unknown_column": ("sdc", {"method": "dp_microagg_laplace", "columns": ["age", "nonexistent"],
                                       "params": ["epsilon=1.0"], "output": "dpm"}),
    "dp_grid_category_column": ("sdc", {"method": "dp_microagg_laplace", "columns": ["age", "sex"],
                                        "params": ["epsilon=1.0"], "output": "dpm"}),
}  # fmt: skip
# PATE's "too few rows" refusal is gone, not moved: a refusal on the private table's size is a free membership
# oracle; PATE now publishes whatever the size (tests/test_pate_partition.py, fixpate).


@pytest.mark.parametrize(
    "case",
    [pytest.param(c, marks=pytest.mark.slow) if c.startswith("pate") else c for c in sorted(REFUSED_AFTER_CHARGE)],
)
def test_A10_a_dp_publication_refused_before_any_noise_charges_nothing(tmp_path: Path, case: str) -> None:
    """LOW (budget lost on a refusal; the table's cap is shared with every analyst) — interface: ``veil publish sdc
    --method dp_microagg_laplace …`` and ``veil publish pate …``.

    Mechanism: `transaction.publish` reserves the DP cost, then calls the plug-in's ``sanitise``, and never
    refunds once it ran ("noise may have been drawn"). But these refusals come from the parameters, the policy or
    the table's schema alone, inside ``sanitise`` before any noise: the DP grid's cell count (``bins``^d >
    250,000, `sdc.dp_grid_microaggregation`), a column not in the table or not numeric (`plugins/sdc.context`,
    `sdc._numeric`), PATE's "too few rows for the student and teachers" (the source's size, known before the
    reservation). Measured: each ends InputError and leaves ``table:people`` charged ε = 1 (DP grid; 3 refusals →
    ε = 3) or ε = 5.30, δ = 1e-5 (PATE), with a ``reserved`` reservation and no release. s20 A6 fixed the same class
    for kRR's column spellings only. Sound: every check that needs no noise runs before the reservation (or a
    plug-in refusal before its first draw refunds it)."""
    from veil.errors import VeilError
    from veil.store.ledger import Ledger

    policy = _warehouse(tmp_path / "d", people(80))
    kind, request = REFUSED_AFTER_CHARGE[case]
    request = {"table": "people", **request}
    if kind == "pate":
        from veil.generators.pate import PateConfig

        request |= {"config": PateConfig(teachers=20, queries=100, rho=0.5, seed=1), "output_model": str(tmp_path / "s.pt")}
    with pytest.raises(VeilError):
        _publish(policy, kind, request)
    with Ledger.for_policy(policy) as led:
        spent = led.spent("table:people")
    assert spent.epsilon == 0 and spent.delta == 0, f"{case}: refused, and table:people was charged {spent}"


# --- A11. A model publication may replace the ledger, the warehouse, the mirror or the policy file (LOW) ---------


@pytest.mark.parametrize("target", ["ledger", "warehouse", "mirror", "policy"])
def test_A11_a_model_output_never_replaces_veils_own_files(tmp_path: Path, target: str) -> None:
    """LOW (a careless curator; destroys the accounting) — interface: ``veil publish pate --output-model
    ledger.sqlite --replace`` (any model artifact).

    Mechanism: `transaction.check_output` protects *tables* (never the source, a private table or ``_veil*``), but
    for a model artifact only asks ``--replace`` when the file exists. So ``--output-model`` may name the policy's
    ledger, warehouse, public mirror or policy file: the model is staged, the release recorded, and
    `warehouse.commit_publication` moves the model file over it. Measured with the ledger: bob had spent ε = 3/2;
    the PATE publication "succeeded" (release ``p…``, model ``…/ledger.sqlite``); the next ``veil.connect`` fails
    with sqlite3's untyped ``DatabaseError: file is not a database`` — every budget, charge, release and password
    is gone, and a ledger re-created in its place starts every analyst at zero spend. Sound: a model output is
    refused (free, before any charge) when it resolves to one of Veil's own files (ledger and its -wal/-shm,
    warehouse, mirror, policy), whatever ``--replace`` says."""
    from veil.errors import VeilError
    from veil.generators.pate import PateConfig
    from veil.generators.registry import get_plugin
    from veil.generators.transaction import check_output
    from veil.store.warehouse import public_path

    policy = _warehouse(tmp_path / "d", people(80))
    path = {"ledger": policy.ledger_path, "warehouse": policy.database_path, "mirror": public_path(policy),
            "policy": policy.path}[target]  # fmt: skip
    config = PateConfig(teachers=20, queries=100, rho=0.5, seed=1)
    request = {"table": "people", "label": "income", "config": config, "output_model": str(path), "replace": True}
    with pytest.raises(VeilError):
        check_output(policy, get_plugin("pate").plan(policy, request))


# --- A12. A huge integer generator parameter escapes as an untyped TypeError (LOW) ------------------------------


@pytest.mark.parametrize("param", ["bins=100000000000000000000", "candidates=100000000000000000000"])
def test_A12_a_huge_integer_parameter_is_a_typed_refusal(tmp_path: Path, param: str) -> None:
    """LOW (bad input, untyped) — interface: ``veil publish sdc --method dp_microagg_laplace --param
    bins=100000000000000000000`` (the CLI prints a traceback instead of exit 2).

    Mechanism: `base.parse_param_args` turns the text into a Python int beyond int64, and the parameter check calls
    ``numpy.isfinite`` on it: ``TypeError: ufunc 'isfinite' not supported for the input types`` escapes the plan
    (measured), not an ``InputError`` naming the parameter. Nothing is charged (the plan comes first). Sound: a
    typed ``InputError`` ("bins must be at most …")."""
    from veil.errors import VeilError
    from veil.generators.registry import get_plugin

    policy = _warehouse(tmp_path / "d", people(40))
    request = {"table": "people", "method": "dp_microagg_laplace", "columns": ["age"], "params": [param], "output": "o"}
    try:
        get_plugin("sdc").plan(policy, request)
    except VeilError:
        return
    except Exception as exc:
        raise AssertionError(f"{param}: {type(exc).__name__}: {exc}") from None


@pytest.mark.slow
def test_B6_bound_parameters_in_catalog_and_budget_queries_stay_literals(two_logins: Path) -> None:
    """Catalog, ``veil.budget`` and table-less queries with server-side parameters holding quotes, backslashes,
    newlines, format markers and Python source: every answer is empty or echoes the parameter as a value (the
    parameter never becomes SQL or Python; sqlglot's executor compiles expressions to Python source)."""
    import psycopg

    from tests.adversarial.test_redteam_s20 import _serve
    from tests.support.attack import PASSWORD

    marker = two_logins.parent / "pwned"
    payloads = ["x'", "x\\", "x\\'", "'''", 'x"""', "a\nb", "{0}", "%s", "x' || 'y", "') or ('1'='1",
                f"__import__('os').system('touch {marker}')", "x\\' OR 1=1 --"]  # fmt: skip
    queries = ["SELECT relname FROM pg_class WHERE relname = %s",
               "SELECT table_name FROM information_schema.tables WHERE table_name = %s",
               "SELECT %s::text AS v", "SELECT * FROM veil.budget WHERE analyst = %s"]  # fmt: skip
    odd = []
    with _serve(two_logins) as st:
        dsn = f"host=127.0.0.1 port={st.port} user=bob password={PASSWORD} dbname=veil sslmode=disable"
        with psycopg.connect(dsn, autocommit=True) as conn:
            for p in payloads:
                for sql in queries:
                    rows = conn.execute(sql, (p,)).fetchall()
                    if rows and rows != [(p,)]:
                        odd.append((p, sql, rows))
    assert not odd and not marker.exists(), odd


# --- A13. Release order follows the wall clock: a retraction stamped before its publication is undone (LOW) -----


def test_A13_a_retraction_holds_whatever_the_wall_clock_says(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """LOW (needs the system clock to step back, e.g. an NTP correction, between publishing and retracting) —
    interface: ``veil retract``, then ``veil tables`` / every analyst session (and on Spark the table itself).

    Mechanism: `publications.published_tables` replays the release log ``ORDER BY created_at, id`` — wall-clock
    ISO stamps (`ledger._now`), not the insertion order (the rowid, which `catalog_generation` already uses). A
    retraction recorded while the clock reads earlier than the publication's stamp sorts *before* it, so the table
    counts as published again: ``veil tables`` says published, sessions put it back in their catalog (on DuckDB it
    is unreadable only because `retract` dropped the mirror copy; on Spark, which has no mirror, analysts read it),
    and ``veil ingest`` refuses the name as published. Reproduced by stamping the retraction one second earlier
    (the clock stepped back by 1 s). Sound: replay the log in insertion order (rowid)."""
    from datetime import UTC, datetime, timedelta

    from veil.store import ledger as ledger_module
    from veil.store.catalog import retract
    from veil.store.publications import published_tables

    policy = _warehouse(tmp_path / "d", people(60))
    _publish(policy, "krr", {"table": "people", "columns": ["sex"], "epsilon": 1.0, "output": "p_sex"})
    earlier = (datetime.now(UTC) - timedelta(seconds=1)).isoformat(timespec="microseconds")
    monkeypatch.setattr(ledger_module, "_now", lambda: earlier)  # the clock stepped back by one second
    retract(policy, "p_sex", reason="withdrawn")
    monkeypatch.undo()
    assert "p_sex" not in published_tables(policy), "a recorded retraction is undone by the order of wall-clock stamps"


@pytest.mark.slow
def test_B7_a_pipeline_skips_what_follows_an_error_uncharged(two_logins: Path) -> None:
    """psycopg's pipeline mode (Parse/Bind/Execute ×3, one Sync): the query after a refused one is skipped until
    the Sync, as PostgreSQL does, and not charged; only the first query is reserved and released."""
    import psycopg

    from tests.adversarial.test_redteam_s20 import _serve
    from tests.support.attack import PASSWORD
    from veil.policy import load_policy
    from veil.store.ledger import Ledger

    with _serve(two_logins) as st:
        dsn = f"host=127.0.0.1 port={st.port} user=carol password={PASSWORD} dbname=veil sslmode=disable"
        with psycopg.connect(dsn, autocommit=True) as conn:
            with pytest.raises(psycopg.Error), conn.pipeline() as pipe:
                conn.execute("SELECT COUNT(*) FROM people WHERE age > %s", (40,))
                conn.execute("SELECT nonsense FROM people WHERE age > %s", (41,))
                conn.execute("SELECT COUNT(*) FROM people WHERE age > %s", (42,))
                pipe.sync()
    with Ledger(load_policy(two_logins).ledger_path) as led:
        rows = led.reservations("carol")
    assert [r["status"] for r in rows] == ["released"] and "40" in rows[0]["canonical_sql"], rows


# --- A14. Noise addition at the gate's minimum a is undone by the int rounding of `_finalise` (MEDIUM) ------------


@pytest.mark.slow
def test_A14_noise_addition_never_publishes_most_values_unchanged(tmp_path: Path) -> None:
    """MEDIUM (a perturbed column published as it is for 95 % of the people) — interface: ``veil publish sdc
    --method noise_addition --param a=0.1 --columns age,hours``, then ``SELECT * FROM na``.

    Mechanism: the gate refuses a < 0.1 (`MIN_NOISE_A`) because "noise of σ = a · the column's standard deviation
    below that is undone by rounding", and refuses a perturbed column only when it equals its source in *every*
    row. But `_finalise` itself rounds every perturbed ``int`` column to its declared type (`as_declared`): the
    noise is relative to the column's spread, the rounding is absolute (1 unit), so an integer column whose values
    lie within a few units (hours worked, children, a score) comes back unchanged. Data: the publication tests'
    400 people with ``hours`` = 40 + a uniform integer in [−4, 4] (std 2.55): at a = 0.1 the gate passes and
    reports ``unchanged_share`` hours 0.9525 (age 0.225); at a = 0.25, 0.545; at the default a = 0.5, 0.305
    (measured). The gate bounds kRR's keep probability by 0.9 (`MAX_KEEP_PROBABILITY`); here 95 % of a column's
    values are kept with no bound. Sound: refuse a non-DP perturbation whose published values equal their source
    in more than ``MAX_KEEP_PROBABILITY`` of the rows (or scale the noise to the column's declared granularity).
    Statistical: with 2,000 people the unchanged count of ``hours`` is Binomial(2000, ≈0.95) (share sd 0.005), so
    a share at or below 0.9 (10 sd away) has probability < 1e-20."""
    import numpy as np

    from veil.errors import PublicationRefused
    from veil.generators import gate

    frame = people(2000)
    frame["hours"] = 40 + np.random.default_rng(1).integers(-4, 5, len(frame))
    policy = _warehouse(tmp_path / "d", frame)
    request = {"table": "people", "method": "noise_addition", "columns": ["age", "hours"], "params": ["a=0.1"],
               "output": "na"}  # fmt: skip
    try:
        result = _publish(policy, "sdc", request)
    except PublicationRefused:
        return
    shares = result.gate["unchanged_share"]
    assert max(shares.values()) <= gate.MAX_KEEP_PROBABILITY, f"published with unchanged shares {shares}"
