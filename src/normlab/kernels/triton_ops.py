"""The ``"triton"`` backend: Triton kernels behind the shared autograd/custom-op layer.

Importing this module registers ``normlab::triton_*`` custom ops (through
:func:`normlab.kernels.ops.make_kernel_ops`) and the backend with :mod:`normlab.functional`.
It runs on CUDA tensors, and on CPU tensors when ``TRITON_INTERPRET=1`` (set before Triton is
first imported), which is how the test suite exercises the kernels without a GPU.
"""

from __future__ import annotations

import os

import torch
from torch import Tensor

from normlab.functional import Backend, register_backend
from normlab.kernels import triton_launch as tk
from normlab.kernels.ops import Launchers, make_kernel_ops


def _rms_fwd(x, weight, residual, eps, offset, casting, eps_inside, out_dtype):
    y, h, _, rstd = tk.norm_fwd(
        x, weight, None, residual, eps, is_rms=True, out_dtype=out_dtype, offset=offset,
        casting=casting, eps_inside=eps_inside,
    )  # fmt: skip
    return y, h, rstd


def _rms_bwd(dy, dh, h, weight, rstd, eps, offset, casting, eps_inside):
    dh_total, dw, _ = tk.norm_bwd(
        dy, dh, h, weight, None, rstd, is_rms=True, has_bias=False, offset=offset,
        casting=casting, eps_inside=eps_inside,
    )  # fmt: skip
    return dh_total, dw


def _ln_fwd(x, weight, bias, residual, eps):
    h_dtype = x.dtype if residual is None else residual.dtype
    return tk.norm_fwd(x, weight, bias, residual, eps, is_rms=False, out_dtype=h_dtype)


def _ln_bwd(dy, dh, h, weight, mean, rstd, has_bias):
    return tk.norm_bwd(dy, dh, h, weight, mean, rstd, is_rms=False, has_bias=has_bias)


def supports(device: torch.device) -> bool:
    """CUDA always; the CPU only through the Triton interpreter."""
    if device.type == "cuda":
        return True
    return device.type == "cpu" and os.environ.get("TRITON_INTERPRET") == "1"


_ops = make_kernel_ops("triton", Launchers(_rms_fwd, _rms_bwd, _ln_fwd, _ln_bwd))


def _has_f64(*ts: Tensor | None) -> bool:
    return any(t is not None and t.dtype == torch.float64 for t in ts)


def rms_norm(x: Tensor, weight, eps, *, residual, offset, casting, eps_inside):
    """Backend entry. FP64 has no Triton kernel (FP64 on GPUs is a slow path nobody trains in),
    so it goes to the reference, which keeps FP64 statistics."""
    if _has_f64(x, weight, residual):
        from normlab import reference

        return reference.rms_norm(
            x, weight, eps, residual=residual, offset=offset, casting=casting,
            eps_inside=eps_inside,
        )  # fmt: skip
    return _ops.rms_norm(
        x, weight, eps, residual=residual, offset=offset, casting=casting, eps_inside=eps_inside
    )


def layer_norm(x: Tensor, weight, bias, eps, *, residual):
    """Backend entry; FP64 goes to the reference as in :func:`rms_norm`."""
    if _has_f64(x, weight, bias, residual):
        from normlab import reference

        return reference.layer_norm(x, weight, bias, eps, residual=residual)
    return _ops.layer_norm(x, weight, bias, eps, residual=residual)


register_backend(Backend("triton", rms_norm, layer_norm, supports))
