"""Recycled output buffers for the CPU kernels: ``get(nbytes)`` hands out a buffer no tensor
uses any more, or a new one, starting on a 64-byte line."""

from __future__ import annotations

import os
import sys
import threading

import numpy as np

# Outputs of at least this many bytes come from a pool of recycled buffers. glibc's malloc often
# serves such sizes with fresh pages (a freed heap top goes back to the kernel; large blocks are
# mmapped), and each fresh page costs a fault plus the kernel zeroing it; below this size no
# faults were seen and the pool's bookkeeping would be pure cost (benchmarks/bench_overhead.py
# counts the faults per call; docs/benchmarks.md has its figures).
MIN_BYTES = 1 << 20

# A buffer is reused once no tensor uses it any more (a refcount check), so a training step's
# activations land on pages that are already mapped. At most this many MB are kept
# (NORMLAB_BUFFER_POOL_MB=0 turns the pool off).
MAX_BYTES = int(float(os.environ.get("NORMLAB_BUFFER_POOL_MB", "512")) * 2**20)
# Buffers start on a cache line (numpy's own alignment is 16 bytes), so rows whose length is a
# multiple of 64 bytes start on one too: the streamed stores (numba/stream.py) write whole lines.
ALIGN = 64
_pool: dict[int, list[np.ndarray]] = {}  # nbytes -> allocations, least recently handed out first
_lock = threading.Lock()


def get(nbytes: int) -> np.ndarray:
    with _lock:
        bufs = _pool.setdefault(nbytes, [])
        for i in range(len(bufs)):  # (enumerate's tuple would hold a 4th reference)
            raw = bufs[i]
            # 3 = the list, ``raw`` and getrefcount's argument: no view of it is alive (numpy
            # makes every view of a view refer to the array that owns the memory).
            if sys.getrefcount(raw) == 3:
                bufs.append(bufs.pop(i))
                return _aligned(raw, nbytes)
        raw = np.empty(nbytes + ALIGN, np.uint8)
        if nbytes <= MAX_BYTES:
            bufs.append(raw)
            _trim(keep=raw)
        return _aligned(raw, nbytes)


def _aligned(raw: np.ndarray, nbytes: int) -> np.ndarray:
    off = -raw.ctypes.data % ALIGN
    return raw[off : off + nbytes]


def _trim(keep: np.ndarray) -> None:
    """Forget the least recently handed-out buffers (of the sizes seen first) until the pool
    holds at most ``MAX_BYTES``; a forgotten buffer still in use lives on in its tensors.
    Runs only after a fresh allocation, so the total is summed here rather than kept."""
    kept = total()
    for nbytes, bufs in _pool.items():
        while bufs and kept > MAX_BYTES and bufs[0] is not keep:
            bufs.pop(0)
            kept -= nbytes
        if kept <= MAX_BYTES:
            return


def total() -> int:
    """The bytes the pool holds (the buffers' sizes, not counting their alignment slack)."""
    return sum(nbytes * len(bufs) for nbytes, bufs in _pool.items())
