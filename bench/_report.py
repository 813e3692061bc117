"""Write one benchmark's section of docs/benchmarks.md (between markers), leaving the others alone."""

from __future__ import annotations

import fcntl
import os
import platform
from datetime import UTC, datetime
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
HEADER = """# Benchmarks

Every section is written by a script in `bench/` (run `make bench`, or `python -m bench.<script>`);
each measures Veil against a baseline in the same run. Machine caveat: a 2-core shared host
(absolute times drift by up to 3× with other load; ratios are what matter), torch with the thread
count stated in each section, no GPU.
"""


def machine_line() -> str:
    return (
        f"_Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {platform.machine()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}._"
    )


def write_section(key: str, markdown: str) -> Path:
    """Replace (or append) the section ``key`` of docs/benchmarks.md with ``markdown``."""
    DOC.parent.mkdir(parents=True, exist_ok=True)
    begin, end = f"<!-- begin:{key} -->", f"<!-- end:{key} -->"
    block = f"{begin}\n{markdown.rstrip()}\n\n{machine_line()}\n{end}"
    with open(DOC.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        text = DOC.read_text(encoding="utf-8") if DOC.exists() else HEADER
        if begin in text and end in text:
            head, rest = text.split(begin, 1)
            _, tail = rest.split(end, 1)
            text = head + block + tail
        else:
            text = text.rstrip() + "\n\n" + block + "\n"
        DOC.write_text(text, encoding="utf-8")
    return DOC
