"""The ``"numba"`` backend: fused Numba CPU kernels, registered with ``normlab.functional``.

Importing this module registers the backend (``functional`` does it lazily on first use) and the
``normlab::numba_*`` custom ops. float64 inputs, and the naive ``casting="none"`` order in half
precision, go to the reference ops (the kernels compute in FP32).
"""

from __future__ import annotations

import torch

from normlab import reference
from normlab.functional import Backend, register_backend
from normlab.kernels import numba_launch
from normlab.kernels.ops import Launchers, make_kernel_ops

OPS = make_kernel_ops(
    "numba",
    Launchers(
        rms_fwd=numba_launch.rms_fwd,
        rms_bwd=numba_launch.rms_bwd,
        ln_fwd=numba_launch.ln_fwd,
        ln_bwd=numba_launch.ln_bwd,
    ),
)


def _any_fp64(*ts: torch.Tensor | None) -> bool:
    for t in ts:
        if t is not None and t.dtype == torch.float64:
            return True
    return False


def _naive_half(casting: str, x: torch.Tensor, residual: torch.Tensor | None) -> bool:
    # casting="none" is every step in the half dtype, kept to be compared against: the FP32
    # kernels would silently make it accurate, so the reference (which is that code) runs it.
    h = x if residual is None else residual
    return casting == "none" and h.dtype in (torch.float16, torch.bfloat16)


def rms_norm(x, weight, eps, *, residual, offset, casting, eps_inside):
    """Backend-contract RMSNorm (arguments validated by ``normlab.functional``)."""
    slow = _any_fp64(x, weight, residual) or _naive_half(casting, x, residual)
    impl = reference.rms_norm if slow else OPS.rms_norm
    return impl(
        x, weight, eps, residual=residual, offset=offset, casting=casting, eps_inside=eps_inside
    )


def layer_norm(x, weight, bias, eps, *, residual):
    """Backend-contract LayerNorm (arguments validated by ``normlab.functional``)."""
    impl = reference.layer_norm if _any_fp64(x, weight, bias, residual) else OPS.layer_norm
    return impl(x, weight, bias, eps, residual=residual)


def _on_cpu(device: torch.device) -> bool:
    return device.type == "cpu"


register_backend(Backend("numba", rms_norm, layer_norm, _on_cpu))
