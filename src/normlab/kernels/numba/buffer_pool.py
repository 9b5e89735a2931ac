"""Recycled output buffers for the CPU kernels: ``get(nbytes)`` hands out a buffer no tensor
uses any more, or a new one."""

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
_pool: dict[int, list[np.ndarray]] = {}  # nbytes -> buffers, least recently handed out first
_lock = threading.Lock()


def get(nbytes: int) -> np.ndarray:
    with _lock:
        bufs = _pool.setdefault(nbytes, [])
        for i in range(len(bufs)):  # (enumerate's tuple would hold a 4th reference)
            buf = bufs[i]
            # 3 = the list, ``buf`` and getrefcount's argument: no tensor uses it any more.
            if sys.getrefcount(buf) == 3:
                bufs.append(bufs.pop(i))
                return buf
        buf = np.empty(nbytes, np.uint8)
        if nbytes <= MAX_BYTES:
            bufs.append(buf)
            _trim(keep=buf)
        return buf


def _trim(keep: np.ndarray) -> None:
    """Forget the least recently handed-out buffers (of the sizes seen first) until the pool
    holds at most ``MAX_BYTES``; a forgotten buffer still in use lives on in its tensors.
    Runs only after a fresh allocation, so the total is summed here rather than kept."""
    kept = total()
    for bufs in _pool.values():
        while bufs and kept > MAX_BYTES and bufs[0] is not keep:
            kept -= bufs.pop(0).nbytes
        if kept <= MAX_BYTES:
            return


def total() -> int:
    return sum(b.nbytes for bufs in _pool.values() for b in bufs)
