"""Red team, session 38: types, schemas and errors on the curator's write paths (main at a4a5391, 2026-11-27) — can
one person's value decide how everyone's values are stored, and so what every analyst reads?

Neighbouring worlds differ in one person (person 7) of a small warehouse of 150 people, loaded through each curator
path: ``veil ingest`` of a CSV, of a Parquet file, of an Adult-format file (``warehouse.ingest_file``), and the Python
``warehouse.write_table`` of a pandas frame. The query path reads every declared column through
``TRY_CAST(stored AS declared type)`` (``proxy/bounding.py``), so a stored type is harmless only if that cast gives
each person's value the same result whatever type the column was stored in. It did not: DuckDB casts a DOUBLE ``2.5``
to the BIGINT 2 and the text ``'2.5'`` to 3, the DOUBLE ``1.0`` to ``true`` and the text ``'1.0'`` to NULL, and a
float64 column has already rounded every 64-bit integer. Findings (details in each test's docstring), all fixed in
``store/declared_types.as_stored`` and ``store/warehouse`` (declared int/float/bool columns read as written and
stored value by value; Parquet integers as nullable ints; typed refusals):

* A1 (HIGH where ids are 64-bit: snowflake ids, hashed accounts) one person's missing id made pandas read the whole
  column as float64 (CSV: an empty field; Parquet from a tool other than pandas: a null in an int64 column; a frame:
  ``None`` among ints). Ids beyond 2⁵³ were rounded: as the privacy unit, distinct people merged and the contribution
  bound kept one row of each merged unit (``COUNT(*)`` 150 → 2); as a category, ``COUNT(*) WHERE acct = '2⁶⁰'``
  1 → 128; a unit column of ``Decimal`` ids (``pd.read_sql`` of NUMERIC) with one ``Decimal('NaN')`` became 32-bit
  floats, 150 → 1. A frame that already holds the rounded floats is now refused, typed; the unit column is otherwise
  kept as stored (the bounded copy tells people apart by it), objects (not texts) as each value's own text.
* A2 (MEDIUM) an ``int`` column holding halves: one person's ``'x'`` (the column becomes text) moved ``COUNT(*)
  WHERE n = 2`` from 149 to 0 and ``SUM(n)`` by 149 (bounds [0, 10], sensitivity 10). CSV and frame (``as_stored``
  wrote mixed types as text).
* A3 (HIGH) a ``bool`` column spelled ``1.0``/``0.0`` (how pandas writes a 0/1 column with a gap): one person's ``'x'``
  turned every value NULL, ``COUNT(*) WHERE flag`` 50 → 0. Frame variant: ``2.0``/``0.0`` (``as_stored`` wrote 2.0 as
  ``'2'``, NULL to the cast, where the DOUBLE was true).
* A4 (MEDIUM) a frame of ``Decimal`` values (``pd.read_sql`` of a PostgreSQL NUMERIC, which has NaN) holding one
  ``Decimal('NaN')`` was registered by DuckDB as 32-bit FLOAT for everyone: ``COUNT(*) WHERE x = 0.1`` 149 → 0;
  an ``int`` column's 16,777,217 became 16,777,216.
* A5 (LOW, curator only) untyped crashes decided by one value: an Adult-format file with ``?``/``x`` in ``age``
  (``IntCastingNaNError``/``ValueError``), one tz-aware timestamp among naive ones (DuckDB ``ConversionException``),
  one ``True`` among ints in an undeclared column (``TypeMismatchException``). Now ``InputError``.

A5 also: the Adult format was recognised from the first row's age being digits, so a first person whose age was
``39x`` became the header and the table lacked every declared column (every query refused); now recognised by its
15 fields and income label. Left (reported, not fixed here): ``as_source`` reads a text ``int`` column as float64
(a publication on a 64-bit id column with one text value rounds the ids; consistent across worlds since ids are
now stored as written). The privacy unit column is kept as stored (the bounded copy tells people apart by it).

Held: a category column from CSV (s37 A1 fix) and from a frame of any dtype; ints beyond 2⁶⁴ in a frame (HUGEINT,
read per value); a date column of mixed date/datetime/text objects (TIMESTAMP or text cast to the same DATE,
nanoseconds included); text dates in any spelling (pandas never parses dates from a CSV); a bool column with a gap
in a frame (objects → BOOLEAN); CSV delimiter sniffing (the header line only); public tables' mirror copies
(written from the same converted frame); pre-scaled grid columns (computed from the typed, clamped value).
"""

from __future__ import annotations

import decimal
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

