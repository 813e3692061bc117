"""A setting is the same parameter however PostgreSQL lets a client spell its name (red team s36 left: `SET
"veil.epsilon" = x` was accepted and changed nothing, so the analyst was charged the default ε while believing
they had set another); a SET form the reader does not know is refused when it mentions Veil, never ignored."""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import psycopg
import pytest

from tests.support.server import build_policy, dsn, running_server
from veil.errors import ParseError, UnknownSetting
from veil.server.settings import SessionSettings

SPELLINGS = (
    "veil.epsilon",
    "VEIL.EPSILON",
    '"veil.epsilon"',
    '"VEIL.EPSILON"',
    'veil."epsilon"',
    '"veil"."epsilon"',
    "veil . epsilon",
    '"Veil"."Epsilon"',
)
FORMS = ("SET {n} = {v}", "SET {n} TO {v}", "SET SESSION {n} = '{v}'", "set local {n} to '{v}'")


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("name", SPELLINGS)
def test_every_spelling_of_veil_epsilon_sets_it(name: str, form: str) -> None:
    settings = SessionSettings({})
    settings.set_statement(form.format(n=name, v="0.25"), apply=True)
    assert settings.epsilon == Fraction(1, 4)
    shown = settings.show(settings.show_name(f"SHOW {name}"), default_epsilon=Fraction(1), server_version="x")
    assert shown.rows == [("0.25",)]
    settings.reset_statement(f"RESET {name}", apply=True)
    assert settings.epsilon is None


@pytest.mark.parametrize(
    "sql",
    [
        'SET "veil.epsilon" 0.25',  # no = or TO
        "SET veil.epsilon FROM 0.25",
        'SET "veil.epsilon = 0.25',  # unbalanced quote
        "SET veil..epsilon = 0.25",
    ],
)
def test_an_unreadable_set_of_a_veil_setting_is_refused(sql: str) -> None:
    settings = SessionSettings({})
    with pytest.raises(ParseError):
        settings.set_statement(sql, apply=True)
    assert settings.epsilon is None


@pytest.mark.parametrize("name", ['"veil.epsilonx"', 'veil."budgets"', '"veil.show ci"'])
def test_an_unknown_quoted_veil_setting_is_named(name: str) -> None:
    with pytest.raises(UnknownSetting):
        SessionSettings({}).set_statement(f"SET {name} = 1", apply=True)


def test_driver_sets_are_still_accepted() -> None:
    settings = SessionSettings({})
    for sql in (
        "SET TIME ZONE 'UTC'",
        "SET extra_float_digits = 3",
        "SET application_name = 'PostgreSQL JDBC Driver'",
        "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL READ COMMITTED",
        'SET "search_path" TO public',
    ):
        assert settings.set_statement(sql, apply=True).tag == "SET"
    assert settings.values["search_path"] == "public"


