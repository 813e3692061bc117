"""Regenerate ``tests/support/scope_seconds.json`` (the LPT weights of ``make test``'s scheduler, tests/conftest.py).

    .venv/bin/python -m pytest -q -n 2 --dist loadgroup -m "not timing" --junitxml=/tmp/run.xml   # or make test's run
    .venv/bin/python scripts/scope_seconds.py /tmp/run.xml [more.xml …] [--scale 1.0] [--merge]

Sums each scope's test times (``time`` of every ``testcase``; a scope is a test file, or ``spark`` for the Spark group,
the same split as ``FileOrSparkScheduling``) and writes the scopes of 3 s or more, largest first. ``--merge`` keeps the
entries of scopes the reports do not hold (a partial run) and replaces the others. ``--scale`` multiplies every time
(e.g. per-test CPU seconds from a quiet run × 1.24, the ratio of a ``make test`` run's seconds to CPU seconds seen in
session 22). A TSV of ``nodeid<TAB>seconds`` lines is read as well as JUnit XML. Only the order of the work depends on
the weights, never what runs.
"""

from __future__ import annotations

import argparse
import json
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET = ROOT / "tests" / "support" / "scope_seconds.json"
MIN_SECONDS = 3


def _scope(nodeid: str) -> str:
    path, _, name = nodeid.partition("::")
    return "spark" if path.startswith("tests/engines/") or "spark" in name.lower() else path


def _times(report: Path) -> list[tuple[str, float]]:
    """(nodeid, seconds) of every test in a JUnit XML report or a ``nodeid<TAB>seconds`` TSV."""
    if report.suffix == ".xml":
        out = []
        for case in ET.parse(report).getroot().iter("testcase"):
            module = case.get("classname", "")
            parts = module.split(".")
            # pytest's classname: the module's dotted path, then any class names (capitalised by convention)
            while parts and parts[-1][:1].isupper():
                parts.pop()
            out.append((f"{'/'.join(parts)}.py::{case.get('name', '')}", float(case.get("time", 0))))
        return out
    rows = (line.split("\t") for line in report.read_text(encoding="utf-8").splitlines() if line.strip())
    return [(row[0], float(row[1])) for row in rows]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("reports", nargs="+", type=Path)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--merge", action="store_true", help="keep the scopes the reports do not hold")
    args = parser.parse_args(argv)
    seconds: dict[str, float] = defaultdict(float)
    for report in args.reports:
        for nodeid, t in _times(report):
            seconds[_scope(nodeid)] += t * args.scale
    weights = json.loads(TARGET.read_text(encoding="utf-8")) if args.merge else {}
    for scope, total in seconds.items():
        if total >= MIN_SECONDS:
            weights[scope] = round(total)
        else:
            weights.pop(scope, None)
    ordered = dict(sorted(weights.items(), key=lambda kv: (-kv[1], kv[0])))
    TARGET.write_text(json.dumps(ordered, indent=2) + "\n", encoding="utf-8")
    print(f"{TARGET.relative_to(ROOT)}: {len(ordered)} scopes, {sum(ordered.values())} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