POLICY = """\
[database]
path = "w.duckdb"
[ledger]
path = "l.sqlite"

[tables.visits]
privacy_unit = "uid"
max_rows_per_unit = 1
[tables.visits.columns]
uid = { type = "int" }
flag = { type = "bool" }
n = { type = "int", lower = 0, upper = 10 }
x = { type = "float", lower = 0, upper = 1 }
acct = { type = "category" }
big = { type = "int", lower = 0, upper = 100000000 }
d = { type = "date" }

[tables.adult]
privacy_unit = "row"
[tables.adult.columns]
age = { type = "int", lower = 17, upper = 90 }
sex = { type = "category", values = ["Female", "Male"] }

[analysts.bob]
epsilon = 1000.0
"""

N = 150


def _frame() -> pd.DataFrame:
    """150 people: distinct units, a third flagged, ordinary values elsewhere."""
    return pd.DataFrame(
        {
            "uid": np.arange(N),
            "acct": [f"a{i}" for i in range(N)],
            "flag": np.arange(N) % 3 == 0,
            "n": np.full(N, 4),
            "x": np.full(N, 0.5),
            "big": np.full(N, 7),
            "d": ["2020-01-01"] * N,
        }
    )


def _with(column: str, values: list[Any], odd: Any = "keep") -> pd.DataFrame:
    """``_frame()`` with ``column`` holding ``values`` and, unless ``odd`` is "keep", person 7's value ``odd`` (the
    column built from a list, as pandas builds it: its dtype follows every value)."""
    frame = _frame()
    values = list(values)
    if odd != "keep":
        values[7] = odd
    frame[column] = pd.Series(values)
    return frame


def _load(base: Path, frame: pd.DataFrame, how: str) -> Any:
    """A policy whose warehouse holds ``frame`` as ``visits``, loaded the curator's way ``how``."""
    from veil.policy import load_policy
    from veil.store.warehouse import ingest_file, write_table

    base.mkdir(parents=True)
    (base / "policy.toml").write_text(POLICY, encoding="utf-8")
    policy = load_policy(base / "policy.toml")
    if how == "csv":
        frame.to_csv(base / "visits.csv", index=False)
        ingest_file(policy, "visits", base / "visits.csv")
    elif how == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        # as a tool other than pandas writes it (Spark, DuckDB, Arrow): typed columns, no pandas dtypes to restore
        pq.write_table(pa.Table.from_pandas(frame, preserve_index=False).replace_schema_metadata(None), base / "visits.parquet")
        ingest_file(policy, "visits", base / "visits.parquet")
    else:
        write_table(policy, "visits", frame)
    return policy


def _answers(policy: Any, queries: list[str]) -> list[Any]:
    """Exact (noise-off) answers, or the refusal's type."""
    from veil.errors import VeilError
    from veil.proxy._testing import exact_session

    session = exact_session(policy, "bob")
    out: list[Any] = []
    for sql in queries:
        try:
            out.append(session.execute(sql, epsilon=1).rows[0][0])
        except VeilError as exc:
            out.append(type(exc).__name__)
    session.close()
    return out


def _close(a: list[Any], b: list[Any], sensitivity: list[float]) -> bool:
    return all(
        (x == y) if isinstance(x, str) or isinstance(y, str) else abs(float(x) - float(y)) <= s + 1e-9
        for x, y, s in zip(a, b, sensitivity, strict=True)
    )


# ==================================================================================================
# A1. One person's missing unit rounds everyone's 64-bit identifier
# ==================================================================================================

_IDS = [2**60 + i for i in range(N)]


@pytest.mark.parametrize(
    ("how", "column"), [("csv", "uid"), ("parquet", "uid"), ("frame", "uid"), ("parquet", "acct"), ("frame", "acct")]
)
def test_A1_one_persons_missing_value_never_merges_other_peoples_ids(tmp_path: Path, how: str, column: str) -> None:
    """HIGH where units are 64-bit identifiers (snowflake ids, hashed account numbers) — interfaces: ``veil ingest``
    (CSV, Parquet) and ``write_table``. D: every person has an id 2⁶⁰ + i; D′: person 7's id is missing (a person with
    no identifier: dropped by the contribution bound). ``COUNT(*)`` must move by at most 1 (max_rows_per_unit = 1).
    Before the fix: 150 in D, 2 in D′ — pandas read the column as float64 and every id rounded to 2⁶⁰ or 2⁶⁰ + 256.
    The same ids in a ``category`` column (``acct``): ``COUNT(*) WHERE acct = '2⁶⁰'`` went from 1 to 129. A frame the
    curator built already holds the rounded floats: the write must then be refused, typed."""
    from veil.errors import InputError

    query = "SELECT COUNT(*) FROM visits" if column == "uid" else f"SELECT COUNT(*) FROM visits WHERE acct = '{2**60}'"
    counts = {}
    for world, odd in (("d", "keep"), ("d2", None)):
        frame = _with(column, _IDS, odd)
        if how != "frame":  # the file as a tool that keeps integers writes it: exact ids, one empty field / null
            frame[column] = pd.array([None if i == 7 and odd is None else v for i, v in enumerate(_IDS)], dtype="Int64")
        if how == "frame" and world == "d2":
            assert frame[column].dtype == np.float64  # pandas' doing: the precision is gone before Veil sees it
            with pytest.raises(InputError, match=column):
                _load(tmp_path / world, frame, how)
            return
        counts[world] = _answers(_load(tmp_path / world, frame, how), [query])[0]
    assert abs(counts["d"] - counts["d2"]) <= 1, counts


