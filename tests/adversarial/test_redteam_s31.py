"""Red team, session 31: the query path after session 29's fixes (main at 925cb9c, 2026-11-27) — the LEFT JOIN check
by tree position (``validate._own_joins``/``_side_reads_private``), quoted CTE names in ``parse._references``, the
grid weight of ``Statistic.released_weight`` — and the big classes again on a user-level table
(``privacy_unit = "u"``, ``max_rows_per_unit = 3``).

Same harness as sessions 4–29 (:mod:`tests.adversarial.test_redteam_s15`): D and D′ differ in one person; with noise
off (``veil.proxy._testing.exact_session``) every released statistic must move by at most its planned sensitivity.

Part A holds attacks that succeed on main at 925cb9c: each test FAILS there (not marked xfail: the lead fixes and the
test turns green). Part B holds probes of defences that held (they pass, and fail if the defence breaks).

Findings (details in each test's docstring):

* A1 (LOW, limit bypass) ``parse._references`` lets a quoted CTE of an *inner* WITH shadow an *outer* CTE whose name
  differs only in case: ``WITH c AS (<10 joins>) SELECT … FROM t JOIN (WITH "C" AS (SELECT 1 AS pk) SELECT … FROM
  pub y JOIN c x0 … JOIN c x5 …) z …`` joins 62 relations and is counted as 8 (the s29 A2 fix takes the larger
  count only among CTEs of *one* WITH; across levels the inner ``"C"`` still overwrites the key ``"c"``, while
  resolve binds the unquoted ``c`` to the outer CTE). 30 joins × 30 references (≈ 900 relations) explained in 1.1 s
  and answered in 1.2 s (DuckDB materialises the CTE): the documented limit of 32 does not hold.
* A2 (LOW, availability; charged) MAX_RELEASED_VALUES (and the s29 A3 grid weight) bounds only public-key queries:
  a query with a *private* key releases every group that passes partition selection, and each released group's
  quantiles are scored over their whole grid in Python and logged. ``SELECT FLOOR(u / 2) AS g, quantile_cont(x,
  …) × 10 FROM t GROUP BY 1`` on a 20,000-row table at ε = 100 released 10,000 groups × 10 grid statistics
  (1.2·10⁶ weighted values, 12× the cap a public key gets refused at): 28.6 s, +14 MB of ledger. At ε = 1 the same
  needs groups of ≥ 34 rows (τ), i.e. a 340,000-row table.
* Held (Part B, and by hand): every LEFT JOIN variant onto private data tried is refused — nested-join syntax
  (``LEFT JOIN pub q JOIN t ON … ON …``, ``LEFT JOIN t JOIN pub q ON … ON …``), ``LEFT OUTER``, quoted/upper-case
  names, ``(((t)))``, ``(t CROSS JOIN pub q)``, ``(t, pub q)``, a derived ``(SELECT * FROM (t))``, a CTE or
  derived table doing the LEFT JOIN internally, and a bracketed ``(p LEFT JOIN t …)`` joined on, comma-joined or
  nested; ``USING``, ``NATURAL``, ``RIGHT``, ``FULL`` are refused; ``OUTER JOIN`` alone is a DuckDB syntax error; correlated
  (implicitly LATERAL) derived tables are refused at resolve, ``EXISTS``/``IN (SELECT …)`` refused. On a user-level
  table (3 rows per unit kept; the target with 5 rows, rows at the bounds, ±1e300/inf, 5,000-character text,
  NULLs): COUNT(DISTINCT u) with and without GROUP BY and joins, private and public keys, pinned and cross joins,
  LEFT JOIN onto public data, quantiles/MIN/MAX, VARIANCE/STDDEV at large offsets, overflowing key expressions
  (``y * 1e300``, ``CAST(y * 1e100 AS BIGINT)``, ``ROUND(y, 400)``) all move within their sensitivity and end the
  same way.

Harness note: each world has its own ledger and so its own row-choice salt; base units must hold at most
``max_rows_per_unit`` rows, or D and D′ keep different rows of *other* people and the comparison is meaningless.
"""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.adversarial.test_redteam_s4 import TARGET, TARGET_ROW
from tests.adversarial.test_redteam_s15 import Worlds, refused_or_within_sensitivity
from veil.errors import QueryTooComplex, VeilError


