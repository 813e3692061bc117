"""Red team, session 22: the fixes of ef633dd (and 53043fd/b935d84 before it) — real centred sums centred in the SQL
(`rewrite.centred_in_sql`, `_centred`, `row_range`, `_fixed`), integers summed as they are only when integral
(`rewrite.summed_as_integers`), the bounded ε text parser (`budget._parse`, used by ``SET veil.epsilon``), policy
figures beyond a double, and the warehouse-change refusal (`session.Env.refresh_policy`).

Same harness as sessions 4–21 (:mod:`tests.adversarial.test_redteam_s15`): D and D′ differ in one person (the
target, unit 7) or in one of their values; with noise off (``veil.proxy._testing.exact_session``) every released
statistic must move by at most its planned sensitivity times ``1 + fixed_point.CONVERSION_SLACK``.

Part A holds attacks that succeed on 2026-11-26 (main at ef633dd): each test FAILS today. Part B holds probes of
defences that held (they pass, and fail if the defence breaks).

* A1 (MEDIUM, availability; API, wire ``SET veil.epsilon``) the exponent guard of `budget._parse` reads the
  exponent with ``[eE]\\s*([+-]?\\d+)\\s*$``, but ``Fraction`` (Python ≥ 3.11) also accepts underscores between
  digits: ``"1e-10_000_000"`` (13 characters) passes the guard and ``Fraction`` builds ``10**10_000_000`` (seconds
  of CPU; minutes and gigabytes for ``1e-999_999_999``) — s21 A1 again, on the server's event loop.
* A2 (MEDIUM, availability across analysts; API ``execute(epsilon="p/q")``, wire ``SET veil.epsilon = 'p/q'``) the
  ledger keeps every account's spend as an exact Fraction written with ``str`` (`Ledger._add_spent`). Any ε text of
  ≤ 400 characters is accepted, so one analyst charging ~30 queries with ε = p/q for coprime ~190-digit q (≈ 0.5 ε in
  all) grows the *table* account's denominator to ~4,300 digits; from then on every reservation on that table whose
  ε adds a factor — another analyst's ``epsilon=0.5`` — raises Python's untyped ``ValueError`` (int-to-str digit
  limit) inside the reservation: nobody can query the table until the curator repairs the ledger by hand.
* A3 (LOW; policy load, every interface and ``veil serve``'s live reload) a policy figure written as a TOML integer of
  more than 4,300 digits escapes `load_policy` as an untyped ``ValueError`` from ``tomllib`` (the A3 fix of s21
  refuses 401 to 4,300 digits as PolicyError; beyond, tomllib's own int() raises before `_exact` sees it).
* A4 (MEDIUM, wire) `veil serve` verifies passwords in the ledger it opened at start (`VeilServer.credentials`), not
  the one the live policy names: after the policy moves to a new ledger, the new passwords are refused and the old
  ones log in (charges do follow the new ledger).
* Held (Part B, and by hand): real centred sums near the new boundary (|centre| = half-width), half-widths that are
  no doubles (thirds, 0.1·y), denormal half-widths next to centres of 1 to 1e16, centres far from 0 with coarse
  grids, and VARIANCE alongside, moved within Δ·(1 + CONVERSION_SLACK) over D and three neighbours; the warehouse
  refusal does not refuse a path spelled differently (``./w.duckdb``, ``sub/../w.duckdb``, absolute, ``//``, a
  symlink to the same file: `load_policy` resolves it), refuses another file free of charge, and resumes when the
  policy names the first file again; `veil serve` worker processes refuse a warehouse they did not prepare
  (ServingEngine never builds a bounded copy). The CLI's ``--epsilon`` is a click FloatRange (``1e-1_000_000`` is
  0.0, refused). By hand on local Spark (pyspark 4.3, ``local[2]``, the conformance
  fixtures of tests/engines): six centred/real-sum queries (thirds, 1e-320 half-widths, centres at 1e15 to 1e20,
  VARIANCE/STDDEV alongside) gave the same raw statistics as DuckDB, bit for bit. Not run: Sail. Arguments that
  overflow for the target only (``x * 10⁹ * 10⁹``, with LEAST/GREATEST or COALESCE) end the same way on every
  world and keep the count and the centred sum in agreement.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from tests.adversarial.test_redteam_s4 import POLICY, PUB, _base_rows, _frame
from tests.adversarial.test_redteam_s15 import Worlds, fresh_epsilon, moves_beyond_sensitivity, neighbour_worlds
from veil.errors import InputError, PolicyError, VeilError


@pytest.fixture(scope="module")
def worlds(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worlds]:
    w = neighbour_worlds(tmp_path_factory, "s22")
    yield w
    w.close()


_fresh = fresh_epsilon


# --- Part A: ε text -------------------------------------------------------------------------------------------

#: Exponents beyond a double's, spelled with underscores (``Fraction`` accepts ``\d+(_\d+)*``); each builds
#: ``10**(≥ 10⁶)`` today. Kept at 10⁶ so the failing test stays fast; ``1e-10_000_000`` costs ~9 s,
#: ``1e-999_999_999`` minutes and gigabytes.
UNDERSCORE_EXPONENTS = ["1e-1_000_000", "1E-1_000_000", "1e-0_001_000_000", "2.5e-1_0_0_0_0_0_0", " 1e-1_000_000 "]


@pytest.mark.parametrize("text", UNDERSCORE_EXPONENTS)
def test_A1_underscored_exponent_is_refused_before_any_fraction(text: str) -> None:
    """MEDIUM (availability; Python API ``execute(epsilon="…")``, wire ``SET veil.epsilon = …`` on the event loop).
    `budget._EXPONENT` (``[eE]\\s*([+-]?\\d+)\\s*$``) does not match an exponent written with underscores, which
    ``Fraction`` accepts, so the guard of s21 A1 is skipped and ``Fraction(text)`` builds ``10**exponent`` first
    (``1e-10_000_000``: 13 characters, ~9 s of CPU; ``1e-999_999_999``: minutes, gigabytes). Fix class: parse the
    text with one strict grammar of our own (digits, one point, an exponent of at most a few digits, no
    underscores, ASCII only) before any big-int work; refuse anything else as InputError."""
    from veil.mechanisms.budget import as_epsilon

    start = time.thread_time()
    with pytest.raises(InputError):
        as_epsilon(text)
    assert time.thread_time() - start < 0.05


def test_A1_set_veil_epsilon_with_an_underscored_exponent_is_refused() -> None:
    """The same through the wire's ``SET veil.epsilon`` (`server.settings.SessionSettings`), which runs on the
    server's event loop: the value is accepted today after the big-int work (1e-1_000_000: ~0.2 s)."""
    from veil.server.settings import SessionSettings

    settings = SessionSettings({})
    start = time.thread_time()
    with pytest.raises(InputError):
        settings.set_statement("SET veil.epsilon = 1e-1_000_000", apply=True)
    assert time.thread_time() - start < 0.05


