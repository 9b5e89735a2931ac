"""Autograd and ``torch.library`` registration for kernel backends, written once for all of them.

A backend (Numba, Triton, ...) supplies four *host launchers*; :class:`KernelOps` turns them
into the two functions a :class:`normlab.kernels.registry.Backend` needs, with gradients, and
registers ``normlab::<name>_rms_norm_fwd`` / ``_rms_norm_bwd`` / ``_layer_norm_fwd`` /
``_layer_norm_bwd`` as ``torch.library.custom_op`` s (with ``register_fake`` and
``register_autograd``) so that ``torch.compile(fullgraph=True)`` traces through them.

Launcher contract (what a backend implements; ``M >= 1`` rows of ``N`` elements)
------------------------------------------------------------------------------
Every 2-D argument is ``(M, N)`` with ``stride(-1) == 1`` (any row stride, even 0) or ``N == 1``;
dtypes are float32, bfloat16 or float16 (float64 never reaches a launcher). ``weight``/``bias``
are ``(N,)`` contiguous, in the input dtype or float32, or ``None``. Launchers allocate and return
new contiguous tensors and never write to their inputs.

``rms_fwd(x, weight, residual, eps, offset, casting, eps_inside, out_dtype) -> (y, h, rstd)``
    ``h = x + residual`` rounded to ``residual.dtype`` (``None`` when ``residual is None``; the
    kernel then normalizes ``x``); ``y`` as :func:`normlab.reference.rms_norm` in ``out_dtype``
    (the caller computes it: ``promote(weight, h)`` for casting llama/none with a weight, else
    ``h.dtype``); ``rstd`` ``(M,)`` float32, ``1/sqrt(ms + eps)`` or ``1/(sqrt(ms) + eps)``.
    The gain is ``offset + weight`` (computed in float32 by the kernel).
``rms_bwd(dy, dh, h, weight, rstd, eps, offset, casting, eps_inside) -> (dh_total, dweight)``
    ``h`` is the normalized input (``x`` when there was no residual), ``dy`` the gradient of
    ``y`` (``out_dtype``), ``dh`` the gradient of the returned ``h`` or ``None``.
    ``dh_total = dh + d(y)/d(h)^T dy`` in ``h.dtype``; ``dweight`` ``(N,)`` float32 (``None``
    without weight), reduced deterministically (no atomics).
``ln_fwd(x, weight, bias, residual, eps) -> (y, h, mean, rstd)``
    as above with ``y`` in ``h.dtype``; ``mean``/``rstd`` ``(M,)`` float32.
``ln_bwd(dy, dh, h, weight, mean, rstd, has_bias) -> (dh_total, dweight, dbias)``
    ``dweight``/``dbias`` float32 ``(N,)`` or ``None`` (without weight / ``not has_bias``).
``rms_bwd_y(dy, dh, y, weight, rstd, eps, offset, casting, eps_inside, h_dtype)``,
``ln_bwd_y(dy, dh, y, weight, bias, rstd, h_dtype)``
    the memory-efficient backwards: as ``rms_bwd``/``ln_bwd``, but from the forward's output
    ``y`` (``xhat = (y - bias) / gain``) instead of its input; ``dh_total`` in ``h_dtype``.

Everything else (flattening ``(..., N)`` to rows, 0 rows, casting gradients to the dtypes of
``x``/``residual``/``weight``, choosing the call path) is done here.

Call paths, chosen per call because the custom-op dispatcher and an ``autograd.Function`` each
cost more per call than a small norm's kernels (``benchmarks/bench_overhead.py`` times them;
docs/benchmarks.md has its figures):

- under ``torch.compile``: the custom ops (traceable, with fake kernels);
- eager, no gradient needed: the launcher directly;
- eager with gradients: a lean ``torch.autograd.Function`` around the same launchers.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from normlab.reference import recompute_ok, rms_gain

__all__ = ["KernelOps", "Launchers", "make_kernel_ops", "rms_out_dtype"]


@dataclass(frozen=True)
class Launchers:
    """A backend's four host launchers (signatures in the module docstring)."""

    rms_fwd: Callable[..., tuple[Tensor, Tensor | None, Tensor]]
    rms_bwd: Callable[..., tuple[Tensor, Tensor | None]]
    ln_fwd: Callable[..., tuple[Tensor, Tensor | None, Tensor, Tensor]]
    ln_bwd: Callable[..., tuple[Tensor, Tensor | None, Tensor | None]]
    rms_bwd_y: Callable[..., tuple[Tensor, Tensor | None]]
    ln_bwd_y: Callable[..., tuple[Tensor, Tensor | None, Tensor | None]]


