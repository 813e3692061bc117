"""PU attack building blocks: classifiers, per-example losses, results, input checks, scoring."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from veil.errors import InputError

__all__ = [
    "CLASSIFIERS",
    "LOSSES",
    "HistoryPoint",
    "PUResult",
    "build_classifier",
    "clip_to_records",
    "model_scorer",
    "scores",
    "surrogate_loss",
    "validate",
]

#: Classifier names accepted everywhere (``--classifier``).
CLASSIFIERS = ("linear", "3lp", "mlp")
#: Per-example losses: ``sigmoid`` and ``linear`` are symmetric (l(z,1)+l(z,-1)=1, required by
#: uPU/nnPU); ``logistic`` (cross-entropy on the sigmoid output) is not.
LOSSES = ("sigmoid", "linear", "logistic")


@dataclass(frozen=True)
class HistoryPoint:
    """One point of the Figure-4 curves: proportion of all records classified positive."""

    step: int
    stage: str
    positive_fraction: float
    accuracy: float | None = None


@dataclass(frozen=True)
class PUResult:
    """Outcome of one attack: a score per record (positive iff > 0) and its trace."""

    method: str
    classifier: str | None
    scores: np.ndarray
    seconds: float
    history: tuple[HistoryPoint, ...] = ()
    info: dict[str, object] = field(default_factory=dict)
    scorer: Callable[[np.ndarray], np.ndarray] | None = field(default=None, repr=False, compare=False)

    @property
    def predicted(self) -> np.ndarray:
        """Boolean membership prediction for every record."""
        return self.scores > 0

    def score(self, X: np.ndarray) -> np.ndarray:
        """Scores of other records (e.g. the whole table when training saw a subset)."""
        if self.scorer is None:
            raise InputError(f"method {self.method!r} cannot score new records")
        return self.scorer(np.asarray(X, dtype=np.float32))


def model_scorer(model: nn.Module) -> Callable[[np.ndarray], np.ndarray]:
    def score(X: np.ndarray) -> np.ndarray:
        return scores(model, torch.from_numpy(np.ascontiguousarray(X, dtype=np.float32))).numpy().astype(np.float64)

    return score


def build_classifier(name: str, dim: int, *, hidden: Sequence[int] | None = None) -> nn.Module:
    """Build a scoring model ``R^dim -> R`` (raw score, no output sigmoid).

    ``linear``: one affine layer. ``3lp``: one hidden layer of 300 ReLU units (the paper's
    "3lp-300") with 20% dropout. ``mlp``: hidden layers ``hidden`` (default ``(300, 300)``),
    ReLU and 20% dropout after each.

    >>> [type(m).__name__ for m in build_classifier("3lp", 4)]
    ['Linear', 'ReLU', 'Dropout', 'Linear']
    """
    if name == "linear":
        if hidden:
            raise InputError(
                f"classifier 'linear' takes no hidden layers, got {list(hidden)}",
                hint="Use --classifier mlp to set hidden layer sizes",
            )
        return nn.Sequential(nn.Linear(dim, 1))
    if name == "3lp":
        sizes = list(hidden) if hidden else [300]
        if len(sizes) != 1:
            raise InputError(
                f"classifier '3lp' has exactly one hidden layer, got {sizes}", hint="Use --classifier mlp for more layers"
            )
    elif name == "mlp":
        sizes = list(hidden) if hidden else [300, 300]
    else:
        raise InputError(f"unknown classifier {name!r}", hint=f"Use one of {', '.join(CLASSIFIERS)}")
    if any(int(h) < 1 for h in sizes):
        raise InputError(f"hidden layer sizes must be >= 1, got {sizes}")
    layers: list[nn.Module] = []
    prev = dim
    for h in sizes:
        layers += [nn.Linear(prev, int(h)), nn.ReLU(), nn.Dropout(0.2)]
        prev = int(h)
    layers.append(nn.Linear(prev, 1))
    return nn.Sequential(*layers)


def surrogate_loss(z: torch.Tensor, y: torch.Tensor, kind: str = "sigmoid") -> torch.Tensor:
    """Per-example symmetric loss ``l(z, y)`` with ``l(z, 1) + l(z, -1) = 1``.

    >>> z = torch.tensor([-2.0, 0.0, 3.0])
    >>> bool(torch.allclose(surrogate_loss(z, torch.ones(3)) + surrogate_loss(z, -torch.ones(3)), torch.ones(3)))
    True
    """
    if kind == "sigmoid":
        return torch.sigmoid(-y * z)
    if kind == "linear":
        return (1.0 - y * z) / 2.0
    if kind == "logistic":
        return torch.nn.functional.softplus(-y * z)
    raise InputError(f"unknown loss {kind!r}", hint=f"Use one of {', '.join(LOSSES)}")


def validate(X: np.ndarray, mean: np.ndarray, prior: float) -> tuple[np.ndarray, np.ndarray]:
    X = np.require(X, dtype=np.float32, requirements=["C", "W"])  # torch needs writable memory
    mean = np.require(np.asarray(mean, dtype=np.float32).reshape(-1), requirements=["C", "W"])
    if X.ndim != 2 or X.shape[0] < 2:
        raise InputError(f"records must be a 2-D array with at least 2 rows, got shape {X.shape}")
    if mean.shape[0] != X.shape[1]:
        raise InputError(
            f"the mean has {mean.shape[0]} coordinates but records have {X.shape[1]} columns",
            hint="Pass a mean over the same features, in the same order",
        )
    if not np.isfinite(X).all() or not np.isfinite(mean).all():
        raise InputError("records or mean contain NaN or infinite values", hint="Impute or drop them first")
    if not 0.0 < float(prior) < 1.0:
        raise InputError(f"prior must be in (0, 1), got {prior}", hint="Pass the share of the class, e.g. 0.5")
    return X, mean


def clip_to_records(X: np.ndarray, mean: np.ndarray) -> np.ndarray:
    """Project a released mean onto the box ``[min_j X_ij, max_j X_ij]`` of the records.

    Any mean of a subset of the records lies in that box, so this only removes noise that no
    class mean could carry; the observed range is public to an attacker who sees the records.

    >>> X = np.array([[0.0, 1.0], [0.0, 3.0]], dtype=np.float32)
    >>> clip_to_records(X, np.array([0.3, 2.0], dtype=np.float32)).tolist()
    [0.0, 2.0]
    """
    X = np.asarray(X, dtype=np.float32)
    mean = np.asarray(mean, dtype=np.float32)
    return np.require(np.clip(mean, X.min(0), X.max(0)), dtype=np.float32, requirements=["C", "W"])


def scores(model: nn.Module, X: torch.Tensor, chunk: int = 8192) -> torch.Tensor:
    """Raw scores of ``X`` in eval mode (no dropout), ``chunk`` rows at a time; the mode is restored."""
    was_training = model.training
    model.eval()
    with torch.no_grad():
        out = torch.cat([model(X[i : i + chunk]).reshape(-1) for i in range(0, X.shape[0], chunk)])
    model.train(was_training)
    return out
