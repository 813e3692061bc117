"""The query pipeline: one analyst query as a fold of passes over a frozen :class:`QueryState`.

:data:`PASSES` is the one ordered tuple :class:`~veil.proxy.session.QuerySession` runs::

    parse → resolve → validate → plan → rewrite → prepare → reserve → execute → noise → postprocess → release

Each pass takes the state and the session's :class:`Env` and returns a new state
(``dataclasses.replace``); the work itself is done by the pure function of the pass's module
(:mod:`~veil.proxy.parse`, :mod:`~veil.proxy.resolve`, :mod:`~veil.proxy.validate`,
:mod:`~veil.proxy.plan`, :mod:`~veil.proxy.rewrite`, :mod:`~veil.proxy.add_noise`,
:mod:`~veil.proxy.postprocess`). The effectful ones are explicit: ``plan`` asks the public
connection for join multiplicities; ``prepare`` builds the bounded copy if needed, lists public
group domains and binds every generated statement without reading data — so every refusal up to
here is free; ``reserve`` charges (ε, δ) atomically (or answers from the cache); ``execute`` runs the
generated SQL; ``release`` logs the answer before it is returned. A public-only query skips the
private passes and runs regenerated SQL on the public connection.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace  # noqa: F401  (replace: tests patch states with pipeline.replace)
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np
from sqlglot import exp
from sqlglot.tokens import Token

from veil.engines.base import EngineError, check_key_type, output_type
from veil.errors import CopyNotReady, InternalError, QueryCancelled, QueryFailed, QueryTooComplex, ValueTooLarge, VeilError
from veil.proxy import join_order, multiplicity, plan_cache
from veil.proxy.add_noise import AheadFuture, draw_ahead, noised, take_ahead
from veil.proxy.bounds import mark_arithmetic_that_cannot_raise
from veil.proxy.canonical import cache_key, canonical_sql
from veil.proxy.catalog import SQL_TYPES, Catalog, public_types
from veil.proxy.expansion import largest_held, measure, text_work
from veil.proxy.parse import parse, parse_tokens, scan
from veil.proxy.plan import QueryPlan, plan
from veil.proxy.postprocess import PostProcess, postprocess_sql
from veil.proxy.range_lineage import check_range_lineage
from veil.proxy.resolve import Resolved, resolve
from veil.proxy.rewrite import EngineQueries, check_generated_size, public_query, rewrite
from veil.proxy.totality import CANNOT_RAISE
from veil.proxy.validate import Analysis, validate
from veil.store.ledger import Cost, Reservation
from veil.store.releases import LoggedStatistics

if TYPE_CHECKING:
    from veil.proxy.answer import Answer
    from veil.proxy.session import Env

__all__ = ["PASSES", "QueryState", "RawResult", "Rendered", "run"]

log = logging.getLogger("veil.query")


@dataclass(frozen=True)
class RawResult:
    """Exact statistics per group, as the engine computed them (never leaves the process)."""

    groups: list[tuple[Any, ...]]
    raw: dict[int, np.ndarray]
    grids: dict[int, list[dict[int, int]]]  # grid statistic → per group, its sparse histogram cells {bin: rows}
    key_types: list[str]


@dataclass(frozen=True)
class Rendered:
    """The generated statements as the engine's SQL text, rendered once (prepare binds, execute runs them)."""

    main: str | None
    grids: tuple[tuple[int, str], ...]  # (statistic id, histogram query)

    def statements(self) -> list[str]:
        """Every statement to run, each once."""
        out = [self.main] if self.main is not None else []
        for _sid, sql in self.grids:
            if sql not in out:
                out.append(sql)
        return out


