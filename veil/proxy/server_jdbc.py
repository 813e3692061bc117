"""Catalog query shapes sent by pgjdbc's DatabaseMetaData and DBeaver (filled in below)."""

from __future__ import annotations

from typing import Any


def answer(schema: dict, session: Any, sql: str, expr: Any) -> tuple[list, list[tuple]] | None:
    return None
