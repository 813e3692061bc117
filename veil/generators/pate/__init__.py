"""PATE with privatised student records (Yovine et al. 2021; Papernot et al. 2016).

Two curators:

* **Curator A** holds the private table. It splits it into disjoint teacher shards by a keyed hash
  of each row's own identity (its privacy unit, else its content: :mod:`~veil.generators.pate.split`;
  an empty shard's teacher abstains), trains one teacher per shard and answers each student query
  ``x`` with the noisy plurality ``argmax_c(n_c(x) + Lap(1/γ))`` drawn through
  :func:`veil.mechanisms.laplace`. One answer is ``(2γ, 0)``-DP for the teachers' data; ``T`` answers
  are ``(ε, δ)``-DP with ε from :mod:`veil.mechanisms.pate_accounting`.
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

The package has one module per job: :mod:`~veil.generators.pate.encoding` (feature encoding and
curator B's local DP), :mod:`~veil.generators.pate.split` (shards, student role and query order by keyed
hashes of each person's own identity), :mod:`~veil.generators.pate.teachers` (teachers, votes, noisy
plurality), :mod:`~veil.generators.pate.student` (the student model, its file and threshold),
:mod:`~veil.generators.pate.run` (``PateConfig`` → ``run_pate`` → ``PateResult``) and
:mod:`~veil.generators.pate.release` (``publish_pate`` from a policy table). Every public name is
re-exported here.

Example (tiny, with the test-only ``rng``):

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> X = rng.random((600, 3)); y = (X[:, 0] > 0.5).astype(int)
>>> enc = FeatureEncoder.numeric_box(["a", "b", "c"], 0.0, 1.0)
>>> cfg = PateConfig(teachers=10, gamma=1.0, queries=100, rho=None, seed=1)  # little noise: 10 teachers
>>> res = run_pate(enc.transform(X[:400]), y[:400], enc.transform(X[400:500]), enc.transform(X[500:]), y[500:],
...                encoder=enc, classes=(0, 1), config=cfg, rng=rng, progress=False)
>>> res.metrics["student_accuracy"] > 0.8
True
"""

from __future__ import annotations

from veil.generators.pate.encoding import FeatureEncoder, FeatureSpec, LdpEncoding, ldp_guarantee, privatise_records
from veil.generators.pate.release import publish_pate
from veil.generators.pate.run import PateConfig, PateResult, run_pate, student_queries
from veil.generators.pate.split import (
    DEFAULT_STUDENT_SHARE,
    check_student_share,
    identities,
    partition_shards,
    query_order,
    split_student,
    student_mask,
)
from veil.generators.pate.student import SIDECAR_SUFFIX, Student, StudentNet, choose_threshold, load_student, train_student
from veil.generators.pate.teachers import TeacherEnsemble, noisy_aggregate, train_teachers, vote_counts

__all__ = [
    "DEFAULT_STUDENT_SHARE",
    "SIDECAR_SUFFIX",
    "FeatureEncoder",
    "FeatureSpec",
    "LdpEncoding",
    "PateConfig",
    "PateResult",
    "Student",
    "StudentNet",
    "TeacherEnsemble",
    "check_student_share",
    "choose_threshold",
    "identities",
    "ldp_guarantee",
    "load_student",
    "noisy_aggregate",
    "partition_shards",
    "privatise_records",
    "publish_pate",
    "query_order",
    "run_pate",
    "split_student",
    "student_mask",
    "student_queries",
    "train_student",
    "train_teachers",
    "vote_counts",
]
