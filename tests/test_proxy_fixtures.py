"""Golden accept/reject twins (tests/fixtures/sql/twins.toml) and the shared proxy test warehouse."""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import veil.errors as errors
from tests.conftest import policy_text
from veil.policy import Policy, load_policy
from veil.proxy.session import QuerySession

TWINS = tomllib.loads((Path(__file__).parent / "fixtures" / "sql" / "twins.toml").read_text("utf-8"))["case"]

PROXY_POLICY = policy_text("proxy")


def people_frame(n: int = 3000, seed: int = 7) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    age = rng.integers(17, 91, n)
    income = np.round((rng.gamma(2.0, 20000.0, n) + age * 100.0).clip(0, 200000), 2)
    df = pd.DataFrame(
        {
            "age": age,
            "income": income,
            "sex": rng.choice(["Female", "Male"], n),
            "state": rng.choice(["CA", "NY", "TX", "WA", "OR"], n, p=[0.35, 0.25, 0.2, 0.12, 0.08]),
            "zip": rng.integers(10000, 99999, n),
            "age_offset": rng.integers(-5, 6, n),
        }
    )
    df.loc[rng.random(n) < 0.05, "income"] = np.nan  # some NULLs
    return df


def visits_frame(n_users: int = 800, seed: int = 3) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    per = rng.integers(1, 8, n_users)  # 1..7 rows per user; max_rows_per_unit = 5 trims some
    uid = np.repeat(np.arange(n_users), per)
    return pd.DataFrame(
        {
            "user_id": uid,
            "amount": np.round(rng.uniform(0, 100, len(uid)), 2),
            "kind": rng.choice(["a", "b"], len(uid)),
        }
    )


REGIONS = pd.DataFrame({"state": ["CA", "NY", "TX", "WA", "OR"], "region": ["West", "East", "South", "West", "West"]})


def make_proxy_policy(tmp_path: Path) -> Policy:
    from veil.store.warehouse import write_table

    path = tmp_path / "policy.toml"
    path.write_text(PROXY_POLICY, encoding="utf-8")
    policy = load_policy(path)
    write_table(policy, "people", people_frame(), replace=True)
    write_table(policy, "visits", visits_frame(), replace=True)
    write_table(policy, "regions", REGIONS, replace=True)
    return policy


@pytest.fixture(scope="module")
def proxy_policy(tmp_path_factory: pytest.TempPathFactory) -> Policy:
    return make_proxy_policy(tmp_path_factory.mktemp("proxy"))


def _eps(case: dict[str, object], key: str) -> float | None:
    v = case.get(key)
    return None if v is None else float(v)  # type: ignore[arg-type]


@pytest.mark.parametrize("case", TWINS, ids=[c["name"] for c in TWINS])
def test_twin_accepted(case: dict[str, object], proxy_policy: Policy) -> None:
    with QuerySession(proxy_policy, "alice") as s:
        ex = s.explain(str(case["accept"]), epsilon=_eps(case, "accept_epsilon"))
        assert ex.public or ex.epsilon > 0
        ans = s.execute(str(case["accept"]), epsilon=_eps(case, "accept_epsilon"))
        assert ans.columns
        assert not ans.cached, "accept queries are distinct: each one is answered and charged afresh"
        assert ans.epsilon_charged == (0 if ex.public else ex.epsilon)


def test_accept_queries_are_distinct() -> None:
    """Each accept twin is its own query (a repeated one would come from the answer cache, uncharged)."""
    accepts = [str(c["accept"]).rstrip(";").strip() for c in TWINS]
    assert len(set(accepts)) == len(accepts)


@pytest.mark.parametrize("case", TWINS, ids=[c["name"] for c in TWINS])
def test_twin_rejected_without_charge(case: dict[str, object], proxy_policy: Policy) -> None:
    err = getattr(errors, str(case["error"]))
    with QuerySession(proxy_policy, "bob") as s:
        before = s.budget().spent
        with pytest.raises(err) as info:
            s.execute(str(case["reject"]), epsilon=_eps(case, "reject_epsilon"))
        assert s.budget().spent == before
    exc = info.value
    assert isinstance(exc, errors.VeilError)
    assert exc.sqlstate and len(exc.sqlstate) == 5
    assert "Traceback" not in str(exc)


def test_messages_help(proxy_policy: Policy) -> None:
    with QuerySession(proxy_policy, "bob") as s:
        with pytest.raises(errors.UnknownTable) as t:
            s.execute("SELECT COUNT(*) FROM peple")
        with pytest.raises(errors.UnknownColumn) as c:
            s.execute("SELECT AVG(agee) FROM people")
        with pytest.raises(errors.ParseError) as p:
            s.execute("SELECT COUNT(*) FROM people WHERE age >")
        with pytest.raises(errors.BudgetExhausted) as b:
            s.execute("SELECT COUNT(*) FROM people", epsilon=5)
    assert "people" in str(t.value)
    assert "'age'" in str(c.value)
    assert "line 1" in str(p.value) and "column" in str(p.value)
    assert "5" in str(b.value) and "remaining" in str(b.value)


def test_unknown_column_declared_elsewhere_names_that_table(proxy_policy: Policy) -> None:
    """A column of another table is not suggested as a "Did you mean" of itself."""
    with QuerySession(proxy_policy, "bob") as s, pytest.raises(errors.UnknownColumn) as info:
        s.execute("SELECT COUNT(*) FROM people WHERE user_id = 3")
    assert "declared only in table visits" in str(info.value)
    assert "Did you mean 'user_id'" not in str(info.value)
