"""RMSNorm over a backend's kernels: rows, custom ops, gradients and the eager ``Function``.

``bind(backend, launch)`` registers ``normlab::<backend>_rms_norm_fwd`` / ``_bwd`` (and the
memory-efficient ``_fwd_y`` / ``_bwd_y``) and returns the Backend-contract function. The
launchers it takes from ``launch`` (the rules every launcher keeps are in
:mod:`normlab.kernels.dispatch`):

``rms_fwd(x, weight, residual, eps, offset, casting, eps_inside, out_dtype) -> (y, h, rstd)``
    ``y`` as :func:`normlab.reference.rms_norm` in ``out_dtype`` (:func:`rms_out_dtype`);
    ``rstd = 1/sqrt(ms + eps)`` or ``1/(sqrt(ms) + eps)``. The gain is ``offset + weight``
    (computed in float32 by the kernel).
``rms_bwd(dy, dh, h, weight, rstd, eps, offset, casting, eps_inside) -> (dh_total, dweight)``
    ``h`` is the normalized input (``x`` when there was no residual), ``dy`` the gradient of
    ``y``, ``dh`` the gradient of the returned ``h`` or ``None``;
    ``dh_total = dh + d(y)/d(h)^T dy`` in ``h.dtype``.
``rms_bwd_y(dy, dh, y, weight, rstd, eps, offset, casting, eps_inside, h_dtype)``
    as ``rms_bwd`` from the output ``y``; ``dh_total`` in ``h_dtype``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from normlab.kernels import dispatch as dp
from normlab.reference import rms_gain

__all__ = ["RMSNormKernels", "bind", "rms_out_dtype"]

FWD_SCHEMA = (
    "(Tensor x, Tensor? weight, Tensor? residual, float eps, float offset, str casting, "
    "bool eps_inside) -> (Tensor, Tensor, Tensor)"
)
BWD_SCHEMA = (
    "(Tensor dy, Tensor? dh, Tensor h, Tensor? weight, Tensor rstd, float eps, "
    "float offset, str casting, bool eps_inside) -> (Tensor, Tensor)"
)
BWD_Y_SCHEMA = (
    "(Tensor dy, Tensor? dh, Tensor y, Tensor? weight, Tensor rstd, float eps, "
    "float offset, str casting, bool eps_inside, ScalarType h_dtype) -> (Tensor, Tensor)"
)


def rms_out_dtype(h_dtype: torch.dtype, weight: Tensor | None, casting: str) -> torch.dtype:
    """``y``'s dtype in the reference: ``(offset + w) * xhat`` promotes unless casting is gemma."""
    if weight is None or casting == "gemma":
        return h_dtype
    return torch.promote_types(weight.dtype, h_dtype)


# ---- fake kernels and what the forward saves (custom ops and eager Function alike) -------------


def _fwd_fake(x, weight, residual, eps, offset, casting, eps_inside):
    h_dtype = dp.h_dtype_of(x, residual)
    y = x.new_empty(x.shape, dtype=rms_out_dtype(h_dtype, weight, casting))
    h = x.new_empty(0) if residual is None else x.new_empty(x.shape, dtype=h_dtype)
    m = x.numel() // x.shape[-1]
    return y, h, x.new_empty(m, dtype=torch.float32)


def _bwd_fake(dy, dh, hsaved, weight, rstd, eps, offset, casting, eps_inside):
    n = 0 if weight is None else hsaved.shape[-1]
    return hsaved.new_empty(hsaved.shape), hsaved.new_empty(n, dtype=torch.float32)


def _bwd_y_fake(dy, dh, y, weight, rstd, eps, offset, casting, eps_inside, h_dtype):
    n = 0 if weight is None else y.shape[-1]
    return y.new_empty(y.shape, dtype=h_dtype), y.new_empty(n, dtype=torch.float32)


def _setup(ctx, inputs, output):
    x, weight, residual, eps, offset, casting, eps_inside = inputs
    _, h, rstd = output
    ctx.save_for_backward(x if residual is None else h, weight, rstd)
    ctx.args = (eps, offset, casting, eps_inside)
    dp.save_dtypes(ctx, x, residual)


