"""A tabular GAN that does not collapse: quantile-normalised numbers, Gumbel-softmax categories,
PacGAN discriminator, the paper's Table 8 layer sizes.

Encoding (:class:`veil.generators.tabular_encoding.TabularEncoder`): numeric columns through the
empirical quantile transform to a standard normal (a spiky column such as capital_gain, 92 % zeros,
becomes one well-scaled coordinate whose inverse lands back on the mass point); categorical columns
(the ``--target`` label and any non-numeric column) one-hot.

Generator: ``noise_dim`` → hidden layers (Linear, BatchNorm, ReLU) → one output per encoded
coordinate. During training every categorical block goes through a Gumbel-softmax (temperature
``tau``), so the discriminator sees near-one-hot samples instead of soft probabilities it could tell
from real one-hots; at release, categories are *drawn* from the block's softmax (an arg-max decode
puts every row in the majority class — the collapse the paper's GAN showed on Adult, every row
``<=50K``). Discriminator: PacGAN (Lin et al. 2018): it judges ``pac`` samples concatenated, which
penalises a generator that produces too little variety; LeakyReLU hidden layers; the original GAN
loss with the non-saturating generator step; Adam. Every column needs a declared domain (numbers:
the policy's ``lower``/``upper``; categories and the label: its ``values``; a
:class:`~veil.errors.PolicyError` otherwise): the encoder's one-hot blocks and numeric ranges are the
declared ones (:mod:`veil.generators.tabular_encoding`), so no value one person alone holds (a rare
category, an outlier) decides what the output may contain; rows outside the domains are left out of
training.

Training runs with ``threads`` torch and BLAS threads (default 1: fastest for these small models on a
shared host) and restores the previous settings. Library code never seeds global torch state: a
private ``torch.Generator`` seeded from ``seed`` drives initialisation, shuffling and training noise; the released
samples' latent noise comes from ``rng`` (a publication's: 256 bits of the OS CSPRNG, red team s66 F1), never from a
seed the curator typed. The release is ``rows`` samples from the trained generator, never the model: a public
parameter (default :data:`~veil.generators.synthetic_size.DEFAULT_ROWS`), never the number of training
rows — the size of a synthetic table is public; choose it with ``--param rows``. No formal
guarantee: the generator is fitted to the raw data without noise and can reproduce rare records.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from veil.errors import InputError, did_you_mean
from veil.generators._threads import DEFAULT_THREADS, limited_threads
from veil.generators.base import Context, Generator, Output, Param, register
from veil.generators.domain import clip_into, column_domain
from veil.generators.randomness import torch_seed
from veil.generators.synthetic_size import DEFAULT_ROWS, ROWS_PARAM, check_rows

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


def _linear(n_in: int, n_out: int, gen: Any) -> Any:
    import torch

    lin = torch.nn.Linear(n_in, n_out)
    bound = 1.0 / np.sqrt(n_in)
    with torch.no_grad():  # explicit init from our private generator (no global seeding)
        lin.weight.uniform_(-bound, bound, generator=gen)
        lin.bias.uniform_(-bound, bound, generator=gen)
    return lin


def _generator_net(sizes: list[int], gen: Any) -> Any:
    import torch

    layers: list[torch.nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(_linear(sizes[i], sizes[i + 1], gen))
        if i < len(sizes) - 2:
            layers += [torch.nn.BatchNorm1d(sizes[i + 1]), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers)


def _discriminator_net(sizes: list[int], gen: Any) -> Any:
    import torch

    layers: list[torch.nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(_linear(sizes[i], sizes[i + 1], gen))
        if i < len(sizes) - 2:
            layers.append(torch.nn.LeakyReLU(0.2))
    return torch.nn.Sequential(*layers)


def _activate(raw: Any, spans: Sequence[tuple[int, int]], *, tau: float, gen: Any, gumbel: bool) -> Any:
    """Numeric coordinates unchanged; each softmax span through a Gumbel-softmax (training) or a
    plain softmax (``gumbel=False`` at release: probabilities the decoder draws from)."""
    import torch

    if not spans:
        return raw
    parts = []
    pos = 0
    for start, end in spans:
        if start > pos:
            parts.append(raw[:, pos:start])
        logits = raw[:, start:end]
        if gumbel:
            u = torch.rand(logits.shape, generator=gen).clamp_(1e-10, 1.0 - 1e-7)
            parts.append(torch.softmax((logits - torch.log(-torch.log(u))) / tau, dim=1))
        else:
            parts.append(torch.softmax(logits, dim=1))
        pos = end
    if pos < raw.shape[1]:
        parts.append(raw[:, pos:])
    return torch.cat(parts, dim=1)


def train_gan(
    z: np.ndarray,
    *,
    architecture: int = 1,
    epochs: int = 300,
    batch_size: int = 64,
    noise_dim: int = 100,
    lr: float = 1e-4,
    n_out: int = DEFAULT_ROWS,
    seed: int | None = None,
    progress: bool = False,
    spans: Sequence[tuple[int, int]] = (),
    pac: int = 1,
    tau: float = 0.2,
    threads: int = DEFAULT_THREADS,
    rng: np.random.Generator | None = None,
) -> tuple[np.ndarray, dict[str, Any]]:
    """Train on the rows of ``z`` (already encoded) and return ``(samples, info)``.

    ``seed`` seeds training (None: 63 fresh bits); ``rng`` draws the released samples' latent noise (None: the
    training generator, library use).

    ``spans``: ``(start, end)`` of each one-hot block (Gumbel-softmax in training, softmax
    probabilities in the samples); ``pac``: samples per discriminator decision (PacGAN; the batch
    is rounded down to a multiple of it); ``n_out``: samples returned (public; never ``len(z)``).
    """
    if architecture not in ARCHITECTURES:
        raise InputError(f"architecture must be one of 1-7, got {architecture!r}")
    if pac < 1:
        raise InputError(f"pac must be ≥ 1, got {pac!r}", hint="Use pac=10 (PacGAN) or 1 (plain GAN)")
    n_out = check_rows(n_out, "gan")
    with limited_threads(threads):
        return _train(z, architecture, epochs, batch_size, noise_dim, lr, n_out, seed, progress, spans, pac, tau, threads, rng)


def _train(
    z: np.ndarray,
    architecture: int,
    epochs: int,
    batch_size: int,
    noise_dim: int,
    lr: float,
    n_out: int,
    seed: int | None,
    progress: bool,
    spans: Sequence[tuple[int, int]],
    pac: int,
    tau: float,
    threads: int,
    rng: np.random.Generator | None = None,
) -> tuple[np.ndarray, dict[str, Any]]:
    import torch

    from veil.generators.base import progress_bar

    gen = torch.Generator().manual_seed(int(seed) if seed is not None else secrets.randbits(63))
    g_sizes, d_sizes = ARCHITECTURES[architecture]
    data = torch.as_tensor(z, dtype=torch.float32)
    n, d = data.shape
    pac = pac if min(batch_size, n) >= 2 * pac else 1
    batch = max((min(batch_size, n) // pac) * pac, 2)
    netg = _generator_net([noise_dim, *g_sizes, d], gen)
    netd = _discriminator_net([d * pac, *d_sizes, 1], gen)
    opt_g = torch.optim.Adam(netg.parameters(), lr=lr, betas=(0.5, 0.999))
    opt_d = torch.optim.Adam(netd.parameters(), lr=lr, betas=(0.5, 0.999))
    loss = torch.nn.BCEWithLogitsLoss()
    groups = batch // pac
    labels_d = torch.cat([torch.ones(groups, 1), torch.zeros(groups, 1)])
    ones = torch.ones(groups, 1)
    t0 = time.perf_counter()
    last = (float("nan"), float("nan"))
    netg.train()
    with progress_bar(total=epochs, desc=f"GAN arch {architecture}", enabled=progress) as bar:
        for _ in range(epochs):
            perm = torch.randperm(n, generator=gen)
            for start in range(0, n - batch + 1, batch):
                real = data[perm[start : start + batch]].reshape(groups, d * pac)
                noise = torch.randn(batch, noise_dim, generator=gen)
                fake = _activate(netg(noise), spans, tau=tau, gen=gen, gumbel=True).reshape(groups, d * pac)
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
    netg.eval()
    with torch.no_grad():
        latent = (
            torch.randn(n_out, noise_dim, generator=gen)
            if rng is None
            else torch.from_numpy(rng.standard_normal((n_out, noise_dim)).astype(np.float32))
        )
        raw = netg(latent)
        samples = _activate(raw, spans, tau=tau, gen=gen, gumbel=False).numpy().astype(np.float64)
    info = {
        "train_seconds": round(time.perf_counter() - t0, 2),
        "final_loss_d": last[0],
        "final_loss_g": last[1],
        "threads": threads,
        "pac": pac,
        "batch_size": batch,
    }
    return samples, info


@register
class GAN(Generator):
    family = "sdc"
    name = "gan"
    summary = "tabular GAN (quantile-normalised numbers, Gumbel-softmax categories, PacGAN), samples released"
    params = (
        Param("architecture", int, 1, grid=tuple(ARCHITECTURES), choices=tuple(ARCHITECTURES), help="Table 8 architecture 1-7"),
        Param("epochs", int, 300, help="training epochs (paper: 300 and 500)", lower=1),
        Param("batch_size", int, 500, help="minibatch size (paper: 64), rounded down to a multiple of pac", lower=2),
        Param("noise_dim", int, 100, help="generator input dimension (paper: 100)", lower=1),
        Param("lr", float, 2e-4, help="Adam learning rate (paper: 1e-4 at batch 64)", lower=1e-9),
        Param("pac", int, 2, help="PacGAN: samples per discriminator decision (1 = plain GAN)", lower=1),
        Param("tau", float, 0.2, help="Gumbel-softmax temperature for categorical columns", lower=1e-3),
        Param("threads", int, DEFAULT_THREADS, help="torch and BLAS threads while training", lower=1),
        ROWS_PARAM,
    )

    @classmethod
    def default_grid(cls) -> list[dict[str, Any]]:
        """``veil compare`` default: the two cheapest architectures at 100 epochs (time budget);
        pass ``--param epochs=300`` or ``architecture=…`` to sweep more."""
        base = {p.name: p.default for p in cls.params}
        return [{**base, "architecture": a, "epochs": 100} for a in (1, 2)]

    def check_context(self, ctx: Context, data: pd.DataFrame) -> None:
        """As for every generator, except that non-numeric columns are allowed (one-hot encoded)."""
        missing = [c for c in (*ctx.columns, *([ctx.target] if ctx.target else [])) if c not in data.columns]
        if missing:
            raise InputError(f"column {missing[0]!r} is not in the table", hint=did_you_mean(missing[0], data.columns))
        if not ctx.columns:
            raise InputError(f"method {self.name!r} needs at least one column", hint="Pass --columns a,b,c")

    def generate(self, data: pd.DataFrame, ctx: Context) -> Output:
        from veil.generators.tabular_encoding import ColumnDomain, TabularEncoder

        cols = [*ctx.columns, *([ctx.target] if ctx.target else [])]
        domains = _declared(ctx, cols, data)
        frame_in = data[cols][TabularEncoder.in_domain(data[cols], domains)].reset_index(drop=True)
        if len(frame_in) < 2:
            raise InputError(f"the GAN needs at least 2 rows inside the declared domains, got {len(frame_in)}")
        categorical = tuple(c for c in cols if domains[c].categorical)
        numeric = [c for c in cols if c not in categorical]
        rng = ctx.draws()  # 256 bits of the OS CSPRNG, never a seed (red team s66 F1)
        train_frame, spikes = split_mass_points(frame_in, numeric, rng=rng)
        flags = tuple(_flag(c) for c in spikes)
        enc = TabularEncoder.fit(train_frame, domains={**domains, **dict.fromkeys(flags, ColumnDomain(values=(False, True)))})
        samples, info = train_gan(
            enc.encode(train_frame),
            architecture=self["architecture"],
            epochs=self["epochs"],
            batch_size=self["batch_size"],
            noise_dim=self["noise_dim"],
            lr=self["lr"],
            n_out=self["rows"],
            seed=torch_seed(rng),  # training only: the model is never released, the seed never recorded
            rng=rng,  # the released samples' latent noise: the full 256 bits
            progress=ctx.progress,
            spans=enc.softmax_spans(),
            pac=self["pac"],
            tau=self["tau"],
            threads=self["threads"],
        )
        frame = join_mass_points(enc.decode(samples, sample=True, rng=rng), spikes)[cols]
        domain: dict[str, tuple[float, float, str]] = {}
        moved: dict[str, int] = {}
        if numeric:
            x = frame_in[numeric].to_numpy(dtype=np.float64)
            lower, upper, kinds = column_domain(x, numeric, ctx.bounds)
            clipped, n_moved = clip_into(frame[numeric].to_numpy(dtype=np.float64), lower, upper)
            for j, c in enumerate(numeric):
                frame[c] = clipped[:, j]
                domain[c] = (float(lower[j]), float(upper[j]), kinds[c])
                moved[c] = int(n_moved[j])
        return Output(
            frame,
            source=None,
            guarantee="no formal guarantee: samples from a GAN trained on the raw data without noise",
            info={
                **info,
                "perturbed_columns": tuple(cols),
                "unprotected_columns": (),
                "min_group_size": None,
                "domain": domain,
                "out_of_domain": moved,
                "row_order": "synthetic",
                "mass_points": {c: float(v) for c, v in spikes.items()},
            },
        )


def _declared(ctx: Context, cols: Sequence[str], data: pd.DataFrame) -> dict[str, Any]:
    """The declared domain of every column (``ctx.bounds`` for numbers, ``ctx.categories`` otherwise; the
    column's dtype says whether it is integer); a PolicyError names the first open one."""
    from veil.errors import PolicyError
    from veil.generators.tabular_encoding import ColumnDomain

    out: dict[str, Any] = {}
    for c in cols:
        if ctx.categories.get(c):
            out[c] = ColumnDomain(values=tuple(ctx.categories[c]))
        elif c in ctx.bounds and c != ctx.target:
            lo, hi = (float(v) for v in ctx.bounds[c])
            out[c] = ColumnDomain(lower=lo, upper=hi, is_integer=pd.api.types.is_integer_dtype(data[c]))
        else:
            what = "values = [...]" if c == ctx.target else "lower = ... and upper = ... (or values = [...])"
            raise PolicyError(
                f"column {c!r} has no declared domain: a GAN may only publish values the policy declares, never "
                "values read from the rows (a value one person alone holds would appear only when they are in it)",
                hint=f"Declare {what} for {c!r} in [tables.<table>.columns], or leave it out",
            )
    return out


#: a numeric value holding at least this share of a column is modelled as its own mode
MASS_POINT_SHARE = 0.3


def _flag(column: str) -> str:
    return f"{column}__at_mass_point"


def split_mass_points(
    frame: pd.DataFrame, numeric: Sequence[str], *, rng: np.random.Generator, share: float = MASS_POINT_SHARE
) -> tuple[pd.DataFrame, dict[str, float]]:
    """Mode-specific encoding of dominant values (capital_gain = 0 for 92 % of Adult).

    For each numeric column whose most frequent value holds ≥ ``share`` of the rows, add a boolean
    column ``<column>__at_mass_point`` (a category the GAN learns like any other) and give the rows
    on the mass point values drawn from the column's other rows, so the numeric coordinate models
    only the rest of the distribution. :func:`join_mass_points` undoes it. Returns the new frame
    and ``{column: mass point}``.

    >>> df = pd.DataFrame({"g": [0, 0, 0, 5, 7]})
    >>> out, spikes = split_mass_points(df, ["g"], rng=np.random.default_rng(0))
    >>> spikes, out["g__at_mass_point"].tolist(), sorted(set(out["g"]) - {5, 7})
    ({'g': 0.0}, [True, True, True, False, False], [])
    >>> join_mass_points(out, spikes)["g"].tolist()
    [0, 0, 0, 5, 7]
    """
    out = frame.copy()
    spikes: dict[str, float] = {}
    for c in numeric:
        col = out[c].to_numpy(dtype=np.float64)
        values, counts = np.unique(col, return_counts=True)
        if len(values) < 3 or counts.max() < share * len(col):
            continue
        mode = values[np.argmax(counts)]
        at = col == mode
        rest = col[~at]
        filled = col.copy()
        filled[at] = rest[rng.integers(0, len(rest), size=int(at.sum()))]
        out[c] = filled.astype(out[c].dtype, copy=False) if pd.api.types.is_integer_dtype(out[c]) else filled
        out[_flag(c)] = at
        spikes[c] = float(mode)
    return out, spikes


def join_mass_points(frame: pd.DataFrame, spikes: dict[str, float]) -> pd.DataFrame:
    """Put the mass points back where the generated flag says so, and drop the flag columns."""
    out = frame.copy()
    for c, mode in spikes.items():
        flag = out.pop(_flag(c)).to_numpy(dtype=bool)
        vals = out[c].to_numpy().copy()
        vals[flag] = mode
        out[c] = pd.Series(vals, index=out.index).astype(out[c].dtype)
    return out
