"""Re-identification audit of a released class mean: load inputs, run attacks, measure.

The security team's question: given the records analysts can see and one released (noisy)
mean of the records in a class, how many class memberships can an attacker recover?

Two sources for the mean:

- files (``--data``, ``--mean``): :func:`load_matrix`, :func:`load_vector`;
- Veil's release log: :func:`mean_from_release` assembles the vector of
  ``SELECT AVG(c1), ..., AVG(cn) FROM t WHERE <class predicate>`` from one query release
  (its ``statistics``), and :func:`truth_from_predicate` lets the curator score the attack
  against the real class.

Metrics are *transductive* (over the attacked records, as in the paper); the subset
experiment (:func:`run_attack` with ``train_index``) trains on some records and reports
accuracy on all of them.

>>> import numpy as np
>>> metrics = classification_metrics(np.array([1, 1, 0, 0], bool), np.array([1, 0, 0, 0], bool))
>>> metrics["accuracy"], metrics["precision"], metrics["recall"]
(0.75, 0.5, 1.0)
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from veil.auditor import pu
from veil.errors import InputError, ReleaseError, did_you_mean

__all__ = [
    "CALIBRATIONS",
    "METHOD_NAMES",
    "AttackOutcome",
    "ReleasedMean",
    "audit",
    "classification_metrics",
    "load_matrix",
    "load_vector",
    "mean_from_release",
    "noisy_class_mean",
    "run_attack",
    "stability",
    "truth_from_predicate",
]

#: Attack names for ``--method`` (``all`` runs every one of them).
METHOD_NAMES = ("growpu", "nnpu", "upu", "kmeans", "floor")
#: Noise calibrations for an ε-DP class mean (see :func:`noisy_class_mean`).
CALIBRATIONS = ("per-coordinate", "l1")


# --------------------------------------------------------------------------- loading


def load_matrix(path: str | Path) -> tuple[np.ndarray, list[str]]:
    """Records as a float32 matrix plus feature names, from ``.npy``, ``.csv`` or ``.parquet``.

    Tabular files: numeric columns are used as they are; text/categorical columns are
    one-hot encoded as ``column=value`` (sorted), which is how a class mean over one-hot
    features must be released to match.
    """
    p = Path(path)
    if not p.exists():
        raise InputError(f"records file {str(p)!r} does not exist", hint="Check the --data path")
    suffix = p.suffix.lower()
    if suffix == ".npy":
        X = np.load(p, allow_pickle=False)
        if X.ndim != 2:
            raise InputError(
                f"{p.name} holds an array of shape {X.shape}; records need 2 dimensions",
                hint="Save one row per record, one column per feature",
            )
        return X.astype(np.float32), [f"x{i}" for i in range(X.shape[1])]
    import pandas as pd

    if suffix == ".csv":
        df = pd.read_csv(p)
    elif suffix == ".parquet":
        df = pd.read_parquet(p)
    else:
        raise InputError(f"unsupported records file type {suffix!r}", hint="Use .npy, .csv or .parquet")
    return frame_to_matrix(df)


def frame_to_matrix(df: Any) -> tuple[np.ndarray, list[str]]:
    """Numeric matrix of a DataFrame: numbers kept, other columns one-hot (``col=value``)."""
    import pandas as pd

    parts, names = [], []
    for col in df.columns:
        s = df[col]
        if pd.api.types.is_bool_dtype(s) or pd.api.types.is_numeric_dtype(s):
            if s.isna().any():
                raise InputError(
                    f"column {col!r} has {int(s.isna().sum())} missing values", hint="Impute or drop them before the audit"
                )
            parts.append(s.to_numpy(dtype=np.float32)[:, None])
            names.append(str(col))
        else:
            values = s.astype("string").fillna("<NA>")
            for v in sorted(values.unique()):
                parts.append((values == v).to_numpy(dtype=np.float32)[:, None])
                names.append(f"{col}={v}")
    if not parts:
        raise InputError("the records table has no columns")
    return np.hstack(parts), names


def load_vector(path: str | Path) -> np.ndarray:
    """A mean vector from ``.npy`` (1-D), ``.csv`` (one row or one column) or ``.json`` (a list)."""
    p = Path(path)
    if not p.exists():
        raise InputError(f"file {str(p)!r} does not exist", hint="Check the path")
    suffix = p.suffix.lower()
    if suffix == ".npy":
        v = np.load(p, allow_pickle=False)
    elif suffix == ".json":
        import json

        v = np.asarray(json.loads(p.read_text()), dtype=np.float64)
    elif suffix in (".csv", ".txt"):
        v = np.loadtxt(p, delimiter="," if suffix == ".csv" else None, ndmin=1)
    else:
        raise InputError(f"unsupported vector file type {suffix!r}", hint="Use .npy, .csv or .json")
    v = np.asarray(v)
    if v.ndim == 2 and 1 in v.shape:
        v = v.reshape(-1)
    if v.ndim != 1:
        raise InputError(f"{p.name} holds shape {v.shape}, expected one vector", hint="Save a 1-D array")
    return v


# --------------------------------------------------------------------------- noise


def noisy_class_mean(
    X_class: np.ndarray,
    *,
    epsilon: float,
    lower: float | np.ndarray,
    upper: float | np.ndarray,
    calibration: str = "per-coordinate",
    rng: np.random.Generator | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The class mean plus Laplace noise drawn by :func:`veil.mechanisms.laplace`.

    ``n_p`` (the class size) is treated as public. ``per-coordinate`` is the paper's
    ``Laplace((upper - lower) / (n_p ε))`` on every coordinate (ε-DP *per coordinate*, so
    ``d·ε`` for the vector); ``l1`` calibrates the whole vector to ε with its L1
    sensitivity ``Σ_j (upper_j - lower_j) / n_p`` -- what Veil's own mechanism applies.
    Returns the noisy mean and the per-coordinate scales.
    """
    from veil.mechanisms import laplace

    X_class = np.asarray(X_class, dtype=np.float64)
    if X_class.ndim != 2 or X_class.shape[0] < 1:
        raise InputError(f"class records must be a non-empty 2-D array, got shape {X_class.shape}")
    if not (np.isfinite(epsilon) and epsilon > 0):
        raise InputError(f"epsilon must be a positive finite number, got {epsilon}")
    width = np.broadcast_to(np.asarray(upper, float) - np.asarray(lower, float), (X_class.shape[1],))
    if (width < 0).any():
        raise InputError("upper bound below lower bound", hint="Pass bounds with lower <= upper")
    n_p = X_class.shape[0]
    if calibration == "per-coordinate":
        scale = width / (n_p * epsilon)
    elif calibration == "l1":
        scale = np.full(X_class.shape[1], width.sum() / (n_p * epsilon))
    else:
        raise InputError(f"unknown calibration {calibration!r}", hint=f"Use one of {', '.join(CALIBRATIONS)}")
    clipped = np.clip(X_class, lower, upper)
    mean = clipped.mean(0)
    if np.all(scale == scale[0]):
        noisy = laplace(mean, scale=float(scale[0]), rng=rng)
    else:
        noisy = np.array([laplace(np.array([m]), scale=float(s), rng=rng)[0] for m, s in zip(mean, scale, strict=True)])
    return np.asarray(noisy, dtype=np.float64), scale


