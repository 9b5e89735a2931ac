"""LayerNorm over a backend's kernels: rows, custom ops, gradients and the eager ``Function``.

``bind(backend, launch)`` registers ``normlab::<backend>_layer_norm_fwd`` / ``_bwd`` (and the
memory-efficient ``_fwd_y`` / ``_bwd_y``) and returns the Backend-contract function. The
launchers it takes from ``launch`` (the rules every launcher keeps are in
:mod:`normlab.kernels.dispatch`):

``ln_fwd(x, weight, bias, residual, eps) -> (y, h, mean, rstd)``
    ``y`` as :func:`normlab.reference.layer_norm`, in ``h``'s dtype.
``ln_bwd(dy, dh, h, weight, mean, rstd, has_bias) -> (dh_total, dweight, dbias)``
    ``h`` is the normalized input (``x`` when there was no residual), ``dh`` the gradient of
    the returned ``h`` or ``None``; ``dbias`` is ``None`` when ``not has_bias``.
``ln_bwd_y(dy, dh, y, weight, bias, rstd, h_dtype)``
    as ``ln_bwd`` from the output ``y``; ``dh_total`` in ``h_dtype``.
"""

from __future__ import annotations

import torch

from normlab.kernels import dispatch as dp

__all__ = ["LayerNormKernels", "bind"]

FWD_SCHEMA = (
    "(Tensor x, Tensor? weight, Tensor? bias, Tensor? residual, float eps) "
    "-> (Tensor, Tensor, Tensor, Tensor)"
)
BWD_SCHEMA = (
    "(Tensor dy, Tensor? dh, Tensor h, Tensor? weight, Tensor mean, Tensor rstd, "
    "bool has_bias) -> (Tensor, Tensor, Tensor)"
)
BWD_Y_SCHEMA = (
    "(Tensor dy, Tensor? dh, Tensor y, Tensor? weight, Tensor? bias, Tensor rstd, "
    "ScalarType h_dtype) -> (Tensor, Tensor, Tensor)"
)
F32 = torch.float32


# ---- fake kernels and what the forward saves (custom ops and eager Function alike) -------------


def _fwd_fake(x, weight, bias, residual, eps):
    h_dtype = dp.h_dtype_of(x, residual)
    h = x.new_empty(0) if residual is None else x.new_empty(x.shape, dtype=h_dtype)
    m = x.numel() // x.shape[-1]
    stat = x.new_empty(m, dtype=F32)
    return x.new_empty(x.shape, dtype=h_dtype), h, stat, stat.new_empty(m)


def _bwd_fake(dy, dh, hsaved, weight, mean, rstd, has_bias):
    n = hsaved.shape[-1]
    dw = hsaved.new_empty(0 if weight is None else n, dtype=F32)
    return hsaved.new_empty(hsaved.shape), dw, hsaved.new_empty(n if has_bias else 0, dtype=F32)


def _bwd_y_fake(dy, dh, y, weight, bias, rstd, h_dtype):
    n = y.shape[-1]
    dw = y.new_empty(0 if weight is None else n, dtype=F32)
    return y.new_empty(y.shape, dtype=h_dtype), dw, y.new_empty(0 if bias is None else n, dtype=F32)


def _setup(ctx, inputs, output):
    x, weight, bias, residual, eps = inputs
    _, h, mean, rstd = output
    ctx.save_for_backward(x if residual is None else h, weight, mean, rstd)
    dp.save_dtypes(ctx, x, residual)
    ctx.bias_dtype = None if bias is None else bias.dtype


def _setup_y(ctx, inputs, output):
    """Memory-efficient mode: save the output y (kept alive by the next linear layer anyway)
    in place of the normalized input."""
    x, weight, bias, residual, eps = inputs
    y, _, _, rstd = output
    ctx.save_for_backward(y, weight, bias, rstd)
    dp.save_dtypes(ctx, x, residual)


# ---- gradients of (x, weight, bias, residual); ``bwd`` is the row launcher or its custom op ----


def _grads(bwd, ctx, dy, dh):
    hsaved, weight, mean, rstd = ctx.saved_tensors
    dh = dp.dh_and_dtype(ctx, dh)[0]
    dht, dw, db = bwd(dy, dh, hsaved, weight, mean, rstd, ctx.bias_dtype is not None)
    dx, dr = dp.dx_dr(ctx, dht)
    return dx, dp.grad_to(dw, weight), dp.grad_to(db, ctx.bias_dtype), dr


def _grads_y(bwd, ctx, dy, dh):
    y, weight, bias, rstd = ctx.saved_tensors
    dh, h_dtype = dp.dh_and_dtype(ctx, dh)
    dht, dw, db = bwd(dy, dh, y, weight, bias, rstd, h_dtype)
    dx, dr = dp.dx_dr(ctx, dht)
    return dx, dp.grad_to(dw, weight), dp.grad_to(db, bias), dr


class LayerNormFn(dp.RowNormFunction):
    """``apply(kern, save_y, x, weight, bias, residual, eps)``: the eager path with gradients;
    ``save_y`` picks the memory-efficient backward."""

    @staticmethod
    def forward(ctx, kern, save_y, x, weight, bias, residual, eps):
        inputs = (x, weight, bias, residual, eps)
        out = kern.fwd(*inputs)
        (_setup_y if save_y else _setup)(ctx, inputs, out)
        return dp.function_outputs(ctx, kern, save_y, out[0], out[1])


