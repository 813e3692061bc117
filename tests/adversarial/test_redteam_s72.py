"""Red team s72 (session 23, the publication gate and the ledger): witnesses, each a strict xfail until fixed
(F1-F3 fixed in session 23: ``veil.metrics.dcr``'s best-match scores, the view without the grouped columns and the
2×2 odds-ratio tolerance; their witnesses now pass).

Target: session 22's distance-to-closest-record gate (``veil.metrics.dcr.dcr_check``: every synthetic row, k-d trees,
k-th neighbours k = 1, 2, 4, 8, agreement sets of all columns but 1-3, the rare-copy test), which decides whether a
synthetic table (``veil publish synth``, the SDC GAN, ML copies) becomes public with no DP guarantee. Each witness
calls ``dcr_check`` exactly as ``veil.generators.gate.verify`` does, on a table a memorising generator would emit (a
copy of each training row with a few values moved) beside rows of other people (what a generator that learned the
population without memorising emits), split 80/20 as the synthetic kinds split (``transaction._split``).

Every finding is deterministic (fixed seeds; no randomness decides a verdict: no false failures).

* F1 (HIGH) a many-valued category is an exact-match *group key* of the near-record distances
  (``dcr._source_nearest``: categorical columns past 16 one-hot coordinates go into ``_group_codes``; a source row
  whose group no synthetic row shares is at distance ∞, ``found > within → inf``). Each one-column-discounted view
  drops one column from the key, so a near copy with **two** grouped categories moved is at ∞ in *every* view,
  however near it is otherwise (the Gower distance counts a category mismatch as 1, not ∞). Two more moved values put
  it beyond the agreement sets (``_most_moved``: at most 3 columns), and nothing else looks at it.
  Measured: a 2,000-row world (age, income, hours; city, job, school of 20 values each): every one of the 1,600
  training rows copied with city and job shifted and income, hours + 1, among 10,000 rows, passes (3 of 3 seeds,
  best near tails 2.5e-4, 1.8e-3, 9.1e-2); with only income + 1 (three moved: within the agreement sets) it passes
  too (3 of 3, tails 3.7e-14, 1.4e-15, 7.0e-10: the agreement set holds ~95 % of the holdout by chance, F3).
  On Adult (5,000 rows, 10,000 synthetic, the default size): all 4,000 training rows with
  ``workclass`` and ``relationship`` moved to the next category and ``fnlwgt``, ``hours_per_week`` + 1 pass (2 of 2
  seeds), also with all six numbers + 1. Leak: an attacker who knows a person's age, education, race, sex, country,
  marital status and occupation and finds one synthetic row with them reads the person's exact capital gain, capital
  loss and income for 1,987 of the 4,000 training people (49.7 %), against 10.3 % of the 1,000 holdout people from the
  same table (the honest table alone: 9.1 %), and ``fnlwgt`` to one unit (a near-unique census weight).
* F2 (HIGH) the agreement sets stop at three moved columns: on Adult, copies of every training row with **four** or
  five columns redrawn at random (``fnlwgt``, ``hours_per_week``, ``capital_loss``, ``workclass`` [, ``relationship``])
  pass at the default 10,000 rows (2 of 2 seeds each; near tails 2.7e-10 — share 0.817, under F3's cap 0.830 — and
  4.7e-4 against 10⁻⁶ over ~470 sets): 10-11 of 15
  attributes exact for 4,000 people — age, education, marital status, occupation, race, sex, capital gain, country and
  income; the same unique-QI read-off (seven quasi-identifiers, one synthetic row holding them) gives exact (capital
  gain, income, relationship) for 1,987 of 4,000 members (49.7 %) against 7.2 % of non-members (honest table: 6.5 %).
  s69 F5 (two redrawn) was fixed by the agreement sets; the class ("a copy with a few values
  redrawn, however far") is not bounded by 3.
* F3 (HIGH) a set that chance fills cannot be refused, however strong its evidence: the tolerance (training odds 1.22
  times p's: at p = 0.8 a share of 0.83) is a bound on the *set's* training share, and a set that a share ``h`` of the
  holdout rows enters by chance holds at most odds ``1/h`` times p's — at ``h`` ≥ 0.82 nothing can be refused. On
  Adult the three-column agreement set holds ~82 % of the holdout at 10,000 rows, 87 % at 16,000 and 89 % at 20,000
  (it grows with the curator's ``rows``): copies of
  every one of the 4,000 training rows with only ``workclass``, ``relationship`` and ``sex`` moved (12 of 15 attributes
  exact, ``fnlwgt`` included) among 16,000 or 20,000 rows pass, 3 of 3 seeds each, with near tails 9e-83 to 1e-106
  (the report's own ``near_tail``, e.g. 6.4e-94 at share 0.821 < limit 0.830). At 10,000 rows the same copies are
  refused only by a hair (share 0.831-0.833 against 0.830), and one seed passes (tail 2.8e-130). Leak (16,000 rows): a
  synthetic row alone holding a person's age, education, race, country, marital status and occupation gives their
  exact capital gain, capital loss, income, hours and ``fnlwgt`` for 1,470 of the 4,000 members (36.7 %), against 1 of
  the 1,000 non-members (0.1 %; the honest rows alone: 0.1 %). A refusal should
  follow from the excess of training rows (hits − p·|D|, or the 2×2 odds ratio of training against holdout rows in
  and out of ``D``), not from a share that chance can cap.

* F4 (MEDIUM; a careless curator) ``kanon --sensitive`` checks its ℓ-diversity rule (no value on more than
  ``max_share`` = 0.9 of a class) on the source values, and the output is then typed: a sensitive column declared
  ``int`` that holds fractions (40.2, 39.8, …: stored as text by ``as_stored``, read back as numbers by ``as_source``)
  is rounded by ``transaction._finalise`` (``as_declared``), which merges each class's distinct values into one. The
  gate reports the output's ℓ-diversity but enforces ``max_share`` nowhere on the output. Measured: 300 people whose
  score is their age decade ± 0.4, ``k = 5``: mondrian and oka publish 28 of 29 classes homogeneous (286 people's
  score read off their age and sex), kmember 29 of 29 (all 300).

* F5 (MEDIUM; a careless curator, F4's root cause) the rare-value rule (``gate.check_rare_values``: a ``--sensitive``
  value that equals a source value must be held by k published rows) compares the published, rounded values with the
  source values as read (fractions): none is equal, so the rule passes everything. Measured: one person's score of
  97.3 among scores 20-59 ± 0.3 is published as the only 97 (in class ``(-inf, 19], F``), present exactly when that
  person is in the source; 8 of 41 published values are held by fewer than 5 rows.

  F4 and F5 fixed (session 23): the source is read in its declared type (``declared_types.as_source``: an ``int``
  column's values as the query path's cast rounds them), and the gate checks ``max_share`` and the rare values on the
  finalised output against the source in the same published form (``publication.as_published``); their tests pass.

Root causes and class-level fixes (not made here: veil/ is not touched):

* F1: ``_source_nearest`` / ``_points`` / ``_group_codes`` — an unmatched grouped category should cost its column's
  weight (1), not ∞: e.g. rank by the *Hamming-plus-numeric* distance (count of mismatched categories plus the Gower
  numbers) with a per-column hash index, or keep every categorical column one-hot in a sparse / ball-tree metric.
* F2, F3: ``_agreement`` / ``_most_moved`` and the share test in ``dcr_check`` — rank each source row by the largest
  number of columns some synthetic row equals exactly (weighted by how rare the agreed values are, as a linkage
  attacker would), test the rank sets D_K (K = 32, 64, …) as the near records are, and refuse on the excess of
  training rows (or the odds ratio of the 2×2 table) rather than on the set's training share.

* F4: ``generators/kanon`` (diversity on pre-typed values) and ``gate.verify`` (ℓ-diversity recorded, not enforced)
  — check every class guarantee (k, ``max_share``, the sensitive combinations) on the finalised output, the frame that
  is published, and read each column in its declared type (``as_declared``) before anonymising (F5: then the
  rare-value rule compares like with like; or count holders of each published value among the published rows
  whatever the source holds).

What held (tried, no witness): four columns swapped between random training rows (each value another training
person's) are refused (tails 1e-54, 1e-57); every number of the copy moved by ± 1 is refused (tail 0); three grouped
categories moved and nothing else is refused at 10,000 rows (1e-136) — only by the margin F3 describes; kRR's row
resize drops without replacement and draws additions from the declared domain (no person's row is randomised twice);
the DP grid's count (1/(ε/2)), centred sums (w/2) and exponential-mechanism utility (w: sum and count·offset each
move by w/2) sensitivities; a DP publication interrupted after its charge leaves its charge unmarked in the
warehouse's high-water mark, but nothing was released (no privacy loss if a restored backup forgets it).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from veil.metrics.dcr import dcr_check

# ==================================================================================================
# shared
# ==================================================================================================


def _split(source: pd.DataFrame, rng: np.random.Generator) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The synthetic kinds' split: a random 20 % holdout (``transaction._split``, plugins/synth.py HOLDOUT)."""
    order = rng.permutation(len(source))
    hold = round(len(source) * 0.2)
    return source.iloc[order[hold:]].reset_index(drop=True), source.iloc[order[:hold]].reset_index(drop=True)


