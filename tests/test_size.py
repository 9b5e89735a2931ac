"""A model's size from its config's arithmetic (normlab.models.size) equals the built model's."""

import itertools

import pytest

from normlab.models import Transformer, TransformerConfig
from normlab.models.size import activation_bytes, param_count, train_bytes

NORMS = ("layernorm", "rmsnorm", "batchnorm", "dyt", "scalenorm", "none")
PLACEMENTS = ("post", "pre", "sandwich", "deepnorm", "mix", "reorder")


def _configs():
    for norm, placement, arch, qk, tie, bias in itertools.product(
        NORMS, PLACEMENTS, ("llama", "gpt2"), (False, True), (False, True), (None, True)
    ):
        try:
            yield TransformerConfig(
                50, 16, 5, 4, norm=norm, placement=placement, arch=arch, qk_norm=qk,
                tie_embeddings=tie, bias=bias, max_seq_len=24, learn_embed_scale=qk,
                mlp_ratio=None if tie else 3.3,
            )  # fmt: skip
        except ValueError:  # e.g. deepnorm without a norm
            continue


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_param_count_is_the_built_models(placement):
    n = 0
    for cfg in _configs():
        if cfg.placement != placement:
            continue
        model = Transformer(cfg)
        assert param_count(cfg) == model.num_params(), cfg
        blocks = sum(p.numel() for p in model.blocks.parameters())
        assert param_count(cfg, blocks_only=True) == blocks, cfg
        n += 1
    assert n > 40


def test_memory_grows_with_the_sizes_and_is_at_least_the_adamw_state():
    cfg = TransformerConfig(256, 64, 4, 4)
    assert train_bytes(cfg, 16, 64) >= 16 * param_count(cfg) + activation_bytes(cfg, 16, 64)
    assert activation_bytes(cfg, 32, 64) == 2 * activation_bytes(cfg, 16, 64)
    wide = TransformerConfig(256, 10**6, 1, 8)  # arithmetic only: nothing is allocated
    assert param_count(wide) > 10**13