# --------------------------------------------------------------------------- running attacks


def classification_metrics(predicted: np.ndarray, truth: np.ndarray) -> dict[str, float]:
    """Accuracy, precision and recall of a boolean membership prediction."""
    predicted = np.asarray(predicted, dtype=bool)
    truth = np.asarray(truth, dtype=bool)
    if predicted.shape != truth.shape:
        raise InputError(
            f"truth has shape {truth.shape} but there are {predicted.shape} predictions",
            hint="Pass one label per record, in record order",
        )
    tp = int((predicted & truth).sum())
    return {
        "accuracy": float((predicted == truth).mean()),
        "precision": tp / max(int(predicted.sum()), 1),
        "recall": tp / max(int(truth.sum()), 1),
    }


def truth_labels(values: np.ndarray) -> np.ndarray:
    """Labels file to booleans: {0,1}, {-1,1}, booleans; any other two values -> the larger is positive."""
    v = np.asarray(values).reshape(-1)
    if v.dtype == bool:
        return v
    uniq = np.unique(v)
    if len(uniq) > 2:
        raise InputError(
            f"truth labels must take two values, got {len(uniq)} ({uniq[:5].tolist()}...)",
            hint="Pass 1 for members of the class, 0 otherwise",
        )
    return v == uniq.max() if len(uniq) == 2 else v.astype(bool)