@pytest.fixture(scope="module")
def worlds(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worlds]:
    w = Worlds(
        tmp_path_factory.mktemp("s31"),
        {
            "d": None,
            "x2": dict(TARGET_ROW, x=2),  # joins pub.pk = 2
            "x10": dict(TARGET_ROW, x=10, y=-1.5),
            "nulls": dict(TARGET_ROW, x=None, y=float("nan"), s=None, k=None, b=None),
        },
    )
    yield w
    w.close()


# ==================================================================================================
# Part A — attacks that succeed today
# ==================================================================================================

# --- A1. An inner WITH's quoted CTE lowers the count of an outer CTE named alike -----------------------------


def _shadowed_outer_cte(joins: int, references: int) -> str:
    body = "SELECT a0.pk FROM pub a0 " + " ".join(f"JOIN pub a{i} ON a{i}.pk = a0.pk" for i in range(1, joins))
    refs = " ".join(f"JOIN c x{i} ON x{i}.pk = y.pk" for i in range(references))
    return (
        f'WITH c AS ({body}) SELECT COUNT(*) AS n FROM t JOIN (WITH "C" AS (SELECT 1 AS pk) '
        f"SELECT y.pk FROM pub y {refs}) z ON z.pk = t.x"
    )


def test_A1_an_inner_quoted_cte_does_not_lower_an_outer_ctes_count(worlds: Worlds) -> None:
    """LOW (limit bypass; every interface — parse pass).

    Attack: ``WITH c AS (SELECT a0.pk FROM pub a0 JOIN pub a1 … JOIN pub a9 …) SELECT COUNT(*) FROM t JOIN (WITH "C"
    AS (SELECT 1 AS pk) SELECT y.pk FROM pub y JOIN c x0 ON … JOIN c x5 ON …) z ON z.pk = t.x`` joins 1 + 1 + 6 × 10
    = 62 relations. ``parse._references`` keys CTEs by ``alias_or_name.lower()``; the s29 A2 fix takes the larger
    count only among CTEs of one WITH (``own``), so the inner WITH's quoted ``"C"`` (one relation) replaces the outer
    ``c``'s count in the inner scope, and each ``JOIN c`` counts 1: 8 in all. Resolve (sqlglot scopes, quoted names
    case-sensitive) binds the unquoted ``c`` to the outer CTE, so the engine joins all 62. The same query without the
    decoy is refused (QueryTooComplex, 62). Measured: 30 joins × 30 references (~900 relations) explained in 1.1 s
    and answered in 1.2 s (DuckDB materialises the CTE, so the planner blow-up the limit guards against is small
    here). Root cause: ``veil/proxy/parse.py`` ``_references`` (an inner CTE shadows only names that resolve
    would bind to it: fold unquoted names, keep quoted ones as written, or count a name as the larger of every CTE
    it could mean). A correct system refuses the query, free, with QueryTooComplex."""
    with pytest.raises(QueryTooComplex):
        worlds.sessions["d"].explain(_shadowed_outer_cte(10, 6))


def test_A1_reverse_an_inner_unquoted_cte_does_not_lower_an_outer_quoted_one(worlds: Worlds) -> None:
    """LOW (as A1, the other way round): an outer quoted ``"C"`` of 10 joins referenced 6 times as ``"C"`` inside a
    derived table whose own WITH defines an unquoted ``c``; counted 8, joins 62."""
    body = "SELECT a0.pk FROM pub a0 " + " ".join(f"JOIN pub a{i} ON a{i}.pk = a0.pk" for i in range(1, 10))
    refs = " ".join(f'JOIN "C" x{i} ON x{i}.pk = y.pk' for i in range(6))
    sql = (
        f'WITH "C" AS ({body}) SELECT COUNT(*) AS n FROM t JOIN (WITH c AS (SELECT 1 AS pk) '
        f"SELECT y.pk FROM pub y {refs}) z ON z.pk = t.x"
    )
    with pytest.raises(QueryTooComplex):
        worlds.sessions["d"].explain(sql)


# --- A2. Private keys: released groups × grid statistics are not bounded ---------------------------------------

_BIG_POLICY = """\
[database]
path = "w.duckdb"
[ledger]
path = "l.sqlite"
[tables.t]
privacy_unit = "row"
[tables.t.columns]
u = { type = "int", lower = 0, upper = 1000000 }
x = { type = "float", lower = 0, upper = 100 }
[analysts.a]
epsilon = 1000000
delta = 0.5
"""


