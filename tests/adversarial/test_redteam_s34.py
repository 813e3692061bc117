"""Red team, session 34: the query path after session 33's fixes (main at a8dc22c, 2026-11-27) — the LEFT JOIN check
(``validate._own_joins``/``_side_reads_private``/``_source_reads_private``, one predicate since a8dc22c), CTE
resolution and counting, released-value caps and partition selection, deterministic side channels on edge data, and
sensitivities of joins on a public table whose keys repeat.

Same harness as sessions 4–33 (:mod:`tests.adversarial.test_redteam_s15`): D and D′ differ in one person (the target,
unit 7); with noise off (``veil.proxy._testing.exact_session``) both must end the same way and every released statistic
must move by at most its planned sensitivity (L1 over every group, released or not).

Part A holds attacks that succeeded on main at a8dc22c (fixed on this branch: each test failed there). Part B holds
probes of defences that held (they pass, and fail if the defence breaks).

Findings (details in each test's docstring):

* A1 (LOW, wrong answers; no privacy loss) a column alias list on a *table* reference, ``FROM t AS z(x, u)``, was
  dropped by ``resolve._rename_references`` (it rebuilt the alias from the name alone) and the columns qualified by
  their catalog names: ``SELECT COUNT(*) FROM t AS z(x, u) WHERE z.x = 7`` counted rows with ``t.x = 7`` where
  PostgreSQL (and DuckDB) read ``z.x`` as ``t.u`` (the list renames columns in order). The checks, the plan and the
  engine all read it the same (wrong) way, so sensitivities held; answers were silently not those asked for. Same
  for a public table (``JOIN p2 AS z(b, a)``), a public-only query, and a CTE reference (``FROM c AS z(u, x)``).
  Fixed: refused, free (0A000). A derived table's or a CTE definition's list is honoured and stays allowed.
* Held (Part B, and by hand; ~1,300 generated queries — joins, keys, aggregates, filters — over five row-level and
  four user-level neighbours, no finding): LEFT JOIN onto private data through nested ``WITH`` inside derived
  tables and CTEs, CTE shadowing at every level, ``USING``, a public CTE named like the private table — refused at
  every interface (wire, simple and extended protocol; CLI); pins on a public
  table whose keys repeat (ints, ``0.0``/``-0.0``/NaN floats, text with ``'1'``/``'01'``/``' 1'``, NULL keys), through
  ``DISTINCT``/``GROUP BY``/self-joined/LEFT-joined derived tables and CTE column lists that swap names; ``COUNT(DISTINCT
  unit)`` through derived/CTE column lists that rename another column to the unit's name (planned at c, not 1); dates
  ``±infinity``, year 294247, BC and year 5881580 through every EXTRACT field and DATE_TRUNC unit tried, casts to
  TIMESTAMP and interval arithmetic; aggregates over public columns of a private query (unbounded: refused).
* Noted, not a leak: ``d - DATE '2000-01-01'`` (an integer of days in DuckDB) is typed as a date by sqlglot, so
  comparing it with a number is refused (42804, free): an over-refusal.

Harness note: ``raw_statistics`` reads ``state.noisy``, where a non-partition statistic of a group partition selection
did not release is 0; with noise off a private-key group whose count sits between D's and D′'s threshold crossing
(τ = c + ⌈b·ln(c/δ)⌉, δ = 1e-7) then looks like a move of the whole statistic. Compare released groups only there.
"""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.adversarial.test_redteam_s4 import POLICY, PUB, TARGET, TARGET_ROW, _base_rows, _frame
from tests.adversarial.test_redteam_s15 import moves_beyond_sensitivity
from veil.errors import Unsupported, VeilError

#: A public table whose join keys repeat, and whose floats and texts spell one value several ways.
PD = pd.DataFrame(
    {
        "pk": pd.array([1, 1, 2, 2, 2, 3, None], dtype="Int64"),
        "pn": ["p", "p", "q", "Q", "q ", None, "r"],
        "pf": [0.0, -0.0, float("nan"), 1.5, 1.5, 2.0, None],
        "ps": ["1", "01", " 1", "1.0", "s1", "s1", None],
    }
)
#: Two integer columns: ``a`` unique, ``b`` one value on every row (a pin on ``b`` joins all eight).
P2 = pd.DataFrame({"a": pd.array(range(1, 9), dtype="Int64"), "b": pd.array([2] * 8, dtype="Int64")})

