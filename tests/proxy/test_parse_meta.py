"""Analyst text carries no meta data and no comments into Veil's trees (red team s17, A1).

sqlglot reads ``/* sqlglot.meta KEY */`` after a node as ``node.meta[KEY] = True``; Veil keeps its trust marks
(:data:`~veil.proxy.totality.BUILT_TOTAL`, :data:`~veil.engines.neutral.CANNOT_RAISE`,
:data:`~veil.engines.neutral.WIDE_SUM`) in that dict. So whatever the analyst writes, and wherever, the parsed
tree's nodes hold no meta and no comments.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from veil.engines.neutral import CANNOT_RAISE, WIDE_SUM
from veil.proxy.parse import parse
from veil.proxy.totality import BUILT_TOTAL

SLOTS = [
    "SELECT COUNT(*) {c} FROM t WHERE CAST(x AS INTEGER) {c} > 0",
    "SELECT SUM(x {c}) FROM t {c} WHERE y / 2 {c} > 1",
    "SELECT k {c}, AVG(x + 1 {c}) FROM t GROUP BY k {c}",
    "WITH c AS (SELECT x {c} FROM t) SELECT COUNT(*) FROM c {c}",
    "SELECT COUNT(*) FROM t WHERE TRY_CAST(s AS DATE) {c} IS NULL -- {c}",
]
COMMENTS = st.one_of(
    st.sampled_from([f"/* sqlglot.meta {m} */" for m in (BUILT_TOTAL, CANNOT_RAISE, WIDE_SUM, "line", "x")]),
    st.sampled_from(["/* sqlglot.meta veil_built_total, veil_cannot_raise */", "/* */", "/* a */ /* b */"]),
    st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126, blacklist_characters="*/"), max_size=20).map(
        lambda t: f"/* {t} */"
    ),
)


@pytest.mark.parametrize("template", SLOTS)
@given(comment=COMMENTS)
def test_parsed_nodes_hold_no_meta_and_no_comments(template: str, comment: str) -> None:
    tree = parse(template.replace("{c}", comment))
    for node in tree.walk():
        assert not node.meta and not node.comments, (node.sql(), node.meta, node.comments)
