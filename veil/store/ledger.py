"""The durable privacy ledger: budgets, reservations, the release log and the answer cache.

One SQLite file in WAL mode with ``synchronous=FULL``; every change is one ``BEGIN IMMEDIATE``
transaction, so concurrent sessions and processes serialise on it. Invariants (tested):

* ``spend.spent`` of an analyst equals the exact sum of ε over that analyst's reservations whose
  status is ``reserved`` or ``released``; it never exceeds the budget passed to :meth:`Ledger.reserve`.
* A reservation is committed (atomically, visible to every session) before any statistic is
  computed; a release row is committed with ``synchronous=FULL`` before the answer is returned, and
  that sync also makes the reservation durable (WAL frames are synced in order), so a durable answer
  always has a durable charge. A crash in between leaves a ``reserved`` row:
  charged but unanswered, visible in the log, never refunded.
* :meth:`Ledger.cancel` refunds only reservations for which no noise was drawn (the caller's promise:
  the engine failed before noise).

Schema (also in ``docs/ledger.md``)::

    spend(analyst TEXT PRIMARY KEY, spent TEXT)                      -- exact Fraction "n/d"
    reservations(id TEXT PRIMARY KEY, analyst, epsilon TEXT, status TEXT, canonical_sql, cache_key,
                 created_at, finished_at)                           -- status: reserved|released|cancelled
    releases(id TEXT PRIMARY KEY, kind, method, actor, created_at, table_name, params JSON,
             metrics JSON, epsilon TEXT, delta REAL, canonical_sql, cache_key, answer JSON, reservation_id)
    statistics(release_id, idx, name, mechanism, epsilon TEXT, sensitivity REAL, scale REAL,
               value JSON, ci95 REAL, grp JSON, PRIMARY KEY (release_id, idx))
"""

from __future__ import annotations

import json
import secrets
import sqlite3
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path
from types import TracebackType
from typing import Any

from veil.errors import BudgetExhausted, InternalError, ReleaseError
from veil.mechanisms.budget import as_epsilon, format_epsilon
from veil.policy import Policy
from veil.store.releases import Release, ReleasedStatistic, dumps

