"""A warehouse and its ledger are bound: the warehouse records the identity of the one ledger that holds its history.

The ledger holds everything Veil must never forget about the warehouse's people: every analyst's and table's spent
budget, every release (the "one release without a DP guarantee per population, ever" rule reads them), which tables
are published (never overwritten with raw data), the bounded copies' secret salts. Pointing ``[ledger] path`` at a
fresh file used to forget all of it at once: the population reopened to a second release without guarantee (the
refresh difference gave a newcomer's exact value, red team s66 F7), every budget started again at zero, a published
table could be overwritten with raw rows.

So every ledger carries a random identity (``meta.ledger_id``, written when it is created), and the warehouse records
the identity of its ledger on first use (the table ``_veil_ledger_binding`` in the DuckDB file, or in the Spark database
Veil writes to: it travels with the warehouse). From then on every way in — a query session (``veil query``,
``veil.connect``, ``veil serve``), a publication, a retraction, ``veil budget``, ``veil ingest``/``write_table``,
``veil analyst`` — opens the ledger through :func:`open_ledger`, which refuses (:class:`~veil.errors.LedgerMismatch`,
before anything is read or written) a ledger of another identity, a missing one (never created afresh), and one moved
away with :func:`move_ledger` (the one deliberate migration: it copies the whole history, identity included, and
retires the old file).

Identity alone accepted a stale copy of the bound ledger (a backup, a ``cp`` from before a publication: review s21
X2). So the warehouse also keeps a high-water mark of its ledger's history (``_veil_ledger_mark``: the latest
reservation and release, :class:`~veil.store.ledger.HistoryMark`), raised at the curator's steps (binding, table
writes, a publication's commit and recovery; best effort, a retraction and the bounded copies' preparation at ``veil
serve``'s start) from the ledger's synced state, so it lags the ledger and never leads it; :func:`check_history`
refuses a ledger that lacks what it names. Analysts' charges are marked only by the next curator step, never per
query or per session (the warehouse is not written then: a DuckDB write would close every reader; the session-boundary
mark was reverted in review s22), so a backup restored after analysts' charges with no curator step between is accepted
(red team s68 F2, open; docs/ledger.md).

A warehouse written before the binding existed is bound by its first use, unless it shows Veil's history (tables Veil
wrote, bounded copies, a publication journal) while the ledger has no record at all: its published tables' records
would be orphaned (refused).

A Spark warehouse (``[engine] kind = "spark"``) is bound the same way: :mod:`veil.store.warehouse` sends the binding's
and the mark's reads and writes to :mod:`veil.store.spark`, which keeps them in the Spark database Veil writes to
(local mode: Parquet files of the warehouse, read with pyarrow; Spark Connect: a view and a table, read with Spark
SQL). Spark has no transaction spanning two writes: the binding is written once (first creator wins: an exclusive
file, or a view created once), before anything else, and the
mark is append-only (the later of each part over its rows), so a crash leaves either missing or lagging, never wrong
(docs/ledger.md, "On Spark").
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from veil.errors import LedgerMismatch
from veil.policy import Policy

if TYPE_CHECKING:
    from veil.store.ledger import Ledger

__all__ = ["BINDING_TABLE", "MARK_TABLE", "ledger_exists", "move_ledger", "open_ledger", "warehouse_ledger_id"]

#: The warehouse's table naming its ledger (one row).
BINDING_TABLE = "_veil_ledger_binding"

#: The warehouse's high-water mark of its ledger's history (one row: the latest reservation and release it saw).
MARK_TABLE = "_veil_ledger_mark"

#: Positive reads, per warehouse file (path, device, inode; on Spark ``veil.store.spark.binding_key``): a binding never
#: changes once written, so each process reads it once per file. An unbound warehouse is read again each time (another
#: process may bind it).
_BOUND: dict[tuple[object, ...], str] = {}
_LOCK = threading.Lock()

_FIX = (
    "Point [ledger] path back at this warehouse's ledger file. A ledger is moved only with `veil move-ledger`, which "
    "copies its whole history; a fresh ledger would forget every budget spent and every release made"
)


def _key(policy: Policy) -> tuple[object, ...] | None:
    if policy.engine.kind == "spark":
        from veil.store.spark import binding_key

        return binding_key(policy.engine)
    path = policy.database_path
    try:
        st = path.stat()
    except OSError:
        return None
    return (path, st.st_dev, st.st_ino)


def warehouse_name(policy: Policy) -> str:
    """The warehouse as messages name it: the DuckDB file, or the Spark database (``veil.store.spark.describe``)."""
    if policy.engine.kind == "spark":
        from veil.store.spark import describe

        return describe(policy.engine)
    return str(policy.database_path)


def warehouse_ledger_id(policy: Policy) -> str | None:
    """The identity of the ledger this warehouse is bound to, or None (no warehouse yet, or not bound)."""
    key = _key(policy)
    if key is None:
        return None
    with _LOCK:
        found = _BOUND.get(key)
    if found is not None:
        return found
    from veil.store.warehouse import read_ledger_binding

    found = read_ledger_binding(policy)
    if found is not None:
        with _LOCK:
            _BOUND[key] = found
    return found


def _remember(policy: Policy, ledger_id: str) -> None:
    key = _key(policy)
    if key is not None:
        with _LOCK:
            _BOUND[key] = ledger_id


def _mismatch(policy: Policy, what: str, bound: str) -> LedgerMismatch:
    return LedgerMismatch(
        f"the warehouse {warehouse_name(policy)!r} is bound to the ledger {bound[:12]}…, and the policy's "
        f"[ledger] path {str(policy.ledger_path)!r} {what}: its budgets and release history are not there",
        hint=_FIX,
    )


def ledger_exists(policy: Policy) -> bool:
    """Whether the policy's ledger file exists; :class:`LedgerMismatch` when it does not and the warehouse is bound to
    one (a missing ledger is never read as an empty history)."""
    if policy.ledger_path.exists():
        return True
    bound = warehouse_ledger_id(policy)
    if bound is not None:
        raise _mismatch(policy, "does not exist", bound)
    return False


def open_ledger(policy: Policy) -> Ledger:
    """The policy's ledger, checked against the warehouse's binding (and binding an unbound warehouse to it)."""
    from veil.store.ledger import Ledger

    bound = warehouse_ledger_id(policy) if ledger_exists(policy) else None
    ledger = Ledger(policy.ledger_path)
    try:
        check_identity(policy, ledger, bound)
        if bound is not None:
            check_history(policy, ledger)
        if bound is None:
            from veil.store.warehouse import bind_ledger, warehouse_exists

            if warehouse_exists(policy):
                bind_ledger(policy, ledger)
    except BaseException:
        ledger.close()
        raise
    return ledger


def check_identity(policy: Policy, ledger: Ledger, bound: str | None) -> None:
    """:class:`LedgerMismatch` unless ``ledger`` is the one ``bound`` names (None: any) and has not been moved away."""
    if ledger.moved_to is not None:
        raise LedgerMismatch(
            f"the ledger {str(policy.ledger_path)!r} was moved to {ledger.moved_to!r} (`veil move-ledger`): it is kept "
            "for the record only",
            hint=f"Point [ledger] path at {ledger.moved_to!r}",
        )
    if bound is not None and ledger.identity != bound:
        raise _mismatch(policy, f"is another ledger ({ledger.identity[:12]}…)", bound)


def check_history(policy: Policy, ledger: Ledger) -> None:
    """:class:`LedgerMismatch` when ``ledger`` (of the bound identity) lacks a record the warehouse's high-water mark
    names: it is a stale copy of the warehouse's ledger (a backup, a ``cp`` from before a publication or a charge), and
    would forget the releases and budgets recorded after it (review s21 X2). A ledger ahead of the mark is the
    warehouse's ledger (the mark lags it: it is raised only at curator steps, after the ledger's commit)."""
    from veil.store.warehouse import read_ledger_mark

    mark = read_ledger_mark(policy)
    if mark is None:
        return
    missing = ledger.lacks(mark)
    if missing is not None:
        raise LedgerMismatch(
            f"the ledger {str(policy.ledger_path)!r} is a stale copy of the warehouse {warehouse_name(policy)!r}'s "
            f"ledger: it lacks the {missing} the warehouse saw recorded there, so the releases and budgets spent "
            "since that copy was made are not in it",
            hint="Point [ledger] path back at the ledger file in use (a restored backup forgets every release and "
            "charge made after it: a second release without a DP guarantee, spent budgets back to an earlier "
            "value); a ledger is moved only with `veil move-ledger`",
        )


def binding_row(ledger: Ledger) -> tuple[str, str, str]:
    """What the warehouse records about its ledger: identity, when it was bound, where the ledger was then."""
    return ledger.identity, datetime.now(UTC).isoformat(timespec="seconds"), str(ledger.path)


def bound(policy: Policy, ledger_id: str) -> None:
    """Note (this process) that ``policy``'s warehouse was just bound to ``ledger_id``."""
    _remember(policy, ledger_id)


