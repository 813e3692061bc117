"""The distance-to-closest-record check against all training rows (red team s64 F8).

The check compared synthetic rows with a training subsample of the holdout's size, so a verbatim copy of a training
row outside the subsample counted as fresh. Now (``veil.metrics.dcr``): the source rows a synthetic table copies
exactly, and the source rows nearest to it, over all training and holdout rows, may not be training rows
significantly more often than the training share of the source (false refusal at most 2·10⁻⁶ per check).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

from veil.metrics.dcr import dcr_check


def _draw(rng: np.random.Generator, n: int, domain: str) -> pd.DataFrame:
    if domain == "small":  # most fresh rows equal some source row by chance
        return pd.DataFrame({"age": rng.integers(17, 30, n), "sex": rng.choice(["F", "M"], n), "job": rng.choice(list("abc"), n)})
    return pd.DataFrame({"age": rng.integers(17, 90, n), "gain": rng.integers(0, 5000, n), "sex": rng.choice(["F", "M"], n)})


def _split(source: pd.DataFrame, rng: np.random.Generator) -> tuple[pd.DataFrame, pd.DataFrame]:
    order = rng.permutation(len(source))
    hold = round(len(source) * 0.2)  # the transaction's split for synthetic kinds
    return source.iloc[order[hold:]].reset_index(drop=True), source.iloc[order[:hold]].reset_index(drop=True)


@pytest.mark.parametrize(("n", "rows", "copied"), [(150, 1000, 1.0), (300, 1000, 0.3), (2000, 2000, 0.1), (10_000, 10_000, 0.03)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_copied_training_rows_are_refused(n: int, rows: int, copied: float, seed: int) -> None:
    """A table whose ``copied`` share is training rows copied verbatim (the rest fresh draws of the same law) is
    refused. On the s64 F8 check's predecessor those with n ≤ 300 passed (and 3 % of 10,000). On a domain of a few
    dozen cells (below) a copied row is a cell training and holdout rows share, and the check cannot, and need not,
    tell it from a fresh draw: no row there is one person's."""
    rng = np.random.default_rng(seed)
    train, holdout = _split(_draw(rng, n, "wide"), rng)
    k = int(copied * rows)
    copies = train.sample(n=k, replace=k > len(train), random_state=seed)
    synthetic = pd.concat([copies, _draw(rng, rows - k, "wide")], ignore_index=True)
    assert not dcr_check(synthetic, train, holdout, rng=np.random.default_rng(seed)).passed


@pytest.mark.parametrize("domain", ["small", "wide"])
@pytest.mark.parametrize(("n", "rows"), [(150, 1000), (2000, 2000), (10_000, 10_000)])
@pytest.mark.parametrize("seed", range(5))
def test_a_table_that_does_not_depend_on_the_split_passes(domain: str, n: int, rows: int, seed: int) -> None:
    """The null the check is calibrated on: fresh draws of the same law, or rows copied from the *whole* source
    before the split (training and holdout rows alike: no memorisation of the training side). Each passes but with
    probability at most 2·10⁻⁶ (60 cases: all pass except with probability about 10⁻⁴)."""
    rng = np.random.default_rng(100 + seed)
    source = _draw(rng, n, domain)
    train, holdout = _split(source, rng)
    fresh = _draw(rng, rows, domain)
    assert dcr_check(fresh, train, holdout, rng=np.random.default_rng(seed)).passed
    resampled = source.sample(n=rows, replace=True, random_state=seed).reset_index(drop=True)
    report = dcr_check(resampled, train, holdout, rng=np.random.default_rng(seed))
    assert report.passed, report
    assert report.exact_copies >= min(len(source), rows) // 3  # it did copy rows, of both sides


def test_the_report_names_its_reference_sizes() -> None:
    """The nearest records are looked up among training and holdout rows together, and the exact copies over all."""
    rng = np.random.default_rng(9)
    train, holdout = _split(_draw(rng, 3000, "wide"), rng)
    report = dcr_check(_draw(rng, 2500, "wide"), train, holdout, rng=np.random.default_rng(0))
    assert report.reference_rows == 3000 and report.rows == 2000 and report.train_share == pytest.approx(0.8)


def _nearest_in_one_array(query: Any, ref: Any, n_cols: int, member: np.ndarray) -> tuple[np.ndarray, ...]:
    """The nearest-record search as it was written first (one query × reference × column array per chunk): the
    reference the faster :func:`veil.metrics.dcr._nearest` must equal, bit for bit."""
    (qn, qc), (rn, rc) = query, ref
    d = np.zeros((len(qn), len(rn)))
    if qn.shape[1]:
        d += np.abs(qn[:, None, :] - rn[None, :, :]).clip(max=1.0).sum(axis=2)
    if qc.shape[1]:
        d += (qc[:, None, :] != rc[None, :, :]).sum(axis=2)
    low = d.min(axis=1)
    hit = (d <= low[:, None] + 1e-9).any(axis=0)
    inside = d[:, member].min(axis=1) / n_cols if member.any() else np.full(len(qn), np.inf)
    outside = d[:, ~member].min(axis=1) / n_cols if (~member).any() else np.full(len(qn), np.inf)
    return low / n_cols, hit, inside, outside


@pytest.mark.parametrize(("numbers", "texts"), [(n, t) for n in (0, 1, 2, 3, 7, 8, 9) for t in (0, 1, 3) if n + t])
def test_the_nearest_records_are_the_one_array_searchs(numbers: int, texts: int) -> None:
    """Distances, nearest rows (ties: all), and distances to the training and holdout sides equal, bit for bit, those
    of the one-array search, for any mix of numeric and categorical columns; with missing numbers (encoded -1e6),
    exact copies and ties, members spread among the reference rows, and one side empty."""
    from veil.metrics.dcr import _nearest

    rng = np.random.default_rng(numbers * 10 + texts)
    n_cols = numbers + texts
    rn = rng.choice([0.0, 0.25, 0.5, 1.0, -1e6, *rng.random(20)], size=(700, numbers))
    rc = rng.integers(0, 3, size=(700, texts))
    qn = np.r_[rn[:40], rng.random((260, numbers))]  # 40 exact copies
    qc = np.r_[rc[:40], rng.integers(0, 3, size=(260, texts))]
    for member in (rng.random(700) < 0.8, np.ones(700, dtype=bool), np.zeros(700, dtype=bool)):
        got = _nearest((qn, qc), (rn, rc), n_cols, member)
        want = _nearest_in_one_array((qn, qc), (rn, rc), n_cols, member)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(g, w)
