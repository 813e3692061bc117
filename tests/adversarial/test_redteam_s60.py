"""Red team, session 60: the publication gate across sources and the exact multiset a filter keeps; ``veil serve``
with real clients (main at a93a6bc, 2026-11-28).

Each test in part A FAILS on main at a93a6bc (nothing is marked xfail: the lead fixes the code and the test turns
green). Publications go through the curator's real transaction (``veil.generators.transaction.publish``, what ``veil
publish`` calls); what an analyst reads is asked through ``veil.connect`` (public tables: exact, ε = 0).

Findings:

* F1 (MEDIUM, careless curator — every analyst reads the result at ε = 0; s51 A5's class through a second source)
  ``check_linkage`` compares a publication with the live publications *of the same source table* only
  (``release.params["source_table"] != plan.source: continue``). A warehouse commonly holds the same people in two
  tables (a yearly snapshot ``people_2025`` beside ``people``, a copy re-ingested under another name, another
  export of the same register). ``kanon --table people --qi age --sensitive gain`` and then
  ``kanon --table people_2025 --qi sex,job --sensitive gain`` (k = 5 each) both land, and ``p1 JOIN p2 USING (gain)``
  gives every row both tables' QIs: knowing a person's age, sex and job singled out the exact gain of 13 of 60 people
  (60 people, distinct gains, a conservative matcher). The same holds with the shared column renamed in the second
  source (``capital_gain``: the analyst joins ``p1.gain = p2.capital_gain``), which no name-keyed rule can see.
  Suggested class-level fix: the linkage rule must not key on the source's name. Either make it policy-wide (a column
  published value by value — a ``--sensitive`` column or a quasi-identifier — may be published value by value by no
  other live publication *of any source*, or of any source the policy declares to share its people: the same
  ``privacy_unit`` column, or an explicit ``[tables.x] same_people_as = [...]`` the publish refuses to guess), or
  better, publish a sensitive column value by value at most once per policy and make every later publication of a
  column *with the same values* (checked on the data: a sensitive column whose value multiset equals a live
  publication's) pass the gate's k/ℓ check on the union of both tables' QIs.
  The same root in the ledger (no test: by design today): each table is its own account, so ``veil publish krr``
  of ``people`` and of ``people_2025`` at a cap of ε = 2 each composes to 4 on the same people.

* F2 (HIGH for an outlier-free but *unique* value; the s16 A9 class, interior values; every analyst at ε = 0)
  ``sdc rank_swapping`` publishes each protected column's exact multiset of source values (values are only moved
  between rows); the s16 A9 fix top- and bottom-codes the 4 smallest and largest values, so an *interior* value that
  one person alone holds is still published as it is: gains recorded in hundreds (0 … 3,000) and person 7's 1,234
  — ``SELECT COUNT(*) FROM pub WHERE gain = 1234`` is 1 with person 7 in the source and 0 without (presence and exact
  value of one person, deterministic; the gate's per-row "unchanged" check passes because the value moved rows).
  Suggested class-level fix: a non-DP filter whose output values are source values (rank swapping, and any future
  permutation/"swap" filter) must not publish a value that fewer than k source rows hold — recode it (to the mean of
  its rank window, as the top/bottom coding does for the extremes) — and the gate should check it on the output
  for every ``perturbed`` column of a non-DP publication: every published value that equals a source value must be
  held by at least k source rows (``MIN_GROUP``), whatever its rank.

  Variants, same property (a value one person alone holds is public exactly when that person is in the source):
  F2b ``kanon --sensitive gain`` with ``gain`` declared ``[0, 5000]`` — the s42 A1 fix (``require_declared_domains``,
  whose docstring states this very property) demands a *declared* domain, and a bounded int is one of 5,001 values,
  an open domain in effect: person 7's 1,234 is published (1 vs 0). F2c ``sdc noise_addition`` at a = 0.3 (3× the
  gate's ``MIN_NOISE_A``): σ = a × the column's std (≈ 1.6 for hours 35–45) and the int column rounds it away for
  ~80 % of rows (under the gate's 0.9 per-row cap), so person 7's lone 50 hours is published as 50 in 7 of 10
  unseeded runs (seeded in the witness); without person 7 nothing published reaches 46 — presence and exact value.
  For F2b/F2c: the gate (non-DP publications) should refuse — or the method recode — any published value of a
  value-by-value or perturbed column that equals a source value fewer than k source rows hold; a bounded numeric
  sensitive column should need a declared small ``values`` set (or be generalised like a QI).

* F3 (LOW–MEDIUM, a free deterministic bit on one person visible to every analyst as "the DP table exists or not";
  s53 B3b's class, a type the fix missed) a DP publication (kRR, DP grid) reads every column of its source and
  DuckDB's DataFrame conversion raises on one person's huge INTERVAL in an *undeclared* column: refused free, untyped
  (``ConversionException``, a traceback at the CLI), in one world, published in its neighbour. See the test.

What held (tried, no witness; part B keeps two of them): a rollback never refunds an answer the client saw (B1);
8–12 sessions of one analyst racing the last ε — exactly one answered, the others VB001, spent = the budget (B2);
8 sessions sending one identical new query at once — every fresh noisy answer charged (7 charges, ≤ 7 distinct
values), no averaging for one charge; one Parse with several Bind/Execute (psycopg ``prepare=True``, executemany,
pipeline mode) — identical parameters are cache hits, different spellings (``30`` vs ``30.0`` vs ``'030'``) are
charged as new queries; ``COPY … TO STDOUT`` (table and query) refused 42501, free; ``SET ROLE``/``SET SESSION
AUTHORIZATION`` are no-ops and ``veil.analyst`` is unknown (42704): bob's queries stay on bob's budget; a declared
cursor fetched after ``veil retract`` hands out only the answer computed before it, and new statements get 42P01.
Publications: kRR's charge m·ε + min(ε, 2.94) is exact and a table cap refuses the overspend before anything is
read; a private name declared later over a published one stays private (policy wins) and ``veil ingest`` refuses
to write over a published table; ``veil retract`` stops the Python API session at once; out-of-bounds numeric QIs
(age 999, −5) never appear in k-anonymous labels (open ends are ±inf); PATE's sidecar states no private count and
charges the data-independent bound; DP grid microaggregation refuses nothing on the source's size (min_rows 0);
the analyst query path on a table with a huge undeclared INTERVAL answers in both worlds (only the publication's
whole-table read fails, F3).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

_POLICY = """\
[database]
path = "warehouse.duckdb"
[ledger]
path = "ledger.sqlite"

