"""The reference ops against torch.nn and against HF's cast orders written out by hand."""

import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from normlab import reference as R
from normlab.testing import TOLERANCES

HALF = (torch.float16, torch.bfloat16)


def hf_llama_rms_norm(x, w, eps):
    """transformers' LlamaRMSNorm.forward, written out."""
    input_dtype = x.dtype
    h = x.to(torch.float32)
    variance = h.pow(2).mean(-1, keepdim=True)
    h = h * torch.rsqrt(variance + eps)
    return w * h.to(input_dtype)


def hf_gemma_rms_norm(x, w, eps):
    """transformers' GemmaRMSNorm.forward (weight stored as w, applied as 1 + w), written out."""
    out = x.float()
    out = out * torch.rsqrt(out.pow(2).mean(-1, keepdim=True) + eps)
    out = out * (1.0 + w.float())
    return out.type_as(x)


@pytest.mark.parametrize("dtype", [torch.float32, *HALF])
def test_llama_and_gemma_cast_orders_are_bit_exact(dtype):
    torch.manual_seed(0)
    x = torch.randn(17, 96, dtype=dtype) * 4
    w = torch.randn(96, dtype=dtype)
    assert torch.equal(R.rms_norm(x, w, 1e-6, casting="llama"), hf_llama_rms_norm(x, w, 1e-6))
    got = R.rms_norm(x, w, 1e-6, offset=1.0, casting="gemma")
    assert torch.equal(got, hf_gemma_rms_norm(x, w, 1e-6))


def test_llama_keeps_torch_type_promotion_for_fp32_weights():
    x = torch.randn(4, 8, dtype=torch.bfloat16)
    w = torch.rand(8)
    y = R.rms_norm(x, w, casting="llama")
    assert y.dtype == torch.float32
    assert torch.equal(y, hf_llama_rms_norm(x, w, 1e-6))
    assert R.rms_norm(x, w, casting="gemma").dtype == torch.bfloat16


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, *HALF])
def test_rms_norm_matches_torch_nn(dtype):
    torch.manual_seed(1)
    m = torch.nn.RMSNorm(64, eps=1e-6, dtype=dtype)
    torch.nn.init.normal_(m.weight)
    x = torch.randn(3, 5, 64, dtype=dtype)
    # torch's composite rms_norm is the gemma order (scale in FP32, one rounding at the end)
    torch.testing.assert_close(
        R.rms_norm(x, m.weight, 1e-6, casting="gemma"), m(x), **TOLERANCES[dtype]
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, *HALF])
def test_layer_norm_matches_torch_nn(dtype):
    torch.manual_seed(2)
    m = torch.nn.LayerNorm(48, dtype=dtype)
    torch.nn.init.normal_(m.weight)
    torch.nn.init.normal_(m.bias)
    x = torch.randn(2, 7, 48, dtype=dtype) * 3 + 5
    torch.testing.assert_close(R.layer_norm(x, m.weight, m.bias, 1e-5), m(x), **TOLERANCES[dtype])


def test_eps_outside_the_root_follows_the_rmsnorm_paper():
    x = torch.randn(5, 32, dtype=torch.float64)
    rms = x.pow(2).mean(-1, keepdim=True).sqrt()
    torch.testing.assert_close(R.rms_norm(x, eps=1e-2, eps_inside=False), x / (rms + 1e-2))
    torch.testing.assert_close(R.rms_norm(x, eps=1e-2), x / (rms.pow(2) + 1e-2).sqrt())


@pytest.mark.parametrize("casting", R.CASTINGS)
def test_residual_returns_norm_of_the_sum_and_the_sum(casting):
    x = torch.randn(6, 40, dtype=torch.bfloat16)
    r = torch.randn(6, 40, dtype=torch.float32)
    w = torch.randn(40, dtype=torch.bfloat16)
    y, h = R.rms_norm(x, w, residual=r, casting=casting)
    assert h.dtype == torch.float32
    torch.testing.assert_close(h, x.float() + r, rtol=0, atol=0)
    assert torch.equal(y, R.rms_norm(h, w, casting=casting))
    y, h2 = R.layer_norm(x, w, w, residual=r)
    assert torch.equal(h2, h) and torch.equal(y, R.layer_norm(h, w, w))


