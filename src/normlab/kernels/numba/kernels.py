"""Numba CPU kernels for RMSNorm and LayerNorm, forward and backward, with a fused residual add.

Layout every kernel shares (host side in :mod:`normlab.kernels.numba.launch`):

- a 2-D ``(M, N)`` tensor arrives as ``(address, row stride, dtype tag)`` and is viewed in place
  (:func:`~normlab.kernels.numba.bf16.rows`), so any row stride is read without a copy; outputs
  are contiguous; weight-sized vectors and statistics are float32;
- float32 elements are used as is, bfloat16 ones as ``uint16`` bits converted on load and
  rounded to nearest even on store; all math and accumulation is FP32;
- each row is streamed from memory once; later passes over it re-read it from L1/L2 instead of
  keeping an FP32 copy (a scratch row costs a store and a load per element and a pass);
- rows are cut into ``nch`` fixed chunks of ``per`` rows; a chunk owns one row of the FP32
  ``dweight``/``dbias`` partial sums, added in chunk order afterwards: no atomics, and the same
  bits whatever the thread count;
- a missing weight/bias is a vector of ones/zeros (multiplying by one and adding zero are
  exact), so each loop exists once, not once per flag combination.

``*_rows(c0, c1, per, ...)`` computes chunks ``[c0, c1)``. The launcher runs all chunks through
the ``*_par`` drivers on Numba's OpenMP threads (one thread for small tensors, where handing work
to a second costs more than it saves; a Python thread pool costs more than a small norm); their
one-thread twins ``rms_fwd``, ``ln_fwd``, ``rms_bwd``, ``ln_bwd`` serve where the pool must not be
used. The GIL is released throughout.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from normlab.kernels.numba.bf16 import from_f32, from_f32_of, round_to, rows, to_f32, vec

# reassoc lets LLVM vectorize the FP32 row sums (a fixed order per build, so still
# deterministic); no nnan/ninf, so NaN and inf propagate like the reference. The numpy error
# model makes 1/0 an inf (eps=0 on a zero row) instead of Python's ZeroDivisionError.
_JIT = {
    "cache": True,
    "nogil": True,
    "error_model": "numpy",
    "fastmath": {"reassoc", "contract"},
}
# The LayerNorm backward subtracts the row mean of ``w * dy`` from each ``w * dy``: contracting
# one of them into an FMA leaves the product's rounding error, times rstd, where the difference
# is exactly zero (a one-element row, whose dx is 0, by up to 1/sqrt(eps) ulps of w * dy).
_JIT_NO_FMA = {**_JIT, "fastmath": {"reassoc"}}
_F0 = np.float32(0.0)
_F1 = np.float32(1.0)

# What q rounds x * rstd to (the llama/none cast orders round it to h's dtype before the gain):
# a zero of the type the kernels specialize on; int16 stands for float16 (FP32 rows in the kernel).
Q_NONE, Q_BF16, Q_F16 = np.float32(0), np.uint16(0), np.int16(0)


@njit(inline="always")
def _sumsq(src, n):
    """FP32 sum of squares of the first ``n`` elements of a row."""
    s = _F0
    for j in range(n):
        v = to_f32(src[j])
        s += v * v
    return s


@njit(inline="always")
def _add(xv, rv, ht):
    """``h = x + r`` rounded to ``h``'s dtype: ``(stored element, its FP32 value)``."""
    q = from_f32_of(to_f32(xv) + to_f32(rv), ht, xv)
    return q, to_f32(q)


@njit(inline="always")
def _add_sumsq(xr, rr, hr, n, ht):
    """``hr = x + r`` (rounded), and the FP32 sum of squares of that ``h``."""
    s = _F0
    for j in range(n):
        hr[j], v = _add(xr[j], rr[j], ht)
        s += v * v
    return s


@njit(inline="always")
def _rms_stat(ss, n, eps, eps_inside):
    """``rstd = 1/sqrt(ss/N + eps)`` (eps inside) or ``1/(sqrt(ss/N) + eps)``, in FP32."""
    ms = ss * (_F1 / np.float32(n))
    if eps_inside:
        return _F1 / np.sqrt(ms + np.float32(eps))
    return _F1 / (np.sqrt(ms) + np.float32(eps))


