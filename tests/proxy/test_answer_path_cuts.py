"""Session 23's cuts of the answer path of a plan-cache hit give what the code before them gave.

Each cut is compared with the code it replaced (copied here as the reference), over hypothesis-made inputs:
the ledger's JSON texts, a literal's value on a grid, the front's token-shape text, the bracket scan, the reused
tokenizer, the clamp and the drawn-ahead addition of integer noise; and, end to end, the answer text the ledger
logs for a GROUP BY equals the text the old dict of lists gave. Deterministic (no randomised test here can fail
by chance).
"""

from __future__ import annotations

import json
import math
import threading
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import sqlglot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlglot.tokens import TokenType

from tests.test_proxy_fixtures import make_proxy_policy
from veil._json import to_jsonable
from veil.errors import ParseError, QueryTooComplex
from veil.mechanisms import noise as noise_mod
from veil.proxy import add_noise, fixed_point, parse, plan_cache
from veil.proxy.parse import DEFAULT_LIMITS, Limits
from veil.proxy.session import QuerySession
from veil.store import ledger as ledger_mod
from veil.store import releases

_SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# -- the ledger's JSON -------------------------------------------------------------------------------------------------


def _old_plain(obj: Any) -> bool:
    todo = [obj]
    scalars = {str, int, float, bool, type(None)}
    while todo:
        item = todo.pop()
        t = type(item)
        if t in scalars:
            continue
        if t is list or t is tuple:
            todo.extend(item)
        elif t is dict:
            if any(type(k) is not str for k in item):
                return False
            todo.extend(item.values())
        else:
            return False
    return True


def _old_dumps(obj: Any) -> str:
    t = type(obj)
    if t is int or (t is float and math.isfinite(obj)):
        return repr(obj)
    if t is dict and not obj:
        return "{}"
    if _old_plain(obj):
        return json.dumps(obj, sort_keys=True, allow_nan=True)
    return json.dumps(to_jsonable(obj, nan_as_null=False), sort_keys=True, allow_nan=True)


_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.integers(min_value=-(2**62), max_value=2**62).map(np.int64),
    st.floats(allow_nan=True).map(np.float64),
    st.fractions(max_denominator=1000),
)
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=6),
        st.lists(inner, max_size=6).map(tuple),
        st.dictionaries(st.text(max_size=4), inner, max_size=4),
        st.dictionaries(st.integers(0, 3), inner, max_size=3),
    ),
    max_leaves=30,
)


@_SETTINGS
@given(_values)
def test_dumps_writes_what_it_wrote_before(obj: Any) -> None:
    assert releases.dumps(obj) == _old_dumps(obj)


_cells = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.floats(-2, 2), st.just(float("nan")), st.text(max_size=3))


@_SETTINGS
@given(st.lists(st.one_of(st.lists(_cells, max_size=3), st.lists(_cells, max_size=3).map(tuple)), max_size=6), st.booleans())
def test_rows_json_is_the_list_of_lists_text(rows: list[Any], as_tuple: bool) -> None:
    """The groups' text: as ``dumps([list(r) for r in rows])``, also when remembered and read again (``1``, ``1.0`` and
    ``True`` are equal keys with three texts: never remembered for one another)."""
    given_rows: Any = tuple(tuple(r) for r in rows) if as_tuple else rows
    want = _old_dumps([list(r) for r in rows])
    memo: dict[Any, str] = {}
    assert ledger_mod._rows_json(given_rows) == want
    assert ledger_mod._rows_json(given_rows, memo) == want
    assert ledger_mod._rows_json(given_rows, memo) == want  # (the remembered text, where it was remembered)


def test_rows_json_tells_equal_keys_of_other_types_apart() -> None:
    memo: dict[Any, str] = {}
    for rows in (((1,),), ((1.0,),), ((True,),), ((1,),), (("1",),)):
        assert ledger_mod._rows_json(rows, memo) == _old_dumps([list(r) for r in rows])
    assert list(memo) == [((1,),), (("1",),)]  # (a float or a boolean key is not remembered)