def test_A2_private_key_releases_are_bounded_like_public_ones(tmp_path: Path) -> None:
    """LOW (availability and ledger growth; charged; every interface).

    Attack: ``SELECT FLOOR(u / 2) AS g, quantile_cont(x, 0.05), …, quantile_cont(x, 0.9) FROM t GROUP BY 1`` (8
    quantiles; a *private* key, so partition selection). s26 A5 / s29 A3 bound a query's released values by
    MAX_RELEASED_VALUES (100,000; a grid statistic weighs 1 + grid/100 = 12) — but only in ``Env.public_domain``,
    i.e. for public keys. With a private key every group that passes partition selection is released, and each
    released group's grid statistics are scored over the whole 1,001-point grid in Python and logged. Measured
    (20,000 rows, 10 quantiles, ε = 100, seeded noise): 10,000 groups released, 1.2·10⁶ weighted values, 28.6 s and
    +14 MB of ledger for one query; the same shape with a public key is refused free. At ε = 1 (τ ≈ 34) the groups
    need 34 rows each: a 340,000-row table. Here (exact noise, so τ = 2): 2,200 rows → 1,100 groups × (8 × 12 + 1
    for the partition count) = 106,700 weighted values. Root cause: ``veil/proxy/session.py`` ``Env.public_domain``
    is the only place MAX_RELEASED_VALUES is applied; nothing bounds released private groups × ``Statistic.released_weight``. A
    correct system bounds it for private keys too (e.g. release at most MAX_RELEASED_VALUES / Σ weight groups —
    the top noisy counts, post-processing — or refuse when the bound could be passed, free)."""
    from veil.policy import load_policy
    from veil.proxy._testing import exact_session, plan_of
    from veil.proxy.plan import MAX_RELEASED_VALUES
    from veil.store.warehouse import write_table

    (tmp_path / "policy.toml").write_text(_BIG_POLICY, encoding="utf-8")
    policy = load_policy(tmp_path / "policy.toml")
    n = 2200
    write_table(
        policy,
        "t",
        pd.DataFrame({"u": pd.array(range(n), dtype="Int64"), "x": [float((i * 37) % 100) for i in range(n)]}),
        replace=True,
    )
    s = exact_session(policy, "a")
    try:
        quantiles = ", ".join(f"quantile_cont(x, {0.05 + i / 10:.2f}) AS q{i}" for i in range(8))
        sql = f"SELECT FLOOR(u / 2) AS g, {quantiles} FROM t GROUP BY 1"
        plan = plan_of(s, sql, 100)
        assert plan is not None
        per_group = sum(st.released_weight for st in plan.statistics)
        try:
            answer = s.execute(sql, epsilon=Fraction(100))
        except VeilError:
            return  # refused (typed): a fine fix
        released = len(answer.rows) * per_group
        assert released <= MAX_RELEASED_VALUES, (
            f"{len(answer.rows):,} private groups × {per_group} weighted values = {released:,} released, past the "
            f"{MAX_RELEASED_VALUES:,} a public-key query is refused at"
        )
    finally:
        s.close()


# ==================================================================================================
# Part B — defences that held
# ==================================================================================================

_P = "(SELECT pk FROM pub WHERE pk = 2) p"
_V = "SUM(CASE WHEN t.u IS NULL THEN 1 ELSE -1 END) AS v"
_ON = f"p.pk = t.x AND t.u = {TARGET}"

