"""The curator's policy file (TOML) as frozen, validated dataclasses.

Every key is documented in ``docs/policy.md`` (a test checks this). Column names follow the
mapping of :func:`normalise_name`: lower case, every run of characters other than letters,
digits and ``_`` becomes one ``_`` (Adult's ``hours-per-week`` → ``hours_per_week``).

>>> normalise_name("Hours-per-week")
'hours_per_week'
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import sys
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from veil.errors import PolicyError, did_you_mean

__all__ = [
    "AnalystSpec",
    "ColumnSpec",
    "ColumnType",
    "Defaults",
    "EngineSpec",
    "Policy",
    "TableSpec",
    "file_stamp",
    "load_policy",
    "normalise_name",
    "parse_policy",
]

ColumnType = Literal["int", "float", "category", "bool", "date"]
COLUMN_TYPES: tuple[str, ...] = ("int", "float", "category", "bool", "date")
NUMERIC_TYPES: tuple[str, ...] = ("int", "float")

_NAME_RE = re.compile(r"[^0-9a-zA-Z_]+")


def normalise_name(name: str) -> str:
    """Map a source column header to the SQL-friendly name Veil uses."""
    out = _NAME_RE.sub("_", name.strip()).strip("_").lower()
    if not out:
        raise PolicyError(f"column name {name!r} has no letters or digits", hint="Rename the column")
    if out[0].isdigit():
        out = f"c_{out}"
    return out


_LARGEST = Fraction(sys.float_info.max)


def _exact(value: Any, where: str) -> Fraction:
    """A finite number (not bool) as an exact Fraction."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PolicyError(f"{where} must be a number, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise PolicyError(f"{where} must be finite, got {value!r}")
    # floats by their shortest repr: ``0.001`` in a policy means exactly 1/1000, not its binary expansion
    frac = Fraction(repr(value)) if isinstance(value, float) else Fraction(value)
    if abs(frac) > _LARGEST:  # a TOML integer can be any size; every figure is also used as a double
        raise PolicyError(f"{where} is too large ({len(str(abs(value)))} digits)", hint="Use a number below 1e308")
    return frac


