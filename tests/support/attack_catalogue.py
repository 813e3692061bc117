"""The attack catalogue: every attack the red team runs, as data (one row per attack).

Each :class:`Attack` names its class (the attack family of issue 12 / the threat model), the SQL, the ε
asked for (None: the policy default), and the expected outcome (see :mod:`tests.support.attack`):
``refused`` (with the SQLSTATEs allowed), ``answered`` (charged exactly), ``public`` (free, no private data)
or ``safe`` (refused free or answered correctly — for attacks where either is a sound design).

Attacks of the classes in :data:`ORACLE_CLASSES` are also run on the neighbouring database (the target unit
removed) through the internal exact path: their outcome — refused, or answered — must not depend on it.

The world is :mod:`tests.support.attack_world`: private ``people`` (row-level, capped) and ``visits``
(user-level, unit ``pid``, 3 rows per unit), public ``regions`` (a duplicated key) and ``codes`` (text keys
'1', '01', ' 1' that all equal the integer 1 after a cast).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

__all__ = ["ATTACKS", "ORACLE_CLASSES", "WIRE_AND_CLI", "Attack"]

REJECT = ("42601", "42P01", "42703", "0A000", "42501", "42804", "54000", "54001", "22023", "42000")


@dataclass(frozen=True)
class Attack:
    name: str
    cls: str
    sql: str
    expect: str  # refused | answered | public | safe
    epsilon: float | None = None
    sqlstates: tuple[str, ...] = ()
    table: str = "people"
    api_only: bool = False  # a variant of another attack (another position of the same expression): run through
    # the Python API and the neighbour test only, to keep the suite within its time budget

    @property
    def id(self) -> str:
        return f"{self.cls}:{self.name}"


ATTACKS: list[Attack] = []


def _add(cls: str, name: str, sql: str, expect: str, **kw: object) -> None:
    ATTACKS.append(Attack(name, cls, sql, expect, **kw))  # type: ignore[arg-type]


# --- 1. name resolution: shadowing private, internal and catalog tables at every scope ---------------

_SHADOW_READS = {
    "cte": "WITH people AS (SELECT * FROM people) SELECT * FROM people",
    "cte_alias": "WITH people AS (SELECT * FROM people AS a) SELECT * FROM people",
    "cte_cols": "WITH people(i, n) AS (SELECT id, name FROM people) SELECT * FROM people",
    "cte_sibling_later": "WITH a AS (SELECT * FROM people), people AS (SELECT * FROM a) SELECT * FROM people",
    "cte_in_subquery": "SELECT * FROM (WITH people AS (SELECT * FROM people) SELECT * FROM people) s",
    "cte_in_cte": "WITH x AS (WITH people AS (SELECT * FROM people) SELECT * FROM people) SELECT * FROM x",
    "cte_nested_twice": "SELECT * FROM (SELECT * FROM (WITH people AS (SELECT name FROM people) SELECT * FROM people) a) b",
    "cte_recursive": "WITH RECURSIVE people AS (SELECT * FROM people) SELECT * FROM people",
    "cte_recursive_union": "WITH RECURSIVE people AS (SELECT * FROM people UNION ALL SELECT * FROM people) SELECT * FROM people",
    "cte_public_name": "WITH regions AS (SELECT * FROM people) SELECT * FROM regions",
    "cte_public_cols": "WITH regions AS (SELECT id AS rid, name AS rname FROM people) SELECT rid, rname FROM regions",
    "cte_codes": "WITH codes AS (SELECT code, name AS label FROM people) SELECT * FROM codes",
    "cte_upper": "WITH PEOPLE AS (SELECT * FROM people) SELECT * FROM PEOPLE",
    "cte_quoted": 'WITH "people" AS (SELECT * FROM people) SELECT * FROM "people"',
    "cte_quoted_upper": 'WITH "People" AS (SELECT * FROM people) SELECT * FROM "People"',
    "cte_mixed_quote": 'WITH "regions" AS (SELECT * FROM people) SELECT * FROM regions',
    "cte_schema_ref": "WITH people AS (SELECT * FROM main.people) SELECT * FROM people",
    "cte_internal_name": "WITH __veil_cte_0 AS (SELECT * FROM people) SELECT * FROM __veil_cte_0",
    "cte_internal_name_1": "WITH x AS (SELECT 1 AS a), __veil_cte_1 AS (SELECT * FROM people) SELECT * FROM __veil_cte_1",
    "cte_frame_name": "WITH __veil_frame AS (SELECT * FROM people) SELECT * FROM __veil_frame",
    "cte_bounded_name": "WITH _veil_bounded_people AS (SELECT * FROM people) SELECT * FROM _veil_bounded_people",
    "cte_where_subquery": "WITH people AS (SELECT * FROM people) SELECT * FROM regions WHERE rid IN (SELECT id FROM people)",
    "cte_join_public": "WITH people AS (SELECT * FROM people) SELECT * FROM regions JOIN people ON people.id = regions.rid",
    "cte_distinct": "WITH people AS (SELECT * FROM people) SELECT DISTINCT name FROM people",
    "alias_public": "SELECT * FROM people AS regions",
    "alias_public_cte": "WITH r AS (SELECT * FROM people AS regions) SELECT * FROM r",
    "subquery_alias": "SELECT * FROM (SELECT * FROM people) AS regions",
    "schema_main": "SELECT * FROM main.people",
    "catalog_schema": "SELECT * FROM warehouse.main.people",
    "memory_schema": "SELECT * FROM memory.main.people",
    "quoted_table": 'SELECT * FROM "people"',
    "quoted_upper_table": 'SELECT * FROM "PEOPLE"',
    "values_shadow": "WITH people AS (SELECT * FROM (VALUES (1)) v(x)) SELECT * FROM people, people AS p2",
    "scalar_subquery": "SELECT (SELECT MAX(salary) FROM people) AS m",
    "exists_subquery": "SELECT COUNT(*) FROM regions WHERE EXISTS (SELECT 1 FROM people WHERE id = 123 AND age = 0)",
    "in_subquery": "SELECT COUNT(*) FROM regions WHERE rid IN (SELECT age FROM people WHERE id = 123)",
    "lateral": "SELECT * FROM regions, LATERAL (SELECT name FROM people WHERE id = regions.rid) x",
    "union_public": "SELECT rname FROM regions UNION ALL SELECT name FROM people",
    "union_cte": "WITH x AS (SELECT rname FROM regions UNION SELECT name FROM people) SELECT * FROM x",
    "visits_cte": "WITH visits AS (SELECT * FROM visits) SELECT * FROM visits",
    "homoglyph": 'SELECT * FROM "p\u0435ople"',
    "unquoted_upper": "SELECT * FROM PEOPLE",
    "trailing_comment": "SELECT * FROM people -- SELECT COUNT(*) FROM people",
    "block_comment_name": "SELECT * FROM /* regions */ people",
    "visits_as_regions": "WITH regions AS (SELECT pid AS rid, kind AS rname FROM visits) SELECT * FROM regions",
}
for _name, _sql in _SHADOW_READS.items():
    _add("shadowing", _name, _sql, "refused", sqlstates=REJECT)

# Aggregates through a shadowing CTE: private after all, so answered and charged (never free).
_SHADOW_AGGREGATES = {
    "cte_count": "WITH people AS (SELECT * FROM people) SELECT COUNT(*) FROM people",
    "cte_public_name_count": "WITH regions AS (SELECT * FROM people) SELECT COUNT(*) FROM regions",
    "cte_nested_count": "SELECT COUNT(*) FROM (WITH regions AS (SELECT * FROM people) SELECT * FROM regions) s",
    "cte_sibling_count": "WITH a AS (SELECT * FROM people), regions AS (SELECT * FROM a) SELECT COUNT(*) FROM regions",
    "cte_sum_shadow": "WITH codes AS (SELECT salary FROM people) SELECT SUM(salary) FROM codes",
    "cte_groupby_shadow": "WITH people AS (SELECT * FROM people) SELECT name, age FROM people GROUP BY name, age",
    "group_by_target_value": "SELECT name, MAX(salary) FROM people WHERE id = 123 GROUP BY name",
    "group_keys_only_having": "SELECT name FROM people GROUP BY name HAVING name LIKE 'C%'",
    "cte_internal_count": "WITH __veil_cte_0 AS (SELECT * FROM people) SELECT COUNT(*) FROM __veil_cte_0",
    "cte_frame_count": "WITH __veil_frame AS (SELECT age FROM people) SELECT AVG(age) FROM __veil_frame",
}
for _name, _sql in _SHADOW_AGGREGATES.items():
    _add("shadowing", _name, _sql, "answered")

# Public CTE shadowing a public table: a public query, answered free from public data only.
_add("shadowing", "cte_sibling_first", "WITH people AS (SELECT 1 AS x), b AS (SELECT * FROM people) SELECT * FROM b", "public")
_add("shadowing", "public_self_cte", "WITH regions AS (SELECT * FROM regions) SELECT * FROM regions", "public")
_add("shadowing", "public_cte_named_people",
     "WITH people AS (SELECT * FROM regions) SELECT * FROM people", "public")  # fmt: skip
_add("shadowing", "public_cte_people_nested",
     "SELECT * FROM (WITH people AS (SELECT rname AS name FROM regions) SELECT name FROM people) s", "public")  # fmt: skip
_add("shadowing", "public_cte_people_join",
     "WITH people AS (SELECT * FROM codes) SELECT people.label FROM people JOIN regions ON regions.rname = people.label",
     "public")  # fmt: skip

# Internal tables and engine catalogs, named directly: refused, or (catalog emulation) public and clean.
_INTERNAL = {
    "bounded_copy": "SELECT * FROM _veil_bounded_people",
    "bounded_copy_count": "SELECT COUNT(*) FROM _veil_bounded_people",
    "veil_frame": "SELECT * FROM __veil_frame",
    "veil_raw": "SELECT * FROM __veil_raw",
    "veil_cte": "SELECT * FROM __veil_cte_0",
    "veil_incoming": "SELECT * FROM _veil_incoming",
    "veil_salts": "SELECT * FROM _veil_salts",
    "ledger_reservations": "SELECT * FROM reservations",
    "ledger_releases": "SELECT * FROM releases",
    "ledger_bounded": "SELECT * FROM bounded_copies",
    "credentials": "SELECT * FROM analyst_credentials",
    "veil_budget_join": "SELECT * FROM veil.budget, people",
    "veil_budget_join_count": "SELECT COUNT(*) FROM veil.budget, people",
    "veil_budget_join_public": "SELECT COUNT(*) FROM veil.budget b JOIN regions r ON r.rid = 1",
    "veil_budget_subquery": "SELECT COUNT(*) FROM people WHERE age < (SELECT remaining FROM veil.budget)",
}
for _name, _sql in _INTERNAL.items():
    _add("internal", _name, _sql, "safe", sqlstates=REJECT)

_CATALOG = {
    "duckdb_tables": "SELECT * FROM duckdb_tables()",
    "duckdb_tables_view": "SELECT table_name FROM duckdb_tables",
    "duckdb_columns": "SELECT * FROM duckdb_columns()",
    "duckdb_settings": "SELECT * FROM duckdb_settings()",
    "duckdb_databases": "SELECT * FROM duckdb_databases()",
    "duckdb_views": "SELECT * FROM duckdb_views()",
    "duckdb_functions": "SELECT function_name FROM duckdb_functions() LIMIT 5",
    "info_tables": "SELECT table_name FROM information_schema.tables",
    "info_tables_veil": "SELECT table_name FROM information_schema.tables WHERE table_name LIKE '%veil%'",
    "info_columns": "SELECT table_name, column_name FROM information_schema.columns",
    "info_schemata": "SELECT * FROM information_schema.schemata",
    "pg_tables": "SELECT tablename FROM pg_catalog.pg_tables",
    "pg_tables_bare": "SELECT tablename FROM pg_tables",
    "pg_class": "SELECT relname FROM pg_catalog.pg_class",
    "pg_attribute": "SELECT attname FROM pg_catalog.pg_attribute",
    "pg_stats": "SELECT * FROM pg_stats",
    "sqlite_master": "SELECT * FROM sqlite_master",
    "pragma_table_info": "SELECT * FROM pragma_table_info('people')",
    "pragma_storage": "SELECT * FROM pragma_storage_info('people')",
    "cte_shadow_info": "WITH tables AS (SELECT * FROM people) SELECT * FROM information_schema.tables",
    "cte_named_catalog": "WITH duckdb_tables AS (SELECT * FROM people) SELECT * FROM duckdb_tables",
    "cte_named_pg": "WITH pg_tables AS (SELECT name AS tablename FROM people) SELECT tablename FROM pg_tables",
    "info_join_private": "SELECT t.table_name, p.name FROM information_schema.tables t, people p",
    "catalog_count_private": "SELECT COUNT(*) FROM information_schema.tables t, people p",
    "pg_tables_join_private": "SELECT COUNT(*) FROM pg_tables, people",
    "pg_class_exists": "SELECT COUNT(*) FROM people WHERE EXISTS (SELECT 1 FROM pg_catalog.pg_class)",
    "catalog_cte_join": "WITH x AS (SELECT * FROM information_schema.columns) SELECT COUNT(*) FROM people, x",
    "catalog_in_subquery": "SELECT COUNT(*) FROM people WHERE name IN (SELECT table_name FROM information_schema.tables)",
    "pg_namespace_join": "SELECT n.nspname, COUNT(*) FROM pg_catalog.pg_namespace n, people GROUP BY n.nspname",
    "catalog_union_private": "SELECT table_name FROM information_schema.tables UNION ALL SELECT name FROM people",
    "duckdb_tables_join": "SELECT COUNT(*) FROM duckdb_tables() d, people p",
    "catalog_exists_private": "SELECT table_name FROM information_schema.tables WHERE EXISTS "
    "(SELECT 1 FROM people WHERE salary = 77516)",
    "pg_class_in_private": "SELECT relname FROM pg_catalog.pg_class WHERE relname IN (SELECT name FROM people)",
    "pg_namespace_scalar_private": "SELECT (SELECT COUNT(*) FROM people) AS n FROM pg_catalog.pg_namespace",
    "pg_class_cross_private": "SELECT * FROM pg_catalog.pg_class, (SELECT salary FROM people WHERE id = 123) s",
    "pg_class_cte_private": "WITH s AS (SELECT salary FROM people) SELECT relname FROM pg_catalog.pg_class, s",
    "setting_and_private": "SELECT current_setting('veil.epsilon'), (SELECT MAX(salary) FROM people)",
    "version_and_private": "SELECT version(), name FROM people",
    "current_user_private": "SELECT current_user, salary FROM people WHERE id = 123",
    "show_then_private": "SELECT 1 AS one, name FROM people LIMIT 1",
}
for _name, _sql in _CATALOG.items():
    _add("catalog", _name, _sql, "safe", sqlstates=REJECT)

# --- 2. sandbox classes that already hold: statements, files, functions, shapes --------------------

_SANDBOX = {
    "read_csv": "SELECT * FROM read_csv('/etc/passwd')",
    "read_csv_auto": "SELECT COUNT(*) FROM read_csv_auto('/etc/hostname')",
    "read_parquet": "SELECT * FROM read_parquet('x.parquet')",
    "read_text": "SELECT * FROM read_text('/etc/passwd')",
    "file_string": "SELECT * FROM '/etc/passwd'",
    "glob": "SELECT * FROM glob('/*')",
    "copy": "COPY people TO '/tmp/out.csv'",
    "attach": "ATTACH 'ledger.sqlite' AS l",
    "pragma": "PRAGMA show_tables",
    "install": "INSTALL httpfs",
    "load": "LOAD httpfs",
    "insert": "INSERT INTO regions VALUES (9, 'x')",
    "update": "UPDATE people SET salary = 0",
    "delete": "DELETE FROM people",
    "drop": "DROP TABLE people",
    "create_table_as": "CREATE TABLE leak AS SELECT * FROM people",
    "create_view": "CREATE VIEW v AS SELECT * FROM people",
    "two_statements": "SELECT * FROM people; SELECT COUNT(*) FROM people",
    "call": "CALL pragma_table_info('people')",
    "describe": "DESCRIBE people",
    "summarize": "SUMMARIZE people",
    "export": "EXPORT DATABASE '/tmp/x'",
    "checkpoint": "CHECKPOINT",
    "raw_rows": "SELECT * FROM people",
    "raw_column": "SELECT name FROM people WHERE id = 123",
    "raw_distinct": "SELECT DISTINCT salary FROM people",
    "window": "SELECT COUNT(*) OVER () FROM people",
    "window_row_number": "SELECT ROW_NUMBER() OVER (ORDER BY salary) AS r, COUNT(*) FROM people GROUP BY salary",
    "union_private": "SELECT COUNT(*) FROM people UNION SELECT COUNT(*) FROM people",
    "intersect": "SELECT id FROM people INTERSECT SELECT rid FROM regions",
    "self_join": "SELECT COUNT(*) FROM people a JOIN people b ON a.id = b.id",
    "self_join_cte_twice": "WITH p AS (SELECT * FROM people) SELECT COUNT(*) FROM p a, p b",
    "two_private": "SELECT COUNT(*) FROM people, visits WHERE people.id = visits.pid",
    "right_join": "SELECT COUNT(*) FROM regions RIGHT JOIN people ON people.id = regions.rid",
    "full_join": "SELECT COUNT(*) FROM people FULL JOIN regions ON people.id = regions.rid",
    "left_join_onto_private": "SELECT COUNT(*) FROM regions LEFT JOIN people ON people.id = regions.rid",
    "natural_join": "SELECT COUNT(*) FROM people NATURAL JOIN codes",
    "asof_join": "SELECT COUNT(*) FROM people ASOF JOIN regions ON people.id >= regions.rid",
    "random": "SELECT COUNT(*) FROM people WHERE random() < 0.5",
    "setseed": "SELECT setseed(0.5)",
    "now": "SELECT COUNT(*) FROM people WHERE born < now()",
    "current_setting": "SELECT COUNT(*) FROM people WHERE current_setting('threads') = '1'",
    "getenv": "SELECT getenv('HOME')",
    "unknown_function": "SELECT COUNT(*) FROM people WHERE my_udf(age) = 1",
    "aggregate_in_subquery": "SELECT SUM(n) FROM (SELECT name, COUNT(*) AS n FROM people GROUP BY name) s",
    "limit_in_subquery": "SELECT COUNT(*) FROM (SELECT * FROM people ORDER BY salary LIMIT 1) s",
    "distinct_in_subquery": "SELECT COUNT(*) FROM (SELECT DISTINCT name FROM people) s",
    "list_agg": "SELECT STRING_AGG(name, ',') FROM people",
    "array_agg": "SELECT ARRAY_AGG(salary) FROM people",
    "list_agg_duckdb": "SELECT LIST(name) FROM people",
    "first": "SELECT FIRST(name) FROM people",
    "arg_max": "SELECT ARG_MAX(name, salary) FROM people",
    "mode": "SELECT MODE(name) FROM people",
    "unbounded_sum": "SELECT SUM(LENGTH(name)) FROM people",
    "sum_of_id_bounds_ok_but_text": "SELECT SUM(CAST(name AS BIGINT)) FROM people",
    "min_text": "SELECT MIN(name) FROM people",
    "max_date": "SELECT MAX(born) FROM people",
    "order_by_private_raw": "SELECT name FROM people ORDER BY salary DESC LIMIT 1",
    "prepare": "PREPARE q AS SELECT * FROM people",
    "execute_stmt": "EXECUTE q",
    "declare_cursor": "DECLARE c CURSOR FOR SELECT * FROM people",
    "depth_bomb": "SELECT COUNT(*) FROM people WHERE " + "(" * 200 + "1 = 1" + ")" * 200,
    "size_bomb": "SELECT COUNT(*) FROM people WHERE name IN (" + ", ".join(f"'{i}'" for i in range(150000)) + ")",
    "not_sql": "hello world",
}
for _name, _sql in _SANDBOX.items():
    _add("sandbox", _name, _sql, "refused", sqlstates=REJECT)

# --- 3. data-dependent failures: the occurrence of an error must never depend on a row ---------------

PARTIAL = {
    "mod_zero": "age % (age - age)",
    "div_zero": "1 / (age - age)",
    "div_zero_salary": "salary / (salary - 77516)",
    "int_div_zero": "CAST(salary AS BIGINT) // CAST(age AS BIGINT)",
    "cast_nan_int": "CAST(score AS INTEGER)",
    "cast_big_int": "CAST(big AS INTEGER)",
    "cast_big_smallint": "CAST(big AS SMALLINT)",
    "cast_salary_tinyint": "CAST(salary AS TINYINT)",
    "cast_product_int": "CAST(salary * 100000 AS INTEGER)",
    "cast_huge_bigint": "CAST(1e300 * score AS BIGINT)",
    "cast_decimal": "CAST(salary AS DECIMAL(4, 0))",
    "cast_code_int": "CAST(code AS INTEGER)",
    "cast_name_int": "CAST(name AS INTEGER)",
    "cast_name_double": "CAST(name AS DOUBLE)",
    "cast_code_date": "EXTRACT(YEAR FROM CAST(code AS DATE))",
    "add_overflow": "big + 9223372036854775807",
    "sub_overflow": "-big - 9223372036854775807",
    "mul_overflow": "big * 9223372036854775807",
    "square_overflow": "big * big",
    "cube_overflow": "big * big * big",
    "abs_overflow": "ABS(big - 9223372036854775807)",
    "neg_min": "-(big - 9223372036854775807 - 1)",
    "pow_op": "big ^ 4",
    "power_fn": "POWER(big, 4)",
    "power_data_exp": "POWER(salary, age)",
    "huge_literal": "1e300 * big",
    "huge_literal_score": "1e308 * 10 * score",
    "huge_square": "1e308 * score * score",
    "exp_age": "EXP(age)",
    "exp_big": "EXP(big)",
    "ln_zero": "LN(age)",
    "ln_negative": "LN(score)",
    "log_base": "LOG(10, age - 1)",
    "sqrt_negative": "SQRT(score)",
    "sqrt_age": "SQRT(age - 50)",
    "floor_huge": "FLOOR(score * 1e308)",
    "round_digits": "ROUND(big, -20)",
    "repeat_huge": "LENGTH(REPEAT(name, CAST(age AS INTEGER) * 100000000))",
    "left_big": "LENGTH(LEFT(name, big))",
    "substring_big": "LENGTH(SUBSTRING(name, big, 2))",
    "lpad_big": "LENGTH(LPAD(name, CAST(big AS INTEGER), 'x'))",
    "chr_big": "LENGTH(CHR(big))",
    "regex_from_data": "CASE WHEN regexp_matches(name, code) THEN 1 ELSE 0 END",
    "regex_bad_literal": "CASE WHEN regexp_matches(name, '(') THEN 1 ELSE 0 END",
    "similar_to_data": "CASE WHEN name SIMILAR TO code THEN 1 ELSE 0 END",
    "like_escape_data": "CASE WHEN name LIKE code ESCAPE code THEN 1 ELSE 0 END",
    "date_add_big": "EXTRACT(YEAR FROM born + CAST(big AS INTEGER) * INTERVAL '1 day')",
    "date_add_salary": "EXTRACT(YEAR FROM born + salary * INTERVAL '1000 days')",
    "make_date": "EXTRACT(YEAR FROM make_date(age, 13, 1))",
    "gcd": "GCD(big, age)",
    "factorial": "FACTORIAL(age)",
    "bit_shift": "big << 70",
    "coalesce_types": "COALESCE(age, name)",
    "greatest_mixed": "GREATEST(age, code)",
    "case_mixed": "CASE WHEN id = 1 THEN age ELSE name END",
    "text_compare_number": "CASE WHEN code = 1 THEN 1 ELSE 0 END",
    "text_in_numbers": "CASE WHEN code IN (1, 2) THEN 1 ELSE 0 END",
    "between_text": "CASE WHEN code BETWEEN 0 AND 5 THEN 1 ELSE 0 END",
    "nullif_zero_div": "1 / NULLIF(age, 0) / (age - age)",
}
_TRIGGER = "CASE WHEN id = 123 THEN {e} ELSE 0 END"
_POSITIONS = {
    "where": "SELECT COUNT(*) FROM people WHERE (" + _TRIGGER + ") = 0",
    "sum": "SELECT SUM(" + _TRIGGER + ") FROM people",
}
_MORE_POSITIONS = {
    "filter": "SELECT COUNT(*) FILTER (WHERE ({e}) > 0) FROM people",
    "avg": "SELECT AVG({e}) FROM people",
    "median": "SELECT MEDIAN({e}) FROM people",
    "group": "SELECT COUNT(*) FROM people GROUP BY ({e})",
    "having": "SELECT sex, COUNT(*) FROM people GROUP BY sex HAVING COUNT(*) > 0 AND SUM(" + _TRIGGER + ") IS NOT NULL",
    "on": "SELECT COUNT(*) FROM people JOIN regions ON regions.rid = (" + _TRIGGER + ")",
    "cte": "WITH c AS (SELECT (" + _TRIGGER + ") AS v FROM people) SELECT COUNT(*) FROM c WHERE v = 0",
    "visits": "SELECT COUNT(*) FROM visits WHERE (CASE WHEN pid = 123 THEN {v} ELSE 0 END) = 0",
}
_EVERYWHERE = {"mod_zero", "div_zero", "cast_big_int", "mul_overflow", "huge_literal", "power_fn", "regex_from_data",
               "cast_code_int", "ln_zero", "date_add_big", "square_overflow", "cast_nan_int"}  # fmt: skip
for _name, _e in PARTIAL.items():
    for _pos, _tmpl in _POSITIONS.items():
        _add("oracle", f"{_name}@{_pos}", _tmpl.format(e=_e), "safe", sqlstates=REJECT)
    if _name in _EVERYWHERE:
        for _pos, _tmpl in _MORE_POSITIONS.items():
            _v = _e.replace("age", "amount").replace("salary", "amount").replace("big", "amount * 1000000000000")
            _v = (
                _v.replace("score", "amount").replace("name", "kind").replace("code", "kind").replace("born", "DATE '2000-01-01'")
            )
            _add("oracle", f"{_name}@{_pos}", _tmpl.format(e=_e, v=_v), "safe", sqlstates=REJECT,
                 table="visits" if _pos == "visits" else "people", api_only=True)  # fmt: skip

# LIMIT / OFFSET / ORDER BY with expressions: post-processing, never data-dependent.
_LIMITS = {
    "limit_div_zero": "SELECT sex, COUNT(*) FROM people GROUP BY sex LIMIT 1 / 0",
    "limit_negative": "SELECT sex, COUNT(*) FROM people GROUP BY sex LIMIT -1",
    "limit_huge": "SELECT sex, COUNT(*) FROM people GROUP BY sex LIMIT 9223372036854775807",
    "limit_float_huge": "SELECT sex, COUNT(*) FROM people GROUP BY sex LIMIT 1e300",
    "offset_huge": "SELECT sex, COUNT(*) FROM people GROUP BY sex OFFSET 1e300",
    "limit_subquery": "SELECT sex, COUNT(*) FROM people GROUP BY sex LIMIT (SELECT COUNT(*) FROM people)",
    "limit_subquery_public": "SELECT sex, COUNT(*) FROM people GROUP BY sex LIMIT (SELECT COUNT(*) FROM regions)",
    "limit_column": "SELECT sex, COUNT(*) FROM people GROUP BY sex LIMIT age",
    "limit_percent": "SELECT sex, COUNT(*) FROM people GROUP BY sex LIMIT 50%",
    "order_by_div": "SELECT sex, COUNT(*) AS n FROM people GROUP BY sex ORDER BY 1 / (n - n)",
    "order_by_position_huge": "SELECT sex, COUNT(*) FROM people GROUP BY sex ORDER BY 9",
    "having_div_noisy": "SELECT sex, COUNT(*) AS n FROM people GROUP BY sex HAVING 1 / (COUNT(*) - COUNT(*)) > 0",
    "having_cast_noisy": "SELECT sex, SUM(salary) AS s FROM people GROUP BY sex HAVING CAST(SUM(salary) * 1e300 AS BIGINT) > 0",
    "post_overflow": "SELECT COUNT(*) * 9223372036854775807 AS x FROM people",
    "post_cast_overflow": "SELECT CAST(SUM(salary) AS TINYINT) FROM people",
    "post_pow": "SELECT POWER(SUM(big), 40) FROM people",
    "post_ln": "SELECT LN(COUNT(*) - COUNT(*)) FROM people",
    "post_text_on_number": "SELECT REPEAT('x', COUNT(*) * 1000000000) FROM people",
}
for _name, _sql in _LIMITS.items():
    _add("oracle", _name, _sql, "safe", sqlstates=REJECT)

# Post-processing strings: literals and aliases naming the post-processing frame.
_FRAME_STRINGS = {
    "alias_frame": 'SELECT COUNT(*) AS "FROM __veil_frame" FROM people',
    "literal_frame": "SELECT 'FROM __veil_frame' AS s, COUNT(*) FROM people",
    "where_literal_frame": "SELECT COUNT(*) FROM people WHERE name = 'x FROM __veil_frame y'",
    "having_literal_frame": "SELECT sex, COUNT(*) FROM people GROUP BY sex HAVING 'FROM __veil_frame' <> ''",
    "alias_raw": 'SELECT COUNT(*) AS "__veil_raw" FROM people',
    "alias_key": 'SELECT sex AS "__k0", COUNT(*) AS "__a0" FROM people GROUP BY sex',
    "literal_semicolon": "SELECT COUNT(*) AS n, '; DROP TABLE x; --' AS s FROM people",
    "literal_quote": "SELECT COUNT(*) AS n, 'it''s FROM __veil_raw' AS s FROM people",
    "comment_frame": "SELECT COUNT(*) /* FROM __veil_frame */ FROM people",
    "dollar_quote": "SELECT COUNT(*), $$FROM __veil_frame$$ AS s FROM people",
}
for _name, _sql in _FRAME_STRINGS.items():
    _add("post", _name, _sql, "safe", sqlstates=REJECT)

# --- 4. join multiplicity: answered, and the neighbour test checks the noise covers the real multiplicity

_JOINS = {
    "derived_twice": "SELECT COUNT(*) FROM people p, (SELECT rid FROM regions) r1, (SELECT rid FROM regions) r2 WHERE p.id = 123",
    "derived_twice_sum": "SELECT SUM(p.salary) FROM people p, (SELECT rid FROM regions) r1, (SELECT rid FROM regions) r2 "
    "WHERE p.id = 123",
    "cte_twice": "WITH r AS (SELECT rid FROM regions) SELECT COUNT(*) FROM people p, r r1, r r2 WHERE p.id = 123",
    "cte_chain": "WITH a AS (SELECT rid FROM regions), b AS (SELECT a.rid FROM a, a a2) SELECT SUM(p.salary) FROM people p, b",
    # (not SELECT *: both sources name a column rid, and a derived table may name each column once)
    "nested_derived": "SELECT SUM(p.salary) FROM people p, "
    "(SELECT x.rid AS a, y.rid AS b FROM (SELECT rid FROM regions) x, regions y) z",
    "public_equated": "SELECT SUM(p.salary) FROM people p, regions r1, regions r2 WHERE r1.rid = r2.rid AND p.id = r1.rid",
    "public_self_equated": "SELECT SUM(p.salary) FROM people p, regions r1 WHERE r1.rid = r1.rid AND p.id = 1",
    "pin_on_dup_key": "SELECT SUM(p.salary) FROM people p JOIN regions r ON r.rid = p.id",
    "implicit_cast_key": "SELECT SUM(p.salary) FROM people p JOIN codes c ON c.code = CAST(p.id AS VARCHAR)",
    "implicit_cast_key_int": "SELECT SUM(p.salary) FROM people p JOIN codes c ON CAST(c.code AS INTEGER) = p.id",
    "text_key_pin": "SELECT SUM(p.salary) FROM people p JOIN codes c ON c.code = p.code",
    "cross_join": "SELECT SUM(p.salary) FROM people p CROSS JOIN regions",
    "cross_join_twice": "SELECT SUM(p.salary) FROM people p CROSS JOIN regions CROSS JOIN codes",
    "cross_in_cte": "WITH x AS (SELECT p.salary FROM people p CROSS JOIN regions r) SELECT SUM(salary) FROM x",
    "join_in_subquery": "SELECT SUM(s) FROM (SELECT p.salary AS s FROM people p, regions r, regions r2) q",
    "left_join_public": "SELECT SUM(p.salary) FROM people p LEFT JOIN regions r ON r.rid = p.id",
    "or_condition": "SELECT COUNT(*) FROM people p, regions r WHERE r.rid = p.id OR r.rid = 1",
    "group_public_key": "SELECT r.rname, SUM(p.salary) FROM people p, regions r GROUP BY r.rname",
    "group_public_key_derived": "SELECT r.rname, COUNT(*) FROM people p, (SELECT * FROM regions) r GROUP BY r.rname",
    "visits_cross": "SELECT SUM(v.amount) FROM visits v CROSS JOIN regions",
    "visits_join_codes": "SELECT COUNT(*) FROM visits v JOIN codes c ON c.label = v.kind",
    "count_distinct_unit_cross": "SELECT r.rname, COUNT(DISTINCT v.pid) FROM visits v, regions r GROUP BY r.rname",
}
for _name, _sql in _JOINS.items():
    _add("multiplicity", _name, _sql, "answered", table="visits" if "visits" in _sql else "people")

# --- 5. user-level statistics, COUNT(DISTINCT unit) per group, NULL units -------------------------

_UNITS = {
    "distinct_unit": "SELECT COUNT(DISTINCT pid) FROM visits",
    "distinct_unit_by_device": "SELECT device, COUNT(DISTINCT pid) FROM visits GROUP BY device",
    "distinct_unit_by_kind": "SELECT kind, COUNT(DISTINCT pid) FROM visits GROUP BY kind",
    "distinct_unit_by_amount": "SELECT amount, COUNT(DISTINCT pid) FROM visits GROUP BY amount",
    "distinct_amount": "SELECT COUNT(DISTINCT amount) FROM visits",
    "distinct_amount_by_device": "SELECT device, COUNT(DISTINCT amount) FROM visits GROUP BY device",
    "sum_user_level": "SELECT SUM(amount) FROM visits",
    "sum_by_device": "SELECT device, SUM(amount), COUNT(*) FROM visits GROUP BY device",
    "null_units_count": "SELECT COUNT(*) FROM visits WHERE pid IS NULL",
    "null_units_sum": "SELECT SUM(amount) FROM visits WHERE pid IS NULL",
    "avg_user_level": "SELECT AVG(amount) FROM visits",
    "median_user_level": "SELECT MEDIAN(amount) FROM visits",
    "max_user_level": "SELECT MAX(amount) FROM visits",
    "var_user_level": "SELECT VARIANCE(amount) FROM visits",
    "private_key_user_level": "SELECT kind, COUNT(*) FROM visits GROUP BY kind",
}
for _name, _sql in _UNITS.items():
    _add("units", _name, _sql, "answered", table="visits")

# Plain private statistics over the adversarial rows (NaN, ±inf, out-of-range, NULL): answered.
_STATS = {
    "count": "SELECT COUNT(*) FROM people",
    "sum_salary": "SELECT SUM(salary) FROM people",
    "sum_big": "SELECT SUM(big) FROM people",
    "sum_score": "SELECT SUM(score) FROM people",
    "avg_score": "SELECT AVG(score) FROM people",
    "stddev_big": "SELECT STDDEV(big) FROM people",
    "std_alias": "SELECT STD(age) FROM people",
    "var_pop": "SELECT VAR_POP(score) FROM people",
    "median_big": "SELECT MEDIAN(big) FROM people",
    "quantile_big_product": "SELECT quantile_cont(big * age, 0.9) FROM people",
    "percentile_cont": "SELECT PERCENTILE_CONT(0.25) WITHIN GROUP (ORDER BY salary) FROM people",
    "min_big": "SELECT MIN(big) FROM people",
    "max_score": "SELECT MAX(score) FROM people",
    "sum_expr": "SELECT SUM(age * 2 + salary / 1000) FROM people",
    "sum_predicate": "SELECT SUM(age > 40) FROM people",
    "sum_case": "SELECT SUM(CASE WHEN sex = 'F' THEN 1 ELSE 0 END) FROM people",
    "sum_pi": "SELECT SUM(age * PI()) FROM people",
    "filter_sum": "SELECT SUM(salary) FILTER (WHERE dept = 'a') FROM people",
    "group_declared": "SELECT dept, COUNT(*), AVG(age) FROM people GROUP BY dept",
    "group_declared_two": "SELECT dept, sex, COUNT(*) FROM people GROUP BY dept, sex",
    "group_private": "SELECT name, COUNT(*) FROM people GROUP BY name",
    "group_private_code": "SELECT code, SUM(salary) FROM people GROUP BY code",
    "group_private_expr": "SELECT age / 10 AS decade, COUNT(*) FROM people GROUP BY decade",
    "group_private_two_stats": "SELECT name, COUNT(*), SUM(salary) FROM people GROUP BY name",
    "group_date": "SELECT born, COUNT(*) FROM people GROUP BY born",
    "having_alias": "SELECT dept, COUNT(*) AS n FROM people GROUP BY dept HAVING n > 1",
    "order_limit": "SELECT dept, SUM(salary) AS s FROM people GROUP BY dept ORDER BY s DESC LIMIT 1",
    "post_arith": "SELECT 100.0 * COUNT(*) FILTER (WHERE sex = 'F') / COUNT(*) AS pct FROM people",
    "where_target": "SELECT SUM(salary) FROM people WHERE id = 123",
    "where_target_count": "SELECT COUNT(*) FROM people WHERE id = 123 AND salary > 77000",
    "where_text_number": "SELECT COUNT(*) FROM people WHERE age > '30'",
    "tiny_group_keys": "SELECT name, salary, COUNT(*) FROM people GROUP BY name, salary",
    "cte_row_level": "WITH c AS (SELECT salary FROM people WHERE age > 30) SELECT SUM(salary) FROM c",
    "derived_row_level": "SELECT AVG(s) FROM (SELECT salary / 1000 AS s FROM people) q",
}
for _name, _sql in _STATS.items():
    _add("statistics", _name, _sql, "answered")

# --- 6. ε: tiny, zero, non-finite, negative, below and exactly at the minimum ------------------------

for _name, _eps in {"tiny": 1e-300, "subnormal": 5e-324, "below_min": 0.000999, "zero": 0.0, "negative": -1.0,
                    "nan": float("nan"), "inf": float("inf"), "neg_inf": float("-inf"), "huge": 1e308}.items():  # fmt: skip
    _add("epsilon", _name, "SELECT SUM(salary) FROM people", "refused", epsilon=_eps,
         sqlstates=("22023", "VB001", "2201E", "22003", "42000"))  # fmt: skip
for _name, _eps in {"exact_min": 0.001, "just_above_min": 0.0010001, "third": 1 / 3, "one": 1.0}.items():
    _add("epsilon", _name, "SELECT COUNT(*) FROM people WHERE age > 20", "answered", epsilon=_eps)
_add("epsilon", "policy_default", "SELECT COUNT(*) FROM people WHERE age > 21", "answered")
_add("epsilon", "exact_min_grouped", "SELECT name, COUNT(*) FROM people GROUP BY name", "answered", epsilon=0.001)
_add("epsilon", "exact_min_visits", "SELECT SUM(amount) FROM visits", "answered", epsilon=0.001, table="visits")

# --- 7. public queries: exact, free, and never touching private data ----------------------------

_PUBLIC = {
    "count": "SELECT COUNT(*) FROM regions",
    "rows": "SELECT * FROM regions ORDER BY rid, rname",
    "join_public": "SELECT c.label, r.rname FROM codes c, regions r WHERE r.rid = 1",
    "cast_codes": "SELECT CAST(code AS INTEGER) FROM codes",
    "div_zero_public": "SELECT rid / (rid - rid) FROM regions",
    "literal_only": "SELECT 1 + 1 AS two",
    "literal_frame": "SELECT 'FROM __veil_frame' AS s FROM regions",
    "group_public": "SELECT rid, COUNT(*) FROM regions GROUP BY rid",
}
for _name, _sql in _PUBLIC.items():
    _add("public", _name, _sql, "safe" if "zero" in _name or "cast" in _name else "public", sqlstates=REJECT)

# Statements a PostgreSQL server answers itself (SET, SHOW, empty queries): harmless either way.
for _name, _sql in {"set_config": "SET enable_external_access = true", "show_tables": "SHOW TABLES", "empty": "",
                    "comment_only": "-- nothing", "set_threads": "SET threads = 64"}.items():  # fmt: skip
    _add("sandbox", _name, _sql, "safe", sqlstates=REJECT)
# Statistics whose range is huge (±1e18, ±1e30): refused as unbounded, or answered with that sensitivity.
for _name, _sql in {"sum_big_product": "SELECT SUM(big * 1000) FROM people",
                    "sum_big_squared": "SELECT SUM(big * big) FROM people",
                    "avg_big_product": "SELECT AVG(big * 100) FROM people",
                    "sum_big_filter": "SELECT SUM(big * 9) FILTER (WHERE age > 30) FROM people"}.items():  # fmt: skip
    _add("statistics", _name, _sql, "safe", sqlstates=REJECT)
_add("sandbox", "distinct_outer", "SELECT DISTINCT dept FROM people GROUP BY dept", "safe", sqlstates=REJECT)

# Every attack but the ε class asks its own ε, so the answer cache (same analyst, query and ε: the logged
# answer again, free) never turns one attack into another's cached answer.
ATTACKS = [
    a if a.epsilon is not None or a.cls == "epsilon" else replace(a, epsilon=float(f"0.2{i:05d}")) for i, a in enumerate(ATTACKS)
]

FULL = os.environ.get("VEIL_ATTACK_FULL", "") not in ("", "0")
WIRE_AND_CLI = [a for a in ATTACKS if FULL or not (a.api_only or a.name.endswith("@where"))]
"""The attacks run through the CLI and the wire too: every class and every expression, one position of each
data-dependent expression (the Python API and the neighbour test run every position);
``VEIL_ATTACK_FULL=1`` runs the whole catalogue through every interface."""

ORACLE_CLASSES = ("oracle", "post")
"""Classes whose outcome must be the same on the neighbouring database (run through the exact path too)."""

_names = [a.id for a in ATTACKS]
if len(set(_names)) != len(_names):  # pragma: no cover - a catalogue typo
    raise RuntimeError(f"duplicate attack ids: {sorted({n for n in _names if _names.count(n) > 1})}")
