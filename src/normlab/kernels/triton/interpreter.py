"""Two fixes to Triton's CPU interpreter (``TRITON_INTERPRET=1``), applied before a launch on CPU
tensors; nothing here runs on a GPU.

Why it exists: Triton 3.x's interpreter converts FP32 to BF16 by truncating the low 16 bits,
where the GPU (and torch, which the reference runs on) rounds to nearest even. Interpreted
kernels are then one BF16 ulp away from both on about half of all elements: every BF16 output
of the kernel tests on a machine without a GPU (``tests/conftest.py`` sets
``TRITON_INTERPRET=1`` there) would disagree with the reference and the GPU, and a test such as
``test_bf16_rounds_to_nearest_even_like_the_gpu`` fails. The patch changes the interpreter's
conversion only; the kernels stay the GPU code.

The interpreter folds a ``tl.reduce`` with a custom combine element by element in Python, one
call of the combine per element: the backward's multi-operand sums (``kernels._add2``,
``_add3``) then cost seconds per row at N = 64K, most of the kernel tests' time. Those combines
are elementwise sums, so each operand reduces with ``np.sum`` as ``tl.sum`` already does there:
pairwise, like the GPU's tree, where the Python fold adds left to right.
"""

from __future__ import annotations

import numpy as np
import triton.language as tl


def round_bf16_to_nearest_even() -> None:
    """Make the interpreter round FP32 -> BF16 to nearest even, as the GPU does (idempotent)."""
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    if getattr(builder, "_normlab_rne", False):
        return
    cast, fp_to_fp = builder.cast_impl, builder.create_fp_to_fp

    def to_bf16(src):
        f = np.ascontiguousarray(src.data, dtype=np.float32)
        u = f.view(np.uint32)
        r = ((u + np.uint32(0x7FFF) + ((u >> 16) & 1)) >> 16).astype(np.uint16)
        nan = np.isnan(f)
        r[nan] = (u[nan] >> 16).astype(np.uint16) | np.uint16(0x40)  # stay a (quiet) NaN
        return interpreter.TensorHandle(r, tl.bfloat16)

    def is_f32_to_bf16(src, dst_type) -> bool:
        return src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16

    def cast_impl(self, src, dst_type):
        return to_bf16(src) if is_f32_to_bf16(src, dst_type) else cast(self, src, dst_type)

    def create_fp_to_fp(self, src, dst_type, rounding_mode):
        if is_f32_to_bf16(src, dst_type):
            return to_bf16(src)
        return fp_to_fp(self, src, dst_type, rounding_mode)

    # create_fp_trunc and friends are lambdas that look up self.cast_impl: they follow.
    builder.cast_impl, builder.create_fp_to_fp = cast_impl, create_fp_to_fp
    builder._normlab_rne = True


def reduce_sums_with_numpy() -> None:
    """Reduce each operand of a ``tl.reduce`` over ``kernels._add2``/``_add3`` with ``np.sum``,
    as the interpreter does for ``tl.sum`` (idempotent)."""
    from triton.runtime import interpreter

    from normlab.kernels.triton import kernels

    ops = interpreter.ReduceOps
    if getattr(ops, "_normlab_sums", False):
        return
    sums = {kernels._add2.fn, kernels._add3.fn}
    apply_impl = ops.apply_impl

    def apply_sums(self, input):
        if getattr(self.combine_fn, "fn", None) in sums:
            return [self.sum(t) for t in input]
        return apply_impl(self, input)

    ops.apply_impl = apply_sums
    ops._normlab_sums = True
