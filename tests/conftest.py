"""Shared fixtures: real data from ../shared/data, temp policies, single-threaded torch."""

from __future__ import annotations

import inspect
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("VEIL_PROGRESS", "0")
#: Every local Spark a test starts — the worker's own (pyspark reads this as it launches the JVM), a served or CLI
#: process's, the outside writer's (``tests.engines.conftest.outside_spark_env``) — compiles with C1 only
#: (``-XX:TieredStopAtLevel=1``): the JIT tier decides how fast the JVM runs, never what it computes, and the suite's
#: many small queries never pay back C2's compilations. Measured on the 2-core host (2026-11-28, the same minutes,
#: every process of the run sampled): the whole Spark group (275 tests) 339 → 304 s of CPU and 1,178 → 1,006 s of
#: wall at a host load of ~15; its first 32 tests (the JVM's start-up) 72.5 → 40.7 s. A value set outside is kept.
os.environ.setdefault("PYSPARK_SUBMIT_ARGS", "--conf spark.driver.defaultJavaOptions=-XX:TieredStopAtLevel=1 pyspark-shell")

from veil.datasets import shared_data_dir


class _TorchOneThread:
    """Keeps torch to one thread in tests (library code never does this), set as torch is first imported: importing
    torch here cost every pytest process (xdist's controller too, before its workers start) 3-5 s; most never use
    it. A meta-path finder that lets the normal finders find torch and runs ``set_num_threads(1)`` right after
    its module body."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> object:
        if name != "torch":
            return None
        import importlib.util

        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        loader = getattr(spec, "loader", None)
        if loader is not None and hasattr(loader, "exec_module"):
            exec_module = loader.exec_module

            def exec_then_one_thread(module: object) -> None:
                exec_module(module)
                module.set_num_threads(1)  # type: ignore[attr-defined]

            loader.exec_module = exec_then_one_thread
        return spec


if "torch" in sys.modules:  # pragma: no cover - imported before the conftest (a plugin)
    sys.modules["torch"].set_num_threads(1)
else:
    sys.meta_path.insert(0, _TorchOneThread())  # type: ignore[arg-type]

#: The false-failure rate of every statistical test (each test asserts a correct sampler passes with
#: probability ≥ 1 − STAT_ALPHA, and checks power: the same test must reject a scale off by ±30%).
#: Import it (``from tests.conftest import STAT_ALPHA``); never define a per-file α.
STAT_ALPHA = 1e-6

POLICIES = Path(__file__).resolve().parent / "fixtures" / "policies"


def policy_text(name: str) -> str:
    """The text of ``tests/fixtures/policies/<name>.toml`` (paths in it are relative to the policy file)."""
    return (POLICIES / f"{name}.toml").read_text(encoding="utf-8")


ADULT_POLICY = policy_text("adult")


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The shared data folder; skips the test when it is absent."""
    d = shared_data_dir()
    if not (d / "adult" / "adult.data").exists():
        pytest.skip(f"shared data not found at {d} (set VEIL_SHARED_DATA)")
    return d


@pytest.fixture
def adult_policy(tmp_path: Path, shared_data: Path) -> Callable[..., Path]:
    """Factory: write the Adult policy into a temp folder and ingest adult.data (optionally a head of it).

    Returns the policy path. ``adult_policy(rows=2000, drop_missing=True)``.
    """

    def make(rows: int | None = None, *, drop_missing: bool = False, extra_toml: str = "") -> Path:
        from veil.datasets import load_adult
        from veil.policy import load_policy
        from veil.store.warehouse import write_table

        path = tmp_path / "policy.toml"
        path.write_text(ADULT_POLICY + extra_toml, encoding="utf-8")
        df = load_adult(drop_missing=drop_missing)
        if rows is not None:
            df = df.head(rows)
        write_table(load_policy(path), "adult", df, replace=True)
        return path

    return make


#: Doctests over 1 s (a doctest cannot carry a marker): marked `slow` at collection.
SLOW_DOCTESTS = frozenset({"veil/auditor/pu/__init__.py::veil.auditor.pu"})


