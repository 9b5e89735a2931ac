"""Numba CPU kernels: the backward of RMSNorm and LayerNorm from the saved input, and the drivers
of every backward (layout and conventions: :mod:`normlab.kernels.numba.kernels`).

A row's backward needs a row reduction (pass 1: dot products, and the dweight/dbias partial
sums) before its ``dx`` (pass 2). ``pipe`` (a launch choice) fuses pass 2 of row ``i`` with
pass 1 of row ``i + 1``, so the next row streams in from memory while this one's ``dx`` is
stored, as the forward does; without it, pass 2 re-reads the row from L1/L2.

``st`` is the store tag of ``dx``: the bfloat16 tag when the FP32 weight holds no NaN or
infinity (checked by the launcher), which drops the NaN case from the bfloat16 store as the
forward does (:func:`~normlab.kernels.numba.bf16.from_f32_of`), else a float32 zero (the exact
store).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from normlab.kernels.numba.bf16 import from_f32_of, round_to, rows, to_f32, vec, vector_width
from normlab.kernels.numba.kernels import _F0, _F1, _JIT, _JIT_NO_FMA, _nan_free
from normlab.kernels.numba.partials import _ln_chunk, _reduce, _rms_chunk

# Rows of at least this many elements run pass 1 of a two-pass LayerNorm backward two rows at a
# time (here and on bfloat16 pairs): their partial sums (16 bytes per element) no longer share
# the L1 cache with the rows, and loading them once per two rows pays; below, they stay in L1 and
# the two rows' extra streams cost more than that saves (measured: docs/kernels.md, "Launch
# choices and the tuner").
TWO_ROWS_MIN_N = 2048


@njit(**_JIT)
def nan_free(gp, n):
    """Whether the float32 vector at ``gp`` holds no NaN nor infinity (the launcher's check)."""
    return _nan_free(vec(gp, n), n)


@njit(inline="always")
def _rms_dot(hr, dyr, g, _, acc, rs_, has_w, qt, n):
    """``sum(g * dy * xhat)`` over the row, adding ``dy * q(xhat)`` to ``acc`` if ``has_w``
    (``_``: see :func:`rms_row_loop`)."""
    dot = _F0
    if has_w:
        for j in range(n):
            xh, gy = to_f32(hr[j]) * rs_, to_f32(dyr[j])
            acc[j] += gy * round_to(xh, qt)
            dot += gy * g[j] * xh
    else:
        for j in range(n):
            dot += to_f32(dyr[j]) * g[j] * (to_f32(hr[j]) * rs_)
    return dot


@njit(inline="always")
def _rms_k(dot, inv_n, rs_, eps, eps_inside):
    """The coefficient of ``xhat`` in ``dh``: ``rstd * c`` (eps inside) or ``c / rms``."""
    cbar = dot * inv_n
    if eps_inside:
        return rs_ * cbar
    rms = _F1 / rs_ - np.float32(eps)
    return cbar / rms if rms > _F0 else _F0


@njit(inline="always")
def _rms_dx(hr, dyr, dhr, dxr, n, g, _, rs_, k, has_dh, tags):
    """``dh`` of one row (pass 2); ``tags = (ht, st)``."""
    ht, st = tags
    if has_dh:
        for j in range(n):
            v = rs_ * (to_f32(dyr[j]) * g[j]) - k * (to_f32(hr[j]) * rs_)
            dxr[j] = from_f32_of(v + to_f32(dhr[j]), ht, st)
    else:
        for j in range(n):
            v = rs_ * (to_f32(dyr[j]) * g[j]) - k * (to_f32(hr[j]) * rs_)
            dxr[j] = from_f32_of(v, ht, st)


@njit(inline="always")
def _rms_dx_next(hr, dyr, dhr, dxr, n, g, _, rs_, k, has_dh, tags, nxt):
    """:func:`_rms_dx` of one row fused with :func:`_rms_dot` of the next, whose dot it returns;
    ``nxt = (h row, dy row, rstd, acc, qt)``; always adds to ``acc``."""
    ht, st = tags
    hn, dyn, rn, acc, qt = nxt
    dot = _F0
    if has_dh:
        for j in range(n):
            v = rs_ * (to_f32(dyr[j]) * g[j]) - k * (to_f32(hr[j]) * rs_)
            dxr[j] = from_f32_of(v + to_f32(dhr[j]), ht, st)
            xh, gy = to_f32(hn[j]) * rn, to_f32(dyn[j])
            acc[j] += gy * round_to(xh, qt)
            dot += gy * g[j] * xh
    else:
        for j in range(n):
            v = rs_ * (to_f32(dyr[j]) * g[j]) - k * (to_f32(hr[j]) * rs_)
            dxr[j] = from_f32_of(v, ht, st)
            xh, gy = to_f32(hn[j]) * rn, to_f32(dyn[j])
            acc[j] += gy * round_to(xh, qt)
            dot += gy * g[j] * xh
    return dot


def rms_row_loop(chunk, dot, dx_row, dx_next):
    r"""The RMSNorm backward's row loop over chunks ``[c0, c1)``, made of its row helpers (this
    module's, or those of :mod:`~normlab.kernels.numba.backward_pairs_rms` on bfloat16 pairs),
    with :math:`\hat x = h\,\mathrm{rstd}`, :math:`\hat g = g \odot dy` and
    :math:`c = \overline{\hat g \hat x}`:

    .. math::
        dh = \mathrm{rstd}\,\hat g - k\,\hat x + dh_{in},\quad
        k = \mathrm{rstd}\,c \;(\epsilon \text{ inside}) \text{ or } c / \sqrt{\overline{h^2}},
        \quad dw_{\text{chunk}} \mathrel{+}= dy \odot q(\hat x)

    (the rounding ``q`` of the llama cast order passes gradients straight through). With
    ``pipe`` (``dx_next``), ``dw`` is summed whether or not ``has_w``. The helpers' parameters
    and the build as in :func:`ln_row_loop` (the gain ``g, g1`` as ``w, w1`` there)."""

    @njit(inline="always")
    def loop(c0, c1, per, pipe, dw, v):
        m, n, k, dy, dh, h, dx, g, g1, rstd, eps, eps_inside, has_dh, has_w, qt, st = v
        inv_n = _F1 / np.float32(n)
        for c in range(c0, c1):
            acc = chunk(dw, c)
            i0, i1 = c * per, min(m, (c + 1) * per)
            d = _F0
            if pipe and i0 < i1:
                d = dot(h[i0], dy[i0], g, g1, acc, rstd[i0], True, qt, k)
            for i in range(i0, i1):
                hr, dyr, dhr, dxr, rs_ = h[i], dy[i], dh[i], dx[i], rstd[i]
                if not pipe:
                    d = dot(hr, dyr, g, g1, acc, rs_, has_w, qt, k)
                kx = _rms_k(d, inv_n, rs_, eps, eps_inside)
                if pipe and i + 1 < i1:
                    nxt = (h[i + 1], dy[i + 1], rstd[i + 1], acc, qt)
                    d = dx_next(hr, dyr, dhr, dxr, k, g, g1, rs_, kx, has_dh, st, nxt)
                else:
                    dx_row(hr, dyr, dhr, dxr, k, g, g1, rs_, kx, has_dh, st)

    return loop


_rms_loop = rms_row_loop(_rms_chunk, _rms_dot, _rms_dx, _rms_dx_next)


@njit(**_JIT)
def _rms_bwd_rows(c0, c1, per, pipe, dw, args):
    """RMSNorm backward of chunks ``[c0, c1)`` (:func:`rms_row_loop`); ``dw`` the partial sums,
    ``(chunks, N)``, or ``(chunks, 1)`` where nothing adds to them."""
    m, n, dyp, dys, dhp, dhs, hp, hs, gp, rstdp, dxp, eps, eps_inside, has_dh, has_w = args[:15]
    dyt, ht, qt, st, vw = args[15:]
    vector_width(vw)
    dy, dh, h = rows(dyp, m, dys, dyt), rows(dhp, m, dhs, ht), rows(hp, m, hs, ht)
    dx, g, rstd = rows(dxp, m, n, ht), vec(gp, n), vec(rstdp, m)
    v = (m, n, n, dy, dh, h, dx, g, g, rstd, eps, eps_inside, has_dh, has_w, qt, (ht, st))
    _rms_loop(c0, c1, per, pipe, dw, v)


@njit(inline="always")
def _ln_acc(hj, dyj, j, accw, accb, w, mu, rs_):
    """Element ``j`` of pass 1: ``dy * xhat`` and ``dy`` added to the partial sums; returns
    ``(xhat, w dy)``."""
    xh, gy = (to_f32(hj) - mu) * rs_, to_f32(dyj)
    accw[j] += gy * xh
    accb[j] += gy
    return xh, gy * w[j]


@njit(inline="always")
def _ln_sums(hr, dyr, w, _, acc, mu, rs_, n):
    """Pass 1 of a LayerNorm row: ``(sum xhat, sum w dy, sum w dy xhat)``, and ``dy * xhat``,
    ``dy`` added to the partial sums ``acc = (dweight, dbias)`` (``_``: see :func:`ln_row_loop`)."""
    accw, accb = acc
    s0 = s1 = s2 = _F0
    for j in range(n):
        xh, gw = _ln_acc(hr[j], dyr[j], j, accw, accb, w, mu, rs_)
        s0 += xh
        s1 += gw
        s2 += gw * xh
    return s0, s1, s2


@njit(inline="always")
def _ln_sums2(h0, dy0, h1, dy1, w, _, acc, st0, st1, n):
    """:func:`_ln_sums` of two rows at once, ``st0``/``st1`` their ``(mean, rstd)``: each
    partial sum is loaded and stored once for both rows."""
    accw, accb = acc
    (m0, r0), (m1, r1) = st0, st1
    s0 = s1 = s2 = t0 = t1 = t2 = _F0
    for j in range(n):
        xa, ga = (to_f32(h0[j]) - m0) * r0, to_f32(dy0[j])
        xb, gb = (to_f32(h1[j]) - m1) * r1, to_f32(dy1[j])
        accw[j] += ga * xa + gb * xb
        accb[j] += ga + gb
        wa, wb = ga * w[j], gb * w[j]
        s0 += xa
        s1 += wa
        s2 += wa * xa
        t0 += xb
        t1 += wb
        t2 += wb * xb
    return (s0, s1, s2), (t0, t1, t2)


@njit(inline="always")
def _ln_coefs(sums, inv_n):
    """``(a, bb)`` of ``dh = rstd (w dy - a - xhat bb)`` from the row's pass-1 sums.

    The formula assumes mean(xhat) = 0, but the FP32 mean is rounded, which shifts every xhat by
    the same rstd-amplified amount; centring xhat on its computed mean m0 cancels that shift
    (eager autograd does it through the mean's own gradient)."""
    s0, s1, s2 = sums
    m0 = s0 * inv_n
    bb = s2 * inv_n - m0 * (s1 * inv_n)
    return s1 * inv_n - m0 * bb, bb


@njit(inline="always")
def _ln_dxj(hj, dyj, wj, mu, rs_, a, bb):
    """``dx`` of one element (before ``dh``) in FP32: ``rstd (w dy - a - xhat bb)``."""
    return rs_ * (to_f32(dyj) * wj - a - (to_f32(hj) - mu) * rs_ * bb)


@njit(inline="always")
def _ln_dx(hr, dyr, dhr, dxr, n, w, _, mu, rs_, coefs, has_dh, tags):
    """``dh`` of one LayerNorm row (pass 2); ``tags = (ht, st)``."""
    ht, st = tags
    a, bb = coefs
    if has_dh:
        for j in range(n):
            v = _ln_dxj(hr[j], dyr[j], w[j], mu, rs_, a, bb)
            dxr[j] = from_f32_of(v + to_f32(dhr[j]), ht, st)
    else:
        for j in range(n):
            dxr[j] = from_f32_of(_ln_dxj(hr[j], dyr[j], w[j], mu, rs_, a, bb), ht, st)


@njit(inline="always")
def _ln_dx_next(hr, dyr, dhr, dxr, n, w, _, mu, rs_, coefs, has_dh, tags, nxt):
    """:func:`_ln_dx` of one row fused with :func:`_ln_sums` of the next, whose sums it
    returns; ``nxt = (h row, dy row, mean, rstd, (accw, accb))``.

    One loop per ``has_dh`` case, as in every ``dx`` helper: with the test inside, LLVM left it
    there on AVX2, and the if-converted loop's conditional 16-bit loads (which AVX2 lacks) made
    it keep the loop scalar, several times slower (docs/benchmarks.md)."""
    ht, st = tags
    hn, dyn, mn, rn, (accw, accb) = nxt
    a, bb = coefs
    s0 = s1 = s2 = _F0
    if has_dh:
        for j in range(n):
            v = _ln_dxj(hr[j], dyr[j], w[j], mu, rs_, a, bb)
            dxr[j] = from_f32_of(v + to_f32(dhr[j]), ht, st)
            xn, gw = _ln_acc(hn[j], dyn[j], j, accw, accb, w, mn, rn)
            s0 += xn
            s1 += gw
            s2 += gw * xn
    else:
        for j in range(n):
            dxr[j] = from_f32_of(_ln_dxj(hr[j], dyr[j], w[j], mu, rs_, a, bb), ht, st)
            xn, gw = _ln_acc(hn[j], dyn[j], j, accw, accb, w, mn, rn)
            s0 += xn
            s1 += gw
            s2 += gw * xn
    return s0, s1, s2


def ln_row_loop(chunk, sums2, sums, dx_row, dx_next):
    r"""The LayerNorm backward's row loop over chunks ``[c0, c1)``, made of its row helpers (this
    module's, or those of :mod:`~normlab.kernels.numba.backward_pairs` on bfloat16
    pairs), with :math:`\hat x = (h-\mu)\,\mathrm{rstd}` and :math:`\hat g = w \odot dy`:

    .. math::
        dh = \mathrm{rstd}\,(\hat g - \overline{\hat g} - \hat x\,\overline{\hat g \hat x})
        + dh_{in},\quad dw_{\text{chunk}} \mathrel{+}= dy \odot \hat x,\quad
        db_{\text{chunk}} \mathrel{+}= dy

    with :math:`\hat x` centred on its computed mean in the two row means (:func:`_ln_coefs`).
    With ``pipe``, pass 2 of row ``i`` (``dx_next``) sums row ``i + 1`` (pass 1) as it goes.
    Without ``pipe`` and from :data:`TWO_ROWS_MIN_N` elements, pass 1 runs over two rows at once
    (``sums2``): the partial sums, 16 bytes of loads and stores per element and row, are then
    loaded and stored once per two rows.

    ``v`` holds the caller's views, unpacked on the loop's first line. The helpers take the
    weight as ``w, w1`` (here the vector twice, the second unused; on pairs the even and odd
    halves, which passed to the helpers as one tuple compiled to other vector code), the partial
    sums ``acc`` as ``chunk`` lays them out, rows of ``k`` elements or pairs, and ``st``, how
    ``dx`` is stored. Inlined into its caller, the loop is built with the caller's options; Numba
    reads the helpers (closure variables) as globals: direct calls, inlined."""

    @njit(inline="always")
    def loop(c0, c1, per, pipe, dw, db, v):
        m, n, k, dy, dh, h, dx, w, w1, mean, rstd, has_dh, st = v
        inv_n = _F1 / np.float32(n)
        for c in range(c0, c1):
            acc = chunk(dw, db, c)
            i0, i1 = c * per, min(m, (c + 1) * per)
            if not pipe and n >= TWO_ROWS_MIN_N:  # two rows a step; an odd last row alone below
                for i in range(i0, i1 - 1, 2):
                    st0, st1 = (mean[i], rstd[i]), (mean[i + 1], rstd[i + 1])
                    both = sums2(h[i], dy[i], h[i + 1], dy[i + 1], w, w1, acc, st0, st1, k)
                    for r in (i, i + 1):  # (a tuple of (row, sums) pairs trips parfor analysis)
                        coefs = _ln_coefs(both[r - i], inv_n)
                        dx_row(
                            h[r], dy[r], dh[r], dx[r], k, w, w1, mean[r], rstd[r], coefs, has_dh, st
                        )
                i0 += max(0, i1 - i0) // 2 * 2
            s = (_F0, _F0, _F0)
            if pipe and i0 < i1:
                s = sums(h[i0], dy[i0], w, w1, acc, mean[i0], rstd[i0], k)
            for i in range(i0, i1):
                hr, dyr, dhr, dxr, mu, rs_ = h[i], dy[i], dh[i], dx[i], mean[i], rstd[i]
                if not pipe:
                    s = sums(hr, dyr, w, w1, acc, mu, rs_, k)
                coefs = _ln_coefs(s, inv_n)
                if pipe and i + 1 < i1:
                    nxt = (h[i + 1], dy[i + 1], mean[i + 1], rstd[i + 1], acc)
                    s = dx_next(hr, dyr, dhr, dxr, k, w, w1, mu, rs_, coefs, has_dh, st, nxt)
                else:
                    dx_row(hr, dyr, dhr, dxr, k, w, w1, mu, rs_, coefs, has_dh, st)

    return loop


_ln_loop = ln_row_loop(_ln_chunk, _ln_sums2, _ln_sums, _ln_dx, _ln_dx_next)


@njit(**_JIT_NO_FMA)
def _ln_bwd_rows(c0, c1, per, pipe, dw, db, args):
    """LayerNorm backward of chunks ``[c0, c1)`` (:func:`ln_row_loop`); ``dw``/``db`` the
    partial sums, ``(chunks, N)``. Built without FMA contraction (``_JIT_NO_FMA``): the
    one-element row's ``w dy - mean(w dy)`` must be exactly 0."""
    m, n, dyp, dys, dhp, dhs, hp, hs, wp, meanp, rstdp, dxp, has_dh, dyt, ht, st, vw = args
    vector_width(vw)
    dy, dh, h = rows(dyp, m, dys, dyt), rows(dhp, m, dhs, ht), rows(hp, m, hs, ht)
    dx, w = rows(dxp, m, n, ht), vec(wp, n)
    mean, rstd = vec(meanp, m), vec(rstdp, m)
    v = (m, n, n, dy, dh, h, dx, w, w, mean, rstd, has_dh, (ht, st))
    _ln_loop(c0, c1, per, pipe, dw, db, v)


# Drivers: what the launcher calls, once per op. They run the row kernels over all chunks, on
# this thread or on Numba's threads (static schedule: each thread gets a contiguous run of
# chunks), own the chunk partial sums of dweight/dbias and reduce them in chunk order
# (normlab.kernels.numba.partials).


@njit(**_JIT)
def rms_bwd(nch, per, pipe, nw, args, dwo):
    """RMSNorm backward of all chunks on this thread; ``dweight`` (``nw`` = N or 0: the partial
    sums' width) to ``dwo`` (0: not wanted)."""
    dw = np.empty((nch, max(nw, 1)), np.float32)
    _rms_bwd_rows(0, nch, per, pipe, dw, args)
    _reduce(dw, dwo)


@njit(parallel=True, **_JIT)
def rms_bwd_par(nch, per, pipe, nw, args, dwo):
    dw = np.empty((nch, max(nw, 1)), np.float32)
    for c in prange(nch):
        _rms_bwd_rows(c, c + 1, per, pipe, dw, args)
    _reduce(dw, dwo)


@njit(**_JIT)
def ln_bwd(nch, per, pipe, n, args, dwo, dbo):
    """LayerNorm backward of all chunks on this thread; ``dweight``/``dbias`` to ``dwo``/``dbo``
    (0: not wanted)."""
    dw, db = np.empty((nch, n), np.float32), np.empty((nch, n), np.float32)
    _ln_bwd_rows(0, nch, per, pipe, dw, db, args)
    _reduce(dw, dwo)
    _reduce(db, dbo)


@njit(parallel=True, **_JIT)
def ln_bwd_par(nch, per, pipe, n, args, dwo, dbo):
    dw, db = np.empty((nch, n), np.float32), np.empty((nch, n), np.float32)
    for c in prange(nch):
        _ln_bwd_rows(c, c + 1, per, pipe, dw, db, args)
    _reduce(dw, dwo)
    _reduce(db, dbo)
