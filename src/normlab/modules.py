"""Thin ``nn.Module`` wrappers: parameters plus one call to the functional op.

Parameter names (``weight``/``bias``, BatchNorm's running buffers) match ``torch.nn`` so
``state_dict``s load both ways.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from normlab import functional as F
from normlab.batchnorm import BatchNorm
from normlab.kernels import registry
from normlab.validation import (
    REAL_MAX,
    check_choice,
    check_dtype,
    check_eps,
    check_flag,
    check_normalized_shape,
    check_real,
    check_rms_options,
)

_Shape = int | Sequence[int]


def _check_kernel_options(backend: object, memory_efficient: object) -> None:
    """The arguments every kernel-backed module passes to its op, checked when it is made (the
    functional layer's checks and messages, not a surprise at the first forward)."""
    check_choice("backend", backend, registry.KNOWN)
    check_flag("memory_efficient", memory_efficient)


class _LastDimsNorm(nn.Module):
    """Shared plumbing: flatten the trailing ``normalized_shape`` dims into one of size N."""

    def __init__(self, normalized_shape: _Shape, dtype=None):
        super().__init__()
        # Types and ranges before torch allocates anything ('64' is not (6, 4), 2**40 is refused)
        self.normalized_shape = check_normalized_shape(normalized_shape)
        check_dtype(dtype)

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
        super().__init__(normalized_shape, dtype)
        if eps is not None:
            check_eps(eps)
        check_flag("elementwise_affine", elementwise_affine)
        check_rms_options(True if elementwise_affine else None, offset, casting, eps_inside)
        _check_kernel_options(backend, memory_efficient)
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
        super().__init__(normalized_shape, dtype)
        check_eps(eps)
        check_flag("elementwise_affine", elementwise_affine)
        check_flag("bias", bias)
        _check_kernel_options(backend, memory_efficient)
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
        super().__init__(normalized_shape, dtype)
        # alpha = 0 makes tanh(alpha x) = 0 for every input: the layer outputs its bias alone
        check_real("alpha_init", alpha_init, low=0, low_open=True, high=REAL_MAX)
        check_choice("backend", backend, registry.KNOWN)
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
        super().__init__(normalized_shape, dtype)
        check_eps(eps)
        check_choice("backend", backend, registry.KNOWN)
        self.eps, self.backend = eps, backend
        self.weight = nn.Parameter(torch.empty(1, device=device, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.constant_(self.weight, math.sqrt(math.prod(self.normalized_shape)))

    def forward(self, x: Tensor, residual: Tensor | None = None):
        return self._call(
            F.scale_norm, x, residual, self.weight, eps=self.eps, backend=self.backend
        )


# The norm types, defined once: the models iterate normlab's own, the optimizer groups and the
# norm timer count torch.nn's too (so a model patched with them is treated the same way).
NORM_MODULES = (RMSNorm, LayerNorm, BatchNorm, DyT, ScaleNorm)
ANY_NORM = (*NORM_MODULES, nn.LayerNorm, nn.RMSNorm, nn.GroupNorm, nn.modules.batchnorm._BatchNorm)
