"""`veil compare` on all of Adult's numeric columns vs the paper's Table 11 (docs/benchmarks.md "sdc").

Run: ``.venv/bin/python -m bench.sdc_compare [--rows N] [--gan-epochs 300] [--skip-gan300]``.

Data: adult.data (32,561 rows), columns age, education_num, hours_per_week, capital_gain, label
income; bounds from examples/adult_policy.toml. One torch thread. Every method's default grid is
swept exactly as ``veil compare`` does (same function); then the GAN is trained separately for
300 epochs (architectures 1 and 2) to time the issue's "≤ 2 minutes for 300 epochs" target.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

COLUMNS = ("age", "education_num", "hours_per_week", "capital_gain")
BOUNDS = {"age": (17, 90), "education_num": (1, 16), "hours_per_week": (1, 99), "capital_gain": (0, 99999)}
DOCS = Path(__file__).resolve().parent.parent / "docs"

# The paper's Table 11 (fishing data, 9,529 rows, 4 columns): best IL/DR trade-off per filter.
PAPER_TABLE11 = {
    "noise_addition": ("Noise addition", 2134.0, 0.994),
    "microagg_dbscan": ("Microaggregation", 18152.95, 0.983950),
    "rank_swapping": ("Rank swapping", 917.83, 0.9925),
    "dp_microagg_laplace": ("DP Laplacian", 17822.50, 0.983809),
    "dp_microagg_exponential": ("DP Exponential", 17822.96, 0.983815),
    "gan": ("GAN", 20298.3, 0.980435),
    "ml_copy": ("ML copies", 9424.05, 0.809793),
}
PAPER_N = 9529


def _fmt(v: Any, nd: int = 3) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return f"{v:,.{nd}f}"
    return str(v)


def best_tradeoff(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per method, the point minimising IL_mean + DR (both 'lower is better', both on ~[0, 1])."""
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        if r["il_mean"] is None or r["dr"] is None:
            continue
        score = r["il_mean"] + r["dr"]
        if r["method"] not in out or score < out[r["method"]]["_score"]:
            out[r["method"]] = {**r, "_score": score}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=None, help="use only the first N rows (default: all)")
    ap.add_argument("--gan-epochs", type=int, default=300)
    ap.add_argument("--skip-gan300", action="store_true")
    args = ap.parse_args()

    import torch

    torch.set_num_threads(1)
    from veil.datasets import load_adult
    from veil.generators.base import Context, generator_names, get_generator
    from veil.generators.sdc import clean_input, compare_methods, plot_tradeoff, release_metrics

    df = load_adult()
    if args.rows:
        df = df.head(args.rows)
    ctx = Context(
        columns=COLUMNS, target="income", bounds=BOUNDS, seed=0, progress=True, categories={"income": ("<=50K", ">50K")}
    )
    methods = generator_names(lambda c: c.family == "sdc")
    t0 = time.perf_counter()
    rows = compare_methods(df, ctx, methods, seed=0)
    total = time.perf_counter() - t0
    DOCS.mkdir(exist_ok=True)
    plot_tradeoff(rows, DOCS / "sdc_tradeoff.png")
    (DOCS / "sdc_compare_adult.json").write_text(json.dumps(rows, indent=1, default=str), encoding="utf-8")

    gan300: list[tuple[int, float, dict[str, Any]]] = []
    if not args.skip_gan300:
        clean = clean_input(df, ctx)
        for arch in (1, 2):
            gen = get_generator("gan")(architecture=arch, epochs=args.gan_epochs)
            t = time.perf_counter()
            out = gen.run(clean, ctx)
            secs = time.perf_counter() - t
            gan300.append((arch, secs, release_metrics(clean, out, ctx)))

    import os

    load = os.getloadavg()
    n = len(clean_input(df, ctx))
    md: list[str] = ["## sdc — `veil compare` on Adult (SDC filters, DP microaggregation, GAN, ML copies)", ""]
    md.append(
        f"Adult train split, {n:,} rows, columns {', '.join(COLUMNS)}, label income; every method's default grid "
        f"({len(rows)} points), the exact code path of `veil compare`. One torch thread; a 2-core host shared with "
        "about seven other agents' jobs, so times are upper bounds (they drift up to 3× with load)."
    )
    md += [
        "",
        f"Load average at the end of the run: {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (1/5/15 min) on 2 "
        "cores. Runs of the same sweep at load averages 10–12 took 3–5× longer (whole compare 275–289 s, "
        "slowest filter point 8–11 s, GAN architecture 1 at 300 epochs 125–231 s, architecture 2 63–133 s).",
        "",
    ]
    md += ["", f"**Whole default `veil compare`: {total:,.1f} s** (target ≤ 600 s), metrics included.", ""]
    md += [
        "### Time per grid point (generator only, all rows; target ≤ 10 s, GAN ≤ 120 s for 300 epochs)",
        "",
        "| method | points | max s | median s |",
        "|---|---|---|---|",
    ]
    for m in methods:
        secs = [r["seconds"] for r in rows if r["method"] == m]
        md.append(f"| {m} | {len(secs)} | {max(secs):.2f} | {float(np.median(secs)):.2f} |")
    for arch, secs, _met in gan300:
        md.append(f"| gan, architecture {arch}, {args.gan_epochs} epochs (batch 1024) | 1 | {secs:.1f} | — |")
    md += ["", "Paper: 30 minutes (noise addition) to over 2 hours per filter on 9,529 rows.", ""]

    best = best_tradeoff(rows)
    md += [
        "### Best trade-off per method vs the paper's Table 11",
        "",
        "Ours: the grid point minimising IL mean + DR. IL is the paper's sum of cosine distances on standardised "
        f"columns (n = {n:,}); the paper's IL is on its own scale, so compare IL per record (IL/n, paper n = "
        f"{PAPER_N:,}) and the ordering, not the absolute values.",
        "",
        "| method | our params | our IL | our IL/n | our DR | our linkage risk | paper IL | paper IL/n | paper DR |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for m in methods:
        b = best.get(m)
        paper = PAPER_TABLE11.get(m)
        p_il = f"{paper[1]:,.1f}" if paper else "—"
        p_ilm = f"{paper[1] / PAPER_N:.3f}" if paper else "—"
        p_dr = f"{paper[2]:.4f}" if paper else "—"
        if b is None:
            md.append(f"| {m} | — | — | — | — | — | {p_il} | {p_ilm} | {p_dr} |")
            continue
        params = " ".join(f"{k}={v}" for k, v in b["params"].items())
        md.append(
            f"| {m} | {params} | {b['il']:,.1f} | {b['il_mean']:.3f} | {b['dr']:.4f} | "
            f"{_fmt(b['linkage_risk'], 4)} | {p_il} | {p_ilm} | {p_dr} |"
        )
    for arch, _, met in gan300:
        md.append(
            f"| gan arch {arch}, {args.gan_epochs} epochs | | {met['il']:,.1f} | {met['il_mean']:.3f} | "
            f"{met['dr']:.4f} | n/a | | | |"
        )
    md += [
        "",
        "### Pareto front (IL mean and DR both minimised)",
        "",
        "| method | params | IL mean | DR | linkage risk |",
        "|---|---|---|---|---|",
    ]
    for r in sorted((r for r in rows if r["pareto"]), key=lambda r: r["il_mean"]):
        params = " ".join(f"{k}={v}" for k, v in r["params"].items())
        md.append(f"| {r['method']} | {params} | {r['il_mean']:.3f} | {r['dr']:.4f} | {_fmt(r['linkage_risk'], 4)} |")
    md += ["", "![IL vs DR](sdc_tradeoff.png)", "", "Raw rows: `docs/sdc_compare_adult.json`.", ""]
    md += ["### Does the paper's Table 11 ordering hold on Adult?", ""]
    md += _ordering_verdict(best, rows)
    from bench._report import write_section

    write_section("sdc", "\n".join(md))
    print("\n".join(md))


def _variant(r: dict[str, Any]) -> str:
    """Method name, with DP microaggregation split by partition (grid = ε-DP; mdav = paper-like, not DP)."""
    part = r["params"].get("partition")
    return f"{r['method']}[{part}]" if part else r["method"]


# The paper's seven filters as Veil runs them: DBSCAN microaggregation, DP on the data-independent grid.
PAPER_SET = (
    "noise_addition",
    "rank_swapping",
    "microagg_dbscan",
    "dp_microagg_laplace[grid]",
    "dp_microagg_exponential[grid]",
    "gan",
    "ml_copy",
)


def _ordering_verdict(best: dict[str, dict[str, Any]], rows: list[dict[str, Any]]) -> list[str]:
    del best
    min_il: dict[str, float] = {}
    min_dr: dict[str, float] = {}
    for r in rows:
        if r["il_mean"] is None or r["dr"] is None:
            continue
        v = _variant(r)
        min_il[v] = min(min_il.get(v, np.inf), r["il_mean"])
        min_dr[v] = min(min_dr.get(v, np.inf), r["dr"])
    paper = [m for m in PAPER_SET if m in min_il]
    il_order = sorted(paper, key=min_il.get)
    dr_order = sorted(paper, key=min_dr.get)
    ours = sorted(min_il, key=min_il.get)
    lines = [
        "Lowest IL mean reachable on each grid (the paper's seven filters as Veil runs them), lowest first: "
        + ", ".join(f"{m} ({min_il[m]:.3f})" for m in il_order)
        + ".",
        "",
        "Lowest DR reachable, lowest first: " + ", ".join(f"{m} ({min_dr[m]:.3f})" for m in dr_order) + ".",
        "",
        "All variants including Veil's additions (MDAV; DP on MDAV groups, which is not DP as a whole), by lowest "
        "IL mean: " + ", ".join(f"{m} ({min_il[m]:.3f})" for m in ours) + ".",
        "",
    ]
    two = set(il_order[:2])
    lines.append(
        "- *Noise addition and rank swapping have the lowest IL*: "
        + ("**holds**" if two == {"noise_addition", "rank_swapping"} else f"**does not hold** (lowest: {il_order[:2]})")
        + " among the paper's filters; MDAV microaggregation (not in the paper) goes lower still."
    )
    gap = min_dr[dr_order[1]] - min_dr[dr_order[0]] if len(dr_order) > 1 else float("nan")
    lines.append(
        "- *ML copies have the lowest DR (paper: 0.81 vs ≥ 0.98 for all others)*: "
        + ("**holds**" if dr_order[0] == "ml_copy" else f"**does not hold** (lowest: {dr_order[0]})")
        + f", but only by {gap:.3f} over {dr_order[1]}, not by the paper's wide margin; the GAN is "
        + ("second, as in the paper." if dr_order[1:2] == ["gan"] else f"ranked {dr_order.index('gan') + 1} (paper: second).")
    )
    lines.append(
        "- *ML copies give the best trade-off*: only in DR. Their rows are synthetic, so IL pairs random rows "
        f"(IL mean {min_il.get('ml_copy', float('nan')):.3f}, near 1 like every synthetic release); the paper's ML-copy IL "
        "was half its microaggregation IL. Whether they are 'best' depends on how a curator weighs the two axes; "
        "they sit at the low-DR end of the Pareto front."
    )
    if "microagg_dbscan" in min_il and "dp_microagg_laplace[grid]" in min_il:
        lines.append(
            "- *Microaggregation and DP behave alike*: DBSCAN microaggregation reaches IL mean "
            f"{min_il['microagg_dbscan']:.3f} / DR {min_dr['microagg_dbscan']:.3f}; ε-DP microaggregation on the "
            f"data-independent grid {min_il['dp_microagg_laplace[grid]']:.3f} / "
            f"{min_dr['dp_microagg_laplace[grid]']:.3f} (Laplace). The paper-like DP on data-dependent (MDAV) "
            "groups tracks plain MDAV at large ε, as expected since it is the same partition plus noise."
        )
    return lines


if __name__ == "__main__":
    main()
