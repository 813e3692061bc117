"""Red team, session 55: the changes merged on 2026-11-27 (main at fb5fa84), attacked as classes.

Neighbouring worlds are s52's (``tests.adversarial.test_redteam_s52``: a user-level ``trips``, the target pid 77 with
12 rows past every bound, public tables with duplicated, NULL, 0.0/−0.0/NaN keys), noise off through
``tests.support.attack_neighbours``.

Findings:

* A1 (HIGH, a sensitivity under-count of up to the join cap, every interface; fixed in ``veil/proxy/multiplicity.py``)
  s52's A2 refused a public source whose rows are decided by an aggregate that *rounds* per run (SUM, AVG, …) and kept
  MIN, MAX and MEDIAN as exact. On a DOUBLE they are not: 0.0 and −0.0 compare equal, so MAX/MIN keep whichever a
  thread saw first and the parallel sort behind MEDIAN orders them per run, yet the two convert to text (``'0.0'`` /
  ``'-0.0'``) and divide (±inf) differently. With a public ``fl`` of 600,000 rows (key ``'a'`` on every 1000th row,
  other keys distinct; ``x`` = 0.0 in the first half, −0.0 in the second; 1000 groups ``grp``), ``SELECT COUNT(*) FROM
  trips t JOIN (SELECT f.key FROM fl f JOIN (SELECT grp FROM fl GROUP BY grp HAVING CAST(MAX(x) AS VARCHAR) = '-0.0')
  g ON g.grp = f.grp) d ON d.key = t.city WHERE t.pid = 77`` planned sensitivity 3 in 1 of 4 fresh sessions (the
  probe's run dropped the groups) and 1,800 in 3, while the query answered 600 on D in 12 of 12 runs and 0 on D′: 200×
  the planned sensitivity, found with free EXPLAINs in new sessions as for s52's A1 (plain DuckDB: ``HAVING
  CAST(MAX(x) AS VARCHAR) = '-0.0'`` kept all 1000 groups in 12 of 15 runs and none in 3; MEDIAN 3 and 12; MIN 0 or
  all, by layout). Fix: MIN, MAX, MEDIAN and the quantiles decide a public source's rows (HAVING, DISTINCT, a nested
  subquery, a CTE it reads) only over a bare column of an exact type (integer, text, date, boolean) — resolved through
  the source's scopes; of a real or an expression they are refused, free, as SUM is. ``var()``/``std()`` (sqlglot's
  ``Anonymous``) are refused by name there too (they failed with an engine error before).
* A2 (LOW, correctness; describe-only, ``veil/proxy/parse.py`` is the lead's) an extra argument is dropped silently
  where sqlglot's expression has no slot for it and does not complain: ``LEFT(city, 1, 2)``, ``RIGHT(city, 1, 2)``,
  ``STRPOS(city, 'a', 1)``, ``FLOOR(fare, 1, 2)``, ``CEIL(fare, 1, 2)``, ``LENGTH(city, 2)`` and ``SUBSTRING(city, 1,
  2, 3)`` are answered as the call without it; PostgreSQL refuses each (42883), as parse now does for what sqlglot
  refuses. (``ROUND(x, 1, 2)`` and ``DATE_TRUNC('month', day, 'x')`` end free as 42000/22000 engine errors.) Fix: in
  parse, count each call's top-level arguments in the token stream before sqlglot parses it, and refuse (42883) a
  call to one of these names with more than PostgreSQL takes (left/right/strpos 2, floor/ceil/length 1, substring 3).
* A3 (LOW, availability; fixed in ``veil/proxy/totality.py``) ``make_total`` wrapped an aggregate other than
  COUNT/SUM/AVG/MIN/MAX in ``TRY`` (``TRY(MEDIAN(k))``), which DuckDB refuses ("aggregates are not allowed inside the
  TRY expression"): a public source with ``HAVING MEDIAN(k) >= 0`` or ``quantile_cont(k, 0.5)`` failed every query
  that joined it (free, 22000). An aggregate is never wrapped now.
* A4 (LOW, describe-only, ``veil/generators/transaction.py`` is suitetrim4's) ``_published_value_columns`` iterates
  ``plan.params["sensitive"]``, which is a list for k-anonymity but one column name (a string) for ``veil publish
  synth``: a synthetic publication counts as publishing columns ``'g'``, ``'a'``, ``'i'``, ``'n'`` value by value, takes
  the source's linkage claim (a concurrent k-anonymous ``--sensitive`` publication of that source is refused as
  "running right now") and is refused if a live k-anonymous table of the source has a one-letter sensitive column.
  Fix: count ``sensitive`` only for ``plan.kind == "kanon"`` (its ``ColumnProtection`` is the only ``sensitive`` one).

What held: OpenDP through the C API (``veil/mechanisms/_opendp_call.py``): KS of 2·10⁵ Laplace draws at scales 10⁻³…10⁶
(lattice and default) p ≥ 0.43 with power against a 2 % wrong scale (p ≤ 10⁻³); χ² of discrete Laplace at 1, 7.5,
100 (10⁶ draws at 1: p = 0.63) with power at 5 %; 16 threads × 3,000 calls of both at once, no error or non-finite
value; 2·10⁵ calls, max RSS flat (230,912 kB); empty, 2-d, strided and 2·10⁶-long vectors; i64 extremes and scales
2⁶²…2¹⁰⁰⁰ saturate only the final value (symmetric ±2⁶³, never ``v − 2⁶³``). DISTINCT and GROUP BY over 0.0/−0.0
keys kept one representative in every run (4 layouts × 10 runs, 600,000 rows). The linkage check: case, quoting,
spacing and schema variants of ``--table`` are refused as unknown tables; ``--sensitive GAIN`` normalises to
``gain`` and is refused. Today's leftovers: ``IN ()`` (also in a CTE), too many column aliases, date literals Python
cannot read (``DATE '99999-01-01'``, ``'0000-01-01'``, ``'2020-02-30'``, ``CAST('infinity' AS DATE)``, TRY_CAST, a
public column compared with one), dates as text compared with a DATE (42804) and ``quantile_cont``/``var``/
``percentile_cont``/``median``/``sum`` with an extra argument (42883) are refused free and alike on D and D′.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.adversarial.test_redteam_s52 import _epsilon, _pair, _sensitivities, _spent, build, violations

#: k = 0 holds kd 0.0 and −0.0 (and a NaN k = 1): which one MAX/MIN/MEDIAN returns is the engine's thread order's
#: choice on a large table (on this small one it is fixed, and the group's rows are kept or not).
SELECTING_CHOICES = (
    "SELECT COUNT(*) FROM trips t JOIN (SELECT f.k FROM keys f JOIN (SELECT k FROM keys GROUP BY k HAVING "
    "CAST(MAX(kd) AS VARCHAR) = '-0.0') g ON g.k = f.k) d ON d.k = t.k WHERE t.pid = 77",
    "SELECT COUNT(*) FROM trips t JOIN (SELECT k FROM keys GROUP BY k HAVING CAST(MEDIAN(kd) AS TEXT) = '-0.0') g ON g.k = t.k",
    "SELECT COUNT(*) FROM trips t JOIN (SELECT k FROM (SELECT k, MIN(kd) AS m FROM keys GROUP BY k) y "
    "WHERE CAST(m AS TEXT) = '-0.0') g ON g.k = t.k",
    "WITH x AS (SELECT k, MAX(kd) AS m FROM keys GROUP BY k) SELECT COUNT(*) FROM trips t JOIN (SELECT k FROM x "
    "WHERE CAST(m AS VARCHAR) = '-0.0') g ON g.k = t.k",
    "SELECT COUNT(*) FROM trips t JOIN (SELECT DISTINCT MAX(kd) AS m FROM keys GROUP BY k) g ON TRUE",
    "SELECT COUNT(*) FROM trips t JOIN (SELECT k FROM keys GROUP BY k HAVING MAX(-k) > 0) g ON g.k = t.k",
    "SELECT COUNT(*) FROM trips t JOIN (SELECT k FROM keys GROUP BY k HAVING quantile_cont(kd, 0.5) > 0) g ON g.k = t.k",
    "SELECT COUNT(*) FROM trips t JOIN (SELECT k FROM keys GROUP BY k HAVING var(kd) > 0) g ON g.k = t.k",
)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any]]:
    d, d_prime = _pair(tmp_path_factory.mktemp("s55"))
    yield d, d_prime
    d.close()
    d_prime.close()


@pytest.mark.parametrize("sql", SELECTING_CHOICES)
def test_a1_a_row_choice_by_a_selecting_aggregate_of_a_real_is_refused_free(pair: tuple[Any, Any], sql: str) -> None:
    """HIGH: MAX/MIN/MEDIAN of a DOUBLE return 0.0 or −0.0 by the engine's thread order, and the text of the value
    decided the public source's rows (600,000 rows: planned 3 in 1 of 4 sessions, answered 600 on D against 0 on D′
    in 12 of 12 runs). Refused before anything is charged, alike on D and D′."""
    from veil.errors import Unsupported

    d, d_prime = pair
    assert violations(d, d_prime, sql) == []
    before = _spent(d)
    with pytest.raises(Unsupported, match="MIN, MAX, MEDIAN or quantile"):
        d.execute(sql, epsilon=_epsilon())
    assert _spent(d) == before


def test_a1_held_exact_selecting_aggregates_and_values_stay_answered(pair: tuple[Any, Any]) -> None:
    """What the fix keeps: MIN/MAX/MEDIAN of an integer or a text column deciding rows, any aggregate as a value of
    the source's own select list — and A3: a MEDIAN in HAVING no longer fails in the engine (TRY around it)."""
    d, d_prime = pair
    for sql in (
        "SELECT COUNT(*) FROM trips t JOIN (SELECT k FROM keys GROUP BY k HAVING MAX(kt) > '0') g ON g.k = t.k",
        "SELECT COUNT(*) FROM trips t JOIN (SELECT k FROM keys GROUP BY k HAVING MEDIAN(k) >= 0) g ON g.k = t.k",
        "SELECT COUNT(*) FROM trips t JOIN (SELECT k FROM keys GROUP BY k HAVING quantile_cont(k, 0.5) >= 0) g ON g.k = t.k",
        "WITH x AS (SELECT k, MIN(k) AS m FROM keys GROUP BY k) SELECT COUNT(*) FROM trips t JOIN (SELECT k FROM x "
        "WHERE m >= 0) g ON g.k = t.k",
        "SELECT COUNT(*) FROM trips t JOIN (SELECT k, MAX(kd) AS m, MEDIAN(kd) AS md FROM keys GROUP BY k) g ON g.k = t.k",
    ):
        assert _sensitivities(d, sql) == [3], sql
        assert violations(d, d_prime, sql) == []


