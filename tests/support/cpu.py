"""CPU clocks for timing bounds that a neighbour's load does not move.

A test that bounds the work one query makes reads a CPU clock, not a wall clock, and so runs in the parallel pass
(``tests/conftest.py`` marks only wall-clock readers ``timing``): ``time.process_time`` where the work runs in the
test's own process (the engine's threads included), :func:`children_cpu_seconds` where it runs in a child process
that the test waits for (``subprocess.run``). Neither counts waiting or sleeping: use them only where the work
guarded is computation (a plan that grows, rows that multiply), never a wait or a timeout.
"""

from __future__ import annotations

import resource


def children_cpu_seconds() -> float:
    """User and system CPU seconds of this process's children that have ended and been waited for (their own waited
    children included): the difference around a ``subprocess.run`` is that child's CPU time."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime
