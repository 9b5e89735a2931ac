"""Numba CPU kernels: the memory-efficient backwards of RMSNorm and LayerNorm, from the forward's
output, and their drivers (layout and conventions: :mod:`normlab.kernels.numba.kernels`).

The same formulas as :mod:`normlab.kernels.numba.backward` with xhat recovered from the output,
``xhat = (y - b) * (1 / g)`` (``gi`` is 1/g, computed once on the host), so no input of the row's
size was saved. Kernels of their own: the default backwards stay the code they are.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from normlab.kernels.numba.bf16 import from_f32, round_to, rows, to_f32, vec, vector_width
from normlab.kernels.numba.kernels import _F0, _F1, _JIT, _JIT_NO_FMA
from normlab.kernels.numba.partials import _reduce


@njit(**_JIT)
def _rms_bwd_y_rows(c0, c1, per, dw, args):
    r"""RMSNorm backward of chunks ``[c0, c1)`` from ``y``: :math:`\hat x = q(y / g)`, where
    ``q`` rounds to h's dtype for the llama/none orders (``qt``): it recovers the rounded xhat
    those orders multiplied by g exactly (y's rounding is at most half a unit of it), the one
    dweight needs. Then as :func:`~normlab.kernels.numba.backward.rms_row_loop`; eps outside
    takes :math:`\sqrt{\overline{h^2}} = \sqrt{\overline{\hat x^2}} / \mathrm{rstd}`."""
    m, n, dyp, dys, dhp, dhs, yp, ys, gp, gip, rstdp, dxp, eps_inside, has_dh, has_w = args[:15]
    dyt, yt, ht, qt, vw = args[15:]
    vector_width(vw)
    dy, dh, y = rows(dyp, m, dys, dyt), rows(dhp, m, dhs, ht), rows(yp, m, ys, yt)
    dx, g, gi, rstd = rows(dxp, m, n, ht), vec(gp, n), vec(gip, n), vec(rstdp, m)
    inv_n = _F1 / np.float32(n)
    for c in range(c0, c1):
        acc = dw[c]
        acc[:] = _F0
        for i in range(c * per, min(m, (c + 1) * per)):
            yr, dyr, dxr, rs_ = y[i], dy[i], dx[i], rstd[i]
            dot = ss = _F0
            for j in range(n):
                xh, gy = round_to(to_f32(yr[j]) * gi[j], qt), to_f32(dyr[j])
                if has_w:
                    acc[j] += gy * xh
                dot += gy * g[j] * xh
                ss += xh * xh
            cbar = dot * inv_n
            if eps_inside:
                k = rs_ * cbar
            else:
                rms = np.sqrt(ss * inv_n) / rs_
                k = cbar / rms if rms > _F0 else _F0
            for j in range(n):
                v = rs_ * (to_f32(dyr[j]) * g[j]) - k * round_to(to_f32(yr[j]) * gi[j], qt)
                if has_dh:
                    v += to_f32(dh[i, j])
                dxr[j] = from_f32(v, ht)


@njit(**_JIT_NO_FMA)
def _ln_bwd_y_rows(c0, c1, per, dw, db, args):
    r"""LayerNorm backward of chunks ``[c0, c1)`` from ``y``: :math:`\hat x = (y - b) / w`,
    then as :func:`~normlab.kernels.numba.backward.ln_row_loop` (xhat centred on its computed
    mean; no mean needed)."""
    m, n, dyp, dys, dhp, dhs, yp, ys, wp, bp, wip, rstdp, dxp, has_dh, dyt, yt, ht, vw = args
    vector_width(vw)
    dy, dh, y = rows(dyp, m, dys, dyt), rows(dhp, m, dhs, ht), rows(yp, m, ys, yt)
    dx, w, b, wi = rows(dxp, m, n, ht), vec(wp, n), vec(bp, n), vec(wip, n)
    rstd = vec(rstdp, m)
    inv_n = _F1 / np.float32(n)
    for c in range(c0, c1):
        accw, accb = dw[c], db[c]
        accw[:] = _F0
        accb[:] = _F0
        for i in range(c * per, min(m, (c + 1) * per)):
            yr, dyr, dxr, rs_ = y[i], dy[i], dx[i], rstd[i]
            s0 = s1 = s2 = _F0
            for j in range(n):
                xh, gy = (to_f32(yr[j]) - b[j]) * wi[j], to_f32(dyr[j])
                accw[j] += gy * xh
                accb[j] += gy
                gw = gy * w[j]
                s0 += xh
                s1 += gw
                s2 += gw * xh
            m0 = s0 * inv_n
            bb = s2 * inv_n - m0 * (s1 * inv_n)
            a = s1 * inv_n - m0 * bb
            for j in range(n):
                xh = (to_f32(yr[j]) - b[j]) * wi[j]
                v = rs_ * (to_f32(dyr[j]) * w[j] - a - xh * bb)
                if has_dh:
                    v += to_f32(dh[i, j])
                dxr[j] = from_f32(v, ht)


@njit(**_JIT)
def rms_bwd_y(nch, per, nw, args, dwo):
    """The memory-efficient RMSNorm backward on this thread (as :func:`rms_bwd`)."""
    dw = np.empty((nch, max(nw, 1)), np.float32)
    _rms_bwd_y_rows(0, nch, per, dw, args)
    _reduce(dw, dwo)


@njit(parallel=True, **_JIT)
def rms_bwd_y_par(nch, per, nw, args, dwo):
    dw = np.empty((nch, max(nw, 1)), np.float32)
    for c in prange(nch):
        _rms_bwd_y_rows(c, c + 1, per, dw, args)
    _reduce(dw, dwo)


@njit(**_JIT)
def ln_bwd_y(nch, per, n, args, dwo, dbo):
    """The memory-efficient LayerNorm backward on this thread (as :func:`ln_bwd`)."""
    dw, db = np.empty((nch, n), np.float32), np.empty((nch, n), np.float32)
    _ln_bwd_y_rows(0, nch, per, dw, db, args)
    _reduce(dw, dwo)
    _reduce(db, dbo)


@njit(parallel=True, **_JIT)
def ln_bwd_y_par(nch, per, n, args, dwo, dbo):
    dw, db = np.empty((nch, n), np.float32), np.empty((nch, n), np.float32)
    for c in prange(nch):
        _ln_bwd_y_rows(c, c + 1, per, dw, db, args)
    _reduce(dw, dwo)
    _reduce(db, dbo)
