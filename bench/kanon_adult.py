"""k-anonymity on Adult: NCP and time of Mondrian / OKA / K-Member vs the SOM paper's Table 4,
batch SOM vs MiniSom, and the income-prediction utility (KMA+SOM vs KMA, paper Figures 7–9).

Run: ``.venv/bin/python -m bench.kanon_adult [--quick]`` (writes the "kanon" section of
docs/benchmarks.md). ``--quick`` skips the slow utility models (random forest, gradient
boosting, MLP) and uses one seed.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import pandas as pd

from bench._report import write_section
from veil.auditor.anonymity import audit_anonymity
from veil.auditor.utility import MODELS, utility_report
from veil.datasets import adult_hierarchy_dir, load_adult
from veil.generators.kanon import SOM_COLUMN, anonymise
from veil.generators.som import choose_neurons, fit_som, neuron_candidates

QI = ["age", "workclass", "education_num", "marital_status", "occupation", "race", "sex", "native_country"]
SOM_COLS = ["capital_gain", "capital_loss", "hours_per_week", "fnlwgt"]
PAPER = {  # Table 4: NCP %, seconds (Windows i5-7500T, Python 2.7 reference code)
    ("oka", 5): (9.99, 2939.93),
    ("kma", 5): (6.09, 6706.59),
    ("mondrian", 5): (8.30, 1.16),
    ("oka", 10): (16.74, 2034.22),
    ("kma", 10): (11.07, 7258.76),
    ("mondrian", 10): (11.24, 0.75),
    ("oka", 30): (32.43, 840.12),
    ("kma", 30): (23.90, 8518.48),
    ("mondrian", 30): (17.59, 0.41),
}
TARGET_SECONDS = {"mondrian": 2, "mondrian-relaxed": 2, "oka": 20, "kma": 60}


def code_range_ncp(df: pd.DataFrame, labels: np.ndarray) -> float:
    """NCP as the Mondrian reference code computes it: categorical values coded by first appearance
    in adult.data, every QI (numeric or coded) as (max − min) / (domain max − min); tight bounds."""
    total = 0.0
    for col in QI:
        if pd.api.types.is_numeric_dtype(df[col]):
            codes = df[col].to_numpy(dtype=float)
        else:
            order = {v: i for i, v in enumerate(pd.unique(df[col]))}
            codes = df[col].map(order).to_numpy(dtype=float)
        span = codes.max() - codes.min()
        g = pd.DataFrame({"c": codes, "l": labels}).groupby("l")["c"]
        width = (g.transform("max") - g.transform("min")).to_numpy()
        total += float(np.mean(width / span))
    return 100.0 * total / len(QI)


def bench_algorithms(df: pd.DataFrame, hier: str, seeds: list[int]) -> tuple[str, dict]:
    lines = [
        "| k | algorithm | NCP % (ours) | NCP % (paper) | seconds (ours, wall / CPU) | seconds (paper) | target s "
        "| min class | classes | audit s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    extra = [
        "",
        "Mondrian under the Mondrian reference code's own NCP (categorical values as first-appearance codes, "
        "range/domain — the definition behind the paper's Mondrian column):",
        "",
        "| k | strict (gain) | relaxed (gain) | strict (median rule) | paper |",
        "|---|---|---|---|---|",
    ]
    results: dict = {}
    for k in (5, 10, 30):
        code_ncp = {}
        for algo in ("mondrian", "mondrian-relaxed", "oka", "kma"):
            runs = []
            for seed in seeds if algo in ("oka", "kma") else seeds[:1]:
                # the paper's k-anonymity, without --sensitive: income would make every class diverse (s20b F4), a
                # different, costlier partition than the paper's
                res = anonymise(df, qi=QI, k=k, algorithm=algo, hierarchies=hier, seed=seed)
                t0 = time.perf_counter()
                rep = audit_anonymity(res.table, QI, hierarchies=hier, population=df)
                audit_s = time.perf_counter() - t0
                assert rep.k >= k and abs(rep.ncp_percent - res.ncp_percent) < 1e-6
                runs.append((res, rep, audit_s))
            ncps = [r.ncp_percent for r, _, _ in runs]
            secs = [r.seconds for r, _, _ in runs]
            cpus = [r.cpu_seconds for r, _, _ in runs]
            res, rep, audit_s = runs[0]
            paper = PAPER.get((algo, k), (None, None))
            ncp_txt = f"{statistics.mean(ncps):.2f}" + (f" ± {statistics.stdev(ncps):.2f}" if len(ncps) > 1 else "")
            sec_txt = f"{statistics.mean(secs):.2f} / {statistics.mean(cpus):.2f}" + (
                f" (max wall {max(secs):.2f})" if len(secs) > 1 else ""
            )
            lines.append(
                f"| {k} | {algo} | {ncp_txt} | {paper[0] if paper[0] is not None else '—'} | {sec_txt} | "
                f"{paper[1] if paper[1] is not None else '—'} | ≤ {TARGET_SECONDS[algo]} | {rep.k} | {rep.n_classes} "
                f"| {audit_s:.2f} |"
            )
            results[(algo, k)] = {"ncp": statistics.mean(ncps), "seconds": max(secs), "cpu": max(cpus)}
            if algo.startswith("mondrian"):  # the published table is shuffled: rebuild labels per source row
                code_ncp[algo] = code_range_ncp(df, _source_labels(df, hier, k, algo))
            print(lines[-1], flush=True)
        code_ncp["median"] = code_range_ncp(df, _source_labels(df, hier, k, "mondrian", "median"))
        extra.append(
            f"| {k} | {code_ncp['mondrian']:.2f} | {code_ncp['mondrian-relaxed']:.2f} | {code_ncp['median']:.2f} | "
            f"{PAPER[('mondrian', k)][0]} |"
        )
    return "\n".join(lines + extra), results


def _source_labels(df: pd.DataFrame, hier: str, k: int, algo: str, split: str = "gain") -> np.ndarray:
    """Class label per *source* row: rerun the (deterministic) Mondrian on the source order."""
    from veil.generators.kanon.generalise import QISpace
    from veil.generators.kanon.hierarchies import load_hierarchies
    from veil.generators.kanon.mondrian import mondrian

    space = QISpace(df, QI, load_hierarchies(hier, QI))
    return mondrian(space, k, relaxed=algo == "mondrian-relaxed", split=split)


def bench_som(df: pd.DataFrame) -> str:
    from minisom import MiniSom

    x = df[SOM_COLS].to_numpy(dtype=float)
    z = (x - x.mean(axis=0)) / x.std(axis=0)
    y = (df["income"] == ">50K").to_numpy(dtype=float)
    t0 = time.perf_counter()
    ours = fit_som(x, 150, epochs=20, seed=0)
    ours_s = time.perf_counter() - t0
    idx = ours.transform(x)
    ours_r = abs(np.corrcoef(idx, y)[0, 1])
    m = MiniSom(1, 150, 4, sigma=75, learning_rate=0.5, activation_distance="cosine", random_seed=0)
    m.random_weights_init(z)
    t0 = time.perf_counter()
    m.train_random(z, len(z))  # one epoch, one row at a time
    mini_s = time.perf_counter() - t0
    win = np.array([m.winner(v)[1] for v in z])
    mini_r = abs(np.corrcoef(win, y)[0, 1])
    wn = m.get_weights().reshape(150, 4)
    wn = wn / np.linalg.norm(wn, axis=1, keepdims=True)
    zn = z / np.maximum(np.linalg.norm(z, axis=1, keepdims=True), 1e-12)
    mini_qe = float(np.mean(1 - (zn @ wn.T).max(axis=1)))
    t0 = time.perf_counter()
    model, scores = choose_neurons(x, y, neuron_candidates(100, 300, 10), epochs=20, seed=0)
    search_s = time.perf_counter() - t0
    return "\n".join(
        [
            "| SOM (1×150, 4 standardised columns, cosine) | seconds | neurons used | cosine QE | abs(r) with income |",
            "|---|---|---|---|---|",
            f"| Veil batch SOM (numpy), 20 epochs | {ours_s:.2f} | {len(np.unique(idx))} "
            f"| {ours.quantisation_error(x):.4f} | {ours_r:.3f} |",
            f"| MiniSom 2.3.6 `train_random`, 1 epoch | {mini_s:.2f} | {len(np.unique(win))} | {mini_qe:.4f} | {mini_r:.3f} |",
            "",
            f"Neuron search 100..300 step 10 (21 maps × 20 epochs): {search_s:.1f} s; best {model.n_neurons} neurons "
            f"(|r| = {max(scores.values()):.3f}; at 300: {scores[300]:.3f}).",
        ]
    )


def bench_utility(df: pd.DataFrame, hier: str, models: list[str], seed: int) -> str:
    base = utility_report(df[[*QI, *SOM_COLS, "income"]], label="income", models=models, seed=seed)
    base_qi = utility_report(df[[*QI, "income"]], label="income", models=models, seed=seed)
    rows = [("original (QIs + 4 numeric)", None, base), ("original (QIs only)", None, base_qi)]
    gains = []
    for k in (5, 10, 30):
        for algo in ("kma", "oka", "mondrian"):
            som = algo != "mondrian"
            res = anonymise(
                df,
                qi=QI,
                k=k,
                algorithm=algo,
                hierarchies=hier,
                sensitive=["income"],
                som_columns=SOM_COLS if som else (),
                som_label="income" if som else None,
                seed=seed,
            )
            plain = utility_report(
                res.table.drop(columns=[SOM_COLUMN], errors="ignore"), label="income", models=models, seed=seed
            )
            rows.append((f"{algo.upper()} k={k}", k, plain))
            if som:
                with_som = utility_report(res.table, label="income", models=models, seed=seed)
                rows.append((f"{algo.upper()}+SOM k={k} ({res.som['neurons']} neurons)", k, with_som))
                if algo == "kma":
                    gains.append((k, with_som["accuracy"].to_numpy() - plain["accuracy"].to_numpy()))
            print(rows[-1][0], flush=True)
    head = "| data | " + " | ".join(models) + " |"
    out = [f"Test accuracy (60/20/20 split, seed {seed}); F1 of `>50K` in brackets:", "", head, "|---|" + "---|" * len(models)]
    for name, _, rep in rows:
        cells = [f"{a:.3f} ({f:.2f})" for a, f in zip(rep["accuracy"], rep["f1"], strict=True)]
        out.append(f"| {name} | " + " | ".join(cells) + " |")
    out += [
        "",
        "KMA+SOM minus KMA, test accuracy (percentage points):",
        "",
        "| k | " + " | ".join(models) + " | mean |",
        "|---|" + "---|" * (len(models) + 1),
    ]
    for k, g in gains:
        out.append(f"| {k} | " + " | ".join(f"{100 * v:+.2f}" for v in g) + f" | {100 * g.mean():+.2f} |")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:  # pragma: no cover
        pass
    df = load_adult(drop_missing=True)
    hier = str(adult_hierarchy_dir())
    seeds = [0] if args.quick else [0, 1, 2]
    models = ["naive_bayes", "logistic_regression", "decision_tree"] if args.quick else list(MODELS)
    algo_md, _ = bench_algorithms(df, hier, seeds)
    som_md = bench_som(df)
    util_md = bench_utility(df, hier, models, seed=0)
    md = f"""## k-anonymity on Adult (`bench/kanon_adult.py`)

