"""The readable eager specification of normlab's ops.

Every kernel backend is tested against these functions. They are written for clarity, not speed:
statistics are accumulated in FP32 (FP64 for FP64 input) and every cast is spelled out, so the
cast order of each model family can be read off the code.

Inputs are assumed valid (``normlab.functional`` validates once for every backend).
"""

from __future__ import annotations

import torch
from torch import Tensor

CASTINGS = ("llama", "gemma", "none")


def stat_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype statistics are accumulated in: FP64 for FP64 input, FP32 otherwise."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def default_eps(dtype: torch.dtype) -> float:
    """What ``eps=None`` means, as in ``torch.nn.RMSNorm``: the machine epsilon of the dtype the
    statistics are computed in (``stat_dtype``), so FP32's for half inputs, not the half dtype's
    (``2**-7`` in bfloat16, which would swamp ``mean(x²)`` of any row of RMS below ~0.1)."""
    return torch.finfo(stat_dtype(dtype)).eps


def residual_add(x: Tensor, residual: Tensor) -> Tensor:
    """``h = x + residual`` computed in the accumulation dtype, stored in ``residual.dtype``.

    Rounding once from FP32 (FP64) is what an eager ``x + residual`` does for equal dtypes, so the
    fused form and ``norm(x + residual)`` agree bit for bit.
    """
    acc = stat_dtype(torch.promote_types(x.dtype, residual.dtype))
    return (x.to(acc) + residual.to(acc)).to(residual.dtype)


def rms_norm(
    x: Tensor,
    weight: Tensor | None = None,
    eps: float | None = 1e-6,
    *,
    residual: Tensor | None = None,
    offset: float = 0.0,
    casting: str = "llama",
    eps_inside: bool = True,
) -> Tensor | tuple[Tensor, Tensor]:
    r"""RMSNorm over the last dimension.

    .. math::
        h = x + r, \quad
        \mathrm{rstd} = 1/\sqrt{\tfrac1N\sum_i h_i^2 + \epsilon}
        \;\;(\text{or } 1/(\sqrt{\tfrac1N\sum_i h_i^2} + \epsilon) \text{ if not eps\_inside}),
        \quad y_i = (\text{offset} + w_i)\, h_i\, \mathrm{rstd}

    Cast orders (``s`` is the statistics dtype, FP32 for half inputs):

    - ``"llama"``: ``xhat = (h.to(s) * rstd).to(h.dtype)``; ``y = (offset + w) * xhat``
      (HF LlamaRMSNorm; the product follows torch type promotion).
    - ``"gemma"``: ``y = (h.to(s) * rstd * (offset + w.to(s))).to(h.dtype)`` (HF GemmaRMSNorm,
      ``F.rms_norm``).
    - ``"none"``: every step in ``h.dtype``, the naive code the articles show.

    Without a weight there is no gain (``offset`` must then be 0). With ``residual`` the call
    returns ``(y, h)``; ``y`` is exactly ``rms_norm(h)``. ``eps=None`` is
    :func:`default_eps` of ``h.dtype`` (``torch.nn.RMSNorm``'s meaning).
    """
    h = x if residual is None else residual_add(x, residual)
    if eps is None:
        eps = default_eps(h.dtype)
    if casting == "none":
        ms = h.pow(2).mean(-1, keepdim=True)
        rstd = torch.rsqrt(ms + eps) if eps_inside else 1.0 / (ms.sqrt() + eps)
        y = h * rstd
        if weight is not None:
            y = (offset + weight) * y
    else:
        s = stat_dtype(h.dtype)
        hs = h.to(s)
        ms = hs.pow(2).mean(-1, keepdim=True)
        rstd = torch.rsqrt(ms + eps) if eps_inside else 1.0 / (ms.sqrt() + eps)
        if casting == "llama":
            y = (hs * rstd).to(h.dtype)
            if weight is not None:
                y = (offset + weight) * y
        else:
            y = hs * rstd
            if weight is not None:
                y = y * (offset + weight.to(s))
            y = y.to(h.dtype)
    return y if residual is None else (y, h)


def layer_norm(
    x: Tensor,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
    *,
    residual: Tensor | None = None,
) -> Tensor | tuple[Tensor, Tensor]:
    r"""LayerNorm over the last dimension, statistics in FP32 (FP64 for FP64 input).

    .. math::
        h = x + r,\quad \mu = \tfrac1N\sum_i h_i,\quad
        \sigma^2 = \tfrac1N\sum_i (h_i-\mu)^2,\quad
        y_i = \frac{h_i-\mu}{\sqrt{\sigma^2+\epsilon}}\,\gamma_i + \beta_i

    Everything after the load is computed in the statistics dtype and rounded once to
    ``h.dtype`` (what ``F.layer_norm`` does for half inputs). The variance is two-pass, so a large
    mean does not cancel it away. With ``residual`` the call returns ``(y, h)``.
    """
    h = x if residual is None else residual_add(x, residual)
    s = stat_dtype(h.dtype)
    hs = h.to(s)
    mean = hs.mean(-1, keepdim=True)
    xc = hs - mean
    rstd = torch.rsqrt(xc.pow(2).mean(-1, keepdim=True) + eps)
    y = xc * rstd
    if weight is not None:
        y = y * weight.to(s)
    if bias is not None:
        y = y + bias.to(s)
    y = y.to(h.dtype)
    return y if residual is None else (y, h)


def dyt(
    x: Tensor,
    alpha: Tensor,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    *,
    residual: Tensor | None = None,
) -> Tensor | tuple[Tensor, Tensor]:
    r"""Dynamic Tanh (Zhu et al. 2025), elementwise: no statistics.

    .. math::
        h = x + r,\quad y_i = \gamma_i \tanh(\alpha\, h_i) + \beta_i

    ``alpha`` is one scalar (shape ``()`` or ``(1,)``). The math runs in the statistics dtype
    (FP32 for half inputs) and rounds once to ``h.dtype``, as :func:`layer_norm` does. With
    ``residual`` the call returns ``(y, h)``.
    """
    h = x if residual is None else residual_add(x, residual)
    s = stat_dtype(h.dtype)
    y = torch.tanh(alpha.to(s) * h.to(s))
    if weight is not None:
        y = y * weight.to(s)
    if bias is not None:
        y = y + bias.to(s)
    y = y.to(h.dtype)
    return y if residual is None else (y, h)


def scale_norm(
    x: Tensor,
    weight: Tensor | None = None,
    eps: float = 1e-5,
    *,
    residual: Tensor | None = None,
) -> Tensor | tuple[Tensor, Tensor]:
    r"""ScaleNorm (Nguyen & Salazar 2019) over the last dimension: one scalar gain ``g``.

    .. math::
        h = x + r,\quad y_i = g\, \frac{h_i}{\max(\lVert h \rVert_2, \epsilon)}

    ``weight`` is ``g`` (shape ``()`` or ``(1,)``; None: ``g = 1``). The norm is taken in the
    statistics dtype (FP32 for half inputs) and ``y`` rounds once to ``h.dtype``; ``eps`` keeps an
    all-zero row at zero. With ``residual`` the call returns ``(y, h)``.
    """
    h = x if residual is None else residual_add(x, residual)
    hs = h.to(stat_dtype(h.dtype))
    norm = torch.linalg.vector_norm(hs, dim=-1, keepdim=True).clamp_min(eps)
    y = hs / norm if weight is None else hs * (weight.to(hs.dtype) / norm)
    y = y.to(h.dtype)
    return y if residual is None else (y, h)
