"""The plan cache: a query that differs from an earlier one only in the literals it compares columns with reuses
that query's plan and generated statements, with its own literals put in.

Planning a private query (resolve → validate → plan → rewrite → prepare) is pure Python over the query's tree and
costs about 5–7 ms, several times what DuckDB needs to answer a ``COUNT(*)`` over a million rows. Dashboards and
notebooks send the same query with another bound again and again (``… WHERE income >= 5000``, ``>= 6000``).

Only literals whose value no check reads are lifted out of the shape, which keeps the cache sound by construction:

* the query reads one table (no join, subquery, CTE or set operation) and has a ``WHERE``;
* a lifted literal is one side of a comparison (``= <> < <= > >=``) whose other side is a bare column of that
  table, reached from the top of the ``WHERE`` through ``AND``/``OR``/``NOT``/parentheses only;
* a number (up to 15 digits, optionally a point and up to 15 more: no exponent, no sign — a minus sign is an
  operator and stays in the shape) compared with an ``int`` or ``float`` column, or a text of printable
  characters compared with a ``category`` column, neither column with declared ``values``;
* each lifted literal's kind and form are part of the shape: a text's exact length (the text work one row can
  cause, a category's cut length), a number's digits-and-point pattern (``999`` and ``9.9`` are two shapes: a
  fraction is compared as a DOUBLE, red team s39 A1) and, for a number compared with a bounded real column in a
  form the rewrite may read on the column's pre-scaled grid (``c >= v``, ``c < v``, ``v <= c``, ``v > c``), whether
  ``v`` lies on that grid (``v·2^k`` an integer within ±2^62: :func:`veil.proxy.fixed_point.literal_on_grid`);
  every other literal stays in it.

A lifted literal on the grid is compared on the grid column (``c >= v`` read as ``g >= v·2^k``:
:func:`veil.proxy.rewrite._compare_on_grid`), so its statements are not those of a literal off it: the two are two
shapes, and each entry also records which of its literals the rewrite put on a grid (filled as ``v·2^k`` of the
query's own value) and which it left off one (:data:`veil.proxy.rewrite.GRID_LEFT`); a hit whose literal is not on
the same side of its grid misses (session 19: a shape kept for ``f >= 0.3`` filled ``f >= 0.5`` into statements
comparing ``f`` where planning afresh compares its grid column).

Every other check runs on the first query of a shape, and the entry is only kept after a second, full
planning of the same shape with other literals of the same kinds and lengths (the *probe*) gave the same plan,
cost, post-processing, group domain, key types and — with each literal put in — the very same statements and
canonical text. A shape the probe disagrees with is never cached. The cache lives in the session's
:class:`~veil.proxy.session.Env` and is emptied whenever its catalog is (a policy edit, a curator's table write, a
publication or retraction); each hit also asks for the table's bounded copy again, so a new data version
misses. ``describe`` (a wire client's Describe before each statement) goes through the cache too; ``explain``
always plans afresh.

What a hit skips is only the planning: the reservation, the run, the noise, the post-processing and the release log
are those of every query. The parse pass is skipped too when the cache's *front* knows the query's token shape
(:func:`front_lift`): every check the parse pass makes on the text and its tokens still runs (:func:`veil.proxy.parse.
scan`); only sqlglot's parsing of the tokens, the checks on its tree and :func:`lift` are skipped. The front maps a
digest of the query's token stream — each number and text token replaced by its form (its digits-and-point pattern,
its length), every other token exact, with its comments and whether it touches the one before — to the shape
:func:`lift` gave a query of that token stream, and the token positions of the lifted literals. A hit requires every
other number and text token to be exactly the first query's (a digest of their positions and values), each lifted
token to be spelled as its value alone (a number's digits, a text in quotes without escapes), to be one :func:`lift`
takes, and on the same side of its grid; sqlglot's parser makes a literal node of such a token without reading its
value, so the tree is the first query's with these values, and :func:`lift` would give the same shape and these
literals. A front entry is kept only after a probe query (the first one's text with each lifted token replaced by
:func:`probe_values`) parsed and lifted in full gave that shape and the probe values back at the recorded positions
(``tests/proxy/test_plan_cache_front.py``), and only for a query planned in full (a refused one, free, leaves
nothing). A query the front does not answer is tokenised once: the parse pass parses the tokens ``scan`` gave (red
team s67 F3).

Both maps are :class:`Budgeted`: each holds at most :data:`CACHE_BYTES` / :data:`FRONT_BYTES` (an entry's size
measured when it is kept, :func:`deep_size`), forgetting the least recently used first (red team s67 F1/F2: free
Describes filled 64 entries of ~2 MiB each).
"""

from __future__ import annotations