def rms_out_dtype(h_dtype: torch.dtype, weight: Tensor | None, casting: str) -> torch.dtype:
    """``y``'s dtype in the reference: ``(offset + w) * xhat`` promotes unless casting is gemma."""
    if weight is None or casting == "gemma":
        return h_dtype
    return torch.promote_types(weight.dtype, h_dtype)


def _rows(t: Tensor | None) -> Tensor | None:
    """``(..., N) -> (M, N)`` with unit element stride, a view whenever the strides allow it."""
    if t is None:
        return None
    if t.dim() == 2 and t.stride(-1) == 1:
        return t
    t2 = t.reshape(-1, t.shape[-1])
    if t2.stride(-1) != 1 and t2.shape[-1] != 1:
        t2 = t2.contiguous()
    return t2


def _nd(t: Tensor | None, shape: torch.Size) -> Tensor | None:
    """``(M, N)`` rows back to ``shape`` (a view is not free on a small tensor: only if needed)."""
    if t is None or t.dim() == len(shape):
        return t
    return t.view(*shape)


def _vec(t: Tensor | None) -> Tensor | None:
    return t if t is None or t.is_contiguous() else t.contiguous()


def _detach(t: Tensor | None) -> Tensor | None:
    return None if t is None else t.detach()


def _needs_grad(*ts: Tensor | None) -> bool:
    if not torch.is_grad_enabled():
        return False
    for t in ts:
        if t is not None and t.requires_grad:
            return True
    return False


def _grad_to(g: Tensor | None, like: Tensor | torch.dtype | None) -> Tensor | None:
    """``g`` in the dtype of ``like`` (a tensor or a dtype); ``None`` if either is missing."""
    if g is None or like is None:
        return None
    dtype = like if isinstance(like, torch.dtype) else like.dtype
    return g if g.dtype == dtype else g.to(dtype)


# id(weight or bias) -> (weakref, key, verdict): the small-gain check of memory-efficient mode,
# redone only when the parameters change (their version counters), since on CUDA it is a sync.
_recompute_cache: dict[int, tuple[weakref.ref, tuple, bool]] = {}


def _version_key(t: Tensor | None) -> tuple:
    return () if t is None else (id(t), t._version, t.data_ptr(), t.dtype)


def _recompute_ok_cached(weight, bias, n: int, offset: float = 0.0, casting: str = "") -> bool:
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


# ---- shape plumbing shared by all paths --------------------------------------------------------