def _with_others(copies: pd.DataFrame, others: pd.DataFrame, rows: int, seed: int) -> pd.DataFrame:
    """The synthetic table: the memorised copies among ``rows`` rows, the rest honest, shuffled."""
    table = pd.concat([copies, others.iloc[: rows - len(copies)]], ignore_index=True)
    return table.sample(frac=1, random_state=seed).reset_index(drop=True)


#: 20 values: three such columns (60 one-hot coordinates) exceed ``dcr._ONE_HOT_DIMENSIONS`` and are grouped.
_CATS = [f"v{i:02d}" for i in range(20)]


def _law(rng: np.random.Generator, n: int) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "age": rng.integers(17, 90, n),
            "income": rng.integers(0, 100_000, n),
            "hours": rng.integers(1, 99, n),
            "city": rng.choice(_CATS, n),
            "job": rng.choice(_CATS, n),
            "school": rng.choice(_CATS, n),
        }
    )


def _shifted(series: pd.Series, values: list[str]) -> pd.Series:
    """Each category moved to the next declared value (a different value, never the person's own)."""
    following = {v: values[(i + 1) % len(values)] for i, v in enumerate(values)}
    return series.map(following)


def _adult_world(seed: int) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """5,000 Adult rows split 80/20, and the other Adult people (a generator that learned the population emits rows
    like theirs), in an order fixed by ``seed``."""
    from veil.datasets import load_adult

    adult = load_adult().dropna().reset_index(drop=True)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(adult))
    source, others = adult.iloc[order[:5000]].reset_index(drop=True), adult.iloc[order[5000:]]
    train, holdout = _split(source, rng)
    return adult, train, holdout, others.sample(frac=1, random_state=seed).reset_index(drop=True)


def _adult_next(adult: pd.DataFrame, copies: pd.DataFrame, columns: tuple[str, ...]) -> pd.DataFrame:
    out = copies.copy()
    for column in columns:
        out[column] = _shifted(out[column], sorted(adult[column].unique()))
    return out


# ==================================================================================================
# F1: two many-valued categories moved put a near copy at distance ∞ in every near-record view
# ==================================================================================================


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("nudged", [("income",), ("income", "hours")], ids=["three_moved", "four_moved"])
def test_s72_f1_near_copies_with_two_many_valued_categories_moved_are_refused(seed: int, nudged: tuple[str, ...]) -> None:
    """F1 (HIGH). 2,000 people (age, income of 100,000 values, hours; city, job, school of 20 values each: every
    category is grouped, 3 numbers + 60 one-hot coordinates > 16). A memorising generator emits each of the 1,600
    training rows with city and job moved to the next value and ``nudged`` numbers + 1, among 10,000 rows of the law.
    Every view of ``_source_nearest`` keys on city or job, so the copies are at ∞; the agreement sets find the
    three-moved copies only in a set chance fills (F3) and never the four-moved ones. Measured: passes, 3 of 3 seeds
    each (near tails 3.7e-14, 1.4e-15, 7.0e-10 with three moved; 2.5e-4, 1.8e-3, 9.1e-2 with four). Each copy publishes
    the person's age and school exactly and income (one of 100,000 values) to one unit."""
    rng = np.random.default_rng(seed)
    train, holdout = _split(_law(rng, 2000), rng)
    copies = train.assign(city=_shifted(train["city"], _CATS), job=_shifted(train["job"], _CATS))
    for column in nudged:
        copies[column] = copies[column] + 1
    synthetic = _with_others(copies, _law(rng, 10_000), 10_000, seed)
    report = dcr_check(synthetic, train, holdout, rng=np.random.default_rng(seed))
    assert not report.passed, f"near copies of all {len(train)} training rows (city, job moved; {nudged} + 1) passed: {report}"


