"""Contribution bounding for user-level tables: one bounded copy per table version.

For a table whose privacy unit is a column, Veil keeps at most ``max_rows_per_unit`` rows per unit,
chosen by a salted hash (the salt is secret: analysts cannot read ``_veil…`` tables), with every
bounded column clamped to its declared range. The copy is built once per version of the source
table (its fingerprint: row count and an order-independent hash of the declared columns) and reused
by every later query, so no query pays for a per-query ``ROW_NUMBER`` window.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable

from veil.engines.base import Engine
from veil.policy import Policy, TableSpec

__all__ = ["bounded_source", "clamped_columns", "row_source"]

_META = "_veil_bounding"
_lock = threading.Lock()
_fingerprints: dict[tuple[str, int, str], str] = {}
_built: dict[tuple[str, int, str], str] = {}


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _bound_literal(v: object) -> str:
    return repr(v) if isinstance(v, float) else str(v)


def clamped_columns(spec: TableSpec) -> list[str]:
    """Projection of every declared column, numeric ones clamped to their bounds (NULL stays NULL)."""
    cols = []
    for name, c in spec.columns.items():
        if c.type in ("int", "float") and c.bounded:
            lo, hi, q = _bound_literal(c.lower), _bound_literal(c.upper), _q(name)
            cols.append(f"CASE WHEN {q} < {lo} THEN {lo} WHEN {q} > {hi} THEN {hi} ELSE {q} END AS {q}")
        else:
            cols.append(_q(name))
    return cols


def row_source(spec: TableSpec) -> str:
    """Source SQL for a row-level table: clamp on read."""
    return f"SELECT {', '.join(clamped_columns(spec))} FROM {_q(spec.name)}"


def _fingerprint(engine: Engine, spec: TableSpec) -> str:
    cols = ", ".join(_q(c) for c in spec.columns)
    res = engine.execute(f"SELECT count(*), bit_xor(hash({cols})) FROM {_q(spec.name)}")
    n, h = res.rows[0]
    return f"{int(n):x}_{int(h or 0):x}"


def bounded_source(policy: Policy, spec: TableSpec, engine: Engine, *, generation: Callable[[], int] | None = None) -> str:
    """Source SQL reading the bounded copy of ``spec``'s table, building the copy if needed."""
    assert spec.privacy_unit is not None
    gen = generation() if generation is not None else 0
    key = (str(policy.database_path), gen, spec.name)
    with _lock:
        fp = _fingerprints.get(key)
    if fp is None:
        fp = _fingerprint(engine, spec)
        with _lock:
            _fingerprints[key] = fp
    name = f"_veil_bounded_{spec.name}_{spec.max_rows_per_unit}_{fp}"
    with _lock:
        known = _built.get(key) == name
    if not known:
        exists = engine.execute(f"SELECT count(*) FROM information_schema.tables WHERE table_name = '{name}'").rows[0][0]
        if not exists:
            _build(policy, spec, name, fp)
        with _lock:
            _built[key] = name
    return f"SELECT * FROM {_q(name)}"


def _build(policy: Policy, spec: TableSpec, name: str, fp: str) -> None:
    from veil.store import warehouse

    salt = secrets.token_hex(16)
    unit = _q(spec.privacy_unit or "")
    cols = clamped_columns(spec)
    with warehouse.writer(policy) as con:
        con.execute(
            f"CREATE TABLE IF NOT EXISTS {_META}(source TEXT, fingerprint TEXT, bounded TEXT, salt TEXT, created_at TIMESTAMP)"
        )
        if con.execute(f"SELECT count(*) FROM information_schema.tables WHERE table_name = '{name}'").fetchone()[0]:
            return
        con.execute("BEGIN TRANSACTION")
        try:
            con.execute(
                f"CREATE TABLE {_q(name)} AS SELECT {', '.join(cols)} FROM ("
                f"SELECT *, row_number() OVER (PARTITION BY {unit} ORDER BY hash(rowid, '{salt}')) AS __veil_rn "
                f"FROM {_q(spec.name)}) WHERE __veil_rn <= {int(spec.max_rows_per_unit)}"
            )
            old = con.execute(f"SELECT bounded FROM {_META} WHERE source = ?", [spec.name]).fetchall()
            for (old_name,) in old:
                con.execute(f"DROP TABLE IF EXISTS {_q(old_name)}")
            con.execute(f"DELETE FROM {_META} WHERE source = ?", [spec.name])
            con.execute(f"INSERT INTO {_META} VALUES (?, ?, ?, ?, now())", [spec.name, fp, name, salt])
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
