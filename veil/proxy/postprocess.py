"""Pass 8 — postprocess: noisy statistics into the answer: aggregate values, CIs, HAVING/ORDER BY/LIMIT.

Everything here is post-processing of noisy values (no privacy cost). Aggregates:

* ``AVG = clamp(mid + S/N, lo, hi)`` with S the noisy centred sum and N the noisy count (N ≥ 1);
* ``VAR_POP = clamp(Q/N − (S/N)², 0, (w/2)²)``, ``VAR_SAMP = VAR_POP·N/(N−1)``, ``STDDEV = √VAR``;
* counts are clamped at 0; a SUM over a non-negative (non-positive) range is clamped at 0.

CI half-widths at confidence 1 − α (the policy's ``[defaults] confidence``): ``b·ln(1/α)`` for Laplace
noise of scale b (exact), and the exact discrete-Laplace quantile for integer noise
(:func:`veil.mechanisms.discrete_laplace_ci_halfwidth`; the continuous formula under-covers). For
AVG/VAR/STDDEV each of the k component statistics gets confidence 1 − α/k (Bonferroni) and the
interval is propagated through the formula, so it covers the noise with probability ≥ 1 − α.
Exponential-mechanism cells (quantiles, MIN, MAX) and expressions combining noisy values carry no CI
(null); EXPLAIN gives their rank-error bound.

HAVING, ORDER BY, LIMIT and arithmetic over aggregates run as a generated SELECT over the frame of
noisy values (:class:`PostProcess`: a tree whose only table is ``__veil_frame``, made total).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
from sqlglot import exp

from veil.engines.neutral import copy_tree, duckdb_text
from veil.errors import InternalError, Unsupported
from veil.mechanisms import discrete_laplace_ci_halfwidth
from veil.proxy.plan import AggregateSpec, QueryPlan, Statistic
from veil.proxy.totality import make_total

__all__ = ["FRAME", "PostProcess", "finalize_aggregates", "halfwidth", "postprocess_sql"]

#: Default α (1 − confidence) when the caller does not pass the policy's level.
ALPHA = 0.05
#: The name of the frame of noisy values the post-processing SELECT reads.
FRAME = "__veil_frame"


def halfwidth(stat: Statistic, alpha: float = ALPHA) -> float | None:
    """Half-width of the (1 − alpha) interval of one Laplace-family statistic's noise."""
    return _halfwidth(stat.mechanism, stat.scale, alpha)


@lru_cache(maxsize=1024)
def _halfwidth(mechanism: str, scale: float, alpha: float) -> float | None:
    """:func:`halfwidth` of a statistic's mechanism and scale (a pure function of them: computed once per plan)."""
    if mechanism == "exponential":
        return None
    if mechanism == "discrete_laplace":
        return discrete_laplace_ci_halfwidth(scale, 1.0 - alpha)
    return scale * math.log(1.0 / alpha)


def _agg_type(agg: AggregateSpec) -> str:
    if agg.name == "count" or (agg.name in ("sum", "min", "max") and agg.integral):
        return "bigint"
    return "double"


def aggregate_types(plan: QueryPlan) -> list[str]:
    return [_agg_type(a) for a in plan.aggregates]


