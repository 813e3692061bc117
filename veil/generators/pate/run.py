"""PATE end to end on arrays: :class:`PateConfig` → :func:`run_pate` → :class:`PateResult` (teachers,
noisy labels, student, the (ε, δ) accounting and the curator's metrics)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch

from veil.errors import InputError
from veil.generators._threads import DEFAULT_THREADS, limited_threads
from veil.generators.base import check_seed
from veil.generators.domain import csprng_permutation
from veil.generators.pate.encoding import FeatureEncoder, LdpEncoding, check_rho, ldp_guarantee, privatise_records
from veil.generators.pate.split import (
    DEFAULT_STUDENT_SHARE,
    check_student_share,
    identities,
    partition_shards,
    query_order,
)
from veil.generators.pate.student import Student, binary_metrics, choose_threshold, train_student
from veil.generators.pate.teachers import TeacherEnsemble, noisy_aggregate, train_teachers, vote_counts
from veil.mechanisms.pate_accounting import (
    DEFAULT_ORDERS,
    MomentsBound,
    data_dependent_epsilon,
    data_independent_epsilon,
)

# --------------------------------------------------------------------------- end to end


#: Most hidden units of the student: more is no model a few thousand noisy labels can train, and a huge
#: value would fail in torch after the publication was charged (red team s24, A12).
MAX_STUDENT_HIDDEN = 4096


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
    seed: int = 0  # public: keys the hashes of shards, roles and query order; student init, fillers
    student_share: float = DEFAULT_STUDENT_SHARE  # held-out student: share of the source's people (keyed hash)
    threads: int = DEFAULT_THREADS  # torch and BLAS threads while training (restored afterwards)

    def __post_init__(self) -> None:
        if isinstance(self.teachers, bool) or not isinstance(self.teachers, int) or self.teachers < 1:
            raise InputError(f"teachers must be a positive integer, got {self.teachers!r}")
        if isinstance(self.queries, bool) or not isinstance(self.queries, int) or self.queries < 2:
            raise InputError(f"queries must be an integer ≥ 2, got {self.queries!r}")
        if not (isinstance(self.gamma, (int, float)) and math.isfinite(self.gamma) and self.gamma > 0):
            raise InputError(f"gamma must be a finite number > 0, got {self.gamma!r}")
        if self.rho is not None:
            check_rho(self.rho)
        if not (isinstance(self.delta, float) and 0 < self.delta < 1):
            raise InputError(f"delta must be in (0, 1), got {self.delta!r}")
        check_seed(self.seed)
        if self.seed is None:
            raise InputError("seed must be an integer (PATE's shards, query sample and student init)", hint="Use e.g. 0")
        if isinstance(self.student_hidden, bool) or not isinstance(self.student_hidden, int):
            raise InputError(f"student_hidden must be an integer, got {self.student_hidden!r}")
        if not 0 <= self.student_hidden <= MAX_STUDENT_HIDDEN:
            raise InputError(
                f"student_hidden must be between 0 and {MAX_STUDENT_HIDDEN}, got {self.student_hidden}",
                hint="Use 0 (logistic regression) or a few dozen hidden units",
            )
        if self.ldp_encoding not in ("box", "l1"):
            raise InputError(f"ldp_encoding must be 'box' or 'l1', got {self.ldp_encoding!r}")
        if self.threshold not in ("roc", "argmax"):
            raise InputError(f"threshold must be 'roc' or 'argmax', got {self.threshold!r}")
        if not 0 < self.threshold_fraction < 1:
            raise InputError(f"threshold_fraction must be in (0, 1), got {self.threshold_fraction!r}")
        check_student_share(self.student_share)
        if isinstance(self.threads, bool) or not isinstance(self.threads, int) or self.threads < 1:
            raise InputError(f"threads must be a positive integer, got {self.threads!r}", hint="Use e.g. threads=1")


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
    Teachers' shards are keyed hashes of each row's identity (its ``groups`` id, else its content and
    label: :mod:`~veil.generators.pate.split`), so one person changes at most one teacher; an empty shard
    abstains. ``X_student`` holds the student's records: exactly ``config.queries`` are sent whatever its
    size (:func:`student_queries`). ``y_student`` (true labels of those records) and ``X_valid``/``y_valid``
    only feed metrics. ``ensemble`` reuses already trained teachers. ``rng`` is the test-only generator
    (noise and the queries' order).
    """
    with limited_threads(config.threads):
        k = len(classes)
        if ensemble is None:
            ids = identities(X_teachers, y_teachers, groups=groups)
            shards = partition_shards(ids, config.teachers, seed=config.seed)
            ensemble = train_teachers(X_teachers, y_teachers, shards, classes=classes, C=config.teacher_C, progress=progress)
        Xs, truth = student_queries(X_student, y_student, encoder=encoder, config=config, rng=rng)
        Xq = privatise_records(Xs, rho=config.rho, encoding=config.ldp_encoding, rng=rng)
        counts = vote_counts(ensemble, Xq)
        labels = noisy_aggregate(counts, gamma=config.gamma, rng=rng)

        # student: hold out a fraction of the labelled queries to pick the ROC threshold (binary)
        # (the queries come in a uniformly random order: the first ones are as random a share as any)
        use_roc = config.threshold == "roc" and k == 2
        n_thr = round(config.threshold_fraction * config.queries) if use_roc else 0
        thr_idx, fit_idx = np.arange(n_thr), np.arange(n_thr, config.queries)
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
            known = truth >= 0  # fillers have no true label
            before = np.argmax(counts, axis=1)[known] == truth[known]
            metrics["ensemble_accuracy_before_noise"] = float(np.mean(before)) if known.any() else None
            metrics["ensemble_accuracy_after_noise"] = float(np.mean(labels[known] == truth[known])) if known.any() else None
        if X_valid is not None and y_valid is not None and len(y_valid):
            yv = np.asarray(y_valid)
            Xv = np.asarray(X_valid, dtype=np.float64)
            pred = student.predict_index(Xv, encoded=True)
            metrics["student_accuracy"] = float(np.mean(pred == yv))
            metrics["ensemble_accuracy_clean_validation"] = float(np.mean(np.argmax(vote_counts(ensemble, Xv), 1) == yv))
            if k == 2:
                metrics.update({f"student_{key}": v for key, v in binary_metrics(pred, yv).items()})
        return PateResult(
            student=student,
            counts=counts,
            labels=labels,
            epsilon_independent=eps_ind,
            epsilon_dependent=eps_dep,
            ldp=ldp,
            metrics=metrics,
        )


