"""Every published quasi-identifier label comes from the declaration, never from the rows (red team s66 F5).

s64 F7 put numeric QIs' labels on a grid of their declared bounds, but dropped the grid when an int column's step was 1
(a declared range of at most 20 values: "cells of one integer are the values themselves"). The source is read as
numbers, so an int column may hold one person's ``2.5`` (stored as text, docs/policy.md), and Mondrian published the
label ``[2.5, 3]``. The same held for an int QI declared by its ``values`` (no bounds: no grid) and for a numeric QI
next to a hierarchy folder that has no file for it (no tree, no grid).

The class test: for every QI declaration (int of a small and a large range, int by values, float, category by values,
a hierarchy file) and every algorithm, one person holds an odd value (a non-integer in an int column, a value off the
float grid, an undeclared category); the table is published through the curator's transaction and read by an analyst,
and every label must be derivable from the declaration alone: numeric ends on the public grid (or open), category
labels declared values, the unknown leaf ``?`` or the root ``*``, hierarchy labels nodes of the file's tree. Deterministic
(fixed seeds): no false failures.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from tests.support.kanon_labels import label_ends, on_grid
from veil.generators.kanon.generalise import public_grid

ALGORITHMS = ["mondrian", "oka", "kmember"]
N = 120


def _numeric(values: list[Any], odd: Any) -> list[Any]:
    out = list(values)
    out[7] = odd
    return out


_RNG = np.random.default_rng(0)
_SMALL = [str(v) for v in _RNG.integers(0, 8, N)]
_LARGE = [str(v) for v in _RNG.integers(0, 31, N) * 100]
_FLOAT = [float(v) / 20 for v in _RNG.integers(0, 20, N)]
_JOBS = ["clerk", "nurse", "pilot", "cook"]
_CATS = [str(v) for v in _RNG.choice(_JOBS, N)]

#: declaration name → (column declaration, column values with person 7's odd value, public grid or None, odd value)
CASES: dict[str, tuple[str, list[Any], tuple[float, float, bool] | None, Any]] = {
    "int_small_range": (
        '{ type = "int", lower = 0, upper = 12 }',
        _numeric(_SMALL, "2.5"),
        public_grid(0, 12, integer=True),
        2.5,
    ),
    "int_large_range": (
        '{ type = "int", lower = 0, upper = 5000 }',
        _numeric(_LARGE, "1234.5"),
        public_grid(0, 5000, integer=True),
        1234.5,
    ),
    "int_by_values": (
        '{ type = "int", values = [0, 1, 2, 3, 4, 5, 6, 7] }',
        _numeric(_SMALL, "2.5"),
        public_grid(0, 7, integer=True),
        2.5,
    ),
    "float_range": (
        '{ type = "float", lower = 0, upper = 1 }',
        _numeric(_FLOAT, 0.123456),
        public_grid(0, 1, integer=False),
        0.123456,
    ),
    "category_by_values": (
        f'{{ type = "category", values = {_JOBS!r} }}'.replace("'", '"'),
        _numeric(_CATS, "astronaut"),
        None,
        "astronaut",
    ),
}


def _world(base: Path, declaration: str, values: list[Any]) -> tuple[Path, Any]:
    from veil.policy import load_policy
    from veil.store.warehouse import write_table

    base.mkdir(parents=True, exist_ok=True)
    path = base / "policy.toml"
    path.write_text(
        '[database]\npath = "warehouse.duckdb"\n[ledger]\npath = "ledger.sqlite"\n[tables.people]\nprivacy_unit = "row"\n'
        f'[tables.people.columns]\nq = {declaration}\nsex = {{ type = "category", values = ["F", "M"] }}\n'
        "[analysts.bob]\nepsilon = 1.0\n",
        encoding="utf-8",
    )
    policy = load_policy(path)
    sex = np.random.default_rng(1).choice(["F", "M"], N)
    write_table(policy, "people", pd.DataFrame({"q": values, "sex": sex}))
    return path, policy


def _published_labels(path: Path, policy: Any, algorithm: str, **extra: Any) -> list[str]:
    import veil as veil_api
    from veil.generators.transaction import publish

    request = {"table": "people", "output": "pub", "algorithm": algorithm, "k": 5, "qi": ["q", "sex"], "seed": 0, **extra}
    publish(policy, "kanon", request, progress=False)
    with veil_api.connect(path, analyst="bob") as db:
        return [str(v) for v in db.sql("SELECT DISTINCT q FROM pub")["q"]]


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_every_published_label_is_derivable_from_the_declaration(tmp_path: Path, case: str, algorithm: str) -> None:
    declaration, values, grid, odd = CASES[case]
    path, policy = _world(tmp_path, declaration, values)
    labels = _published_labels(path, policy, algorithm)
    if grid is not None:
        ends = [v for label in labels for v in label_ends(label)]
        assert all(on_grid(v, grid) for v in ends), f"{case}/{algorithm}: labels {sorted(labels)} leave the grid {grid}"
        assert float(odd) not in ends, f"{case}/{algorithm}: person 7's {odd} is a label end: {sorted(labels)}"
    else:
        allowed = {*_JOBS, "?", "*"}
        assert set(labels) <= allowed, f"{case}/{algorithm}: labels {sorted(labels)} are not declared values"


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["mondrian"])
def test_a_hierarchy_folder_without_a_file_for_a_numeric_qi_still_needs_its_grid(tmp_path: Path, algorithm: str) -> None:
    """A hierarchy folder with a file for ``sex`` only: ``q`` (int of a small range) gets no tree, so it is labelled on its
    declared grid (its tree-less, grid-less labels were its classes' [min, max]); and a numeric QI without declared
    bounds next to such a folder is refused, as without a folder. The ``sex`` labels are nodes of the file's tree."""
    from veil.errors import PolicyError

    folder = tmp_path / "hier"
    folder.mkdir()
    (folder / "sex.csv").write_text("F;*\nM;*\n", encoding="utf-8")
    declaration, values, grid, _ = CASES["int_small_range"]
    path, policy = _world(tmp_path / "w", declaration, values)
    labels = _published_labels(path, policy, algorithm, hierarchies=str(folder))
    assert grid is not None and all(on_grid(v, grid) for label in labels for v in label_ends(label)), sorted(labels)
    assert 2.5 not in [v for label in labels for v in label_ends(label)]
    import veil as veil_api

    with veil_api.connect(path, analyst="bob") as db:
        assert set(db.sql("SELECT DISTINCT sex FROM pub")["sex"]) <= {"F", "M", "*"}
    _, open_policy = _world(tmp_path / "open", '{ type = "int" }', values)
    with pytest.raises(PolicyError, match="no declared domain"):
        _published_labels(path, open_policy, algorithm, hierarchies=str(folder))