@dataclass(frozen=True)
class QueryState:
    """Everything known about one query so far; each pass fills in its part."""

    sql: str
    epsilon: Fraction
    tree: exp.Select | None = None
    resolved: Resolved | None = None
    analysis: Analysis | None = None
    plan: QueryPlan | None = None
    queries: EngineQueries | None = None
    rendered: Rendered | None = None  # ``queries`` in the engine's dialect
    public_sql: str | None = None  # public-only query, rendered for the public connection
    post: PostProcess | None = None
    domain: list[tuple[Any, ...]] | None = None
    #: derived public sources evaluated once (temporary tables of the query's cursor, see multiplicity): set by plan
    materialised: tuple[multiplicity.Materialised, ...] = ()
    #: the reader generation the plan was made on (read before its first measure of public data; set by plan, or by a
    #: plan cache hit): the charged run reads that reader or none (``Env.plan_current``)
    generation: int | None = None
    key_types: list[str] = field(default_factory=list)
    bind_on_run: bool = False  # the one statement binds when it runs (see _prepare); set by prepare
    canonical: str = ""
    key: str = ""
    reservation: Reservation | None = None
    #: the integer noise of this one query, drawn in a worker while the engine runs it (add_noise.draw_ahead): set
    #: by execute, used once by noise; never part of a plan cache entry (entries are made at prepare)
    ahead: AheadFuture | None = None
    raw: RawResult | None = None
    noisy: dict[int, np.ndarray] | None = None
    withheld: int = 0  # groups over the threshold withheld by the cap on released values (see add_noise.noised)
    answer: Answer | None = None  # set by the cache (reserve), a public query (execute) or postprocess
    statistics: LoggedStatistics | None = None  # what the release logs beside the answer (set by postprocess)
    release_id: str | None = None

    @property
    def public(self) -> bool:
        return self.analysis is not None and self.analysis.private_table is None

    @property
    def done(self) -> bool:
        """Answered already (from the cache, or a public query): the later passes have nothing to do."""
        return self.answer is not None and (self.reservation is None or self.release_id is not None)


Pass = Callable[[QueryState, "Env"], QueryState]

_STATE_FIELDS = frozenset(f.name for f in fields(QueryState))


def _with(s: QueryState, **changes: Any) -> QueryState:
    """``dataclasses.replace(s, **changes)`` without its cost (~7 µs a call for QueryState's 28 fields, ten calls per
    query; this is ~0.7 µs): the same fields, ``changes`` set, everything else shared with ``s``. Valid because
    QueryState has no ``__post_init__``, no ``InitVar`` and no field that ``__init__`` derives (tests/proxy/
    test_pipeline_state.py compares it with ``dataclasses.replace``)."""
    unknown = changes.keys() - _STATE_FIELDS
    if unknown:
        raise TypeError(f"QueryState has no field {sorted(unknown)[0]!r}")
    new = object.__new__(QueryState)
    new.__dict__.update(s.__dict__)
    new.__dict__.update(changes)
    return new


def _parse(s: QueryState, env: Env) -> QueryState:
    return _with(s, tree=parse(s.sql, limits=env.limits))


def _parsing(tokens: list[Token]) -> Pass:
    """The parse pass of a query whose text :func:`~veil.proxy.parse.scan` checked and tokenised already."""
    return lambda s, env: _with(s, tree=parse_tokens(s.sql, tokens, limits=env.limits))


def _raising(exc: Exception) -> Pass:
    """The parse pass of a query whose :func:`~veil.proxy.parse.scan` raised ``exc`` (not scanned again)."""

    def refuse(s: QueryState, env: Env) -> QueryState:
        raise exc

    return refuse


def _resolve(s: QueryState, env: Env) -> QueryState:
    if s.tree is None:
        raise InternalError("resolve before parse")
    # every spelling a table name may resolve to (unquoted names fold to lower case in resolve)
    env.sync_public({n for t in s.tree.find_all(exp.Table) for n in (t.name, t.name.lower())})
    return _with(s, resolved=env.with_catalog(lambda cat: resolve(s.tree, cat, sql=s.sql)))


def _validate(s: QueryState, env: Env) -> QueryState:
    if s.resolved is None:
        raise InternalError("validate before resolve")
    analysis = validate(s.resolved, env.catalog())
    if analysis.private_table is not None:
        join_order.check_relations(analysis.tree)  # the private rows stay off every build side (join_order)
        check_range_lineage(analysis.tree, env.catalog())  # no range join over private rows, through any scope
    return _with(s, analysis=analysis)


