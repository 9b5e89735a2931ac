"""Causal BatchNorm (``normlab.batchnorm``) against a float64 loop over positions; the pooled
form's drop-in tests against ``torch.nn.BatchNorm1d`` live in tests/test_modules.py."""

from __future__ import annotations

import math
import re

import pytest
import torch

from normlab import BatchNorm


def causal_reference(x, mask, r, v, min_tokens, tracked, eps=1e-5):
    """Float64, one position at a time: the prefix's tokens plus ``k`` prior tokens with the
    running statistics (r, v) (per position, or one for all), combined by the textbook
    formulas."""
    x = x.double()
    b, t, c = x.shape[0], x.shape[1], x.shape[-1]
    xs = x.reshape(b, t, -1, c)
    keep = torch.ones(xs.shape[:-1], dtype=torch.bool) if mask is None else mask.reshape(b, t, -1)
    out = torch.empty_like(xs)
    r = torch.as_tensor(r, dtype=x.dtype).reshape(-1, c).expand(t, c)  # per position
    v = torch.as_tensor(v, dtype=x.dtype).reshape(-1, c).expand(t, c)
    for s in range(t):
        p = xs[:, : s + 1][keep[:, : s + 1]]  # (n, C)
        n = p.shape[0]
        k = max(0, min_tokens - n) if tracked else 0
        mu = p.mean(0) if n else torch.zeros(c, dtype=x.dtype)
        s2 = p.var(0, unbiased=False) if n else torch.zeros(c, dtype=x.dtype)
        big_n = max(n + k, 1)
        m = (n * mu + k * r[s]) / big_n
        var = (n * s2 + k * v[s] + n * k / big_n * (mu - r[s]) ** 2) / big_n
        out[:, s] = (xs[:, s] - m) / (var + eps).sqrt()
    return out.reshape(x.shape)


@pytest.mark.parametrize("offset", [0.0, 1e3, 1e4])
@pytest.mark.parametrize("shape", [(4, 50, 8), (3, 17, 2, 5), (1, 9, 4)])
@pytest.mark.parametrize("masked", [False, True])
def test_causal_statistics_match_a_float64_loop(offset, shape, masked):
    g = torch.Generator().manual_seed(0)
    t = shape[1]
    drift = torch.linspace(-2, 2, t).reshape(1, t, *[1] * (len(shape) - 2))  # means move with t
    x = offset + drift + torch.randn(shape, generator=g) * (1 + torch.rand(shape[-1], generator=g))
    mask = None
    if masked:
        mask = torch.rand(shape[:-1], generator=g) > 0.3
        mask[:, 0] = False  # the first position is padding everywhere: the shift skips it
    bn = BatchNorm(shape[-1], causal=True, max_positions=t, min_tokens=20).train()
    for step in range(2):  # the first call has no prior; the second has the running statistics
        r = bn.running_prefix_mean.double().clone().reshape(t, *[1] * (len(shape) - 3), -1)
        v = bn.running_prefix_var.double().clone().reshape(t, *[1] * (len(shape) - 3), -1)
        y = bn(x, mask=mask)
        expected = causal_reference(x, mask, r, v, 20, tracked=step > 0)
        real = slice(None) if mask is None else mask
        err = (y.double() - expected)[real].abs().max().item()
        # The inputs carry FP32's rounding of ``offset``; the normalized output is O(1).
        assert err < 1e-5 * max(1.0, offset / 1e2), f"step {step}: {err}"


def test_causal_gradients_match_float64_autograd():
    x = torch.randn(3, 12, 4, dtype=torch.float64, requires_grad=True)
    bn = BatchNorm(4, causal=True, max_positions=12, min_tokens=8, dtype=torch.float64).train()
    bn(x.detach())  # running statistics: a prior of the first positions
    r, v = bn.running_prefix_mean.clone(), bn.running_prefix_var.clone()
    torch.autograd.gradcheck(lambda t: BatchNorm._causal_stats(_frozen(bn), t, None)[0], (x,))
    w = torch.randn(3, 12, 4, dtype=torch.float64)
    (bn(x) * w).sum().backward()
    xr = x.detach().clone().requires_grad_(True)
    (causal_reference(xr, None, r, v, 8, tracked=True) * w).sum().backward()
    torch.testing.assert_close(x.grad, xr.grad)


def _frozen(bn: BatchNorm) -> BatchNorm:
    """A copy whose running statistics a call does not move (gradcheck calls many times)."""
    import copy

    twin = copy.deepcopy(bn)
    twin._update_running = lambda *a: None
    return twin


