"""Red team, session 16: the publication gate (threat class 5), ledger/budget accounting (class 4) and
``veil serve`` hardening (class 6) — the areas earlier rounds (query path) attacked less.

Publications run through the real publish transaction (``veil.generators.transaction.publish``, what
``veil publish`` calls) on the small synthetic warehouse of :mod:`tests.publish_support` (400 people); what
an analyst sees is read from the public mirror (what ``SELECT … FROM <published>`` reads at ε = 0). D and D′
differ in one person (person 7). Timings on the shared 2-core machine (noisy).

Status on 2026-11-26 (main at a509013), as reported: A1 (×2), A2, A2b, A2c, A3, A5, A6, A7a, A7b, A8, A8b, A9,
A9b (×3), A10, A11, A12 failed (19 tests). Held: B1, B2, B3. Lead's status after the fixes (same day): all fixed,
every test passes — kRR (A1, A5, A12), synthetic domains (A2, A2b, A2c: the A2 tests now compare D with D′, the
rare value being declared and so public), table accounts (A3/A4), the gate (A6, A10), login backoff (A7), Spark
publications (A8, A8b), rank swapping's coded tails (A9), open k-anonymity ends (A9b), PATE's student table (A11).

Publication gate (class 5)

* A1 (HIGH) kRR's domain gains NA only when the *data* has a missing value (``veil/generators/krr.py``
  ``krr_publish``: ``has_na = col.isna().any()`` → ``domain = [*domain, _NA]``). One person with a NULL
  ``sex`` (all others F/M): the kRR table at ε = 1 has 90–96 of 400 NULL rows (k = 3, each row turns NULL
  with probability 0.21); without that person's NULL it has none, ever (ε = 0.5: 117 vs 0). A one-person bit
  at infinite privacy loss, for a release charged ε. Fix: the domain from the policy alone (NA always in it,
  or NULLs mapped data-independently).
* A12 (LOW) kRR refuses, after the reservation, a source holding a value outside the declared domain ("column
  'sex' has value 'X' outside its declared domain"): one person's undeclared value decides whether the table
  is published, which analysts see; the gate's docstring rules out data-dependent refusals of DP releases for
  this reason. Fix: treat out-of-domain values data-independently (NA, or dropped as queries drop them).
* A2 (HIGH) synthetic tables publish categories one person holds: IMPOSTER's encoder
  (``veil/generators/tabular_encoding.py``) one-hots the categories seen in the training rows and an
  undertrained G samples each of them. Person 7 is the only job = "astronaut" (a declared value): 59, 90 and
  78 of 400 synthetic rows say "astronaut" (3 publications, epochs = 1), 0 without them. The DCR check passes
  (share 0.58 vs limit 0.72): it measures whole-row distances, not values one person alone holds. Membership
  and the rare attribute are published whenever person 7 falls in the 80 % training split. The conditions
  (sensitive, label) are drawn from the training rows' joint frequencies (``Imposter.publish``), so a pair one
  person alone has is copied the same way: A2c, person 7 alone has income = "top" (declared): 4 of 6
  publications hold 1–3 rows (F, top), their real pair. A2b, same class: ``sdc`` ML copy with
  ``sampling=uniform`` (``veil/generators/mlcopy.py``) draws inputs uniformly between each class's raw min and
  max; person 7's gain 4999 (everyone else ≤ 2975) gives 66 and 84 of 320 rows above 2975 (max 4976, 4883)
  when in training, 0 otherwise. IMPOSTER/GAN numerics decode through a quantile transform whose knots are the
  training values (n ≤ 1000), so they too stay within the observed [min, max] (tail not hit at epochs = 1; not
  tested). Fix: categories and ranges from the declared domains only, and a gate rule refusing synthetic
  values held by fewer than k training rows (or a DP synthesiser).
* A9 (HIGH by the brief's definition; design-level) rank swapping (``sdc --method rank_swapping``, p = 10 %)
  publishes each protected column as an exact permutation of the source's values: person 7's outlier gain
  4999 is published as it is (MAX = 4999; SUM 553485 = the source's; exact COUNT). The gate passes it as
  "perturbed" (not every row equals its source row). MDAV (k = 5) and noise addition (a = 0.1) did not
  publish 4999, but their maxima (3330, 4888) still exceed everyone else's 2975: the outlier's presence shows.
  Fix: refuse value-preserving methods for public tables, or a gate rule that values held by fewer than k
  source rows are not published unchanged. A9b, same class: k-anonymity labels each class by its raw min and
  max, so with ``gain`` a QI (k = 5) Mondrian and K-Member publish "[2870, 4999]" and OKA e.g. "[868, 4999]":
  person 7's exact value under "generalised". Fix: range labels from data-independent cut points.
* A10 (HIGH impact, needs a careless curator) k-anonymity publishes every non-QI column raw as "sensitive",
  k checked on the declared QIs only: ``--k 5 --qi sex --sensitive age,hours,gain,job,income`` passes (min
  class 179, ℓ-diversity only reported) and publishes the raw table minus names: 400 of 400 rows are exact,
  unique source tuples. Fix (``veil/generators/gate.py``, groups): k on all published columns but any one
  sensitive column, or refuse sensitive columns whose combination singles out rows.
* A5 (MEDIUM) kRR publishes exactly one row per person: 400 rows with person 7 (19 of 19 publications), 399
  without. The query path sells COUNT(*) only with noise under add/remove neighbours; the kRR release,
  recorded as ε-DP, gives the exact count at ε = 0 (membership for an analyst who knows the other 399; two
  publications give exactly how many joined or left). ε-local-DP assumes public participation, which Veil's
  central guarantee does not. IMPOSTER also publishes exactly ``source_rows`` rows (no guarantee claimed).
  Fix: a DP number of output rows.
* A6 (LOW) the gate's domain check (``gate._out_of_domain``) compares declared ``values`` only for
  non-numeric dtypes and numbers only against lower/upper: ``code = {type = "int", values = [1, 2, 3]}``,
  person 7 has 999, k-anonymity ``--sensitive code`` publishes 999 (queries drop it). Also the whole category
  check is skipped when any value of the column contains ``[ ] { } *`` (``_is_generalised``).
* A8 (HIGH) Spark policies: ``transaction.publish`` records the release, then ``commit_publication`` copies
  the staged table over the output (a Spark write of seconds). With ``--replace`` over an undeclared raw table,
  the name is published before the copy while the Spark database still holds the raw table, and Spark has no
  public mirror (the public engine is the Spark database): bob's ``SELECT * FROM staff_raw`` returned the 50
  raw rows with all 7 columns incl. ``name`` at ε = 0 — during every such publication, and indefinitely after
  a crash in that window (recovery runs only in publish/tables/retract). Fix: on Spark a name is published
  only once its journal row is gone (``published_tables`` minus pending outputs), or commit before recording.
  A8b (MEDIUM, careless curator, Spark): ``write_table``/``Warehouse.write`` replaces a published table with
  raw rows (only ``ingest_file`` checks ``published_tables``); on Spark bob then reads the raw rows, names
  included, as the published table. Fix: refuse published names in ``write_table`` itself.
* A11 (MEDIUM) PATE's ``--student-table`` is read with ``read_table`` and no ``_check_source``
  (``veil/generators/plugins/pate.py``): a private table capped at ε = 0.001 (``staff``, 300 rows) is read
  whole as the student's records (raw with ``--no-student-noise``, ρ·Δ-LDP otherwise), validation accuracy
  is measured on its true labels (0.66, recorded), and the model is published; ``table:staff`` is never
  charged. ``_veil_bounded_*`` names are accepted too. Fix: the source checks, and charge the LDP ε to the
  student table's cap (or require a public student table).

Accounting (class 4)

* A3 (MEDIUM) a table cap declared after releases ignores them: ``ledger.accounts_for`` makes ``table:NAME``
  an account only while the policy caps the table. carol spends ε = 5 on ``people`` and the curator publishes
  kRR ε = 2 (charged to no account: no cap yet); the curator then declares ``epsilon_total = 3``; carol's next
  ε = 1 query is answered (8 released against a cap of 3). Fix: charge ``table:NAME`` for every table always.
* A4 (LOW, same root cause, no separate test) curator DP publications of an uncapped table charge nothing:
  eight kRR publications of ``sex`` at ε = 2 are accepted one after the other (ε = 16; the gate refuses
  ε = 16 at once as vacuous). Rows are shuffled per publication, so they cannot be joined row by row.

Server (class 6)

* A7 (MEDIUM) the login backoff (``veil/server/limits.py`` / ``shared.py`` ``LoginThrottle``, used by
  ``veil/server/connection.py`` ``_login``) is bypassed two ways: (a) any successful login from the address
  clears its failures, so an analyst guessing another's password logs in as themselves between guesses —
  carol's wrong guesses took 0.01–0.06 s each (log: "1 in a row" every time); (b) the wait is computed once
  per connection from the same (count, last failure), so parallel attempts share one wait: after 4 failures,
  12 parallel guesses were all checked in 1.1 s (in a row: 1 + 2 + 4 + 8 + 16 + 30 · 7 s); at the default
  100 connections ~100 guesses per 30 s. Fix: key failures on (address, user) as well, never cleared by
  another user's success; count pending attempts so each parallel one waits its own turn.

Notes (LOW, no test)

* The DP grid (``dp_microagg_laplace``) accepts ε = 50 (``gate.MAX_EPSILON``) with 5000 one-unit bins on
  ``gain``: it published person 7's 4999 exactly (407 rows). Nominally ε-DP, but ε = 50 bounds nothing and is
  far above kRR's keep-probability limit (ε ≈ 2.2 for a yes/no column).
* The policy watch (``_PolicyWatch`` / ``live_policy``) compares (mtime_ns, size, inode); two in-place writes
  of the same size within one kernel timestamp tick (a few ms) leave the second unseen until the next edit.
* The login backoff is per address; a local attacker can rotate loopback source addresses (127.0.0.0/8).

Held (B): concurrent processes spending one analyst's last budget (6 × 0.5 against 2: 4 answered, 2
refused, spent exactly 2); a process SIGKILLed in the engine after its reservation keeps the charge
(``reserved``, 1/2 spent); catalog probes (other analysts' budgets, ``pg_user``/``pg_authid``/``pg_shadow``,
``pg_stat_activity``, ``pg_stats``, ``pg_stat_user_tables``, ``reltuples``) reveal nothing; a prepared
statement is charged once per distinct parameter value and repeats are cached. Also held, no test:
repeated SSLRequest/GSSENCRequest and a startup packet dripped byte by byte end at ``--auth-timeout``;
``SET statement_timeout = 0`` leaves the server's limit; cancel keys are random 32-bit secrets; COPY, PREPARE,
EXECUTE, LISTEN, ``SELECT people FROM people``, ``FOR UPDATE`` are refused; quoted type names in catalog casts
are normalised by sqlglot (``"text\\"`` → TEXT) before the Python executor sees them. Cosmetic: ``TABLE people``
is refused as "catalog tables cannot be combined with people" (a wrong reason).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from tests.publish_support import POLICY, people, veil

# ==================================================================================================
# Helpers
# ==================================================================================================


def _warehouse(base: Path, frame: pd.DataFrame, *, policy_text: str | None = None, table_budget: str = "") -> Any:
    """A policy + warehouse holding ``frame`` as the private row-level table ``people``; returns the Policy."""
    from veil.policy import load_policy
    from veil.store.warehouse import ingest_file

    base.mkdir(parents=True, exist_ok=True)
    path = base / "policy.toml"
    path.write_text((policy_text or POLICY).format(table_budget=table_budget), encoding="utf-8")
    csv = base / "people.csv"
    frame.to_csv(csv, index=False)
    policy = load_policy(path)
    ingest_file(policy, "people", csv)
    return policy


def _published(policy: Any, sql: str) -> list[tuple[Any, ...]]:
    """``sql`` on the public mirror: exactly what every analyst reads of published tables, at ε = 0."""
    from veil.store.warehouse import public_path, writer

    with writer(public_path(policy)) as con:
        return [tuple(r) for r in con.execute(sql).fetchall()]


def _publish(policy: Any, kind: str, request: dict[str, Any]) -> Any:
    from veil.generators.transaction import publish

    return publish(policy, kind, request, progress=False)


# ==================================================================================================
# Part A — attacks that succeed today
# ==================================================================================================

# --- A1. kRR adds NA to the domain only when the data has one -------------------------------------------------


@pytest.mark.parametrize("epsilon", [1.0, 0.5])
def test_krr_output_support_does_not_depend_on_whether_someone_is_missing(tmp_path: Path, epsilon: float) -> None:
    """D: person 7's ``sex`` is NULL (everyone else F/M); D′: it is "F". The kRR release must have the same
    support on both (every output value possible on one is possible on the other): a NULL in the output of D′
    is impossible today, and certain in D's (~96/400 rows at ε = 1), so the table says whether person 7's
    value is missing — a deterministic bit, for a release charged ε."""
    from veil.errors import VeilError

    counts = {}
    for name, missing in (("d", True), ("d_prime", False)):
        frame = people(400)
        frame["sex"] = frame["sex"].astype(object)
        frame.loc[7, "sex"] = None if missing else "F"
        policy = _warehouse(tmp_path / name, frame)
        try:
            _publish(policy, "krr", {"table": "people", "columns": ["sex"], "epsilon": epsilon, "output": "p_krr"})
        except VeilError:
            return  # refusing a column with missing values (seen by the curator only) is sound too
        counts[name] = _published(policy, "SELECT COUNT(*) FILTER (WHERE sex IS NULL), COUNT(*) FROM p_krr")[0]
    nulls_d, nulls_dp = counts["d"][0], counts["d_prime"][0]
    # sound: NULL is either impossible on both (never published) or possible on both; with 400 rows and a
    # NULL probability ≥ 0.1 per row under kRR, "possible" means present (P(absent) < 0.9^400 ≈ 5·10⁻¹⁹)
    assert (nulls_d == 0) == (nulls_dp == 0), (
        f"kRR at ε = {epsilon}: {nulls_d} NULL rows when one person's sex is missing, {nulls_dp} when it is not — "
        "the published support reveals the missing value"
    )


# --- A12. kRR refused because of one person's out-of-domain value ----------------------------------------


def test_krr_is_not_refused_because_of_one_persons_out_of_domain_value(tmp_path: Path) -> None:
    """D: person 7's ``sex`` is "X" (not a declared value; queries drop it); D′: "F". kRR refuses D after the
    reservation ("column 'sex' has value 'X' outside its declared domain") and publishes D′: whether the
    table appears (which every analyst sees) depends on one person's value — the data-dependent refusal of a
    DP release the gate's own docstring rules out. Sound: both end the same way (out-of-domain values
    treated data-independently, e.g. as NA or dropped, as the query path drops them)."""
    from veil.errors import VeilError

    ends = {}
    for name, value in (("d", "X"), ("d_prime", "F")):
        frame = people(400)
        frame.loc[7, "sex"] = value
        policy = _warehouse(tmp_path / name, frame)
        try:
            _publish(policy, "krr", {"table": "people", "columns": ["sex"], "epsilon": 1.0, "output": "p_krr"})
            ends[name] = "published"
        except VeilError as exc:
            ends[name] = f"refused: {str(exc)[:80]}"
    assert ends["d"] == ends["d_prime"], ends


# --- A2. Synthetic tables copy a category one person alone holds ----------------------------------------------
#
# Revised by fixsynth (2026-11-26): the original assertions ("the rare value never appears") fail on the sound
# fix the finding itself proposes (categories and ranges from the declared domains only): a declared value may
# appear in a synthetic table whether or not anyone holds it. What must not happen is that its appearance
# depends on person 7. Each test now publishes D (person 7 holds the rare value) and D′ (they do not, the value
# still declared) and asserts that the rare value is present in every release or in none: with the bug D′ never
# shows it and D does whenever person 7 is in the 80 % training split.

RARE_POLICY = POLICY.replace('"clerk"]', '"clerk", "astronaut"]')


def _presence_is_the_same(counts: dict[str, list[int]]) -> bool:
    """True when the rare value is in every release (of D and D′) or in none of them."""
    return len({n > 0 for runs in counts.values() for n in runs}) <= 1


@pytest.mark.slow
def test_synthetic_table_never_publishes_a_category_only_one_person_holds(tmp_path: Path) -> None:
    """Person 7 is the only "astronaut" (a declared value of ``job``) in D; in D′ they are a nurse. IMPOSTER
    (1 epoch, as a curator trying it out might) publishes ``job`` as an implicit attribute: whether
    "astronaut" appears must not depend on person 7 — its presence only in D told every analyst that person 7
    is in the table (and their job). Before the fix: 59–91 of 400 rows in D, always 0 in D′. False failure
    (fixed code): D′'s or D's release with no astronaut; each row is one with probability ≈ 0.15–0.25 at 1 epoch
    (measured), so < 0.85⁴⁰⁰ ≈ 10⁻²⁸. False pass (bug): all three D releases without person 7 in training,
    ≈ 0.2³ ≈ 0.8 %."""
    from veil.errors import PublicationRefused

    request = {"table": "people", "method": "imposter", "sensitive": "sex", "label": "income",
               "columns": ["job", "hours"], "epochs": 1, "batch_size": 64}  # fmt: skip
    counts: dict[str, list[int]] = {}
    for name, job, runs in (("d", "astronaut", 3), ("d_prime", "nurse", 1)):
        frame = people(400)
        frame.loc[7, "job"] = job
        policy = _warehouse(tmp_path / name, frame, policy_text=RARE_POLICY)
        counts[name] = []
        for attempt in range(runs):
            try:
                _publish(policy, "synth", {**request, "output": f"p_syn{attempt}"})
            except PublicationRefused:
                continue  # refusing is sound (the fix may refuse rather than drop the value)
            sql = f"SELECT COUNT(*) FILTER (WHERE job = 'astronaut') FROM p_syn{attempt}"
            counts[name].append(_published(policy, sql)[0][0])
    assert _presence_is_the_same(counts), (
        f"whether synthetic tables hold 'astronaut' depends on person 7 (the only one): rows per release {counts}"
    )


# --- A2c. IMPOSTER copies a (sensitive, label) condition one person holds ----------------------------------------

TOP_POLICY = POLICY.replace('values = ["low", "high"]', 'values = ["low", "high", "top"]')


@pytest.mark.slow
def test_synthetic_conditions_never_copy_a_pair_only_one_person_holds(tmp_path: Path) -> None:
    """Person 7 alone has income = "top" (declared) in D; "low" in D′. IMPOSTER drew each synthetic row's
    conditions (sex, income) from the training rows' joint frequencies (``Imposter.publish``), so person 7's
    exact pair (F, top) was copied whenever they were in training and drawn at least once
    (1 − (1 − 1/320)^400 ≈ 0.71): measured 4 of 6 publications with 1–3 rows (F, top), always their real sex,
    and never in D′. A different code path from A2 (the encoder's categories): a fix of A2 alone leaves this.
    Whether "top" appears must not depend on person 7. False failure (fixed code, conditions uniform over the
    declared 2 × 3 pairs): a release with no "top" row, (2/3)⁴⁰⁰ ≈ 10⁻⁷⁰. False pass (bug): all four D
    releases miss, ≈ 0.43⁴ ≈ 3 %."""
    from veil.errors import PublicationRefused

    request = {"table": "people", "method": "imposter", "sensitive": "sex", "label": "income",
               "columns": ["job", "hours"], "epochs": 1, "batch_size": 64}  # fmt: skip
    counts: dict[str, list[int]] = {}
    for name, income, runs in (("d", "top", 4), ("d_prime", "low", 1)):
        frame = people(400)
        frame.loc[7, "income"] = income
        policy = _warehouse(tmp_path / name, frame, policy_text=TOP_POLICY)
        counts[name] = []
        for attempt in range(runs):
            try:
                _publish(policy, "synth", {**request, "output": f"p_top{attempt}"})
            except PublicationRefused:
                continue
            sql = f"SELECT COUNT(*) FILTER (WHERE income = 'top') FROM p_top{attempt}"
            counts[name].append(_published(policy, sql)[0][0])
    assert _presence_is_the_same(counts), f"whether 'top' rows appear depends on person 7 (the only one): {counts}"


# --- A2b. ML copy spans one person's outlier ------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_ml_copy_never_publishes_values_beyond_everyone_elses_range(tmp_path: Path) -> None:
    """Person 7's ``gain`` is 4999 in D; in D′ it is their original value (everyone's is below 2976). ML copy
    with ``sampling=uniform`` drew each class's synthetic inputs uniformly between the class's raw min and max,
    so ~84 of 320 published rows exceeded 2975 (max 4998) in D when person 7 was in the training split, and
    none ever in D′: person 7's membership and (nearly) their value were published. Whether gains above
    everyone else's maximum appear must not depend on person 7 (the declared upper bound is 5000, so a sound
    uniform draw over the declared domain shows them in every release). False failure (fixed code): a release
    of 320 uniform draws over [0, 5000] with none above 2975, 0.6³²⁰ ≈ 10⁻⁷¹. False pass (bug): all three D
    releases without person 7 in training, ≈ 0.8 %."""
    from veil.errors import PublicationRefused

    request = {"table": "people", "method": "ml_copy", "params": ["sampling=uniform"], "columns": ["gain", "hours"],
               "target": "income"}  # fmt: skip
    others = int(people(400).drop(index=7)["gain"].max())
    counts: dict[str, list[int]] = {}
    maxima: dict[str, list[int]] = {}
    for name, outlier, runs in (("d", True, 3), ("d_prime", False, 1)):
        frame = people(400)
        if outlier:
            frame.loc[7, "gain"] = 4999
        policy = _warehouse(tmp_path / name, frame)
        counts[name], maxima[name] = [], []
        for attempt in range(runs):
            try:
                _publish(policy, "sdc", {**request, "output": f"p_ml{attempt}"})
            except PublicationRefused:
                continue
            sql = f"SELECT COUNT(*) FILTER (WHERE gain > {others}), MAX(gain) FROM p_ml{attempt}"
            above, top = _published(policy, sql)[0]
            counts[name].append(above)
            maxima[name].append(top)
    assert _presence_is_the_same(counts), (
        f"whether ML copies publish gains above everyone else's maximum {others} depends on person 7 "
        f"(4999 in D): rows above per release {counts}, maxima {maxima}"
    )


# --- A5. kRR publishes the exact number of people ---------------------------------------------------------------


@pytest.mark.slow
def test_krr_row_count_does_not_reveal_membership(tmp_path: Path) -> None:
    """D holds person 7, D′ does not (399 rows). The query path answers ``COUNT(*)`` only with noise (add/remove
    neighbours, ε charged); the kRR publication — recorded as ε-DP and charged ε — has exactly one row per
    person, so every analyst reads the exact count at ε = 0: 400 vs 399, always. An analyst who knows the
    other 399 people learns whether person 7 is in the table with certainty (and two publications a day apart
    give the exact number who joined or left). Sound: the published row count is not a deterministic function
    of the number of people. Checked as: 19 publications of D do not all have exactly 400 rows (a DP count,
    e.g. discrete Laplace of scale ≥ 1, is exact with probability ≤ 0.47 each: false failure ≤ 0.47¹⁹ ≈
    6·10⁻⁷, under STAT_ALPHA; a demonstration of determinism, not a noise-scale test). The publications of D stop
    at the first count other than 400 (the assertion holds from there on): the same false-failure rate, and the
    same 19 publications when the count is exact, at about 2 publications on average when it is noised."""
    counts = {}
    for name, present in (("d", True), ("d_prime", False)):
        frame = people(400)
        if not present:
            frame = frame.drop(index=7).reset_index(drop=True)
        policy = _warehouse(tmp_path / name, frame)
        counts[name] = []
        for _ in range(19 if present else 1):
            _publish(policy, "krr", {"table": "people", "columns": ["sex", "job"], "epsilon": 1.0, "output": "p_krr",
                                     "replace": True})  # fmt: skip
            counts[name].append(_published(policy, "SELECT COUNT(*) FROM p_krr")[0][0])
            if counts[name][-1] != 400:  # the assertion below holds from here on: the rest cannot change it
                break
    assert set(counts["d"]) != {400}, (
        f"kRR published exactly 400 rows in all of {len(counts['d'])} releases with person 7, and "
        f"{counts['d_prime']} without: the exact count at ε = 0"
    )


# --- A6. Numeric columns with declared values escape the gate's domain check ----------------------------------

CODE_POLICY = POLICY.replace(
    'income = {{ type = "category", values = ["low", "high"] }}',
    'income = {{ type = "category", values = ["low", "high"] }}\ncode = {{ type = "int", values = [1, 2, 3] }}',
)


def test_gate_refuses_int_values_outside_the_declared_list(tmp_path: Path) -> None:
    """``code`` is an int column with declared values [1, 2, 3]; person 7's raw value is 999 (queries drop it:
    values outside the list never enter an answer). k-anonymity with ``--sensitive code`` publishes 999 as it
    is: the gate's domain check (``_out_of_domain``) compares declared values only for non-numeric columns and
    checks numbers only against lower/upper, which this column does not declare. "Categories among declared
    values" is a gate rule (docs/generators.md); the one person with 999 is singled out in their class."""
    from veil.errors import PublicationRefused

    frame = people(400)
    frame["code"] = np.random.default_rng(0).integers(1, 4, len(frame))
    frame.loc[7, "code"] = 999
    policy = _warehouse(tmp_path, frame, policy_text=CODE_POLICY)
    try:
        _publish(policy, "kanon", {"table": "people", "k": 5, "qi": ["age", "sex"], "sensitive": ["code"],
                                   "algorithm": "mondrian", "output": "p_k"})  # fmt: skip
    except PublicationRefused:
        return
    outside = _published(policy, "SELECT code, COUNT(*) FROM p_k WHERE code NOT IN (1, 2, 3) GROUP BY code")
    assert not outside, f"published values outside the declared [1, 2, 3]: {outside}"