@pytest.mark.parametrize("kind", ["int-and-float", "decimals"])
def test_A1_one_persons_odd_unit_never_merges_other_people(tmp_path: Path, kind: str) -> None:
    """HIGH (64-bit units) — interface: ``write_table`` of a frame whose unit column holds Python objects (ids read
    from JSON or a database driver: ``pd.read_sql`` gives a NUMERIC id column as ``Decimal``). D: person 7's id is
    2⁶⁰ + 7; D′: ``0.5`` among ints, or ``Decimal('NaN')`` among Decimals. DuckDB made the whole column DOUBLE (the
    Decimals 32-bit FLOAT) and merged everyone else: ``COUNT(*)`` 150 → 3 (→ 1). It may move by 1. (``int-and-float``
    held on a4a5391 through ``as_stored``'s mixed-type text; it guards this branch's rule for the unit column.)"""
    wrap, odd = (int, 0.5) if kind == "int-and-float" else (decimal.Decimal, decimal.Decimal("NaN"))
    counts = {}
    for world in ("d", "d2"):
        frame = _frame()
        ids = [odd if world == "d2" and i == 7 else wrap(v) for i, v in enumerate(_IDS)]
        frame["uid"] = pd.Series(ids, dtype=object)
        counts[world] = _answers(_load(tmp_path / world, frame, "frame"), ["SELECT COUNT(*) FROM visits"])[0]
    assert abs(counts["d"] - counts["d2"]) <= 1, counts


# ==================================================================================================
# A2. Halves in an int column: read as 2 when stored as numbers, 3 when stored as text
# ==================================================================================================


@pytest.mark.parametrize("how", ["csv", "frame"])
def test_A2_one_persons_text_never_rerounds_everyones_int(tmp_path: Path, how: str) -> None:
    """MEDIUM — interfaces: ``veil ingest`` (CSV) and ``write_table``. ``n`` (int, bounds [0, 10]) is 2.5 for
    everyone; person 7's is missing (D) or ``'x'`` (D′), both missing to the policy. ``COUNT(*) WHERE n = 2`` may move
    by 1, ``SUM(n)`` by 10. Before the fix: 149 vs 0 and 298 vs 447 (DuckDB casts the DOUBLE 2.5 to 2 and the text
    '2.5' to 3; one person's text decided which)."""
    queries = ["SELECT COUNT(*) FROM visits WHERE n = 2", "SELECT SUM(n) FROM visits"]
    answers = {
        w: _answers(_load(tmp_path / w, _with("n", [2.5] * N, odd), how), queries) for w, odd in (("d", None), ("d2", "x"))
    }
    assert _close(answers["d"], answers["d2"], [1, 10]), answers


# ==================================================================================================
# A3. A bool column spelled as numbers: true/false as numbers, NULL as text
# ==================================================================================================

_FLAGS_10 = [1.0 if i % 3 == 0 else 0.0 for i in range(N)]
_FLAGS_20 = [2.0 if i % 3 == 0 else 0.0 for i in range(N)]


