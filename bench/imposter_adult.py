"""IMPOSTER on Adult: detection, setting A vs B, TSTR, kRR curve, λ sweep (docs/benchmarks.md "imposter").

Run: ``.venv/bin/python -m bench.imposter_adult [--epochs 20] [--quick]``.

Data: ``adult.data`` (32,561 rows) trains every generator and every classifier; ``adult.test``
(16,281 rows) is only ever a test set. Setting A trains on real train rows and tests on real
test rows; setting B trains on the synthetic release of the train rows and tests on the
synthetic release of the test rows (same generator, fresh noise, the test rows' own sex and
income as conditions); TSTR trains on the synthetic train release and tests on the real test
rows. Features are the implicit attributes only (as in the paper's Table 1 and 2).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pandas as pd

PAPER_TABLE1 = {  # θ = 0.01, λ = 1: (A sex acc, A sex F1, A inc acc, A inc F1, B sex acc, B sex F1, B inc acc, B inc F1)
    "GB": (0.8439, 0.8269, 0.8320, 0.7538, 0.6726, 0.4021, 0.8229, 0.7176),  # paper's GBDT
    "RF": (0.8426, 0.8221, 0.8319, 0.7564, 0.6509, 0.4414, 0.8295, 0.7349),
    "MLP": (0.8448, 0.8237, 0.8311, 0.7648, 0.6732, 0.5417, 0.8324, 0.7169),
    "LR": (0.8474, 0.8301, 0.8332, 0.7532, 0.6732, 0.4024, 0.8138, 0.7030),
}
EPSILONS = (1.0, 2.0, 5.0, 10.0, 100.0)
LAMBDAS = (0.0, 0.5, 1.0, 2.0, 5.0)
OUT = Path(__file__).resolve().parent.parent / "docs"


def classifiers(seed: int) -> dict[str, Any]:
    from sklearn.ensemble import HistGradientBoostingClassifier, RandomForestClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    return {
        "GB": HistGradientBoostingClassifier(random_state=seed),
        "RF": RandomForestClassifier(n_estimators=100, min_samples_leaf=2, n_jobs=1, random_state=seed),
        "MLP": make_pipeline(
            StandardScaler(), MLPClassifier(hidden_layer_sizes=(64,), max_iter=60, early_stopping=True, random_state=seed)
        ),
        "LR": make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000)),
    }


def score(
    name: str, train: pd.DataFrame, test: pd.DataFrame, features: list[str], target: str, reference: pd.DataFrame, seed: int
) -> tuple[float, float]:
    from sklearn.base import clone
    from sklearn.metrics import accuracy_score, f1_score

    from veil.auditor.implicit import one_hot_features

    clf = clone(classifiers(seed)[name])
    clf.fit(one_hot_features(train[features], reference), train[target].astype(str))
    pred = clf.predict(one_hot_features(test[features], reference))
    truth = test[target].astype(str)
    return float(accuracy_score(truth, pred)), float(f1_score(truth, pred, average="macro"))


def run(epochs: int, lambdas: tuple[float, ...], headline: float, seed: int, quick: bool) -> dict[str, Any]:
    import torch
    from threadpoolctl import threadpool_limits

    from veil.auditor.implicit import detect_implicit, plot_report
    from veil.datasets import load_adult
    from veil.generators.imposter import Imposter
    from veil.generators.krr import krr_publish

    torch.set_num_threads(1)
    threadpool_limits(1)  # scikit-learn's OpenMP pools too: the host is shared
    train, test = load_adult("train"), load_adult("test")
    if quick:
        train, test = train.head(4000), test.head(2000)
    res: dict[str, Any] = {"rows_train": len(train), "rows_test": len(test), "epochs": epochs, "threads": 1}
    t0 = time.perf_counter()
    rep = detect_implicit(train, "sex", theta=0.01, beta=0.7, exclude=["income"], seed=seed)
    res["detection"] = rep.to_dict() | {"seconds": time.perf_counter() - t0}
    if not quick:
        plot_report(rep, OUT / "imposter_nmi_adult.png")
    imp = list(rep.implicit)
    ref = pd.concat([train[imp], test[imp]])
    names = list(classifiers(seed))
    res["A"] = {n: {t: score(n, train, test, imp, t, ref, seed) for t in ("sex", "income")} for n in names}
    print("setting A", res["A"], flush=True)
    res["models"] = {}
    for lam in lambdas:
        model = Imposter(implicit=imp, sensitive="sex", label="income", lam=lam, epochs=epochs, seed=seed)
        t1 = time.perf_counter()
        model.fit(train)
        train_s = time.perf_counter() - t1
        # the paper's setting B: each real row's own sex and income as conditions (``Imposter.generate``); a
        # publication (``Imposter.publish``) draws the conditions uniformly over the declared pairs instead
        syn_tr, syn_te = own_conditions(model, train, seed + 1), own_conditions(model, test, seed + 2)
        which = names if lam >= 1.0 else ["GB"]
        entry: dict[str, Any] = {
            "train_seconds": train_s,
            "epoch_seconds_median": statistics.median(h.seconds for h in model.history),
            "d2_accuracy_last_epoch": model.history[-1].d2_accuracy,
            "B": {n: {t: score(n, syn_tr, syn_te, imp, t, ref, seed) for t in ("sex", "income")} for n in which},
            "TSTR": {n: {t: score(n, syn_tr, test, imp, t, ref, seed) for t in ("sex", "income")} for n in which},
        }
        res["models"][str(lam)] = entry
        print(f"lambda={lam}", json.dumps(entry), flush=True)
    krr_specs = {"hours_per_week": SimpleNamespace(type="int", bounded=True, lower=1, upper=99, values=None)}
    res["krr"] = {}
    for eps in EPSILONS:
        ktr, _ = krr_publish(train, imp, epsilon=eps, specs=krr_specs)
        kte, _ = krr_publish(test, imp, epsilon=eps, specs=krr_specs)
        res["krr"][str(eps)] = {
            "perturbed": {t: score("GB", ktr, kte, imp, t, ref, seed) for t in ("sex", "income")},
            "tstr": {t: score("GB", ktr, test, imp, t, ref, seed) for t in ("sex", "income")},
        }
        print(f"krr eps={eps}", res["krr"][str(eps)], flush=True)
    res["majority"] = {t: float(test[t].value_counts(normalize=True).max()) for t in ("sex", "income")}
    return res


def own_conditions(model: Any, rows: pd.DataFrame, seed: int) -> pd.DataFrame:
    """``rows``' sex and income with synthetic implicit attributes generated for them."""
    cond = rows[["sex", "income"]].reset_index(drop=True)
    return pd.concat([cond, model.generate(cond, seed=seed).reset_index(drop=True)], axis=1)


