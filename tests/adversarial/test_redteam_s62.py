"""Red team, session 62: the surfaces session 19 changed (main at 2f0c26e, 2026-11-28).

Each test in part A FAILS on main at 2f0c26e (nothing is marked xfail). Publications go through the curator's real
transaction (``veil.generators.transaction.publish``); what an analyst reads is asked through ``veil.connect``.

Findings:

* F1 (LOW–MEDIUM, every analyst at ε = 0; the threshold half of s60 review finding 1) noise addition's per-row
  redraw (``sdc.avoid_rare_values``) couples rows through the *count* of holders: a row whose own value fewer than
  ``MIN_VALUE_HOLDERS`` = 5 rows hold is redrawn off it. With five people at 47 hours (the bulk at 35–45) about four
  of their rows publish 47; remove one of them (the neighbour D′, four holders) and *all four* remaining rows are
  redrawn off 47, so the public table holds no 47 at all. One person's presence moves four other people's output
  rows (3–4 vs 0 over seeds 1–3), where a row-aligned method without the rule moves one row (~0.7 in expectation).
  An analyst who knows the target holds 47 (or that the four others do) reads presence off ``COUNT(*) WHERE hours =
  47``. The same threshold flip is in rank swapping's recoding (k holders stay, k − 1 are all recoded to a window
  mean) and in kanon's ``--sensitive`` among-published rule. Suggested class-level fix: a rule whose trigger is the
  number of holders must be applied so that crossing the threshold changes at most the one row of the person who
  crosses it — e.g. decide per row from that row's own value with a data-independent test (redraw every row whose
  noise rounds back to its own value, whatever the count: noise addition never needs to publish a row unchanged),
  or for value-copying methods recode on a data-independent grid instead of by the holder count.

* F2 (LOW–MEDIUM, server abuse: memory; s58 E3's class one level up) the 128 MiB bound covers one source's
  *evaluation* only. Its rows are copied into a temporary table of the query's reader cursor (the warehouse reader,
  DuckDB's default limit, 80 % of RAM), each source capped at ``MAX_MATERIALISED_BYTES`` = 64 MiB, and nothing caps
  their sum: a private query joining N distinct derived public sources (``JOIN (SELECT p.k, p.name FROM pub p WHERE
  p.name <> 'z<i>') q<i> ON t.k = q<i>.k``), each one-to-one on its key (fan-out 1, so the query is accepted and
  answered), holds N × 64 MiB in the reader until its scope ends; N is bounded only by the 4,000-token limit (tens of
  sources: GBs), per statement, times ``workers`` statements. The witness scales the cap to 64 KiB and holds 3.9
  caps with four sources. Suggested class-level fix: one budget per query scope for everything materialised (sum of
  the sources' rows × row bytes against one cap, checked before each build with the cap left), or build the
  temporary tables on a bounded instance too (the query's private run reads them there only if private data is not
  on it, so more simply: charge each build against the scope's remaining bytes).

What held (tried, no witness): the grammar refuses STRING_AGG, LIST, LPAD, REPEAT in public sources (no row larger
than its byte bound from one function); a source with ``ORDER BY … LIMIT`` or ``DISTINCT … LIMIT … OFFSET`` is
evaluated as written (the appended ``LIMIT max_rows + 1`` does not clash); several sources in one query are built one
after another, one bounded instance at a time; ``_compare_on_grid`` (by reading): only ``>=``/``<`` (and their flips)
with a plain literal of at most 15 digits and ``k >= 0``, on the clamped copy's own value, where ``c · 2^k`` is exact
(no underflow for ``k >= 0``), NULL/NaN (NULL in the copy) keep their truth value, ``NOT`` and ``-v`` included;
``_non_null_columns`` (by reading): only top-level conjuncts of the query's own ``WHERE`` comparing a qualified bare
column with a literal, or ``IS NOT NULL``; parenthesised, ``OR``, ``NOT``, other-column comparisons not shared — no
shape found where ``COUNT(y) != COUNT(*)`` yet shared; exact answers shared vs unshared agreed on 17 more WHERE shapes
(``(y >= 0)``, ``NOT NOT y IS NULL``, ``y IS NOT NULL = TRUE``, ``y >= 0 IS NOT FALSE``, ``y IS [NOT] DISTINCT FROM
1.5``, ``y >= -0.0``, ``COALESCE(y, 0) >= 0``, ``y::INT >= 0``, …). ``WHERE y >= 0 = (x > 0)`` renders unparenthesised
and DuckDB refuses it (22000 'Parser error') — free, the same in every world (a LOW usability bug, no witness).
Not tried for lack of time: charge-then-fail under the pin
(item 2); a composition of a k-anonymous ``--sensitive gain`` with a non-k-anonymous non-DP release of the same
people (``sdc noise_addition``/``rank_swapping`` of ``gain``: ``check_linkage`` compares kanon releases only, so the
noisy copy picks the exact value out of the person's k-anonymous group — a hypothesis, no witness). Linkage by
population, tried: ``kanon people --qi age --sensitive gain`` beside ``kanon people_2025 --qi age,capital_gain`` (the
same people, renamed copy): refused when any gain label is exact (values compared); with 40 gains held by 5 each,
every label a range, both publish, but an attacker knowing age singled out 0 of 200 (seeds 1, 2).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

_HOURS_POLICY = """\
[database]
path = "warehouse.duckdb"
[ledger]
path = "ledger.sqlite"

