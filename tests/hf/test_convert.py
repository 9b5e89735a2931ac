"""normlab.hf.convert.preln_to_rmsnorm: Pre-LN LayerNorm models become equal Pre-RMSNorm models."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from normlab import LayerNorm, RMSNorm
from normlab.hf.convert import preln_to_rmsnorm
from normlab.models import Transformer, TransformerConfig
from normlab.testing import TOLERANCES

VOCAB, SEQ = 64, 16
DTYPES = [torch.float64, torch.float32]


def ids(batch: int = 2) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, SEQ), generator=torch.Generator().manual_seed(1))


@torch.no_grad()
def perturb(model: nn.Module, tables: list[nn.Parameter]) -> None:
    """Identity norms and zero-mean embeddings would hide a missing fold or re-centering."""
    for name, p in model.named_parameters():
        if "norm" in name or ".ln_" in name:
            p.add_(0.5 * torch.randn_like(p))
    for t in tables:
        t.add_(0.3 + 0.1 * torch.randn(t.shape[-1], dtype=t.dtype))


def assert_equal_logits(converted: torch.Tensor, original: torch.Tensor) -> None:
    torch.testing.assert_close(converted, original, **TOLERANCES[original.dtype])


# ---------------------------------------------------------------------------------------------
# GPT-2 (transformers)


def gpt2(dtype) -> nn.Module:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(
        vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=SEQ, bos_token_id=1,
        eos_token_id=1,
    )  # fmt: skip
    model = transformers.GPT2LMHeadModel(cfg).eval().to(dtype)
    perturb(model, [model.transformer.wte.weight, model.transformer.wpe.weight])
    return model


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_gpt2_converts_to_an_equal_model(dtype):
    original = gpt2(dtype)
    model = preln_to_rmsnorm(copy.deepcopy(original), backend="reference")

    kinds = {type(m) for m in model.modules()}
    assert nn.LayerNorm not in kinds and RMSNorm in kinds
    assert all(m.weight is None for m in model.modules() if isinstance(m, RMSNorm))
    # The head is untied: it reads the original table while the embedding is re-centered.
    assert model.lm_head.weight is not model.transformer.wte.weight
    assert model.lm_head.bias is not None and not model.config.tie_word_embeddings

    x, types = ids(), ids().flip(0)  # token_type_ids go through wte as well
    with torch.no_grad():
        out = model(x, token_type_ids=types, output_hidden_states=True)
        ref = original(x, token_type_ids=types)
    assert_equal_logits(out.logits, ref.logits)
    # The residual stream entering every block (and ln_f) is zero-mean.
    for h in out.hidden_states[:-1]:
        assert h.mean(-1).abs().max() <= 1e3 * torch.finfo(dtype).eps * h.abs().max()


def test_gpt2_patched_by_hf_converts_too():
    from normlab.hf import patch

    original = gpt2(torch.float64)
    model = copy.deepcopy(original)
    patch(model, backend="reference")
    assert any(isinstance(m, LayerNorm) for m in model.modules())
    preln_to_rmsnorm(model, backend="reference")
    assert not any(isinstance(m, LayerNorm) for m in model.modules())
    with torch.no_grad():
        assert_equal_logits(model(ids()).logits, original(ids()).logits)


def test_gpt2_with_cross_attention_is_rejected():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.GPT2Config(
        vocab_size=VOCAB, n_embd=16, n_layer=1, n_head=2, add_cross_attention=True,
        bos_token_id=1, eos_token_id=1,
    )  # fmt: skip
    with pytest.raises(ValueError, match="cross-attention"):
        preln_to_rmsnorm(transformers.GPT2LMHeadModel(cfg))


# ---------------------------------------------------------------------------------------------
# normlab.models.Transformer


def normlab_model(dtype, **kw) -> Transformer:
    torch.manual_seed(0)
    kw = {"norm": "layernorm", "placement": "pre", "max_seq_len": SEQ, **kw}
    model = Transformer(TransformerConfig(VOCAB, 32, 2, 4, norm_backend="reference", **kw))
    model = model.to(dtype).eval()
    perturb(model, [e.weight for e in (model.tok_emb, model.pos_emb) if e is not None])
    return model


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(
    "kw",
    [
        {"arch": "gpt2"},
        {"arch": "gpt2", "tie_embeddings": True},
        {"arch": "llama", "qk_norm": True},
        {"arch": "llama", "bias": True, "tie_embeddings": True},
    ],
    ids=lambda kw: "-".join(f"{k}={v}" for k, v in kw.items()),
)
def test_normlab_transformer_converts_to_an_equal_model(dtype, kw):
    original = normlab_model(dtype, **kw)
    model = preln_to_rmsnorm(copy.deepcopy(original), backend="reference")

    for block in model.blocks:
        assert isinstance(block.attn_norm_in, RMSNorm) and isinstance(block.mlp_norm_in, RMSNorm)
        if kw.get("qk_norm"):  # q/k norms read projections, not the residual stream: kept
            assert isinstance(block.attn.q_norm, LayerNorm)
    assert isinstance(model.norm, RMSNorm) and not model.config.tie_embeddings
    assert model.lm_head.weight is not model.tok_emb.weight
    with torch.no_grad():
        assert_equal_logits(model(ids()), original(ids()))


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"placement": "post"}, "placement"),
        ({"norm": "rmsnorm"}, "norm="),
        ({"final_norm": False}, "final norm"),
    ],
)
def test_non_preln_models_are_rejected(kw, match):
    model = normlab_model(torch.float32, **kw)
    before = copy.deepcopy(model.state_dict())
    with pytest.raises(ValueError, match=match):
        preln_to_rmsnorm(model)
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_converting_twice_is_rejected_before_any_write():
    model = preln_to_rmsnorm(normlab_model(torch.float32))
    before = copy.deepcopy(model.state_dict())
    with pytest.raises(TypeError, match="LayerNorm"):
        preln_to_rmsnorm(model)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_unsupported_models_are_rejected():
    with pytest.raises(TypeError, match="GPT2LMHeadModel"):
        preln_to_rmsnorm(nn.Linear(4, 4))
    with pytest.raises(TypeError, match="model"):
        preln_to_rmsnorm("gpt2")
    with pytest.raises(ValueError, match="backend"):
        preln_to_rmsnorm(normlab_model(torch.float32), backend="fast")