# --- A9. Rank swapping publishes every raw value ---------------------------------------------------------------


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_rank_swapping_does_not_publish_one_persons_exact_outlier(tmp_path: Path) -> None:
    """Person 7's ``gain`` is 4999, everyone else's below 2976. Rank swapping (p = 10 %, above the gate's 5 %)
    only permutes values among ranks, so the published ``gain`` column is exactly the source's multiset: 4999
    is published as it is (the maximum is person 7's exact value), and so are the exact COUNT, SUM, quantiles
    and MAX that the query path sells only with noise. The gate accepts the column as "perturbed" because not
    every row equals its source row. Sound: a value held by one person (outside everyone else's range) is not
    published unchanged."""
    from veil.errors import PublicationRefused

    frame = people(400)
    frame.loc[7, "gain"] = 4999
    policy = _warehouse(tmp_path, frame)
    try:
        _publish(policy, "sdc", {"table": "people", "method": "rank_swapping", "params": ["p=10"],
                                 "columns": ["gain", "hours"], "output": "p_swap"})  # fmt: skip
    except PublicationRefused:
        return
    ((top, total, exact),) = _published(policy, "SELECT MAX(gain), SUM(gain), COUNT(*) FILTER (WHERE gain = 4999) FROM p_swap")
    assert exact == 0, (
        f"rank swapping published person 7's gain 4999 as it is (MAX = {top}; SUM = {total}, the source's is "
        f"{int(frame['gain'].sum())})"
    )


