"""Numba CPU kernels for RMSNorm and LayerNorm: the forward, with a fused residual add, and what
every kernel shares (the backwards are in :mod:`~normlab.kernels.numba.backward` and
:mod:`~normlab.kernels.numba.backward_y`).

Layout every kernel shares (host side in :mod:`normlab.kernels.numba.launch`):

- a 2-D ``(M, N)`` tensor arrives as ``(address, row stride, dtype tag)`` and is viewed in place
  (:func:`~normlab.kernels.numba.bf16.rows`), so any row stride is read without a copy; outputs
  are contiguous; weight-sized vectors and statistics are float32;
- float32 elements are used as is, bfloat16 ones as ``uint16`` bits converted on load and
  rounded to nearest even on store; all math and accumulation is FP32;
- each row is streamed from memory once; later passes over it re-read it from L1/L2 instead of
  keeping an FP32 copy (a scratch row costs a store and a load per element and a pass);
- rows are cut into ``nch`` chunks of ``per`` rows (a launch choice that depends on the machine,
  never on the thread count); a chunk owns one row of the FP32 ``dweight``/``dbias`` partial
  sums, added in chunk order afterwards: no atomics, and the same bits whatever the thread
  count;
- a missing weight/bias is a vector of ones/zeros (multiplying by one and adding zero are
  exact), so each loop exists once, not once per flag combination.

``*_rows(c0, c1, per, pipe, ...)`` computes chunks ``[c0, c1)``; ``pipe`` picks the
software-pipelined row loop or two passes per row (a launch choice:
:mod:`normlab.kernels.numba.choices`). The launcher runs all chunks through the ``*_par``
drivers on Numba's OpenMP threads (one thread for small tensors, where handing work to a second
costs more than it saves; a Python thread pool costs more than a small norm); their one-thread
twins ``rms_fwd``, ``ln_fwd``, ``rms_bwd``, ... serve where the pool must not be used. The GIL
is released throughout.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from normlab.kernels.numba import bf16
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
    c0,
    c1,
    per,
    pipe,
    m,
    n,
    xp,
    xs,
    rp,
    rs,
    hp,
    yp,
    gp,
    rstdp,
    eps,
    eps_inside,
    has_res,
    xt,
    ht,
    yt,
    qt,
    vw,
):
    r"""RMSNorm forward of the rows of chunks ``[c0, c1)``:
    :math:`h = x + r`, :math:`\mathrm{rstd} = 1/\sqrt{\overline{h^2} + \epsilon}`,
    :math:`y = g \cdot q(h\,\mathrm{rstd})` with ``g = offset + weight`` and ``q`` rounding to
    ``h``'s dtype for the llama/none cast orders (``qt``; none for gemma).

    ``pipe`` (a launch choice): software-pipelined, the loop writing row ``i`` also streams row
    ``i + 1`` in from memory (its sum of squares, and with ``has_res`` its ``h``), so the DRAM
    reads overlap the arithmetic of the stores; else two passes per row, the second re-reading
    the row from L1/L2. bfloat16 ``y`` is stored without the NaN case
    (:func:`~normlab.kernels.numba.bf16.from_f32_of`); a gain holding a NaN could bring a payload
    that needs it, and then the rows are redone."""
    bf16.vector_width(vw)
    x, r, h = rows(xp, m, xs, xt), rows(rp, m, rs, ht), rows(hp, m, n, ht)
    y, g, rstd = rows(yp, m, n, yt), vec(gp, n), vec(rstdp, m)
    i0, i1 = c0 * per, min(m, c1 * per)
    if i0 >= i1:
        return
    if pipe:
        _rms_fwd_pipelined(x, r, h, y, g, rstd, i0, i1, n, eps, eps_inside, has_res, ht, yt, qt)
    elif has_res:
        for i in range(i0, i1):
            ss = _add_sumsq(x[i], r[i], h[i], n, ht)
            rstd[i] = _rms_store(h[i], y[i], g, n, _rms_stat(ss, n, eps, eps_inside), qt, yt)
    else:
        for i in range(i0, i1):
            ss = _sumsq(x[i], n)
            rstd[i] = _rms_store(x[i], y[i], g, n, _rms_stat(ss, n, eps, eps_inside), qt, yt)
    if not _nan_free(g, n):  # the stores above assumed no NaN payload from g: redo them
        if has_res:
            _rms_y_exact(h, y, g, rstd, i0, i1, n, qt, yt)
        else:
            _rms_y_exact(x, y, g, rstd, i0, i1, n, qt, yt)


@njit(inline="always")
def _rms_store(src, yr, g, n, rs_, qt, yt):
    """``y`` of one row from its (cached) input row; returns ``rstd``."""
    for j in range(n):
        yr[j] = from_f32_of(_rms_y(src[j], rs_, g[j], qt), yt, src[j])
    return rs_


@njit(inline="always")
def _rms_fwd_pipelined(x, r, h, y, g, rstd, i0, i1, n, eps, eps_inside, has_res, ht, yt, qt):
    """Rows ``[i0, i1)`` of :func:`_rms_fwd_rows`, each row's stores fused with the next row's
    sum of squares."""
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


@njit(inline="always")
def _rms_y_exact(src, y, g, rstd, i0, i1, n, qt, yt):
    """Rows ``[i0, i1)`` of ``y`` again, with the NaN-exact store (a NaN or inf in the gain)."""
    for i in range(i0, i1):
        sr, yr, rs_ = src[i], y[i], rstd[i]
        for j in range(n):
            yr[j] = from_f32(_rms_y(sr[j], rs_, g[j], qt), yt)


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
    mu, var, exact = _ln_moments(s, s2, n)
    if not exact:
        sd = var = _F0
        for j in range(n):
            d = to_f32(src[j]) - mu
            sd += d
            var += d * d
        mu, var = _ln_corrected(mu, sd, var, n)
    return mu, _F1 / np.sqrt(var + np.float32(eps))


@njit(inline="always")
def _ln_moments(s, s2, n):
    """``(mean, var, exact)`` of a row from its one-pass sums; ``exact``: whether they may be
    used (see :func:`_ln_stats`)."""
    fn = np.float32(n)
    mu = s / fn
    var = s2 / fn - mu * mu
    return mu, var, var < np.float32(np.inf) and mu * mu <= var * np.float32(0.125)


@njit(inline="always")
def _ln_corrected(mu, sd, ssd, n):
    """The corrected two-pass ``(mean, var)`` from the sums of the deviations ``d = h - mu``
    (``sd``) and of their squares (``ssd``); see :func:`_ln_stats`."""
    fn = np.float32(n)
    c = sd / fn
    return mu + c, max(ssd / fn - c * c, _F0)


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
    c0, c1, per, pipe, m, n, xp, xs, rp, rs, hp, yp, wp, bp, meanp, rstdp, eps, has_res, xt, ht, vw
):
    r"""LayerNorm forward of chunks ``[c0, c1)``, FP32 statistics of the row:
    :math:`\mu = \bar h`, :math:`\mathrm{rstd} = 1/\sqrt{\overline{(h-\mu)^2} + \epsilon}`,
    :math:`y = (h - \mu)\,\mathrm{rstd}\,w + b` (``y`` in ``h``'s dtype).

    Pipelined (``pipe``) or two passes per row and stored like :func:`_rms_fwd_rows`; see
    :func:`_ln_stats` for the variance."""
    bf16.vector_width(vw)
    x, r, h = rows(xp, m, xs, xt), rows(rp, m, rs, ht), rows(hp, m, n, ht)
    y, w, b = rows(yp, m, n, ht), vec(wp, n), vec(bp, n)
    mean, rstd = vec(meanp, m), vec(rstdp, m)
    i0, i1 = c0 * per, min(m, c1 * per)
    if i0 >= i1:
        return
    if pipe:
        _ln_fwd_pipelined(x, r, h, y, w, b, mean, rstd, i0, i1, n, eps, has_res, ht)
    elif has_res:
        for i in range(i0, i1):
            s, s2 = _add_sums(x[i], r[i], h[i], n, ht)
            mean[i], rstd[i] = _ln_store(h[i], y[i], w, b, n, _ln_stats(s, s2, h[i], n, eps), ht)
    else:
        for i in range(i0, i1):
            s, s2 = _sums(x[i], n)
            mean[i], rstd[i] = _ln_store(x[i], y[i], w, b, n, _ln_stats(s, s2, x[i], n, eps), ht)
    if not (_nan_free(w, n) and _nan_free(b, n)):  # as in _rms_fwd_rows
        if has_res:
            _ln_y_exact(h, y, w, b, mean, rstd, i0, i1, n, ht)
        else:
            _ln_y_exact(x, y, w, b, mean, rstd, i0, i1, n, ht)


@njit(inline="always")
def _ln_store(src, yr, w, b, n, stats, ht):
    """``y`` of one row from its (cached) input row and ``stats = (mean, rstd)``; returns them."""
    mu, rs_ = stats
    for j in range(n):
        yr[j] = from_f32_of(_ln_y(src[j], mu, rs_, w[j], b[j]), ht, src[j])
    return stats


@njit(inline="always")
def _ln_fwd_pipelined(x, r, h, y, w, b, mean, rstd, i0, i1, n, eps, has_res, ht):
    """Rows ``[i0, i1)`` of :func:`_ln_fwd_rows`, each row's stores fused with the next row's
    sums."""
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


# Drivers: what the launcher calls, once per op. They run the row kernels over all chunks, on
# this thread or on Numba's threads (static schedule: each thread gets a contiguous run of
# chunks), one chunk at a time either way (the pipelined loop treats a chunk's first row apart),
# so every row is computed by the same code whatever the thread count.


@njit(**_JIT)
def rms_fwd(nch, per, pipe, args):
    for c in range(nch):  # chunk by chunk, as the threads do: the same bits either way
        _rms_fwd_rows(c, c + 1, per, pipe, *args)


@njit(parallel=True, **_JIT)
def rms_fwd_par(nch, per, pipe, args):
    for c in prange(nch):
        _rms_fwd_rows(c, c + 1, per, pipe, *args)


@njit(**_JIT)
def ln_fwd(nch, per, pipe, args):
    for c in range(nch):
        _ln_fwd_rows(c, c + 1, per, pipe, *args)


@njit(parallel=True, **_JIT)
def ln_fwd_par(nch, per, pipe, args):
    for c in prange(nch):
        _ln_fwd_rows(c, c + 1, per, pipe, *args)
