"""The durable privacy ledger: (ε, δ) budgets, reservations, the release log and the answer cache.

One SQLite file in WAL mode; every change is one ``BEGIN IMMEDIATE`` transaction, so concurrent sessions and
processes serialise on it. Publications, retractions and the other curator records commit with
``synchronous=FULL``; a query's reservation, release and refund commit with ``synchronous=NORMAL`` and are made
durable by :mod:`veil.store.wal_sync` off the write lock (below). This module is the one owner of
the ledger's schema (the credential table of ``veil serve`` lives in the same file).

Budgets are kept per **account**: one per analyst (``analyst:NAME``) and one per table (``table:NAME``). A charge
is a :class:`Cost` (ε, δ) placed on several accounts at once — an analyst query charges the analyst and the table, a
publication charges the table — atomically: all of them or none, and within every **population cap** of the table
(:meth:`Account.population_cap`: a table's ``epsilon_total``/``delta_total`` bounds the sum over every table of its
population, red team s66 F3). Composition is basic (sequential) composition: ε and δ each
add up. Invariants (tested):

* ``accounts.epsilon_spent`` / ``delta_spent`` of an account equal the exact sums over the
  reservations that charged it and are ``reserved`` or ``released``; they never exceed the totals
  passed to :meth:`Ledger.reserve`.
* A reservation is committed (atomically, visible to every session) before any statistic is
  computed, and an fsync of the WAL starts as soon as it is committed, in a worker thread, while the
  engine runs. :meth:`Ledger.release` waits for that fsync before it writes the release row, so no
  answer is ever returned before its charge is on disk; if the fsync fails, the answer is withheld
  and the charge stands. The release row is synced right after, off the answer's path: a power loss
  in that moment can lose the row (the reservation stays ``reserved``: charged, logged with its SQL,
  never refunded), never the charge. A crash before the release likewise leaves a ``reserved`` row.
* :meth:`Ledger.cancel` refunds only reservations for which no noise was drawn (the caller's promise).

Schema version 3 (``docs/ledger.md``)::

    accounts(account TEXT PRIMARY KEY, epsilon_spent TEXT, delta_spent TEXT)   -- exact fractions "n/d"
    reservations(id, actor, epsilon TEXT, delta TEXT, accounts JSON, status, canonical_sql, cache_key,
                 created_at, finished_at)                                    -- reserved|released|cancelled
    releases(id, kind, method, actor, created_at, table_name, params JSON, metrics JSON, epsilon TEXT,
             delta TEXT, canonical_sql, cache_key, answer JSON, reservation_id)
    statistics(release_id, idx, name, mechanism, epsilon TEXT, sensitivity, scale, value JSON, ci95, grp JSON)
    statistic_vectors(release_id, idx, name, mechanism, epsilon TEXT, sensitivity, scale, ci95, vals JSON)
    release_groups(release_id, groups JSON)        -- a query release's groups, once (version 3)
    bounded_copies(identity TEXT PRIMARY KEY, source, name, salt, created_at)   -- the secret row-choice salts

>>> import tempfile, pathlib
>>> with Ledger(pathlib.Path(tempfile.mkdtemp()) / "l.sqlite") as led:
...     alice = Account.analyst("alice", Fraction(1), Fraction(1, 10**5))
...     r = led.reserve(Cost(Fraction(1, 2), Fraction(1, 10**7)), [alice], actor="alice")
...     led.spent(alice.key)
Cost(epsilon=Fraction(1, 2), delta=Fraction(1, 10000000))
"""

from __future__ import annotations

import functools
import itertools
import json
import secrets
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from fractions import Fraction
from pathlib import Path
from types import TracebackType
from typing import Any

from veil.errors import BudgetExhausted, InternalError, LedgerMismatch, PolicyError, ReleaseError
from veil.mechanisms.budget import as_delta, as_epsilon, format_delta, format_epsilon
from veil.policy import Policy
from veil.store import wal_sync
from veil.store._sqlite import connect as connect_sqlite
from veil.store._sqlite import use_wal
from veil.store.releases import Release, ReleasedStatistic, ReleasedVector, dumps

__all__ = ["Account", "Cost", "HistoryMark", "Ledger", "Reservation", "accounts_for", "population_matches"]

