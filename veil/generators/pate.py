"""PATE with privatised student records (Yovine et al. 2021; Papernot et al. 2016).

Two curators:

* **Curator A** holds the private table. It splits it into disjoint teacher shards (all rows of
  one privacy unit go to the same shard), trains one teacher per shard and answers each student
  query ``x`` with the noisy plurality ``argmax_c(n_c(x) + Lap(1/γ))`` drawn through
  :func:`veil.mechanisms.laplace`. One answer is ``(2γ, 0)``-DP for the teachers' data; ``T``
  answers are ``(ε, δ)``-DP with ε from :mod:`veil.mechanisms.pate_accounting`.
* **Curator B** holds the student's records. Before a record leaves it, every encoded feature is
  mapped into ``[0, 1]`` by its *declared* bounds (numbers: ``(v − lower)/(upper − lower)``,
  clipped; categories: one-hot over the declared values) and gets independent ``Lap(1/ρ)`` noise
  (``encoding="box"``). Local DP, per record, whatever the other records are:

  - one numeric feature alone is ``ρ``-LDP (its coordinate moves by at most 1);
  - one categorical feature alone is ``2ρ``-LDP (its one-hot block moves by at most 2 in L1);
  - the whole record is ``ρ·Δ``-LDP with ``Δ = n_numeric + 2·n_categorical`` (L1 diameter of the
    encoded box), by composition over its coordinates.

  ``encoding="l1"`` follows the paper instead: the box-encoded record is divided by its L1 norm
  (an all-zero record stays zero) before the noise, so the record moves by at most 2 in L1 and the
  record is ``2ρ``-LDP, at the price of losing the record's scale.

The student is trained on the *privatised* records and the noisy labels only, so the released
model is post-processing of both mechanisms: ``(ε, δ)``-DP for the teachers' table and keeps the
local guarantee for the student's records. Metrics computed on labelled validation records (teacher
and student accuracies) are not privatised; they are for the curator.

Example (tiny, with the test-only ``rng``):

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> X = rng.random((600, 3)); y = (X[:, 0] > 0.5).astype(int)
>>> enc = FeatureEncoder.numeric_box(["a", "b", "c"], 0.0, 1.0)
>>> cfg = PateConfig(teachers=10, queries=100, rho=None, seed=1)
>>> res = run_pate(enc.transform(X[:400]), y[:400], enc.transform(X[400:500]), enc.transform(X[500:]), y[500:],
...                encoder=enc, classes=(0, 1), config=cfg, rng=rng, progress=False)
>>> res.metrics["student_accuracy"] > 0.8
True
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_curve
from threadpoolctl import threadpool_limits

from veil._json import to_jsonable
from veil.errors import InputError
from veil.mechanisms import laplace
from veil.mechanisms.pate_accounting import (
    DEFAULT_ORDERS,
    MomentsBound,
    data_dependent_epsilon,
    data_independent_epsilon,
)

__all__ = [
    "FeatureEncoder",
    "FeatureSpec",
    "PateConfig",
    "PatePublication",
    "PateResult",
    "Student",
    "TeacherEnsemble",
    "choose_threshold",
    "ldp_guarantee",
    "load_student",
    "noisy_aggregate",
    "partition_shards",
    "privatise_records",
    "publish_pate",
    "run_pate",
    "train_student",
    "train_teachers",
    "vote_counts",
]

LdpEncoding = Literal["box", "l1"]
SIDECAR_SUFFIX = ".json"


# --------------------------------------------------------------------------- feature encoding


@dataclass(frozen=True)
class FeatureSpec:
    """One input feature and its public (declared) domain."""

    name: str
    kind: Literal["numeric", "category"]
    lower: float | None = None
    upper: float | None = None
    values: tuple[Any, ...] | None = None

    def __post_init__(self) -> None:
        if self.kind == "numeric":
            if (
                self.lower is None
                or self.upper is None
                or not (math.isfinite(self.lower) and math.isfinite(self.upper) and self.lower < self.upper)
            ):
                raise InputError(
                    f"feature {self.name!r} needs finite declared bounds lower < upper, got {self.lower!r}, {self.upper!r}",
                    hint="Declare lower and upper for the column in the policy",
                )
        elif self.kind == "category":
            if not self.values:
                raise InputError(
                    f"categorical feature {self.name!r} has no declared values",
                    hint="Declare values = [...] for the column in the policy",
                )
        else:
            raise InputError(f"feature kind must be 'numeric' or 'category', got {self.kind!r}")

    @property
    def width(self) -> int:
        return 1 if self.kind == "numeric" else len(self.values or ())

    @property
    def l1_diameter(self) -> int:
        """Largest L1 distance between two encodings of this feature (1 numeric, 2 one-hot)."""
        return 1 if self.kind == "numeric" else 2


@dataclass(frozen=True)
class FeatureEncoder:
    """Maps records to ``[0, 1]^width`` using declared bounds only (never the data's own range)."""

    features: tuple[FeatureSpec, ...]

    def __post_init__(self) -> None:
        if not self.features:
            raise InputError("no features to encode", hint="Pass at least one feature column")
        names = [f.name for f in self.features]
        if len(set(names)) != len(names):
            raise InputError(f"duplicate feature names: {names}")

    @classmethod
    def numeric_box(cls, names: Sequence[str], lower: float, upper: float) -> FeatureEncoder:
        """All features numeric with the same declared bounds (e.g. pixels in [0, 1])."""
        return cls(tuple(FeatureSpec(str(n), "numeric", float(lower), float(upper)) for n in names))

    @classmethod
    def from_columns(cls, columns: Mapping[str, Any], names: Sequence[str]) -> FeatureEncoder:
        """Build from policy ``ColumnSpec``s: bounded int/float → numeric, else declared values → one-hot."""
        specs = []
        for name in names:
            col = columns[name]
            if getattr(col, "type", None) in ("int", "float") and col.lower is not None and col.upper is not None:
                if float(col.lower) == float(col.upper):
                    raise InputError(f"column {name!r} has lower == upper == {col.lower}", hint="Drop the constant column")
                specs.append(FeatureSpec(name, "numeric", float(col.lower), float(col.upper)))
            elif getattr(col, "values", None):
                specs.append(FeatureSpec(name, "category", values=tuple(col.values)))
            else:
                raise InputError(
                    f"column {name!r} has neither declared bounds nor declared values",
                    hint="PATE encodes features from the policy's public domain: declare lower/upper or values",
                )
        return cls(tuple(specs))

    @property
    def width(self) -> int:
        return sum(f.width for f in self.features)

    @property
    def l1_diameter(self) -> int:
        """``Δ = n_numeric + 2·n_categorical``: L1 diameter of the encoded record space."""
        return sum(f.l1_diameter for f in self.features)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.features)

    def transform(self, data: pd.DataFrame | np.ndarray) -> np.ndarray:
        """Encode a DataFrame (by column name) or a 2-D array (numeric features, in order).

        Numbers are clipped into their declared range; a missing number encodes as 0.5; a missing or
        undeclared category encodes as an all-zero block. Output is float64 in ``[0, 1]``.
        """
        if isinstance(data, np.ndarray):
            if data.ndim != 2 or data.shape[1] != len(self.features):
                raise InputError(f"array of shape {data.shape} for {len(self.features)} features")
            if any(f.kind != "numeric" for f in self.features):
                raise InputError("arrays can only be encoded for numeric features", hint="Pass a DataFrame")
            frame = pd.DataFrame(data, columns=list(self.names))
        else:
            missing = [n for n in self.names if n not in data.columns]
            if missing:
                raise InputError(f"columns {missing} are missing from the data", hint=f"Available: {list(data.columns)}")
            frame = data
        blocks = []
        for f in self.features:
            col = frame[f.name]
            if f.kind == "numeric":
                v = pd.to_numeric(col, errors="coerce").to_numpy(dtype=float, na_value=np.nan)
                lo, hi = float(f.lower), float(f.upper)  # type: ignore[arg-type]
                z = np.clip((v - lo) / (hi - lo), 0.0, 1.0)
                blocks.append(np.where(np.isnan(z), 0.5, z)[:, None])
            else:
                vals = list(f.values or ())
                index = {v: i for i, v in enumerate(vals)}
                codes = np.array([index.get(v, -1) if not _isna(v) else -1 for v in col.tolist()])
                onehot = np.zeros((len(codes), len(vals)))
                ok = codes >= 0
                onehot[np.flatnonzero(ok), codes[ok]] = 1.0
                blocks.append(onehot)
        return np.hstack(blocks).astype(np.float64)

    def to_dict(self) -> dict[str, Any]:
        return {"features": [to_jsonable(asdict(f)) for f in self.features]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FeatureEncoder:
        return cls(
            tuple(
                FeatureSpec(
                    f["name"],
                    f["kind"],
                    f.get("lower"),
                    f.get("upper"),
                    tuple(f["values"]) if f.get("values") is not None else None,
                )
                for f in data["features"]
            )
        )


def _isna(v: Any) -> bool:
    try:
        return bool(pd.isna(v))
    except (TypeError, ValueError):
        return False


# --------------------------------------------------------------------------- curator B: local DP


def ldp_guarantee(encoder: FeatureEncoder, rho: float | None, encoding: LdpEncoding = "box") -> dict[str, Any]:
    """The local-DP ε that curator B's noise gives each student record (None: no noise, no guarantee).

    >>> enc = FeatureEncoder((FeatureSpec("age", "numeric", 17, 90), FeatureSpec("sex", "category", values=("F", "M"))))
    >>> ldp_guarantee(enc, 0.5)
    {'rho': 0.5, 'encoding': 'box', 'per_numeric_feature': 0.5, 'per_categorical_feature': 1.0, 'per_record': 1.5}
    """
    if rho is None:
        return {
            "rho": None,
            "encoding": encoding,
            "per_numeric_feature": None,
            "per_categorical_feature": None,
            "per_record": None,
        }
    r = _check_rho(rho)
    if encoding == "box":
        return {
            "rho": r,
            "encoding": "box",
            "per_numeric_feature": r,
            "per_categorical_feature": 2 * r,
            "per_record": r * encoder.l1_diameter,
        }
    if encoding == "l1":
        return {"rho": r, "encoding": "l1", "per_numeric_feature": 2 * r, "per_categorical_feature": 2 * r, "per_record": 2 * r}
    raise InputError(f"encoding must be 'box' or 'l1', got {encoding!r}")


def _check_rho(rho: float) -> float:
    if isinstance(rho, bool) or not isinstance(rho, (int, float)) or not math.isfinite(rho) or rho <= 0:
        raise InputError(f"student rho must be a finite number > 0, got {rho!r}", hint="Pass e.g. 0.5, or no noise")
    return float(rho)


def privatise_records(
    X: np.ndarray, *, rho: float | None, encoding: LdpEncoding = "box", rng: np.random.Generator | None = None
) -> np.ndarray:
    """Curator B: add ``Lap(1/ρ)`` to every coordinate of box-encoded records (``rho=None``: unchanged).

    ``X`` must already be encoded into ``[0, 1]`` (see :class:`FeatureEncoder`).
    """
    arr = np.asarray(X, dtype=np.float64)
    if arr.ndim != 2:
        raise InputError(f"records must be a 2-D array, got shape {arr.shape}")
    if np.any(arr < 0) or np.any(arr > 1):
        raise InputError("records must be encoded into [0, 1] before privatisation", hint="Use FeatureEncoder.transform")
    if encoding == "l1":
        norms = arr.sum(axis=1, keepdims=True)
        arr = np.divide(arr, norms, out=np.zeros_like(arr), where=norms > 0)
    elif encoding != "box":
        raise InputError(f"encoding must be 'box' or 'l1', got {encoding!r}")
    if rho is None:
        return arr.copy()
    return laplace(arr, scale=1.0 / _check_rho(rho), rng=rng)


# --------------------------------------------------------------------------- curator A: teachers


def partition_shards(
    n_rows: int, teachers: int, *, seed: int, groups: Sequence[Any] | np.ndarray | None = None
) -> list[np.ndarray]:
    """Split row indices into ``teachers`` disjoint shards of near-equal size.

    With ``groups`` (privacy-unit ids), all rows of one unit land in the same shard, so one unit
    changes at most one teacher. Shuffling is non-private algorithmic randomness (``seed``).

    >>> [len(s) for s in partition_shards(10, 3, seed=0)]
    [4, 3, 3]
    """
    if isinstance(teachers, bool) or not isinstance(teachers, int) or teachers < 1:
        raise InputError(f"teachers must be a positive integer, got {teachers!r}")
    rng = np.random.default_rng(seed)
    if groups is None:
        if n_rows < teachers:
            raise InputError(f"{n_rows} rows cannot feed {teachers} teachers", hint="Use fewer teachers")
        order = rng.permutation(n_rows)
        return [np.sort(s) for s in np.array_split(order, teachers)]
    g = np.asarray(groups)
    if len(g) != n_rows:
        raise InputError(f"{len(g)} group ids for {n_rows} rows")
    uniq, inv = np.unique(g, return_inverse=True)
    if len(uniq) < teachers:
        raise InputError(f"{len(uniq)} privacy units cannot feed {teachers} teachers", hint="Use fewer teachers")
    unit_shard = np.empty(len(uniq), dtype=int)
    for shard, units in enumerate(np.array_split(rng.permutation(len(uniq)), teachers)):
        unit_shard[units] = shard
    row_shard = unit_shard[inv]
    return [np.flatnonzero(row_shard == s) for s in range(teachers)]


@dataclass(frozen=True)
class TeacherEnsemble:
    """Teachers as stacked linear models: teacher ``i`` votes ``argmax_c (X @ W[i] + b[i])[c]``.

    A teacher whose shard held one class only votes that class (its weights are zero, its bias one-hot).
    """

    classes: tuple[Any, ...]
    weights: np.ndarray  # (teachers, width, classes)
    biases: np.ndarray  # (teachers, classes)
    shard_sizes: tuple[int, ...]
    train_seconds: float

    @property
    def n_teachers(self) -> int:
        return int(self.weights.shape[0])


def train_teachers(
    X: np.ndarray,
    y: np.ndarray,
    shards: Sequence[np.ndarray],
    *,
    classes: Sequence[Any],
    C: float = 1.0,
    progress: bool = True,
) -> TeacherEnsemble:
    """Train one L2-regularised logistic regression per shard (``y`` holds class indices 0..k-1)."""
    from veil._progress import progress as progress_bar

    Xa = np.asarray(X, dtype=np.float64)
    ya = np.asarray(y)
    k = len(classes)
    if k < 2:
        raise InputError(f"PATE needs at least 2 label classes, got {list(classes)}")
    if ya.size and (ya.min() < 0 or ya.max() >= k):
        raise InputError("teacher labels must be class indices 0..k-1")
    W = np.zeros((len(shards), Xa.shape[1], k))
    B = np.zeros((len(shards), k))
    start = time.perf_counter()
    bar = progress_bar(shards, desc="training teachers", unit="teacher") if progress else shards
    # Each shard is tiny: BLAS/OpenMP threads only add overhead (13x slower measured on a loaded 2-core host).
    # threadpool_limits is scoped: the previous limits come back when the block ends.
    with threadpool_limits(limits=1):
        _fit_shards(Xa, ya, shards, bar, W, B, k, C)
    return TeacherEnsemble(
        classes=tuple(classes),
        weights=W,
        biases=B,
        shard_sizes=tuple(len(s) for s in shards),
        train_seconds=time.perf_counter() - start,
    )


def _fit_shards(
    Xa: np.ndarray, ya: np.ndarray, shards: Sequence[np.ndarray], bar: Any, W: np.ndarray, B: np.ndarray, k: int, C: float
) -> None:
    for i, rows in enumerate(bar):
        present = np.unique(ya[rows])
        if len(present) == 1:
            B[i, present[0]] = 1.0
            continue
        model = LogisticRegression(C=C, max_iter=200)
        model.fit(Xa[rows], ya[rows])
        cls = model.classes_.astype(int)
        if len(cls) == 2:  # binary sklearn model: one coefficient row for class cls[1]
            W[i, :, cls[1]] = model.coef_[0]
            B[i, cls[1]] = model.intercept_[0]
            B[i, cls[0]] = 0.0
            W[i, :, [c for c in range(k) if c not in cls]] = 0.0
            B[i, [c for c in range(k) if c not in cls]] = -np.inf
        else:
            absent = [c for c in range(k) if c not in cls]
            W[i][:, cls] = model.coef_.T
            B[i, cls] = model.intercept_
            B[i, absent] = -np.inf


def vote_counts(ensemble: TeacherEnsemble, X: np.ndarray) -> np.ndarray:
    """``n_c(x)``: how many teachers vote for each class, one row per record (int64, rows sum to m)."""
    Xa = np.asarray(X, dtype=np.float64)
    k = len(ensemble.classes)
    counts = np.zeros((Xa.shape[0], k), dtype=np.int64)
    for W, b in zip(ensemble.weights, ensemble.biases, strict=True):
        with np.errstate(invalid="ignore"):
            scores = Xa @ W + b
        votes = np.argmax(scores, axis=1)
        counts[np.arange(len(votes)), votes] += 1
    return counts


def noisy_aggregate(counts: np.ndarray, *, gamma: float, rng: np.random.Generator | None = None) -> np.ndarray:
    """Eq. (5): ``argmax_c(n_c(x) + Lap(1/γ))`` per row; the noise comes from :func:`veil.mechanisms.laplace`."""
    if isinstance(gamma, bool) or not isinstance(gamma, (int, float)) or not math.isfinite(gamma) or gamma <= 0:
        raise InputError(f"gamma must be a finite number > 0, got {gamma!r}")
    noisy = laplace(np.asarray(counts, dtype=np.float64), scale=1.0 / float(gamma), rng=rng)
    return np.argmax(noisy, axis=1)


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


def _binary_metrics(pred: np.ndarray, truth: np.ndarray) -> dict[str, float]:
    pos, neg = truth == 1, truth == 0
    tpr = float(np.mean(pred[pos] == 1)) if pos.any() else float("nan")
    tnr = float(np.mean(pred[neg] == 0)) if neg.any() else float("nan")
    return {"tpr": tpr, "tnr": tnr, "balanced_accuracy": (tpr + tnr) / 2}


# --------------------------------------------------------------------------- end to end


@dataclass(frozen=True)
class PateConfig:
    """Parameters of one PATE publication. ``rho=None``: the student's records are sent without noise."""

    teachers: int = 250
    gamma: float = 0.05
    queries: int = 1000
    rho: float | None = 0.5
    ldp_encoding: LdpEncoding = "box"
    delta: float = 1e-5
    teacher_C: float = 1.0
    student_hidden: int = 0
    student_epochs: int = 300
    threshold: Literal["roc", "argmax"] = "roc"
    threshold_fraction: float = 0.2
    orders: tuple[float, ...] = DEFAULT_ORDERS
    seed: int = 0  # non-private algorithmic randomness: shards, query sample, student init

    def __post_init__(self) -> None:
        if isinstance(self.teachers, bool) or not isinstance(self.teachers, int) or self.teachers < 1:
            raise InputError(f"teachers must be a positive integer, got {self.teachers!r}")
        if isinstance(self.queries, bool) or not isinstance(self.queries, int) or self.queries < 2:
            raise InputError(f"queries must be an integer ≥ 2, got {self.queries!r}")
        if not (isinstance(self.gamma, (int, float)) and math.isfinite(self.gamma) and self.gamma > 0):
            raise InputError(f"gamma must be a finite number > 0, got {self.gamma!r}")
        if self.rho is not None:
            _check_rho(self.rho)
        if not (isinstance(self.delta, float) and 0 < self.delta < 1):
            raise InputError(f"delta must be in (0, 1), got {self.delta!r}")
        if self.ldp_encoding not in ("box", "l1"):
            raise InputError(f"ldp_encoding must be 'box' or 'l1', got {self.ldp_encoding!r}")
        if self.threshold not in ("roc", "argmax"):
            raise InputError(f"threshold must be 'roc' or 'argmax', got {self.threshold!r}")
        if not 0 < self.threshold_fraction < 1:
            raise InputError(f"threshold_fraction must be in (0, 1), got {self.threshold_fraction!r}")


@dataclass(frozen=True)
class PateResult:
    """Outcome of :func:`run_pate`. ``counts`` are the private vote counts (curator-only)."""

    student: Student
    counts: np.ndarray
    labels: np.ndarray
    epsilon_independent: MomentsBound
    epsilon_dependent: MomentsBound
    ldp: Mapping[str, Any]
    metrics: Mapping[str, Any]


def run_pate(
    X_teachers: np.ndarray,
    y_teachers: np.ndarray,
    X_student: np.ndarray,
    X_valid: np.ndarray | None,
    y_valid: np.ndarray | None,
    *,
    encoder: FeatureEncoder,
    classes: Sequence[Any],
    config: PateConfig,
    y_student: np.ndarray | None = None,
    groups: np.ndarray | None = None,
    ensemble: TeacherEnsemble | None = None,
    rng: np.random.Generator | None = None,
    progress: bool = True,
) -> PateResult:
    """Teachers → privatised queries → noisy labels → student → metrics and ε.

    Inputs are box-encoded (``encoder.transform``) arrays; labels are class indices into ``classes``.
    ``X_student`` holds the student's records: ``config.queries`` of them are sampled (seeded) and
    sent. ``y_student`` (true labels of those records) and ``X_valid``/``y_valid`` only feed metrics.
    ``ensemble`` reuses already trained teachers. ``rng`` is the test-only noise generator.
    """
    k = len(classes)
    Xs = np.asarray(X_student, dtype=np.float64)
    if Xs.shape[0] < config.queries:
        raise InputError(
            f"the student has {Xs.shape[0]} records but {config.queries} queries were asked",
            hint="Lower --queries or give the student more records",
        )
    if ensemble is None:
        shards = partition_shards(len(X_teachers), config.teachers, seed=config.seed, groups=groups)
        ensemble = train_teachers(X_teachers, y_teachers, shards, classes=classes, C=config.teacher_C, progress=progress)
    algo = np.random.default_rng(config.seed + 1)
    pick = np.sort(algo.choice(Xs.shape[0], size=config.queries, replace=False))
    Xq = privatise_records(Xs[pick], rho=config.rho, encoding=config.ldp_encoding, rng=rng)
    counts = vote_counts(ensemble, Xq)
    labels = noisy_aggregate(counts, gamma=config.gamma, rng=rng)

    # student: hold out a fraction of the labelled queries to pick the ROC threshold (binary)
    use_roc = config.threshold == "roc" and k == 2
    perm = algo.permutation(config.queries)
    n_thr = round(config.threshold_fraction * config.queries) if use_roc else 0
    thr_idx, fit_idx = perm[:n_thr], perm[n_thr:]
    net = train_student(
        Xq[fit_idx],
        labels[fit_idx],
        n_classes=k,
        hidden=config.student_hidden,
        epochs=config.student_epochs,
        seed=config.seed + 2,
    )
    threshold = None
    if use_roc:
        with torch.no_grad():
            s = torch.softmax(net(torch.from_numpy(Xq[thr_idx])), dim=1)[:, 1].numpy()
        threshold = choose_threshold(s, labels[thr_idx])
    eps_ind = data_independent_epsilon(gamma=config.gamma, queries=config.queries, delta=config.delta)
    eps_dep = data_dependent_epsilon(counts, gamma=config.gamma, delta=config.delta, orders=config.orders)
    ldp = ldp_guarantee(encoder, config.rho, config.ldp_encoding)
    student = Student(
        net=net,
        classes=tuple(classes),
        encoder=encoder,
        hidden=config.student_hidden,
        threshold=threshold,
        ldp_encoding=config.ldp_encoding,
        info={
            "trained_on": "privatised student records and noisy PATE labels",
            "queries": config.queries,
            "fit_records": len(fit_idx),
            "threshold_records": len(thr_idx),
        },
    )

    metrics: dict[str, Any] = {
        "teachers": ensemble.n_teachers,
        "teacher_train_seconds": round(ensemble.train_seconds, 3),
        "mean_shard_size": float(np.mean(ensemble.shard_sizes)),
        "queries": config.queries,
        "label_distribution": {str(c): int(np.sum(labels == i)) for i, c in enumerate(classes)},
        "epsilon_data_independent": eps_ind.epsilon,
        "lambda_data_independent": eps_ind.order,
        "epsilon_data_dependent": eps_dep.epsilon,
        "order_data_dependent": eps_dep.order,
        "epsilon_pure_composition": 2.0 * config.gamma * config.queries,
        "student_ldp_epsilon_per_record": ldp["per_record"],
        "student_ldp_epsilon_per_numeric_feature": ldp["per_numeric_feature"],
        "student_ldp_epsilon_per_categorical_feature": ldp["per_categorical_feature"],
        "student_threshold": threshold,
    }
    if y_student is not None:
        truth = np.asarray(y_student)[pick]
        metrics["ensemble_accuracy_before_noise"] = float(np.mean(np.argmax(counts, axis=1) == truth))
        metrics["ensemble_accuracy_after_noise"] = float(np.mean(labels == truth))
    if X_valid is not None and y_valid is not None and len(y_valid):
        yv = np.asarray(y_valid)
        Xv = np.asarray(X_valid, dtype=np.float64)
        pred = student.predict_index(Xv, encoded=True)
        metrics["student_accuracy"] = float(np.mean(pred == yv))
        metrics["validation_records"] = len(yv)
        metrics["ensemble_accuracy_clean_validation"] = float(np.mean(np.argmax(vote_counts(ensemble, Xv), 1) == yv))
        if k == 2:
            metrics.update({f"student_{key}": v for key, v in _binary_metrics(pred, yv).items()})
    return PateResult(
        student=student,
        counts=counts,
        labels=labels,
        epsilon_independent=eps_ind,
        epsilon_dependent=eps_dep,
        ldp=ldp,
        metrics=metrics,
    )


# --------------------------------------------------------------------------- publication from a policy table


@dataclass(frozen=True)
class PatePublication:
    """What ``veil publish pate`` did: the release id, where the model went, and the result."""

    release_id: str
    model_path: Path
    result: PateResult
    params: Mapping[str, Any]

    def summary(self) -> dict[str, Any]:
        m = self.result.metrics
        keys = (
            "epsilon_data_independent",
            "lambda_data_independent",
            "epsilon_data_dependent",
            "ensemble_accuracy_before_noise",
            "ensemble_accuracy_after_noise",
            "student_accuracy",
            "student_tpr",
            "student_tnr",
            "student_threshold",
            "student_ldp_epsilon_per_record",
            "teacher_train_seconds",
        )
        out: dict[str, Any] = {"release_id": self.release_id, "model": str(self.model_path), "delta": self.params["delta"]}
        out.update({k: m[k] for k in keys if k in m})
        return out


def _label_classes(column: Any, label: str) -> tuple[Any, ...]:
    values = getattr(column, "values", None)
    if not values or len(values) < 2:
        raise InputError(
            f"label column {label!r} has no declared values (need at least two classes)",
            hint=f'Declare values = [...] for {label!r} in the policy, e.g. values = ["<=50K", ">50K"]',
        )
    return tuple(values)


def publish_pate(
    policy: Any,
    *,
    table: str,
    label: str,
    output_model: str | Path,
    features: Sequence[str] | None = None,
    config: PateConfig,
    student_table: str | None = None,
    validation: int = 1000,
    save_votes: str | Path | None = None,
    progress: bool = True,
    rng: np.random.Generator | None = None,
) -> PatePublication:
    """Train PATE from ``table`` (curator A), privatise the student's records (curator B), save the
    student model, and write a release record charged with the data-independent ``(ε, δ)``.

    Student records come from ``student_table`` when given, else ``queries + validation`` rows
    (whole privacy units) are held out of ``table`` at random and the rest feed the teachers.
    Features are encoded from the policy's declared bounds/values only.
    """
    from veil.store.releases import record_release
    from veil.store.warehouse import read_table

    spec = policy.table(table)
    classes = _label_classes(spec.column(label), label)
    unit = spec.privacy_unit
    skip = {label, unit}
    if features is None:
        features = [
            n
            for n, c in spec.columns.items()
            if n not in skip and ((c.type in ("int", "float") and c.bounded and c.lower != c.upper) or c.values)
        ]
    features = list(features)
    if not features:
        raise InputError(
            f"no usable feature columns in table {table!r}",
            hint="Pass --features with columns that have declared bounds or values",
        )
    for f in features:
        spec.column(f)
        if f in skip:
            raise InputError(f"{f!r} cannot be a feature: it is the label or the privacy unit")
    encoder = FeatureEncoder.from_columns(spec.columns, features)
    if isinstance(validation, bool) or not isinstance(validation, int) or validation < 0:
        raise InputError(f"validation must be an integer ≥ 0, got {validation!r}")

    cols = features + [label] + ([unit] if unit else [])
    df = read_table(policy, table, cols)
    known = df[label].isin(list(classes))
    dropped = int((~known).sum())
    df = df[known].reset_index(drop=True)
    y_all = np.array([classes.index(v) for v in df[label].tolist()], dtype=int)
    groups = df[unit].to_numpy() if unit else np.arange(len(df))
    algo = np.random.default_rng(config.seed)

    if student_table is None:
        need = config.queries + validation
        uniq = np.unique(groups)
        order = algo.permutation(len(uniq))
        chosen: list[Any] = []
        taken = 0
        sizes = dict(zip(*np.unique(groups, return_counts=True), strict=True))
        for u in uniq[order]:
            if taken >= need:
                break
            chosen.append(u)
            taken += int(sizes[u])
        student_mask = np.isin(groups, np.array(chosen))
        if (~student_mask).sum() < config.teachers:
            raise InputError(
                f"table {table!r} has {len(df)} usable rows: too few for {need} student rows and {config.teachers} teachers",
                hint="Lower --queries, --validation or --teachers",
            )
        s_idx = np.flatnonzero(student_mask)
        s_idx = s_idx[algo.permutation(len(s_idx))]
        Xs_all = encoder.transform(df.iloc[s_idx])
        ys_all = y_all[s_idx]
        teach = np.flatnonzero(~student_mask)
        X_t, y_t, g_t = encoder.transform(df.iloc[teach]), y_all[teach], groups[teach]
        student_source = f"{len(s_idx)} rows held out of {table!r}"
    else:
        sdf = read_table(policy, student_table)
        missing = [f for f in features if f not in sdf.columns]
        if missing:
            raise InputError(f"student table {student_table!r} lacks feature columns {missing}")
        sdf = sdf.sample(frac=1.0, random_state=int(algo.integers(2**31))).reset_index(drop=True)
        Xs_all = encoder.transform(sdf)
        ys_all = None
        if label in sdf.columns:
            ok = sdf[label].isin(list(classes)).to_numpy()
            ys_all = np.array([classes.index(v) if k else -1 for v, k in zip(sdf[label], ok, strict=True)])
        X_t, y_t, g_t = encoder.transform(df), y_all, groups
        student_source = f"table {student_table!r} ({len(sdf)} rows)"
    n_val = min(validation, max(0, len(Xs_all) - config.queries))
    X_val = Xs_all[:n_val] if ys_all is not None and n_val else None
    y_val = ys_all[:n_val] if ys_all is not None and n_val else None
    X_pool = Xs_all[n_val:]
    y_pool = ys_all[n_val:] if ys_all is not None else None
    if y_val is not None and np.any(y_val < 0):
        keep = y_val >= 0
        X_val, y_val = X_val[keep], y_val[keep]  # type: ignore[index]
    if y_pool is not None and np.any(y_pool < 0):
        y_pool = None  # unlabelled records: no ensemble-accuracy metric

    result = run_pate(
        X_t,
        y_t,
        X_pool,
        X_val,
        y_val,
        encoder=encoder,
        classes=classes,
        config=config,
        y_student=y_pool,
        groups=g_t if unit else None,
        rng=rng,
        progress=progress,
    )
    model_path = Path(output_model)
    params: dict[str, Any] = {
        "table": table,
        "label": label,
        "features": features,
        "classes": list(classes),
        "teachers": config.teachers,
        "teacher_model": f"logistic regression (L2, C={config.teacher_C})",
        "gamma": config.gamma,
        "queries": config.queries,
        "student_rho": config.rho,
        "ldp_encoding": config.ldp_encoding,
        "delta": config.delta,
        "student_source": student_source,
        "teacher_rows": len(X_t),
        "validation_rows": 0 if y_val is None else len(y_val),
        "dropped_rows_unknown_label": dropped,
        "student_hidden": config.student_hidden,
        "threshold": config.threshold,
        "seed": config.seed,
        "model_path": str(model_path.resolve()),
        "accountant_orders": list(config.orders),
    }
    metrics = dict(result.metrics)
    metrics["note"] = (
        "epsilon charged = data-independent bound (Eq. 12); epsilon_data_dependent reads the private "
        "votes and is not itself differentially private; accuracies use labelled validation rows"
    )
    release_id = record_release(
        policy,
        kind="publication",
        method="pate",
        params=params,
        metrics=metrics,
        epsilon=result.epsilon_independent.epsilon,
        delta=config.delta,
    )
    if save_votes is not None:
        np.save(Path(save_votes), result.counts, allow_pickle=False)
    description = {
        "release_id": release_id,
        **{
            k: params[k]
            for k in (
                "table",
                "label",
                "features",
                "teachers",
                "gamma",
                "queries",
                "student_rho",
                "ldp_encoding",
                "delta",
                "student_source",
            )
        },
        "epsilon": result.epsilon_independent.epsilon,
        "ldp": dict(result.ldp),
    }
    result.student.save(model_path, description=description)
    return PatePublication(release_id=release_id, model_path=model_path, result=result, params=params)
