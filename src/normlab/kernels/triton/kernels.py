"""Triton kernels for RMSNorm and LayerNorm: one forward kernel, one backward kernel.

Both kernels take a ``(M, N)`` view whose rows have unit column stride and serve both norms
(``IS_RMS``), the fused residual add, every RMSNorm cast order and ``eps`` placement. A program
owns ``BLOCK_M`` rows; when a row fits in registers (``LOOPED=False``) it is read once, otherwise
the row is streamed in ``BLOCK_N`` chunks (statistics pass, then output pass). Statistics are
always FP32. The FP32/FP64 references they are tested against are :mod:`normlab.reference`.

The host side (grids, partial-sum reduction) lives in :mod:`normlab.kernels.triton.launch`, the
block sizes per range of N in :mod:`normlab.kernels.triton.tuning`.
"""

from __future__ import annotations

import triton
import triton.language as tl

# Cast orders, as compile-time integers (see normlab.reference.rms_norm); kernels may only read
# globals that are constexpr.
CASTING_CODES = {"llama": 0, "gemma": 1, "none": 2}
GEMMA = tl.constexpr(CASTING_CODES["gemma"])
NONE = tl.constexpr(CASTING_CODES["none"])


@triton.jit
def _round(v, dt: tl.constexpr):
    """Round an FP32 value to ``dt`` and back: where the reference stores an intermediate."""
    return v.to(dt).to(tl.float32)


@triton.jit
def _add2(a0, a1, b0, b1):
    """Combine of a two-operand sum (``tl.reduce``)."""
    return a0 + b0, a1 + b1


@triton.jit
def _add3(a0, a1, a2, b0, b1, b2):
    """Combine of a three-operand sum (``tl.reduce``)."""
    return a0 + b0, a1 + b1, a2 + b2


@triton.jit
def _rms_rstd(sumsq, N, eps, EPS_INSIDE: tl.constexpr, CASTING: tl.constexpr, hdt: tl.constexpr):
    """rstd = 1/sqrt(ms + eps) or 1/(sqrt(ms) + eps), ms = sumsq/N; casting "none" rounds each
    step to the input dtype as the naive eager code does."""
    ms = sumsq / N
    if CASTING == NONE:
        ms = _round(ms, hdt)
        if EPS_INSIDE:
            rstd = _round(1.0 / tl.sqrt(_round(ms + eps, hdt)), hdt)
        else:
            rstd = _round(1.0 / _round(_round(tl.sqrt(ms), hdt) + eps, hdt), hdt)
    else:
        if EPS_INSIDE:
            rstd = 1.0 / tl.sqrt(ms + eps)
        else:
            rstd = 1.0 / (tl.sqrt(ms) + eps)
    return rstd


@triton.jit
def _rms_sumsq(h, CASTING: tl.constexpr, hdt: tl.constexpr):
    """Each row's sum of h^2 (FP32); casting "none" rounds the squares to the input dtype."""
    sq = h * h
    if CASTING == NONE:
        sq = _round(sq, hdt)
    return tl.sum(sq, axis=1)


@triton.jit
def _chunk(start, offs, row_ok, N):
    """A looped tile's chunk: its columns ``start + offs``, the in-row mask and the tile mask."""
    cols = start + offs
    cmask = cols < N
    return cols, cmask, row_ok[:, None] & cmask


