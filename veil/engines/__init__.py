"""Engines that run Veil's generated SQL (DuckDB embedded by default)."""
