"""Positive-unlabelled (PU) learning attacks on a released class mean.

The attacker sees every record of a table (no labels) and one released, possibly noisy,
mean of the records in the class of interest; the prior ``pi`` (share of that class) is
known. Every attack here returns a score per record; a record is predicted positive when
its score is > 0.

Methods (Su et al., KDD 2020, "Re-identification attack ... with noisy sample-mean"):

- :func:`upu` / :func:`nnpu` -- Kiryo et al. (2017) PU risk with the sigmoid surrogate loss
  on raw scores, the released mean being the only labelled positive example.
- :func:`growpu` -- the paper's Exhibits 1-3 (pre-train, growth, fine-tune), Table 3
  hyper-parameters as defaults.
- :func:`kmeans_attack`, :func:`projection_floor`, :func:`oracle` -- baselines.

Decisions on what the paper leaves open (each is tested in ``tests/test_pu_*.py`` and
documented in ``docs/reid.md``):

1. One ``Train(...)`` call is **one Adam step** on the batch the sample-selection
   function returns; the classifier is never re-initialised between stages (growth and
   fine-tune warm-start from the pre-trained model).
2. The batch is exactly Exhibit 2 / 3: pre-train uses ``b`` random unlabelled records
   (label -1) plus ``b`` copies of the mean (label +1); growth and fine-tune use ``b``
   random records pseudo-labelled by the current classifier plus one copy of the mean.
   Records are drawn without replacement within a batch, independently across batches.
3. The proportion tested against ``pi_pre`` in Exhibit 1 line 12 is measured over the
   ``b`` unlabelled records of the batch, not over the ``2b`` rows that include the mean
   copies (with the copies counted, a classifier that still calls the mean positive can
   never go below 50%, so the literal reading never stops). Growth tests ``pi_grow`` over
   the ``b + 1`` rows of its batch, as written.
4. Growth has no iteration cap in the paper (``while 1``); we cap it at ``t_grow`` steps
   (default 10,000) and report ``reached_grow=False`` if the cap was hit.
5. Exhibit 1 line 25 passes the batch ``X`` to the fine-tune sampler; we read it as the
   unlabelled set ``X_u`` (sampling ``b`` records from a batch of ``b + 1`` would make the
   stage a no-op resampling of one batch).
6. The weighted loss of a growth/fine-tune batch is the paper's risk
   ``pi/(n_p+1) * sum_i w_i l(g(x_i), y_i)``, which with Exhibit 3's weights equals
   ``pi/(n_p+1) [l(g(mean)) + sum_P l] + (1-pi)/n_n sum_N l``; ``n_n`` is clamped to >= 1.
7. The loss. uPU and nnPU need a symmetric loss and use Kiryo's sigmoid loss on raw scores.
   growPU's growth and fine-tune stages are supervised training on pseudo-labels, and the
   paper's linear classifier is "a linear transformation followed by a sigmoid"; we train
   it with the cross-entropy of that sigmoid output (``loss="logistic"``, the default).
   ``loss="sigmoid"`` is available and measured in docs/reid.md (it overfits in
   pre-train as in Figure 4 but ends about 9 points lower on MNIST). ``loss="linear"``
   (``(1 - y z) / 2``, symmetric and linear) is the setting of Theorem 4.1, where with a
   linear classifier the positive risk depends on the data only through the mean.
   The mean always enters as a positive example (the paper's formulation).
8. ``C(x) = 1`` means raw score > 0 (sigmoid > 0.5), computed in eval mode (no dropout).
9. growPU first projects the released mean onto the box of the records' observed
   per-coordinate range ``[min_j X_ij, max_j X_ij]`` (``clip_mean=True``, the default). A
   true class mean always lies in that box, so a noiseless mean is unchanged; a noisy one
   loses the part of its noise that no class mean could have (e.g. MNIST's 152 always-black
   pixels). This is post-processing of the release with public information, not a switch on
   whether noise was added. Without it, the noise on constant coordinates lets pre-train
   separate the mean from every record at no cost (weights on those coordinates move no
   record's score), pre-train stops after ~200 steps with a direction dominated by noise, and
   the logistic self-training freezes near 87% on MNIST; with it, 90.9 ± 1.4% over 5 seeds (paper 91.8%; docs/reid.md).

Example (tiny, separable data; the attack recovers the class):

>>> import numpy as np, torch
>>> _ = torch.set_num_threads(1)
>>> rng = np.random.default_rng(0)
>>> X = np.vstack([rng.normal(1, 1, (200, 5)), rng.normal(-1, 1, (200, 5))]).astype("float32")
>>> truth = np.r_[np.ones(200, bool), np.zeros(200, bool)]
>>> res = growpu(X, X[:200].mean(0), prior=0.5, seed=0, batch_size=100, t_pre=200, t_tune=300)
>>> float((res.predicted == truth).mean()) > 0.9
True
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from veil.errors import InputError

__all__ = [
    "CLASSIFIERS",
    "GrowPUConfig",
    "HistoryPoint",
    "PUResult",
    "build_classifier",
    "clip_to_records",
    "growpu",
    "kmeans_attack",
    "nnpu",
    "oracle",
    "projection_floor",
    "upu",
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


def _model_scorer(model: nn.Module) -> Callable[[np.ndarray], np.ndarray]:
    def score(X: np.ndarray) -> np.ndarray:
        return _scores(model, torch.from_numpy(np.ascontiguousarray(X, dtype=np.float32))).numpy().astype(np.float64)

    return score


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


# --------------------------------------------------------------------------- helpers


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


def _validate(X: np.ndarray, mean: np.ndarray, prior: float) -> tuple[np.ndarray, np.ndarray]:
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


def _scores(model: nn.Module, X: torch.Tensor, chunk: int = 8192) -> torch.Tensor:
    was_training = model.training
    model.eval()
    with torch.no_grad():
        out = torch.cat([model(X[i : i + chunk]).reshape(-1) for i in range(0, X.shape[0], chunk)])
    model.train(was_training)
    return out


class _Recorder:
    """Samples the Figure-4 curves every ``every`` steps (``every=0`` disables it)."""

    def __init__(self, model: nn.Module, X: torch.Tensor, truth: np.ndarray | None, every: int) -> None:
        self.model, self.X, self.every = model, X, every
        self.truth = None if truth is None else torch.tensor(np.asarray(truth, dtype=bool))
        self.points: list[HistoryPoint] = []
        self.step = 0

    def tick(self, stage: str, force: bool = False) -> None:
        self.step += 1
        if self.every and (force or self.step % self.every == 0):
            pred = _scores(self.model, self.X) > 0
            acc = None if self.truth is None else float((pred == self.truth).float().mean())
            self.points.append(HistoryPoint(self.step, stage, float(pred.float().mean()), acc))


def _setup(
    seed: int | None, classifier: str, dim: int, hidden: Sequence[int] | None, lr: float, weight_decay: float
) -> tuple[nn.Module, torch.optim.Optimizer, np.random.Generator]:
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


def _progress(total: int, desc: str):  # tqdm on stderr when available; a no-op otherwise
    try:
        from veil._progress import progress
    except ImportError:  # the shared progress helper has not landed
        return None
    return progress(total=total, desc=desc)


# --------------------------------------------------------------------------- growPU


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
    X, mean = _validate(X, mean, prior)
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
        from dataclasses import replace

        cfg = replace(cfg, **overrides)
    b = min(int(cfg.batch_size), X.shape[0])
    if b < 1:
        raise InputError(f"batch_size must be >= 1, got {cfg.batch_size}")
    pi = float(prior)
    t0, c0 = time.perf_counter(), time.process_time()
    model, opt, rng = _setup(seed, classifier, X.shape[1], hidden, cfg.lr, cfg.weight_decay)
    Xt = torch.from_numpy(X)
    mt = torch.from_numpy(mean).reshape(1, -1)
    rec = _Recorder(model, Xt, truth, record_every)
    n = X.shape[0]
    bar = _progress(cfg.t_pre + cfg.t_grow + cfg.t_tune, "growPU")

    def step(batch: torch.Tensor, y: torch.Tensor, w: torch.Tensor, scale: float) -> None:
        opt.zero_grad()
        z = model(batch).reshape(-1)
        risk = scale * (w * surrogate_loss(z, y, loss)).sum()
        risk.backward()
        opt.step()

    try:
        # -- pre-train (Exhibit 1 lines 7-13, Exhibit 2)
        y_pre = torch.cat([-torch.ones(b), torch.ones(b)])
        w_pre = torch.ones(2 * b)
        pre_steps, pre_frac = 0, 1.0
        for _ in range(cfg.t_pre):
            idx = torch.from_numpy(rng.choice(n, b, replace=False))
            batch = torch.cat([Xt[idx], mt.expand(b, -1)])
            step(batch, y_pre, w_pre, 1.0 / (2 * b))
            pre_steps += 1
            rec.tick("pre-train")
            if bar is not None:
                bar.update(1)
            pre_frac = float((_scores(model, batch[:b]) > 0).float().mean())  # decision 3
            if pre_frac <= cfg.pi_pre:
                break

        # -- growth (Exhibit 1 lines 14-21, Exhibit 3 with isFineTune=False)
        grow_steps, reached, grow_frac = 0, False, 0.0
        for _ in range(cfg.t_grow):
            batch, y, w, scale, _frac = _grow_batch(model, Xt, mt, rng, b, pi, False, cfg)
            step(batch, y, w, scale)
            grow_steps += 1
            rec.tick("growth")
            if bar is not None:
                bar.update(1)
            grow_frac = float((_scores(model, batch) > 0).float().mean())
            if grow_frac >= cfg.pi_grow:
                reached = True
                break

        # -- fine-tune (Exhibit 1 lines 22-26)
        for _ in range(cfg.t_tune):
            batch, y, w, scale, _frac = _grow_batch(model, Xt, mt, rng, b, pi, True, cfg)
            step(batch, y, w, scale)
            rec.tick("fine-tune")
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    rec.tick("final", force=True)
    scores = _scores(model, Xt).numpy().astype(np.float64)
    info = {
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
        "cpu_seconds": time.process_time() - c0,
    }
    return PUResult("growpu", classifier, scores, time.perf_counter() - t0, tuple(rec.points), info, _model_scorer(model))


def _grow_batch(
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
    pos = _scores(model, sample) > 0
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


# --------------------------------------------------------------------------- uPU / nnPU


def _pu_risk(
    X: np.ndarray,
    mean: np.ndarray,
    *,
    prior: float,
    non_negative: bool,
    classifier: str,
    hidden: Sequence[int] | None,
    seed: int | None,
    epochs: int,
    batch_size: int,
    lr: float,
    weight_decay: float,
    beta: float,
    gamma: float,
    loss: str,
    truth: np.ndarray | None,
    record_every: int,
) -> PUResult:
    X, mean = _validate(X, mean, prior)
    if loss not in ("sigmoid", "linear"):
        raise InputError(
            f"uPU/nnPU need a symmetric loss (l(z,1) + l(z,-1) = 1), got {loss!r}",
            hint="Use loss='sigmoid' (default) or 'linear'",
        )
    if epochs < 1 or batch_size < 1:
        raise InputError(f"epochs and batch_size must be >= 1, got {epochs}, {batch_size}")
    pi = float(prior)
    t0, c0 = time.perf_counter(), time.process_time()
    model, opt, rng = _setup(seed, classifier, X.shape[1], hidden, lr, weight_decay)
    Xt = torch.from_numpy(X)
    mt = torch.from_numpy(mean).reshape(1, -1)
    rec = _Recorder(model, Xt, truth, record_every)
    n = X.shape[0]
    b = min(batch_size, n)
    corrections = 0
    bar = _progress(epochs, "nnPU" if non_negative else "uPU")
    try:
        for _ in range(epochs):
            order = torch.from_numpy(rng.permutation(n))
            for s in range(0, n, b):
                u = Xt[order[s : s + b]]
                opt.zero_grad()
                z = model(torch.cat([mt, u])).reshape(-1)
                zp, zu = z[:1], z[1:]
                ones_p, ones_u = torch.ones_like(zp), torch.ones_like(zu)
                r_pos = pi * surrogate_loss(zp, ones_p, loss).mean()
                r_neg = surrogate_loss(zu, -ones_u, loss).mean() - pi * surrogate_loss(zp, -ones_p, loss).mean()
                if non_negative and float(r_neg.detach()) < -beta:
                    objective = -gamma * r_neg  # Kiryo et al.: step back along the negative risk
                    corrections += 1
                else:
                    objective = r_pos + r_neg
                objective.backward()
                opt.step()
                rec.tick("train")
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    rec.tick("final", force=True)
    scores = _scores(model, Xt).numpy().astype(np.float64)
    info = {
        "epochs": epochs,
        "batch_size": b,
        "corrections": corrections,
        "loss": loss,
        "lr": lr,
        "weight_decay": weight_decay,
        "cpu_seconds": time.process_time() - c0,
    }
    return PUResult(
        "nnpu" if non_negative else "upu",
        classifier,
        scores,
        time.perf_counter() - t0,
        tuple(rec.points),
        info,
        _model_scorer(model),
    )


def nnpu(
    X: np.ndarray,
    mean: np.ndarray,
    *,
    prior: float,
    classifier: str = "linear",
    hidden: Sequence[int] | None = None,
    seed: int | None = None,
    epochs: int = 1000,
    batch_size: int = 500,
    lr: float = 1e-3,
    weight_decay: float = 0.005,
    beta: float = 0.0,
    gamma: float = 1.0,
    loss: str = "sigmoid",
    truth: np.ndarray | None = None,
    record_every: int = 0,
) -> PUResult:
    """Non-negative PU learning (Kiryo et al. 2017) with the mean as the only positive.

    Each minibatch is ``batch_size`` unlabelled records (an epoch is one shuffled pass) plus
    the mean; defaults: 1,000 epochs and b=500 (paper, Section 6.1.1), Adam lr 1e-3 with
    weight decay 0.005, beta=0, gamma=1 (Kiryo's code).
    """
    return _pu_risk(
        X,
        mean,
        prior=prior,
        non_negative=True,
        classifier=classifier,
        hidden=hidden,
        seed=seed,
        epochs=epochs,
        batch_size=batch_size,
        lr=lr,
        weight_decay=weight_decay,
        beta=beta,
        gamma=gamma,
        loss=loss,
        truth=truth,
        record_every=record_every,
    )


def upu(
    X: np.ndarray,
    mean: np.ndarray,
    *,
    prior: float,
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
    """Unbiased PU learning (du Plessis et al.) -- :func:`nnpu` without the correction."""
    return _pu_risk(
        X,
        mean,
        prior=prior,
        non_negative=False,
        classifier=classifier,
        hidden=hidden,
        seed=seed,
        epochs=epochs,
        batch_size=batch_size,
        lr=lr,
        weight_decay=weight_decay,
        beta=0.0,
        gamma=1.0,
        loss=loss,
        truth=truth,
        record_every=record_every,
    )


# --------------------------------------------------------------------------- baselines


def kmeans_attack(X: np.ndarray, mean: np.ndarray, *, prior: float = 0.5, seed: int | None = None) -> PUResult:
    """K-means with k=2; the cluster whose centroid is nearer the released mean is positive.

    The score is ``dist(x, other centroid) - dist(x, positive centroid)``: > 0 exactly for
    the records k-means assigns to the positive cluster.
    """
    from sklearn.cluster import KMeans

    X, mean = _validate(X, mean, prior)
    t0 = time.perf_counter()
    km = KMeans(n_clusters=2, n_init=10, random_state=np.random.default_rng(seed).integers(2**31))
    km.fit(X.astype(np.float64))
    c = km.cluster_centers_
    pos = int(np.argmin(np.linalg.norm(c - mean.astype(np.float64), axis=1)))

    def score(Z: np.ndarray) -> np.ndarray:
        d = np.stack([np.linalg.norm(Z.astype(np.float64) - c[j], axis=1) for j in (0, 1)], axis=1)
        return d[:, 1 - pos] - d[:, pos]

    return PUResult("kmeans", None, score(X), time.perf_counter() - t0, (), {"positive_cluster": pos}, score)


def projection_floor(X: np.ndarray, mean: np.ndarray, *, prior: float) -> PUResult:
    """The floor an attack must beat: project on (released mean - table mean), top ``prior`` share positive.

    With ``prior`` known, the table mean and the class mean determine the other class's mean
    (``mu_N = (mu_X - pi mu_P) / (1 - pi)``), so a released mean is effectively two-sided.
    """
    X, mean = _validate(X, mean, prior)
    t0 = time.perf_counter()
    direction = mean.astype(np.float64) - X.mean(0, dtype=np.float64)
    proj = X.astype(np.float64) @ direction
    k = min(max(round(prior * X.shape[0]), 1), X.shape[0] - 1)
    order = np.argsort(-proj, kind="stable")
    threshold = (proj[order[k - 1]] + proj[order[k]]) / 2.0
    scores = proj - threshold
    # ties at the threshold (one-hot data): exactly k positives, ties broken by record order
    tiny = np.finfo(np.float64).tiny
    top = np.zeros(len(proj), bool)
    top[order[:k]] = True
    scores[top & (scores <= 0)] = tiny
    scores[~top & (scores > 0)] = -tiny
    info = {"direction_norm": float(np.linalg.norm(direction))}

    def score(Z: np.ndarray) -> np.ndarray:
        return Z.astype(np.float64) @ direction - threshold

    return PUResult("floor", None, scores, time.perf_counter() - t0, (), info, score)


def oracle(
    X: np.ndarray,
    truth: np.ndarray,
    *,
    classifier: str = "linear",
    hidden: Sequence[int] | None = None,
    seed: int | None = None,
    steps: int = 2000,
    batch_size: int = 500,
    lr: float = 1e-3,
    weight_decay: float = 0.0,
) -> PUResult:
    """Supervised upper bound: the same classifier trained on the true labels (logistic loss).

    ``steps`` Adam steps on shuffled minibatches (2,000 = 100 epochs of MNIST 5 vs 3).
    Accuracy is transductive (training records = attacked records), like the paper's table.
    """
    X = np.require(X, dtype=np.float32, requirements=["C", "W"])
    truth = np.asarray(truth, dtype=bool).reshape(-1)
    if truth.shape[0] != X.shape[0]:
        raise InputError(f"truth has {truth.shape[0]} labels for {X.shape[0]} records")
    if steps < 1 or batch_size < 1:
        raise InputError(f"steps and batch_size must be >= 1, got {steps}, {batch_size}")
    t0 = time.perf_counter()
    model, opt, rng = _setup(seed, classifier, X.shape[1], hidden, lr, weight_decay)
    Xt = torch.from_numpy(X)
    yt = torch.from_numpy(truth.astype(np.float32))
    n = X.shape[0]
    lossf = nn.BCEWithLogitsLoss()
    done = 0
    while done < steps:
        order = torch.from_numpy(rng.permutation(n))
        for s in range(0, n, batch_size):
            if done == steps:
                break
            i = order[s : s + batch_size]
            opt.zero_grad()
            lossf(model(Xt[i]).reshape(-1), yt[i]).backward()
            opt.step()
            done += 1
    scores = _scores(model, Xt).numpy().astype(np.float64)
    return PUResult("oracle", classifier, scores, time.perf_counter() - t0, (), {"steps": steps}, _model_scorer(model))


#: Attack functions by CLI name (``oracle`` needs the truth and is not listed).
METHODS: dict[str, Callable[..., PUResult]] = {"growpu": growpu, "nnpu": nnpu, "upu": upu}