# --- A9b. k-anonymity ranges end on one person's exact value ---------------------------------------------------


@pytest.mark.parametrize("algorithm", ["mondrian", "oka", "kmember"])
def test_kanon_ranges_do_not_end_on_one_persons_exact_outlier(tmp_path: Path, algorithm: str) -> None:
    """Person 7's gain 4999 (everyone else ≤ 2975), ``gain`` a quasi-identifier, k = 5: every algorithm labels a
    class by its raw min and max, so one published label is "[2870, 4999]" (Mondrian, K-Member) or
    "[868, 4999]" or "[376, 4999]" (OKA, random): person 7's exact value and their presence, at ε = 0, under
    "generalised". Sound: range labels from data-independent cut points (declared bounds, hierarchies), never a
    value one person holds."""
    frame = people(400)
    frame.loc[7, "gain"] = 4999
    policy = _warehouse(tmp_path, frame)
    _publish(policy, "kanon", {"table": "people", "k": 5, "qi": ["gain", "age"], "sensitive": ["income"],
                               "algorithm": algorithm, "output": "p_k"})  # fmt: skip
    labels = _published(policy, "SELECT DISTINCT CAST(gain AS VARCHAR) FROM p_k WHERE CAST(gain AS VARCHAR) LIKE '%4999%'")
    assert not labels, f"{algorithm} published person 7's gain 4999 in a class label: {labels}"


