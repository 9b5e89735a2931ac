"""DyT and ScaleNorm as public ops: the reference's formula, the functional layer's validation and
dispatch, every float dtype against a float64 truth, gradients, torch.compile, and the modules.

No kernel computes either, so the bound's "eager" is the naive code in the input's dtype (the
papers' ``weight * tanh(alpha * x) + bias`` and ``g * x / ||x||``): the reference, with its FP32
math for half inputs, must be no less accurate than that.
"""

import math

import pytest
import torch
from kernel_checks import assert_error_bound, make_inputs

import normlab
from normlab import functional as F
from normlab import reference as R
from normlab.testing import TOLERANCES

FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
N = 64


def inputs(dtype, shape=(3, 5, N), seed=0):
    """``{x, alpha, weight, bias, residual, g}`` of ``dtype``; g is ScaleNorm's sqrt(N) init."""
    x, w, b, r = make_inputs(shape, dtype, seed=seed)
    alpha = torch.tensor([0.7], dtype=dtype)
    g = torch.tensor([math.sqrt(shape[-1])], dtype=dtype)
    return {"x": x, "alpha": alpha, "weight": w, "bias": b, "residual": r, "g": g}


def naive_dyt(x, alpha, weight, bias):
    return weight * torch.tanh(alpha * x) + bias


def naive_scale_norm(x, g, eps=1e-5):
    return g * x / torch.linalg.vector_norm(x, dim=-1, keepdim=True).clamp_min(eps)


# Each op three ways: (normlab call, reference, naive code), on the tensors named by ``args``.
OPS = {
    "dyt": (normlab.dyt, R.dyt, naive_dyt, ("x", "alpha", "weight", "bias")),
    "scale_norm": (normlab.scale_norm, R.scale_norm, naive_scale_norm, ("x", "g")),
}


def test_reference_formulas_in_float64():
    t = inputs(torch.float64)
    x, a, w, b, g = (t[k] for k in ("x", "alpha", "weight", "bias", "g"))
    torch.testing.assert_close(R.dyt(x, a, w, b), w * torch.tanh(a * x) + b)
    torch.testing.assert_close(R.dyt(x, a), torch.tanh(a * x))
    norm = x.pow(2).sum(-1, keepdim=True).sqrt()
    torch.testing.assert_close(R.scale_norm(x, g), g * x / norm)
    torch.testing.assert_close(R.scale_norm(x), x / norm)
    zero = torch.zeros(2, N, dtype=torch.float64)
    assert R.scale_norm(zero, g).eq(0).all()  # eps keeps an all-zero row finite


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_forward_and_backward_against_float64_truth(op, dtype):
    call, ref, naive, names = OPS[op]
    t = inputs(dtype)
    args = [t[k] for k in names]
    for backend in ("auto", "reference"):
        y = call(*args, backend=backend)
        assert y.dtype == dtype and y.shape == t["x"].shape
        assert torch.equal(y, ref(*args)), backend

    # one cotangent, rounded to the input dtype: the truth differentiates the same loss
    cot = torch.randn(t["x"].shape, generator=torch.Generator().manual_seed(1)).to(dtype)

    def fwd_bwd(fn, dt):
        leaves = [a.detach().to(dt).requires_grad_() for a in args]
        out = fn(*leaves)
        return [out.detach(), *torch.autograd.grad(out, leaves, cot.to(dt))]

    got, eager, truth = fwd_bwd(ref, dtype), fwd_bwd(naive, dtype), fwd_bwd(ref, torch.float64)
    if dtype == torch.float64:
        for a, e in zip(got, eager, strict=True):
            torch.testing.assert_close(a, e, **TOLERANCES[dtype])
        return
    for name, a, e, tr in zip(["y", *names], got, eager, truth, strict=True):
        assert_error_bound(a, e, tr, f"{op} d{name}" if name != "y" else f"{op} y")
    torch.testing.assert_close(got[0], truth[0].to(dtype), **TOLERANCES[dtype])


@pytest.mark.parametrize("op", OPS)
def test_gradcheck_in_float64(op):
    call, _, _, names = OPS[op]
    t = inputs(torch.float64, shape=(3, 6), seed=2)
    leaves = [t[k].detach().requires_grad_() for k in (*names, "residual")]

    def fn(*a):
        return call(*a[:-1], residual=a[-1])

    assert torch.autograd.gradcheck(fn, leaves)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_residual_returns_the_sum_and_the_norm_of_it(op, dtype):
    call, ref, _, names = OPS[op]
    t = inputs(dtype)
    args = [t[k] for k in names]
    y, h = call(*args, residual=t["residual"])
    assert torch.equal(h, R.residual_add(t["x"], t["residual"]))
    assert torch.equal(y, call(h, *args[1:]))
    assert torch.equal(y, ref(*args, residual=t["residual"])[0])


def test_scalars_may_be_zero_dim_and_params_optional():
    t = inputs(torch.float32)
    x, a, g = t["x"], t["alpha"], t["g"]
    assert torch.equal(normlab.dyt(x, a.reshape(())), normlab.dyt(x, a))
    assert torch.equal(normlab.scale_norm(x, g.reshape(())), normlab.scale_norm(x, g))
    assert torch.equal(normlab.scale_norm(x), R.scale_norm(x))
    assert normlab.functional.dyt is normlab.dyt
    assert normlab.functional.scale_norm is normlab.scale_norm


