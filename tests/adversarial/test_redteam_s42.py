"""Red team, session 42: curator publication paths and what published tables show analysts (threat class 5), main at
80d6937 (2026-11-27).

Publications run through the real publish transaction (``veil.generators.transaction.publish``, what ``veil publish``
calls) on a small generated warehouse (:mod:`tests.publish_support`); what an analyst reads is the public mirror at
ε = 0. Neighbouring worlds differ in one person (person 7). Findings (details in each test's docstring):

* A1 (MEDIUM; careless curator, every analyst reads the result at ε = 0) k-anonymity publishes its ``--sensitive``
  columns value by value, and took them whatever their declared domain. The gate refuses an *undeclared* column
  (``test_publications.test_kanon_refuses_an_identifier_as_a_sensitive_column``), but one declaration away — ``name =
  { type = "category" }``, an open category that analysts may count — ``--sensitive name`` published every person's
  name (every row, with Mondrian, OKA and K-Member alike); an unbounded ``bonus`` published person 7's 10⁶ exactly, a
  rare open category (``"astronaut"``) appeared in the public table exactly when person 7 was in the private one.
  Fixed by construction (``veil/generators/columns.require_declared_domains``, called in the kanon plug-in's plan): a
  sensitive column needs a declared domain (``values``, a bool, or numeric ``lower``/``upper``), a refusal from the
  policy alone, before anything is read; ``_within_domains`` already reads an out-of-domain value as missing.
* A2 (LOW; no guarantee is claimed for these filters, but the gate documents "numbers within the declared bounds")
  the SDC filters (noise addition, MDAV; DBSCAN and rank swapping share the path) took a column without declared
  bounds with the *rows'* ``[min, max]`` as its domain (``generators/domain.column_domain``'s "observed" fallback),
  so the public column's range was the private one: person 7's ``bonus`` of 10⁶ (everyone else ≤ 3,000) made the
  published maximum ~10⁵–10⁶ (noise addition, MDAV), ≤ 3,000 without them. Fixed by construction: ``veil publish
  sdc`` requires declared bounds for every protected column (the same helper, in the sdc plug-in's plan); library use
  on public data (``compare_methods``) keeps observed domains.
* A3 (MEDIUM; needs a curator to publish over a name the policy declares public, which ``check_output`` allowed, or to
  declare a published name public later) ``veil retract ref`` recorded the retraction, said "status: private" and
  dropped the mirror's copy — and every analyst kept reading the retracted rows: a session copies each table the
  policy declares public from the warehouse into the mirror when it finds none there (``Env._copy_stale_public``),
  and the warehouse still holds the publication. Fixed: ``check_output`` refuses a declared-public output before the
  charge (``veil/generators/transaction.py``), and ``retract`` refuses, typed and before recording anything, a name the
  policy declares public (``veil/store/catalog.py``, outside this round's listed files: a two-line check).
* A4 (LOW; budget waste, no leak: the refusal is a function of the DP output) the SDC plan checked a DP (or
  bounds-needing) column for bounds only: a numeric column that also declares ``values`` passed, the DP grid drew
  numbers anywhere in ``[lower, upper]`` after the charge, and the gate refused every table whose rounded value missed
  the list (3 tries: 3ε charged, nothing published). Fixed in ``check_policy_columns`` (plan, free).
* Held (probed by hand this round): the mirror's copy of a published table has the warehouse's column types (kRR,
  k-anonymity); k-anonymity's generalised QIs of an open category are published as ``*`` or as values held by a whole
  class, never one person's; kRR and the exponential DP grid (with a label) on 0–3 rows, one label class or an
  infinite value end only as published or refused by the noise (``rng`` fixed), typed. Read, not re-run: the output
  claim and the re-check under the writer (s27/s35), a retracted undeclared name leaves the mirror and the catalog,
  and a policy that later declares a published name private makes it private (``build_catalog``: the policy wins).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from tests.publish_support import POLICY, people

#: The policy of :mod:`tests.publish_support` with two open columns an analyst may query: a declared category
#: without values (a name) and an int without bounds.
_OPEN_POLICY = POLICY.replace(
    "[analysts.bob]",
    'name = {{ type = "category" }}\nbonus = {{ type = "int" }}\nnote = {{ type = "category" }}\n[analysts.bob]',
)

_OUTLIER = 1_000_000


def _frame(with_person_7: bool) -> pd.DataFrame:
    frame = people(60, seed=3)
    rng = np.random.default_rng(3)
    frame["bonus"] = rng.integers(0, 3000, len(frame))
    frame["note"] = np.where(np.arange(len(frame)) % 2 == 0, "nurse", "smith")
    frame.loc[7, ["bonus", "note", "name"]] = [_OUTLIER, "astronaut", "alice liddell"]
    return frame if with_person_7 else frame.drop(index=7).reset_index(drop=True)


def _warehouse(base: Path, frame: pd.DataFrame) -> Any:
    from veil.policy import load_policy
    from veil.store.warehouse import ingest_file

    base.mkdir(parents=True, exist_ok=True)
    path = base / "policy.toml"
    path.write_text(_OPEN_POLICY.format(table_budget=""), encoding="utf-8")
    csv = base / "people.csv"
    frame.to_csv(csv, index=False)
    policy = load_policy(path)
    ingest_file(policy, "people", csv)
    return policy


@pytest.fixture(scope="module")
def worlds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """D (person 7 in, holding a unique name, a rare category and an outlier) and D′ (person 7 out)."""
    base = tmp_path_factory.mktemp("s42")
    return {w: _warehouse(base / w, _frame(w == "d")) for w in ("d", "d_prime")}


def _published(policy: Any, sql: str) -> list[tuple[Any, ...]]:
    """``sql`` on the public mirror: exactly what every analyst reads of published tables, at ε = 0."""
    from veil.store.warehouse import public_path, writer

    with writer(public_path(policy)) as con:
        return [tuple(r) for r in con.execute(sql).fetchall()]


def _outcome(policy: Any, kind: str, request: dict[str, Any], sql: str) -> Any:
    """What an analyst reads of the publication (``sql`` on it), or the refusal's type — never its message, which
    names no data either way."""
    from veil.errors import VeilError
    from veil.generators.transaction import publish

    try:
        publish(policy, kind, request, progress=False)
    except VeilError as exc:
        return f"refused: {type(exc).__name__}"
    return _published(policy, sql)


# ==================================================================================================
# A1. k-anonymity's sensitive columns are published value by value, whatever their domain
# ==================================================================================================


@pytest.mark.parametrize("algorithm", ["mondrian", "oka", "kmember"])
@pytest.mark.parametrize(
    ("column", "person_7s"),
    [("name", "alice liddell"), ("note", "astronaut"), ("bonus", _OUTLIER)],
    ids=["identifier", "rare-category", "outlier"],
)
def test_A1_a_sensitive_column_never_publishes_a_value_one_person_alone_holds(
    worlds: dict[str, Any], algorithm: str, column: str, person_7s: Any
) -> None:
    """``--qi age,sex --sensitive <open column>``, k = 5: the sensitive column is published unchanged, and with no
    declared domain every value of the rows is publishable — a name (every person's), a category one person holds, an
    outlier. Sound: the public table holds only values the policy declares, so the publication ends alike with and
    without person 7 (here: refused from the policy in both worlds), and person 7's own value is never in it."""
    out = f"pk_{algorithm}_{column}"
    request = {"table": "people", "qi": ["age", "sex"], "sensitive": [column], "k": 5, "algorithm": algorithm,
               "output": out}  # fmt: skip
    sql = f"SELECT DISTINCT CAST({column} AS VARCHAR) FROM {out}"
    seen = {w: _outcome(policy, "kanon", request, sql) for w, policy in worlds.items()}
    in_d = isinstance(seen["d"], list) and (str(person_7s),) in seen["d"]
    assert not in_d, f"{algorithm} published person 7's {column} {person_7s!r} at ε = 0 (found among {len(seen['d'])} values)"
    assert isinstance(seen["d"], str) == isinstance(seen["d_prime"], str), f"the worlds end differently: {seen}"


def test_A1_a_sensitive_column_with_a_declared_domain_still_publishes(worlds: dict[str, Any]) -> None:
    """The fix refuses only open domains: ``gain`` (declared bounds) is not refused for its domain. (pubgate: these
    gains are each one person's, so the s60 F2 rare-value rule refuses them on the output — typed, its own message;
    a declared category, ``income``, publishes as before.)"""
    from veil.errors import PublicationRefused
    from veil.generators.transaction import publish

    with pytest.raises(PublicationRefused, match="fewer than k = 5 source rows hold"):
        publish(worlds["d"], "kanon", {"table": "people", "qi": ["age", "sex"], "sensitive": ["gain"], "k": 5,
                                       "algorithm": "mondrian", "output": "pk_declared"}, progress=False)  # fmt: skip
    res = publish(worlds["d"], "kanon", {"table": "people", "qi": ["age", "sex"], "sensitive": ["income"], "k": 5,
                                         "algorithm": "mondrian", "output": "pk_declared"}, progress=False)  # fmt: skip
    assert res.rows and res.rows > 0


# ==================================================================================================
# A2. SDC filters took an unbounded column's domain from the rows
# ==================================================================================================


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize(
    ("method", "params"),
    [("noise_addition", ["a=0.5"]), ("microagg_mdav", ["k=5"])],
)
def test_A2_an_sdc_filter_never_takes_a_columns_range_from_the_rows(
    worlds: dict[str, Any], method: str, params: list[str]
) -> None:
    """``veil publish sdc --method M --columns bonus`` with ``bonus`` declared without bounds: the filter's domain was
    the rows' ``[min, max]``, so one person's 10⁶ (everyone else < 3,000) set the public column's range. Sound: the
    published range never depends on one person — refused from the policy alike in both worlds, or bounded alike."""
    out = f"ps_{method}"
    request = {"table": "people", "method": method, "params": params, "columns": ["bonus", "hours"], "output": out}
    seen = {w: _outcome(policy, "sdc", request, f"SELECT MAX(bonus) FROM {out}") for w, policy in worlds.items()}
    top = seen["d"][0][0] if isinstance(seen["d"], list) else None
    assert top is None or top < 30_000, f"{method} published MAX(bonus) = {top} with person 7 in, {seen['d_prime']} without"
    assert isinstance(seen["d"], str) == isinstance(seen["d_prime"], str), f"the worlds end differently: {seen}"


# ==================================================================================================
# A3. A retraction left a publication public when the policy declares its name public
# ==================================================================================================


@pytest.mark.parametrize("declared", ["before", "after"])
def test_A3_a_retracted_publication_is_never_readable_by_an_analyst(tmp_path: Path, declared: str) -> None:
    """``[tables.ref] public = true`` in the policy (a reference table the curator meant to refresh), then ``veil
    publish krr … --output ref`` and ``veil retract ref``: the retraction was recorded ("status: private") and the
    mirror's copy dropped, but a session copies every table the policy declares public from the warehouse into the
    mirror when it finds none (``Env._copy_stale_public``), and the warehouse still held the publication — so every
    analyst kept reading the retracted rows (COUNT 60, then ``SELECT sex, job FROM ref`` row by row). The same when
    the declaration is added after the publication. Sound: once ``retract`` succeeds, no analyst reads the table;
    a publication that could not be retracted is refused before it is charged."""
    from tests.publish_support import veil
    from veil.errors import VeilError
    from veil.generators.transaction import publish
    from veil.policy import load_policy
    from veil.store.catalog import retract

    policy = _warehouse(tmp_path, _frame(True))
    path = Path(policy.path)
    declaration = "\n[tables.ref]\npublic = true\n"
    if declared == "before":
        path.write_text(path.read_text(encoding="utf-8") + declaration, encoding="utf-8")
        policy = load_policy(path)
    try:
        publish(policy, "krr", {"table": "people", "columns": ["sex", "job"], "epsilon": 1.0, "output": "ref"}, progress=False)
    except VeilError:
        assert declared == "before"  # refused before the charge: nothing to retract
        return
    if declared == "after":
        path.write_text(path.read_text(encoding="utf-8") + declaration, encoding="utf-8")
        policy = load_policy(path)
    try:
        retract(policy, "ref")
    except VeilError:
        return  # refused, typed: the curator is told the table stays public, nothing is recorded
    res = veil("query", "--policy", path, "--analyst", "bob", "--format", "json", "SELECT COUNT(*) FROM ref")
    assert res.exit_code != 0, f"after `veil retract ref` an analyst still reads it: {res.stdout[:200]}"


# ==================================================================================================
# A4. A DP grid over a numeric column with declared values was charged, then refused by the gate
# ==================================================================================================


def test_A4_a_dp_publication_the_gate_must_refuse_is_refused_before_the_charge(tmp_path: Path) -> None:
    """``hours`` declared ``int`` in [1, 99] with ``values = [1, 20, 40, 60, 99]``: ``veil publish sdc --method
    dp_microagg_laplace --columns hours,age`` passed the plan, was charged ε, drew centroids anywhere in [1, 99], and
    the gate refused every table whose rounded centroid missed the list ("value 21 outside the declared values"): three
    tries charged 3ε and published nothing. Sound: a refusal that follows from the policy comes before the charge."""
    from veil.errors import VeilError
    from veil.generators.transaction import publish
    from veil.policy import load_policy
    from veil.store.ledger import Ledger

    policy = _warehouse(tmp_path, _frame(True))
    path = Path(policy.path)
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace("upper = 99 }", "upper = 99, values = [1, 20, 40, 60, 99] }"), encoding="utf-8")
    policy = load_policy(path)
    request = {"table": "people", "method": "dp_microagg_laplace", "params": ["epsilon=1", "bins=2"], "columns": ["hours", "age"]}
    for i in range(2):
        try:
            publish(policy, "sdc", {**request, "output": f"grid_{i}"}, progress=False)
        except VeilError:
            pass
    with Ledger.for_policy(policy) as ledger:
        spent = ledger.spent("table:people").epsilon
    published = [t for t in ("grid_0", "grid_1") if _outcome_exists(policy, t)]
    assert spent == len(published), f"charged ε = {spent} for {len(published)} published table(s)"


def _outcome_exists(policy: Any, table: str) -> bool:
    from veil.store.publications import published_tables

    return table in published_tables(policy)