import hashlib
import re
import secrets
import sys
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from fractions import Fraction
from types import BuiltinFunctionType, FunctionType, MethodType, ModuleType
from typing import TYPE_CHECKING, Any

from sqlglot import exp
from sqlglot.tokens import Token, TokenType

from veil.engines.duckdb import DuckDBEngine
from veil.engines.neutral import copy_tree, duckdb_text
from veil.errors import VeilError
from veil.proxy import fixed_point
from veil.proxy.bounding import grid_columns
from veil.proxy.canonical import canonical_sql
from veil.proxy.parse import Limits, parse_tokens, scan
from veil.proxy.rewrite import GRID_LEFT, GRID_LITERAL, grid_operands

if TYPE_CHECKING:
    from veil.policy import Policy
    from veil.proxy.pipeline import QueryState, Rendered
    from veil.proxy.postprocess import PostProcess
    from veil.proxy.session import Env

__all__ = [
    "CACHE_BYTES",
    "FRONT_BYTES",
    "MAX_ENTRIES",
    "MAX_SQL",
    "PARAM",
    "Budgeted",
    "Entry",
    "Front",
    "Lifted",
    "TokenKey",
    "build",
    "entry_bytes",
    "front_bytes",
    "front_entry",
    "front_key",
    "front_lift",
    "hit",
    "key",
    "lift",
    "probe_values",
    "probed",
    "remember",
    "same_plan",
    "tag",
]

#: Meta key marking a lifted literal (its index): copies of the tree keep it, so the generated statements' copies
#: of that literal are found again.
PARAM = "veil_param"
#: Entries one session's plan cache and its front each keep at most, and the longest query text the cache takes.
MAX_ENTRIES = 64
MAX_SQL = 4096
#: The bytes one session's plan cache and its front may hold, as :func:`entry_bytes` and :func:`front_bytes` estimate
#: them (:class:`Budgeted`: least recently used entries go first; an entry larger than the whole budget is not kept).
#: A ``veil serve`` connection holds its own session, so its caches hold at most CACHE_BYTES + FRONT_BYTES (7 MiB),
#: whatever its queries: a plan cache entry holds the planned trees (~1 KiB per node: a 4 KB query of ~2,000 tokens
#: holds ~2 MiB, a one-line query ~100 KiB), a front entry the query's shape and a few numbers (red team s67 F1/F2:
#: before, 64 entries of up to 2 MiB and 64 front entries of up to 300 KiB each, filled by free Describes).
CACHE_BYTES = 6 << 20
FRONT_BYTES = 1 << 20
_NUMBER = re.compile(r"[0-9]{1,15}(?:\.[0-9]{1,15})?")
_TEXT_MAX = 64
_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)
_NESTED = (exp.Subquery, exp.Select, exp.Union, exp.Intersect, exp.Except, exp.Join, exp.Lateral, exp.Values)


@dataclass(frozen=True)
class Lifted:
    """A query's shape (its text with each lifted literal's value left out) and the lifted literals, in order."""

    shape: str
    literals: tuple[exp.Literal, ...]
    #: per lifted literal, the exponent k of the grid whose side it is on is part of the shape (None: no such grid)
    grids: tuple[int | None, ...] = ()


@dataclass(frozen=True)
class Entry:
    """A planned shape: the state after ``prepare`` of its first query, and its texts with a marker per literal."""

    state: QueryState
    table: str
    source: str  # the bounded copy the statements read
    markers: tuple[str, ...]  # per lifted literal, the text standing for it in the templates below
    main: str | None
    grids: tuple[tuple[int, str], ...]
    canonical: str
    # (lifted literal, k) of each literal the statements compare on a grid of 2**-k (veil.proxy.rewrite.GRID_LITERAL)
    on_grid: tuple[tuple[int, int], ...] = ()
    # (lifted literal, k) of each literal the rewrite left off a grid of 2**-k (veil.proxy.rewrite.GRID_LEFT)
    off_grid: tuple[tuple[int, int], ...] = ()


