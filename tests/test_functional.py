"""The public functional ops: validation, dispatch, and the contract every backend keeps."""

import functools
import subprocess
import sys

import pytest
import torch
from kernel_checks import make_inputs

import normlab
from normlab import functional as F
from normlab import reference as R
from normlab.testing import TOLERANCES, assert_kernel_close

# Every backend that can run here except "torch" (which implements only one cast order).
BACKENDS = [b for b in F.available_backends() if b != "torch"]
# the Triton interpreter: small shapes only (tests/kernels/test_triton_gpu.py has more)
SLOW = {"triton"}
DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def _check(op, backend, x, *args, **kw):
    """Compare ``op`` on ``backend`` with the reference at x's dtype and at float64."""
    got = getattr(normlab, op)(x, *args, backend=backend, **kw)
    want = getattr(R, op)(x, *args, **kw)
    d = lambda t: t.double() if isinstance(t, torch.Tensor) else t  # noqa: E731
    truth = getattr(R, op)(d(x), *[d(a) for a in args], **{k: d(v) for k, v in kw.items()})
    got, want, truth = [t if isinstance(t, tuple) else (t,) for t in (got, want, truth)]
    for i, (g, w, t) in enumerate(zip(got, want, truth, strict=True)):
        assert_kernel_close(g, w, t.to(w.dtype) if w.dtype == torch.float64 else t, f"{op}[{i}]")


SHAPES = [(1, 1), (3, 7), (5, 123, 123), (2, 3, 4, 4097)]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_backends_match_reference_on_odd_shapes(backend, shape, dtype):
    if backend in SLOW and shape[-1] * (len(shape) > 2) > 200:
        pytest.skip("too slow for the Triton interpreter")
    x, w, b, r = make_inputs(shape, dtype)
    _check("rms_norm", backend, x, w)
    _check("rms_norm", backend, x, w, residual=r, offset=1.0, casting="gemma")
    _check("layer_norm", backend, x, w, b)
    _check("layer_norm", backend, x, w, b, residual=r)


@pytest.mark.parametrize("backend", BACKENDS)
def test_non_contiguous_views_and_zero_rows(backend):
    x, w, b, r = make_inputs((6, 80), torch.float32)
    view = x[::2, ::2]  # stride(-1) == 2
    assert not view.is_contiguous()
    _check("rms_norm", backend, view, w[:40])
    _check("layer_norm", backend, x[:, :40], w[:40], b[:40])  # row stride 80 > N
    for shape in [(0, 16), (2, 0, 16)]:
        e = torch.empty(shape)
        assert normlab.rms_norm(e, torch.ones(16), backend=backend).shape == shape
        y, h = normlab.layer_norm(e, residual=torch.empty(shape), backend=backend)
        assert y.shape == h.shape == shape


@pytest.mark.parametrize("backend", BACKENDS)
def test_gradients_reach_every_input(backend):
    x, w, b, r = (t.requires_grad_() for t in make_inputs((4, 33), torch.float32))
    y, h = normlab.rms_norm(x, w, residual=r, backend=backend)
    (y.square().sum() + h.sum()).backward()
    ref = [t.detach().clone().requires_grad_() for t in (x, w, r)]
    yr, hr = R.rms_norm(ref[0], ref[1], residual=ref[2])
    (yr.square().sum() + hr.sum()).backward()
    for got, want in zip((x, w, r), ref, strict=True):
        torch.testing.assert_close(got.grad, want.grad, **TOLERANCES[torch.float32])
    for t in (x, w, b):
        t.grad = None
    normlab.layer_norm(x, w, b, backend=backend).pow(3).sum().backward()
    assert all(t.grad is not None and t.grad.isfinite().all() for t in (x, w, b))


@pytest.mark.parametrize("backend", BACKENDS + ["torch"])
def test_nan_and_inf_stay_in_their_row(backend):
    x, w, b, _ = make_inputs((4, 64), torch.float32)
    x[1, 3], x[2, 5] = float("nan"), float("inf")
    clean = x[[0, 3]]
    for op, args, kw in [
        ("rms_norm", (w,), {"casting": "gemma"}),
        ("layer_norm", (w, b), {}),
    ]:
        y = getattr(normlab, op)(x, *args, backend=backend, **kw)
        assert y[1].isnan().all() and not y[2].isfinite().all()
        expected = getattr(normlab, op)(clean, *args, backend=backend, **kw)
        torch.testing.assert_close(y[[0, 3]], expected, rtol=0, atol=0)


def test_auto_picks_a_kernel_backend_for_cpu_tensors_when_it_exists():
    x = torch.randn(3, 8)
    chosen = F._resolve("auto", x).name
    assert chosen == ("numba" if "numba" in F.available_backends() else "reference")