def _plan(s: QueryState, env: Env) -> QueryState:
    a = s.analysis
    if a is None:
        raise InternalError("plan before validate")
    if a.private_table is None:
        return s
    generation = env.reader_generation()
    catalog = env.catalog()
    factor = 1
    probes = multiplicity.probes(a, catalog, materialise=env.materialises, column_bytes=env.column_text_bytes)
    for probe in probes:
        factor *= env.probe(probe)
    materialised = tuple({p.materialised.name: p.materialised for p in probes if p.materialised is not None}.values())
    multiplicity.check_factor(factor, a.text_bytes)
    c = env.contribution(a.private_table) * factor
    # arithmetic the declared bounds keep from overflowing is not priced as raising (see _rewrite); marked before
    # the plan copies the analyst's expressions into its statistics
    mark_arithmetic_that_cannot_raise(a.tree, catalog, CANNOT_RAISE)
    p = plan(a, catalog, epsilon=s.epsilon, contribution=c, partition_delta=env.policy.defaults.partition_delta)
    check_generated_size(p, public_types(catalog, a.tables))
    multiplicity.check_grouped_contribution(p.contribution, len(p.keys), len(p.statistics))
    # every engine statement (the main one, one per quantile grid) repeats the per-row work over one person's rows
    grids = sum(1 for st in p.statistics if st.kind == "grid")
    passes = max(1, grids + (1 if grids < len(p.statistics) else 0))
    multiplicity.check_person_work(c * passes, a.expanded, text_work(a.tree, env.column_text_bytes))
    is_public = lambda t: t in catalog.tables and catalog.tables[t].public  # noqa: E731
    value_bytes, join_row = largest_held(a.tree, env.column_text_bytes, is_public)  # one walk for both caps
    multiplicity.check_value_bytes(value_bytes)
    multiplicity.check_join_row(*join_row)
    return _with(s, plan=p, materialised=materialised, generation=generation)


#: Most rows a public answer may have (red team s27 A15). A public query is free, and its answer is built in the
#: server's memory before the first row is sent (about 0.5 kB per row of a few short columns, measured on the
#: wire server): the engine runs it with ``LIMIT MAX_PUBLIC_ROWS + 1``, and one row more than this refuses it
#: (54000), so a cross join of public tables never materialises more than this many rows.
MAX_PUBLIC_ROWS = 100_000
#: Most values (rows × columns) a public answer may hold: a 600-column cross join under the row bound held 6·10⁷
#: values and took the process from 230 MB to 3.5 GB (red team s28 A3); a value costs ~0.15 kB.
MAX_PUBLIC_VALUES = 1_000_000