class Budgeted(OrderedDict[Any, Any]):
    """A mapping that holds at most ``budget`` bytes (each entry's size as told to :meth:`keep`) and ``entries``
    entries, forgetting the least recently used (kept or found by :meth:`get`) first."""

    def __init__(self, budget: int, entries: int = MAX_ENTRIES) -> None:
        super().__init__()
        self.budget, self.entries, self.held = budget, entries, 0
        self._sizes: dict[Any, int] = {}
        #: asked before a new entry is kept: whether ``size`` more bytes fit what its owner may hold (``veil serve``:
        #: the analyst's held-bytes budget, red team s75 F4); None: only ``budget`` bounds it
        self.room: Callable[[int], bool] | None = None

    def keep(self, key: Any, value: Any, size: int) -> bool:
        """Keep ``value`` under ``key`` (``size`` bytes), forgetting the least recently used entries it needs room
        for; False (nothing kept, nothing forgotten) when it is larger than the whole budget, or its owner has no
        room for it (:attr:`room`)."""
        if size > self.budget or (self.room is not None and not self.room(size)):
            return False
        self.forget(key)
        while self and (len(self) >= self.entries or self.held + size > self.budget):
            self.forget(next(iter(self)))
        super().__setitem__(key, value)
        self._sizes[key] = size
        self.held += size
        return True

    def forget(self, key: Any) -> None:
        if key in self:
            super().__delitem__(key)
            self.held -= self._sizes.pop(key, 0)

    def __setitem__(self, key: Any, value: Any) -> None:  # (only through keep: every entry's size is known)
        raise TypeError("a Budgeted mapping keeps entries through keep(key, value, size)")

    def __delitem__(self, key: Any) -> None:
        self.forget(key)

    def get(self, key: Any, default: Any = None) -> Any:
        if key not in self:
            return default
        self.move_to_end(key)
        return super().__getitem__(key)

    def clear(self) -> None:
        super().clear()
        self._sizes.clear()
        self.held = 0


def remember(cache: Any, key: Any, value: Any, size: int) -> None:
    """Keep ``value`` in ``cache`` (a :class:`Budgeted`, or any mapping: a test's, emptied when it has
    :data:`MAX_ENTRIES`)."""
    if isinstance(cache, Budgeted):
        cache.keep(key, value, size)
        return
    if len(cache) >= MAX_ENTRIES:
        cache.clear()
    cache[key] = value


#: Objects :func:`deep_size` does not count or enter: shared by every entry, or by the whole process.
_SHARED = (type, ModuleType, FunctionType, BuiltinFunctionType, MethodType, Enum)


def deep_size(root: object, limit: int) -> int:
    """The bytes ``root`` and every object it reaches hold (``sys.getsizeof`` of each, once: attributes, slots, the
    items of dicts, lists, tuples and sets, a syntax node's arguments, comments, meta and type), without classes,
    functions, modules or enum members; stops counting past
    ``limit`` (its result is then more than ``limit``). Linear in the objects it reaches, a small part of the planning
    that made them (a 4 KB query's plan cache entry: ~40,000 objects, ~30 ms, against ~1 s of planning and probe)."""
    seen: set[int] = set()
    stack = [root]
    total = 0
    while stack and total <= limit:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, _SHARED):
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        if isinstance(obj, str | bytes | int | float | bool | Fraction) or obj is None:
            continue
        if isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, list | tuple | set | frozenset):
            stack.extend(obj)
        elif isinstance(obj, exp.Expression):  # (compiled: no __dict__ or __slots__ to read; its parent is reached)
            stack.extend((obj.args, obj.comments, obj._meta, obj._type))
        else:
            attributes = getattr(obj, "__dict__", None)
            if attributes is not None:
                stack.append(attributes)
            for cls in type(obj).__mro__:
                for name in getattr(cls, "__slots__", ()):
                    value = getattr(obj, name, None)
                    if value is not None:
                        stack.append(value)
    return total


def entry_bytes(entry: Entry, limit: int = CACHE_BYTES) -> int:
    """The bytes ``entry`` holds (:func:`deep_size`, and an eighth more: ``sys.getsizeof`` leaves out the allocator's
    rounding, measured at ~5% against tracemalloc's figure for entries of 30 KiB to 3 MiB; more than ``limit`` when it
    holds more than that)."""
    return deep_size(entry, limit) * 9 // 8


def _text(value: str) -> bool:
    """A text the cache lifts: short, printable and ASCII, so its length in characters (its shape's form, the
    category's cut) is also its length in UTF-8 bytes (the text work and expanded size the plan pass prices), and the
    probe's ``x``/``y`` keep both (red team s56 C1: a 64-character ``é`` text shared the shape of 64 ``x``, and a
    cache hit skipped the byte bound that planning afresh refused)."""
    return len(value) <= _TEXT_MAX and value.isascii() and value.isprintable()


def _column_spec(column: exp.Column, table: exp.Table, policy: Policy) -> tuple[Any, Any]:
    """The column's spec and its table's, or Nones (another table's column, a public table's)."""
    if column.table not in ("", table.alias_or_name) or not isinstance(column.this, exp.Identifier):
        return None, None
    name = column.this.name if column.this.args.get("quoted") else column.this.name.lower()
    spec = policy.tables.get(table.name)
    return (None, None) if spec is None or spec.public else (spec.columns.get(name), spec)


