"""The ``"triton"`` backend: Triton kernels behind the shared autograd/custom-op layer.

Importing this module registers ``normlab::triton_*`` custom ops (through each op's ``bind``,
:mod:`normlab.kernels.rms_norm` and :mod:`normlab.kernels.layer_norm`) and the backend with the
registry. The launchers here adapt :mod:`normlab.kernels.triton.launch`, which computes both
norms, to the ops' launcher contract.
It runs on CUDA tensors, and on CPU tensors when ``TRITON_INTERPRET=1`` (set before Triton is
first imported), which is how the test suite exercises the kernels without a GPU.
"""

from __future__ import annotations

import os
from types import SimpleNamespace

import torch

from normlab.kernels import layer_norm, rms_norm
from normlab.kernels.registry import kernel_backend, register
from normlab.kernels.triton import launch as tk


def _rms_fwd(x, weight, residual, eps, offset, casting, eps_inside, out_dtype):
    rms = {"offset": offset, "casting": casting, "eps_inside": eps_inside}
    y, h, _, rstd = tk.norm_fwd(
        x, weight, None, residual, eps, is_rms=True, out_dtype=out_dtype, **rms
    )
    return y, h, rstd


def _rms_bwd(dy, dh, h, weight, rstd, eps, offset, casting, eps_inside):
    rms = {"offset": offset, "casting": casting, "eps_inside": eps_inside}
    dh_total, dw, _ = tk.norm_bwd(dy, dh, h, weight, None, rstd, is_rms=True, has_bias=False, **rms)
    return dh_total, dw


def _ln_fwd(x, weight, bias, residual, eps):
    h_dtype = x.dtype if residual is None else residual.dtype
    return tk.norm_fwd(x, weight, bias, residual, eps, is_rms=False, out_dtype=h_dtype)


def _ln_bwd(dy, dh, h, weight, mean, rstd, has_bias):
    return tk.norm_bwd(dy, dh, h, weight, mean, rstd, is_rms=False, has_bias=has_bias)


def _rms_bwd_y(dy, dh, y, weight, rstd, eps, offset, casting, eps_inside, h_dtype):
    rms = {"offset": offset, "casting": casting, "eps_inside": eps_inside, "dh_dtype": h_dtype}
    dh_total, dw, _ = tk.norm_bwd(dy, dh, y, weight, None, rstd, is_rms=True, has_bias=False, **rms)
    return dh_total, dw


def _ln_bwd_y(dy, dh, y, weight, bias, rstd, h_dtype):
    return tk.norm_bwd(
        dy,
        dh,
        y,
        weight,
        None,
        rstd,
        is_rms=False,
        has_bias=bias is not None,
        bias=bias,
        dh_dtype=h_dtype,
    )


def supports(device: torch.device) -> bool:
    """CUDA always; the CPU only through the Triton interpreter."""
    if device.type == "cuda":
        return True
    return device.type == "cpu" and os.environ.get("TRITON_INTERPRET") == "1"


_launch = SimpleNamespace(
    rms_fwd=_rms_fwd,
    rms_bwd=_rms_bwd,
    rms_bwd_y=_rms_bwd_y,
    ln_fwd=_ln_fwd,
    ln_bwd=_ln_bwd,
    ln_bwd_y=_ln_bwd_y,
)
RMS = rms_norm.bind("triton", _launch)
LN = layer_norm.bind("triton", _launch)

# FP64 has no Triton kernel (FP64 on GPUs is a slow path nobody trains in); the kernels do
# implement casting="none" (every step rounded to the half dtype) themselves.
register(kernel_backend("triton", RMS.rms_norm, LN.layer_norm, supports, naive_half=True))