def finalize_aggregates(
    plan: QueryPlan, noisy: Mapping[int, np.ndarray], n_groups: int, alpha: float = ALPHA
) -> tuple[list[np.ndarray], list[np.ndarray | None]]:
    """Per aggregate: values per group, and CI half-widths per group (None for no CI)."""
    stats = plan.statistics
    values: list[np.ndarray] = []
    cis: list[np.ndarray | None] = []
    for agg in plan.aggregates:
        if agg.name in ("count", "sum"):
            st = stats[agg.stats[0]]
            v = noisy[st.id]
            if agg.name == "count" or (agg.interval is not None and agg.interval.lo >= 0):
                v = np.maximum(v, 0)
            elif agg.interval is not None and agg.interval.hi <= 0:
                v = np.minimum(v, 0)
            values.append(v)
            hw = halfwidth(st, alpha)
            cis.append(np.full(n_groups, hw, dtype=np.float64))
            continue
        if agg.name in ("quantile", "min", "max"):
            v = noisy[agg.stats[0]]
            values.append(np.round(v).astype(np.int64) if _agg_type(agg) == "bigint" else v)
            cis.append(None)
            continue
        iv = agg.interval
        if iv is None:
            raise InternalError(f"aggregate {agg.label} has no interval")
        lo, hi, mid, hw2 = float(iv.lo), float(iv.hi), float(iv.mid), float(iv.half_width)
        comps = [stats[i] for i in agg.stats]
        k = len(comps)
        n_raw = noisy[comps[0].id].astype(np.float64)
        s_raw = noisy[comps[1].id].astype(np.float64)
        h = [halfwidth(c, alpha / k) or 0.0 for c in comps]
        n = np.maximum(n_raw, 1.0)
        if agg.name == "avg":
            val = np.clip(mid + s_raw / n, lo, hi)
            n_lo = np.maximum(n_raw - h[0], 1.0)
            n_hi = np.maximum(n_raw + h[0], 1.0)
            corners = [mid + (s_raw + ds) / nn for ds in (-h[1], h[1]) for nn in (n_lo, n_hi)]
            lo_b = np.clip(np.minimum.reduce(corners), lo, hi)
            hi_b = np.clip(np.maximum.reduce(corners), lo, hi)
            values.append(val)
            cis.append(np.maximum(val - lo_b, hi_b - val))
            continue
        q_raw = noisy[comps[2].id].astype(np.float64)
        top = hw2 * hw2

        vp = np.clip(np.maximum(q_raw, 0.0) / n - (s_raw / n) ** 2, 0.0, top)
        n_lo = np.maximum(n_raw - h[0], 1.0)
        n_hi = np.maximum(n_raw + h[0], 1.0)
        t1_lo = np.maximum(q_raw - h[2], 0.0) / n_hi
        t1_hi = np.maximum(q_raw + h[2], 0.0) / n_lo
        m_c = [(s_raw + ds) / nn for ds in (-h[1], h[1]) for nn in (n_lo, n_hi)]
        m_lo, m_hi = np.minimum.reduce(m_c), np.maximum.reduce(m_c)
        sq_hi = np.maximum(m_lo**2, m_hi**2)
        sq_lo = np.where((m_lo <= 0) & (m_hi >= 0), 0.0, np.minimum(m_lo**2, m_hi**2))
        v_lo = np.clip(t1_lo - sq_hi, 0.0, top)
        v_hi = np.clip(t1_hi - sq_lo, 0.0, top)
        if agg.name in ("var_samp", "stddev_samp"):
            f = np.where(n > 1, n / np.maximum(n - 1, 1.0), 1.0)
            f_lo = np.where(n_hi > 1, n_hi / np.maximum(n_hi - 1, 1.0), 1.0)
            f_hi = np.where(n_lo > 1, n_lo / np.maximum(n_lo - 1, 1.0), 1.0)
            vp, v_lo, v_hi = vp * f, v_lo * f_lo, v_hi * f_hi
        if agg.name.startswith("stddev"):
            vp, v_lo, v_hi = np.sqrt(vp), np.sqrt(v_lo), np.sqrt(v_hi)
        values.append(vp)
        cis.append(np.maximum(np.abs(vp - v_lo), np.abs(v_hi - vp)))
    return values, cis


@dataclass(frozen=True)
class PostProcess:
    """How to shape the final answer from the frame of keys (__k*) and aggregates (__a*)."""

    names: tuple[str, ...]  # output column names
    direct: tuple[str, ...] | None  # frame column per output when no SQL is needed, else None
    tree: exp.Select | None  # total SELECT over the table __veil_frame (outputs, then __c columns)
    ci_sources: tuple[int | None, ...]  # aggregate index whose CI each output carries

    def sql_over(self, source: exp.Expression) -> str:
        """The post-processing SQL reading ``source`` (a table or subquery) in place of the frame."""
        if self.tree is None:
            raise InternalError("a direct post-processing has no SQL")
        tree = copy_tree(self.tree)
        frames = [t for t in tree.find_all(exp.Table) if t.name == FRAME]
        if len(frames) != 1:
            raise InternalError(f"post-processing reads the frame {len(frames)} times")
        frames[0].replace(source)
        return duckdb_text(tree)


def _output_names(plan: QueryPlan) -> list[str]:
    names = []
    for orig, _q in zip(plan.analysis.original.expressions, plan.analysis.tree.expressions, strict=False):
        if isinstance(orig, exp.Alias):
            names.append(orig.alias)
        elif isinstance(orig, exp.Column):
            names.append(orig.name)
        else:
            names.append(duckdb_text(orig))
    return names