class RowLaunchers:
    """A backend's launchers behind ``(..., N)`` tensors: flattening to rows and 0 rows here."""

    def __init__(self, launch: Launchers):
        self.launch = launch

    def rms_fwd(self, x, weight, residual, eps, offset, casting, eps_inside):
        shape, n = x.shape, x.shape[-1]
        h_dtype = x.dtype if residual is None else residual.dtype
        out_dtype = rms_out_dtype(h_dtype, weight, casting)
        m = x.numel() // n
        if m == 0:
            h = None if residual is None else x.new_empty(shape, dtype=h_dtype)
            return x.new_empty(shape, dtype=out_dtype), h, x.new_empty(0, dtype=torch.float32)
        y, h, rstd = self.launch.rms_fwd(
            _rows(x), _vec(weight), _rows(residual), eps, offset, casting, eps_inside, out_dtype
        )
        return _nd(y, shape), _nd(h, shape), rstd

    def rms_bwd(self, dy, dh, hsaved, weight, rstd, eps, offset, casting, eps_inside):
        n = hsaved.shape[-1]
        if hsaved.numel() == 0:
            dw = None if weight is None else hsaved.new_zeros(n, dtype=torch.float32)
            return torch.zeros_like(hsaved), dw
        dht, dw = self.launch.rms_bwd(
            _rows(dy),
            _rows(dh),
            _rows(hsaved),
            _vec(weight),
            rstd,
            eps,
            offset,
            casting,
            eps_inside,
        )
        return _nd(dht, hsaved.shape), dw

    def ln_fwd(self, x, weight, bias, residual, eps):
        shape, n = x.shape, x.shape[-1]
        h_dtype = x.dtype if residual is None else residual.dtype
        if x.numel() // n == 0:
            h = None if residual is None else x.new_empty(shape, dtype=h_dtype)
            return (
                x.new_empty(shape, dtype=h_dtype),
                h,
                x.new_empty(0, dtype=torch.float32),
                x.new_empty(0, dtype=torch.float32),
            )
        y, h, mean, rstd = self.launch.ln_fwd(
            _rows(x), _vec(weight), _vec(bias), _rows(residual), eps
        )
        return _nd(y, shape), _nd(h, shape), mean, rstd

    def ln_bwd(self, dy, dh, hsaved, weight, mean, rstd, has_bias):
        n = hsaved.shape[-1]
        if hsaved.numel() == 0:
            z = hsaved.new_zeros(n, dtype=torch.float32)
            return torch.zeros_like(hsaved), None if weight is None else z, z if has_bias else None
        dht, dw, db = self.launch.ln_bwd(
            _rows(dy), _rows(dh), _rows(hsaved), _vec(weight), mean, rstd, has_bias
        )
        return _nd(dht, hsaved.shape), dw, db

    def rms_bwd_y(self, dy, dh, y, weight, rstd, eps, offset, casting, eps_inside, h_dtype):
        if y.numel() == 0:
            dw = None if weight is None else y.new_zeros(y.shape[-1], dtype=torch.float32)
            return y.new_zeros(y.shape, dtype=h_dtype), dw
        dht, dw = self.launch.rms_bwd_y(
            _rows(dy),
            _rows(dh),
            _rows(y),
            _vec(weight),
            rstd,
            eps,
            offset,
            casting,
            eps_inside,
            h_dtype,
        )
        return _nd(dht, y.shape), dw

    def ln_bwd_y(self, dy, dh, y, weight, bias, rstd, h_dtype):
        if y.numel() == 0:
            z = y.new_zeros(y.shape[-1], dtype=torch.float32)
            dw, db = None if weight is None else z, None if bias is None else z
            return y.new_zeros(y.shape, dtype=h_dtype), dw, db
        dht, dw, db = self.launch.ln_bwd_y(
            _rows(dy), _rows(dh), _rows(y), _vec(weight), _vec(bias), rstd, h_dtype
        )
        return _nd(dht, y.shape), dw, db


# ---- the backward of each op, written once ------------------------------------------------------
# ``bwd`` is the row launcher (eager) or its custom op (under torch.compile).


def _dh_and_dtype(ctx, dh):
    """``dh`` where the op had a residual (else None), and ``h``'s dtype."""
    x_dtype, r_dtype = ctx.dtypes
    return (None, x_dtype) if r_dtype is None else (dh, r_dtype)


def _dx_dr(ctx, dht):
    """The gradients of ``x`` (in its dtype) and of ``residual`` from the gradient of ``h``."""
    x_dtype, r_dtype = ctx.dtypes
    dx = dht if dht.dtype == x_dtype else dht.to(x_dtype)
    return dx, None if r_dtype is None else dht


def _rms_grads(bwd, ctx, dy, dh):
    """Gradients of ``(x, weight, residual)``."""
    hsaved, weight, rstd = ctx.saved_tensors
    dht, dw = bwd(dy, _dh_and_dtype(ctx, dh)[0], hsaved, weight, rstd, *ctx.args)
    dx, dr = _dx_dr(ctx, dht)
    return dx, _grad_to(dw, weight), dr