def test_logged_answer_text_is_the_old_dict_of_lists(tmp_path: Path) -> None:
    """End to end: the answer a GROUP BY release logs (rows and intervals passed as tuples) is the text the dict of lists
    gave, and so are its groups and vectors (the answer cache reads it back as lists)."""
    with QuerySession(make_proxy_policy(tmp_path), "alice") as session:  # sex: a declared domain
        a = session.execute("SELECT sex, COUNT(*), AVG(income) FROM people WHERE income >= 10 GROUP BY sex")
        db = session._env.ledger._db
        answer_text, rid = db.execute("SELECT answer, id FROM releases WHERE id = ?", (a.release_id,)).fetchone()
        old = {
            "columns": [[c.name, c.sql_type] for c in a.columns],
            "rows": [list(r) for r in a.rows],
            "ci95": [list(r) for r in a.ci95],
            "withheld_groups": a.withheld_groups,
            "epsilon": json.loads(answer_text)["epsilon"],
            "delta": json.loads(answer_text)["delta"],
        }
        assert answer_text == _old_dumps(old)
        (groups,) = db.execute("SELECT groups FROM release_groups WHERE release_id = ?", (rid,)).fetchone()
        assert json.loads(groups) == [[r[0]] for r in a.rows]
        again = session.execute("SELECT sex, COUNT(*), AVG(income) FROM people WHERE income >= 10 GROUP BY sex")
        assert again.cached and again.rows == tuple(tuple(r) for r in a.rows)


# -- a literal on its grid ---------------------------------------------------------------------------------------------


def _old_literal_on_grid(text: str, k: int) -> int | None:
    if k < 0 or not fixed_point._PLAIN_NUMBER.fullmatch(text) or sum(c.isdigit() for c in text) > 15:
        return None
    scaled = Fraction(text) * (1 << k)
    if scaled.denominator != 1 or abs(scaled.numerator) > 1 << fixed_point.GRID_BITS:
        return None
    return scaled.numerator


_number_texts = st.one_of(
    st.from_regex(r"[0-9]{1,17}(\.[0-9]{1,17})?", fullmatch=True),
    st.sampled_from(
        ["5", "5.25", "0.1", ".5", "5.", "1e3", "-1", "", "0.5", "0.125", "4611686018427387904", "1.0000000000000000"]
    ),
)


@_SETTINGS
@given(_number_texts, st.one_of(st.integers(-3, 70), st.sampled_from([100, 1000, fixed_point._FINEST])))
def test_literal_on_grid_as_with_fractions(text: str, k: int) -> None:
    assert fixed_point.literal_on_grid(text, k) == _old_literal_on_grid(text, k)
    assert fixed_point.literal_on_grid(text, k) == _old_literal_on_grid(text, k)  # (remembered)


# -- the front's token shape -------------------------------------------------------------------------------------------


def _read_back(text: str) -> list[tuple[str, str, tuple[str, ...], bool]]:
    """:func:`plan_cache.shape_text` read back: a token is name, text, comments (each after its length and a colon),
    then ``a`` or ``b``."""
    out = []
    i = 0

    def field() -> str:
        nonlocal i
        colon = text.index(":", i)
        n = int(text[i:colon])
        value = text[colon + 1 : colon + 1 + n]
        assert len(value) == n
        i = colon + 1 + n
        return value

    while i < len(text):
        name, value = field(), field()
        colon = text.index(":", i)
        count = int(text[i:colon])
        i = colon + 1
        comments = tuple(field() for _ in range(count))
        assert text[i] in "ab"
        out.append((name, value, comments, text[i] == "a"))
        i += 1
    return out


def _shape_tuples(tokens: list[Any]) -> list[tuple[str, str, tuple[str, ...], bool]]:
    out, end = [], -2
    for t in tokens:
        form = plan_cache._form(t) if t.token_type in (TokenType.NUMBER, TokenType.STRING) else t.text
        out.append((t.token_type.name, form, tuple(t.comments), t.start == end + 1))
        end = t.end
    return out


