"""What every fused op shares: the launcher contract, rows, the call paths and the registration.

Each op has a module of its own (:mod:`normlab.kernels.rms_norm`,
:mod:`normlab.kernels.layer_norm`) holding its launchers' signatures, schemas, fake kernels,
gradients, eager ``autograd.Function`` and the ``bind(backend, launch)`` that registers its
``normlab::<backend>_<op>_*`` custom ops (with ``register_fake`` and ``register_autograd``, so
``torch.compile(fullgraph=True)`` traces through them). A backend (Numba, Triton, ...) supplies
the host launchers, looked up by name on its ``launch`` namespace.

Launcher contract (what a backend implements; ``M >= 1`` rows of ``N`` elements)
------------------------------------------------------------------------------
Every 2-D argument is ``(M, N)`` with ``stride(-1) == 1`` (any row stride, even 0) or ``N == 1``;
dtypes are float32, bfloat16 or float16 (float64 never reaches a launcher). ``weight``/``bias``
are ``(N,)`` contiguous, in the input dtype or float32, or ``None``. Launchers allocate and return
new contiguous tensors and never write to their inputs. Per-row statistics are ``(M,)`` float32;
parameter gradients ``(N,)`` float32 (``None`` without the parameter), reduced deterministically
(no atomics). A fused residual add returns ``h = x + residual`` rounded to ``residual.dtype``
(``None`` without a residual: the kernel then normalizes ``x``). Each op's module docstring gives
its launchers' signatures; ``*_bwd_y`` are the memory-efficient backwards, which read the
forward's output ``y`` (``xhat = (y - bias) / gain``) instead of its input.

Everything else (flattening ``(..., N)`` to rows, 0 rows, casting gradients to the dtypes of
``x``/``residual``/``weight``, choosing the call path) is done by the op modules with the
helpers here.

Call paths, chosen per call because the custom-op dispatcher and an ``autograd.Function`` each
cost more per call than a small norm's kernels (``benchmarks/bench_overhead.py`` times them;
docs/benchmarks.md has its figures):

- under ``torch.compile``: the custom ops (traceable, with fake kernels);
- eager, no gradient needed: the launcher directly;
- eager with gradients: a lean ``torch.autograd.Function`` around the same launchers.

Custom ops cannot return None or alias an input, so a missing output is an empty tensor.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

import torch
from torch import Tensor

from normlab.reference import recompute_ok, rms_gain

# ---- shape plumbing -----------------------------------------------------------------------------


def rows(t: Tensor | None) -> Tensor | None:
    """``(..., N) -> (M, N)`` with unit element stride, a view whenever the strides allow it."""
    if t is None:
        return None
    if t.dim() == 2 and t.stride(-1) == 1:
        return t
    t2 = t.reshape(-1, t.shape[-1])
    if t2.stride(-1) != 1 and t2.shape[-1] != 1:
        t2 = t2.contiguous()
    return t2


def nd(t: Tensor | None, shape: torch.Size) -> Tensor | None:
    """``(M, N)`` rows back to ``shape`` (a view is not free on a small tensor: only if needed)."""
    if t is None or t.dim() == len(shape):
        return t
    return t.view(*shape)


def vec(t: Tensor | None) -> Tensor | None:
    return t if t is None or t.is_contiguous() else t.contiguous()


def detach(t: Tensor | None) -> Tensor | None:
    return None if t is None else t.detach()


def empty_if_none(t: Tensor | None, like: Tensor) -> Tensor:
    return like.new_empty(0) if t is None else t


def h_dtype_of(x: Tensor, residual: Tensor | None) -> torch.dtype:
    """The dtype of the normalized input ``h``: the residual stream's where there is one."""
    return x.dtype if residual is None else residual.dtype


# ---- gradients ----------------------------------------------------------------------------------


def needs_grad(*ts: Tensor | None) -> bool:
    if not torch.is_grad_enabled():
        return False
    for t in ts:
        if t is not None and t.requires_grad:
            return True
    return False


def grad_to(g: Tensor | None, like: Tensor | torch.dtype | None) -> Tensor | None:
    """``g`` in the dtype of ``like`` (a tensor or a dtype); ``None`` if either is missing."""
    if g is None or like is None:
        return None
    dtype = like if isinstance(like, torch.dtype) else like.dtype
    return g if g.dtype == dtype else g.to(dtype)


def save_dtypes(ctx, x: Tensor, residual: Tensor | None) -> None:
    """What :func:`dh_and_dtype` and :func:`dx_dr` read back in the backward."""
    ctx.dtypes = (x.dtype, None if residual is None else residual.dtype)


def dh_and_dtype(ctx, dh):
    """``dh`` where the op had a residual (else None), and ``h``'s dtype."""
    x_dtype, r_dtype = ctx.dtypes
    return (None, x_dtype) if r_dtype is None else (dh, r_dtype)


def dx_dr(ctx, dht):
    """The gradients of ``x`` (in its dtype) and of ``residual`` from the gradient of ``h``."""
    x_dtype, r_dtype = ctx.dtypes
    dx = dht if dht.dtype == x_dtype else dht.to(x_dtype)
    return dx, None if r_dtype is None else dht


# ---- eager autograd -----------------------------------------------------------------------------
# The kernels' backward is not itself differentiable. once_differentiable says so when a double
# backward needs it, but its wrapper costs time on every call, so it only runs under
# create_graph=True (grad mode is off in a plain backward).


def _backward(ctx, dy, dh=None):
    return ctx.kern.eager_grads(ctx, dy, dh)