#: A test that reads a wall clock to decide (elapsed time, deadlines) — in its own body, or in a test helper it
#: calls, up to three calls deep — is marked ``timing`` at collection: ``make test`` runs those tests alone, after
#: the rest has run on two workers (pytest-xdist), so a worker beside them cannot fail a timing assertion
#: (``TIMING_WORKERS=2``: on two workers of their own, one timing file beside another; see the Makefile). Where the
#: source cannot be read the whole module counts (conservative). A CPU clock (``time.thread_time``,
#: ``time.process_time``) does not count: another process's load does not move it, so a bound on the work done in
#: the test's own process runs in the parallel pass (use it only where the timed code neither waits nor sleeps,
#: nor works in another process: there CPU time would under-count; for a child the test waits for, read
#: ``tests.support.cpu.children_cpu_seconds`` around it). A hang guard (wait for a server, a child or a
#: file; fail after N s) counts polls of a fixed sleep instead of reading a clock, and processes that must act at
#: once meet at a barrier (a line on their stdin), not at a wall-clock instant: neither needs a quiet machine.
_READS_A_CLOCK = re.compile(r"\b(?:perf_counter|monotonic)\(|\btime\.time\(")
_CALLED = re.compile(r"\b([A-Za-z_]\w*)\(")
_clock_functions: dict[object, bool] = {}


_function_spans: dict[str, dict[int, int]] = {}


