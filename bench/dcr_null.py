"""The DCR gate's false refusals: tables that do not depend on the training/holdout split, and honest generators on
Adult, through ``veil.metrics.dcr.dcr_check`` as the gate calls it (80/20 split).

Run: ``.venv/bin/python -m bench.dcr_null [--seeds 5] [--generators]`` (the split-free battery takes a few minutes on
the shared 2-core host; ``--generators`` adds ML copy, IMPOSTER 30 epochs and the GAN 100 epochs on Adult, two seeds
each, which takes longer). Prints one JSON line per table and a summary: how many were refused, and the smallest tail
on each side (a training excess, a training deficit) of the set the report shows.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable

import numpy as np
import pandas as pd

from veil.metrics.dcr import dcr_check


def _gaussian(rng: np.random.Generator, n: int) -> pd.DataFrame:
    x = rng.normal(size=(n, 3))
    return pd.DataFrame({"x": x[:, 0], "y": x[:, 1], "z": x[:, 2], "c": rng.choice(list("abcd"), n)})


def _small(rng: np.random.Generator, n: int) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "s": rng.choice(["F", "M"], n),
            "g": rng.choice([f"g{i}" for i in range(5)], n),
            "r": rng.choice([f"r{i}" for i in range(8)], n),
            "n": rng.integers(0, 10, n),
            "m": rng.integers(0, 6, n),
        }
    )


def _six(rng: np.random.Generator, n: int) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "a": rng.integers(0, 100_000, n),
            "b": rng.integers(0, 5000, n),
            "c": rng.choice([f"c{i}" for i in range(300)], n),
            "d": rng.choice([f"d{i}" for i in range(40)], n),
            "e": rng.integers(0, 12, n).astype(float),
            "f": rng.choice([f"f{i}" for i in range(20)], n),
        }
    )


def _adult_world() -> Callable[[np.random.Generator, int], pd.DataFrame]:
    from veil.datasets import load_adult

    data = load_adult("train", drop_missing=True).reset_index(drop=True)

    def draw(rng: np.random.Generator, n: int) -> pd.DataFrame:
        return data.iloc[rng.choice(len(data), n, replace=False)].reset_index(drop=True)

    return draw


def _split(source: pd.DataFrame, rng: np.random.Generator) -> tuple[pd.DataFrame, pd.DataFrame]:
    order = rng.permutation(len(source))
    hold = round(len(source) * 0.2)
    return source.iloc[order[hold:]].reset_index(drop=True), source.iloc[order[:hold]].reset_index(drop=True)


def _nudged(source: pd.DataFrame, rng: np.random.Generator) -> pd.DataFrame:
    """Every source row (before the split) with one number moved a little: near copies of training and holdout rows
    alike."""
    out = source.copy()
    numbers = [c for c in out.columns if pd.api.types.is_numeric_dtype(out[c])]
    col = numbers[int(rng.integers(len(numbers)))]
    out[col] = out[col] + 1
    return out


def _record(name: str, table: pd.DataFrame, train: pd.DataFrame, holdout: pd.DataFrame, seed: int) -> dict[str, object]:
    rep = dcr_check(table, train, holdout, rng=np.random.default_rng(seed))
    line = {
        "table": name,
        "rows": len(table),
        "passed": rep.passed,
        "tail": rep.near_tail,
        "side": rep.near_side,
        "exact": rep.exact_train_rate,
        "exact_allowed": [rep.exact_floor, rep.exact_limit],
        "rare": rep.rare_train_rate,
        "rare_allowed": [rep.rare_floor, rep.rare_limit],
    }
    print(json.dumps(line), flush=True)
    return line


def battery(seeds: int) -> list[dict[str, object]]:
    worlds: dict[str, tuple[Callable[[np.random.Generator, int], pd.DataFrame], int]] = {
        "gaussian": (_gaussian, 2000),
        "small": (_small, 2000),
        "six": (_six, 1000),
        "adult": (_adult_world(), 5000),
    }
    out = []
    for world, (draw, n) in worlds.items():
        for seed in range(seeds):
            rng = np.random.default_rng(100 + seed)
            source = draw(rng, n)
            train, holdout = _split(source, rng)
            out.append(_record(f"{world}/fresh", draw(rng, n), train, holdout, seed))
            out.append(_record(f"{world}/fresh x4", draw(rng, 4 * n), train, holdout, seed))
            out.append(_record(f"{world}/resampled", source.sample(n, replace=True, random_state=seed), train, holdout, seed))
            out.append(_record(f"{world}/nudged", _nudged(source, rng), train, holdout, seed))
    return out


def generators() -> list[dict[str, object]]:
    from bench import synth_adult as sa

    out = []
    for seed in (0, 1):
        first, second, _ = sa.split(5000, seed)
        train, holdout = first.iloc[:4000].reset_index(drop=True), second.iloc[:1000].reset_index(drop=True)
        for name in ("ml_copy", "imposter30", "gan100"):
            if name == "ml_copy":
                table, columns = sa.veil_ml_copy(train, seed)
            elif name == "imposter30":
                table, columns = sa.veil_imposter(train, seed, 30)
            else:
                table, columns = sa.veil_gan(train, 100, seed)
            out.append(_record(f"adult/{name}/seed{seed}", table[columns], train[columns], holdout[columns], seed))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--generators", action="store_true")
    ap.add_argument("--no-battery", action="store_true")
    args = ap.parse_args()
    lines = [] if args.no_battery else battery(args.seeds)
    if args.generators:
        lines += generators()
    tails: dict[str, float] = {}
    for line in lines:
        side = str(line["side"])
        tails[side] = min(tails.get(side, 1.0), float(line["tail"]))  # type: ignore[arg-type]
    refused = [line["table"] for line in lines if not line["passed"]]
    print(json.dumps({"tables": len(lines), "refused": refused, "smallest_tail": tails}))


if __name__ == "__main__":
    main()