SCHEMA_VERSION = 4

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS accounts(
    account TEXT PRIMARY KEY, epsilon_spent TEXT NOT NULL, delta_spent TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS reservations(
    id TEXT PRIMARY KEY, actor TEXT NOT NULL, epsilon TEXT NOT NULL, delta TEXT NOT NULL, accounts TEXT NOT NULL,
    status TEXT NOT NULL, canonical_sql TEXT, cache_key TEXT, created_at TEXT NOT NULL, finished_at TEXT);
CREATE INDEX IF NOT EXISTS reservations_actor ON reservations(actor, status);
CREATE TABLE IF NOT EXISTS releases(
    id TEXT PRIMARY KEY, kind TEXT NOT NULL, method TEXT NOT NULL, actor TEXT NOT NULL,
    created_at TEXT NOT NULL, table_name TEXT, params TEXT NOT NULL, metrics TEXT NOT NULL,
    epsilon TEXT, delta TEXT, canonical_sql TEXT, cache_key TEXT, answer TEXT, reservation_id TEXT);
CREATE INDEX IF NOT EXISTS releases_cache ON releases(actor, cache_key);
CREATE INDEX IF NOT EXISTS releases_kind ON releases(kind);
CREATE TABLE IF NOT EXISTS bounded_copies(
    identity TEXT PRIMARY KEY, source TEXT NOT NULL, name TEXT NOT NULL, salt TEXT NOT NULL, created_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS table_writes(id INTEGER PRIMARY KEY AUTOINCREMENT, table_name TEXT NOT NULL, at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS statistics(
    release_id TEXT NOT NULL, idx INTEGER NOT NULL, name TEXT NOT NULL, mechanism TEXT NOT NULL,
    epsilon TEXT NOT NULL, sensitivity REAL, scale REAL, value TEXT, ci95 REAL, grp TEXT,
    PRIMARY KEY (release_id, idx));
CREATE TABLE IF NOT EXISTS statistic_vectors(
    release_id TEXT NOT NULL, idx INTEGER NOT NULL, name TEXT NOT NULL, mechanism TEXT NOT NULL,
    epsilon TEXT NOT NULL, sensitivity REAL, scale REAL, ci95 REAL, vals TEXT NOT NULL,
    PRIMARY KEY (release_id, idx));
CREATE TABLE IF NOT EXISTS release_groups(release_id TEXT PRIMARY KEY, groups TEXT NOT NULL);
"""

#: The answer cache's lookup, on its own index: without ``INDEXED BY`` SQLite chose ``releases_kind``
#: and scanned every logged query answer, so each query took time linear in the ledger's history
#: (2 ms at 4,500 releases).
_CACHED_ANSWER = (
    "SELECT answer FROM releases INDEXED BY releases_cache WHERE actor = ? AND cache_key = ? AND kind = 'query' "
    "ORDER BY created_at LIMIT 1"
)

#: Schema version 1 (one ε per analyst in ``spend``) → version 2 (accounts with ε and δ).
_MIGRATE_1_TO_2 = """
INSERT OR IGNORE INTO accounts(account, epsilon_spent, delta_spent) SELECT 'analyst:' || analyst, spent, '0' FROM spend;
DROP TABLE spend;
ALTER TABLE reservations RENAME COLUMN analyst TO actor;
ALTER TABLE reservations ADD COLUMN delta TEXT NOT NULL DEFAULT '0';
ALTER TABLE reservations ADD COLUMN accounts TEXT NOT NULL DEFAULT '[]';
UPDATE reservations SET accounts = json_array('analyst:' || actor);
DROP INDEX IF EXISTS reservations_analyst;
"""


#: An account's spend is kept exact while its denominator stays within this; beyond, it is rounded *up* to a
#: multiple of 1/SPEND_GRID (a charge never shrinks). Exact sums of many charges with long coprime denominators
#: grew without bound until Python refused to print them, and every later charge on the table failed (red team
#: s22, A2).
SPEND_GRID = 10**30


def _rounded_up(v: Fraction) -> Fraction:
    if v.denominator <= SPEND_GRID:
        return v
    return Fraction(-((-v.numerator * SPEND_GRID) // v.denominator), SPEND_GRID)


#: The account prefix of a table's charges recorded with the population it was declared in when charged
#: (:func:`under_key`; red team s69 F4). Its spend is the table's, split by population.
UNDER = "under:"


def under_key(table: str, population: str | None) -> str:
    """The account of ``table``'s charges made while it was declared in ``population`` (``""``: the policy's default
    one; None: unknown, charges recorded before schema version 4)."""
    return UNDER + json.dumps([table, population], ensure_ascii=False)


def _under_parts(key: str) -> tuple[str | None, str | None]:
    """The table and the population ``key`` (an :func:`under_key`) was charged under; None for either part that is
    unknown (a charge recorded before schema version 4) or unreadable."""
    try:
        value = json.loads(key[len(UNDER) :])
    except ValueError:
        return None, None
    if not isinstance(value, list) or len(value) != 2:
        return None, None
    table, population = value
    return (table if isinstance(table, str) else None), (population if isinstance(population, str) else None)


def _counts_against(cap_population: str, key: str, declared_now: dict[str, str]) -> bool:
    """Whether the charges of ``key`` (an :func:`under_key`) count against a cap on ``cap_population``: those charged
    under a population that matches it (a later edit of the policy cannot move them out, red team s69 F4), and those
    of a table the policy now declares in a matching population (so re-declaring a table's population cannot take its
    earlier charges out of the cap they were charged under, nor a renamed population out of the renamed cap: review
    s22 Y1). A charge of unknown population (recorded before schema version 4) counts by its table's declaration now,
    and against every cap when its table is gone from the policy (review s22 Y6: not against every cap always)."""
    table, population = _under_parts(key)
    now = declared_now.get(table) if table is not None else None
    if now is not None and population_matches(cap_population, now):
        return True
    if population is None:
        return now is None
    return population_matches(cap_population, population)


#: Schema version 3 → 4: every table's spend so far is recorded under an unknown population (it counts by its table's
#: declaration now, or against every cap when the table is gone: the populations it was charged under were not
#: recorded; :func:`_counts_against`).
def _migrate_3_to_4(db: sqlite3.Connection) -> None:
    rows = db.execute(
        "SELECT account, epsilon_spent, delta_spent FROM accounts WHERE account >= 'table:' AND account < 'table;'"
    ).fetchall()
    for account, eps, delta in rows:
        db.execute(
            "INSERT OR IGNORE INTO accounts(account, epsilon_spent, delta_spent) VALUES (?, ?, ?)",
            (under_key(str(account)[len("table:") :], None), eps, delta),
        )


#: :func:`_now`'s last whole second and its text (``YYYY-MM-DDTHH:MM:SS``), one tuple (replaced whole: thread-safe).
_SECOND: tuple[int, str] = (-1, "")


def _now() -> str:
    """``datetime.now(UTC).isoformat(timespec="microseconds")``, the same text (``…T18:45:12.123456+00:00``: the clock
    floored to the microsecond, as ``datetime.now`` does), with the date and time of day formatted once a second: three
    calls per answer cost ~20 µs through ``datetime`` (``tests/test_ledger_answer_path.py`` compares the two)."""
    global _SECOND
    second, fraction = divmod(time.time_ns() // 1000, 1_000_000)
    known = _SECOND
    if known[0] != second:
        known = _SECOND = (second, (_EPOCH + timedelta(seconds=second)).isoformat(timespec="seconds"))
    return f"{known[1]}.{fraction:06d}+00:00"


_EPOCH = datetime(1970, 1, 1)  # (naive: its isoformat has no offset, which _now writes itself)


def _frac(text: object) -> Fraction | None:
    return None if text is None else Fraction(str(text))


#: An account's stored spend texts (ε, δ) → :func:`_stored`'s reading of them. The row is read in every reservation and
#: mostly holds the texts this process wrote there itself (:func:`_remember`): parsing "n/d" costs microseconds. The
#: texts are the key, so a row changed by another session or process is read afresh.
_STORED: dict[tuple[object, object], tuple[Cost, bool]] = {}
_STORED_MAX = 1024


def _stored(eps: object, delta: object) -> tuple[Cost, bool]:
    """An account's spend read from its stored texts: (ε, δ) and whether the stored δ is 1 or more.

    A ledger written before δ sums were bounded may hold δ ≥ 1: it is read as the largest δ an account can hold, so
    charges without δ go on and any δ is refused (see :meth:`Ledger._reserve`); the flag refuses every positive δ,
    however small (red team s27 A8: δ = 1e-31 passed the check against the read 1 − 10⁻³⁰ and was rounded up to 1
    again, without bound)."""
    found = _STORED.get((eps, delta))
    if found is None:
        stored_delta = Fraction(str(delta))
        found = (Cost(Fraction(str(eps)), min(stored_delta, _DELTA_MAX)), stored_delta >= 1)
        _keep((eps, delta), found)
    return found


def _remember(texts: tuple[str, str], eps: Fraction, delta: Fraction) -> Cost:
    """The spend (``eps``, ``delta``) about to be stored as ``texts``, noted so that reading it back parses nothing."""
    exhausted = delta.numerator >= delta.denominator  # δ ≥ 1
    found = (Cost(eps, _DELTA_MAX if exhausted else delta), exhausted)
    _keep(texts, found)
    return found[0]


def _keep(texts: tuple[object, object], found: tuple[Cost, bool]) -> None:
    if len(_STORED) >= _STORED_MAX:
        _STORED.clear()
    _STORED[texts] = found


@functools.lru_cache(maxsize=16)
def _spent_sql(n: int) -> str:
    """Read ``n`` accounts' spend in one statement (one text per ``n``: SQLite's statement cache keys on it)."""
    return (
        f"SELECT account, epsilon_spent, delta_spent FROM accounts WHERE account IN ({', '.join('?' * n)}) "
        f"UNION ALL SELECT '{_MOVED}', value, '0' FROM meta WHERE key = 'moved_to'"
    )


#: The row :func:`_spent_sql` adds when the ledger was moved away (``veil move-ledger``): a reservation on it is refused
#: in the statement that reads the accounts (a query's work stays one statement, ``tests/test_ledger_work.py``).
_MOVED = " moved_to"


@functools.lru_cache(maxsize=16)
def _store_sql(n: int) -> str:
    """Store ``n`` accounts' new spend in one statement."""
    return (
        f"INSERT INTO accounts(account, epsilon_spent, delta_spent) VALUES {', '.join(['(?, ?, ?)'] * n)} "
        "ON CONFLICT(account) DO UPDATE SET epsilon_spent = excluded.epsilon_spent, delta_spent = excluded.delta_spent"
    )


@functools.lru_cache(maxsize=256)
def _keys_json(keys: tuple[str, ...]) -> str:
    """A reservation's account keys as stored (the same few lists recur in every query)."""
    return json.dumps(keys)


def _moved_away(moved_to: str) -> LedgerMismatch:
    return LedgerMismatch(
        f"this ledger was moved to {moved_to!r} (`veil move-ledger`): nothing is charged or written to it any more",
        hint=f"Point [ledger] path at {moved_to!r}",
    )


_ROWS = (list, tuple)
_ROW_TYPES = frozenset(_ROWS)
_TUPLES = frozenset({tuple})
#: A remembered group list's bounds: at most :data:`_GROUPS_KEPT` lists per ledger handle (one session's), each of up
#: to :data:`_GROUPS_MEMO` groups and :data:`_GROUPS_CHARS` characters of JSON.
_GROUPS_KEPT, _GROUPS_MEMO, _GROUPS_CHARS = 64, 1024, 65536


def _rows_json(rows: Sequence[Sequence[Any]], memo: dict[tuple[Any, ...], str] | None = None) -> str:
    """``dumps([list(r) for r in rows])``: the same text, without copying rows that are lists or tuples already (JSON
    writes a tuple as a list); with ``memo``, remembered there for a recurring tuple of tuples of texts and integers
    (a public domain's groups recur in every answer of its query)."""
    if memo is not None and type(rows) is tuple and len(rows) <= _GROUPS_MEMO and _TUPLES.issuperset(map(type, rows)):
        cells = set(map(type, itertools.chain.from_iterable(rows)))
        if _KEY_CELLS.issuperset(cells):  # hashable, and equal only when they are written alike (no float, no bool)
            text = memo.get(rows)
            if text is None:
                text = dumps(rows)
                if len(text) <= _GROUPS_CHARS:
                    if len(memo) >= _GROUPS_KEPT:
                        memo.clear()
                    memo[rows] = text
            return text
    if type(rows) in _ROWS and _ROW_TYPES.issuperset(map(type, rows)):
        return dumps(rows)
    return dumps([list(r) for r in rows])


#: Cells whose equal values have one JSON text (``1 == 1.0 == True`` are written ``1``, ``1.0`` and ``true``).
_KEY_CELLS = frozenset({str, int, type(None)})


def _new_id(prefix: str) -> str:
    return f"{prefix}{secrets.token_hex(6)}"


@dataclass(frozen=True)
class HistoryMark:
    """The latest reservation and the latest release a ledger held at some moment, each by its commit order (SQLite's
    rowid) and its random id; ``(0, "")`` for none. The warehouse keeps the latest one it saw (its *high-water mark*,
    :mod:`veil.store.binding`): a ledger that lacks either id is a stale copy (a backup from before them), never the
    warehouse's ledger. Ids are random, so a copy that was written to on its own (a fork) cannot hold them by chance.

    >>> a, b = HistoryMark(3, "r1", 0, ""), HistoryMark(2, "r0", 5, "p9")
    >>> a.merged(b)
    HistoryMark(reservation_seq=3, reservation_id='r1', release_seq=5, release_id='p9')
    """

    reservation_seq: int
    reservation_id: str
    release_seq: int
    release_id: str

    def merged(self, other: HistoryMark) -> HistoryMark:
        """The later of the two in each part (a mark never moves back: two processes may write theirs in any order)."""
        res = max((self.reservation_seq, self.reservation_id), (other.reservation_seq, other.reservation_id))
        rel = max((self.release_seq, self.release_id), (other.release_seq, other.release_id))
        return HistoryMark(res[0], res[1], rel[0], rel[1])


@dataclass(frozen=True)
class Cost:
    """A privacy cost (ε, δ), exact. Adds up under basic composition."""

    epsilon: Fraction
    delta: Fraction = Fraction(0)

    def __post_init__(self) -> None:
        if not isinstance(self.epsilon, Fraction) or not isinstance(self.delta, Fraction):
            raise InternalError(f"Cost needs exact Fractions, got {self.epsilon!r}, {self.delta!r}")
        # (a Fraction's denominator is positive: its sign and its size against 1 are read off integers, not compared
        # as Fractions, which costs microseconds; every reservation builds several Costs)
        eps, delta = self.epsilon, self.delta
        if eps.numerator < 0 or delta.numerator < 0 or delta.numerator >= delta.denominator:
            raise InternalError(f"Cost out of range: ε = {self.epsilon}, δ = {self.delta}")

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.epsilon + other.epsilon, self.delta + other.delta)

    def __str__(self) -> str:
        text = f"ε = {format_epsilon(self.epsilon)}"
        return text + (f", δ = {format_delta(self.delta)}" if self.delta else "")