def test_a1_through_the_wire(tmp_path: Path) -> None:
    """Through ``veil serve`` and psycopg: EXPLAIN (free) and the query itself are 0A000."""
    from tests.support.attack import set_password, wire_connect, wire_sqlstate
    from tests.support.server import running_server

    policy = build(tmp_path / "w", drop_target=False, public=("keys",))
    set_password(policy, "wire")
    with running_server(policy) as st:
        conn = wire_connect(st.port, "wire")  # type: ignore[attr-defined]
        try:
            assert wire_sqlstate(conn, f"EXPLAIN {SELECTING_CHOICES[0]}") == "0A000"
            assert wire_sqlstate(conn, SELECTING_CHOICES[1]) == "0A000"
        finally:
            conn.close()


EXTRA_ARGUMENTS = (
    "SELECT COUNT(*) FROM trips WHERE LEFT(city, 1, 2) = 'a'",
    "SELECT COUNT(*) FROM trips WHERE STRPOS(city, 'a', 1) = 1",
    "SELECT COUNT(*) FROM trips WHERE FLOOR(fare, 1, 2) > 0",
    "SELECT COUNT(*) FROM trips WHERE LENGTH(city, 2) = 1",
    "SELECT COUNT(*) FROM trips WHERE SUBSTRING(city, 1, 2, 3) = 'a'",
)


