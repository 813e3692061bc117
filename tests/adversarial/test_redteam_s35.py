"""Red team, session 35: the publication gate and published tables (threat class 5).

Publications run through the real publish transaction (``veil.generators.transaction.publish``, what ``veil
publish`` calls) on the small generated warehouse of :mod:`tests.publish_support`; what an analyst reads is the
public mirror (``SELECT … FROM <published>`` at ε = 0). Neighbouring worlds differ in one person (person 7).
Helpers come from :mod:`tests.adversarial.test_redteam_s16`. Findings (details in each test's docstring):

* A1 (HIGH) a publication read the source with the dtypes the *warehouse* gave its columns, and ``veil ingest``
  types a CSV column from every value in it: one person's non-numeric text in an ``int`` or ``bool`` column (say
  ``'x'``) made the whole column VARCHAR. kRR then read every row's value as outside the domain (NA): at ε = 2.5 on
  a two-value column, 339 of 398 published rows were NULL instead of ~30 — every person's randomised value moved,
  a one-person bit at a privacy loss of 400·ε for a release charged ε; the DP grid was refused, free, naming the
  dtype ("column 'gain' is not numeric"), and k-anonymity generalised the numeric QI as a flat category (its
  labels change from ranges to ``*``). Fixed: the source is read as the policy types it
  (``veil.store.declared_types.as_source``): a value of a numeric or boolean column that does not convert is
  missing, for that person alone, as the query path's typed reads treat it.
* A2 (HIGH impact, needs a curator write racing a publication) ``write_table``/``veil ingest --replace`` checked
  "is this name published?" before opening the warehouse, and the publication's last step copies the
  *warehouse's* table into the public mirror: a raw write landing between the commit (rename) and that copy was
  published to every analyst, raw rows and identifying columns included; one landing after the publication
  stayed in the warehouse under the published name (private queries join it, and the next mirror copy reads it).
  Fixed: the check is repeated inside the writer, refusing a name that is published *or* held by a pending
  publication's journal row.
* A3 (LOW) k-anonymity refused a numeric QI with more than 1,024 distinct values, counted on the private rows
  (``kanon/generalise.py`` ``_TABLE_LIMIT``): one person's new value decided whether the table is published, and the
  refusal stated the count. Fixed: a wide QI's costs are computed from its values on each lookup
  (``generalise.RangeCost``), the same numbers as the stored table (checked for every algorithm).
* A4 (LOW) k-anonymity refused the table ("generator NCP … and audit NCP … disagree … a bug in Veil",
  InternalError) when a person dropped for a missing sensitive value alone held a numeric QI's extreme: the class
  reaching the table's extreme is published open and the audit reads the open end as the population's extreme,
  the generator measured it to the table's. One person's infinite QI made every NCP NaN and the population check
  refuse. Fixed: open ends are measured to the population's extremes (``QISpace(ends=…)``); ±inf in a numeric QI is
  missing.
* A5 (LOW) SDC filters (noise addition, rank swapping, MDAV) ran on one person's ``inf`` and crashed untyped in the
  release metrics (``ValueError: data must be finite``, exit 1); ML copy refused. Fixed: ±inf is a missing value
  (``sdc.complete_rows``), that row alone left out.
* Held (by hand, sweep of NULL, NaN, ±inf, 1e300, −5, ``'x'``, ``' '``, an undeclared category in every column of
  person 7, for kRR, the DP grid (Laplace and exponential), MDAV, noise addition, rank swapping, ML copy and
  k-anonymity with each algorithm): after the fixes every publication ends as with an ordinary value, with the same
  column names and DuckDB types. Not findings: MDAV publishes a group's centroid clamped to the declared bound when
  one member's value is huge (the group shows an outlier; k holds; s16 A9 noted it), rank swapping publishes single
  values as they are (no guarantee claimed).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from tests.adversarial.test_redteam_s16 import _publish, _published, _warehouse
from tests.publish_support import POLICY, people

# ==================================================================================================
# A1. The source's column types come from the warehouse, which one person's value decides
# ==================================================================================================

_TYPED_POLICY = POLICY.replace(
    "[analysts.bob]",
    'code = {{ type = "int", values = [1, 2] }}\nflag = {{ type = "bool" }}\n'
    'grade = {{ type = "category", values = ["1", "2"] }}\n[analysts.bob]',
)


def _typed_world(base: Path, odd: Any) -> Any:
    """150 people with a two-valued ``code`` and a boolean ``flag``; person 7's ``code``, ``flag``, ``age`` and
    ``gain`` are ``odd`` (None: missing, as the policy reads a non-number)."""
    frame = people(150, seed=1)
    frame["code"] = 1 + (np.arange(150) % 2)
    frame["flag"] = np.arange(150) % 3 == 0
    frame["grade"] = 1 + (np.arange(150) % 2)  # a category of digits: stored as numbers unless one is text
    for c in ("code", "flag", "grade", "age", "gain"):
        frame[c] = frame[c].astype(object)
        frame.loc[7, c] = odd
    return _warehouse(base, frame, policy_text=_TYPED_POLICY)


@pytest.fixture(scope="module")
def typed_worlds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """D (person 7's values missing) and D′ (the text 'x'), built once for the A1 family."""
    base = tmp_path_factory.mktemp("s35_typed")
    return {world: _typed_world(base / world, odd) for world, odd in (("d", None), ("d2", "x"))}


def _outcome(policy: Any, case: str) -> Any:
    """What an analyst learns from publication ``case`` (a number or a label set), or the refusal's type."""
    from veil.errors import VeilError

    out = f"pub_{case.replace('-', '_')}"
    try:
        if case.startswith("krr"):
            col = {"krr-int": "code", "krr-bool": "flag", "krr-category": "grade"}[case]
            _publish(policy, "krr", {"table": "people", "columns": [col], "epsilon": 2.5, "output": out})
            return _published(policy, f"SELECT count(*) FILTER (WHERE {col} IS NULL) FROM {out}")[0][0]
        if case == "dp-grid":
            _publish(policy, "sdc", {"table": "people", "method": "dp_microagg_laplace", "params": ["epsilon=1"],
                                     "columns": ["gain"], "output": out})  # fmt: skip
            return "published"
        if case == "kanon":
            _publish(policy, "kanon", {"table": "people", "qi": ["age", "sex"], "sensitive": ["income"], "k": 5,
                                       "algorithm": "mondrian", "output": out})  # fmt: skip
            labels = [r[0] for r in _published(policy, f"SELECT DISTINCT age FROM {out}")]
            return "ranges" if any(str(v)[:1] in "[(" for v in labels) else f"no ranges: {sorted(map(str, labels))[:4]}"
    except VeilError as exc:
        return f"refused: {type(exc).__name__}: {exc}"
    raise AssertionError(case)


@pytest.mark.parametrize("case", ["krr-int", "krr-bool", "krr-category", "dp-grid", "kanon"])
def test_A1_one_persons_text_in_a_typed_column_does_not_retype_the_publication(typed_worlds: dict[str, Any], case: str) -> None:
    """HIGH — interface: ``veil publish krr|sdc|kanon`` (Python publish API). Worlds: person 7's ``code``/``flag``/
    ``age``/``gain`` missing (D) or the text ``'x'`` (D′; ``veil ingest`` then stores those columns as VARCHAR).
    The policy reads ``'x'`` in an ``int``/``bool`` column as missing, so D and D′ are the same table to it: every
    publication must end the same way and publish from the same distribution. Before the fix kRR's NULL count went
    from ~10 to ~130 of 150 (every row's value read as NA; 30 vs 340 of 400 measured), the DP grid was refused for
    D′ only, and Mondrian's numeric QI came out as flat categories. ``grade`` (a category declared ``["1", "2"]``)
    the other way round: stored as numbers in D, it matched no declared value and kRR published 129 of 150 NULL."""
    got = {world: _outcome(policy, case) for world, policy in typed_worlds.items()}
    if case.startswith("krr"):
        # ε = 2.5 over 3 values (two and NA): a non-missing value turns NULL with probability 0.07 (10 of 150
        # expected), a missing one stays NULL with probability 0.86: 60 is over 10 standard deviations from either
        assert all(isinstance(v, int) and v < 60 for v in got.values()), got
    else:
        assert got["d"] == got["d2"], got


# ==================================================================================================
# A2. A raw curator write racing a publication reaches the public mirror
# ==================================================================================================

_PHASES = ("commit_publication", "finish_publication", "after")  # before staging: the commit replaces it (held)


def _race(tmp_path: Path, phase: str) -> tuple[Any, list[BaseException]]:
    """``write_table(policy, "pub", raw, replace=True)`` passes its "published?" check before a kRR publication to
    ``pub`` starts, and its write lands just before the publication's ``phase`` (or after it ended)."""
    import veil.store.warehouse as wh

    raw = people(60, seed=5)
    policy = _warehouse(tmp_path, people(60))
    checked, proceed = threading.Event(), threading.Event()
    errors: list[BaseException] = []
    original_check = wh._refuse_published
    calls = [0]

    def slow_check(pol: Any, table: str) -> None:
        original_check(pol, table)
        calls[0] += 1
        if calls[0] == 1:  # the writer's first check passes, then it is descheduled
            checked.set()
            proceed.wait(30)

    def write() -> None:
        try:
            wh.write_table(policy, "pub", raw, replace=True)
        except BaseException as exc:
            errors.append(exc)

    patches: list[tuple[str, Callable[..., Any]]] = [("_refuse_published", slow_check)]
    thread = threading.Thread(target=write)

    def let_the_write_land() -> None:
        proceed.set()
        thread.join(30)

    if phase != "after":
        original_step = getattr(wh, phase)

        def step(*args: Any, **kwargs: Any) -> Any:
            let_the_write_land()
            return original_step(*args, **kwargs)

        patches.append((phase, step))
    with pytest.MonkeyPatch.context() as mp:
        for name, fn in patches:
            mp.setattr(wh, name, fn)
        thread.start()
        assert checked.wait(30)
        _publish(policy, "krr", {"table": "people", "columns": ["sex"], "epsilon": 1.0, "output": "pub", "replace": True})
        let_the_write_land()
    assert not thread.is_alive()
    return policy, errors


@pytest.mark.parametrize("phase", _PHASES)
def test_A2_a_raw_write_racing_a_publication_is_never_published(tmp_path: Path, phase: str) -> None:
    """HIGH impact (raw rows, names included, read by every analyst at ε = 0), needs a curator's ``veil ingest
    --replace`` (or ``write_table``) racing ``veil publish`` to the same name — interface: curator API / CLI.
    Whatever phase of the publication the raw write lands in, the public mirror never holds the raw rows, and the
    warehouse's table under a published name is never raw (private queries join it; the mirror is copied from
    it). Before the fix the phases ``finish_publication`` (mirror) and ``after`` (warehouse) failed."""
    from veil.store.publications import published_tables
    from veil.store.warehouse import read_table

    policy, errors = _race(tmp_path, phase)
    assert all("published" in str(e) or "publication" in str(e) for e in errors), errors
    mirror = _published(policy, "SELECT * FROM information_schema.columns WHERE table_name = 'pub'")
    assert mirror and not any(r[3] == "name" for r in mirror), "the public mirror holds the raw table"
    assert "pub" in published_tables(policy)
    assert "name" not in read_table(policy, "pub").columns, "the published name holds raw rows in the warehouse"


# ==================================================================================================
# A3. k-anonymity refuses a numeric QI of more than 1,024 distinct values: one person's new value decides
# ==================================================================================================


def test_A3_kanon_outcome_does_not_depend_on_one_persons_distinct_numeric_value(tmp_path: Path) -> None:
    """LOW (the s27 A3 class: whether the table is published depends on one person) — interface: ``veil publish
    kanon`` (Python publish API). Before the fix: 1,100 people whose ``gain`` (a QI, declared 0–5000) takes exactly 1,024 distinct
    values; person 7's gain is missing (D, dropped) or 4,321, a value nobody else has (D′). D publishes, D′ is
    refused ("numeric quasi-identifier 'gain' has 1025 distinct values (over 1024)") — the count, computed on the
    private rows, is in the message. Either world must end the same way (a data-independent rule: bins from the
    declared bounds, or costs computed from values for wide columns)."""
    from veil.errors import VeilError

    outcomes = {}
    for world, gain in (("d", None), ("d2", 4321)):
        frame = people(1100, seed=2)
        frame["gain"] = (np.arange(1100) % 1024) * 2  # even values 0…2046: 1,024 distinct
        frame["gain"] = frame["gain"].astype(object)
        frame.loc[7, "gain"] = gain  # person 1031 holds person 7's former 14: still 1,024 values without them
        policy = _warehouse(tmp_path / world, frame)
        try:
            _publish(policy, "kanon", {"table": "people", "qi": ["gain", "sex"], "sensitive": ["income"], "k": 5,
                                       "algorithm": "mondrian", "output": "pub"})  # fmt: skip
            outcomes[world] = "published"
        except VeilError as exc:
            outcomes[world] = f"refused: {exc}"
    assert outcomes["d"] == outcomes["d2"], outcomes


# ==================================================================================================
# A4. k-anonymity refuses the table when a person dropped for a missing value alone holds a QI's extreme
# ==================================================================================================


def _extreme_world(base: Path, age: Any, income: Any) -> Any:
    """120 people aged 18–79; person 7 is aged ``age`` with income ``income`` (None: dropped by ``--missing drop``)."""
    frame = people(120, seed=6)
    frame["age"] = 18 + (np.arange(120) * 7) % 62
    frame["age"], frame["income"] = frame["age"].astype(object), frame["income"].astype(object)
    frame.loc[7, "age"], frame.loc[7, "income"] = age, income
    return _warehouse(base, frame)


@pytest.mark.parametrize(
    ("algorithm", "age", "income"),
    [("mondrian", 89, None), ("kma", -5, None), ("kma", 1e300, None), ("mondrian", float("inf"), "low")],
)
def test_A4_kanon_ends_the_same_whoever_holds_a_quasi_identifiers_extreme(
    tmp_path: Path, algorithm: str, age: Any, income: Any
) -> None:
    """LOW (the s27 A3 class: the outcome depends on one person; availability) — interface: ``veil publish kanon``
    (Python publish API). Person 7's income is missing, so ``--missing drop`` leaves them out of the table, but their
    age still counts in the population whose range NCP divides by. When they alone hold its largest (89, 1e300) or
    smallest (−5) age, the top class is published open, ``[lo, inf)``; the audit reads the open end as the
    population's 89 while the generator measured it to the table's 79: "generator NCP … and audit NCP …
    disagree … This is a bug in Veil" (InternalError), nothing published — an ordinary 40 publishes. Person 7 with a
    known income and age ∞ made every NCP NaN and the population check refuse the table. Every world must
    publish, as D (person 7 aged 40) does."""
    result = _publish(_extreme_world(tmp_path / "d2", age, income), "kanon", _kanon_request(algorithm))
    assert result.rows and result.rows >= 119 - (income is None)


def _kanon_request(algorithm: str) -> dict[str, Any]:
    return {"table": "people", "qi": ["age", "sex"], "sensitive": ["income"], "k": 5, "algorithm": algorithm,
            "output": "pub"}  # fmt: skip


# ==================================================================================================
# A5. One person's infinite value ends an SDC filter in an untyped crash
# ==================================================================================================


@pytest.mark.parametrize(
    ("method", "params"), [("noise_addition", ["a=0.5"]), ("rank_swapping", ["p=10"]), ("microagg_mdav", ["k=5"])]
)
def test_A5_one_persons_infinite_value_is_a_missing_value_to_sdc_filters(tmp_path: Path, method: str, params: list[str]) -> None:
    """LOW (the outcome depends on one person; an untyped crash) — interface: ``veil publish sdc`` (Python publish
    API). Person 7's ``gain`` is ``inf`` (a float the warehouse stores as it is). Rows with a missing value are left
    out, but ``inf`` was not: the filter ran on it and the release metrics' KD-tree raised ``ValueError: data must
    be finite`` (exit 1, traceback; ML copy refused "metrics need finite values") where any finite value
    publishes. ``inf`` is in no declared domain: it must be a missing value, for that person alone."""
    frame = people(120, seed=4)
    frame["gain"] = frame["gain"].astype(object)
    frame.loc[7, "gain"] = float("inf")
    policy = _warehouse(tmp_path, frame)
    result = _publish(policy, "sdc", {"table": "people", "method": method, "params": params, "columns": ["gain", "hours"],
                                      "output": "pub"})  # fmt: skip
    assert result.rows == 119


@pytest.mark.parametrize("algorithm", ["mondrian", "mondrian-relaxed", "kma", "oka"])
def test_A3_costs_computed_from_values_give_the_stored_tables_classes(monkeypatch: pytest.MonkeyPatch, algorithm: str) -> None:
    """The A3 fix's guarantee: a QI anonymised with costs computed from its values (``RangeCost``, used above 1,024
    distinct values) gets exactly the classes and NCP of the stored cost table."""
    import veil.generators.kanon.generalise as generalise
    from veil.generators.kanon import anonymise

    rng = np.random.default_rng(1)
    frame = pd.DataFrame({"gain": rng.integers(0, 300, 300).astype(float), "age": rng.integers(17, 90, 300),
                          "sex": rng.choice(["F", "M"], 300), "income": rng.choice(["a", "b"], 300)})  # fmt: skip
    runs = []
    for limit in (generalise._TABLE_LIMIT, 0):
        monkeypatch.setattr(generalise, "_TABLE_LIMIT", limit)
        result = anonymise(frame, qi=["gain", "age", "sex"], k=4, algorithm=algorithm, sensitive=["income"], seed=3)
        runs.append(
            (sorted(map(tuple, result.table[["gain", "age", "sex"]].astype(str).to_numpy().tolist())), result.ncp_percent)
        )
    assert runs[0] == runs[1]