# --- Part A: the ledger's exact spend -------------------------------------------------------------------------------


def _session_pair(base: Path) -> tuple[Any, Any]:
    from veil.policy import load_policy
    from veil.proxy._testing import exact_session
    from veil.store.warehouse import write_table

    (base / "policy.toml").write_text(POLICY, encoding="utf-8")
    policy = load_policy(base / "policy.toml")
    write_table(policy, "pub", PUB, replace=True, public=True)
    write_table(policy, "t", _frame(_base_rows()), replace=True)
    return exact_session(policy, "a"), exact_session(policy, "b")


@pytest.mark.slow
def test_A2_one_analyst_cannot_break_the_tables_ledger_for_others(tmp_path: Path) -> None:
    """MEDIUM (availability across analysts; Python API, wire ``SET veil.epsilon = 'p/q'`` — the same ε parser).
    `Ledger._add_spent` stores ``str(old + ε)`` for the analyst's and the *table's* account; ε text of up to 400
    characters is any rational, so analyst a's ~30 charged queries with ε = (q // 50)/q for random odd q (of 640,
    then fewer bits; ≈ 0.5 ε in all) push the table account's denominator to the 4,300-digit limit of Python's
    int-to-str conversion. Analyst b's ordinary ``epsilon=0.5`` on the same table then raises an untyped
    ``ValueError`` inside the reservation, as does every later query whose ε adds a prime factor, until the ledger
    is repaired by hand. (The same ``ValueError`` comes from one API call with ``Fraction(10**5000 + 1, 10**5000)``.)
    Fix class: keep ε and the spend on a bounded grid (round each charge *up* to a fixed denominator such as 2⁻⁶⁴
    or 10⁻¹⁸ at parse, refuse finer text), or refuse ε whose exact form exceeds a few dozen digits; never let the
    ledger's text grow with the history."""
    a, b = _session_pair(tmp_path)
    try:
        rng = random.Random(22)
        for bits in (640, 128, 32, 8):  # fill the denominator up to the limit, large factors first
            for _ in range(40):
                q = rng.getrandbits(bits) | 1 | (1 << (bits - 1))
                try:
                    a.execute("SELECT COUNT(*) AS n FROM t", epsilon=f"{q // 50}/{q}")
                except ValueError:  # analyst a's own account (and the table's) is full: the attack's set-up
                    break
        for eps in ("0.5", "0.013"):
            try:
                b.execute("SELECT COUNT(*) AS n FROM t", epsilon=eps)
            except VeilError:
                pass  # a typed refusal would be acceptable; an untyped crash is not
    finally:
        a.close()
        b.close()