def test_s72_f1_adult_copies_with_two_categories_moved_and_two_numbers_nudged_are_refused(shared_data: Path) -> None:
    """F1 on Adult (5,000 rows; the default 10,000 synthetic rows). ``workclass`` and ``relationship`` are grouped
    (Adult's numbers, sex, income and race fill the 16 one-hot coordinates); moving both to the next category and
    ``fnlwgt``, ``hours_per_week`` by one unit leaves 11 of 15 attributes exact and two within one unit, for all 4,000
    training people. Measured: passes at seeds 0 and 1 (best near set: 1,024 rows at share 0.837 / 0.832, limit
    0.863, tail 4.4e-4 / 2.1e-3); an attacker knowing 7 quasi-identifiers reads exact (capital gain, capital loss,
    income) for 49.7 % of members against 10.3 % of non-members."""
    adult, train, holdout, others = _adult_world(0)
    copies = _adult_next(adult, train, ("workclass", "relationship"))
    copies["fnlwgt"] = copies["fnlwgt"] + 1
    copies["hours_per_week"] = copies["hours_per_week"] + 1
    synthetic = _with_others(copies, others, 10_000, 0)
    report = dcr_check(synthetic, train, holdout, rng=np.random.default_rng(0))
    assert not report.passed, f"Adult near copies of all {len(train)} training rows passed: {report}"


# ==================================================================================================
# F2: four or five columns redrawn: past the agreement sets, far in every distance
# ==================================================================================================


@pytest.mark.parametrize(
    "redrawn",
    [
        ("fnlwgt", "hours_per_week", "capital_loss", "workclass"),
        ("fnlwgt", "hours_per_week", "capital_loss", "workclass", "relationship"),
    ],
    ids=["four", "five"],
)
def test_s72_f2_adult_copies_with_four_or_five_columns_redrawn_are_refused(shared_data: Path, redrawn: tuple[str, ...]) -> None:
    """F2 (HIGH). s69 F5's attack one column further: every one of the 4,000 training rows with ``redrawn`` drawn
    uniformly over Adult's values (numbers over their range, categories over their values), among 6,000 rows of other
    Adult people (the default 10,000 rows). 10-11 of 15 attributes stay exact: age, education, marital status,
    occupation, race, sex, capital gain, country, income. Measured (this world): passes, near tail 2.7e-10 (four:
    4,096 rows at share 0.817, under the tolerance 0.830 — F3's cap) and 4.7e-4 (five), against 10⁻⁶ over ~470 sets;
    another split and honest sample (seed 1): 9.0e-6, 2.1e-3, passed."""
    adult, train, holdout, others = _adult_world(0)
    rng = np.random.default_rng(100)
    copies = train.copy()
    for column in redrawn:
        if pd.api.types.is_numeric_dtype(adult[column]):
            copies[column] = rng.integers(int(adult[column].min()), int(adult[column].max()) + 1, len(copies))
        else:
            copies[column] = rng.choice(sorted(adult[column].unique()), len(copies))
    synthetic = _with_others(copies, others, 10_000, 0)
    report = dcr_check(synthetic, train, holdout, rng=np.random.default_rng(0))
    assert not report.passed, f"copies of all {len(train)} training rows with {redrawn} redrawn passed: {report}"