__all__ = ["Ledger", "Reservation"]

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS spend(analyst TEXT PRIMARY KEY, spent TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS reservations(
    id TEXT PRIMARY KEY, analyst TEXT NOT NULL, epsilon TEXT NOT NULL, status TEXT NOT NULL,
    canonical_sql TEXT, cache_key TEXT, created_at TEXT NOT NULL, finished_at TEXT);
CREATE INDEX IF NOT EXISTS reservations_analyst ON reservations(analyst, status);
CREATE TABLE IF NOT EXISTS releases(
    id TEXT PRIMARY KEY, kind TEXT NOT NULL, method TEXT NOT NULL, actor TEXT NOT NULL,
    created_at TEXT NOT NULL, table_name TEXT, params TEXT NOT NULL, metrics TEXT NOT NULL,
    epsilon TEXT, delta REAL, canonical_sql TEXT, cache_key TEXT, answer TEXT, reservation_id TEXT);
CREATE INDEX IF NOT EXISTS releases_cache ON releases(actor, cache_key);
CREATE INDEX IF NOT EXISTS releases_kind ON releases(kind);
CREATE TABLE IF NOT EXISTS statistics(
    release_id TEXT NOT NULL, idx INTEGER NOT NULL, name TEXT NOT NULL, mechanism TEXT NOT NULL,
    epsilon TEXT NOT NULL, sensitivity REAL, scale REAL, value TEXT, ci95 REAL, grp TEXT,
    PRIMARY KEY (release_id, idx));
"""


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


def _frac(text: str | None) -> Fraction | None:
    return None if text is None else Fraction(text)


def _new_id(prefix: str) -> str:
    return f"{prefix}{secrets.token_hex(6)}"


@dataclass(frozen=True)
class Reservation:
    id: str
    analyst: str
    epsilon: Fraction
    canonical_sql: str
    cache_key: str


class Ledger:
    """A handle on the ledger file. Thread-safe (one lock per handle); use one per process or session."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30.0)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("PRAGMA busy_timeout=30000")
        with self._transaction() as db:
            for stmt in filter(None, (s.strip() for s in _SCHEMA.split(";"))):
                db.execute(stmt)
            db.execute("INSERT OR IGNORE INTO meta(key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))

    @classmethod
    def for_policy(cls, policy: Policy) -> Ledger:
        return cls(policy.ledger_path)

    # -- plumbing ---------------------------------------------------------------------------
    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            else:
                self._db.execute("COMMIT")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def _spent(self, db: sqlite3.Connection, analyst: str) -> Fraction:
        row = db.execute("SELECT spent FROM spend WHERE analyst = ?", (analyst,)).fetchone()
        return Fraction(row[0]) if row else Fraction(0)

    def _add_spent(self, db: sqlite3.Connection, analyst: str, delta: Fraction) -> Fraction:
        new = self._spent(db, analyst) + delta
        if new < 0:
            raise InternalError(f"ledger spend for {analyst!r} would become negative ({new})")
        db.execute(
            "INSERT INTO spend(analyst, spent) VALUES (?, ?) ON CONFLICT(analyst) DO UPDATE SET spent = excluded.spent",
            (analyst, str(new)),
        )
        return new

    # -- budgets -----------------------------------------------------------------------------
    def spent(self, analyst: str) -> Fraction:
        """Exact ε charged to ``analyst`` so far (reserved + released)."""
        with self._lock:
            return self._spent(self._db, analyst)

    def reserve(self, analyst: str, epsilon: Fraction, budget: Fraction, *, canonical_sql: str, cache_key: str) -> Reservation:
        """Atomically charge ``epsilon`` if it fits in ``budget``; else raise BudgetExhausted (no charge)."""
        eps = as_epsilon(epsilon, allow_zero=True)
        with self._lock:
            # Atomic and at once visible to every other connection (WAL), but not fsynced on its own:
            # the release's synchronous=FULL commit syncs the WAL up to and including this reservation,
            # so no answer can ever be durable without its charge. A power loss before the release loses
            # only a reservation whose answer was never sent.
            self._db.execute("PRAGMA synchronous=NORMAL")
            try:
                return self._reserve(analyst, eps, budget, canonical_sql=canonical_sql, cache_key=cache_key)
            finally:
                self._db.execute("PRAGMA synchronous=FULL")

    def _reserve(self, analyst: str, eps: Fraction, budget: Fraction, *, canonical_sql: str, cache_key: str) -> Reservation:
        with self._transaction() as db:
            spent = self._spent(db, analyst)
            remaining = budget - spent
            if eps > remaining:
                raise BudgetExhausted(
                    f"query needs ε = {format_epsilon(eps)} but analyst {analyst!r} has "
                    f"ε = {format_epsilon(max(remaining, Fraction(0)))} remaining of {format_epsilon(budget)} "
                    f"(short by {format_epsilon(eps - remaining)})",
                    hint="Lower the query's epsilon, or ask the curator for more budget",
                )
            rid = _new_id("q")
            db.execute(
                "INSERT INTO reservations(id, analyst, epsilon, status, canonical_sql, cache_key, created_at) "
                "VALUES (?, ?, ?, 'reserved', ?, ?, ?)",
                (rid, analyst, str(eps), canonical_sql, cache_key, _now()),
            )
            self._add_spent(db, analyst, eps)
        return Reservation(rid, analyst, eps, canonical_sql, cache_key)

    def cancel(self, reservation: Reservation) -> None:
        """Refund a reservation for which no noise was ever drawn (e.g. the engine failed)."""
        with self._transaction() as db:
            row = db.execute("SELECT status FROM reservations WHERE id = ?", (reservation.id,)).fetchone()
            if row is None or row[0] != "reserved":
                raise InternalError(f"cannot cancel reservation {reservation.id!r} in state {row and row[0]!r}")
            db.execute("UPDATE reservations SET status = 'cancelled', finished_at = ? WHERE id = ?", (_now(), reservation.id))
            self._add_spent(db, reservation.analyst, -reservation.epsilon)

    def release(
        self,
        reservation: Reservation,
        *,
        answer: Mapping[str, Any],
        statistics: Sequence[ReleasedStatistic],
        method: str = "query",
        table: str | None = None,
    ) -> str:
        """Log the answer of a reserved query; the charge stands. Returns the release id."""
        with self._transaction() as db:
            row = db.execute("SELECT status FROM reservations WHERE id = ?", (reservation.id,)).fetchone()
            if row is None or row[0] != "reserved":
                raise InternalError(f"cannot release reservation {reservation.id!r} in state {row and row[0]!r}")
            db.execute("UPDATE reservations SET status = 'released', finished_at = ? WHERE id = ?", (_now(), reservation.id))
            rel_id = self._insert_release(
                db,
                kind="query",
                method=method,
                actor=reservation.analyst,
                table=table,
                params={},
                metrics={},
                epsilon=reservation.epsilon,
                delta=None,
                canonical_sql=reservation.canonical_sql,
                cache_key=reservation.cache_key,
                answer=answer,
                reservation_id=reservation.id,
            )
            groups: dict[Any, str] = {}  # each group's JSON once (a group repeats for every statistic)
            eps_text: dict[Fraction, str] = {}  # and each ε share's text once

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
                        eps_text.get(s.epsilon) or eps_text.setdefault(s.epsilon, str(s.epsilon)),
                        float(s.sensitivity),
                        float(s.scale),
                        dumps(s.value),
                        None if s.ci95 is None else float(s.ci95),
                        group_json(s.group),
                    )
                    for i, s in enumerate(statistics)
                ],
            )
        return rel_id

    def cached_answer(self, analyst: str, cache_key: str) -> dict[str, Any] | None:
        """The logged answer of an identical canonical query by the same analyst, if any."""
        with self._lock:
            row = self._db.execute(
                "SELECT answer FROM releases WHERE kind = 'query' AND actor = ? AND cache_key = ? ORDER BY created_at LIMIT 1",
                (analyst, cache_key),
            ).fetchone()
        return None if row is None else json.loads(row[0])

    # -- publications and reading the log -----------------------------------------------------
    def _insert_release(self, db: sqlite3.Connection, **f: Any) -> str:
        rel_id = _new_id("r" if f["kind"] == "query" else "p")
        eps = f["epsilon"]
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
                None if eps is None else str(as_epsilon(eps, allow_zero=True)),
                f["delta"],
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
        delta: float | None = None,
        actor: str = "curator",
        charge_to: str | None = None,
        budget: Fraction | None = None,
    ) -> str:
        """Write a release record; see :func:`veil.store.releases.record_release`."""
        if kind not in ("query", "publication"):
            raise ReleaseError(f"release kind must be 'query' or 'publication', got {kind!r}")
        eps = None if epsilon is None else as_epsilon(epsilon, allow_zero=True)
        with self._transaction() as db:
            if charge_to is not None:
                if eps is None:
                    raise ReleaseError("charge_to needs an epsilon to charge")
                if budget is not None and self._spent(db, charge_to) + eps > budget:
                    raise BudgetExhausted(
                        f"publication needs ε = {format_epsilon(eps)} but {charge_to!r} has "
                        f"{format_epsilon(budget - self._spent(db, charge_to))} remaining"
                    )
                self._add_spent(db, charge_to, eps)
            return self._insert_release(
                db,
                kind=kind,
                method=method,
                actor=actor,
                table=table,
                params=params,
                metrics=metrics,
                epsilon=eps,
                delta=delta,
            )

    def _row_to_release(self, row: sqlite3.Row | tuple[Any, ...]) -> Release:
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
        )
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
            delta=delta,
            canonical_sql=csql,
            answer=None if answer is None else json.loads(answer),
            statistics=stats,
        )

    _COLS = (
        "id, kind, method, actor, created_at, table_name, params, metrics, epsilon, delta, canonical_sql, "
        "cache_key, answer, reservation_id"
    )

    def get_release(self, release_id: str) -> Release:
        with self._lock:
            row = self._db.execute(f"SELECT {self._COLS} FROM releases WHERE id = ?", (release_id,)).fetchone()
            if row is None:
                raise ReleaseError(f"no release with id {release_id!r} in {self.path}", hint="List releases with `veil releases`")
            return self._row_to_release(row)

    def list_releases(self, kind: str | None = None) -> list[Release]:
        with self._lock:
            if kind is None:
                rows = self._db.execute(f"SELECT {self._COLS} FROM releases ORDER BY created_at, id").fetchall()
            else:
                rows = self._db.execute(
                    f"SELECT {self._COLS} FROM releases WHERE kind = ? ORDER BY created_at, id", (kind,)
                ).fetchall()
            return [self._row_to_release(r) for r in rows]

    def reservations(self, analyst: str | None = None) -> list[dict[str, Any]]:
        """Reservation rows (for audits and tests): id, analyst, epsilon, status, canonical_sql."""
        with self._lock:
            q = "SELECT id, analyst, epsilon, status, canonical_sql, created_at, finished_at FROM reservations"
            rows = (
                self._db.execute(q + " WHERE analyst = ? ORDER BY created_at", (analyst,))
                if analyst
                else self._db.execute(q + " ORDER BY created_at")
            ).fetchall()
        keys = ("id", "analyst", "epsilon", "status", "canonical_sql", "created_at", "finished_at")
        out = [dict(zip(keys, r, strict=True)) for r in rows]
        for r in out:
            r["epsilon"] = Fraction(r["epsilon"])
        return out