def _grid_exponent(node: exp.Expression, column: exp.Column, literal: exp.Literal, spec: Any, table: Any) -> int | None:
    """The exponent k of the grid a lifted number's side of is part of its shape: None unless ``node`` compares it
    with a bounded real column in a form the rewrite may read on the column's pre-scaled grid
    (:func:`veil.proxy.rewrite.grid_operands`). The rewrite's statements differ between a literal on the grid and
    one off it, so they are two shapes (and the entry's hit check holds whatever this says: :func:`_grid_values`)."""
    operands = grid_operands(node)
    if operands is None or operands[0] is not column or operands[1] is not literal:
        return None
    grid = grid_columns(table).get(spec.name)
    return None if grid is None else grid.exponent


def _grid_class(value: str, k: int | None) -> str:
    """A number's grid class in its shape: "" (no grid), "g" (on the grid of ``2**-k``), "r" (off it)."""
    if k is None:
        return ""
    return "r" if fixed_point.literal_on_grid(value, k) is None else "g"


def _collect(
    node: exp.Expression, table: exp.Table, policy: Policy, aliases: set[str], out: list[tuple[exp.Literal, int | None]]
) -> None:
    if isinstance(node, exp.And | exp.Or):
        _collect(node.this, table, policy, aliases, out)
        _collect(node.expression, table, policy, aliases, out)
    elif isinstance(node, exp.Not | exp.Paren):
        _collect(node.this, table, policy, aliases, out)
    elif isinstance(node, _COMPARISONS):
        left, right = node.this, node.expression
        column, literal = (left, right) if isinstance(left, exp.Column) else (right, left)
        if not isinstance(column, exp.Column) or not isinstance(literal, exp.Literal) or column.name.lower() in aliases:
            return  # (a name the select list also gives an expression may be read as that expression)
        spec, table_spec = _column_spec(column, table, policy)
        if spec is None or spec.values is not None:
            return
        value = str(literal.this)
        if literal.is_string and spec.type == "category" and _text(value):
            out.append((literal, None))
        elif not literal.is_string and spec.type in ("int", "float") and _NUMBER.fullmatch(value):
            out.append((literal, _grid_exponent(node, column, literal, spec, table_spec)))


def lift(tree: exp.Expression | None, policy: Policy, sql: str = "") -> Lifted | None:
    """The shape of ``tree`` (parsed from ``sql``) and its lifted literals; None when the query is not one the cache
    takes."""
    if len(sql) > MAX_SQL or "\x00" in sql:  # (no literal may spell a shape's marker, which holds NUL)
        return None
    if not isinstance(tree, exp.Select) or tree.args.get("with_") or tree.args.get("joins"):
        return None
    first = tree.args.get("from_")
    table = first.this if isinstance(first, exp.From) else None
    where = tree.args.get("where")
    if not isinstance(table, exp.Table) or table.args.get("db") or not isinstance(where, exp.Where):
        return None
    if any(isinstance(n, _NESTED) for n in tree.walk() if n is not tree):
        return None
    collected: list[tuple[exp.Literal, int | None]] = []
    aliases = {e.alias.lower() for e in tree.expressions if isinstance(e, exp.Alias)}
    _collect(where.this, table, policy, aliases, collected)
    if not collected:
        return None
    literals = [lit for lit, _ in collected]
    saved = [lit.this for lit in literals]
    try:  # the shape: the query's text with each lifted value replaced by its kind and form (and grid class)
        for i, (lit, k) in enumerate(collected):
            form = f"t{len(saved[i])}" if lit.is_string else re.sub("[0-9]", "9", str(saved[i])) + _grid_class(saved[i], k)
            lit.set("this", f"\x00{i}:{form}\x00")
        shape = tree.sql(dialect="duckdb")
    finally:
        for lit, value in zip(literals, saved, strict=True):
            lit.set("this", value)
    return Lifted(shape, tuple(literals), tuple(k for _, k in collected))


def key(lifted: Lifted, state: QueryState) -> tuple[str, str]:
    """The cache key: the shape (each lifted literal's kind, form and grid class in it) and the query's ε (the plan's
    cost and noise follow from it)."""
    return lifted.shape, f"{state.epsilon.numerator}/{state.epsilon.denominator}"


def tag(lifted: Lifted) -> None:
    """Mark the lifted literals in the parse tree (the passes' copies keep the mark)."""
    for i, lit in enumerate(lifted.literals):
        lit.meta[PARAM] = i


def _grid_marker(marker: str, k: int) -> str:
    """The marker of a lifted literal's value put on a grid of ``2**-k`` (:data:`veil.proxy.rewrite.GRID_LITERAL`); it
    does not hold the literal's own marker, so neither replacement touches the other."""
    return marker.replace("veilparam", f"veilgrid{k}k", 1)


