"""Machine-learning copies (knowledge distillation): a CART tree labels synthetic inputs.

A decision tree is trained on the original (standardised) columns → label. The original table is
then put aside: synthetic inputs are drawn per class from a normal distribution (class mean and std
per column) or a uniform one (class min and max per column), and the tree labels them. The release
is the synthetic inputs plus the tree's labels. No formal guarantee: the per-class moments and the
tree are computed from the raw data without noise (a copy of an outlier's region can survive).

>>> rng = np.random.default_rng(0)
>>> x = np.r_[rng.normal(0, 1, (100, 2)), rng.normal(4, 1, (100, 2))]
>>> y = np.r_[np.zeros(100, int), np.ones(100, int)]
>>> xs, ys = ml_copy(x, y, sampling="normal", n_out=50, seed=1)
>>> xs.shape, sorted(set(ys.tolist()))
((50, 2), [0, 1])
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from veil.errors import InputError, InternalError
from veil.generators.base import Context, Generator, Output, Param, register
from veil.generators.domain import clip_into, column_domain

__all__ = ["MLCopy", "ml_copy"]

# The paper's Table 9 (best CART settings): gini → max depth 20, min_samples_split 0.05;
# entropy → max depth 10, min_samples_split 0.01.
TABLE9 = {"gini": (20, 0.05), "entropy": (10, 0.01)}


def ml_copy(
    x: np.ndarray,
    y: np.ndarray,
    *,
    sampling: str = "normal",
    criterion: str = "gini",
    n_out: int | None = None,
    balanced: bool = False,
    seed: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(x_synthetic, labels_from_tree)``; ``x`` is sampled in the original units."""
    from sklearn.tree import DecisionTreeClassifier

    rng = np.random.default_rng(seed)
    mu, sd = x.mean(axis=0), x.std(axis=0)
    sd = np.where(sd > 0, sd, 1.0)
    z = (x - mu) / sd
    depth, split = TABLE9[criterion]
    tree = DecisionTreeClassifier(criterion=criterion, max_depth=depth, min_samples_split=split, random_state=seed)
    tree.fit(z, y)
    classes, counts = np.unique(y, return_counts=True)
    n_out = len(x) if n_out is None else n_out
    share = np.full(len(classes), 1.0 / len(classes)) if balanced else counts / counts.sum()
    per = np.floor(share * n_out).astype(int)
    per[: n_out - per.sum()] += 1
    parts = []
    for cls, m in zip(classes, per, strict=True):
        zc = z[y == cls]
        if sampling == "normal":
            parts.append(rng.normal(zc.mean(axis=0), zc.std(axis=0), size=(m, z.shape[1])))
        elif sampling == "uniform":
            parts.append(rng.uniform(zc.min(axis=0), zc.max(axis=0), size=(m, z.shape[1])))
        else:
            raise InputError(f"sampling must be 'normal' or 'uniform', got {sampling!r}")
    zs = np.concatenate(parts)[rng.permutation(n_out)]
    return zs * sd + mu, tree.predict(zs)


@register
class MLCopy(Generator):
    family = "sdc"
    name = "ml_copy"
    summary = "ML copy: CART tree trained on the original labels synthetic per-class normal/uniform samples"
    needs_target = True
    params = (
        Param(
            "sampling",
            str,
            "normal",
            grid=("normal", "uniform"),
            choices=("normal", "uniform"),
            help="per-class sampling distribution",
        ),
        Param(
            "criterion",
            str,
            "gini",
            grid=("gini", "entropy"),
            choices=("gini", "entropy"),
            help="CART split criterion (Table 9 depth/min-split settings)",
        ),
        Param("balanced", bool, False, help="sample classes equally instead of in their original shares"),
    )

    def generate(self, data: pd.DataFrame, ctx: Context) -> Output:
        if ctx.target is None:
            raise InternalError("mlcopy generate() called without a target (validate() requires one)")
        x = data[list(ctx.columns)].to_numpy(dtype=np.float64)
        y = data[ctx.target].to_numpy()
        xs, ys = ml_copy(x, y, sampling=self["sampling"], criterion=self["criterion"], balanced=self["balanced"], seed=ctx.seed)
        lower, upper, kinds = column_domain(x, ctx.columns, ctx.bounds)
        xs, moved = clip_into(xs, lower, upper)  # declared domains: no negative capital gains
        frame = pd.DataFrame(xs, columns=list(ctx.columns))
        frame[ctx.target] = ys
        return Output(
            frame,
            source=None,
            guarantee=(
                "no formal guarantee: synthetic rows from per-class moments/ranges of the raw data, labelled by a "
                "tree trained on the raw data"
            ),
            info={
                "perturbed_columns": (*ctx.columns, ctx.target),
                "unprotected_columns": (),
                "min_group_size": None,
                "domain": {c: (float(lower[j]), float(upper[j]), kinds[c]) for j, c in enumerate(ctx.columns)},
                "out_of_domain": {c: int(moved[j]) for j, c in enumerate(ctx.columns)},
                "row_order": "synthetic",  # rows are drawn, none is a source row
            },
        )
