"""Catalog answers for pgjdbc's ``DatabaseMetaData`` and DBeaver's navigator.

pg-mimic answers the ``pg_catalog`` slice psql's ``\\d`` family reads; JDBC tools read more:
``c.*``/``a.*``/``n.*``/``db.*`` star queries joined to ``pg_description`` and ``pg_depend``
(DBeaver), ``pg_settings`` and ``pg_database`` (pgjdbc), and two pgjdbc queries that sqlglot's
executor cannot run at all (``getSchemas`` indexes ``current_schemas(true)[1]``, ``getColumns``
uses a window function). The first kind runs on a wider synthesised catalog; the second is
answered directly. Everything comes from the analyst's query catalog: tables and columns, each
column's type and, as its comment, its declared bounds or values. Row counts and sizes are never
reported (``reltuples`` is -1, sizes 0).
"""

from __future__ import annotations

import copy
import re
from typing import Any

from pg_mimic.catalog import _build_pg_catalog  # pinned pg-mimic 0.1.3
from pg_mimic.catalog_rewrite import rewrite_for_executor
from sqlglot import exp
from sqlglot.executor import execute as sqlglot_execute

from veil.proxy.catalog import Catalog
from veil.server import catalog

__all__ = ["answer", "catalog_for"]

_PUBLIC_OID = 2200
_FIRST_USER_OID = 16384
_REGCLASS = {
    "pg_class": 1259,
    "pg_namespace": 2615,
    "pg_attribute": 1249,
    "pg_type": 1247,
    "pg_proc": 1255,
    "pg_constraint": 2606,
    "pg_database": 1262,
    "pg_trigger": 2620,
    "pg_rewrite": 2618,
}
_ATTLEN = {"bigint": 8, "double precision": 8, "boolean": 1, "date": 4, "text": -1}
_TYPE_OIDS = {"bigint": 20, "double precision": 701, "boolean": 16, "date": 1082, "text": 25}
_SETTINGS = {
    "max_index_keys": "32",
    "max_identifier_length": "63",
    "server_version_num": "160000",
    "server_version": "16.0",
    "server_encoding": "UTF8",
    "client_encoding": "UTF8",
    "standard_conforming_strings": "on",
    "integer_datetimes": "on",
    "default_transaction_read_only": "on",
    "TimeZone": "UTC",
    "DateStyle": "ISO, MDY",
}
_EXTRA_TABLES: dict[str, dict[str, str]] = {
    "pg_description": {"objoid": "INT", "classoid": "INT", "objsubid": "INT", "description": "TEXT"},
    "pg_shdescription": {"objoid": "INT", "classoid": "INT", "description": "TEXT"},
    "pg_depend": {
        "classid": "INT",
        "objid": "INT",
        "objsubid": "INT",
        "refclassid": "INT",
        "refobjid": "INT",
        "refobjsubid": "INT",
        "deptype": "TEXT",
    },
    "pg_database": {
        "oid": "INT",
        "datname": "TEXT",
        "datdba": "INT",
        "encoding": "INT",
        "datcollate": "TEXT",
        "datctype": "TEXT",
        "datistemplate": "BOOLEAN",
        "datallowconn": "BOOLEAN",
        "datconnlimit": "INT",
        "dattablespace": "INT",
        "datacl": "TEXT",
        "daticulocale": "TEXT",
        "datlocprovider": "TEXT",
    },
    "pg_settings": {"name": "TEXT", "setting": "TEXT", "unit": "TEXT", "category": "TEXT", "short_desc": "TEXT"},
    "pg_tablespace": {"oid": "INT", "spcname": "TEXT", "spcowner": "INT", "spcacl": "TEXT", "spcoptions": "TEXT"},
    "pg_proc": {"oid": "INT", "proname": "TEXT", "pronamespace": "INT", "proowner": "INT", "prokind": "TEXT"},
    "pg_extension": {"oid": "INT", "extname": "TEXT", "extowner": "INT", "extnamespace": "INT", "extversion": "TEXT"},
    "pg_language": {"oid": "INT", "lanname": "TEXT"},
    "pg_user": {"usename": "TEXT", "usesysid": "INT", "usesuper": "BOOLEAN"},
}
_EXTRA_COLUMNS = {
    "pg_class": {
        "relnatts": "INT",
        "relacl": "TEXT",
        "reloptions": "TEXT",
        "relpartbound": "TEXT",
        "relhasoids": "BOOLEAN",
        "reldescription": "TEXT",
    },
    "pg_namespace": {"nspacl": "TEXT"},
    "pg_attribute": {
        "attlen": "INT",
        "attndims": "INT",
        "attacl": "TEXT",
        "attoptions": "TEXT",
        "attislocal": "BOOLEAN",
        "attstorage": "TEXT",
        "attcompression": "TEXT",
        "attdescription": "TEXT",
    },
}


