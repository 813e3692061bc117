"""A tabular GAN (MLP generator and discriminator) with the paper's Table 8 architectures.

Columns are standardised; a label column, if given, is one-hot encoded and generated with the
numbers (decoded by argmax). Generator: ``noise_dim`` → hidden layers (ReLU) → columns;
discriminator: columns → hidden layers (ReLU) → 1 logit; the original GAN loss (non-saturating
generator step), Adam, minibatches (paper: batch 64, lr 1e-4; Veil's defaults are batch 1024,
lr 1e-3 so that 300 epochs over Adult fit in about two minutes on one CPU thread). The release is ``n`` samples from
the trained generator, never the model. No formal guarantee: the generator is fitted to the raw
data without noise and can reproduce rare records.

Library code never seeds global torch state: a private ``torch.Generator`` seeded from ``seed``
drives initialisation, shuffling and noise.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

import numpy as np
import pandas as pd

from veil.generators.base import Context, Generator, Output, Param, register

__all__ = ["ARCHITECTURES", "GAN", "train_gan"]

#: Table 8: (generator hidden sizes, discriminator hidden sizes)
ARCHITECTURES: dict[int, tuple[tuple[int, ...], tuple[int, ...]]] = {
    1: ((32, 64, 128), (128, 64, 32)),
    2: ((50, 50, 50), (50, 50, 50)),
    3: ((1024, 512, 256), (256, 512, 1024)),
    4: ((256, 512, 1024), (512, 512, 512)),
    5: ((512, 512, 512), (512, 512, 512)),
    6: ((128, 128, 64), (64, 128, 256)),
    7: ((256, 512, 1024), (1024, 512, 256)),
}


def _mlp(sizes: list[int], gen: Any) -> Any:
    import torch

    layers: list[torch.nn.Module] = []
    for i in range(len(sizes) - 1):
        lin = torch.nn.Linear(sizes[i], sizes[i + 1])
        bound = 1.0 / np.sqrt(sizes[i])
        with torch.no_grad():  # explicit init from our private generator (no global seeding)
            lin.weight.uniform_(-bound, bound, generator=gen)
            lin.bias.uniform_(-bound, bound, generator=gen)
        layers.append(lin)
        if i < len(sizes) - 2:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def train_gan(
    z: np.ndarray,
    *,
    architecture: int = 1,
    epochs: int = 300,
    batch_size: int = 64,
    noise_dim: int = 100,
    lr: float = 1e-4,
    n_out: int | None = None,
    seed: int | None = None,
    progress: bool = False,
) -> tuple[np.ndarray, dict[str, Any]]:
    """Train on the rows of ``z`` (already encoded) and return ``(samples, info)``."""
    import torch

    from veil.generators.base import progress_bar

    gen = torch.Generator().manual_seed(int(seed) if seed is not None else secrets.randbits(63))
    g_sizes, d_sizes = ARCHITECTURES[architecture]
    d = z.shape[1]
    netg = _mlp([noise_dim, *g_sizes, d], gen)
    netd = _mlp([d, *d_sizes, 1], gen)
    opt_g = torch.optim.Adam(netg.parameters(), lr=lr, betas=(0.5, 0.999))
    opt_d = torch.optim.Adam(netd.parameters(), lr=lr, betas=(0.5, 0.999))
    loss = torch.nn.BCEWithLogitsLoss()
    data = torch.as_tensor(z, dtype=torch.float32)
    n = len(data)
    labels_d = torch.cat([torch.ones(batch_size, 1), torch.zeros(batch_size, 1)])
    ones = torch.ones(batch_size, 1)
    t0 = time.perf_counter()
    last = (float("nan"), float("nan"))
    with progress_bar(total=epochs, desc=f"GAN arch {architecture}", enabled=progress) as bar:
        for _ in range(epochs):
            perm = torch.randperm(n, generator=gen)
            for start in range(0, n - batch_size + 1, batch_size):
                real = data[perm[start : start + batch_size]]
                noise = torch.randn(batch_size, noise_dim, generator=gen)
                fake = netg(noise)
                opt_d.zero_grad(set_to_none=True)
                ld = 2.0 * loss(netd(torch.cat([real, fake.detach()])), labels_d)  # one pass over real+fake
                ld.backward()
                opt_d.step()
                opt_g.zero_grad(set_to_none=True)
                lg = loss(netd(fake), ones)
                lg.backward()
                opt_g.step()
            last = (ld.item(), lg.item())
            bar.update(1)
    with torch.no_grad():
        m = n if n_out is None else n_out
        samples = netg(torch.randn(m, noise_dim, generator=gen)).numpy().astype(np.float64)
    info = {"train_seconds": round(time.perf_counter() - t0, 2), "final_loss_d": last[0], "final_loss_g": last[1]}
    return samples, info


@register
class GAN(Generator):
    family = "sdc"
    name = "gan"
    summary = "tabular GAN (MLP G/D, Table 8 architectures 1-7), samples released, never the model"
    params = (
        Param("architecture", int, 1, grid=tuple(ARCHITECTURES), choices=tuple(ARCHITECTURES), help="Table 8 architecture 1-7"),
        Param("epochs", int, 300, help="training epochs (paper: 300 and 500)", lower=1),
        Param("batch_size", int, 1024, help="minibatch size (paper: 64; 1024 keeps 300 epochs near 2 min)", lower=2),
        Param("noise_dim", int, 100, help="generator input dimension (paper: 100)", lower=1),
        Param("lr", float, 1e-3, help="Adam learning rate (paper: 1e-4 at batch 64)", lower=1e-9),
    )

    @classmethod
    def default_grid(cls) -> list[dict[str, Any]]:
        """``veil compare`` default: the two cheapest architectures at 100 epochs (time budget);
        pass ``--param epochs=300`` or ``architecture=…`` to sweep more."""
        base = {p.name: p.default for p in cls.params}
        return [{**base, "architecture": a, "epochs": 100} for a in (1, 2)]

    def generate(self, data: pd.DataFrame, ctx: Context) -> Output:
        x = data[list(ctx.columns)].to_numpy(dtype=np.float64)
        mu, sd = x.mean(axis=0), x.std(axis=0)
        sd = np.where(sd > 0, sd, 1.0)
        parts = [(x - mu) / sd]
        classes: np.ndarray | None = None
        if ctx.target:
            classes, codes = np.unique(data[ctx.target].to_numpy(), return_inverse=True)
            parts.append(np.eye(len(classes))[codes.ravel()])
        z = np.concatenate(parts, axis=1)
        batch = min(self["batch_size"], len(z))
        samples, info = train_gan(
            z,
            architecture=self["architecture"],
            epochs=self["epochs"],
            batch_size=batch,
            noise_dim=self["noise_dim"],
            lr=self["lr"],
            seed=ctx.seed,
            progress=ctx.progress,
        )
        d = x.shape[1]
        frame = pd.DataFrame(samples[:, :d] * sd + mu, columns=list(ctx.columns))
        if classes is not None and ctx.target:
            frame[ctx.target] = classes[np.argmax(samples[:, d:], axis=1)]
        return Output(
            frame,
            source=None,
            guarantee="no formal guarantee: samples from a GAN trained on the raw data without noise",
            info=info,
        )
