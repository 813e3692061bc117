"""Cost quoted = cost charged, exact budgets over many queries, the answer cache, the release log."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest

from tests.test_proxy_fixtures import make_proxy_policy
from veil.errors import BudgetExhausted, VeilError
from veil.policy import Policy
from veil.proxy._testing import exact_session
from veil.proxy.session import QuerySession
from veil.store.releases import list_releases


@pytest.fixture
def policy(tmp_path: Path) -> Policy:
    return make_proxy_policy(tmp_path)


@pytest.mark.slow
def test_charge_equals_explain_and_budget_is_exact(policy: Policy) -> None:
    with QuerySession(policy, "alice") as s:
        total = Fraction(0)
        for i in range(30):
            sql = f"SELECT sex, COUNT(*), AVG(income) FROM people WHERE age > {20 + i} GROUP BY sex"
            quoted = s.explain(sql, epsilon=Fraction(1, 3)).epsilon
            ans = s.execute(sql, epsilon=Fraction(1, 3))
            assert ans.epsilon_charged == quoted == Fraction(1, 3)
            total += quoted
            assert ans.epsilon_remaining == Fraction(1000) - total
        b = s.budget()
        assert b.spent == Fraction(10) and b.remaining == Fraction(990) and b.total == Fraction(1000)


@pytest.mark.slow
def test_identical_query_is_answered_from_the_log_at_no_cost(policy: Policy) -> None:
    with QuerySession(policy, "alice") as s:
        first = s.execute("SELECT state, COUNT(*) FROM people GROUP BY state", epsilon=0.5)
        again = s.execute("select  STATE, count(*)\nfrom PEOPLE group by state", epsilon=0.5)
        other_eps = s.execute("SELECT state, COUNT(*) FROM people GROUP BY state", epsilon=0.25)
        assert s.budget().spent == Fraction(3, 4)
    assert again.cached and again.epsilon_charged == 0 and again.rows == first.rows and again.ci95 == first.ci95
    assert not other_eps.cached and other_eps.epsilon_charged == Fraction(1, 4)
    with QuerySession(policy, "bob") as s:  # another analyst pays for their own answer
        assert not s.execute("SELECT state, COUNT(*) FROM people GROUP BY state", epsilon=0.5).cached


@pytest.mark.slow
def test_over_budget_refused_without_charge(policy: Policy) -> None:
    with QuerySession(policy, "bob") as s:
        s.execute("SELECT COUNT(*) FROM people", epsilon=0.75)
        with pytest.raises(BudgetExhausted) as info:
            s.execute("SELECT AVG(age) FROM people", epsilon=0.5)
        assert s.budget().spent == Fraction(3, 4)
    msg = str(info.value)
    assert "0.5" in msg and "0.25" in msg  # requested and remaining


@pytest.mark.slow
def test_release_log_holds_every_statistic(policy: Policy) -> None:
    with QuerySession(policy, "alice") as s:
        ans = s.execute("SELECT sex, AVG(age) FROM people GROUP BY sex", epsilon=1)
    (rel,) = [r for r in list_releases(policy, kind="query") if r.id == ans.release_id]
    assert rel.actor == "alice" and rel.epsilon == 1
    # AVG = hidden count + centred sum, for each of the 3 declared sex values
    assert len(rel.statistics) == 6
    assert {st.mechanism for st in rel.statistics} == {"discrete_laplace", "laplace"}
    assert sum(st.epsilon for st in rel.statistics[::3]) == 1  # one ε share per statistic, 2 statistics
    assert rel.answer is not None and rel.answer["rows"]


def test_bind_errors_cost_nothing(policy: Policy) -> None:
    with QuerySession(policy, "alice") as s:
        with pytest.raises(VeilError):
            s.execute("SELECT COUNT(*) FROM people WHERE age = 'abc'", epsilon=1)
        assert s.budget().spent == 0


def test_public_only_queries_are_free(policy: Policy) -> None:
    with QuerySession(policy, "bob") as s:
        ans = s.execute("SELECT region, COUNT(*) AS n FROM regions GROUP BY region ORDER BY region")
        assert ans.epsilon_charged == 0 and s.budget().spent == 0
    assert ans.rows == (("East", 1), ("South", 1), ("West", 3))
    assert all(c is None for row in ans.ci95 for c in row)


@pytest.mark.slow
def test_describe_without_charge(policy: Policy) -> None:
    with QuerySession(policy, "bob") as s:
        cols = s.describe("SELECT sex, COUNT(*) AS n, AVG(age) * 2 AS a, MAX(age) FROM people GROUP BY sex")
        assert s.budget().spent == 0
    assert [(c.name, c.sql_type) for c in cols] == [("sex", "text"), ("n", "bigint"), ("a", "double"),
                                                     ("MAX(age)", "bigint")]  # fmt: skip


def test_private_groups_below_threshold_are_not_released(policy: Policy) -> None:
    with exact_session(policy, "alice") as s:
        ex = s.explain("SELECT age, COUNT(*) FROM people GROUP BY age", epsilon=1)
        ans = s.execute("SELECT age, COUNT(*) FROM people GROUP BY age", epsilon=1)
    # τ = c + ⌈b·ln(c/δ)⌉ with c = 1, b = 1/ε = 1, δ = 1e-7
    assert ex.partition_threshold == 1 + 17 and ex.partition_delta == Fraction(1, 10**7)
    assert ans.rows and all(n >= ex.partition_threshold for _, n in ans.rows)
    with exact_session(policy, "alice") as s:
        tiny = s.execute("SELECT age, COUNT(*) FROM people WHERE age = 40 AND income < 5000 GROUP BY age", epsilon=1)
    assert tiny.rows == ()  # a handful of rows never forms a released group


@pytest.mark.slow
def test_concurrent_sessions_charge_exactly(policy: Policy) -> None:
    import threading

    errors: list[BaseException] = []

    def work(k: int) -> None:
        try:
            with QuerySession(policy, "alice") as s:
                for i in range(5):
                    s.execute(f"SELECT COUNT(*) FROM people WHERE age > {k * 10 + i}", epsilon=Fraction(1, 7))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, [repr(e) for e in errors]
    with QuerySession(policy, "alice") as s:
        assert s.budget().spent == Fraction(20, 7)
