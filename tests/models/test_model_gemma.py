"""The model fields a Gemma twin needs: RMSNorm's (1 + w) offset and the embedding scale."""

from __future__ import annotations

import math

import pytest
import torch

from normlab.lab.study.spec.parse import parse_spec
from normlab.models import Transformer, TransformerConfig
from normlab.modules import RMSNorm

V, D, H = 32, 16, 2
REF = {"norm_backend": "reference"}
GEMMA = {"norm_offset": 1.0, "rms_casting": "gemma", "scale_embeddings": True}

pytestmark = pytest.mark.usefixtures("one_thread")


def _tokens(b=2, t=8, seed=0):
    return torch.randint(0, V, (b, t), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("backend", ["reference", "auto"])
def test_norm_offset_is_gemmas_one_plus_w(backend):
    cfg = TransformerConfig(V, D, 2, H, placement="sandwich", qk_norm=True, norm_backend=backend,
                            norm_offset=1.0, rms_casting="gemma")  # fmt: skip
    model = Transformer(cfg)
    norms = list(model.norm_modules())
    assert len(norms) == 2 * 4 + 2 * 2 + 1  # sandwich: 4 per block, q/k per block, final
    for norm in norms:
        assert isinstance(norm, RMSNorm) and norm.offset == 1.0 and norm.casting == "gemma"
        assert torch.all(norm.weight == 0)  # stored around 0: the gain starts at 1 + 0
    norm = model.blocks[0].attn_norm_in
    with torch.no_grad():
        norm.weight.copy_(torch.linspace(-0.5, 0.5, D))
    x = torch.randn(3, D)
    rms = x.pow(2).mean(-1, keepdim=True).add(cfg.eps or 1e-6).sqrt()
    torch.testing.assert_close(norm(x), x / rms * (1 + norm.weight), rtol=1e-5, atol=1e-6)


def test_scale_embeddings_multiplies_the_stream_by_sqrt_dim():
    torch.manual_seed(0)
    plain = Transformer(TransformerConfig(V, D, 1, H, tie_embeddings=True, **REF))
    scaled = Transformer(TransformerConfig(V, D, 1, H, tie_embeddings=True, scale_embeddings=True,
                                           **REF))  # fmt: skip
    scaled.load_state_dict(plain.state_dict())
    seen = {}
    for name, model in (("plain", plain), ("scaled", scaled)):
        model.blocks[0].register_forward_pre_hook(lambda m, a, name=name: seen.update({name: a[0]}))
        model(_tokens())
    torch.testing.assert_close(seen["scaled"], seen["plain"] * math.sqrt(D))
    # The LM head reads the unscaled (tied) matrix.
    assert scaled.lm_head.weight is scaled.tok_emb.weight


def test_a_gemma_style_model_trains_a_step():
    torch.manual_seed(0)
    cfg = TransformerConfig(V, D, 2, H, placement="sandwich", qk_norm=True, tie_embeddings=True,
                            **GEMMA, **REF)  # fmt: skip
    model = Transformer(cfg)
    logits = model(_tokens())
    assert torch.isfinite(logits).all()
    logits.logsumexp(-1).mean().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


def test_bad_values_are_rejected():
    with pytest.raises(ValueError, match="norm_offset=1 applies to rmsnorm only"):
        TransformerConfig(V, D, 1, H, norm="layernorm", norm_offset=1.0)
    TransformerConfig(V, D, 1, H, norm="layernorm", norm_offset=0.0)  # zero: any norm
    with pytest.raises(TypeError, match="norm_offset must be a number"):
        TransformerConfig(V, D, 1, H, norm_offset="1")
    with pytest.raises(ValueError, match="norm_offset must be finite"):
        TransformerConfig(V, D, 1, H, norm_offset=math.inf)
    with pytest.raises(TypeError, match="scale_embeddings must be a bool"):
        TransformerConfig(V, D, 1, H, scale_embeddings=1)
    cfg = TransformerConfig(V, D, 1, H, **GEMMA)
    assert TransformerConfig.from_dict(cfg.to_dict()) == cfg


def test_a_spec_sets_them():
    spec = """
[base]
steps = 2
[base.model]
dim = 16
n_layers = 1
n_heads = 2
norm_offset = 1
rms_casting = "gemma"
scale_embeddings = true
[[arms]]
name = "gemma"
[[arms]]
name = "layernorm"
model = { norm = "layernorm", norm_offset = 0.0 }
[[claims]]
name = "c"
statement = "s"
rule = "trains"
arm = "gemma"
seeds = 1
"""
    runs = {r.name: r.config.model for r in parse_spec(spec, "g.toml").arms}
    assert runs["gemma"].norm_offset == 1.0 and runs["gemma"].scale_embeddings
    assert runs["layernorm"].norm_offset == 0.0
