"""Numba CPU kernels for RMSNorm and LayerNorm, forward and backward, with a fused residual add.

Layout every kernel shares (host side in :mod:`normlab.kernels.numba_launch`):

- a 2-D ``(M, N)`` tensor arrives as a flat 1-D array spanning its rows, plus its row stride, so
  any row stride is read in place and Numba compiles one specialization per dtype, not per
  layout; outputs are contiguous (row stride ``N``);
- float32 arrays are used as is, bfloat16 ones as ``uint16`` bits (:mod:`numba_bf16`);
- each row is loaded into an FP32 scratch buffer (one per chunk, L1/L2 resident), all math and
  accumulation is FP32, and the result is rounded once on store;
- rows are cut into ``nch`` fixed chunks of ``per`` rows; a chunk owns one row of the FP32
  ``dweight``/``dbias`` partial sums, which are added in chunk order afterwards: no atomics, and
  the same bits whatever the thread count.

``*_rows(c0, c1, per, ...)`` runs chunks ``[c0, c1)`` and releases the GIL (``nogil``): the
launcher runs small tensors on the calling thread and splits large ones over torch's thread
count. (Threads rather than ``prange``: a ``parallel=True`` twin of each kernel doubled the cold
compile time, ~27 s vs ~14 s of CPU for the four kernels of one dtype, and would run on a
second thread pool next to torch's.)
"""

from __future__ import annotations

import numpy as np
from numba import njit

from normlab.kernels.numba_bf16 import (
    load_row,
    load_row_sum,
    round_f16,
    round_like,
    store_row,
    store_row_affine,
)

# reassoc lets LLVM vectorize the FP32 row sums (a fixed order per build, so still
# deterministic); no nnan/ninf, so NaN and inf propagate like the reference. The numpy error
# model makes 1/0 an inf (eps=0 on a zero row) instead of Python's ZeroDivisionError.
_JIT = {
    "cache": True,
    "nogil": True,
    "error_model": "numpy",
    "fastmath": {"reassoc", "contract"},
}
_F0 = np.float32(0.0)
_F1 = np.float32(1.0)


@njit(**_JIT)
def _rms_stat(ss, inv_n, eps, eps_inside):
    """``rstd = 1/sqrt(ss/N + eps)`` (eps inside) or ``1/(sqrt(ss/N) + eps)``, in FP32."""
    ms = ss * inv_n
    if eps_inside:
        return _F1 / np.sqrt(ms + eps)
    return _F1 / (np.sqrt(ms) + eps)


# round_xhat codes: the llama/none cast orders round x * rstd to h's dtype before the gain.
ROUND_NONE, ROUND_LIKE_H, ROUND_F16 = 0, 1, 2


@njit(**_JIT)
def _round_xhat(mode, h, buf):
    """Round ``buf`` to ``h``'s dtype (mode 1) or to float16 (mode 2: float16 rows arrive as
    FP32); mode 0 (gemma) keeps FP32."""
    if mode == ROUND_LIKE_H:
        round_like(h, buf)
    elif mode == ROUND_F16:
        round_f16(buf)


@njit(**_JIT)
def _load_h(row, n, x, xs, r, rs, h, has_res, buf, tmp):
    """``buf = x[row]`` or, fused, ``h[row] = x[row] + r[row]`` stored and reloaded rounded."""
    load_row(x, row * xs, buf)
    if has_res:
        load_row(r, row * rs, tmp)
        for j in range(n):
            buf[j] += tmp[j]
        store_row(h, row * n, buf)
        round_like(h, buf)


@njit(**_JIT)
def _rms_fwd_rows(c0, c1, per, m, n, x, xs, r, rs, h, y, g, rstd, eps, eps_inside, has_res,
                  has_w, round_xhat):  # fmt: skip
    r"""RMSNorm forward of the rows of chunks ``[c0, c1)``:
    :math:`h = x + r`, :math:`\mathrm{rstd} = 1/\sqrt{\overline{h^2} + \epsilon}`,
    :math:`y = g \cdot q(h\,\mathrm{rstd})` with ``g = offset + weight`` and ``q`` rounding to
    ``h``'s dtype for the llama/none cast orders (identity for gemma)."""
    buf = np.empty(n, np.float32)
    tmp = np.empty(n, np.float32)
    inv_n, eps32 = _F1 / np.float32(n), np.float32(eps)
    for row in range(c0 * per, min(m, c1 * per)):
        if has_res:
            _load_h(row, n, x, xs, r, rs, h, has_res, buf, tmp)
            ss = _F0
            for j in range(n):
                ss += buf[j] * buf[j]
        else:
            ss = load_row_sum(x, row * xs, buf, True)
        rs_ = _rms_stat(ss, inv_n, eps32, eps_inside)
        rstd[row] = rs_
        if round_xhat == ROUND_NONE:
            store_row_affine(y, row * n, buf, _F0, rs_, g, has_w, g, False)
        else:
            for j in range(n):
                buf[j] *= rs_
            _round_xhat(round_xhat, h, buf)
            store_row_affine(y, row * n, buf, _F0, _F1, g, has_w, g, False)