_POLICY = (
    POLICY
    + """
[tables.pd]
public = true
[tables.pd.columns]
pk = { type = "int" }
pn = { type = "category" }
pf = { type = "float" }
ps = { type = "category" }

[tables.p2]
public = true
[tables.p2.columns]
a = { type = "int" }
b = { type = "int" }
"""
)


class Worlds:
    """D and neighbours D′ (the target stored at its place in id order), each with its own warehouse and ledger."""

    def __init__(self, base: Path, targets: dict[str, dict[str, Any] | None], public: bool = True) -> None:
        from veil.policy import load_policy
        from veil.proxy._testing import exact_session
        from veil.store.warehouse import write_table

        self.sessions: dict[str, Any] = {}
        self.paths: dict[str, Path] = {}
        for name, target in targets.items():
            rows = _base_rows() if target is None else sorted([*_base_rows(), target], key=lambda r: r["u"])
            folder = base / name
            folder.mkdir()
            (folder / "policy.toml").write_text(_POLICY, encoding="utf-8")
            policy = load_policy(folder / "policy.toml")
            for table, frame in (("pub", PUB), ("pd", PD), ("p2", P2)) if public else ():
                write_table(policy, table, frame, replace=True, public=True)
            write_table(policy, "t", _frame(rows), replace=True)
            self.sessions[name] = exact_session(policy, "a")
            self.paths[name] = folder / "policy.toml"
        self.asked = 0

    def fresh(self) -> Fraction:
        """A new ε each time, so the answer cache never answers."""
        self.asked += 1
        return Fraction(5) + Fraction(self.asked, 10**6)

    def ends(self, sql: str) -> dict[str, Any]:
        eps = self.fresh()
        out: dict[str, Any] = {}
        for name, s in self.sessions.items():
            try:
                out[name] = s.execute(sql, epsilon=eps)
            except VeilError as exc:
                out[name] = type(exc).__name__
        return out

    def refused_or_within_sensitivity(self, sql: str) -> list[str]:
        """[] when every world refuses ``sql`` (typed, free) or answers it with every statistic within its sensitivity."""
        ends = self.ends(sql)
        kinds = {name: (v if isinstance(v, str) else "answered") for name, v in ends.items()}
        if len(set(kinds.values())) > 1:
            return [f"the worlds end differently: {kinds}"]
        if "answered" not in kinds.values():
            return []
        return moves_beyond_sensitivity(self.sessions, sql, self.fresh())

    def close(self) -> None:
        for s in self.sessions.values():
            s.close()


@pytest.fixture(scope="module")
def worlds(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worlds]:
    w = Worlds(
        tmp_path_factory.mktemp("s34"),
        {
            "d": None,
            "x2": dict(TARGET_ROW, x=2),  # joins pub.pk = 2, pd's three pk = 2 rows, every p2.b
            "x1": dict(TARGET_ROW, x=1, y=0.0, s="1"),  # pd.pf 0.0 and -0.0; pd.ps '1'
            "nulls": dict(TARGET_ROW, x=None, y=float("nan"), s=None, k=None, b=None),
        },
    )
    yield w
    w.close()


# ==================================================================================================
# Part A — attacks that succeeded on main at a8dc22c
# ==================================================================================================

# --- A1. A column alias list on a table reference is dropped ---------------------------------------------------

#: (query with a column alias list on a table reference, the same question without it, as PostgreSQL reads the list)
RENAMED_COLUMNS = [
    (f"SELECT COUNT(*) AS n FROM t AS z(x, u) WHERE z.x = {TARGET}", f"SELECT COUNT(*) AS n FROM t AS z WHERE z.u = {TARGET}"),
    ("SELECT SUM(z.x) AS n FROM t AS z(x, u)", "SELECT SUM(z.u) AS n FROM t AS z"),
    ("SELECT COUNT(*) AS n FROM t JOIN p2 AS z(b, a) ON z.a = t.x", "SELECT COUNT(*) AS n FROM t JOIN p2 AS z ON z.b = t.x"),
    (
        "WITH c AS (SELECT x, u FROM t) SELECT COUNT(*) AS n FROM c AS z(u, x) WHERE z.u = 2",
        "WITH c AS (SELECT x, u FROM t) SELECT COUNT(*) AS n FROM c AS z WHERE z.x = 2",
    ),
    ("SELECT COUNT(*) AS n FROM p2 AS z(b, a) WHERE z.a = 2", "SELECT COUNT(*) AS n FROM p2 AS z WHERE z.b = 2"),
]


