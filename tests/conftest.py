"""Shared fixtures: real data from ../shared/data, temp policies, single-threaded torch."""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest

os.environ.setdefault("VEIL_PROGRESS", "0")

try:  # keep torch to one thread in tests (library code never does this)
    import torch

    torch.set_num_threads(1)
except ImportError:  # pragma: no cover
    pass

from veil.datasets import shared_data_dir

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


#: A test module that reads a clock to decide (elapsed time, deadlines), itself or through a helper function it
#: imports from another test module, is marked ``timing`` at collection: ``make test`` runs those modules alone,
#: after the rest has run on two workers (pytest-xdist), so a worker beside them cannot fail a timing assertion.
_READS_A_CLOCK = re.compile(r"\b(?:perf_counter|monotonic|process_time|thread_time)\(|\btime\.time\(")
_ROOT = Path(__file__).resolve().parent.parent
_clock_modules: dict[Path, bool] = {}


def _helpers_read_a_clock(tree: ast.Module) -> bool:
    """Whether a function this module imports from another ``tests`` module reads a clock."""
    for node in ast.walk(tree):
        if not (isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tests.")):
            continue
        path = _ROOT.joinpath(*node.module.split(".")).with_suffix(".py")
        try:
            source = path.read_text(encoding="utf-8")
        except OSError:
            continue
        names = {a.name for a in node.names}
        for fn in ast.parse(source).body:
            if isinstance(fn, ast.FunctionDef) and fn.name in names:
                if _READS_A_CLOCK.search(ast.get_source_segment(source, fn) or ""):
                    return True
    return False


def _reads_a_clock(path: Path) -> bool:
    if path not in _clock_modules:
        try:
            source = path.read_text(encoding="utf-8")
            _clock_modules[path] = bool(_READS_A_CLOCK.search(source)) or _helpers_read_a_clock(ast.parse(source))
        except (OSError, UnicodeDecodeError, SyntaxError):
            _clock_modules[path] = False
    return _clock_modules[path]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.nodeid in SLOW_DOCTESTS:
            item.add_marker(pytest.mark.slow)
        if item.path.suffix == ".py" and "tests" in item.path.parts and _reads_a_clock(item.path):
            item.add_marker(pytest.mark.timing)