def _probability(value: Any, where: str, *, allow_zero: bool = False) -> Fraction:
    """A δ-like number in (0, 1) (or [0, 1) with ``allow_zero``) as an exact Fraction (floats via repr)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PolicyError(f"{where} must be a number in (0, 1), got {value!r}", hint="Use e.g. 1e-6")
    if isinstance(value, float) and not math.isfinite(value):
        raise PolicyError(f"{where} must be a finite number in (0, 1), got {value!r}", hint="Use e.g. 1e-6")
    frac = Fraction(repr(value)) if isinstance(value, float) else Fraction(value)
    if not (0 <= frac < 1) or (frac == 0 and not allow_zero):
        raise PolicyError(f"{where} must be in {'[0' if allow_zero else '(0'}, 1), got {value!r}", hint="Use e.g. 1e-6")
    return frac


@dataclass(frozen=True)
class ColumnSpec:
    """One queryable column: its type and, for numbers and dates, its public bounds."""

    name: str
    type: ColumnType
    lower: float | None = None
    upper: float | None = None
    values: tuple[Any, ...] | None = None  # declared (public) category values
    max_length: int | None = None  # category columns: the declared cap on a value's length, in characters

    @property
    def text_cap(self) -> int:
        """The most characters a category value keeps in the bounded copy (never cuts a declared value)."""
        declared = max((len(str(v)) for v in self.values or ()), default=0)
        if self.max_length is None and self.values is not None:
            # a declared domain: its values are what queries group by; a value outside it keeps a short prefix
            return max(DECLARED_MAX_LENGTH, declared)
        return max(self.max_length or DEFAULT_MAX_LENGTH, declared)

    @property
    def bounded(self) -> bool:
        return self.lower is not None and self.upper is not None

    @property
    def is_numeric(self) -> bool:
        return self.type in NUMERIC_TYPES


@dataclass(frozen=True)
class TableSpec:
    """A table analysts may query (private unless ``public``)."""

    name: str
    columns: Mapping[str, ColumnSpec]
    privacy_unit: str | None = None  # None = each row is a privacy unit
    max_rows_per_unit: int = 1
    public: bool = False
    epsilon_total: Fraction | None = None  # cap on the privacy loss of everyone in the table (all analysts + publications)
    delta_total: Fraction | None = None
    #: Which people the table holds, for the publication gate's linkage rule: two tables of one population may hold the
    #: same people (a snapshot, a re-ingested copy). None: the policy's one default population, shared by every table
    #: that declares none — the conservative reading (red team s60 F1). Case-folded, its spaces collapsed: "Patients" and
    #: "patients " are one population.
    population: str | None = None

    def column(self, name: str) -> ColumnSpec:
        try:
            return self.columns[name]
        except KeyError:
            raise PolicyError(
                f"column {name!r} is not declared for table {self.name!r}",
                hint=did_you_mean(name, self.columns) or "Declare it under [tables.<name>.columns]",
            ) from None


#: An analyst's total δ when the policy does not say: 100 private-key GROUP BYs at the default partition δ.
DEFAULT_ANALYST_DELTA = Fraction(1, 10**5)


@dataclass(frozen=True)
class AnalystSpec:
    name: str
    epsilon: Fraction  # total ε budget
    delta: Fraction = DEFAULT_ANALYST_DELTA  # total δ budget


@dataclass(frozen=True)
class Defaults:
    epsilon_per_query: Fraction = Fraction(1, 2)
    min_epsilon_per_query: Fraction = Fraction(1, 1000)  # smaller requests are refused, free
    partition_delta: Fraction = Fraction(1, 10**7)  # δ charged by DP partition selection over private group keys
    confidence: float = 0.95  # level of the confidence intervals attached to answers


@dataclass(frozen=True)
class EngineSpec:
    """``[engine]``: which engine holds the tables (DuckDB embedded unless a Spark engine is named)."""

    kind: Literal["duckdb", "spark"] = "duckdb"
    master: str | None = None  # Spark in this process (pyspark), e.g. "local[2]"
    remote: str | None = None  # Spark Connect, e.g. "sc://host:15002"
    database: str = "default"  # the Spark database holding the tables (and Veil's bounded copies)
    warehouse: Path | None = None  # local mode: spark.sql.warehouse.dir (absolute)


@dataclass(frozen=True)
class Policy:
    """A loaded policy. Paths are absolute (resolved against the policy file's folder)."""

    path: Path
    database_path: Path
    ledger_path: Path
    defaults: Defaults
    tables: Mapping[str, TableSpec] = field(default_factory=lambda: MappingProxyType({}))
    analysts: Mapping[str, AnalystSpec] = field(default_factory=lambda: MappingProxyType({}))
    engine: EngineSpec = field(default_factory=EngineSpec)
    #: (mtime_ns, size, inode) of the file as :func:`load_policy` found it *before* reading it (None: not read from a
    #: file). A watch of the file compares against this, never against a stat taken later: a session or server built
    #: from a policy read before the curator's edit would otherwise take the edited file as the one it holds, and keep
    #: the old budgets and analysts until the next edit (red team s36 A1).
    file_stamp: tuple[int, int, int] | None = field(default=None, compare=False)
    #: The file's path as it was named (absolute, links not followed; None: not read from a file). ``path`` is the
    #: resolved file; a watch stats and re-reads this one, so a policy replaced by pointing a link at a new file
    #: (``ln -sfn``, a Kubernetes ConfigMap mount) is applied (red team s37, A2).
    source: Path | None = field(default=None, compare=False)

    @property
    def base_dir(self) -> Path:
        return self.path.parent

    @property
    def watch_path(self) -> Path:
        """The path a policy watch stats and re-reads: the one the policy was loaded by."""
        return self.source or self.path

    def table(self, name: str) -> TableSpec:
        try:
            return self.tables[name]
        except KeyError:
            raise PolicyError(
                f"table {name!r} is not in the policy {self.path}",
                hint=did_you_mean(name, self.tables) or "Add a [tables.<name>] section",
            ) from None

    def analyst(self, name: str) -> AnalystSpec:
        try:
            return self.analysts[name]
        except KeyError:
            raise PolicyError(
                f"analyst {name!r} is not in the policy {self.path}",
                hint=did_you_mean(name, self.analysts) or "Add an [analysts.<name>] section with an epsilon budget",
            ) from None


_TOP_KEYS = {"database", "ledger", "defaults", "tables", "analysts", "engine"}
_ENGINE_KEYS = {"kind", "master", "remote", "database", "warehouse"}
_TABLE_KEYS = {"privacy_unit", "max_rows_per_unit", "public", "columns", "epsilon_total", "delta_total", "population"}
_COLUMN_KEYS = {"type", "lower", "upper", "values", "max_length"}
_DEFAULT_KEYS = {"epsilon_per_query", "min_epsilon_per_query", "partition_delta", "confidence"}
#: Largest magnitude a declared numeric bound may have: sums of up to 10¹² such values stay exact enough
#: in a double and far from overflow, whatever the data.
MAX_BOUND = Fraction(10**15)
#: Characters a category value keeps in the bounded copy unless the policy says ``max_length``: one person's
#: text then costs a query at most a bounded amount of work, whatever it stores (a running time one long value
#: decides is a side channel no noise covers). 256 characters are priced 1,024 bytes, so two such columns fit the
#: 2 KiB a join over private rows may carry (``multiplicity.MAX_JOIN_ROW_BYTES``; at 1,024 characters, none did).
DEFAULT_MAX_LENGTH = 256
#: The same for a category column with declared ``values`` and no ``max_length`` (never fewer than the longest
#: declared value): its values are short labels, and every value costs the 4 bytes a character the value-size cap
#: (``multiplicity.MAX_VALUE_BYTES``) prices — at 1,024 characters four declared keys of one GROUP BY passed it.
DECLARED_MAX_LENGTH = 64
#: The largest ``max_length`` a policy may declare.
MAX_TEXT_LENGTH = 65536


def _check_keys(section: Mapping[str, Any], allowed: set[str], where: str) -> None:
    for key in section:
        if key not in allowed:
            hint = did_you_mean(key, allowed) or f"Allowed keys: {', '.join(sorted(allowed))}"
            raise PolicyError(f"unknown key {key!r} in {where}", hint=hint)


def _section(data: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, Mapping):
        raise PolicyError(f"{where}.{key} must be a table, got {value!r}")
    return value


def _of_type(ctype: str, v: Any) -> bool:
    """Whether a declared value is a value of a column of ``ctype`` (as the bounded copy holds it)."""
    if ctype == "int":
        return isinstance(v, int) and not isinstance(v, bool) and -(2**63) <= v < 2**63
    if ctype == "category":
        return isinstance(v, str)
    if ctype == "bool":
        return isinstance(v, bool)
    return False


def _parse_column(table: str, name: str, raw: Any) -> ColumnSpec:
    where = f"[tables.{table}.columns].{name}"
    if not isinstance(raw, Mapping):
        raise PolicyError(f'{where} must be an inline table like {{ type = "int", lower = 0, upper = 10 }}')
    _check_keys(raw, _COLUMN_KEYS, where)
    ctype = raw.get("type")
    if ctype not in COLUMN_TYPES:
        raise PolicyError(f"{where}.type is {ctype!r}", hint=f"Use one of {', '.join(COLUMN_TYPES)}")
    lower, upper, values = raw.get("lower"), raw.get("upper"), raw.get("values")
    if ctype in ("int", "float"):
        if (lower is None) != (upper is None):
            raise PolicyError(f"{where} declares only one of lower/upper", hint="Declare both bounds, or neither")
        if lower is not None:
            lo, hi = _exact(lower, f"{where}.lower"), _exact(upper, f"{where}.upper")
            if lo > hi:
                raise PolicyError(f"{where} has lower {lower} > upper {upper}", hint="Swap the bounds")
            if max(abs(lo), abs(hi)) > MAX_BOUND:
                raise PolicyError(
                    f"{where} bounds {lower}, {upper} exceed ±10^15",
                    hint="Rescale the column (e.g. store thousands) so its declared range fits within ±1e15",
                )
            if ctype == "int" and (lo.denominator != 1 or hi.denominator != 1):
                raise PolicyError(f"{where} is an int column with fractional bounds {lower}, {upper}")
    elif lower is not None or upper is not None:
        raise PolicyError(f"{where} is a {ctype} column; lower/upper apply only to int and float columns")
    if values is not None:
        if ctype not in ("category", "bool", "int"):
            raise PolicyError(f"{where}.values applies to category, bool and int columns, not {ctype}")
        if not isinstance(values, list) or not values:
            raise PolicyError(f"{where}.values must be a non-empty list, got {values!r}")
        for v in values:
            if not _of_type(ctype, v):
                raise PolicyError(
                    f"{where}.values holds {v!r}, which is not a {ctype} value",
                    hint={"int": "List whole numbers within ±2^63", "category": "List texts in quotes",
                          "bool": "List true and false"}.get(ctype, "List values of the column's type"),
                )  # fmt: skip
        if len(set(values)) != len(values):  # one type each (checked above): equal values are equal keys
            raise PolicyError(
                f"{where}.values has duplicates: {values!r}",
                hint="List each value once (1, 1.0 and true are one value to Veil's grouping)",
            )
        if any(len(str(v)) > MAX_TEXT_LENGTH for v in values):
            raise PolicyError(f"{where}.values has a value longer than {MAX_TEXT_LENGTH} characters")
        values = tuple(values)
    elif ctype == "bool":
        values = (False, True)
    max_length = raw.get("max_length")
    if max_length is not None:
        if ctype != "category":
            raise PolicyError(f"{where}.max_length applies to category columns, not {ctype}")
        if isinstance(max_length, bool) or not isinstance(max_length, int) or not 1 <= max_length <= MAX_TEXT_LENGTH:
            raise PolicyError(
                f"{where}.max_length is {max_length!r}",
                hint=f"Use a whole number of characters from 1 to {MAX_TEXT_LENGTH} (default {DEFAULT_MAX_LENGTH})",
            )
    return ColumnSpec(
        name=name,
        type=ctype,
        lower=lower if ctype != "int" or lower is None else int(lower),
        upper=upper if ctype != "int" or upper is None else int(upper),
        values=values,
        max_length=max_length,
    )


def _parse_table(name: str, raw: Any) -> TableSpec:
    where = f"[tables.{name}]"
    if not isinstance(raw, Mapping):
        raise PolicyError(f"{where} must be a table")
    if normalise_name(name) != name:
        raise PolicyError(f"table name {name!r} is not a plain SQL name", hint=f"Use {normalise_name(name)!r}")
    _check_keys(raw, _TABLE_KEYS, where)
    public = raw.get("public", False)
    if not isinstance(public, bool):
        raise PolicyError(f"{where}.public must be true or false, got {public!r}")
    cols_raw = _section(raw, "columns", where)
    columns: dict[str, ColumnSpec] = {}
    for col, spec in cols_raw.items():
        if normalise_name(col) != col:
            raise PolicyError(f"column name {col!r} in {where}", hint=f"Use the normalised name {normalise_name(col)!r}")
        columns[col] = _parse_column(name, col, spec)
    unit = raw.get("privacy_unit", "row")
    if not isinstance(unit, str):
        raise PolicyError(f'{where}.privacy_unit must be "row" or a column name, got {unit!r}')
    max_rows = raw.get("max_rows_per_unit", 1)
    if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 1:
        raise PolicyError(f"{where}.max_rows_per_unit must be a positive integer, got {max_rows!r}")
    if unit == "row":
        if max_rows != 1:
            raise PolicyError(
                f'{where}.max_rows_per_unit is {max_rows} but privacy_unit is "row"',
                hint="Set privacy_unit to the column identifying a person, or remove max_rows_per_unit",
            )
        privacy_unit = None
    else:
        if unit not in columns:
            raise PolicyError(
                f"{where}.privacy_unit {unit!r} is not a declared column",
                hint=did_you_mean(unit, columns) or f"Declare {unit} under [tables.{name}.columns]",
            )
        privacy_unit = unit
    if public and privacy_unit is not None:
        raise PolicyError(f"{where} is public, so it has no privacy unit", hint="Remove privacy_unit or public")
    eps_total = raw.get("epsilon_total")
    delta_total = raw.get("delta_total")
    if public and (eps_total is not None or delta_total is not None):
        raise PolicyError(f"{where} is public, so it has no privacy budget", hint="Remove epsilon_total / delta_total")
    if eps_total is not None:
        eps_total = _exact(eps_total, f"{where}.epsilon_total")
        if eps_total < 0:
            raise PolicyError(f"{where}.epsilon_total must be ≥ 0, got {raw['epsilon_total']}")
    if delta_total is not None:
        delta_total = _probability(delta_total, f"{where}.delta_total", allow_zero=True)
    population = raw.get("population")
    if population is not None and (not isinstance(population, str) or not population.strip() or len(population) > 200):
        raise PolicyError(
            f"{where}.population must be a non-empty name of at most 200 characters, got {population!r}",
            hint='Name the people the table holds, e.g. population = "patients"; tables of one population may hold the '
            "same people",
        )
    if public and population is not None:
        raise PolicyError(f"{where} is public, so it holds no population", hint="Remove population or public")
    return TableSpec(
        name=name,
        columns=MappingProxyType(columns),
        privacy_unit=privacy_unit,
        max_rows_per_unit=max_rows,
        public=public,
        epsilon_total=eps_total,
        delta_total=delta_total,
        population=None if population is None else " ".join(population.split()).casefold(),
    )


def _check_ledger_path(ledger: Path, policy: Path, database: Path) -> None:
    """Refuse a ``[ledger] path`` that is another of Veil's files — the policy, the warehouse, its public mirror (even
    before it exists: an SQLite file would squat its place) or their journals — or a folder (red team s27 A13)."""
    mirror = database.with_name(database.stem + ".public.duckdb")
    others = {
        policy: "the policy file itself",
        database: "the warehouse",
        mirror: "the warehouse's public mirror",
        Path(f"{database}.wal"): "the warehouse's journal",
        Path(f"{mirror}.wal"): "the public mirror's journal",
    }
    if ledger in others:
        raise PolicyError(
            f"[ledger] path {str(ledger)!r} is {others[ledger]}: the ledger must be a file of its own",
            hint='Use e.g. path = "ledger.sqlite"',
        )
    if ledger.is_dir():
        raise PolicyError(f"[ledger] path {str(ledger)!r} is a folder, not a file", hint='Use e.g. path = "ledger.sqlite"')


def parse_policy(data: Mapping[str, Any], path: Path) -> Policy:
    """Validate parsed TOML ``data`` as the policy stored at ``path``."""
    _check_keys(data, _TOP_KEYS, "the policy file")
    base = path.parent
    db = _section(data, "database", "policy")
    ledger = _section(data, "ledger", "policy")
    _check_keys(db, {"path"}, "[database]")
    _check_keys(ledger, {"path"}, "[ledger]")
    db_path = base / str(db.get("path", "warehouse.duckdb"))
    ledger_path = base / str(ledger.get("path", "ledger.sqlite"))
    _check_ledger_path(ledger_path.resolve(), path.resolve(), db_path.resolve())
    d = _section(data, "defaults", "policy")
    _check_keys(d, _DEFAULT_KEYS, "[defaults]")
    eps = _exact(d.get("epsilon_per_query", 0.5), "[defaults].epsilon_per_query")
    if eps <= 0:
        raise PolicyError(f"[defaults].epsilon_per_query must be > 0, got {d.get('epsilon_per_query')}")
    min_eps = _exact(d.get("min_epsilon_per_query", 0.001), "[defaults].min_epsilon_per_query")
    if min_eps <= 0:
        raise PolicyError(f"[defaults].min_epsilon_per_query must be > 0, got {d.get('min_epsilon_per_query')}")
    if eps < min_eps:
        raise PolicyError(
            f"[defaults].epsilon_per_query {d.get('epsilon_per_query')} is below min_epsilon_per_query {float(min_eps):g}"
        )
    delta = _probability(d.get("partition_delta", 1e-7), "[defaults].partition_delta")
    conf = d.get("confidence", 0.95)
    if isinstance(conf, bool) or not isinstance(conf, (int, float)) or not 0.5 <= conf < 1:
        raise PolicyError(f"[defaults].confidence must be in [0.5, 1), got {conf!r}", hint="Use e.g. 0.95")
    defaults = Defaults(epsilon_per_query=eps, min_epsilon_per_query=min_eps, partition_delta=delta, confidence=float(conf))
    tables = {name: _parse_table(name, raw) for name, raw in _section(data, "tables", "policy").items()}
    analysts: dict[str, AnalystSpec] = {}
    for name, raw in _section(data, "analysts", "policy").items():
        if not isinstance(raw, Mapping):
            raise PolicyError(f"[analysts.{name}] must be a table with an epsilon budget")
        _check_keys(raw, {"epsilon", "delta"}, f"[analysts.{name}]")
        if "epsilon" not in raw:
            raise PolicyError(f"[analysts.{name}] has no epsilon", hint="Add epsilon = <total budget>")
        budget = _exact(raw["epsilon"], f"[analysts.{name}].epsilon")
        if budget < 0:
            raise PolicyError(f"[analysts.{name}].epsilon must be ≥ 0, got {raw['epsilon']}")
        a_delta = (
            _probability(raw["delta"], f"[analysts.{name}].delta", allow_zero=True) if "delta" in raw else DEFAULT_ANALYST_DELTA
        )
        analysts[name] = AnalystSpec(name=name, epsilon=budget, delta=a_delta)
    return Policy(
        path=path,
        database_path=db_path.resolve(),
        ledger_path=ledger_path.resolve(),
        defaults=defaults,
        tables=MappingProxyType(tables),
        analysts=MappingProxyType(analysts),
        engine=_parse_engine(_section(data, "engine", "policy"), base),
    )


def _parse_engine(raw: Mapping[str, Any], base: Path) -> EngineSpec:
    _check_keys(raw, _ENGINE_KEYS, "[engine]")
    for key in _ENGINE_KEYS:
        if key in raw and not isinstance(raw[key], str):
            raise PolicyError(f"[engine].{key} must be a string, got {raw[key]!r}")
    kind = raw.get("kind", "duckdb")
    if kind not in ("duckdb", "spark"):
        raise PolicyError(
            f"[engine].kind must be 'duckdb' or 'spark', got {kind!r}", hint=did_you_mean(kind, ["duckdb", "spark"])
        )
    if kind == "duckdb":
        if set(raw) - {"kind"}:
            raise PolicyError(f"[engine] keys {sorted(set(raw) - {'kind'})} apply only to kind = 'spark'")
        return EngineSpec()
    master, remote = raw.get("master"), raw.get("remote")
    if (master is None) == (remote is None):
        raise PolicyError(
            "[engine] with kind = 'spark' needs exactly one of master (e.g. 'local[2]') or remote (e.g. 'sc://host:15002')"
        )
    if remote is not None and not remote.startswith("sc://"):
        raise PolicyError(f"[engine].remote must be a Spark Connect address 'sc://host:port', got {remote!r}")
    if remote is not None and "warehouse" in raw:
        raise PolicyError("[engine].warehouse applies to master (local) mode only; a cluster keeps its own warehouse")
    database = raw.get("database", "default")
    if normalise_name(database) != database:
        raise PolicyError(
            f"[engine].database must be a plain SQL name, got {database!r}", hint=f"Use {normalise_name(database)!r}"
        )
    warehouse = (base / raw["warehouse"]).resolve() if "warehouse" in raw else None
    if master is not None and warehouse is None:
        warehouse = (base / "spark-warehouse").resolve()
    return EngineSpec(kind="spark", master=master, remote=remote, database=database, warehouse=warehouse)


def load_policy(path: str | Path) -> Policy:
    """Read and validate a policy file.

    Raises :class:`~veil.errors.PolicyError` naming the key and value at fault.
    """
    given = Path(path).expanduser().absolute()
    p = given.resolve()
    try:
        # before reading, by the name given (a link followed now): a write after this moment, or the link pointed at
        # another file, changes the stamp a watch compares
        stamp = file_stamp(given)
        raw = p.read_bytes()
    except FileNotFoundError:
        raise PolicyError(f"policy file {str(p)!r} does not exist", hint="Pass --policy with the path to policy.toml") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise PolicyError(f"policy file {str(p)!r} is not valid TOML: {exc}") from None
    except ValueError as exc:  # e.g. an integer of more than 4,300 digits (red team s22, A3)
        hint = "Use numbers below 1e308"
        raise PolicyError(f"policy file {str(p)!r} holds a value Veil cannot read: {exc}", hint=hint) from None
    return dataclasses.replace(parse_policy(data, p), file_stamp=stamp, source=given)


def file_stamp(path: Path) -> tuple[int, int, int]:
    """What a policy watch compares to see that the file changed: (mtime_ns, size, inode)."""
    st = os.stat(path)
    return (st.st_mtime_ns, st.st_size, st.st_ino)