def _setup_y(ctx, inputs, output):
    """Memory-efficient mode: save the output y (kept alive by the next linear layer anyway)
    in place of the normalized input."""
    x, weight, residual, eps, offset, casting, eps_inside = inputs
    y, _, rstd = output
    ctx.save_for_backward(y, weight, rstd)
    ctx.args = (eps, offset, casting, eps_inside)
    dp.save_dtypes(ctx, x, residual)


# ---- gradients of (x, weight, residual); ``bwd`` is the row launcher or its custom op ----------


def _grads(bwd, ctx, dy, dh):
    hsaved, weight, rstd = ctx.saved_tensors
    dht, dw = bwd(dy, dp.dh_and_dtype(ctx, dh)[0], hsaved, weight, rstd, *ctx.args)
    dx, dr = dp.dx_dr(ctx, dht)
    return dx, dp.grad_to(dw, weight), dr


def _grads_y(bwd, ctx, dy, dh):
    y, weight, rstd = ctx.saved_tensors
    dh, h_dtype = dp.dh_and_dtype(ctx, dh)
    dht, dw = bwd(dy, dh, y, weight, rstd, *ctx.args, h_dtype)
    dx, dr = dp.dx_dr(ctx, dht)
    return dx, dp.grad_to(dw, weight), dr


class RMSNormFn(dp.RowNormFunction):
    """``apply(kern, save_y, x, weight, residual, eps, offset, casting, eps_inside)``: the eager
    path with gradients; ``save_y`` picks the memory-efficient backward."""

    @staticmethod
    def forward(ctx, kern, save_y, x, weight, residual, eps, offset, casting, eps_inside):
        inputs = (x, weight, residual, eps, offset, casting, eps_inside)
        y, h, rstd = kern.fwd(*inputs)
        (_setup_y if save_y else _setup)(ctx, inputs, (y, h, rstd))
        return dp.function_outputs(ctx, kern, save_y, y, h)