@njit(inline="always")
def _rms_y(hv, rs_, gj, qt):
    """One output element ``g * q(h * rstd)`` in FP32."""
    return round_to(to_f32(hv) * rs_, qt) * gj


@njit(inline="always")
def _nan_free(v, n):
    """Whether a float32 vector holds no NaN (nor infinity: ``inf * 0`` is a NaN too)."""
    t = _F0
    for j in range(n):
        t += v[j] * _F0
    return t == _F0


@njit(**_JIT)
def _rms_fwd_rows(
    c0, c1, per, m, n, xp, xs, rp, rs, hp, yp, gp, rstdp, eps, eps_inside, has_res, xt, ht, yt, qt
):
    r"""RMSNorm forward of the rows of chunks ``[c0, c1)``:
    :math:`h = x + r`, :math:`\mathrm{rstd} = 1/\sqrt{\overline{h^2} + \epsilon}`,
    :math:`y = g \cdot q(h\,\mathrm{rstd})` with ``g = offset + weight`` and ``q`` rounding to
    ``h``'s dtype for the llama/none cast orders (``qt``; none for gemma).

    Software-pipelined: the loop writing row ``i`` also streams row ``i + 1`` in from memory
    (its sum of squares, and with ``has_res`` its ``h``), so the DRAM reads overlap the
    arithmetic of the stores (faster at large shapes than two separate passes).
    bfloat16 ``y`` is stored without the NaN case (:func:`~normlab.kernels.numba.bf16.from_f32_of`);
    a gain holding a NaN could bring a payload that needs it, and then the rows are redone."""
    x, r, h = rows(xp, m, xs, xt), rows(rp, m, rs, ht), rows(hp, m, n, ht)
    y, g, rstd = rows(yp, m, n, yt), vec(gp, n), vec(rstdp, m)
    i0, i1 = c0 * per, min(m, c1 * per)
    if i0 >= i1:
        return
    if has_res:
        ss = _add_sumsq(x[i0], r[i0], h[i0], n, ht)
    else:
        ss = _sumsq(x[i0], n)
    for i in range(i0, i1):
        rs_ = _rms_stat(ss, n, eps, eps_inside)
        rstd[i] = rs_
        # the next row; the last row streams itself again (its h rewritten with the same bits)
        yr, nxt = y[i], min(i + 1, i1 - 1)
        ss = _F0
        if has_res:
            hr, xn, rn, hn = h[i], x[nxt], r[nxt], h[nxt]
            for j in range(n):
                yr[j] = from_f32_of(_rms_y(hr[j], rs_, g[j], qt), yt, hr[j])
                hn[j], v = _add(xn[j], rn[j], ht)
                ss += v * v
        else:
            xr, xn = x[i], x[nxt]
            for j in range(n):
                yr[j] = from_f32_of(_rms_y(xr[j], rs_, g[j], qt), yt, xr[j])
                v = to_f32(xn[j])
                ss += v * v
    if not _nan_free(g, n):  # the stores above assumed no NaN payload from g: redo them
        if has_res:
            _rms_y_exact(h, y, g, rstd, i0, i1, n, qt, yt)
        else:
            _rms_y_exact(x, y, g, rstd, i0, i1, n, qt, yt)


@njit(inline="always")
def _rms_y_exact(src, y, g, rstd, i0, i1, n, qt, yt):
    """Rows ``[i0, i1)`` of ``y`` again, with the NaN-exact store (a NaN or inf in the gain)."""
    for i in range(i0, i1):
        sr, yr, rs_ = src[i], y[i], rstd[i]
        for j in range(n):
            yr[j] = from_f32(_rms_y(sr[j], rs_, g[j], qt), yt)


@njit(inline="always")
def _rms_dot(hr, dyr, acc, n, rs_, g, has_w, qt):
    """``sum(g * dy * xhat)`` over the row, adding ``dy * q(xhat)`` to ``acc`` if ``has_w``."""
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