def test_A2_a_fraction_with_a_long_denominator_is_a_typed_refusal(tmp_path: Path) -> None:
    """The same ``str`` through the Python API in one call: ``epsilon=Fraction(10**5000 + 1, 10**5000)`` (≈ 1)
    passes `as_epsilon` (no size bound on a Fraction) and the reservation raises ``ValueError``."""
    a, b = _session_pair(tmp_path)
    try:
        with pytest.raises(VeilError):
            a.execute("SELECT COUNT(*) AS n FROM t", epsilon=Fraction(10**5000 + 1, 10**5000))
    finally:
        a.close()
        b.close()


# --- Part A: policy figures beyond the int-to-str limit ---------------------------------------------------------


def test_A3_a_policy_integer_of_5000_digits_is_a_policy_error(tmp_path: Path) -> None:
    """LOW (policy load; every interface, and `veil serve`'s live reload of the file). `load_policy` catches
    ``tomllib.TOMLDecodeError`` only; ``tomllib`` converts a TOML integer with ``int()``, which raises a plain
    ``ValueError`` beyond 4,300 digits — before `policy._exact`'s s21-A3 check runs. Fix class: catch ValueError
    around ``tomllib.loads`` (PolicyError naming the file), or bound the file's integer literals first."""
    from veil.policy import load_policy

    path = tmp_path / "policy.toml"
    path.write_text(POLICY.replace("[analysts.a]\nepsilon = 1000000", "[analysts.a]\nepsilon = 1" + "0" * 5000))
    with pytest.raises(PolicyError):
        load_policy(path)


# --- Part A: the server's credentials after the policy names another ledger -----------------------------------------


@pytest.mark.slow
def test_A4_serve_checks_passwords_in_the_ledger_the_policy_names(tmp_path: Path) -> None:
    """MEDIUM (wire; `veil serve`). Sessions follow a policy that names another ledger (s19 A5: charges go to the new
    file), but `VeilServer.__init__` opens ``CredentialStore(policy.ledger_path)`` once, at start, and `_lookup`
    keeps verifying logins against it. After the curator points the policy at a new ledger and sets the analysts'
    passwords there (``veil analyst add … --password-stdin`` writes the ledger the policy names), the new passwords
    are refused and the old ones — perhaps the reason for the move, e.g. a leaked password — still log in, until
    the server restarts. (The mock-salt secret of unknown users also stays the old ledger's.) Fix class: follow the
    live policy's ledger path in `_lookup` (reopen the CredentialStore when `LivePolicy.current().ledger_path`
    changes, as `Env.refresh_policy` does for charges), or refuse logins once it differs from the one opened."""
    import psycopg

    from tests.support.attack import Server, set_password, wire_connect

    a, b = _session_pair(tmp_path)
    a.close()
    b.close()
    path = tmp_path / "policy.toml"
    set_password(path, "b", "old-password-1111")
    srv = Server(path, tmp_path / "serve.log")
    try:
        # (since s66 F7 a warehouse accepts only its own ledger: a ledger is moved with `veil move-ledger`, which
        # copies the old verifiers too; the new password then replaces b's in the file the policy names)
        from veil.policy import load_policy
        from veil.store.binding import move_ledger

        move_ledger(load_policy(path), tmp_path / "l2.sqlite")
        path.write_text(POLICY.replace('path = "l.sqlite"', 'path = "l2.sqlite"'), encoding="utf-8")
        set_password(path, "b", "new-password-2222")
        if not (tmp_path / "l2.sqlite").exists():
            raise AssertionError("the CLI did not write the ledger the policy now names")
        outcomes = {}
        for pw in ("old-password-1111", "new-password-2222"):
            try:
                wire_connect(srv.port, "b", pw).close()
                outcomes[pw] = "in"
            except psycopg.OperationalError:
                outcomes[pw] = "refused"
        assert outcomes == {"old-password-1111": "refused", "new-password-2222": "in"}, outcomes
    finally:
        srv.stop()