def test_torch_backend_is_pytorchs_own_op():
    x, w, _, _ = make_inputs((5, 32), torch.bfloat16)
    y = normlab.rms_norm(x, w, casting="gemma", backend="torch")
    assert torch.equal(y, torch.nn.functional.rms_norm(x, (32,), w, 1e-6))
    with pytest.raises(ValueError, match="casting"):
        normlab.rms_norm(x, w, casting="llama", backend="torch")


# --------------------------------------------------------------------------------------------
# bad input: the same errors whatever the backend

ERRORS = [
    (lambda nl, x, w: nl.rms_norm(x, torch.ones(5)), ValueError, "weight must have shape"),
    (lambda nl, x, w: nl.rms_norm(x, torch.ones(8, 1)), ValueError, "weight must have shape"),
    (lambda nl, x, w: nl.rms_norm(x.long(), w), TypeError, "x must be a floating-point"),
    (lambda nl, x, w: nl.rms_norm(x > 0, w), TypeError, "x must be a floating-point"),
    (lambda nl, x, w: nl.rms_norm(x.tolist(), w), TypeError, "x must be a torch.Tensor"),
    (lambda nl, x, w: nl.rms_norm(x[0, 0], w), ValueError, "non-empty last dimension"),
    (lambda nl, x, w: nl.rms_norm(x, w.to("meta")), ValueError, "weight is on meta"),
    (lambda nl, x, w: nl.rms_norm(x, w.int()), TypeError, "weight must be a floating-point"),
    (lambda nl, x, w: nl.rms_norm(x, w, residual=x[:1]), ValueError, "residual must have shape"),
    (lambda nl, x, w: nl.rms_norm(x, w, residual=x.to("meta")), ValueError, "residual is on"),
    (lambda nl, x, w: nl.rms_norm(x, w, casting="mistral"), ValueError, "casting must be one of"),
    (lambda nl, x, w: nl.rms_norm(x, w, eps=-1e-6), ValueError, "eps must be a finite number"),
    (lambda nl, x, w: nl.rms_norm(x, w, eps=float("nan")), ValueError, "eps must be a finite"),
    (lambda nl, x, w: nl.rms_norm(x, w, eps="1e-6"), TypeError, "eps must be a real number"),
    (lambda nl, x, w: nl.rms_norm(x, offset=1.0), ValueError, "offset=1.0 needs a weight"),
    (lambda nl, x, w: nl.rms_norm(x, w, eps_inside=1), TypeError, "eps_inside must be a bool"),
    (lambda nl, x, w: nl.layer_norm(x, w, torch.ones(3)), ValueError, "bias must have shape"),
    (lambda nl, x, w: nl.layer_norm(x, w, eps=-1.0), ValueError, "eps must be a finite"),
]


class _On:
    """``normlab``'s ops bound to one backend."""

    def __init__(self, backend):
        self.rms_norm = functools.partial(normlab.rms_norm, backend=backend)
        self.layer_norm = functools.partial(normlab.layer_norm, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS + ["torch"])
@pytest.mark.parametrize("call,exc,match", ERRORS, ids=[e[2] for e in ERRORS])
def test_bad_input_raises_a_clear_error(backend, call, exc, match):
    with pytest.raises(exc, match=match):
        call(_On(backend), torch.randn(4, 8), torch.ones(8))


def test_unknown_backend_is_rejected_with_the_choices():
    with pytest.raises(ValueError, match="backend must be one of"):
        normlab.rms_norm(torch.randn(2, 4), backend="cuda")


def test_n_equal_one_normalizes_to_sign_and_zero():
    x = torch.tensor([[3.0], [-2.0], [0.0]])
    torch.testing.assert_close(normlab.rms_norm(x, eps=0.0)[:2], torch.tensor([[1.0], [-1.0]]))
    assert torch.equal(normlab.layer_norm(x), torch.zeros_like(x))


@pytest.mark.slow
def test_first_call_can_be_under_torch_compile():
    """``import normlab`` registers the backends "auto" picks, so dynamo never traces an import."""
    code = (
        "import torch, normlab\n"
        "f = torch.compile(lambda x, w: normlab.rms_norm(x, w), fullgraph=True)\n"
        "x, w = torch.randn(4, 8), torch.rand(8)\n"
        "torch.testing.assert_close(f(x, w), normlab.rms_norm(x, w, backend='reference'))\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)


@pytest.mark.parametrize("backend", BACKENDS)
def test_casting_none_is_the_naive_half_precision_code(backend):
    """ "none" squares in fp16 (400² > 65504): the output vanishes, as the articles' code does."""
    x = torch.full((2, 64), 400.0, dtype=torch.float16)
    assert normlab.rms_norm(x, casting="none", backend=backend).eq(0).all()
    assert normlab.rms_norm(x, casting="llama", backend=backend).eq(1).all()
