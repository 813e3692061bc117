"""The DCR check reads a date as its day number (red team s76 F2, the class): a copy with each date a few days off is
a near copy, like a number a few units off, not as far as any other date (0/1, as a category).

False failures: fixed seeds; a copy case fails only if the copy passes (measured tails below 10⁻³⁰). A fresh table
passes with probability at least 1 − 1.03·10⁻⁴.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from veil.metrics.dcr import dcr_check


def _dated(rng: np.random.Generator, n: int, tz: str | None) -> pd.DataFrame:
    birth = pd.Series(
        (np.datetime64("1940-01-01") + rng.integers(0, 60 * 365, n).astype("timedelta64[D]")).astype("datetime64[s]")
    )
    visit = pd.Series((np.datetime64("2015-01-01") + rng.integers(0, 3650, n).astype("timedelta64[D]")).astype("datetime64[s]"))
    visit[rng.random(n) < 0.05] = pd.NaT  # some missing
    if tz is not None:
        birth, visit = birth.dt.tz_localize(tz), visit.dt.tz_localize(tz)
    return pd.DataFrame({"birth": birth, "visit": visit, "sex": rng.choice(["F", "M"], n), "kids": rng.integers(0, 5, n)})


def _split(source: pd.DataFrame, rng: np.random.Generator) -> tuple[pd.DataFrame, pd.DataFrame]:
    order = rng.permutation(len(source))
    hold = round(len(source) * 0.2)
    return source.iloc[order[hold:]].reset_index(drop=True), source.iloc[order[:hold]].reset_index(drop=True)


@pytest.mark.parametrize("tz", [None, "Europe/Paris"])
@pytest.mark.parametrize("days", [1, 3, -7])
def test_a_copy_with_every_date_moved_a_few_days_is_refused(days: int, tz: str | None) -> None:
    rng = np.random.default_rng(abs(days))
    train, holdout = _split(_dated(rng, 1000, tz), rng)
    shift = pd.Timedelta(days=days)
    moved = train.assign(birth=train["birth"] + shift, visit=train["visit"] + shift)
    table = pd.concat([_dated(np.random.default_rng(9), 2000, tz), moved], ignore_index=True)
    assert not dcr_check(table, train, holdout, rng=np.random.default_rng(1)).passed


@pytest.mark.parametrize("tz", [None, "Europe/Paris"])
def test_a_fresh_dated_table_passes(tz: str | None) -> None:
    rng = np.random.default_rng(0)
    train, holdout = _split(_dated(rng, 1000, tz), rng)
    assert dcr_check(_dated(np.random.default_rng(9), 2000, tz), train, holdout, rng=np.random.default_rng(1)).passed
