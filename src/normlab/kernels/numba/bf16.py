"""Element conversions and raw-pointer row views for the Numba kernels.

Numba has no bfloat16 (nor a CPU float16), so a bfloat16 tensor reaches a kernel as raw
``uint16`` bits. The kernels compute in FP32 and convert each element on load and store through
the ``@overload`` s below, resolved on the storage type at compile time: one kernel body serves
float32 and bfloat16 with no per-element branch.

bfloat16 is the top half of an IEEE float32, so

- load:  ``f32_bits = bf16_bits << 16`` (exact);
- store: round to nearest, ties to even, on the 16 dropped bits:
  ``bf16 = (u + 0x7FFF + ((u >> 16) & 1)) >> 16``; a NaN keeps its top bits with the quiet bit
  set (the carry of the rounding add would turn some NaNs into infinities or -0).

That carry needs a NaN with non-zero low 16 bits, which only an FP32 operand can bring in: a
widened bfloat16 has zero low bits, arithmetic passes a NaN operand's payload on (quieting sets
bit 22) and makes new NaNs with zero low bits. :func:`from_f32_of` therefore drops the NaN case
(a compare and a select per element) when every operand is bfloat16 (what that saves is in
docs/benchmarks.md, "In-cache cost per element").

Each row kernel is built for a vector width (:func:`vector_width`, a launch choice) the same way,
by the type of a tag.

Tensors arrive as ``(address, row stride, dtype tag)``: :func:`rows` views the memory as a C
array, so a call costs a few integer arguments instead of a ``Tensor.numpy()`` per tensor (which
dominated small calls). The tag is a zero of the storage type (``np.float32(0)`` or
``np.uint16(0)``) and is what Numba specializes on.
"""

from __future__ import annotations

import contextlib

import numpy as np
from llvmlite import ir
from numba import carray, njit, types
from numba.extending import intrinsic, overload

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


@intrinsic
def _ptr(typingctx, addr, tag):
    """The integer ``addr`` as a pointer to ``tag``'s type."""
    if not isinstance(addr, types.Integer) or not isinstance(tag, types.Number):
        return None
    ptr_t = types.CPointer(tag)

    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], context.get_value_type(ptr_t))

    return ptr_t(addr, tag), codegen


# The tags of the vector width a row kernel is built for, by ``Launch.vector_512``: LLVM's
# preference for this CPU, or 512 bits.
VW = (np.int8(0), np.int16(0))


@intrinsic
def vector_width(typingctx, vw):
    """Builds the calling function for 512-bit vectors when ``vw`` is ``VW[1]``. On Intel's
    AVX-512 CPUs LLVM prefers 256-bit vectors (older ones lower their clock for wider ones);
    where a kernel is bound by its arithmetic, as the bfloat16 ones on a machine of few cores,
    the wider vectors need fewer instructions per element. Elsewhere the attribute changes
    nothing (AMD's Zen 4 gets 512-bit loops either way). (llvmlite's attribute set only admits
    LLVM's named attributes: this string one goes in past its check; an llvmlite whose set is
    another type builds the default width, a speed hint lost, not a wrong result.)"""
    if vw not in (types.int8, types.int16):
        return None

    def codegen(context, builder, signature, args):
        if signature.args[0] == types.int16:
            with contextlib.suppress(TypeError):
                set.add(builder.function.attributes, '"prefer-vector-width"="512"')
        return context.get_dummy_value()

    return types.none(vw), codegen


@njit(inline="always")
def rows(addr, m, stride, tag):
    """``(m, stride)`` C array of ``tag``'s type at ``addr``: row ``i`` starts at element
    ``i * stride``; the kernels read the first ``n <= stride`` elements of each row."""
    return carray(_ptr(addr, tag), (m, stride))


_F32 = np.float32(0.0)


@njit(inline="always")
def vec(addr, n):
    """The float32 vector of ``n`` elements at ``addr``."""
    return carray(_ptr(addr, _F32), n)


@njit(inline="always")
def bf16_to_f32(b):
    return _bits_f32(np.uint32(np.uint32(b) << _S16))


@njit(inline="always")
def f32_to_bf16(v):
    """Round to nearest even; NaN stays a quiet NaN. (``v != v`` is one FP compare: an integer
    test of the exponent costs AVX2 an unsigned-compare emulation in the store loop.)"""
    u = _f32_bits(v)
    nan = np.uint32(0) - np.uint32(v != v)  # all ones for a NaN: a branch-free select
    r = ((u | _QNAN) & nan) | ((u + _HALF + ((u >> _S16) & _ONE)) & ~nan)
    return np.uint16(r >> _S16)


@njit(inline="always")
def f32_to_bf16_rne(v):
    """Round to nearest even without the NaN case: exact except for a NaN with non-zero low 16
    bits, which may carry into the exponent (an infinity or -0)."""
    u = _f32_bits(v)
    return np.uint16((u + _HALF + ((u >> _S16) & _ONE)) >> _S16)


def to_f32(v):
    """An element of a float32 or bfloat16-bits array as float32."""


def from_f32(v, tag):
    """float32 ``v`` as an element of an array of ``tag``'s type (round to nearest even)."""


def from_f32_of(v, tag, src):
    """``from_f32(v, tag)`` for a ``v`` computed by FP32 arithmetic from elements of ``tag``'s and
    ``src``'s types only: the NaN case is dropped when both are bfloat16 (see the module doc)."""


def round_to(v, tag):
    """``v`` rounded to ``tag``'s precision and back: ``to_f32(from_f32(v, tag))``; an ``int16``
    tag stands for float16 (Numba has no float16 scalar), a float32 tag rounds nothing."""


def _is_bits(t) -> bool:
    return t == types.uint16


@overload(to_f32, inline="always")
def _to_f32(v):
    if _is_bits(v):
        return lambda v: bf16_to_f32(v)
    return lambda v: np.float32(v)


@overload(from_f32, inline="always")
def _from_f32(v, tag):
    if _is_bits(tag):
        return lambda v, tag: f32_to_bf16(v)
    return lambda v, tag: v


@overload(from_f32_of, inline="always")
def _from_f32_of(v, tag, src):
    if _is_bits(tag) and _is_bits(src):
        return lambda v, tag, src: f32_to_bf16_rne(v)
    return lambda v, tag, src: from_f32(v, tag)


@overload(round_to, inline="always")
def _round_to(v, tag):
    if _is_bits(tag):
        return lambda v, tag: bf16_to_f32(f32_to_bf16(v))
    if tag == types.int16:
        return lambda v, tag: round_f16(v)
    return lambda v, tag: v


_F16_KEEP = np.uint32(0xFFFFE000)  # sign, exponent and the 10 mantissa bits float16 keeps
_F16_HALF = np.uint32(0x0FFF)
_S13 = np.uint32(13)
_F16_TINY = np.float32(2.0**-14)  # below this float16 is subnormal: a fixed 2**-24 quantum
_F16_Q = np.float32(2.0**24)


@njit(inline="always")
def round_f16(v):
    """FP32 ``v`` rounded to float16 precision (nearest even), as a store to float16 and a reload
    would give; no overflow check (used on ``x * rstd``). NaN and inf pass unchanged."""
    if abs(v) < _F16_TINY:
        return np.float32(np.rint(v * _F16_Q)) / _F16_Q
    if v != v:
        return v
    u = _f32_bits(v)
    return _bits_f32(np.uint32((u + _F16_HALF + ((u >> _S13) & _ONE)) & _F16_KEEP))