@njit(**_JIT)
def _rms_bwd_rows(
    c0,
    c1,
    per,
    dw,
    m,
    n,
    dyp,
    dys,
    dhp,
    dhs,
    hp,
    hs,
    gp,
    rstdp,
    dxp,
    eps,
    eps_inside,
    has_dh,
    has_w,
    dyt,
    ht,
    qt,
):
    r"""RMSNorm backward of chunks ``[c0, c1)``, with :math:`\hat x = h\,\mathrm{rstd}`,
    :math:`\hat g = g \odot dy` and :math:`c = \overline{\hat g \hat x}`:

    .. math::
        dh = \mathrm{rstd}\,\hat g - k\,\hat x + dh_{in},\quad
        k = \mathrm{rstd}\,c \;(\epsilon \text{ inside}) \text{ or } c / \sqrt{\overline{h^2}},
        \quad dw_{\text{chunk}} \mathrel{+}= dy \odot q(\hat x)

    (the rounding ``q`` of the llama cast order passes gradients straight through).
    """
    dy, dh, h = rows(dyp, m, dys, dyt), rows(dhp, m, dhs, ht), rows(hp, m, hs, ht)
    dx, g, rstd = rows(dxp, m, n, ht), vec(gp, n), vec(rstdp, m)
    for c in range(c0, c1):
        acc = dw[c]
        acc[:] = _F0
        for i in range(c * per, min(m, (c + 1) * per)):
            hr, dyr, dxr, rs_ = h[i], dy[i], dx[i], rstd[i]
            cbar = _rms_dot(hr, dyr, acc, n, rs_, g, has_w, qt) * (_F1 / np.float32(n))
            if eps_inside:
                k = rs_ * cbar
            else:
                rms = _F1 / rs_ - np.float32(eps)
                k = cbar / rms if rms > _F0 else _F0
            if has_dh:
                dhr = dh[i]
                for j in range(n):
                    v = rs_ * (to_f32(dyr[j]) * g[j]) - k * (to_f32(hr[j]) * rs_)
                    dxr[j] = from_f32(v + to_f32(dhr[j]), ht)
            else:
                for j in range(n):
                    v = rs_ * (to_f32(dyr[j]) * g[j]) - k * (to_f32(hr[j]) * rs_)
                    dxr[j] = from_f32(v, ht)


@njit(inline="always")
def _sums(src, n):
    """FP32 ``(sum, sum of squares)`` of a row."""
    s = s2 = _F0
    for j in range(n):
        v = to_f32(src[j])
        s += v
        s2 += v * v
    return s, s2


@njit(inline="always")
def _add_sums(xr, rr, hr, n, ht):
    """``hr = x + r`` (rounded), and the FP32 ``(sum, sum of squares)`` of that ``h``."""
    s = s2 = _F0
    for j in range(n):
        hr[j], v = _add(xr[j], rr[j], ht)
        s += v
        s2 += v * v
    return s, s2


@njit(inline="always")
def _ln_stats(s, s2, src, n, eps):
    """``(mean, rstd)`` of a row from its one-pass sums, or from a second pass over the row when
    ``E[h²] - mean²`` would cancel: one pass is exact enough only while ``mean² <= var / 8``
    (its error is that of a two-pass variance times ``1 + mean²/var``), and not at all when the
    sum of squares overflowed (or a NaN/inf is in the row).

    The second pass is the corrected two-pass algorithm: the mean ``c`` of the deviations from
    the FP32 mean corrects the mean (whose rounding, times rstd, would shift every output, and
    make a constant row's output nonzero) and the variance. The mean is ``s / N``, not
    ``s * (1/N)``: a constant row of representable values then has its exact mean."""
    fn = np.float32(n)
    mu = s / fn
    var = s2 / fn - mu * mu
    if not (var < np.float32(np.inf) and mu * mu <= var * np.float32(0.125)):
        sd = var = _F0
        for j in range(n):
            d = to_f32(src[j]) - mu
            sd += d
            var += d * d
        c = sd / fn
        mu += c
        var = max(var / fn - c * c, _F0)
    return mu, _F1 / np.sqrt(var + np.float32(eps))


