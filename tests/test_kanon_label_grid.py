"""Numeric quasi-identifiers' labels on a public grid (red team s64 F7).

A k-anonymous numeric QI was published as its class's ``[min, max]``: an interior value one person alone holds was a
label's end whenever that person was their class's smallest or largest (Mondrian ``[900, 1234]``, OKA ``[1234, 2100]``,
K-Member ``[2300, 2567]``). Now every numeric QI with declared bounds is coded by the cells of a grid fixed by those
bounds (``generalise.public_grid``), so a label runs from a cell's start to a cell's end: it depends on a person's value
through its cell alone, and never shows the value.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.kanon_labels import label_ends, on_grid
from veil.generators.kanon import anonymise
from veil.generators.kanon.generalise import GRID_CELLS, public_grid

ALGORITHMS = ["mondrian", "oka", "kmember"]


def _people(seed: int, lone: int, n: int = 200) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({"age": rng.integers(20, 60, n), "gain": rng.integers(0, 31, n) * 100})
    frame.loc[7, "gain"] = lone
    return frame


_GRIDS = {"age": public_grid(17, 90, integer=True), "gain": public_grid(0, 5000, integer=True)}


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("lone", [1234, 2567, 777, 2345])
def test_no_label_end_is_a_value_one_person_alone_holds(algorithm: str, seed: int, lone: int) -> None:
    """Every algorithm, 4 sources × 4 lone interior gains: no label of ``gain`` or ``age`` has an end off the grid,
    so person 7's lone gain (off the grid of 250s/500s) is never one; every class still has at least k rows."""
    frame = _people(seed, lone)
    result = anonymise(frame, qi=["age", "gain"], k=5, algorithm=algorithm, seed=seed, grids=_GRIDS)
    for col in ("age", "gain"):
        for label in result.table[col].unique():
            assert all(on_grid(v, _GRIDS[col]) for v in label_ends(label)), (algorithm, col, label)
    assert not any(float(lone) in label_ends(g) for g in result.table["gain"].unique())
    assert min(result.class_sizes) >= 5


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**16), moved=st.integers(-499, 499), algorithm=st.sampled_from(["mondrian", "kmember"]))
def test_a_value_moved_within_its_cell_moves_no_label(seed: int, moved: int, algorithm: str) -> None:
    """Neighbouring sources: person 7's gain changed to any other value of its grid cell (an interior person: not the
    column's extreme, whose open end is the A9b rule). The published labels are the same multiset — the labels depend
    on the cells alone (Mondrian; K-Member with its seed)."""
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({"age": rng.integers(20, 60, 120), "gain": rng.integers(1, 30, 120) * 100})
    origin, step, _ = _GRIDS["gain"]
    cell_start = origin + np.floor((frame.loc[7, "gain"] - origin) / step) * step
    other = frame.copy()
    other.loc[7, "gain"] = int(np.clip(frame.loc[7, "gain"] + moved, cell_start, cell_start + step - 1))
    if other["gain"].min() < frame["gain"].drop(index=7).min() or other["gain"].max() > frame["gain"].drop(index=7).max():
        return  # person 7 became an extreme
    if frame["gain"].min() == frame.loc[7, "gain"] or frame["gain"].max() == frame.loc[7, "gain"]:
        return
    tables = [anonymise(f, qi=["age", "gain"], k=5, algorithm=algorithm, seed=seed, grids=_GRIDS).table for f in (frame, other)]
    a, b = (Counter(map(tuple, t[["age", "gain"]].astype(str).to_numpy())) for t in tables)
    assert a == b


def test_the_grid_comes_from_the_declared_bounds_alone() -> None:
    """About :data:`GRID_CELLS` cells over the declared range, a 1-2-5 step, whole on an int column."""
    for lo, hi, integer in [(17, 90, True), (0, 5000, True), (0, 99999, True), (0.0, 1.0, False), (-3.5, 12.25, False)]:
        origin, step, _ = public_grid(lo, hi, integer=integer)
        cells = (hi - origin) / step
        assert origin <= lo and GRID_CELLS / 2.5 <= cells <= GRID_CELLS + 1, (lo, hi, step)
        assert not integer or step == int(step)


# -- through the curator's transaction and the analyst's connection ---------------------------------------------------


_COLUMNS = 'age = { type = "int", lower = 17, upper = 90 }\ngain = { type = "int", lower = 0, upper = 5000 }\n'


def _world(base: Path, frame: pd.DataFrame, columns: str = _COLUMNS) -> tuple[Path, Any]:
    from veil.policy import load_policy
    from veil.store.warehouse import write_table

    base.mkdir(parents=True, exist_ok=True)
    path = base / "policy.toml"
    path.write_text(
        '[database]\npath = "warehouse.duckdb"\n[ledger]\npath = "ledger.sqlite"\n[tables.people]\nprivacy_unit = "row"\n'
        f"[tables.people.columns]\n{columns}[analysts.bob]\nepsilon = 1.0\n",
        encoding="utf-8",
    )
    policy = load_policy(path)
    write_table(policy, "people", frame)
    return path, policy


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_published_table_passes_the_audit_with_grid_labels(tmp_path: Path, algorithm: str) -> None:
    """``veil publish kanon`` (the transaction: anonymise, independent audit with its NCP compared to the generator's,
    gate): the table publishes, and what the analyst reads has every gain label on the grid of 500s."""
    import veil as veil_api
    from veil.generators.transaction import publish

    path, policy = _world(tmp_path, _people(5, 1234))
    publish(
        policy,
        "kanon",
        {"table": "people", "algorithm": algorithm, "k": 5, "qi": ["age", "gain"], "output": "pub"},
        progress=False,
    )
    with veil_api.connect(path, analyst="bob") as db:
        labels = db.sql("SELECT DISTINCT gain FROM pub")["gain"]
    assert all(on_grid(v, _GRIDS["gain"]) for g in labels for v in label_ends(g)), sorted(map(str, labels))


def test_a_numeric_quasi_identifier_without_declared_bounds_is_refused(tmp_path: Path) -> None:
    """Without declared bounds there is no public grid (its labels would be its classes' [min, max]): refused by the
    plan, before the data is read, unless a hierarchy folder generalises it."""
    from veil.errors import PolicyError
    from veil.generators.transaction import publish

    _, policy = _world(tmp_path, _people(5, 1234), 'age = { type = "int", lower = 17, upper = 90 }\ngain = { type = "int" }\n')
    with pytest.raises(PolicyError, match="no declared domain"):
        publish(policy, "kanon", {"table": "people", "k": 5, "qi": ["age", "gain"], "output": "pub"}, progress=False)