[tables.people]
privacy_unit = "row"
[tables.people.columns]
age = {{ type = "int", lower = 17, upper = 90 }}
sex = {{ type = "category", values = ["F", "M"] }}
job = {{ type = "category", values = ["a", "b", "c"] }}
gain = {{ type = "int", lower = 0, upper = 5000 }}

[tables.people_2025]
privacy_unit = "row"
[tables.people_2025.columns]
age = {{ type = "int", lower = 17, upper = 90 }}
sex = {{ type = "category", values = ["F", "M"] }}
job = {{ type = "category", values = ["a", "b", "c"] }}
{gain2} = {{ type = "int", lower = 0, upper = 5000 }}

[analysts.bob]
epsilon = 2.0
"""


def _people(n: int = 60) -> pd.DataFrame:
    rng = np.random.default_rng(51)
    return pd.DataFrame(
        {
            "age": rng.integers(20, 60, n),
            "sex": rng.choice(["F", "M"], n),
            "job": rng.choice(["a", "b", "c"], n),
            "gain": rng.choice(5000, n, replace=False),
        }
    )


def _world(base: Path, gain2: str = "gain") -> tuple[Path, pd.DataFrame]:
    """``people`` and ``people_2025``: the same 60 people in two tables (``gain`` named ``gain2`` in the second)."""
    from veil.policy import load_policy
    from veil.store.warehouse import write_table

    base.mkdir(parents=True, exist_ok=True)
    path = base / "policy.toml"
    path.write_text(_POLICY.format(gain2=gain2), encoding="utf-8")
    policy = load_policy(path)
    frame = _people()
    write_table(policy, "people", frame)
    write_table(policy, "people_2025", frame.rename(columns={"gain": gain2}))
    return path, frame


def _analyst(policy: Path, sql: str) -> pd.DataFrame:
    import veil as veil_api

    with veil_api.connect(policy, analyst="bob") as db:
        return db.sql(sql)


def _in_label(label: Any, value: int) -> bool:
    """Whether a generalised numeric label (``[26, 30]``, ``[55, inf)``, ``(-inf, 23]`` or ``42``) holds ``value``."""
    s = str(label).strip()
    if s[:1] in "[(" and "," in s:
        lo, hi = (t.strip() for t in s[1:-1].split(","))
        return float(lo) <= value <= float(hi)
    try:
        return float(s) == value
    except ValueError:
        return s == "*"


def _singled_out(joined: pd.DataFrame, frame: pd.DataFrame, gain: str) -> int:
    """People whose age, sex and job (what an attacker knows) match exactly one joined row, holding their gain."""
    hits = 0
    for row in frame.itertuples(index=False):
        rows = zip(joined.age, joined.sex, joined.job, strict=True)
        match = joined[[_in_label(a, row.age) and s == row.sex and j == row.job for a, s, j in rows]]
        if len(match) == 1 and int(match[gain].iloc[0]) == int(row.gain):
            hits += 1
    return hits


# ==================================================================================================
# A. Findings (fail on main)
# ==================================================================================================


@pytest.mark.parametrize("gain2", ["gain", "capital_gain"], ids=["same_name", "renamed"])
def test_f1_a_sensitive_column_of_the_same_people_is_not_published_twice_through_two_sources(tmp_path: Path, gain2: str) -> None:
    """F1: the same people in ``people`` and ``people_2025``; ``gain`` published value by value (``--sensitive``) from
    each, with different QIs. Property: no analyst, at ε = 0, singles out one person's exact sensitive value below k
    by joining two live k-anonymous publications (the s51 A5 property, which ``check_linkage`` enforces only within one
    source). On main both publications land and the join singles out 13 of 60 people."""
    from veil.errors import PublicationRefused
    from veil.generators.transaction import publish
    from veil.policy import load_policy

    path, frame = _world(tmp_path, gain2)
    policy = load_policy(path)
    first = {"table": "people", "algorithm": "mondrian", "k": 5, "qi": ["age"], "sensitive": ["gain"], "output": "p1"}
    second = {"table": "people_2025", "algorithm": "mondrian", "k": 5, "qi": ["sex", "job"], "sensitive": [gain2]}
    try:
        # (since the F2 fix the first is refused already: every gain is one person's; the linkage rule itself is tested
        # on values k people share in tests/test_publish_linkage_sources.py)
        publish(policy, "kanon", first, progress=False)
        publish(policy, "kanon", {**second, "output": "p2"}, progress=False)
    except PublicationRefused:
        return  # the class-level fix: refused before anything is read or charged
    joined = _analyst(path, f"SELECT p1.age, p2.sex, p2.job, p1.gain FROM p1 JOIN p2 ON p1.gain = p2.{gain2}")
    singled = _singled_out(joined, frame, "gain")
    assert singled == 0, (
        f"two k = 5 publications of the same people from two source tables, joined on their value-by-value column, "
        f"single out the exact gain of {singled} of {len(frame)} people (attacker knows age, sex, job)"
    )


def _published_count_of_1234(base: Path, kind: str, request: dict[str, Any], *, target_present: bool) -> int | None:
    """Publish ``people`` (gains in hundreds; person 7's 1,234 when present) as ``pub``; ``COUNT(*) WHERE gain = 1234``
    (None: the gate refused the publication, typed, and nothing was published)."""
    from veil.errors import PublicationRefused
    from veil.generators.transaction import publish
    from veil.policy import load_policy
    from veil.store.warehouse import write_table

    base.mkdir(parents=True, exist_ok=True)
    path = base / "policy.toml"
    text = _POLICY.format(gain2="gain").split("[tables.people_2025]")[0] + "[analysts.bob]\nepsilon = 2.0\n"
    path.write_text(text, encoding="utf-8")
    policy = load_policy(path)
    rng = np.random.default_rng(60)
    n = 200
    frame = pd.DataFrame(
        {
            "age": rng.integers(20, 60, n),
            "sex": rng.choice(["F", "M"], n),
            "job": rng.choice(["a", "b", "c"], n),
            "gain": rng.integers(0, 31, n) * 100,  # gains recorded in hundreds
        }
    )
    if target_present:
        frame.loc[7, "gain"] = 1234  # person 7's gain: interior, held by nobody else
    write_table(policy, "people", frame)
    try:
        publish(policy, kind, {"table": "people", "output": "pub", **request}, progress=False)
    except PublicationRefused:
        return None
    return int(_analyst(path, "SELECT COUNT(*) AS n FROM pub WHERE gain = 1234")["n"].iloc[0])


RANK_SWAP = {"method": "rank_swapping", "columns": ["age", "gain"], "params": ["p=10"]}
KANON = {"algorithm": "mondrian", "k": 5, "qi": ["age", "sex"], "sensitive": ["gain"]}


def test_f2_a_rank_swapping_never_publishes_a_value_one_person_alone_holds(tmp_path: Path) -> None:
    """F2: rank swapping's output is the source multiset (bar the 4 coded extremes). Property: a non-DP filter never
    publishes, as it is, a value that fewer than k (here: one) source rows hold — neighbouring sources (person 7's
    unique interior gain 1,234, or no person 7) must not be told apart by an exact count of the public table at
    ε = 0. On main the count is 1 vs 0."""
    with_target = _published_count_of_1234(tmp_path / "d", "sdc", RANK_SWAP, target_present=True)
    without = _published_count_of_1234(tmp_path / "d_prime", "sdc", RANK_SWAP, target_present=False)
    assert with_target == without == 0, (
        f"rank_swapping published person 7's unique gain 1234 as it is: COUNT(*) WHERE gain = 1234 on the public table "
        f"is {with_target} with person 7, {without} without"
    )


def test_f2_b_a_bounded_sensitive_column_never_publishes_a_value_one_person_alone_holds(tmp_path: Path) -> None:
    """F2b: the property ``columns.require_declared_domains`` states for value-by-value columns ("a value one person
    alone holds … would be public exactly when that person is in the table") is enforced by demanding a *declared*
    domain, but a bounded int (``gain`` in [0, 5000]) is a declared domain of 5,001 values: ``kanon --sensitive gain``
    publishes person 7's unique 1,234 (count 1 vs 0 at ε = 0), whatever k is."""
    with_target = _published_count_of_1234(tmp_path / "d", "kanon", KANON, target_present=True)
    without = _published_count_of_1234(tmp_path / "d_prime", "kanon", KANON, target_present=False)
    # the fix: the gate refuses (typed, nothing published) a sensitive value fewer than k source rows hold
    assert with_target in (None, 0) and without in (None, 0), (
        f"kanon --sensitive gain published person 7's unique gain 1234 as it is: COUNT(*) WHERE gain = 1234 is "
        f"{with_target} with person 7, {without} without"
    )


_HOURS_POLICY = """\
[database]
path = "warehouse.duckdb"
[ledger]
path = "ledger.sqlite"

[tables.people]
privacy_unit = "row"
[tables.people.columns]
age = { type = "int", lower = 17, upper = 90 }
hours = { type = "int", lower = 1, upper = 99 }

[analysts.bob]
epsilon = 2.0
"""


def _noise_added_max(base: Path, *, target_present: bool) -> tuple[int, int]:
    """``noise_addition`` at a = 0.3 (3× the gate's minimum) of hours 35–45, person 7's 50 when present (within the
    declared [1, 99]); the published maximum and ``COUNT(*) WHERE hours = 50`` as an analyst reads them ((0, 0): the
    gate refused it, typed, nothing public)."""
    from veil.errors import PublicationRefused
    from veil.generators.randomness import reproducible_for_tests
    from veil.generators.transaction import publish
    from veil.policy import load_policy
    from veil.store.warehouse import write_table

    base.mkdir(parents=True, exist_ok=True)
    path = base / "policy.toml"
    path.write_text(_HOURS_POLICY, encoding="utf-8")
    policy = load_policy(path)
    rng = np.random.default_rng(0)
    n = 300
    frame = pd.DataFrame({"age": rng.integers(20, 60, n), "hours": np.clip(np.round(rng.normal(40, 1.5, n)), 35, 45).astype(int)})
    if target_present:
        frame.loc[7, "hours"] = 50
    write_table(policy, "people", frame)
    request = {"table": "people", "method": "noise_addition", "columns": ["age", "hours"], "params": ["a=0.3"]}
    try:
        with reproducible_for_tests(1):  # the same draws for D and D′ (the internal test path, s66 F1)
            publish(policy, "sdc", {**request, "output": "pub"}, progress=False)
    except PublicationRefused:
        return 0, 0
    row = _analyst(path, "SELECT MAX(hours) AS m, COUNT(*) FILTER (WHERE hours = 50) AS n FROM pub").iloc[0]
    return int(row["m"]), int(row["n"])


def test_f2_c_noise_addition_never_publishes_a_value_one_person_alone_holds(tmp_path: Path) -> None:
    """F2c: noise addition's σ is a × the column's standard deviation, and an int column rounds it: with a = 0.3 on a
    column of std ≈ 1.6 the noise is below ½ for ~80 % of rows (under the gate's 0.9 cap), so person 7's lone 50 is
    published as 50 (7 of 10 unseeded runs; here seeded), while without person 7 nothing reaches 46. Property as F2.

    (pubgate: the property asserted as the count of 50s, in both worlds. The first version asserted the published
    maximum below 50, a proxy: noise addition now redraws a noisy value that rounds to a value fewer than 5 source rows
    hold, so 50 is never published, but the maximum can be 49 or 51 — an outlier's presence still shows in noise
    addition's maximum, the known s16 A9 limitation of the method, which no rare-value rule removes.)"""
    (with_max, with_target), (without_max, without) = (
        _noise_added_max(tmp_path / "d", target_present=True),
        _noise_added_max(tmp_path / "d_prime", target_present=False),
    )
    assert with_target == without == 0, (
        f"noise_addition published person 7's lone hours 50 as it is ({with_target} rows of 50 with person 7, "
        f"{without} without; published max {with_max} vs {without_max})"
    )


def _dp_publication_outcome(base: Path, kind: str, request: dict[str, Any], tenure: str) -> str:
    """``people`` as another tool wrote it: the declared columns plus an undeclared INTERVAL ``tenure``, person 7's
    being ``tenure``; how a DP publication of a *declared* column ends."""
    from tests.publish_support import POLICY, people
    from veil.generators.transaction import publish
    from veil.policy import load_policy
    from veil.store.warehouse import writer

    base.mkdir(parents=True, exist_ok=True)
    path = base / "policy.toml"
    path.write_text(POLICY.format(table_budget=""), encoding="utf-8")
    policy = load_policy(path)
    with writer(policy) as con:
        con.register("incoming", people(60))
        con.execute(
            f"CREATE TABLE people AS SELECT *, CASE WHEN name = 'person00007' THEN {tenure} ELSE INTERVAL '1 month' END "
            "AS tenure FROM incoming"
        )
    try:
        publish(policy, kind, {"table": "people", "output": "pub", **request}, progress=False)
    except Exception as exc:  # the outcome, whatever it is
        return f"{type(exc).__name__}"
    return "published"


@pytest.mark.parametrize(
    ("kind", "request_"),
    [
        ("krr", {"columns": ["sex"], "epsilon": 1.0}),
        ("sdc", {"method": "dp_microagg_laplace", "columns": ["age"], "params": ["epsilon=1"]}),
    ],
    ids=["krr", "dp_grid"],
)
def test_f3_a_dp_publication_ends_the_same_way_whatever_one_persons_undeclared_interval(
    tmp_path: Path, kind: str, request_: dict[str, Any]
) -> None:
    """F3 (LOW–MEDIUM; s53 B3b's class through a type its fix missed): a DP publication reads *every* column of its
    source (``Plan.columns`` is None for kRR and SDC, so ``_read_source`` → ``read_table`` selects them all), and
    ``within_python_dates`` guards only DATE/TIMESTAMP columns; DuckDB's DataFrame conversion of an INTERVAL raises on
    one value (``INTERVAL '178000000 years'``: "Could not convert Month to Microseconds"; also days beyond ~10⁸). So
    ``veil publish krr --columns sex`` (or the DP grid of ``age``) ends in an untyped ``ConversionException``, free,
    before the charge, when person 7's undeclared ``tenure`` is huge, and publishes when it is one month: whether a
    DP table appears (every analyst sees it) depends on one person's value of a column it does not even publish.
    Fix by construction: a publication reads only the columns it uses (``Plan.columns`` always set: the published,
    QI, label and target columns), and ``read_table(python_dates=True)`` reads every non-date column Python may fail
    to hold (INTERVAL, TIMETZ, nested types) through a total cast (``TRY_CAST … AS VARCHAR`` or NULL) too."""
    odd = _dp_publication_outcome(tmp_path / "d", kind, request_, "INTERVAL '178000000 years'")
    plain = _dp_publication_outcome(tmp_path / "d_prime", kind, request_, "INTERVAL '2 months'")
    assert odd == plain, f"one person's undeclared tenure decided the DP publication's outcome: {odd} vs {plain}"


# ==================================================================================================
# B. Held (pass on main; fail if the defence breaks)
# ==================================================================================================


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[int]:
    from tests.support.server import build_policy, running_server

    policy = build_policy(tmp_path_factory.mktemp("s60_serve"), request.getfixturevalue("shared_data"), rows=300)
    with running_server(policy) as st:
        yield st.port  # type: ignore[attr-defined]


def _remaining(conn: Any) -> float:
    return float(conn.execute("SELECT remaining FROM veil.budget").fetchone()[0])


def test_b1_rollback_does_not_refund_an_answer_the_client_saw(served: int) -> None:
    psycopg = pytest.importorskip("psycopg")
    from tests.support.server import BOB_PASSWORD, dsn

    with psycopg.connect(dsn(served, user="bob", password=BOB_PASSWORD), autocommit=True) as watch:
        before = _remaining(watch)
        with psycopg.connect(dsn(served, user="bob", password=BOB_PASSWORD)) as tx:
            tx.execute("SELECT COUNT(*) FROM adult WHERE age > 40").fetchall()
            tx.rollback()
        assert _remaining(watch) == pytest.approx(before - 0.5)


def test_b2_sessions_of_one_analyst_racing_the_last_epsilon_get_one_answer(served: int) -> None:
    psycopg = pytest.importorskip("psycopg")
    from tests.support.server import dsn

    with psycopg.connect(dsn(served), autocommit=True) as watch:
        i = 0
        while _remaining(watch) > 0.75:
            i += 1
            watch.execute(f"SELECT COUNT(*) FROM adult WHERE age > {i}").fetchall()
        n, answered = 8, []
        gate = threading.Barrier(n)

        def ask(k: int) -> None:
            with psycopg.connect(dsn(served), autocommit=True) as c:
                gate.wait()
                try:
                    c.execute(f"SELECT COUNT(*) FROM adult WHERE hours_per_week > {k}").fetchall()
                    answered.append(k)
                except psycopg.Error as exc:
                    assert exc.sqlstate == "VB001", exc

        threads = [threading.Thread(target=ask, args=(k,)) for k in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(answered) == 1
        assert _remaining(watch) == pytest.approx(0.0)
