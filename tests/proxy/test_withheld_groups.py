"""An answer that the cap on released values cut tells the analyst so, through every interface.

Partition selection releases the groups whose noisy count passes a threshold; at most
``MAX_RELEASED_VALUES // released_per_group`` of them, the highest noisy counts (red team s31 A2). The others used to
be dropped without a word: an analyst read a partial answer as the whole. How many were withheld is a count of noisy
counts (post-processing), so telling it costs no privacy. The cap is scaled down here (every module that reads it) so
a few hundred rows reach it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import pandas as pd
import psycopg
import pytest
from click.testing import CliRunner

from tests.adversarial.test_redteam_s31 import _BIG_POLICY
from tests.support.server import build_policy, dsn, running_server
from veil.cli.main import cli
from veil.policy import load_policy
from veil.proxy._testing import exact_session
from veil.store.warehouse import write_table

GROUPED = "SELECT FLOOR(u / 2) AS g, COUNT(*) AS n, SUM(x) AS s FROM t GROUP BY 1"


@pytest.fixture
def small_cap(monkeypatch: pytest.MonkeyPatch) -> int:
    from veil.proxy import add_noise, answer, plan, session

    for module in (add_noise, answer, plan, session):
        monkeypatch.setattr(module, "MAX_RELEASED_VALUES", 40)
    return 40


def _world(base: Path) -> Path:
    """200 rows: 100 groups ``FLOOR(u / 2)`` of two rows each."""
    (base / "policy.toml").write_text(_BIG_POLICY, encoding="utf-8")
    frame = pd.DataFrame({"u": pd.array(range(200), dtype="Int64"), "x": [float(i % 100) for i in range(200)]})
    write_table(load_policy(base / "policy.toml"), "t", frame, replace=True)
    return base / "policy.toml"


def test_the_answer_counts_the_withheld_groups(tmp_path: Path, small_cap: int) -> None:
    with exact_session(_world(tmp_path), "a") as s:
        ans = s.execute(GROUPED, epsilon=Fraction(100))
        kept = small_cap // (2 + 3)  # a count (shared with partition selection) and a sum, and three columns
        assert len(ans.rows) == kept
        assert ans.withheld_groups == 100 - kept
        assert len(ans.notes) == 1 and f"{100 - kept:,} more groups" in ans.notes[0]
        assert ans.to_dict()["withheld_groups"] == 100 - kept
        again = s.execute(GROUPED, epsilon=Fraction(100))  # the cached answer says the same
        assert again.cached and again.withheld_groups == 100 - kept
        whole = s.execute(GROUPED + " HAVING COUNT(*) > 0 LIMIT 3", epsilon=Fraction(50))
        assert whole.withheld_groups == 100 - kept  # what the cap cut, not what the analyst's LIMIT cut


def test_an_answer_under_the_cap_has_no_note(tmp_path: Path) -> None:
    with exact_session(_world(tmp_path), "a") as s:
        ans = s.execute(GROUPED, epsilon=Fraction(100))
        assert len(ans.rows) == 100 and ans.withheld_groups == 0 and ans.notes == ()
        public = s.execute("SELECT 1 AS one")
        assert public.withheld_groups == 0


def test_the_cli_prints_the_note(tmp_path: Path, small_cap: int) -> None:
    """Production noise at ε = 100: each group of two rows passes the threshold with probability ≈ 1, so with 100
    groups fewer than 9 passing (no note) has probability far below STAT_ALPHA."""
    policy = _world(tmp_path)
    for fmt in ("table", "csv", "json"):
        run = CliRunner().invoke(
            cli, ["query", "--policy", str(policy), "--analyst", "a", "--epsilon", "100", "--format", fmt, GROUPED]
        )
        assert run.exit_code == 0, run.output
        if fmt == "json":
            document = json.loads(run.stdout)
            assert document["withheld_groups"] > 0 and "were withheld" in document["notes"][0]
        else:
            assert "NOTE:" in run.stderr and "were withheld" in run.stderr, (run.output, run.stderr)


@pytest.fixture
def port(tmp_path: Path, shared_data: Path, small_cap: int) -> Iterator[int]:
    with running_server(build_policy(tmp_path, shared_data, rows=2000)) as st:
        yield st.port  # type: ignore[attr-defined]


def test_the_wire_sends_a_notice(port: int) -> None:
    """``GROUP BY age`` on 2,000 Adult rows at ε = 5: about 40 ages hold 20+ rows and each passes the threshold with
    probability ≈ 1; the cap (40 values, 3 per group) keeps 13, so none withheld has probability far below
    STAT_ALPHA. The extended protocol (unnamed and named statements), the simple protocol and a cursor carry the notice."""
    with psycopg.connect(dsn(port), autocommit=True) as conn:
        notices: list[tuple[str | None, str | None, str | None]] = []  # a Diagnostic is read inside the handler only
        conn.add_notice_handler(lambda d: notices.append((d.severity, d.sqlstate, d.message_primary)))
        conn.execute("SET veil.epsilon = 1")
        sql = "SELECT age, COUNT(*) AS n FROM adult WHERE age > {} GROUP BY age"
        conn.execute(sql.format(0), prepare=False).fetchall()  # extended protocol (psycopg's default)
        assert len(notices) == 1 and notices[0][:2] == ("NOTICE", "00000") and "withheld" in (notices[0][2] or "")
        with conn.cursor() as cur:
            cur.execute(sql.format(1), prepare=True)  # a named prepared statement
        conn.pgconn.exec_(sql.format(2).encode())  # libpq's PQexec: the simple protocol
        assert len(notices) == 3, notices
        with conn.transaction():
            conn.execute("DECLARE c CURSOR FOR " + sql.format(3), prepare=False)
            conn.execute("FETCH ALL FROM c").fetchall()
        assert len(notices) == 4