@triton.jit
def _load_h(X, R, H, rows, cols, mask, stride_x, stride_r, stride_h, HAS_RES: tl.constexpr):
    """The normalized input as FP32: ``x``, or ``h = x + r`` rounded to ``h``'s dtype and
    written once (the statistics must see the same rounded ``h`` the caller gets back)."""
    x = tl.load(X + rows * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    if HAS_RES:
        r = tl.load(R + rows * stride_r + cols, mask=mask, other=0.0).to(tl.float32)
        hv = (x + r).to(H.dtype.element_ty)
        tl.store(H + rows * stride_h + cols, hv, mask=mask)
        x = hv.to(tl.float32)
    return x


@triton.jit
def _gain(W, cols, cmask, offset, CASTING: tl.constexpr):
    """``offset + w`` as FP32; llama/none add in the weight's dtype like ``offset + weight``."""
    w = tl.load(W + cols, mask=cmask, other=0.0).to(tl.float32)
    g = offset + w
    if CASTING != GEMMA:
        g = _round(g, W.dtype.element_ty)
    return g


@triton.jit
def _normalize(
    h, mean, rstd, cmask, IS_RMS: tl.constexpr, CASTING: tl.constexpr, hdt: tl.constexpr
):
    """xhat = (h - mean) * rstd (LayerNorm) or h * rstd, rounded to the input dtype where the
    llama/none cast orders store it; zero outside the row."""
    if IS_RMS:
        xhat = h * rstd[:, None]
        if CASTING != GEMMA:
            xhat = _round(xhat, hdt)
    else:
        xhat = (h - mean[:, None]) * rstd[:, None]
    return tl.where(cmask, xhat, 0.0)


@triton.jit
def norm_fwd_kernel(
    X,
    R,
    H,  # X without a residual (h's dtype)
    W,
    B,
    Y,
    MEAN,  # unused by RMSNorm
    RSTD,
    stride_x,
    stride_r,
    stride_h,
    stride_y,
    M,
    N,
    eps,
    offset,
    IS_RMS: tl.constexpr,
    HAS_RES: tl.constexpr,
    HAS_W: tl.constexpr,
    HAS_B: tl.constexpr,
    CASTING: tl.constexpr,
    EPS_INSIDE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    LOOPED: tl.constexpr,
):
    """Forward of both norms over rows ``[pid*BLOCK_M, (pid+1)*BLOCK_M)``.

    h = x + r;  RMS: rstd = 1/sqrt(mean(h^2) + eps), y = (offset + w) * h * rstd;
    LN: mu = mean(h), rstd = 1/sqrt(mean((h - mu)^2) + eps), y = (h - mu) * rstd * w + b.
    Writes y (and h with a residual) and the FP32 per-row mean/rstd the backward reuses.
    """
    hdt: tl.constexpr = H.dtype.element_ty
    rows1 = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)  # (BM,)
    row_ok = rows1 < M
    rows = rows1.to(tl.int64)[:, None]  # (BM, 1), int64: M * stride may exceed 2^31
    offs = tl.arange(0, BLOCK_N)[None, :]  # (1, BN)
    if not LOOPED:
        cmask = offs < N
        mask = row_ok[:, None] & cmask
        h = _load_h(X, R, H, rows, offs, mask, stride_x, stride_r, stride_h, HAS_RES)
        if IS_RMS:
            mean = tl.zeros((BLOCK_M,), tl.float32)
            rstd = _rms_rstd(_rms_sumsq(h, CASTING, hdt), N, eps, EPS_INSIDE, CASTING, hdt)
        else:
            # Corrected two-pass variance over registers: a large mean cannot cancel it away,
            # and the mean of the deviations corrects the rounded mean (which, times rstd,
            # would shift every output and make a constant row's output nonzero).
            mean = tl.sum(h, axis=1) / N
            xc = tl.where(cmask, h - mean[:, None], 0.0)
            # Two tl.sum, not one two-operand tl.reduce: the CPU interpreter, where the numerics
            # guarantee is checked, folds a custom combine left to right (np.sum is pairwise),
            # which took LayerNorm's FP16 outliers past the guarantee's ULP bound.
            c = tl.sum(xc, axis=1) / N
            mean += c
            var = tl.maximum(tl.sum(xc * xc, axis=1) / N - c * c, 0.0)
            rstd = 1.0 / tl.sqrt(var + eps)
        _store_y(
            h, mean, rstd, W, B, Y, rows, offs, cmask, mask, stride_y, offset,
            IS_RMS, HAS_W, HAS_B, CASTING, hdt,
        )  # fmt: skip
    else:
        # Pass 1: statistics, chunk by chunk (writing h once). LayerNorm merges per-chunk
        # (count, mean, M2) with Chan's formula, which keeps the two-pass accuracy.
        acc = tl.zeros((BLOCK_M,), tl.float32)
        mean = tl.zeros((BLOCK_M,), tl.float32)
        for start in range(0, N, BLOCK_N):
            cols, cmask, mask = _chunk(start, offs, row_ok, N)
            h = _load_h(X, R, H, rows, cols, mask, stride_x, stride_r, stride_h, HAS_RES)
            if IS_RMS:
                acc += _rms_sumsq(h, CASTING, hdt)
            else:
                cnt = tl.minimum(N - start, BLOCK_N).to(tl.float32)
                cmean = tl.sum(h, axis=1) / cnt
                xc = tl.where(cmask, h - cmean[:, None], 0.0)
                delta = cmean - mean
                tot = start + cnt
                mean += delta * (cnt / tot)
                acc += tl.sum(xc * xc, axis=1) + delta * delta * (start * cnt / tot)
        if IS_RMS:
            rstd = _rms_rstd(acc, N, eps, EPS_INSIDE, CASTING, hdt)
        else:
            rstd = 1.0 / tl.sqrt(acc / N + eps)
        # Pass 2: normalize; h is re-read from where pass 1 put it (L2-resident for one row).
        for start in range(0, N, BLOCK_N):
            cols, cmask, mask = _chunk(start, offs, row_ok, N)
            if HAS_RES:
                h = tl.load(H + rows * stride_h + cols, mask=mask, other=0.0).to(tl.float32)
            else:
                h = tl.load(X + rows * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
            _store_y(
                h, mean, rstd, W, B, Y, rows, cols, cmask, mask, stride_y, offset,
                IS_RMS, HAS_W, HAS_B, CASTING, hdt,
            )  # fmt: skip
    if not IS_RMS:
        tl.store(MEAN + rows1, mean, mask=row_ok)
    tl.store(RSTD + rows1, rstd, mask=row_ok)


@triton.jit
def _store_y(
    h,
    mean,
    rstd,
    W,
    B,
    Y,
    rows,
    cols,
    cmask,
    mask,
    stride_y,
    offset,
    IS_RMS: tl.constexpr,
    HAS_W: tl.constexpr,
    HAS_B: tl.constexpr,
    CASTING: tl.constexpr,
    hdt: tl.constexpr,
):
    """y from h and the row statistics, in the cast order of ``CASTING``."""
    xhat = _normalize(h, mean, rstd, cmask, IS_RMS, CASTING, hdt)
    if HAS_W:
        if IS_RMS:
            y = _gain(W, cols, cmask, offset, CASTING) * xhat
        else:
            y = xhat * tl.load(W + cols, mask=cmask, other=0.0).to(tl.float32)
    else:
        y = xhat
    if HAS_B:
        y += tl.load(B + cols, mask=cmask, other=0.0).to(tl.float32)
    tl.store(Y + rows * stride_y + cols, y.to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _recover(y, W, B, cols, cmask, offset, IS_RMS, HAS_W, HAS_B, CASTING):
    """xhat from the forward's output: (y - b) / gain (memory-efficient mode); zero outside the
    row, where the gain is taken as 1 so nothing divides by zero."""
    if HAS_B:
        y = y - tl.load(B + cols, mask=cmask, other=0.0).to(tl.float32)
    if HAS_W:
        if IS_RMS:
            g = _gain(W, cols, cmask, offset, CASTING)
        else:
            g = tl.load(W + cols, mask=cmask, other=1.0).to(tl.float32)
        y = y / tl.where(cmask, g, 1.0)
    return tl.where(cmask, y, 0.0)


@triton.jit
def _load_tile(H, DY, rows, cols, mask, stride_h, stride_dy):
    """One tile of the saved tensor and of dy, in their own dtypes (a prefetched tile costs
    half the registers of an FP32 one)."""
    h = tl.load(H + rows * stride_h + cols, mask=mask, other=0.0)
    dy = tl.load(DY + rows * stride_dy + cols, mask=mask, other=0.0)
    return h, dy


@triton.jit
def _dh_terms(
    h,
    dy,
    H,
    W,
    B,
    DH,
    cols,
    cmask,
    mean,
    rstd,
    offset,
    IS_RMS: tl.constexpr,
    HAS_W: tl.constexpr,
    HAS_B: tl.constexpr,
    CASTING: tl.constexpr,
    FROM_Y: tl.constexpr,
):
    """Per-element pieces of the backward from a loaded tile ``(h, dy)``: FP32
    (h, dy, xhat, xq, dxhat = dy * gain).

    ``xq`` is xhat as the forward multiplied it by the gain (rounded for the llama/none cast
    orders), which dweight needs; the rounding passes gradients straight through, so dh needs
    the unrounded ``xhat``. With ``FROM_Y`` the saved tensor ``H`` is the output y: xhat is
    recovered from it (already the rounded one, used for both) and ``h = xhat / rstd`` serves
    RMSNorm's eps-outside ``mean(h^2)``. For the llama/none orders the recovered xhat is
    rounded to h's dtype (``DH``'s) again, which gives back exactly the rounded xhat the
    forward multiplied by the gain (y's rounding is at most half a unit of it)."""
    h = h.to(tl.float32)
    dy = dy.to(tl.float32)
    if FROM_Y:
        xhat = _recover(h, W, B, cols, cmask, offset, IS_RMS, HAS_W, HAS_B, CASTING)
        if IS_RMS and CASTING != GEMMA:
            xhat = _round(xhat, DH.dtype.element_ty)
        xq = xhat
        if IS_RMS:
            h = xhat / rstd[:, None]
    else:
        xhat = _normalize(h, mean, rstd, cmask, IS_RMS, GEMMA, H.dtype.element_ty)
        xq = xhat
        if IS_RMS and CASTING != GEMMA:
            xq = _round(xhat, H.dtype.element_ty)
    if HAS_W:
        if IS_RMS:
            dxhat = dy * _gain(W, cols, cmask, offset, CASTING)
        else:
            dxhat = dy * tl.load(W + cols, mask=cmask, other=0.0).to(tl.float32)
    else:
        dxhat = dy
    return h, dy, xhat, xq, dxhat


@triton.jit
def _chunk_terms(
    H, DY, W, B, DH, rows, row_ok, start, offs, N, mean, rstd, offset, stride_h, stride_dy,
    IS_RMS: tl.constexpr, HAS_W: tl.constexpr, HAS_B: tl.constexpr, CASTING: tl.constexpr,
    FROM_Y: tl.constexpr,
):  # fmt: skip
    """A looped tile's chunk, as both of its passes need it: its columns and masks, then the
    :func:`_dh_terms` of its loaded ``(h, dy)``."""
    cols, cmask, mask = _chunk(start, offs, row_ok, N)
    h, dy = _load_tile(H, DY, rows, cols, mask, stride_h, stride_dy)
    h, dy, xhat, xq, dxhat = _dh_terms(
        h, dy, H, W, B, DH, cols, cmask, mean, rstd, offset, IS_RMS, HAS_W, HAS_B, CASTING, FROM_Y
    )
    return cols, cmask, mask, h, dy, xhat, xq, dxhat


@triton.jit
def _dh(dxhat, xhat, rstd, c1, c2, q, IS_RMS: tl.constexpr):
    """dh = rstd * (dxhat - c2 - xhat * c1) (LN); rstd * dxhat - q * xhat * c1 (RMS)."""
    if IS_RMS:
        return rstd[:, None] * dxhat - (q * c1)[:, None] * xhat
    return rstd[:, None] * (dxhat - c2[:, None] - xhat * c1[:, None])


@triton.jit
def _centre(c1, c2, m0):
    """LayerNorm's ``(c1, c2)`` for ``xhat - m0``, ``m0`` the mean of the computed xhat.

    The backward formula assumes mean(xhat) = 0, but the FP32 mean is rounded, which shifts
    every xhat by the same rstd-amplified amount; centring xhat on its computed mean cancels
    that shift (eager autograd does it through the mean's own gradient):
    ``dxhat - c2 - (xhat - m0) c1' = dxhat - (c2 - m0 c1') - xhat c1'``, ``c1' = c1 - m0 c2``.
    """
    c1 = c1 - m0 * c2
    return c1, c2 - m0 * c1


@triton.jit
def _row_sums(dxhat, xhat, h, IS_RMS: tl.constexpr, EPS_INSIDE: tl.constexpr):
    """A row tile's reductions: ``(c0, c1, c2, ss)`` = sums of xhat, dxhat * xhat, dxhat, h^2
    (only those the norm needs are computed; the others are zero). The needed ones go through
    one multi-operand reduction: one round of shared memory and barriers instead of one each."""
    if not IS_RMS:
        c0, c1, c2 = tl.reduce((xhat, dxhat * xhat, dxhat), 1, _add3)
        ss = tl.zeros_like(c1)
    elif not EPS_INSIDE:
        c1, ss = tl.reduce((dxhat * xhat, h * h), 1, _add2)
        c0 = tl.zeros_like(c1)
        c2 = tl.zeros_like(c1)
    else:
        c1 = tl.sum(dxhat * xhat, axis=1)
        c0 = tl.zeros_like(c1)
        c2 = tl.zeros_like(c1)
        ss = tl.zeros_like(c1)
    return c0, c1, c2, ss


@triton.jit
def _coefficients(c0, c1, c2, ss, rstd, N, IS_RMS: tl.constexpr, EPS_INSIDE: tl.constexpr):
    """``(c1, c2, q)`` of :func:`_dh` from a row's sums (see :func:`norm_bwd_kernel`)."""
    c1 = c1 / N
    c2 = c2 / N
    if not IS_RMS:
        c1, c2 = _centre(c1, c2, c0 / N)
    q = rstd
    if IS_RMS and not EPS_INSIDE:
        s = tl.sqrt(ss / N)
        q = tl.where(s > 0, 1.0 / s, 0.0)
    return c1, c2, q


@triton.jit
def norm_bwd_kernel(
    H,  # the output y with FROM_Y
    W,
    B,  # read with FROM_Y only
    MEAN,
    RSTD,
    DY,
    DHO,
    DH,
    DW,
    DB,
    stride_h,
    stride_dy,
    stride_dho,
    stride_dh,
    M,
    N,
    offset,
    IS_RMS: tl.constexpr,
    HAS_W: tl.constexpr,
    HAS_B: tl.constexpr,
    HAS_DHO: tl.constexpr,
    CASTING: tl.constexpr,
    EPS_INSIDE: tl.constexpr,
    FROM_Y: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    LOOPED: tl.constexpr,
    PREFETCH: tl.constexpr,
):
    """Backward of both norms; a persistent program walks row tiles pid, pid + G, ...

    With xhat the normalized row, dxhat = dy * gain, c1 = mean(dxhat * xhat), c2 = mean(dxhat):
    LN:  dh = rstd * (dxhat - c2 - xhat * c1);
    RMS: dh = rstd * dxhat - q * xhat * c1, q = rstd (eps inside) or 1/sqrt(ms) (eps outside);
    dweight = sum over rows of dy * xq, dbias = sum over rows of dy.
    The incoming gradient of the returned h (DHO) is added. ``FROM_Y`` (memory-efficient
    mode): ``H`` holds the forward's output and xhat = (y - b) / gain; LayerNorm's mean is then
    not read.

    A register-resident tile (``LOOPED=False``) is loaded once and serves both passes over the
    row (its sums, then dh); the program keeps its dweight/dbias sums in registers across all
    its tiles and writes them once, as FP32 row ``pid`` of DW/DB (the host sums the G rows: no
    atomics, bitwise-repeatable). With ``PREFETCH`` the next tile's loads are issued before
    this tile's reductions, so their latency overlaps the work. A looped tile streams its rows
    in BLOCK_N chunks twice (the second pass mostly from L2) and adds each chunk's column sums
    to its partial row in memory.
    """
    pid = tl.program_id(0)
    n_prog = tl.num_programs(0)
    n_tiles = tl.cdiv(M, BLOCK_M)
    arange_m = tl.arange(0, BLOCK_M)
    offs = tl.arange(0, BLOCK_N)[None, :]  # (1, BN)
    if not LOOPED:
        cmask = offs < N
        dw_acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
        db_acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
        if PREFETCH:
            rows1 = pid * BLOCK_M + arange_m
            mask = (rows1 < M)[:, None] & cmask
            h_next, dy_next = _load_tile(
                H, DY, rows1.to(tl.int64)[:, None], offs, mask, stride_h, stride_dy
            )
    for tile in range(pid, n_tiles, n_prog):
        rows1 = tile * BLOCK_M + arange_m  # (BM,)
        row_ok = rows1 < M
        rows = rows1.to(tl.int64)[:, None]  # (BM, 1), int64: M * stride may exceed 2^31
        if not LOOPED:
            mask = row_ok[:, None] & cmask
            if PREFETCH:
                h, dy = h_next, dy_next
                nrows1 = rows1 + n_prog * BLOCK_M  # past M (the last tile): masked off
                nmask = (nrows1 < M)[:, None] & cmask
                h_next, dy_next = _load_tile(
                    H, DY, nrows1.to(tl.int64)[:, None], offs, nmask, stride_h, stride_dy
                )
            else:
                h, dy = _load_tile(H, DY, rows, offs, mask, stride_h, stride_dy)
            if HAS_DHO:  # issued early too: it is only added at the end
                dho = tl.load(DHO + rows * stride_dho + offs, mask=mask, other=0.0)
        rstd = tl.load(RSTD + rows1, mask=row_ok, other=0.0)
        if IS_RMS or FROM_Y:
            mean = tl.zeros((BLOCK_M,), tl.float32)
        else:
            mean = tl.load(MEAN + rows1, mask=row_ok, other=0.0)
        if not LOOPED:
            h, dy, xhat, xq, dxhat = _dh_terms(
                h, dy, H, W, B, DH, offs, cmask, mean, rstd, offset,
                IS_RMS, HAS_W, HAS_B, CASTING, FROM_Y,
            )  # fmt: skip
            c0, c1, c2, ss = _row_sums(dxhat, xhat, h, IS_RMS, EPS_INSIDE)
            c1, c2, q = _coefficients(c0, c1, c2, ss, rstd, N, IS_RMS, EPS_INSIDE)
            dh = _dh(dxhat, xhat, rstd, c1, c2, q, IS_RMS)
            if HAS_DHO:
                dh += dho.to(tl.float32)
            tl.store(DH + rows * stride_dh + offs, dh.to(DH.dtype.element_ty), mask=mask)
            if HAS_W:
                dw_acc += dy * xq
            if HAS_B:
                db_acc += dy
        else:
            # Pass 1: the row sums.
            c0 = tl.zeros((BLOCK_M,), tl.float32)
            c1 = tl.zeros((BLOCK_M,), tl.float32)
            c2 = tl.zeros((BLOCK_M,), tl.float32)
            ss = tl.zeros((BLOCK_M,), tl.float32)
            for start in range(0, N, BLOCK_N):
                cols, cmask, mask, h, dy, xhat, xq, dxhat = _chunk_terms(
                    H, DY, W, B, DH, rows, row_ok, start, offs, N, mean, rstd, offset,
                    stride_h, stride_dy, IS_RMS, HAS_W, HAS_B, CASTING, FROM_Y,
                )  # fmt: skip
                s0, s1, s2, s3 = _row_sums(dxhat, xhat, h, IS_RMS, EPS_INSIDE)
                c0 += s0
                c1 += s1
                c2 += s2
                ss += s3
            c1, c2, q = _coefficients(c0, c1, c2, ss, rstd, N, IS_RMS, EPS_INSIDE)
            # Pass 2: dh, and this tile's column sums added to the program's partial rows.
            for start in range(0, N, BLOCK_N):
                cols, cmask, mask, h, dy, xhat, xq, dxhat = _chunk_terms(
                    H, DY, W, B, DH, rows, row_ok, start, offs, N, mean, rstd, offset,
                    stride_h, stride_dy, IS_RMS, HAS_W, HAS_B, CASTING, FROM_Y,
                )  # fmt: skip
                dh = _dh(dxhat, xhat, rstd, c1, c2, q, IS_RMS)
                if HAS_DHO:
                    dho = tl.load(DHO + rows * stride_dho + cols, mask=mask, other=0.0)
                    dh += dho.to(tl.float32)
                tl.store(DH + rows * stride_dh + cols, dh.to(DH.dtype.element_ty), mask=mask)
                pcols = pid.to(tl.int64) * N + cols
                if HAS_W:
                    part = tl.load(DW + pcols, mask=cmask) + tl.sum(dy * xq, axis=0)[None, :]
                    tl.store(DW + pcols, part, mask=cmask)
                if HAS_B:
                    part = tl.load(DB + pcols, mask=cmask) + tl.sum(dy, axis=0)[None, :]
                    tl.store(DB + pcols, part, mask=cmask)
    if not LOOPED:
        pcols = pid.to(tl.int64) * N + offs
        if HAS_W:
            tl.store(DW + pcols, tl.sum(dw_acc, axis=0)[None, :], mask=cmask)
        if HAS_B:
            tl.store(DB + pcols, tl.sum(db_acc, axis=0)[None, :], mask=cmask)
