"""Red team, session 28: attacks on the fixes landed in session 27's last hour (bounded table-less evaluation,
collation-free public reads, public key domains, public answer bound, admission, publications).

Part A holds attacks that succeed on 2026-11-26 (main at 7152eb1): each test is a strict xfail that FAILS today
(the lead removes the mark when fixing). Part B holds probes of defences that held. Findings (details in each
test's docstring):

* A1 (MEDIUM, availability) table-less/catalog evaluation: ``ARRAY_TO_STRING`` (sqlglot's ``ARRAYTOSTRING``, and
  ``ARRAY_CAT``) is left unbounded in the executor's ENV: nested derived tables over a catalog table multiply a
  text ×15 per level. A 520-byte statement built 1.37·10⁹ characters in the server (2 s, measured through psycopg);
  one more level is 2·10¹⁰ (the host's memory). The ``MAX_TEXT`` bound covers ``||``/``CONCAT`` only.
* A2 (LOW, availability) table-less ``ROUND(5, -30000000)`` is Python's ``round(int, ndigits)``, which computes
  ``10 ** 30000000`` exactly: the catalog timeout answers 57014 after 5 s but the pool thread runs on (45 s
  measured for -3·10⁷; -10⁹ is hours), so a handful of statements take every catalog thread.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tests.server.test_bounded_eval import _evaluate

# ==================================================================================================
# Part A — attacks that succeed today
# ==================================================================================================


def _nested(step: str, levels: int, source: str = "(SELECT 'abcdefgh' AS x) AS t") -> str:
    """``LENGTH`` of a text rebuilt by ``step`` (an expression of ``x``) once per nested derived table."""
    inner = source
    for _ in range(levels):
        inner = f"(SELECT {step} AS x FROM {inner}) AS t"
    return f"SELECT LENGTH(x) AS n FROM {inner}"


def _amplified(levels: int) -> str:
    """A text multiplied ×15 per level by ``ARRAY_TO_STRING(ARRAY[x × 8], x)``."""
    return _nested("ARRAY_TO_STRING(ARRAY[x,x,x,x,x,x,x,x], x)", levels)


@pytest.mark.xfail(strict=True, raises=AssertionError, reason="s28 A1: ARRAY_TO_STRING unbounded in table-less evaluation")
def test_A1_array_to_string_cannot_build_text_beyond_the_bound() -> None:
    """MEDIUM (availability) — interface: ``veil serve``, any logged-in client, a catalog statement.

    Attack: ``SELECT LENGTH(x) AS n FROM (SELECT ARRAY_TO_STRING(ARRAY[x,x,x,x,x,x,x,x], x) AS x FROM (… FROM
    (SELECT 'abcdefgh' AS x FROM pg_catalog.pg_namespace WHERE nspname = 'public') AS t) …) AS t`` — routed as a
    system statement (it names ``pg_catalog``), evaluated by sqlglot's executor. Each level multiplies the text
    ×15; ``bounded.install`` replaced ``CONCAT``/``||``/``CONCAT_WS`` with the 1 MiB bound but left
    ``ARRAYTOSTRING`` (``separator.join``) and ``ARRAYCONCAT`` as Python's. Measured through psycopg: 5 levels
    6,075,000 chars (0.4 s), 6 levels 91,125,000, 7 levels 1,366,875,000 (2 s, >1.4 GB held by the server); 8
    levels would be 2·10¹⁰ characters. Root cause: ``veil/server/bounded.py`` ``_BOUNDED`` (lines ~369–389)
    bounds a list of known operators instead of admitting a list of bounded ones (every ENV name not replaced is
    still Python's). Here in-process (the executor alone, as ``tests/server/test_bounded_eval.py``): 6 levels must be
    refused 54000 (text over ``MAX_TEXT``)."""
    assert _evaluate(_amplified(6)) == "54000"


@pytest.mark.xfail(strict=True, raises=AssertionError, reason="s28 A2: ROUND(int, -huge) is an exact big power")
def test_A2_round_to_huge_negative_digits_is_refused_at_once() -> None:
    """LOW (availability) — interface: ``veil serve``, table-less ``SELECT ROUND(5, -30000000) AS v``.

    sqlglot's ``ROUND`` is ``round(this, ndigits=decimals)``; for an integer and negative ``ndigits`` CPython
    computes ``10 ** -ndigits`` exactly (the same big-integer power s27 A4 closed for ``^``). Measured: -3·10⁶
    1.75 s, -8·10⁶ 5 s in-process; through the server -3·10⁷ answered 57014 after the 5 s catalog timeout while the
    pool thread ran on 45 s (``FairExecutor.run`` cancels the future, not the thread); -10⁹ runs for hours, and a
    few such statements hold every catalog thread. Root cause: ``veil/server/bounded.py`` ``_BOUNDED`` has no
    ``ROUND``. Run in a child process: it must answer (typed refusal or a value) within 3 s."""
    code = (
        "import sys; sys.path.insert(0, '.');"
        "from tests.server.test_bounded_eval import _evaluate;"
        "print(_evaluate('SELECT ROUND(5, -30000000)'))"
    )
    try:
        done = subprocess.run([sys.executable, "-c", code], timeout=3 + 2, capture_output=True, text=True, check=False)
    except subprocess.TimeoutExpired:  # 2 s of the 5 to import
        answer = "still running after 3 s"
    else:
        answer = done.stdout.strip() or done.stderr[-300:]
    assert answer in {"22003", "54000", "[(0,)]"}


# ==================================================================================================
# Part B — defences that held
# ==================================================================================================


@pytest.mark.parametrize(
    "sql",
    [
        _nested("x || x || x || x", 10),
        "SELECT 10 ^ 400 AS v",
        "SELECT CAST(9.3e18 AS BIGINT) AS v",
    ],
    ids=["concat-nested", "pow-float", "cast-bigint"],
)
def test_B1_concatenation_and_numbers_stay_bounded(sql: str) -> None:
    """Nested ``||`` through derived tables is refused at 1 MiB; a float power overflow and a cast beyond
    bigint are 22003."""
    started = time.monotonic()
    assert _evaluate(sql) in {"54000", "22003"}
    assert time.monotonic() - started < 2