@dataclass(frozen=True)
class AttackOutcome:
    """One attack run: prediction for every record plus metrics (when the truth is known)."""

    method: str
    classifier: str | None
    seed: int | None
    predicted: np.ndarray = field(repr=False)
    seconds: float
    metrics: dict[str, float] | None
    result: pu.PUResult = field(repr=False)

    def summary(self) -> dict[str, Any]:
        """The JSON shape of ``veil audit reid --format json``."""
        m = self.metrics or {}
        return {
            "method": self.method,
            "classifier": self.classifier,
            "seed": self.seed,
            "accuracy": m.get("accuracy"),
            "precision": m.get("precision"),
            "recall": m.get("recall"),
            "predicted_positive": int(self.predicted.sum()),
            "seconds": round(self.seconds, 3),
        }


def run_attack(
    method: str,
    X: np.ndarray,
    mean: np.ndarray,
    *,
    prior: float,
    classifier: str = "linear",
    seed: int | None = None,
    truth: np.ndarray | None = None,
    train_index: np.ndarray | None = None,
    record_every: int = 0,
    **params: Any,
) -> AttackOutcome:
    """Run one attack on ``X``; with ``train_index`` train on those rows and predict all rows.

    ``method``: ``growpu``, ``nnpu``, ``upu``, ``kmeans``, ``floor`` or ``oracle`` (needs
    ``truth``). ``params`` go to the algorithm (e.g. ``t_tune=2000``, ``epochs=100``).
    """
    X = np.asarray(X, dtype=np.float32)
    truth_b = None if truth is None else truth_labels(truth)
    if truth_b is not None and truth_b.shape[0] != X.shape[0]:
        raise InputError(
            f"truth has {truth_b.shape[0]} labels for {X.shape[0]} records", hint="Pass one label per record, in record order"
        )
    train = X if train_index is None else X[np.asarray(train_index)]
    train_truth = None
    if truth_b is not None:
        train_truth = truth_b if train_index is None else truth_b[np.asarray(train_index)]
    if method in ("growpu", "nnpu", "upu"):
        res = pu.METHODS[method](
            train, mean, prior=prior, classifier=classifier, seed=seed, truth=train_truth, record_every=record_every, **params
        )
    elif method == "kmeans":
        res = pu.kmeans_attack(train, mean, prior=prior, seed=seed, **params)
    elif method == "floor":
        res = pu.projection_floor(train, mean, prior=prior, **params)
    elif method == "oracle":
        if train_truth is None:
            raise InputError("the oracle baseline needs the true labels", hint="Pass --truth")
        res = pu.oracle(train, train_truth, classifier=classifier, seed=seed, **params)
    else:
        hint = did_you_mean(method, [*METHOD_NAMES, "oracle"]) or f"Use one of {', '.join(METHOD_NAMES)}"
        raise InputError(f"unknown re-identification method {method!r}", hint=hint)
    scores = res.scores if train_index is None else res.score(X)
    predicted = scores > 0
    metrics = None if truth_b is None else classification_metrics(predicted, truth_b)
    uses_classifier = method in ("growpu", "nnpu", "upu", "oracle")
    return AttackOutcome(method, classifier if uses_classifier else None, seed, predicted, res.seconds, metrics, res)


def stability(predictions: Sequence[np.ndarray]) -> float | None:
    """Mean pairwise agreement of boolean predictions across seeds (1.0 = identical).

    This is the score an auditor without the truth can read: an attack that lands on the
    same membership from every seed found structure, not noise.

    >>> stability([np.array([1, 0, 1], bool), np.array([1, 0, 0], bool)])
    0.6666666666666666
    """
    if len(predictions) < 2:
        return None
    pairs = [float((a == b).mean()) for a, b in itertools.combinations(predictions, 2)]
    return float(np.mean(pairs))