# --- A10. k-anonymity with a trivial QI ---------------------------------------------------------------------


def test_kanon_with_a_trivial_qi_does_not_publish_the_raw_table(tmp_path: Path) -> None:
    """k = 5 on the quasi-identifier ``sex`` alone, every other declared column "sensitive": the gate checks k on
    the QIs (min class 179) and only reports ℓ-diversity, so the published table is the raw table minus names —
    400 of 400 rows are exact source tuples, each unique, i.e. every person's (age, hours, gain, job, income)
    is public at ε = 0 and singled out by any two of its values. Sound: a k-anonymous table's rows are not
    unique on its published columns (the sensitive values an attacker does not know are at most one column;
    every other column is a quasi-identifier in practice), e.g. k holds on all columns but any one sensitive
    column, or the publication is refused."""
    from veil.errors import PublicationRefused

    policy = _warehouse(tmp_path, people(400))
    try:
        _publish(policy, "kanon", {"table": "people", "k": 5, "qi": ["sex"],
                                   "sensitive": ["age", "hours", "gain", "job", "income"], "algorithm": "mondrian",
                                   "output": "p_k"})  # fmt: skip
    except PublicationRefused:
        return
    unique = "SELECT 1 FROM p_k GROUP BY sex, age, hours, gain, job, income HAVING COUNT(*) = 1"
    (singles,) = _published(policy, f"SELECT COUNT(*) FROM ({unique})")[0]
    total = _published(policy, "SELECT COUNT(*) FROM p_k")[0][0]
    assert singles == 0, f"{singles} of {total} published rows are unique on their columns (k = 5 on `sex` only)"


