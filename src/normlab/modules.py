"""Thin ``nn.Module`` wrappers: parameters plus one call to the functional op.

Parameter names (``weight``/``bias``, BatchNorm's running buffers) match ``torch.nn`` so
``state_dict``s load both ways.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from normlab import functional as F
from normlab.collectives import all_reduce_sum
from normlab.reference import residual_add, stat_dtype
from normlab.validation import check_flag, check_tensor, check_x

_Shape = int | Sequence[int]


def _as_shape(normalized_shape: _Shape) -> tuple[int, ...]:
    if isinstance(normalized_shape, numbers.Integral):
        normalized_shape = (int(normalized_shape),)
    shape = tuple(int(n) for n in normalized_shape)
    if not shape or any(n <= 0 for n in shape):
        raise ValueError(f"normalized_shape must be positive sizes, got {normalized_shape}")
    return shape


class _LastDimsNorm(nn.Module):
    """Shared plumbing: flatten the trailing ``normalized_shape`` dims into one of size N."""

    def __init__(self, normalized_shape: _Shape):
        super().__init__()
        self.normalized_shape = _as_shape(normalized_shape)

    def _flat(self, t: Tensor | None, name: str = "x") -> Tensor | None:
        if t is None:
            return None
        k = len(self.normalized_shape)
        if not isinstance(t, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if tuple(t.shape[t.dim() - k :]) != self.normalized_shape or t.dim() < k:
            raise ValueError(
                f"{name} must end in normalized_shape {self.normalized_shape}, "
                f"got shape {tuple(t.shape)}"
            )
        return t if k == 1 else t.flatten(-k)

    def _call(self, op, x: Tensor, residual: Tensor | None, *params, **kw):
        xf, rf = self._flat(x), self._flat(residual, "residual")
        if len(self.normalized_shape) == 1:  # nothing flattened: no reshapes (~1 us each)
            return op(xf, *params, residual=rf, **kw)
        flat = [None if p is None else p.reshape(-1) for p in params]
        out = op(xf, *flat, residual=rf, **kw)
        if isinstance(out, tuple):
            return tuple(o.reshape(x.shape) for o in out)
        return out.reshape(x.shape)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={getattr(self, 'eps', None)}"


class RMSNorm(_LastDimsNorm):
    """RMSNorm, a drop-in for ``torch.nn.RMSNorm`` with the cast orders of real models.

    ``offset=1.0, casting="gemma"`` is Gemma's ``(1 + w)`` norm; the weight is then initialised
    to ``1 - offset`` so the layer starts as the identity gain either way. ``eps=None`` means
    what it means to ``torch.nn.RMSNorm``: the machine epsilon of the dtype the statistics are
    computed in (FP32's for half inputs, FP64's for FP64). The defaults differ from
    ``torch.nn.RMSNorm``'s (``eps=1e-6`` and the llama cast order, against ``eps=None`` and the
    gemma order); ``eps=None, casting="gemma"`` gives its numbers (docs/dropin.md).
    ``memory_efficient=True``: the backward recomputes xhat from the saved output instead of
    saving the input (:func:`normlab.rms_norm`).
    """

    def __init__(
        self,
        normalized_shape: _Shape,
        eps: float | None = 1e-6,
        elementwise_affine: bool = True,
        *,
        offset: float = 0.0,
        casting: str = "llama",
        eps_inside: bool = True,
        backend: str = "auto",
        memory_efficient: bool = False,
        device=None,
        dtype=None,
    ):
        super().__init__(normalized_shape)
        check_flag("memory_efficient", memory_efficient)
        self.eps, self.offset, self.casting = eps, offset, casting
        self.eps_inside, self.backend = eps_inside, backend
        self.memory_efficient = memory_efficient
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = nn.Parameter(
                torch.empty(self.normalized_shape, device=device, dtype=dtype)
            )
        else:
            self.register_parameter("weight", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.weight is not None:
            nn.init.constant_(self.weight, 1.0 - self.offset)

    def forward(self, x: Tensor, residual: Tensor | None = None):
        return self._call(
            F.rms_norm, x, residual, self.weight, eps=self.eps, offset=self.offset,
            casting=self.casting, eps_inside=self.eps_inside, backend=self.backend,
            memory_efficient=self.memory_efficient,
        )  # fmt: skip

    def extra_repr(self) -> str:
        return (
            f"{super().extra_repr()}, elementwise_affine={self.elementwise_affine}, "
            f"offset={self.offset}, casting={self.casting!r}, eps_inside={self.eps_inside}"
            + (", memory_efficient=True" if self.memory_efficient else "")
        )


class LayerNorm(_LastDimsNorm):
    """LayerNorm, a drop-in for ``torch.nn.LayerNorm`` (same arguments, same parameters).

    ``memory_efficient=True`` as in :class:`RMSNorm` (:func:`normlab.layer_norm`)."""

    def __init__(
        self,
        normalized_shape: _Shape,
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        bias: bool = True,
        *,
        backend: str = "auto",
        memory_efficient: bool = False,
        device=None,
        dtype=None,
    ):
        super().__init__(normalized_shape)
        check_flag("memory_efficient", memory_efficient)
        self.eps, self.backend = eps, backend
        self.memory_efficient = memory_efficient
        self.elementwise_affine = elementwise_affine
        kw = {"device": device, "dtype": dtype}
        if elementwise_affine:
            self.weight = nn.Parameter(torch.empty(self.normalized_shape, **kw))
            has_bias = bias
        else:
            self.register_parameter("weight", None)
            has_bias = False
        if has_bias:
            self.bias = nn.Parameter(torch.empty(self.normalized_shape, **kw))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.weight is not None:
            nn.init.ones_(self.weight)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def forward(self, x: Tensor, residual: Tensor | None = None):
        return self._call(
            F.layer_norm,
            x,
            residual,
            self.weight,
            self.bias,
            eps=self.eps,
            backend=self.backend,
            memory_efficient=self.memory_efficient,
        )

    def extra_repr(self) -> str:
        me = ", memory_efficient=True" if self.memory_efficient else ""
        return f"{super().extra_repr()}, elementwise_affine={self.elementwise_affine}{me}"


class DyT(_LastDimsNorm):
    """Dynamic Tanh (Zhu et al. 2025): ``y = weight * tanh(alpha * x) + bias``, no statistics.

    ``alpha`` is one learnable scalar; the math runs in FP32 and rounds once to ``x.dtype``
    (:func:`normlab.dyt`).
    """

    def __init__(
        self,
        normalized_shape: _Shape,
        alpha_init: float = 0.5,
        *,
        backend: str = "auto",
        device=None,
        dtype=None,
    ):
        super().__init__(normalized_shape)
        self.alpha_init, self.backend = alpha_init, backend
        kw = {"device": device, "dtype": dtype}
        self.alpha = nn.Parameter(torch.empty(1, **kw))
        self.weight = nn.Parameter(torch.empty(self.normalized_shape, **kw))
        self.bias = nn.Parameter(torch.empty(self.normalized_shape, **kw))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.constant_(self.alpha, self.alpha_init)
        nn.init.ones_(self.weight)
        nn.init.zeros_(self.bias)

    def forward(self, x: Tensor, residual: Tensor | None = None):
        return self._call(
            F.dyt, x, residual, self.alpha, self.weight, self.bias, backend=self.backend
        )

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, alpha_init={self.alpha_init}"


class ScaleNorm(_LastDimsNorm):
    """ScaleNorm (Nguyen & Salazar 2019): ``y = g * x / max(||x||, eps)``, one learnable scalar
    ``g`` (stored as ``weight``) initialised to ``sqrt(N)``. The norm is taken in FP32
    (:func:`normlab.scale_norm`)."""

    def __init__(
        self,
        normalized_shape: _Shape,
        eps: float = 1e-5,
        *,
        backend: str = "auto",
        device=None,
        dtype=None,
    ):
        super().__init__(normalized_shape)
        self.eps, self.backend = eps, backend
        self.weight = nn.Parameter(torch.empty(1, device=device, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.constant_(self.weight, math.sqrt(math.prod(self.normalized_shape)))

    def forward(self, x: Tensor, residual: Tensor | None = None):
        return self._call(
            F.scale_norm, x, residual, self.weight, eps=self.eps, backend=self.backend
        )


class BatchNorm(nn.Module):
    """BatchNorm over the tokens of ``(B, T, C)`` (or any ``(..., C)``) tensors.

    In ``train()`` each channel is normalized with the mean and (biased) variance of the batch's
    tokens, and the running statistics are updated (unbiased variance, as ``torch.nn``); in
    ``eval()`` the running statistics are used. ``mask`` (shape ``x.shape[:-1]``, ``True`` for real
    tokens) keeps padding out of the statistics. Buffers and parameters are named as in
    ``torch.nn.BatchNorm1d``, so their ``state_dict``s are interchangeable.
    """

    def __init__(
        self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, *,
        device=None, dtype=None,
    ):  # fmt: skip
        super().__init__()
        if num_features <= 0:
            raise ValueError(f"num_features must be positive, got {num_features}")
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        kw = {"device": device, "dtype": dtype}
        self.weight = nn.Parameter(torch.ones(num_features, **kw))
        self.bias = nn.Parameter(torch.zeros(num_features, **kw))
        self.register_buffer("running_mean", torch.zeros(num_features, **kw))
        self.register_buffer("running_var", torch.ones(num_features, **kw))
        self.register_buffer(
            "num_batches_tracked", torch.tensor(0, dtype=torch.long, device=device)
        )

    def reset_running_stats(self) -> None:
        self.running_mean.zero_()
        self.running_var.fill_(1)
        self.num_batches_tracked.zero_()

    def forward(self, x: Tensor, residual: Tensor | None = None, *, mask: Tensor | None = None):
        check_x(x)
        if x.shape[-1] != self.num_features:
            raise ValueError(
                f"x must end in num_features={self.num_features}, got {tuple(x.shape)}"
            )
        if mask is not None:
            if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
                raise TypeError("mask must be a bool tensor (True marks real tokens)")
            if tuple(mask.shape) != tuple(x.shape[:-1]):
                raise ValueError(
                    f"mask must have shape {tuple(x.shape[:-1])}, got {tuple(mask.shape)}"
                )
        if residual is not None:
            check_tensor("residual", residual, x, tuple(x.shape))
            h = residual_add(x, residual)
            return self._normalize(h, mask), h
        return self._normalize(x, mask)

    def _normalize(self, x: Tensor, mask: Tensor | None) -> Tensor:
        s = stat_dtype(x.dtype)
        xs = x.to(s).reshape(-1, self.num_features)  # (tokens, C)
        if self.training:
            xc, var = self._batch_stats(xs, None if mask is None else mask.reshape(-1))
        else:
            xc, var = xs - self.running_mean.to(s), self.running_var.to(s)
        y = xc * torch.rsqrt(var + self.eps) * self.weight.to(s) + self.bias.to(s)
        return y.to(x.dtype).reshape(x.shape)

    def _batch_stats(self, xs: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor]:
        r"""The centered tokens ``x - mean`` and the biased variance of the (unmasked) tokens,
        by the corrected two-pass algorithm (Chan, Golub & LeVeque 1983):

        .. math::
            m = \tfrac1n\sum_t x_t,\quad d_t = x_t - m,\quad
            \delta = \tfrac1n\sum_t d_t,\quad
            \sigma^2 = \tfrac1n\sum_t d_t^2 - \delta^2,\quad \mu = m + \delta

        The second pass sums around the first pass's mean, so nothing cancels however far the
        mean is from 0 (or from a stale running mean); ``delta`` is the rounding error of ``m``,
        subtracted from ``d`` so that ``x - mu`` keeps the digits an FP32 ``mu`` would round off.
        Each pass is one all-reduce of per-rank sums: N ranks compute (and differentiate) what one
        process computes on the concatenated batch. ``m`` is a constant to autograd: ``d - delta``
        and ``sigma^2`` do not depend on it, so the gradient is exact without the first pass's
        graph (nor its all-reduce in the backward).
        """
        if mask is None:
            count = torch.tensor(float(xs.shape[0]), dtype=xs.dtype, device=xs.device)
            valid = xs
        else:
            count = mask.sum().to(xs.dtype)
            keep = mask.unsqueeze(-1)
            valid = torch.where(keep, xs, 0.0)  # not a product: padding may hold inf or NaN
        sums = self._reduce_stats(torch.cat([valid.detach().sum(0), count.reshape(1)]))
        count = sums[-1]
        if not torch.compiler.is_compiling() and count.item() < 2:
            raise ValueError(
                f"BatchNorm needs at least 2 unmasked tokens in training mode, got {int(count)}"
            )
        m = sums[:-1] / count
        d = xs - m
        dv = d if mask is None else torch.where(keep, d, 0.0)
        sums = self._reduce_stats(torch.cat([dv.sum(0), dv.pow(2).sum(0)]))
        delta = sums[: self.num_features] / count
        var = (sums[self.num_features :] / count - delta.pow(2)).clamp_min(0)
        self._update_running((m + delta).detach(), var.detach(), count.detach())
        return d - delta, var

    def _reduce_stats(self, sums: Tensor) -> Tensor:
        """Sum per-rank sums over the ranks when a process group is active (once for ``[sum x,
        count]``, once for ``[sum d, sum d²]``), so N ranks normalize (and differentiate) exactly
        as one process on the concatenated batch."""
        return all_reduce_sum(sums)

    @torch.no_grad()
    def _update_running(self, mean: Tensor, var: Tensor, count: Tensor) -> None:
        self.num_batches_tracked += 1
        m = 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum
        unbiased = var * count / (count - 1)
        self.running_mean.lerp_(mean.to(self.running_mean.dtype), m)
        self.running_var.lerp_(unbiased.to(self.running_var.dtype), m)

    def extra_repr(self) -> str:
        return f"{self.num_features}, eps={self.eps}, momentum={self.momentum}"


# The norm types, defined once: the models iterate normlab's own, the optimizer groups and the
# norm timer count torch.nn's too (so a model patched with them is treated the same way).
NORM_MODULES = (RMSNorm, LayerNorm, BatchNorm, DyT, ScaleNorm)
ANY_NORM = (*NORM_MODULES, nn.LayerNorm, nn.RMSNorm, nn.GroupNorm, nn.modules.batchnorm._BatchNorm)
