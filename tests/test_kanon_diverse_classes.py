"""Diverse classes by construction (red team s20b F4, and s64 F10 before it).

``kanon --sensitive`` used to publish a class's sensitive column as NULL when its commonest value was more than 90 % of
the class (``suppress_homogeneous``). The NULL was itself a marker — "this class is > 90 % one value" — and on a skewed
column that value is the majority: on 3,000 Adult rows (``mondrian``, k = 5, ``--qi age,sex,hours_per_week --sensitive
income``) 968 rows were NULL and reading them as ``<=50K`` was right for 947 (0.978, base rate 0.755).

The class-level property, for every algorithm, several k and several caps ``p`` (``max_share``, (α, k)-anonymity,
Wong et al. 2006): every published class holds at least k rows and its commonest sensitive value is at most ``p`` of
them, with nothing published NULL; so an attacker's best guess of a member's value from the class's published data is
right for at most ``p`` of the class. When the whole table's commonest value is above ``p`` no partition can meet it,
and the publication is refused (typed, free, naming the column and its share).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from veil.errors import InputError, VacuousParameter
from veil.generators.kanon import KAnonConfig, anonymise

ALGORITHMS = ["mondrian", "mondrian-relaxed", "oka", "kma"]
_QI = ("age", "sex", "hours_per_week")


def _worst_share(labels: np.ndarray, values: pd.Series) -> float:
    """The largest share of its class that one sensitive value holds (what a best-guess attacker gets right)."""
    frame = pd.DataFrame({"c": labels, "v": values.astype(str).to_numpy()})
    top = frame.groupby("c")["v"].agg(lambda s: s.value_counts().iloc[0] / len(s))
    return float(top.max())


def _guess_accuracy(labels: np.ndarray, values: pd.Series) -> float:
    """Share of rows whose value equals their class's commonest value (the attacker reads the class, guesses its mode)."""
    frame = pd.DataFrame({"c": labels, "v": values.astype(str).to_numpy()})
    hits = frame.groupby("c")["v"].agg(lambda s: s.value_counts().iloc[0])
    return float(hits.sum() / len(frame))


@pytest.fixture(scope="module")
def adult3000(shared_data: Path) -> pd.DataFrame:
    from veil.datasets import load_adult

    return load_adult().head(3000)[[*_QI, "income"]].dropna().reset_index(drop=True)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize(("k", "p"), [(2, 0.9), (5, 0.9), (10, 0.85)])
def test_every_adult_class_is_diverse(adult3000: pd.DataFrame, algorithm: str, k: int, p: float) -> None:
    config = KAnonConfig(qi=_QI, k=k, algorithm=algorithm, sensitive=("income",), max_share=p, seed=0)
    result = anonymise(adult3000, config, rng=np.random.default_rng(0))
    income = result.table["income"]
    assert income.notna().all()  # nothing suppressed: no marker
    assert result.min_class_size >= k
    assert _worst_share(result.labels, income) <= p + 1e-12, algorithm
    # the published table's classes (rows equal on the published QIs) are the generator's classes
    published = result.table.groupby(list(_QI)).ngroup().to_numpy()
    assert _worst_share(published, income) <= p + 1e-12


