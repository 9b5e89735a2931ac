"""The one setter of torch's intra-op threads (the Numba kernels follow torch's count): a run,
a timing phase and a findings sweep each set the count they are measured with."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from normlab.lab.kit.reading import bounded_int, checked

MAX_THREADS = 1024  # torch threads: a million would be started before any work


def check_threads(n: int) -> int:
    """``n`` if it is a thread count the lab allows (0: torch's own); else a UsageError."""
    return checked("threads", bounded_int(0, MAX_THREADS), n)


def set_threads(n: int) -> int:
    """Torch's intra-op threads set to ``n`` (0: left as they are), checked first
    (:func:`check_threads`); the Numba kernels follow torch's count. Returns the count before."""
    import torch

    before = torch.get_num_threads()
    if check_threads(n):
        torch.set_num_threads(n)
    return before


@contextmanager
def using_threads(n: int) -> Iterator[None]:
    """Torch's threads set to ``n`` (:func:`set_threads`) inside the block, restored after."""
    before = set_threads(n)
    try:
        yield
    finally:
        set_threads(before)