_CACHE: dict[tuple[int, str], tuple[Catalog, tuple[dict, dict]]] = {}


def _build(cat: Catalog, database: str) -> tuple[dict, dict]:
    user_schema = catalog.schema_of(cat)
    base_schema, base_tables = _build_pg_catalog(user_schema)
    schema = copy.deepcopy(base_schema)
    tables = copy.deepcopy(base_tables)
    pg = schema["pg_catalog"]
    rows = tables["pg_catalog"]
    for name, cols in _EXTRA_COLUMNS.items():
        pg[name].update(cols)
    for name, cols in _EXTRA_TABLES.items():
        pg[name] = dict(cols)
        rows[name] = []
    table_specs = list(cat.tables.values())
    for row in rows["pg_class"]:
        spec = table_specs[row["oid"] - _FIRST_USER_OID]
        row.update(
            relnatts=len(spec.columns),
            relacl=None,
            reloptions=None,
            relpartbound=None,
            relhasoids=False,
            reldescription=catalog.table_comment(spec),
        )
    for row in rows["pg_namespace"]:
        row["nspacl"] = None
    for row in rows["pg_attribute"]:
        spec = table_specs[row["attrelid"] - _FIRST_USER_OID]
        col = list(spec.columns)[row["attnum"] - 1]
        row.update(
            attlen=_ATTLEN.get(row["attformattype"], -1),
            attndims=0,
            attacl=None,
            attoptions=None,
            attislocal=True,
            attstorage="x" if row["attformattype"] == "text" else "p",
            attcompression="",
            attdescription=catalog.column_comment(spec, col),
        )
    for i, spec in enumerate(table_specs):
        oid = _FIRST_USER_OID + i
        rows["pg_description"].append(
            {"objoid": oid, "classoid": 1259, "objsubid": 0, "description": catalog.table_comment(spec)}
        )
        for pos, col in enumerate(spec.columns, start=1):
            rows["pg_description"].append(
                {"objoid": oid, "classoid": 1259, "objsubid": pos, "description": catalog.column_comment(spec, col)}
            )
    rows["pg_database"] = [
        {
            "oid": 16000,
            "datname": database,
            "datdba": 10,
            "encoding": 6,
            "datcollate": "C",
            "datctype": "C",
            "datistemplate": False,
            "datallowconn": True,
            "datconnlimit": -1,
            "dattablespace": 1663,
            "datacl": None,
            "daticulocale": None,
            "datlocprovider": "c",
        }
    ]
    rows["pg_settings"] = [
        {"name": k, "setting": v, "unit": None, "category": "", "short_desc": ""} for k, v in _SETTINGS.items()
    ]
    rows["pg_tablespace"] = [{"oid": 1663, "spcname": "pg_default", "spcowner": 10, "spcacl": None, "spcoptions": None}]
    return schema, tables


