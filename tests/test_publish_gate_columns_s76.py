"""The publication gate's column rules (red team s76 F4-F6, the classes behind them).

* F4 — a float column publishes no ``-0.0``: ``as_declared`` (what ``publication.published_column`` writes, and the
  source form the rare-value rule compares) gives every zero as ``0.0``; the rule counted ``-0`` among the zeros while
  DuckDB printed and grouped it apart (one person's sign published). A property over lists of floats and texts.
* F5 — a published column is the policy's (declared in its table spec) or the plug-in's own, declared in
  ``Publication.own_columns`` with a domain the gate holds it to; any other is refused, whatever its name or content
  (a synthesised column under a new name was published unchecked).
* F6 — ``max_share`` holds on the quasi-identifier classes refined by the other sensitive columns (multi-attribute
  diversity): whoever knows a person's other sensitive values may not read this one with more than ``max_share``
  confidence (two sensitive columns, one giving the other in every class, passed).

Deterministic (hypothesis draws shapes and names, never a verdict by chance): no false failures.
"""

from __future__ import annotations

from types import SimpleNamespace

import duckdb
import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from veil.errors import PublicationRefused
from veil.generators import gate
from veil.generators.publication import ColumnProtection, Plan, Publication, published_column
from veil.policy import ColumnSpec
from veil.store.declared_types import as_declared

_FLOATS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=False, width=64),
    st.sampled_from([0.0, -0.0, -1e-300, 1e-300]),
    st.sampled_from(["-0", "-0.0", "0", "+0", "-0e5", "-4e-1", "x", ""]),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values=st.lists(_FLOATS, min_size=1, max_size=20))
def test_a_published_float_column_holds_no_negative_zero(values: list[object]) -> None:
    """Every published float equals its source value, with zeros as ``0.0``: DuckDB shows no ``-0.0`` and groups
    every zero together."""
    series = pd.Series(values, dtype=object)
    spec = SimpleNamespace(columns={"v": SimpleNamespace(type="float", lower=None, upper=None, values=None)})
    pub = Publication(method="m", guarantee="g", columns=(ColumnProtection("v", "sensitive"),))
    for out in (as_declared(series, "float"), published_column(series, "v", pub, spec)):
        numbers = out.to_numpy(dtype=float, na_value=np.nan)
        assert not np.any((numbers == 0) & np.signbit(numbers))
        expected = pd.to_numeric(series, errors="coerce").to_numpy(dtype=float)
        assert np.array_equal(numbers, expected, equal_nan=True)  # -0.0 == 0.0: no other value changes
        con = duckdb.connect()
        con.register("t", pd.DataFrame({"v": out}))
        shown = {r[0] for r in con.execute("SELECT v::VARCHAR FROM t").fetchall()}
        assert "-0.0" not in shown


_NUMBERS = {"x": (0.0, 100.0), "y": (0.0, 10.0)}


def _numbers_spec() -> SimpleNamespace:
    return SimpleNamespace(columns={c: ColumnSpec(c, "int", lo, hi) for c, (lo, hi) in _NUMBERS.items()})


def _synthetic(frame: pd.DataFrame, own: dict[str, ColumnSpec] | None = None) -> Publication:
    columns = tuple(ColumnProtection(str(c), "synthesised", "test") for c in frame.columns)
    return Publication(method="gan", guarantee="none", frame=frame, columns=columns, synthetic=True, own_columns=own or {})


def _verify(pub: Publication, train: pd.DataFrame) -> None:
    plan = Plan(kind="sdc", method="gan", source="t", output="o", params={}, holdout=0.2)
    holdout = pd.DataFrame({"x": np.arange(20) % 100, "y": np.arange(20) % 10})
    gate.verify(plan, pub, train=train, holdout=holdout, spec=_numbers_spec(), generator=np.random.default_rng(1))


def _tables() -> tuple[pd.DataFrame, pd.DataFrame]:
    rng = np.random.default_rng(0)
    train = pd.DataFrame({"x": rng.integers(0, 101, 200), "y": rng.integers(0, 11, 200)})
    fresh = pd.DataFrame({"x": rng.integers(0, 101, 200), "y": rng.integers(0, 11, 200)})
    return train, fresh


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.text(st.characters(min_codepoint=33, max_codepoint=0x2FF), min_size=1, max_size=12).filter(
        lambda s: s not in _NUMBERS
    ),
    content=st.sampled_from(["rows", "numbers", "constant"]),
)
def test_a_column_neither_declared_nor_the_plugins_own_is_refused(name: str, content: str) -> None:
    train, fresh = _tables()
    extra = {
        "rows": train.astype(str).agg("|".join, axis=1),
        "numbers": pd.Series(np.arange(len(fresh)) % 7),
        "constant": pd.Series(["x"] * len(fresh)),
    }[content]
    frame = fresh.assign(**{name: extra.to_numpy()})
    with pytest.raises(PublicationRefused, match="neither declared"):
        _verify(_synthetic(frame), train)


def test_the_plugins_own_column_is_held_to_its_declared_domain() -> None:
    """An own column with its domain is published; out of that domain it is refused (as a policy column)."""
    train, fresh = _tables()
    own = {"neuron": ColumnSpec("neuron", "int", 0.0, 9.0)}
    _verify(_synthetic(fresh.assign(neuron=np.arange(len(fresh)) % 10), own), train)
    with pytest.raises(PublicationRefused, match="outside the declared"):
        _verify(_synthetic(fresh.assign(neuron=np.arange(len(fresh)) % 12), own), train)


def _classes(n_sensitive: int, flip: bool) -> pd.DataFrame:
    """Six classes of 24 rows on ``q``; ``s1`` 2-diverse in each (share 0.5), and given the other sensitive columns
    certain (the mapping flips between classes when ``flip``: no population statistic)."""
    rows = []
    for c in range(6):
        label = f"[{20 + 10 * c}-{30 + 10 * c})"
        for i in range(24):
            others = [f"v{(i // 12 + j) % 2}" for j in range(n_sensitive - 1)]
            first = ("A", "B")[((i // 12) + (c % 2 if flip else 0)) % 2]
            rows.append((label, first, *others))
    return pd.DataFrame(rows, columns=["q", "s1", *[f"s{j + 2}" for j in range(n_sensitive - 1)]]).astype("string")


@pytest.mark.parametrize("n_sensitive", [2, 3])
@pytest.mark.parametrize("flip", [False, True])
def test_a_sensitive_value_certain_given_the_other_sensitive_values_is_refused(n_sensitive: int, flip: bool) -> None:
    frame = _classes(n_sensitive, flip)
    sensitive = tuple(c for c in frame.columns if c != "q")
    others = [c for c in sensitive if c != "s1"]
    assert (frame.groupby(["q", *others])["s1"].nunique() == 1).all()  # the leak
    assert frame.groupby("q")["s1"].value_counts(normalize=True).max() == 0.5  # diverse on the QIs alone
    plan = Plan(kind="kanon", method="kanon-mondrian", source="t", output="o", params={}, checks={"k": 5.0})
    pub = Publication(
        method="kanon-mondrian",
        guarantee="5-anonymity",
        frame=frame,
        columns=(ColumnProtection("q", "generalised"), *[ColumnProtection(c, "sensitive") for c in sensitive]),
        group_columns=("q",),
        min_group=5,
        sensitive=sensitive,
        max_share=0.9,
    )
    with pytest.raises(PublicationRefused, match="max_share"):
        gate.verify(plan, pub, train=frame.copy(), holdout=None, spec=None, generator=np.random.default_rng(0))
