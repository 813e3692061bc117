"""Every query `veil demo` runs (and the README shows) is answered on the demo's own policy: a new refusal rule that
the demo's ordinary queries trip (session 22: the 2 KiB join-row cap refused "Visits by region" while the default
`max_length` was 1,024 characters) fails here, not first in `make demo`."""

from __future__ import annotations

from pathlib import Path

import veil
from veil.demo import DEMO_QUERIES, build_demo


def test_every_demo_query_is_answered(tmp_path: Path) -> None:
    policy = build_demo(tmp_path / "demo", n_people=2_000)
    answered = []
    with veil.connect(policy.path, analyst="alice") as db:
        for title, sql in DEMO_QUERIES:
            frame = db.sql(sql)
            assert float(frame.attrs["epsilon_charged"]) >= 0, title
            answered.append(title)
    assert answered == [title for title, _ in DEMO_QUERIES]
