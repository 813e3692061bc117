"""One analyst query, end to end: analyze → plan → reserve → rewrite → execute → noise → post-process → release.

Interface (used by the CLI, :func:`veil.connect` and the SQL server):
``QuerySession(policy, analyst, *, engine=None, noise_off_for_tests=False)`` holds one engine cursor
(one per session; not shareable across threads) and a ledger handle. ``.execute(sql, *, epsilon=None)
-> Answer`` answers one SELECT (ε defaults to ``[defaults].epsilon_per_query``), charging exactly what
``.explain(sql, *, epsilon=None) -> Explanation`` quotes (``.rows()`` lists statistic, mechanism,
sensitivity, noise scale, 95% CI half-width and ε; ``.epsilon`` the total). ``.describe(sql)`` gives
the output columns (names and types) without running the noisy query or charging. ``.budget() ->
BudgetStatus(analyst, total, spent, remaining)``; ``.close()``. :class:`Answer` is frozen: ``columns``
(:class:`OutputColumn` name + sql_type ∈ bigint/double/text/boolean/date), ``rows``, ``ci95`` (half-width
per cell, None for exact cells), ``epsilon_charged`` and ``epsilon_remaining`` (Fractions),
``release_id`` (None for public or cached answers) and ``cached``. Queries over public tables only
cost nothing and return exact rows. Errors are :class:`veil.errors.VeilError` subclasses with a SQLSTATE.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import duckdb
import numpy as np
import pandas as pd
from sqlglot import exp
from sqlglot.optimizer.scope import Scope, traverse_scope

from veil._json import to_jsonable
from veil.engines.base import Engine, EngineError, output_type
from veil.engines.duckdb import DuckDBEngine
from veil.errors import QueryRejected, Unsupported
from veil.mechanisms.budget import as_epsilon
from veil.policy import Policy
from veil.proxy import bounding
from veil.proxy.analyze import Analysis, analyze
from veil.proxy.canonical import cache_key, canonical_sql
from veil.proxy.catalog import Catalog, build_catalog
from veil.proxy.noise import noisy_statistics
from veil.proxy.plan import QueryPlan, plan
from veil.proxy.postprocess import ALPHA, aggregate_types, finalize_aggregates, halfwidth, postprocess_sql
from veil.proxy.rewrite import EngineQueries, rewrite

__all__ = ["Answer", "BudgetStatus", "Explanation", "OutputColumn", "QuerySession"]


@dataclass(frozen=True)
class OutputColumn:
    name: str
    sql_type: str  # bigint | double | text | boolean | date


@dataclass(frozen=True)
class Answer:
    columns: tuple[OutputColumn, ...]
    rows: tuple[tuple[Any, ...], ...]
    ci95: tuple[tuple[float | None, ...], ...]
    epsilon_charged: Fraction
    epsilon_remaining: Fraction
    release_id: str | None
    cached: bool

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape of ``veil query --format json``."""
        return {
            "columns": [c.name for c in self.columns],
            "rows": [[to_jsonable(v) for v in r] for r in self.rows],
            "ci95": [list(r) for r in self.ci95],
            "epsilon_charged": float(self.epsilon_charged),
            "epsilon_remaining": float(self.epsilon_remaining),
        }

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame([list(r) for r in self.rows], columns=[c.name for c in self.columns])