def catalog_for(cat: Catalog, database: str) -> tuple[dict, dict]:
    """The synthesised ``pg_catalog`` (schema, rows) for an analyst's catalog; never read from data."""
    key = (id(cat), database)
    hit = _CACHE.get(key)
    if hit is None or hit[0] is not cat:
        hit = (cat, _build(cat, database))
        if len(_CACHE) > 32:
            _CACHE.clear()
        _CACHE[key] = hit
    return hit[1]


def _like(value: str, pattern: str) -> bool:
    regex = "".join(".*" if ch == "%" else "." if ch == "_" else re.escape(ch) for ch in re.sub(r"\\(.)", r"\1", pattern))
    return re.fullmatch(regex, value, flags=re.S) is not None


def _conjuncts(node: exp.Expression | None) -> list[exp.Expression]:
    if node is None:
        return []
    if isinstance(node, exp.Paren):
        return _conjuncts(node.this)
    if isinstance(node, exp.And):
        return _conjuncts(node.this) + _conjuncts(node.expression)
    return [node]


def _like_filters(expr: exp.Expression) -> dict[str, str]:
    """Top-level ``column LIKE 'pattern'`` / ``column = 'x'`` WHERE conjuncts (of this query and
    its FROM subqueries) by column name: pgjdbc's schema/table/column filters."""
    out: dict[str, str] = {}
    selects = [expr, *(s.this for s in expr.find_all(exp.Subquery) if isinstance(s.this, exp.Select))]
    for select in selects:
        where = select.args.get("where")
        for node in _conjuncts(where.this if where is not None else None):
            if isinstance(node, (exp.Like, exp.EQ)):
                left, right = node.this, node.expression
                if isinstance(left, exp.Column) and isinstance(right, exp.Literal) and right.is_string:
                    out[left.name.lower()] = str(right.this)
    return out


def _names(select: exp.Expression) -> list[str]:
    return [s.alias_or_name for s in select.selects]


def _jdbc_schemas(cat: Catalog, database: str, expr: exp.Select) -> tuple[list, list] | None:
    names = _names(expr)
    if "TABLE_SCHEM" not in names or "pg_namespace" not in {t.name for t in expr.find_all(exp.Table)}:
        return None
    if "TABLE_NAME" in names:
        return None
    pattern = _like_filters(expr).get("nspname", "%")
    rows = [("public", database)] if _like("public", pattern) else []
    values = {"TABLE_SCHEM": 0, "TABLE_CATALOG": 1}
    return catalog.static_result(names, [tuple(r[values[n]] if n in values else None for n in names) for r in rows])


def _jdbc_tables(cat: Catalog, database: str, sql: str, expr: exp.Select) -> tuple[list, list] | None:
    names = _names(expr)
    if not {"TABLE_NAME", "TABLE_TYPE", "REMARKS"} <= set(names):
        return None
    filters = _like_filters(expr)
    where = expr.args.get("where")
    where_sql = where.sql(dialect="postgres") if where is not None else ""
    wants_tables = "relkind = 'r'" in where_sql or "relkind" not in where_sql
    rows = []
    for name, spec in cat.tables.items():
        if not (wants_tables and _like("public", filters.get("nspname", "%")) and _like(name, filters.get("relname", "%"))):
            continue
        remarks = catalog.table_comment(spec)
        values = {
            "TABLE_CAT": database,
            "TABLE_SCHEM": "public",
            "TABLE_NAME": name,
            "TABLE_TYPE": "TABLE",
            "REMARKS": remarks,
        }
        rows.append(tuple(values.get(n, "") for n in names))
    return catalog.static_result(names, rows)