_sql_pieces = st.lists(
    st.one_of(
        st.sampled_from(["SELECT", "COUNT(*)", "FROM", "t", "WHERE", "x", ">=", "=", ",", "(", ")", "AND", "GROUP BY", "1:2"]),
        st.from_regex(r"[0-9]{1,4}(\.[0-9]{1,3})?", fullmatch=True),
        st.text(alphabet="ab:1 9'\\", max_size=5).map(lambda s: "'" + s.replace("'", "''") + "'"),
        st.text(alphabet="ab:1 9*", max_size=6).map(lambda s: "/* " + s.replace("*/", "") + " */"),
        st.text(alphabet="ab:1 9", max_size=6).map(lambda s: "-- " + s + "\n"),
    ),
    min_size=1,
    max_size=14,
)


@_SETTINGS
@given(_sql_pieces, st.sampled_from([" ", "", "  "]))
def test_shape_text_reads_back_as_one_token_list(pieces: list[str], sep: str) -> None:
    """The digested text reads back as the token list itself (so two token shapes never share a text), whatever
    colons, digits and quotes texts and comments hold."""
    sql = sep.join(pieces)
    try:
        tokens = list(sqlglot.tokenize(sql, read=parse.DIALECT))
    except sqlglot.errors.TokenError:
        return
    assert _read_back(plan_cache.shape_text(tokens)) == _shape_tuples(tokens)
    assert plan_cache.front_key(tokens) == plan_cache.front_key(list(sqlglot.tokenize(sql, read=parse.DIALECT)))


def test_front_key_separates_shapes_a_plain_join_would_not() -> None:
    a = list(sqlglot.tokenize("SELECT x /* 1:a */ FROM t", read=parse.DIALECT))
    b = list(sqlglot.tokenize("SELECT x /* 1 */ /* a */ FROM t", read=parse.DIALECT))
    c = list(sqlglot.tokenize("SELECT x FROM t WHERE y = 'ab'", read=parse.DIALECT))
    d = list(sqlglot.tokenize("SELECT x FROM t WHERE y = 'cd'", read=parse.DIALECT))
    e = list(sqlglot.tokenize("SELECT x FROM t WHERE y = 'abc'", read=parse.DIALECT))
    assert len({plan_cache.front_key(a), plan_cache.front_key(b)}) == 2
    assert plan_cache.front_key(c) == plan_cache.front_key(d) != plan_cache.front_key(e)  # a text's form is its length


# -- the scan: brackets and the reused tokenizer ------------------------------------------------------------------------


def _deepest(sql: str) -> int:
    depth = deepest = 0
    for ch in sql:
        if ch in "([{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in ")]}":
            depth -= 1
    return deepest


@_SETTINGS
@given(st.text(alphabet="([{)]}x", max_size=40), st.integers(0, 12))
def test_bracket_limit_as_the_full_scan(sql: str, limit: int) -> None:
    limits = Limits(max_depth=limit)
    if _deepest(sql) > limit:
        with pytest.raises(QueryTooComplex):
            parse._check_size(sql, limits)
    else:
        parse._check_size(sql, limits)


@_SETTINGS
@given(_sql_pieces, st.sampled_from([" ", ""]))
def test_reused_tokenizer_gives_sqlglots_tokens(pieces: list[str], sep: str) -> None:
    sql = sep.join(pieces)
    for text in (sql, "SELECT 'unclosed", sql):  # also right after a text that fails to tokenise
        try:
            want = [
                (t.token_type, t.text, t.start, t.end, t.line, t.col, t.comments)
                for t in sqlglot.tokenize(text, read=parse.DIALECT)
            ]
        except sqlglot.errors.TokenError:
            with pytest.raises(ParseError):
                parse._tokens(text)
            continue
        assert [(t.token_type, t.text, t.start, t.end, t.line, t.col, t.comments) for t in parse._tokens(text)] == want


def test_reused_tokenizer_keeps_nothing_of_the_query() -> None:
    """The thread's tokenizer holds no text or token of the last query (a 4 KB query's tokens stayed alive with it, which
    the plan cache's memory test caught: tests/proxy/test_plan_cache_budget.py)."""
    parse._tokens("SELECT 'a text held by nothing' FROM t")
    core = parse._TOKENIZER.tokenizer._core
    assert core.sql == "" and list(core.tokens) == []