@pytest.mark.parametrize(("sql", "meant"), RENAMED_COLUMNS)
def test_A1_a_column_alias_list_on_a_table_reference_is_honoured_or_refused(worlds: Worlds, sql: str, meant: str) -> None:
    """LOW (wrong answers; every interface — the resolve pass).

    Attack: ``SELECT COUNT(*) FROM t AS z(x, u) WHERE z.x = 7``. In PostgreSQL a table alias's column list renames
    the table's columns in order, so ``z.x`` is ``t.u`` and the query counts person 7's rows. ``resolve.
    _rename_references`` rebuilt every table reference's alias as ``TableAlias(this=alias)``, dropping the list, and
    qualification then read ``z.x`` as the column *named* ``x``: the query counted rows with ``t.x = 7`` instead. The
    plan, the probes and the engine all read it that way, so no sensitivity was wrong (no privacy loss), but the
    answer was not the one asked for, silently: measured (noise off) 0 against 1 on D′. The same held for a public
    table (``JOIN p2 AS z(b, a) ON z.a = t.x`` planned and ran as ``p2.a``, unique, instead of ``p2.b``), a CTE
    reference, and a public-only query (``FROM p2 AS z(b, a) WHERE z.a = 2``: 1 row instead of 8). Root cause:
    ``veil/proxy/resolve.py`` ``_rename_references``. A correct system honours the list or refuses it (free);
    fixed by refusing it (0A000): a derived table ``(SELECT …) AS z(a, b)`` renames columns and is honoured."""
    s = worlds.sessions["x2"]
    try:
        answer = s.execute(sql, epsilon=worlds.fresh())
    except Unsupported as exc:
        assert exc.sqlstate == "0A000"
        return
    expected = s.execute(meant, epsilon=worlds.fresh())
    assert answer.rows == expected.rows, f"{sql!r} answered {answer.rows}, as PostgreSQL reads it {expected.rows}"


def test_A1_column_lists_of_derived_tables_and_cte_definitions_still_rename() -> None:
    """The fix refuses only lists on table references; the forms that rename columns correctly stay allowed."""
    from veil.proxy.catalog import Catalog, CatalogTable
    from veil.proxy.parse import parse
    from veil.proxy.resolve import resolve

    cat = Catalog({"p2": CatalogTable("p2", {"a": "int", "b": "int"}, None, True)})
    for sql in (
        "SELECT COUNT(*) FROM (SELECT a, b FROM p2) AS z(b, a) WHERE z.a = 2",
        "WITH c(b, a) AS (SELECT a, b FROM p2) SELECT COUNT(*) FROM c WHERE c.a = 2",
    ):
        tree = resolve(parse(sql), cat).tree.sql()
        assert "p2.b AS a" in tree.replace('"', ""), tree


# ==================================================================================================
# Part B — defences that held
# ==================================================================================================

#: LEFT JOIN onto private data, at every nesting: one public row (pk = 2), matched only by the target
LEFT_JOIN_VARIANTS = [
    # s29 A1's bracketed forms
    f"SELECT SUM(CASE WHEN t.u IS NULL THEN 1 ELSE -1 END) AS v FROM (SELECT pk FROM pub WHERE pk = 2) p "
    f"LEFT JOIN (t) ON p.pk = t.x AND t.u = {TARGET}",
    f"SELECT SUM(CASE WHEN t.u IS NULL THEN 1 ELSE -1 END) AS v FROM (SELECT pk FROM pub WHERE pk = 2) p "
    f"LEFT JOIN (pub q JOIN t ON q.pk = t.x) ON p.pk = t.x AND t.u = {TARGET}",
    # nested WITH inside the right side, a CTE over a CTE, a derived table over a CTE
    f"WITH c AS (SELECT u, x FROM t) SELECT SUM(CASE WHEN z.u IS NULL THEN 1 ELSE -1 END) AS v FROM "
    f"(SELECT pk FROM pub WHERE pk = 2) p LEFT JOIN (WITH d AS (SELECT * FROM c) SELECT * FROM d) z "
    f"ON p.pk = z.x AND z.u = {TARGET}",
    f"WITH c AS (SELECT u, x FROM t) SELECT SUM(CASE WHEN z.u IS NULL THEN 1 ELSE -1 END) AS v FROM "
    f"(SELECT pk FROM pub WHERE pk = 2) p LEFT JOIN (SELECT * FROM (SELECT * FROM c) y) z ON p.pk = z.x AND z.u = {TARGET}",
    # the LEFT JOIN inside a derived table, its CTEs defined in it
    f"SELECT SUM(CASE WHEN z.u IS NULL THEN 1 ELSE -1 END) AS v FROM (WITH p AS (SELECT pk FROM pub WHERE pk = 2), "
    f"c AS (SELECT u, x FROM t) SELECT p.pk, c.u, c.x FROM p LEFT JOIN c ON p.pk = c.x AND c.u = {TARGET}) z",
    # an outer public CTE shadowed by an inner private one of the same name
    f"WITH c AS (SELECT pk AS u, pk AS x FROM pub) SELECT SUM(CASE WHEN z.u IS NULL THEN 1 ELSE -1 END) AS v FROM "
    f"(SELECT pk FROM pub WHERE pk = 2) p LEFT JOIN (WITH c AS (SELECT u, x FROM t) SELECT * FROM c) z "
    f"ON p.pk = z.x AND z.u = {TARGET}",
    # a quoted CTE named like the private table does not hide it
    f'WITH "T" AS (SELECT pk AS u, pk AS x FROM pub) SELECT SUM(CASE WHEN z.u IS NULL THEN 1 ELSE -1 END) AS v FROM '
    f"(SELECT pk FROM pub WHERE pk = 2) p LEFT JOIN t z ON p.pk = z.x AND z.u = {TARGET}",
    "SELECT SUM(CASE WHEN z.u IS NULL THEN 1 ELSE -1 END) AS v FROM (SELECT pk FROM pub WHERE pk = 2) p "
    "LEFT JOIN t AS z USING (x)",
]


