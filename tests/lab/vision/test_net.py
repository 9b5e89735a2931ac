"""The CNN of ``normlab vision``: its shapes, its three norms, and one short run of each."""

import math

import pytest
import torch
from torch import nn

from normlab.lab.vision.net import NORMS, Arm, Recipe, digits, make_net, split, train


@pytest.mark.parametrize("norm", NORMS)
def test_each_norm_maps_digits_to_ten_logits(norm):
    net = make_net(norm)
    x = torch.rand(5, 1, 8, 8)
    assert net(x).shape == (5, 10)
    net.eval()
    assert net(x[:1]).shape == (1, 10)  # eval: a batch of one


def test_the_norms_are_batchnorm2d_a_channel_layernorm_and_none():
    kinds = {
        n: [type(m) for m in make_net(n) if not isinstance(m, nn.Conv2d | nn.Linear)] for n in NORMS
    }
    assert kinds["BatchNorm"].count(nn.BatchNorm2d) == 2
    assert kinds["LayerNorm"].count(nn.GroupNorm) == 2
    assert not {nn.BatchNorm2d, nn.GroupNorm} & set(kinds["none"])
    ln = make_net("LayerNorm")[1]
    assert ln.num_groups == 1 and ln.weight.shape == (16,)  # per-channel γ, as BatchNorm2d's


def test_layernorm_is_batch_independent_and_batchnorm_is_not_in_train_mode():
    x = torch.randn(6, 16, 8, 8)
    ln, bn = make_net("LayerNorm")[1], make_net("BatchNorm")[1]
    assert torch.allclose(ln(x)[:2], ln(x[:2]), atol=1e-6)
    assert not torch.allclose(bn(x)[:2], bn(x[:2]), atol=1e-3)


def test_every_norm_starts_from_the_same_conv_weights_on_a_seed():
    weights = []
    for norm in NORMS:
        torch.manual_seed(7)
        weights.append(make_net(norm)[0].weight.detach().clone())
    assert all(torch.equal(weights[0], w) for w in weights[1:])


def test_an_unknown_norm_is_a_value_error():
    with pytest.raises(ValueError, match="norm must be one of"):
        make_net("RMSNorm")


def test_the_split_is_fixed_by_the_seed_and_disjoint():
    x, y = digits()
    assert x.shape == (1797, 1, 8, 8) and float(x.max()) == 1.0 and y.max() == 9
    a_train, a_val = split(3, len(x), 0.3)
    b_train, b_val = split(3, len(x), 0.3)
    assert torch.equal(a_val, b_val) and len(a_val) == 539
    assert not set(a_train.tolist()) & set(a_val.tolist())
    assert not torch.equal(split(4, len(x), 0.3)[1], a_val)


@pytest.mark.parametrize("norm", NORMS)
def test_one_short_run_of_each_norm_gives_a_finite_loss_and_an_error_rate(norm):
    recipe = Recipe(epochs=1, val_share=0.8)  # 360 training digits: a fraction of a second
    o = train(Arm(norm, 64), seed=1, recipe=recipe)
    assert math.isfinite(o.val_loss) and 0 <= o.val_error <= 1 and o.cpu_s > 0
    assert train(Arm(norm, 64), seed=1, recipe=recipe).val_loss == o.val_loss  # seeded


def test_the_rate_scales_with_the_batch():
    r = Recipe()
    assert r.lr_at(64) == r.lr and r.lr_at(4) == pytest.approx(r.lr / 16)
    assert r.lr_at(4, 3.0) == pytest.approx(3 * r.lr / 16)
