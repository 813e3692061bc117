"""Per-group work outside the engine is bounded by what is released, or by a ceiling known before the charge.

Every group the engine returns passes through Python. One person can open up to c groups (its rows kept by
the bounded copy × the public-join multiplicity), so (red team s7, A4):

* quantile, MEDIAN, MIN and MAX are scored (a dense grid row, an exponential-mechanism draw) only for the
  groups partition selection releases — their number is itself differentially private;
* a grouped query in which one unit brings more than ``MAX_GROUPED_CONTRIBUTION`` rows is refused, free.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from veil.errors import Unsupported
from veil.policy import load_policy
from veil.proxy import add_noise
from veil.proxy.multiplicity import MAX_GROUPED_CONTRIBUTION, MAX_GROUPED_VALUES
from veil.proxy.session import QuerySession
from veil.store.warehouse import write_table

POLICY = """\
[database]
path = "w.duckdb"
[ledger]
path = "l.sqlite"
[tables.t]
privacy_unit = "row"
[tables.t.columns]
g = {{ type = "int" }}
y = {{ type = "float", lower = 0, upper = 100 }}
[tables.v]
privacy_unit = "pid"
max_rows_per_unit = {c}
[tables.v.columns]
pid = {{ type = "int" }}
g = {{ type = "int" }}
[tables.pub]
public = true
[analysts.a]
epsilon = 1000000
delta = 0.5
"""


def _session(folder: Path, *, c: int = 5, pub_rows: int = 2000) -> QuerySession:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "policy.toml").write_text(POLICY.format(c=c), encoding="utf-8")
    policy = load_policy(folder / "policy.toml")
    rng = np.random.default_rng(0)
    # 4 big groups (released) and 600 groups of one row each (below any threshold)
    g = np.concatenate([np.repeat(np.arange(4), 2000), np.arange(100, 700)])
    write_table(policy, "t", pd.DataFrame({"g": g, "y": rng.uniform(0, 100, g.size)}), replace=True)
    write_table(policy, "v", pd.DataFrame({"pid": np.arange(200) // 4, "g": np.arange(200) % 7}), replace=True)
    pub = pd.DataFrame({"pk": np.arange(pub_rows), "pm": np.arange(pub_rows) % 3})
    write_table(policy, "pub", pub, replace=True, public=True)
    return QuerySession(policy, "a")


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[QuerySession]:
    with _session(tmp_path_factory.mktemp("groupwork")) as s:
        yield s


@pytest.mark.parametrize("agg", ["MEDIAN(y)", "MIN(y)", "MAX(y)", "quantile_cont(y, 0.9)", "MEDIAN(y), MAX(y)"])
def test_grid_statistics_are_scored_only_for_released_groups(
    session: QuerySession, monkeypatch: pytest.MonkeyPatch, agg: str
) -> None:
    scored: list[int] = []
    real = add_noise._grid_value
    monkeypatch.setattr(add_noise, "_grid_value", lambda *a: scored.append(1) or real(*a))
    answer = session.execute(f"SELECT g, COUNT(*), {agg} FROM t GROUP BY g", epsilon=10)
    grids = agg.count("(")
    assert len(answer.rows) * grids == len(scored), "a grid statistic was scored for a group that was not released"
    assert 1 <= len(answer.rows) < 50  # the 4 big groups pass the threshold, the 600 single rows do not
    assert all(v is not None and not np.isnan(v) for r in answer.rows for v in r[2:])


def _refused_free(session: QuerySession, sql: str) -> bool:
    before = session.budget().spent
    try:
        session.execute(sql, epsilon=1)
    except Unsupported as exc:
        assert "when grouping" in str(exc) and session.budget().spent == before
        return True
    return False


GROUPED = [
    "SELECT t.g, COUNT(*) FROM t CROSS JOIN pub p GROUP BY t.g",  # private key
    "SELECT p.pm, COUNT(*) FROM t CROSS JOIN pub p GROUP BY p.pm",  # public key
    "SELECT t.g, p.pk, MEDIAN(t.y) FROM t CROSS JOIN pub p GROUP BY 1, 2",  # the red team's shape
    # a condition that pins nothing (not a range: a range join over private rows is refused, red team s71 F2)
    "SELECT t.g, COUNT(*) FROM t JOIN pub p ON p.pk <> t.g GROUP BY t.g",
]


@pytest.mark.parametrize("sql", GROUPED)
def test_grouped_queries_past_the_ceiling_are_refused_free(session: QuerySession, sql: str) -> None:
    assert _refused_free(session, sql)  # 2,000 public rows per private row > 1,000


KEYLESS = [
    "SELECT COUNT(*) FROM t CROSS JOIN pub p",
    "SELECT MEDIAN(t.y) FROM t CROSS JOIN pub p",
    "SELECT COUNT(*) FROM t JOIN pub p ON p.pk <> t.g",
]


@pytest.mark.parametrize("sql", KEYLESS)
def test_the_same_joins_without_keys_are_not_refused_by_it(session: QuerySession, sql: str) -> None:
    assert not _refused_free(session, sql)


@pytest.mark.parametrize(("c", "pub_rows", "refused"), [(5, 200, False), (5, 201, True), (30, 33, False), (30, 34, True)])
def test_the_ceiling_counts_rows_per_unit_times_the_join(tmp_path: Path, c: int, pub_rows: int, refused: bool) -> None:
    assert (c * pub_rows > MAX_GROUPED_CONTRIBUTION) == refused
    with _session(tmp_path, c=c, pub_rows=pub_rows) as s:
        assert _refused_free(s, "SELECT v.g, COUNT(*) FROM v CROSS JOIN pub p GROUP BY v.g") == refused


@pytest.mark.parametrize(("n", "refused"), [(1, False), (19, False), (20, True), (60, True)])
def test_groups_times_statistics_are_bounded(tmp_path: Path, n: int, refused: bool) -> None:
    # c = 5 rows per unit × a 200-row join = 1,000 (the row ceiling); n filtered counts + the partition count
    # are n + 1 statistics: 1,000 × (n + 1) values, at most 20,000
    assert (1000 * (n + 1) > MAX_GROUPED_VALUES) == refused
    stats = ", ".join(f"COUNT(*) FILTER (WHERE v.g > {i})" for i in range(n))
    with _session(tmp_path, c=5, pub_rows=200) as s:
        assert _refused_free(s, f"SELECT v.g, {stats} FROM v CROSS JOIN pub p GROUP BY v.g") == refused


def test_counts_and_sums_are_drawn_only_for_released_groups(session: QuerySession, monkeypatch: pytest.MonkeyPatch) -> None:
    from veil import mechanisms

    drawn: list[int] = []
    for name in ("laplace", "discrete_laplace"):
        real = getattr(mechanisms, name)
        monkeypatch.setattr(mechanisms, name, lambda v, *a, _real=real, **k: drawn.append(len(v)) or _real(v, *a, **k))
    answer = session.execute("SELECT g, COUNT(*), SUM(y), COUNT(y) FILTER (WHERE y > 50) FROM t GROUP BY g", epsilon=10)
    released = len(answer.rows)
    assert 1 <= released < 50
    # the partition count for all 604 candidate groups, then the other statistics for the released ones only
    assert drawn[0] == 604 and sum(drawn[1:]) <= 3 * released, drawn
