"""The PATE student: a small torch model trained on privatised records and noisy labels, saved
with a JSON sidecar (:func:`load_student`), and its decision threshold.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from sklearn.metrics import roc_curve

from veil._json import to_jsonable
from veil.errors import InputError
from veil.generators.pate.encoding import FeatureEncoder, LdpEncoding

SIDECAR_SUFFIX = ".json"

# --------------------------------------------------------------------------- student


class StudentNet(torch.nn.Module):
    """Standardisation + linear layer (``hidden=0``) or one hidden ReLU layer, ``k`` logits."""

    def __init__(self, width: int, n_classes: int, hidden: int = 0) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(width, dtype=torch.float64))
        self.register_buffer("scale", torch.ones(width, dtype=torch.float64))
        if hidden > 0:
            self.body: torch.nn.Module = torch.nn.Sequential(
                torch.nn.Linear(width, hidden, dtype=torch.float64),
                torch.nn.ReLU(),
                torch.nn.Linear(hidden, n_classes, dtype=torch.float64),
            )
        else:
            self.body = torch.nn.Linear(width, n_classes, dtype=torch.float64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body((x - self.mean) / self.scale)


@dataclass(frozen=True)
class Student:
    """A trained student: its network, classes, optional decision threshold, and input encoder."""

    net: StudentNet
    classes: tuple[Any, ...]
    encoder: FeatureEncoder
    hidden: int
    threshold: float | None = None  # binary only: P(classes[1]) ≥ threshold → classes[1]
    ldp_encoding: LdpEncoding = "box"
    info: Mapping[str, Any] = field(default_factory=dict)

    def _encoded(self, data: pd.DataFrame | np.ndarray, encoded: bool) -> np.ndarray:
        X = np.asarray(data, dtype=np.float64) if encoded else self.encoder.transform(data)
        if self.ldp_encoding == "l1":
            norms = X.sum(axis=1, keepdims=True)
            X = np.divide(X, norms, out=np.zeros_like(X), where=norms > 0)
        return X

    def predict_proba(self, data: pd.DataFrame | np.ndarray, *, encoded: bool = False) -> np.ndarray:
        """Class probabilities, one column per class (``encoded=True``: ``data`` is already box-encoded)."""
        X = self._encoded(data, encoded)
        with torch.no_grad():
            return torch.softmax(self.net(torch.from_numpy(X)), dim=1).numpy()

    def predict_index(self, data: pd.DataFrame | np.ndarray, *, encoded: bool = False) -> np.ndarray:
        p = self.predict_proba(data, encoded=encoded)
        if self.threshold is not None and p.shape[1] == 2:
            return (p[:, 1] >= self.threshold).astype(int)
        return np.argmax(p, axis=1)

    def predict(self, data: pd.DataFrame | np.ndarray, *, encoded: bool = False) -> np.ndarray:
        """Predicted labels (original class values)."""
        return np.asarray(self.classes, dtype=object)[self.predict_index(data, encoded=encoded)]

    def save(self, path: str | Path, *, description: Mapping[str, Any] | None = None) -> Path:
        """Write the torch state dict to ``path`` and a JSON sidecar ``path + '.json'``; no training data."""
        p = Path(path)
        sidecar = {
            "format": "veil-pate-student/1",
            "classes": to_jsonable(list(self.classes)),
            "hidden": self.hidden,
            "threshold": self.threshold,
            "ldp_encoding": self.ldp_encoding,
            "encoder": self.encoder.to_dict(),
            "info": to_jsonable(dict(self.info)),
            "description": to_jsonable(dict(description or {})),
            "load": f"from veil.generators.pate import load_student; model = load_student({str(p)!r})",
        }
        tmp = p.with_name(p.name + ".tmp")
        torch.save(self.net.state_dict(), tmp)
        side = Path(str(p) + SIDECAR_SUFFIX)
        side_tmp = side.with_name(side.name + ".tmp")
        side_tmp.write_text(json.dumps(sidecar, indent=2, default=str) + "\n")
        tmp.replace(p)
        side_tmp.replace(side)
        return p


def load_student(path: str | Path) -> Student:
    """Load a student saved by ``veil publish pate`` (reads ``path`` and ``path + '.json'``).

    ``torch.load(..., weights_only=True)``: the file holds tensors only, nothing executable.
    """
    p = Path(path)
    side = Path(str(p) + SIDECAR_SUFFIX)
    if not p.exists() or not side.exists():
        raise InputError(
            f"student model {str(p)!r} or its sidecar {side.name!r} is missing",
            hint="Pass the --output-model path used with veil publish pate",
        )
    meta = json.loads(side.read_text())
    encoder = FeatureEncoder.from_dict(meta["encoder"])
    net = StudentNet(encoder.width, len(meta["classes"]), int(meta["hidden"]))
    net.load_state_dict(torch.load(p, weights_only=True))
    net.eval()
    return Student(
        net=net,
        classes=tuple(meta["classes"]),
        encoder=encoder,
        hidden=int(meta["hidden"]),
        threshold=meta.get("threshold"),
        ldp_encoding=meta.get("ldp_encoding", "box"),
        info=meta.get("info", {}),
    )


def train_student(
    X: np.ndarray,
    labels: np.ndarray,
    *,
    n_classes: int,
    hidden: int = 0,
    epochs: int = 300,
    weight_decay: float = 1e-2,
    seed: int = 0,
) -> StudentNet:
    """Full-batch Adam on cross-entropy; inputs standardised by their own mean/std (post-processing)."""
    Xa = np.asarray(X, dtype=np.float64)
    ya = np.asarray(labels, dtype=np.int64)
    gen = torch.Generator().manual_seed(int(seed))
    net = StudentNet(Xa.shape[1], n_classes, hidden)
    for param in net.body.parameters():  # seeded init without touching global torch state
        bound = 1.0 / math.sqrt(param.shape[-1] if param.ndim > 1 else max(1, Xa.shape[1]))
        with torch.no_grad():
            param.copy_((torch.rand(param.shape, generator=gen, dtype=torch.float64) * 2 - 1) * bound)
    sd = Xa.std(axis=0)
    net.mean.copy_(torch.from_numpy(Xa.mean(axis=0)))
    net.scale.copy_(torch.from_numpy(np.where(sd > 1e-12, sd, 1.0)))
    xt, yt = torch.from_numpy(Xa), torch.from_numpy(ya)
    opt = torch.optim.Adam(net.parameters(), lr=0.05 if hidden == 0 else 0.01, weight_decay=weight_decay)
    loss_fn = torch.nn.CrossEntropyLoss()
    net.train()
    for _ in range(epochs):
        opt.zero_grad()
        loss = loss_fn(net(xt), yt)
        loss.backward()
        opt.step()
    net.eval()
    return net


def choose_threshold(scores: np.ndarray, labels: np.ndarray) -> float:
    """ROC threshold maximising TPR − FPR (Youden's J) for the positive class (label 1); 0.5 if undefined.

    >>> choose_threshold(np.array([0.1, 0.4, 0.35, 0.8]), np.array([0, 0, 1, 1]))
    0.8
    """
    lab = np.asarray(labels).astype(int)
    if lab.min(initial=1) == lab.max(initial=0) or len(np.unique(lab)) < 2:
        return 0.5
    fpr, tpr, thr = roc_curve(lab, np.asarray(scores, dtype=float))
    finite = np.isfinite(thr)
    j = np.where(finite, tpr - fpr, -np.inf)
    return float(thr[int(np.argmax(j))])


def binary_metrics(pred: np.ndarray, truth: np.ndarray) -> dict[str, float]:
    pos, neg = truth == 1, truth == 0
    tpr = float(np.mean(pred[pos] == 1)) if pos.any() else float("nan")
    tnr = float(np.mean(pred[neg] == 0)) if neg.any() else float("nan")
    return {"tpr": tpr, "tnr": tnr, "balanced_accuracy": (tpr + tnr) / 2}