def audit(
    X: np.ndarray,
    mean: np.ndarray,
    *,
    prior: float,
    methods: Sequence[str],
    classifier: str = "linear",
    seeds: Sequence[int] = (0,),
    truth: np.ndarray | None = None,
    record_every: int = 0,
    params: dict[str, dict[str, Any]] | None = None,
) -> tuple[list[AttackOutcome], dict[str, dict[str, Any]]]:
    """Run every method for every seed; return the runs and a per-method summary.

    The summary holds mean/std accuracy (with truth), mean predicted-positive count and
    the cross-seed stability.
    """
    params = params or {}
    runs: list[AttackOutcome] = []
    summary: dict[str, dict[str, Any]] = {}
    for method in methods:
        mine = [
            run_attack(
                method,
                X,
                mean,
                prior=prior,
                classifier=classifier,
                seed=s,
                truth=truth,
                record_every=record_every,
                **params.get(method, {}),
            )
            for s in seeds
        ]
        runs += mine
        accs = [r.metrics["accuracy"] for r in mine if r.metrics]
        summary[method] = {
            "method": method,
            "classifier": mine[0].classifier,
            "runs": len(mine),
            "accuracy_mean": float(np.mean(accs)) if accs else None,
            "accuracy_std": float(np.std(accs)) if accs else None,
            "predicted_positive_mean": float(np.mean([r.predicted.sum() for r in mine])),
            "stability": stability([r.predicted for r in mine]),
            "seconds_mean": float(np.mean([r.seconds for r in mine])),
        }
    return runs, summary


# --------------------------------------------------------------------------- release log


@dataclass(frozen=True)
class ReleasedMean:
    """A class mean assembled from one query release of Veil's log."""

    release_id: str
    table: str
    features: tuple[str, ...]
    values: np.ndarray = field(repr=False)
    scales: np.ndarray = field(repr=False)
    epsilon: float | None
    predicate: str | None
    count: float | None = None


def _norm(text: str) -> str:
    return re.sub(r"[\s\"`]+", "", text).lower()


_STAT_NAME = re.compile(r"^\s*(sum|count|avg)\s*\((.*)\)\s*$", re.IGNORECASE)
_CENTERED = re.compile(r"^(.*?)\s*-\s*(-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)\s*$")


def _stat_column(name: str) -> tuple[str, str, float] | None:
    """``sum(t.c - 4.5)`` -> ("sum", "c", 4.5); ``count(*)`` -> ("count", "*", 0); else None."""
    m = _STAT_NAME.match(str(name))
    if not m:
        return None
    kind, inner = m.group(1).lower(), m.group(2).strip()
    center = 0.0
    if kind == "sum":
        c = _CENTERED.match(inner)
        if c:
            inner, center = c.group(1), float(c.group(2))
    column = inner.strip().strip("()").split(".")[-1].strip().strip('"`').lower()
    return kind, column, center


