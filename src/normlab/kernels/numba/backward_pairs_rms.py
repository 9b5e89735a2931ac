"""Numba CPU kernel: the RMSNorm backward of bfloat16 rows read as 32-bit pairs, and its drivers
(a launch choice, ``Launch.bf16_pairs``; the formulas are those of
:func:`normlab.kernels.numba.backward.rms_row_loop`).

Why, and how a pair is read and stored: :mod:`normlab.kernels.numba.backward_pairs` (the
LayerNorm backward on pairs), whose conversions (:func:`lo`, :func:`hi`, :func:`pack`), gain
split and reduction of the partial sums this kernel shares: the gain is split into even and odd
halves, the dweight partial sums have shape ``(chunks, 2, N / 2)`` and are put back in element
order by the final reduction (same chunk order). FMA contraction is allowed, as in the reference
RMSNorm backward.

Rows qualify as for the LayerNorm backward: ``dy``, ``h`` (and ``dh``) bfloat16 with ``N`` and
the row strides even and 4-byte aligned addresses (:func:`normlab.kernels.numba.launch.rms_bwd`
checks); other calls run the reference kernel.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from normlab.kernels.numba.backward import rms_row_loop
from normlab.kernels.numba.backward_pairs import _U32, _reduce_pairs, _split, hi, lo, pack
from normlab.kernels.numba.bf16 import round_to, rows, vec, vector_width
from normlab.kernels.numba.kernels import _F0, _JIT


@njit(inline="always")
def _dot(hr, dyr, ge, go, acc, rs_, has_w, qt, k):
    """Pass 1 of a row of ``k`` pairs: ``sum(g dy xhat)``, adding ``dy q(xhat)`` to the partial
    sums ``acc = (dw even, dw odd)`` if ``has_w``."""
    awe, awo = acc
    dot = _F0
    if has_w:
        for j in range(k):
            uh, ud = hr[j], dyr[j]
            xe, xo, de, do = lo(uh) * rs_, hi(uh) * rs_, lo(ud), hi(ud)
            awe[j] += de * round_to(xe, qt)
            awo[j] += do * round_to(xo, qt)
            dot += de * ge[j] * xe + do * go[j] * xo
    else:
        for j in range(k):
            uh, ud = hr[j], dyr[j]
            dot += lo(ud) * ge[j] * (lo(uh) * rs_) + hi(ud) * go[j] * (hi(uh) * rs_)
    return dot


@njit(inline="always")
def _dx(uh, ud, j, ge, go, rs_, kx):
    """``dx`` of pair ``j`` (before ``dh``): the two float32 values."""
    ve = rs_ * (lo(ud) * ge[j]) - kx * (lo(uh) * rs_)
    return ve, rs_ * (hi(ud) * go[j]) - kx * (hi(uh) * rs_)


@njit(inline="always")
def _dx_row(hr, dyr, dhr, dxr, k, ge, go, rs_, kx, has_dh, st):
    """Pass 2 of a row: its ``dx``."""
    if has_dh:
        for j in range(k):
            ve, vo = _dx(hr[j], dyr[j], j, ge, go, rs_, kx)
            dxr[j] = pack(ve + lo(dhr[j]), vo + hi(dhr[j]), st)
    else:
        for j in range(k):
            ve, vo = _dx(hr[j], dyr[j], j, ge, go, rs_, kx)
            dxr[j] = pack(ve, vo, st)


@njit(inline="always")
def _dot_next(uh, ud, j, ge, go, awe, awo, rn, qt):
    """Pair ``j`` of the next row: ``dy * q(xhat)`` added to ``(awe, awo)``; returns its term
    of the dot."""
    xe, xo, de, do = lo(uh) * rn, hi(uh) * rn, lo(ud), hi(ud)
    awe[j] += de * round_to(xe, qt)
    awo[j] += do * round_to(xo, qt)
    return de * ge[j] * xe + do * go[j] * xo


@njit(inline="always")
def _dx_row_next(hr, dyr, dhr, dxr, k, ge, go, rs_, kx, has_dh, st, nxt):
    """:func:`_dx_row` fused with :func:`_dot` of the next row, whose dot it returns; ``nxt =
    (h row, dy row, rstd, acc, qt)``; always adds to ``acc``, as the reference loop does. The next
    row's terms come from :func:`_dot_next`, which returns one value: a per-pair helper
    returning several terms stopped LLVM from vectorizing the loop (as in
    :func:`~normlab.kernels.numba.backward_pairs._dx_row_next`)."""
    hn, dyn, rn, acc, qt = nxt
    awe, awo = acc
    dot = _F0
    if has_dh:
        for j in range(k):
            ve, vo = _dx(hr[j], dyr[j], j, ge, go, rs_, kx)
            dxr[j] = pack(ve + lo(dhr[j]), vo + hi(dhr[j]), st)
            dot += _dot_next(hn[j], dyn[j], j, ge, go, awe, awo, rn, qt)
    else:
        for j in range(k):
            ve, vo = _dx(hr[j], dyr[j], j, ge, go, rs_, kx)
            dxr[j] = pack(ve, vo, st)
            dot += _dot_next(hn[j], dyn[j], j, ge, go, awe, awo, rn, qt)
    return dot


@njit(inline="always")
def _chunk(dw, c):
    """Chunk ``c``'s partial sums ``(dw even, dw odd)``, zeroed."""
    acc = (dw[c, 0], dw[c, 1])
    for a in acc:
        a[:] = _F0
    return acc


