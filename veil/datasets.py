"""Data: the deterministic demo generator, and loaders for the real data sets in ``../shared/data``.

The demo data are synthetic (no real person is in them) and fully determined by ``seed``.

>>> df = demo_people(1000, seed=0)
>>> len(df), sorted(df["sex"].unique())
(1000, ['Female', 'Male'])
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import numpy as np
import pandas as pd

from veil.errors import InputError

__all__ = [
    "ADULT_COLUMNS",
    "DIAGNOSES",
    "STATES",
    "demo_people",
    "demo_states",
    "demo_visits",
    "load_adult",
    "load_mnist_3_5",
    "load_mnist_test_3_5",
    "read_adult_file",
    "shared_data_dir",
]

ADULT_COLUMNS: tuple[str, ...] = (
    "age",
    "workclass",
    "fnlwgt",
    "education",
    "education_num",
    "marital_status",
    "occupation",
    "relationship",
    "race",
    "sex",
    "capital_gain",
    "capital_loss",
    "hours_per_week",
    "native_country",
    "income",
)


def shared_data_dir() -> Path:
    """``$VEIL_SHARED_DATA`` if set, else the ``shared/data`` folder next to the project checkout."""
    env = os.environ.get("VEIL_SHARED_DATA")
    if env:
        return Path(env)
    here = Path(__file__).resolve().parent.parent  # project root
    for cand in (here.parent / "shared" / "data", here / "shared" / "data"):
        if cand.exists():
            return cand
    return here.parent / "shared" / "data"


def _shared_file(*parts: str) -> Path:
    p = shared_data_dir().joinpath(*parts)
    if not p.exists():
        raise InputError(
            f"data file {str(p)!r} not found",
            hint="Set VEIL_SHARED_DATA to the folder holding adult/ and mnist/",
        )
    return p


# ---------------------------------------------------------------------------------------- Adult
def is_adult_file(path: Path) -> bool:
    """True for UCI Adult's headerless ``adult.data`` / ``adult.test`` format (15 comma-separated fields)."""
    if path.suffix.lower() == ".parquet":
        return False
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            first = fh.readline()
            if first.startswith("|"):
                first = fh.readline()
    except OSError:
        return False
    fields = [f.strip() for f in first.split(",")]
    # not from the first person's age: one whose age was not digits made their row the header (red team s38, A5)
    return len(fields) == 15 and fields[-1].rstrip(".") in ("<=50K", ">50K")


def read_adult_file(path: str | Path, *, drop_missing: bool = False) -> pd.DataFrame:
    """Read a UCI Adult file; ``?`` becomes NA; the test set's trailing dots are removed from labels."""
    p = Path(path)
    with open(p, encoding="utf-8") as fh:
        skip = 1 if fh.readline().startswith("|") else 0
    df = pd.read_csv(p, header=None, names=list(ADULT_COLUMNS), skipinitialspace=True, na_values="?", skiprows=skip)
    df = df.dropna(how="all")
    df["income"] = df["income"].str.rstrip(".")
    for col in ("age", "fnlwgt", "education_num", "capital_gain", "capital_loss", "hours_per_week"):
        df[col] = df[col].astype("int64")
    if drop_missing:
        df = df.dropna().reset_index(drop=True)
    return df


def load_adult(split: str = "train", *, drop_missing: bool = False) -> pd.DataFrame:
    """UCI Adult from ``shared/data/adult`` (``split`` = "train" → adult.data, "test" → adult.test)."""
    if split not in ("train", "test"):
        raise InputError(f"split must be 'train' or 'test', got {split!r}")
    return read_adult_file(_shared_file("adult", "adult.data" if split == "train" else "adult.test"), drop_missing=drop_missing)


def adult_hierarchy_dir(kind: str = "clustering_based_k_anon") -> Path:
    return _shared_file("adult", "hierarchies", kind)


# ---------------------------------------------------------------------------------------- MNIST
def load_mnist_3_5(n_per_class: int | None = 5000) -> tuple[np.ndarray, np.ndarray]:
    """MNIST training 3s and 5s: ``X`` float32 (n, 784) in [0, 1], ``y`` int64 in {3, 5}.

    Takes the first ``n_per_class`` of each digit by original index (None = all).
    """
    d = np.load(_shared_file("mnist", "mnist_train_3_5.npz"))
    X, y = d["X"], d["y"].astype(np.int64)
    if n_per_class is not None:
        keep = np.concatenate([np.flatnonzero(y == c)[:n_per_class] for c in (3, 5)])
        keep.sort()
        X, y = X[keep], y[keep]
    return X.reshape(len(X), -1).astype(np.float32) / 255.0, y


def _read_idx(p: Path) -> np.ndarray:
    raw = gzip.open(p).read()
    nd = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(nd)]
    return np.frombuffer(raw[4 + 4 * nd :], np.uint8).reshape(dims)


def load_mnist_test_3_5() -> tuple[np.ndarray, np.ndarray]:
    """MNIST test-set 3s and 5s (1,010 + 892), same format as :func:`load_mnist_3_5`."""
    X = _read_idx(_shared_file("mnist", "t10k-images-idx3-ubyte.gz"))
    y = _read_idx(_shared_file("mnist", "t10k-labels-idx1-ubyte.gz")).astype(np.int64)
    keep = (y == 3) | (y == 5)
    return X[keep].reshape(int(keep.sum()), -1).astype(np.float32) / 255.0, y[keep]