def _ln_grads(bwd, ctx, dy, dh):
    """Gradients of ``(x, weight, bias, residual)``."""
    hsaved, weight, mean, rstd = ctx.saved_tensors
    dh = _dh_and_dtype(ctx, dh)[0]
    dht, dw, db = bwd(dy, dh, hsaved, weight, mean, rstd, ctx.bias_dtype is not None)
    dx, dr = _dx_dr(ctx, dht)
    return dx, _grad_to(dw, weight), _grad_to(db, ctx.bias_dtype), dr


def _rms_grads_y(bwd, ctx, dy, dh):
    """Gradients of ``(x, weight, residual)`` from the saved output (memory-efficient mode)."""
    y, weight, rstd = ctx.saved_tensors
    dh, h_dtype = _dh_and_dtype(ctx, dh)
    dht, dw = bwd(dy, dh, y, weight, rstd, *ctx.args, h_dtype)
    dx, dr = _dx_dr(ctx, dht)
    return dx, _grad_to(dw, weight), dr


def _ln_grads_y(bwd, ctx, dy, dh):
    """Gradients of ``(x, weight, bias, residual)`` from the saved output."""
    y, weight, bias, rstd = ctx.saved_tensors
    dh, h_dtype = _dh_and_dtype(ctx, dh)
    dht, dw, db = bwd(dy, dh, y, weight, bias, rstd, h_dtype)
    dx, dr = _dx_dr(ctx, dht)
    return dx, _grad_to(dw, weight), _grad_to(db, bias), dr


# ---- eager autograd: a lean Function around the launchers ---------------------------------------
# The kernels' backward is not itself differentiable. once_differentiable says so when a double
# backward needs it, but its wrapper costs time on every call, so it only runs under
# create_graph=True (grad mode is off in a plain backward). ``rows`` (the backend's
# RowLaunchers) is the first argument of ``apply``; its gradient is the leading None.


def _rms_backward(ctx, dy, dh=None):
    return (None, *_rms_grads(ctx.rows.rms_bwd, ctx, dy, dh), None, None, None, None)


def _ln_backward(ctx, dy, dh=None):
    return (None, *_ln_grads(ctx.rows.ln_bwd, ctx, dy, dh), None)


_rms_backward_once = torch.autograd.function.once_differentiable(_rms_backward)
_ln_backward_once = torch.autograd.function.once_differentiable(_ln_backward)


def _rms_backward_y(ctx, dy, dh=None):
    return (None, *_rms_grads_y(ctx.rows.rms_bwd_y, ctx, dy, dh), None, None, None, None)


def _ln_backward_y(ctx, dy, dh=None):
    return (None, *_ln_grads_y(ctx.rows.ln_bwd_y, ctx, dy, dh), None)


_rms_backward_y_once = torch.autograd.function.once_differentiable(_rms_backward_y)
_ln_backward_y_once = torch.autograd.function.once_differentiable(_ln_backward_y)


class RMSNormFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, rows, x, weight, residual, eps, offset, casting, eps_inside):
        y, h, rstd = rows.rms_fwd(x, weight, residual, eps, offset, casting, eps_inside)
        ctx.save_for_backward(x if h is None else h, weight, rstd)
        ctx.rows = rows
        ctx.args = (eps, offset, casting, eps_inside)
        ctx.dtypes = (x.dtype, None if residual is None else residual.dtype)
        if h is None:
            return y
        return y, h

    @staticmethod
    def backward(ctx, dy, dh=None):
        if torch.is_grad_enabled():
            return _rms_backward_once(ctx, dy, dh)
        return _rms_backward(ctx, dy, dh)


class LayerNormFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, rows, x, weight, bias, residual, eps):
        y, h, mean, rstd = rows.ln_fwd(x, weight, bias, residual, eps)
        ctx.save_for_backward(x if h is None else h, weight, mean, rstd)
        ctx.rows = rows
        ctx.dtypes = (x.dtype, None if residual is None else residual.dtype)
        ctx.bias_dtype = None if bias is None else bias.dtype
        if h is None:
            return y
        return y, h

    @staticmethod
    def backward(ctx, dy, dh=None):
        if torch.is_grad_enabled():
            return _ln_backward_once(ctx, dy, dh)
        return _ln_backward(ctx, dy, dh)


