"""Row loads and stores for the Numba kernels: float32 as is, bfloat16 through bit operations.

Numba has no bfloat16 (nor a CPU float16), so a bfloat16 tensor reaches a kernel as a ``uint16``
array holding the raw bits. Rows are converted to/from an FP32 scratch buffer; the helpers are
``@overload`` s resolved on the array dtype at compile time, so one kernel body serves both
dtypes with no per-element branch.

bfloat16 is the top half of an IEEE float32, so

- load:  ``f32_bits = bf16_bits << 16`` (exact);
- store: round to nearest, ties to even, on the 16 dropped bits:
  ``bf16 = (u + 0x7FFF + ((u >> 16) & 1)) >> 16``; NaNs are kept quiet NaNs (the carry of the
  rounding add would turn some of them into infinities).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic, overload

_ABS = np.uint32(0x7FFFFFFF)
_INF = np.uint32(0x7F800000)
_QNAN = np.uint32(0x00400000)
_HALF = np.uint32(0x7FFF)
_ONE = np.uint32(1)
_S16 = np.uint32(16)


@intrinsic
def _f32_bits(typingctx, v):
    """The IEEE bits of a float32 (a register bitcast, so loops using it still vectorize)."""
    if v != types.float32:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))

    return types.uint32(types.float32), codegen


@intrinsic
def _bits_f32(typingctx, u):
    """The float32 with IEEE bits ``u``."""
    if u != types.uint32:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())

    return types.float32(types.uint32), codegen


@njit(inline="always")
def bf16_to_f32(b):
    return _bits_f32(np.uint32(np.uint32(b) << _S16))


@njit(inline="always")
def f32_to_bf16(v):
    """Round to nearest even; NaN stays a quiet NaN."""
    u = _f32_bits(v)
    if (u & _ABS) > _INF:
        return np.uint16((u | _QNAN) >> _S16)
    return np.uint16((u + _HALF + ((u >> _S16) & _ONE)) >> _S16)


def load_row(src, base, buf):
    """``buf[:] = float32(src[base : base + buf.size])``.

    (The helpers index a slice of the row, not ``src[base + j]``: a computed index may be
    negative to Numba, whose wraparound check stops LLVM from vectorizing the loop, 4x slower.)
    """


def store_row(dst, base, buf):
    """``dst[base : base + buf.size] = dst.dtype(buf)`` with round-to-nearest-even."""


def round_like(like, buf):
    """Round ``buf`` in place to the precision of ``like``'s dtype (what a store and a reload
    would give); the identity for float32."""


def _is_bits(arr) -> bool:
    return isinstance(arr, types.Array) and arr.dtype == types.uint16


@overload(load_row, inline="always")
def _load_row(src, base, buf):
    if _is_bits(src):

        def impl(src, base, buf):
            row = src[base : base + buf.size]
            for j in range(buf.size):
                buf[j] = bf16_to_f32(row[j])

        return impl

    def impl(src, base, buf):
        row = src[base : base + buf.size]
        for j in range(buf.size):
            buf[j] = row[j]

    return impl


@overload(store_row, inline="always")
def _store_row(dst, base, buf):
    if _is_bits(dst):

        def impl(dst, base, buf):
            row = dst[base : base + buf.size]
            for j in range(buf.size):
                row[j] = f32_to_bf16(buf[j])

        return impl

    def impl(dst, base, buf):
        row = dst[base : base + buf.size]
        for j in range(buf.size):
            row[j] = buf[j]

    return impl


@overload(round_like, inline="always")
def _round_like(like, buf):
    if _is_bits(like):

        def impl(like, buf):
            for j in range(buf.size):
                buf[j] = bf16_to_f32(f32_to_bf16(buf[j]))

        return impl

    def impl(like, buf):
        pass

    return impl


_F16_KEEP = np.uint32(0xFFFFE000)  # sign, exponent and the 10 mantissa bits float16 keeps
_F16_HALF = np.uint32(0x0FFF)
_S13 = np.uint32(13)
_F16_TINY = np.float32(2.0**-14)  # below this float16 is subnormal: a fixed 2**-24 quantum
_F16_Q = np.float32(2.0**24)


@njit(cache=True, nogil=True, error_model="numpy")
def round_f16(buf):
    """Round FP32 ``buf`` in place to float16 precision (round to nearest even), as a store to
    float16 and a reload would; values stay in FP32 (no overflow check: used on ``x * rstd``)."""
    bits = buf.view(np.uint32)
    for j in range(buf.size):
        v = buf[j]
        if abs(v) < _F16_TINY:
            buf[j] = np.float32(np.rint(v * _F16_Q)) / _F16_Q
        else:
            u = bits[j]
            if (u & _ABS) <= _INF:
                bits[j] = (u + _F16_HALF + ((u >> _S13) & _ONE)) & _F16_KEEP


def load_row_sum(src, base, buf, squares):
    """``load_row`` fused with the FP32 row sum (of squares if ``squares``): one pass, which
    matters for short rows."""


def store_row_affine(dst, base, buf, shift, scale, w, has_w, b, has_b):
    """``store_row`` of ``((buf - shift) * scale) * w + b`` (``w``/``b`` optional), fused."""


@overload(load_row_sum, inline="always")
def _load_row_sum(src, base, buf, squares):
    if _is_bits(src):

        def impl(src, base, buf, squares):
            row = src[base : base + buf.size]
            s = np.float32(0.0)
            if squares:
                for j in range(buf.size):
                    v = bf16_to_f32(row[j])
                    buf[j] = v
                    s += v * v
            else:
                for j in range(buf.size):
                    v = bf16_to_f32(row[j])
                    buf[j] = v
                    s += v
            return s

        return impl

    def impl(src, base, buf, squares):
        row = src[base : base + buf.size]
        s = np.float32(0.0)
        if squares:
            for j in range(buf.size):
                v = row[j]
                buf[j] = v
                s += v * v
        else:
            for j in range(buf.size):
                v = row[j]
                buf[j] = v
                s += v
        return s

    return impl


@overload(store_row_affine, inline="always")
def _store_row_affine(dst, base, buf, shift, scale, w, has_w, b, has_b):
    if _is_bits(dst):

        def impl(dst, base, buf, shift, scale, w, has_w, b, has_b):
            row = dst[base : base + buf.size]
            if has_w and has_b:
                for j in range(buf.size):
                    row[j] = f32_to_bf16((buf[j] - shift) * scale * w[j] + b[j])
            elif has_w:
                for j in range(buf.size):
                    row[j] = f32_to_bf16((buf[j] - shift) * scale * w[j])
            elif has_b:
                for j in range(buf.size):
                    row[j] = f32_to_bf16((buf[j] - shift) * scale + b[j])
            else:
                for j in range(buf.size):
                    row[j] = f32_to_bf16((buf[j] - shift) * scale)

        return impl

    def impl(dst, base, buf, shift, scale, w, has_w, b, has_b):
        row = dst[base : base + buf.size]
        if has_w and has_b:
            for j in range(buf.size):
                row[j] = (buf[j] - shift) * scale * w[j] + b[j]
        elif has_w:
            for j in range(buf.size):
                row[j] = (buf[j] - shift) * scale * w[j]
        elif has_b:
            for j in range(buf.size):
                row[j] = (buf[j] - shift) * scale + b[j]
        else:
            for j in range(buf.size):
                row[j] = (buf[j] - shift) * scale

    return impl