@pytest.mark.parametrize("sql", LEFT_JOIN_VARIANTS)
def test_B1_left_join_onto_private_data_is_refused_at_every_nesting(worlds: Worlds, sql: str) -> None:
    assert worlds.refused_or_within_sensitivity(sql) == []
    with pytest.raises(VeilError):
        worlds.sessions["x2"].explain(sql)


def test_B1_left_join_onto_private_data_is_refused_over_the_cli(worlds: Worlds) -> None:
    """``veil query --format json``: refused typed (0A000) before anything is charged."""
    from tests.support.attack import CliInterface

    cli = CliInterface(worlds.paths["x2"], "b")
    for sql in LEFT_JOIN_VARIANTS[:3]:
        out = cli.query(sql, 5.0)
        assert not out.ok and out.sqlstate == "0A000" and not out.crashed, out.describe()
    from veil.policy import load_policy
    from veil.proxy._testing import exact_session

    with exact_session(load_policy(worlds.paths["x2"]), "b") as b:
        assert b.budget().spent == 0, "a refused LEFT JOIN was charged through the CLI"


def test_B1_left_join_onto_private_data_is_refused_over_the_wire(tmp_path: Path) -> None:
    """A PostgreSQL client on ``veil serve`` (its own warehouse: the server holds the file): refused typed (0A000),
    simple and extended protocol (a bound parameter goes through ``routing.bind_parameters`` before the same query
    path), a held cursor and EXPLAIN; nothing charged."""
    import psycopg

    from tests.support.attack import Server, set_password, wire_connect
    from veil.policy import load_policy
    from veil.proxy._testing import exact_session
    from veil.store.warehouse import write_table

    path = tmp_path / "policy.toml"
    path.write_text(_POLICY, encoding="utf-8")
    policy = load_policy(path)
    write_table(policy, "pub", PUB, replace=True, public=True)
    write_table(policy, "t", _frame(sorted([*_base_rows(), dict(TARGET_ROW, x=2)], key=lambda r: r["u"])), replace=True)
    set_password(path, "b")
    srv = Server(path, tmp_path / "serve.log")
    try:
        conn = wire_connect(srv.port, "b")
        try:
            with conn.cursor() as cur:
                cur.execute(b"SET veil.epsilon = 5")
            # every wire route to the query path: a plain statement, a held cursor, EXPLAIN (free anyway)
            routes = [*LEFT_JOIN_VARIANTS[:3], f"DECLARE c CURSOR WITH HOLD FOR {LEFT_JOIN_VARIANTS[0]}"]
            for sql in [*routes, f"EXPLAIN {LEFT_JOIN_VARIANTS[1]}"]:
                with conn.cursor() as cur, pytest.raises(psycopg.Error) as err:
                    cur.execute(sql.encode())
                assert err.value.sqlstate == "0A000", (sql, err.value)
            bound = (
                "SELECT SUM(CASE WHEN t.u IS NULL THEN 1 ELSE -1 END) AS v FROM (SELECT pk FROM pub WHERE pk = %s) p "
                "LEFT JOIN (t) ON p.pk = t.x AND t.u = %s"
            )
            with conn.cursor() as cur, pytest.raises(psycopg.Error) as err:
                cur.execute(bound, (2, TARGET))
            assert err.value.sqlstate == "0A000", err.value
            with conn.cursor() as cur:
                cur.execute(b"SELECT COUNT(*) AS n FROM t")  # the connection still answers, charged 5
                assert len(cur.fetchall()) == 1
        finally:
            conn.close()
    finally:
        srv.stop()
    with exact_session(load_policy(path), "b") as b:
        assert b.budget().spent == 5, "a refused LEFT JOIN was charged over the wire"