def _marked(tree: exp.Expression, markers: Sequence[str]) -> exp.Expression:
    """A copy of ``tree`` with each marked literal's value replaced by its marker (its grid marker for a literal the
    rewrite put on a grid)."""
    out = copy_tree(tree)
    for node in out.walk():
        if isinstance(node, exp.Literal) and PARAM in node.meta:
            marker = markers[node.meta[PARAM]]
            k = node.meta.get(GRID_LITERAL)
            node.set("this", marker if k is None else _grid_marker(marker, k))
    return out


def _filled(template: str, markers: Sequence[str], values: Sequence[str]) -> str:
    for marker, value in zip(markers, values, strict=True):
        template = template.replace(marker, value)
    return template


def _grid_values(entry: Entry, literals: Sequence[exp.Literal]) -> tuple[list[str], list[str]] | None:
    """The grid markers of ``entry``'s templates and their values for ``literals`` (each literal's value on the
    grid); None when one of them is not on its grid, or one the rewrite left off a grid is on it (then the shape's
    statements are not those planning afresh gives these literals)."""
    for i, k in entry.off_grid:
        if fixed_point.literal_on_grid(str(literals[i].this), k) is not None:
            return None
    markers, values = [], []
    for i, k in entry.on_grid:
        n = fixed_point.literal_on_grid(str(literals[i].this), k)
        if n is None or literals[i].is_string:
            return None
        markers.append(_grid_marker(entry.markers[i], k))
        values.append(str(n))
    return markers, values


def _left_off_grid(node: exp.Expression) -> bool:
    """A lifted literal the rewrite could have compared on a grid but left as it is (its value is off the grid)."""
    return isinstance(node, exp.Literal) and PARAM in node.meta and GRID_LEFT in node.meta


def _canonical_literal(tree: exp.Expression) -> str:
    """A literal as the canonical text writes it."""
    return duckdb_text(tree, normalize=True, comments=False)


#: A lifted text that DuckDB's sqlglot dialect writes between single quotes as it is (no quote, no backslash).
_PLAIN_TEXT = re.compile(r"[A-Za-z0-9 _.,:;!?@#$%&*()+=<>/|~^\[\]{}-]{0,64}")


def _verbatim(render: Callable[[exp.Expression], str]) -> bool:
    """Does ``render`` write a lifted number literal (:data:`_NUMBER`) as its digits and a :data:`_PLAIN_TEXT` text as
    ``'text'``? True for DuckDB's sqlglot dialect (the canonical text's and :class:`DuckDBEngine`'s renderers, checked
    against sqlglot by tests/proxy/test_plan_cache_literals.py); any other renderer renders every literal."""
    if render is _canonical_literal:
        return True
    owner = getattr(render, "__self__", None)
    return type(owner) is DuckDBEngine and getattr(render, "__func__", None) is DuckDBEngine.render and owner.dialect == "duckdb"


def _literal_texts(literals: Sequence[exp.Literal], render: Callable[[exp.Expression], str]) -> list[str]:
    """Each literal as ``render`` writes it (a hit fills these into its statements and canonical text). A number or
    a plain text written by a :func:`_verbatim` renderer is spelled directly: sqlglot took ~0.05 ms a literal."""
    verbatim = _verbatim(render)
    out = []
    for lit in literals:
        value = str(lit.this)
        if verbatim and (_PLAIN_TEXT.fullmatch(value) if lit.is_string else _NUMBER.fullmatch(value)):
            out.append(f"'{value}'" if lit.is_string else value)
        else:
            out.append(render(exp.Literal(this=lit.this, is_string=lit.is_string)))
    return out


def build(state: QueryState, env: Env, lifted: Lifted) -> Entry | None:
    """The entry for ``state`` (planned through ``prepare`` from the tagged tree), or None when its templates do
    not give back its own statements (a copy of a literal that lost its mark)."""
    p, queries, rendered = state.plan, state.queries, state.rendered
    if p is None or queries is None or rendered is None or p.analysis.private_table is None:
        return None
    if state.materialised:
        # its statements read temporary tables of one run, dropped when it ends (a shape of one table has none:
        # lift takes no join, subquery or CTE; kept so that a later widening of lift cannot reuse them)
        return None
    token = secrets.token_hex(8)
    markers = tuple(f"veilparam{i}x{token}" for i in range(len(lifted.literals)))
    render = env.engine.render
    main = None if queries.main is None else render(_marked(queries.main, markers))
    grids = tuple((sid, render(_marked(g, markers))) for sid, g in queries.grids)
    canonical = canonical_sql(replace(p.analysis, tree=_marked(p.analysis.tree, markers)))
    quoted = tuple(m if not lit.is_string else f"'{m}'" for m, lit in zip(markers, lifted.literals, strict=True))
    source, _grids = env.bounded_copy(p.analysis.private_table)
    texts = " ".join([main or "", *(g for _, g in grids)])
    on_grid = tuple(sorted({(int(i), int(k)) for k, i in re.findall(f"veilgrid([0-9]+)k([0-9]+)x{token}", texts)}))
    trees = [t for t in (queries.main, *(g for _, g in queries.grids)) if t is not None]
    left = {(n.meta[PARAM], n.meta[GRID_LEFT]) for t in trees for n in t.walk() if _left_off_grid(n)}
    off_grid = tuple(sorted((int(i), int(k)) for i, k in left))
    # the entry keeps what a hit uses: not the parse tree, nor the resolve pass's copy of it (only validate reads it,
    # and a hit skips validate): a sixth of what an entry held (red team s67 F2)
    kept = replace(state, tree=None, resolved=None)
    entry = Entry(kept, p.analysis.private_table, source, quoted, main, grids, canonical, on_grid, off_grid)
    return entry if _agrees(entry, state, lifted.literals, env) else None