def test_causal_needs_a_time_dim_and_max_positions():
    bn = BatchNorm(4, causal=True, max_positions=8)
    with pytest.raises(ValueError, match="causal"):
        bn(torch.randn(10, 4))
    with pytest.raises(ValueError, match="max_positions=8"):
        bn(torch.randn(2, 9, 4))
    for bad in (None, 0, True):
        with pytest.raises(ValueError, match="max_positions"):
            BatchNorm(4, causal=True, max_positions=bad)
    with pytest.raises(ValueError, match="min_tokens"):
        BatchNorm(4, causal=True, max_positions=8, min_tokens=1)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"eps": -1}, "eps must be a finite number >= 0, got -1"),
        ({"eps": math.nan}, "eps must be a finite number >= 0, got nan"),
        ({"eps": 10**400}, "eps must be a finite number >= 0, got 1000"),
        ({"momentum": -5}, "momentum must be a finite number >= 0 and <= 1, got -5"),
        ({"momentum": 1.5}, "momentum must be a finite number >= 0 and <= 1"),
        ({"momentum": math.nan}, "momentum must be a finite number >= 0 and <= 1"),
        ({"num_features": 0}, "num_features must be a positive int, got 0"),
        ({"num_features": 2.5}, "num_features must be a positive int, got 2.5"),
    ],
)
def test_bad_arguments_raise_the_functional_layers_value_errors(kw, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        BatchNorm(**{"num_features": 4, **kw})


def test_sync_is_a_flag_and_a_single_process_ignores_it():
    with pytest.raises(TypeError, match="sync must be a bool, got int"):
        BatchNorm(4, sync=0)
    torch.manual_seed(0)
    x = torch.randn(3, 5, 4)
    local = BatchNorm(4, sync=False)
    assert "sync=False" in repr(local) and "sync" not in repr(BatchNorm(4))
    torch.testing.assert_close(local(x), BatchNorm(4)(x), rtol=0, atol=0)


def test_momentum_none_and_the_bounds_are_accepted():
    for momentum in (None, 0.0, 1.0, 0.1):
        assert BatchNorm(4, momentum=momentum).momentum == momentum
    with pytest.raises(TypeError, match="eps must be a real number, got str"):
        BatchNorm(4, eps="1e-5")


def test_eval_uses_each_positions_running_prefix_statistics():
    """The running prefix statistics are the moving average of each position's training-time
    prefix mean and (unbiased) variance; eval mode normalizes position t with them, as training
    did, where the pooled running statistics (kept too, as torch's) would not."""
    g = torch.Generator().manual_seed(0)
    drift = torch.linspace(-3, 3, 40).reshape(1, 40, 1)  # the mean moves with the position
    x = drift + torch.randn(4, 40, 4, generator=g)
    bn = BatchNorm(4, causal=True, max_positions=40, momentum=None)
    pooled = BatchNorm(4, momentum=None)
    bn(x), pooled(x)  # momentum None, one batch: the running statistics are this batch's
    xd = x.double()
    for t in (0, 9, 39):
        prefix = xd[:, : t + 1].reshape(-1, 4)
        mean, var = prefix.mean(0), prefix.var(0)
        close = {"rtol": 1e-5, "atol": 1e-6}  # FP32 buffers against a float64 truth
        torch.testing.assert_close(bn.running_prefix_mean[t].double(), mean, **close)
        torch.testing.assert_close(bn.running_prefix_var[t].double(), var, **close)
    torch.testing.assert_close(bn.running_mean, pooled.running_mean)
    torch.testing.assert_close(bn.running_var, pooled.running_var)
    bn.eval()
    expected = (xd - bn.running_prefix_mean.double()) / (
        bn.running_prefix_var.double() + 1e-5
    ).sqrt()
    torch.testing.assert_close(bn(x).double(), expected, rtol=1e-5, atol=1e-5)
    assert (
        "running_prefix_mean" in bn.state_dict()
        and "running_prefix_mean" not in pooled.state_dict()
    )


def test_causal_compiles_fullgraph():
    bn = BatchNorm(8, causal=True, max_positions=24, min_tokens=16).train()
    eager = torch.compile(bn, fullgraph=True, backend="eager")
    x = torch.randn(2, 24, 8)
    ref = BatchNorm(8, causal=True, max_positions=24, min_tokens=16).train()
    torch.testing.assert_close(eager(x), ref(x))


@pytest.mark.parametrize("causal", [False, True])
def test_a_sequences_output_depends_on_its_batch_mates_in_train_mode_only(causal):
    """003 §七 (1), by construction: in train mode BatchNorm normalizes a sequence with its
    batch's statistics, so changing the other sequences changes its output; in eval mode
    (running statistics) and under LayerNorm, they do not."""
    torch.manual_seed(0)
    kw = {"causal": True, "max_positions": 16} if causal else {}
    bn, ln = BatchNorm(8, **kw), torch.nn.LayerNorm(8)
    x = torch.randn(4, 16, 8)
    other = torch.cat([x[:1], 3 * torch.randn(3, 16, 8) + 1])  # the same first sequence
    assert not torch.allclose(bn(x)[0], bn(other)[0])
    bn.eval()
    torch.testing.assert_close(bn(x)[0], bn(other)[0])
    torch.testing.assert_close(ln(x)[0], ln(other)[0])


@pytest.mark.parametrize("causal", [False, True])
def test_frozen_normalizes_with_the_running_statistics_in_train_mode_and_leaves_them(causal):
    torch.manual_seed(0)
    bn = BatchNorm(6, causal=causal, max_positions=5 if causal else None)
    for _ in range(3):  # running statistics away from their init
        bn(torch.randn(4, 5, 6) * 3 + 1)
    x = torch.randn(2, 5, 6)
    want = bn.eval()(x)
    state = {k: v.clone() for k, v in bn.state_dict().items()}
    bn.train().frozen = True
    got = bn(x)
    torch.testing.assert_close(got, want)
    assert all(torch.equal(state[k], v) for k, v in bn.state_dict().items())  # not updated
    # Without batch noise: a sequence's output does not depend on its batch-mates.
    torch.testing.assert_close(bn(x[:1]), got[:1])
