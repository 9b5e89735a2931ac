"""The weight and bias vectors as the Numba kernels read them: contiguous FP32, with the
gain's offset added, converted once per tensor version rather than on every call."""

from __future__ import annotations

import weakref

import torch
from torch import Tensor

F32 = torch.float32
_weight_cache: dict[int, tuple[weakref.ref, tuple, Tensor]] = {}  # id -> (ref, key, FP32 copy)
_constants: dict[tuple[int, float], Tensor] = {}  # (n, value) -> a float32 vector


def constant(n: int, value: float) -> Tensor:
    """A cached float32 vector of ``n`` copies of ``value``: the weight/bias of a norm without."""
    c = _constants.get((n, value))
    if c is None:
        c = _constants[(n, value)] = torch.full((n,), value, dtype=F32)
    return c


def f32_vector(
    t: Tensor | None, n: int, offset: float = 0.0, missing: float = 1.0, *, casting: str = "gemma"
) -> Tensor:
    """A weight/bias as a contiguous FP32 tensor (plus ``offset``); ``missing`` fills a ``None``.

    ``offset + t`` is added in FP32 for the gemma cast order and in ``t``'s dtype for the
    others, as the reference's ``offset + weight`` is (a half weight then rounds the gain).
    A contiguous FP32 vector without offset is used as is. Any other one is converted once and
    the copy cached per tensor, reused while the tensor's version counter, storage,
    ``offset`` and cast order are unchanged (an optimizer step or any in-place write bumps the
    version): converting on every call would be a large share of a small call.
    """
    if t is None:
        return constant(n, missing)
    if t.dtype == F32 and not offset and t.is_contiguous():
        return t
    in_dtype = bool(offset) and casting != "gemma" and t.dtype != F32
    key = (t._version, t.data_ptr(), t.dtype, t.numel(), offset, in_dtype)
    hit = _weight_cache.get(id(t))
    if hit is not None and hit[0]() is t and hit[1] == key:
        return hit[2]
    if in_dtype:
        c = (t.detach() + offset).to(F32, memory_format=torch.contiguous_format)
    else:
        c = t.detach().to(F32, copy=True, memory_format=torch.contiguous_format)
        if offset:
            c += offset
    ident = id(t)
    _weight_cache[ident] = (weakref.ref(t, lambda _, i=ident: _weight_cache.pop(i, None)), key, c)
    return c