@pytest.mark.parametrize("algorithm", ["mondrian", "oka", "kma"])
def test_f4_witness_publication(adult_policy: object, algorithm: str) -> None:
    """The red team's command, through the publish transaction: the analyst reads the public table, groups it by its
    QIs, and guesses each row's income as its class's commonest (non-NULL) value. Measured before the fix (mondrian):
    968 NULL rows, the NULL read as ``<=50K`` right for 947 (0.978)."""
    import veil as veil_api
    from veil.generators.transaction import publish
    from veil.policy import load_policy

    path = adult_policy(rows=3000)  # type: ignore[operator]
    policy = load_policy(path)
    request = {
        "table": "adult",
        "algorithm": algorithm,
        "k": 5,
        "qi": list(_QI),
        "sensitive": ["income"],
        "output": "pub",
        "seed": 0,
    }
    result = publish(policy, "kanon", request, progress=False)
    with veil_api.connect(path, analyst="alice") as db:
        pub = db.sql(f"SELECT {', '.join(_QI)}, income FROM pub")
    assert pub["income"].notna().all(), f"{int(pub['income'].isna().sum())} rows published NULL: a composition marker"
    classes = pub.groupby(list(_QI), dropna=False).ngroup().to_numpy()
    assert _worst_share(classes, pub["income"]) <= 0.9
    assert _guess_accuracy(classes, pub["income"]) <= 0.9
    from veil.store.releases import list_releases

    record = [r for r in list_releases(policy, kind="publication") if r.table == "pub"][-1]
    assert "sensitive_suppressed_rows" not in record.metrics
    assert result.rows == len(pub)


