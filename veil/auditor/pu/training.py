"""The one training loop of the torch PU attacks (growPU, uPU/nnPU, the oracle).

:func:`training_run` builds the classifier from the attack's own seed (never global torch state),
its Adam optimiser, the Figure-4 recorder and the progress bar; :meth:`TrainingRun.step` is one
``Train(...)`` call: one Adam step on one objective, then the curves are sampled.
:meth:`TrainingRun.result` scores every record and packs the :class:`~veil.auditor.pu.models.PUResult`.
Each attack only says which batches and which objective.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from veil.auditor.pu.models import HistoryPoint, PUResult, build_classifier, model_scorer, scores

__all__ = ["Recorder", "TrainingRun", "init_model", "training_run"]


class Recorder:
    """Samples the Figure-4 curves every ``every`` steps (``every=0`` disables it)."""

    def __init__(self, model: nn.Module, X: torch.Tensor, truth: np.ndarray | None, every: int) -> None:
        self.model, self.X, self.every = model, X, every
        self.truth = None if truth is None else torch.tensor(np.asarray(truth, dtype=bool))
        self.points: list[HistoryPoint] = []
        self.step = 0

    def tick(self, stage: str, force: bool = False) -> None:
        self.step += 1
        if self.every and (force or self.step % self.every == 0):
            pred = scores(self.model, self.X) > 0
            acc = None if self.truth is None else float((pred == self.truth).float().mean())
            self.points.append(HistoryPoint(self.step, stage, float(pred.float().mean()), acc))


def init_model(
    seed: int | None, classifier: str, dim: int, hidden: Sequence[int] | None, lr: float, weight_decay: float
) -> tuple[nn.Module, torch.optim.Optimizer, np.random.Generator]:
    """The classifier initialised from ``seed`` alone, its Adam optimiser, and the attack's numpy generator."""
    rng = np.random.default_rng(seed)
    gen = torch.Generator().manual_seed(int(rng.integers(2**62)))
    model = build_classifier(classifier, dim, hidden=hidden)
    with torch.no_grad():  # initialise from our own generator; never touch global torch state
        for p in model.parameters():
            if p.dim() > 1:
                bound = 1.0 / np.sqrt(p.shape[1])
                p.copy_(torch.empty_like(p).uniform_(-bound, bound, generator=gen))
            else:
                p.zero_()
    opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    return model, opt, rng


def _progress(total: int, desc: str) -> Any:
    """A tqdm bar on stderr (``VEIL_PROGRESS=0`` silences it)."""
    from veil._progress import progress

    return progress(total=total, desc=desc)


@dataclass
class TrainingRun:
    """A classifier being trained on records ``Xt`` against the released mean ``mt`` (one row)."""

    model: nn.Module
    opt: torch.optim.Optimizer
    rng: np.random.Generator
    Xt: torch.Tensor
    mt: torch.Tensor
    recorder: Recorder
    bar: Any
    classifier: str
    t0: float = field(default_factory=time.perf_counter)
    c0: float = field(default_factory=time.process_time)

    def step(self, stage: str, objective: torch.Tensor, *, advance: bool = True) -> None:
        """One ``Train(...)`` call: one Adam step on ``objective``, then the curves' tick.

        ``advance`` moves the progress bar one unit (attacks that count epochs call :meth:`advance`).
        """
        self.opt.zero_grad()
        objective.backward()
        self.opt.step()
        self.recorder.tick(stage)
        if advance:
            self.advance()

    def advance(self) -> None:
        if self.bar is not None:
            self.bar.update(1)

    def result(self, method: str, info: dict[str, object]) -> PUResult:
        """Score every record with the trained model (one last curve point) and pack the result."""
        self.recorder.tick("final", force=True)
        final = scores(self.model, self.Xt).numpy().astype(np.float64)
        info = {**info, "cpu_seconds": time.process_time() - self.c0}
        return PUResult(
            method,
            self.classifier,
            final,
            time.perf_counter() - self.t0,
            tuple(self.recorder.points),
            info,
            model_scorer(self.model),
        )


@contextmanager
def training_run(
    X: np.ndarray,
    mean: np.ndarray,
    *,
    seed: int | None,
    classifier: str,
    hidden: Sequence[int] | None,
    lr: float,
    weight_decay: float,
    truth: np.ndarray | None,
    record_every: int,
    total: int,
    desc: str,
) -> Iterator[TrainingRun]:
    """Set up a :class:`TrainingRun` (``total`` progress units named ``desc``); the bar is closed on exit."""
    t0, c0 = time.perf_counter(), time.process_time()
    model, opt, rng = init_model(seed, classifier, X.shape[1], hidden, lr, weight_decay)
    Xt = torch.from_numpy(X)
    run = TrainingRun(
        model=model,
        opt=opt,
        rng=rng,
        Xt=Xt,
        mt=torch.from_numpy(mean).reshape(1, -1),
        recorder=Recorder(model, Xt, truth, record_every),
        bar=_progress(total, desc),
        classifier=classifier,
        t0=t0,
        c0=c0,
    )
    try:
        yield run
    finally:
        if run.bar is not None:
            run.bar.close()