#: Pins and joins on a public table whose keys repeat (pd: pk 1×2, 2×3; pf 0.0/-0.0, NaN, 1.5×2; ps '1'/'01'/' 1')
REPEATED_KEY_JOINS = [
    "SELECT COUNT(*) AS n FROM t JOIN pd p ON p.pk = t.x",
    "SELECT COUNT(*) AS n FROM t JOIN pd p ON p.pf = t.y",
    "SELECT COUNT(*) AS n FROM t JOIN pd p ON p.ps = t.s",
    "SELECT COUNT(*) AS n FROM t LEFT JOIN pd p ON p.pk = t.x LEFT JOIN pd q ON q.pk = p.pk",
    "SELECT COUNT(*) AS n FROM t JOIN (SELECT DISTINCT pk FROM pd) p ON p.pk = t.x",
    "SELECT COUNT(*) AS n FROM t JOIN (SELECT a.pk FROM pd a LEFT JOIN pd b ON a.pk = b.pk) p ON p.pk = t.x",
    "SELECT p.pf, SUM(t.y) AS s FROM t JOIN pd p ON t.x = p.pk GROUP BY p.pf",
    "SELECT p.pn || t.s AS g, COUNT(*) AS n FROM t JOIN pd p ON t.x = p.pk GROUP BY 1",
    # column lists that swap names: the pin is on p2.b (one value on all eight rows), not p2.a
    "WITH c(b, a) AS (SELECT a, b FROM p2) SELECT COUNT(*) AS n FROM t JOIN c ON c.a = t.x",
    "SELECT COUNT(*) AS n FROM t JOIN (SELECT a, b FROM p2) AS c(b, a) ON c.a = t.x",
    "SELECT COUNT(DISTINCT c.u) AS n FROM (SELECT x, u FROM t) AS c(u, x)",
]


@pytest.mark.parametrize("sql", REPEATED_KEY_JOINS)
def test_B2_joins_on_repeated_public_keys_move_within_their_sensitivity(worlds: Worlds, sql: str) -> None:
    assert worlds.refused_or_within_sensitivity(sql) == []


#: Dates a person's row may hold that sit at or past the engine's edges
EDGE_DATES = {"inf": "infinity", "ninf": "-infinity", "huge": "5881580-07-10"}
DATE_QUERIES = [
    "SELECT d AS g, COUNT(*) AS n FROM t GROUP BY 1",
    "SELECT EXTRACT(EPOCH FROM d) AS g, COUNT(*) AS n FROM t GROUP BY 1",
    "SELECT EXTRACT(YEARWEEK FROM d) AS g, COUNT(*) AS n FROM t GROUP BY 1",
    "SELECT DATE_TRUNC('isoyear', d) AS g, COUNT(*) AS n FROM t GROUP BY 1",
    "SELECT CAST(d AS TIMESTAMP) + INTERVAL '1' HOUR AS g, COUNT(*) AS n FROM t GROUP BY 1",
    "SELECT COUNT(*) AS n FROM t WHERE GREATEST(d, TIMESTAMP '2020-01-01') > TIMESTAMP '2021-01-01'",
    "SELECT SUM(CASE WHEN EXTRACT(YEAR FROM d) > 2000 THEN 1 ELSE 0 END) AS n FROM t",
]


@pytest.fixture(scope="module")
def date_worlds(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worlds]:
    w = Worlds(tmp_path_factory.mktemp("s34d"), {"d": None, **{k: dict(TARGET_ROW, d=v) for k, v in EDGE_DATES.items()}}, False)
    yield w
    w.close()


@pytest.mark.parametrize("sql", DATE_QUERIES)
def test_B3_edge_dates_end_the_same_way_and_move_within_sensitivity(date_worlds: Worlds, sql: str) -> None:
    assert date_worlds.refused_or_within_sensitivity(sql) == []
