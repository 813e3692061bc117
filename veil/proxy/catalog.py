"""What an analyst may name: private tables from the policy, public tables with their columns.

The schema used to qualify queries comes from the policy for private tables (only declared columns,
with their declared types: the bounded copy every query reads casts each column to that type) and,
for public tables (``public = true`` in the policy, or published by a curator release), from the
public mirror (types as stored; a policy's declared public columns restrict which may be named).
Veil's internal tables (``_veil…``) are never in the catalog.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from types import MappingProxyType
from typing import Any

from veil.policy import Policy, TableSpec

__all__ = ["Catalog", "CatalogTable", "build_catalog", "veil_type_of"]

#: Veil column type → the SQL type the qualifier and the output description use.
SQL_TYPES: Mapping[str, str] = MappingProxyType(
    {"int": "BIGINT", "float": "DOUBLE", "category": "VARCHAR", "bool": "BOOLEAN", "date": "DATE"}
)


def veil_type_of(duckdb_type: str) -> str:
    """Map a DuckDB type name to a Veil column type (for public tables read from the warehouse)."""
    t = duckdb_type.upper()
    if t in ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT"):
        return "int"
    if t in ("FLOAT", "DOUBLE", "REAL") or t.startswith("DECIMAL"):
        return "float"
    if t == "BOOLEAN":
        return "bool"
    if t == "DATE":
        return "date"
    return "category"


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
            stored = {c: veil_type_of(t) for c, t in public_columns[name].items()}
            cols = {c: stored[c] for c in spec.columns if c in stored} if spec.columns else stored
            tables[name] = CatalogTable(name, MappingProxyType(cols), spec, True)
        else:
            cols = {c: s.type for c, s in spec.columns.items()}
            tables[name] = CatalogTable(name, MappingProxyType(cols), spec, False)
    for name, cols_raw in public_columns.items():
        if name not in tables and not name.startswith("_veil"):
            cols = {c: veil_type_of(t) for c, t in cols_raw.items()}
            tables[name] = CatalogTable(name, MappingProxyType(cols), None, True)
    return Catalog(MappingProxyType(tables))
