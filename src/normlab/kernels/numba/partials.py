"""The chunk partial sums of the Numba backwards' ``dweight``/``dbias``: each chunk of rows adds
into a row of its own (zeroed as the chunk starts), and the drivers reduce them in chunk
order, so the sums are the same bits for any number of threads."""

from __future__ import annotations

from numba import njit

from normlab.kernels.numba.bf16 import vec
from normlab.kernels.numba.kernels import _F0


@njit(inline="always")
def _rms_chunk(dw, c):
    """Chunk ``c``'s partial sums of dweight, zeroed."""
    acc = dw[c]
    acc[:] = _F0
    return acc


@njit(inline="always")
def _ln_chunk(dw, db, c):
    """Chunk ``c``'s partial sums ``(dweight, dbias)``, zeroed."""
    accw, accb = dw[c], db[c]
    accw[:] = _F0
    accb[:] = _F0
    return accw, accb


@njit(inline="always")
def _reduce(parts, outp):
    """``out = parts.sum(0)`` in chunk order (FP32) into the vector at ``outp`` (0: none).

    Plain loops, no array expressions: in a ``parallel=True`` driver each of those becomes a
    parallel region of its own, each a thread hand-off that a small tensor pays for."""
    if outp == 0:
        return
    out = vec(outp, parts.shape[1])
    for j in range(out.size):
        out[j] = parts[0, j]
    for c in range(1, parts.shape[0]):
        for j in range(out.size):
            out[j] += parts[c, j]
