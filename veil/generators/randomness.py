"""The randomness of a publication: drawn fresh from the OS CSPRNG, never from a seed anyone typed or recorded.

Every random draw that a release's privacy argument needs unknown to the analyst — noise addition's noise, rank
swapping's partners, the row shuffle, the holdout split, k-anonymity's random cluster seeds, a synthetic generator's
sampling noise and drawn categories, kRR's flips — comes from :func:`private_rng`: a numpy generator seeded with
:data:`ENTROPY_BITS` (256) bits of :mod:`secrets`, fresh for each call, never stored, never written to a release
record. DP noise itself is drawn by :mod:`veil.mechanisms` (OpenDP's samplers, OS CSPRNG); this module is for the
rest.

Red team s66 F1: noise addition drew its uniforms from ``np.random.default_rng(--seed)`` (the docs' own example was
``--seed 7``), else from 31 bits of the CSPRNG; an analyst who knew one noised value of a person searched the seed
(0.02 s for 100 seeds; 2³¹ seeds in core-hours) and inverted every row of the table to its exact source values. A seed
space of 2²⁵⁶ cannot be searched, and the seed is never published, so nothing reproduces the draws.

The only way to make these draws reproducible is :func:`reproducible_for_tests`, a context manager for the test
suite: it is not reachable from the CLI, the Python API an analyst or curator uses, or the policy (``veil publish
… --seed`` is refused; the ``seed`` of a publication request seeds the curator-only release metrics at most).

>>> a, b = private_rng().random(), private_rng().random()
>>> a != b
True
>>> with reproducible_for_tests(7):
...     x = [private_rng().random() for _ in range(2)]
>>> with reproducible_for_tests(7):
...     y = [private_rng().random() for _ in range(2)]
>>> x == y, x[0] != x[1]
(True, True)
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import numpy as np

__all__ = ["ENTROPY_BITS", "private_rng", "private_seed", "reproducible_for_tests", "torch_seed"]

#: Bits of OS entropy behind each publication generator (at least 128 are required; numpy's SeedSequence keeps all).
ENTROPY_BITS = 256

_TEST_SEQUENCE: ContextVar[np.random.SeedSequence | None] = ContextVar("veil_test_randomness", default=None)


def private_seed() -> np.random.SeedSequence:
    """A fresh :class:`numpy.random.SeedSequence` of :data:`ENTROPY_BITS` bits of OS entropy (under
    :func:`reproducible_for_tests`: the next child of the test's sequence)."""
    test = _TEST_SEQUENCE.get()
    if test is not None:
        return test.spawn(1)[0]
    return np.random.SeedSequence(secrets.randbits(ENTROPY_BITS))


def private_rng() -> np.random.Generator:
    """A numpy generator for privacy-relevant draws, seeded from :func:`private_seed` (never reproducible outside
    :func:`reproducible_for_tests`)."""
    return np.random.default_rng(private_seed())


def torch_seed(rng: np.random.Generator) -> int:
    """A 63-bit seed for a private ``torch.Generator`` (torch takes at most 64 bits), drawn from ``rng``.

    Only for randomness that is *not* released as such — a model's weight initialisation and training minibatches and
    noise: the model is never published and the seed is never recorded; the values a release holds (a synthetic
    table's latent noise and drawn categories) come from ``rng`` itself, with its full entropy."""
    return int(rng.integers(0, 2**63))


@contextmanager
def reproducible_for_tests(seed: int) -> Iterator[None]:
    """Tests only: within the block, :func:`private_rng` generators derive from ``seed`` (each call the next child
    of one :class:`~numpy.random.SeedSequence`), so a publication is reproducible. Never reachable from the CLI, the
    Python API or the policy."""
    token = _TEST_SEQUENCE.set(np.random.SeedSequence(int(seed)))
    try:
        yield
    finally:
        _TEST_SEQUENCE.reset(token)