# --- Part B: defences that held -------------------------------------------------------------------------------------

#: Real centred sums around the new boundary |centre| = half-width, with half-widths that are no doubles, denormal
#: half-widths next to large centres, centres far from 0, FILTER and groups; SUMs on the new ±magnitude range.
CENTRED_PROBES = [
    "SELECT AVG(y + 5) AS v FROM t",  # |c| = hw: summed uncentred, centred exactly afterwards
    "SELECT VARIANCE(y - 5) AS v FROM t",
    "SELECT AVG(y + 5.000000000000001) AS v FROM t",  # just beyond: centred in the SQL
    "SELECT AVG(CAST(x AS DOUBLE) / 3 + 10/3) AS v FROM t",  # |c| = hw, neither a double
    "SELECT VARIANCE(CAST(x AS DOUBLE) / 3 + 10/3 + 1e-12) AS v FROM t",
    # half-widths just above fixed_point.MIN_ROW_BOUND (denormal ones such as y * 1e-320 are refused: s70 F1)
    "SELECT AVG(y * 1e-301 + 1) AS v FROM t",
    "SELECT VARIANCE(y * 1e-151 + 1e16) AS v FROM t",
    "SELECT AVG(y / 3 + 1e17 / 3) AS v FROM t",  # float(centre) ≠ centre
    "SELECT VARIANCE(y * 0.1 + 0.5000000000000001) AS v FROM t",
    "SELECT STDDEV(CAST(x AS DOUBLE) * 1e-3 + 1e20 + 16) AS v FROM t",
    "SELECT k, AVG(y + 1e15 + 0.5) FILTER (WHERE u > 1) AS v FROM t GROUP BY k",
    "SELECT SUM(y * 1e-301) AS v, SUM(CAST(x AS DOUBLE) / 3) AS w FROM t",
    # the count and the centred sum agree on which rows count when the target's argument overflows (x = 10)
    "SELECT VARIANCE(LEAST(GREATEST(CAST(x * 1000000000 * 1000000000 AS DOUBLE), -5), 5) * 0.001 + 1e17) AS v FROM t",
    "SELECT AVG(COALESCE(LEAST(GREATEST(x * 1000000000 * 1000000000, -5), 5), 5) / 3 + 1) AS v FROM t",
]


@pytest.mark.slow
@pytest.mark.parametrize("sql", CENTRED_PROBES)
def test_b1_centred_sums_at_the_boundaries_move_within_sensitivity(worlds: Worlds, sql: str) -> None:
    from veil.proxy import fixed_point

    assert moves_beyond_sensitivity(worlds.sessions, sql, _fresh(worlds), fixed_point.CONVERSION_SLACK) == []


@pytest.mark.parametrize("spelled", ["./w.duckdb", "sub/../w.duckdb", "{base}/w.duckdb", "{base}//w.duckdb", "link.duckdb"])
def test_b2_the_same_warehouse_spelled_otherwise_is_not_refused(tmp_path: Path, spelled: str) -> None:
    """`Env.refresh_policy` compares resolved paths: a re-saved policy naming the same file is no other warehouse;
    another file is refused free of charge, and naming the first file again resumes."""
    import shutil

    a, b = _session_pair(tmp_path)
    try:
        (tmp_path / "sub").mkdir()
        (tmp_path / "link.duckdb").symlink_to(tmp_path / "w.duckdb")
        sql = "SELECT COUNT(*) AS n FROM t"
        first = a.execute(sql, epsilon=Fraction(1, 2)).rows
        spent = a._env.remaining()
        text = spelled.format(base=tmp_path)
        (tmp_path / "policy.toml").write_text(POLICY.replace('path = "w.duckdb"', f'path = "{text}"') + "\n" * 3)
        assert a.execute(sql, epsilon=Fraction(1, 2)).rows == first
        shutil.copy(tmp_path / "w.duckdb", tmp_path / "w2.duckdb")
        (tmp_path / "policy.toml").write_text(POLICY.replace('path = "w.duckdb"', 'path = "w2.duckdb"'))
        with pytest.raises(PolicyError):
            a.execute("SELECT COUNT(*) AS n FROM t WHERE x > 0", epsilon=Fraction(1, 2))
        assert a._env.remaining() == spent
        (tmp_path / "policy.toml").write_text(POLICY + "\n")
        a.execute("SELECT COUNT(*) AS n FROM t WHERE x > 0", epsilon=Fraction(1, 2))
        assert a._env.remaining() == spent - Fraction(1, 2)
    finally:
        a.close()
        b.close()