def time_all_rows(epochs: int, lam: float, seed: int) -> dict[str, Any]:
    """Train once on all of Adult (adult.data + adult.test, 48,842 rows) and time it."""
    import torch

    from veil.datasets import load_adult
    from veil.generators.imposter import Imposter

    torch.set_num_threads(1)
    df = pd.concat([load_adult("train"), load_adult("test")], ignore_index=True)
    imp = ["relationship", "marital_status", "occupation", "hours_per_week"]
    model = Imposter(implicit=imp, sensitive="sex", label="income", lam=lam, epochs=epochs, seed=seed)
    t0 = time.perf_counter()
    model.fit(df)
    return {
        "rows": len(df),
        "lambda": lam,
        "epochs": epochs,
        "train_seconds": time.perf_counter() - t0,
        "median_epoch_seconds": statistics.median(h.seconds for h in model.history),
        "min_epoch_seconds": min(h.seconds for h in model.history),
    }


def f(x: float) -> str:
    return f"{x:.3f}"


def target_met(entry: dict[str, Any]) -> bool:
    b = entry["B"]
    return all(n in b and b[n]["sex"][0] <= 0.70 and b[n]["income"][0] >= 0.80 for n in PAPER_TABLE1)


def markdown(res: dict[str, Any], headline: float) -> str:
    det = res["detection"]
    met = [float(k) for k, m in res["models"].items() if target_met(m)]
    headline = min(met) if met else headline
    lines = [
        "## IMPOSTER: implicit privacy on Adult (sex explicit, income label, θ = 0.01)",
        "",
        f"Generators and classifiers train on `adult.data` ({res['rows_train']:,} rows); `adult.test` "
        f"({res['rows_test']:,} rows) is only a test set. Features: the implicit attributes only. "
        "Setting A = train real / test real; setting B = train on the synthetic release of the train rows, "
        "test on the synthetic release of the test rows; TSTR = train synthetic / test real. "
        "Accuracy and macro F1 (the average the paper's figures match). GB = scikit-learn "
        "HistGradientBoosting (the paper: GBDT), RF 100 trees, MLP one hidden layer of 64, LR.",
        "",
        f"**Detection** ({det['normalisation_formula']}, numerics in ≤ {det['bins']} equal-frequency bins): "
        + ", ".join(f"{k} {v:.4f}" for k, v in det["scores"].items())
        + f". Implicit set at θ = 0.01: **{', '.join(det['implicit'])}**; classifier check "
        f"(HistGradientBoosting, 30 % held out) accuracy {f(det['accuracy'])}, macro F1 {f(det['f1_macro'])} "
        f"(majority rate {f(det['majority_rate'])}), so τ ≥ β = 0.7 holds. Bar chart: `docs/imposter_nmi_adult.png`.",
        "",
        f"**Table 1 analogue** (ours at λ = {headline:g}, {res['epochs']} epochs; paper at λ = 1, XGBoost row omitted):",
        "",
        "| classifier | A sex acc / F1 | A income acc / F1 | B sex acc / F1 | B income acc / F1 | TSTR income acc / F1 "
        "| paper A sex | paper A income | paper B sex | paper B income |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    head = res["models"][str(headline)]
    for n, p in PAPER_TABLE1.items():
        a, b, t = res["A"][n], head["B"][n], head["TSTR"][n]
        lines.append(
            f"| {n} | {f(a['sex'][0])} / {f(a['sex'][1])} | {f(a['income'][0])} / {f(a['income'][1])} "
            f"| {f(b['sex'][0])} / {f(b['sex'][1])} | {f(b['income'][0])} / {f(b['income'][1])} "
            f"| {f(t['income'][0])} / {f(t['income'][1])} "
            f"| {p[0]:.3f} / {p[1]:.3f} | {p[2]:.3f} / {p[3]:.3f} | {p[4]:.3f} / {p[5]:.3f} | {p[6]:.3f} / {p[7]:.3f} |"
        )
    ok = target_met(head)
    full = [f"{float(k):g}" for k, m in res["models"].items() if all(n in m["B"] for n in PAPER_TABLE1)]
    lines += [
        "",
        f"Target (B sex accuracy ≤ 0.70 and B income accuracy ≥ 0.80 for all four): **{'met' if ok else 'NOT met'}**. "
        f"Majority rates on the test rows: sex {f(res['majority']['sex'])}, income {f(res['majority']['income'])}. "
        f"The table shows the smallest λ (of those evaluated with all four classifiers: {', '.join(full)}) that meets "
        f"the target; the others follow.",
        "",
        "All four classifiers at every λ ≥ 1 (B = synthetic/synthetic; TSTR = synthetic/real), accuracy:",
        "",
        "| λ | " + " | ".join(f"{n} B sex / B income / TSTR income" for n in PAPER_TABLE1) + " |",
        "|---|" + "---|" * len(PAPER_TABLE1),
    ]
    for lam, m in res["models"].items():
        if all(n in m["B"] for n in PAPER_TABLE1):
            cells = [
                f"{f(m['B'][n]['sex'][0])} / {f(m['B'][n]['income'][0])} / {f(m['TSTR'][n]['income'][0])}" for n in PAPER_TABLE1
            ]
            lines.append(f"| {float(lam):g} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "**λ sweep** (GB; λ = 0 is `--method gan`, the paper's CGAN+VAE ablation; paper Fig. 8 uses XGBoost "
        "and reports B sex accuracy ≈ 0.64–0.67 for λ ≥ 0.5 and income ≈ 0.82–0.83 throughout):",
        "",
        "| λ | B sex acc / F1 | B income acc / F1 | TSTR income acc / F1 | TSTR sex acc | D2 acc (last epoch, balanced) "
        "| train s | s / epoch (median) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for lam, m in res["models"].items():
        b, t = m["B"]["GB"], m["TSTR"]["GB"]
        lines.append(
            f"| {float(lam):g} | {f(b['sex'][0])} / {f(b['sex'][1])} | {f(b['income'][0])} / {f(b['income'][1])} "
            f"| {f(t['income'][0])} / {f(t['income'][1])} | {f(t['sex'][0])} | {f(m['d2_accuracy_last_epoch'])} "
            f"| {m['train_seconds']:.0f} | {m['epoch_seconds_median']:.2f} |"
        )
    lines += [
        "",
        "**kRR baseline** (each implicit attribute perturbed with ε; domains: declared 1–99 for hours_per_week, "
        "observed values for the categoricals; GB; train and test both perturbed, and TSTR on real test rows). "
        "Paper Fig. 7: at 68.91 % sex accuracy kRR keeps only 75.17 % income accuracy.",
        "",
        "| ε per attribute | sex acc / F1 | income acc / F1 | TSTR income acc | TSTR sex acc |",
        "|---|---|---|---|---|",
    ]
    for eps, k in res["krr"].items():
        p = k["perturbed"]
        lines.append(
            f"| {float(eps):g} | {f(p['sex'][0])} / {f(p['sex'][1])} | {f(p['income'][0])} / "
            f"{f(p['income'][1])} | {f(k['tstr']['income'][0])} | {f(k['tstr']['sex'][0])} |"
        )
    k2, l0 = res["krr"].get("2.0"), res["models"].get("0.0")
    if k2 and l0:
        lines += [
            "",
            f"Reading. Setting B reproduces the paper's story: at λ = {headline:g} sex falls to "
            f"{f(head['B']['GB']['sex'][0])} (GB) while income stays {f(head['B']['GB']['income'][0])}; kRR at ε = 2 "
            f"reaches a similar sex accuracy ({f(k2['perturbed']['sex'][0])}) but keeps only "
            f"{f(k2['perturbed']['income'][0])} income accuracy (paper: 0.689 / 0.752). λ = 0 (`--method gan`) keeps "
            f"the dependence (B sex {f(l0['B']['GB']['sex'][0])}). The honest check is less kind: trained on the "
            f"release and tested on real rows (TSTR), income accuracy is {f(head['TSTR']['GB']['income'][0])} at "
            f"λ = {headline:g} against {f(l0['TSTR']['GB']['income'][0])} at λ = 0 and "
            f"{f(res['A']['GB']['income'][0])} on real data, and kRR at ε = 2 does better on it "
            f"({f(k2['tstr']['income'][0])}). Removing the sex signal from the implicit columns also removes the "
            "part of the income signal that travels with sex; setting B hides this because its test rows are "
            "synthetic too.",
        ]
    lines += [
        "",
        "Timing: torch pinned to 1 thread (`torch.set_num_threads(1)`), scikit-learn's OpenMP pools to 1, CPU only, "
        "a 2-core host shared with about seven other jobs, so seconds per epoch drift up to 3× between runs. "
        "Released rows: the real row's "
        "non-implicit columns, sex and income, with the implicit attributes replaced by G(z | sex, income), "
        "z ~ N(0, I) fresh per row (see docs/imposter.md).",
    ]
    secs = [m["train_seconds"] for m in res["models"].values()]
    lines.append(
        f"Training on the {res['rows_train']:,} train rows, {res['epochs']} epochs: {min(secs):.0f}–"
        f"{max(secs):.0f} s per model (limit 5 minutes)."
    )
    t = res.get("timing_all_rows")
    if t:
        lines[-1] += (
            f" On all {t['rows']:,} rows of Adult (train + test), λ = {t['lambda']:g}, {t['epochs']} epochs: "
            f"{t['train_seconds']:.0f} s, {t['median_epoch_seconds']:.2f} s per epoch (median), "
            f"{t['min_epoch_seconds']:.2f} s fastest epoch."
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--headline", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="small subset, no docs written")
    parser.add_argument("--from-json", action="store_true", help="re-render docs from docs/imposter_bench.json")
    parser.add_argument(
        "--time-all", action="store_true", help="with --from-json: also time one model on all 48,842 rows and store it"
    )
    args = parser.parse_args()
    if args.from_json:
        res = json.loads((OUT / "imposter_bench.json").read_text(encoding="utf-8"))
        if args.time_all:
            res["timing_all_rows"] = time_all_rows(args.epochs, 2.0, args.seed)
            (OUT / "imposter_bench.json").write_text(json.dumps(res, indent=1, default=float), encoding="utf-8")
    else:
        res = run(args.epochs, LAMBDAS, args.headline, args.seed, args.quick)
    text = markdown(res, args.headline)
    print(text)
    if not args.quick:
        from bench._report import write_section

        if not args.from_json:
            (OUT / "imposter_bench.json").write_text(json.dumps(res, indent=1, default=float), encoding="utf-8")
        write_section("imposter", text)


if __name__ == "__main__":
    main()
