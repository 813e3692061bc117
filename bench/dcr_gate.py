"""The DCR publication gate's cost: ``veil.metrics.dcr.dcr_check`` against every synthetic row, at 10,000 to
1,000,000 synthetic rows (``python -m bench.dcr_gate``; ``--rows`` to choose; ``--quick``: 10,000 and 100,000).

Three kinds of table: 3 columns (two numbers, one category: every column a tree coordinate), 8 categorical columns
of 4-10 values (3 one-hot, 5 through the group coordinate), and Adult's 15 columns (6 numbers, 9 categories; the
synthetic rows are other Adult people with ``fnlwgt`` redrawn). Source: 5,000 rows split 80/20. Wall and CPU seconds of
the check alone (the process's user + system time), peak memory of the process so far.
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np
import pandas as pd

from bench._report import write_section
from veil.metrics.dcr import dcr_check


def _draw(rng: np.random.Generator, n: int, kind: str) -> pd.DataFrame:
    if kind == "mixed":
        return pd.DataFrame({"age": rng.integers(17, 90, n), "gain": rng.integers(0, 5000, n), "sex": rng.choice(["F", "M"], n)})
    return pd.DataFrame({f"c{i}": rng.choice(list("abcdefghij"[:k]), n) for i, k in enumerate((4, 6, 8, 10, 5, 7, 9, 10))})


def _tables(kind: str, rows: int) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    rng = np.random.default_rng(1)
    if kind == "adult":
        from veil.datasets import load_adult

        adult = load_adult().dropna().reset_index(drop=True)
        order = np.random.default_rng(0).permutation(len(adult))
        source = adult.iloc[order[:5000]].reset_index(drop=True)
        synthetic = adult.iloc[order[5000:]].sample(n=rows, replace=True, random_state=1).reset_index(drop=True)
        synthetic["fnlwgt"] = rng.integers(int(adult["fnlwgt"].min()), int(adult["fnlwgt"].max()) + 1, rows)
    else:
        source, synthetic = _draw(rng, 5000, kind), _draw(rng, rows, kind)
    order = rng.permutation(len(source))
    hold = round(len(source) * 0.2)
    return synthetic, source.iloc[order[hold:]].reset_index(drop=True), source.iloc[order[:hold]].reset_index(drop=True)


def _cpu() -> float:
    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rows", type=int, nargs="*", default=None)
    args = parser.parse_args()
    sizes = args.rows or ([10_000, 100_000] if args.quick else [10_000, 100_000, 1_000_000])
    lines = [
        "## synth: the DCR gate's cost (every synthetic row compared)",
        "",
        "`python -m bench.dcr_gate` (" + __doc__.split("\n\n", 1)[1].replace("\n", " ").strip() + ")",
        "",
        "The `DCR ok` column of the synth section above is that benchmark's own per-row rule (the gate's before red "
        "team s64 F8), not this check. Times grow linearly with the synthetic rows (k-d trees over the distinct "
        "synthetic points, one per distance; a hash per column for the agreement sets: 1 + 2 + 3 moved columns up to "
        "2·10⁸ row-triples, then 1 + 2; and for the best matches: every column set up to 512 of them and 6·10⁷ rows × "
        "sets, else at least 48 drawn); memory is about twice the synthetic frame's. Wall time on a loaded host is "
        "several times the CPU time; the first row includes importing SciPy. `--rows 10000000` (3 columns, measured "
        "once on 2026-11-28): 37 CPU s, 148 s wall, 2.4 GiB.",
        "",
        "| table | columns | synthetic rows | wall s | CPU s | passed | sets tested | peak memory GiB |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for kind, label in [("mixed", "age, gain, sex"), ("categorical", "8 categorical"), ("adult", "Adult")]:
        for rows in sizes:
            synthetic, train, holdout = _tables(kind, rows)
            wall, cpu = time.perf_counter(), _cpu()
            report = dcr_check(synthetic, train, holdout, rng=np.random.default_rng(0))
            wall, cpu = time.perf_counter() - wall, _cpu() - cpu
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
            cells = [label, str(len(synthetic.columns)), f"{rows:,}", f"{wall:.1f}", f"{cpu:.1f}", str(report.passed)]
            row = "| " + " | ".join([*cells, str(report.near_sets), f"{peak:.2f}"]) + " |"
            print(row, flush=True)
            lines.append(row)
    write_section("dcr_gate", "\n".join(lines))


if __name__ == "__main__":
    main()