ZERO = Cost(Fraction(0), Fraction(0))
_UNSPENT = (ZERO, False)  # an account without a row: nothing spent (see _stored)
#: δ read back from a stored sum at or above 1 is taken as 1 − this (any δ charge is then refused).
_DELTA_EPSILON = Fraction(1, 10**30)
_DELTA_MAX = 1 - _DELTA_EPSILON


@dataclass(frozen=True)
class Account:
    """A budget that charges are placed on: an analyst's, or a table's. ``None`` totals are uncapped.

    A **population cap** (``pool`` set: :meth:`population_cap`) is a budget no charge is stored on: its spend is the
    sum of every charge recorded under a population that matches its own (the ``under:*`` accounts, :func:`under_key`:
    each table charge records the population the table was declared in when charged, so a later edit of the policy
    cannot move it out, red team s69 F4), or on a table the policy now declares in a matching population (review s22
    Y1; an older ledger's charges, of unknown population, count by that alone, or against every cap when their table
    is gone: :func:`_counts_against`),
    plus ∞ when a publication without a DP guarantee of its population was ever recorded."""

    key: str  # "analyst:NAME" | "table:NAME" | "population-cap:TABLE"
    epsilon_total: Fraction | None
    delta_total: Fraction | None
    #: population caps only (marks the account a cap): the tables of other declared populations now
    pool: frozenset[str] | None = None
    #: population caps only: the capped table's population ("" the policy's default one, which matches every one)
    population: str = ""
    #: population caps only: each table of the policy and its population, to place recorded publications
    populations: tuple[tuple[str, str], ...] = ()

    @classmethod
    def analyst(cls, name: str, epsilon: Fraction, delta: Fraction) -> Account:
        return cls(f"analyst:{name}", epsilon, delta)

    @classmethod
    def table(cls, name: str, epsilon: Fraction | None, delta: Fraction | None) -> Account:
        return cls(f"table:{name}", epsilon, delta)

    @classmethod
    def population_cap(cls, policy: Policy, name: str) -> Account:
        """Table ``name``'s cap (``epsilon_total`` / ``delta_total``) over everything released about its population:
        every charge recorded under a population that matches (the same declared name, or either declares none),
        on whatever table, whatever the policy declares now (red team s69 F4)."""
        spec = policy.tables[name]
        mine = getattr(spec, "population", None) or ""
        excluded = frozenset(
            f"table:{other}"
            for other, t in policy.tables.items()
            if not population_matches(mine, getattr(t, "population", None) or "")
        )
        pops = tuple(
            sorted((n, getattr(t, "population", None) or "") for n, t in policy.tables.items() if not getattr(t, "public", False))
        )
        return cls(f"population-cap:{name}", spec.epsilon_total, spec.delta_total, excluded, mine, pops)

    @property
    def label(self) -> str:
        kind, _, name = self.key.partition(":")
        if self.pool is not None:
            who = f"population {self.population!r}" if self.population else "the policy's default population"
            return f"the cap of table {name!r} on {who}"
        return f"{kind} {name!r}"


def population_matches(a: str | None, b: str | None) -> bool:
    """Whether two populations (``""``: the policy's default one, declared by no table; ``None``: unknown) may hold the
    same people: equal, or either is the default or unknown (a table that declares none may hold anyone)."""
    return a is None or b is None or a == "" or b == "" or a == b


