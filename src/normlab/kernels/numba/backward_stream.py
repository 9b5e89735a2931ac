"""Numba CPU kernels: the RMSNorm and LayerNorm backwards from the saved input in two passes per
row with ``dx`` written by non-temporal stores, and their drivers (a launch choice,
``Launch.stream``; the row loops, formulas and rounding are those of
:mod:`normlab.kernels.numba.backward`, built here from the same helpers).

Why: as for the forward (:mod:`normlab.kernels.numba.forward_stream`), a plain store reads each
line of ``dx`` from DRAM before writing it, a fourth stream beside ``dy``, ``h`` and ``dx``
itself. Pass 2 computes each block of the row into a scratch block in L1 and streams its whole
lines out (:mod:`normlab.kernels.numba.stream`). The scratch block rides in the store tags the
row loop hands to its ``dx`` helper (``(tags, block)``); the pipelined helper, never run here
(the loop is two-pass) but compiled with the loop, gets the plain tags back.

The rows functions are inlined into the drivers: compiled as functions of their own, as the
plain kernels' are, the same streamed loops ran no faster than the plain ones (docs/kernels.md
has the figures).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from normlab.kernels.numba.backward import (
    _ln_dx,
    _ln_dx_next,
    _ln_sums,
    _ln_sums2,
    _rms_dot,
    _rms_dx,
    _rms_dx_next,
    ln_row_loop,
    rms_row_loop,
)
from normlab.kernels.numba.bf16 import rows, vec, vector_width
from normlab.kernels.numba.kernels import _JIT, _JIT_NO_FMA
from normlab.kernels.numba.partials import _ln_chunk, _reduce, _rms_chunk
from normlab.kernels.numba.stream import blocked, fence, scratch


def streamed_rms(dx_row, dx_next):
    """RMSNorm ``dx`` helpers (:func:`~normlab.kernels.numba.backward.rms_row_loop`'s) taking
    ``(tags, block)``: the row in blocks through ``block``, streamed; the pipelined one plain."""

    @njit(inline="always")
    def part(j, k, out, a):
        hr, dyr, dhr, g, g1, rs_, kx, has_dh, tags = a
        dx_row(hr[j:], dyr[j:], dhr[j:], out, k, g[j:], g1[j:], rs_, kx, has_dh, tags)

    write = blocked(part)

    @njit(inline="always")
    def row(hr, dyr, dhr, dxr, n, g, g1, rs_, kx, has_dh, tb):
        tags, buf = tb
        write(dxr, n, buf, (hr, dyr, dhr, g, g1, rs_, kx, has_dh, tags))

    @njit(inline="always")
    def nxt(hr, dyr, dhr, dxr, n, g, g1, rs_, kx, has_dh, tb, after):
        return dx_next(hr, dyr, dhr, dxr, n, g, g1, rs_, kx, has_dh, tb[0], after)

    return row, nxt


def streamed_ln(dx_row, dx_next):
    """LayerNorm ``dx`` helpers (:func:`~normlab.kernels.numba.backward.ln_row_loop`'s) taking
    ``(tags, block)``, as :func:`streamed_rms`."""

    @njit(inline="always")
    def part(j, k, out, a):
        # coefs travel flat: a tuple of them in ``a`` trips Numba's parfor array analysis
        hr, dyr, dhr, w, w1, mu, rs_, ca, cb, has_dh, tags = a
        dx_row(hr[j:], dyr[j:], dhr[j:], out, k, w[j:], w1[j:], mu, rs_, (ca, cb), has_dh, tags)

    write = blocked(part)

    @njit(inline="always")
    def row(hr, dyr, dhr, dxr, n, w, w1, mu, rs_, coefs, has_dh, tb):
        tags, buf = tb
        write(dxr, n, buf, (hr, dyr, dhr, w, w1, mu, rs_, *coefs, has_dh, tags))

    @njit(inline="always")
    def nxt(hr, dyr, dhr, dxr, n, w, w1, mu, rs_, coefs, has_dh, tb, after):
        return dx_next(hr, dyr, dhr, dxr, n, w, w1, mu, rs_, coefs, has_dh, tb[0], after)

    return row, nxt


_rms_loop = rms_row_loop(_rms_chunk, _rms_dot, *streamed_rms(_rms_dx, _rms_dx_next))
_ln_loop = ln_row_loop(_ln_chunk, _ln_sums2, _ln_sums, *streamed_ln(_ln_dx, _ln_dx_next))


@njit(inline="always")
def _rms_bwd_rows(c0, c1, per, pipe, dw, args):
    """:func:`normlab.kernels.numba.backward._rms_bwd_rows`, ``dx`` streamed (two-pass: ``pipe``
    is ignored)."""
    m, n, dyp, dys, dhp, dhs, hp, hs, gp, rstdp, dxp, eps, eps_inside, has_dh, has_w = args[:15]
    dyt, ht, qt, st, vw = args[15:]
    vector_width(vw)
    dy, dh, h = rows(dyp, m, dys, dyt), rows(dhp, m, dhs, ht), rows(hp, m, hs, ht)
    dx, g, rstd = rows(dxp, m, n, ht), vec(gp, n), vec(rstdp, m)
    tb = ((ht, st), scratch(dx[min(c0 * per, m - 1)]))
    v = (m, n, n, dy, dh, h, dx, g, g, rstd, eps, eps_inside, has_dh, has_w, qt, tb)
    _rms_loop(c0, c1, per, False, dw, v)
    fence()


@njit(inline="always")
def _ln_bwd_rows(c0, c1, per, pipe, dw, db, args):
    """:func:`normlab.kernels.numba.backward._ln_bwd_rows`, ``dx`` streamed (two-pass)."""
    m, n, dyp, dys, dhp, dhs, hp, hs, wp, meanp, rstdp, dxp, has_dh, dyt, ht, st, vw = args
    vector_width(vw)
    dy, dh, h = rows(dyp, m, dys, dyt), rows(dhp, m, dhs, ht), rows(hp, m, hs, ht)
    dx, w = rows(dxp, m, n, ht), vec(wp, n)
    mean, rstd = vec(meanp, m), vec(rstdp, m)
    tb = ((ht, st), scratch(dx[min(c0 * per, m - 1)]))
    v = (m, n, n, dy, dh, h, dx, w, w, mean, rstd, has_dh, tb)
    _ln_loop(c0, c1, per, False, dw, db, v)
    fence()


# Drivers, as those of normlab.kernels.numba.backward; the LayerNorm ones without FMA
# contraction, as its rows function is (the one-element row's w dy - mean(w dy) must be 0).


@njit(**_JIT)
def rms_bwd_stream(nch, per, pipe, nw, args, dwo):
    dw = np.empty((nch, max(nw, 1)), np.float32)
    _rms_bwd_rows(0, nch, per, pipe, dw, args)
    _reduce(dw, dwo)


@njit(parallel=True, **_JIT)
def rms_bwd_stream_par(nch, per, pipe, nw, args, dwo):
    dw = np.empty((nch, max(nw, 1)), np.float32)
    for c in prange(nch):
        _rms_bwd_rows(c, c + 1, per, pipe, dw, args)
    _reduce(dw, dwo)


@njit(**_JIT_NO_FMA)
def ln_bwd_stream(nch, per, pipe, n, args, dwo, dbo):
    dw, db = np.empty((nch, n), np.float32), np.empty((nch, n), np.float32)
    _ln_bwd_rows(0, nch, per, pipe, dw, db, args)
    _reduce(dw, dwo)
    _reduce(db, dbo)


@njit(parallel=True, **_JIT_NO_FMA)
def ln_bwd_stream_par(nch, per, pipe, n, args, dwo, dbo):
    dw, db = np.empty((nch, n), np.float32), np.empty((nch, n), np.float32)
    for c in prange(nch):
        _ln_bwd_rows(c, c + 1, per, pipe, dw, db, args)
    _reduce(dw, dwo)
    _reduce(db, dbo)
