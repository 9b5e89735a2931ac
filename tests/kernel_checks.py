"""Inputs and gradient plumbing shared by the tests that compare a backend with the reference."""

import torch

import normlab
from normlab import reference as R
from normlab.testing import assert_kernel_close


def make_inputs(shape, dtype, wdtype=None, seed=0, device="cpu"):
    """``(x, weight, bias, residual)`` of ``shape``: x has a non-zero mean, weight is near 1."""
    g = torch.Generator().manual_seed(seed)
    n = shape[-1]
    x = (torch.randn(shape, generator=g) * 2 + 0.5).to(dtype)
    w = (1 + 0.2 * torch.randn(n, generator=g)).to(wdtype or dtype)
    b = (0.1 * torch.randn(n, generator=g)).to(wdtype or dtype)
    r = torch.randn(shape, generator=g).to(dtype)
    return tuple(t.to(device) for t in (x, w, b, r))


def fwd_bwd(fn, tensors: dict, kw: dict, cots, dtype=None):
    """Outputs of ``fn`` and the gradients of ``sum(out_i * cot_i)`` w.r.t. every tensor input."""
    leaves = {
        k: (v if dtype is None else v.to(dtype)).detach().requires_grad_(True)
        for k, v in tensors.items()
        if v is not None
    }
    out = fn(**leaves, **kw)
    out = out if isinstance(out, tuple) else (out,)
    gouts = [c.to(o.dtype) for o, c in zip(out, cots, strict=False)]
    grads = torch.autograd.grad(out, list(leaves.values()), gouts)
    return [o.detach() for o in out], dict(zip(leaves, grads, strict=True))


def check_forward(kernel, ref, tensors: dict, kw: dict, name: str) -> None:
    """``kernel``'s outputs against ``ref`` at the inputs' dtype and at float64, without grad."""
    with torch.no_grad():
        got = kernel(**tensors, **kw)
        want = ref(**tensors, **kw)
        truth = ref(**{k: v.double() for k, v in tensors.items() if v is not None}, **kw)
    got, want, truth = [t if isinstance(t, tuple) else (t,) for t in (got, want, truth)]
    for i, (a, e, t) in enumerate(zip(got, want, truth, strict=True)):
        assert_kernel_close(a, e, t, f"{name} out[{i}]")


def run_three_ways(op, backend, x, kw, *, grad=True, seed=1, device="cpu"):
    """``op`` on ``backend``, the reference at x's dtype and the reference at float64.

    ``kw`` holds the tensor arguments (weight, bias, residual) and the options. Without ``grad``
    the forwards are compared here (``check_forward``) and ``None`` is returned; with it,
    ``(cotangents, kernel, reference, float64 reference)``, each of the last three the
    ``(outputs, gradients)`` of :func:`fwd_bwd`, left for the caller's comparison rules.
    """
    kw = dict(kw)
    tensors = {"x": x, **{k: kw.pop(k) for k in ("weight", "bias", "residual") if k in kw}}
    kernel = lambda **a: getattr(normlab, op)(backend=backend, **a)  # noqa: E731
    ref = getattr(R, op)
    if not grad:
        check_forward(kernel, ref, tensors, kw, op)
        return None
    g = torch.Generator().manual_seed(seed)
    cots = [torch.randn(x.shape, generator=g).to(device) for _ in range(2)]
    return (
        cots,
        fwd_bwd(kernel, tensors, kw, cots),
        fwd_bwd(ref, tensors, kw, cots),
        fwd_bwd(ref, tensors, kw, cots, dtype=torch.float64),
    )
