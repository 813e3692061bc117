"""Rules of the codebase that a reviewer would otherwise have to remember (docs/architecture.md)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
VEIL_FILES = sorted((ROOT / "veil").rglob("*.py"))
TEST_FILES = sorted((ROOT / "tests").rglob("*.py"))


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _asserts(tree: ast.AST) -> list[int]:
    return [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Assert)]


def _swallowed(tree: ast.AST) -> list[int]:
    """``except Exception:`` (or bare ``except:``) whose body only passes/continues."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ExceptHandler):
            continue
        broad = node.type is None or (isinstance(node.type, ast.Name) and node.type.id in {"Exception", "BaseException"})
        if broad and all(isinstance(stmt, (ast.Pass, ast.Continue)) for stmt in node.body):
            found.append(node.lineno)
    return found


@pytest.mark.parametrize("path", VEIL_FILES, ids=_rel)
def test_library_invariants_raise_internal_error_not_assert(path: Path) -> None:
    """`assert` vanishes under `python -O`: invariants in veil/ raise veil.errors.InternalError."""
    lines = _asserts(ast.parse(path.read_text(encoding="utf-8")))
    assert not lines, f"{_rel(path)}: assert at lines {lines}; raise InternalError instead"


@pytest.mark.parametrize("path", VEIL_FILES, ids=_rel)
def test_no_exception_is_swallowed(path: Path) -> None:
    lines = _swallowed(ast.parse(path.read_text(encoding="utf-8")))
    assert not lines, f"{_rel(path)}: `except Exception: pass` at lines {lines}; catch the specific error"


def test_the_checks_can_fail() -> None:
    tree = ast.parse("try:\n    assert x\nexcept Exception:\n    pass\n")
    assert _asserts(tree) == [2] and _swallowed(tree) == [3]
    assert _swallowed(ast.parse("try:\n    f()\nexcept KeyError:\n    pass\n")) == []


_ALPHA_DEF = re.compile(r"^\s*[A-Z_]*ALPHA\s*=\s*[0-9.]+(e-?\d+)?\s*(#.*)?$", re.MULTILINE)


@pytest.mark.parametrize("path", [p for p in TEST_FILES if p.name != "conftest.py" or p.parent != ROOT / "tests"], ids=_rel)
def test_statistical_tests_share_one_alpha(path: Path) -> None:
    """One false-failure rate for every statistical test: STAT_ALPHA in tests/conftest.py."""
    text = path.read_text(encoding="utf-8")
    assert not _ALPHA_DEF.search(text), f"{_rel(path)} defines its own α; import STAT_ALPHA from tests.conftest"