def test_each_thread_tokenises_with_its_own_tokenizer() -> None:
    sqls = [f"SELECT COUNT(*) FROM t WHERE x >= {i} AND y = '{'z' * i}'" for i in range(40)]
    want = {s: [(t.token_type, t.text) for t in sqlglot.tokenize(s, read=parse.DIALECT)] for s in sqls}
    bad: list[str] = []

    def work() -> None:
        for _ in range(20):
            for s in sqls:
                if [(t.token_type, t.text) for t in parse.scan(s, limits=DEFAULT_LIMITS)] != want[s]:
                    bad.append(s)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad


# -- the noise pass ----------------------------------------------------------------------------------------------------

_I64 = (-(2**63), 2**63 - 1)
_ints = st.one_of(
    st.integers(-(2**63), 2**63 - 1),
    st.sampled_from([0, 2**62, -(2**62), 2**62 - 1, -(2**62) + 1, 2**63 - 1, -(2**63)]),
)


@_SETTINGS
@given(st.lists(st.tuples(_ints, _ints), min_size=1, max_size=20))
def test_drawn_noise_added_as_saturating_python_ints(pairs: list[tuple[int, int]]) -> None:
    values = np.array([v for v, _ in pairs], dtype=np.int64)
    drawn = np.array([z for _, z in pairs], dtype=np.int64)
    draw = object.__new__(noise_mod.DiscreteLaplaceDraw)
    draw.n, draw.scale, draw._noise, draw._lock = len(pairs), 1.0, drawn, threading.Lock()
    got = draw.add(values)
    assert got.dtype == np.int64
    assert got.tolist() == [min(max(v + z, _I64[0]), _I64[1]) for v, z in pairs]


@_SETTINGS
@given(
    st.lists(
        st.one_of(
            st.integers(-(2**70), 2**70),
            st.sampled_from([2**62, -(2**62) - 1, 2**63, True, False]),
            st.floats(-1e20, 1e20),
        ),
        max_size=12,
    )
)
def test_counts_clamped_as_one_by_one(values: list[Any]) -> None:
    arr = np.empty(len(values), dtype=object)
    arr[:] = values
    stat = type("S", (), {"mechanism": "discrete_laplace"})()
    want = [max(-add_noise.INT_LIMIT, min(add_noise.INT_LIMIT, int(v))) for v in values]
    got = add_noise.clamp_raw(stat, arr)  # type: ignore[arg-type]
    assert got.dtype == np.int64 and got.tolist() == want


def test_halfwidth_is_remembered_by_mechanism_scale_and_alpha() -> None:
    from veil.mechanisms import discrete_laplace_ci_halfwidth
    from veil.proxy.postprocess import _halfwidth

    assert _halfwidth("discrete_laplace", 2000.0, 0.05) == discrete_laplace_ci_halfwidth(2000.0, 0.95)
    assert _halfwidth("laplace", 3.0, 0.05) == 3.0 * math.log(1 / 0.05)
    assert _halfwidth("exponential", 3.0, 0.05) is None


# -- the accounts of a charge ------------------------------------------------------------------------------------------


def test_accounts_follow_the_policy_object(tmp_path: Path) -> None:
    """The accounts of a charge are read once per policy object: a reloaded policy (another object) is read again."""
    from veil.policy import load_policy
    from veil.store.ledger import accounts_for

    with QuerySession(make_proxy_policy(tmp_path), "alice") as session:
        env = session._env
        session.execute("SELECT COUNT(*) FROM people")
        first = env.accounts("people")
        assert first == accounts_for(env.policy, analyst="alice", tables=["people"])
        assert env.accounts("people") is first
        env._watch.policy = load_policy(env.policy.watch_path)  # what a changed file gives: another object
        again = env.accounts("people")
        assert again is not first and again == accounts_for(env.policy, analyst="alice", tables=["people"])
