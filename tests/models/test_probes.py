"""Tests for normlab.models.Probes: hooks only while attached; values match a direct computation."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from normlab.models import Probes, Transformer, TransformerConfig

# Tiny tensors: intra-op threads only add overhead (and thrash on a shared 2-core box).
pytestmark = pytest.mark.usefixtures("one_thread")


def _model(n_layers=3, **kw):
    torch.manual_seed(0)
    return Transformer(TransformerConfig(32, 16, n_layers, 2, norm_backend="reference", **kw))


def _tokens(b=2, t=8):
    return torch.randint(0, 32, (b, t), generator=torch.Generator().manual_seed(0))


def _hook_count(model) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def test_off_by_default_and_removed_cleanly():
    model = _model()
    assert _hook_count(model) == 0
    want = model(_tokens())
    with Probes(model) as probes:
        assert _hook_count(model) > 0
        torch.testing.assert_close(model(_tokens()), want)  # probes do not change the math
        assert probes.collect()["residual_rms"][0] is not None
    assert _hook_count(model) == 0
    probes = Probes(model)
    probes.remove()
    probes.remove()  # idempotent
    assert _hook_count(model) == 0
    with pytest.raises(TypeError, match="Transformer"):
        Probes(torch.nn.Linear(2, 2))


def test_collect_schema_is_plain_json():
    model = _model(n_layers=3, arch="gpt2")
    with Probes(model) as probes:
        empty = probes.collect()
        assert empty["residual_rms"] == [None] * 3 and empty["grad_norm_block"] == [None] * 3
        model(_tokens()).logsumexp(-1).mean().backward()
        stats = probes.collect()
    assert set(stats) == {
        "grad_norm", "grad_norm_block", "residual_rms", "residual_cos", "attn_logit_max",
        "massive", "logit_rms", "logit_absmax", "branch_ratio", "sum_rms", "input_grad_norm",
    }  # fmt: skip
    assert set(stats["grad_norm"]) == {
        "attn.wq",
        "attn.wk",
        "attn.wv",
        "attn.wo",
        "mlp.w_in",
        "mlp.w_out",
    }
    assert all(len(v) == 3 for v in stats["grad_norm"].values())
    for d in ("branch_ratio", "sum_rms"):
        assert {k: len(v) for k, v in stats[d].items()} == {"attn": 3, "mlp": 3}
    assert all(0 < x < 1 for v in stats["branch_ratio"].values() for x in v)
    per_sublayer = ("branch_ratio", "sum_rms")
    scalars = ("logit_rms", "logit_absmax")
    lists = {k: v for k, v in stats.items() if k not in ("grad_norm", *scalars, *per_sublayer)}
    assert {k: len(v) for k, v in lists.items()} == {
        "grad_norm_block": 3,
        "residual_rms": 3,
        "residual_cos": 2,
        "attn_logit_max": 3,
        "massive": 3,
        "input_grad_norm": 3,
    }
    assert all(empty[k] is None and type(stats[k]) is float for k in scalars)
    flat = [x for d in ("grad_norm", *per_sublayer) for v in stats[d].values() for x in v]
    flat += [x for v in lists.values() for x in v]
    assert all(type(x) is float for x in flat)
    assert json.loads(json.dumps(stats)) == stats


def test_values_match_a_direct_computation():
    model = _model(n_layers=2, qk_norm=True)
    tokens = _tokens()
    outs = []
    handles = [
        b.register_forward_hook(lambda m, a, o: outs.append(o.detach())) for b in model.blocks
    ]
    with Probes(model) as probes:
        model(tokens).logsumexp(-1).mean().backward()
        stats = probes.collect()
    for h in handles:
        h.remove()
    for i, out in enumerate(outs):
        assert stats["residual_rms"][i] == pytest.approx(out.pow(2).mean().sqrt().item(), rel=1e-5)
        a = out.abs().flatten()
        assert stats["massive"][i] == pytest.approx((a.max() / a.median()).item(), rel=1e-5)
    logits = model(tokens)
    assert stats["logit_rms"] == pytest.approx(logits.pow(2).mean().sqrt().item(), rel=1e-5)
    cos = F.cosine_similarity(outs[0], outs[1], dim=-1).mean().item()
    assert stats["residual_cos"][0] == pytest.approx(cos, rel=1e-5)
    for i, block in enumerate(model.blocks):
        grads = [p.grad for p in block.parameters()]
        total = torch.sqrt(sum(g.pow(2).sum() for g in grads)).item()
        assert stats["grad_norm_block"][i] == pytest.approx(total, rel=1e-5)
        wo = block.attn.wo.weight.grad.norm().item()
        assert stats["grad_norm"]["attn.wo"][i] == pytest.approx(wo, rel=1e-5)

    # The largest causal logit of block 0, recomputed from its input.
    attn, x = model.blocks[0].attn, model.blocks[0].attn_norm_in(model.tok_emb(tokens))
    heads = (*tokens.shape, 2, 8)
    q = attn.rope(attn.q_norm(attn.wq(x).view(heads)).transpose(1, 2))
    k = attn.rope(attn.k_norm(attn.wk(x).view(heads)).transpose(1, 2))
    logits = (q @ k.transpose(-1, -2) / 8**0.5).masked_fill(~torch.ones(8, 8).tril().bool(), -1e9)
    assert stats["attn_logit_max"][0] == pytest.approx(logits.max().item(), rel=1e-5)


def test_input_gradients_and_the_output_range_match_a_direct_computation():
    """input_grad_norm[i] is ‖∂loss/∂x_i‖ of block i's input (000 §5.2's ∂loss/∂x_l), read off
    the inputs kept with retain_grad; logit_absmax the largest |logit|."""
    model = _model(n_layers=3)
    tokens = _tokens()
    inputs = []

    def keep(module, args):
        args[0].retain_grad()
        inputs.append(args[0])

    handles = [b.register_forward_pre_hook(keep) for b in model.blocks]
    with Probes(model) as probes:
        logits = model(tokens)
        logits.logsumexp(-1).mean().backward()
        stats = probes.collect()
    for h in handles:
        h.remove()
    direct = [x.grad.norm().item() for x in inputs]
    assert stats["input_grad_norm"] == pytest.approx(direct, rel=1e-5)
    assert stats["logit_absmax"] == pytest.approx(logits.abs().max().item(), rel=1e-6)


def test_residual_statistics_skip_padding():
    model = _model(n_layers=1)
    tokens, mask = _tokens(), torch.ones(2, 8, dtype=torch.bool)
    mask[1, 4:] = False
    outs = []
    model.blocks[0].register_forward_hook(lambda m, a, o: outs.append(o.detach()))
    with Probes(model) as probes:
        model(tokens, mask=mask)
        rms = probes.collect()["residual_rms"][0]
    assert rms == pytest.approx(outs[0][mask].pow(2).mean().sqrt().item(), rel=1e-5)


def test_layernorm_scaling_scales_each_input_norm_by_one_over_root_depth():
    """depth_scaled_norm: block l's input norms are multiplied by 1/sqrt(l) (1-based)."""
    plain, scaled = _model(n_layers=4), _model(n_layers=4, depth_scaled_norm=True)
    scaled.load_state_dict(plain.state_dict())
    assert [b.in_scale for b in scaled.blocks] == pytest.approx([1, 2**-0.5, 3**-0.5, 0.5])
    x = torch.randn(2, 8, 16)
    ref, s = plain.blocks[2], 3**-0.5  # block 3 (1-based), with the unscaled model's weights
    h = x + ref.attn(ref.attn_norm_in(x) * s, None)
    want = h + ref.mlp(ref.mlp_norm_in(h) * s, None)
    torch.testing.assert_close(scaled.blocks[2](x), want)
    assert not torch.allclose(scaled(_tokens()), plain(_tokens()))
    with pytest.raises(ValueError, match="depth_scaled_norm"):
        TransformerConfig(32, 16, 2, 2, placement="post", depth_scaled_norm=True)


@pytest.mark.parametrize("placement", ["post", "deepnorm"])
def test_sum_rms_is_the_rms_of_each_post_norms_input(placement):
    model = _model(n_layers=2, placement=placement)
    seen = {}
    for i, b in enumerate(model.blocks):
        for key in ("attn", "mlp"):  # x = N(α·x + F(x)): the norm gets the sum (fused: residual=)
            norm = getattr(b, f"{key}_norm_out")
            norm.register_forward_hook(
                lambda m, a, kw, o, k=(key, i): seen.__setitem__(k, o[1].pow(2).mean().sqrt()),
                with_kwargs=True,
            )
    with Probes(model) as probes:
        model(_tokens())
        stats = probes.collect()
    for (key, i), rms in seen.items():
        assert stats["sum_rms"][key][i] == pytest.approx(rms.item(), rel=1e-5)
