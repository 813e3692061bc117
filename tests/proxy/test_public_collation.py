"""Public text is read without its stored collation wherever Veil reads a public table — the generated query, the
join probes and the group-key domains — so answers follow the text's bytes, as the bounded copy's private text
does (red team s26 A6: a ``COLLATE NOCASE`` public key listed ``'p'``/``'P'`` as one domain value while the engine
labelled the merged group with one person's spelling; s25 A3/A4 on the private side).

The oracle: with noise off, every answer equals the answer over the same rows compared byte for byte (pandas),
for each collation DuckDB offers a text column (NOCASE, NOACCENT, NFC and their combination) set by another tool's
``ALTER`` after Veil stored the table, on D and on D′ (one person more, joining a variant spelling).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable

import duckdb
import pandas as pd
import pytest

from tests.support.warehouse import policy_with_tables
from veil.proxy._testing import exact_session

POLICY = """\
[database]
path = "w.duckdb"
[ledger]
path = "l.sqlite"
[tables.t]
privacy_unit = "row"
[tables.t.columns]
x = { type = "int", lower = 0, upper = 10 }
s = { type = "category", max_length = 256 }  # read across a join: at most 504 characters (multiplicity.MAX_JOIN_ROW_BYTES)
[tables.pub]
public = true
[tables.pub.columns]
pk = { type = "int" }
pn = { type = "category" }
[analysts.a]
epsilon = 1000000
delta = 0.5
"""

#: spellings equal under some collation: case, accents, composed and decomposed é
SPELLINGS = ["p", "P", "é", "e\u0301", "E", "e"]
PUB = pd.DataFrame({"pk": pd.array(range(len(SPELLINGS)), dtype="Int64"), "pn": SPELLINGS})
BASE = pd.DataFrame({"x": pd.array([i % 6 for i in range(24)], dtype="Int64"), "s": [SPELLINGS[(i * 5) % 6] for i in range(24)]})
#: D′: one person more, joining the last spelling of each collation's class
TARGET = pd.DataFrame({"x": pd.array([3], dtype="Int64"), "s": ["e\u0301"]})
COLLATIONS = ["NOCASE", "NOACCENT", "NFC", "NOCASE.NOACCENT"]


def _joined(t: pd.DataFrame, on: tuple[str, str]) -> pd.DataFrame:
    return t.merge(PUB, left_on=on[0], right_on=on[1])


def _group_counts(t: pd.DataFrame) -> dict[tuple[object, ...], float]:
    counts = _joined(t, ("x", "pk")).groupby("pn").size()
    return {(p,): float(counts.get(p, 0)) for p in SPELLINGS}


def _group_sums(t: pd.DataFrame) -> dict[tuple[object, ...], float]:
    sums = _joined(t, ("x", "pk")).groupby("pn")["x"].sum()
    return {(p,): float(sums.get(p, 0)) for p in SPELLINGS}


#: (query, its answer over the rows compared byte for byte)
CASES: dict[str, tuple[str, Callable[[pd.DataFrame], dict[tuple[object, ...], float]]]] = {
    "group-by-public-text": ("SELECT pub.pn, COUNT(*) FROM t JOIN pub ON pub.pk = t.x GROUP BY pub.pn", _group_counts),
    "sum-by-public-text": ("SELECT pub.pn, SUM(x) FROM t JOIN pub ON pub.pk = t.x GROUP BY pub.pn", _group_sums),
    "join-on-text": (
        "SELECT COUNT(*) FROM t JOIN pub ON pub.pn = t.s",
        lambda t: {(): float(len(_joined(t, ("s", "pn"))))},
    ),
    "filter-public-text": (
        "SELECT COUNT(*) FROM t JOIN pub ON pub.pk = t.x WHERE pub.pn = 'é'",
        lambda t: {(): float((_joined(t, ("x", "pk"))["pn"] == "é").sum())},
    ),
    "public-key-in-expression": (
        "SELECT pub.pn || '!' AS g, COUNT(*) FROM t JOIN pub ON pub.pk = t.x GROUP BY 1",
        lambda t: {(p + "!",): n for (p,), n in _group_counts(t).items()},
    ),
}


@pytest.fixture(scope="module")
def worlds(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], object]:
    out = {}
    for collation in COLLATIONS:
        for world, t in (("d", BASE), ("d'", pd.concat([TARGET, BASE], ignore_index=True))):
            folder = tmp_path_factory.mktemp(f"coll-{collation}-{len(t)}")
            policy = policy_with_tables(folder, POLICY, {"t": t}, {"pub": PUB})
            con = duckdb.connect(str(policy.database_path))  # another tool's edit, after Veil stored the table
            try:
                con.execute(f"ALTER TABLE pub ALTER pn SET DATA TYPE VARCHAR COLLATE {collation}")
            finally:
                con.close()
            out[(collation, world)] = (policy, t)
    return out


def test_the_collations_really_merge_the_spellings() -> None:
    """The fixture's premise: each collation makes some of the spellings equal (else this file tests nothing)."""
    con = duckdb.connect()
    for collation in COLLATIONS:
        distinct = con.execute(f"SELECT COUNT(DISTINCT v COLLATE {collation}) FROM (SELECT unnest(?) AS v)", [SPELLINGS])
        assert distinct.fetchone()[0] < len({unicodedata.normalize("NFC", s) for s in SPELLINGS} | set(SPELLINGS))


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("collation", COLLATIONS)
def test_answers_follow_the_bytes_of_public_text(worlds: dict[tuple[str, str], object], collation: str, case: str) -> None:
    sql, truth = CASES[case]
    for world in ("d", "d'"):
        policy, t = worlds[(collation, world)]  # type: ignore[misc]
        with exact_session(policy, "a") as s:
            rows = s.execute(sql, epsilon=1).rows
        got = {tuple(r[:-1]): float(r[-1]) for r in rows}
        assert got == truth(t), f"{collation}, {world}: {sql}"
