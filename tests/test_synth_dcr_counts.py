"""The DCR check asks how often a source row is matched, not only whether (red team s76 F3, the class).

A table that enumerates its declared domain ``t`` times (it depends on the policy alone) plus ``r`` copies of each
training row matches every source row at least ``t`` times and each training row ``t + r`` times: the exact-copy sets
hold every source row (odds 1), and the k-th-neighbour distances (k = 1, 2, 4, 8) see the extra rows only where
``t + r`` crosses a k, so it passed at ``t`` = 4, 5, 8, 9. Now (``veil.metrics.dcr._count_sets``) the source rows equal
to at least ``c`` synthetic rows, per distinct count ``c``, are label-free sets tested like the near records.

False failures: fixed seeds; a copy case fails only if a memorising table passes (measured tails below 10⁻²⁰⁰). The
enumeration alone, and a fresh table of the law with its duplicates, are refused with probability at most 1.03·10⁻⁴.
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from veil.metrics.dcr import dcr_check

_DOMAIN = {
    "s": ["F", "M"],
    "g": [f"g{i}" for i in range(5)],
    "r": [f"r{i}" for i in range(8)],
    "n": list(range(10)),
    "m": list(range(6)),
}


def _small(rng: np.random.Generator, n: int) -> pd.DataFrame:
    return pd.DataFrame({c: rng.choice(np.asarray(v, dtype=object), n) for c, v in _DOMAIN.items()})


def _split(source: pd.DataFrame, rng: np.random.Generator) -> tuple[pd.DataFrame, pd.DataFrame]:
    order = rng.permutation(len(source))
    hold = round(len(source) * 0.2)
    return source.iloc[order[hold:]].reset_index(drop=True), source.iloc[order[:hold]].reset_index(drop=True)


def _enumerated(times: int) -> pd.DataFrame:
    cells = pd.DataFrame(list(itertools.product(*_DOMAIN.values())), columns=list(_DOMAIN))
    return pd.concat([cells] * times, ignore_index=True)


@pytest.mark.parametrize("copies", [1, 2])
@pytest.mark.parametrize("times", [2, 4, 5, 9])
def test_copies_buried_in_a_domain_enumeration_are_refused(times: int, copies: int) -> None:
    rng = np.random.default_rng(times)
    train, holdout = _split(_small(rng, 2000), rng)
    table = pd.concat([_enumerated(times), *[train] * copies], ignore_index=True)
    report = dcr_check(table, train, holdout, rng=np.random.default_rng(1))
    assert not report.passed and report.near_side == "excess", report


def test_half_the_training_rows_buried_in_a_domain_enumeration_are_refused() -> None:
    rng = np.random.default_rng(3)
    train, holdout = _split(_small(rng, 2000), rng)
    table = pd.concat([_enumerated(6), train.iloc[: len(train) // 2]], ignore_index=True)
    assert not dcr_check(table, train, holdout, rng=np.random.default_rng(1)).passed


@pytest.mark.parametrize("seed", range(2))
def test_split_free_tables_with_many_equal_rows_pass(seed: int) -> None:
    """The enumeration alone, and a large fresh table of the small law (every cell held about 4 times, unevenly)."""
    rng = np.random.default_rng(10 + seed)
    train, holdout = _split(_small(rng, 2000), rng)
    for table in (_enumerated(4 + seed), _small(rng, 20_000)):
        assert dcr_check(table, train, holdout, rng=np.random.default_rng(seed)).passed
