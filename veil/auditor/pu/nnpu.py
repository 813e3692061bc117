"""uPU (du Plessis et al.) and nnPU (Kiryo et al. 2017) with the released mean as the only positive."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypedDict, Unpack

import numpy as np
import torch

from veil.auditor.pu.models import PUResult, surrogate_loss, validate
from veil.auditor.pu.training import training_run
from veil.errors import InputError

__all__ = ["PUOptions", "nnpu", "upu"]


class PUOptions(TypedDict, total=False):
    """Options :func:`nnpu` and :func:`upu` share; left out, each takes the default named here.

    ``classifier`` ("linear"), ``hidden`` (None), ``seed`` (None), ``epochs`` (1000), ``batch_size``
    (500), ``lr`` (1e-3), ``weight_decay`` (0.005), ``loss`` ("sigmoid"; "linear" is the other symmetric
    loss), ``truth`` (None: only records the accuracy curve) and ``record_every`` (0).
    """

    classifier: str
    hidden: Sequence[int] | None
    seed: int | None
    epochs: int
    batch_size: int
    lr: float
    weight_decay: float
    loss: str
    truth: np.ndarray | None
    record_every: int


def _pu_risk(
    X: np.ndarray,
    mean: np.ndarray,
    *,
    prior: float,
    non_negative: bool,
    beta: float,
    gamma: float,
    classifier: str = "linear",
    hidden: Sequence[int] | None = None,
    seed: int | None = None,
    epochs: int = 1000,
    batch_size: int = 500,
    lr: float = 1e-3,
    weight_decay: float = 0.005,
    loss: str = "sigmoid",
    truth: np.ndarray | None = None,
    record_every: int = 0,
) -> PUResult:
    X, mean = validate(X, mean, prior)
    if loss not in ("sigmoid", "linear"):
        raise InputError(
            f"uPU/nnPU need a symmetric loss (l(z,1) + l(z,-1) = 1), got {loss!r}",
            hint="Use loss='sigmoid' (default) or 'linear'",
        )
    if epochs < 1 or batch_size < 1:
        raise InputError(f"epochs and batch_size must be >= 1, got {epochs}, {batch_size}")
    pi = float(prior)
    n = X.shape[0]
    b = min(batch_size, n)
    corrections = 0
    with training_run(
        X,
        mean,
        seed=seed,
        classifier=classifier,
        hidden=hidden,
        lr=lr,
        weight_decay=weight_decay,
        truth=truth,
        record_every=record_every,
        total=epochs,
        desc="nnPU" if non_negative else "uPU",
    ) as run:
        for _ in range(epochs):
            order = torch.from_numpy(run.rng.permutation(n))
            for s in range(0, n, b):
                u = run.Xt[order[s : s + b]]
                z = run.model(torch.cat([run.mt, u])).reshape(-1)
                zp, zu = z[:1], z[1:]
                ones_p, ones_u = torch.ones_like(zp), torch.ones_like(zu)
                r_pos = pi * surrogate_loss(zp, ones_p, loss).mean()
                r_neg = surrogate_loss(zu, -ones_u, loss).mean() - pi * surrogate_loss(zp, -ones_p, loss).mean()
                if non_negative and float(r_neg.detach()) < -beta:
                    objective = -gamma * r_neg  # Kiryo et al.: step back along the negative risk
                    corrections += 1
                else:
                    objective = r_pos + r_neg
                run.step("train", objective, advance=False)
            run.advance()
    info: dict[str, object] = {
        "epochs": epochs,
        "batch_size": b,
        "corrections": corrections,
        "loss": loss,
        "lr": lr,
        "weight_decay": weight_decay,
    }
    return run.result("nnpu" if non_negative else "upu", info)


def nnpu(
    X: np.ndarray, mean: np.ndarray, *, prior: float, beta: float = 0.0, gamma: float = 1.0, **options: Unpack[PUOptions]
) -> PUResult:
    """Non-negative PU learning (Kiryo et al. 2017) with the mean as the only positive.

    Each minibatch is ``batch_size`` unlabelled records (an epoch is one shuffled pass) plus
    the mean; defaults: 1,000 epochs and b=500 (paper, Section 6.1.1), Adam lr 1e-3 with
    weight decay 0.005, beta=0, gamma=1 (Kiryo's code). ``options``: :class:`PUOptions`.
    """
    return _pu_risk(X, mean, prior=prior, non_negative=True, beta=beta, gamma=gamma, **options)


def upu(X: np.ndarray, mean: np.ndarray, *, prior: float, **options: Unpack[PUOptions]) -> PUResult:
    """Unbiased PU learning (du Plessis et al.) -- :func:`nnpu` without the correction."""
    return _pu_risk(X, mean, prior=prior, non_negative=False, beta=0.0, gamma=1.0, **options)
