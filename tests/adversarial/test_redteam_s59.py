"""Red team, session 59: the analyst query path on DuckDB (main at a93a6bc, 2026-11-28) — data-dependent errors,
sensitivity under-counts, budget edge values, floating point.

Each test below FAILS on main at a93a6bc (nothing is marked xfail: the lead fixes the code and the test turns green).

Findings:

* F1 (LOW, API robustness; Python API only — the CLI and ``veil serve`` hand ε over as text) — ``epsilon`` given as a
  NumPy scalar, ``numpy.float64`` (what any ``pandas``/NumPy computation of a budget share returns:
  ``df.eps.iloc[0]``, ``np.float64(remaining) / 4``), ends in an untyped ``ValueError: Invalid literal for Fraction:
  'np.float64(0.5)'`` from ``budget.as_epsilon`` instead of being charged 0.5 or refused with a typed ``InputError``.
  ``np.float64`` *is* a ``float`` subclass, so ``as_epsilon`` takes the float branch and builds
  ``Fraction(repr(value))``; NumPy 2 spells the repr ``np.float64(0.5)``. ``np.float32(0.5)`` (not a float subclass)
  goes through ``float(value)`` and works; ``decimal.Decimal`` too. The same crash reaches every public caller of
  ``as_epsilon``/``as_delta``: ``QuerySession.execute``/``explain``, ``veil.connect(...).sql``/``explain``,
  ``veil.mechanisms.noise`` helpers (``noisy_max_scale``, ``keep_probability``, ``randomized_response``) and
  ``Ledger.charge``. Nothing is charged and no data is involved: a crash class (an exception that is not a
  ``VeilError``), and a legitimate value refused. Fix (``veil/mechanisms/budget.py``): in the float branch use
  ``Fraction(float(value))``'s shortest decimal, i.e. ``Fraction(float.__repr__(value))`` (``float.__repr__`` of
  ``np.float64(0.5)`` is ``'0.5'``), or test ``type(value) is float`` and send subclasses through ``float(value)`` as
  the generic branch does — never a subclass's own ``__repr__``/``__str__``.

* F2 (LOW, correctness only — data-independent, so no privacy loss; every interface) — a real ``SUM`` whose row bound is
  below ~2⁻⁹⁶¹ (≈1e-289) is summed on a grid coarser than the docs promise. ``fixed_point`` picks the grid exponent k
  so that the bound × 2ᵏ fits ±2⁶², but caps the factor 2ᵏ at 2¹⁰²³ (the largest power of two a DOUBLE holds): for a
  bound of 1e-315 the grid step is 2⁻¹⁰²³ ≈ 1.1e-308, far above every row's value, so ``FLOOR`` sends each row to 0 and
  ``SUM(inc * 1e-320)`` over 31 rows (exact sum 5.65e-315, Δ = 1e-315) is released as 0 + noise in every world; at
  ``inc * 1e-300`` each row already loses ~2⁻³⁹ of Δ, against the documented one grid step of 2⁻⁶² of Δ per row
  ("n·2⁻⁶² of Δ, far below the noise"). The bias grows as n·Δ, so the ci95 (which covers the noise only) misses the
  true value. Fix (``veil/proxy/fixed_point.py``): refuse (free, 0A000) a real statistic whose row bound is below
  2⁻⁹⁶⁰ (nothing useful is summed there: its noise scale is itself subnormal), or scale the argument up by a power of
  two before the grid and the released sum down after (exact in binary).

What held (tried, no witness; DuckDB, noise off through ``tests.support.attack_neighbours``; neighbours D/D′ differ in
one person with adversarial values — age at the top bound, ``inc`` at its bound, a text ``é\\%_ßßß…İ``/``zz``, a date
9999-12-31 — every pair ended the same way and moved by at most the plan's sensitivity):

* element-wise data-dependent errors, ~90 hand-written queries: ``LENGTH``/``SUBSTRING``/``LEFT``/``RIGHT`` with a
  private, negative, huge (``inc * 1e300``: binder error, free) or text position; ``STRPOS``; ``UPPER = LOWER``;
  ``LIKE``/``ILIKE`` with backslashes, a trailing backslash and ``İ``; ``CAST`` of a text to INT/DATE/BOOLEAN/
  DECIMAL(3,1); ``CAST`` of a real to INT/BIGINT/DECIMAL/REAL overflowing; ``CAST(age AS TINYINT) * 2``;
  ``POWER(age, age)``, ``10 ^ age``, ``EXP(age * 10)``, ``LN``/``LOG``/``SQRT`` of negatives; ``ROUND(inc, age)`` (bind
  error, free, both worlds); ``%``, ``/`` by a private zero, ``/ 0.0``; int64 overflow through CASE, COALESCE/NULLIF,
  GREATEST, SIGN, boolean arithmetic, ``STRPOS(...) * 2⁶³``; text → BIGINT overflow; ``d + INTERVAL (age * 1e8) DAY``,
  ``INTERVAL (inc * 1e300) DAY``, ``INTERVAL (inc) YEAR`` on 9999-12-31; EXTRACT epoch/millennium/isoyear/microsecond,
  DATE_TRUNC week/millennium; ``CAST(d AS TIMESTAMP)``; ``CAST(... AS VARCHAR) = 'inf' / '-0.0'``; row values
  ``(age, s) = (…)`` (refused, free); ``IN (…, NULL)``; COLLATE (refused).
* a random grammar fuzz of the same (``tests`` not kept: /tmp), 3,400 queries mixing WHERE, FILTER, GROUP BY
  keys of numbers, texts and dates, joins and LEFT joins with a public table, SUM/AVG/MEDIAN/VARIANCE/MAX/COUNT
  DISTINCT: no pair ended differently, none moved beyond its sensitivity, no XX000 or crash.
* group keys: key classification (a constant CTE key, a declared-values column rebuilt from private data in a CTE
  under its own name, ``CASE``/``COALESCE``/``NULLIF``/``IN``/``IS NULL``/``IS DISTINCT FROM``/``LIKE`` over declared
  columns, declared values mixed with private keys) — the domains and partition selection held; a target whose
  declared-values column holds an undeclared value (``'Q'``, ``7``) is dropped or counted once.
* shapes: OFFSET/LIMIT ALL/LIMIT NULL/DISTINCT ON/FETCH/TABLESAMPLE/USING SAMPLE/QUALIFY/AT (VERSION) inside or on a
  private source (refused, free); ORDER BY or HAVING on a non-key private column (refused); ``COUNT(DISTINCT pid)``
  with ``GROUP BY 'a'``, with public joins on ``=``/``>=`` (sensitivity 1 only ungrouped; held);
  ``IS NOT DISTINCT FROM`` is never taken as a join pin (only ``=``), so NULL-matching joins are not under-counted.
* budget: ε as NaN, ±0.0, True, Decimal NaN/sNaN, ``'1/0'``, ``'0/5'``, ``'-0'``, ``'1/-2'``, Arabic-Indic digits,
  hex floats, underscores, ``inf``, 10⁴⁰⁰, complex, lists — all refused, typed, free; ``0.000999…9`` below the minimum
  refused free; analyst names ``'A'``, ``'a '``, Cyrillic/fullwidth ``a``, NUL, zero-width space: refused (no second
  budget under a look-alike name); the ledger's reservation reads and writes the accounts in one write transaction.
* floating point: sums of subnormal-range values (``SUM(inc * 1e-320)``, ``SUM(inc * 5e-324)``) and VARIANCE of
  ``inc * 1e-160`` (squares underflow) are answered without error and end the same way in D and D′. Note (LOW,
  correctness only, no witness): ``fixed_point`` caps its grid factor at 2¹⁰²³, so for a row bound below ~2⁻⁹⁶¹
  (≈1e-289) each row loses up to a whole grid step (2⁻¹⁰²³ ≈ 1.1e-308) — ``SUM(inc * 1e-320)`` is exactly 0 in every
  world (the docs promise n·2⁻⁶² of Δ): data-independent, so no privacy loss, but the answer and its CI are wrong.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.support.warehouse import policy_with_tables

F1_POLICY = """\
[database]
path = "w.duckdb"
[ledger]
path = "l.sqlite"
[tables.people]
privacy_unit = "pid"
max_rows_per_unit = 1
[tables.people.columns]
pid = { type = "int" }
age = { type = "int", lower = 0, upper = 120 }
[analysts.a]
epsilon = 1000
"""


@pytest.fixture(scope="module")
def f1_policy(tmp_path_factory: pytest.TempPathFactory) -> Any:
    people = pd.DataFrame({"pid": list(range(1, 21)), "age": [20 + i for i in range(20)]}).astype("Int64")
    return policy_with_tables(Path(tmp_path_factory.mktemp("s59f1")), F1_POLICY, {"people": people})


def _numpy_values() -> list[Any]:
    np = pytest.importorskip("numpy")
    return [np.float64(0.5), np.float64(1.0), np.float64(0.001)]


@pytest.mark.parametrize("how", ["execute", "explain"])
def test_f1_a_numpy_float_epsilon_is_charged_or_refused_typed(f1_policy: Any, how: str) -> None:
    """LOW: ``QuerySession.execute(sql, epsilon=np.float64(0.5))`` raised an untyped ``ValueError`` ("Invalid literal
    for Fraction: 'np.float64(0.5)'"): ``np.float64`` is a ``float`` subclass and ``as_epsilon`` parsed its ``repr``.
    Every ε must end as a charge of exactly that value or a typed refusal (a ``VeilError``) that charges nothing."""
    from veil.errors import VeilError
    from veil.proxy._testing import exact_session

    with exact_session(f1_policy, "a") as s:
        for value in _numpy_values():
            spent = s.budget().spent
            try:
                getattr(s, how)("SELECT COUNT(*) FROM people", epsilon=value)
            except VeilError:
                assert s.budget().spent == spent
            except Exception as exc:  # the property: no exception but a typed one
                pytest.fail(f"epsilon={value!r}: untyped {type(exc).__name__}: {exc}")
            else:
                if how == "execute":
                    assert s.budget().spent - spent == Fraction(repr(float(value)))  # ε is charged as its shortest text


def test_f1_b_as_epsilon_reads_a_float_subclass_by_its_value() -> None:
    """The class: ``as_epsilon``/``as_delta`` must read any ``float`` (subclasses included) by its value, never by
    the subclass's own ``repr`` — NumPy's is ``np.float64(0.5)``, and a subclass may print anything."""
    from fractions import Fraction

    from veil.mechanisms.budget import as_delta, as_epsilon

    class Loud(float):
        def __repr__(self) -> str:
            return f"Loud({float(self)!r})"

    for value in [*_numpy_values(), Loud(0.25)]:
        assert as_epsilon(value) == Fraction(repr(float(value)))
        assert as_delta(value * 1e-6) == Fraction(repr(float(value) * 1e-6))


F2_POLICY = F1_POLICY.replace(
    'age = { type = "int", lower = 0, upper = 120 }',
    'age = { type = "int", lower = 0, upper = 120 }\ninc = { type = "float", lower = 0, upper = 100000 }',
)


@pytest.fixture(scope="module")
def f2_policy(tmp_path_factory: pytest.TempPathFactory) -> Any:
    people = pd.DataFrame({"pid": list(range(1, 32)), "age": [20 + i for i in range(31)]}).astype("Int64")
    people["inc"] = [100000.0] * 31  # every row at the bound
    return policy_with_tables(Path(tmp_path_factory.mktemp("s59f2")), F2_POLICY, {"people": people})


@pytest.mark.parametrize("scale", ["1e-300", "1e-310", "1e-320", "1.0", "1e-200"])
def test_f2_a_real_sum_keeps_the_documented_grid_precision_for_tiny_bounds(f2_policy: Any, scale: str) -> None:
    """LOW (correctness): ``SUM(inc * 1e-320)`` over 31 rows all at the bound (exact 31 × 1e-315) was exactly 0 before
    noise — each row fell below one grid step (2⁻¹⁰²³) — though the docs bound the loss by one step of 2⁻⁶² of the row
    bound per row. The exact (noise-off) sum must be within n·2⁻⁶² of Δ of the true sum. A row bound below
    ``fixed_point.MIN_ROW_BOUND`` (2⁻¹⁰⁰⁰: here 1e-310 and 1e-320) is refused instead, free (red team s70 F1)."""
    from fractions import Fraction

    from tests.support.attack_neighbours import exact_release
    from veil.errors import Unsupported
    from veil.proxy import fixed_point
    from veil.proxy._testing import exact_session, plan_of

    n, bound = 31, 100000.0 * float(scale)
    sql = f"SELECT SUM(inc * {scale}) FROM people"
    with exact_session(f2_policy, "a") as s:
        if 100000 * Fraction(scale) < fixed_point.MIN_ROW_BOUND:
            with pytest.raises(Unsupported, match="2\\^-1000"):
                plan_of(s, sql, 1.0)
            return
        got = exact_release(s, sql, 1.0)
    assert got.ok, got.describe()
    (value,) = got.values[0].values()
    assert abs(value - n * bound) <= n * 2.0**-62 * bound * (1 + 1e-9), (value, n * bound)
