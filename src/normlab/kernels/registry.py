"""The backend registry: what ``backend=`` names, and the one place that routes inputs no kernel
computes (float64, and the naive ``casting="none"`` order in half precision) to the reference.

A backend module registers itself when imported; the kernel backends are declared here by module
name and imported on first use, so ``import normlab`` compiles no kernel. Nothing here imports
``normlab.functional``: the functional layer looks backends up, never the other way around.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from normlab import reference


@dataclass(frozen=True)
class Backend:
    """A set of implementations of the ops, all taking already-validated arguments."""

    name: str
    rms_norm: Callable[..., Tensor | tuple[Tensor, Tensor]]
    layer_norm: Callable[..., Tensor | tuple[Tensor, Tensor]]
    supports: Callable[[torch.device], bool]


# Backends registered by a module that is imported when first asked for.
_LAZY = {
    "torch": "normlab.kernels.torch_backend",
    "numba": "normlab.kernels.numba.backend",
    "triton": "normlab.kernels.triton.backend",
}
_REGISTRY: dict[str, Backend] = {}
_UNAVAILABLE: dict[str, str] = {}  # name -> why its module failed to import
# Every name ``backend=`` accepts ("auto" first): a dict for an O(1) check on the hot path.
KNOWN: dict[str, None] = dict.fromkeys(("auto", "reference", *_LAZY))


def register(backend: Backend) -> None:
    """Make ``backend`` selectable by name (called by a backend module on import)."""
    _REGISTRY[backend.name] = backend
    KNOWN[backend.name] = None
    _AUTO.clear()


def names() -> tuple[str, ...]:
    """Every name ``backend=`` accepts, ``"auto"`` first."""
    return tuple(KNOWN)


def get(name: str) -> Backend:
    """The registered backend ``name``, importing its module on first use."""
    if name not in _REGISTRY and name in _LAZY and name not in _UNAVAILABLE:
        try:
            importlib.import_module(_LAZY[name])
        except ImportError as e:
            _UNAVAILABLE[name] = str(e)
    if name not in _REGISTRY:
        why = _UNAVAILABLE.get(name, "it is not registered")
        raise RuntimeError(
            f"backend={name!r} is not available ({why}); install normlab[{name}] or choose "
            f"one of {sorted(_REGISTRY)}"
        )
    return _REGISTRY[name]


def available() -> list[str]:
    """Names of the backends that can be imported here (``"auto"`` aside)."""
    out = []
    for name in names()[1:]:
        try:
            get(name)
        except RuntimeError:
            continue
        out.append(name)
    return out


_PREFERRED = {"cpu": "numba", "cuda": "triton"}
_AUTO: dict[str, Backend] = {}  # device type -> what "auto" picks there (a per-call lookup)


def auto(device: torch.device) -> Backend:
    """What ``backend="auto"`` runs on ``device``: its kernel backend, else the reference."""
    impl = _AUTO.get(device.type)
    if impl is None:
        impl = _REGISTRY["reference"]
        preferred = _PREFERRED.get(device.type)
        if preferred is not None:
            try:
                impl = get(preferred)
            except RuntimeError:
                pass
        _AUTO[device.type] = impl
    return impl


def preload(names_: list[str]) -> None:
    """Import now the backends ``names_`` where installed: ``torch.compile`` cannot trace an
    import, so a first call under compilation would otherwise fail."""
    for name in names_:
        try:
            get(name)
        except RuntimeError:
            pass  # not installed: "auto" falls back to the reference


# --------------------------------------------------------------------------------------------
# kernel backends: what their kernels do not compute goes to the reference, decided here only


def _any_fp64(*ts: Tensor | None) -> bool:
    for t in ts:
        if t is not None and t.dtype == torch.float64:
            return True
    return False


def _naive_half(casting: str, x: Tensor, residual: Tensor | None) -> bool:
    h = x if residual is None else residual
    return casting == "none" and h.dtype in (torch.float16, torch.bfloat16)


def kernel_backend(
    name: str,
    rms_norm: Callable[..., Tensor | tuple[Tensor, Tensor]],
    layer_norm: Callable[..., Tensor | tuple[Tensor, Tensor]],
    supports: Callable[[torch.device], bool],
    *,
    naive_half: bool = False,
) -> Backend:
    """A :class:`Backend` around FP32-statistics kernels ``rms_norm``/``layer_norm``.

    float64 always goes to the reference (which keeps FP64 statistics). ``casting="none"`` in
    half precision is every step in the half dtype, kept to be compared against: kernels that
    compute in FP32 would silently make it accurate, so unless ``naive_half`` says the kernels
    reproduce that order themselves, the reference (which is that code) runs it.
    """

    def rms(x, weight, eps, *, residual, offset, casting, eps_inside, memory_efficient=False):
        slow = _any_fp64(x, weight, residual) or (
            not naive_half and _naive_half(casting, x, residual)
        )
        impl = reference.rms_norm if slow else rms_norm
        return impl(
            x,
            weight,
            eps,
            residual=residual,
            offset=offset,
            casting=casting,
            eps_inside=eps_inside,
            memory_efficient=memory_efficient,
        )

    def ln(x, weight, bias, eps, *, residual, memory_efficient=False):
        impl = reference.layer_norm if _any_fp64(x, weight, bias, residual) else layer_norm
        return impl(x, weight, bias, eps, residual=residual, memory_efficient=memory_efficient)

    return Backend(name, rms, ln, supports)


def _everywhere(device: torch.device) -> bool:
    return True


register(Backend("reference", reference.rms_norm, reference.layer_norm, _everywhere))
