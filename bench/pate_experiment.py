"""PATE with privatised students (Yovine et al. 2021, Table 1) on Adult income and MNIST 3-vs-5.

250 teachers (L2 logistic regression per disjoint shard), γ = 0.05, T = 1000 queries, δ = 1e-5,
student local noise ρ ∈ {0.1, 0.3, 0.5, 0.7, 0.9, 1, none}, 10 runs per ρ (each run: a new random
sample of student records, new local noise, new aggregation noise, a new student). Teachers are
trained once per data set, as in the paper. Writes the "pate" section of docs/benchmarks.md.

    .venv/bin/python -m bench.pate_experiment [--runs 10] [--sampler numpy|opendp]

``--sampler numpy`` (default) draws every Laplace variate through veil.mechanisms.laplace with its
test-only seeded NumPy generator (same distribution, reproducible, fast); ``opendp`` uses the
production CSPRNG sampler (slow for MNIST: 784 noisy values per record).
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

import numpy as np
import torch

from bench._report import write_section
from veil.datasets import load_adult, load_mnist_3_5, load_mnist_test_3_5
from veil.generators.pate import (
    FeatureEncoder,
    FeatureSpec,
    PateConfig,
    identities,
    partition_shards,
    run_pate,
    train_teachers,
)
from veil.mechanisms.pate_accounting import DEFAULT_ORDERS, data_independent_epsilon

RHOS: tuple[float | None, ...] = (0.1, 0.3, 0.5, 0.7, 0.9, 1.0, None)
PAPER_TABLE1 = {
    0.1: (20.36, 0.32),
    0.3: (20.41, 0.00),
    0.5: (20.41, 0.032),
    0.7: (20.41, 0.00),
    0.9: (20.41, 0.00),
    1.0: (20.41, 0.00043),
    None: (5.96, 13.15),
}
GAMMA, QUERIES, DELTA, TEACHERS = 0.05, 1000, 1e-5, 250
SAMPLERS = {
    "numpy": "veil.mechanisms.laplace with its seeded NumPy test sampler (same distribution)",
    "opendp": "veil.mechanisms.laplace, OpenDP CSPRNG sampler",
}

# Declared (public) domains, as a curator would write them in the policy (bounds from adult.names).
ADULT_NUMERIC = {
    "age": (17, 90),
    "education_num": (1, 16),
    "capital_gain": (0, 99999),
    "capital_loss": (0, 4356),
    "hours_per_week": (1, 99),
}
ADULT_CATEGORIES = {
    "workclass": (
        "Private",
        "Self-emp-not-inc",
        "Self-emp-inc",
        "Federal-gov",
        "Local-gov",
        "State-gov",
        "Without-pay",
        "Never-worked",
    ),
    "marital_status": (
        "Married-civ-spouse",
        "Divorced",
        "Never-married",
        "Separated",
        "Widowed",
        "Married-spouse-absent",
        "Married-AF-spouse",
    ),
    "occupation": (
        "Tech-support",
        "Craft-repair",
        "Other-service",
        "Sales",
        "Exec-managerial",
        "Prof-specialty",
        "Handlers-cleaners",
        "Machine-op-inspct",
        "Adm-clerical",
        "Farming-fishing",
        "Transport-moving",
        "Priv-house-serv",
        "Protective-serv",
        "Armed-Forces",
    ),
    "relationship": ("Wife", "Own-child", "Husband", "Not-in-family", "Other-relative", "Unmarried"),
    "race": ("White", "Asian-Pac-Islander", "Amer-Indian-Eskimo", "Other", "Black"),
    "sex": ("Female", "Male"),
}


def adult_data() -> dict[str, Any]:
    specs = [FeatureSpec(n, "numeric", lo, hi) for n, (lo, hi) in ADULT_NUMERIC.items()]
    specs += [FeatureSpec(n, "category", values=v) for n, v in ADULT_CATEGORIES.items()]
    enc = FeatureEncoder(tuple(specs))
    tr, te = load_adult("train"), load_adult("test")
    Xe, ye = enc.transform(te), (te["income"] == ">50K").to_numpy(int)
    n_val = 5000
    return {
        "name": "Adult income (>50K positive)",
        "enc": enc,
        "classes": ("<=50K", ">50K"),
        "Xt": enc.transform(tr),
        "yt": (tr["income"] == ">50K").to_numpy(int),
        "Xs": Xe[:-n_val],
        "ys": ye[:-n_val],
        "Xv": Xe[-n_val:],
        "yv": ye[-n_val:],
        "note": f"teachers: adult.data ({len(tr)} rows); student pool: adult.test minus the last "
        f"{n_val} rows ({len(te) - n_val}); validation: last {n_val} rows of adult.test",
    }


def mnist_data() -> dict[str, Any]:
    X, y = load_mnist_3_5(n_per_class=None)
    Xe, ye = load_mnist_test_3_5()
    enc = FeatureEncoder.numeric_box([f"px{i}" for i in range(X.shape[1])], 0.0, 1.0)
    rng = np.random.default_rng(0)
    perm = rng.permutation(len(ye))
    n_val = 500
    v, s = perm[:n_val], perm[n_val:]
    return {
        "name": "MNIST 3 vs 5 (5 positive)",
        "enc": enc,
        "classes": (3, 5),
        "Xt": X.astype(np.float64),
        "yt": (y == 5).astype(int),
        "Xs": Xe[s].astype(np.float64),
        "ys": (ye[s] == 5).astype(int),
        "Xv": Xe[v].astype(np.float64),
        "yv": (ye[v] == 5).astype(int),
        "note": f"teachers: all {len(y)} MNIST training 3s and 5s; student pool: {len(s)} MNIST test 3s/5s; "
        f"validation: {n_val} other test 3s/5s",
    }


def _q(values: list[float]) -> tuple[float, float]:
    a = np.asarray([v for v in values if v is not None and np.isfinite(v)], dtype=float)
    if not a.size:
        return float("nan"), float("nan")
    q1, med, q3 = np.percentile(a, [25, 50, 75])
    return float(med), float(q3 - q1)


def run_dataset(data: dict[str, Any], runs: int, sampler: str) -> tuple[str, dict[str, Any]]:
    shards = partition_shards(identities(data["Xt"], data["yt"]), TEACHERS, seed=0)
    t0 = time.perf_counter()
    ens = train_teachers(data["Xt"], data["yt"], shards, classes=data["classes"], progress=True)
    train_s = time.perf_counter() - t0
    rows, raw = [], {}
    for rho in RHOS:
        ms = []
        for run in range(runs):
            cfg = PateConfig(teachers=TEACHERS, gamma=GAMMA, queries=QUERIES, rho=rho, delta=DELTA, seed=100 + run)
            rng = np.random.default_rng(10_000 + run + int(1000 * (rho or 0))) if sampler == "numpy" else None
            res = run_pate(
                data["Xt"],
                data["yt"],
                data["Xs"],
                data["Xv"],
                data["yv"],
                encoder=data["enc"],
                classes=data["classes"],
                config=cfg,
                y_student=data["ys"],
                ensemble=ens,
                rng=rng,
                progress=False,
            )
            ms.append(res.metrics)
        raw[rho] = ms

        def col(key: str, ms: list = ms) -> tuple[float, float]:
            return _q([m[key] for m in ms])

        eps_med, eps_iqr = col("epsilon_data_dependent")
        acc_med, acc_iqr = col("student_accuracy")
        paper = PAPER_TABLE1[rho]
        ldp = ms[0]["student_ldp_epsilon_per_record"]
        rows.append(
            f"| {rho if rho is not None else 'no noise'} | {f'{ldp:g}' if ldp is not None else '—'} "
            f"| {col('ensemble_accuracy_before_noise')[0]:.3f} | {col('ensemble_accuracy_after_noise')[0]:.3f} "
            f"| {acc_med:.3f} ({acc_iqr:.3f}) | {col('student_tpr')[0]:.3f} / {col('student_tnr')[0]:.3f} "
            f"| **{eps_med:.2f}** | **{eps_iqr:.3f}** | {paper[0]} | {paper[1]} |"
        )
        print(rows[-1], flush=True)
    m0 = raw[None][0]
    table = "\n".join(
        [
            f"**{data['name']}** — {data['note']}. {TEACHERS} teachers, {np.mean(ens.shard_sizes):.0f} rows each on "
            f"average, trained in **{train_s:.1f} s** (one process, torch/BLAS 1 thread); clean-validation "
            f"accuracy of the teacher plurality vote: {m0['ensemble_accuracy_clean_validation']:.3f}.",
            "",
            "| ρ | student LDP ε per record | ensemble acc. before agg. noise | after agg. noise "
            "| student acc. median (IQR) | student TPR / TNR (median) | ε_dep median | ε_dep IQR "
            "| paper ECG median | paper ECG IQR |",
            "|---|---|---|---|---|---|---|---|---|---|",
            *rows,
        ]
    )
    noisy_med = [_q([m["epsilon_data_dependent"] for m in raw[r]])[0] for r in RHOS if r is not None]
    noisy_iqr = [_q([m["epsilon_data_dependent"] for m in raw[r]])[1] for r in RHOS if r is not None]
    clean_med, clean_iqr = _q([m["epsilon_data_dependent"] for m in raw[None]])
    return table, {
        "train_seconds": train_s,
        "noisy_med": (min(noisy_med), max(noisy_med)),
        "noisy_iqr_max": max(noisy_iqr),
        "clean_med": clean_med,
        "clean_iqr": clean_iqr,
        "grid_max": max(m["epsilon_data_dependent"] for r in RHOS for m in raw[r]),
    }


def findings(stats: dict[str, dict[str, Any]], grid: float) -> str:
    lines = ["Findings against the paper's Table 1:", ""]
    for key, st in stats.items():
        lo, hi = st["noisy_med"]
        lines.append(
            f"- {key}: noisy students raise the median data-dependent ε to {lo:.2f}–{hi:.2f}, "
            f"{lo / st['clean_med']:.1f}–{hi / st['clean_med']:.1f}× the no-noise median {st['clean_med']:.2f} "
            f"(paper: ≈ 3.4×, 20.41 vs 5.96); IQR ≤ {st['noisy_iqr_max']:.2f} with student noise "
            f"(paper ≤ 0.32) and {st['clean_iqr']:.2f} without (paper 13.15). Largest single-run ε_dep "
            f"{st['grid_max']:.2f} (grid bound {grid:.2f})."
        )
    lines += [
        "",
        "The direction of the paper's finding holds (privatising the student's records raises the data-dependent "
        "ε, and student accuracy stays near the no-noise level once ρ is moderate) but not its extremes: our noisy "
        "medians stay well below the data-independent bound, and the no-noise runs do not show the paper's "
        "high variance. Our teachers are linear models on binary tasks; on noised inputs they still mostly "
        "agree with each other (though often on the wrong class: see the ensemble accuracy before aggregation "
        "noise), so the vote gaps, and hence ε_dep, stay moderate and stable; the paper's ECG teachers "
        "(MLPs, 5 classes) split on noisy inputs, which drives ε_dep to the bound. The ensemble accuracy drop "
        "caused by the local noise is far larger here than the paper's 4–5%: Lap(1/ρ) on features scaled to "
        "[0, 1] has a standard deviation of 1.4–14.",
    ]
    return "\n".join(lines)


def cli_path_timing() -> str:
    """``publish_pate`` on all of Adult through a policy and the warehouse, production noise sampler."""
    import tempfile
    from pathlib import Path

    from veil.generators.pate import publish_pate
    from veil.policy import load_policy
    from veil.store.warehouse import write_table

    cols = [f'{n} = {{ type = "int", lower = {lo}, upper = {hi} }}' for n, (lo, hi) in ADULT_NUMERIC.items()]
    cols += [f'{n} = {{ type = "category", values = {list(v)!r} }}'.replace("'", '"') for n, v in ADULT_CATEGORIES.items()]
    cols.append('income = { type = "category", values = ["<=50K", ">50K"] }')
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "policy.toml"
        path.write_text("[tables.adult.columns]\n" + "\n".join(cols) + "\n", encoding="utf-8")
        policy = load_policy(path)
        write_table(policy, "adult", load_adult("train"), replace=True)
        t0 = time.perf_counter()
        pub = publish_pate(
            policy,
            table="adult",
            label="income",
            output_model=Path(tmp) / "student.pt",
            config=PateConfig(teachers=TEACHERS, gamma=GAMMA, queries=QUERIES, rho=0.5, delta=DELTA),
            validation=5000,
        )
        total = time.perf_counter() - t0
    m = pub.as_dict()
    return (
        f"Production path (`publish_pate`, what `veil publish pate` runs): all of adult.data in the warehouse, "
        f"{QUERIES} + 5000 rows held out for the student, {TEACHERS} teachers trained in "
        f"**{m['teacher_train_seconds']:.1f} s**, whole publication (read, train, OpenDP CSPRNG noise, student, "
        f"release record, model file) **{total:.1f} s**; ρ = 0.5: student accuracy {m['student_accuracy']:.3f}, "
        f"ε charged {m['epsilon_data_independent']:.4f} (δ = {DELTA:g}), ε_dep {m['epsilon_data_dependent']:.2f}."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--sampler", choices=("numpy", "opendp"), default="numpy")
    parser.add_argument("--only", choices=("adult", "mnist"), default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    os.environ.setdefault("VEIL_PROGRESS", "1")
    start = time.perf_counter()
    ind = data_independent_epsilon(gamma=GAMMA, queries=QUERIES, delta=DELTA)
    grid = data_independent_epsilon(gamma=GAMMA, queries=QUERIES, delta=DELTA, orders=DEFAULT_ORDERS)
    ecg = data_independent_epsilon(gamma=GAMMA, queries=900, delta=1e-6)
    ecg_grid = data_independent_epsilon(gamma=GAMMA, queries=900, delta=1e-6, orders=DEFAULT_ORDERS)
    parts = [
        "### PATE with privatised student data (Yovine et al. 2021)",
        "",
        f"Data-independent ε (Eq. 12, minimised over real λ): **{ind.epsilon:.4f}** at λ = {ind.order:.5f} for "
        f"γ = {GAMMA}, T = {QUERIES}, δ = {DELTA:g} (paper: 20.1743 at λ ≈ 1.51743) and **{ecg.epsilon:.4f}** for "
        f"T = 900, δ = 1e-6 (paper: 20.2696) — exact, unit-tested. The data-dependent accountant minimises over "
        f"the integer orders λ = 1..8 of Papernot et al.'s reference code; over that grid the data-independent "
        f"bound is {grid.epsilon:.4f} (T = 1000, δ = 1e-5) and {ecg_grid.epsilon:.4f} (T = 900, δ = 1e-6), which is "
        f"the paper's Table 1 median of 20.41 for every noisy student: when the teachers' votes carry no "
        f"consensus, the data-dependent bound falls back to the data-independent one on that grid.",
        "",
        f"Setup: γ = {GAMMA}, T = {QUERIES} queries per run, δ = {DELTA:g}, {args.runs} runs per ρ (new student "
        f"sample, local noise, aggregation noise and student each run; teachers trained once per data set). "
        f"Curator B adds Lap(1/ρ) to every feature after scaling it into [0, 1] by its declared bounds "
        f"(categories one-hot): ρ-LDP per numeric feature, 2ρ per categorical feature, ρ·Δ per record "
        f"(Δ = 17 for Adult's 5 numeric + 6 categorical features, 784 for MNIST). The student (logistic "
        f"regression, torch, trained on the privatised records and the noisy labels; ROC/Youden threshold on "
        f"20% of the labelled queries) is evaluated on clean validation records. Laplace draws: "
        f"{SAMPLERS[args.sampler]}. "
        f"Paper columns: its ECG case study (Table 1, T = 900, δ = 1e-6, MLP students) — its data are not "
        f"available here; compare the pattern, not the digits.",
        "",
    ]
    loaders = {"adult": adult_data, "mnist": mnist_data}
    stats = {}
    for key in ("adult", "mnist"):
        if args.only and key != args.only:
            continue
        table, stats[{"adult": "Adult", "mnist": "MNIST 3-vs-5"}[key]] = run_dataset(loaders[key](), args.runs, args.sampler)
        parts += [table, ""]
    parts += [findings(stats, grid.epsilon), "", cli_path_timing(), ""]
    parts.append(
        f"Total wall time {time.perf_counter() - start:.0f} s on the 2-core shared host (other agents "
        f"running; timings drift up to 3×), torch.set_num_threads(1)."
    )
    write_section("pate", "\n".join(parts))


if __name__ == "__main__":
    main()