# --- A3. A table cap declared later ignores what was released before ----------------------------------------


@pytest.mark.slow
def test_table_cap_declared_later_counts_earlier_releases(tmp_path: Path) -> None:
    """No cap on ``people`` at first: carol (ε = 100) asks five queries at ε = 1 and the curator publishes kRR
    at ε = 2 — 7 released about these people. The curator then caps the table at ``epsilon_total = 3``. The
    cap is the total ε of everything released about the people in it (docs/policy.md), so carol's next query
    must be refused; today ``table:people`` starts at 0 when the cap appears and the query is answered."""
    from tests.publish_support import make_warehouse

    policy_path = make_warehouse(tmp_path)
    for i in range(5):
        q = veil("query", "--policy", policy_path, "--analyst", "carol", "--epsilon", "1", "--format", "json",
                 f"SELECT COUNT(*) FROM people WHERE age > {20 + i}")  # fmt: skip
        assert q.exit_code == 0, q.output
    pub = veil("publish", "krr", "--policy", policy_path, "--table", "people", "--columns", "sex", "--epsilon", "2",
               "--output", "p_krr")  # fmt: skip
    assert pub.exit_code == 0, pub.output
    text = policy_path.read_text(encoding="utf-8")
    policy_path.write_text(text.replace('privacy_unit = "row"\n', 'privacy_unit = "row"\nepsilon_total = 3.0\n', 1))
    after = veil("query", "--policy", policy_path, "--analyst", "carol", "--epsilon", "1", "--format", "json",
                 "SELECT COUNT(*) FROM people WHERE age > 60")  # fmt: skip
    assert after.exit_code != 0, (
        "a query was answered on `people` after 7 ε had been released about it and the table was capped at 3: "
        f"{after.stdout[:200]}"
    )


