"""Non-temporal ("streaming") stores of output rows, a launch choice of the two-pass loops
(:attr:`~normlab.kernels.numba.choices.Launch.stream`).

A plain store to a line that is not in the cache first reads the line from memory (read for
ownership), so a kernel that writes an output it does not read moves three bytes of DRAM traffic
per two it needs: what limits a norm whose rows come from and go to memory. A non-temporal store
of a whole, aligned 64-byte line writes it without reading it first. LLVM's loop vectorizer does
not vectorize stores marked non-temporal at an element's alignment, so the loops compute a block
of the row into a small scratch buffer (L1-resident, of the output's storage type) and
:func:`stream_out` copies its whole lines with 64-byte non-temporal stores; the bytes before the
row's first line boundary and after its last are stored plainly (a line the next row shares).
Worth it only for outputs that do not stay in the cache for their reader: the tuner tries it for
calls from memory (:func:`~normlab.kernels.numba.choices.from_memory`).

Non-temporal stores are weakly ordered: a kernel that used them ends with :func:`fence` before
it returns (before another thread may read what it wrote).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

LINE = 64  # bytes per cache line: the unit of a non-temporal store here
BLOCK_BYTES = 2048  # scratch per block: stays in L1 beside the rows and the gain


@intrinsic
def _nt_line(typingctx, dst, src):
    """Copy the 64 bytes at address ``src`` to address ``dst`` (64-byte aligned) with one
    non-temporal store."""
    if not (isinstance(dst, types.Integer) and isinstance(src, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        vt = ir.VectorType(ir.IntType(32), LINE // 4)
        d = builder.inttoptr(args[0], vt.as_pointer())
        s = builder.inttoptr(args[1], vt.as_pointer())
        st = builder.store(builder.load(s, align=4), d, align=LINE)
        st.set_metadata("nontemporal", builder.module.add_metadata([ir.IntType(32)(1)]))
        return context.get_dummy_value()

    return types.void(dst, src), codegen


@intrinsic
def fence(typingctx):
    """A full memory fence (``mfence`` on x86, ``dmb`` on Arm): orders the non-temporal stores
    before what follows. Once per chunk, so its cost does not matter."""

    def codegen(context, builder, signature, args):
        builder.fence("seq_cst")
        return context.get_dummy_value()

    return types.void(), codegen


@njit(inline="always")
def scratch(row):
    """A scratch block for rows like ``row`` (its storage type, at most :data:`BLOCK_BYTES`)."""
    return np.empty(min(row.size, BLOCK_BYTES // row.itemsize), row.dtype)


@njit(inline="always")
def head(row):
    """How many elements of ``row`` come before its first 64-byte line boundary (stored
    plainly); the blocks after it start on a line."""
    return min(row.size, ((-row.ctypes.data) % LINE) // row.itemsize)


@njit(inline="always")
def stream_out(dst, buf, k):
    """``dst[:k] = buf[:k]``, ``dst`` starting on a line: its whole lines with non-temporal
    stores, the rest plainly."""
    full = k * dst.itemsize // LINE
    d, s = dst.ctypes.data, buf.ctypes.data
    for line in range(full):
        _nt_line(d + line * LINE, s + line * LINE)
    for j in range(full * LINE // dst.itemsize, k):
        dst[j] = buf[j]


def blocked(part):
    """A row writer made of ``part(j, k, out, a)``, which stores elements ``[j, j + k)`` of a
    row's output into ``out[:k]`` (``a``: its arguments): ``row(dst, n, buf, a)`` stores the
    ``n`` elements of ``dst`` plainly up to its first line boundary (:func:`head`), then block by
    block through the scratch ``buf``, streamed (:func:`stream_out`). Inlined into its caller,
    as ``part`` is (Numba reads it, a closure variable, as a global: a direct call)."""

    @njit(inline="always")
    def row(dst, n, buf, a):
        j = head(dst)
        part(0, j, dst, a)
        while j < n:
            k = min(buf.size, n - j)
            part(j, k, buf, a)
            stream_out(dst[j:], buf, k)
            j += k

    return row
