"""Red team s71 (redq23): the analyst query path after session 22 (the 2 KiB join-row cap, the tiny-sum refusal, the
plan cache's front, noise drawn ahead).

Every finding is a strict xfail witness: the test states the property that should hold and fails today; the fix turns
it green (then drop the mark). Deterministic (no randomness decides a verdict): no false failures.

* F1 (HIGH) **a parenthesised join hides itself and its ON condition from the per-row bounds of
  ``veil.proxy.expansion``** (text work, value cap, join-row cap, concatenation limit, expanded size, literal bytes;
  the type check, totality, raising work and multiplicity still see it). ``FROM (t JOIN pub
  ON …)`` is parsed by sqlglot as a ``Subquery`` whose ``this`` is the table ``t`` carrying the ``joins``; the scope
  walk (``sqlglot.optimizer.scope.traverse_scope``) does not see it as a join, and ``veil.proxy.expansion`` measures
  only a SELECT's own ``joins`` (``measure``, ``_sizes``: ``for join in sel.args.get("joins")`` and ``if
  sel.args.get("joins")``). So for a parenthesised join nothing in its ``ON`` is measured (``text_work`` 0 against
  252,608 bytes for the same query unparenthesised; ``measure`` written = expanded = 2; ``largest_held`` 32 against
  82,944 bytes) and the join is not a join for ``largest_join_row``. What a parenthesised join gets past, each refused
  free in its bare form (``test_s71_f1_a_parenthesised_join_is_bounded_like_the_bare_join``):

  - the 2 KiB join-row cap (red team s68 F1, session 22's fix): its build side carries private text again. Measured at
    the readers' floor (256 MiB, 2 threads), exact session: ``SELECT COUNT(*) FROM ((SELECT id, c, '<11,000 x>' AS z
    FROM t WHERE id % 2 = 0 AND id < K) x JOIN pub ON x.id = pub.k) WHERE x.c || x.z > CAST(pub.k AS VARCHAR)`` over
    30,000 short rows and a 700-row public table (keys spread over the ids, so DuckDB's join filter does not prune the
    scan; the ``id % 2 = 0`` estimate of ~1 row makes the private side the build side) is answered at K = 21,228
    (10,614 build rows) and fails after the charge (``QueryFailed`` XX000, DuckDB OutOfMemory) at K = 21,230, twice
    each; the neighbour without the row ``id = 21,228`` is answered at K = 21,230
    (``test_s71_f1_a_parenthesised_padded_join_ends_the_same_way_with_and_without_one_row``). With stored text (a
    category of 3,832 four-byte characters, 17,000 rows, a 10,000-row public table): ``… FROM (t JOIN pub ON t.id =
    pub.k) WHERE t.id < K AND t.c > CAST(pub.k AS VARCHAR)`` answered at K = 14,000 and 15,000, failed after the
    charge at 15,500 and 16,999;
  - the 15 KiB value cap (a text built in the ON: ``t.c || …`` sixteen times, 16,384 bytes);
  - the 64-value concatenation limit (200 values in one ON chain);
  - the per-person text-work bound (64 MiB). Measured through ``veil.connect`` with noise on, the readers at the floor:
    20 private rows, one of them the target with a 256-character (default ``max_length``) value of four-byte
    characters, the others ``'v'``; 100 public rows; ``SELECT COUNT(*) FROM (t JOIN pub ON (pub.name || t.c || … 199
    times) <> pub.name)`` at ε = 0.01: 5.02 s and 4.71 s with the target, 0.43 s and 0.31 s without (a 10×
    deterministic timing oracle on one person's value). Over the wire (``veil serve --engine-memory 256 --engine-threads
    2``, psycopg, ``SET veil.epsilon = 0.01``, three queries made distinct by ``AND pub.k <> n``): 3.00, 1.95 and 3.19
    s with the target, 0.43, 0.19 and 0.29 s without; ``veil query --epsilon 0.01`` (the CLI, DuckDB's default
    memory, each run a new process of ~5 s): 11.74 and 11.09 s with the target, 5.73 and 5.28 s without. At 1,000
    public rows and 1,000 links (one query, no memory limit set) the process grew to 21 GB and the host's OOM killer
    ended it: under ``veil serve`` the whole server.

  Suggested fix (class level): make every bound walk every join wherever it is written (a join nested in a
  parenthesised FROM item, ``Subquery``/``Paren`` whose ``this`` carries ``joins``), or have the parse or resolve pass
  refuse (free) or flatten a parenthesised join before any check reads the tree; then one test runs every existing
  join bound (text work, value cap, join-row cap, concatenation, raising work, pins) on both spellings.
* F2 (HIGH) **a range join holds the private rows in memory whatever their width: the 2 KiB join-row cap does not
  place its edge.** A join with no equality (``ON x.id >= pub.k AND x.id < pub.k2``, one inequality too) is planned by
  DuckDB 2.0 as an IEJoin (or a piecewise merge join), which materialises and sorts both sides and, at the readers'
  floor (256 MiB, 2 threads), fails with OutOfMemory instead of spilling. The cap was measured on hash joins only
  (s68 F1). Through Veil (exact session, the floor): ``SELECT COUNT(*) FROM (SELECT id, c, '<1,990 x>' AS z FROM t
  WHERE id < K) x JOIN pub ON x.id >= pub.k AND x.id < pub.k2 WHERE x.c || x.z > CAST(pub.k AS VARCHAR)`` (a
  4-character category: priced 16 + 1,990 + 32 = 2,038 bytes, admitted; 1,000 public ranges spread over the ids, an
  unpinned multiplicity of 1,000) is answered at K = 122,265 and fails after the charge (``QueryFailed`` XX000) at K =
  122,656, twice each (K = 100,000 answered, 300,000 failed); over the wire (``veil serve --engine-memory 256
  --engine-threads 2``, psycopg, ε = 0.001 each, a 160,000-row world) the same edge: 100,000 and 122,265 answered,
  122,656 and 160,000 SQLSTATE XX000 with ``veil.budget`` charged each time
  (``test_s71_f2_a_range_join_within_the_join_row_cap_ends_the_same_way_whatever_the_rows``). DuckDB alone, same
  join: rows of 2,000 bytes fail at 200,000 (100,000 answered), 1,000 at 400,000, 500 at 800,000, 200 at 1,000,000;
  rows of an id and a 4-character text answered at 3,000,000 and failed at 8,000,000. So no cap on a row's width
  bounds it: the edge is the number of private rows that pass the WHERE, the s63/s68 membership bit (calibrate K with
  cheap probes, then one query per target). At DuckDB's default memory the edge moves up in proportion, never away.
  Suggested fix (class level): refuse free every join over private rows that DuckDB would not run as a hash join
  (require an equality between the private side and each joined source, as the pins already do, and keep inequality
  terms as filters after it), or run such statements with settings that make DuckDB hash or spill them, proven by a
  test family of join operators (IEJoin, piecewise merge, nested loop, cross product) at the floor.
* F3 (LOW) **a DECIMAL(38, s) turned into text is priced 32 bytes and holds up to 40.** ``expansion._sizes`` prices
  every number, date or boolean as text at ``SCALAR_TEXT_BYTES`` (32); ``CAST(CAST(x AS DECIMAL(38,37)) AS VARCHAR)``
  writes ``-9.5000000000000000000000000000000000000`` (40 bytes), DECIMAL(38,20) of ``-999999999999999.5`` 37. Keys,
  derived columns and concatenations of such casts are priced at 80%: the value cap admits 19,200 bytes (the one-thread
  edge is 16,384), the join-row cap 2,560. No failure after the charge was shown (two reader threads spilled every
  such width tried before); it eats the caps' margins
  (``test_s71_f3_a_number_cast_to_text_is_priced_at_its_longest_text``). Fix: price a cast to text by its source
  type (``p + 2`` for DECIMAL(p, s), 24 for DOUBLE, 20 for BIGINT, 26 for TIMESTAMP), not one constant.

Held (passing, no earlier test covered them): inside a parenthesised join's ON the type-family check still refuses
mixed comparisons free (DuckDB 2.0 casts a VARCHAR column to DATE or INTEGER per row), and the totality rewrite still
makes every partial operation total (neighbours with values that overflow a SMALLINT, an interval, a 30-digit integer
cast: both answered). Also tried and held (not kept as tests: covered elsewhere or no new surface): a LEFT JOIN's NULL
group under a public key domain (never released), NaN / -0.0 / inf public float keys, undeclared private values under
a declared domain (dropped), integer sums past 2^62 (clamped before the noise), the numeric corners of SUM/AVG/VARIANCE
(1e400, subnormal products, DECIMAL(38,37), REAL × 1e38: bounded or NULL), several COUNT(DISTINCT) of 15 KiB values and
grouped ones at 256 MiB / 2 threads (DuckDB spilled 20,000 rows each), a CTE named like the private or a public table
around a parenthesised join (resolved as DuckDB does).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

_F1_POLICY = """\
[database]
path = "w.duckdb"
[ledger]
path = "l.sqlite"
[tables.t]
privacy_unit = "row"
[tables.t.columns]
id = { type = "int", lower = 0, upper = 1000000 }
c = { type = "category" }
w = { type = "category", max_length = 3832 }
[tables.pub]
public = true
[analysts.a]
epsilon = 1000000
"""

#: ON conditions refused free when the join is written bare; the same join in parentheses must be refused too.
_CHAIN_200 = "(pub.name || " + " || ".join(["t.c"] * 199) + ")"
_F1_JOINS = {
    # the join-row cap: a 3,832-character category carried through the join (s68 F1)
    "join_row_cap": ("t JOIN pub ON t.id = pub.k", "t.w > CAST(pub.k AS VARCHAR)"),
    # the 15 KiB value cap: sixteen 1 KiB values concatenated in the ON
    "value_cap": ("t JOIN pub ON t.id = pub.k AND " + " || ".join(["t.c"] * 16) + " > pub.name", "TRUE"),
    # the 64-value concatenation limit (and the text work): 200 values in one chain
    "concatenation": (f"t JOIN pub ON {_CHAIN_200} <> pub.name", "TRUE"),
    # the per-person text work: case mapping of a 1 KiB value per joined row
    "text_work": ("t JOIN pub ON LOWER(UPPER(LOWER(t.c))) > pub.name", "TRUE"),
}


@pytest.fixture(scope="module")
def f1_plan_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """An exact session over 100 private rows and a 10,000-row public table (no data is read: plans only)."""
    import pandas as pd

    from tests.support.warehouse import policy_with_tables
    from veil.proxy._testing import exact_session

    base = Path(tmp_path_factory.mktemp("s71f1plan"))
    t = pd.DataFrame({"id": list(range(100)), "c": ["v"] * 100, "w": ["w"] * 100})
    pub = pd.DataFrame({"k": list(range(10_000)), "name": [f"p{i}" for i in range(10_000)]})
    session = exact_session(policy_with_tables(base, _F1_POLICY, {"t": t}, {"pub": pub}), "a")
    try:
        yield session
    finally:
        session.close()


#: Where a parenthesised join can stand, each beside the same query with the join written bare: ``{j}`` is the join,
#: ``{w}`` the condition on its rows.
_F1_SPELLINGS = {
    "from": ("SELECT COUNT(*) FROM {j} WHERE {w}", "SELECT COUNT(*) FROM ({j}) WHERE {w}"),
    "join_operand": (
        "SELECT COUNT(*) FROM pub AS q JOIN (SELECT t.id FROM {j} WHERE {w}) AS s ON q.k = s.id",
        "SELECT COUNT(*) FROM pub AS q JOIN ({j}) ON q.k = t.id WHERE {w}",
    ),
    "derived_table": (
        "SELECT COUNT(*) FROM (SELECT t.id FROM {j} WHERE {w}) AS d",
        "SELECT COUNT(*) FROM (SELECT t.id FROM ({j}) WHERE {w}) AS d",
    ),
    "cte": (
        "WITH d AS (SELECT t.id FROM {j} WHERE {w}) SELECT COUNT(*) FROM d",
        "WITH d AS (SELECT t.id FROM ({j}) WHERE {w}) SELECT COUNT(*) FROM d",
    ),
}


@pytest.mark.parametrize(
    ("case", "spelling"),
    [(c, "from") for c in sorted(_F1_JOINS)] + [("text_work", s) for s in sorted(_F1_SPELLINGS) if s != "from"],
)
def test_s71_f1_a_parenthesised_join_is_bounded_like_the_bare_join(f1_plan_session: Any, case: str, spelling: str) -> None:
    """The same join, bare and in parentheses (in FROM, as a join's operand, in a derived table, in a CTE): the bare
    one is refused free (a per-row bound); so must the other be. Today the parenthesised one is planned (and would be
    charged)."""
    from veil.errors import VeilError
    from veil.proxy._testing import plan_of

    join, where = _F1_JOINS[case]
    bare, wrapped = (form.format(j=join, w=where) for form in _F1_SPELLINGS[spelling])
    with pytest.raises(VeilError) as refused:
        plan_of(f1_plan_session, bare, 0.01)
    try:
        plan_of(f1_plan_session, wrapped, 0.01)
    except VeilError as exc:
        assert type(exc) is type(refused.value) and exc.sqlstate == refused.value.sqlstate, (exc, refused.value)
    else:
        pytest.fail(f"planned: {wrapped[:120]}… (its bare form: {type(refused.value).__name__}: {refused.value})")


#: The padded world: short private rows, a 700-row public table whose keys are spread over the ids.
_PAD_ROWS, _PAD_PUB, _PAD = 30_000, 700, "x" * 11_000
#: The measured edge: ``id % 2 = 0 AND id < 21228`` answered (10,614 build rows), ``< 21230`` failed (10,615).
_PAD_K, _PAD_TARGET = 21_230, 21_228
_PAD_POLICY = _F1_POLICY.replace('w = { type = "category", max_length = 3832 }\n', "")


def _pad_session(base: Path, ids: list[int]) -> Any:
    import pandas as pd

    from tests.support.warehouse import copied_session

    t = pd.DataFrame({"id": ids, "c": [f"v{i}" for i in ids]})
    pub = pd.DataFrame({"k": [i * (_PAD_ROWS // _PAD_PUB + 1) for i in range(_PAD_PUB)]})
    return copied_session(base, _PAD_POLICY, {"t": t}, {"pub": pub})


@pytest.fixture(scope="module")
def pad_sessions(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any]]:
    """Neighbouring worlds (with and without the row ``id = 21,228``), then the readers at the floor (256 MiB, 2
    threads)."""
    from tests.support.warehouse import readers_at_the_floor

    everyone = list(range(_PAD_ROWS))
    d = _pad_session(Path(tmp_path_factory.mktemp("s71pad_d")), everyone)
    d_prime = _pad_session(Path(tmp_path_factory.mktemp("s71pad_dp")), [i for i in everyone if i != _PAD_TARGET])
    try:
        with readers_at_the_floor():
            yield d, d_prime
    finally:
        d.close()
        d_prime.close()


def _outcome(session: Any, sql: str) -> str:
    from veil.errors import VeilError

    try:
        session.execute(sql, epsilon=0.001)
    except VeilError as exc:
        return f"{type(exc).__name__} {exc.sqlstate}"
    return "answered"


@pytest.mark.slow
def test_s71_f1_a_parenthesised_padded_join_ends_the_same_way_with_and_without_one_row(
    pad_sessions: tuple[Any, Any],
) -> None:
    """s68 F1 through parentheses: the analyst's 11,000-byte literal as a column of a derived table over the private
    rows, carried into the join's build side. Correct: both neighbours answered, or both refused free (the shape).
    Today: D (with the row ``id = 21,228``) fails after the charge (QueryFailed XX000, OutOfMemory), D′ is answered."""
    sql = (
        f"SELECT COUNT(*) FROM ((SELECT id, c, '{_PAD}' AS z FROM t WHERE id % 2 = 0 AND id < {_PAD_K}) x "
        "JOIN pub ON x.id = pub.k) WHERE x.c || x.z > CAST(pub.k AS VARCHAR)"
    )
    d, d_prime = pad_sessions
    assert _outcome(d, sql) == _outcome(d_prime, sql)


#: The range-join world: short private rows, a 1,000-row public table of one-wide ranges spread over the ids (so the
#: join's dynamic filters prune nothing): past the measured edge (122,265 answered, 122,656 failed) with a margin.
_RANGE_ROWS, _RANGE_PAD = 160_000, "x" * 1_990
_RANGE_POLICY = _PAD_POLICY.replace('c = { type = "category" }', 'c = { type = "category", max_length = 4 }').replace(
    "upper = 1000000 }", "upper = 10000000 }"
)


@pytest.fixture(scope="module")
def range_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """An exact session over ``_RANGE_ROWS`` rows, then the readers at the floor (256 MiB, 2 threads)."""
    import pandas as pd

    from tests.support.warehouse import copied_session, readers_at_the_floor

    base = Path(tmp_path_factory.mktemp("s71range"))
    t = pd.DataFrame({"id": list(range(_RANGE_ROWS)), "c": [f"v{i % 1000}" for i in range(_RANGE_ROWS)]})
    pub = pd.DataFrame({"k": [i * 1000 for i in range(1000)], "k2": [i * 1000 + 1 for i in range(1000)]})
    session = copied_session(base, _RANGE_POLICY, {"t": t}, {"pub": pub})
    try:
        with readers_at_the_floor():
            yield session
    finally:
        session.close()


@pytest.mark.slow
def test_s71_f2_a_range_join_within_the_join_row_cap_ends_the_same_way_whatever_the_rows(range_session: Any) -> None:
    """A join on ``x.id >= pub.k AND x.id < pub.k2`` (no equality: DuckDB plans an IEJoin, which materialises both
    sides) of a derived table whose row is priced 2,038 bytes (a 4-character category, 16 bytes, the analyst's
    1,990-byte literal and the id), within the 2 KiB join-row cap. Correct: answered, or the shape refused free.
    Today: QueryFailed (XX000, OutOfMemory), charged; with ``WHERE id < K`` in the derived table the edge is K =
    122,265 answered / 122,656 failed (twice each), so one row decides."""
    from veil.errors import QueryFailed, VeilError

    sql = (
        f"SELECT COUNT(*) FROM (SELECT id, c, '{_RANGE_PAD}' AS z FROM t) x "
        "JOIN pub ON x.id >= pub.k AND x.id < pub.k2 WHERE x.c || x.z > CAST(pub.k AS VARCHAR)"
    )
    spent = range_session.budget().spent
    try:
        range_session.execute(sql, epsilon=0.001)
    except QueryFailed as exc:
        pytest.fail(f"charged and failed: {exc}")
    except VeilError:
        assert range_session.budget().spent == spent, "a refusal of the shape must be free"


#: (The partial operations compare with ``<>``, not ``>``: a range join over private rows is refused since s71 F2.)
#: ON conditions of a parenthesised join that mix type families (DuckDB 2.0 casts the text per row: ``a.s = b.d`` over
#: a VARCHAR and a DATE column fails on the first text that is no date) or hold partial operations (an overflow, a
#: failing cast, a log of a negative number, an interval past the calendar): held — the type check and the totality
#: rewrite walk the whole tree, wherever the join is written.
_HELD_MIXED = ["t.c = pub.k", "t.id = pub.name", "t.d = pub.name", "t.c IN (pub.k)", "t.c = 5"]
_HELD_PARTIAL = [
    "CAST(t.c AS INT) <> pub.k",
    "CAST(t.id AS SMALLINT) <> pub.k",
    "t.d + INTERVAL (t.id) DAY > DATE '2000-01-01'",
    "EXTRACT(year FROM t.d + INTERVAL (t.id) YEAR) <> pub.k",
    "LN(t.x - 2) <> pub.k",
    "LEFT(t.c, CAST(t.id AS INT)) <> pub.name",
    "ROUND(t.x, CAST(t.id AS INT)) <> pub.k",
]
_HELD_POLICY = """\
[database]
path = "w.duckdb"
[ledger]
path = "l.sqlite"
[tables.t]
privacy_unit = "row"
[tables.t.columns]
id = { type = "int", lower = 0, upper = 1000000000000000 }
# 200 characters (800 bytes): LEFT(t.c, …) <> pub.name holds the computed LEFT beside t.c in the join's rows, within the
# join-row cap (at the default 256 both were 2,080 bytes: refused since session 24)
c = { type = "category", max_length = 200 }
d = { type = "date" }
x = { type = "float", lower = -1e15, upper = 1e15 }
[tables.pub]
public = true
[analysts.a]
epsilon = 1000000
"""


@pytest.fixture(scope="module")
def held_sessions(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any]]:
    """Neighbours: D′ of two benign rows, D with a third whose values make every partial operation above fail."""
    import pandas as pd

    from tests.support.warehouse import policy_with_tables
    from veil.proxy._testing import exact_session

    pub = pd.DataFrame({"k": [1, 2, 3], "name": ["1", "2", "x"]})
    benign = {"id": [1, 2], "c": ["1", "2"], "d": [pd.Timestamp("2020-01-01")] * 2, "x": [1.0, 2.0]}
    extreme = {"id": 999_999_999_999_999, "c": "9" * 30, "d": pd.Timestamp("2262-01-01"), "x": 1e15}
    d_rows = {k: [*v, extreme[k]] for k, v in benign.items()}
    sessions = []
    for name, rows in (("d", d_rows), ("dp", benign)):
        base = Path(tmp_path_factory.mktemp(f"s71held_{name}"))
        sessions.append(exact_session(policy_with_tables(base, _HELD_POLICY, {"t": pd.DataFrame(rows)}, {"pub": pub}), "a"))
    try:
        yield sessions[0], sessions[1]
    finally:
        for s in sessions:
            s.close()


@pytest.mark.parametrize("cond", _HELD_MIXED)
def test_s71_held_a_parenthesised_join_on_mixing_type_families_is_refused_free(held_sessions: tuple[Any, Any], cond: str) -> None:
    from veil.errors import TypeMismatch

    d, _ = held_sessions
    spent = d.budget().spent
    with pytest.raises(TypeMismatch):
        d.execute(f"SELECT COUNT(*) FROM (t JOIN pub ON {cond})", epsilon=0.01)
    assert d.budget().spent == spent


@pytest.mark.parametrize("cond", _HELD_PARTIAL)
def test_s71_held_a_parenthesised_join_on_with_partial_operations_ends_the_same_way(
    held_sessions: tuple[Any, Any], cond: str
) -> None:
    d, d_prime = held_sessions
    sql = f"SELECT COUNT(*) FROM (t JOIN pub ON {cond})"
    assert _outcome(d, sql) == _outcome(d_prime, sql) == "answered"


#: Shapes validate refuses below the outer SELECT over private data, put inside a parenthesised join: held (the
#: shape checks walk every subquery, wherever the join is written).
_HELD_SHAPES = [
    "SELECT COUNT(*) FROM ((SELECT COUNT(*) AS n FROM t) s JOIN pub ON pub.k < s.n)",
    "SELECT s.n, COUNT(*) FROM ((SELECT COUNT(*) AS n FROM t) s JOIN pub ON TRUE) GROUP BY s.n",
    "SELECT COUNT(*) FROM ((SELECT DISTINCT c FROM t) s JOIN pub ON TRUE)",
    "SELECT COUNT(*) FROM ((SELECT id FROM t ORDER BY id LIMIT 5) s JOIN pub ON pub.k = s.id)",
    "SELECT COUNT(*) FROM (pub LEFT JOIN (SELECT id FROM t) s ON pub.k = s.id)",
    "SELECT COUNT(*) FROM (pub LEFT JOIN t ON t.id = pub.k)",
    "SELECT COUNT(*) FROM (t JOIN t AS t2 ON t.id = t2.id)",
    "SELECT COUNT(*) FROM (t RIGHT JOIN pub ON t.id = pub.k)",
]


@pytest.mark.parametrize("sql", _HELD_SHAPES)
def test_s71_held_shapes_refused_below_the_outer_select_are_refused_inside_a_parenthesised_join(
    f1_plan_session: Any, sql: str
) -> None:
    from veil.errors import Unsupported
    from veil.proxy._testing import plan_of

    with pytest.raises(Unsupported):
        plan_of(f1_plan_session, sql, 0.01)


#: Number and date casts to text with the longest text DuckDB 2.0 writes for their type (a literal at the type's
#: extreme: ``CAST(-9.5 AS DECIMAL(38,37))`` is ``-9.5000000000000000000000000000000000000``, 40 bytes).
_F3_CASTS = {
    "decimal_38_37": ("CAST(t.x AS DECIMAL(38,37))", "CAST(-9.5 AS DECIMAL(38,37))"),
    "decimal_38_20": ("CAST(t.x AS DECIMAL(38,20))", "CAST(-999999999999999.5 AS DECIMAL(38,20))"),
    "double": ("CAST(t.x AS DOUBLE)", "CAST(-1.2345678901234567e-300 AS DOUBLE)"),
    "bigint": ("CAST(t.x AS BIGINT)", "CAST(-9223372036854775808 AS BIGINT)"),
    "timestamp": ("CAST(t.d AS TIMESTAMP)", "TIMESTAMP '2020-01-01 12:34:56.123456'"),
}


@pytest.mark.parametrize(
    "case",
    sorted(_F3_CASTS),
)
def test_s71_f3_a_number_cast_to_text_is_priced_at_its_longest_text(case: str) -> None:
    """``expansion.SCALAR_TEXT_BYTES`` (32) prices every number, date or boolean turned into text; a DECIMAL of
    precision 38 is up to 40 bytes as text (38 digits, a sign, a point): a GROUP BY key, a derived column or a
    concatenation of such casts is priced 80% of what it holds (the 15 KiB value cap admits 480 keys, 19,200 bytes;
    the 2 KiB join-row cap 64 values, 2,560 bytes). LOW: at the readers' two-thread floor every shape the earlier red
    teams tried spilled at these widths, so no failure after the charge was shown; the caps' margins are what it
    eats. Correct: the price of a cast to text is at least the longest text of its source type (``p + 2`` for a
    DECIMAL(p, s))."""
    import duckdb
    import sqlglot
    from sqlglot.optimizer.qualify import qualify

    from veil.proxy.expansion import largest_held

    expr, extreme = _F3_CASTS[case]
    longest = len(duckdb.connect().execute(f"SELECT CAST({extreme} AS VARCHAR)").fetchone()[0])
    sql = f"SELECT COUNT(*) FROM t GROUP BY CAST({expr} AS VARCHAR)"
    tree = qualify(sqlglot.parse_one(sql, read="postgres"), schema={"t": {"x": "DOUBLE", "d": "DATE"}})
    priced, _ = largest_held(tree, lambda table, column: 32, lambda table: False)
    assert priced >= longest, (priced, longest)


#: The class of s71 F3: every number type cast to text, and arithmetic over it, priced at least its longest text in
#: DuckDB (an extreme value of the type; a HUGEINT's 40 bytes, a DECIMAL's ``p + 2``).
_F3_TYPES = {
    "DECIMAL(38,37)": "-9.5",
    "DECIMAL(38,0)": "-99999999999999999999999999999999999999",
    "DECIMAL(38,20)": "-999999999999999.5",
    "DECIMAL(36,35)": "-9.5",
    "NUMERIC(34,1)": "-999999999999999999999999999999999.5",
    "HUGEINT": "-170141183460469231731687303715884105727",
    "BIGINT": "-9223372036854775807",
    "DOUBLE": "-1.2345678901234567e-300",
}


@pytest.mark.parametrize("wrap", ["{e}", "{e} + 0", "-({e})", "ABS({e}) * 1", "COALESCE({e}, 0)"])
@pytest.mark.parametrize("type_", sorted(_F3_TYPES))
def test_s71_f3_every_number_type_as_text_is_priced_at_its_longest_text(type_: str, wrap: str) -> None:
    import duckdb
    import sqlglot
    from sqlglot.optimizer.qualify import qualify

    from veil.proxy.expansion import largest_held

    value = wrap.format(e=f"CAST({_F3_TYPES[type_]} AS {type_})")
    longest = len(duckdb.connect().execute(f"SELECT CAST({value} AS VARCHAR)").fetchone()[0])
    expr = wrap.format(e=f"CAST(t.x AS {type_})")
    tree = qualify(
        sqlglot.parse_one(f"SELECT COUNT(*) FROM t GROUP BY CAST({expr} AS VARCHAR)", read="postgres"),
        schema={"t": {"x": "DOUBLE"}},
    )
    priced, _ = largest_held(tree, lambda table, column: 32, lambda table: False)
    assert priced >= longest, (priced, longest)