# --- A8. Spark: a recorded publication not yet committed exposes the raw table it replaces -----------------------

SPARK_ENGINE = '\n[engine]\nkind = "spark"\nmaster = "local[1]"\nwarehouse = "spark-warehouse"\n'


@pytest.mark.slow
def test_spark_publication_recorded_but_not_committed_never_exposes_the_old_table(tmp_path: Path) -> None:
    """Spark policy. The curator publishes kRR ``--output staff_raw --replace`` over an undeclared (so private)
    raw table holding names. The transaction records the release (``staff_raw`` is now a published table), then
    copies the staged table over the output — a Spark write of seconds — and a crash (SIGKILL, OOM, power)
    there leaves that state until the next publish/tables/retract runs recovery. Spark has no public mirror:
    published tables are read from the Spark database itself, so in that window (always, during every such
    publication; indefinitely after a crash) bob's ``SELECT * FROM staff_raw`` returns the raw rows with names
    at ε = 0. (On DuckDB the mirror holds only committed copies: tests/adversarial/test_publications.py.) The
    state is built with the transaction's own steps (stage, record), as the recovery test does."""
    import uuid

    from veil.engines.spark import spark_available
    from veil.policy import load_policy
    from veil.proxy.session import QuerySession
    from veil.store.ledger import Ledger
    from veil.store.warehouse import stage_publication, write_table

    reason = spark_available()
    if reason is not None:
        pytest.skip(f"Spark unavailable: {reason}")
    path = tmp_path / "policy.toml"
    path.write_text(POLICY.format(table_budget="") + SPARK_ENGINE, encoding="utf-8")
    policy = load_policy(path)
    raw = people(50)
    write_table(policy, "people", raw)
    write_table(policy, "staff_raw", raw)
    token = uuid.uuid4().hex[:16]
    stage_publication(policy, token, "staff_raw", raw[["sex"]].sample(frac=1.0).reset_index(drop=True))
    with Ledger.for_policy(policy) as led:
        led.record(kind="publication", method="krr", params={"publication_token": token}, metrics={}, table="staff_raw")
    session = QuerySession(policy, "bob")
    try:
        answer = session.execute("SELECT * FROM staff_raw")
    except Exception:  # refused (e.g. unknown until committed): sound
        return
    finally:
        session.close()
    columns = [c.name for c in answer.columns]
    assert "name" not in columns, f"bob read the raw table being replaced: columns {columns}, at ε = 0"


@pytest.mark.slow
def test_spark_published_table_is_never_overwritten_by_the_curator_api(tmp_path: Path) -> None:
    """A8b. Spark policy: kRR publishes ``p_krr`` (the real transaction). ``veil ingest`` refuses a published
    table, but the check lives in ``ingest_file``; the curator API ``write_table`` (``Warehouse.write``) replaces
    it with the raw frame, and as Spark's public tables are the Spark database itself, bob then reads the raw
    rows (names included) as the published table, at ε = 0. On DuckDB the same write changes only the
    warehouse copy (the mirror keeps the published one). Sound: a published table is never replaced by raw data
    (refused at the storage layer, as for ingest)."""
    from veil.engines.spark import spark_available
    from veil.errors import VeilError
    from veil.policy import load_policy
    from veil.proxy.session import QuerySession
    from veil.store.warehouse import write_table

    reason = spark_available()
    if reason is not None:
        pytest.skip(f"Spark unavailable: {reason}")
    path = tmp_path / "policy.toml"
    path.write_text(POLICY.format(table_budget="") + SPARK_ENGINE, encoding="utf-8")
    policy = load_policy(path)
    raw = people(50)
    write_table(policy, "people", raw)
    _publish(policy, "krr", {"table": "people", "columns": ["sex"], "epsilon": 1.0, "output": "p_krr"})
    try:
        write_table(policy, "p_krr", raw, replace=True)
    except VeilError:
        return
    session = QuerySession(policy, "bob")
    try:
        columns = [c.name for c in session.execute("SELECT * FROM p_krr").columns]
    finally:
        session.close()
    assert "name" not in columns, f"the published p_krr now holds raw rows, read by bob: columns {columns}"


