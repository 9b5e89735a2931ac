"""What ``normlab numerics`` runs beside normlab's backends: the articles' naive same-dtype code,
and the float64 truth every implementation is scored against. Shared by the sweep and the
findings (:mod:`normlab.lab.numerics.statements`)."""

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
