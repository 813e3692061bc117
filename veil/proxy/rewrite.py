"""Pass 3: turn a :class:`~veil.proxy.plan.QueryPlan` into the engine SQL that computes raw statistics.

Only SQL generated here (from the validated, qualified tree) reaches the engine. For user-level
tables the private table is replaced by ``source_sql``, the bounded copy (see
:mod:`veil.proxy.bounding`); row-level tables are read directly (aggregate arguments are clamped in
the generated SQL). HAVING, ORDER BY, LIMIT and DISTINCT are removed: they run later as
post-processing over the noisy answers.

>>> clamp_projection({"age": (17, 90)}, ["sex"], "adult")
'SELECT CASE WHEN "age" < 17 THEN 17 WHEN "age" > 90 THEN 90 ELSE "age" END AS "age", "sex" FROM "adult"'
"""

from __future__ import annotations

import secrets
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
        return [f"SUM({stat.arg}){filt}", f"COUNT({stat.count_arg or stat.arg}){filt}"]
    if stat.kind == "sumsq_centered":
        c = _lit(stat.center)
        return [f"SUM((({stat.arg}) - {c}) * (({stat.arg}) - {c})){filt}"]
    raise InternalError(f"no raw quantity for statistic kind {stat.kind!r}")


def _template(plan: QueryPlan, source_sql: str | None) -> tuple[str, str]:
    """The query's FROM/WHERE/GROUP BY as SQL text with a placeholder select list: (sql, placeholder)."""
    table = plan.analysis.private_table
    tree = plan.analysis.tree.copy()
    marker = f"__veil_cols_{secrets.token_hex(4)}"
    tree.set("expressions", [exp.column(marker)])
    for key in ("having", "order", "limit", "offset", "distinct"):
        tree.set(key, None)
    src_marker = f"__veil_src_{secrets.token_hex(4)}"
    if source_sql is not None:
        for t in tree.find_all(exp.Table):
            if t.name == table:
                t.set("this", exp.to_identifier(src_marker))
    sql = tree.sql(dialect="duckdb", copy=False)  # ``tree`` is this function's own copy
    if source_sql is not None:
        sql = sql.replace(src_marker, f"({source_sql})")
    return sql, marker


def rewrite(plan: QueryPlan, source_sql: str | None) -> EngineQueries:
    """Engine SQL for ``plan``; ``source_sql`` (if given) replaces the private table."""
    template, marker = _template(plan, source_sql)
    quantities: list[str] = []
    stat_inputs: dict[int, tuple[int, ...]] = {}
    grids: list[tuple[int, str]] = []
    key_sql = [k.sql for k in plan.keys]
    key_cols = [f"{k} AS __k{i}" for i, k in enumerate(key_sql)]
    for stat in plan.statistics:
        if stat.kind == "grid":
            grids.append((stat.id, _grid_sql(plan, source_sql, stat, key_sql, key_cols)))
            continue
        idx = []
        for q in _quantities(stat):
            if q not in quantities:
                quantities.append(q)
            idx.append(quantities.index(q))
        stat_inputs[stat.id] = tuple(idx)
    main = ""
    if quantities:
        cols = [*key_cols, *(f"{q} AS __q{i}" for i, q in enumerate(quantities))]
        main = template.replace(marker, ", ".join(cols), 1)
    return EngineQueries(main, tuple(quantities), stat_inputs, tuple(grids), len(plan.keys))


def _grid_sql(plan: QueryPlan, source_sql: str | None, stat: Statistic, key_sql: list[str], key_cols: list[str]) -> str:
    table = plan.analysis.private_table
    g = plan.analysis.tree.copy()
    for key in ("having", "order", "limit", "offset", "distinct"):
        g.set(key, None)
    if source_sql is not None:
        src = sqlglot.parse_one(source_sql, read="duckdb")
        for t in list(g.find_all(exp.Table)):
            if t.name == table:
                t.replace(exp.Subquery(this=src.copy(), alias=exp.TableAlias(this=exp.to_identifier(t.alias_or_name))))
    b = f"CAST(ROUND((({stat.arg}) - {_lit(stat.grid_lo)}) / {_lit(stat.grid_step)}) AS BIGINT)"
    cond = f"({stat.arg}) IS NOT NULL" + (f" AND ({stat.filter})" if stat.filter else "")
    g.set("expressions", [sqlglot.parse_one(s, read="duckdb") for s in [*key_cols, f"{b} AS __b", "COUNT(*) AS __n"]])
    g = g.where(cond, dialect="duckdb", copy=False)
    g.set("group", None)
    g = g.group_by(*key_sql, b, dialect="duckdb", copy=False)
    return g.sql(dialect="duckdb", copy=False)  # ``g`` is this function's own copy