def accounts_for(policy: Policy, *, analyst: str | None = None, tables: Iterable[str] = ()) -> tuple[Account, ...]:
    """The accounts a charge by ``analyst`` on ``tables`` must fit in, read from ``policy``.

    Every table of the policy is an account, capped or not: its spend is recorded, so a cap the curator declares
    later counts every release before it (red team s16, A3). A cap (``epsilon_total`` / ``delta_total``) is per
    **population** (red team s66 F3): the charge must fit the cap of every table of the policy whose population
    matches one of ``tables``' (:func:`population_matches`), counting the spend of every table of that population
    (:meth:`Account.population_cap`).
    """
    out: list[Account] = []
    if analyst is not None:
        spec = policy.analyst(analyst)
        out.append(Account.analyst(analyst, spec.epsilon, spec.delta))
    mine: list[str] = []
    for name in dict.fromkeys(tables):
        t = policy.tables.get(name)
        if t is not None:
            out.append(Account.table(name, None, None))
            pop = getattr(t, "population", None) or ""
            # the population it is charged under, recorded: a later edit of the policy cannot move it (s69 F4)
            out.append(Account(under_key(name, pop), None, None))
            mine.append(pop)
    for name, t in sorted(policy.tables.items()):
        if (t.epsilon_total is not None or t.delta_total is not None) and any(
            population_matches(m, getattr(t, "population", None) or "") for m in mine
        ):
            out.append(Account.population_cap(policy, name))
    return tuple(out)


@dataclass(frozen=True)
class Reservation:
    id: str
    actor: str
    cost: Cost
    accounts: tuple[str, ...]
    canonical_sql: str
    cache_key: str
    #: the fsync that makes this reservation durable (started when it was committed; see :mod:`veil.store.wal_sync`)
    durable: Future[None] | None = field(default=None, compare=False, repr=False)
    #: each account's spend (aligned with ``accounts``) as committed with this charge: what remained of a budget right
    #: after it, without reading the ledger again
    spent: tuple[Cost, ...] = field(default=(), compare=False, repr=False)

    @property
    def epsilon(self) -> Fraction:
        return self.cost.epsilon


def _over(acct: Account, spent: Cost, delta_exhausted: bool, cost: Cost) -> bool:
    """Whether charging ``cost`` to ``acct`` (its ``spent``) is refused: past its ε or δ total, or its δ would reach 1
    (rounded up on the 10⁻³⁰ grid as it will be stored; a stored sum of 1, an older ledger's, refuses every δ: red
    team s27 A8). An uncapped table adds up every analyst's δ: at 1 its guarantee would be vacuous, and no (ε, δ)
    account may hold δ ≥ 1 (red team s24 A6: the stored sum reached 1 and every later query on the table failed);
    charges of δ = 0 go on."""
    if acct.epsilon_total is not None and _sum_exceeds(spent.epsilon, cost.epsilon, acct.epsilon_total):
        return True
    if acct.delta_total is not None and _sum_exceeds(spent.delta, cost.delta, acct.delta_total):
        return True
    return bool(cost.delta) and (_rounded_up(spent.delta + cost.delta) >= 1 or delta_exhausted)


def _sum_exceeds(x: Fraction, y: Fraction, limit: Fraction) -> bool:
    """``x + y > limit``, exactly, in integers (denominators are positive): the Fraction sum reduces by a gcd and builds
    a Fraction first, ~20 µs of every reservation (tests/test_ledger_answer_path.py compares the two)."""
    b, d, f = x.denominator, y.denominator, limit.denominator
    return (x.numerator * d + y.numerator * b) * f > limit.numerator * b * d


def _quoted_refusal(what: str, acct: Account, cost: Cost, spent: Cost, hint: str) -> BudgetExhausted:
    """A refusal quoting ``acct``'s figures: the asked amount, what is left, the total and the shortfall."""
    parts = []
    for name, need, used, total, fmt in (
        ("ε", cost.epsilon, spent.epsilon, acct.epsilon_total, format_epsilon),
        ("δ", cost.delta, spent.delta, acct.delta_total, format_delta),
    ):
        if total is not None and used + need > total:
            left = max(total - used, Fraction(0))
            parts.append(f"{name} = {fmt(need)} but {acct.label} has {name} = {fmt(left)} remaining of {fmt(total)} "
                         f"(short by {fmt(used + need - total)})")  # fmt: skip
    if not parts:  # its δ would reach 1
        parts.append(f"δ = {format_delta(cost.delta)} but {acct.label} has spent δ = {format_delta(spent.delta)}: "
                     "together they would reach 1, a vacuous guarantee")  # fmt: skip
    return BudgetExhausted(f"{what} needs " + "; ".join(parts), hint=hint)


def _own_refusal(what: str, acct: Account, cost: Cost, spent: Cost) -> BudgetExhausted:
    """The refusal of a charge that does not fit the asking analyst's own account: its own figures, quoted."""
    return _quoted_refusal(what, acct, cost, spent, "Lower the query's epsilon, or ask the curator for more budget")


def _curator_refusal(what: str, acct: Account, cost: Cost, spent: Cost) -> BudgetExhausted:
    """A shared account's refusal of a charge no analyst asked for (a curator's publication): the curator sees every
    cap and its spend (``veil budget``), so it names the account and its figures."""
    hint = "The table's total privacy budget (epsilon_total / delta_total in the policy) is spent; the curator can raise it"
    return _quoted_refusal(what, acct, cost, spent, hint)


def _shared_refusal(what: str, cost: Cost) -> BudgetExhausted:
    """The refusal of a charge that fits the analyst's own budget but not one every analyst (and the curator's
    publications) spends together: a table's or a population's cap (``epsilon_total``/``delta_total``), or a table's
    δ reaching 1. One message for all of them, with no account and no amount: a refusal is free, and what is left of
    a shared budget, or which one is short, would tell one analyst when the others query and with what ε (red team
    s73 F2, review s23 Y1)."""
    asked = f"ε = {format_epsilon(cost.epsilon)}" + (f", δ = {format_delta(cost.delta)}" if cost.delta else "")
    return BudgetExhausted(
        f"{what} needs {asked}, which a privacy budget shared by every analyst of its tables does not allow (a "
        "table's or population's epsilon_total / delta_total cap, or a table's δ, which may never add up to 1)",
        hint="A smaller epsilon may still fit; without δ (e.g. GROUP BY columns with declared values) a δ limit does "
        "not apply; the curator sees the caps with `veil budget` and can raise them",
    )