@njit(**_JIT)
def _rms_bwd_rows(c0, c1, per, m, n, dy, dys, dh, dhs, h, hs, g, rstd, dx, dwp, eps, eps_inside,
                  has_dh, has_w, round_xhat):  # fmt: skip
    r"""RMSNorm backward of chunks ``[c0, c1)``, with :math:`\hat x = h\,\mathrm{rstd}`,
    :math:`\hat g = g \odot dy` and :math:`c = \overline{\hat g \hat x}`:

    .. math::
        dh = \mathrm{rstd}\,\hat g - k\,\hat x + dh_{in},\quad
        k = \mathrm{rstd}\,c \;(\epsilon \text{ inside}) \text{ or } c / \sqrt{\overline{h^2}},
        \quad dw_{\text{chunk}} \mathrel{+}= dy \odot q(\hat x)

    (the rounding ``q`` of the llama cast order passes gradients straight through).
    """
    buf = np.empty(n, np.float32)
    gy = np.empty(n, np.float32)
    tmp = np.empty(n, np.float32)
    inv_n, eps32 = _F1 / np.float32(n), np.float32(eps)
    for c in range(c0, c1):
        acc = dwp[c]
        acc[:] = _F0
        for row in range(c * per, min(m, (c + 1) * per)):
            load_row(h, row * hs, buf)
            load_row(dy, row * dys, gy)
            rs_ = rstd[row]
            for j in range(n):
                buf[j] *= rs_
            if has_w:
                if round_xhat != ROUND_NONE:
                    tmp[:] = buf
                    _round_xhat(round_xhat, h, tmp)
                    for j in range(n):
                        acc[j] += gy[j] * tmp[j]
                else:
                    for j in range(n):
                        acc[j] += gy[j] * buf[j]
                for j in range(n):
                    gy[j] *= g[j]
            dot = _F0
            for j in range(n):
                dot += gy[j] * buf[j]
            cbar = dot * inv_n
            if eps_inside:
                k = rs_ * cbar
            else:
                rms = _F1 / rs_ - eps32
                k = cbar / rms if rms > _F0 else _F0
            for j in range(n):
                gy[j] = rs_ * gy[j] - k * buf[j]
            if has_dh:
                load_row(dh, row * dhs, tmp)
                for j in range(n):
                    gy[j] += tmp[j]
            store_row(dx, row * n, gy)


@njit(**_JIT)
def _ln_fwd_rows(c0, c1, per, m, n, x, xs, r, rs, h, y, w, b, mean, rstd, eps, has_res, has_w,
                 has_b):  # fmt: skip
    r"""LayerNorm forward of chunks ``[c0, c1)``, two-pass statistics of the FP32 row:
    :math:`\mu = \bar h`, :math:`\mathrm{rstd} = 1/\sqrt{\overline{(h-\mu)^2} + \epsilon}`,
    :math:`y = (h - \mu)\,\mathrm{rstd}\,w + b`."""
    buf = np.empty(n, np.float32)
    tmp = np.empty(n, np.float32)
    inv_n, eps32 = _F1 / np.float32(n), np.float32(eps)
    for row in range(c0 * per, min(m, c1 * per)):
        if has_res:
            _load_h(row, n, x, xs, r, rs, h, has_res, buf, tmp)
            s = _F0
            for j in range(n):
                s += buf[j]
        else:
            s = load_row_sum(x, row * xs, buf, False)
        mu = s * inv_n
        ss = _F0
        for j in range(n):
            d = buf[j] - mu
            ss += d * d
        rs_ = _F1 / np.sqrt(ss * inv_n + eps32)
        mean[row] = mu
        rstd[row] = rs_
        store_row_affine(y, row * n, buf, mu, rs_, w, has_w, b, has_b)


@njit(**_JIT)
def _ln_bwd_rows(c0, c1, per, m, n, dy, dys, dh, dhs, h, hs, w, mean, rstd, dx, dwp, dbp, has_dh,
                 has_w):  # fmt: skip
    r"""LayerNorm backward of chunks ``[c0, c1)``, with :math:`\hat x = (h-\mu)\,\mathrm{rstd}`
    and :math:`\hat g = w \odot dy`:

    .. math::
        dh = \mathrm{rstd}\,(\hat g - \overline{\hat g} - \hat x\,\overline{\hat g \hat x})
        + dh_{in},\quad dw_{\text{chunk}} \mathrel{+}= dy \odot \hat x,\quad
        db_{\text{chunk}} \mathrel{+}= dy
    """
    buf = np.empty(n, np.float32)
    gy = np.empty(n, np.float32)
    tmp = np.empty(n, np.float32)
    inv_n = _F1 / np.float32(n)
    for c in range(c0, c1):
        accw = dwp[c]
        accb = dbp[c]
        accw[:] = _F0
        accb[:] = _F0
        for row in range(c * per, min(m, (c + 1) * per)):
            load_row(h, row * hs, buf)
            load_row(dy, row * dys, gy)
            mu, rs_ = mean[row], rstd[row]
            for j in range(n):
                buf[j] = (buf[j] - mu) * rs_
            for j in range(n):
                accw[j] += gy[j] * buf[j]
                accb[j] += gy[j]
            if has_w:
                for j in range(n):
                    gy[j] *= w[j]
            s1 = _F0
            s2 = _F0
            for j in range(n):
                s1 += gy[j]
                s2 += gy[j] * buf[j]
            a, bb = s1 * inv_n, s2 * inv_n
            for j in range(n):
                gy[j] = rs_ * (gy[j] - a - buf[j] * bb)
            if has_dh:
                load_row(dh, row * dhs, tmp)
                for j in range(n):
                    gy[j] += tmp[j]
            store_row(dx, row * n, gy)


@njit(**_JIT)
def _sum_chunks(parts, out):
    """``out = parts.sum(0)`` in chunk order (FP32), so the result does not depend on threads."""
    out[:] = parts[0]
    for c in range(1, parts.shape[0]):
        for j in range(out.size):
            out[j] += parts[c, j]