@pytest.fixture(scope="module")
def port(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[int]:
    policy: Path = build_policy(tmp_path_factory.mktemp("names"), request.getfixturevalue("shared_data"), rows=300)
    with running_server(policy) as st:
        yield st.port  # type: ignore[attr-defined]


def test_a_quoted_set_changes_the_charge_on_the_wire(port: int) -> None:
    with psycopg.connect(dsn(port), autocommit=True) as conn:
        before = Fraction(conn.execute("SELECT spent FROM veil.budget").fetchone()[0])
        conn.execute('SET "veil.epsilon" = 0.125')
        assert conn.execute("SHOW veil.epsilon").fetchone() == ("0.125",)
        conn.execute("SELECT COUNT(*) FROM adult WHERE age > 30").fetchall()
        after = Fraction(conn.execute("SELECT spent FROM veil.budget").fetchone()[0])
        assert after - before == Fraction(1, 8)


# -- the startup packet (red team s46 A2: `options='-c veil.epsilon=0.001'` was ignored, the default ε charged) -------


@pytest.mark.parametrize(
    "params",
    [
        {"options": "-c veil.epsilon=0.001"},
        {"options": "-cveil.epsilon=0.001 -c statement_timeout=5s"},
        {"options": "--veil.epsilon=0.001"},
        {"VEIL.EPSILON": "0.001"},  # asyncpg's server_settings: a startup parameter of its own
    ],
)
def test_startup_settings_are_applied(params: dict[str, str]) -> None:
    from veil.server.settings import startup_settings

    settings = SessionSettings({})
    for name, value in startup_settings({"user": "a", "database": "veil", **params}):
        settings.set(name, value, apply=True)
    assert settings.epsilon == Fraction(1, 1000)


@pytest.mark.parametrize(
    ("params", "error"),
    [
        ({"options": "-c veil.epsilon=0"}, "must be > 0"),
        ({"options": "-c veil.seed=1"}, "unrecognized configuration parameter"),
        ({"veil.noise": "off"}, "unrecognized configuration parameter"),
        ({"options": "-c veil.epsilon"}, "cannot read the startup option"),
        ({"options": "veil.epsilon=0.1"}, "cannot read the startup option"),
        ({"options": "-c statement_timeout=soon"}, "invalid value for a time setting"),
    ],
)
def test_a_startup_setting_veil_cannot_apply_ends_the_login(port: int, params: dict[str, str], error: str) -> None:
    extra = " ".join(f"{k}='{v}'" for k, v in params.items() if k == "options")
    if extra:
        with pytest.raises(psycopg.OperationalError, match=error):
            psycopg.connect(f"{dsn(port)} {extra}", autocommit=True)
    else:
        from veil.errors import VeilError
        from veil.server.settings import startup_settings

        with pytest.raises(VeilError, match=error):
            startup_settings(params)


def test_startup_settings_charge_what_they_say_and_other_parameters_change_nothing(port: int) -> None:
    url = f"{dsn(port)} options='-c veil.epsilon=0.125 -c statement_timeout=7s -c search_path=x' application_name=veil.x"
    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute("SHOW veil.epsilon").fetchone() == ("0.125",)
        assert conn.execute("SHOW statement_timeout").fetchone() == ("7s",)
        before = Fraction(conn.execute("SELECT spent FROM veil.budget").fetchone()[0])
        conn.execute("SELECT COUNT(*) FROM adult WHERE age > 31").fetchall()
        after = Fraction(conn.execute("SELECT spent FROM veil.budget").fetchone()[0])
        assert after - before == Fraction(1, 8)


def test_set_local_ends_with_its_transaction() -> None:
    settings = SessionSettings({})
    settings.set_statement("SET veil.epsilon = 0.5", apply=True)
    settings.set_statement("SET LOCAL veil.epsilon = 2", apply=True, in_transaction=True)
    settings.set_statement("SET LOCAL veil.show_ci = on", apply=True, in_transaction=True)
    settings.set_statement("SET LOCAL veil.epsilon = 3", apply=True, in_transaction=True)
    assert (settings.epsilon, settings.show_ci) == (Fraction(3), True)
    settings.end_transaction()
    assert (settings.epsilon, settings.show_ci) == (Fraction(1, 2), False)
    assert settings.values == {"veil.epsilon": "0.5"}
    settings.set_statement("SET LOCAL veil.epsilon = 2", apply=True)  # outside a block: for the session (s40)
    settings.end_transaction()
    assert settings.epsilon == Fraction(2)


def test_a_refused_set_leaves_the_transactions_set_local_scoped() -> None:
    """(review) A refused ``SET`` after a ``SET LOCAL`` of the same name dropped it from the transaction's bookkeeping
    before the refusal, so the ``SET LOCAL`` outlived the transaction."""
    from veil.errors import InputError

    settings = SessionSettings({})
    settings.set_statement("SET LOCAL veil.epsilon = 5", apply=True, in_transaction=True)
    with pytest.raises(InputError):
        settings.set_statement("SET veil.epsilon = 'abc'", apply=True, in_transaction=True)
    settings.end_transaction()
    assert settings.epsilon is None


def test_savepoints_open_at_once_are_bounded(port: int) -> None:
    from veil.server.held import MAX_SAVEPOINTS

    with psycopg.connect(dsn(port)) as conn:  # a transaction: psycopg begins one before the first statement
        for i in range(MAX_SAVEPOINTS):
            conn.execute(f"SAVEPOINT s{i}")
        with pytest.raises(psycopg.Error) as refused:
            conn.execute("SAVEPOINT past")
        assert refused.value.sqlstate == "53400"