[tables.people]
privacy_unit = "row"
[tables.people.columns]
age = { type = "int", lower = 17, upper = 90 }
hours = { type = "int", lower = 1, upper = 99 }

[analysts.bob]
epsilon = 2.0
"""


def _analyst(policy: Path, sql: str) -> pd.DataFrame:
    import veil as veil_api

    with veil_api.connect(policy, analyst="bob") as db:
        return db.sql(sql)


def _published_47s(base: Path, holders: int, seed: int) -> int:
    """``noise_addition`` (a = 0.3) of 300 people's hours (35–45), the first ``holders`` of them at 47; the count of
    published 47s an analyst reads (-1: refused, typed, nothing public)."""
    from veil.errors import PublicationRefused
    from veil.generators.randomness import reproducible_for_tests
    from veil.generators.transaction import publish
    from veil.policy import load_policy
    from veil.store.warehouse import write_table

    base.mkdir(parents=True, exist_ok=True)
    path = base / "policy.toml"
    path.write_text(_HOURS_POLICY, encoding="utf-8")
    policy = load_policy(path)
    rng = np.random.default_rng(0)
    n = 300
    frame = pd.DataFrame({"age": rng.integers(20, 60, n), "hours": np.clip(np.round(rng.normal(40, 1.5, n)), 35, 45).astype(int)})
    frame.loc[: holders - 1, "hours"] = 47
    write_table(policy, "people", frame)
    request = {"table": "people", "method": "noise_addition", "columns": ["age", "hours"], "params": ["a=0.3"]}
    try:
        with reproducible_for_tests(seed):  # the same draws for D and D′ (the internal test path, s66 F1)
            publish(policy, "sdc", {**request, "output": "pub"}, progress=False)
    except PublicationRefused:
        return -1
    return int(_analyst(path, "SELECT COUNT(*) FILTER (WHERE hours = 47) AS n FROM pub")["n"].iloc[0])


# ==================================================================================================
# A. Findings (fail on main)
# ==================================================================================================


def test_f1_noise_addition_one_person_moves_only_their_own_row_across_the_holder_threshold(tmp_path: Path) -> None:
    """F1: D has five people at 47 hours, D′ the same minus one of them (four). Noise addition is row-aligned: each
    output row derives from its own source row, so one person's presence may change the published count of 47s by
    at most one (their own row). On main (seed 1) D publishes four 47s and D′ none: the redraw rule, triggered by the
    holder count, moves every other holder's row when one person leaves."""
    with_target = _published_47s(tmp_path / "d", 5, seed=1)
    without = _published_47s(tmp_path / "d_prime", 4, seed=1)
    assert with_target >= 0 and without >= 0, "a refusal here would itself depend on one person (4 vs 5 holders)"
    assert abs(with_target - without) <= 1, (
        f"one person (the fifth holder of 47 hours) changes the published count of 47s by {with_target - without}: "
        f"{with_target} with them, {without} without — the rare-value redraw moved the other holders' rows too"
    )