# --- A11. PATE's --student-table reads any table, uncharged --------------------------------------------------

STAFF = """
[tables.staff]
privacy_unit = "row"
epsilon_total = 0.001
[tables.staff.columns]
age = { type = "int", lower = 17, upper = 90 }
hours = { type = "int", lower = 1, upper = 99 }
income = { type = "category", values = ["low", "high"] }
"""


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_pate_student_table_is_checked_and_charged_like_a_source(tmp_path: Path) -> None:
    """``staff`` is a private table capped at ε = 0.001. ``veil publish pate --table people --student-table staff
    --no-student-noise`` reads all 300 raw staff rows as the student's "public" records (``read_table`` with
    no ``_check_source``, no account), scores the validation accuracy on their true labels (0.66, recorded) and
    publishes a model trained on them; only ``table:people`` is charged. With ``--student-rho`` the records get
    local noise (ρ·Δ per record, 2 here) — still never charged to ``staff``'s 0.001. Any private or internal
    (``_veil_bounded_*``) table works the same. Sound: the student table is public (or refused), or its
    people's loss is charged to its cap."""
    from veil.errors import VeilError
    from veil.generators.pate import PateConfig

    policy_text = POLICY + STAFF.replace("{", "{{").replace("}", "}}")
    policy = _warehouse(tmp_path, people(400), policy_text=policy_text)
    from veil.store.warehouse import ingest_file

    staff_csv = tmp_path / "staff.csv"
    people(300, seed=5).to_csv(staff_csv, index=False)
    ingest_file(policy, "staff", staff_csv)
    config = PateConfig(teachers=5, queries=20, rho=None, student_epochs=5, threads=1)
    request = {"config": config, "table": "people", "label": "income", "features": ["age", "hours"], "validation": 50,
               "output_model": str(tmp_path / "student.pt"), "student_table": "staff"}  # fmt: skip
    try:
        _publish(policy, "pate", request)
    except VeilError:
        return
    charged = dict(_ledger_rows(tmp_path / "policy.toml", "SELECT account, epsilon_spent FROM accounts"))
    assert "table:staff" in charged, f"a model trained on the private table `staff` was published; charged: {charged}"


# --- A7. Login backoff: cleared by the attacker's own login, and shared by parallel attempts ----------------------


def _login(port: int, user: str, password: str, connect_timeout: int = 20) -> tuple[str, float]:
    """One login attempt: ("ok" | "bad password" | "other"), seconds until the server answered."""
    import psycopg

    t = time.perf_counter()
    dsn = f"host=127.0.0.1 port={port} user={user} password={password} dbname=veil sslmode=disable"
    dsn += f" connect_timeout={connect_timeout}"
    try:
        psycopg.connect(dsn).close()
        out = "ok"
    except psycopg.OperationalError as exc:
        out = "bad password" if "password authentication failed" in str(exc) else "other"
    return out, time.perf_counter() - t


@pytest.fixture
def two_logins(tmp_path: Path) -> Path:
    from tests.publish_support import make_warehouse
    from tests.support.attack import set_password

    policy = make_warehouse(tmp_path)
    set_password(policy, "bob")
    set_password(policy, "carol")
    return policy


def _serve(policy: Path) -> Any:
    from veil.policy import load_policy
    from veil.server.app import ServerThread, VeilServer
    from veil.server.limits import ServerLimits

    return ServerThread(VeilServer(load_policy(policy), limits=ServerLimits(auth_timeout=3)), port=0)


@pytest.mark.slow
def test_own_successful_login_does_not_reset_the_backoff_for_another_user(two_logins: Path) -> None:
    """bob (an analyst with a login) guesses carol's password, logging in as himself after each guess: "a
    successful login from the address clears it" (``LoginThrottle.succeeded``, keyed on the address only), so
    none of his guesses is ever slowed: 8 wrong guesses took 0.01–0.06 s each, where 8 in a row take 0.25,
    0.5, 1, … 16 s of backoff. Sound: bob's success does not clear the failures for carol (key the
    backoff on (address, user) as well as the address). Checked: carol's 4th wrong guess waits ≥ 0.4 s
    (0.5 s after 3 failures in a row)."""
    from tests.support.attack import PASSWORD

    with _serve(two_logins) as st:
        guesses = []
        for i in range(4):
            guesses.append(_login(st.port, "carol", f"guess-{i}-xyz"))
            assert _login(st.port, "bob", PASSWORD)[0] == "ok"
    assert [g[0] for g in guesses] == ["bad password"] * 4, guesses
    assert guesses[3][1] >= 0.4, f"carol's wrong guesses were answered after {[round(g[1], 2) for g in guesses]} s"


