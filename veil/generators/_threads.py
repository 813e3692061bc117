"""Thread counts for training: torch's intra-op pool and the BLAS/OpenMP pools, set for one block.

Small MLPs gain nothing from many threads and lose a lot on a shared host (the default GAN took
660 s at torch's default thread count against 97 s with one). Training code runs inside
:func:`limited_threads`, which restores the previous settings on exit, so library code never
leaves global thread state changed.

>>> with limited_threads(1):
...     pass
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from veil.errors import InputError

__all__ = ["DEFAULT_THREADS", "MAX_THREADS", "limited_threads"]

#: one thread: the fastest setting measured for Veil's small tabular models on a shared host
DEFAULT_THREADS = 1

#: at most four threads per core (``--threads 100000`` failed to start threads and left torch broken; s27 A9)
MAX_THREADS = 4 * (os.cpu_count() or 1)


@contextmanager
def limited_threads(threads: int) -> Iterator[None]:
    """Run the block with ``threads`` torch intra-op threads and BLAS/OpenMP threads."""
    if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= MAX_THREADS:
        raise InputError(f"threads must be an integer between 1 and {MAX_THREADS}, got {threads!r}", hint="Use e.g. threads=1")
    import torch
    from threadpoolctl import threadpool_limits

    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with threadpool_limits(limits=threads):
            yield
    finally:
        torch.set_num_threads(previous)