LEFT_JOIN_VARIANTS = [
    # nested-join syntax: the private table is a join *inside* the right side's Table node
    f"SELECT {_V} FROM {_P} LEFT JOIN pub q JOIN t ON t.x = q.pk ON p.pk = q.pk AND t.u = {TARGET}",
    f"SELECT {_V} FROM {_P} LEFT JOIN t JOIN pub q ON t.x = q.pk ON {_ON}",
    f"SELECT {_V} FROM {_P} LEFT OUTER JOIN t ON {_ON}",
    f'SELECT {_V} FROM {_P} LEFT JOIN "t" ON {_ON}',
    f"SELECT {_V} FROM {_P} LEFT JOIN T ON {_ON}",
    f"SELECT {_V} FROM {_P} LEFT JOIN (((t))) ON {_ON}",
    f"SELECT {_V} FROM {_P} LEFT JOIN (t CROSS JOIN pub q) ON {_ON}",
    f"SELECT {_V} FROM {_P} LEFT JOIN (t, pub q) ON {_ON}",
    f"SELECT SUM(CASE WHEN z.u IS NULL THEN 1 ELSE -1 END) AS v FROM {_P} LEFT JOIN (SELECT * FROM (t)) z "
    f"ON p.pk = z.x AND z.u = {TARGET}",
    f"WITH c AS (SELECT * FROM {_P} LEFT JOIN t ON {_ON}) SELECT SUM(CASE WHEN u IS NULL THEN 1 ELSE -1 END) AS v FROM c",
    f"SELECT SUM(CASE WHEN z.u IS NULL THEN 1 ELSE -1 END) AS v FROM (SELECT * FROM {_P} LEFT JOIN t ON {_ON}) z",
    f"SELECT {_V} FROM ({_P} LEFT JOIN t ON {_ON}) JOIN pub r ON r.pk = p.pk",
    f"SELECT {_V} FROM pub r JOIN ({_P} LEFT JOIN t ON {_ON}) ON r.pk = p.pk",
    f"SELECT {_V} FROM pub r, ({_P} LEFT JOIN t ON {_ON})",
    "SELECT SUM(CASE WHEN u IS NULL THEN 1 ELSE -1 END) AS v FROM (SELECT pk AS x FROM pub WHERE pk = 2) p LEFT JOIN t USING (x)",
    "SELECT SUM(CASE WHEN u IS NULL THEN 1 ELSE -1 END) AS v FROM (SELECT pk AS x FROM pub WHERE pk = 2) p NATURAL LEFT JOIN t",
    f"SELECT {_V} FROM t RIGHT JOIN {_P} ON p.pk = t.x",
    f"SELECT {_V} FROM {_P} FULL JOIN t ON p.pk = t.x",
    # a correlated (implicitly LATERAL in DuckDB) derived table, and subqueries outside FROM
    "SELECT COUNT(*) AS n FROM pub p, (SELECT x FROM t WHERE t.x = p.pk) z",
    "SELECT COUNT(*) AS n FROM t, (SELECT pk FROM pub WHERE pk <> t.x) z",
    "SELECT COUNT(*) AS n FROM t WHERE t.x IN (SELECT pk FROM pub)",
]


@pytest.mark.parametrize("sql", LEFT_JOIN_VARIANTS)
def test_B1_left_join_variants_onto_private_data_are_refused(worlds: Worlds, sql: str) -> None:
    """s29 A1's fix (``_own_joins`` + ``_side_reads_private``, by tree position) refuses every LEFT JOIN whose right
    side reads private data, however it is bracketed, nested or named (free, the same on every world)."""
    with pytest.raises(VeilError):
        worlds.sessions["d"].explain(sql)
    assert refused_or_within_sensitivity(worlds, sql) == []


# --- B2. User-level table: the classes of earlier rounds, again ----------------------------------------------

_UNIT_POLICY = """\
[database]
path = "w.duckdb"
[ledger]
path = "l.sqlite"
[tables.t]
privacy_unit = "u"
max_rows_per_unit = 3
[tables.t.columns]
u = { type = "int", lower = 0, upper = 100 }
x = { type = "int", lower = -10, upper = 10 }
y = { type = "float", lower = -5, upper = 5 }
k = { type = "category", values = ["a", "b"] }
s = { type = "category" }
b = { type = "bool" }
[tables.pub]
public = true
[tables.pub.columns]
pk = { type = "int" }
pn = { type = "category" }
[analysts.a]
epsilon = 1000000
delta = 0.5
"""

_PUB = pd.DataFrame({"pk": pd.array([1, 2, 3], dtype="Int64"), "pn": ["p", "q", "r"]})


def _unit_rows() -> list[dict[str, Any]]:
    # at most max_rows_per_unit rows per base unit: every world then keeps the same rows of everyone but the target
    return [
        {"u": i, "x": (i * j) % 7 - 3, "y": ((i + j) % 5) - 2.5, "k": "ab"[(i + j) % 2], "s": f"s{(i + j) % 3}",
         "b": bool(j % 2)}
        for i in range(1, 31)
        if i != TARGET
        for j in range(1 + i % 3)
    ]  # fmt: skip


def _unit_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    types = {"u": "Int64", "x": "Int64", "y": "float64", "b": "boolean"}
    return pd.DataFrame({c: pd.array([r[c] for r in rows], dtype=types.get(c, "object")) for c in rows[0]})


def _t(**kw: Any) -> dict[str, Any]:
    return {"u": TARGET, "x": 5, "y": 1.5, "k": "a", "s": "s1", "b": True, **kw}


class UnitWorlds(Worlds):
    """D and neighbours that add one *unit* (several rows) to a user-level table (asked as :class:`Worlds` is)."""

    def __init__(self, base: Path, targets: dict[str, list[dict[str, Any]] | None]) -> None:
        from veil.policy import load_policy
        from veil.proxy._testing import exact_session
        from veil.store.warehouse import write_table

        self.sessions: dict[str, Any] = {}
        for name, target in targets.items():
            rows = _unit_rows() if target is None else sorted([*_unit_rows(), *target], key=lambda r: r["u"])
            folder = base / name
            folder.mkdir()
            (folder / "policy.toml").write_text(_UNIT_POLICY, encoding="utf-8")
            policy = load_policy(folder / "policy.toml")
            write_table(policy, "pub", _PUB, replace=True, public=True)
            write_table(policy, "t", _unit_frame(rows), replace=True)
            self.sessions[name] = exact_session(policy, "a")
        self.asked = 0


@pytest.fixture(scope="module")
def unit_worlds(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UnitWorlds]:
    w = UnitWorlds(
        tmp_path_factory.mktemp("s31u"),
        {
            "d": None,
            "five": [_t(x=i - 2, y=i - 2.0, s=f"t{i}", k="ab"[i % 2]) for i in range(5)],  # 5 rows, 3 kept
            "x2": [_t(x=2), _t(x=2, y=-5.0), _t(x=2, s="zz")],
            "wide": [
                _t(x=10**12, y=1e300, s="z" * 5000, k="zz"),
                _t(x=-(10**12), y=-1e300, s="", k="b"),
                _t(x=3, y=float("inf")),
            ],
            "nulls": [_t(x=None, y=float("nan"), s=None, k=None, b=None)] * 4,
        },
    )
    yield w
    w.close()


USER_LEVEL_QUERIES = [
    "SELECT COUNT(DISTINCT u) AS n FROM t",
    "SELECT k, COUNT(DISTINCT u) AS n FROM t GROUP BY k",
    "SELECT COUNT(DISTINCT z.u) AS n FROM (SELECT t.u FROM t JOIN pub p ON p.pk = t.x) z",
    "SELECT COUNT(DISTINCT u) AS n FROM t CROSS JOIN pub p",
    "SELECT s, COUNT(*) AS n, SUM(y) AS sy, AVG(x) AS ax, MEDIAN(y) AS my FROM t GROUP BY s",
    "SELECT MEDIAN(x) AS m, MIN(y) AS lo, MAX(y) AS hi FROM t",
    "SELECT p.pn, COUNT(*) AS n, AVG(t.y) AS a FROM t JOIN pub p ON p.pk = t.x GROUP BY p.pn",
    "SELECT p.pn, COUNT(*) AS n FROM t LEFT JOIN pub p ON p.pk = t.x GROUP BY p.pn",
    "SELECT t.s, COUNT(*) AS n FROM t CROSS JOIN pub p GROUP BY t.s",
    "SELECT COUNT(*) AS n FROM t JOIN pub p ON p.pk = t.u",
    "SELECT y * 1e300 AS g, COUNT(*) AS n FROM t GROUP BY 1",
    "SELECT CAST(y * 1e100 AS BIGINT) AS g, COUNT(*) AS n FROM t GROUP BY 1",
    "SELECT k, VARIANCE(y) AS v, STDDEV(x + 1e16) AS sd FROM t GROUP BY k",
    "SELECT u % 3 AS g, COUNT(DISTINCT u) AS n FROM t GROUP BY 1",
]


@pytest.mark.parametrize("sql", USER_LEVEL_QUERIES)
def test_B2_user_level_statistics_move_within_their_sensitivity(unit_worlds: UnitWorlds, sql: str) -> None:
    """A unit with more rows than ``max_rows_per_unit``, rows at the bounds, ±1e300/inf, long text and NULLs: every
    statistic (COUNT DISTINCT unit with and without groups and joins, private and public keys, joins, moments,
    quantiles, overflowing keys) moves within its sensitivity (c = 3 × join multiplicity) and ends the same way."""
    assert refused_or_within_sensitivity(unit_worlds, sql) == []