# ---------------------------------------------------------------------------------------- demo
STATES: tuple[str, ...] = tuple(
    (
        "AL AK AZ AR CA CO CT DE FL GA HI ID IL IN IA KS KY LA ME MD MA MI MN MS MO "
        "MT NE NV NH NJ NM NY NC ND OH OK OR PA RI SC SD TN TX UT VT VA WA WV WI WY"
    ).split()
)
DIAGNOSES: tuple[str, ...] = (
    "asthma", "diabetes", "flu", "fracture", "hypertension",
    "migraine", "none", "obesity", "pneumonia", "sprain",
)  # fmt: skip
OCCUPATIONS: tuple[str, ...] = (
    "clerical", "craft", "farming", "healthcare", "management",
    "professional", "sales", "service", "technical", "transport",
)  # fmt: skip
REGIONS = {"Northeast": "CT ME MA NH RI VT NJ NY PA", "Midwest": "IL IN MI OH WI IA KS MN MO NE ND SD",
           "South": "DE FL GA MD NC SC VA WV AL KY MS TN AR LA OK TX",
           "West": "AZ CO ID MT NV NM UT WY AK CA HI OR WA"}  # fmt: skip


def demo_people(n: int = 100_000, *, seed: int = 0) -> pd.DataFrame:
    """A census-like table of ``n`` synthetic people with realistic correlations.

    Columns: person_id, age (18–90), sex, state, education_years (6–20), occupation,
    hours_per_week (1–99), income (0–200,000; rises with education, age to ~55, hours; a gender gap),
    married (bool). Deterministic in ``seed``.
    """
    if n < 1:
        raise InputError(f"n must be ≥ 1, got {n}")
    rng = np.random.default_rng(seed)
    age = np.clip(np.rint(rng.gamma(6.0, 7.0, n) + 14), 18, 90).astype(np.int64)
    sex = np.where(rng.random(n) < 0.51, "Female", "Male")
    state_w = rng.dirichlet(np.full(len(STATES), 2.0))
    state = np.asarray(STATES)[rng.choice(len(STATES), size=n, p=state_w)]
    edu = np.clip(np.rint(rng.normal(13.0, 2.6, n) + (age < 30) * 0.6), 6, 20).astype(np.int64)
    occ_idx = np.clip(np.rint((edu - 6) / 14 * 9 + rng.normal(0, 2.2, n)), 0, 9).astype(np.int64)
    occupation = np.asarray(OCCUPATIONS)[occ_idx]
    hours = np.clip(np.rint(rng.normal(40, 9, n) - (sex == "Female") * 3 - (age > 65) * 15), 1, 99).astype(np.int64)
    age_curve = -(((age - 52) / 22.0) ** 2)
    log_inc = 9.2 + 0.11 * (edu - 12) + 0.35 * age_curve + 0.012 * (hours - 40) - 0.18 * (sex == "Female")
    income = np.clip(np.rint(np.exp(log_inc + rng.normal(0, 0.55, n)) * 2.2), 0, 200_000)
    income[rng.random(n) < 0.04] = 0.0  # some people have no income
    married = rng.random(n) < np.clip(0.15 + (age - 18) * 0.012, 0, 0.7)
    return pd.DataFrame(
        {
            "person_id": np.arange(1, n + 1, dtype=np.int64),
            "age": age,
            "sex": sex,
            "state": state,
            "education_years": edu,
            "occupation": occupation,
            "hours_per_week": hours,
            "income": income.astype(np.float64),
            "married": married,
        }
    )


def demo_visits(people: pd.DataFrame, *, visits_per_person: float = 4.0, seed: int = 1) -> pd.DataFrame:
    """Clinic visits for ``people`` (about ``visits_per_person`` each, Poisson, at least one):
    visit_id, person_id, diagnosis (depends on age), cost (0–20,000), plus the person's sex, state, age.
    """
    rng = np.random.default_rng(seed)
    counts = np.maximum(1, rng.poisson(visits_per_person - 1, len(people)) + 1)
    idx = np.repeat(np.arange(len(people)), counts)
    p = people.iloc[idx].reset_index(drop=True)
    m = len(p)
    old = (p["age"].to_numpy() > 55).astype(float)
    base = np.array([6, 5, 12, 6, 6, 7, 30, 6, 4, 8], dtype=float)
    bump = np.array([0, 6, 0, 2, 9, 0, -8, 2, 3, -3], dtype=float)
    weights = base[None, :] + old[:, None] * bump[None, :]
    weights /= weights.sum(axis=1, keepdims=True)
    u = rng.random(m)[:, None]
    diag_idx = (weights.cumsum(axis=1) < u).sum(axis=1).clip(0, len(DIAGNOSES) - 1)
    cost = np.clip(np.rint(rng.lognormal(5.5, 1.0, m) * (1 + old)), 0, 20_000)
    return pd.DataFrame(
        {
            "visit_id": np.arange(1, m + 1, dtype=np.int64),
            "person_id": p["person_id"].to_numpy(),
            "age": p["age"].to_numpy(),
            "sex": p["sex"].to_numpy(),
            "state": p["state"].to_numpy(),
            "diagnosis": np.asarray(DIAGNOSES)[diag_idx],
            "cost": cost.astype(np.float64),
        }
    )


def demo_states() -> pd.DataFrame:
    """Public reference table: state, region."""
    region_of = {s: r for r, ss in REGIONS.items() for s in ss.split()}
    return pd.DataFrame({"state": list(STATES), "region": [region_of[s] for s in STATES]})