_backward_once = torch.autograd.function.once_differentiable(_backward)


class RowNormFunction(torch.autograd.Function):
    """The base of each op's lean eager ``Function``, whose ``apply`` takes the op's
    :class:`RowNormKernels` and ``save_y`` first; its backward is ``kern.eager_grads``."""

    @staticmethod
    def backward(ctx, dy, dh=None):
        if torch.is_grad_enabled():
            return _backward_once(ctx, dy, dh)
        return _backward(ctx, dy, dh)


def function_outputs(ctx, kern, save_y: bool, y: Tensor, h: Tensor | None):
    """What a :class:`RowNormFunction` forward returns: ``y``, or ``(y, h)`` with a residual."""
    ctx.kern, ctx.save_y = kern, save_y
    if h is None:
        return y
    return y, h


# ---- torch.library custom ops -------------------------------------------------------------------


class RowNormKernels:
    """The base of an op's kernels for one backend: creating it registers the op's four custom
    ops ``normlab::<backend>_<op>_fwd``/``_bwd`` and the memory-efficient ``_fwd_y``/``_bwd_y``.

    A subclass names the op and the launchers it takes from a backend's ``launch`` namespace,
    and gives the three schemas and fake kernels, the two ``setup_context`` functions (saving
    the input, saving the output) and the ``_*_impl`` and ``_backward*`` methods they call.
    """

    op: str
    launchers: tuple[str, str, str]  # names of the fwd, bwd and bwd_y launchers
    schemas: tuple[str, str, str]  # fwd, bwd, bwd_y
    fakes: tuple[Callable, Callable, Callable]  # fwd, bwd, bwd_y
    setups: tuple[Callable, Callable]  # saving the input, saving the output

    def __init__(self, backend: str, launch):
        self.launch_fwd, self.launch_bwd, self.launch_bwd_y = (
            getattr(launch, name) for name in self.launchers
        )
        (fwd_s, bwd_s, bwd_y_s), (fwd_f, bwd_f, bwd_y_f) = self.schemas, self.fakes
        prefix = f"{backend}_{self.op}"
        fwd, bwd = (self._fwd_impl, fwd_s, fwd_f), (self._bwd_impl, bwd_s, bwd_f)
        self.fwd_op, self.bwd_op = _define(prefix, "", fwd, bwd, self._backward, self.setups[0])
        fwd, bwd = (self._fwd_y_impl, fwd_s, fwd_f), (self._bwd_y_impl, bwd_y_s, bwd_y_f)
        self.fwd_y_op, self.bwd_y_op = _define(
            prefix, "_y", fwd, bwd, self._backward_y, self.setups[1]
        )


def _define(prefix: str, variant: str, fwd, bwd, backward: Callable, setup: Callable):
    """Register ``normlab::<prefix>_fwd<variant>`` and ``_bwd<variant>`` from their
    ``(implementation, schema, fake)``, the first differentiable through ``backward``
    (``setup`` its ``setup_context``); returns both ops."""
    ops = []
    for step, (impl, schema, fake) in (("fwd", fwd), ("bwd", bwd)):
        name = f"normlab::{prefix}_{step}{variant}"
        op = torch.library.custom_op(name, impl, mutates_args=(), schema=schema)
        op.register_fake(fake)
        ops.append(op)
    ops[0].register_autograd(backward, setup_context=setup)
    return ops


# ---- memory-efficient mode: is xhat recoverable from y? -----------------------------------------

# id(weight or bias) -> (weakref, key, verdict): the small-gain check of memory-efficient mode,
# redone only when the parameters change (their version counters), since on CUDA it is a sync.
_recompute_cache: dict[int, tuple[weakref.ref, tuple, bool]] = {}


def _version_key(t: Tensor | None) -> tuple:
    return () if t is None else (id(t), t._version, t.data_ptr(), t.dtype)


def recompute_ok_cached(weight, bias, n: int, offset: float = 0.0, casting: str = "") -> bool:
    """:func:`normlab.reference.recompute_ok` for RMSNorm (``casting`` given: the gain is
    ``offset + weight``) or LayerNorm (``weight`` and ``bias``), cached per parameter version."""
    if n < 2 or (weight is None and bias is None):
        return n >= 2
    owner = weight if weight is not None else bias
    key = (_version_key(weight), _version_key(bias), offset, casting)
    hit = _recompute_cache.get(id(owner))
    if hit is not None and hit[0]() is owner and hit[1] == key:
        return hit[2]
    gain = rms_gain(weight, offset, casting) if casting else weight
    ok = recompute_ok(gain, bias, n)
    ident = id(owner)
    ref = weakref.ref(owner, lambda _, i=ident: _recompute_cache.pop(i, None))
    _recompute_cache[ident] = (ref, key, ok)
    return ok


def refuse_small_gain(gain: Tensor | None, bias: Tensor | None, n: int) -> None:
    """Under torch.compile what to save is fixed when the graph is traced, so the small-gain
    fall-back cannot be chosen per call: the memory-efficient op refuses such a gain instead."""
    if not recompute_ok(gain, bias, n):
        raise ValueError(
            "memory_efficient=True under torch.compile: the gain has |gamma_j| below "
            "normlab.reference.RECOMPUTE_MIN_GAIN (or |beta_j| / |gamma_j| above "
            "RECOMPUTE_MAX_BIAS_RATIO, or the rows have one element), so xhat = "
            "(y - beta) / gamma cannot be recovered accurately from the output; use "
            "memory_efficient=False for this norm (eager mode falls back to saving the input "
            "by itself)"
        )
