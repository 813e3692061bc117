"""Red team, session 64: the publication gate as it is now (main at dbaa4d3, 2026-11-28).

Every finding is a strict xfail witness: the test states the property that should hold and fails on main; the fix
turns it green (then drop the mark). Publications go through the curator's real transaction
(``veil.generators.transaction.publish``, what ``veil publish`` calls); what an analyst reads is asked through
``veil.connect`` (public tables: exact, ε = 0).

Findings (ranked; severities as the brief defines them):

* F1 (HIGH: recovers people's values) noise addition on a small-domain int column publishes a deterministic function
  of the source — for a 0/1 column, its exact complement. ``sdc.avoid_rare_values`` (the s62 F1 fix) redraws every
  row whose noisy value, rounded, equals its own source value, and the domain redraw keeps values in ``[0, 1]``: the
  only value a 0 can end as is 1 and vice versa. At a ≥ 1 every row flips (unchanged share 0.0, which the gate's
  "unchanged ≤ 90 %" rule reads as *well* protected); at a = 0.5 about 80 %. Larger noise does not help (a = 10 still
  flips ~93–96 %). A skewed flag flips less but still tells: through the CLI, ``veil publish sdc --method
  noise_addition --columns smoker,hiv --param a=1`` on 500 people with 50 HIV-positive published 434 rows ``hiv = 1``
  and 66 ``hiv = 0`` (≈ 95 % flipped: a published 0 is HIV-positive with probability ≈ 0.7, prior 0.1). With 12
  yes/no columns (300 people), an analyst who knows 10 answers of a person singles out their row and reads the other
  2 exactly for 226 of 300 people (0 wrong). Before the redraw, noise addition at a = 1 kept a 0/1
  value ~71 % of the time (randomised response). The gate measures "published = source", not "published is
  determined by the source".

* F2 (HIGH for the people singled out: exact sensitive value; careless curator following the refusal's own hint) the
  linkage rule (``check_linkage``) compares a k-anonymous ``--sensitive`` publication with the *live* publications of
  its population only, and its refusal tells the curator to ``--replace`` the earlier table or ``veil retract`` it
  first. A published table is public: analysts have already read (kept) it. ``--qi age --sensitive gain`` then the
  same output ``--replace``-d with ``--qi age,sex,job --sensitive gain`` (k = 5 each, 40 gains held by 5 people each):
  the saved first table and the second single out the exact gain of 32 of 200 people (seed 1; 19 with seed 2), the
  s51 A5 composition attack the rule exists to stop. The same after ``veil retract`` and a new output.

* F3 (HIGH: one person's exact value, whatever its count) re-publishing a population that gained (or lost) one person
  publishes that person's exact value as the difference of two releases' value multisets. Rank swapping and k-anonymity's
  ``--sensitive`` publish each column's exact multiset of source values (only values fewer than k rows hold are
  recoded or refused); the rare-value rule looks at one release at a time, and nothing compares a non-kanon release
  with any other (``check_linkage`` is kanon-only). ``people`` (200 rows, gains in hundreds, each held by 5) and a
  snapshot ``people_new`` with one more person (gain 1,200, a *common* value): ``sdc rank_swapping`` of each, and the
  analyst's ``Counter(b.gain) − Counter(a.gain)`` is exactly ``{1200: 1}``. The same with the source re-ingested and the
  output re-published with ``--replace`` (the monthly refresh), and with ``kanon --sensitive gain --replace``.
  F3b, a float column whose every value is one person's (``income`` to the cent: rank swapping recodes all of them
  to rank-window means, MDAV to group means): both preserve the column's sum exactly, so ``SUM(income)`` after the
  refresh minus before is the newcomer's exact income, 54,321.77 (rank swapping and MDAV; noise addition's differs
  by its noise).

* F4 (HIGH: exact values of identifiable people — "the 6th-highest earner") two microaggregations of one column with
  different k difference to single values. ``sdc microagg_mdav --columns income`` at k = 5 and at k = 6 (two outputs,
  or one ``--replace``-d by the other: the curator trying a k): on one column MDAV's groups are runs of consecutive
  ranks from both ends, each published as its centroid repeated over its rows, so an analyst reads prefix sums at 5,
  10, 15, … and 6, 12, 18, … ranks from each end; where two are one rank apart their difference is that rank's exact
  income. 300 people: 20 exact incomes (to the cent), at ranks 6, 25, 36, … from the top and the bottom. Each release
  alone passes the gate (groups ≥ k); nothing compares a microaggregation with another release. On several columns the
  same: MDAV's first group at k = 6 is its first at k = 5 plus the 6th-nearest record to the same extreme point, so
  ``6·c₆ − 5·c₅`` over pairs of published centroids is a whole record: ``--columns age,income,hours`` (300 people)
  gives 17 people's exact (income, hours), with their age.

* F5 (MEDIUM, accounting: class 4 "publications that charge nothing") a table's ``epsilon_total`` — "the total ε of
  everything released about the people in it" (docs/policy.md) — binds DP publications only. With ``epsilon_total =
  0.1`` on ``people``, ``veil publish krr --epsilon 1`` is refused (``BudgetExhausted``), while ``sdc rank_swapping``
  of ``gain`` and ``kanon --sensitive gain`` (no formal guarantee: ε = ∞, the exact value multiset) publish, charge
  nothing, and ``veil budget`` still shows 0.1 remaining. A curator who caps a table to say "at most 0.1 about these
  people" is not told that four of the publish kinds ignore the cap.

* F6 (LOW: a membership bit, visible to analysts as "the table exists", to the curator as a refusal naming the value)
  noise addition's own-value redraw gives up after 64 rounds and leaves the row to the gate, which refuses a row
  still on its own value when fewer than 5 rows hold it and lets a common one through (up to 90 % of rows). At a =
  0.13 on ``hours`` (300 people, 37–43, each value held by ≥ 5) about half of all rows are still on their value after
  64 rounds: with person 7's lone 50 the publication is refused for 6 of 10 seeds, without person 7 for 0 of 10
  (a = 0.12: 7 vs 0 in a scratch run). The outcome depends on one person's presence and value outside any noise the
  release carries. F6b, the same bit deterministically: ``kanon --qi age,sex --sensitive gain`` (gains in hundreds, each
  held by ≥ 5) is refused when person 7's lone 1,234 is in the source and published when not (the s60 F2b fix chose
  a refusal; the table's existence is then person 7's presence).

* F7 (HIGH, the s60 F2 class through quasi-identifiers: presence and exact value, every analyst at ε = 0) a numeric
  quasi-identifier is published as its class's ``[min, max]`` (docs/kanon.md), and the rare-value rule skips group
  columns. The s16 A9b fix opens only the column's global extremes (``(-inf, hi]``); an *interior* value one person
  alone holds is a class endpoint whenever that person is the smallest or largest of their class: gains in hundreds,
  person 7's 1,234 — ``kanon --qi age,gain -k 5`` publishes ``[900, 1234]`` (Mondrian, seed 0), ``[1234, 2100]``
  (OKA; its classes vary from run to run even with ``--seed``), ``[2300, 2567]`` (K-Member, person 7 at 2,567);
  without person 7 no label holds the value. Over 4 seeds × 4 values, the value was a label endpoint 5/16
  (Mondrian), 4/16 (OKA), 6/16 (K-Member). UCI Adult, ``kanon --k 5 --qi age,sex,capital_gain`` (Mondrian): 21
  capital-gain values fewer than 5 people hold are label endpoints, 5 of them one person's (1,111, 1,455, …).

* F8 (MEDIUM: the gate's memorisation check is vacuous where it matters; needs a generator that copies rows) the
  distance-to-closest-record check compares the synthetic rows with a subsample of the training rows *of the
  holdout's size* (a quarter of them at the default 20 % holdout), so a verbatim copy of a training row outside that
  subsample counts as fresh, and its limits (``1/2 + 2/√n``, 4 binomial standard errors) are loose at small n. A
  synthetic table made only of training rows, copied verbatim, passes ``gate.verify`` for every source of up to 200
  rows (20 of 20 draws; 17/20 at 300), and at 10,000 rows one whose 3 % (300 people's rows) are verbatim copies passes
  10 of 10. The docstring's own example (a copy of 400 rows refused) is just above the edge.

* F9 (LOW: utility, the same root as F1; no disclosure) noise addition on a declared ``bool`` column publishes every
  row ``True``: the own-value redraw moves a 1 into [0, 0.5) and a 0 into [0.5, 1], and finalise types the floats as
  booleans with ``bool(v)`` (any non-zero value is ``True``). ``veil publish sdc --method noise_addition --columns
  married`` on the demo's 100,000 people (44,174 not married) publishes 100,000 ``True``; the gate sees 56 %
  unchanged and passes it.

* F10 (MEDIUM–HIGH: exact sensitive values by the homogeneity attack; a documented limitation, but one the gate
  could refuse as it refuses a keep probability above 0.9 elsewhere) ``kanon --sensitive`` publishes classes whose
  every member has the same sensitive value: the gate *reports* ℓ-diversity (``l_diversity``: 1) and publishes.
  UCI Adult, ``veil publish kanon --k 5 --qi age,sex,race,hours_per_week --sensitive income``: 672 of 1,919 classes
  are homogeneous, holding 6,763 of 32,561 people, 26 of them ``>50K``, each read exactly by anyone who knows their
  four quasi-identifiers. The witness: 300 people, income rising with age, ``--qi age,sex``: 90 people.

* F11 (MEDIUM: the gate's noise floor ``MIN_NOISE_A`` = 0.1 undone by repetition) noise addition draws fresh noise at
  every publication, and nothing counts how often a population's column was published with noise: 8 publications
  of ``noise_addition --param a=0.1`` of ``income,hours,weight`` (300 people, floats) link row to row by nearest
  neighbour (assignment on standardised distance; a = 0.1 is far below the rows' spacing) and their average has the
  noise of a ≈ 0.035: the median relative error of a person's income falls from 6.1 % to 2.3 % (scratch run; the
  witness's own measure, 5.1–5.5 % → 2.5–2.7 %), and the share of people whose income is read within 1 % from 9 % to
  27 %. A curator who re-publishes (a refresh, a second output, a ``--replace``) gives analysts the average.

Suggested class-level fixes. F2/F3/F4/F11 are one class: the gate judges each release alone, and the linkage rule
knows live kanon releases only. Keep a per-population release registry that never forgets (replaced and retracted
releases included: analysts kept them) and covers every non-DP kind; refuse a second non-DP release of a population's
column (or require a DP method for it), or make re-publication reproduce the first one's perturbation (noise and
swaps keyed by a per-population secret and each person's identity, "permanent randomisation"), so differencing and
averaging give nothing new. F1/F9: judge a perturbed column by how well the published value predicts the source
(per source value, no published value in more than ``MAX_KEEP_PROBABILITY`` of its rows, whether equal or not), and
replace the own-value redraw (which makes the published value a function of the source on small domains) by a
data-independent rule, or refuse noise addition on small declared domains (use kRR). F7: apply the rare-value rule
to label endpoints of numeric QIs (or cut ranges on a data-independent grid). F10: refuse ℓ < 2 (or a class whose
commonest sensitive value exceeds ``MAX_KEEP_PROBABILITY``). F8: compare against every training row (not a subsample
of the holdout's size) and count verbatim copies absolutely. F5: a capped table refuses non-DP publications unless
the policy opts in. F6: a refusal must not follow from one row's noise draws (redraw until done, or refuse from the
parameters only).

What held (tried, no witness): two live ``kanon --sensitive`` snapshots of one population are refused (F3's kanon
case needs ``--replace``); a refused ``veil retract`` (warehouse locked) still retracts for analysts — the session
follows the release log, the table is unknown at once in live and new sessions; DP publications are charged to the
table account and composed (``dp_microagg_laplace`` at ε = 1 then 2.5 under a cap of 3: the second refused
``BudgetExhausted``; kRR over the cap refused before anything is read); the DP grid's published table holds only the
declared columns and noisy cells; a ``date`` QI without a hierarchy generalises to ``*`` (no endpoint leak, F7 is
numeric only); the rare-value rule on ``rank_swapping``/``kanon --sensitive`` within one release; analysts see no
release metrics (no catalogue view serves the log). Side note (no test): ``kanon --algorithm oka --seed 0`` gave
different classes from run to run on the same source.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

_BOB = "[analysts.bob]\nepsilon = 2.0\n"


def _policy(columns: str) -> str:
    return (
        '[database]\npath = "warehouse.duckdb"\n[ledger]\npath = "ledger.sqlite"\n'
        '[tables.people]\nprivacy_unit = "row"\n[tables.people.columns]\n' + columns + _BOB
    )


def _world(base: Path, columns: str, frame: pd.DataFrame) -> tuple[Path, Any]:
    from veil.policy import load_policy
    from veil.store.warehouse import write_table

    base.mkdir(parents=True, exist_ok=True)
    path = base / "policy.toml"
    path.write_text(_policy(columns), encoding="utf-8")
    policy = load_policy(path)
    write_table(policy, "people", frame)
    return path, policy


def _analyst(policy: Path, sql: str) -> pd.DataFrame:
    import veil as veil_api

    with veil_api.connect(policy, analyst="bob") as db:
        return db.sql(sql)


def _in_label(label: Any, value: Any) -> bool:
    """Whether a k-anonymous label (``[26, 30]``, ``(-inf, 23]``, ``{a,b}``, ``*`` or a value) holds ``value``."""
    s = str(label).strip()
    if s == "*":
        return True
    if s[:1] in "[(" and "," in s:
        lo, hi = (t.strip() for t in s[1:-1].split(","))
        return float(lo) <= float(value) <= float(hi)
    if s[:1] == "{":
        return str(value) in {t.strip() for t in s[1:-1].split(",")}
    try:
        return float(s) == float(value)
    except (TypeError, ValueError):
        return s == str(value)


# ==================================================================================================
# F1: noise addition publishes the complement of a 0/1 column
# ==================================================================================================

_ANSWERS = [f"q{i}" for i in range(1, 13)]


def _answers(seed: int = 3, n: int = 300) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({c: rng.integers(0, 2, n) for c in _ANSWERS})


@pytest.mark.parametrize("a", [1.0, 3.0])
def test_f1_noise_addition_never_publishes_a_small_domain_column_as_a_function_of_its_source(tmp_path: Path, a: float) -> None:
    """F1: 300 people's 12 yes/no answers (int 0/1), ``veil publish sdc --method noise_addition --param a=A``. Property:
    an analyst who knows 10 answers of a person (all but q11, q12) and reads the public table at ε = 0 recovers the
    two others exactly for at most a few people (a row published with noise: randomised at least as randomised
    response with keep ≤ 0.9 would). Measured on main: every published value is 1 − source (unchanged share 0.0), and
    the attacker singles out 226 of 300 people (a = 1; 227 at a = 3) and is right for every one."""
    from veil.errors import PublicationRefused
    from veil.generators.transaction import publish

    frame = _answers()
    columns = "".join(f'{c} = {{ type = "int", lower = 0, upper = 1 }}\n' for c in _ANSWERS)
    path, policy = _world(tmp_path, columns, frame)
    request = {"table": "people", "method": "noise_addition", "columns": _ANSWERS, "params": [f"a={a}"], "output": "pub"}
    try:
        publish(policy, "sdc", request, progress=False)
    except PublicationRefused:
        return  # a class-level fix may refuse noise addition on a column whose declared domain is this small
    pub = _analyst(path, "SELECT " + ", ".join(_ANSWERS) + " FROM pub")
    known, hidden = _ANSWERS[:10], _ANSWERS[10:]
    recovered = 0
    for _, row in frame.iterrows():
        flipped = pub[(pub[known] == (1 - row[known]).to_numpy()).all(axis=1)]  # the attacker reads the complement
        if len(flipped) == 1 and ((1 - flipped[hidden].iloc[0]).to_numpy() == row[hidden].to_numpy()).all():
            recovered += 1
    assert recovered <= 15, (
        f"noise addition (a = {a}) published the 0/1 answers as a function of the source: an analyst who knows 10 of a "
        f"person's 12 answers reads the other 2 exactly for {recovered} of {len(frame)} people"
    )


@pytest.mark.parametrize("a", [0.75, 1.0, 2.0, 10.0])
def test_f1_b_no_source_value_is_published_as_one_value_in_almost_every_row(a: float) -> None:
    """F1, the class: for every source value x of a perturbed column, the published values of x's rows are not one
    value in more than ``MAX_KEEP_PROBABILITY`` (90 %) of them, whether that value is x (the gate's current rule) or
    another (the complement). Noise addition's generator on a 0/1 column, row-aligned through ``Output.source``."""
    from veil.generators.base import Context
    from veil.generators.gate import MAX_KEEP_PROBABILITY
    from veil.generators.sdc import NoiseAddition

    rng = np.random.default_rng(64)
    data = pd.DataFrame({"x": rng.integers(0, 2, 2000).astype(float)})
    ctx = Context(columns=("x",), bounds={"x": (0.0, 1.0)}, rng=np.random.default_rng(1))
    out = NoiseAddition(a=a).generate(data, ctx)
    published = np.rint(out.frame["x"].to_numpy())
    source = data["x"].to_numpy()[np.asarray(out.source)]
    worst = 0.0
    for x in (0.0, 1.0):
        rows = published[source == x]
        worst = max(worst, float(pd.Series(rows).value_counts(normalize=True).max()))
    assert worst <= MAX_KEEP_PROBABILITY, (
        f"noise addition (a = {a}) publishes one source value as one value in {worst:.1%} of its rows: the published "
        "column is (nearly) a function of the source"
    )


# ==================================================================================================
# F2: the linkage rule forgets replaced and retracted publications
# ==================================================================================================

_PEOPLE = (
    'age = { type = "int", lower = 17, upper = 90 }\n'
    'sex = { type = "category", values = ["F", "M"] }\n'
    'job = { type = "category", values = ["a", "b", "c"] }\n'
    'gain = { type = "int", lower = 0, upper = 5000 }\n'
)


def _people(seed: int, n: int = 200, gains: int = 40) -> pd.DataFrame:
    """n people; ``gain`` takes ``gains`` values, each held by n / gains people (the rare-value rule holds)."""
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "age": rng.integers(20, 60, n),
            "sex": rng.choice(["F", "M"], n),
            "job": rng.choice(["a", "b", "c"], n),
            "gain": rng.permutation(np.repeat(np.arange(gains) * 100, n // gains)),
        }
    )


def _intersected(frame: pd.DataFrame, first: pd.DataFrame, second: pd.DataFrame, qi1: list[str], qi2: list[str]) -> int:
    """People whose gain is the only value both their group in ``first`` and in ``second`` hold (the attacker knows
    their quasi-identifiers), and it is their gain."""
    hits = 0
    for _, row in frame.iterrows():
        g1 = set(first[[all(_in_label(r[c], row[c]) for c in qi1) for _, r in first.iterrows()]]["gain"])
        g2 = set(second[[all(_in_label(r[c], row[c]) for c in qi2) for _, r in second.iterrows()]]["gain"])
        both = g1 & g2
        if len(both) == 1 and int(next(iter(both))) == int(row["gain"]):
            hits += 1
    return hits


@pytest.mark.parametrize("how", ["replace", "retract"])
def test_f2_a_replaced_or_retracted_sensitive_table_still_counts_for_the_linkage_rule(tmp_path: Path, how: str) -> None:
    """F2: ``kanon --qi age --sensitive gain --output p1``; an analyst reads ``p1`` (it is public); the curator then
    publishes ``--qi age,sex,job --sensitive gain`` either over ``p1`` with ``--replace`` or, after ``veil retract
    p1``, as ``p2`` — both what the linkage refusal's hint recommends. Property: no two k-anonymous ``--sensitive``
    releases of one population an analyst has ever been able to read single out a person's value (the s51 A5 property).
    Measured on main: both land, and intersecting the person's group in each singles out the exact gain of 32 of 200
    people (seed 1)."""
    from veil.errors import PublicationRefused
    from veil.generators.transaction import publish
    from veil.store.catalog import retract

    frame = _people(seed=1)
    path, policy = _world(tmp_path, _PEOPLE, frame)
    qi1, qi2 = ["age"], ["age", "sex", "job"]
    base = {"table": "people", "algorithm": "mondrian", "k": 5, "sensitive": ["gain"]}
    publish(policy, "kanon", {**base, "qi": qi1, "output": "p1"}, progress=False)
    first = _analyst(path, "SELECT age, gain FROM p1")  # public: any analyst keeps a copy
    try:
        if how == "replace":
            publish(policy, "kanon", {**base, "qi": qi2, "output": "p1", "replace": True}, progress=False)
            second = _analyst(path, "SELECT age, sex, job, gain FROM p1")
        else:
            retract(policy, "p1", reason="replaced by p2")
            publish(policy, "kanon", {**base, "qi": qi2, "output": "p2"}, progress=False)
            second = _analyst(path, "SELECT age, sex, job, gain FROM p2")
    except PublicationRefused:
        return  # the class-level fix: a release once public stays in the linkage set
    singled = _intersected(frame, first, second, qi1, qi2)
    assert singled == 0, (
        f"the first --sensitive table (read before the {how}) and the second single out the exact gain of {singled} of "
        f"{len(frame)} people (attacker knows age, sex, job)"
    )


# ==================================================================================================
# F3: two releases of a population one person apart publish that person's value as their difference
# ==================================================================================================

_TWO_SNAPSHOTS = (
    '[database]\npath = "warehouse.duckdb"\n[ledger]\npath = "ledger.sqlite"\n'
    + "".join(f'[tables.{t}]\nprivacy_unit = "row"\n[tables.{t}.columns]\n' + _PEOPLE for t in ("people", "people_new"))
    + _BOB
)


def _difference(before: pd.DataFrame, after: pd.DataFrame, column: str) -> dict[Any, int]:
    """What the analyst computes: the multiset ``after − before`` of a published column (non-zero entries)."""
    from collections import Counter

    diff = Counter(after[column].tolist())
    diff.subtract(Counter(before[column].tolist()))
    return {k: v for k, v in diff.items() if v}


_REPUBLISH = {
    "rank_swapping": ("sdc", {"method": "rank_swapping", "columns": ["age", "gain"], "params": ["p=10"]}),
    "kanon_sensitive": ("kanon", {"algorithm": "mondrian", "k": 5, "qi": ["age", "sex"], "sensitive": ["gain"]}),
}


# kanon --sensitive from two live snapshots is refused by check_linkage (one population): what held
@pytest.mark.parametrize(
    ("kind", "how"), [("rank_swapping", "two_snapshots"), ("rank_swapping", "replace"), ("kanon_sensitive", "replace")]
)
def test_f3_two_releases_one_person_apart_do_not_publish_that_persons_value(tmp_path: Path, kind: str, how: str) -> None:
    """F3: 200 people (gains in hundreds, each held by 5) and the same plus one newcomer whose gain, 1,200, five
    others hold too (the rare-value rule has nothing to say). Release A from the 200, release B from the 201: as two
    live tables of two snapshot sources, or as one output re-published with ``--replace`` after the source was
    re-ingested with the newcomer. Property: what an analyst computes from A and B (the difference of the published
    gain multisets) does not pin the newcomer's gain. Measured on main: the difference is exactly ``{1200: 1}`` for
    rank swapping (both ways) and for ``kanon --sensitive gain --replace`` (two live ``--sensitive``
    snapshots are refused by the linkage rule: that held)."""
    from veil.errors import PublicationRefused
    from veil.generators.transaction import publish
    from veil.policy import load_policy
    from veil.store.warehouse import write_table

    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "policy.toml"
    path.write_text(_TWO_SNAPSHOTS, encoding="utf-8")
    policy = load_policy(path)
    rng = np.random.default_rng(5)
    n = 200
    frame = pd.DataFrame(
        {
            "age": rng.integers(20, 60, n),
            "sex": rng.choice(["F", "M"], n),
            "job": rng.choice(["a", "b", "c"], n),
            "gain": rng.permutation(np.repeat(np.arange(40) * 100, 5)),
        }
    )
    newcomer = pd.DataFrame({"age": [44], "sex": ["F"], "job": ["a"], "gain": [1200]})
    grown = pd.concat([frame, newcomer], ignore_index=True)
    plugin, request = _REPUBLISH[kind]
    write_table(policy, "people", frame)
    try:
        publish(policy, plugin, {**request, "table": "people", "output": "a"}, progress=False)
        before = _analyst(path, "SELECT gain FROM a")  # public: any analyst keeps a copy
        if how == "two_snapshots":
            write_table(policy, "people_new", grown)
            publish(policy, plugin, {**request, "table": "people_new", "output": "b"}, progress=False)
            after = _analyst(path, "SELECT gain FROM b")
        else:
            write_table(policy, "people", grown, replace=True)  # the monthly refresh: `veil ingest --replace`
            publish(policy, plugin, {**request, "table": "people", "output": "a", "replace": True}, progress=False)
            after = _analyst(path, "SELECT gain FROM a")
    except PublicationRefused:
        return  # a class-level fix may refuse the second release of the population
    diff = _difference(before, after, "gain")
    assert diff != {1200: 1}, (
        f"{kind} released twice, one person apart ({how}): the difference of the published gains is {diff}, the "
        "newcomer's exact gain"
    )


@pytest.mark.parametrize(("method", "param"), [("rank_swapping", "p=10"), ("microagg_mdav", "k=5")])
def test_f3_b_sums_of_two_releases_one_person_apart_do_not_give_that_persons_value(
    tmp_path: Path, method: str, param: str
) -> None:
    """F3b: 300 incomes (float, to the cent; every value one person's, so rank swapping recodes them all); the output
    is published, the source re-ingested with one newcomer (income 54,321.77) and the output re-published with
    ``--replace``. Property: ``SUM(income)`` after minus before is not the newcomer's income. Measured on main: it is,
    to the cent, for both methods."""
    from veil.errors import PublicationRefused
    from veil.generators.transaction import publish
    from veil.store.warehouse import write_table

    rng = np.random.default_rng(15)
    n = 300
    frame = pd.DataFrame({"age": rng.integers(20, 60, n), "income": np.round(rng.lognormal(10.5, 0.6, n), 2)})
    columns = 'age = { type = "int", lower = 17, upper = 90 }\nincome = { type = "float", lower = 0, upper = 200000 }\n'
    path, policy = _world(tmp_path, columns, frame)
    request = {"table": "people", "method": method, "columns": ["income"], "params": [param], "output": "pub"}
    publish(policy, "sdc", request, progress=False)
    before = float(_analyst(path, "SELECT SUM(income) AS s FROM pub")["s"].iloc[0])
    grown = pd.concat([frame, pd.DataFrame({"age": [44], "income": [54321.77]})], ignore_index=True)
    write_table(policy, "people", grown, replace=True)  # `veil ingest --replace`
    try:
        publish(policy, "sdc", {**request, "replace": True}, progress=False)
    except PublicationRefused:
        return
    after = float(_analyst(path, "SELECT SUM(income) AS s FROM pub")["s"].iloc[0])
    assert round(after - before, 2) != 54321.77, f"{method}: SUM(income) after the refresh − before = {after - before:.2f}"


# ==================================================================================================
# F4: two microaggregations of one column with different k
# ==================================================================================================


def _prefix_sums(groups: pd.DataFrame, *, descending: bool) -> dict[int, float]:
    """From a published one-column microaggregation (``income``, rows ``n`` per value): the sum of the ``c`` most
    extreme values for every cumulative row count ``c`` at a group boundary."""
    ordered = groups.sort_values("income", ascending=not descending)
    out: dict[int, float] = {}
    count, total = 0, 0.0
    for income, n in zip(ordered["income"], ordered["n"], strict=True):
        count += int(n)
        total += float(income) * int(n)
        out[count] = total
    return out


@pytest.mark.parametrize("how", ["two_outputs", "replace"])
def test_f4_two_microaggregations_with_different_k_do_not_difference_to_one_persons_value(tmp_path: Path, how: str) -> None:
    """F4: 300 incomes (float, to the cent); ``microagg_mdav`` of ``income`` at k = 5, then at k = 6 (a second output,
    or the first replaced). Property: no value an analyst derives from the two releases by differencing group sums
    equals a person's exact income. Measured on main: 40 differences (20 people, from both ends), all exact."""
    from veil.errors import PublicationRefused
    from veil.generators.transaction import publish

    rng = np.random.default_rng(6)
    n = 300
    frame = pd.DataFrame({"age": rng.integers(20, 60, n), "income": np.round(rng.lognormal(10.5, 0.6, n), 2)})
    columns = 'age = { type = "int", lower = 17, upper = 90 }\nincome = { type = "float", lower = 0, upper = 200000 }\n'
    path, policy = _world(tmp_path, columns, frame)
    request = {"table": "people", "method": "microagg_mdav", "columns": ["income"]}
    sql = "SELECT income, COUNT(*) AS n FROM {} GROUP BY income"
    publish(policy, "sdc", {**request, "params": ["k=5"], "output": "m5"}, progress=False)
    first = _analyst(path, sql.format("m5"))
    second_name = "m6" if how == "two_outputs" else "m5"
    try:
        publish(policy, "sdc", {**request, "params": ["k=6"], "output": second_name, "replace": how == "replace"}, progress=False)
    except PublicationRefused:
        return  # a class-level fix may refuse the second non-DP release of the column
    second = _analyst(path, sql.format(second_name))
    incomes = set(frame["income"].round(2))
    exact = 0
    for descending in (True, False):
        sums = {**_prefix_sums(first, descending=descending), **_prefix_sums(second, descending=descending)}
        ranks = sorted(sums)
        exact += sum(1 for a, b in itertools.pairwise(ranks) if b == a + 1 and round(sums[b] - sums[a], 2) in incomes)
    assert exact == 0, (
        f"two microaggregations of income (k = 5, k = 6; {how}) difference to {exact} exact incomes of single people"
    )


def test_f4_b_two_multicolumn_microaggregations_do_not_difference_to_a_record(tmp_path: Path) -> None:
    """F4, several columns: ``microagg_mdav --columns age,income,hours`` at k = 5 and at k = 6. Property: no pair of
    published centroids (one per release, with its row count) differences to a source record's exact income and
    hours. Measured on main: 17 records."""
    from veil.errors import PublicationRefused
    from veil.generators.transaction import publish

    rng = np.random.default_rng(7)
    n = 300
    frame = pd.DataFrame(
        {
            "age": rng.integers(20, 60, n),
            "income": np.round(rng.lognormal(10.5, 0.6, n), 2),
            "hours": np.round(rng.normal(40, 8, n).clip(1, 98), 1),
        }
    )
    columns = (
        'age = { type = "int", lower = 17, upper = 90 }\n'
        'income = { type = "float", lower = 0, upper = 200000 }\n'
        'hours = { type = "float", lower = 0, upper = 99 }\n'
    )
    path, policy = _world(tmp_path, columns, frame)
    request = {"table": "people", "method": "microagg_mdav", "columns": ["age", "income", "hours"]}
    sql = "SELECT income, hours, COUNT(*) AS n FROM {} GROUP BY income, hours"
    publish(policy, "sdc", {**request, "params": ["k=5"], "output": "m5"}, progress=False)
    try:
        publish(policy, "sdc", {**request, "params": ["k=6"], "output": "m6"}, progress=False)
    except PublicationRefused:
        return
    five, six = _analyst(path, sql.format("m5")), _analyst(path, sql.format("m6"))
    records = {(round(float(i), 2), round(float(h), 1)) for i, h in zip(frame["income"], frame["hours"], strict=True)}
    found = set()
    for a in five.itertuples(index=False):
        for b in six.itertuples(index=False):
            income = round(float(b.income) * int(b.n) - float(a.income) * int(a.n), 2)
            hours = round(float(b.hours) * int(b.n) - float(a.hours) * int(a.n), 1)
            if (income, hours) in records:
                found.add((income, hours))
    assert not found, (
        f"two MDAV releases (k = 5, 6) difference to {len(found)} exact records (income, hours), e.g. {sorted(found)[0]}"
    )


# ==================================================================================================
# F5: a table's epsilon_total does not bind publications without a DP guarantee
# ==================================================================================================


@pytest.mark.parametrize(
    ("kind", "request_"),
    [
        ("sdc", {"method": "rank_swapping", "columns": ["gain"], "params": ["p=10"]}),
        ("kanon", {"algorithm": "mondrian", "k": 5, "qi": ["age", "sex"], "sensitive": ["gain"]}),
    ],
    ids=["rank_swapping", "kanon_sensitive"],
)
def test_f5_a_capped_table_is_not_published_without_a_dp_guarantee(tmp_path: Path, kind: str, request_: dict[str, Any]) -> None:
    """F5: ``[tables.people] epsilon_total = 0.1``. Property: a publication whose privacy loss is unbounded (no formal
    guarantee) is refused on a table whose policy caps the privacy loss of its people — as a DP publication over the
    cap is (``BudgetExhausted``) — or at least charges the cap. Measured on main: both publish, nothing charged."""
    from veil.errors import BudgetExhausted, PublicationRefused
    from veil.generators.transaction import publish
    from veil.policy import load_policy
    from veil.store.catalog import table_budgets

    frame = _people(seed=8)
    path, policy = _world(tmp_path, _PEOPLE, frame)
    path.write_text(path.read_text().replace('privacy_unit = "row"\n', 'privacy_unit = "row"\nepsilon_total = 0.1\n'))
    policy = load_policy(path)
    with pytest.raises(BudgetExhausted):  # the cap binds a DP release
        publish(policy, "krr", {"table": "people", "columns": ["sex"], "epsilon": 1.0, "output": "k"}, progress=False)
    try:
        publish(policy, kind, {**request_, "table": "people", "output": "pub"}, progress=False)
    except (PublicationRefused, BudgetExhausted):
        return
    remaining = table_budgets(policy)[0]["epsilon_remaining"]
    assert remaining < 0.1, (
        f"{kind} published the exact values of a table capped at ε = 0.1 and the cap still shows {remaining} remaining"
    )


# ==================================================================================================
# F6: noise addition refused or not on one person's lone value
# ==================================================================================================

_HOURS = 'age = { type = "int", lower = 17, upper = 90 }\nhours = { type = "int", lower = 1, upper = 99 }\n'


def _noise_refused(base: Path, *, target: bool, seed: int) -> bool:
    from veil.errors import PublicationRefused
    from veil.generators.randomness import reproducible_for_tests
    from veil.generators.transaction import publish

    rng = np.random.default_rng(0)
    n = 300
    frame = pd.DataFrame({"age": rng.integers(20, 60, n), "hours": np.clip(np.round(rng.normal(40, 1.5, n)), 37, 43).astype(int)})
    if target:
        frame.loc[7, "hours"] = 50  # person 7 alone works 50 hours
    _, policy = _world(base, _HOURS, frame)
    request = {"table": "people", "method": "noise_addition", "columns": ["hours"], "params": ["a=0.13"]}
    try:
        with reproducible_for_tests(seed):  # the same draws for D and D′ (the internal test path, s66 F1)
            publish(policy, "sdc", {**request, "output": "pub"}, progress=False)
    except PublicationRefused:
        return True
    return False


def test_f6_noise_addition_ends_the_same_way_with_or_without_one_persons_lone_value(tmp_path: Path) -> None:
    """F6: 300 people's hours (37–43, each value held by ≥ 5), ``noise_addition --param a=0.13`` at seeds 0–9, with and
    without person 7 at 50 hours. Property: whether the publication lands does not depend on person 7 beyond a seed or
    two (deterministic: the curator's seed draws the noise). Measured on main: refused 6 of 10 with, 0 of 10 without."""
    with_target = sum(_noise_refused(tmp_path / f"d{s}", target=True, seed=s) for s in range(10))
    without = sum(_noise_refused(tmp_path / f"p{s}", target=False, seed=s) for s in range(10))
    assert with_target <= without + 2, (
        f"noise addition refused for {with_target} of 10 seeds with person 7's lone 50 hours, {without} of 10 without"
    )


@pytest.mark.xfail(
    strict=True,
    reason="s64 F6b (LOW): kanon --sensitive is refused with person 7's lone gain and published without: the table's "
    "existence is person 7's presence",
)
def test_f6_b_kanon_sensitive_ends_the_same_way_with_or_without_one_persons_lone_value(tmp_path: Path) -> None:
    """F6b: 200 people, gains in hundreds each held by 5; ``kanon --qi age,sex --sensitive gain -k 5`` with and without
    person 7 at 1,234. Property: both worlds end the same way (both published, 1,234 recoded or suppressed; or both
    refused). Measured on main: refused with person 7, published without."""
    from veil.errors import PublicationRefused
    from veil.generators.transaction import publish

    outcomes = []
    for target in (True, False):
        frame = _people(seed=11)
        if target:
            frame.loc[7, "gain"] = 1234
        _, policy = _world(tmp_path / str(target), _PEOPLE, frame)
        request = {
            "table": "people",
            "algorithm": "mondrian",
            "k": 5,
            "qi": ["age", "sex"],
            "sensitive": ["gain"],
            "output": "pub",
        }
        try:
            publish(policy, "kanon", request, progress=False)
            outcomes.append("published")
        except PublicationRefused:
            outcomes.append("refused")
    assert outcomes[0] == outcomes[1], f"with person 7: {outcomes[0]}; without: {outcomes[1]}"


# ==================================================================================================
# F7: a numeric quasi-identifier's class endpoints publish one person's interior value
# ==================================================================================================


def _endpoints(label: Any) -> set[str]:
    text = str(label).strip()
    if text[:1] in "[(" and "," in text:
        return {t.strip() for t in text[1:-1].split(",")}
    return {text}


@pytest.mark.parametrize(
    ("algorithm", "seed", "value", "kanon_seed"),
    # OKA shows it too (4 of 16 unseeded runs; '[1234, 2100]', '[1234, 2900]'), but its classes vary from run to run
    # even with --seed, so it is left out of a deterministic witness
    [("mondrian", 0, 1234, None), ("mondrian", 3, 2567, None), ("kmember", 1, 2567, None)],
)
def test_f7_a_quasi_identifier_label_never_publishes_a_value_one_person_alone_holds(
    tmp_path: Path, algorithm: str, seed: int, value: int, kanon_seed: int | None
) -> None:
    """F7: 200 people, gains in hundreds (0 … 3,000), person 7's gain an interior value nobody else holds;
    ``kanon --qi age,gain -k 5``. Property: no published label of ``gain`` has that value as an endpoint (it is public
    exactly when person 7 is in the source). Measured on main: ``[900, 1234]`` and ``[2300, 2567]`` (Mondrian),
    ``[2300, 2567]`` (K-Member)."""
    from veil.errors import PublicationRefused
    from veil.generators.transaction import publish

    rng = np.random.default_rng(seed)
    n = 200
    frame = pd.DataFrame(
        {
            "age": rng.integers(20, 60, n),
            "sex": rng.choice(["F", "M"], n),
            "job": rng.choice(["a", "b", "c"], n),
            "gain": rng.integers(0, 31, n) * 100,
        }
    )
    frame.loc[7, "gain"] = value
    path, policy = _world(tmp_path, _PEOPLE, frame)
    try:
        publish(
            policy,
            "kanon",
            {"table": "people", "algorithm": algorithm, "k": 5, "qi": ["age", "gain"], "output": "pub"},
            progress=False,
        )
    except PublicationRefused:
        return
    labels = _analyst(path, "SELECT DISTINCT gain FROM pub")["gain"]
    shown = sorted(str(g) for g in labels if str(value) in _endpoints(g))
    assert not shown, f"kanon ({algorithm}) publishes person 7's lone gain {value} as a class endpoint: {shown}"


# ==================================================================================================
# F8: the distance-to-closest-record check passes verbatim training rows
# ==================================================================================================


def _synthetic_verify(synthetic: pd.DataFrame, train: pd.DataFrame, holdout: pd.DataFrame, seed: int) -> bool:
    """``gate.verify`` on a synthetic publication ``synthetic``: whether it passes."""
    from veil.errors import PublicationRefused
    from veil.generators import gate
    from veil.generators.publication import ColumnProtection, Plan, Publication

    plan = Plan(kind="synth", method="synth-test", source="people", output="o", params={}, checks={}, dp=False)
    pub = Publication(
        method="synth-test",
        guarantee="test",
        frame=synthetic,
        columns=tuple(ColumnProtection(str(c), "synthesised") for c in synthetic.columns),
        synthetic=True,
    )
    try:
        gate.verify(plan, pub, train=train, holdout=holdout, spec=None, generator=np.random.default_rng(seed))
    except PublicationRefused:
        return False
    return True


def _split_people(n: int, seed: int) -> tuple[pd.DataFrame, pd.DataFrame, np.random.Generator]:
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({"age": rng.integers(17, 90, n), "gain": rng.integers(0, 5000, n), "sex": rng.choice(["F", "M"], n)})
    order = rng.permutation(n)
    hold = round(n * 0.2)  # the transaction's split for synthetic kinds
    return frame.iloc[order[hold:]].reset_index(drop=True), frame.iloc[order[:hold]].reset_index(drop=True), rng


@pytest.mark.parametrize(("n", "copied"), [(150, 1.0), (10_000, 0.03)])
def test_f8_the_gate_refuses_a_synthetic_table_that_copies_training_rows(n: int, copied: float) -> None:
    """F8: a "synthetic" table of 1,000 (n = 150) or 10,000 rows of which ``copied`` are verbatim training rows and the
    rest fresh draws from the same distribution. Property: the gate refuses it in most of 5 draws (a table that copies
    training rows is what the check exists to refuse). Measured on main: it passes 5 of 5 (n = 150: every row a
    copy; n = 10,000: 300 copied rows)."""
    passed = 0
    for seed in range(5):
        train, holdout, rng = _split_people(n, seed)
        rows = 1000 if n < 1000 else n
        k = int(copied * rows)
        fresh = pd.DataFrame(
            {"age": rng.integers(17, 90, rows), "gain": rng.integers(0, 5000, rows), "sex": rng.choice(["F", "M"], rows)}
        )
        copies = train.sample(n=k, replace=k > len(train), random_state=seed)
        synthetic = pd.concat([copies, fresh.iloc[k:]], ignore_index=True)
        passed += _synthetic_verify(synthetic, train, holdout, seed)
    assert passed <= 2, f"{passed} of 5 synthetic tables with {copied:.0%} verbatim training rows (source of {n}) pass the gate"


# ==================================================================================================
# F9: noise addition on a bool column publishes a constant
# ==================================================================================================


def test_f9_noise_addition_on_a_bool_column_publishes_both_values(tmp_path: Path) -> None:
    """F9: 300 people, ``married`` a declared ``bool`` (about half true); noise addition at a = 1. Property: the
    published column holds both values (or the publication is refused as unusable). Measured on main: 300 ``True``."""
    from veil.errors import PublicationRefused
    from veil.generators.transaction import publish

    rng = np.random.default_rng(9)
    frame = pd.DataFrame({"age": rng.integers(20, 60, 300), "married": rng.integers(0, 2, 300).astype(bool)})
    columns = 'age = { type = "int", lower = 17, upper = 90 }\nmarried = { type = "bool" }\n'
    path, policy = _world(tmp_path, columns, frame)
    request = {"table": "people", "method": "noise_addition", "columns": ["married"], "params": ["a=1"], "output": "pub"}
    try:
        publish(policy, "sdc", request, progress=False)
    except PublicationRefused:
        return
    shown = _analyst(path, "SELECT married, COUNT(*) AS n FROM pub GROUP BY married")
    assert len(shown) == 2, f"noise addition published married as {shown.to_dict('records')}"


# ==================================================================================================
# F10: homogeneous k-anonymous classes publish their members' sensitive value
# ==================================================================================================


def test_f10_a_k_anonymous_class_does_not_publish_its_members_sensitive_value(tmp_path: Path) -> None:
    """F10: 300 people, income (``<=50K``/``>50K``) more often high with age; ``kanon --qi age,sex --sensitive income
    -k 5`` (Mondrian: classes are disjoint boxes, so age and sex find a person's one class). Property: no person's
    class holds one income value only (or the gate refuses the table: ℓ < 2). Measured on main: ℓ = 1 reported,
    90 people read exactly."""
    from veil.errors import PublicationRefused
    from veil.generators.transaction import publish

    rng = np.random.default_rng(10)
    n = 300
    age = rng.integers(18, 70, n)
    frame = pd.DataFrame(
        {
            "age": age,
            "sex": rng.choice(["F", "M"], n),
            "income": np.where(rng.random(n) < np.clip((age - 25) / 60, 0.0, 0.6), ">50K", "<=50K"),
        }
    )
    columns = (
        'age = { type = "int", lower = 17, upper = 90 }\n'
        'sex = { type = "category", values = ["F", "M"] }\n'
        'income = { type = "category", values = ["<=50K", ">50K"] }\n'
    )
    path, policy = _world(tmp_path, columns, frame)
    request = {"table": "people", "algorithm": "mondrian", "k": 5, "qi": ["age", "sex"], "sensitive": ["income"], "output": "pub"}
    try:
        publish(policy, "kanon", request, progress=False)
    except PublicationRefused:
        return
    pub = _analyst(path, "SELECT age, sex, income FROM pub")
    read = 0
    for row in frame.itertuples(index=False):
        mine = pub[[_in_label(a, row.age) and _in_label(s, row.sex) for a, s in zip(pub["age"], pub["sex"], strict=True)]]
        values = set(mine["income"])
        if len(values) == 1 and values == {row.income}:
            read += 1
    assert read == 0, f"{read} of {n} people's income is the only value of their k-anonymous class"


# ==================================================================================================
# F11: repeated noise addition averages below the gate's noise floor
# ==================================================================================================


def test_f11_repeated_noise_addition_does_not_average_below_the_noise_floor(tmp_path: Path) -> None:
    """F11: 300 people's income, hours and weight (floats); ``noise_addition --param a=0.1`` (the gate's floor)
    published 8 times to 8 outputs. The analyst links every release's rows to the first's (assignment on standardised
    distance) and averages. Property: the average is not much closer to the people's values than one release (the
    gate's floor is what one column of people may be published with). Measured on main (3 runs): median relative income
    error 5.1–5.5 % for one release, 2.5–2.7 % for the average of 8 (ratio 0.49–0.53). Randomised (CSPRNG noise): a
    pass on main (a ratio above 0.7) was not seen and would need the averaging gain to collapse."""
    from scipy.optimize import linear_sum_assignment

    from veil.errors import PublicationRefused
    from veil.generators.transaction import publish

    rng = np.random.default_rng(18)
    n = 300
    frame = pd.DataFrame(
        {
            "income": np.round(rng.lognormal(10.5, 0.6, n), 2),
            "hours": np.round(rng.normal(40, 8, n).clip(1, 98), 1),
            "weight": np.round(rng.normal(75, 12, n).clip(31, 199), 1),
        }
    )
    columns = (
        'income = { type = "float", lower = 0, upper = 200000 }\n'
        'hours = { type = "float", lower = 0, upper = 99 }\n'
        'weight = { type = "float", lower = 30, upper = 200 }\n'
    )
    path, policy = _world(tmp_path, columns, frame)
    names = list(frame.columns)
    releases = []
    for i in range(8):
        request = {"table": "people", "method": "noise_addition", "columns": names, "params": ["a=0.1"], "output": f"n{i}"}
        try:
            publish(policy, "sdc", request, progress=False)
        except PublicationRefused:
            return  # a class-level fix may refuse re-publishing a population's column with fresh noise
        releases.append(_analyst(path, f"SELECT {', '.join(names)} FROM n{i}")[names].to_numpy(dtype=float))
    scale = releases[0].std(axis=0)

    def matched(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        rows, cols = linear_sum_assignment((((a[:, None, :] - b[None, :, :]) / scale) ** 2).sum(axis=2))
        return rows, cols

    linked = [releases[0]]
    for other in releases[1:]:
        rows, cols = matched(releases[0], other)
        aligned = np.empty_like(other)
        aligned[rows] = other[cols]
        linked.append(aligned)
    average = np.mean(linked, axis=0)
    truth = frame[names].to_numpy(dtype=float)

    def income_error(estimate: np.ndarray) -> float:
        rows, cols = matched(estimate, truth)  # the measurement's own matching to people (the attacker needs none)
        return float(np.median(np.abs(estimate[rows, 0] - truth[cols, 0]) / truth[cols, 0]))

    single, averaged = income_error(releases[0]), income_error(average)
    assert averaged >= 0.7 * single, (
        f"the average of 8 noise-addition releases at a = 0.1 has median income error {averaged:.1%} against {single:.1%} "
        "for one release"
    )
