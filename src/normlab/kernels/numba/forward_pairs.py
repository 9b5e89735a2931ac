"""Numba CPU kernels: the RMSNorm and LayerNorm forwards of bfloat16 rows read as 32-bit pairs,
and their drivers (a launch choice, ``Launch.bf16_pairs``; the formulas are those of
:func:`normlab.kernels.numba.kernels._rms_fwd_rows` and ``_ln_fwd_rows``).

Why: as the backward (:mod:`normlab.kernels.numba.backward_pairs`, whose pair conversions these
kernels share), the bfloat16 forward is bound by the vector units on a machine of few cores,
and a share of their work is the widening load (a shuffle and a shift per element) and the
narrowing store. Read as uint32 words, element ``2j`` of a row is the low half of word ``j``
and element ``2j + 1`` the high half, each converted by one integer operation, and ``y`` is
stored a pair per word; the gain (and bias) are split into even and odd halves.

Rows qualify when ``x`` and ``y`` are bfloat16 without a residual, with ``N`` and the row
stride even and 4-byte aligned addresses (:mod:`normlab.kernels.numba.launch` checks); other
calls run the reference kernels. The store tag ``st`` drops the NaN case of the rounding when
the FP32 gain (and bias) hold no NaN or infinity (the launcher checks, as for the backward's
``dx``), so no row is stored twice.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from normlab.kernels.numba.backward_pairs import _U32, _split, hi, lo, pack
from normlab.kernels.numba.bf16 import round_to, rows, vec, vector_width
from normlab.kernels.numba.kernels import _F0, _F1, _JIT, _ln_corrected, _ln_moments, _rms_stat


@njit(inline="always")
def _sumsq(xr, k):
    """FP32 sum of squares of a row of ``k`` pairs."""
    s = _F0
    for j in range(k):
        a, b = lo(xr[j]), hi(xr[j])
        s += a * a + b * b
    return s


@njit(inline="always")
def _rms_row(xr, yr, k, ge, go, rs_, qt, st):
    """``y`` of one row of pairs from its (cached) input row."""
    for j in range(k):
        u = xr[j]
        yr[j] = pack(round_to(lo(u) * rs_, qt) * ge[j], round_to(hi(u) * rs_, qt) * go[j], st)


@njit(**_JIT)
def _rms_fwd_pairs_rows(
    c0, c1, per, pipe, gd, m, n, xp, xs, yp, rstdp, eps, eps_inside, qt, st, vw
):
    r"""RMSNorm forward of chunks ``[c0, c1)`` of bfloat16 rows read as pairs:
    :math:`\mathrm{rstd} = 1/\sqrt{\overline{x^2} + \epsilon}` (or eps outside the root),
    :math:`y = g \cdot q(x\,\mathrm{rstd})`, ``gd`` the FP32 gain as ``(even, odd)`` halves;
    ``pipe`` as in :func:`~normlab.kernels.numba.kernels._rms_fwd_rows` (the loop storing row
    ``i`` sums the squares of row ``i + 1``)."""
    vector_width(vw)
    k = n // 2
    x, y = rows(xp, m, xs // 2, _U32), rows(yp, m, k, _U32)
    rstd, ge, go = vec(rstdp, m), gd[0], gd[1]
    i0, i1 = c0 * per, min(m, c1 * per)
    if i0 >= i1:
        return
    if not pipe:
        for i in range(i0, i1):
            rs_ = _rms_stat(_sumsq(x[i], k), n, eps, eps_inside)
            _rms_row(x[i], y[i], k, ge, go, rs_, qt, st)
            rstd[i] = rs_
        return
    ss = _sumsq(x[i0], k)
    for i in range(i0, i1):
        rs_ = _rms_stat(ss, n, eps, eps_inside)
        rstd[i] = rs_
        xr, yr, xn = x[i], y[i], x[min(i + 1, i1 - 1)]  # the last row streams itself again
        ss = _F0
        for j in range(k):  # written out: see backward_pairs._dx_row_next
            u = xr[j]
            ve, vo = round_to(lo(u) * rs_, qt) * ge[j], round_to(hi(u) * rs_, qt) * go[j]
            yr[j] = pack(ve, vo, st)
            a, b = lo(xn[j]), hi(xn[j])
            ss += a * a + b * b


@njit(inline="always")
def _sums(xr, k):
    """FP32 ``(sum, sum of squares)`` of a row of ``k`` pairs."""
    s = s2 = _F0
    for j in range(k):
        a, b = lo(xr[j]), hi(xr[j])
        s += a + b
        s2 += a * a + b * b
    return s, s2


@njit(inline="always")
def _ln_stats(s, s2, xr, n, eps):
    """``(mean, rstd)`` of a row of pairs, as :func:`~normlab.kernels.numba.kernels._ln_stats`
    (the corrected two-pass variance where the one-pass one would cancel)."""
    mu, var, exact = _ln_moments(s, s2, n)
    if not exact:
        sd = ssd = _F0
        for j in range(n // 2):
            da, db = lo(xr[j]) - mu, hi(xr[j]) - mu
            sd += da + db
            ssd += da * da + db * db
        mu, var = _ln_corrected(mu, sd, ssd, n)
    return mu, _F1 / np.sqrt(var + np.float32(eps))


@njit(inline="always")
def _ln_row(xr, yr, k, wd, bd, mu, rs_, st):
    """``y`` of one row of pairs from its (cached) input row."""
    for j in range(k):
        u = xr[j]
        ve = (lo(u) - mu) * rs_ * wd[0, j] + bd[0, j]
        yr[j] = pack(ve, (hi(u) - mu) * rs_ * wd[1, j] + bd[1, j], st)


@njit(**_JIT)
def _ln_fwd_pairs_rows(c0, c1, per, pipe, wd, bd, m, n, xp, xs, yp, meanp, rstdp, eps, st, vw):
    r"""LayerNorm forward of chunks ``[c0, c1)`` of bfloat16 rows read as pairs:
    :math:`\mu = \bar x`, :math:`\mathrm{rstd} = 1/\sqrt{\overline{(x-\mu)^2} + \epsilon}`,
    :math:`y = (x - \mu)\,\mathrm{rstd}\,w + b`, ``wd``/``bd`` the FP32 weight and bias as
    ``(even, odd)`` halves; ``pipe`` as in :func:`_rms_fwd_pairs_rows`."""
    vector_width(vw)
    k = n // 2
    x, y = rows(xp, m, xs // 2, _U32), rows(yp, m, k, _U32)
    mean, rstd = vec(meanp, m), vec(rstdp, m)
    i0, i1 = c0 * per, min(m, c1 * per)
    if i0 >= i1:
        return
    if not pipe:
        for i in range(i0, i1):
            s, s2 = _sums(x[i], k)
            mu, rs_ = _ln_stats(s, s2, x[i], n, eps)
            _ln_row(x[i], y[i], k, wd, bd, mu, rs_, st)
            mean[i], rstd[i] = mu, rs_
        return
    we, wo, be, bo = wd[0], wd[1], bd[0], bd[1]
    s, s2 = _sums(x[i0], k)
    for i in range(i0, i1):
        xr, yr, xn = x[i], y[i], x[min(i + 1, i1 - 1)]
        mu, rs_ = _ln_stats(s, s2, xr, n, eps)
        s = s2 = _F0
        for j in range(k):
            u = xr[j]
            ve, vo = (lo(u) - mu) * rs_ * we[j] + be[j], (hi(u) - mu) * rs_ * wo[j] + bo[j]
            yr[j] = pack(ve, vo, st)
            a, b = lo(xn[j]), hi(xn[j])
            s += a + b
            s2 += a * a + b * b
        mean[i], rstd[i] = mu, rs_


# Drivers, as kernels.rms_fwd/ln_fwd, with the gain (weight, bias) apart from the kernel's
# args, which are (m, n, xp, xs, yp, rstdp, eps, eps_inside, qt, st) for RMSNorm and (m, n, xp,
# xs, yp, meanp, rstdp, eps, st) for LayerNorm.


@njit(**_JIT)
def rms_fwd_pairs(nch, per, pipe, gp, args):
    gd = _split(gp, args[1])
    for c in range(nch):
        _rms_fwd_pairs_rows(c, c + 1, per, pipe, gd, *args)


@njit(parallel=True, **_JIT)
def rms_fwd_pairs_par(nch, per, pipe, gp, args):
    gd = _split(gp, args[1])
    for c in prange(nch):
        _rms_fwd_pairs_rows(c, c + 1, per, pipe, gd, *args)


@njit(**_JIT)
def ln_fwd_pairs(nch, per, pipe, wp, bp, args):
    wd, bd = _split(wp, args[1]), _split(bp, args[1])
    for c in range(nch):
        _ln_fwd_pairs_rows(c, c + 1, per, pipe, wd, bd, *args)


@njit(parallel=True, **_JIT)
def ln_fwd_pairs_par(nch, per, pipe, wp, bp, args):
    wd, bd = _split(wp, args[1]), _split(bp, args[1])
    for c in prange(nch):
        _ln_fwd_pairs_rows(c, c + 1, per, pipe, wd, bd, *args)