_JOIN_POLICY = """\
[database]
path = "w.duckdb"
[ledger]
path = "l.sqlite"
[tables.t]
privacy_unit = "row"
[tables.t.columns]
k = { type = "int", lower = 0, upper = 100000 }
[tables.pub]
public = true
[tables.pub.columns]
k = { type = "int", lower = 0, upper = 100000 }
name = { type = "category", max_length = 8 }
[analysts.a]
epsilon = 1000000
"""


def test_f2_one_query_holds_at_most_one_cap_of_materialised_public_rows(tmp_path: Path, monkeypatch: Any) -> None:
    """F2: each derived public source a private query joins is evaluated into a temporary table of the *reader's*
    cursor (outside the bounded instances' 128 MiB), each capped at ``MAX_MATERIALISED_BYTES`` (64 MiB) — but
    nothing caps their sum: a query joining N distinct sources, each keyed one-to-one (fan-out 1, so the query is
    accepted and answered), holds N × 64 MiB in the reader until it ends, N bounded only by the query's 4,000 tokens.
    Scaled down here (the cap patched to 64 KiB, 1,000-row sources): four sources hold four caps at once. Property:
    the materialised rows one query holds at once stay within one cap."""
    from veil.engines import duckdb as engine_module
    from veil.errors import VeilError
    from veil.policy import load_policy
    from veil.proxy import multiplicity
    from veil.proxy._testing import exact_session
    from veil.store.warehouse import write_table

    cap = 64 << 10
    monkeypatch.setattr(multiplicity, "MAX_MATERIALISED_BYTES", cap)
    (tmp_path / "policy.toml").write_text(_JOIN_POLICY, encoding="utf-8")
    policy = load_policy(tmp_path / "policy.toml")
    write_table(policy, "t", pd.DataFrame({"k": range(50)}), replace=True)
    pub = pd.DataFrame({"k": range(1000), "name": [f"n{i:06d}" for i in range(1000)]})
    write_table(policy, "pub", pub, replace=True, public=True)
    held: dict[str, int] = {}  # each temporary table's rows, by name
    full: list[int] = []  # the row cap each source was given

    def spy(self: Any, name: str, sql: str, max_rows: int) -> int:
        count = original(self, name, sql, max_rows)
        held[name] = min(count, max_rows)
        full.append(max_rows)
        return count

    original = engine_module.DuckDBEngine.create_temp
    monkeypatch.setattr(engine_module.DuckDBEngine, "create_temp", spy)
    joins = " ".join(f"JOIN (SELECT p.k, p.name FROM pub p WHERE p.name <> 'z{i}') q{i} ON t.k = q{i}.k" for i in range(4))
    session = exact_session(policy, "a")
    spent = session.budget().spent
    try:
        try:
            session.execute(f"SELECT COUNT(*) FROM t {joins}")
        except VeilError:  # refused: free (lead's fix: the caps bound all of one query's sources together)
            assert session.budget().spent == spent
    finally:
        session.close()
    # every source here has the same row bytes, so the first one's cap (the whole cap) measures them all
    assert full and sum(held.values()) <= full[0], (
        f"one query held {len(held)} materialised public sources at once, {sum(held.values()) / full[0]:.2f} times the "
        f"cap of {cap} bytes (scaled; 64 MiB in production, N sources up to the token limit)"
    )