def test_residual_of_equal_dtypes_rounds_like_eager_add():
    x, r = torch.randn(2, 3, 64, dtype=torch.bfloat16).unbind(0)
    assert torch.equal(R.residual_add(x, r), x + r)


def test_fp32_statistics_do_not_overflow_in_fp16():
    x = torch.full((2, 256), 400.0, dtype=torch.float16)  # x² = 160000 > fp16 max 65504
    # the naive order squares in fp16: mean(x²) = inf, rstd = 0, and the output silently vanishes
    assert (R.rms_norm(x, casting="none") == 0).all()
    for casting in ("llama", "gemma"):
        torch.testing.assert_close(R.rms_norm(x, casting=casting), torch.ones_like(x))
    x = torch.linspace(-300, 300, 256, dtype=torch.float16).expand(2, 256)
    truth = R.layer_norm(x.double()).half()
    torch.testing.assert_close(R.layer_norm(x), truth, **TOLERANCES[torch.float16])


OPTIONS = list(itertools.product(R.CASTINGS, (0.0, 1.0), (True, False), (False, True)))


@pytest.mark.parametrize("casting,offset,eps_inside,with_residual", OPTIONS)
def test_rms_norm_gradcheck(casting, offset, eps_inside, with_residual):
    torch.manual_seed(3)
    x = torch.randn(3, 7, dtype=torch.float64, requires_grad=True)
    w = torch.randn(7, dtype=torch.float64, requires_grad=True)
    r = torch.randn(3, 7, dtype=torch.float64, requires_grad=True)

    def f(x, w, r):
        out = R.rms_norm(
            x, w, 1e-3, residual=r if with_residual else None, offset=offset,
            casting=casting, eps_inside=eps_inside,
        )  # fmt: skip
        return out if with_residual else (out,)

    assert torch.autograd.gradcheck(f, (x, w, r))


@pytest.mark.parametrize(
    "affine,bias,with_residual", list(itertools.product((True, False), repeat=3))
)
def test_layer_norm_gradcheck(affine, bias, with_residual):
    torch.manual_seed(4)
    x = torch.randn(3, 7, dtype=torch.float64, requires_grad=True)
    w = torch.randn(7, dtype=torch.float64, requires_grad=True)
    b = torch.randn(7, dtype=torch.float64, requires_grad=True)
    r = torch.randn(3, 7, dtype=torch.float64, requires_grad=True)

    def f(x, w, b, r):
        out = R.layer_norm(
            x, w if affine else None, b if bias else None, 1e-3,
            residual=r if with_residual else None,
        )  # fmt: skip
        return out if with_residual else (out,)

    assert torch.autograd.gradcheck(f, (x, w, b, r))


rows = st.lists(
    st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False), min_size=2, max_size=40
).filter(lambda v: max(abs(a) for a in v) > 1e-2)


@settings(max_examples=60, deadline=None)
@given(rows, st.floats(1e-3, 1e3))
def test_rms_norm_is_invariant_to_positive_scaling(row, scale):
    x = torch.tensor(row, dtype=torch.float64)
    torch.testing.assert_close(R.rms_norm(x * scale, eps=0.0), R.rms_norm(x, eps=0.0))


@settings(max_examples=60, deadline=None)
@given(rows, st.floats(-1e3, 1e3))
def test_layer_norm_is_invariant_to_adding_a_constant(row, shift):
    x = torch.tensor(row, dtype=torch.float64)
    if (x - x.mean()).abs().max() < 1e-3:
        return  # a constant row: both sides are 0/0 territory
    torch.testing.assert_close(
        R.layer_norm(x + shift, eps=0.0), R.layer_norm(x, eps=0.0), atol=1e-7, rtol=1e-7
    )


@settings(max_examples=60, deadline=None)
@given(rows, st.floats(1e-8, 1e-2))
def test_rms_norm_equals_layer_norm_on_zero_mean_rows(row, eps):
    x = torch.tensor(row, dtype=torch.float64)
    x = x - x.mean()
    torch.testing.assert_close(R.rms_norm(x, eps=eps), R.layer_norm(x, eps=eps))
