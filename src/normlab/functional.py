"""Public functional ops: validate once, pick a backend, call it.

Backends plug in through :func:`register_backend`; a backend module registers itself when it is
imported, and this module imports it the first time it is asked for. Callers never change when a
backend is added.
"""

from __future__ import annotations

import importlib
import math
import numbers
import os
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from normlab import reference
from normlab.reference import CASTINGS

BACKENDS = ("auto", "reference", "torch", "numba", "triton")

# Where each kernel backend lives; importing the module registers it.
_BACKEND_MODULES = {
    "numba": "normlab.kernels.numba_ops",
    "triton": "normlab.kernels.triton_ops",
}


@dataclass(frozen=True)
class Backend:
    """A set of implementations of the ops, all taking already-validated arguments."""

    name: str
    rms_norm: Callable[..., Tensor | tuple[Tensor, Tensor]]
    layer_norm: Callable[..., Tensor | tuple[Tensor, Tensor]]
    supports: Callable[[torch.device], bool]


_REGISTRY: dict[str, Backend] = {}
_UNAVAILABLE: dict[str, str] = {}


_AUTO: dict[str, Backend] = {}  # device type -> what "auto" picks there (a per-call lookup)


def register_backend(backend: Backend) -> None:
    """Make ``backend`` selectable by name (called by a backend module on import)."""
    _REGISTRY[backend.name] = backend
    _AUTO.clear()


def get_backend(name: str) -> Backend:
    """The registered backend ``name``, importing its module on first use."""
    if name not in _REGISTRY and name in _BACKEND_MODULES and name not in _UNAVAILABLE:
        try:
            importlib.import_module(_BACKEND_MODULES[name])
        except ImportError as e:
            _UNAVAILABLE[name] = str(e)
    if name not in _REGISTRY:
        why = _UNAVAILABLE.get(name, "it is not registered")
        raise RuntimeError(
            f"backend={name!r} is not available ({why}); install normlab[{name}] or choose "
            f"one of {sorted(_REGISTRY)}"
        )
    return _REGISTRY[name]


def available_backends() -> list[str]:
    """Names of the backends that can be imported here."""
    names = []
    for name in BACKENDS[1:]:
        try:
            get_backend(name)
        except RuntimeError:
            continue
        names.append(name)
    return names


_PREFERRED = {"cpu": "numba", "cuda": "triton"}


def _auto(device: torch.device) -> Backend:
    preferred = _PREFERRED.get(device.type)
    if preferred is not None:
        try:
            return get_backend(preferred)
        except RuntimeError:
            pass
    return _REGISTRY["reference"]


def _resolve(backend: str, x: Tensor) -> Backend:
    if backend == "auto":
        kind = x.device.type
        impl = _AUTO.get(kind)
        if impl is None:
            impl = _AUTO[kind] = _auto(x.device)
        return impl
    impl = get_backend(backend)
    if not impl.supports(x.device):
        hint = " (or set TRITON_INTERPRET=1 to run it on the CPU)" if backend == "triton" else ""
        raise ValueError(f"backend={backend!r} does not run on {x.device.type} tensors{hint}")
    return impl


# --------------------------------------------------------------------------------------------
# validation: the one place every backend's bad input is rejected