def postprocess_sql(plan: QueryPlan) -> PostProcess:
    """Rewrite the outer SELECT over the noisy frame. Raises if a column is neither key nor aggregate."""
    tree = plan.analysis.tree
    agg_cols = {a.sql: f"__a{a.index}" for a in plan.aggregates}
    key_cols = {k.sql: f"__k{k.index}" for k in plan.keys}
    group = tree.args.get("group")
    key_nodes = list(group.expressions) if group is not None else []

    root_types = (exp.AggFunc, exp.Anonymous, exp.Filter, exp.WithinGroup, *{type(k) for k in key_nodes})

    def sub(node: exp.Expression) -> exp.Expression:
        if not isinstance(node, root_types):
            return node
        s = duckdb_text(node)
        if s in agg_cols:
            return exp.column(agg_cols[s])
        if s in key_cols and not isinstance(node, exp.Alias):
            return exp.column(key_cols[s])
        return node

    names = _output_names(plan)
    outputs: list[exp.Expression] = []
    direct: list[str] | None = []
    ci_sources: list[int | None] = []
    agg_index = {f"__a{a.index}": a.index for a in plan.aggregates}
    for proj in tree.expressions:
        body = proj.unalias()
        new = copy_tree(body).transform(sub)
        leftover = [c for c in new.find_all(exp.Column) if not c.name.startswith("__")]
        if leftover:
            col = leftover[0]
            raise Unsupported(
                f"column {col.name!r} must appear in GROUP BY or be used in an aggregate",
                hint=f"Add it to GROUP BY, or aggregate it, e.g. COUNT({col.name})",
            )
        if isinstance(new, exp.Column) and new.name.startswith("__"):
            if direct is not None:
                direct.append(new.name)
            ci_sources.append(agg_index.get(new.name))
        else:
            direct = None
            ci_sources.append(None)
        outputs.append(exp.alias_(new, f"__o{len(outputs)}"))
    clauses: dict[str, Any] = {}
    for key in ("having", "order", "limit", "offset", "distinct"):
        if tree.args.get(key) is not None:
            clauses[key] = tree.args[key]
            direct = None
    if direct is not None:
        return PostProcess(tuple(names), tuple(direct), None, tuple(ci_sources))
    sel = exp.select(*outputs).from_(
        exp.Table(this=exp.to_identifier(FRAME), alias=exp.TableAlias(this=exp.to_identifier(FRAME)))
    )
    for i, src in enumerate(ci_sources):
        sel = sel.select(exp.alias_(exp.column(f"__ci{src}") if src is not None else exp.null(), f"__c{i}"))
    if "having" in clauses:
        cond = clauses["having"].this.copy().transform(sub)
        if [c for c in cond.find_all(exp.Column) if not c.name.startswith("__")]:
            raise Unsupported("HAVING may only use group keys and aggregates")
        sel = sel.where(cond)
    if "order" in clauses:
        order = clauses["order"].copy()
        alias_map = {n: f"__o{i}" for i, n in enumerate(names)} | {
            p.alias: f"__o{i}" for i, p in enumerate(tree.expressions) if isinstance(p, exp.Alias)
        }

        def sub_order(node: exp.Expression) -> exp.Expression:
            if isinstance(node, exp.Column) and not node.table and node.name in alias_map:
                return exp.column(alias_map[node.name])
            return sub(node)

        order = order.transform(sub_order)
        if [c for c in order.find_all(exp.Column) if not c.name.startswith("__")]:
            raise Unsupported("ORDER BY may only use output columns, group keys and aggregates")
        sel.set("order", order)
    for key in ("limit", "offset"):
        if key in clauses:
            sel.set(key, clauses[key].copy())
    if "distinct" in clauses:
        sel.set("distinct", exp.Distinct())
    total = make_total(sel)
    if not isinstance(total, exp.Select):
        raise InternalError("make_total changed the post-processing SELECT")
    return PostProcess(tuple(names), None, total, tuple(ci_sources))


def frame_columns(n_keys: int, n_aggs: int) -> Sequence[str]:
    return [*(f"__k{i}" for i in range(n_keys)), *(f"__a{i}" for i in range(n_aggs)), *(f"__ci{i}" for i in range(n_aggs))]
