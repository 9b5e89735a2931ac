"""The nn.Modules: drop-in behaviour and state_dicts against torch.nn, BatchNorm's statistics."""

import math

import pytest
import torch
from kernel_checks import assert_error_bound
from torch import nn

import normlab
from normlab.testing import TOLERANCES

TOL = TOLERANCES[torch.float32]


@pytest.mark.parametrize("shape", [16, (4, 8)], ids=str)
@pytest.mark.parametrize("affine", [True, False])
def test_rmsnorm_is_a_drop_in_for_torch(shape, affine):
    theirs = nn.RMSNorm(shape, eps=1e-6, elementwise_affine=affine)
    ours = normlab.RMSNorm(shape, eps=1e-6, elementwise_affine=affine, casting="gemma")
    if affine:
        nn.init.normal_(theirs.weight)
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(3, 5, 4, 8) if shape != 16 else torch.randn(3, 5, 16)
    torch.testing.assert_close(ours(x), theirs(x), **TOL)
    theirs.load_state_dict(normlab.RMSNorm(shape, elementwise_affine=affine).state_dict())
    assert list(ours.state_dict()) == list(theirs.state_dict())


FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_rmsnorm_eps_none_is_torchs_eps_of_the_compute_dtype(dtype):
    # torch's kernels take the eps of the type they compute in: FP32's for half inputs. The
    # half dtype's own (2**-7 in bfloat16) dwarfs mean(x²) = 1e-6 and scaled y down ~90x.
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(6, 64, generator=g) * 1e-3).to(dtype)
    theirs = nn.RMSNorm(64, eps=None, dtype=dtype)
    nn.init.normal_(theirs.weight, 1.0, 0.2)
    want = theirs(x).detach()
    ours = normlab.RMSNorm(64, eps=None, casting="gemma", dtype=dtype)
    ours.load_state_dict(theirs.state_dict())
    torch.testing.assert_close(ours(x).detach(), want, **TOLERANCES[dtype])
    w = theirs.weight.detach()
    assert torch.equal(normlab.rms_norm(x, w, None, casting="gemma", backend="reference"), want)
    for backend in ("auto", "torch"):
        got = normlab.rms_norm(x, w, eps=None, casting="gemma", backend=backend)
        torch.testing.assert_close(got, want, **TOLERANCES[dtype], msg=backend)
    # with a residual, eps follows h's dtype, which is the residual's
    zero = torch.zeros_like(x, dtype=torch.float32)
    y, _ = normlab.rms_norm(zero, w, None, residual=x, casting="gemma")
    torch.testing.assert_close(y, want, **TOLERANCES[dtype])


@pytest.mark.parametrize("shape", [16, (4, 8)], ids=str)
@pytest.mark.parametrize("affine,bias", [(True, True), (True, False), (False, True)])
def test_layernorm_is_a_drop_in_for_torch(shape, affine, bias):
    theirs = nn.LayerNorm(shape, elementwise_affine=affine, bias=bias)
    ours = normlab.LayerNorm(shape, elementwise_affine=affine, bias=bias)
    for p in theirs.parameters():
        nn.init.normal_(p)
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(2, 3, 4, 8) * 3 + 1 if shape != 16 else torch.randn(2, 3, 16) * 3 + 1
    torch.testing.assert_close(ours(x), theirs(x), **TOL)
    theirs.load_state_dict(ours.state_dict())
    x.requires_grad_()
    g_ours = torch.autograd.grad(ours(x).pow(2).sum(), x)[0]
    g_theirs = torch.autograd.grad(theirs(x).pow(2).sum(), x)[0]
    torch.testing.assert_close(g_ours, g_theirs, rtol=1e-4, atol=1e-4)


def test_gemma_style_rmsnorm_starts_as_identity_gain():
    m = normlab.RMSNorm(8, offset=1.0, casting="gemma")
    assert torch.equal(m.weight, torch.zeros(8))
    x = torch.randn(3, 8)
    torch.testing.assert_close(m(x), normlab.RMSNorm(8)(x))


def test_modules_take_a_residual_and_return_the_sum():
    x, r = torch.randn(2, 3, 4, 8).unbind(0)
    for m in [
        normlab.RMSNorm((4, 8)),
        normlab.LayerNorm(8),
        normlab.DyT(8),
        normlab.ScaleNorm(8),
        normlab.BatchNorm(8),
    ]:
        y, h = m(x, r)
        torch.testing.assert_close(h, x + r)
        torch.testing.assert_close(y, m(x + r), msg=type(m).__name__)


