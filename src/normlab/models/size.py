"""A model's size from its config's arithmetic, without building it: the parameter count and a
lower bound on the memory one training step needs. The lab refuses a run that cannot fit
before anything is allocated (``normlab.lab.limits``); ``Transformer.num_params()`` of the built
model equals :func:`param_count` (tests/test_size.py)."""

from __future__ import annotations

from normlab.models.config import NORM_SLOTS, TransformerConfig

FP32 = 4  # bytes
# fp32 weights, gradients and AdamW's two moments.
TRAIN_BYTES_PER_PARAM = 4 * FP32


def norm_params(cfg: TransformerConfig, size: int) -> int:
    """Parameters of one norm of ``cfg.norm`` over ``size`` features."""
    return {
        "rmsnorm": size,
        "layernorm": size * (2 if cfg.use_bias else 1),
        "batchnorm": 2 * size,
        "dyt": 2 * size + 1,
        "scalenorm": 1,
        "none": 0,
    }[cfg.norm]


def block_params(cfg: TransformerConfig, i: int) -> int:
    """Parameters of block ``i``: attention (q, k, v, o; QK-norm), the MLP, its norms."""
    d, h, bias = cfg.dim, cfg.hidden_dim, cfg.use_bias
    attn = 4 * (d * d + (d if bias else 0))
    if cfg.qk_norm:
        attn += 2 * norm_params(cfg, cfg.head_dim)
    gated = cfg.arch == "llama"
    mlp = (3 if gated else 2) * d * h + ((2 if gated else 1) * h + d if bias else 0)
    has_in, has_out = NORM_SLOTS[cfg.block_placement(i)]
    return attn + mlp + 2 * (has_in + has_out) * norm_params(cfg, d)


def param_count(cfg: TransformerConfig, *, blocks_only: bool = False) -> int:
    """``Transformer(cfg).num_params()`` (shared tensors once), or its blocks' parameters."""
    blocks = block_params(cfg, 0) * cfg.n_layers
    if cfg.placement == "mix":  # post blocks first, then pre: two kinds
        post = cfg.n_post_layers
        blocks = post * block_params(cfg, 0) + (cfg.n_layers - post) * block_params(
            cfg, cfg.n_layers - 1
        )
    if blocks_only:
        return blocks
    emb = cfg.vocab_size * cfg.dim
    head = 0 if cfg.tie_embeddings else cfg.dim * cfg.vocab_size
    pos = cfg.max_seq_len * cfg.dim if cfg.arch == "gpt2" else 0
    final = norm_params(cfg, cfg.dim) if cfg.has_final_norm else 0
    return emb + int(cfg.learn_embed_scale) + pos + blocks + final + head


def activation_bytes(cfg: TransformerConfig, batch_size: int, seq_len: int) -> int:
    """A lower bound on the fp32 activations one training step keeps for the backward: per
    token and block the stream, the norms' inputs, q, k, v and the attention output (~10·dim)
    and the MLP's hidden tensors (~3·hidden); the logits, their softmax and gradient (3·vocab).
    Attention's (T, T) scores are left out (fused kernels do not keep them)."""
    tokens = batch_size * seq_len
    per_block = 10 * cfg.dim + 3 * cfg.hidden_dim
    return FP32 * tokens * (cfg.n_layers * per_block + 3 * cfg.vocab_size)


def train_bytes(cfg: TransformerConfig, batch_size: int, seq_len: int) -> int:
    """A lower bound on the memory of training ``cfg`` at ``batch_size`` x ``seq_len`` in fp32
    with AdamW: weights, gradients, the two moments, and :func:`activation_bytes`."""
    return TRAIN_BYTES_PER_PARAM * param_count(cfg) + activation_bytes(cfg, batch_size, seq_len)