def _jdbc_columns(cat: Catalog, database: str, expr: exp.Select) -> tuple[list, list] | None:
    inner = expr
    if len(expr.selects) == 1 and isinstance(expr.selects[0], exp.Star):
        sub = expr.find(exp.Subquery)
        if sub is None or not isinstance(sub.this, exp.Select):
            return None
        inner = sub.this
    names = _names(inner)
    if not {"attname", "atttypid", "attnum", "relname", "nspname"} <= set(names):
        return None
    filters = _like_filters(expr)
    rows = []
    for tname, spec in cat.tables.items():
        if not (_like("public", filters.get("nspname", "%")) and _like(tname, filters.get("relname", "%"))):
            continue
        for pos, (cname, vtype) in enumerate(spec.columns.items(), start=1):
            if not _like(cname, filters.get("attname", "%")):
                continue
            pgtype = catalog.PG_TYPE_NAMES.get(vtype, "text")
            values = {
                "current_database": database,
                "nspname": "public",
                "relname": tname,
                "attname": cname,
                "atttypid": _TYPE_OIDS[pgtype],
                "attnotnull": False,
                "atttypmod": -1,
                "attlen": _ATTLEN[pgtype],
                "typtypmod": -1,
                "attnum": pos,
                "attidentity": None,
                "attgenerated": None,
                "adsrc": None,
                "description": catalog.column_comment(spec, cname),
                "typbasetype": 0,
                "typtype": "b",
            }
            rows.append(tuple(values.get(n) for n in names))
    types = {
        "atttypid": catalog.INT8,
        "attnum": catalog.INT8,
        "attlen": catalog.INT8,
        "atttypmod": catalog.INT8,
        "typtypmod": catalog.INT8,
        "typbasetype": catalog.INT8,
        "attnotnull": catalog.BOOL,
    }
    return catalog.static_result(names, rows, types)


_DESCRIPTION_FUNCTIONS = {"col_description": "attdescription", "obj_description": "reldescription"}


def _regclass_literals(expr: exp.Expression) -> exp.Expression:
    """``'pg_class'::regclass`` → its OID, so ``classoid`` joins work; ``col_description(a.attrelid,
    a.attnum)`` / ``obj_description(c.oid, …)`` → the comment columns of the synthesised rows."""
    for node in list(expr.find_all(exp.Anonymous)):
        target = _DESCRIPTION_FUNCTIONS.get(str(node.this).lower())
        if target is None or not node.expressions or not isinstance(node.expressions[0], exp.Column):
            continue
        column = exp.column(target, table=node.expressions[0].table)
        parent = node.parent
        (parent if isinstance(parent, exp.Dot) else node).replace(column)
    for cast in list(expr.find_all(exp.Cast)):
        target = cast.to.sql(dialect="postgres").lower() if cast.to else ""
        if target.endswith("regclass") and isinstance(cast.this, exp.Literal) and cast.this.is_string:
            name = str(cast.this.this).split(".")[-1].strip('"').lower()
            if name in _REGCLASS:
                cast.replace(exp.Literal.number(_REGCLASS[name]))
    return expr


def _is_catalog_table(table: exp.Table) -> bool:
    return (table.db or "").lower() == "pg_catalog" or (not table.db and table.name.lower().startswith("pg_"))


def answer(cat: Catalog, connection: Any, sql: str, expr: exp.Expression) -> tuple[list, list] | None:
    """Answer a catalog query, or None to let pg-mimic's own catalog emulation try."""
    if not isinstance(expr, exp.Query):
        return None
    database = getattr(connection, "database", "veil") or "veil"
    if isinstance(expr, exp.Select):
        for handler in (_jdbc_columns, _jdbc_schemas):
            result = handler(cat, database, expr)
            if result is not None:
                return result
        result = _jdbc_tables(cat, database, sql, expr)
        if result is not None:
            return result
    tables = list(expr.find_all(exp.Table))
    if not tables or not all(_is_catalog_table(t) for t in tables):
        return None
    schema, data = catalog_for(cat, database)
    try:
        rewritten = rewrite_for_executor(connection, _regclass_literals(expr.copy()))
        result = sqlglot_execute(rewritten, schema=schema, tables=data, dialect="postgres")
    except Exception:
        return None
    return catalog.static_result(list(result.columns), [tuple(r) for r in result.rows])
