"""Machine-learning copies (knowledge distillation): a CART tree labels synthetic inputs.

A decision tree is trained on the original (standardised) columns → label. The original table is
then put aside: synthetic inputs are drawn per class from a normal distribution (class mean and std
per column), or uniformly over the columns' *declared* domain (the policy's ``lower``/``upper``; the
same box for every class, so the inputs do not depend on the data at all), and the tree labels them.
The release is the synthetic inputs plus the tree's labels.

Domains: every input column needs declared bounds and the label declared values (a
:class:`~veil.errors.PolicyError` otherwise, from the policy alone); normal draws are clamped into
the bounds, and rows whose label is not a declared value are left out of training. So the release
never holds a number outside the declared bounds or an undeclared label, and with
``sampling=uniform`` its inputs' range is the declared one whatever the extreme rows are (the
paper's uniform draw between each class's raw min and max spanned one person's outlier). No formal
guarantee: the per-class moments and the tree are computed from the raw data without noise (a copy
of an outlier's region can survive with ``sampling=normal``). Two changes to the paper's settings keep
one person's values out: every leaf of the tree holds at least :data:`MIN_LEAF` rows, and the
per-class moments are shrunk towards the pooled ones (:data:`PRIOR_ROWS`), so a class of one person is
neither a predicted label nor a point mass on their row.

>>> rng = np.random.default_rng(0)
>>> x = np.r_[rng.normal(0, 1, (100, 2)), rng.normal(4, 1, (100, 2))]
>>> y = np.r_[np.zeros(100, int), np.ones(100, int)]
>>> xs, ys = ml_copy(x, y, sampling="normal", n_out=50, seed=1)
>>> xs.shape, sorted(set(ys.tolist()))
((50, 2), [0, 1])
>>> xu, _ = ml_copy(x, y, sampling="uniform", lower=np.array([-9.0, -9.0]), upper=np.array([9.0, 9.0]), seed=1)
>>> bool(xu.min() >= -9 and xu.max() <= 9), len(xu) == DEFAULT_ROWS
(True, True)

Size: the copy has ``n_out`` rows (the generator's ``rows`` parameter, default
:data:`~veil.generators.synthetic_size.DEFAULT_ROWS`), never the source's size: the size of a synthetic
table is public; choose it with ``--param rows``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from veil.errors import InputError, InternalError, PolicyError
from veil.generators.base import Context, Generator, Output, Param, register
from veil.generators.domain import clip_into
from veil.generators.synthetic_size import DEFAULT_ROWS, ROWS_PARAM, check_rows

__all__ = ["MLCopy", "ml_copy"]

# The paper's Table 9 (best CART settings): gini → max depth 20, min_samples_split 0.05;
# entropy → max depth 10, min_samples_split 0.01.
TABLE9 = {"gini": (20, 0.05), "entropy": (10, 0.01)}
#: Every leaf of the tree holds at least this many training rows (the paper's trees allow 1): a leaf's
#: label is its majority, so a label fewer than 3 people hold can never be predicted — one person's rare
#: class is not published by a leaf around their row.
MIN_LEAF = 5
#: ``sampling="normal"``: each class's mean and variance are shrunk towards the pooled ones as if the class
#: had this many more rows of the pooled distribution; a class of one person (standard deviation 0)
#: otherwise gives normal draws exactly on that person's values (a copy). Negligible for classes of
#: hundreds of rows.
PRIOR_ROWS = 10


def ml_copy(
    x: np.ndarray,
    y: np.ndarray,
    *,
    sampling: str = "normal",
    criterion: str = "gini",
    n_out: int = DEFAULT_ROWS,
    balanced: bool = False,
    seed: int | None = None,
    lower: np.ndarray | None = None,
    upper: np.ndarray | None = None,
    rng: np.random.Generator | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(x_synthetic, labels_from_tree)``; ``x`` is sampled in the original units.

    ``sampling="uniform"`` draws every row uniformly over ``[lower, upper]`` (per column; required:
    the declared domain, never the rows' range). ``n_out``: rows drawn (public; never ``len(x)``). ``rng``: the
    generator of every draw (a publication's: 256 bits of the OS CSPRNG); else ``seed`` (library use and tests),
    else a fresh private generator (:func:`veil.generators.randomness.private_rng`).
    """
    from sklearn.tree import DecisionTreeClassifier

    if sampling == "uniform":
        if lower is None or upper is None:
            raise InputError(
                "sampling='uniform' needs the declared bounds (lower, upper) of every column",
                hint="Pass the policy's lower/upper: the rows' own range would span one person's outlier",
            )
        lower, upper = np.asarray(lower, dtype=np.float64), np.asarray(upper, dtype=np.float64)
        if lower.shape != (x.shape[1],) or upper.shape != (x.shape[1],) or not np.all(lower <= upper):
            raise InputError(f"lower/upper must be {x.shape[1]} bounds with lower ≤ upper, got {lower}, {upper}")

    n_out = check_rows(n_out, "ml_copy")
    if rng is None:
        from veil.generators.randomness import private_rng

        rng = np.random.default_rng(seed) if seed is not None else private_rng()
    tree_state = seed if seed is not None else int(rng.integers(2**32))  # the tree's tie-breaks (scikit-learn: 32 bits)
    mu, sd = x.mean(axis=0), x.std(axis=0)
    sd = np.where(sd > 0, sd, 1.0)
    z = (x - mu) / sd
    depth, split = TABLE9[criterion]
    tree = DecisionTreeClassifier(
        criterion=criterion, max_depth=depth, min_samples_split=split, min_samples_leaf=MIN_LEAF, random_state=tree_state
    )
    tree.fit(z, y)
    classes, counts = np.unique(y, return_counts=True)
    share = np.full(len(classes), 1.0 / len(classes)) if balanced else counts / counts.sum()
    per = np.floor(share * n_out).astype(int)
    per[: n_out - per.sum()] += 1
    parts = []
    for cls, m in zip(classes, per, strict=True):
        zc = z[y == cls]
        if sampling == "normal":
            # z is standardised: pooled mean 0, variance 1
            w = len(zc) / (len(zc) + PRIOR_ROWS)
            mean = w * zc.mean(axis=0)
            var = w * (zc.var(axis=0) + (1 - w) * zc.mean(axis=0) ** 2) + (1 - w)
            parts.append(rng.normal(mean, np.sqrt(var), size=(m, z.shape[1])))
        elif sampling == "uniform":
            # one box for every class: the declared domain, in standardised units (data-independent draws)
            parts.append(rng.uniform((lower - mu) / sd, (upper - mu) / sd, size=(m, z.shape[1])))
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
        ROWS_PARAM,
    )

    def generate(self, data: pd.DataFrame, ctx: Context) -> Output:
        if ctx.target is None:
            raise InternalError("mlcopy generate() called without a target (validate() requires one)")
        lower, upper, classes = declared_inputs(ctx)
        data = data[data[ctx.target].isin(list(classes))]  # undeclared labels are left out, never refused
        if data[ctx.target].nunique() < 1 or len(data) < 2:
            raise InputError(
                f"ML copy needs at least 2 rows with a declared {ctx.target!r} value, got {len(data)}",
                hint=f"Declared values: {list(classes)}",
            )
        x = np.clip(data[list(ctx.columns)].to_numpy(dtype=np.float64), lower, upper)
        y = data[ctx.target].to_numpy()
        xs, ys = ml_copy(
            x,
            y,
            sampling=self["sampling"],
            criterion=self["criterion"],
            balanced=self["balanced"],
            rng=ctx.draws(),  # never the curator's seed (red team s66 F1)
            n_out=self["rows"],
            lower=lower,
            upper=upper,
        )
        xs, moved = clip_into(xs, lower, upper)  # declared domains: no negative capital gains
        kinds = dict.fromkeys(ctx.columns, "declared")
        frame = pd.DataFrame(xs, columns=list(ctx.columns))
        frame[ctx.target] = ys
        return Output(
            frame,
            source=None,
            guarantee=(
                "no formal guarantee: synthetic rows drawn within the declared bounds (per-class moments of the raw "
                "data, or uniformly over the declared domain), labelled by a tree trained on the raw data"
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


def declared_inputs(ctx: Context) -> tuple[np.ndarray, np.ndarray, tuple[object, ...]]:
    """``(lower, upper, classes)``: the declared bounds of every input column and the declared values of
    the label, from the policy (``ctx.bounds``, ``ctx.categories``) alone; PolicyError for an open one."""
    open_ = [c for c in ctx.columns if c not in ctx.bounds]
    if open_:
        raise PolicyError(
            f"column {open_[0]!r} has no declared bounds: an ML copy may only draw numbers inside the policy's "
            "declared domain, never the rows' own range (one person's outlier would widen it)",
            hint=f"Declare lower = ... and upper = ... for {open_[0]!r} in [tables.<table>.columns]",
        )
    target = ctx.target or ""
    classes = tuple(ctx.categories.get(target, ()))
    if not classes:
        raise PolicyError(
            f"label column {target!r} has no declared values: an ML copy may only publish declared labels",
            hint=f"Declare values = [...] for {target!r} in [tables.<table>.columns]",
        )
    lower = np.array([float(ctx.bounds[c][0]) for c in ctx.columns])
    upper = np.array([float(ctx.bounds[c][1]) for c in ctx.columns])
    return lower, upper, classes
