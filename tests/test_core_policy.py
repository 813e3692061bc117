"""Policy parsing: every documented key, every rejection path, and the docs/policy.md coverage check."""

from __future__ import annotations

import re
from fractions import Fraction
from pathlib import Path

import pytest

from veil.errors import PolicyError
from veil.policy import load_policy, normalise_name

GOOD = """
[database]
path = "w.duckdb"
[ledger]
path = "l.sqlite"
[defaults]
epsilon_per_query = 0.25
partition_delta = 1e-7
confidence = 0.9
[tables.adult]
privacy_unit = "row"
[tables.adult.columns]
age = { type = "int", lower = 17, upper = 90 }
income_usd = { type = "float", lower = 0, upper = 200000 }
sex = { type = "category", values = ["Female", "Male"] }
occupation = { type = "category" }
ok = { type = "bool" }
[tables.visits]
privacy_unit = "person_id"
max_rows_per_unit = 5
[tables.visits.columns]
person_id = { type = "int" }
[tables.regions]
public = true
[analysts.alice]
epsilon = 10.0
"""


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "policy.toml"
    p.write_text(text, encoding="utf-8")
    return p


def test_good_policy_parses_to_exact_values(tmp_path: Path) -> None:
    pol = load_policy(write(tmp_path, GOOD))
    assert pol.database_path == (tmp_path / "w.duckdb").resolve()
    assert pol.ledger_path == (tmp_path / "l.sqlite").resolve()
    assert pol.defaults.epsilon_per_query == Fraction(1, 4)
    assert pol.defaults.partition_delta == Fraction(1, 10**7)
    assert pol.tables["adult"].columns["age"].lower == 17
    assert pol.tables["adult"].columns["sex"].values == ("Female", "Male")
    assert pol.tables["adult"].columns["ok"].values == (False, True)
    assert pol.tables["adult"].privacy_unit is None
    assert pol.tables["visits"].privacy_unit == "person_id"
    assert pol.tables["visits"].max_rows_per_unit == 5
    assert pol.tables["regions"].public
    assert pol.analysts["alice"].epsilon == 10


@pytest.mark.parametrize(
    ("replace", "by", "message"),
    [
        ("epsilon_per_query = 0.25", "epsilon_per_query = -1", "epsilon_per_query must be > 0"),
        ("epsilon_per_query = 0.25", "epsilon_per_qery = 1", "Did you mean 'epsilon_per_query'"),
        ("lower = 17, upper = 90", "lower = 90, upper = 17", "lower 90 > upper 17"),
        ("lower = 17, upper = 90", "lower = 17", "only one of lower/upper"),
        ('type = "float"', 'type = "real"', "Use one of int, float"),
        ('privacy_unit = "person_id"', 'privacy_unit = "person"', "Did you mean 'person_id'"),
        ("max_rows_per_unit = 5", "max_rows_per_unit = 0", "positive integer"),
        ("epsilon = 10.0", 'epsilon = "ten"', "must be a number"),
        ("epsilon = 10.0", "epsilon = nan", "must be finite"),
        ("[tables.regions]\npublic = true", '[tables.regions]\npublic = "yes"', "true or false"),
        ("epsilon = 10.0", "epsilon = 10.0\ndelta = nan", "finite number in (0, 1)"),
        ("epsilon = 10.0", "epsilon = 10.0\ndelta = inf", "finite number in (0, 1)"),
        ("epsilon = 10.0", "epsilon = 10.0\ndelta = -inf", "finite number in (0, 1)"),
        ("epsilon = 10.0", f"epsilon = 10.0\ndelta = {10**400}", "must be in [0, 1)"),
        ("partition_delta = 1e-7", "partition_delta = nan", "finite number in (0, 1)"),
        ("partition_delta = 1e-7", "partition_delta = inf", "finite number in (0, 1)"),
        ("epsilon_per_query = 0.25", "epsilon_per_query = inf", "must be finite"),
    ],
)
def test_bad_policy_is_rejected_with_named_key(tmp_path: Path, replace: str, by: str, message: str) -> None:
    assert replace in GOOD
    with pytest.raises(PolicyError) as info:
        load_policy(write(tmp_path, GOOD.replace(replace, by, 1)))
    assert message in str(info.value)


@pytest.mark.parametrize("text", ["0.001", "0.1", "0.3", "1e-3", "0.007", "2.675"])
def test_decimal_numbers_mean_what_they_say(tmp_path: Path, text: str) -> None:
    """A number written in decimal is that exact decimal (not its binary float): ε = 0.001 at a
    minimum of 0.001 is accepted, and budgets add up exactly."""
    pol = load_policy(
        write(tmp_path, GOOD.replace("epsilon_per_query = 0.25", f"epsilon_per_query = {text}\nmin_epsilon_per_query = {text}"))
    )
    assert pol.defaults.epsilon_per_query == Fraction(text) == pol.defaults.min_epsilon_per_query


def test_missing_policy_file_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match=r"does not exist.*--policy"):
        load_policy(tmp_path / "nope.toml")


def test_invalid_toml(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="not valid TOML"):
        load_policy(write(tmp_path, "[database\n"))


def test_normalise_name_mapping() -> None:
    assert normalise_name("hours-per-week") == "hours_per_week"
    assert normalise_name(" Capital Gain ") == "capital_gain"
    assert normalise_name("2nd-score") == "c_2nd_score"


def test_every_policy_key_is_documented() -> None:
    """Each key the parser accepts appears in docs/policy.md (Datasette's "every setting documented")."""
    from veil import policy as mod

    doc = (Path(__file__).resolve().parent.parent / "docs" / "policy.md").read_text(encoding="utf-8")
    keys = set(mod._TOP_KEYS) | mod._TABLE_KEYS | mod._COLUMN_KEYS | mod._DEFAULT_KEYS | mod._ENGINE_KEYS | {"path", "epsilon"}
    documented = set(re.findall(r"`([a-z_]+)`", doc)) | set(re.findall(r"\[([a-z_]+)[.\]]", doc))
    missing = sorted(keys - documented)
    assert not missing, f"undocumented policy keys: {missing}"


@pytest.mark.parametrize(
    ("ctype", "values"),
    [
        ("int", "[1.5, 2]"), ("int", "[1, true]"), ("int", "[1e300]"), ("int", "[9223372036854775807, 2020-01-01]"),
        ("int", '["1", 2]'), ("category", "[1, 2]"), ("category", '["a", [1]]'), ("category", '["a", { b = 1 }]'),
        ("bool", "[true, 1]"),
    ],
)  # fmt: skip
def test_declared_values_must_be_of_the_columns_type(tmp_path: Path, ctype: str, values: str) -> None:
    # a value of another type never meets the engine's groups (or crashes the post-processing after the charge)
    (tmp_path / "p.toml").write_text(
        f'[tables.t]\n[tables.t.columns]\nc = {{ type = "{ctype}", values = {values} }}\n', encoding="utf-8"
    )
    with pytest.raises(PolicyError, match=f"not a {ctype} value"):
        load_policy(tmp_path / "p.toml")