@njit(inline="always")
def _ln_y(hv, mu, rs_, wj, bj):
    """One output element ``(h - mean) * rstd * w + b`` in FP32."""
    return (to_f32(hv) - mu) * rs_ * wj + bj


@njit(inline="always")
def _ln_y_exact(src, y, w, b, mean, rstd, i0, i1, n, ht):
    """Rows ``[i0, i1)`` of ``y`` again, with the NaN-exact store (a NaN or inf in w or b)."""
    for i in range(i0, i1):
        sr, yr, mu, rs_ = src[i], y[i], mean[i], rstd[i]
        for j in range(n):
            yr[j] = from_f32(_ln_y(sr[j], mu, rs_, w[j], b[j]), ht)


@njit(**_JIT)
def _ln_fwd_rows(
    c0, c1, per, m, n, xp, xs, rp, rs, hp, yp, wp, bp, meanp, rstdp, eps, has_res, xt, ht
):
    r"""LayerNorm forward of chunks ``[c0, c1)``, FP32 statistics of the row:
    :math:`\mu = \bar h`, :math:`\mathrm{rstd} = 1/\sqrt{\overline{(h-\mu)^2} + \epsilon}`,
    :math:`y = (h - \mu)\,\mathrm{rstd}\,w + b` (``y`` in ``h``'s dtype).

    Pipelined and stored like :func:`_rms_fwd_rows`: the loop writing row ``i`` streams in row
    ``i + 1`` (its sums, and with ``has_res`` its ``h``); see :func:`_ln_stats` for the
    variance."""
    x, r, h = rows(xp, m, xs, xt), rows(rp, m, rs, ht), rows(hp, m, n, ht)
    y, w, b = rows(yp, m, n, ht), vec(wp, n), vec(bp, n)
    mean, rstd = vec(meanp, m), vec(rstdp, m)
    i0, i1 = c0 * per, min(m, c1 * per)
    if i0 >= i1:
        return
    if has_res:
        s, s2 = _add_sums(x[i0], r[i0], h[i0], n, ht)
    else:
        s, s2 = _sums(x[i0], n)
    for i in range(i0, i1):
        yr, nxt = y[i], min(i + 1, i1 - 1)  # the last row streams itself again
        if has_res:
            hr, xn, rn, hn = h[i], x[nxt], r[nxt], h[nxt]
            mu, rs_ = _ln_stats(s, s2, hr, n, eps)
            s = s2 = _F0
            for j in range(n):
                yr[j] = from_f32_of(_ln_y(hr[j], mu, rs_, w[j], b[j]), ht, hr[j])
                hn[j], v = _add(xn[j], rn[j], ht)
                s += v
                s2 += v * v
        else:
            xr, xn = x[i], x[nxt]
            mu, rs_ = _ln_stats(s, s2, xr, n, eps)
            s = s2 = _F0
            for j in range(n):
                yr[j] = from_f32_of(_ln_y(xr[j], mu, rs_, w[j], b[j]), ht, xr[j])
                v = to_f32(xn[j])
                s += v
                s2 += v * v
        mean[i], rstd[i] = mu, rs_
    if not (_nan_free(w, n) and _nan_free(b, n)):  # as in _rms_fwd_rows
        if has_res:
            _ln_y_exact(h, y, w, b, mean, rstd, i0, i1, n, ht)
        else:
            _ln_y_exact(x, y, w, b, mean, rstd, i0, i1, n, ht)


