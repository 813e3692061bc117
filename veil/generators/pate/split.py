"""Who teaches, who is the student's: keyed hashes of each person's *own* identity, never positions.

PATE's guarantee for the teachers' table assumes that one person changes at most one teacher's vote,
and the held-out student's charge ``max(ε_teachers, ε_local)`` is parallel composition over two
disjoint groups of people. Both hold only when a person's teacher and role are functions of that
person alone: a shard or split by position in a (seeded) permutation re-deals *every* row when one
person joins, since the permutation's length changes.

So each row gets an identity — its privacy unit's id, or for a row-level table its canonical content
over the columns read (box-encoded features and the label: identical rows share a shard and a role,
which is fine) — and a keyed BLAKE2b hash of that identity decides:

* the teacher: ``hash_shard(id) mod teachers`` (:func:`partition_shards`; a teacher whose shard is
  empty abstains);
* the role: student iff ``hash_role(id) / 2⁶⁴ < share`` (:func:`student_mask`);
* which student records are queried first: ascending ``hash_query(id)`` (:func:`query_order`).

The keys derive from the public ``--seed`` with one purpose label each, so the three are independent.
The seed is public: anyone may compute which teacher a person feeds, which is harmless — the guarantee
is about what one person's presence changes, not about hiding the assignment.

>>> ids = identities(np.array([[0.0, 1.0], [0.5, 0.5], [0.0, 1.0]]), np.array([1, 0, 1]))
>>> ids[0] == ids[2] != ids[1]
True
>>> any({0, 2} <= set(s.tolist()) for s in partition_shards(ids, 2, seed=0))  # identical rows: one teacher
True
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from veil.errors import InputError

__all__ = [
    "DEFAULT_STUDENT_SHARE",
    "check_student_share",
    "identities",
    "keyed_hashes",
    "partition_shards",
    "query_order",
    "split_student",
    "student_mask",
    "student_split",
]

#: Share of the source's people held out for the student when no ``--student-table`` is given. A tenth
#: keeps nine people in ten for the teachers and, on Adult's 32,561 training rows, about 3,260 student records
#: for the default 1,000 queries and 1,000 validation rows.
DEFAULT_STUDENT_SHARE = 0.1

_TWO_64 = float(2**64)


def check_student_share(share: Any) -> float:
    """``share`` must be a float strictly between 0 and 1 (a public parameter, checked before any charge)."""
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not math.isfinite(share) or not 0 < share < 1:
        raise InputError(
            f"student share must be a number strictly between 0 and 1, got {share!r}",
            hint=f"Pass e.g. --student-share {DEFAULT_STUDENT_SHARE} (the share of the table's people held out for the student)",
        )
    return float(share)


def _canonical(value: Any) -> bytes:
    """A unit id's bytes, the same whatever column type the id arrived in (1, 1.0 and "1" apart from strings)."""
    if value is None or value is pd.NA or value is pd.NaT:
        return b"n"
    if isinstance(value, (bool, np.bool_)):
        return b"b1" if value else b"b0"
    if isinstance(value, (int, np.integer)):
        return b"i" + str(int(value)).encode()
    if isinstance(value, (float, np.floating)):
        v = float(value)
        if math.isnan(v):
            return b"n"
        if math.isfinite(v) and v == int(v):
            return b"i" + str(int(v)).encode()
        return b"f" + repr(v).encode()
    if isinstance(value, str):
        return b"s" + value.encode("utf-8", "surrogatepass")
    if isinstance(value, bytes):
        return b"y" + value
    return b"r" + repr(value).encode("utf-8", "backslashreplace")


def identities(X: np.ndarray, y: np.ndarray | None = None, *, groups: Sequence[Any] | np.ndarray | None = None) -> list[bytes]:
    """Each row's identity: its unit's id (``groups``), else its own content (encoded ``X`` row and label ``y``).

    A function of the row (unit) alone: the other rows, their number and their order never enter it.
    """
    Xa = np.asarray(X, dtype=np.float64)
    if groups is not None:
        g = np.asarray(groups, dtype=object)
        if len(g) != Xa.shape[0]:
            raise InputError(f"{len(g)} group ids for {Xa.shape[0]} rows")
        return [b"u" + _canonical(v) for v in g.tolist()]
    rows = np.ascontiguousarray(Xa.reshape(Xa.shape[0], int(np.prod(Xa.shape[1:]))) + 0.0)  # -0.0 + 0.0 is 0.0
    rows[np.isnan(rows)] = np.nan  # one NaN bit pattern
    raw = rows.astype("<f8").tobytes()
    width = rows.shape[1] * 8
    labels = [b""] * rows.shape[0] if y is None else [b"|" + _canonical(v) for v in np.asarray(y, dtype=object).tolist()]
    if len(labels) != rows.shape[0]:
        raise InputError(f"{len(labels)} labels for {rows.shape[0]} rows")
    return [b"r" + raw[i * width : (i + 1) * width] + labels[i] for i in range(rows.shape[0])]