# ==================================================================================================
# F3: a set that chance fills can never exceed the share tolerance, whatever its tail
# ==================================================================================================


@pytest.mark.parametrize("rows", [16_000, 20_000])
def test_s72_f3_a_set_chance_fills_still_refuses_copies_of_every_training_row(shared_data: Path, rows: int) -> None:
    """F3 (HIGH). Copies of every one of the 4,000 training rows with ``workclass``, ``relationship`` and ``sex``
    moved (three columns: the agreement sets' own case; 12 of 15 attributes exact, ``fnlwgt``, age, capital gain and
    loss, hours and income among them) among ``rows`` rows (the curator's ``rows``; the rest other Adult people).
    The three-column agreement set holds every training row and, by chance, 871 of the 1,000 holdout rows (886 at
    20,000): its training share 0.821 is below the tolerance 0.830 although its one-sided tail is 6.4e-94 (9.4e-83 at
    20,000) — the report's own figures. Measured: passes at seeds 0, 1, 2 for both sizes (tails 9.4e-83 to 1.1e-106).
    The test also checks that the report saw the evidence (tail < 1e-50), so it fails only where the gate knew and
    passed."""
    adult, train, holdout, others = _adult_world(0)
    copies = _adult_next(adult, train, ("workclass", "relationship", "sex"))
    synthetic = _with_others(copies, others, rows, 0)
    report = dcr_check(synthetic, train, holdout, rng=np.random.default_rng(0))
    assert report.near_tail < 1e-50 or not report.passed, f"the witness lost its evidence: {report}"
    assert not report.passed, (
        f"copies of all {len(train)} training rows with three categories moved passed among {rows:,} rows although "
        f"the near tail is {report.near_tail:.1e} (share {report.near_train_share:.3f}, limit {report.share_limit:.3f})"
    )


# ==================================================================================================
# F4: k-anonymity's diversity is checked on the source's values, and the output rounds them together
# ==================================================================================================

_KANON_POLICY = """\
[database]
path = "warehouse.duckdb"
[ledger]
path = "ledger.sqlite"
[tables.people]
privacy_unit = "row"
[tables.people.columns]
age = { type = "int", lower = 17, upper = 90 }
sex = { type = "category", values = ["F", "M"] }
score = { type = "int", lower = 0, upper = 100 }
[analysts.bob]
epsilon = 1.0
"""