def test_ops_compile_with_fullgraph():
    t = inputs(torch.float32)

    def both(x, alpha, weight, bias, g, residual):
        y, h = normlab.dyt(x, alpha, weight, bias, residual=residual)
        return normlab.scale_norm(y, g) + h

    args = [t[k] for k in ("x", "alpha", "weight", "bias", "g", "residual")]
    torch._dynamo.reset()
    compiled = torch.compile(both, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(*args), both(*args), **TOLERANCES[torch.float32])
    modules = torch.nn.Sequential(normlab.DyT(N), normlab.ScaleNorm(N))
    compiled = torch.compile(modules, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(t["x"]), modules(t["x"]), **TOLERANCES[torch.float32])


# --------------------------------------------------------------------------------------------
# bad input: errors name the argument

_W = torch.ones(N)
ERRORS = [
    (lambda x, a: normlab.dyt(x.tolist(), a), TypeError, "x must be a torch.Tensor"),
    (lambda x, a: normlab.dyt(x.long(), a), TypeError, "x must be a floating-point"),
    (lambda x, a: normlab.dyt(x[0, 0, 0], a), ValueError, "x must have a non-empty"),
    (lambda x, a: normlab.dyt(x, None), TypeError, "alpha must be a torch.Tensor"),
    (lambda x, a: normlab.dyt(x, 0.5), TypeError, "alpha must be a torch.Tensor"),
    (lambda x, a: normlab.dyt(x, torch.ones(2)), ValueError, "alpha must have shape"),
    (lambda x, a: normlab.dyt(x, a.int()), TypeError, "alpha must be a floating-point"),
    (lambda x, a: normlab.dyt(x, a.to("meta")), ValueError, "alpha is on meta"),
    (lambda x, a: normlab.dyt(x, a, torch.ones(3)), ValueError, "weight must have shape"),
    (lambda x, a: normlab.dyt(x, a, _W, torch.ones(3)), ValueError, "bias must have shape"),
    (lambda x, a: normlab.dyt(x, a, residual=x[:1]), ValueError, "residual must have shape"),
    (lambda x, a: normlab.dyt(x, a, backend="cuda"), ValueError, "backend must be one of"),
    (lambda x, a: normlab.scale_norm(x.bool()), TypeError, "x must be a floating-point"),
    (lambda x, a: normlab.scale_norm(x, torch.ones(N)), ValueError, "weight must have shape"),
    (lambda x, a: normlab.scale_norm(x, "2"), TypeError, "weight must be a torch.Tensor"),
    (lambda x, a: normlab.scale_norm(x, eps=-1.0), ValueError, "eps must be a finite"),
    (lambda x, a: normlab.scale_norm(x, eps=None), TypeError, "eps must be a real number"),
    (lambda x, a: normlab.scale_norm(x, residual=x.half()[:, :1]), ValueError, "residual must"),
    (lambda x, a: normlab.scale_norm(x, backend="gpu"), ValueError, "backend must be one of"),
]


@pytest.mark.parametrize("call,exc,match", ERRORS, ids=[e[2] for e in ERRORS])
def test_bad_input_raises_a_clear_error(call, exc, match):
    t = inputs(torch.float32)
    with pytest.raises(exc, match=match):
        call(t["x"], t["alpha"])


@pytest.mark.parametrize("backend", ["numba", "triton", "torch"])
@pytest.mark.parametrize("op", OPS)
def test_a_named_backend_without_the_op_is_a_value_error(op, backend):
    call, _, _, names = OPS[op]
    t = inputs(torch.float32)
    with pytest.raises(ValueError, match=f"backend='{backend}' has no {op}.*'auto' or 'reference'"):
        call(*[t[k] for k in names], backend=backend)
    module = (normlab.DyT if op == "dyt" else normlab.ScaleNorm)(N, backend=backend)
    with pytest.raises(ValueError, match=f"has no {op}"):
        module(t["x"])


# --------------------------------------------------------------------------------------------
# the modules: one call to the op on their parameters


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_modules_forward_is_the_functional_op(dtype):
    t = inputs(dtype, shape=(2, 3, 4, 8))
    x, r = t["x"], t["residual"]
    dyt = normlab.DyT((4, 8), alpha_init=0.3, dtype=dtype)
    torch.nn.init.normal_(dyt.weight)
    torch.nn.init.normal_(dyt.bias)
    want = normlab.dyt(x.flatten(-2), dyt.alpha, dyt.weight.flatten(), dyt.bias.flatten())
    assert torch.equal(dyt(x), want.reshape(x.shape))
    sn = normlab.ScaleNorm(8, dtype=dtype)
    assert torch.equal(sn(x), normlab.scale_norm(x, sn.weight))
    y, h = sn(x, r)
    assert torch.equal(h, R.residual_add(x, r)) and torch.equal(y, sn(h))
    assert list(dyt.state_dict()) == ["alpha", "weight", "bias"]
    assert list(sn.state_dict()) == ["weight"]


def test_backend_lists_are_known_names():
    # the functional layer's reference-only list uses names the registry knows
    assert set(F._REFERENCE_ONLY) <= set(F.registry.names())