def move_ledger(policy: Policy, destination: str | Path) -> dict[str, str]:
    """Copy the policy's ledger, its whole history and identity, to ``destination`` (SQLite's online backup: the WAL's
    commits included), then retire the old file (``meta.moved_to``): opening it is refused from then on, so the old
    copy can never come back as a history without the releases made after the move. The curator then points
    ``[ledger] path`` at ``destination``."""
    from veil.errors import InputError
    from veil.store._sqlite import connect as connect_sqlite
    from veil.store.ledger import Ledger

    target = Path(destination).expanduser().resolve()
    if target.exists() or Path(f"{target}-wal").exists():
        raise InputError(f"{str(target)!r} already exists", hint="Choose a new file for the ledger")
    if target == policy.ledger_path.resolve():
        raise InputError("the destination is the ledger itself", hint="Choose a new file for the ledger")
    with open_ledger(policy) as ledger:
        identity = ledger.identity
        target.parent.mkdir(parents=True, exist_ok=True)
        dest = connect_sqlite(target)
        source = connect_sqlite(ledger.path)  # a reader: under WAL it reads beside the write lock held below
        try:
            with ledger.exclusive() as db:  # no other session or process writes from the copy to the retirement
                source.backup(dest)
                ledger.retire(db, str(target))
        finally:
            source.close()
            dest.close()
    with Ledger(target) as moved:  # WAL mode, and the copy's retirement mark (set after the backup) is not in it
        if moved.identity != identity or moved.moved_to is not None:
            raise LedgerMismatch(f"the copy {str(target)!r} is not the ledger it was copied from", hint="Retry the move")
    return {"ledger": identity, "from": str(policy.ledger_path), "to": str(target)}
