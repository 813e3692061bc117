"""Normalised Certainty Penalty (NCP) of a grouping, as in the reference code of the SOM paper.

Definition (qiyuangong/Clustering_based_K_Anon, ``NCP`` and ``clustering_based_k_anon``):

* numeric QI, class T: ``(max_T - min_T) / (max - min over the whole table)``;
* categorical QI, class T: 0 if T holds one leaf value, else
  ``leaves under the LCA of T's values / all leaves of the tree``;
* table NCP % = ``100 · Σ_T |T| · Σ_q NCP_q(T) / (rows · QIs)`` — every QI weighted 1/Q,
  every row weighted equally. This is also Ghinita et al.'s Global Certainty Penalty (GCP).
"""

from __future__ import annotations

import numpy as np

from veil.generators.kanon.generalise import QISpace

__all__ = ["ncp_per_qi", "ncp_percent"]


def ncp_per_qi(space: QISpace, labels: np.ndarray) -> np.ndarray:
    """Row-averaged NCP in [0, 1] for each QI."""
    lo, hi, sizes = space.boxes(labels)
    cost = space.box_cost(lo, hi)
    return (cost * sizes[:, None]).sum(axis=0) / space.n


def ncp_percent(space: QISpace, labels: np.ndarray) -> float:
    """Table NCP in percent (see module docstring).

    >>> import pandas as pd
    >>> space = QISpace(pd.DataFrame({"a": [0, 10, 0, 10]}), ["a"])
    >>> ncp_percent(space, np.array([0, 0, 1, 1])), ncp_percent(space, np.array([0, 1, 0, 1]))
    (100.0, 0.0)
    """
    return float(100.0 * ncp_per_qi(space, labels).mean())