@pytest.mark.slow
def test_parallel_guesses_share_one_backoff_wait(two_logins: Path) -> None:
    """An outsider fails four times in a row (waits 0, 0, 0.25, 0.5 s), then opens 12 connections at once: each
    computes its wait from the same (count, last failure) before any of them fails, so all 12 passwords are
    checked after one 1 s wait (measured: 12 answers in 1.1 s), where 12 failures in a row cost 1 + 2 + … + 30
    s. With ``--max-connections`` 100 that is ~100 guesses per 30 s at the cap instead of one. Sound: at most
    the first parallel attempt is answered within the current wait (the others wait their turn, or are refused
    without checking a password). Auth timeout 3 s bounds the test, and the clients' connect timeout of 8 s
    (20 s, the default of ``_login``, made this test take 21 s in two of four runs: an attempt that is not
    answered counts as "other", never as a fast answer, so a shorter wait for it proves the same)."""
    import threading

    with _serve(two_logins) as st:
        first = [_login(st.port, "carol", f"seq-{i}-xyz") for i in range(4)]
        results: list[tuple[str, float]] = [("other", 0.0)] * 12

        def go(i: int) -> None:
            results[i] = _login(st.port, "carol", f"par-{i}-xyz", connect_timeout=8)

        threads = [threading.Thread(target=go, args=(i,)) for i in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert [f[0] for f in first] == ["bad password"] * 4, first
    checked_fast = [round(t, 2) for out, t in results if out == "bad password" and t < 1.8]
    assert len(checked_fast) <= 2, f"{len(checked_fast)} of 12 parallel guesses were checked within 1.8 s: {checked_fast}"


# ==================================================================================================
# Part B — probes that held (keep them pinned)
# ==================================================================================================

# --- B1. Concurrent spending of one analyst's last budget, from separate processes ----------------------------

_RACER = """
import sys
from veil.errors import BudgetExhausted
from veil.policy import load_policy
from veil.proxy.session import QuerySession
policy, i = sys.argv[1], int(sys.argv[2])
s = QuerySession(load_policy(policy), "bob")
s.explain("SELECT COUNT(*) FROM people")  # warm: plan, bounded copy, ledger open
print("READY", flush=True)
sys.stdin.readline()  # the barrier: every racer is warm and blocked here until the test says go to all at once
try:
    s.execute(f"SELECT COUNT(*) FROM people WHERE age > {20 + i}", epsilon=0.5)
    print("ok")
except BudgetExhausted:
    print("refused")
s.close()
"""


def _ledger_rows(policy: Path, sql: str) -> list[tuple[Any, ...]]:
    import sqlite3

    con = sqlite3.connect(policy.parent / "ledger.sqlite")
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


@pytest.mark.slow
def test_concurrent_processes_never_overspend_the_last_budget(tmp_path: Path) -> None:
    """bob has ε = 2; six processes ask six different ε = 0.5 queries at the same instant (each session warmed
    first). Held: exactly four answers, two refusals, ``analyst:bob`` spent exactly 2 (BEGIN IMMEDIATE)."""
    import os
    import subprocess
    import sys

    from tests.publish_support import make_warehouse

    policy = make_warehouse(tmp_path)
    script = tmp_path / "racer.py"
    script.write_text(_RACER, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]), "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, str(script), str(policy), str(i)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=env) for i in range(6)]  # fmt: skip
    try:
        for p in procs:  # a barrier, not a clock: each racer is warm and waits on its stdin
            assert p.stdout is not None and p.stdout.readline().strip() == "READY"
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
        for p in procs:
            assert p.stdin is not None
            p.stdin.flush()
        outcomes = sorted(p.communicate(timeout=120)[0].strip() for p in procs)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    spent = _ledger_rows(policy, "SELECT epsilon_spent FROM accounts WHERE account = 'analyst:bob'")
    assert outcomes == ["ok"] * 4 + ["refused"] * 2 and spent == [("2",)], (outcomes, spent)


# --- B2. A process killed between reservation and release keeps the charge -------------------------------------

_KILLED_MID_QUERY = """
import sys, time
from veil.engines import duckdb as eng
from veil.policy import load_policy
from veil.proxy.session import QuerySession
from veil.store import ledger
reserved = []
orig_reserve, orig_run = ledger.Ledger.reserve, eng.DuckDBEngine._run
def reserve(self, *a, **k):
    r = orig_reserve(self, *a, **k)
    reserved.append(r)
    return r
def run(self, sql):
    if reserved:
        print("READY", flush=True)
        time.sleep(120)
    return orig_run(self, sql)
ledger.Ledger.reserve, eng.DuckDBEngine._run = reserve, run
s = QuerySession(load_policy(sys.argv[1]), "bob")
s.execute("SELECT COUNT(*) FROM people WHERE age > 40", epsilon=0.5)
"""


@pytest.mark.slow
def test_a_query_killed_after_its_reservation_stays_charged(tmp_path: Path) -> None:
    """The engine is reading the bounded copy when the analyst's process is SIGKILLed (their own Python API
    process: they could kill it on seeing it run long, a data-dependent signal). Held: the reservation stays
    ``reserved`` and ``analyst:bob`` keeps the 0.5 (docs/ledger.md)."""
    import os
    import signal
    import subprocess
    import sys

    from tests.publish_support import make_warehouse

    policy = make_warehouse(tmp_path)
    script = tmp_path / "killed.py"
    script.write_text(_KILLED_MID_QUERY, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, str(script), str(policy)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "READY", "the query never reached the engine"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
        if proc.stdout is not None:
            proc.stdout.close()
    rows = _ledger_rows(policy, "SELECT status, epsilon FROM reservations")
    spent = _ledger_rows(policy, "SELECT epsilon_spent FROM accounts WHERE account = 'analyst:bob'")
    assert rows == [("reserved", "1/2")] and spent == [("1/2",)], (rows, spent)


# --- B3. Wire: catalog probes reveal no data or other analysts; bound parameters are charged per value --------

CATALOG_PROBES = {
    "SELECT * FROM veil.budget WHERE analyst = 'carol'": [],
    "SELECT usename FROM pg_user": [],
    "SELECT * FROM pg_authid": [],
    "SELECT * FROM pg_shadow": [],
    "SELECT * FROM pg_stat_activity": [],
    "SELECT * FROM pg_stats": [],
    "SELECT * FROM pg_stat_user_tables": [],
    "SELECT relname, reltuples, relpages FROM pg_class WHERE relname = 'people'": [("people", -1, 0)],
}


@pytest.mark.slow
def test_wire_catalog_and_bound_parameters(two_logins: Path) -> None:
    """Held: other analysts' budgets, logins, activity, statistics and row counts are not in the catalog; a
    prepared statement is charged once per distinct parameter value and answered from the cache on a repeat."""
    import psycopg

    from tests.support.attack import PASSWORD

    with _serve(two_logins) as st:
        dsn = f"host=127.0.0.1 port={st.port} user=bob password={PASSWORD} dbname=veil sslmode=disable"
        with psycopg.connect(dsn, autocommit=True) as con:
            seen = {sql: [tuple(r) for r in con.execute(sql).fetchall()] for sql in CATALOG_PROBES}
            con.execute("SET veil.epsilon = 0.1")
            spent, answers = [], []
            for v in (30, 60, 30):
                answers.append(con.execute("SELECT COUNT(*) FROM people WHERE age > %s", (v,), prepare=True).fetchall())
                spent.append(con.execute("SELECT spent FROM veil.budget").fetchall()[0][0])
    assert seen == CATALOG_PROBES, seen
    assert spent == pytest.approx([0.1, 0.2, 0.2]) and answers[0] == answers[2], (spent, answers)