def _texts(entry: Entry, literals: Sequence[exp.Literal], env: Env) -> tuple[Rendered, str] | None:
    from veil.proxy.pipeline import Rendered

    values = _literal_texts(literals, env.engine.render)
    markers = list(entry.markers)
    if entry.on_grid or entry.off_grid:
        on_grid = _grid_values(entry, literals)
        if on_grid is None:
            return None
        markers, values = [*on_grid[0], *markers], [*on_grid[1], *values]
    main = None if entry.main is None else _filled(entry.main, markers, values)
    grids = tuple((sid, _filled(g, markers, values)) for sid, g in entry.grids)
    canon_values = _literal_texts(literals, _canonical_literal)
    return Rendered(main, grids), _filled(entry.canonical, entry.markers, canon_values)


def _agrees(entry: Entry, state: QueryState, literals: Sequence[exp.Literal], env: Env) -> bool:
    """Do the entry's templates, filled with ``literals``, give ``state``'s statements and canonical text?"""
    texts = _texts(entry, literals, env)
    return texts is not None and texts[0] == state.rendered and texts[1] == state.canonical


def same_plan(a: QueryState, b: QueryState) -> bool:
    """Did two plannings of one shape decide everything but the literals the same way?"""
    pa, pb = a.plan, b.plan
    if pa is None or pb is None or a.post is None or b.post is None:
        return False
    return (
        (pa.cost, pa.delta, pa.epsilon, pa.contribution) == (pb.cost, pb.delta, pb.epsilon, pb.contribution)
        and [(s.kind, s.mechanism, s.scale, s.sensitivity) for s in pa.statistics]
        == [(s.kind, s.mechanism, s.scale, s.sensitivity) for s in pb.statistics]
        and (pa.partition_stat, pa.partition_threshold) == (pb.partition_stat, pb.partition_threshold)
        and _post_text(a.post) == _post_text(b.post)
        and (a.domain, a.key_types, a.bind_on_run) == (b.domain, b.key_types, b.bind_on_run)
    )


def _post_text(post: PostProcess) -> tuple[Any, ...]:
    return post.names, post.direct, None if post.tree is None else duckdb_text(post.tree), post.ci_sources


def probe_values(literals: Sequence[exp.Literal], grids: Sequence[int | None] = ()) -> list[str]:
    """Other values of the same kinds and lengths: a number's first digit moved by one, every text character
    changed (the empty text has no other value of its length, and so no other query of its shape). A number whose
    side of a grid of ``2**-k`` is in its shape (``grids``) keeps that side where another digit can: its first digit
    moved by one, else its first or last digit set to another (``9`` compared with a real column bounded by ±5 is
    the only one-digit integer off that column's grid, and so the only query of its shape)."""
    out = []
    for i, lit in enumerate(literals):
        value = str(lit.this)
        if lit.is_string:
            out.append("".join("y" if c == "x" else "x" for c in value))
            continue
        moved = ("8" if value[0] == "9" else str(int(value[0]) + 1)) + value[1:]
        k = grids[i] if i < len(grids) else None
        if k is not None:
            same = _grid_class(value, k)
            others = [value[:p] + d + value[p + 1 :] for p in (0, len(value) - 1) for d in "0123456789" if d != value[p]]
            moved = next((v for v in [moved, *others] if _grid_class(v, k) == same), moved)
        out.append(moved)
    return out