# The memory-efficient twins save the output y (kept alive by the next linear layer anyway) in
# place of the normalized input; separate classes, so the default path is unchanged.


class RMSNormYFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, rows, x, weight, residual, eps, offset, casting, eps_inside):
        y, h, rstd = rows.rms_fwd(x, weight, residual, eps, offset, casting, eps_inside)
        ctx.save_for_backward(y, weight, rstd)
        ctx.rows = rows
        ctx.args = (eps, offset, casting, eps_inside)
        ctx.dtypes = (x.dtype, None if residual is None else residual.dtype)
        if h is None:
            return y
        return y, h

    @staticmethod
    def backward(ctx, dy, dh=None):
        if torch.is_grad_enabled():
            return _rms_backward_y_once(ctx, dy, dh)
        return _rms_backward_y(ctx, dy, dh)


class LayerNormYFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, rows, x, weight, bias, residual, eps):
        y, h, _, rstd = rows.ln_fwd(x, weight, bias, residual, eps)
        ctx.save_for_backward(y, weight, bias, rstd)
        ctx.rows = rows
        ctx.dtypes = (x.dtype, None if residual is None else residual.dtype)
        if h is None:
            return y
        return y, h

    @staticmethod
    def backward(ctx, dy, dh=None):
        if torch.is_grad_enabled():
            return _ln_backward_y_once(ctx, dy, dh)
        return _ln_backward_y(ctx, dy, dh)


# ---- torch.library custom ops: the path torch.compile sees --------------------------------------
# Custom ops cannot return None or alias an input, so a missing h is an empty tensor. The schemas,
# fake kernels and setup_context are the same for every backend; what differs (the launchers
# the real kernels call) is bound by KernelOps.

RMS_FWD_SCHEMA = (
    "(Tensor x, Tensor? weight, Tensor? residual, float eps, float offset, str casting, "
    "bool eps_inside) -> (Tensor, Tensor, Tensor)"
)
RMS_BWD_SCHEMA = (
    "(Tensor dy, Tensor? dh, Tensor h, Tensor? weight, Tensor rstd, float eps, "
    "float offset, str casting, bool eps_inside) -> (Tensor, Tensor)"
)
LN_FWD_SCHEMA = (
    "(Tensor x, Tensor? weight, Tensor? bias, Tensor? residual, float eps) "
    "-> (Tensor, Tensor, Tensor, Tensor)"
)
LN_BWD_SCHEMA = (
    "(Tensor dy, Tensor? dh, Tensor h, Tensor? weight, Tensor mean, Tensor rstd, "
    "bool has_bias) -> (Tensor, Tensor, Tensor)"
)


RMS_BWD_Y_SCHEMA = (
    "(Tensor dy, Tensor? dh, Tensor y, Tensor? weight, Tensor rstd, float eps, "
    "float offset, str casting, bool eps_inside, ScalarType h_dtype) -> (Tensor, Tensor)"
)
LN_BWD_Y_SCHEMA = (
    "(Tensor dy, Tensor? dh, Tensor y, Tensor? weight, Tensor? bias, Tensor rstd, "
    "ScalarType h_dtype) -> (Tensor, Tensor, Tensor)"
)


def _op(name: str, suffix: str, impl: Callable, schema: str):
    return torch.library.custom_op(
        f"normlab::{name}_{suffix}", impl, mutates_args=(), schema=schema
    )


def _empty_if_none(t: Tensor | None, like: Tensor) -> Tensor:
    return like.new_empty(0) if t is None else t


def _rms_fwd_fake(x, weight, residual, eps, offset, casting, eps_inside):
    h_dtype = x.dtype if residual is None else residual.dtype
    y = x.new_empty(x.shape, dtype=rms_out_dtype(h_dtype, weight, casting))
    h = x.new_empty(0) if residual is None else x.new_empty(x.shape, dtype=h_dtype)
    m = x.numel() // x.shape[-1]
    return y, h, x.new_empty(m, dtype=torch.float32)


