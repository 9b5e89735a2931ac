"""What ``normlab numerics`` runs beside normlab's backends: the articles' code (the naive
same-dtype versions, 000 §7.1's ``stable_rmsnorm`` and 001's all-FP32 ``rms_norm``), and the
float64 truth every implementation is scored against. Shared by the sweep and the
findings (:mod:`normlab.lab.numerics.findings`)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from normlab import reference


def naive_rms_norm(x: Tensor, weight: Tensor, bias: None, eps: float) -> Tensor:
    """The articles' RMSNorm: ``mean(x²)`` and everything after it in ``x.dtype``."""
    return reference.rms_norm(x, weight, eps, casting="none")


def naive_layer_norm(x: Tensor, weight: Tensor, bias: Tensor, eps: float) -> Tensor:
    """The articles' LayerNorm: every step in ``x.dtype`` (so ``var`` overflows in FP16)."""
    mean = x.mean(-1, keepdim=True)
    var = x.var(-1, unbiased=False, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * weight + bias


def stable_rms_norm(x: Tensor, weight: Tensor, bias: None, eps: float) -> Tensor:
    """000 §7.1's ``stable_rmsnorm`` as the article writes it: ``r = 1/sqrt(mean(x²) + eps)``
    from ``x.float()``, cast back to ``x.dtype``, then ``y = (γ·x)·r`` in ``x.dtype`` (two
    multiplies in the input's precision, ``γ·x`` first)."""
    x_fp32 = x.float()
    rms = torch.rsqrt(x_fp32.pow(2).mean(dim=-1, keepdim=True) + eps)
    return weight * x * rms.to(x.dtype)


def fp32_rms_norm(x: Tensor, weight: Tensor, bias: None, eps: float) -> Tensor:
    """001's ``rms_norm`` as the article writes it: ``y = x·(1/sqrt(mean(x²) + eps))·γ`` all in
    FP32, cast to ``x.dtype`` once at the end."""
    x_fp32 = x.float()
    inv_rms = torch.rsqrt(x_fp32.square().mean(dim=-1, keepdim=True) + eps)
    y = x_fp32 * inv_rms * weight.float()
    return y.to(dtype=x.dtype)


def forward(fn: Callable, op: str, x, w, b, eps) -> tuple[Tensor, list[Tensor]]:
    """``y`` and the leaves ``[x, w]`` to differentiate (the bias gradient is just ``sum dy``)."""
    xi, wi = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    y = fn(xi, wi, b, eps) if op == "layer_norm" else fn(xi, wi, None, eps)
    return y, [xi, wi]


def truth_of(op: str, x, w, b, dy, eps) -> dict[str, Tensor]:
    """Float64 ``y``, ``dx``, ``dw`` from the reference (cast order is moot in float64)."""
    if op == "rms_norm":
        fn = lambda x, w, b, eps: reference.rms_norm(x, w, eps, casting="gemma")
    else:
        fn = lambda x, w, b, eps: reference.layer_norm(x, w, b, eps)
    d = [t.double() for t in (x, w, b, dy)]
    y, inputs = forward(fn, op, *d[:3], eps)
    dx, dw = torch.autograd.grad(y, inputs, d[3])
    return {"y": y.detach(), "dx": dx, "dw": dw}