def hit(entry: Entry, state: QueryState, lifted: Lifted, env: Env) -> QueryState | None:
    """``state`` (just parsed) planned from ``entry`` with its own literals; None when the table's bounded copy is
    no longer the one the entry's statements read."""
    source, _grids = env.bounded_copy(entry.table)
    if source != entry.source:
        return None
    texts = _texts(entry, lifted.literals, env)
    if texts is None:  # a literal is not on the side of its grid the entry's statements hold: planned afresh
        return None
    rendered, canonical = texts
    from veil.proxy.pipeline import _with, cache_key_of

    planned = entry.state
    return _with(  # (dataclasses.replace's fields, without its cost)
        state,
        resolved=planned.resolved,
        analysis=planned.analysis,
        plan=planned.plan,
        queries=planned.queries,
        rendered=rendered,
        post=planned.post,
        domain=planned.domain,
        key_types=planned.key_types,
        bind_on_run=planned.bind_on_run,
        canonical=canonical,
        key=cache_key_of(planned, canonical, rendered, env),
    )


def probed(state: QueryState, env: Env, lifted: Lifted, plan: Callable[[QueryState], QueryState]) -> Entry | None:
    """The entry for ``state`` if a second planning of its shape with other literals (``plan``: the passes from
    resolve through prepare) agrees with it in everything but the literals; None otherwise, or when that planning
    refuses (a check the first literals passed and these do not: the shape is not cached)."""
    entry = build(state, env, lifted)
    if entry is None or state.tree is None:
        return None
    tree = copy_tree(state.tree)
    marked = sorted((n for n in tree.walk() if isinstance(n, exp.Literal) and PARAM in n.meta), key=lambda n: n.meta[PARAM])
    if len(marked) != len(lifted.literals):
        return None
    for node, value in zip(marked, probe_values(lifted.literals, lifted.grids), strict=True):
        node.set("this", value)
    try:
        other = plan(replace(state, tree=tree, resolved=None, analysis=None, plan=None, queries=None, rendered=None))
    except VeilError:
        return None
    if not same_plan(state, other) or not _agrees(entry, other, marked, env):
        return None
    return entry


# -- the front: token shapes -----------------------------------------------------------------------------------------

#: The token types a lifted literal is (is it a text?): a number, a text in single quotes.
_LITERAL_TOKENS = {TokenType.NUMBER: False, TokenType.STRING: True}
#: A token shape (:func:`front_key`): a digest of the token stream with each number and text token's value replaced
#: by its form.
TokenKey = bytes


@dataclass(frozen=True)
class Front:
    """What the front knows of a token shape: the query shape :func:`lift` gave, and where its literals are (no
    token: a hit is checked against digests, so an entry holds about the shape's text, red team s67 F1)."""

    shape: str
    positions: tuple[int, ...]  # per lifted literal (in lift's order), its token's index
    grids: tuple[int | None, ...]  # lift's grids
    classes: tuple[str, ...]  # per lifted literal, its grid class (:func:`_grid_class`)
    fixed: bytes  # a digest of every other number and text token's index and exact value (:func:`_fixed`)


def _digest(parts: Iterable[object]) -> bytes:
    """A collision-resistant digest of ``parts``' ``repr``s (unambiguous for tuples of strings, numbers, enums)."""
    h = hashlib.blake2b(digest_size=32)
    for part in parts:
        h.update(repr(part).encode("utf-8", errors="surrogatepass"))
        h.update(b"\x00")
    return h.digest()


def _form(token: Token) -> str:
    return f"t{len(token.text)}" if token.token_type == TokenType.STRING else re.sub("[0-9]", "9", token.text)


def front_key(tokens: Sequence[Token]) -> TokenKey:
    """The token shape: a digest of each token's type, its text (a number's or text's form), its comments, and
    whether it touches the token before it (sqlglot's parser reads that of adjacent texts)."""
    return hashlib.blake2b(shape_text(tokens).encode("utf-8", errors="surrogatepass"), digest_size=32).digest()


def shape_text(tokens: Sequence[Token]) -> str:
    """What :func:`front_key` digests: per token, its type's name, its text (a number's or text's form), its comments
    and ``a`` (it touches the token before it) or ``b``, each text after its length and a colon, so that the text reads
    back as one list of tokens only (tests/proxy/test_answer_path_cuts.py reads it back)."""
    out = []
    end = -2
    literal = _LITERAL_TOKENS
    for t in tokens:
        kind = t.token_type
        name = kind._name_  # (the member's name, as ``.name`` gives it without the enum descriptor's call)
        text = _form(t) if kind in literal else t.text
        c = t.comments
        said = "".join([f"{len(x)}:{x}" for x in c]) if c else ""
        # each text written after its length, so the digested text reads back one way only, whatever the texts hold
        out.append(f"{len(name)}:{name}{len(text)}:{text}{len(c)}:{said}{'a' if t.start == end + 1 else 'b'}")
        end = t.end
    return "".join(out)


def _fixed(tokens: Sequence[Token], positions: Sequence[int]) -> bytes:
    """A digest of the index and exact value of every number and text token not at ``positions``."""
    lifted = set(positions)
    return _digest((i, t.text) for i, t in enumerate(tokens) if t.token_type in _LITERAL_TOKENS and i not in lifted)


