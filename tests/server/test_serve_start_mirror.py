"""Single-process ``veil serve`` copies the public mirror at start, as ``--processes N`` does (``prepare_warehouse``).

Before, only the bounded copies were built at start: after a mirror-format bump (every mirror copy stale) the first
query naming each public table copied it, inside an analyst's query. ``serve`` is run up to the point where it would
start listening (its ``VeilServer`` replaced by a stub that stops it there).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.proxy.test_charged_run_pin import _build
from veil.proxy._testing import exact_session
from veil.server import app
from veil.store import warehouse


class _Listening(Exception):
    """Raised where ``serve`` would start listening."""


def _serve_until_listening(policy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from veil.policy import load_policy

    def stub(*args: Any, **kwargs: Any) -> None:
        raise _Listening

    with monkeypatch.context() as m:
        m.setattr(app, "VeilServer", stub)
        with pytest.raises(_Listening):
            app.serve(load_policy(policy), port=0)


@pytest.mark.parametrize(
    "sql", ["SELECT COUNT(*) FROM pick", "SELECT p.grp, COUNT(*) FROM trips t JOIN pick p ON p.key = t.city GROUP BY p.grp"]
)
def test_serve_copies_stale_public_tables_before_the_first_query(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sql: str
) -> None:
    policy = _build(tmp_path / "w")
    monkeypatch.setattr(warehouse, "MIRROR_FORMAT", warehouse.MIRROR_FORMAT + 1)  # a format bump: every copy stale
    copied: list[str] = []
    copy = warehouse.copy_to_public

    def counted(p: Any, table: str, *args: Any, **kwargs: Any) -> None:
        copied.append(table)
        copy(p, table, *args, **kwargs)

    monkeypatch.setattr(warehouse, "copy_to_public", counted)
    _serve_until_listening(policy, monkeypatch)
    assert copied == ["pick"]  # at start
    with exact_session(policy, "api") as s:
        assert s.execute(sql).rows
    assert copied == ["pick"], "the first query copied a public table again"
