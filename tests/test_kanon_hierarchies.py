"""Taxonomy trees from ARX files, QI encoding and the NCP definition."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from veil.errors import InputError
from veil.generators.kanon.generalise import QISpace, format_interval
from veil.generators.kanon.hierarchies import Hierarchy, find_hierarchy_files, load_hierarchies, load_hierarchy
from veil.generators.kanon.ncp import ncp_per_qi, ncp_percent


def test_workclass_tree_matches_paper_example(shared_data: Path) -> None:
    h = load_hierarchy(shared_data / "adult/hierarchies/clustering_based_k_anon/adult_workclass.txt")
    assert h.n_leaves == 8
    codes = h.encode(["Federal-gov", "Local-gov", "Never-worked", "Private"])
    # LCA of two gov leaves is "gov" (3 of 8 leaves); gov vs not-work is the root
    assert h.label(*sorted(codes[:2])) == "gov"
    assert h.leaf_count("gov") == 3
    cost = h.cost_table()
    assert cost[codes[0], codes[0]] == 0.0
    assert cost[min(codes[:2]), max(codes[:2])] == pytest.approx(3 / 8)
    assert cost[min(codes[0], codes[2]), max(codes[0], codes[2])] == pytest.approx(1.0)


def test_subtrees_are_contiguous_in_leaf_order(shared_data: Path) -> None:
    for path in sorted((shared_data / "adult/hierarchies/arx").glob("*.csv")):
        h = load_hierarchy(path)
        for node, (a, b) in zip(h.nodes, h.span, strict=True):
            assert 0 <= a <= b < h.n_leaves, (path.name, node)
        # every pair of leaves: the LCA's span covers both and no child of it does
        lca = h.lca_table()
        for a in range(0, h.n_leaves, 7):
            for b in range(a, h.n_leaves, 5):
                lo, hi = h.span[lca[a, b]]
                assert lo <= a and b <= hi


def test_find_files_matches_both_naming_styles(shared_data: Path) -> None:
    cols = ["marital_status", "native_country", "age", "income"]
    arx = find_hierarchy_files(shared_data / "adult/hierarchies/arx", cols)
    assert arx["marital_status"].name == "adult_hierarchy_marital-status.csv"
    assert "income" not in arx  # salary-class is not income
    cb = find_hierarchy_files(shared_data / "adult/hierarchies/clustering_based_k_anon", cols)
    assert set(cb) == {"marital_status", "native_country"}


def test_bad_hierarchies_are_rejected(tmp_path: Path) -> None:
    f = tmp_path / "h_x.csv"
    f.write_text("a;A;*\na;B;*\n", encoding="utf-8")
    with pytest.raises(InputError, match="twice"):
        load_hierarchy(f)
    h = Hierarchy.flat(["Male", "Female"])
    with pytest.raises(InputError, match="Did you mean 'Male'"):
        h.encode(["Mal"], column="sex")
    with pytest.raises(InputError, match="does not exist"):
        load_hierarchies(tmp_path / "nope", ["x"])


def test_missing_leaf_is_added_under_root() -> None:
    h = Hierarchy.from_paths([["a", "A"], ["b", "A"]]).with_leaf("?")
    assert h.leaves[-1] == "?" and h.label(0, 1) == "A" and h.label(0, 2) == "*"


def test_ncp_definition_by_hand() -> None:
    df = pd.DataFrame({"age": [20, 30, 40, 60], "wc": ["Federal-gov", "Local-gov", "Private", "Private"]})
    h = Hierarchy.from_paths([["Private"], ["Federal-gov", "gov"], ["Local-gov", "gov"], ["State-gov", "gov"]])
    space = QISpace(df, ["age", "wc"], {"wc": h})
    labels = np.array([0, 0, 1, 1])
    # class 0: age 20..30 → 10/40; wc gov → 3/4.  class 1: age 40..60 → 20/40; wc Private → 0
    per = ncp_per_qi(space, labels)
    assert per.tolist() == pytest.approx([(2 * 10 / 40 + 2 * 20 / 40) / 4, (2 * 3 / 4) / 4])
    assert ncp_percent(space, labels) == pytest.approx(100 * per.mean())
    frame = space.generalised_frame(labels)
    # the classes reaching the smallest/largest age are open there: an extreme is one person's value (red team s16 A9b)
    assert frame["age"].tolist() == ["(-inf, 30]", "(-inf, 30]", "[40, inf)", "[40, inf)"]
    assert frame["wc"].tolist() == ["gov", "gov", "Private", "Private"]
    assert format_interval(1.5, 1.5) == "1.5"


def test_qispace_rejects_missing_and_unknown_columns() -> None:
    df = pd.DataFrame({"a": [1.0, None], "b": ["x", "y"]})
    with pytest.raises(InputError, match="missing values"):
        QISpace(df, ["a"])
    with pytest.raises(InputError, match="not a column"):
        QISpace(df, ["bb"])
