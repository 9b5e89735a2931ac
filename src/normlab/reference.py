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


def _affine(y: Tensor, weight: Tensor | None, bias: Tensor | None, s: torch.dtype) -> Tensor:
    """``y * weight + bias`` in the statistics dtype ``s`` (no weight: 1, no bias: 0)."""
    if weight is not None:
        y = y * weight.to(s)
    if bias is not None:
        y = y + bias.to(s)
    return y


def rms_norm(
    x: Tensor,
    weight: Tensor | None = None,
    eps: float | None = 1e-6,
    *,
    residual: Tensor | None = None,
    offset: float = 0.0,
    casting: str = "llama",
    eps_inside: bool = True,
    memory_efficient: bool = False,
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

    ``memory_efficient=True`` gives the same outputs with a backward that recomputes ``xhat``
    from the saved output (:class:`_RMSFromOutput`) instead of saving the input, where
    :func:`recompute_ok` allows it. That check reads a value on the host, which torch.compile
    cannot trace: compiled, the reference runs its default backward (the kernel backends have
    traceable ops for this mode).
    """
    if eps is None:
        eps = default_eps(x.dtype if residual is None else residual.dtype)
    if memory_efficient and _recompute_eager(x, weight, residual):
        gain = rms_gain(weight, offset, casting)
        if recompute_ok(gain, None, x.shape[-1]):
            opts = (eps, offset, casting, eps_inside)
            out = _RMSFromOutput.apply(x, weight, residual, gain, opts)
            return out[0] if residual is None else out
    h = x if residual is None else residual_add(x, residual)
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
    memory_efficient: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    r"""LayerNorm over the last dimension, statistics in FP32 (FP64 for FP64 input).

    .. math::
        h = x + r,\quad \mu = \tfrac1N\sum_i h_i,\quad
        \sigma^2 = \tfrac1N\sum_i (h_i-\mu)^2,\quad
        y_i = \frac{h_i-\mu}{\sqrt{\sigma^2+\epsilon}}\,\gamma_i + \beta_i

    Everything after the load is computed in the statistics dtype and rounded once to
    ``h.dtype`` (what ``F.layer_norm`` does for half inputs). The variance is two-pass, so a large
    mean does not cancel it away. With ``residual`` the call returns ``(y, h)``.
    ``memory_efficient`` as in :func:`rms_norm` (:class:`_LNFromOutput`).
    """
    if memory_efficient and _recompute_eager(x, weight, bias, residual):
        if recompute_ok(weight, bias, x.shape[-1]):
            out = _LNFromOutput.apply(x, weight, bias, residual, eps)
            return out[0] if residual is None else out
    h = x if residual is None else residual_add(x, residual)
    s = stat_dtype(h.dtype)
    hs = h.to(s)
    mean = hs.mean(-1, keepdim=True)
    xc = hs - mean
    rstd = torch.rsqrt(xc.pow(2).mean(-1, keepdim=True) + eps)
    y = xc * rstd
    y = _affine(y, weight, bias, s).to(h.dtype)
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
    y = _affine(y, weight, bias, s).to(h.dtype)
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


# --------------------------------------------------------------------------------------------
# The memory-efficient backward (Apex's memory_efficient=True, Transformer Engine): save the
# output y instead of the input and recover xhat = (y - beta) / gamma in the backward. In a
# Pre-LN block y is saved by the next linear layer anyway, so the norm then keeps no (B, T, d)
# tensor of its own (docs/kernels.md, "Memory-efficient backward", says what is saved where).

RECOMPUTE_MIN_GAIN = 1e-3
"""Below this ``|gamma_j|`` the output no longer carries ``xhat_j``: ``gamma_j = 0`` loses it,
and a tiny gain pushes ``gamma_j * xhat_j`` into the subnormals of half dtypes, whose fixed
quantum divided by ``gamma_j`` becomes ``xhat_j``'s error."""
RECOMPUTE_MAX_BIAS_RATIO = 4.0
"""Above this ``|beta_j| / |gamma_j|`` (LayerNorm) y's rounding of ``beta_j``, divided by
``gamma_j``, would add more than 4 units of y's rounding to ``xhat_j``'s error."""


def _recompute_eager(*ts: Tensor | None) -> bool:
    """Eager (not traced by torch.compile) and some input needs a gradient."""
    if torch.compiler.is_compiling() or not torch.is_grad_enabled():
        return False
    return any(t is not None and t.requires_grad for t in ts)


def rms_gain(weight: Tensor | None, offset: float, casting: str) -> Tensor | None:
    """RMSNorm's gain ``offset + weight`` as the forward multiplies by it: in FP32 for gemma,
    in the weight's dtype for llama/none (then widened to FP32, exactly); None without weight."""
    if weight is None:
        return None
    w = weight.detach()
    if casting == "gemma":
        return offset + w.to(stat_dtype(w.dtype))
    return (offset + w).to(stat_dtype(w.dtype))


def recompute_ok(gain: Tensor | None, bias: Tensor | None, n: int) -> bool:
    """Whether xhat can be recovered from ``y`` to within a few roundings of ``y``: rows of
    ``n >= 2`` elements and every ``|gain_j| >= max(RECOMPUTE_MIN_GAIN, |bias_j| /
    RECOMPUTE_MAX_BIAS_RATIO)`` (a missing gain is 1, a missing bias 0; a NaN gain fails).
    One reduction over N and a host read.

    A one-element row normalizes to ``xhat = h / sqrt(h^2 + eps)``, ``+-1`` to within eps, and
    its gradient is that eps term alone, which y's rounding wipes out; saving such an input
    (one column) costs nothing anyway."""
    if n < 2:
        return False
    if gain is None and bias is None:
        return True
    g = torch.ones((), device=bias.device) if gain is None else gain.detach().abs()
    floor = torch.full((), RECOMPUTE_MIN_GAIN, device=g.device)
    if bias is not None:
        floor = torch.maximum(bias.detach().abs().float() / RECOMPUTE_MAX_BIAS_RATIO, floor)
    return bool((g >= floor).all())


def rms_grad_from_output(dy, y, gain, rstd, eps, eps_inside, xq_dtype=None):
    """``(dh, dgain)`` of RMSNorm from its output: ``xhat = y / gain``. The llama/none orders
    multiplied the gain by xhat rounded to h's dtype (``xq_dtype``): rounding ``y / gain`` to
    it again recovers that xhat exactly (y's own rounding is at most half a unit of it), the
    one dgain needs; dh takes it in place of the exact one.

    ``dh = rstd * gain * dy - k * xhat``, ``k = rstd * mean(gain * dy * xhat)`` with eps inside,
    ``mean(...) / sqrt(mean(h^2))`` with eps outside, where ``sqrt(mean(h^2)) =
    sqrt(mean(xhat^2)) / rstd``."""
    s = stat_dtype(y.dtype)
    xhat = y.to(s) if gain is None else y.to(s) / gain.to(s)
    if xq_dtype is not None:
        xhat = xhat.to(xq_dtype).to(s)
    gdy = dy.to(s) if gain is None else dy.to(s) * gain.to(s)
    c = (gdy * xhat).mean(-1, keepdim=True)
    if eps_inside:
        k = rstd * c
    else:
        rms = xhat.pow(2).mean(-1, keepdim=True).sqrt() / rstd
        k = torch.where(rms > 0, c / rms, torch.zeros_like(c))
    dh = rstd * gdy - k * xhat
    dgain = None if gain is None else (dy.to(s) * xhat).reshape(-1, y.shape[-1]).sum(0)
    return dh, dgain


def layer_norm_grad_from_output(dy, y, weight, bias, rstd):
    """``(dh, dweight, dbias)`` of LayerNorm from its output: ``xhat = (y - bias) / weight``,
    centred on its computed mean (the formula assumes mean(xhat) = 0, which the roundings of y
    break), ``dh = rstd * (w dy - mean(w dy) - xhat * mean(w dy xhat))``."""
    s = stat_dtype(y.dtype)
    xhat = y.to(s)
    if bias is not None:
        xhat = xhat - bias.to(s)
    if weight is not None:
        xhat = xhat / weight.to(s)
    gdy = dy.to(s) if weight is None else dy.to(s) * weight.to(s)
    xc = xhat - xhat.mean(-1, keepdim=True)
    dh = rstd * (gdy - gdy.mean(-1, keepdim=True) - xc * (gdy * xc).mean(-1, keepdim=True))
    n = y.shape[-1]
    dw = None if weight is None else (dy.to(s) * xhat).reshape(-1, n).sum(0)
    db = None if bias is None else dy.to(s).reshape(-1, n).sum(0)
    return dh, dw, db


def _input_grads(dh, dh_in, dtypes):
    """``(dx, dresidual)`` from ``dh`` (the add passes gradients straight through); ``dtypes``
    are x's and residual's (None without one). Only dtypes are kept: holding the input tensors
    on ctx would keep alive what this backward exists not to save."""
    x_dtype, r_dtype = dtypes
    if r_dtype is None:
        return dh.to(x_dtype), None
    if dh_in is not None:
        dh = dh + dh_in.to(dh.dtype)
    return dh.to(x_dtype), dh.to(r_dtype)


def _to(g: Tensor | None, dtype: torch.dtype | None) -> Tensor | None:
    return None if g is None or dtype is None else g.to(dtype)


def _dtype(t: Tensor | None) -> torch.dtype | None:
    return None if t is None else t.dtype


class _RMSFromOutput(torch.autograd.Function):
    """RMSNorm saving ``(y, gain, rstd)``: nothing of the input's size that y is not."""

    @staticmethod
    def forward(ctx, x, weight, residual, gain, opts):
        eps, offset, casting, eps_inside = opts
        kw = {"residual": residual, "offset": offset, "casting": casting}
        out = rms_norm(x, weight, eps, eps_inside=eps_inside, **kw)
        y, h = (out, x) if residual is None else out
        hs = h.to(stat_dtype(h.dtype))
        ms = hs.pow(2).mean(-1, keepdim=True)
        rstd = torch.rsqrt(ms + eps) if eps_inside else 1.0 / (ms.sqrt() + eps)
        ctx.save_for_backward(y, gain, rstd)
        ctx.eps, ctx.eps_inside = eps, eps_inside
        ctx.xq_dtype = None if casting == "gemma" else h.dtype
        ctx.dtypes, ctx.w_dtype = (x.dtype, _dtype(residual)), _dtype(weight)
        return (y,) if residual is None else (y, h)

    @staticmethod
    def backward(ctx, dy, dh_in=None):
        y, gain, rstd = ctx.saved_tensors
        opts = (ctx.eps, ctx.eps_inside, ctx.xq_dtype)
        dh, dgain = rms_grad_from_output(dy, y, gain, rstd, *opts)
        dx, dres = _input_grads(dh, dh_in, ctx.dtypes)
        return dx, _to(dgain, ctx.w_dtype), dres, None, None


class _LNFromOutput(torch.autograd.Function):
    """LayerNorm saving ``(y, weight, bias, rstd)``: the mean is not needed."""

    @staticmethod
    def forward(ctx, x, weight, bias, residual, eps):
        out = layer_norm(x, weight, bias, eps, residual=residual)
        y, h = (out, x) if residual is None else out
        hs = h.to(stat_dtype(h.dtype))
        rstd = torch.rsqrt((hs - hs.mean(-1, keepdim=True)).pow(2).mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(y, weight, bias, rstd)
        ctx.dtypes = (x.dtype, _dtype(residual))
        return (y,) if residual is None else (y, h)

    @staticmethod
    def backward(ctx, dy, dh_in=None):
        y, weight, bias, rstd = ctx.saved_tensors
        dh, dw, db = layer_norm_grad_from_output(dy, y, weight, bias, rstd)
        dx, dres = _input_grads(dh, dh_in, ctx.dtypes)
        return dx, _to(dw, _dtype(weight)), _to(db, _dtype(bias)), dres, None