def mean_from_release(release: Any, features: Sequence[str] | None = None) -> ReleasedMean:
    """Assemble the mean vector of ``SELECT AVG(c1), ..., AVG(cn) FROM t WHERE p`` from a release.

    ``release`` is a :class:`veil.store.releases.Release` of kind ``query``. For every ``AVG(c)``
    of the canonical SQL the released statistics are searched, in this order:

    1. a statistic named ``avg(c)`` (or the output alias / expression);
    2. the noisy ``sum(c - mid)`` and ``count(c)`` (or ``count(*)``) Veil's planner releases
       for an AVG: ``avg = mid + sum / count``, noise scale ``scale(sum) / count``;
    3. select-list order, when there is exactly one statistic per output column;
    4. the released answer row (``answer = {"columns": [...], "rows": [[...]]}``), scale unknown (NaN).

    A released count of the class (``count(*)`` or ``count(c)``) is returned as ``count``;
    divided by the table size it gives the prior. ``features`` selects and orders the
    coordinates (default: the AVG columns in SQL order).
    """
    import sqlglot
    from sqlglot import exp

    rid = getattr(release, "id", "?")
    if getattr(release, "kind", None) != "query":
        raise ReleaseError(
            f"release {rid!r} is of kind {getattr(release, 'kind', None)!r}, not an analyst query",
            hint="Pick a release of kind 'query' (veil releases)",
        )
    sql = getattr(release, "canonical_sql", None)
    if not sql:
        raise ReleaseError(f"release {rid!r} has no canonical SQL", hint="Pick an analyst query release")
    try:
        tree = sqlglot.parse_one(sql, read="postgres")
    except sqlglot.errors.ParseError as exc:  # pragma: no cover - Veil wrote this SQL itself
        raise ReleaseError(f"cannot parse the SQL of release {rid!r}: {exc}") from exc
    if not isinstance(tree, exp.Select):
        raise ReleaseError(f"release {rid!r} is not a single SELECT", hint="Pick an AVG query release")
    tables = sorted({t.name for t in tree.find_all(exp.Table)})
    if len(tables) != 1:
        raise ReleaseError(
            f"release {rid!r} reads {len(tables)} tables {tables}; expected one",
            hint="The audit needs a class mean over one table",
        )
    if tree.args.get("group"):
        raise ReleaseError(
            f"release {rid!r} is grouped; the audit needs one class mean",
            hint="Use a release of SELECT AVG(c1), ... FROM t WHERE <class>",
        )
    where = tree.args.get("where")
    predicate = where.this.sql(dialect="duckdb") if where is not None else None

    stats = [s for s in (getattr(release, "statistics", None) or ()) if not getattr(s, "group", ())]
    by_name = {_norm(str(s.name)): s for s in stats}
    parsed = [(_stat_column(str(s.name)), s) for s in stats]

    def stat(kind: str, column: str) -> tuple[Any, float] | None:
        for p, s in parsed:
            if p is not None and p[0] == kind and p[1] == column.lower():
                return s, p[2]
        return None

    outputs: list[tuple[str, str, Any]] = []  # (kind, column, select expression)
    for e in tree.expressions:
        inner = e.this if isinstance(e, exp.Alias) else e
        if isinstance(inner, exp.Avg) and isinstance(inner.this, exp.Column):
            outputs.append(("avg", inner.this.name, e))
        elif isinstance(inner, exp.Count):
            outputs.append(("count", "*", e))
        else:
            outputs.append(("other", "", e))
    avg_cols = [c for k, c, _ in outputs if k == "avg"]
    if not avg_cols:
        raise ReleaseError(
            f"release {rid!r} has no AVG(column) in its SELECT list",
            hint="The audit needs SELECT AVG(c1), ..., AVG(cn) FROM t WHERE <class>",
        )
    answer = getattr(release, "answer", None) or {}
    answer_row = None
    if isinstance(answer, Mapping) and answer.get("rows") and len(answer["rows"]) == 1:
        answer_row = list(answer["rows"][0])

    def find(col: str, expr: Any, pos: int) -> tuple[float, float]:
        hit = stat("avg", col)
        if hit is not None:
            return float(hit[0].value), float(hit[0].scale or 0.0)
        for key in (expr.alias if isinstance(expr, exp.Alias) else "", expr.sql(dialect="postgres")):
            if key and _norm(key) in by_name:
                s = by_name[_norm(key)]
                return float(s.value), float(s.scale or 0.0)
        total, count = stat("sum", col), stat("count", col) or stat("count", "*")
        if total is not None and count is not None:
            n = max(float(count[0].value), 1.0)
            return total[1] + float(total[0].value) / n, float(total[0].scale or 0.0) / n
        if len(stats) == len(outputs):
            s = stats[pos]
            return float(s.value), float(s.scale or 0.0)
        if answer_row is not None and len(answer_row) == len(outputs):
            return float(answer_row[pos]), float("nan")
        raise ReleaseError(
            f"release {rid!r} has no released statistic for {expr.sql()}", hint=f"Released statistics: {[s.name for s in stats]}"
        )

    found = {col: find(col, e, pos) for pos, (kind, col, e) in enumerate(outputs) if kind == "avg"}
    counted = stat("count", "*") or (stat("count", avg_cols[0]) if avg_cols else None)
    count = None if counted is None else float(counted[0].value)
    wanted = list(features) if features else avg_cols
    missing = [f for f in wanted if f not in found]
    if missing:
        hint = did_you_mean(missing[0], found) or f"The release averages {avg_cols}"
        raise ReleaseError(f"release {rid!r} has no AVG for feature(s) {missing}", hint=hint)
    values = np.array([found[f][0] for f in wanted], dtype=np.float64)
    scales = np.array([found[f][1] for f in wanted], dtype=np.float64)
    eps = getattr(release, "epsilon", None)
    return ReleasedMean(str(rid), tables[0], tuple(wanted), values, scales, None if eps is None else float(eps), predicate, count)