@pytest.mark.parametrize("sql", EXTRA_ARGUMENTS)
def test_a2_an_extra_argument_is_refused_not_dropped(pair: tuple[Any, Any], sql: str) -> None:
    """LOW: answered as the call without its last argument; PostgreSQL refuses it (42883), free."""
    from tests.support.attack_neighbours import exact_release

    d, _ = pair
    before = _spent(d)
    rel = exact_release(d, sql, _epsilon())
    assert _spent(d) == before
    assert rel.sqlstate == "42883", rel.describe()


def test_a4_a_synthetic_publication_publishes_no_column_value_by_value() -> None:
    from veil.generators.publication import Plan
    from veil.generators.transaction import _published_value_columns

    plan = Plan(kind="synth", method="imposter", source="people", output="s", params={"sensitive": "gain"})
    assert _published_value_columns(plan) == set()
    kanon = Plan(kind="kanon", method="kanon-mondrian", source="people", output="p", params={"sensitive": ["gain"]})
    assert _published_value_columns(kanon) == {"gain"}


def test_held_todays_refusals_are_free_and_alike(pair: tuple[Any, Any]) -> None:
    """Leftovers merged today, one query per refusal: free, the same SQLSTATE on D and D′."""
    from tests.support.attack_neighbours import exact_release

    d, d_prime = pair
    for sql, state in (
        ("WITH c AS (SELECT city FROM cities WHERE city IN ()) SELECT COUNT(*) FROM trips t JOIN c ON c.city = t.city",
         "42601"),
        ("SELECT COUNT(*) FROM (SELECT pid FROM trips) AS t(a, b)", "42P10"),
        ("SELECT COUNT(*) FROM trips WHERE day > TRY_CAST('infinity' AS DATE)", "22007"),
        ("SELECT COUNT(*) FROM trips t JOIN cities c ON c.city = t.city WHERE c.region > DATE '99999-01-01'", "22007"),
        ("SELECT median(amount, 0.5) FROM trips", "42883"),
    ):  # fmt: skip
        before = _spent(d), _spent(d_prime)
        assert violations(d, d_prime, sql) == [], sql
        assert exact_release(d, sql, _epsilon()).sqlstate == state, sql
        assert (_spent(d), _spent(d_prime)) == before
