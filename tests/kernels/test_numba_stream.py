"""Streamed stores (``Launch.stream``): the non-temporal row copy, and the streamed kernels give
the plain two-pass kernels' bits on rows whose lines start anywhere."""

import numpy as np
import pytest
import torch
from numba import njit

from normlab.kernels.numba import launch as L
from normlab.kernels.numba.choices import Launch
from normlab.kernels.numba.stream import LINE, fence, head, stream_out

PLAIN, STREAMED = Launch(False), Launch(False, stream=True)


@njit
def _copy_streamed(dst, src, block):
    """``dst[:] = src`` as the kernels store a row: the head plainly, then blocks streamed."""
    j = head(dst)
    dst[:j] = src[:j]
    buf = np.empty(block, dst.dtype)
    while j < dst.size:
        k = min(block, dst.size - j)
        buf[:k] = src[j : j + k]
        stream_out(dst[j:], buf, k)
        j += k
    fence()


@pytest.mark.parametrize("dtype", [np.float32, np.uint16])
@pytest.mark.parametrize("size", [0, 1, 7, 16, 33, 100, 1000])
@pytest.mark.parametrize("offset", [0, 1, 5, 16])
def test_a_streamed_row_is_the_row_and_nothing_around_it(dtype, size, offset):
    whole = np.full(size + offset + 64, 7, dtype)
    dst = whole[offset : offset + size]
    src = np.arange(size).astype(dtype)
    assert head(dst) == min(size, (-dst.ctypes.data % LINE) // dst.itemsize)
    _copy_streamed(dst, src, 64)
    assert (dst == src).all()
    assert (whole[:offset] == 7).all() and (whole[offset + size :] == 7).all()


def _same(a, b):
    """Whether two launchers' outputs (tensors, or None where not asked) are the same bits."""
    return all(p is q or torch.equal(p, q) for p, q in zip(a, b, strict=True))


def _inputs(m, n, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    # an input whose rows start off the lines (a view 3 elements in)
    x = torch.randn(m * n + 3, generator=g).to(dtype)[3:].view(m, n)
    r = torch.randn(m, n, generator=g).to(dtype)
    return x, r, torch.rand(n, generator=g).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("m", "n"), [(1, 1), (3, 7), (5, 123), (33, 1024), (40, 2048), (9, 4097)])
def test_the_streamed_kernels_store_the_plain_kernels_bits(dtype, m, n):
    x, r, w = _inputs(m, n, dtype, m * n)
    for res in (None, r):  # the forward with and without a fused residual (h written plainly)
        rms = [
            L.rms_fwd(x, w, res, 1e-6, 0.0, "llama", True, dtype, launch=c)
            for c in (PLAIN, STREAMED)
        ]
        ln = [L.ln_fwd(x, w, w, res, 1e-5, launch=c) for c in (PLAIN, STREAMED)]
        for a, b in (rms, ln):
            assert _same(a, b)
    rstd, (_, _, mean, lrstd) = rms[0][2], ln[0]
    for dh in (None, r):  # the backwards with and without an incoming gradient
        a, b = (
            L.rms_bwd(r, dh, x, w, rstd, 1e-6, 0.0, "llama", True, c) for c in (PLAIN, STREAMED)
        )
        assert _same(a, b)
        a, b = (L.ln_bwd(r, dh, x, w, mean, lrstd, True, c) for c in (PLAIN, STREAMED))
        assert _same(a, b)


def test_a_streamed_launch_is_a_two_pass_one_of_the_reference_loops():
    for bad in ({"pipelined": True}, {"pipelined": False, "bf16_pairs": True}):
        with pytest.raises(ValueError, match="two-pass reference loops"):
            Launch(stream=True, **bad)
    assert STREAMED.name == "2pass/c0/t1/nt" and Launch.from_name(STREAMED.name) == STREAMED