class Ledger:
    """A handle on the ledger file. Thread-safe (one lock per handle); use one per process or session."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._synchronous = ""  # the connection's PRAGMA synchronous, set per transaction (see _transaction)
        self._syncs: list[Future[None]] = []  # reservations' and release rows' fsyncs still running (close waits)
        #: this handle's recent group lists and their JSON (:func:`_rows_json`; used under ``_lock``)
        self._groups_text: dict[tuple[Any, ...], str] = {}
        #: (SQLite's ``PRAGMA data_version``, :meth:`catalog_generation` read then); None after a synced commit of
        #: this handle (a curator record may move it without moving data_version, which counts other connections')
        self._generation: tuple[int, int] | None = None
        self._guarded = False
        try:
            self._db = connect_sqlite(self.path, check_same_thread=False)
        except sqlite3.Error as exc:
            raise PolicyError(
                f"the ledger {str(self.path)!r} cannot be opened: {exc}",
                hint="Point [ledger] path at a ledger file, or at a new file Veil may create",
            ) from exc
        try:
            use_wal(self._db)
            with self._transaction() as db:
                self._migrate(db)
        except sqlite3.DatabaseError as exc:  # not an SQLite file (a policy, a DuckDB file, a CSV; s27 A13)
            self._db.close()
            if isinstance(exc, sqlite3.OperationalError):  # e.g. locked: the file is a database
                raise
            raise PolicyError(
                f"the ledger {str(self.path)!r} is not a Veil ledger (SQLite said: {exc})",
                hint="Point [ledger] path at a ledger file, or at a new file Veil may create",
            ) from exc
        self._file = self._opened_file()
        meta = dict(self._db.execute("SELECT key, value FROM meta WHERE key IN ('ledger_id', 'moved_to')").fetchall())
        #: this ledger's identity, random, written when the file was created (or first opened by a Veil that binds):
        #: the warehouse records it and refuses any other ledger (:mod:`veil.store.binding`, red team s66 F7)
        self.identity: str = str(meta["ledger_id"])
        #: where ``veil move-ledger`` copied this ledger to (it is then kept for the record only), else None
        self.moved_to: str | None = meta.get("moved_to")
        self._guarded = True  # from now on every write transaction first checks the file was not moved away

    def _opened_file(self) -> Path:
        """The database file SQLite opened, as SQLite names it (absolute, symbolic links resolved): its WAL is this
        name and ``-wal``. The fsyncs that make a query's charge durable (:mod:`veil.store.wal_sync`) target it, never
        ``self.path`` as given: through a symbolic link, or a relative path after the process changed directory, that
        name's ``-wal`` is another file or none, and the worker synced the database file instead of the WAL its commit
        wrote (red team s41 A2: the answer left with its charge never synced)."""
        for _seq, name, file in self._db.execute("PRAGMA database_list"):
            if name == "main" and file:
                return Path(file)
        return self.path.resolve()  # (SQLite names every file-backed database; kept for safety)

    @classmethod
    def for_policy(cls, policy: Policy) -> Ledger:
        """The policy's ledger, refused (:class:`~veil.errors.LedgerMismatch`) unless it is the one the warehouse is
        bound to (:func:`veil.store.binding.open_ledger`: never a fresh or missing one in its place)."""
        from veil.store.binding import open_ledger

        return open_ledger(policy)

    def has_history(self) -> bool:
        """Has anything been recorded here: a charge, a release, a table write, a bounded copy's salt?"""
        with self._lock:
            return any(
                self._db.execute(f"SELECT 1 FROM {t} LIMIT 1").fetchone() is not None
                for t in ("reservations", "releases", "table_writes", "bounded_copies")
            )

    def history_mark(self) -> HistoryMark | None:
        """The latest reservation and release recorded here, made durable first (the WAL is synced: a query's charge
        commits unsynced, and the warehouse must never name a record a power loss could still take back); None when
        the sync fails (no mark is written then: the warehouse's mark only lags, never leads)."""
        with self._lock:
            row = self._db.execute(
                "SELECT (SELECT rowid || ' ' || id FROM reservations ORDER BY rowid DESC LIMIT 1),"
                " (SELECT rowid || ' ' || id FROM releases ORDER BY rowid DESC LIMIT 1)"
            ).fetchone()
        parts = [str(cell).split(" ", 1) if cell else ["0", ""] for cell in (row or (None, None))]
        try:
            wal_sync.sync_now(self._file)
        except OSError:
            return None
        return HistoryMark(int(parts[0][0]), parts[0][1], int(parts[1][0]), parts[1][1])

    def lacks(self, mark: HistoryMark) -> str | None:
        """What of ``mark`` this ledger does not hold (``"reservation <id>"``, ``"release <id>"``), else None."""
        with self._lock:
            for table, rid, what in (
                ("reservations", mark.reservation_id, "reservation"),
                ("releases", mark.release_id, "release"),
            ):
                if rid and self._db.execute(f"SELECT 1 FROM {table} WHERE id = ?", (rid,)).fetchone() is None:
                    return f"{what} {rid}"
        return None

    @contextmanager
    def exclusive(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (no other session or process writes meanwhile), committed synced."""
        with self._transaction() as db:
            yield db

    def retire(self, db: sqlite3.Connection, moved_to: str) -> None:
        """Mark this ledger moved to ``moved_to`` (inside :meth:`exclusive`): every later open refuses it."""
        db.execute(
            "INSERT INTO meta(key, value) VALUES ('moved_to', ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            (moved_to,),
        )
        self.moved_to = moved_to

    # -- plumbing ---------------------------------------------------------------------------
    @staticmethod
    def _migrate(db: sqlite3.Connection) -> None:
        has = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "spend" in has:  # a version-1 ledger
            for stmt in filter(None, (s.strip() for s in _SCHEMA.split(";"))):
                if "accounts(" in stmt and stmt.startswith("CREATE TABLE"):
                    db.execute(stmt)
            for stmt in filter(None, (s.strip() for s in _MIGRATE_1_TO_2.split(";"))):
                db.execute(stmt)
        for stmt in filter(None, (s.strip() for s in _SCHEMA.split(";"))):
            db.execute(stmt)
        found = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        try:
            version = int(found[0]) if found is not None else 0
        except ValueError:
            version = 0
        if version < 4:
            _migrate_3_to_4(db)
        db.execute(
            "INSERT INTO meta(key, value) VALUES ('schema_version', ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            (str(SCHEMA_VERSION),),
        )
        db.execute("INSERT OR IGNORE INTO meta(key, value) VALUES ('ledger_id', ?)", (secrets.token_hex(16),))

    @contextmanager
    def _transaction(self, *, synced: bool = True) -> Iterator[sqlite3.Connection]:
        """One ``BEGIN IMMEDIATE`` transaction; committed with ``synchronous=FULL`` (durable when it returns), or with
        ``NORMAL`` (``synced=False``: atomic and visible at once, durable after :func:`wal_sync.sync_now`)."""
        with self._lock:
            mode = "FULL" if synced else "NORMAL"
            if self._synchronous != mode:
                self._db.execute(f"PRAGMA synchronous={mode}")
                self._synchronous = mode
            self._db.execute("BEGIN IMMEDIATE")
            try:
                # (a reservation checks in its read of the accounts: _spent_sql; a release or refund in its status
                # update: _finish, review s21 X1)
                if self._guarded and synced:
                    self._refuse_moved()
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            else:
                self._db.execute("COMMIT")
            finally:
                if synced:  # a curator record (a publication, a retraction, a table write) may move the generation
                    self._generation = None

    def _refuse_moved(self) -> None:
        """Nothing is written to a ledger ``veil move-ledger`` moved away, also by a handle opened before the move (a
        live session of ``veil serve``): its charge, release or salt would be missing from the ledger in use."""
        row = self._db.execute("SELECT value FROM meta WHERE key = 'moved_to'").fetchone()
        if row is not None:
            self.moved_to = str(row[0])
            raise _moved_away(self.moved_to)

    def close(self) -> None:
        wal_sync.flush(self._file)  # a deferred sync of release rows begins now, not after its wait
        with self._lock:
            for pending in self._syncs:
                # wait: whatever ends with this handle's close (a publication refused after its charge, red team s41
                # A1) leaves only once its charges are on disk; a failed sync of a release row loses only that row,
                # and one of a reservation was (or will be) a ReleaseError of its release
                pending.exception()
            self._syncs.clear()
            self._db.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    @staticmethod
    def _read_spent(db: sqlite3.Connection, keys: Sequence[str]) -> dict[str, tuple[Cost, bool]]:
        """Each account's spend as stored (one statement for all of them): see :func:`_stored`. An account with no row
        has spent nothing."""
        out = {}
        for account, eps, delta in db.execute(_spent_sql(len(keys)), keys):
            if account == _MOVED:
                raise _moved_away(str(eps))
            out[account] = _stored(eps, delta)
        return out

    @classmethod
    def _spent(cls, db: sqlite3.Connection, account: str) -> Cost:
        return cls._read_spent(db, (account,)).get(account, _UNSPENT)[0]

    @staticmethod
    def _store_spent(
        db: sqlite3.Connection, keys: Sequence[str], old: Sequence[Cost], eps: Fraction, delta: Fraction
    ) -> tuple[Cost, ...]:
        """Store each account's ``old`` spend (as read in this transaction) plus (``eps``, ``delta``), in one statement;
        returns the new spends."""
        new: list[Cost] = []
        params: list[str] = []
        for account, before in zip(keys, old, strict=True):
            new_eps = _rounded_up(before.epsilon + eps)
            new_delta = _rounded_up(before.delta + delta if delta else before.delta)
            if new_eps.numerator < 0 or new_delta.numerator < 0:
                raise InternalError(f"ledger spend of {account!r} would become negative (ε {new_eps}, δ {new_delta})")
            texts = (str(new_eps), str(new_delta))
            new.append(_remember(texts, new_eps, new_delta))
            params += (account, *texts)
        if keys:
            db.execute(_store_sql(len(keys)), params)
        return tuple(new)

    # -- budgets -----------------------------------------------------------------------------
    @staticmethod
    def _population_spent(db: sqlite3.Connection, cap: Account) -> tuple[Cost, list[str]]:
        """A population cap's spend (the sum over its pool's table accounts, exact) and the ids of the publications
        without a DP guarantee of its population ever recorded (live, replaced or retracted: each makes it ∞)."""
        eps, delta = Fraction(0), Fraction(0)
        # every charge recorded under a population that may hold the cap's people (red team s69 F4), or on a table now
        # declared in one (review s22 Y1); those of an older ledger count by their table's declaration now (Y6)
        declared_now = dict(cap.populations)
        for account, e, d in db.execute(
            "SELECT account, epsilon_spent, delta_spent FROM accounts WHERE account >= 'under:' AND account < 'under;'"
        ):
            if _counts_against(cap.population, str(account), declared_now):
                spent = _stored(e, d)[0]
                eps, delta = eps + spent.epsilon, delta + spent.delta
        tables = dict(cap.populations)
        earlier: list[str] = []
        for rid, params_text, epsilon in db.execute(
            "SELECT id, params, epsilon FROM releases INDEXED BY releases_kind WHERE kind = 'publication' ORDER BY rowid"
        ):
            try:
                params = json.loads(params_text)
            except ValueError:
                params = None
            if not isinstance(params, dict):
                earlier.append(rid)  # unreadable: it may be anything, about anyone
                continue
            flag = params.get("dp_release")  # veil.generators.transaction.release_is_dp
            if flag is True or (not isinstance(flag, bool) and epsilon is not None and params.get("partition") != "mdav"):
                continue
            recorded = params.get("source_population")
            theirs = {recorded if isinstance(recorded, str) else None, tables.get(str(params.get("source_table")))}
            if any(population_matches(cap.population, t) for t in theirs):
                earlier.append(rid)
        return Cost(eps, min(delta, _DELTA_MAX)), earlier

    def population_spent(self, cap: Account) -> tuple[Cost, list[str]]:
        """What a population cap (:meth:`Account.population_cap`) has spent, and the publications without a DP
        guarantee of its population (any makes its ε spent unbounded)."""
        with self._lock:
            return self._population_spent(self._db, cap)

    def spent(self, account: str) -> Cost:
        """Exact (ε, δ) charged to ``account`` (``"analyst:NAME"`` or ``"table:NAME"``) so far."""
        with self._lock:
            return self._spent(self._db, account)

    def reserve(
        self,
        cost: Cost,
        accounts: Sequence[Account],
        *,
        actor: str,
        canonical_sql: str = "",
        cache_key: str = "",
        what: str = "query",
    ) -> Reservation:
        """Atomically charge ``cost`` to every account if it fits in all of them; else raise
        :class:`~veil.errors.BudgetExhausted` naming the account that is short (nothing is charged)."""
        if not isinstance(cost, Cost):
            raise InternalError(f"reserve needs a Cost, got {cost!r}")
        return self._reserve(cost, accounts, actor, canonical_sql, cache_key, what)

    def _reserve(
        self, cost: Cost, accounts: Sequence[Account], actor: str, canonical_sql: str, cache_key: str, what: str
    ) -> Reservation:
        every = tuple(a.key for a in accounts)
        if len(set(every)) != len(every):
            raise InternalError(f"an account is charged twice in one reservation: {every}")
        caps = [a for a in accounts if a.pool is not None]  # population caps: checked, never stored
        accounts = [a for a in accounts if a.pool is None]
        keys = tuple(a.key for a in accounts)
        with self._transaction(synced=False) as db:
            stored = self._read_spent(db, keys)  # the transaction holds the write lock: nobody changes them meanwhile
            spent_now = [stored.get(a.key, _UNSPENT)[0] for a in accounts]
            analyst = any(a.key.startswith("analyst:") for a in accounts)  # else the curator's: shown in full
            # The analyst's own accounts first: a refusal is free, so whether the shared ones (population caps, tables'
            # accounts: every analyst's and publication's spend together) would refuse must never show while the own
            # one refuses anyway — which account refused was a free oracle on the others' spending (review s23 Y1) —,
            # and every shared refusal reads the same, naming no account and no amount (red team s73 F2)
            for acct in accounts:
                if acct.key.startswith("analyst:"):
                    spent, exhausted = stored.get(acct.key, _UNSPENT)
                    if _over(acct, spent, exhausted, cost):
                        raise _own_refusal(what, acct, cost, spent)
            for cap in caps:  # read in the same transaction: two charges of one population serialise on it
                pooled, earlier = self._population_spent(db, cap)
                if earlier and cap.epsilon_total is not None:  # the curator's releases, not anyone's query
                    raise BudgetExhausted(
                        f"{what} needs ε = {format_epsilon(cost.epsilon)} but {cap.label} (epsilon_total = "
                        f"{format_epsilon(cap.epsilon_total)}) has nothing left: its population already has "
                        f"{'a release' if len(earlier) == 1 else f'{len(earlier)} releases'} without a DP guarantee "
                        f"({', '.join(earlier)}), whose ε is unbounded (∞), and a cap counts everything released about "
                        "its people, before it was declared too",
                        hint="Nothing more can be released under this cap; if the table truly holds other people than "
                        'those releases\' sources, declare a different `population = "..."` for it',
                    )
                if _over(cap, pooled, False, cost):
                    raise _shared_refusal(what, cost) if analyst else _curator_refusal(what, cap, cost, pooled)
            for acct in accounts:
                if not acct.key.startswith("analyst:"):
                    spent, exhausted = stored.get(acct.key, _UNSPENT)
                    if _over(acct, spent, exhausted, cost):
                        raise _shared_refusal(what, cost) if analyst else _curator_refusal(what, acct, cost, spent)
            rid = _new_id("q")
            db.execute(
                "INSERT INTO reservations(id, actor, epsilon, delta, accounts, status, canonical_sql, cache_key, "
                "created_at) VALUES (?, ?, ?, ?, ?, 'reserved', ?, ?, ?)",
                (rid, actor, str(cost.epsilon), str(cost.delta), _keys_json(keys), canonical_sql, cache_key, _now()),
            )
            after = self._store_spent(db, keys, spent_now, cost.epsilon, cost.delta)
        # Atomic and at once visible to every other connection (WAL); its fsync starts once it is committed and
        # runs while the query does: release() waits for it before anything is answered
        durable = wal_sync.start(self._file)
        with self._lock:  # close() waits for it too: a handle never closes over a charge that is not on disk yet
            self._syncs = [f for f in self._syncs if not f.done()]
            self._syncs.append(durable)
        return Reservation(rid, actor, cost, keys, canonical_sql, cache_key, durable, after)

    def cancel(self, reservation: Reservation) -> None:
        """Refund a reservation for which no noise was ever drawn (e.g. refused before reading data). Not synced on
        its own: a refund lost to a power loss leaves the charge standing."""
        keys = reservation.accounts
        with self._transaction(synced=False) as db:
            self._finish(db, reservation, "cancelled")
            stored = self._read_spent(db, keys)
            old = [stored.get(key, _UNSPENT)[0] for key in keys]
            self._store_spent(db, keys, old, -reservation.cost.epsilon, -reservation.cost.delta)

    @staticmethod
    def _finish(db: sqlite3.Connection, reservation: Reservation, status: str) -> None:
        """Mark a ``reserved`` reservation ``status`` (one statement); anything else is an InternalError, and a ledger
        ``veil move-ledger`` retired since the reservation takes no write (LedgerMismatch: the release row or refund
        belongs in the moved copy, review s21 X1)."""
        done = db.execute(
            "UPDATE reservations SET status = ?, finished_at = ? WHERE id = ? AND status = 'reserved' "
            "AND NOT EXISTS (SELECT 1 FROM meta WHERE key = 'moved_to')",
            (status, _now(), reservation.id),
        )
        if done.rowcount != 1:
            moved = db.execute("SELECT value FROM meta WHERE key = 'moved_to'").fetchone()
            if moved is not None:
                raise _moved_away(str(moved[0]))
            row = db.execute("SELECT status FROM reservations WHERE id = ?", (reservation.id,)).fetchone()
            raise InternalError(f"cannot mark reservation {reservation.id!r} {status}: it is {row and row[0]!r}")

    def release(
        self,
        reservation: Reservation,
        *,
        answer: Mapping[str, Any],
        statistics: Sequence[ReleasedStatistic] = (),
        vectors: Sequence[ReleasedVector] = (),
        groups: Sequence[Sequence[Any]] = (),
        method: str = "query",
        table: str | None = None,
    ) -> str:
        """Log the answer of a reserved query; the charge stands. Returns the release id.

        Its noisy numbers come as ``statistics`` (one row each) or, cheaper, as ``vectors`` over ``groups`` (one row per
        statistic and the groups once: a GROUP BY of 50 groups and 3 statistics logs 3 rows, not 150). Either way
        :meth:`get_release` reads them back as one :class:`ReleasedStatistic` per value.

        First waits until the reservation is on disk (its fsync ran while the query did): the caller returns the answer
        only after this, so no answer leaves before its charge is durable. The release row commits without a sync of
        its own; it joins the file's deferred fsync (:mod:`veil.store.wal_sync`: carried by the next reservation's, or
        begun within :data:`~veil.store.wal_sync.DEFER_SECONDS`), off the answer's path: a power loss before it can lose
        the row, never the charge."""
        self.wait_durable(reservation)
        with self._transaction(synced=False) as db:
            self._finish(db, reservation, "released")
            rel_id = self._insert_release(
                db,
                kind="query",
                method=method,
                actor=reservation.actor,
                table=table,
                params={},
                metrics={},
                cost=reservation.cost,
                canonical_sql=reservation.canonical_sql,
                cache_key=reservation.cache_key,
                answer=answer,
                reservation_id=reservation.id,
            )
            if statistics:
                self._insert_statistics(db, rel_id, statistics)
            if vectors:
                self._insert_vectors(db, rel_id, vectors, groups, self._groups_text)
        with self._lock:
            self._syncs = [f for f in self._syncs if not f.done()]
            self._syncs.append(wal_sync.start(self._file, defer=True))  # (nothing waits for it; close() does)
        return rel_id

    def wait_durable(self, reservation: Reservation) -> None:
        """Block until ``reservation``'s charge is on disk; a failed sync withholds the answer (the charge stands).

        :meth:`release` calls it before logging the answer. Whatever else ends a reserved query after its reservation
        (an engine failure, a cancel, a refusal of the post-processing) is an outcome too, and must also leave only
        once this returned (red team s41 A1)."""
        try:
            if reservation.durable is None:
                wal_sync.sync_now(self._file)
            else:
                reservation.durable.result()
        except OSError as exc:
            raise ReleaseError(
                f"the ledger {str(self.path)!r} could not be synced to disk ({exc}); the answer is withheld and its "
                f"charge of ε = {format_epsilon(reservation.cost.epsilon)} stands",
                hint="Check the disk that holds the ledger file, then ask again",
            ) from exc

    @staticmethod
    def _insert_statistics(db: sqlite3.Connection, rel_id: str, statistics: Sequence[ReleasedStatistic]) -> None:
        groups: dict[Any, str] = {}  # each group's JSON once (a group repeats for every statistic)
        eps_text: dict[int, str] = {}  # and each ε share's text once (by identity: hashing a Fraction is slow)

        def group_json(g: Sequence[Any]) -> str:
            try:
                text = groups.get(g)
            except TypeError:  # unhashable group value
                return dumps(list(g))
            if text is None:
                text = groups[g] = dumps(list(g))
            return text

        db.executemany(
            "INSERT INTO statistics(release_id, idx, name, mechanism, epsilon, sensitivity, scale, value, ci95, grp) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    rel_id,
                    i,
                    s.name,
                    s.mechanism,
                    eps_text.get(id(s.epsilon)) or eps_text.setdefault(id(s.epsilon), str(s.epsilon)),
                    float(s.sensitivity),
                    float(s.scale),
                    dumps(s.value),
                    None if s.ci95 is None else float(s.ci95),
                    group_json(s.group),
                )
                for i, s in enumerate(statistics)
            ],
        )

    @staticmethod
    def _insert_vectors(
        db: sqlite3.Connection,
        rel_id: str,
        vectors: Sequence[ReleasedVector],
        groups: Sequence[Sequence[Any]],
        memo: dict[tuple[Any, ...], str] | None = None,
    ) -> None:
        for v in vectors:
            if len(v.values) != len(groups):
                raise InternalError(f"{len(v.values)} values of {v.name!r} for {len(groups)} groups")
        db.execute("INSERT INTO release_groups(release_id, groups) VALUES (?, ?)", (rel_id, _rows_json(groups, memo)))
        db.executemany(
            "INSERT INTO statistic_vectors(release_id, idx, name, mechanism, epsilon, sensitivity, scale, ci95, vals) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    rel_id,
                    i,
                    v.name,
                    v.mechanism,
                    str(v.epsilon),
                    float(v.sensitivity),
                    float(v.scale),
                    None if v.ci95 is None else float(v.ci95),
                    dumps(v.values if type(v.values) in _ROWS else list(v.values)),
                )
                for i, v in enumerate(vectors)
            ],
        )

    def _vector_rows(self, rid: str) -> list[ReleasedStatistic]:
        """The release's logged vectors (schema version 3), one :class:`ReleasedStatistic` per value."""
        found = self._db.execute("SELECT groups FROM release_groups WHERE release_id = ?", (rid,)).fetchone()
        if found is None:
            return []
        groups = [tuple(g) for g in json.loads(found[0])]
        out: list[ReleasedStatistic] = []
        for name, mech, eps, sens, scale, ci95, vals in self._db.execute(
            "SELECT name, mechanism, epsilon, sensitivity, scale, ci95, vals FROM statistic_vectors "
            "WHERE release_id = ? ORDER BY idx",
            (rid,),
        ):
            vector = ReleasedVector(name, mech, Fraction(eps), sens, scale, ci95, tuple(json.loads(vals)))
            out.extend(vector.rows(groups))
        return out

    def catalog_generation(self) -> int:
        """Grows whenever a publication or a retraction is recorded, or the curator writes a table through Veil
        (:meth:`record_table_write`; the sum of the latest row ids, each of which only grows): a session's catalog
        of public tables, and what it measured on them, is stale once it moves."""
        with self._lock:
            # read again only when the file changed: SQLite's data_version moves with every commit of another
            # connection, and this handle's own commits that can move the number (curator records, all synced:
            # _transaction) forget it; a query's reservation and release cannot (one statement instead of a read of
            # two tables per query, tests/test_ledger_answer_path.py)
            version = self._db.execute("PRAGMA data_version").fetchone()[0]
            known = self._generation
            if known is not None and known[0] == version:
                return known[1]
            row = self._db.execute(
                "SELECT (SELECT COALESCE(MAX(rowid), 0) FROM releases WHERE kind IN ('publication', 'retraction'))"
                " + (SELECT COALESCE(MAX(id), 0) FROM table_writes)"
            ).fetchone()
            generation = int(row[0]) if row else 0
            self._generation = (version, generation)
        return generation

    def record_table_write(self, table: str) -> None:
        """Note that ``table`` was (re)written in the warehouse: open sessions re-read the catalog and measure
        public tables again (:meth:`catalog_generation`)."""
        with self._transaction() as db:
            db.execute("INSERT INTO table_writes(table_name, at) VALUES (?, ?)", (table, _now()))

    def cached_answer(self, actor: str, cache_key: str) -> dict[str, Any] | None:
        """The logged answer of an identical canonical query by the same analyst, if any."""
        with self._lock:
            row = self._db.execute(
                _CACHED_ANSWER,
                (actor, cache_key),
            ).fetchone()
        return None if row is None else json.loads(row[0])

    # -- publications and reading the log -----------------------------------------------------
    def _insert_release(self, db: sqlite3.Connection, **f: Any) -> str:
        rel_id = _new_id({"query": "r", "publication": "p"}.get(f["kind"], "x"))
        cost: Cost | None = f.get("cost")
        db.execute(
            "INSERT INTO releases(id, kind, method, actor, created_at, table_name, params, metrics, epsilon, delta, "
            "canonical_sql, cache_key, answer, reservation_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                rel_id,
                f["kind"],
                f["method"],
                f["actor"],
                _now(),
                f["table"],
                dumps(f["params"]),
                dumps(f["metrics"]),
                None if cost is None else str(cost.epsilon),
                None if cost is None else str(cost.delta),
                f.get("canonical_sql"),
                f.get("cache_key"),
                None if f.get("answer") is None else dumps(f["answer"]),
                f.get("reservation_id"),
            ),
        )
        return rel_id

    def record(
        self,
        *,
        kind: str,
        method: str,
        params: Mapping[str, Any],
        metrics: Mapping[str, Any],
        table: str | None = None,
        epsilon: float | Fraction | None = None,
        delta: float | Fraction | None = None,
        actor: str = "curator",
        reservation: Reservation | None = None,
    ) -> str:
        """Write a release record (a publication, a retraction). With ``reservation`` (the cost charged
        before the method drew its randomness) the reservation is marked released in the same
        transaction and the record carries its cost; otherwise ``epsilon``/``delta`` are recorded as
        stated (``None`` = no DP guarantee)."""
        if kind not in ("query", "publication", "retraction"):
            raise ReleaseError(f"release kind must be 'query', 'publication' or 'retraction', got {kind!r}")
        if reservation is not None:
            cost: Cost | None = reservation.cost
        elif epsilon is None:
            cost = None
        else:
            cost = Cost(as_epsilon(epsilon, allow_zero=True), as_delta(delta or 0))
        with self._transaction() as db:
            if reservation is not None:
                self._finish(db, reservation, "released")
            return self._insert_release(
                db,
                kind=kind,
                method=method,
                actor=actor,
                table=table,
                params=params,
                metrics=metrics,
                cost=cost,
                reservation_id=None if reservation is None else reservation.id,
            )

    _COLS = (
        "id, kind, method, actor, created_at, table_name, params, metrics, epsilon, delta, canonical_sql, "
        "cache_key, answer, reservation_id"
    )

    def _row_to_release(self, row: tuple[Any, ...]) -> Release:
        (rid, kind, method, actor, created, table, params, metrics, eps, delta, csql, _ck, answer, _res) = row
        stats = tuple(
            ReleasedStatistic(
                name=s[0],
                mechanism=s[1],
                epsilon=Fraction(s[2]),
                sensitivity=s[3],
                scale=s[4],
                value=json.loads(s[5]) if s[5] is not None else None,
                ci95=s[6],
                group=tuple(json.loads(s[7]) if s[7] else ()),
            )
            for s in self._db.execute(
                "SELECT name, mechanism, epsilon, sensitivity, scale, value, ci95, grp FROM statistics "
                "WHERE release_id = ? ORDER BY idx",
                (rid,),
            )
        ) + tuple(self._vector_rows(rid))
        return Release(
            id=rid,
            kind=kind,
            method=method,
            actor=actor,
            created_at=created,
            table=table,
            params=json.loads(params),
            metrics=json.loads(metrics),
            epsilon=_frac(eps),
            delta=_frac(delta),
            canonical_sql=csql,
            answer=None if answer is None else json.loads(answer),
            statistics=stats,
        )

    def get_release(self, release_id: str) -> Release:
        with self._lock:
            row = self._db.execute(f"SELECT {self._COLS} FROM releases WHERE id = ?", (release_id,)).fetchone()
            if row is None:
                raise ReleaseError(f"no release with id {release_id!r} in {self.path}", hint="List releases with `veil releases`")
            return self._row_to_release(row)

    def list_releases(self, kind: str | None = None) -> list[Release]:
        """Releases in the order they were committed (SQLite's rowid), never by their wall-clock stamps: a clock
        stepping back must not put a retraction before its publication (red team s24, A13)."""
        with self._lock:
            if kind is None:
                rows = self._db.execute(f"SELECT {self._COLS} FROM releases ORDER BY rowid").fetchall()
            else:
                rows = self._db.execute(f"SELECT {self._COLS} FROM releases WHERE kind = ? ORDER BY rowid", (kind,)).fetchall()
            return [self._row_to_release(r) for r in rows]

    def publication_log(self) -> list[Release]:
        """The publications and retractions, in commit order: what :func:`~veil.store.publications.published_tables`
        replays. No analyst query release is read: the log holds every answer ever given, and the replay runs at every
        catalog build (each new session, each wire connection), so reading them all made each such build take time
        linear in the number of answers ever logged (red team s41 A4: 4 s at 20,000 answers)."""
        with self._lock:
            rows = self._db.execute(
                f"SELECT {self._COLS} FROM releases INDEXED BY releases_kind WHERE kind IN ('publication', 'retraction') "
                "ORDER BY rowid"
            ).fetchall()
            return [self._row_to_release(r) for r in rows]

    def reservations(self, actor: str | None = None) -> list[dict[str, Any]]:
        """Reservation rows (for audits and tests): id, actor, epsilon, delta, accounts, status, canonical_sql."""
        with self._lock:
            q = "SELECT id, actor, epsilon, delta, accounts, status, canonical_sql, created_at, finished_at FROM reservations"
            rows = (
                self._db.execute(q + " WHERE actor = ? ORDER BY created_at", (actor,))
                if actor
                else self._db.execute(q + " ORDER BY created_at")
            ).fetchall()
        keys = ("id", "actor", "epsilon", "delta", "accounts", "status", "canonical_sql", "created_at", "finished_at")
        out = [dict(zip(keys, r, strict=True)) for r in rows]
        for r in out:
            r["epsilon"] = Fraction(r["epsilon"])
            r["delta"] = Fraction(r["delta"])
            r["accounts"] = tuple(json.loads(r["accounts"]))
        return out

    # -- bounded copies: their identity and secret salt live here, never in the warehouse ----------
    def bounded_copy(self, identity: str) -> tuple[str, str] | None:
        """``(table name, salt)`` of the bounded copy with this identity, if one was recorded."""
        with self._lock:
            row = self._db.execute("SELECT name, salt FROM bounded_copies WHERE identity = ?", (identity,)).fetchone()
        return None if row is None else (str(row[0]), str(row[1]))

    def record_bounded_copy(self, identity: str, source: str, name: str, salt: str) -> list[str]:
        """Record a new bounded copy of ``source``; returns the names of the older copies it replaces."""
        with self._transaction() as db:
            old = [str(r[0]) for r in db.execute(
                "SELECT name FROM bounded_copies WHERE source = ? AND identity != ?", (source, identity)
            )]  # fmt: skip
            db.execute("DELETE FROM bounded_copies WHERE source = ? AND identity != ?", (source, identity))
            db.execute(
                "INSERT INTO bounded_copies(identity, source, name, salt, created_at) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT(identity) DO UPDATE SET name = excluded.name, salt = excluded.salt",
                (identity, source, name, salt, _now()),
            )
        return old
