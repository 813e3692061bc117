"""Synthetic Adult: utility (TSTR) and privacy (DCR against a holdout, sex inference on all published
columns) of every synthetic method, beside SDV's GaussianCopula and CTGAN (docs/benchmarks.md "synth").

Run: ``.venv/bin/python -m bench.synth_adult [--rows 5000] [--gan-epochs 300] [--ablation] [--quick]``
(about 17 minutes on the shared 2-core host, SDV's CTGAN half of it).
SDV runs only if ``.venv-sdv`` exists (``make -f bench/sdv.mk bench-sdv-venv``): it is never imported
here; a subprocess in that venv fits it on a temporary CSV of the training rows and writes its
samples back (``bench/_sdv_fit.py``), so SDV never enters Veil's install.

Split (seeded): ``adult.data`` without missing values, shuffled; the first ``rows`` are the
**training** rows every method sees, the next ``rows`` the **holdout** (never seen). ``adult.test`` is
the real test set for TSTR. Published columns: age, workclass, education_num, marital_status,
occupation, relationship, race, sex, capital_gain, capital_loss, hours_per_week, income (ML copies
publish the numeric ones and income only).

* **TSTR** — a gradient-boosted classifier (scikit-learn ``HistGradientBoostingClassifier``) for
  income trained on the release, accuracy on the real test rows; TRTR (trained on the real training
  rows with the same columns) is the ceiling.
* **DCR** (distance to closest record) — numeric columns standardised by the training rows, categories
  one-hot; for every released row the distance to its nearest training row and to its nearest holdout
  row. ``closer to train`` is the share of released rows nearer a training row than any holdout row
  (ties count ½): 0.5 means training rows are reproduced no more often than unseen ones; the training
  rows themselves score 1.0. ``exact train/holdout`` are the shares of released rows identical to some
  training / holdout row. The check ``DCR ok`` (the release gate's) passes when ``closer to train`` ≤
  0.5 + 4·√(0.25/n) and exact copies of training rows are no more frequent than of holdout rows
  (+ 4 standard errors). DCR over whole rows does not see columns copied in source order (a release
  that regenerates 4 of 12 columns is as far from its source rows as a synthetic one); ``same
  position`` does: the share of cells equal to the training row at the same position (1.0 for the
  source itself, the chance agreement for a shuffled or synthetic release).
* **Sex inference, all published columns** (IMPOSTER's setting B, generalised): a classifier for
  ``sex`` trained on 70 % of the release using every other published column, accuracy on the other
  30 % of the release; and the same classifier's accuracy on the real holdout rows (transfer). The
  majority rate (Male share) is the floor.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

# One OpenMP thread before scikit-learn loads: threadpool_limits(1) afterwards left
# HistGradientBoosting at 40 s instead of 0.5 s per fit on the loaded shared host.
os.environ.setdefault("OMP_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parent.parent
SDV_PYTHON = ROOT / ".venv-sdv" / "bin" / "python"
SDV_STAMP = ROOT / ".venv-sdv" / ".installed"
COLUMNS = [
    "age",
    "workclass",
    "education_num",
    "marital_status",
    "occupation",
    "relationship",
    "race",
    "sex",
    "capital_gain",
    "capital_loss",
    "hours_per_week",
    "income",
]
NUMERIC = ["age", "education_num", "capital_gain", "capital_loss", "hours_per_week"]
BOUNDS = {
    "age": (17.0, 90.0),
    "education_num": (1.0, 16.0),
    "capital_gain": (0.0, 99999.0),
    "capital_loss": (0.0, 4356.0),
    "hours_per_week": (1.0, 99.0),
}
IMPLICIT = ["relationship", "marital_status", "occupation", "hours_per_week"]
#: Adult's categories as documented in the UCI description (``adult.names``): declared domains, as a policy
#: declares them (synthetic generators emit declared values only)
ADULT_CATEGORIES: dict[str, tuple[str, ...]] = {
    "workclass": ("Private", "Self-emp-not-inc", "Self-emp-inc", "Federal-gov", "Local-gov", "State-gov", "Without-pay",
                  "Never-worked"),
    "marital_status": ("Married-civ-spouse", "Divorced", "Never-married", "Separated", "Widowed", "Married-spouse-absent",
                       "Married-AF-spouse"),
    "occupation": ("Tech-support", "Craft-repair", "Other-service", "Sales", "Exec-managerial", "Prof-specialty",
                   "Handlers-cleaners", "Machine-op-inspct", "Adm-clerical", "Farming-fishing", "Transport-moving",
                   "Priv-house-serv", "Protective-serv", "Armed-Forces"),
    "relationship": ("Wife", "Own-child", "Husband", "Not-in-family", "Other-relative", "Unmarried"),
    "race": ("White", "Asian-Pac-Islander", "Amer-Indian-Eskimo", "Other", "Black"),
    "sex": ("Female", "Male"),
    "income": ("<=50K", ">50K"),
}  # fmt: skip


def adult_domains(columns: list[str]) -> dict[str, Any]:
    """The declared domains of ``columns`` (categories above, numeric bounds :data:`BOUNDS`)."""
    from veil.generators.tabular_encoding import ColumnDomain

    return {
        c: ColumnDomain(values=ADULT_CATEGORIES[c])
        if c in ADULT_CATEGORIES
        else ColumnDomain(lower=BOUNDS[c][0], upper=BOUNDS[c][1], is_integer=True)
        for c in columns
    }


def split(rows: int, seed: int) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    from veil.datasets import load_adult

    data = load_adult("train", drop_missing=True)[COLUMNS]
    data = data.sample(frac=1.0, random_state=seed).reset_index(drop=True)
    rows = min(rows, len(data) // 2)
    test = load_adult("test", drop_missing=True)[COLUMNS].reset_index(drop=True)
    return data.iloc[:rows].reset_index(drop=True), data.iloc[rows : 2 * rows].reset_index(drop=True), test


# ---------------------------------------------------------------------------------------------
# metrics


def _features(frame: pd.DataFrame, columns: list[str], reference: pd.DataFrame) -> np.ndarray:
    from veil.auditor.implicit import one_hot_features

    return one_hot_features(frame[columns], reference[columns])


def accuracy(train: pd.DataFrame, test: pd.DataFrame, features: list[str], target: str, reference: pd.DataFrame) -> float:
    from sklearn.ensemble import HistGradientBoostingClassifier

    clf = HistGradientBoostingClassifier(random_state=0)
    clf.fit(_features(train, features, reference), train[target].astype(str))
    pred = clf.predict(_features(test, features, reference))
    return float((pred == test[target].astype(str).to_numpy()).mean())


def _distance_matrix_encoder(train: pd.DataFrame, columns: list[str]) -> Callable[[pd.DataFrame], np.ndarray]:
    num = [c for c in columns if c in NUMERIC]
    cat = [c for c in columns if c not in NUMERIC]
    mu = train[num].mean()
    sd = train[num].std().replace(0, 1.0)
    cats = {c: sorted(train[c].astype(str).unique()) for c in cat}

    def encode(frame: pd.DataFrame) -> np.ndarray:
        parts = [((frame[num] - mu) / sd).to_numpy(dtype=np.float64)]
        for c in cat:
            vals = frame[c].astype(str).to_numpy()
            parts.append((vals[:, None] == np.asarray(cats[c])[None, :]).astype(np.float64))
        return np.hstack(parts)

    return encode


def dcr(release: pd.DataFrame, train: pd.DataFrame, holdout: pd.DataFrame, columns: list[str]) -> dict[str, Any]:
    from sklearn.neighbors import NearestNeighbors

    enc = _distance_matrix_encoder(train, columns)
    r, t, h = enc(release), enc(train), enc(holdout)
    d_t = NearestNeighbors(n_neighbors=1).fit(t).kneighbors(r)[0][:, 0]
    d_h = NearestNeighbors(n_neighbors=1).fit(h).kneighbors(r)[0][:, 0]
    closer = float(np.mean(np.where(np.isclose(d_t, d_h), 0.5, (d_t < d_h).astype(float))))
    exact_t, exact_h = float(np.mean(d_t < 1e-6)), float(np.mean(d_h < 1e-6))
    n = len(r)
    se_share = math.sqrt(0.25 / n)
    se_exact = math.sqrt(max(exact_h * (1 - exact_h), 1.0 / n) / n)
    ok = closer <= 0.5 + 4 * se_share and exact_t <= exact_h + 4 * se_exact
    return {
        "closer_to_train": closer,
        "exact_train": exact_t,
        "exact_holdout": exact_h,
        "median_dcr_train": float(np.median(d_t)),
        "median_dcr_holdout": float(np.median(d_h)),
        "dcr_ok": bool(ok),
    }


def same_position(release: pd.DataFrame, train: pd.DataFrame, columns: list[str]) -> float | None:
    """Share of cells equal to the training row at the same position (None if the row counts differ):
    1.0 for the source itself, ≈ the chance agreement for a shuffled or synthetic release, in between
    for a release that copies some columns in source order."""
    if len(release) != len(train):
        return None
    eq = [(release[c].astype(str).to_numpy() == train[c].astype(str).to_numpy()).mean() for c in columns]
    return float(np.mean(eq))


def sex_inference(release: pd.DataFrame, holdout: pd.DataFrame, columns: list[str], seed: int) -> dict[str, Any]:
    if "sex" not in columns:
        return {"sex_B": None, "sex_transfer": None}
    features = [c for c in columns if c != "sex"]
    rel = release.sample(frac=1.0, random_state=seed).reset_index(drop=True)
    cut = int(0.7 * len(rel))
    ref = pd.concat([release[columns], holdout[columns]])
    return {
        "sex_B": accuracy(rel.iloc[:cut], rel.iloc[cut:], features, "sex", ref),
        "sex_transfer": accuracy(rel, holdout, features, "sex", ref),
    }


def evaluate(
    name: str, release: pd.DataFrame, columns: list[str], split_: tuple[pd.DataFrame, ...], seed: int, seconds: float
) -> dict[str, Any]:
    train, holdout, test = split_
    features = [c for c in columns if c != "income"]
    ref = pd.concat([train[columns], test[columns], release[columns]])
    row: dict[str, Any] = {"method": name, "columns": len(columns), "rows": len(release), "seconds": round(seconds, 1)}
    row["tstr"] = accuracy(release, test, features, "income", ref)
    row["trtr"] = accuracy(train, test, features, "income", ref)
    row[">50K_share"] = float((release["income"].astype(str) == ">50K").mean())
    row.update(dcr(release, train, holdout, columns))
    row["same_position"] = same_position(release, train, columns)
    row.update(sex_inference(release, holdout, columns, seed))
    return row


# ---------------------------------------------------------------------------------------------
# methods


def veil_gan(train: pd.DataFrame, epochs: int, seed: int, **params: Any) -> tuple[pd.DataFrame, list[str]]:
    from veil.generators.base import Context, get_generator

    ctx = Context(
        columns=tuple(c for c in COLUMNS if c != "income"),
        target="income",
        bounds=BOUNDS,
        categories=ADULT_CATEGORIES,
        seed=seed,
    )
    out = get_generator("gan")(epochs=epochs, rows=len(train), **params).run(train, ctx)  # as many rows as SDV's
    return out.frame, COLUMNS


def veil_ml_copy(train: pd.DataFrame, seed: int) -> tuple[pd.DataFrame, list[str]]:
    from veil.generators.base import Context, get_generator

    ctx = Context(
        columns=tuple(NUMERIC), target="income", bounds=BOUNDS, categories={"income": ADULT_CATEGORIES["income"]}, seed=seed
    )
    out = get_generator("ml_copy")(rows=len(train)).run(train, ctx)  # the training size is public here (Adult)
    return out.frame, [*NUMERIC, "income"]


def veil_imposter(train: pd.DataFrame, seed: int, epochs: int) -> tuple[pd.DataFrame, list[str]]:
    from veil.generators.imposter import Imposter

    columns = ["sex", "income", *IMPLICIT]
    model = Imposter(
        implicit=IMPLICIT, sensitive="sex", label="income", epochs=epochs, seed=seed, domains=adult_domains(columns)
    ).fit(train)
    # as ``veil publish synth`` publishes: conditions uniform over the declared (sex, income) pairs
    return model.publish(train, seed=seed + 1, rows=len(train)), columns


def sdv(model: str, train: pd.DataFrame, seed: int, epochs: int) -> tuple[pd.DataFrame, list[str]] | None:
    if not SDV_STAMP.exists():
        return None
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "train.csv", Path(tmp) / "synthetic.csv"
        train.to_csv(src, index=False)
        cmd = [str(SDV_PYTHON), str(ROOT / "bench" / "_sdv_fit.py"), "--model", model, "--train", str(src)]
        cmd += ["--out", str(dst), "--rows", str(len(train)), "--seed", str(seed), "--epochs", str(epochs)]
        subprocess.run(cmd, check=True, env={"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"})
        frame = pd.read_csv(dst)
    for c in NUMERIC:
        lo, hi = BOUNDS[c]
        frame[c] = np.clip(np.rint(frame[c].to_numpy(dtype=float)), lo, hi).astype(np.int64)
    return frame[COLUMNS], COLUMNS


def run(rows: int, gan_epochs: int, imposter_epochs: int, ctgan_epochs: int, seed: int, ablation: bool) -> dict[str, Any]:
    from threadpoolctl import threadpool_limits

    threadpool_limits(1)  # the host is shared: one BLAS/OpenMP thread for every classifier
    parts = split(rows, seed)
    train = parts[0]
    results: list[dict[str, Any]] = []

    def record(name: str, make: Callable[[], tuple[pd.DataFrame, list[str]] | None]) -> None:
        t0 = time.perf_counter()
        made = make()
        if made is None:
            print(f"{name}: skipped", flush=True)
            return
        release, columns = made
        row = evaluate(name, release, columns, parts, seed, time.perf_counter() - t0)
        results.append(row)
        print(json.dumps(row), flush=True)

    record("real training rows (no protection)", lambda: (train.copy(), COLUMNS))
    record(f"veil gan (default, {gan_epochs} epochs)", lambda: veil_gan(train, gan_epochs, seed))
    if ablation:
        record(f"veil gan, pac=1 (plain GAN, {gan_epochs} epochs)", lambda: veil_gan(train, gan_epochs, seed, pac=1))
    record("veil ml_copy (numeric + income)", lambda: veil_ml_copy(train, seed))
    record(f"veil imposter as published today ({imposter_epochs} epochs)", lambda: veil_imposter(train, seed, imposter_epochs))
    record("SDV GaussianCopula", lambda: sdv("gaussian_copula", train, seed, 0))
    record(f"SDV CTGAN ({ctgan_epochs} epochs)", lambda: sdv("ctgan", train, seed, ctgan_epochs))
    majority = {
        "income": float(parts[2]["income"].value_counts(normalize=True).max()),
        "sex": float(parts[1]["sex"].value_counts(normalize=True).max()),
    }
    return {"rows": len(train), "seed": seed, "results": results, "majority": majority, "threads": 1}


def _f(v: Any) -> str:
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "**no**"
    if isinstance(v, float):
        return f"{v:.3f}"
    return str(v)


def markdown(res: dict[str, Any]) -> str:
    n = res["rows"]
    lines = [
        "## synth: synthetic Adult — TSTR, DCR against a holdout, sex inference on all published columns",
        "",
        f"`python -m bench.synth_adult --rows {n} --ablation` ({n:,} training rows and {n:,} holdout rows "
        "drawn from `adult.data` without missing values, seeded; `adult.test` is the TSTR test set; one torch/BLAS thread; "
        "times on a shared 2-core host, noisy up to 3×). TSTR: gradient-boosted income classifier "
        "trained on the release, accuracy on real test rows; TRTR: the same trained on the real training "
        "rows with the same columns. DCR: share of released rows closer to a training row than to any "
        "holdout row (0.5 = no more than unseen rows; ties ½) and exact copies of training vs holdout rows; "
        "`DCR ok` is the gate's check (share ≤ 0.5 + 4 s.e., exact training copies ≤ exact holdout copies "
        "+ 4 s.e.). Same position: share of cells equal to the training row at the same position (1.0 = "
        "the source; a synthetic release sits at chance level; columns copied in source order raise it). "
        "Sex B: sex classifier trained on 70 % of the release from **all** its other published "
        "columns, accuracy on the other 30 %; sex transfer: the same classifier on real holdout rows. "
        f"Majority rates: income {res['majority']['income']:.3f}, sex {res['majority']['sex']:.3f}.",
        "",
        "| method | cols | TSTR | TRTR | >50K share | closer to train | exact train | exact holdout | DCR ok "
        "| same position | sex B | sex transfer | seconds |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in res["results"]:
        cells = [
            r["method"],
            r["columns"],
            r["tstr"],
            r["trtr"],
            r[">50K_share"],
            r["closer_to_train"],
            r["exact_train"],
            r["exact_holdout"],
            r["dcr_ok"],
            r["same_position"],
            r["sex_B"],
            r["sex_transfer"],
            r["seconds"],
        ]
        lines.append("| " + " | ".join(_f(c) for c in cells) + " |")
    if not any(r["method"].startswith("SDV") for r in res["results"]):
        lines += ["", "SDV rows missing: `.venv-sdv` was not installed when this ran (`make -f bench/sdv.mk bench-sdv`)."]
    return "\n".join(lines)


def main() -> None:
    from bench._report import write_section

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=5000)
    ap.add_argument("--gan-epochs", type=int, default=300)
    ap.add_argument("--imposter-epochs", type=int, default=30)
    ap.add_argument("--ctgan-epochs", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ablation", action="store_true", help="also run the GAN with pac=1")
    ap.add_argument("--quick", action="store_true", help="2,000 rows, 30 epochs; does not write the docs")
    ap.add_argument("--json", type=Path, default=None, help="also write the raw results here")
    args = ap.parse_args()
    if args.quick:
        args.rows, args.gan_epochs, args.imposter_epochs, args.ctgan_epochs = 2000, 30, 5, 10
    res = run(args.rows, args.gan_epochs, args.imposter_epochs, args.ctgan_epochs, args.seed, args.ablation)
    if args.json:
        args.json.write_text(json.dumps(res, indent=1), encoding="utf-8")
    if not args.quick:
        print(write_section("synth", markdown(res)))
    else:
        print(markdown(res))


if __name__ == "__main__":
    main()