@pytest.mark.parametrize(("how", "flags"), [("csv", _FLAGS_10), ("frame", _FLAGS_20)], ids=["csv-1.0", "frame-2.0"])
def test_A3_one_persons_text_never_nulls_everyones_bool(tmp_path: Path, how: str, flags: list[float]) -> None:
    """HIGH — interfaces: ``veil ingest`` (CSV), ``write_table``. ``flag`` (bool) is spelled 1.0/0.0 (a 0/1 column
    with a missing value, as pandas writes it) or, in a frame, 2.0/0.0; person 7's is missing (D) or ``'x'`` (D′).
    ``COUNT(*) WHERE flag`` may move by 1. Before the fix: 50 vs 0 (the DOUBLE 1.0 casts to true, the text '1.0' to
    NULL; the frame's 2.0 was written '2' by ``as_stored``, also NULL)."""
    queries = ["SELECT COUNT(*) FROM visits WHERE flag", "SELECT COUNT(*) FROM visits WHERE NOT flag"]
    answers = {w: _answers(_load(tmp_path / w, _with("flag", flags, odd), how), queries) for w, odd in (("d", None), ("d2", "x"))}
    assert _close(answers["d"], answers["d2"], [1, 1]), answers


# ==================================================================================================
# A4. One Decimal('NaN') makes a column of Decimals 32-bit floats for everyone
# ==================================================================================================

_D = decimal.Decimal


@pytest.mark.parametrize(
    ("column", "value", "query"),
    [
        ("x", _D("0.1"), "SELECT COUNT(*) FROM visits WHERE x = 0.1"),
        ("big", _D("16777217"), "SELECT COUNT(*) FROM visits WHERE big = 16777217"),
    ],
    ids=["float", "int"],
)
def test_A4_one_persons_decimal_nan_never_narrows_everyones_numbers(tmp_path: Path, column: str, value: Any, query: str) -> None:
    """MEDIUM — interface: ``write_table`` of a frame of ``Decimal`` values (``pd.read_sql`` of a NUMERIC column;
    PostgreSQL's NUMERIC has NaN). D: person 7's value missing; D′: ``Decimal('NaN')`` (missing to the policy too).
    The count may move by 1. Before the fix: 149 vs 0 — DuckDB registered the column as DECIMAL in D and as FLOAT
    (32 bits) in D′, where 0.1 is 0.10000000149 and 16,777,217 is 16,777,216."""
    answers = {
        w: _answers(_load(tmp_path / w, _with(column, [value] * N, odd), "frame"), [query])
        for w, odd in (("d", None), ("d2", _D("NaN")))
    }
    assert _close(answers["d"], answers["d2"], [1]), answers


# ==================================================================================================
# A5. Untyped crashes on the curator's path, decided by one person's value
# ==================================================================================================

_ADULT_ROW = (
    "{age}, State-gov, 77516, Bachelors, 13, Never-married, Adm-clerical, Not-in-family, White, Male, 2174, 0, 40, "
    "United-States, <=50K"
)


def _write_odd(base: Path, case: str) -> None:
    from veil.policy import load_policy
    from veil.store.warehouse import ingest_file, write_table

    base.mkdir(parents=True)
    (base / "policy.toml").write_text(POLICY, encoding="utf-8")
    policy = load_policy(base / "policy.toml")
    if case.startswith("adult"):
        rows = [_ADULT_ROW.format(age=30 + i % 40) for i in range(N)]
        rows[0 if case.endswith("first") else 7] = _ADULT_ROW.format(age=case.split("-")[1])
        (base / "adult.data").write_text("\n".join(rows) + "\n", encoding="utf-8")
        summary = ingest_file(policy, "adult", base / "adult.data")
        # read as Adult, not with the first person's row as its header (which lacks every declared column)
        assert summary["missing_policy_columns"] == [], summary
    elif case == "frame-tz":
        frame = _with("d", [pd.Timestamp("2020-01-01")] * N, pd.Timestamp("2020-01-01", tz="UTC"))
        write_table(policy, "visits", frame)
    elif case == "frame-undeclared":
        frame = _frame()
        frame["note"] = pd.Series([1] * 7 + [True] + [1] * (N - 8), dtype=object)
        write_table(policy, "visits", frame)
    else:
        raise AssertionError(case)


@pytest.mark.parametrize("case", ["adult-?", "adult-x", "adult-39x-first", "frame-tz", "frame-undeclared"])
def test_A5_one_persons_value_never_crashes_a_curator_write_untyped(tmp_path: Path, case: str) -> None:
    """LOW (the curator's path; nothing reaches an analyst) — interfaces: ``veil ingest`` (Adult format) and
    ``write_table``. Person 7's ``age`` is ``?``/``x`` in an Adult file (or person 0's is ``39x``: the format was
    recognised from the first row, which then became the header); a frame's date column holds one tz-aware
    timestamp among naive ones; an undeclared column holds one ``True`` among ints. The write may be refused, but
    as a ``VeilError`` (a message and an exit code 2), never a pandas/DuckDB exception with a traceback."""
    from veil.errors import VeilError

    try:
        _write_odd(tmp_path / "w", case)
    except VeilError:
        pass