def _check_x(x: object) -> None:
    if not isinstance(x, Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(
            f"x must be a floating-point tensor (float16, bfloat16, float32 or float64), "
            f"got dtype {x.dtype}"
        )
    if x.dim() == 0 or x.shape[-1] == 0:
        raise ValueError(
            f"x must have a non-empty last dimension to normalize over, got shape {tuple(x.shape)}"
        )


def _check_tensor(name: str, t: object, x: Tensor, shape: tuple[int, ...]) -> None:
    if t is None:
        return
    if not isinstance(t, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor or None, got {type(t).__name__}")
    if not t.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {t.dtype}")
    if t.shape != shape:
        raise ValueError(f"{name} must have shape {tuple(shape)} (from x), got {tuple(t.shape)}")
    if t.device != x.device:
        raise ValueError(f"{name} is on {t.device} but x is on {x.device}; expected {x.device}")


def _check_eps(eps: object) -> None:
    if type(eps) is float and 0.0 <= eps < math.inf:  # the common case, without an ABC check
        return
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real):
        raise TypeError(f"eps must be a real number, got {type(eps).__name__}")
    if not (eps >= 0 and math.isfinite(eps)):
        raise ValueError(f"eps must be a finite number >= 0, got {eps}")


def _check_choice(name: str, value: object, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")


def _check_common(x, weight, residual, eps, backend) -> None:
    _check_x(x)
    _check_tensor("weight", weight, x, x.shape[-1:])
    _check_tensor("residual", residual, x, x.shape)
    _check_eps(eps)
    _check_choice("backend", backend, BACKENDS)


# --------------------------------------------------------------------------------------------
# public ops


def rms_norm(
    x: Tensor,
    weight: Tensor | None = None,
    eps: float = 1e-6,
    *,
    residual: Tensor | None = None,
    offset: float = 0.0,
    casting: str = "llama",
    eps_inside: bool = True,
    backend: str = "auto",
) -> Tensor | tuple[Tensor, Tensor]:
    """RMSNorm over the last dimension of ``x`` (see :func:`normlab.reference.rms_norm`).

    With ``residual`` it returns ``(y, h)`` where ``h = x + residual`` (in ``residual.dtype``)
    and ``y = rms_norm(h)``. ``casting`` picks the model family's cast order: ``"llama"``,
    ``"gemma"`` or ``"none"``; ``offset`` adds a constant to the weight (Gemma's ``1 + w``).
    """
    _check_common(x, weight, residual, eps, backend)
    _check_choice("casting", casting, CASTINGS)
    if isinstance(offset, bool) or not isinstance(offset, numbers.Real):
        raise TypeError(f"offset must be a real number, got {type(offset).__name__}")
    if weight is None and offset != 0.0:
        raise ValueError(f"offset={offset} needs a weight to offset; pass weight or offset=0.0")
    if not isinstance(eps_inside, bool):
        raise TypeError(f"eps_inside must be a bool, got {type(eps_inside).__name__}")
    return _resolve(backend, x).rms_norm(
        x,
        weight,
        eps,
        residual=residual,
        offset=float(offset),
        casting=casting,
        eps_inside=eps_inside,
    )


def layer_norm(
    x: Tensor,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
    *,
    residual: Tensor | None = None,
    backend: str = "auto",
) -> Tensor | tuple[Tensor, Tensor]:
    """LayerNorm over the last dimension of ``x`` (see :func:`normlab.reference.layer_norm`).

    With ``residual`` it returns ``(y, h)`` where ``h = x + residual`` and ``y = layer_norm(h)``.
    """
    _check_common(x, weight, residual, eps, backend)
    _check_tensor("bias", bias, x, x.shape[-1:])
    return _resolve(backend, x).layer_norm(x, weight, bias, eps, residual=residual)


# --------------------------------------------------------------------------------------------
# the "torch" backend: PyTorch's own ops, for comparison


def _torch_rms_norm(x, weight, eps, *, residual, offset, casting, eps_inside):
    if casting != "gemma" or not eps_inside:
        raise ValueError(
            "backend='torch' is F.rms_norm, which implements casting='gemma' with "
            f"eps_inside=True only; got casting={casting!r}, eps_inside={eps_inside}"
        )
    h = x if residual is None else (x + residual).to(residual.dtype)
    w = None if weight is None else (weight + offset if offset else weight)
    y = F.rms_norm(h, (h.shape[-1],), w, eps)
    return y if residual is None else (y, h)


def _torch_layer_norm(x, weight, bias, eps, *, residual):
    h = x if residual is None else (x + residual).to(residual.dtype)
    y = F.layer_norm(h, (h.shape[-1],), weight, bias, eps)
    return y if residual is None else (y, h)


def _everywhere(device: torch.device) -> bool:
    return True


register_backend(Backend("reference", reference.rms_norm, reference.layer_norm, _everywhere))
register_backend(Backend("torch", _torch_rms_norm, _torch_layer_norm, _everywhere))


def _preload() -> None:
    """Import now the kernel backends that "auto" can pick on this machine: ``torch.compile``
    cannot trace an import, so a first call under compilation would otherwise fail."""
    names = ["numba"]
    if torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1":
        names.append("triton")
    for name in names:
        try:
            get_backend(name)
        except RuntimeError:
            pass  # not installed: "auto" falls back to the reference


_preload()