def front_bytes(entry: Front | None, limit: int = FRONT_BYTES) -> int:
    """The bytes a front entry and its key hold (:func:`deep_size` as :func:`entry_bytes` counts it, and 256 for the
    key and its slot): about its shape's text and a few numbers per lifted literal."""
    return 256 + deep_size(entry, limit) * 9 // 8


def _spelled(sql: str, token: Token) -> bool:
    """Is ``token`` spelled as its value alone (a number's digits, a text in quotes without escapes)?"""
    raw = sql[token.start : token.end + 1]
    return raw == (f"'{token.text}'" if token.token_type == TokenType.STRING else token.text)


def front_lift(
    sql: str, tokens: Sequence[Token], front: Mapping[TokenKey, Front | None], key: TokenKey | None = None
) -> Lifted | None:
    """What :func:`lift` gives the parse tree of ``sql`` (whose tokens, checked by :func:`veil.proxy.parse.scan`, are
    ``tokens``; ``key``: their :func:`front_key`, when known) when the front knows its token shape; None otherwise
    (parse the query and lift it)."""
    if len(sql) > MAX_SQL or "\x00" in sql:
        return None
    entry = front.get(front_key(tokens) if key is None else key)
    if entry is None:
        return None
    if any(i >= len(tokens) for i in entry.positions) or _fixed(tokens, entry.positions) != entry.fixed:
        return None
    literals = []
    for i, k, cls in zip(entry.positions, entry.grids, entry.classes, strict=True):
        token = tokens[i]
        value, is_string = token.text, _LITERAL_TOKENS[token.token_type]
        if not _spelled(sql, token) or not (_text(value) if is_string else _NUMBER.fullmatch(value)):
            return None
        if _grid_class(value, k) != cls:
            return None
        literals.append(exp.Literal(this=value, is_string=is_string))
    return Lifted(entry.shape, tuple(literals), entry.grids)


def _positions(tokens: Sequence[Token], lifted: Lifted) -> list[int] | None:
    """The token of each lifted literal: the next number or text token, in order, with its value."""
    out: list[int] = []
    start = 0
    for lit in lifted.literals:
        found = next(
            (
                i
                for i in range(start, len(tokens))
                if _LITERAL_TOKENS.get(tokens[i].token_type) is lit.is_string and tokens[i].text == str(lit.this)
            ),
            None,
        )
        if found is None:
            return None
        out.append(found)
        start = found + 1
    return out


def front_entry(
    sql: str, tokens: Sequence[Token], lifted: Lifted, policy: Policy, limits: Limits, key: TokenKey | None = None
) -> Front | None:
    """The front's entry for ``sql`` (its tokens ``tokens``, of token shape ``key``, lifted as ``lifted``), or None
    when the probe — ``sql`` with each lifted token replaced by another value of its form and grid class, scanned and
    parsed once as the parse pass does (under ``limits``) and lifted in full — does not give the same shape and the
    probe values back at the same tokens."""
    if len(sql) > MAX_SQL or "\x00" in sql:
        return None
    positions = _positions(tokens, lifted)
    if positions is None or not all(_spelled(sql, tokens[i]) for i in positions):
        return None
    key = front_key(tokens) if key is None else key
    entry = Front(
        lifted.shape,
        tuple(positions),
        lifted.grids,
        tuple(_grid_class(str(lit.this), k) for lit, k in zip(lifted.literals, lifted.grids, strict=True)),
        _fixed(tokens, positions),
    )
    probes = probe_values(lifted.literals, lifted.grids)
    pieces, last = [], 0
    for i, value in sorted(zip(positions, probes, strict=True)):
        t = tokens[i]
        pieces += [sql[last : t.start], f"'{value}'" if t.token_type == TokenType.STRING else value]
        last = t.end + 1
    probe_sql = "".join(pieces) + sql[last:]
    try:
        probe_tokens = scan(probe_sql, limits=limits)
        probe_key = front_key(probe_tokens)  # (before the parser reads the tokens)
        probe_tree = parse_tokens(probe_sql, probe_tokens, limits=limits)
    except VeilError:
        return None
    full = lift(probe_tree, policy, probe_sql)
    via_front = front_lift(probe_sql, probe_tokens, {key: entry}, probe_key)
    if full is None or via_front is None or probe_key != key:
        return None
    if (full.shape, full.grids) != (lifted.shape, lifted.grids) or (via_front.shape, via_front.grids) != (full.shape, full.grids):
        return None
    if [(str(lit.this), lit.is_string) for lit in full.literals] != [
        (str(lit.this), lit.is_string) for lit in via_front.literals
    ] or [str(lit.this) for lit in full.literals] != probes:
        return None
    return entry