@njit(**_JIT_NO_FMA)
def _ln_bwd_rows(
    c0, c1, per, dw, db, m, n, dyp, dys, dhp, dhs, hp, hs, wp, meanp, rstdp, dxp, has_dh, dyt, ht
):
    r"""LayerNorm backward of chunks ``[c0, c1)``, with :math:`\hat x = (h-\mu)\,\mathrm{rstd}`
    and :math:`\hat g = w \odot dy`:

    .. math::
        dh = \mathrm{rstd}\,(\hat g - \overline{\hat g} - \hat x\,\overline{\hat g \hat x})
        + dh_{in},\quad dw_{\text{chunk}} \mathrel{+}= dy \odot \hat x,\quad
        db_{\text{chunk}} \mathrel{+}= dy

    with :math:`\hat x` centred on its computed mean in the two row means (see below). Built
    without FMA contraction (``_JIT_NO_FMA``).
    """
    dy, dh, h = rows(dyp, m, dys, dyt), rows(dhp, m, dhs, ht), rows(hp, m, hs, ht)
    dx, w = rows(dxp, m, n, ht), vec(wp, n)
    mean, rstd = vec(meanp, m), vec(rstdp, m)
    inv_n = _F1 / np.float32(n)
    for c in range(c0, c1):
        accw, accb = dw[c], db[c]
        accw[:] = _F0
        accb[:] = _F0
        for i in range(c * per, min(m, (c + 1) * per)):
            hr, dyr, dxr, mu, rs_ = h[i], dy[i], dx[i], mean[i], rstd[i]
            s0 = _F0
            s1 = _F0
            s2 = _F0
            for j in range(n):
                xh, gy = (to_f32(hr[j]) - mu) * rs_, to_f32(dyr[j])
                accw[j] += gy * xh
                accb[j] += gy
                gw = gy * w[j]
                s0 += xh
                s1 += gw
                s2 += gw * xh
            # The formula assumes mean(xhat) = 0, but the FP32 mean is rounded, which shifts
            # every xhat by the same rstd-amplified amount; centring xhat on its computed mean
            # m0 cancels that shift (eager autograd does it through the mean's own gradient).
            m0 = s0 * inv_n
            bb = s2 * inv_n - m0 * (s1 * inv_n)
            a = s1 * inv_n - m0 * bb
            if has_dh:
                dhr = dh[i]
                for j in range(n):
                    xh = (to_f32(hr[j]) - mu) * rs_
                    v = rs_ * (to_f32(dyr[j]) * w[j] - a - xh * bb)
                    dxr[j] = from_f32(v + to_f32(dhr[j]), ht)
            else:
                for j in range(n):
                    xh = (to_f32(hr[j]) - mu) * rs_
                    dxr[j] = from_f32(rs_ * (to_f32(dyr[j]) * w[j] - a - xh * bb), ht)


# The memory-efficient backwards: the same formulas with xhat recovered from the forward's
# output, ``xhat = (y - b) * (1 / g)`` (``gi`` is 1/g, computed once on the host), so no input
# of the row's size was saved. Kernels of their own: the default backwards stay the code they
# were, bit for bit and cycle for cycle.


@njit(**_JIT)
def _rms_bwd_y_rows(
    c0,
    c1,
    per,
    dw,
    m,
    n,
    dyp,
    dys,
    dhp,
    dhs,
    yp,
    ys,
    gp,
    gip,
    rstdp,
    dxp,
    eps_inside,
    has_dh,
    has_w,
    dyt,
    yt,
    ht,
    qt,
):
    r"""RMSNorm backward of chunks ``[c0, c1)`` from ``y``: :math:`\hat x = q(y / g)`, where
    ``q`` rounds to h's dtype for the llama/none orders (``qt``): it recovers the rounded xhat
    those orders multiplied by g exactly (y's rounding is at most half a unit of it), the one
    dweight needs. Then as :func:`_rms_bwd_rows`; eps outside takes :math:`\sqrt{\overline{h^2}} =
    \sqrt{\overline{\hat x^2}} / \mathrm{rstd}`."""
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
def _ln_bwd_y_rows(
    c0,
    c1,
    per,
    dw,
    db,
    m,
    n,
    dyp,
    dys,
    dhp,
    dhs,
    yp,
    ys,
    wp,
    bp,
    wip,
    rstdp,
    dxp,
    has_dh,
    dyt,
    yt,
    ht,
):
    r"""LayerNorm backward of chunks ``[c0, c1)`` from ``y``: :math:`\hat x = (y - b) / w`,
    then as :func:`_ln_bwd_rows` (xhat centred on its computed mean; no mean needed)."""
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