class RMSNormKernels(dp.RowNormKernels):
    """One backend's RMSNorm: its launchers behind ``(..., N)`` tensors, its custom ops, and
    :meth:`rms_norm`, the Backend-contract function that picks the call path."""

    op = "rms_norm"
    launchers = ("rms_fwd", "rms_bwd", "rms_bwd_y")
    schemas = (FWD_SCHEMA, BWD_SCHEMA, BWD_Y_SCHEMA)
    fakes = (_fwd_fake, _bwd_fake, _bwd_y_fake)
    setups = (_setup, _setup_y)

    # ---- rows: flattening (..., N) and 0 rows -------------------------------------------------

    def fwd(self, x, weight, residual, eps, offset, casting, eps_inside):
        shape, n = x.shape, x.shape[-1]
        h_dtype = dp.h_dtype_of(x, residual)
        out_dtype = rms_out_dtype(h_dtype, weight, casting)
        if x.numel() // n == 0:
            h = None if residual is None else x.new_empty(shape, dtype=h_dtype)
            return x.new_empty(shape, dtype=out_dtype), h, x.new_empty(0, dtype=torch.float32)
        y, h, rstd = self.launch_fwd(
            dp.rows(x),
            dp.vec(weight),
            dp.rows(residual),
            eps,
            offset,
            casting,
            eps_inside,
            out_dtype,
        )
        return dp.nd(y, shape), dp.nd(h, shape), rstd

    def bwd(self, dy, dh, hsaved, weight, rstd, eps, offset, casting, eps_inside):
        if hsaved.numel() == 0:
            dw = None if weight is None else hsaved.new_zeros(hsaved.shape[-1], dtype=torch.float32)
            return torch.zeros_like(hsaved), dw
        args = (eps, offset, casting, eps_inside)
        dht, dw = self.launch_bwd(
            dp.rows(dy), dp.rows(dh), dp.rows(hsaved), dp.vec(weight), rstd, *args
        )
        return dp.nd(dht, hsaved.shape), dw

    def bwd_y(self, dy, dh, y, weight, rstd, eps, offset, casting, eps_inside, h_dtype):
        if y.numel() == 0:
            dw = None if weight is None else y.new_zeros(y.shape[-1], dtype=torch.float32)
            return y.new_zeros(y.shape, dtype=h_dtype), dw
        args = (eps, offset, casting, eps_inside, h_dtype)
        dht, dw = self.launch_bwd_y(
            dp.rows(dy), dp.rows(dh), dp.rows(y), dp.vec(weight), rstd, *args
        )
        return dp.nd(dht, y.shape), dw

    # ---- the custom ops' implementations and autograd ------------------------------------------

    def _fwd_impl(self, x, weight, residual, eps, offset, casting, eps_inside):
        y, h, rstd = self.fwd(x, weight, residual, eps, offset, casting, eps_inside)
        return y, dp.empty_if_none(h, x), rstd

    def _fwd_y_impl(self, x, weight, residual, eps, offset, casting, eps_inside):
        dp.refuse_small_gain(rms_gain(weight, offset, casting), None, x.shape[-1])
        return self._fwd_impl(x, weight, residual, eps, offset, casting, eps_inside)

    def _bwd_impl(self, dy, dh, hsaved, weight, rstd, eps, offset, casting, eps_inside):
        dht, dw = self.bwd(dy, dh, hsaved, weight, rstd, eps, offset, casting, eps_inside)
        return dht, dp.empty_if_none(dw, rstd)

    def _bwd_y_impl(self, dy, dh, y, weight, rstd, eps, offset, casting, eps_inside, h_dtype):
        dht, dw = self.bwd_y(dy, dh, y, weight, rstd, eps, offset, casting, eps_inside, h_dtype)
        return dht, dp.empty_if_none(dw, rstd)

    def _bwd_via_op(self, dy, dh, hsaved, weight, rstd, *args):
        dht, dw = self.bwd_op(dy, dh, hsaved.detach(), dp.detach(weight), rstd, *args)
        return dht, None if weight is None else dw

    def _bwd_y_via_op(self, dy, dh, y, weight, rstd, *args):
        dht, dw = self.bwd_y_op(dy, dh, y.detach(), dp.detach(weight), rstd, *args)
        return dht, None if weight is None else dw

    def _backward(self, ctx, dy, dh, _drstd):
        return (*_grads(self._bwd_via_op, ctx, dy, dh), None, None, None, None)

    def _backward_y(self, ctx, dy, dh, _drstd):
        return (*_grads_y(self._bwd_y_via_op, ctx, dy, dh), None, None, None, None)

    def eager_grads(self, ctx, dy, dh):
        """The gradients of the eager Function's ``apply`` arguments."""
        grads = _grads_y(self.bwd_y, ctx, dy, dh) if ctx.save_y else _grads(self.bwd, ctx, dy, dh)
        return (None, None, *grads, None, None, None, None)

    # ---- the Backend-contract function --------------------------------------------------------

    def rms_norm(
        self, x, weight, eps, *, residual, offset, casting, eps_inside, memory_efficient=False
    ):
        args = (x, weight, residual, eps, offset, casting, eps_inside)
        if torch.compiler.is_compiling():
            y, h, _ = (self.fwd_y_op if memory_efficient else self.fwd_op)(*args)
        elif dp.needs_grad(x, weight, residual):
            save_y = memory_efficient and dp.recompute_ok_cached(
                weight, None, x.shape[-1], offset, casting
            )
            return RMSNormFn.apply(self, save_y, *args)
        else:
            y, h, _ = self.fwd(*args)
        return y if residual is None else (y, h)


def bind(backend: str, launch) -> RMSNormKernels:
    """Register ``normlab::<backend>_rms_norm_*`` over ``launch.rms_fwd``/``rms_bwd``/
    ``rms_bwd_y``; call once per backend, at import of its ``backend`` module."""
    return RMSNormKernels(backend, launch)