_loop = rms_row_loop(_chunk, _dot, _dx_row, _dx_row_next)


@njit(**_JIT)
def _rms_bwd_pairs_rows(c0, c1, per, pipe, dw, gd, args):
    """RMSNorm backward of chunks ``[c0, c1)`` of bfloat16 rows read as pairs
    (:func:`~normlab.kernels.numba.backward.rms_row_loop`); ``gd`` the FP32 gain as ``(even,
    odd)`` halves, ``dw`` the partial sums, ``(chunks, 2, N / 2)``."""
    m, n, dyp, dys, dhp, dhs, hp, hs, _, rstdp, dxp, eps, eps_inside, has_dh, has_w = args[:15]
    _, _, qt, st, vw = args[15:]  # the rows' dtype tags unused: pairs are read as uint32
    vector_width(vw)
    k = n // 2
    dy, dh = rows(dyp, m, dys // 2, _U32), rows(dhp, m, dhs // 2, _U32)
    h, dx = rows(hp, m, hs // 2, _U32), rows(dxp, m, k, _U32)
    rstd, ge, go = vec(rstdp, m), gd[0], gd[1]
    v = (m, n, k, dy, dh, h, dx, ge, go, rstd, eps, eps_inside, has_dh, has_w, qt, st)
    _loop(c0, c1, per, pipe, dw, v)


# Drivers, as backward.rms_bwd (the same arguments; ``nw`` = N or 0, the partial sums' width).


@njit(**_JIT)
def rms_bwd_pairs(nch, per, pipe, nw, args, dwo):
    """:func:`~normlab.kernels.numba.backward.rms_bwd` of bfloat16 rows read as pairs."""
    dw = np.empty((nch, 2, max(nw // 2, 1)), np.float32)
    gd = _split(args[8], args[1])
    _rms_bwd_pairs_rows(0, nch, per, pipe, dw, gd, args)
    _reduce_pairs(dw, dwo)


@njit(parallel=True, **_JIT)
def rms_bwd_pairs_par(nch, per, pipe, nw, args, dwo):
    dw = np.empty((nch, 2, max(nw // 2, 1)), np.float32)
    gd = _split(args[8], args[1])
    for c in prange(nch):
        _rms_bwd_pairs_rows(c, c + 1, per, pipe, dw, gd, args)
    _reduce_pairs(dw, dwo)
