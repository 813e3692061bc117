"""What an analyst may name: private tables from the policy, public tables with their columns.

The schema used to qualify queries comes from the policy for private tables (only declared columns,
with their declared types: the bounded copy every query reads casts each column to that type) and,
for public tables (``public = true`` in the policy, or published by a curator release), from the
public mirror (types as stored; a policy's declared public columns restrict which may be named).
Veil's internal tables (``_veil…``) are never in the catalog.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from types import MappingProxyType
from typing import Any

from veil.policy import Policy, TableSpec

__all__ = ["SQL_TYPES", "Catalog", "CatalogTable", "build_catalog", "public_types", "veil_type_of"]

#: Veil column type → the SQL type the qualifier and the output description use.
SQL_TYPES: Mapping[str, str] = MappingProxyType(
    {"int": "BIGINT", "float": "DOUBLE", "category": "VARCHAR", "bool": "BOOLEAN", "date": "DATE"}
)


#: Stored types of public columns → the Veil type the analyst's SQL sees. Only types whose every value
#: the engine compares with a private column of that Veil type without a cast that can fail: a public
#: DECIMAL(38, 37) would make DuckDB cast a private BIGINT to it (overflowing on large values only), a
#: public TIME or TIMESTAMP read as text would make it cast private text to a time, row by row.
_PUBLIC_TYPES: Mapping[str, str] = MappingProxyType({
    "TINYINT": "int", "SMALLINT": "int", "INTEGER": "int", "BIGINT": "int", "UTINYINT": "int",
    "USMALLINT": "int", "UINTEGER": "int", "FLOAT": "float", "DOUBLE": "float", "REAL": "float",
    "BOOLEAN": "bool", "DATE": "date", "VARCHAR": "category",
})  # fmt: skip


def veil_type_of(duckdb_type: str) -> str | None:
    """The Veil column type of a public column stored as ``duckdb_type``, or None when Veil does not
    read columns of that type (they are left out of the catalog: an analyst cannot name them)."""
    return _PUBLIC_TYPES.get(duckdb_type.upper())


def _public_columns(stored: Mapping[str, str]) -> dict[str, str]:
    out = {}
    for column, duckdb_type in stored.items():
        veil_type = veil_type_of(duckdb_type)
        if veil_type is not None:
            out[column] = veil_type
    return out


@dataclass(frozen=True)
class CatalogTable:
    name: str
    columns: Mapping[str, str]  # column → Veil type
    spec: TableSpec | None  # the policy's spec (None for published tables not in the policy)
    public: bool


@dataclass(frozen=True)
class Catalog:
    tables: Mapping[str, CatalogTable]

    def schema(self) -> Any:
        """The sqlglot schema (built once per catalog)."""
        return self._schema

    @cached_property
    def _schema(self) -> Any:
        from sqlglot.schema import MappingSchema

        mapping = {t.name: {c: SQL_TYPES[v] for c, v in t.columns.items()} for t in self.tables.values()}
        return MappingSchema(mapping, dialect="postgres")


def build_catalog(policy: Policy, public_columns: Mapping[str, Mapping[str, str]]) -> Catalog:
    """``public_columns``: public table → column → DuckDB type, as found in the warehouse."""
    tables: dict[str, CatalogTable] = {}
    for name, spec in policy.tables.items():
        if spec.public:
            if name not in public_columns:
                continue  # declared public but not loaded yet
            # types always from the stored table (a declared type that differs would make the engine cast row by
            # row); the declared columns, if any, restrict what may be named
            stored = _public_columns(public_columns[name])
            cols = {c: stored[c] for c in spec.columns if c in stored} if spec.columns else stored
            tables[name] = CatalogTable(name, MappingProxyType(cols), spec, True)
        else:
            cols = {c: s.type for c, s in spec.columns.items()}
            tables[name] = CatalogTable(name, MappingProxyType(cols), spec, False)
    for name, cols_raw in public_columns.items():
        if name not in tables and not name.startswith("_veil"):
            cols = _public_columns(cols_raw)
            tables[name] = CatalogTable(name, MappingProxyType(cols), None, True)
    return Catalog(MappingProxyType(tables))


def public_types(catalog: Catalog, tables: Sequence[str]) -> dict[str, dict[str, str]]:
    """Each public table of ``tables`` → column → the SQL type the analysis gave it (what generated SQL
    reads it as)."""
    out: dict[str, dict[str, str]] = {}
    for name in tables:
        t = catalog.tables.get(name)
        if t is not None and t.public:
            out[name] = {c: SQL_TYPES[v] for c, v in t.columns.items()}
    return out
