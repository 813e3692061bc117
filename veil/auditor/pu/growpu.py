"""growPU (Su et al. 2020, Exhibits 1-3): pre-train on the mean, grow with pseudo-labels, fine-tune.

Decisions 1-9 of :mod:`veil.auditor.pu` say how the paper's open points are read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch
from torch import nn

from veil.auditor.pu.models import LOSSES, PUResult, clip_to_records, scores, surrogate_loss, validate
from veil.auditor.pu.training import training_run
from veil.errors import InputError

__all__ = ["GrowPUConfig", "grow_batch", "growpu"]


@dataclass(frozen=True)
class GrowPUConfig:
    """growPU hyper-parameters; defaults are the paper's Table 3 (MNIST column)."""

    batch_size: int = 500
    pi_pre: float = 0.05
    pi_grow: float = 0.45
    t_pre: int = 10_000
    t_tune: int = 10_000
    t_grow: int = 10_000
    alpha: float = 0.05
    gamma: float = 0.5
    lr: float = 1e-3
    weight_decay: float = 0.0


def growpu(
    X: np.ndarray,
    mean: np.ndarray,
    *,
    prior: float,
    classifier: str = "linear",
    hidden: Sequence[int] | None = None,
    seed: int | None = None,
    loss: str = "logistic",
    truth: np.ndarray | None = None,
    record_every: int = 0,
    config: GrowPUConfig | None = None,
    clip_mean: bool = True,
    **overrides: float,
) -> PUResult:
    """growPU (Exhibits 1-3): pre-train on the mean, grow with pseudo-labels, fine-tune.

    ``overrides`` replace fields of ``config`` (e.g. ``batch_size=100, t_tune=500``).
    ``truth`` is used only to record the accuracy curve, never for training.
    ``clip_mean`` projects the mean onto the records' per-coordinate range first
    (:func:`clip_to_records`; decision 9 of the module docstring).
    """
    X, mean = validate(X, mean, prior)
    n_clipped = 0
    if clip_mean:
        clipped = clip_to_records(X, mean)
        n_clipped = int((clipped != mean).sum())
        mean = clipped
    if loss not in LOSSES:
        raise InputError(f"unknown loss {loss!r}", hint=f"Use one of {', '.join(LOSSES)}")
    cfg = config or GrowPUConfig()
    if overrides:
        unknown = set(overrides) - set(GrowPUConfig.__dataclass_fields__)
        if unknown:
            raise InputError(
                f"unknown growPU parameter(s) {sorted(unknown)}", hint=f"Use {sorted(GrowPUConfig.__dataclass_fields__)}"
            )
        cfg = replace(cfg, **overrides)  # type: ignore[arg-type]  # names checked above; values by the config
    b = min(int(cfg.batch_size), X.shape[0])
    if b < 1:
        raise InputError(f"batch_size must be >= 1, got {cfg.batch_size}")
    pi = float(prior)
    n = X.shape[0]
    with training_run(
        X,
        mean,
        seed=seed,
        classifier=classifier,
        hidden=hidden,
        lr=cfg.lr,
        weight_decay=cfg.weight_decay,
        truth=truth,
        record_every=record_every,
        total=cfg.t_pre + cfg.t_grow + cfg.t_tune,
        desc="growPU",
    ) as run:
        model, rng, Xt, mt = run.model, run.rng, run.Xt, run.mt

        def risk(batch: torch.Tensor, y: torch.Tensor, w: torch.Tensor, scale: float) -> torch.Tensor:
            z = model(batch).reshape(-1)
            return scale * (w * surrogate_loss(z, y, loss)).sum()

        # -- pre-train (Exhibit 1 lines 7-13, Exhibit 2)
        y_pre = torch.cat([-torch.ones(b), torch.ones(b)])
        w_pre = torch.ones(2 * b)
        pre_steps, pre_frac = 0, 1.0
        for _ in range(cfg.t_pre):
            idx = torch.from_numpy(rng.choice(n, b, replace=False))
            batch = torch.cat([Xt[idx], mt.expand(b, -1)])
            run.step("pre-train", risk(batch, y_pre, w_pre, 1.0 / (2 * b)))
            pre_steps += 1
            pre_frac = float((scores(model, batch[:b]) > 0).float().mean())  # decision 3
            if pre_frac <= cfg.pi_pre:
                break

        # -- growth (Exhibit 1 lines 14-21, Exhibit 3 with isFineTune=False)
        grow_steps, reached, grow_frac = 0, False, 0.0
        for _ in range(cfg.t_grow):
            batch, y, w, scale, _frac = grow_batch(model, Xt, mt, rng, b, pi, False, cfg)
            run.step("growth", risk(batch, y, w, scale))
            grow_steps += 1
            grow_frac = float((scores(model, batch) > 0).float().mean())
            if grow_frac >= cfg.pi_grow:
                reached = True
                break

        # -- fine-tune (Exhibit 1 lines 22-26)
        for _ in range(cfg.t_tune):
            batch, y, w, scale, _frac = grow_batch(model, Xt, mt, rng, b, pi, True, cfg)
            run.step("fine-tune", risk(batch, y, w, scale))
    info: dict[str, object] = {
        "pre_steps": pre_steps,
        "pre_fraction": pre_frac,
        "grow_steps": grow_steps,
        "reached_grow": reached,
        "grow_fraction": grow_frac,
        "tune_steps": cfg.t_tune,
        "batch_size": b,
        "loss": loss,
        "mean_clipped": n_clipped,
        "config": cfg,
    }
    return run.result("growpu", info)


def grow_batch(
    model: nn.Module,
    Xt: torch.Tensor,
    mt: torch.Tensor,
    rng: np.random.Generator,
    b: int,
    pi: float,
    fine_tune: bool,
    cfg: GrowPUConfig,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, float, float]:
    """GrowSampleSelection (Exhibit 3). Returns batch, labels, weights, risk scale, n_p/(n_p+n_n)."""
    idx = torch.from_numpy(rng.choice(Xt.shape[0], b, replace=False))
    sample = Xt[idx]
    pos = scores(model, sample) > 0
    n_p = int(pos.sum())
    n_n = b - n_p
    w_p = 1.0
    w_n = (1.0 - pi) * (n_p + 1) / (pi * max(n_n, 1))
    frac = n_p / b
    if fine_tune:
        if frac <= pi - cfg.alpha:
            w_n *= cfg.gamma
        if frac >= pi + cfg.alpha:
            w_p *= cfg.gamma
    batch = torch.cat([sample[~pos], sample[pos], mt])
    y = torch.cat([-torch.ones(n_n), torch.ones(n_p + 1)])
    w = torch.cat([torch.full((n_n,), w_n), torch.full((n_p + 1,), w_p)])
    return batch, y, w, pi / (n_p + 1), frac