def public_row_bound(tree: exp.Expression) -> int:
    """The most rows the public answer of ``tree`` may have: MAX_PUBLIC_ROWS, fewer for wide answers."""
    return min(MAX_PUBLIC_ROWS, MAX_PUBLIC_VALUES // max(1, len(tree.selects)))


def bounded_public(tree: exp.Select, rows: int | None = None) -> exp.Select:
    """``tree`` that returns at most ``rows`` rows: its own ``LIMIT`` when that is a number up to ``rows``, else
    ``LIMIT rows`` (added, or around it as a subquery when it has another limit); by default one row more than
    :func:`public_row_bound`."""
    if rows is None:
        rows = public_row_bound(tree) + 1
    limit = tree.args.get("limit")
    if limit is None:
        return tree.limit(rows)
    if isinstance(limit, exp.Limit) and isinstance(limit.expression, exp.Literal) and not limit.expression.is_string:
        text = limit.expression.name
        if text.isdigit() and int(text) <= rows:
            return tree
    return exp.select("*").from_(tree.subquery("veil_public_answer")).limit(rows)


def _check_public_rows(count: int, columns: int) -> None:
    bound = min(MAX_PUBLIC_ROWS, MAX_PUBLIC_VALUES // max(1, columns))
    if count > bound:
        raise ValueTooLarge(
            f"the answer of this public query has more than {bound:,} rows of {columns} columns; Veil answers at "
            f"most {MAX_PUBLIC_ROWS:,} rows and {MAX_PUBLIC_VALUES:,} values",
            hint="Aggregate it, select fewer columns, narrow it with WHERE, or add LIMIT (and OFFSET to page through it)",
        )


def _rewrite(s: QueryState, env: Env) -> QueryState:
    if s.analysis is None:
        raise InternalError("rewrite before validate")
    if s.plan is None:
        return _with(s, public_sql=env.public_engine.render(bounded_public(public_query(s.analysis.tree))))
    table = s.plan.analysis.private_table or ""
    source, grids = env.bounded_copy(table)
    if not env.plan_current(s.generation, s.materialised):
        # building the bounded copy (a curator write: this query's own first one, or another session's) reopened the
        # reader, and the cursor holding this query's materialised public sources went with it: plan again, once,
        # on the new reader (public tables measured, sources evaluated again), and find the copy there
        s = _plan(s, env)
        source, grids = env.bounded_copy(table)
    p = s.plan
    if p is None:
        raise InternalError("a private query planned again without a plan")
    _check_current(s, env)
    queries = rewrite(p, source, public_types(env.catalog(), p.analysis.tables), grids)
    for tree in (queries.main, *(g for _, g in queries.grids)):
        if tree is not None:  # each statement joins the rows the probes counted, never a run of its own
            multiplicity.read_materialised(tree, s.materialised)
            join_order.private_first(tree, source)  # the private rows on the probe side of every join
    check_raising_work(p, queries)
    render = env.engine.render
    rendered = Rendered(
        None if queries.main is None else render(queries.main), tuple((sid, render(g)) for sid, g in queries.grids)
    )
    return _with(s, queries=queries, rendered=rendered, post=postprocess_sql(p))


def _check_current(s: QueryState, env: Env) -> None:
    """Refuse, free, a query planned on another reader than the engine's now (a curator write in this process
    reopened it since): its statements would read a bounded copy, public rows or materialised public sources it was
    not planned on, or tables no longer there (:meth:`Env.check_plan_current`)."""
    env.check_plan_current(s.generation, s.materialised)


def check_raising_work(p: QueryPlan, queries: EngineQueries) -> None:
    """Every operation of the generated statements that may raise (under a TRY, a cast to DECIMAL), priced as
    raising on every row one person brings: refused, free, past the per-person bound."""
    sizes = [measure(t) for t in (queries.main, *(g for _, g in queries.grids)) if t is not None]
    multiplicity.check_raising_work(p.contribution, sum(m.partial for m in sizes), sum(m.casts for m in sizes))


def _schema_key_types(p: QueryPlan, catalog: Catalog) -> list[str] | None:
    """Each group key's engine type read off the catalog, or None unless every key is a bare column of a
    base table named in the outermost FROM (not a CTE): the bounded copy and the public tables' reads hold
    exactly their catalog types, so binding would report the same (``Env.run`` checks it did)."""
    tree = p.analysis.tree
    with_ = tree.args.get("with_")
    ctes = {c.alias_or_name for c in (with_.expressions if isinstance(with_, exp.With) else [])}
    sources: dict[str, str] = {}
    first = tree.args.get("from_")
    for src in [first.this if isinstance(first, exp.From) else None, *(j.this for j in tree.args.get("joins") or [])]:
        if isinstance(src, exp.Table) and src.name not in ctes and not src.args.get("db"):
            sources[src.alias_or_name] = src.name
    types = []
    for k in p.keys:
        table = catalog.tables.get(sources.get(k.expr.table, "")) if isinstance(k.expr, exp.Column) else None
        veil_type = None if table is None else table.columns.get(k.expr.name)
        if veil_type is None:
            return None
        types.append(SQL_TYPES[veil_type])
    return types


#: Digests of statement texts known to bind that one session remembers (``Env.bound_statements``; ~100 bytes each).
MAX_BOUND_STATEMENTS = 1024


def _prepare(s: QueryState, env: Env) -> QueryState:
    """Bind the generated statements (reads no data) and list public group domains: refusals stay free.

    A public-only query charges nothing, so it binds when it runs. Every private query binds here, before its
    reservation: the reservation is the commit point, and nothing after it refunds a charge in a way the analyst can
    cause (red team s75 F1: a query that bound only when it ran was reserved, then refunded when it failed to bind,
    so whether a shared cap could hold its ε — VB001, or the bind failure — was a free, exact oracle on what the other
    analysts had spent). A plan cache hit skips this pass: its shape bound when it was planned, and the literals a
    hit puts in (numbers compared with number columns, texts with category columns) bind as the first query's did.
    A query of one statement whose group keys, if any, are bare columns of base tables (the common COUNT/SUM/AVG,
    GROUP BY a declared column) takes its keys' types from the catalog (``bind_on_run``: the run checks the types
    it ran with); others take them from the bound statement (they shape the post-processing). The former bind once
    per statement text under one catalog (``Env.bound_statements``, emptied with the plan cache): a query sent again
    with another ε costs no second round trip (~0.5-0.8 ms).
    """
    if s.plan is None:
        if s.public_sql is None:
            raise InternalError("prepare without a query")
        return s
    if s.rendered is None or s.post is None:
        raise InternalError("prepare before rewrite")
    statements = s.rendered.statements()
    schema_types = _schema_key_types(s.plan, env.catalog()) if len(statements) == 1 else None
    bind_on_run = schema_types is not None
    key_types: list[str] = [output_type(t) for t in schema_types or []]
    bound, digest = env.bound_statements, b""
    if bind_on_run:  # its key types are the catalog's: it need bind only once per statement text and catalog
        digest = hashlib.blake2b("\x00".join(statements).encode("utf-8", "surrogatepass"), digest_size=16).digest()
    for stmt in statements if digest not in bound else ():
        try:
            res = env.engine.describe(stmt)
        except EngineError:
            _check_current(s, env)  # a curator write took its bounded copy or public sources: "run it again"
            raise
        if not bind_on_run:
            for group_key, t in zip(s.plan.keys, res.types[: len(s.plan.keys)], strict=False):
                check_key_type(group_key.label, t)
            key_types = key_types or [output_type(t) for t in res.types[: len(s.plan.keys)]]
    if digest and digest not in bound:
        if len(bound) >= MAX_BOUND_STATEMENTS:
            bound.clear()
        bound.add(digest)
    domain = env.public_domain(s.plan) if s.plan.public_keys else None
    env.check_post(s.plan, s.post, key_types)
    canonical = canonical_sql(s.plan.analysis)
    key = cache_key_of(s, canonical, s.rendered, env)
    return _with(s, domain=domain, key_types=key_types, bind_on_run=bind_on_run, canonical=canonical, key=key)


def cache_key_of(s: QueryState, canonical: str, rendered: Rendered, env: Env) -> str:
    """The answer cache's key of a planned query: its canonical text, its statements and its ε.

    The statements name the bounded copy, whose name holds the table's data version and policy spec: an answer is
    reused only for the same data under the same policy (a reload asks the engine again). Public tables are named
    by name only: their data versions join the key (red team s36 A2: a rewritten public table's join got the old
    answer back, free)."""
    if s.plan is None:
        raise InternalError("a cache key without a plan")
    salt = env.cache_salt() + env.public_versions(s.plan.analysis)
    return cache_key("\x00".join((canonical + salt, *rendered.statements())), s.plan.epsilon)


def _reserve(s: QueryState, env: Env) -> QueryState:
    p = s.plan
    if p is None:
        return s
    cached = env.ledger.cached_answer(env.analyst, s.key)
    if cached is not None:
        return _with(s, answer=env.from_cache(cached))
    _check_current(s, env)  # the statements read the reader the plan was made on: it must still be the engine's
    accounts = env.accounts(p.analysis.private_table or "")
    reservation = env.ledger.reserve(
        Cost(p.cost, p.delta), accounts, actor=env.analyst, canonical_sql=s.canonical, cache_key=s.key
    )
    return _with(s, reservation=reservation)


def _execute(s: QueryState, env: Env) -> QueryState:
    if s.plan is None:
        if s.public_sql is None:
            raise InternalError("execute without a query")
        result = env.public_engine.execute(s.public_sql)  # at most MAX_PUBLIC_ROWS + 1 rows (bounded_public)
        _check_public_rows(len(result.rows), len(result.types))
        return _with(s, answer=env.public_answer(result))
    if s.queries is None or s.rendered is None or s.reservation is None:
        raise InternalError("execute before reserve")
    # the number of groups when the query and the policy fix it (a public domain, or no keys): the integer noise is
    # then drawn in a worker while the engine runs (which releases the GIL); a failed run drops it unused
    groups = len(s.domain) if s.domain is not None else (1 if not s.plan.keys else None)
    try:
        ahead = draw_ahead(s.plan, groups, env.noise)
    except Exception:  # drawing ahead only saves time: whatever fails here, the noise pass draws with the values
        log.warning("noise could not be drawn ahead; drawing it with the values", exc_info=True)
        ahead = None
    try:
        # every statement of the charged run reads one reader: no curator write in this process reopens it (drops the
        # bounded copy, rewrites a public table, takes the materialised sources' cursor) until the last one ends
        with env.pinned():
            _check_current(s, env)
            raw = env.run(s.plan, s.queries, s.rendered, s.domain, s.key_types, checked=not s.bind_on_run)
    except CopyNotReady:
        # a curator write between the reservation's check and the pin (review s18, s18b LOW-2: charged, then a catalog
        # error or a read of a copy the plan was not made on): nothing was read, so the charge is refunded. The only
        # refund after a reservation: its cause is a curator's write, never the analyst's query or ε (red team s75 F1)
        env.ledger.cancel(s.reservation)
        raise
    except EngineError as exc:
        # every statement bound before the reservation (_prepare): a failure now, a bind failure too, keeps the charge
        # (red team s75 F1: refunding it made whether the reservation fitted a shared cap a free oracle)
        if "cancelled" in exc.message:
            raise QueryCancelled(
                "the statement was cancelled (statement timeout or cancel request); nothing was released",
                hint="Its ε stays charged (whether a query finishes in time may depend on the data)",
            ) from None
        log.error("generated SQL failed after reservation %s: %s", s.reservation.id, exc.message)
        raise QueryFailed(
            "the query could not be answered; its ε stays charged and nothing was released",
            hint="This is a bug in Veil (generated SQL must not fail); please report it",
        ) from None
    return _with(s, raw=raw, ahead=ahead)


def _noise(s: QueryState, env: Env) -> QueryState:
    if s.plan is None or s.raw is None:
        raise InternalError("noise before execute")
    ahead = take_ahead(s.ahead) if len(s.raw.groups) == (len(s.domain) if s.domain is not None else 1) else None
    # the number of groups is fixed by the query and the policy (as for draw_ahead in _execute), whatever was drawn
    fixed = s.domain is not None or not s.plan.keys
    out = noised(s.plan, s.raw.raw, s.raw.grids, env.noise, ahead, fixed=fixed)
    return _with(s, noisy=out.values, withheld=out.withheld, ahead=None)


def _postprocess(s: QueryState, env: Env) -> QueryState:
    if s.plan is None or s.raw is None or s.noisy is None or s.post is None:
        raise InternalError("postprocess before noise")
    answer, stats = env.shape(s.plan, s.post, s.raw, s.noisy, s.withheld)
    return _with(s, answer=answer, statistics=stats)


def _release(s: QueryState, env: Env) -> QueryState:
    if s.plan is None or s.reservation is None or s.answer is None or s.statistics is None:
        raise InternalError("release before postprocess")
    release_id = env.release(s.reservation, s.plan, s.answer, s.statistics)
    return _with(s, release_id=release_id)


#: The passes, in the order the session runs them.
PASSES: tuple[tuple[str, Pass], ...] = (
    ("parse", _parse),
    ("resolve", _resolve),
    ("validate", _validate),
    ("plan", _plan),
    ("rewrite", _rewrite),
    ("prepare", _prepare),
    ("reserve", _reserve),
    ("execute", _execute),
    ("noise", _noise),
    ("postprocess", _postprocess),
    ("release", _release),
)

_NAMES = tuple(name for name, _ in PASSES)


#: The passes a plan cache hit skips (see :mod:`veil.proxy.plan_cache`).
PLANNING = ("resolve", "validate", "plan", "rewrite", "prepare")


def run(
    state: QueryState, env: Env, *, until: str = "release", cache: bool | None = None, after: str | None = None
) -> QueryState:
    """Run the passes in order up to and including ``until`` (stopping early once answered); with ``after``, only the
    passes after that one (``state`` went through it in an earlier call).

    With ``cache`` (by default: when answering, ``until="release"``) the query goes through the plan cache: a shape
    planned before skips the planning passes, and a new one is planned, probed and remembered
    (:mod:`veil.proxy.plan_cache`). ``describe`` asks for it; ``explain`` plans afresh."""
    if cache is None:
        cache = until == "release"
    if until not in _NAMES or (after is not None and after not in _NAMES):
        raise InternalError(f"unknown pass {until!r} or {after!r}; passes: {', '.join(_NAMES)}")
    with env.query_scope():  # the public sources this run materialises are dropped when it ends
        return _run(state, env, until=until, cache=cache, after=after)


def _run(state: QueryState, env: Env, *, until: str, cache: bool, after: str | None) -> QueryState:
    if after is not None and state.materialised:
        raise InternalError("a query that read materialised public sources was continued in another run")
    lifted: plan_cache.Lifted | None = None
    cached = False
    skipping = after is not None
    tokens: list[Token] | None = None  # the query's tokens, when the plan cache's front read them
    token_key: plan_cache.TokenKey | None = None  # their token shape (plan_cache.front_key)
    for name, fn in PASSES:
        if skipping:
            skipping = name != after
            continue
        if state.done:
            break
        if name == "parse" and cache and until != "parse":
            # the plan cache's front: a token shape seen before gives the query's shape without parsing it (every
            # check of the parse pass on the text and its tokens runs here: scan)
            front = None
            try:
                tokens = scan(state.sql, limits=env.limits)
            except Exception as exc:  # a refusal or a library error: the parse pass below reports it, as its own
                fn = _raising(exc) if fn is _parse else fn
            else:  # the parse pass parses these tokens (a query is tokenised once, red team s67 F3)
                fn = _parsing(tokens) if fn is _parse else fn
                try:
                    token_key = plan_cache.front_key(tokens)  # (before the parser reads the tokens)
                    front = plan_cache.front_lift(state.sql, tokens, env.plan_front, token_key)
                except Exception:  # the front's own failure: the query is parsed
                    log.debug("the plan cache's front failed on a query", exc_info=True)
            if front is not None:
                planned = _cache_hit(state, env, front)
                if planned is not None:
                    state, cached = planned, True
                    continue
        if name == "resolve" and cache and not cached:
            lifted = plan_cache.lift(state.tree, env.policy, state.sql)
            if lifted is not None:
                planned = _cache_hit(state, env, lifted)
                if planned is not None:
                    state, cached = planned, True
                    if tokens is not None and token_key is not None:  # its shape was planned: the front may keep it
                        _remember_tokens(state, env, tokens, token_key, lifted)
                else:
                    plan_cache.tag(lifted)
        if cached and name in PLANNING:
            if name == until:
                break
            continue
        try:
            state = _after_durable_charge(fn, state, env)
        except RecursionError:
            # sqlglot walks trees recursively: a chain of hundreds of operators in a row exhausts the stack.
            # The passes that can meet one (planning, generation) run before the reservation, and the depth
            # depends on the query's shape alone
            if state.reservation is not None:
                raise _charged_failure(name, state) from None
            raise QueryTooComplex(
                f"the query is nested too deeply for the {name} pass",
                hint="Split long chains of operators (e.g. hundreds of ||, + or AND in a row)",
            ) from None
        except VeilError:
            raise
        except Exception as exc:
            # a library's own error (sqlglot's scope analysis, an overflow in its arithmetic) before the reservation:
            # a bug in Veil, refused typed and free; its text is not repeated, as it may quote what a pass read (red
            # team s49: each such crash found so far was a class of query the passes should refuse). The reserve
            # pass itself may have committed a charge before raising, so its errors pass through unchanged
            if name == "reserve":
                raise
            if state.reservation is not None:
                raise _charged_failure(name, state) from None
            log.error("the %s pass failed on a query before its reservation", name, exc_info=True)
            raise InternalError(
                f"Veil could not answer this query: its {name} pass failed ({type(exc).__name__}); nothing was charged",
                hint="This is a bug in Veil, please report it with the query; rewriting the query may avoid it",
            ) from None
        if name == "prepare" and lifted is not None and state.plan is not None:
            _remember(state, env, lifted)
            if tokens is not None and token_key is not None:
                # only a query planned in full: a refused one (free) leaves nothing in the front (red team s67 F1)
                _remember_tokens(state, env, tokens, token_key, lifted)
        if name == until:
            break
    return state


def _charged_failure(name: str, state: QueryState) -> QueryFailed:
    """The typed error of a library's own error in a pass after the reservation (red team s67 F4: a raw
    ``RuntimeError`` left a charged query): the charge stays (the run may have read the data; it is on disk already,
    :func:`_after_durable_charge`) and nothing is released, as for generated SQL that fails."""
    reservation = state.reservation.id if state.reservation is not None else "?"
    log.error("the %s pass failed after reservation %s", name, reservation, exc_info=True)
    return QueryFailed(
        f"the query could not be answered: its {name} pass failed; its ε stays charged and nothing was released",
        hint="This is a bug in Veil, please report it with the query",
    )


def _cache_hit(state: QueryState, env: Env, lifted: plan_cache.Lifted) -> QueryState | None:
    """``state`` planned from the plan cache's entry for ``lifted``'s shape, or None (no entry, or it does not serve)."""
    found = env.plan_cache.get(plan_cache.key(lifted, state))
    generation = env.reader_generation()  # read before the hit finds the bounded copy
    planned = None if found is None else plan_cache.hit(found, state, lifted, env)
    # the reader the hit's bounded copy was found on (a write since is refused free, _reserve)
    return None if planned is None else _with(planned, generation=generation)


def _remember_tokens(
    state: QueryState, env: Env, tokens: list[Token], key: plan_cache.TokenKey, lifted: plan_cache.Lifted
) -> None:
    """Remember the token shape ``key`` of ``state`` (parsed, lifted as ``lifted`` and planned) in the plan cache's
    front, once per token shape (None: its probe disagreed). Best effort, as :func:`_remember`."""
    if key in env.plan_front:
        return
    try:
        entry = plan_cache.front_entry(state.sql, tokens, lifted, env.policy, env.limits, key)
    except Exception:
        log.debug("the plan cache's front did not keep a token shape", exc_info=True)
        entry = None
    plan_cache.remember(env.plan_front, key, entry, plan_cache.front_bytes(entry))


def _after_durable_charge(fn: Pass, state: QueryState, env: Env) -> QueryState:
    """Run one pass; if it raises once the query is charged and before its answer is logged, the error leaves only
    after the charge is on disk, as an answer does (:meth:`~veil.store.ledger.Ledger.release` waits for it): an engine
    failure, a cancel or a refused post-processing is an outcome the charge pays for, and a power loss must not lose
    the charge of an outcome the analyst saw (red team s41 A1). A failed sync raises ``ReleaseError`` instead."""
    try:
        return fn(state, env)
    except BaseException:
        if state.reservation is not None and state.release_id is None:
            env.ledger.wait_durable(state.reservation)
        raise


def _plan_again(state: QueryState, env: Env) -> QueryState:
    for name, fn in PASSES:
        if name in PLANNING:
            state = fn(state, env)
    return state


def _remember(state: QueryState, env: Env, lifted: plan_cache.Lifted) -> None:
    """Remember ``state``'s shape if its probe agrees. Best effort: whatever goes wrong here only leaves the shape
    uncached, never touches the query being answered."""
    try:
        entry = plan_cache.probed(state, env, lifted, lambda s: _plan_again(s, env))
    except QueryCancelled:
        raise
    except Exception:  # a cache fill that fails caches nothing
        log.debug("the plan cache did not keep a shape", exc_info=True)
        return
    if entry is None:
        return
    plan_cache.remember(env.plan_cache, plan_cache.key(lifted, state), entry, plan_cache.entry_bytes(entry))