def student_queries(
    X_student: np.ndarray,
    y_student: np.ndarray | None,
    *,
    encoder: FeatureEncoder,
    config: PateConfig,
    rng: np.random.Generator | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The ``config.queries`` encoded records sent to the teachers, in a uniformly random order, and their true
    labels (``-1`` where unknown).

    However many student records there are, exactly ``T = config.queries`` are sent, so nothing published
    counts them: the ``T`` records with the smallest keyed hashes of their own identity
    (:func:`~veil.generators.pate.split.query_order`; one more record changes the set by one record at
    most), and when there are fewer, fillers drawn from the declared domain alone
    (:meth:`FeatureEncoder.domain_records`, seeded by ``config.seed``). Their order is a uniformly random
    permutation (OS CSPRNG; ``rng`` in tests), so what follows depends on the *set* of records only.
    """
    Xs = np.asarray(X_student, dtype=np.float64).reshape(-1, encoder.width)
    ys = None if y_student is None else np.asarray(y_student).reshape(-1).astype(np.int64)
    if ys is not None and len(ys) != Xs.shape[0]:
        raise InputError(f"{len(ys)} student labels for {Xs.shape[0]} student records")
    chosen = query_order(identities(Xs, ys), seed=config.seed)[: config.queries]
    X = Xs[chosen]
    truth = ys[chosen] if ys is not None else np.full(len(chosen), -1, dtype=np.int64)
    fill = config.queries - len(chosen)
    if fill:
        X = np.vstack([X, encoder.domain_records(fill, np.random.default_rng([config.seed, 3]))])
        truth = np.concatenate([truth, np.full(fill, -1, dtype=np.int64)])
    order = csprng_permutation(config.queries, rng)
    return X[order], truth[order]
