"""The ``"torch"`` backend: PyTorch's own ops, for comparison."""

from __future__ import annotations

import torch.nn.functional as F

from normlab.kernels.registry import Backend, register


def _no_memory_efficient(memory_efficient: bool) -> None:
    if memory_efficient:
        raise ValueError(
            "backend='torch' runs PyTorch's own norms, which save their input for backward; "
            "memory_efficient=True needs backend 'auto', 'numba', 'triton' or 'reference'"
        )


def rms_norm(x, weight, eps, *, residual, offset, casting, eps_inside, memory_efficient=False):
    _no_memory_efficient(memory_efficient)
    if casting != "gemma" or not eps_inside:
        raise ValueError(
            "backend='torch' is F.rms_norm, which implements casting='gemma' with "
            f"eps_inside=True only; got casting={casting!r}, eps_inside={eps_inside}"
        )
    h = x if residual is None else (x + residual).to(residual.dtype)
    w = None if weight is None else (weight + offset if offset else weight)
    y = F.rms_norm(h, (h.shape[-1],), w, eps)
    return y if residual is None else (y, h)


def layer_norm(x, weight, bias, eps, *, residual, memory_efficient=False):
    _no_memory_efficient(memory_efficient)
    h = x if residual is None else (x + residual).to(residual.dtype)
    y = F.layer_norm(h, (h.shape[-1],), weight, bias, eps)
    return y if residual is None else (y, h)


register(Backend("torch", rms_norm, layer_norm, lambda device: True))