def _skewed(draw: st.DrawFn) -> tuple[pd.DataFrame, int, float, str, str]:
    n = draw(st.integers(20, 120))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    top = draw(st.sampled_from([0.5, 0.7, 0.8, 0.88, 0.95]))
    n_values = draw(st.integers(2, 3))
    x = rng.integers(0, 40, n)
    # the skew follows the QI (as income follows age): low x is nearly all the top value
    p_top = np.clip(top + (20 - x) / 40, 0.0, 1.0)
    s = np.where(rng.random(n) < p_top, "v0", rng.choice([f"v{i}" for i in range(1, n_values)], n))
    frame = pd.DataFrame({"x": x, "g": rng.choice(list("ab"), n), "s": s, "t": rng.choice(["u", "w"], n, p=[0.6, 0.4])})
    k = draw(st.integers(2, 6))
    p = draw(st.sampled_from([0.6, 0.75, 0.9]))
    algorithm = draw(st.sampled_from(ALGORITHMS))
    return frame, k, p, algorithm, draw(st.sampled_from(["gain", "median"]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_skewed_synthetic_tables(data: st.DataObject) -> None:
    """Any table, k, cap and algorithm: either every class is diverse in both sensitive columns, or the cap is below a
    column's global top share and the refusal says so (deterministic: no false failures)."""
    frame, k, p, algorithm, split = data.draw(st.composite(lambda draw: _skewed(draw))())
    config = KAnonConfig(qi=("x", "g"), k=k, algorithm=algorithm, sensitive=("s", "t"), max_share=p, split=split, seed=0)
    shares = {c: float(frame[c].value_counts(normalize=True).iloc[0]) for c in ("s", "t")}
    if len(frame) < k:
        return
    if max(shares.values()) > p:
        with pytest.raises(InputError) as info:
            anonymise(frame, config)
        first = next(c for c in ("s", "t") if shares[c] > p)  # the first column that cannot be met is named
        assert repr(first) in str(info.value) and info.value.sqlstate == "22023" and info.value.hint
        return
    result = anonymise(frame, config, rng=np.random.default_rng(0))
    assert result.min_class_size >= k
    for column in ("s", "t"):
        assert result.table[column].notna().all()
        assert _worst_share(result.labels, result.table[column]) <= p + 1e-12, (algorithm, column)


def test_infeasible_cap_is_refused_free(tmp_path: Path) -> None:
    """A column whose commonest value is 95 % of the table cannot have every class at 90 %: refused before anything is
    written or recorded, naming the column and its share."""
    from veil.generators.transaction import publish
    from veil.policy import load_policy
    from veil.store.releases import list_releases
    from veil.store.warehouse import table_names, write_table

    policy_text = (
        '[database]\npath = "warehouse.duckdb"\n[ledger]\npath = "ledger.sqlite"\n'
        '[tables.people]\nprivacy_unit = "row"\n[tables.people.columns]\n'
        'age = { type = "int", lower = 17, upper = 90 }\n'
        'flag = { type = "category", values = ["no", "yes"] }\n'
        "[analysts.bob]\nepsilon = 2.0\n"
    )
    path = tmp_path / "policy.toml"
    path.write_text(policy_text, encoding="utf-8")
    policy = load_policy(path)
    rng = np.random.default_rng(3)
    frame = pd.DataFrame({"age": rng.integers(18, 80, 200), "flag": ["yes"] * 10 + ["no"] * 190})
    write_table(policy, "people", frame)
    request = {"table": "people", "algorithm": "mondrian", "k": 5, "qi": ["age"], "sensitive": ["flag"], "output": "pub"}
    with pytest.raises(InputError) as info:
        publish(policy, "kanon", request, progress=False)
    assert "'flag'" in str(info.value) and "0.95" in str(info.value) and info.value.sqlstate == "22023"
    assert info.value.hint
    assert "pub" not in table_names(policy)
    assert not [r for r in list_releases(policy, kind="publication") if r.table == "pub"]
    # a cap at the global share is met (the whole table is one class at worst)
    request = {**request, "max_share": 0.95}
    with pytest.raises(VacuousParameter):  # above the house's 0.9 bound: refused whatever the data
        publish(policy, "kanon", request, progress=False)


@pytest.mark.parametrize("p", [0.0, -0.1, 0.91, 1.0, float("nan")])
def test_cap_outside_range_is_refused(p: float) -> None:
    with pytest.raises(InputError):
        KAnonConfig(qi=("a",), k=2, sensitive=("s",), max_share=p)


def test_the_cap_is_met_at_the_global_share_exactly() -> None:
    frame = pd.DataFrame({"a": range(20), "s": ["x"] * 18 + ["y"] * 2})  # x: 0.9 of the table
    for algorithm in ALGORITHMS:
        result = anonymise(frame, KAnonConfig(qi=("a",), k=2, algorithm=algorithm, sensitive=("s",), max_share=0.9, seed=0))
        assert _worst_share(result.labels, result.table["s"]) <= 0.9


def test_cli_max_share(adult_policy: object) -> None:
    """``--max-share`` reaches the algorithm: 0.8 is met on Adult (income's top share 0.755), 0.7 is refused (exit 2,
    naming the column and its share), nothing written."""
    from click.testing import CliRunner

    import veil as veil_api
    from veil.cli.main import cli

    path = adult_policy(rows=3000)  # type: ignore[operator]
    base = ["publish", "kanon", "--policy", str(path), "--table", "adult", "--algorithm", "mondrian", "--k", "5"]
    base += ["--qi", ",".join(_QI), "--sensitive", "income"]
    refused = CliRunner().invoke(cli, [*base, "--max-share", "0.7", "--output", "p70"], catch_exceptions=False)
    assert refused.exit_code == 2 and "'income'" in refused.stderr and "0.7553" in refused.stderr, refused.stderr
    done = CliRunner().invoke(cli, [*base, "--max-share", "0.8", "--output", "p80"], catch_exceptions=False)
    assert done.exit_code == 0, done.stderr
    with veil_api.connect(path, analyst="alice") as db:
        pub = db.sql(f"SELECT {', '.join(_QI)}, income FROM p80")
    classes = pub.groupby(list(_QI), dropna=False).ngroup().to_numpy()
    assert pub["income"].notna().all() and _worst_share(classes, pub["income"]) <= 0.8
    from veil.policy import load_policy
    from veil.store.warehouse import table_names

    assert "p70" not in table_names(load_policy(path))


def test_published_classes_are_checked_again_with_the_som_column() -> None:
    """The SOM neuron splits the algorithm's classes (it is grouped on like a QI): a (QIs, neuron) class that is not
    diverse refuses the table; without a SOM column the same finding is a bug (the algorithms make classes diverse)."""
    from veil.errors import InternalError, PublicationRefused
    from veil.generators.plugins.kanon import _require_diverse

    table = pd.DataFrame({"q": ["a"] * 10, "som_neuron": [0] * 5 + [1] * 5, "s": ["x"] * 5 + ["x", "y", "x", "y", "x"]})
    assert _require_diverse(table, ["q"], ["s"], 0.9, "pub", []) == {"s": 0.8}
    with pytest.raises(PublicationRefused, match="som_neuron"):
        _require_diverse(table, ["q", "som_neuron"], ["s"], 0.9, "pub", ["gain"])
    with pytest.raises(InternalError):
        _require_diverse(table, ["q", "som_neuron"], ["s"], 0.9, "pub", [])


_PEOPLE_POLICY = (
    '[database]\npath = "warehouse.duckdb"\n[ledger]\npath = "ledger.sqlite"\n'
    '[tables.people]\nprivacy_unit = "row"\n[tables.people.columns]\n'
    'age = { type = "int", lower = 17, upper = 90 }\n'
    'flag = { type = "category", values = ["no", "yes"] }\n'
    "[analysts.bob]\nepsilon = 2.0\n"
)


@pytest.mark.parametrize("share", ["0.5", "0.9", "0.8", "1.5"])
@pytest.mark.parametrize("sensitive", [None, ""])
def test_max_share_without_sensitive_is_refused_naming_the_flag(tmp_path: Path, share: str, sensitive: str | None) -> None:
    """Review s21: ``--max-share`` bounds the sensitive columns' shares; without ``--sensitive`` it was silently
    ignored (any value, the default's included, even one out of range). Refused (InputError, exit 2) naming the flag and
    what to do, before anything is read, written or recorded; the library's request alike."""
    from click.testing import CliRunner

    from veil.cli.main import cli
    from veil.generators.transaction import publish
    from veil.policy import load_policy
    from veil.store.warehouse import table_names, write_table

    path = tmp_path / "policy.toml"
    path.write_text(_PEOPLE_POLICY, encoding="utf-8")
    write_table(load_policy(path), "people", pd.DataFrame({"age": range(20, 60), "flag": ["no", "yes"] * 20}))
    args = ["publish", "kanon", "--policy", str(path), "--table", "people", "--algorithm", "mondrian", "--k", "5"]
    args += ["--qi", "age", "--max-share", share, "--output", "pub"]
    if sensitive is not None:
        args += ["--sensitive", sensitive]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 2, result.output
    assert "--max-share" in result.stderr and "--sensitive" in result.stderr, result.stderr
    request = {"table": "people", "algorithm": "mondrian", "k": 5, "qi": ["age"], "max_share": float(share), "output": "pub"}
    with pytest.raises(InputError, match="--max-share") as info:
        publish(load_policy(path), "kanon", request, progress=False)
    assert "--sensitive" in (info.value.hint or "")
    assert "pub" not in table_names(load_policy(path))


@pytest.mark.parametrize("extra", [[], ["--sensitive", "flag", "--max-share", "0.8"], ["--sensitive", "flag"]])
def test_without_max_share_or_with_sensitive_kanon_publishes(tmp_path: Path, extra: list[str]) -> None:
    """The twins: no ``--max-share`` and no ``--sensitive`` publishes (the default applies to nothing), and so do
    ``--sensitive`` with and without ``--max-share``."""
    from click.testing import CliRunner

    from veil.cli.main import cli
    from veil.policy import load_policy
    from veil.store.warehouse import table_names, write_table

    path = tmp_path / "policy.toml"
    path.write_text(_PEOPLE_POLICY, encoding="utf-8")
    write_table(load_policy(path), "people", pd.DataFrame({"age": list(range(20, 60)) * 2, "flag": ["no", "yes"] * 40}))
    args = ["publish", "kanon", "--policy", str(path), "--table", "people", "--algorithm", "mondrian", "--k", "5"]
    done = CliRunner().invoke(cli, [*args, "--qi", "age", *extra, "--output", "pub"], catch_exceptions=False)
    assert done.exit_code == 0, done.output
    assert "pub" in table_names(load_policy(path))
