"""Public functional ops: validate once, pick a backend, call it.

Backends live in :mod:`normlab.kernels.registry`; a new one registers itself there and needs no
edit here.
"""

from __future__ import annotations

import os

import torch
from torch import Tensor

from normlab import reference
from normlab.kernels import registry
from normlab.kernels.registry import Backend
from normlab.reference import default_eps
from normlab.validation import (
    check_backend_implements,
    check_common,
    check_eps,
    check_flag,
    check_rms_options,
    check_scalar,
    check_tensor,
    check_x,
)

__all__ = ["available_backends", "dyt", "get_backend", "layer_norm", "rms_norm", "scale_norm"]

get_backend = registry.get
available_backends = registry.available


def _resolve(backend: str, x: Tensor) -> Backend:
    if backend == "auto":
        return registry.auto(x.device)
    impl = registry.get(backend)
    if not impl.supports(x.device):
        hint = " (or set TRITON_INTERPRET=1 to run it on the CPU)" if backend == "triton" else ""
        raise ValueError(f"backend={backend!r} does not run on {x.device.type} tensors{hint}")
    return impl


def rms_norm(
    x: Tensor,
    weight: Tensor | None = None,
    eps: float | None = 1e-6,
    *,
    residual: Tensor | None = None,
    offset: float = 0.0,
    casting: str = "llama",
    eps_inside: bool = True,
    backend: str = "auto",
    memory_efficient: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """RMSNorm over the last dimension of ``x`` (see :func:`normlab.reference.rms_norm`).

    With ``residual`` it returns ``(y, h)`` where ``h = x + residual`` (in ``residual.dtype``)
    and ``y = rms_norm(h)``. ``casting`` picks the model family's cast order: ``"llama"``,
    ``"gemma"`` or ``"none"``; ``offset`` adds a constant to the weight (Gemma's ``1 + w``).
    ``backend="auto"`` runs the Numba kernels on CPU tensors and the Triton kernels on CUDA
    tensors, at every shape (the reference where neither is installed; docs/kernels.md, "What
    auto runs", says why nothing is routed to PyTorch's ops); float64 always runs the reference.
    ``eps=None`` is what ``torch.nn.RMSNorm`` makes of it: the machine epsilon of the statistics
    dtype (FP32 for half inputs, FP64 for FP64; :func:`normlab.reference.default_eps`).
    """
    if eps is None:
        eps = default_eps(x.dtype if residual is None else residual.dtype)
    check_common(x, weight, residual, eps, backend)
    check_rms_options(weight, offset, casting, eps_inside)
    check_flag("memory_efficient", memory_efficient)
    return _resolve(backend, x).rms_norm(
        x,
        weight,
        eps,
        residual=residual,
        offset=float(offset),
        casting=casting,
        eps_inside=eps_inside,
        memory_efficient=memory_efficient,
    )


def layer_norm(
    x: Tensor,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
    *,
    residual: Tensor | None = None,
    backend: str = "auto",
    memory_efficient: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """LayerNorm over the last dimension of ``x`` (see :func:`normlab.reference.layer_norm`).

    With ``residual`` it returns ``(y, h)`` where ``h = x + residual`` and ``y = layer_norm(h)``.
    ``backend`` as in :func:`rms_norm`: ``"auto"`` keeps small float32 calls on the kernels even
    where ``F.layer_norm`` is faster, as it misses the accuracy contract on some inputs.
    ``memory_efficient`` as in :func:`rms_norm` (``xhat = (y - bias) / weight``; the mean is
    not needed).
    """
    check_common(x, weight, residual, eps, backend)
    check_tensor("bias", bias, x, x.shape[-1:])
    check_flag("memory_efficient", memory_efficient)
    return _resolve(backend, x).layer_norm(
        x, weight, bias, eps, residual=residual, memory_efficient=memory_efficient
    )


# No kernel computes DyT or ScaleNorm: elementwise or one reduction, torch.compile fuses the
# reference as well as a kernel would.
_REFERENCE_ONLY = ("auto", "reference")


def dyt(
    x: Tensor,
    alpha: Tensor,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    *,
    residual: Tensor | None = None,
    backend: str = "auto",
) -> Tensor | tuple[Tensor, Tensor]:
    """Dynamic Tanh, ``y = weight * tanh(alpha * x) + bias`` (see :func:`normlab.reference.dyt`).

    ``alpha`` is a one-element tensor; ``weight``/``bias`` are ``(N,)`` or None. With
    ``residual`` it returns ``(y, h)`` where ``h = x + residual`` and ``y = dyt(h)``. Only
    ``backend="auto"`` and ``"reference"`` compute it (both run the reference); naming another
    backend is a ValueError.
    """
    check_x(x)
    check_scalar("alpha", alpha, x, required=True)
    check_tensor("weight", weight, x, x.shape[-1:])
    check_tensor("bias", bias, x, x.shape[-1:])
    check_tensor("residual", residual, x, x.shape)
    check_backend_implements("dyt", backend, _REFERENCE_ONLY)
    return reference.dyt(x, alpha, weight, bias, residual=residual)


def scale_norm(
    x: Tensor,
    weight: Tensor | None = None,
    eps: float = 1e-5,
    *,
    residual: Tensor | None = None,
    backend: str = "auto",
) -> Tensor | tuple[Tensor, Tensor]:
    """ScaleNorm, ``y = g * x / max(||x||, eps)`` over the last dimension (see
    :func:`normlab.reference.scale_norm`); ``weight`` is the one-element gain ``g`` (None: 1).

    With ``residual`` it returns ``(y, h)`` where ``h = x + residual`` and ``y = scale_norm(h)``.
    ``backend`` as in :func:`dyt`.
    """
    check_x(x)
    check_scalar("weight", weight, x)
    check_tensor("residual", residual, x, x.shape)
    check_eps(eps)
    check_backend_implements("scale_norm", backend, _REFERENCE_ONLY)
    return reference.scale_norm(x, weight, eps, residual=residual)


registry.preload(
    ["numba", "triton"]
    if torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1"
    else ["numba"]
)
