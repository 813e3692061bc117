"""Fit one SDV single-table synthesizer on a CSV and write samples (run inside ``.venv-sdv`` only).

Used by ``bench/synth_adult.py`` through a subprocess so that SDV never enters Veil's install.
Imports nothing of Veil.
"""

from __future__ import annotations

import argparse

import pandas as pd


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=("gaussian_copula", "ctgan"), required=True)
    ap.add_argument("--train", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--rows", type=int, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--epochs", type=int, default=100)
    args = ap.parse_args()

    import numpy as np
    import torch
    from sdv.metadata import Metadata
    from sdv.single_table import CTGANSynthesizer, GaussianCopulaSynthesizer

    torch.set_num_threads(1)
    np.random.seed(args.seed)  # a benchmark process of its own: SDV samples from the global generators
    torch.manual_seed(args.seed)
    train = pd.read_csv(args.train)
    metadata = Metadata.detect_from_dataframes({"adult": train})
    if args.model == "gaussian_copula":
        synth = GaussianCopulaSynthesizer(metadata)
    else:
        synth = CTGANSynthesizer(metadata, epochs=args.epochs)
    synth.fit({"adult": train})  # SDV 2: one table name mapped to its frame
    sample = synth.sample(num_rows=args.rows)
    (sample["adult"] if isinstance(sample, dict) else sample).to_csv(args.out, index=False)


if __name__ == "__main__":
    main()
