"""Inputs and gradient plumbing shared by the tests that compare a backend with the reference."""

import torch

import normlab
from normlab import reference as R
from normlab.testing import (
    RECOMPUTE_BOUND,
    TOLERANCES,
    assert_kernel_close,
    max_abs_error,
    recompute_tolerances,
)


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


def run_three_ways(op, backend, x, kw, *, grad=True, seed=1, device="cpu", cot_scale=1.0):
    """``op`` on ``backend``, the reference at x's dtype and the reference at float64.

    ``kw`` holds the tensor arguments (weight, bias, residual) and the options. Without ``grad``
    the forwards are compared here (``check_forward``) and ``None`` is returned; with it,
    ``(cotangents, kernel, reference, float64 reference)``, each of the last three the
    ``(outputs, gradients)`` of :func:`fwd_bwd`, left for the caller's comparison rules. The
    cotangents are standard normal times ``cot_scale``.
    """
    kw = dict(kw)
    tensors = {"x": x, **{k: kw.pop(k) for k in ("weight", "bias", "residual") if k in kw}}
    me = kw.pop("memory_efficient", False)

    def kernel(**a):
        return getattr(normlab, op)(backend=backend, memory_efficient=me, **a)

    ref = getattr(R, op)
    if not grad:
        check_forward(kernel, ref, tensors, kw, op)
        return None
    g = torch.Generator().manual_seed(seed)
    cots = [(cot_scale * torch.randn(x.shape, generator=g)).to(device) for _ in range(2)]
    return (
        cots,
        fwd_bwd(kernel, tensors, kw, cots),
        fwd_bwd(ref, tensors, kw, cots),
        fwd_bwd(ref, tensors, kw, cots, dtype=torch.float64),
    )


def rounded_xhat_dweight(x, kw, dy):
    """The exact dweight of the llama cast order, ``sum(dy * q(xhat))``: a float64 forward has no
    rounding ``q`` of ``xhat`` to the input dtype, so its dweight is not this function's."""
    r = kw.get("residual")
    h = x if r is None else R.residual_add(x, r)
    eps = kw.get("eps", 1e-6)
    xq = R.rms_norm(h, None, eps, casting="llama", eps_inside=kw.get("eps_inside", True))
    return (dy.double() * xq.double()).reshape(-1, x.shape[-1]).sum(0)


def assert_error_bound(actual, eager, truth, name):
    """Only the "2x eager error + atol" bound against the float64 truth (no closeness to eager):
    for the naive all-half code, which the kernels compute more accurately than eager does."""
    err, eager_err = max_abs_error(actual, truth), max_abs_error(eager, truth)
    atol = TOLERANCES[actual.dtype]["atol"]
    assert err <= 2 * eager_err + atol, f"{name}: error {err:.3e} > 2 x {eager_err:.3e} + {atol}"


def grad_tolerances(memory_efficient: bool, y_dtype: torch.dtype) -> dict:
    """The keyword arguments of the gradient checks for the mode (normlab.testing's rows);
    ``y_dtype`` is the dtype of the output the memory-efficient backward recomputes from."""
    if memory_efficient:
        return {"tolerances": recompute_tolerances(y_dtype), "bound": RECOMPUTE_BOUND}
    return {"tolerances": TOLERANCES, "bound": 2.0}


def assert_grad_close(actual, expected, truth, name, *, tolerances=TOLERANCES, bound=2.0):
    """The tolerance table and the 2x-eager bound, with eager's own error as extra slack.

    Eager half-precision backward rounds intermediate gradients (``dy * w`` in bf16 for the
    llama cast order) before a cancelling sum, so near zero it can be further from the truth than
    the tolerance; each element of the FP32 kernel may differ from eager by the tolerance plus
    eager's error there, and the kernel's max error must stay within 2x eager's + atol.
    """
    tol = tolerances[actual.dtype]
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, name
    a, e, t = actual.double(), expected.double(), truth.double()
    limit = tol["atol"] + tol["rtol"] * e.abs() + (e - t).abs()
    worst = ((a - e).abs() - limit).nan_to_num(nan=float("inf")).max() if a.numel() else 0.0
    assert worst <= 0, f"{name}: kernel differs from eager by more than tolerance + eager error"
    k_err, e_err = max_abs_error(actual, truth), max_abs_error(expected, truth)
    assert k_err <= bound * e_err + tol["atol"], (
        f"{name}: kernel error {k_err:.3e} vs eager {e_err:.3e}"
    )