def _function_source(fn: object) -> str | None:
    """``inspect.getsource`` of a function, from one parse of its file (getsource tokenises the file again for
    every function: seconds per collection over the suite's thousands of tests)."""
    import ast
    import linecache

    code = getattr(fn, "__code__", None)
    if code is None:
        return inspect.getsource(fn)  # type: ignore[arg-type]
    filename = code.co_filename
    spans = _function_spans.get(filename)
    if spans is None:
        spans = {}
        lines = linecache.getlines(filename)
        if lines:
            for node in ast.walk(ast.parse("".join(lines))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno is not None:
                    first = min([node.lineno] + [d.lineno for d in node.decorator_list])
                    spans[first] = node.end_lineno
        _function_spans[filename] = spans
    end = spans.get(code.co_firstlineno)
    if end is None:
        return inspect.getsource(fn)  # type: ignore[arg-type]
    return "".join(linecache.getlines(filename)[code.co_firstlineno - 1 : end])


def _source(obj: object) -> str | None:
    """The source of ``obj``; for a function generated without one (a hypothesis ``@st.composite`` strategy is a
    chain of wrappers made by ``exec``), the source of the function of the same name that the wrappers close over.
    None where neither can be read."""
    try:
        return _function_source(inspect.unwrap(obj))  # type: ignore[arg-type]
    except (OSError, TypeError, SyntaxError):
        pass
    name = getattr(obj, "__name__", None)
    seen: set[int] = set()
    todo = [obj, inspect.unwrap(obj)]  # type: ignore[arg-type]
    while todo and len(seen) < 16:
        fn = todo.pop()
        if id(fn) in seen:
            continue
        seen.add(id(fn))
        for cell in getattr(fn, "__closure__", None) or ():
            try:
                inner = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            if not inspect.isfunction(inner):
                continue
            if inner.__name__ == name:
                try:
                    return _function_source(inner)
                except (OSError, TypeError, SyntaxError):
                    pass
            todo.append(inner)
    return None


def _reads_a_clock(fn: object, names: dict[str, object], depth: int = 3) -> bool:
    """Whether ``fn`` (a test or a test helper) reads a clock, itself or through the test helpers it calls."""
    key = (id(fn), depth)
    if key in _clock_functions:
        return _clock_functions[key]
    source = _source(fn)
    if source is None:
        found = True
    elif _READS_A_CLOCK.search(source):
        found = True
    else:
        found = False
        if depth > 0:
            for name in set(_CALLED.findall(source)):
                helper = names.get(name)
                module = getattr(helper, "__module__", "") or ""
                if inspect.isfunction(helper) and module.startswith("tests") and helper is not fn:
                    if _reads_a_clock(helper, vars(sys.modules[module]) if module in sys.modules else names, depth - 1):
                        found = True
                        break
    _clock_functions[key] = found
    return found


def _item_reads_a_clock(item: pytest.Item) -> bool:
    fn = getattr(item, "function", None)
    module = getattr(item, "module", None)
    if fn is None or module is None:
        return False
    hypothesis_inner = getattr(getattr(fn, "hypothesis", None), "inner_test", None)
    return _reads_a_clock(hypothesis_inner or fn, vars(module))


def _in_spark_group(nodeid: str) -> bool:
    """Every test that starts or talks to a Spark or Sail engine: all of tests/engines, and any test whose name or
    parameters say ``spark`` (a test elsewhere that starts a local Spark without it fails, see below)."""
    path, _, name = nodeid.partition("::")
    return path.startswith("tests/engines/") or "spark" in name.lower()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    timing_files: set[str] = set()
    for item in items:
        if item.nodeid in SLOW_DOCTESTS:
            item.add_marker(pytest.mark.slow)
        if item.path.suffix == ".py" and "tests" in item.path.parts and _item_reads_a_clock(item):
            item.add_marker(pytest.mark.timing)
        if item.get_closest_marker("timing") is not None:  # also a test marked by hand (s40 A1: a server timeout)
            timing_files.add(item.nodeid.split("::", 1)[0])
    _write_timing_files(timing_files)


def _write_timing_files(files: set[str]) -> None:
    """With ``VEIL_TIMING_FILES`` set, write the test files that hold a ``timing`` test there, one a line: ``make
    test``'s parallel pass writes it (each worker the same list), and the timing pass collects only those files
    (17 → 5 s of collection: the other modules' imports and clock scans, and every doctest of ``veil/``, which
    never hold a timing test)."""
    target = os.environ.get("VEIL_TIMING_FILES")
    if not target:
        return
    partial = Path(f"{target}.{os.getpid()}")
    partial.write_text("".join(f"{f}\n" for f in sorted(files)), encoding="utf-8")
    os.replace(partial, target)


#: Seconds each scope of ``--dist loadgroup`` (a test file, or the Spark group) took in a ``make test`` run on the
#: 2-core machine, those of 3 s or more: the scheduler hands out the longest first (below). Only the order of
#: the work depends on it, never what runs; a stale or missing entry costs balance, not correctness. Regenerate
#: from a run's ``--junitxml`` with ``scripts/scope_seconds.py`` (sums each scope's test times; ``--merge`` for a
#: partial run) when files move or grow by much.
SCOPE_SECONDS = Path(__file__).resolve().parent / "support" / "scope_seconds.json"
#: The weight of a scope missing from :data:`SCOPE_SECONDS`, per test in it (the suite's median is ~0.1 s).
SECONDS_PER_UNLISTED_TEST = 0.1


def _longest_first(workqueue: dict[str, dict[str, bool]], *, timing_pass: bool = False) -> list[str]:
    """The scopes in the order to hand them out: longest expected time first (LPT scheduling), so the last scopes
    taken are short and both workers end together (xdist's own order, most tests first, left heavy scopes of
    few tests, e.g. the server workers' file, to the end, where one worker ran them while the other waited). In the
    timing pass (``-m timing``) the weights, a file's seconds in the first pass, do not apply: its timing tests are
    weighed by their number (each waits seconds; the largest files hold the most)."""
    import json

    try:
        known: dict[str, float] = {} if timing_pass else json.loads(SCOPE_SECONDS.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        known = {}
    weight = {scope: known.get(scope, SECONDS_PER_UNLISTED_TEST * len(tests)) for scope, tests in workqueue.items()}
    return sorted(workqueue, key=lambda scope: (-weight[scope], scope))


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """``--dist loadgroup`` as ``make test`` runs it: one test file at a time per worker (as ``loadfile``), except
    that every test of the Spark group runs on one worker, so one JVM starts (two on two cores starve each other).
    The group is read from node ids: pytest-xdist's own ``xdist_group`` suffix does not reach pytest 9's ids.
    Scopes are handed out longest first (:func:`_longest_first`)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    timing_pass = (config.getoption("markexpr", "") or "").strip() == "timing"

    class FileOrSparkScheduling(LoadScopeScheduling):
        _ordered = False

        def _split_scope(self, nodeid: str) -> str:
            return "spark" if _in_spark_group(nodeid) else nodeid.split("::", 1)[0]

        def _assign_work_unit(self, node: Any) -> None:
            if not self._ordered:  # the first assignment: the work queue is complete
                self._ordered = True
                for scope in _longest_first(self.workqueue, timing_pass=timing_pass):
                    self.workqueue.move_to_end(scope)
            super()._assign_work_unit(node)

    return FileOrSparkScheduling(config, log)  # type: ignore[arg-type]


def _jvm_running() -> bool:
    pyspark = sys.modules.get("pyspark")
    context = getattr(pyspark, "SparkContext", None)
    return context is not None and getattr(context, "_active_spark_context", None) is not None


def _no_spark_outside_its_group(item: pytest.Item, before: bool) -> None:
    if not before and _jvm_running() and not _in_spark_group(item.nodeid):
        pytest.fail(f"{item.nodeid} started a local Spark: put 'spark' in its name or parameters (one worker runs those)")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> object:
    """A fixture of a test outside the Spark group that starts a local Spark fails the test (see ``_in_spark_group``)."""
    before = _jvm_running()
    result = yield
    _no_spark_outside_its_group(item, before)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> object:
    """A test outside the Spark group that starts a local Spark fails (see ``_in_spark_group``)."""
    before = _jvm_running()
    result = yield
    _no_spark_outside_its_group(item, before)
    return result