class LayerNormKernels(dp.RowNormKernels):
    """One backend's LayerNorm: its launchers behind ``(..., N)`` tensors, its custom ops, and
    :meth:`layer_norm`, the Backend-contract function that picks the call path."""

    op = "layer_norm"
    launchers = ("ln_fwd", "ln_bwd", "ln_bwd_y")
    schemas = (FWD_SCHEMA, BWD_SCHEMA, BWD_Y_SCHEMA)
    fakes = (_fwd_fake, _bwd_fake, _bwd_y_fake)
    setups = (_setup, _setup_y)

    # ---- rows: flattening (..., N) and 0 rows -------------------------------------------------

    def fwd(self, x, weight, bias, residual, eps):
        shape, n = x.shape, x.shape[-1]
        h_dtype = dp.h_dtype_of(x, residual)
        if x.numel() // n == 0:
            h = None if residual is None else x.new_empty(shape, dtype=h_dtype)
            stat = x.new_empty(0, dtype=F32)
            return x.new_empty(shape, dtype=h_dtype), h, stat, x.new_empty(0, dtype=F32)
        y, h, mean, rstd = self.launch_fwd(
            dp.rows(x), dp.vec(weight), dp.vec(bias), dp.rows(residual), eps
        )
        return dp.nd(y, shape), dp.nd(h, shape), mean, rstd

    def bwd(self, dy, dh, hsaved, weight, mean, rstd, has_bias):
        if hsaved.numel() == 0:
            z = hsaved.new_zeros(hsaved.shape[-1], dtype=F32)
            return torch.zeros_like(hsaved), None if weight is None else z, z if has_bias else None
        dht, dw, db = self.launch_bwd(
            dp.rows(dy), dp.rows(dh), dp.rows(hsaved), dp.vec(weight), mean, rstd, has_bias
        )
        return dp.nd(dht, hsaved.shape), dw, db

    def bwd_y(self, dy, dh, y, weight, bias, rstd, h_dtype):
        if y.numel() == 0:
            z = y.new_zeros(y.shape[-1], dtype=F32)
            dw, db = None if weight is None else z, None if bias is None else z
            return y.new_zeros(y.shape, dtype=h_dtype), dw, db
        dht, dw, db = self.launch_bwd_y(
            dp.rows(dy), dp.rows(dh), dp.rows(y), dp.vec(weight), dp.vec(bias), rstd, h_dtype
        )
        return dp.nd(dht, y.shape), dw, db

    # ---- the custom ops' implementations and autograd ------------------------------------------

    def _fwd_impl(self, x, weight, bias, residual, eps):
        y, h, mean, rstd = self.fwd(x, weight, bias, residual, eps)
        return y, dp.empty_if_none(h, x), mean, rstd

    def _fwd_y_impl(self, x, weight, bias, residual, eps):
        dp.refuse_small_gain(weight, bias, x.shape[-1])
        return self._fwd_impl(x, weight, bias, residual, eps)

    def _bwd_impl(self, dy, dh, hsaved, weight, mean, rstd, has_bias):
        dht, dw, db = self.bwd(dy, dh, hsaved, weight, mean, rstd, has_bias)
        return dht, dp.empty_if_none(dw, rstd), dp.empty_if_none(db, rstd)

    def _bwd_y_impl(self, dy, dh, y, weight, bias, rstd, h_dtype):
        dht, dw, db = self.bwd_y(dy, dh, y, weight, bias, rstd, h_dtype)
        return dht, dp.empty_if_none(dw, rstd), dp.empty_if_none(db, rstd)

    def _bwd_via_op(self, dy, dh, hsaved, weight, mean, rstd, has_bias):
        dht, dw, db = self.bwd_op(dy, dh, hsaved.detach(), dp.detach(weight), mean, rstd, has_bias)
        return dht, None if weight is None else dw, db if has_bias else None

    def _bwd_y_via_op(self, dy, dh, y, weight, bias, rstd, h_dtype):
        w, b = dp.detach(weight), dp.detach(bias)
        dht, dw, db = self.bwd_y_op(dy, dh, y.detach(), w, b, rstd, h_dtype)
        return dht, None if weight is None else dw, None if bias is None else db

    def _backward(self, ctx, dy, dh, _dmean, _drstd):
        return (*_grads(self._bwd_via_op, ctx, dy, dh), None)

    def _backward_y(self, ctx, dy, dh, _dmean, _drstd):
        return (*_grads_y(self._bwd_y_via_op, ctx, dy, dh), None)

    def eager_grads(self, ctx, dy, dh):
        """The gradients of the eager Function's ``apply`` arguments."""
        grads = _grads_y(self.bwd_y, ctx, dy, dh) if ctx.save_y else _grads(self.bwd, ctx, dy, dh)
        return (None, None, *grads, None)

    # ---- the Backend-contract function --------------------------------------------------------

    def layer_norm(self, x, weight, bias, eps, *, residual, memory_efficient=False):
        args = (x, weight, bias, residual, eps)
        if torch.compiler.is_compiling():
            y, h, _, _ = (self.fwd_y_op if memory_efficient else self.fwd_op)(*args)
        elif dp.needs_grad(x, weight, bias, residual):
            save_y = memory_efficient and dp.recompute_ok_cached(weight, bias, x.shape[-1])
            return LayerNormFn.apply(self, save_y, *args)
        else:
            y, h, _, _ = self.fwd(*args)
        return y if residual is None else (y, h)


def bind(backend: str, launch) -> LayerNormKernels:
    """Register ``normlab::<backend>_layer_norm_*`` over ``launch.ln_fwd``/``ln_bwd``/
    ``ln_bwd_y``; call once per backend, at import of its ``backend`` module."""
    return LayerNormKernels(backend, launch)