Adult `adult.data` with `?` rows dropped: {len(df):,} rows. QIs: {", ".join(QI)}; sensitive: income;
hierarchies: `clustering_based_k_anon` (workclass and marital-status have a middle level, the others are flat);
age and education_num numeric. NCP as in the reference code (qiyuangong/Clustering_based_K_Anon): numeric
(max − min) / domain range; categorical leaves under the LCA / all leaves (0 for a single leaf); mean over
QIs and rows, in percent. "seconds" is the algorithm alone, wall clock / CPU time of the process (OKA/KMA:
mean over seeds {seeds}, max wall in brackets); the host's load average was 8–13 on 2 cores while this ran, so wall
time is 2–4× the CPU time;
the independent audit (with journalist risk against the source table) is timed separately. Paper times: Python 2.7
on a 4-core i5-7500T; reference code measured here grows as n² (K-Member 193 s at 5,000 rows, see notes/peers.md).
Ours: one process on a 2-core host shared with ~7 other jobs, numpy, no threads pinned beyond BLAS defaults.

{algo_md}

### SOM

{som_md}

### Income prediction (paper Figures 7–9)

Paper (RapidMiner, text of §6.4): at k=5 KMA+SOM ≈ 80% (naive Bayes) vs ≈ 83% on the original; best ≈ 82%
(deep learning) vs ≈ 85%; KMA+SOM above KMA and OKA(+SOM) at every k. Models here are scikit-learn's
(naive Bayes = Bernoulli on quantile bins; gradient boosting = histogram GBT; MLP 64-32 with early stopping).

{util_md}
"""
    write_section("kanon", md)
    print(md)


if __name__ == "__main__":
    main()
