"""Pass 3: turn a :class:`~veil.proxy.plan.QueryPlan` into the engine SQL that computes raw statistics.

Only SQL generated here (from the validated, qualified tree) reaches the engine. The private
table is replaced by ``source_sql`` — a clamping projection of the table (row-level privacy) or
the bounded copy (user-level privacy, see :mod:`veil.proxy.bounding`). HAVING, ORDER BY, LIMIT and
DISTINCT are removed: they run later as post-processing over the noisy answers.

>>> clamp_projection({"age": (17, 90)}, ["sex"], "adult")
'SELECT CASE WHEN "age" < 17 THEN 17 WHEN "age" > 90 THEN 90 ELSE "age" END AS "age", "sex" FROM "adult"'
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

import sqlglot
from sqlglot import exp

from veil.errors import InternalError
from veil.proxy.plan import QueryPlan, Statistic

__all__ = ["EngineQueries", "clamp_projection", "rewrite"]


@dataclass(frozen=True)
class EngineQueries:
    main: str  # keys __k0.. then raw quantities __q0..
    quantities: tuple[str, ...]  # SQL of each raw quantity, in column order
    stat_inputs: Mapping[int, tuple[int, ...]]  # statistic id → indices into quantities
    grids: tuple[tuple[int, str], ...]  # (statistic id, histogram SQL: keys, __b, __n)
    n_keys: int


def _lit(v: Fraction | float | int) -> str:
    if isinstance(v, Fraction):
        return str(v.numerator) if v.denominator == 1 else repr(float(v))
    return repr(v)


def clamp_projection(bounded: Mapping[str, tuple[object, object]], others: Sequence[str], table: str) -> str:
    """``SELECT`` clamping each bounded column to its declared range (NULL stays NULL)."""
    cols = []
    for name, (lo, hi) in bounded.items():
        q = f'"{name}"'
        cols.append(f"CASE WHEN {q} < {lo} THEN {lo} WHEN {q} > {hi} THEN {hi} ELSE {q} END AS {q}")
    cols += [f'"{c}"' for c in others]
    return f'SELECT {", ".join(cols)} FROM "{table}"'


def _quantities(stat: Statistic) -> list[str]:
    filt = f" FILTER (WHERE {stat.filter})" if stat.filter else ""
    if stat.kind == "count":
        if stat.arg is None:
            return [f"COUNT(*){filt}"]
        return [f"COUNT({'DISTINCT ' if stat.distinct else ''}{stat.arg}){filt}"]
    if stat.kind == "sum":
        return [f"SUM({stat.arg}){filt}"]
    if stat.kind == "sum_centered":
        return [f"SUM({stat.arg}){filt}", f"COUNT({stat.arg}){filt}"]
    if stat.kind == "sumsq_centered":
        c = _lit(stat.center)
        return [f"SUM((({stat.arg}) - {c}) * (({stat.arg}) - {c})){filt}"]
    raise InternalError(f"no raw quantity for statistic kind {stat.kind!r}")


def _with_source(tree: exp.Select, table: str, source_sql: str) -> exp.Select:
    out = tree.copy()
    source = sqlglot.parse_one(source_sql, read="duckdb")
    for t in list(out.find_all(exp.Table)):
        if t.name == table and not t.args.get("db"):
            alias = t.alias_or_name
            t.replace(exp.Subquery(this=source.copy(), alias=exp.TableAlias(this=exp.to_identifier(alias))))
    for key in ("having", "order", "limit", "offset", "distinct"):
        out.set(key, None)
    return out


def rewrite(plan: QueryPlan, source_sql: str) -> EngineQueries:
    """Engine SQL for ``plan``, reading the private table through ``source_sql``."""
    table = plan.analysis.private_table
    assert table is not None
    base = _with_source(plan.analysis.tree, table, source_sql)
    quantities: list[str] = []
    stat_inputs: dict[int, tuple[int, ...]] = {}
    grids: list[tuple[int, str]] = []
    key_sql = [k.sql for k in plan.keys]
    key_cols = [f"{k} AS __k{i}" for i, k in enumerate(key_sql)]
    for stat in plan.statistics:
        if stat.kind == "grid":
            g = base.copy()
            b = f"CAST(ROUND((({stat.arg}) - {_lit(stat.grid_lo)}) / {_lit(stat.grid_step)}) AS BIGINT)"
            cond = f"({stat.arg}) IS NOT NULL" + (f" AND ({stat.filter})" if stat.filter else "")
            g.set("expressions", [sqlglot.parse_one(s, read="duckdb") for s in [*key_cols, f"{b} AS __b", "COUNT(*) AS __n"]])
            g = g.where(cond, dialect="duckdb", copy=False)
            g.set("group", None)
            g = g.group_by(*key_sql, b, dialect="duckdb", copy=False)
            grids.append((stat.id, g.sql(dialect="duckdb")))
            continue
        idx = []
        for q in _quantities(stat):
            if q not in quantities:
                quantities.append(q)
            idx.append(quantities.index(q))
        stat_inputs[stat.id] = tuple(idx)
    main = ""
    if quantities:
        m = base.copy()
        cols = [*key_cols, *(f"{q} AS __q{i}" for i, q in enumerate(quantities))]
        m.set("expressions", [sqlglot.parse_one(s, read="duckdb") for s in cols])
        main = m.sql(dialect="duckdb")
    return EngineQueries(main, tuple(quantities), stat_inputs, tuple(grids), len(plan.keys))
