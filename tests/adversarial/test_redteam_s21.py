"""Red team, session 21: the seventh round's fixes — exact fixed-point sums (`proxy/fixed_point.py`, `rewrite._fixed`,
`plan._clamped`), publication column types (`store/declared_types.py`), kRR's count ε and the minimum ε of DP
publications, the ledger's catalog generation, and ε parsing (`mechanisms.budget.as_epsilon`).

Same harness as sessions 4–20 (:mod:`tests.adversarial.test_redteam_s15`): D and D′ differ in one person (the
target, unit 7) or in one of their values; the same analyst SQL must end the same way on both, and every released
value must differ only through the noise (noise off: ``veil.proxy._testing.exact_session``), each statistic by at
most the sensitivity its plan used (times ``1 + fixed_point.CONVERSION_SLACK`` for real sums, which the Laplace
scale pays for).

Part A holds attacks that succeeded on 2026-11-26 (main at 53043fd); all fixed the same day (A1/A2: one bounded
parser of ε text, `budget._parse`, used by `SET veil.epsilon` too; A3: policy figures beyond a double refused,
`format_epsilon` never overflows; A4: integers are summed as they are only when the statistic is integral,
`rewrite.summed_as_integers`; A5: a session refuses, free, once the policy names another warehouse; A6: a real
centred sum whose range lies away from 0 is centred in the SQL and its grid chosen for the half-width,
`rewrite.centred_in_sql`, and every fixed-point range holds 0). Part B holds
probes of defences that held (they pass, and fail if the defence breaks). Findings (details in each test's
docstring):

* A1 (MEDIUM, availability; API, wire) an ε given as text with a huge exponent (``"1e-10000000"``, 13 characters) is
  parsed with ``Fraction(text)``, which builds ``10**exponent`` first: 8.6 s of CPU, minutes and gigabytes for
  ``1e-1000000000``; on the wire ``SET veil.epsilon = …`` runs on the server's event loop, stalling every connection.
* A2 (LOW, wire) ``SET veil.epsilon = 1e400`` is accepted (its own parser, not `as_epsilon`); ``SHOW veil.epsilon``
  then raises OverflowError.
* A3 (LOW, policy) a budget or default ε of 10⁴⁰⁰ (a TOML integer) loads; the first query spends it at a noise
  scale of 0.0, the next one's budget refusal escapes as OverflowError.
* A4 (HIGH, guarantee) a *real* statistic whose row bound lies in (2⁶¹, 2⁶²] gets k = 0 and is summed as a DOUBLE
  (`rewrite._quantities` reads k = 0 as "integers"): the centred sum of ``AVG(4e18 + 512·(u % 5) + …)`` moves 8×
  its sensitivity.
* A5 (MEDIUM; API, wire) a live session keeps reading the warehouse file its first policy named after the policy
  names another (the ledger is followed since s19 A5, the engine is not).
* A6 (HIGH, guarantee) a grid step (~2⁻⁶¹ of the range's magnitude) wider than an analyst-chosen narrow range far
  from 0 that holds no grid point: every row is clamped onto the grid point above the range:
  ``AVG(y + 1e20 + 16)`` adds 16 per row against Δ = 5 (1,600× Δ with hw = 0.01).
* Held (Part B and by hand): 34 argument shapes × 6 aggregates per private group over D and three neighbours
  (REAL, DECIMAL(38,37), DECIMAL(38,0), TINYINT/SMALLINT, booleans, ROUND/FLOOR/CEIL of doubles, CASE mixing
  types, COALESCE, denormal and 1e-300 scales (k capped at 1023), 1e149 scales and their squares, FILTER, many
  groups, public-join CASE arguments) ended the same way and moved within Δ·(1 + CONVERSION_SLACK); HUGEINT,
  UBIGINT and ``//`` are refused free; merged groups add exact integers; the DP microaggregation grid and MDAV,
  kRR and PATE honour the minimum ε (refused free); DP microaggregation's published types come from the policy
  with one person's value missing; every curator write (write_table, ingest) moves the catalog generation, an
  analyst's queries never do (no forgetting at will); the generation only grows (no deletes from ``releases``).
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.adversarial.test_redteam_s15 import Worlds, fresh_epsilon, moves_beyond_sensitivity, neighbour_worlds
from veil.errors import VeilError


@pytest.fixture(scope="module")
def worlds(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worlds]:
    w = neighbour_worlds(tmp_path_factory, "s21")
    yield w
    w.close()


_fresh = fresh_epsilon


# --- Part A: fixed-point sums ------------------------------------------------------------------------------------

#: A real argument whose bounds lie in (2⁶¹, 2⁶²]: `fixed_point.exponent` gives k = 0 there, and `rewrite._quantities`
#: reads ``sum_exponent(stat) == 0`` as "integers already" — so the DOUBLE argument is summed with a DOUBLE SUM
#: (rounded after every row at the partial sums' ulp, up to 2¹⁵ here), not on the BIGINT grid.
K0_ARGS = [f"{c} + 512 * (u % 5) + CASE WHEN x > 3 THEN 1024 ELSE 0 END" for c in ("4e18", "3e18")]
K0_QUERIES = [
    *(f"SELECT AVG({a}) AS v FROM t" for a in K0_ARGS),
    f"SELECT VARIANCE({K0_ARGS[0]}) AS v FROM t",
    f"SELECT AVG({K0_ARGS[0]}) FILTER (WHERE u > 1) AS v FROM t",
]


@pytest.mark.parametrize("sql", K0_QUERIES)
def test_A4_real_sum_with_grid_exponent_zero_is_exact(worlds: Worlds, sql: str) -> None:
    """HIGH (guarantee broken; API, CLI, wire — the rewrite is shared). `rewrite._quantities` takes
    ``exact = arg if sum_exponent(stat) == 0`` to mean "an integer statistic, summed as BIGINT", but
    `fixed_point.exponent` also returns 0 for a *real* statistic whose row bound lies in (2⁶¹, 2⁶²] (≈ 2.3e18 to
    4.6e18). Such a sum (AVG/VARIANCE/STDDEV's centred sum, or a SUM) is then a plain DOUBLE ``SUM`` of the
    clamped argument — the pre-fix path of s17 A2 — rounded after every row at the partial sums' ulp, and
    centred exactly afterwards, so the rounding is not paid for by Δ = half-width: ``AVG(4e18 + 512·(u % 5) +
    CASE WHEN x > 3 THEN 1024 ELSE 0 END)`` moves the centred sum by 14,592 against Δ = 1,792 when the target
    joins (8×), through every interface. (The released AVG is a double near 4e18 whose ulp, 512, is about the
    excess per row here, and the released VARIANCE is clamped: exploiting it through the final doubles was not
    shown; the mechanism's guarantee for the centred sum is broken.) Fix class: decide "summed as it is" from the
    statistic's integrality (``stat.integral`` / ``discrete_laplace``), never from k; real statistics always go
    through `_fixed`."""
    from veil.proxy import fixed_point

    assert moves_beyond_sensitivity(worlds.sessions, sql, _fresh(worlds), fixed_point.CONVERSION_SLACK) == []


#: A real argument far from 0 (k < 0: grid steps of 2**-k = 32, 256, 2²²) whose narrow range [c − 5, c + 5] holds no
#: grid point: the centre sits half a step off the grid.
COARSE_QUERIES = [
    "SELECT AVG(y + 1e20 + 16) AS v FROM t",
    "SELECT AVG(y + 1e21 + 128) AS v FROM t",
    "SELECT AVG(y + 1e25 + 2097152) AS v FROM t",
    "SELECT VARIANCE(y + 1e20 + 16) AS v FROM t",
    "SELECT AVG(x + 1e20 + 16) FILTER (WHERE u > 1) AS v FROM t",
    "SELECT AVG(CAST(x AS DOUBLE) * 1e-3 + 1e20 + 16) AS v FROM t",  # hw = 0.01: each row adds 16, 1,600 × Δ
    "SELECT AVG(CAST(x AS DOUBLE) * 1e-3 + 1e18 + 0.125) AS v FROM t",  # k = 2 (step 0.25) > 2·hw: 12.5 × Δ
]


@pytest.mark.parametrize("sql", COARSE_QUERIES)
def test_A6_a_grid_coarser_than_the_range_keeps_rows_within_it(worlds: Worlds, sql: str) -> None:
    """HIGH (guarantee broken, deterministic; API, CLI, wire). `fixed_point.exponent` takes k from the range's
    *magnitude* only: the grid step 2**-k is ~2⁻⁶¹ of it (32 at 1e20, 2²² at 1e25 where k < 0; 0.25 at 1e18),
    coarser than an analyst-chosen narrow range [c − hw, c + hw] far from 0. When no grid point lies in it,
    `fixed_point.on_grid` returns low > high and the clamp in `rewrite._fixed` (``v < low → low``, then ``v > high
    → high``) puts *every* row on the grid point just above the range: ``AVG(y + 1e20 + 16)`` (c = 1e20 + 16, hw =
    5) adds 16 per row to the centred sum (32 − 16), against Δ = 5; at 1e25 + 2²¹ each row adds 2²¹ against Δ = 5.
    The centred sum is then 16·n: one person's presence moves it by 3.2× (10⁵× at 1e25) the sensitivity the noise
    is scaled to, whatever their value — membership in the centred sum. (The released AVG is a double at c, whose
    ulp 2**(e−53) exceeds the grid step 2**(e−62): with COUNT and VARIANCE alongside, 8 production-noise queries
    at ε = 2 showed no difference; the guarantee of the centred sum is broken, exploitation through the final
    doubles not shown.) Fix class: the grid must be at least as fine as the range (k from the *width* as well as
    the magnitude, e.g. centre first: sum ``FLOOR((v − c)·2**k)`` with k from hw, or refuse a range holding no
    grid point); test that ``low ≤ high`` and that each row's grid value lies in the range."""
    from veil.proxy import fixed_point

    assert moves_beyond_sensitivity(worlds.sessions, sql, _fresh(worlds), fixed_point.CONVERSION_SLACK) == []


# --- Part A: ε parsing ------------------------------------------------------------------------------------------


def _peak_bytes(fn: Any, *args: Any, **kwargs: Any) -> int:
    """The most memory ``fn(*args)`` allocates at once (a typed refusal counts as an answer)."""
    tracemalloc.start()
    try:
        fn(*args, **kwargs)
    except VeilError:
        pass
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return peak


#: 11 characters; Fraction() builds 10**300000 (~125 KB) from them. Each tenfold exponent costs ~30× the time:
#: ``1e-10000000`` (13 characters) took 8.6 s on this machine, ``1e-1000000000`` minutes and gigabytes.
HUGE_EXPONENTS = ["1e-300000", "1e300000", "0.5e-300000"]


@pytest.mark.parametrize("text", HUGE_EXPONENTS)
def test_A1_epsilon_text_with_a_huge_exponent_is_refused_cheaply_api(text: str) -> None:
    """MEDIUM (availability; Python API, and every path that hands `as_epsilon` a string). `as_epsilon` parses a
    string with ``Fraction(text)``, which materialises ``10**exponent`` before any range check: a 13-character ε
    (``"1e-10000000"``) costs 8.6 s of CPU, ``"1e-1000000000"`` minutes and gigabytes. Fix class: refuse an
    exponent outside the range of a double (|e| ≤ ~330) or text longer than a few dozen characters *before*
    building the Fraction (e.g. parse with ``float`` first and refuse 0/inf, then take the decimal exactly)."""
    from veil.mechanisms.budget import as_epsilon

    assert _peak_bytes(as_epsilon, text) < 64_000


@pytest.mark.parametrize("text", HUGE_EXPONENTS)
def test_A1_epsilon_text_with_a_huge_exponent_is_refused_cheaply_wire(text: str) -> None:
    """MEDIUM (availability; wire). ``SET veil.epsilon = 1e-100000000`` is handled by `SessionSettings.set` *on the
    server's event loop* (`server/session.py::_answer`, kind "set": no executor), with ``Fraction(value)``: one
    authenticated analyst's 30-byte statement stalls every connection, logins included, for minutes (and can
    exhaust memory). Fix class: as A1 (API) — a bounded parse shared with `as_epsilon`, refusing huge exponents."""
    from veil.server.settings import SessionSettings

    settings = SessionSettings(values={})
    assert _peak_bytes(settings.set, "veil.epsilon", text, apply=False) < 64_000


def test_A2_set_epsilon_beyond_a_double_is_a_typed_refusal_wire() -> None:
    """LOW (wire). s19 A4's fix made `as_epsilon` refuse ε beyond the largest double, but ``SET veil.epsilon``
    parses with its own ``Fraction(value)`` and accepts ``1e400``; ``SHOW veil.epsilon`` then raises OverflowError
    (``float(self.epsilon)`` in `SessionSettings.show`), an internal error instead of a typed one. Fix class: parse
    the SET value with `as_epsilon` (one parser for every ε)."""
    from veil.server.settings import SessionSettings

    settings = SessionSettings(values={})
    try:
        settings.set("veil.epsilon", "1e400", apply=True)
    except VeilError:
        return  # refused, typed: sound
    settings.show("veil.epsilon", default_epsilon=Fraction(1, 2), server_version="x")


HUGE = "1" + "0" * 400

HUGE_POLICY = f"""\
[database]
path = "w.duckdb"
[ledger]
path = "l.sqlite"
[defaults]
epsilon_per_query = {HUGE}
[tables.t]
privacy_unit = "row"
[tables.t.columns]
x = {{ type = "int", lower = 0, upper = 10 }}
[analysts.a]
epsilon = {HUGE}
delta = 0.5
"""


def test_A3_policy_epsilon_beyond_a_double_is_refused_or_typed(tmp_path: Path) -> None:
    """LOW (policy; every interface). `policy._exact` takes any TOML integer, so a budget or a default ε of 10⁴⁰⁰ (an
    integer literal: TOML floats that large are inf and refused) loads, although `as_epsilon` refuses the same ε
    from an analyst. The first query is charged the whole budget at a noise scale that underflows to 0.0 (the
    exact count is released); the next one's budget refusal formats the totals with ``float()`` and escapes as
    OverflowError (`ledger._refusal` → `format_epsilon`), not BudgetExhausted. Fix class: the policy's ε values go
    through `as_epsilon` (PolicyError naming the key), and `format_epsilon` prints huge Fractions without float()."""
    from veil.errors import PolicyError
    from veil.policy import load_policy
    from veil.proxy._testing import exact_session
    from veil.store.warehouse import write_table

    (tmp_path / "policy.toml").write_text(HUGE_POLICY, encoding="utf-8")
    try:
        policy = load_policy(tmp_path / "policy.toml")
    except PolicyError:
        return  # refused at load: sound
    write_table(policy, "t", pd.DataFrame({"x": range(50)}), replace=True)
    session = exact_session(policy, "a")
    try:
        session.execute("SELECT COUNT(*) FROM t")  # the default ε: the whole budget
        with pytest.raises(VeilError):
            session.execute("SELECT COUNT(*) FROM t", epsilon=1)
    finally:
        session.close()


# --- Part A: a live session and the policy's paths --------------------------------------------------------------


def test_A5_a_live_session_reads_the_warehouse_the_policy_names(tmp_path: Path) -> None:
    """MEDIUM (API, wire: `veil serve` keeps its sessions; a careless curator's change under live sessions). s19 A5
    made a live session follow a policy that names another *ledger* (`Env.refresh_policy` closes and reopens it),
    but not another *warehouse*: `Env.engine` is opened once from the first policy, so after the curator points
    ``[database] path`` at a new file (say, one with a person's rows erased, or a corrected copy), every live
    session keeps answering — and charging — from the old file, with the new policy's bounds, units and budgets,
    until it reconnects; a new session reads the new file. Here: 29 rows in the old file, 10 in the new one; the
    live session still counts 29. Fix class: key the engine (and the probe/domain caches and bounded copies) on
    the current policy's database path — reopen when it changes, as the ledger now is — or refuse queries until
    the session is reopened."""
    import time

    from tests.adversarial.test_redteam_s4 import POLICY, PUB, _base_rows, _frame
    from veil.policy import load_policy
    from veil.proxy._testing import exact_session
    from veil.store.warehouse import write_table

    path, moved = tmp_path / "policy.toml", tmp_path / "moved.toml"
    path.write_text(POLICY, encoding="utf-8")
    moved.write_text(POLICY.replace('path = "w.duckdb"', 'path = "w2.duckdb"'), encoding="utf-8")
    for p, rows in ((path, _base_rows()), (moved, _base_rows()[:10])):
        write_table(load_policy(p), "pub", PUB, replace=True, public=True)
        write_table(load_policy(p), "t", _frame(rows), replace=True)
    sql = "SELECT COUNT(*) AS n FROM t"
    live = exact_session(path, "b")
    try:
        assert live.execute(sql, epsilon=1).rows[0][0] == len(_base_rows())
        time.sleep(0.05)
        path.write_text(moved.read_text(encoding="utf-8"), encoding="utf-8")
        try:
            seen_by_live = live.execute(sql, epsilon=2).rows[0][0]
        except VeilError:
            return  # refusing until the session is reopened is sound too
    finally:
        live.close()
    fresh = exact_session(path, "b")
    try:
        seen_by_new = fresh.execute(sql, epsilon=3).rows[0][0]
    finally:
        fresh.close()
    assert seen_by_live == seen_by_new == 10, f"the live session counted {seen_by_live} rows, a new one {seen_by_new}"


# ==================================================================================================
# Part B — probes that held (these pass today; each fails if its defence breaks)
# ==================================================================================================

# --- B1. Fixed-point sums of every argument type move within Δ·(1 + CONVERSION_SLACK) ------------------------------
#
# Hand-run on 2026-11-26 (main at 53043fd) over D and three neighbours (the target with x = 10, x = 3, and NULL/NaN
# values), six aggregates (SUM, AVG, VARIANCE, STDDEV, with FILTER) per private group: none ended differently and
# none moved beyond Δ·(1 + CONVERSION_SLACK). (HUGEINT/UBIGINT casts and ``//`` are refused, free.) A sample:

HELD_ARGS = [
    "y * 1e-300",  # k capped at 1023
    "y * 1e-301",  # just above fixed_point.MIN_ROW_BOUND (subnormal ranges such as y * 5e-324 are refused: s70 F1)
    "y * 1e149",  # k < 0 with a range that holds grid points
    "CAST(y AS REAL)",
    "CAST(y AS DECIMAL(38,37))",
    "CAST(x AS DECIMAL(38,0)) * 1000000000000",
    "CAST(x AS TINYINT)",
    "x > 3",
    "ROUND(y * 1e14)",
    "CEIL(y * 1e10)",
    "CASE WHEN x > 3 THEN 1e15 ELSE -1e15 END + y",
    "COALESCE(y, x, 0)",
    "y * 0.1 + 0.3",
    "1e15 - y",
]
HELD_QUERIES = [
    *(f"SELECT k, AVG({a}) AS v, SUM({a}) AS s FROM t GROUP BY k" for a in HELD_ARGS),
    "SELECT k, VARIANCE(y * 1e149) AS v, STDDEV(CAST(y AS REAL)) AS s FROM t GROUP BY k",
    "SELECT u, SUM(y * 0.1) AS s, AVG(y + 0.5) AS a FROM t GROUP BY u",  # many groups, one row each
    "SELECT SUM(y * 0.1) FILTER (WHERE x > 3) AS s, AVG(ROUND(y)) FILTER (WHERE b) AS a FROM t",
]


@pytest.mark.slow
def test_b1_fixed_point_sums_move_within_their_sensitivity(worlds: Worlds) -> None:
    from veil.proxy import fixed_point

    bad: list[str] = []
    for sql in HELD_QUERIES:
        ends = {name: a if isinstance(a, str) else "answered" for name, a in worlds.run(sql).items()}
        assert set(ends.values()) == {"answered"}, (sql, ends)
        bad += moves_beyond_sensitivity(worlds.sessions, sql, _fresh(worlds), fixed_point.CONVERSION_SLACK)
    assert bad == []


# --- B2. DP publications below the minimum ε are refused free, DP microaggregation included ---------------------


@pytest.mark.parametrize("partition", ["grid", "mdav"])
def test_b2_dp_microaggregation_below_the_minimum_epsilon_is_refused_free(tmp_path: Path, partition: str) -> None:
    from tests.adversarial.test_redteam_s16 import _publish, _warehouse
    from tests.publish_support import people
    from veil.errors import PublicationRefused
    from veil.store.ledger import Ledger

    policy = _warehouse(tmp_path / "d", people(40))
    request = {
        "table": "people",
        "output": "o",
        "method": "dp_microagg_laplace",
        "params": ["epsilon=0.0005", f"partition={partition}"],
        "columns": ["age", "hours"],
    }
    with pytest.raises(PublicationRefused, match="minimum"):
        _publish(policy, "sdc", request)
    with Ledger.for_policy(policy) as led:
        assert led.spent("table:people").epsilon == 0


# --- B3. Curator writes move the catalog generation; analysts' queries never do -------------------------------------


def test_b3_curator_writes_move_the_catalog_generation_and_queries_do_not(tmp_path: Path) -> None:
    from tests.adversarial.test_redteam_s4 import POLICY, PUB, _base_rows, _frame
    from veil.policy import load_policy
    from veil.proxy._testing import exact_session
    from veil.store.ledger import Ledger
    from veil.store.warehouse import ingest_file, write_table

    path = tmp_path / "policy.toml"
    path.write_text(POLICY, encoding="utf-8")
    policy = load_policy(path)
    write_table(policy, "pub", PUB, replace=True, public=True)
    write_table(policy, "t", _frame(_base_rows()), replace=True)

    def generation() -> int:
        with Ledger.for_policy(policy) as led:
            return led.catalog_generation()

    before = generation()
    session = exact_session(path, "a")
    try:
        for sql in ("SELECT COUNT(*) FROM t", "SELECT COUNT(*) FROM t JOIN pub ON t.x = pub.pk", "SELECT * FROM pub"):
            session.execute(sql, epsilon=1)
    finally:
        session.close()
    assert generation() == before  # an analyst cannot make sessions forget their probes at will
    csv = tmp_path / "pub.csv"
    PUB.to_csv(csv, index=False)
    ingest_file(policy, "pub", csv, replace=True)
    after_ingest = generation()
    write_table(policy, "t", _frame(_base_rows()), replace=True)
    assert before < after_ingest < generation()