@dataclass(frozen=True)
class BudgetStatus:
    analyst: str
    total: Fraction  # ε
    spent: Fraction
    remaining: Fraction
    delta_total: Fraction = Fraction(0)
    delta_spent: Fraction = Fraction(0)
    delta_remaining: Fraction = Fraction(0)

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape of ``veil budget --format json``."""
        return {
            "analyst": self.analyst,
            "total": float(self.total),
            "spent": float(self.spent),
            "remaining": float(self.remaining),
            "epsilon_total": float(self.total),
            "epsilon_spent": float(self.spent),
            "epsilon_remaining": float(self.remaining),
            "delta_total": float(self.delta_total),
            "delta_spent": float(self.delta_spent),
            "delta_remaining": float(self.delta_remaining),
        }


@dataclass(frozen=True)
class Explanation:
    """What a query would cost and how noisy each statistic would be; nothing is spent."""

    sql: str
    epsilon: Fraction
    statistics: tuple[dict[str, Any], ...]
    public: bool = False
    contribution: int = 1
    partition_threshold: int | None = None
    partition_delta: float | None = None

    def rows(self) -> list[dict[str, Any]]:
        return [dict(s) for s in self.statistics]


def _py(v: Any) -> Any:
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        return float(v)
    if isinstance(v, np.bool_):
        return bool(v)
    return v


_SAFE_POST_CONFIG = {"enable_external_access": "false", "lock_configuration": "true"}


def public_join_factors(analysis: Analysis, catalog: Catalog) -> list[tuple[str, tuple[str, ...]]]:
    """Public tables joined to private rows, each with the columns its rows are matched on by equality.

    A private row can appear once per matching public row: the query's contribution bound is
    multiplied by the largest number of public rows sharing one value of those columns (or the
    public table's row count when nothing pins them).
    """
    out: list[tuple[str, tuple[str, ...]]] = []
    for scope in traverse_scope(analysis.tree):
        sel = scope.expression
        for join in sel.args.get("joins") or []:
            side = (join.args.get("side") or "").upper()
            kind = (join.args.get("kind") or "").upper()
            if side in ("RIGHT", "FULL") or (kind in ("OUTER",) and side != "LEFT"):
                raise Unsupported(f"{side or kind} JOIN is not supported with private data", hint="Use JOIN or LEFT JOIN")
            if side == "LEFT" and _reads_private_source(join.this, scope, catalog):
                raise Unsupported(
                    "LEFT JOIN onto a private table is not supported",
                    hint="Put the private table first: FROM private LEFT JOIN public",
                )
        conds: list[exp.Expression] = []
        for join in sel.args.get("joins") or []:
            if join.args.get("on") is not None:
                conds.append(join.args["on"])
        if sel.args.get("where") is not None:
            conds.append(sel.args["where"].this)
        eqs = [c for cond in conds for c in _conjuncts(cond) if isinstance(c, exp.EQ)]
        for alias, src in scope.selected_sources.items():
            _node, source = src
            if not isinstance(source, exp.Table):
                continue
            t = catalog.tables.get(source.name)
            if t is None or not t.public:
                continue
            if not _scope_reads_private(scope, catalog):
                continue
            cols = []
            for eq in eqs:
                a, b = eq.this, eq.expression
                for x, y in ((a, b), (b, a)):
                    if isinstance(x, exp.Column) and x.table == alias and isinstance(y, exp.Column) and y.table != alias:
                        cols.append(x.name)
            out.append((source.name, tuple(sorted(set(cols)))))
    return out


def _conjuncts(cond: exp.Expression) -> list[exp.Expression]:
    cond = cond.unnest()
    if isinstance(cond, exp.And):
        return [c for part in cond.flatten() for c in _conjuncts(part)]
    return [cond]


def _scope_reads_private(scope: Scope, catalog: Catalog) -> bool:
    for src in scope.sources.values():
        if isinstance(src, exp.Table):
            t = catalog.tables.get(src.name)
            if t is not None and not t.public:
                return True
        elif isinstance(src, Scope) and _scope_reads_private(src, catalog):
            return True
    return False


def _reads_private_source(node: exp.Expression, scope: Scope, catalog: Catalog) -> bool:
    src = scope.sources.get(node.alias_or_name)
    if isinstance(src, exp.Table):
        t = catalog.tables.get(src.name)
        return t is not None and not t.public
    if isinstance(src, Scope):
        return _scope_reads_private(src, catalog)
    return False


class QuerySession:
    """One analyst's session: one engine cursor, one ledger handle. Not thread-safe; use one per thread."""

    def __init__(
        self,
        policy: Policy,
        analyst: str,
        *,
        engine: Engine | None = None,
        noise_off_for_tests: bool = False,
        _rng: np.random.Generator | None = None,
    ) -> None:
        self.policy = policy
        self.analyst = analyst
        self._spec = policy.analyst(analyst)  # raises PolicyError for unknown analysts
        self._engine: Engine = engine if engine is not None else DuckDBEngine(policy)
        self._own_engine = engine is None
        self._noise_off = noise_off_for_tests
        self._rng = _rng
        self._ledger: Any = None
        self._catalog: Catalog | None = None
        self._post: duckdb.DuckDBPyConnection | None = None
        self._factor_cache: dict[tuple[str, tuple[str, ...]], int] = {}
        self._domain_cache: dict[tuple[str, int], list[Any]] = {}

    # -- plumbing ---------------------------------------------------------------------------
    @property
    def ledger(self) -> Any:
        if self._ledger is None:
            from veil.store.ledger import Ledger

            self._ledger = Ledger.for_policy(self.policy)
        return self._ledger

    def _generation(self) -> int:
        if isinstance(self._engine, DuckDBEngine) and self._engine._policy is not None:
            from veil.store import warehouse

            return warehouse.reader_generation(self.policy)
        return 0

    def catalog(self, *, refresh: bool = False) -> Catalog:
        if self._catalog is None or refresh:
            public: dict[str, dict[str, str]] = {}
            names = {n for n, t in self.policy.tables.items() if t.public}
            try:
                from veil.store.releases import published_tables

                names |= set(published_tables(self.policy))
            except Exception:
                pass
            if names:
                listed = ", ".join("'" + n.replace("'", "''") + "'" for n in sorted(names))
                res = self._engine.execute(
                    "SELECT table_name, column_name, data_type FROM information_schema.columns "
                    f"WHERE table_name IN ({listed}) ORDER BY table_name, ordinal_position"
                )
                for t, c, ty in res.rows:
                    public.setdefault(t, {})[c] = ty
            self._catalog = build_catalog(self.policy, public)
        return self._catalog

    def _analyze(self, sql: str) -> Analysis:
        try:
            return analyze(sql, self.catalog())
        except QueryRejected as exc:
            if type(exc).__name__ == "UnknownTable":  # a table may have been published since
                return analyze(sql, self.catalog(refresh=True))
            raise

    def _epsilon(self, epsilon: Fraction | float | None) -> Fraction:
        if epsilon is None:
            return self.policy.defaults.epsilon_per_query
        return as_epsilon(epsilon)

    def _contribution(self, analysis: Analysis, catalog: Catalog) -> int:
        assert analysis.private_table is not None
        spec = self.policy.tables[analysis.private_table]
        c = spec.max_rows_per_unit if spec.privacy_unit is not None else 1
        for table, cols in public_join_factors(analysis, catalog):
            key = (table, cols)
            if key not in self._factor_cache:
                if cols:
                    keys = ", ".join(f'"{x}"' for x in cols)
                    sql = f'SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM "{table}" GROUP BY {keys})'
                else:
                    sql = f'SELECT count(*) FROM "{table}"'
                self._factor_cache[key] = max(int(self._engine.execute(sql).rows[0][0]), 1)
            c *= self._factor_cache[key]
        return c

    def _plan(self, sql: str, epsilon: Fraction | float | None) -> QueryPlan | Analysis:
        analysis = self._analyze(sql)
        if analysis.private_table is None:
            return analysis
        catalog = self.catalog()
        return plan(
            analysis,
            catalog,
            epsilon=self._epsilon(epsilon),
            contribution=self._contribution(analysis, catalog),
            partition_delta=self.policy.defaults.partition_delta,
            clamped_source=self.policy.tables[analysis.private_table].privacy_unit is not None,
        )

    def _source_sql(self, table: str) -> str | None:
        spec = self.policy.tables[table]
        if spec.privacy_unit is None:
            return None  # row-level: read the table itself; aggregate arguments are clamped in the SQL
        return bounding.bounded_source(self.policy, spec, self._engine, generation=self._generation)

    def _postconn(self) -> duckdb.DuckDBPyConnection:
        if self._post is None:
            self._post = duckdb.connect(":memory:", config=dict(_SAFE_POST_CONFIG))
        return self._post

    # -- public API -------------------------------------------------------------------------
    def budget(self) -> BudgetStatus:
        spent = self.ledger.spent(f"analyst:{self.analyst}")
        total, dtotal = self._spec.epsilon, self._spec.delta
        return BudgetStatus(
            self.analyst,
            total,
            spent.epsilon,
            max(total - spent.epsilon, Fraction(0)),
            dtotal,
            spent.delta,
            max(dtotal - spent.delta, Fraction(0)),
        )

    def explain(self, sql: str, *, epsilon: Fraction | float | None = None) -> Explanation:
        p = self._plan(sql, epsilon)
        if isinstance(p, Analysis):
            return Explanation(sql=sql, epsilon=Fraction(0), statistics=(), public=True)
        rows = []
        for s in p.statistics:
            role = "hidden" if s.hidden else "output"
            if s.id == p.partition_stat:
                role = "partition selection" + ("" if s.hidden else " + output")
            if s.mechanism == "exponential":
                k = s.grid_n
                rank_err = 2 * float(s.sensitivity) * math.log(k / ALPHA) / float(s.epsilon) if k > 1 else 0.0
                ci = None
                note = (
                    f"grid of {k} points from {float(s.grid_lo):g} step {float(s.grid_step):g}; "
                    f"rank error ≤ {rank_err:.3g} rows (95%)"
                )
            else:
                ci = halfwidth(s)
                note = ""
            rows.append(
                {
                    "statistic": s.label,
                    "role": role,
                    "mechanism": s.mechanism,
                    "sensitivity": float(s.sensitivity),
                    "scale": s.scale,
                    "ci95": ci,
                    "epsilon": float(s.epsilon),
                    "epsilon_exact": str(s.epsilon),
                    "note": note,
                }
            )
        return Explanation(
            sql=sql,
            epsilon=p.cost,
            statistics=tuple(rows),
            contribution=p.contribution,
            partition_threshold=p.partition_threshold,
            partition_delta=p.partition_delta,
        )

    def describe(self, sql: str) -> tuple[OutputColumn, ...]:
        p = self._plan(sql, None)
        if isinstance(p, Analysis):
            res = self._engine.describe(self._public_sql(p))
            return tuple(OutputColumn(n, output_type(t)) for n, t in zip(res.names, res.types, strict=True))
        queries = rewrite(p, None)
        key_types = self._key_types(p, queries)
        post = postprocess_sql(p)
        agg_types = aggregate_types(p)
        if post.direct is not None:
            types = [self._frame_type(c, key_types, agg_types) for c in post.direct]
            return tuple(OutputColumn(n, t) for n, t in zip(post.names, types, strict=True))
        frame = self._empty_frame(p, key_types, agg_types)
        res = self._run_post(post.sql or "", frame, key_types)
        n = len(post.names)
        return tuple(OutputColumn(nm, output_type(t)) for nm, t in zip(post.names, res.types[:n], strict=True))

    def execute(self, sql: str, *, epsilon: Fraction | float | None = None) -> Answer:
        p = self._plan(sql, epsilon)
        if isinstance(p, Analysis):
            return self._public_answer(p)
        canonical = canonical_sql(p.analysis)
        # noise-off answers (tests only) live under their own key: a real session never serves one
        key = cache_key(canonical + ("\x00noise-off" if self._noise_off else ""), p.epsilon)
        cached = self.ledger.cached_answer(self.analyst, key)
        if cached is not None:
            return self._from_cache(cached)
        post = postprocess_sql(p)  # validates the outer shape before anything is charged
        table = p.analysis.private_table
        assert table is not None
        queries = rewrite(p, self._source_sql(table))
        domain = self._public_domain(p) if p.public_keys else None
        from veil.store.ledger import Cost, accounts_for

        cost = Cost(p.cost, Fraction(p.partition_delta) if p.partition_delta else Fraction(0))
        reservation = self.ledger.reserve(
            cost,
            accounts_for(self.policy, analyst=self.analyst, tables=[table]),
            actor=self.analyst,
            canonical_sql=canonical,
            cache_key=key,
        )
        try:
            groups, raw, grids, key_types = self._run(p, queries, domain)
        except EngineError as exc:
            if exc.before_data or self._fails_without_data(p, table):
                self.ledger.cancel(reservation)  # no noise drawn, and the failure says nothing about the data
                raise EngineError(exc.message, hint=exc.hint, before_data=True) from None
            raise  # a data-dependent failure is itself a signal: the charge stands
        noisy = noisy_statistics(p, raw, grids, noise_off=self._noise_off, rng=self._rng)
        keep = self._select_partitions(p, noisy, len(groups))
        answer, stats = self._shape(p, post, groups, noisy, keep, key_types)
        release_id = self.ledger.release(
            reservation,
            answer={
                "columns": [[c.name, c.sql_type] for c in answer.columns],
                "rows": [[to_jsonable(v) for v in r] for r in answer.rows],
                "ci95": [list(r) for r in answer.ci95],
                "epsilon": str(p.cost),
            },
            statistics=stats,
            method="query",
            table=table,
        )
        remaining = self.budget().remaining
        return Answer(answer.columns, answer.rows, answer.ci95, p.cost, remaining, release_id, False)

    def close(self) -> None:
        if self._own_engine:
            self._engine.close()
        if self._ledger is not None:
            self._ledger.close()
            self._ledger = None
        if self._post is not None:
            self._post.close()
            self._post = None

    def __enter__(self) -> QuerySession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- steps ------------------------------------------------------------------------------
    def _public_sql(self, analysis: Analysis) -> str:
        return analysis.tree.sql(dialect="duckdb")

    def _public_answer(self, analysis: Analysis) -> Answer:
        res = self._engine.execute(self._public_sql(analysis))
        cols = tuple(OutputColumn(n, output_type(t)) for n, t in zip(res.names, res.types, strict=True))
        rows = tuple(tuple(_py(v) for v in r) for r in res.rows)
        ci = tuple(tuple(None for _ in r) for r in rows)
        return Answer(cols, rows, ci, Fraction(0), self.budget().remaining, None, False)

    def _from_cache(self, cached: dict[str, Any]) -> Answer:
        cols = tuple(OutputColumn(str(n), str(t)) for n, t in cached["columns"])
        rows = tuple(tuple(r) for r in cached["rows"])
        ci = tuple(tuple(r) for r in cached["ci95"])
        return Answer(cols, rows, ci, Fraction(0), self.budget().remaining, None, True)

    def _public_domain(self, p: QueryPlan) -> list[tuple[Any, ...]]:
        domains: list[list[Any]] = []
        total = 1
        for k in p.keys:
            if k.domain_values is not None:
                values = list(k.domain_values)
            else:
                assert k.domain_sql is not None
                cache_key_ = (k.domain_sql, self._generation())
                if cache_key_ not in self._domain_cache:
                    self._domain_cache[cache_key_] = [r[0] for r in self._engine.execute(k.domain_sql).rows]
                values = self._domain_cache[cache_key_]
            domains.append(values)
            total *= max(len(values), 1)
        from veil.proxy.plan import MAX_PUBLIC_GROUPS

        if total > MAX_PUBLIC_GROUPS:
            raise Unsupported(
                f"the declared group keys make {total} groups (more than {MAX_PUBLIC_GROUPS})",
                hint="Group by fewer columns",
            )
        out: list[tuple[Any, ...]] = [()]
        for values in domains:
            out = [(*g, v) for g in out for v in values]
        return out

    def _key_types(self, p: QueryPlan, queries: EngineQueries) -> list[str]:
        if not p.keys:
            return []
        sql = queries.main or queries.grids[0][1]
        res = self._engine.describe(sql)
        return [output_type(t) for t in res.types[: len(p.keys)]]

    def _run(
        self, p: QueryPlan, queries: EngineQueries, domain: list[tuple[Any, ...]] | None
    ) -> tuple[list[tuple[Any, ...]], dict[int, np.ndarray], dict[int, np.ndarray], list[str]]:
        nk = len(p.keys)
        key_types: list[str] = []
        data: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        if queries.main:
            res = self._engine.execute(queries.main)
            key_types = [output_type(t) for t in res.types[:nk]]
            for row in res.rows:
                data[tuple(row[:nk])] = tuple(row[nk:])
        hist: dict[int, dict[tuple[Any, ...], dict[int, int]]] = {}
        ran: dict[str, dict[tuple[Any, ...], dict[int, int]]] = {}
        for sid, sql in queries.grids:
            if sql not in ran:
                res = self._engine.execute(sql)
                if not key_types:
                    key_types = [output_type(t) for t in res.types[:nk]]
                h: dict[tuple[Any, ...], dict[int, int]] = {}
                for row in res.rows:
                    h.setdefault(tuple(row[:nk]), {})[int(row[nk])] = int(row[nk + 1])
                ran[sql] = h
            hist[sid] = ran[sql]
        if domain is not None:
            groups = domain
        elif nk == 0:
            groups = [()]
        else:
            seen = dict.fromkeys(data)
            for h in hist.values():
                seen.update(dict.fromkeys(h))
            groups = sorted(seen, key=lambda g: tuple((v is None, str(type(v)), v) for v in g))
        n = len(groups)
        zeros = tuple(0 for _ in queries.quantities)
        qvals = [data.get(g, zeros) for g in groups]
        raw: dict[int, np.ndarray] = {}
        for stat in p.statistics:
            if stat.kind == "grid":
                continue
            idx = queries.stat_inputs[stat.id]
            col = [r[idx[0]] if r[idx[0]] is not None else 0 for r in qvals]
            if stat.kind == "sum_centered":
                cnt = [r[idx[1]] or 0 for r in qvals]
                c = stat.center
                if c.denominator == 1 and all(isinstance(v, int) for v in col):
                    vals = np.array([int(s) - int(c) * int(k) for s, k in zip(col, cnt, strict=True)], dtype=np.float64)
                else:
                    vals = np.array([float(s) - float(c) * float(k) for s, k in zip(col, cnt, strict=True)])
                raw[stat.id] = vals
            elif stat.mechanism == "discrete_laplace":
                raw[stat.id] = np.array([int(v) for v in col], dtype=np.int64)
            else:
                raw[stat.id] = np.array([float(v) for v in col], dtype=np.float64)
        grids: dict[int, np.ndarray] = {}
        for stat in p.statistics:
            if stat.kind != "grid":
                continue
            arr = np.zeros((n, stat.grid_n), dtype=np.int64)
            h = hist.get(stat.id, {})
            for gi, g in enumerate(groups):
                for b, cnt in h.get(g, {}).items():
                    arr[gi, min(max(b, 0), stat.grid_n - 1)] += cnt
            grids[stat.id] = arr
        if p.keys and not key_types:
            key_types = self._key_types(p, queries)
        return groups, raw, grids, key_types

    def _fails_without_data(self, p: QueryPlan, table: str) -> bool:
        """Does the generated SQL fail on an empty private table too (so the failure is data-independent)?"""
        empty = rewrite(p, f'SELECT * FROM "{table}" LIMIT 0')
        try:
            for q in [empty.main, *(g for _, g in empty.grids)]:
                if q:
                    self._engine.execute(q)
        except EngineError:
            return True
        return False

    def _select_partitions(self, p: QueryPlan, noisy: dict[int, np.ndarray], n: int) -> np.ndarray:
        if p.partition_stat is None:
            return np.ones(n, dtype=bool)
        assert p.partition_threshold is not None
        return noisy[p.partition_stat] >= p.partition_threshold

    def _frame_type(self, col: str, key_types: Sequence[str], agg_types: Sequence[str]) -> str:
        i = int(col[3:])
        return key_types[i] if col.startswith("__k") else agg_types[i]

    def _empty_frame(self, p: QueryPlan, key_types: Sequence[str], agg_types: Sequence[str]) -> pd.DataFrame:
        dtypes = {"bigint": "int64", "double": "float64", "text": "object", "boolean": "bool", "date": "datetime64[s]"}
        data: dict[str, pd.Series] = {}
        for i, t in enumerate(key_types):
            data[f"__k{i}"] = pd.Series([], dtype=dtypes[t])
        for i, t in enumerate(agg_types):
            data[f"__a{i}"] = pd.Series([], dtype=dtypes[t])
            data[f"__ci{i}"] = pd.Series([], dtype="float64")
        return pd.DataFrame(data)

    def _run_post(self, sql: str, frame: pd.DataFrame, key_types: Sequence[str] = ()) -> Any:
        con = self._postconn()
        con.register("__veil_raw", frame)
        dates = [f"CAST(__k{i} AS DATE) AS __k{i}" for i, t in enumerate(key_types) if t == "date"]
        source = f"(SELECT * REPLACE ({', '.join(dates)}) FROM __veil_raw)" if dates else "__veil_raw"
        try:
            cur = con.execute(sql.replace("FROM __veil_frame", f"FROM {source} AS __veil_frame", 1))
            rows = cur.fetchall()
            types = [str(d[1]) for d in cur.description or []]
        except duckdb.Error as exc:
            raise QueryRejected(
                f"post-processing of the noisy answer failed ({type(exc).__name__.replace('Exception', '')} error)",
                hint="Check HAVING / ORDER BY / arithmetic over aggregates",
            ) from None
        finally:
            con.unregister("__veil_raw")

        @dataclass(frozen=True)
        class _R:
            rows: list[tuple[Any, ...]]
            types: list[str]

        return _R(rows, types)

    def _shape(
        self,
        p: QueryPlan,
        post: Any,
        groups: list[tuple[Any, ...]],
        noisy: dict[int, np.ndarray],
        keep: np.ndarray,
        key_types: Sequence[str],
    ) -> tuple[Answer, list[Any]]:
        from veil.store.releases import ReleasedStatistic

        idx = np.flatnonzero(keep)
        kept = [groups[i] for i in idx]
        noisy_kept = {sid: v[idx] for sid, v in noisy.items()}
        values, cis = finalize_aggregates(p, noisy_kept, len(kept))
        agg_types = aggregate_types(p)
        if len(key_types) < len(p.keys):
            key_types = [*key_types, *(["text"] * (len(p.keys) - len(key_types)))]
        if post.direct is not None:
            rows, ci_rows = [], []
            for gi, g in enumerate(kept):
                row, crow = [], []
                for col, src in zip(post.direct, post.ci_sources, strict=True):
                    i = int(col[3:])
                    if col.startswith("__k"):
                        row.append(_py(g[i]))
                        crow.append(None)
                    else:
                        row.append(_py(values[i][gi]))
                        c = cis[i]
                        crow.append(None if c is None or src is None else float(c[gi]))
                rows.append(tuple(row))
                ci_rows.append(tuple(crow))
            types = [self._frame_type(c, key_types, agg_types) for c in post.direct]
            columns = tuple(OutputColumn(n, t) for n, t in zip(post.names, types, strict=True))
        else:
            frame = self._empty_frame(p, key_types, agg_types)
            data: dict[str, Any] = {}
            for i in range(len(p.keys)):
                data[f"__k{i}"] = pd.Series([g[i] for g in kept], dtype=frame[f"__k{i}"].dtype if kept else None)
            for i in range(len(p.aggregates)):
                data[f"__a{i}"] = values[i]
                data[f"__ci{i}"] = cis[i] if cis[i] is not None else np.full(len(kept), np.nan)
            frame = pd.DataFrame(data) if kept else frame
            res = self._run_post(post.sql, frame, key_types)
            n = len(post.names)
            columns = tuple(OutputColumn(nm, output_type(t)) for nm, t in zip(post.names, res.types[:n], strict=True))
            rows = [tuple(_py(v) for v in r[:n]) for r in res.rows]
            ci_rows = [
                tuple(None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v) for v in r[n:])
                for r in res.rows
            ]
        stats = []
        groups_json = [tuple(to_jsonable(v) for v in g) for g in kept]
        for s in p.statistics:
            hw, scale, sens = halfwidth(s), s.scale, float(s.sensitivity)
            vals = noisy_kept[s.id].tolist()
            for gi, g in enumerate(groups_json):
                stats.append(ReleasedStatistic(s.label, s.mechanism, s.epsilon, sens, scale, vals[gi], hw, g))
        answer = Answer(columns, tuple(rows), tuple(ci_rows), p.cost, Fraction(0), None, False)
        return answer, stats
