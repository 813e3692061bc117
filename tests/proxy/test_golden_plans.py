"""Golden plans: what each query costs and the SQL Veil generates for it, as readable JSON fixtures.

Each file in tests/fixtures/plans/ holds one query's plan — contribution bound, exact ε and δ, every
statistic (label, mechanism, sensitivity, ε share, role) — and the engine SQL generated for it (the
bounded copy's name replaced by ``<bounded:TABLE>``). A change in what a query costs or runs shows as a
diff of these files. Regenerate after an intended change with ``VEIL_UPDATE_GOLDEN=1 pytest tests/proxy``.
The generated SQL is also executed against the test warehouse, so every fixture is SQL DuckDB accepts.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from tests.test_proxy_fixtures import proxy_policy  # noqa: F401  (fixture)
from veil.policy import Policy
from veil.proxy._testing import generated_sql, plan_of
from veil.proxy.session import QuerySession

GOLDEN = Path(__file__).parent.parent / "fixtures" / "plans"
UPDATE = os.environ.get("VEIL_UPDATE_GOLDEN") == "1"

CASES: dict[str, tuple[str, float]] = {
    "count": ("SELECT COUNT(*) FROM people", 0.5),
    "avg_group_declared": ("SELECT sex, AVG(income) FROM people GROUP BY sex", 1.0),
    "private_keys_with_two_statistics": ("SELECT state, COUNT(*), SUM(age) FROM people GROUP BY state", 1.0),
    "private_keys_sum_only": ("SELECT state, SUM(age) FROM people GROUP BY state", 1.0),
    "median_filter": ("SELECT MEDIAN(age) FILTER (WHERE sex = 'Male') FROM people", 0.3),
    "user_level_count_distinct_unit": ("SELECT COUNT(DISTINCT user_id) FROM visits", 0.5),
    "user_level_count_distinct_unit_grouped": ("SELECT kind, COUNT(DISTINCT user_id) FROM visits GROUP BY kind", 0.5),
    "expression_clamped": ("SELECT SUM(age * 2 + age_offset) FROM people WHERE income / age > 100", 0.5),
    "cte_shadowing_table": ("WITH people AS (SELECT * FROM people WHERE age > 30) SELECT COUNT(*) FROM people", 0.5),
    "variance": ("SELECT VAR_SAMP(age), STDDEV(age) FROM people", 0.9),
}


def _describe(policy: Policy, sql: str, eps: float) -> dict[str, Any]:
    with QuerySession(policy, "alice") as s:
        p = plan_of(s, sql, eps)
        statements = generated_sql(s, sql, eps)
    assert p is not None
    return {
        "sql": sql,
        "epsilon_requested": eps,
        "contribution": p.contribution,
        "epsilon": str(p.cost),
        "delta": str(p.delta),
        "partition_threshold": p.partition_threshold,
        "statistics": [
            {
                "label": st.label,
                "mechanism": st.mechanism,
                "sensitivity": str(st.sensitivity),
                "epsilon": str(st.epsilon),
                "role": "partition" if st.id == p.partition_stat else ("hidden" if st.hidden else "output"),
            }
            for st in p.statistics
        ],
        "generated": [re.sub(r"_veil_bounded_([a-z]+)_[0-9a-f]+", r"<bounded:\1>", q) for q in statements],
    }


@pytest.mark.parametrize("name", sorted(CASES))
def test_plan_matches_golden(name: str, proxy_policy: Policy) -> None:  # noqa: F811
    sql, eps = CASES[name]
    got = _describe(proxy_policy, sql, eps)
    path = GOLDEN / f"{name}.json"
    if UPDATE or not path.exists():
        path.write_text(json.dumps(got, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        if not UPDATE:
            pytest.fail(f"golden file {path.name} was missing and has been written; review it and run again")
    want = json.loads(path.read_text(encoding="utf-8"))
    assert got == want
    with QuerySession(proxy_policy, "alice") as s:  # the fixture's SQL is what the engine really runs
        for q in generated_sql(s, sql, eps):
            s._env.engine.execute(q)