def _rms_bwd_fake(dy, dh, hsaved, weight, rstd, eps, offset, casting, eps_inside):
    n = 0 if weight is None else hsaved.shape[-1]
    return hsaved.new_empty(hsaved.shape), hsaved.new_empty(n, dtype=torch.float32)


def _rms_setup(ctx, inputs, output):
    x, weight, residual, eps, offset, casting, eps_inside = inputs
    _, h, rstd = output
    ctx.save_for_backward(x if residual is None else h, weight, rstd)
    ctx.args = (eps, offset, casting, eps_inside)
    ctx.dtypes = (x.dtype, None if residual is None else residual.dtype)


def _ln_fwd_fake(x, weight, bias, residual, eps):
    h_dtype = x.dtype if residual is None else residual.dtype
    h = x.new_empty(0) if residual is None else x.new_empty(x.shape, dtype=h_dtype)
    m = x.numel() // x.shape[-1]
    stat = x.new_empty(m, dtype=torch.float32)
    return x.new_empty(x.shape, dtype=h_dtype), h, stat, stat.new_empty(m)


def _ln_bwd_fake(dy, dh, hsaved, weight, mean, rstd, has_bias):
    n = hsaved.shape[-1]
    f32 = torch.float32
    dw = hsaved.new_empty(0 if weight is None else n, dtype=f32)
    return hsaved.new_empty(hsaved.shape), dw, hsaved.new_empty(n if has_bias else 0, dtype=f32)


def _ln_setup(ctx, inputs, output):
    x, weight, bias, residual, eps = inputs
    _, h, mean, rstd = output
    ctx.save_for_backward(x if residual is None else h, weight, mean, rstd)
    ctx.dtypes = (x.dtype, None if residual is None else residual.dtype)
    ctx.bias_dtype = None if bias is None else bias.dtype


def _rms_bwd_y_fake(dy, dh, y, weight, rstd, eps, offset, casting, eps_inside, h_dtype):
    n = 0 if weight is None else y.shape[-1]
    return y.new_empty(y.shape, dtype=h_dtype), y.new_empty(n, dtype=torch.float32)


def _rms_setup_y(ctx, inputs, output):
    x, weight, residual, eps, offset, casting, eps_inside = inputs
    y, _, rstd = output
    ctx.save_for_backward(y, weight, rstd)
    ctx.args = (eps, offset, casting, eps_inside)
    ctx.dtypes = (x.dtype, None if residual is None else residual.dtype)


def _ln_bwd_y_fake(dy, dh, y, weight, bias, rstd, h_dtype):
    n, f32 = y.shape[-1], torch.float32
    dw = y.new_empty(0 if weight is None else n, dtype=f32)
    return y.new_empty(y.shape, dtype=h_dtype), dw, y.new_empty(0 if bias is None else n, dtype=f32)


def _ln_setup_y(ctx, inputs, output):
    x, weight, bias, residual, eps = inputs
    y, _, _, rstd = output
    ctx.save_for_backward(y, weight, bias, rstd)
    ctx.dtypes = (x.dtype, None if residual is None else residual.dtype)


def _refuse_small_gain(gain: Tensor | None, bias: Tensor | None, n: int) -> None:
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