# Drivers: what the launcher calls, once per op. They run the row kernels over all chunks, on
# this thread or on Numba's threads (static schedule: each thread gets a contiguous run of
# chunks), and every row is computed by the same code either way: the forward ones call the
# pipelined kernel one chunk at a time (it treats a chunk's first row apart), the backward ones
# own the chunk partial sums of dweight/dbias and reduce them in chunk order.


@njit(**_JIT)
def rms_fwd(nch, per, args):
    for c in range(nch):  # chunk by chunk, as the threads do: the same bits either way
        _rms_fwd_rows(c, c + 1, per, *args)


@njit(parallel=True, **_JIT)
def rms_fwd_par(nch, per, args):
    for c in prange(nch):
        _rms_fwd_rows(c, c + 1, per, *args)


@njit(**_JIT)
def ln_fwd(nch, per, args):
    for c in range(nch):
        _ln_fwd_rows(c, c + 1, per, *args)


@njit(parallel=True, **_JIT)
def ln_fwd_par(nch, per, args):
    for c in prange(nch):
        _ln_fwd_rows(c, c + 1, per, *args)


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


@njit(**_JIT)
def rms_bwd(nch, per, nw, args, dwo):
    """RMSNorm backward of all chunks on this thread; ``dweight`` (``nw`` = N or 0) to ``dwo``."""
    dw = np.empty((nch, max(nw, 1)), np.float32)
    _rms_bwd_rows(0, nch, per, dw, *args)
    _reduce(dw, dwo)


@njit(parallel=True, **_JIT)
def rms_bwd_par(nch, per, nw, args, dwo):
    dw = np.empty((nch, max(nw, 1)), np.float32)
    for c in prange(nch):
        _rms_bwd_rows(c, c + 1, per, dw, *args)
    _reduce(dw, dwo)


@njit(**_JIT)
def ln_bwd(nch, per, n, args, dwo, dbo):
    """LayerNorm backward of all chunks on this thread; ``dweight``/``dbias`` to ``dwo``/``dbo``
    (0: not wanted)."""
    dw, db = np.empty((nch, n), np.float32), np.empty((nch, n), np.float32)
    _ln_bwd_rows(0, nch, per, dw, db, *args)
    _reduce(dw, dwo)
    _reduce(db, dbo)


@njit(parallel=True, **_JIT)
def ln_bwd_par(nch, per, n, args, dwo, dbo):
    dw, db = np.empty((nch, n), np.float32), np.empty((nch, n), np.float32)
    for c in prange(nch):
        _ln_bwd_rows(c, c + 1, per, dw, db, *args)
    _reduce(dw, dwo)
    _reduce(db, dbo)


@njit(**_JIT)
def rms_bwd_y(nch, per, nw, args, dwo):
    """The memory-efficient RMSNorm backward on this thread (as :func:`rms_bwd`)."""
    dw = np.empty((nch, max(nw, 1)), np.float32)
    _rms_bwd_y_rows(0, nch, per, dw, *args)
    _reduce(dw, dwo)


@njit(parallel=True, **_JIT)
def rms_bwd_y_par(nch, per, nw, args, dwo):
    dw = np.empty((nch, max(nw, 1)), np.float32)
    for c in prange(nch):
        _rms_bwd_y_rows(c, c + 1, per, dw, *args)
    _reduce(dw, dwo)


@njit(**_JIT)
def ln_bwd_y(nch, per, n, args, dwo, dbo):
    """The memory-efficient LayerNorm backward on this thread (as :func:`ln_bwd`)."""
    dw, db = np.empty((nch, n), np.float32), np.empty((nch, n), np.float32)
    _ln_bwd_y_rows(0, nch, per, dw, db, *args)
    _reduce(dw, dwo)
    _reduce(db, dbo)


@njit(parallel=True, **_JIT)
def ln_bwd_y_par(nch, per, n, args, dwo, dbo):
    dw, db = np.empty((nch, n), np.float32), np.empty((nch, n), np.float32)
    for c in prange(nch):
        _ln_bwd_y_rows(c, c + 1, per, dw, db, *args)
    _reduce(dw, dwo)
    _reduce(db, dbo)
