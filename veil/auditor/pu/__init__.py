"""Positive-unlabelled (PU) learning attacks on a released class mean.

Modules: :mod:`~veil.auditor.pu.models` (classifiers, losses, results, input checks),
:mod:`~veil.auditor.pu.training` (the one training loop every torch attack runs),
:mod:`~veil.auditor.pu.growpu`, :mod:`~veil.auditor.pu.nnpu` (uPU and nnPU) and
:mod:`~veil.auditor.pu.baselines` (k-means, the projection floor, the supervised oracle).

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

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> X = np.vstack([rng.normal(1, 1, (200, 5)), rng.normal(-1, 1, (200, 5))]).astype("float32")
>>> truth = np.r_[np.ones(200, bool), np.zeros(200, bool)]
>>> res = growpu(X, X[:200].mean(0), prior=0.5, seed=0, batch_size=100, t_pre=200, t_tune=300)
>>> float((res.predicted == truth).mean()) > 0.9
True
"""

from __future__ import annotations

from collections.abc import Callable

from veil.auditor.pu.baselines import kmeans_attack, oracle, projection_floor
from veil.auditor.pu.growpu import GrowPUConfig, grow_batch, growpu
from veil.auditor.pu.models import (
    CLASSIFIERS,
    LOSSES,
    HistoryPoint,
    PUResult,
    build_classifier,
    clip_to_records,
    surrogate_loss,
)
from veil.auditor.pu.nnpu import PUOptions, nnpu, upu

__all__ = [
    "CLASSIFIERS",
    "LOSSES",
    "METHODS",
    "GrowPUConfig",
    "HistoryPoint",
    "PUOptions",
    "PUResult",
    "build_classifier",
    "clip_to_records",
    "grow_batch",
    "growpu",
    "kmeans_attack",
    "nnpu",
    "oracle",
    "projection_floor",
    "surrogate_loss",
    "upu",
]

#: Attack functions by CLI name (``oracle`` needs the truth and is not listed).
METHODS: dict[str, Callable[..., PUResult]] = {"growpu": growpu, "nnpu": nnpu, "upu": upu}