class KernelOps:
    """One backend's ``normlab::<name>_*`` custom ops and the Backend-contract functions
    :meth:`rms_norm` and :meth:`layer_norm`, which choose the call path (module docstring).

    Create once per backend, at import of its ``ops`` module: the ops are registered then.
    """

    def __init__(self, name: str, launch: Launchers):
        self.rows = RowLaunchers(launch)
        self.rms_fwd_op = _op(name, "rms_norm_fwd", self._rms_fwd_impl, RMS_FWD_SCHEMA)
        self.rms_fwd_op.register_fake(_rms_fwd_fake)
        self.rms_bwd_op = _op(name, "rms_norm_bwd", self._rms_bwd_impl, RMS_BWD_SCHEMA)
        self.rms_bwd_op.register_fake(_rms_bwd_fake)
        self.rms_fwd_op.register_autograd(self._rms_backward, setup_context=_rms_setup)
        self.ln_fwd_op = _op(name, "layer_norm_fwd", self._ln_fwd_impl, LN_FWD_SCHEMA)
        self.ln_fwd_op.register_fake(_ln_fwd_fake)
        self.ln_bwd_op = _op(name, "layer_norm_bwd", self._ln_bwd_impl, LN_BWD_SCHEMA)
        self.ln_bwd_op.register_fake(_ln_bwd_fake)
        self.ln_fwd_op.register_autograd(self._ln_backward, setup_context=_ln_setup)
        # memory-efficient twins: forward ops that check the gain and save y; backward from y
        self.rms_fwd_y_op = _op(name, "rms_norm_fwd_y", self._rms_fwd_y_impl, RMS_FWD_SCHEMA)
        self.rms_fwd_y_op.register_fake(_rms_fwd_fake)
        self.rms_bwd_y_op = _op(name, "rms_norm_bwd_y", self._rms_bwd_y_impl, RMS_BWD_Y_SCHEMA)
        self.rms_bwd_y_op.register_fake(_rms_bwd_y_fake)
        self.rms_fwd_y_op.register_autograd(self._rms_backward_y, setup_context=_rms_setup_y)
        self.ln_fwd_y_op = _op(name, "layer_norm_fwd_y", self._ln_fwd_y_impl, LN_FWD_SCHEMA)
        self.ln_fwd_y_op.register_fake(_ln_fwd_fake)
        self.ln_bwd_y_op = _op(name, "layer_norm_bwd_y", self._ln_bwd_y_impl, LN_BWD_Y_SCHEMA)
        self.ln_bwd_y_op.register_fake(_ln_bwd_y_fake)
        self.ln_fwd_y_op.register_autograd(self._ln_backward_y, setup_context=_ln_setup_y)

    # ---- the custom ops' implementations and autograd ------------------------------------------

    def _rms_fwd_impl(self, x, weight, residual, eps, offset, casting, eps_inside):
        y, h, rstd = self.rows.rms_fwd(x, weight, residual, eps, offset, casting, eps_inside)
        return y, _empty_if_none(h, x), rstd

    def _rms_bwd_impl(self, dy, dh, hsaved, weight, rstd, eps, offset, casting, eps_inside):
        dht, dw = self.rows.rms_bwd(dy, dh, hsaved, weight, rstd, eps, offset, casting, eps_inside)
        return dht, _empty_if_none(dw, rstd)

    def _ln_fwd_impl(self, x, weight, bias, residual, eps):
        y, h, mean, rstd = self.rows.ln_fwd(x, weight, bias, residual, eps)
        return y, _empty_if_none(h, x), mean, rstd

    def _ln_bwd_impl(self, dy, dh, hsaved, weight, mean, rstd, has_bias):
        dht, dw, db = self.rows.ln_bwd(dy, dh, hsaved, weight, mean, rstd, has_bias)
        return dht, _empty_if_none(dw, rstd), _empty_if_none(db, rstd)

    def _rms_bwd_via_op(self, dy, dh, hsaved, weight, rstd, *args):
        dht, dw = self.rms_bwd_op(dy, dh, hsaved.detach(), _detach(weight), rstd, *args)
        return dht, None if weight is None else dw

    def _rms_backward(self, ctx, dy, dh, _drstd):
        return (*_rms_grads(self._rms_bwd_via_op, ctx, dy, dh), None, None, None, None)

    def _ln_bwd_via_op(self, dy, dh, hsaved, weight, mean, rstd, has_bias):
        dht, dw, db = self.ln_bwd_op(dy, dh, hsaved.detach(), _detach(weight), mean, rstd, has_bias)
        return dht, None if weight is None else dw, db if has_bias else None

    def _ln_backward(self, ctx, dy, dh, _dmean, _drstd):
        return (*_ln_grads(self._ln_bwd_via_op, ctx, dy, dh), None)

    def _rms_fwd_y_impl(self, x, weight, residual, eps, offset, casting, eps_inside):
        _refuse_small_gain(rms_gain(weight, offset, casting), None, x.shape[-1])
        return self._rms_fwd_impl(x, weight, residual, eps, offset, casting, eps_inside)

    def _ln_fwd_y_impl(self, x, weight, bias, residual, eps):
        _refuse_small_gain(weight, bias, x.shape[-1])
        return self._ln_fwd_impl(x, weight, bias, residual, eps)

    def _rms_bwd_y_impl(self, dy, dh, y, weight, rstd, eps, offset, casting, eps_inside, h_dtype):
        args = (eps, offset, casting, eps_inside, h_dtype)
        dht, dw = self.rows.rms_bwd_y(dy, dh, y, weight, rstd, *args)
        return dht, _empty_if_none(dw, rstd)

    def _ln_bwd_y_impl(self, dy, dh, y, weight, bias, rstd, h_dtype):
        dht, dw, db = self.rows.ln_bwd_y(dy, dh, y, weight, bias, rstd, h_dtype)
        return dht, _empty_if_none(dw, rstd), _empty_if_none(db, rstd)

    def _rms_bwd_y_via_op(self, dy, dh, y, weight, rstd, *args):
        dht, dw = self.rms_bwd_y_op(dy, dh, y.detach(), _detach(weight), rstd, *args)
        return dht, None if weight is None else dw

    def _rms_backward_y(self, ctx, dy, dh, _drstd):
        return (*_rms_grads_y(self._rms_bwd_y_via_op, ctx, dy, dh), None, None, None, None)

    def _ln_bwd_y_via_op(self, dy, dh, y, weight, bias, rstd, h_dtype):
        w, b = _detach(weight), _detach(bias)
        dht, dw, db = self.ln_bwd_y_op(dy, dh, y.detach(), w, b, rstd, h_dtype)
        return dht, None if weight is None else dw, None if bias is None else db

    def _ln_backward_y(self, ctx, dy, dh, _dmean, _drstd):
        return (*_ln_grads_y(self._ln_bwd_y_via_op, ctx, dy, dh), None)

    # ---- the Backend-contract functions --------------------------------------------------------

    def rms_norm(
        self, x, weight, eps, *, residual, offset, casting, eps_inside, memory_efficient=False
    ):
        if torch.compiler.is_compiling():
            op = self.rms_fwd_y_op if memory_efficient else self.rms_fwd_op
            y, h, _ = op(x, weight, residual, eps, offset, casting, eps_inside)
            return y if residual is None else (y, h)
        if _needs_grad(x, weight, residual):
            fn = RMSNormFn
            n = x.shape[-1]
            if memory_efficient and _recompute_ok_cached(weight, None, n, offset, casting):
                fn = RMSNormYFn
            return fn.apply(self.rows, x, weight, residual, eps, offset, casting, eps_inside)
        y, h, _ = self.rows.rms_fwd(x, weight, residual, eps, offset, casting, eps_inside)
        return y if residual is None else (y, h)

    def layer_norm(self, x, weight, bias, eps, *, residual, memory_efficient=False):
        if torch.compiler.is_compiling():
            op = self.ln_fwd_y_op if memory_efficient else self.ln_fwd_op
            y, h, _, _ = op(x, weight, bias, residual, eps)
            return y if residual is None else (y, h)
        if _needs_grad(x, weight, bias, residual):
            fn = LayerNormFn
            if memory_efficient and _recompute_ok_cached(weight, bias, x.shape[-1]):
                fn = LayerNormYFn
            return fn.apply(self.rows, x, weight, bias, residual, eps)
        y, h, _, _ = self.rows.ln_fwd(x, weight, bias, residual, eps)
        return y if residual is None else (y, h)


def make_kernel_ops(name: str, launch: Launchers) -> KernelOps:
    """Register ``normlab::<name>_*`` custom ops for ``launch`` and return the Backend functions.

    Call once per backend, at import of its ``ops`` module.
    """
    return KernelOps(name, launch)