def test_module_rejects_input_of_the_wrong_shape():
    with pytest.raises(ValueError, match="normalized_shape"):
        normlab.RMSNorm((4, 8))(torch.randn(3, 8, 4))
    with pytest.raises(ValueError, match="normalized_shape"):
        normlab.LayerNorm(0)


def test_dyt_formula_and_parameters():
    m = normlab.DyT(6, alpha_init=0.7)
    assert m.alpha.shape == (1,) and m.alpha.item() == pytest.approx(0.7)
    nn.init.normal_(m.weight)
    nn.init.normal_(m.bias)
    x = torch.randn(5, 6)
    torch.testing.assert_close(m(x), m.weight * torch.tanh(m.alpha * x) + m.bias)
    m(x).sum().backward()
    assert m.alpha.grad is not None and m.alpha.grad.shape == (1,)
    assert normlab.DyT(6)(x.bfloat16()).dtype == torch.bfloat16


def test_scalenorm_formula_and_init():
    m = normlab.ScaleNorm(16)
    assert m.weight.item() == pytest.approx(4.0)
    x = torch.randn(3, 16)
    torch.testing.assert_close(m(x), 4.0 * x / x.norm(dim=-1, keepdim=True))
    assert m(torch.zeros(2, 16)).eq(0).all()  # eps keeps a zero row finite


# --------------------------------------------------------------------------------------------
# BatchNorm


def _pair(c=8, momentum=0.1):
    torch.manual_seed(0)
    theirs = nn.BatchNorm1d(c, momentum=momentum)
    nn.init.normal_(theirs.weight)
    nn.init.normal_(theirs.bias)
    ours = normlab.BatchNorm(c, momentum=momentum)
    ours.load_state_dict(theirs.state_dict())
    return ours, theirs


@pytest.mark.parametrize("momentum", [0.1, None])
def test_batchnorm_matches_batchnorm1d_in_train_and_eval(momentum):
    ours, theirs = _pair(momentum=momentum)
    for step in range(3):
        x = torch.randn(4, 10, 8) * (step + 1) + 5  # (B, T, C)
        torch.testing.assert_close(ours(x), theirs(x.transpose(1, 2)).transpose(1, 2), **TOL)
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        torch.testing.assert_close(getattr(ours, name), getattr(theirs, name), **TOL)
    ours.eval(), theirs.eval()
    x = torch.randn(2, 5, 8)
    torch.testing.assert_close(ours(x), theirs(x.transpose(1, 2)).transpose(1, 2), **TOL)
    theirs.load_state_dict(ours.state_dict())  # and back


def test_batchnorm_mask_keeps_padding_out_of_the_statistics():
    ours, theirs = _pair()
    x = torch.randn(3, 7, 8) + 2
    mask = torch.ones(3, 7, dtype=torch.bool)
    mask[0, 4:], mask[2, 1:] = False, False
    poisoned = x.masked_fill(~mask.unsqueeze(-1), 1e4)  # padding must not matter
    y = ours(poisoned, mask=mask)
    expected = theirs(x[mask])  # BatchNorm1d over the real tokens only, (tokens, C)
    torch.testing.assert_close(y[mask], expected, **TOL)
    torch.testing.assert_close(ours.running_mean, theirs.running_mean, **TOL)
    torch.testing.assert_close(ours.running_var, theirs.running_var, **TOL)


