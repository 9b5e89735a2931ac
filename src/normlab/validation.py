"""Argument checks shared by the functional ops and the modules: every backend and every layer
rejects bad input the same way, with an exception that names the argument."""

from __future__ import annotations

import math
import numbers

import torch
from torch import Tensor

from normlab.kernels import registry
from normlab.reference import CASTINGS

# The largest eps, offset or DyT alpha: float32's, the dtype the kernels compute in (a larger
# one is infinity there, and torch's RuntimeError at the first call).
REAL_MAX = float(torch.finfo(torch.float32).max)
# The most features a norm normalizes over: far beyond any model's width (2**16), where
# 2**40 would ask the allocator for terabytes before anything else could object.
MAX_FEATURES = 2**31 - 1


def check_x(x: object) -> None:
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


def check_tensor(name: str, t: object, x: Tensor, shape: tuple[int, ...]) -> None:
    """``t`` is None, or a floating-point tensor of ``shape`` on ``x``'s device."""
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


def check_scalar(name: str, t: object, x: Tensor, *, required: bool = False) -> None:
    """``t`` is a one-element floating-point tensor (shape ``()`` or ``(1,)``) on ``x``'s device,
    or None unless ``required``: the learnable scalars of DyT (``alpha``) and ScaleNorm (``g``)."""
    if t is None and required:
        raise TypeError(f"{name} must be a torch.Tensor, got NoneType")
    if isinstance(t, Tensor) and t.dim() == 0:
        t = t.reshape(1)
    check_tensor(name, t, x, (1,))


def finite(value: object) -> bool:
    """Whether the real number ``value`` is finite as a float: an int beyond float's range
    (``10**400``) is not (``math.isfinite`` would raise OverflowError)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def shown(value: object) -> str:
    """``value`` for a message: a number of a thousand digits is cut short."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:20]}...({len(text)} characters)"


def check_real(name: str, value: object, *, low: float | None = None, high: float | None = None,
               low_open: bool = False) -> None:  # fmt: skip
    """``value`` is a finite real number (not a bool) in ``[low, high]`` (``(low, high]`` with
    ``low_open``): TypeError or ValueError naming ``name`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    bad = not finite(value)
    bad = bad or (low is not None and (value <= low if low_open else value < low))
    bad = bad or (high is not None and value > high)
    if bad:
        lo = "" if low is None else f" {'>' if low_open else '>='} {low:g}"
        hi = "" if high is None else f"{' and' if lo else ''} <= {high:g}"
        raise ValueError(f"{name} must be a finite number{lo}{hi}, got {shown(value)}")


def check_eps(eps: object) -> None:
    if type(eps) is float and 0.0 <= eps <= REAL_MAX:  # the common case, without an ABC check
        return
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real):
        raise TypeError(f"eps must be a real number, got {type(eps).__name__}")
    if not (eps >= 0 and finite(eps)):
        raise ValueError(f"eps must be a finite number >= 0, got {shown(eps)}")
    if eps > REAL_MAX:
        raise ValueError(f"eps must be at most float32's largest, {REAL_MAX:.4g}, got {shown(eps)}")


def check_momentum(momentum: object) -> None:
    """BatchNorm's ``momentum``: None (a cumulative average, as torch.nn) or a number in [0, 1]."""
    if momentum is not None:
        check_real("momentum", momentum, low=0.0, high=1.0)


def check_size(name: str, value: object, high: int = MAX_FEATURES) -> None:
    """A positive int (not a bool) up to ``high``: a feature count or a number of positions."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
        raise ValueError(f"{name} must be a positive int, got {shown(value)}")
    if value > high:
        raise ValueError(f"{name} must be at most {high:,}, got {shown(value)}")


def check_normalized_shape(shape: object) -> tuple[int, ...]:
    """``shape`` (an int or a sequence of ints, as ``torch.nn.LayerNorm`` takes it) as a tuple,
    at most :data:`MAX_FEATURES` elements in all: a string is not a sequence of sizes here
    (``'64'`` is not ``(6, 4)``), nor is a bool a size."""
    if isinstance(shape, numbers.Integral) and not isinstance(shape, bool):
        shape = (shape,)
    if isinstance(shape, str | bytes) or not isinstance(shape, tuple | list | torch.Size):
        raise TypeError(
            f"normalized_shape must be an int or a sequence of ints, got {type(shape).__name__}"
        )
    if not shape:
        raise ValueError("normalized_shape must be positive sizes, got ()")
    for n in shape:
        check_size("normalized_shape", n)
    size = math.prod(int(n) for n in shape)
    if size > MAX_FEATURES:
        raise ValueError(
            f"normalized_shape must hold at most {MAX_FEATURES:,} elements, got {size:,}"
        )
    return tuple(int(n) for n in shape)


def check_dtype(dtype: object) -> None:
    """None or a floating-point ``torch.dtype``: a norm's parameters are floats."""
    if dtype is None:
        return
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype or None, got {type(dtype).__name__}")
    if not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating-point dtype, got {dtype}")


def check_choice(name: str, value: object, choices) -> None:
    if not (isinstance(value, str) and value in choices):
        raise ValueError(f"{name} must be one of {tuple(choices)}, got {value!r}")


def check_common(x, weight, residual, eps, backend) -> None:
    """What every norm op checks: x, weight (N,), residual (x's shape), eps, backend name."""
    check_x(x)
    check_tensor("weight", weight, x, x.shape[-1:])
    check_tensor("residual", residual, x, x.shape)
    check_eps(eps)
    check_choice("backend", backend, registry.KNOWN)


def check_backend_implements(op: str, backend: str, implemented) -> None:
    """A known ``backend`` name that has no implementation of ``op`` is a ValueError, not a
    silent fall-back: naming a backend always runs that backend."""
    check_choice("backend", backend, registry.KNOWN)
    if backend not in implemented:
        raise ValueError(
            f"backend={backend!r} has no {op} (no kernel computes it); {op} runs on backend="
            + " or ".join(repr(b) for b in implemented)
        )


def check_flag(name: str, value: object) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")


def check_rms_options(weight, offset, casting, eps_inside) -> None:
    check_choice("casting", casting, CASTINGS)
    if isinstance(offset, bool) or not isinstance(offset, numbers.Real):
        raise TypeError(f"offset must be a real number, got {type(offset).__name__}")
    if not finite(offset):  # a NaN offset would make every output NaN, silently
        raise ValueError(f"offset must be finite, got {shown(offset)}")
    if abs(offset) > REAL_MAX:
        raise ValueError(f"offset must be within float32's range, got {shown(offset)}")
    if weight is None and offset != 0.0:
        raise ValueError(f"offset={offset} needs a weight to offset; pass weight or offset=0.0")
    if not isinstance(eps_inside, bool):
        raise TypeError(f"eps_inside must be a bool, got {type(eps_inside).__name__}")
