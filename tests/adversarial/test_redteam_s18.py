"""Red team, session 18: the fixes of the last hour — analyst trees without meta (e4dee79), the catalog rebuilt on
a publication generation (cd00c5e), synthetic generators on declared domains (fixsynth), DP publications' records
without exact sizes (df55aca, 6b72031).

Part A holds attacks that succeeded on 2026-11-26 (main at b400859); part B holds probes of defences that held (they
pass, and fail if the defence breaks). Lead's status the same day: A2 and A3 fixed (a publication or retraction
clears the session's join multiplicities and key domains and re-lists the published tables' files on Spark); A1 and
A4 left as out of scope, their tests strict xfails: the release log lives in the ledger file, which the threat
model (../shared/notes/threat-model.md) leaves to trusted readers (curators, security teams: `veil releases` reads
the file itself); no analyst interface serves it (s16 B3). Exact sizes are kept out of DP records all the same
(s17 A3); utility and risk figures stay, documented in docs/generators.md. Findings as reported:

* A1 (MEDIUM) a DP microaggregation's release record still holds exact functions of the private rows. df55aca
  drops the keys named in `transaction.EXACT_SIZES` (a deny-list of names), but `plugins/sdc.py::sanitise` records
  `release_metrics(clean, out, …)`: ``il``, ``il_mean``, ``dr`` (``linkage_risk``), computed without noise from every
  private row (`auditor.metrics.evaluate_release`; rows paired with a fixed seed 0). For one fixed output, one
  person's ``gain`` 0 → 5000 moves ``il`` 92.77 → 95.50 and ``dr`` 0.6496 → 0.6453: `veil releases --show ID` (what
  auditors read) tells D from D′ given the release, outside the ε charged. Steps: `veil publish sdc --method
  dp_microagg_laplace --param epsilon=4 --columns age,hours,gain --target income --output p_dp`; `veil releases
  --show <id>`: ``metrics.il``, ``il_mean``, ``dr`` are numbers. Fix: for ``plan.is_dp`` record an *allow-list* of
  data-independent or noisy figures (`veil/generators/transaction.py::publish`), not a deny-list of names.
* A2 (MEDIUM, Spark) cached public-join multiplicities outlive a republication. cd00c5e rebuilds the catalog when
  the ledger's publication generation moves, but `Env.probe` (join multiplicity factor) and `Env.public_domain`
  are keyed by the public engine's generation only: on Spark that moves on writes *through this process* and every
  RECHECK_SECONDS (60 s). After the curator republishes ``p_out`` from another process (`veil publish krr
  --replace`, what a CLI does while `veil serve` runs), the same session plans ``SELECT COUNT(*) FROM people JOIN
  p_out ON people.sex = p_out.sex`` with sensitivity 152 (170 in a second run) while a new session plans 284 (280):
  the noise would be scaled to ~54 % of one person's true influence. In this run the answer itself was not
  released (the execution failed, A3), so the leak is shown at the plan only. DuckDB held (in-process writes move
  the mirror's generation). Fix: key `_probes`/`_domains` (veil/proxy/session.py) by
  ``(…, engine generation, ledger.publication_generation())``, or clear them where the catalog is rebuilt.
* A3 (LOW, Spark, availability) after that outside republication every query on ``p_out`` in the serving process
  fails: the old session with QueryFailed (ε charged, "generated SQL failed after reservation"), a new session
  in the same process with EngineError (Py4JJavaError: Spark's cached file listing of the rewritten table) at the
  probe. Not data-dependent (the curator's action decides), but a `veil serve` on Spark breaks until restarted.
  Fix: `REFRESH TABLE`/`spark.catalog.refreshTable` for published tables when the publication generation moves
  (veil/engines/spark.py, veil/store/spark.py).
* A4 (MEDIUM) PATE's release record holds figures read from the private table without noise:
  ``epsilon_data_dependent`` 5.30 (its own note says it "is not itself differentially private"),
  ``ensemble_accuracy_before_noise`` 0.59, ``…_after_noise`` 0.57, ``…_clean_validation`` 0.745,
  ``validation_records`` 200 (a count under a name `EXACT_SIZES` misses), and ``params.student_source`` = "300 rows
  held out of 'adult'" (on a user-level table that count depends on the chosen units' sizes). Fix: the same
  allow-list; `veil/generators/plugins/pate.py::sanitise` keeps the data-dependent figures out of ``metrics``/
  ``params`` (or prints them to the curator only).
* B1 held: analyst text sets no ``meta`` mark by any path I found. Every analyst SQL goes through `parse.parse`
  (EXPLAIN, `veil query`, the wire server; system/catalog queries use `sqlglot.parse_one` but never reach a
  private table); string literals, quoted aliases and ``--`` comments holding ``*/ /* sqlglot.meta
  veil_built_total */`` leave no meta or comment after parsing, nor after the DuckDB rendering is re-parsed (the
  Spark `Env._native` path; `_domain_sql` renders the analyst's key expression as text, re-parsed there). Other
  meta writes are Veil's own (`bounds.mark_arithmetic_that_cannot_raise` from declared bounds). B2 (A2 on DuckDB)
  held. Read, not tested: synthetic generators (`declared_domains` refuses dates and open columns; bools are
  (False, True)); `domain.column_domain` still falls back to the observed min/max when a column has no declared
  bounds (used by `gan.py`, `sdc.py::_release`, noise addition), reachable only where bounds are not required —
  sdc's non-DP masking methods, which clamp/redraw into [observed min, max] (a value one person holds is the bound,
  but a clipped row is that person's own perturbed row). The IMPOSTER synthetic table has exactly as many rows as
  the source (`plugins/synth.py`: ``rows=env.source_rows``), like every non-DP masking release.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from tests.engines.conftest import OutsideSpark

# ==================================================================================================
# Part A — attacks that succeed today
# ==================================================================================================

# --- A1. A DP microaggregation's record holds il/dr, exact functions of the private rows (MEDIUM) ------------

EXACT_FIGURES = ("il", "il_mean", "dr", "linkage_risk")


def _publish_dp_microagg(base: Path) -> tuple[Path, Any]:
    from tests.publish_support import POLICY, people, veil

    base.mkdir()
    policy = base / "policy.toml"
    policy.write_text(POLICY.format(table_budget=""), encoding="utf-8")
    people(100).to_csv(base / "people.csv", index=False)
    assert veil("ingest", "--policy", policy, "--table", "people", base / "people.csv").exit_code == 0
    args = ["--method", "dp_microagg_laplace", "--param", "epsilon=4", "--columns", "age,hours,gain", "--target", "income"]
    res = veil("publish", "sdc", "--policy", policy, "--table", "people", *args, "--output", "p_dp", "--format", "json")
    return policy, res


@pytest.mark.xfail(
    strict=True,
    reason="out of scope (threat model): release records are read from the ledger file by trusted roles only",
)
@pytest.mark.slow
def test_a1_a_dp_microaggregation_record_holds_no_exact_function_of_the_rows(tmp_path: Path) -> None:
    from tests.publish_support import ok_json, veil

    policy, res = _publish_dp_microagg(tmp_path / "d")
    body = ok_json(res)
    shown = ok_json(veil("releases", "--policy", policy, "--show", body["release_id"]))
    exact = {k: shown["metrics"].get(k) for k in EXACT_FIGURES if shown["metrics"].get(k) is not None}
    assert exact == {}, f"a DP publication's record holds exact functions of the private rows: {exact}"


@pytest.mark.xfail(
    strict=True,
    reason="out of scope (threat model): release records are read from the ledger file by trusted roles only",
)
def test_a1_the_recorded_il_tells_one_persons_value_for_a_fixed_output() -> None:
    """In process: the same published output, two neighbouring tables (one person's ``gain`` 0 vs 5000): the
    figures `plugins/sdc.py` records differ deterministically — the record, not the noise, tells D from D′."""
    import numpy as np

    from tests.publish_support import people
    from veil.generators.base import Context, Output
    from veil.generators.sdc import release_metrics

    cols = ("age", "hours", "gain")
    base = people(100)[[*cols, "income"]].reset_index(drop=True)
    ctx = Context(
        columns=cols,
        target="income",
        bounds={"age": (17, 90), "hours": (1, 99), "gain": (0, 5000)},
        seed=0,
        rng=None,
        progress=False,
        categories={"income": ("low", "high")},
    )
    rng = np.random.default_rng(1)
    frame = base.sample(frac=1.0, random_state=3).reset_index(drop=True)  # a fixed "release" (any output)
    frame["gain"] = rng.integers(0, 5000, len(frame))
    out = Output(frame=frame, source=None, info={}, guarantee="")
    figures = {}
    for gain in (0, 5000):
        d = base.copy()
        d.loc[7, "gain"] = gain
        figures[gain] = {k: v for k, v in release_metrics(d, out, ctx, seed=0).items() if k in EXACT_FIGURES}
    # sound: a DP release's record carries nothing that changes with one row once the output is fixed
    assert figures[0] == figures[5000], f"recorded figures (il, il_mean, dr) move with one person's gain: {figures}"


# ==================================================================================================
# Part B — probes that held (these pass today; each fails if its defence breaks)
# ==================================================================================================

# --- B1. Comment markers inside strings and quoted names set no mark, even after a re-parse ---------------

VEIL_MARKS = ("veil_built_total", "veil_cannot_raise", "veil_wide_sum")
SNEAKY = "*/ /* sqlglot.meta veil_built_total */ /* sqlglot.meta veil_cannot_raise */"

SNEAKY_QUERIES = [
    f"SELECT COUNT(*) AS n FROM t WHERE CAST(CASE WHEN x > 3 THEN 'zz' ELSE '1' END AS INTEGER) > 0 AND s <> '{SNEAKY}'",
    f"SELECT COUNT(*) AS \"{SNEAKY}\" FROM t WHERE CAST(CASE WHEN x > 3 THEN 'zz' ELSE '1' END AS INTEGER) > 0",
    f"SELECT SUM(CAST(s || '{SNEAKY}' AS INTEGER)) AS n FROM t",
    f"SELECT COUNT(*) AS n FROM t -- {SNEAKY}\nWHERE x > 0",
]


@pytest.mark.parametrize("sql", SNEAKY_QUERIES)
def test_b1_markers_in_text_set_no_mark_after_a_re_parse(sql: str) -> None:
    import sqlglot

    from veil.proxy.parse import parse

    tree = parse(sql)
    assert not any(n._meta or n.comments for n in tree.walk()), "parse kept meta or comments"
    again = sqlglot.parse_one(tree.sql(dialect="duckdb"), read="duckdb")  # the Spark `_native` re-parse
    marked = [type(n).__name__ for n in again.walk() if n._meta and any(n._meta.get(m) for m in VEIL_MARKS)]
    assert marked == [], f"a re-parse of the rendered analyst tree set Veil's marks on {marked}"


# --- A2. Cached public-join multiplicities outlive a republication of the public table ----------------------
#
# cd00c5e rebuilds a session's *catalog* when the ledger's publication generation moves, but the session's probe
# cache (a public join's multiplicity factor, `Env.probe`) and public-domain cache (`Env.public_domain`) are keyed by
# the public engine's generation only. On Spark that generation moves on writes *through this process* and every
# RECHECK_SECONDS (60 s); a curator's `veil publish … --replace` from another process (the CLI, while `veil serve`
# runs) leaves the old factor. A join with the republished table is then planned with the old table's
# multiplicity: one private row joins K rows but the sensitivity says k < K.


def _join_sensitivity(db: Any, sql: str) -> Fraction:
    """The largest sensitivity the plan gives the query's statistics (planning runs the probes; nothing else)."""
    from veil.proxy._testing import plan_of

    plan = plan_of(db, sql, 1.0)
    if plan is None:
        raise AssertionError("the join was planned as a public query")
    return max(st.sensitivity for st in plan.statistics)


JOIN_SQL = "SELECT COUNT(*) AS n FROM people JOIN p_out ON people.sex = p_out.sex"


def _engine_policy(base: Path, engine: str, rows: int) -> str:
    from tests.engines.conftest import POLICY, SPARK, people

    if engine == "spark":
        from veil.engines.spark import spark_available

        reason = spark_available()
        if reason is not None:
            pytest.skip(f"Spark test skipped: {reason}")
    (base / "policy.toml").write_text(POLICY + (SPARK if engine == "spark" else ""), encoding="utf-8")
    people(rows).to_csv(base / "people.csv", index=False)
    return str(base / "policy.toml")


def _publish_p_out(policy: str, epsilon: float, *, other_process: OutsideSpark | None) -> Fraction | None:
    """kRR of ``sex`` as ``p_out`` (in another process: the curator's CLI while a server runs; that process then
    returns the join's sensitivity planned by a new session of its own, which saw the new table)."""
    from tests.publish_support import ok_json
    from tests.publish_support import veil as run_cli

    args = ["publish", "krr", "--policy", policy, "--table", "people", "--columns", "sex", "--epsilon", str(epsilon)]
    args += ["--output", "p_out", "--replace", "--format", "json"]
    if other_process is None:
        ok_json(run_cli(*args))
        return None
    script = (
        "import sys; from veil.cli.main import cli; cli(sys.argv[1:], standalone_mode=False); "
        "from veil.proxy._testing import exact_session; "
        "from tests.adversarial.test_redteam_s18 import JOIN_SQL, _join_sensitivity; "
        "db = exact_session(sys.argv[4], 'alice'); print('SENS', _join_sensitivity(db, JOIN_SQL)); db.close()"
    )
    stdout = other_process.run(script, *args)
    return Fraction(next(line.split()[1] for line in stdout.splitlines() if line.startswith("SENS ")))


def _fresh_sensitivity(policy: str) -> Fraction:
    """The join's sensitivity in a new session."""
    from veil.proxy._testing import exact_session

    db = exact_session(policy, "alice")
    try:
        return _join_sensitivity(db, JOIN_SQL)
    finally:
        db.close()


def _outcome_of(fn: Any) -> str:
    from veil.errors import VeilError

    try:
        fn()
    except VeilError as exc:
        return f"{type(exc).__name__}: {exc.message[:80]}"
    return "answered"


def _republication_scenario(base: Path, engine: str, outside: OutsideSpark | None) -> dict[str, Any]:
    """p_out first published at ε = 0.1 (kRR near uniform over Female/Male/Other/NA: ~150 rows per value of 600),
    then republished at ε = 3 (~275 rows for Female; on Spark by ``outside``, another process). What the first
    session plans and runs afterwards, and what a new session (on Spark in the other process) plans."""
    import veil.engines.spark
    from tests.adversarial.test_redteam_s15 import raw_statistics
    from tests.publish_support import veil as run_cli
    from veil.proxy._testing import exact_session

    policy = _engine_policy(base, engine, 600)
    assert run_cli("ingest", "--policy", policy, "--table", "people", base / "people.csv").exit_code == 0
    _publish_p_out(policy, 0.1, other_process=None)
    db = exact_session(policy, "alice")
    out: dict[str, Any] = {}
    try:
        with pytest.MonkeyPatch.context() as mp:
            # the engine's periodic re-check never fires in the window (it used to sleep to the next 60-s
            # boundary), so only the ledger's record of the republication can make the session measure again
            mp.setattr(veil.engines.spark, "RECHECK_SECONDS", 1e12)
            if engine == "spark":
                _join_sensitivity(db, JOIN_SQL)
            out["before"] = _join_sensitivity(db, JOIN_SQL)
            fresh = _publish_p_out(policy, 3.0, other_process=outside)
            out["stale"] = _join_sensitivity(db, JOIN_SQL)
            out["same_session_runs"] = _outcome_of(lambda: raw_statistics(db, JOIN_SQL, Fraction(1)))
    finally:
        db.close()
    other = exact_session(policy, "alice")
    try:
        out["new_session_in_process"] = _outcome_of(lambda: raw_statistics(other, JOIN_SQL, Fraction(1)))
    finally:
        other.close()
    # on Spark, a new session in a new process (this process's Spark session lists the old files of the rewritten
    # table, see A3): the republishing process measures it
    out["fresh"] = fresh if fresh is not None else _fresh_sensitivity(policy)
    return out


@pytest.fixture(scope="module", params=["duckdb", "spark"])
def republished(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    outside = request.getfixturevalue("outside_spark") if request.param == "spark" else None
    out = _republication_scenario(tmp_path_factory.mktemp(f"repub-{request.param}"), request.param, outside)
    out["engine"] = request.param
    return out


@pytest.mark.slow
def test_a2_a_join_after_a_republication_uses_the_new_multiplicity(republished: dict[str, Any]) -> None:
    r = republished
    assert r["fresh"] > r["before"], f"the republished table should multiply more: {r}"
    assert r["stale"] == r["fresh"], (
        f"{r['engine']}: before {r['before']}; the same session plans sensitivity {r['stale']}, a fresh one {r['fresh']}"
    )


@pytest.mark.slow
def test_a3_queries_in_the_serving_process_still_run_after_an_outside_republication(
    republished: dict[str, Any],
) -> None:
    r = republished
    ends = {k: r[k] for k in ("same_session_runs", "new_session_in_process")}
    assert ends == dict.fromkeys(ends, "answered"), f"{r['engine']}: after the curator's republication: {ends}"


# --- A4. PATE's release record holds figures read from the private table without noise (MEDIUM) --------------
#
# `EXACT_SIZES` names ``teacher_rows``, ``validation_rows`` and ``dropped_rows_unknown_label``, but the PATE plug-in
# (`veil/generators/plugins/pate.py::sanitise`) records ``result.metrics`` whole: ``epsilon_data_dependent`` (its
# own note: "reads the private votes and is not itself differentially private"), ``ensemble_accuracy_before_noise``,
# ``ensemble_accuracy_clean_validation`` (the teachers' exact votes on private validation rows), ``student_accuracy``
# on private validation rows, ``validation_records`` (an exact count, under another name than the deny-list's);
# ``params.student_source`` spells the number of rows held out of the private table ("N rows held out of 'adult'").

PATE_PRIVATE_FIGURES = (
    "epsilon_data_dependent",
    "ensemble_accuracy_before_noise",
    "ensemble_accuracy_after_noise",
    "ensemble_accuracy_clean_validation",
    "validation_records",
)


@pytest.mark.xfail(
    strict=True,
    reason="out of scope (threat model): release records are read from the ledger file by trusted roles only",
)
@pytest.mark.slow
def test_a4_a_pate_record_holds_no_figure_read_from_the_private_rows(adult_policy: Any, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from veil.cli.main import cli
    from veil.datasets import load_adult
    from veil.policy import load_policy
    from veil.store.releases import list_releases

    csv = tmp_path / "adult.csv"
    load_adult().head(2000).to_csv(csv, index=False)
    path = adult_policy(rows=10)
    assert CliRunner().invoke(cli, ["ingest", "--policy", str(path), "--table", "adult", str(csv), "--replace"]).exit_code == 0
    args = ["publish", "pate", "--policy", str(path), "--table", "adult", "--label", "income"]
    args += ["--features", "age,education_num,hours_per_week,sex", "--teachers", "20", "--gamma", "0.05"]
    args += ["--queries", "100", "--validation", "200", "--student-rho", "0.5", "--delta", "1e-5"]
    args += ["--output-model", str(tmp_path / "student.pt"), "--format", "json"]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    (rel,) = list_releases(load_policy(path), kind="publication")
    private = {k: rel.metrics[k] for k in PATE_PRIVATE_FIGURES if rel.metrics.get(k) is not None}
    counted = {k: v for k, v in rel.params.items() if isinstance(v, str) and "rows held out" in v}
    assert private == {} and counted == {}, f"PATE's record holds figures of the private rows: {private} {counted}"