def test_batchnorm_gradients_match_batchnorm1d():
    ours, theirs = _pair()
    x = torch.randn(4, 6, 8, requires_grad=True)
    g1 = torch.autograd.grad(ours(x).pow(3).sum(), [x, ours.weight, ours.bias])
    g2 = torch.autograd.grad(
        theirs(x.transpose(1, 2)).transpose(1, 2).pow(3).sum(), [x, theirs.weight, theirs.bias]
    )
    for a, b in zip(g1, g2, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def test_batchnorm_is_stable_for_a_large_mean():
    bn = normlab.BatchNorm(4)
    bn.running_mean.fill_(1e4)  # the shift keeps E[x²] - E[x]² from cancelling
    x = 1e4 + torch.randn(64, 4, dtype=torch.float32)
    bn(x)
    torch.testing.assert_close(bn.running_var, 0.9 + 0.1 * x.var(0), rtol=1e-3, atol=1e-3)


def _bn_truth(x, w, b, *, eps=1e-5):
    """``F.batch_norm`` in training mode over the rows of ``x`` (tokens, C), its weight and bias
    in the dtype of ``x``: float64 for the truth, float32 for torch's own error."""
    return nn.functional.batch_norm(x, None, None, w.to(x.dtype), b.to(x.dtype), True, 0.0, eps)


@pytest.mark.parametrize("offset", [100.0, 1e3, 3e3, 1e4], ids=lambda o: f"offset={o:g}")
@pytest.mark.parametrize("case", ["fresh", "stale", "masked"])
def test_batchnorm_training_statistics_are_accurate_at_any_offset(offset, case):
    # E[x²] - E[x]² around a shift far from the batch mean (0 on a fresh module) lost every
    # digit: an error of 1e3 at offset 3e3. FP32 torch's own error sets the bound.
    ours, theirs = _pair()
    g = torch.Generator().manual_seed(int(offset))
    x = offset + torch.randn(4, 64, 8, generator=g)
    mask = torch.ones(4, 64, dtype=torch.bool)
    if case == "stale":
        ours.running_mean.fill_(-offset)  # a shift on the other side makes it worse
    if case == "masked":
        mask[1, 10:], mask[3, 40:] = False, False
        x = x.masked_fill(~mask.unsqueeze(-1), 1e6)
    x.requires_grad_()
    y = ours(x, mask=mask if case == "masked" else None)
    tokens = x[mask]  # (tokens, C)
    leaves64 = [t.detach().double().requires_grad_() for t in (tokens, theirs.weight, theirs.bias)]
    truth = _bn_truth(*leaves64)
    torch_fp32 = _bn_truth(tokens.detach(), theirs.weight, theirs.bias)
    assert_error_bound(y[mask], torch_fp32, truth, "y")

    dy = torch.randn(tokens.shape, generator=g)
    dx = torch.autograd.grad(y[mask], x, dy)[0][mask]
    dx64 = torch.autograd.grad(truth, leaves64[0], dy.double())[0]
    t32 = tokens.detach().requires_grad_()
    dx32 = torch.autograd.grad(_bn_truth(t32, theirs.weight, theirs.bias), t32, dy)[0]
    assert_error_bound(dx, dx32, dx64, "dx")

    mean64, var64 = tokens.double().mean(0), tokens.double().var(0)
    mean0 = -offset if case == "stale" else 0.0
    torch.testing.assert_close(ours.running_mean.double(), 0.9 * mean0 + 0.1 * mean64)
    torch.testing.assert_close(ours.running_var.double(), 0.9 + 0.1 * var64, rtol=1e-5, atol=0)


def test_batchnorm_padding_may_hold_inf_and_nan():
    bn = normlab.BatchNorm(4)
    x = torch.randn(2, 6, 4) + 3
    mask = torch.ones(2, 6, dtype=torch.bool)
    mask[0, 3:] = False
    y = bn(x.masked_fill(~mask.unsqueeze(-1), float("nan")), mask=mask)
    assert y[mask].isfinite().all() and bn.running_var.isfinite().all()
    torch.testing.assert_close(y[mask], normlab.BatchNorm(4)(x[mask]))


def test_batchnorm_errors():
    bn = normlab.BatchNorm(8)
    with pytest.raises(ValueError, match="num_features=8"):
        bn(torch.randn(2, 3, 4))
    with pytest.raises(ValueError, match="mask must have shape"):
        bn(torch.randn(2, 3, 8), mask=torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(TypeError, match="mask must be a bool"):
        bn(torch.randn(2, 3, 8), mask=torch.ones(2, 3))
    with pytest.raises(ValueError, match="at least 2 unmasked tokens"):
        bn(torch.randn(2, 3, 8), mask=torch.zeros(2, 3, dtype=torch.bool))
    assert math.isfinite(bn.eval()(torch.randn(1, 1, 8)).sum().item())  # eval: any batch size


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (lambda: normlab.RMSNorm(8, eps=-1.0), ValueError, "eps must be a finite number >= 0"),
        (lambda: normlab.RMSNorm(8, casting="nope"), ValueError, "casting must be one of"),
        (lambda: normlab.RMSNorm(8, backend="nope"), ValueError, "backend must be one of"),
        (lambda: normlab.RMSNorm(8, elementwise_affine=False, offset=1.0), ValueError,
         "needs a weight to offset"),
        (lambda: normlab.LayerNorm(8, eps=float("inf")), ValueError, "eps must be a finite"),
        (lambda: normlab.LayerNorm(8, memory_efficient=1), TypeError, "memory_efficient must"),
        (lambda: normlab.ScaleNorm(8, eps=float("nan")), ValueError, "eps must be a finite"),
        (lambda: normlab.DyT(8, alpha_init=float("nan")), ValueError, "alpha_init must be a"),
        (lambda: normlab.DyT(8, backend="nope"), ValueError, "backend must be one of"),
    ],
)  # fmt: skip
def test_modules_check_their_arguments_when_made(make, error, message):
    # The functional layer's checks and messages, at construction rather than the first call.
    with pytest.raises(error, match=message):
        make()