def truth_from_predicate(df: Any, predicate: str, table: str = "t") -> np.ndarray:
    """Evaluate a release's WHERE predicate on the curator's table (DuckDB, in memory).

    Only the curator can do this: it reads the class column analysts may not see.
    NULL counts as "not in the class".
    """
    import duckdb

    con = duckdb.connect(":memory:", config={"enable_external_access": False})
    try:
        con.register(table, df)
        rows = con.execute(f'SELECT COALESCE(({predicate}), FALSE) FROM "{table}"').fetchall()
    except duckdb.Error as exc:
        raise InputError(
            f"cannot evaluate the class predicate {predicate!r} on the table: {exc}", hint="Pass --truth instead"
        ) from exc
    finally:
        con.close()
    return np.array([bool(r[0]) for r in rows])


# --------------------------------------------------------------------------- report


def write_report(
    path: str | Path,
    runs: Sequence[AttackOutcome],
    summary: Mapping[str, Mapping[str, Any]],
    context: Mapping[str, Any],
) -> Path:
    """Markdown audit report: inputs, per-method results, and the Figure-4 curves.

    The curves (share of records classified positive, and accuracy when the truth is
    known, against training steps) are drawn for the first seed of every method that
    recorded a history (``record_every > 0``).
    """
    from veil.auditor.report import Report, line_plot

    rep = Report("Re-identification audit of a released class mean")
    rep.paragraph(
        "An attacker who sees the records below and the released mean of one class tries to recover "
        "which records belong to that class. Accuracy is measured over the attacked records "
        "(transductive, as in Su et al., KDD 2020). Guessing gives max(prior, 1 - prior); the "
        "`floor` row (projection on released mean minus table mean) is what any attack gets for free."
    )
    rep.heading("Inputs")
    rep.key_values(dict(context))
    rep.heading("Results")
    rep.table(
        [dict(v) for v in summary.values()],
        ["method", "classifier", "runs", "accuracy_mean", "accuracy_std", "predicted_positive_mean", "stability", "seconds_mean"],
    )
    rep.heading("Runs")
    rep.table([r.summary() for r in runs])
    first: dict[str, AttackOutcome] = {}
    for r in runs:
        if r.result.history and r.method not in first:
            first[r.method] = r
    if first:
        rep.heading("Evolution (Figure 4 of the paper)")
        label = {k: f"{k} ({v.classifier})" if v.classifier else k for k, v in first.items()}
        frac = {
            label[k]: ([h.step for h in r.result.history], [h.positive_fraction for h in r.result.history])
            for k, r in first.items()
        }
        prior = context.get("prior")
        hl = {f"prior {prior}": float(prior)} if isinstance(prior, int | float) else None
        rep.figure(
            "positive_fraction",
            line_plot(frac, xlabel="training step", ylabel="share classified positive", hlines=hl, ylim=(0.0, 1.0)),
            "Share of records classified positive during training",
        )
        acc = {
            label[k]: ([float(h.step) for h in r.result.history], [float(h.accuracy or 0.0) for h in r.result.history])
            for k, r in first.items()
            if all(h.accuracy is not None for h in r.result.history)
        }
        if acc:
            rep.figure(
                "accuracy",
                line_plot(acc, xlabel="training step", ylabel="re-identification accuracy", ylim=(0.0, 1.0)),
                "Re-identification accuracy during training (truth used for monitoring only)",
            )
        stages = {k: sorted({h.stage for h in r.result.history}) for k, r in first.items()}
        rep.paragraph("Stages recorded: " + "; ".join(f"{k}: {', '.join(v)}" for k, v in stages.items()))
    return rep.write(path)