@pytest.mark.parametrize("algorithm", ["mondrian", "kmember"])
def test_s72_f4_published_classes_are_diverse_in_the_published_values(tmp_path: Path, algorithm: str) -> None:
    """F4 (MEDIUM; a careless curator). ``score`` is declared ``int`` but holds fractions (an average, say): the
    warehouse keeps ``40.2`` as text (``as_stored``), a publication reads it back as the number 40.2
    (``declared_types.as_source``), ``kanon --sensitive score`` forms classes whose commonest *source* value is at most
    ``max_share`` (0.9) of their rows — 40.2, 39.8, 40.4, … are distinct — and ``transaction._finalise`` then gives the
    column its declared type (``as_declared``: rounded to Int64), which collapses each class to one value. The gate
    reports the output's ℓ-diversity (``l_diversity``) but does not enforce ``max_share`` on it, and the rare-value
    rule (each published value held by k published rows) is met. Measured (300 people, each score its age decade ± 0.4,
    k = 5): mondrian 28 of 29 classes homogeneous (286 people), oka 28 of 29 (286), kmember 29 of 29 (all 300): anyone
    who knows a person's age and sex reads their score, in a table published as "every class diverse". The property:
    no published class has one sensitive value on more than 0.9 of its rows."""
    from veil.generators.transaction import publish
    from veil.policy import load_policy
    from veil.store.warehouse import public_path, write_table, writer

    (tmp_path / "policy.toml").write_text(_KANON_POLICY, encoding="utf-8")
    policy = load_policy(tmp_path / "policy.toml")
    rng = np.random.default_rng(0)
    age = rng.integers(17, 90, 300)
    score = np.maximum(20, (age // 10) * 10) + rng.choice([-0.4, -0.2, 0.0, 0.2, 0.4], 300)
    write_table(policy, "people", pd.DataFrame({"age": age, "sex": rng.choice(["F", "M"], 300), "score": score}))
    request = {"table": "people", "k": 5, "qi": ["age", "sex"], "sensitive": ["score"], "algorithm": algorithm}
    publish(policy, "kanon", {**request, "output": "p_k"}, progress=False)
    with writer(public_path(policy)) as con:
        out = con.execute("SELECT age, sex, score FROM p_k").df()
    top = out.groupby(["age", "sex"])["score"].agg(lambda s: s.value_counts(dropna=False).iloc[0] / len(s))
    assert float(top.max()) <= 0.9, (
        f"{int((top > 0.9).sum())} of {len(top)} published classes give one score to more than 90 % of their members"
    )


def test_s72_f5_a_value_one_person_holds_is_not_published_after_rounding(tmp_path: Path) -> None:
    """F5 (MEDIUM; a careless curator, F4's root cause). ``gate.check_rare_values`` refuses a ``--sensitive`` value held
    by fewer than k published rows *when it equals a source value*, compared exactly as published; a declared ``int``
    column holding fractions is published rounded, so no published value equals a source value and the rule passes
    everything. Measured (300 people, score an integer 20-59 ± 0.3, person 7's 97.3): ``kanon --sensitive score``
    (mondrian, k = 5) publishes one row ``(-inf, 19], F, 97`` — the only 97, present exactly when person 7 is in the
    source — and 8 of its 41 published values are held by fewer than 5 rows. The property: every published value of
    a ``--sensitive`` column is held by at least k published rows (s60 F2's rule, on what is published). Fixed: the
    source is read as whole numbers (``as_source``) and the rule counts the published holders, so the gate refuses
    (typed, nothing written): the property then holds of an empty publication."""
    from veil.errors import PublicationRefused
    from veil.generators.transaction import publish
    from veil.policy import load_policy
    from veil.store.warehouse import public_path, write_table, writer

    (tmp_path / "policy.toml").write_text(_KANON_POLICY, encoding="utf-8")
    policy = load_policy(tmp_path / "policy.toml")
    rng = np.random.default_rng(0)
    age = rng.integers(17, 90, 300)
    score = rng.integers(20, 60, 300) + rng.choice([-0.3, 0.3], 300)
    score[7] = 97.3
    write_table(policy, "people", pd.DataFrame({"age": age, "sex": rng.choice(["F", "M"], 300), "score": score}))
    request = {"table": "people", "k": 5, "qi": ["age", "sex"], "sensitive": ["score"], "algorithm": "mondrian"}
    try:
        publish(policy, "kanon", {**request, "output": "p_k"}, progress=False)
    except PublicationRefused as exc:
        assert "fewer than k = 5" in str(exc), exc
        with writer(public_path(policy)) as con:
            assert not con.execute("SELECT * FROM information_schema.tables WHERE table_name = 'p_k'").fetchall()
        return
    with writer(public_path(policy)) as con:
        held = con.execute("SELECT score, COUNT(*) AS n FROM p_k GROUP BY score").df()
    rare = held[held["n"] < 5]
    assert rare.empty, f"{len(rare)} published scores are held by fewer than k = 5 rows: {rare.to_dict('records')}"
