"""Numba CPU kernels: the RMSNorm and LayerNorm forwards in two passes per row with ``y`` written
by non-temporal stores, and their drivers (a launch choice, ``Launch.stream``; the formulas,
arguments and rounding are those of :func:`normlab.kernels.numba.kernels._rms_fwd_rows` and
``_ln_fwd_rows``, whose loops and row functions these share).

Why: from memory, a forward reads ``x`` and writes ``y``; with plain stores each line of ``y`` is
first read from DRAM (read for ownership), a third stream of traffic that ``y``'s reader does not
need when ``y`` cannot stay in the cache anyway. The second pass computes each block of the row
into a scratch block in L1 and streams its whole lines out (:mod:`normlab.kernels.numba.stream`).
A fused residual's ``h`` is written plainly: the second pass reads it back from the cache.
"""

from __future__ import annotations

from numba import njit, prange

from normlab.kernels.numba import bf16
from normlab.kernels.numba.bf16 import rows, vec
from normlab.kernels.numba.kernels import (
    _JIT,
    _add_sums,
    _add_sumsq,
    _ln_stats,
    _ln_store,
    _ln_y_exact,
    _nan_free,
    _rms_stat,
    _rms_store,
    _rms_y_exact,
    _sums,
    _sumsq,
)
from normlab.kernels.numba.stream import blocked, fence, scratch


@njit(inline="always")
def _rms_part(j, k, out, a):
    """Elements ``[j, j + k)`` of a row's ``y`` into ``out``, as
    :func:`~normlab.kernels.numba.kernels._rms_store` stores them."""
    src, g, rs_, qt, yt = a
    _rms_store(src[j:], out, g[j:], k, rs_, qt, yt)


@njit(inline="always")
def _ln_part(j, k, out, a):
    """Elements ``[j, j + k)`` of a row's ``y`` into ``out``, as
    :func:`~normlab.kernels.numba.kernels._ln_store` stores them."""
    src, w, b, stats, ht = a
    _ln_store(src[j:], out, w[j:], b[j:], k, stats, ht)


_rms_row, _ln_row = blocked(_rms_part), blocked(_ln_part)


@njit(**_JIT)
def _rms_fwd_rows(
    c0, c1, per, pipe, m, n, xp, xs, rp, rs, hp, yp, gp, rstdp, eps, eps_inside, has_res, xt, ht,
    yt, qt, vw,
):  # fmt: skip
    """:func:`normlab.kernels.numba.kernels._rms_fwd_rows` in two passes (``pipe`` is ignored),
    ``y`` streamed."""
    bf16.vector_width(vw)
    x, r, h = rows(xp, m, xs, xt), rows(rp, m, rs, ht), rows(hp, m, n, ht)
    y, g, rstd = rows(yp, m, n, yt), vec(gp, n), vec(rstdp, m)
    i0, i1 = c0 * per, min(m, c1 * per)
    if i0 >= i1:
        return
    buf = scratch(y[i0])
    for i in range(i0, i1):
        if has_res:
            rstd[i] = rs_ = _rms_stat(_add_sumsq(x[i], r[i], h[i], n, ht), n, eps, eps_inside)
            _rms_row(y[i], n, buf, (h[i], g, rs_, qt, yt))
        else:
            rstd[i] = rs_ = _rms_stat(_sumsq(x[i], n), n, eps, eps_inside)
            _rms_row(y[i], n, buf, (x[i], g, rs_, qt, yt))
    fence()
    if not _nan_free(g, n):  # as in the plain kernel: the stores assumed no NaN payload from g
        if has_res:
            _rms_y_exact(h, y, g, rstd, i0, i1, n, qt, yt)
        else:
            _rms_y_exact(x, y, g, rstd, i0, i1, n, qt, yt)


@njit(**_JIT)
def _ln_fwd_rows(
    c0, c1, per, pipe, m, n, xp, xs, rp, rs, hp, yp, wp, bp, meanp, rstdp, eps, has_res, xt, ht,
    vw,
):  # fmt: skip
    """:func:`normlab.kernels.numba.kernels._ln_fwd_rows` in two passes (``pipe`` is ignored),
    ``y`` streamed."""
    bf16.vector_width(vw)
    x, r, h = rows(xp, m, xs, xt), rows(rp, m, rs, ht), rows(hp, m, n, ht)
    y, w, b = rows(yp, m, n, ht), vec(wp, n), vec(bp, n)
    mean, rstd = vec(meanp, m), vec(rstdp, m)
    i0, i1 = c0 * per, min(m, c1 * per)
    if i0 >= i1:
        return
    buf = scratch(y[i0])
    for i in range(i0, i1):
        if has_res:
            s, s2 = _add_sums(x[i], r[i], h[i], n, ht)
            mean[i], rstd[i] = stats = _ln_stats(s, s2, h[i], n, eps)
            _ln_row(y[i], n, buf, (h[i], w, b, stats, ht))
        else:
            s, s2 = _sums(x[i], n)
            mean[i], rstd[i] = stats = _ln_stats(s, s2, x[i], n, eps)
            _ln_row(y[i], n, buf, (x[i], w, b, stats, ht))
    fence()
    if not (_nan_free(w, n) and _nan_free(b, n)):
        if has_res:
            _ln_y_exact(h, y, w, b, mean, rstd, i0, i1, n, ht)
        else:
            _ln_y_exact(x, y, w, b, mean, rstd, i0, i1, n, ht)


# Drivers, as those of normlab.kernels.numba.kernels (chunk by chunk on either path).


@njit(**_JIT)
def rms_fwd_stream(nch, per, pipe, args):
    for c in range(nch):
        _rms_fwd_rows(c, c + 1, per, pipe, *args)


@njit(parallel=True, **_JIT)
def rms_fwd_stream_par(nch, per, pipe, args):
    for c in prange(nch):
        _rms_fwd_rows(c, c + 1, per, pipe, *args)


@njit(**_JIT)
def ln_fwd_stream(nch, per, pipe, args):
    for c in range(nch):
        _ln_fwd_rows(c, c + 1, per, pipe, *args)


@njit(parallel=True, **_JIT)
def ln_fwd_stream_par(nch, per, pipe, args):
    for c in prange(nch):
        _ln_fwd_rows(c, c + 1, per, pipe, *args)