def _key(seed: int, purpose: str) -> bytes:
    return hashlib.blake2b(f"veil-pate/{purpose}/{int(seed)}".encode(), digest_size=32).digest()


def keyed_hashes(ids: Sequence[bytes], *, seed: int, purpose: str) -> np.ndarray:
    """64-bit keyed BLAKE2b of each identity (``uint64``), the key derived from ``seed`` and ``purpose``."""
    key = _key(seed, purpose)
    out = np.empty(len(ids), dtype=np.uint64)
    for i, ident in enumerate(ids):
        out[i] = int.from_bytes(hashlib.blake2b(ident, key=key, digest_size=8).digest(), "little")
    return out


def partition_shards(ids: Sequence[bytes], teachers: int, *, seed: int) -> list[np.ndarray]:
    """Row indices of each teacher's shard: row ``i`` feeds teacher ``hash_shard(ids[i]) mod teachers``.

    Disjoint, covering every row, and stable: adding or removing one identity moves no other row. Shards
    may be empty (fewer rows than teachers, or chance): an empty teacher abstains (:func:`train_teachers`).
    """
    if isinstance(teachers, bool) or not isinstance(teachers, int) or teachers < 1:
        raise InputError(f"teachers must be a positive integer, got {teachers!r}")
    shard = keyed_hashes(ids, seed=seed, purpose="shard") % np.uint64(teachers)
    return [np.flatnonzero(shard == np.uint64(s)) for s in range(teachers)]


def student_mask(ids: Sequence[bytes], share: float, *, seed: int) -> np.ndarray:
    """Whether each row is the student's: ``hash_role(id) / 2⁶⁴ < share`` (a function of the row's own id)."""
    share = check_student_share(share)
    return keyed_hashes(ids, seed=seed, purpose="role").astype(np.float64) / _TWO_64 < share


def query_order(ids: Sequence[bytes], *, seed: int) -> np.ndarray:
    """Indices of ``ids`` by ascending ``hash_query(id)``: the first ``T`` are the records queried.

    Taking the ``T`` smallest keyed hashes, adding one record changes the queried set by at most one
    record (it enters, the ``T``-th leaves), whatever the other records are.
    """
    h = keyed_hashes(ids, seed=seed, purpose="query")
    return np.argsort(h, kind="stable")


def split_student(ids: Sequence[bytes], share: float, *, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Hold the student out: ``(student rows, smallest query hash first; teacher rows)``.

    Each row's side is :func:`student_mask` of its own identity; the student's rows come in
    :func:`query_order`, so the first ``T`` are the ones queried and the next ones validate.

    >>> s, t = split_student([bytes([i]) for i in range(100)], 0.3, seed=0)
    >>> sorted(np.concatenate([s, t]).tolist()) == list(range(100)) and 10 < len(s) < 50
    True
    """
    role = student_mask(ids, share, seed=seed)
    student = np.flatnonzero(role)
    student = student[query_order([ids[int(i)] for i in student], seed=seed)]
    return student, np.flatnonzero(~role)


def student_split(
    X: np.ndarray, y: np.ndarray, *, groups: Sequence[Any] | np.ndarray | None, share: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """The held-out student's rows (smallest query hash first) and the teachers' rows of a source.

    Roles are keyed by each person's identity (:func:`identities`: the unit's id, or the row). On a table whose
    privacy unit is a column, a student person keeps **one** record — the row whose keyed hash of its own content is
    smallest among that person's rows — so a person's local ε is one record's, whatever their number of rows (red
    team s28 A5: all 5 rows of a person were queried and trained on, each ε_local-LDP, 5·ε_local against ε_local
    charged). The person's other rows feed nobody.
    """
    ids = identities(X, y, groups=groups)
    student, teach = split_student(ids, share, seed=seed)
    if groups is None or not len(student):
        return student, teach
    content = keyed_hashes(identities(X[student], y[student]), seed=seed, purpose="unit-row").tolist()
    best: dict[bytes, int] = {}  # unit identity → position in ``student`` of its row with the smallest content hash
    for pos, i in enumerate(student.tolist()):
        unit = ids[i]
        if unit not in best or content[pos] < content[best[unit]]:
            best[unit] = pos
    keep = np.zeros(len(student), dtype=bool)
    keep[list(best.values())] = True
    return student[keep], teach
