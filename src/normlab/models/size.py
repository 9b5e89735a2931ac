"""A model's size from its config's arithmetic, without building it: the parameter count, a
lower bound on the memory one training step needs, and :func:`run_bytes`, the estimate of a
training run's peak memory that the lab checks before anything is allocated
(``normlab.lab.kit.limits``) and plans its workers with. ``Transformer.num_params()`` of the built
model equals :func:`param_count`; :func:`run_bytes` is within 25 % of the measured peak RSS of
short runs over a grid of small configs (tests/models/test_size.py)."""

from __future__ import annotations

from normlab.models.config import NORM_SLOTS, TransformerConfig

FP32 = 4  # bytes
# fp32 weights, gradients and AdamW's two moments.
TRAIN_BYTES_PER_PARAM = 4 * FP32


def norm_params(cfg: TransformerConfig, size: int) -> int:
    """Parameters of one norm of ``cfg.norm`` over ``size`` features (its row's count)."""
    return cfg.norm_kind.params(cfg, size)


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


# ---- the peak of a training run (normlab.lab.train.trainer), fitted to measured peak RSS

# Floats per token and block the backward keeps, before the allocator's overhead: llama's
# norms, q, k, v and their rotations, attention output, the SwiGLU's gate, up, activation and
# product; gpt2 has no rotation and a two-tensor GELU MLP.
_BLOCK_FLOATS = {"llama": (11, 4), "gpt2": (7, 2)}  # (x dim, x hidden)
# What freed tensors leave resident (glibc keeps freed blocks for reuse), measured: 1.2x.
_OVERHEAD = 6 / 5
# Floats per token outside the blocks: the logits, their float copy, log-softmax, gradient,
# the probes' copies at step 0 and the embeddings' tensors: about 16 vocabularies, measured.
_LOGIT_FLOATS = 16
INT64 = 8  # bytes


def norm_features(cfg: TransformerConfig) -> int:
    """The features of all of ``cfg``'s norm modules together (blocks, QK-norm, final): what
    causal BatchNorm keeps per position."""
    if cfg.norm_kind.identity:
        return 0

    def block(i: int) -> int:
        has_in, has_out = NORM_SLOTS[cfg.block_placement(i)]
        return 2 * (has_in + has_out) * cfg.dim + (2 * cfg.head_dim if cfg.qk_norm else 0)

    n = cfg.n_layers * block(0)
    if cfg.placement == "mix":  # post blocks first, then pre: two kinds (as param_count)
        post = cfg.n_post_layers
        n = post * block(0) + (cfg.n_layers - post) * block(cfg.n_layers - 1)
    return n + (cfg.dim if cfg.has_final_norm else 0)


def buffer_bytes(cfg: TransformerConfig) -> int:
    """Buffers that grow with ``max_seq_len``: the RoPE table (cos and sin, max_seq_len x
    head_dim each, one for the model) and the norms' per-position buffers (the kind's
    ``position_buffers`` of max_seq_len x C each, per norm: causal BatchNorm's running prefix
    mean and variance); gpt2's position table is a parameter."""
    rope = 2 * cfg.max_seq_len * cfg.head_dim if cfg.arch == "llama" else 0
    per_position = cfg.norm_kind.position_buffers(cfg)
    prefix = per_position * cfg.max_seq_len * norm_features(cfg) if per_position else 0
    return FP32 * (rope + prefix)


def token_floats(cfg: TransformerConfig) -> int:
    """Floats a training step keeps per token, the allocator's overhead included."""
    a, b = _BLOCK_FLOATS[cfg.arch]
    per_block = a * cfg.dim + b * cfg.hidden_dim
    blocks = cfg.n_layers * per_block
    blocks += cfg.norm_kind.step_floats(cfg) * norm_features(cfg)
    return round(_OVERHEAD * blocks) + _LOGIT_FLOATS * cfg.vocab_size


def probe_bytes(cfg: TransformerConfig, batch_size: int, seq_len: int) -> int:
    """The probes' attention logits (normlab.models.probes): one block's (B, H, T, T) in fp32 at
    a time."""
    return FP32 * batch_size * cfg.n_heads * seq_len * seq_len


def run_bytes(
    cfg: TransformerConfig, batch_size: int, seq_len: int, val_sequences: int | None = None
) -> int:
    """The peak memory of training ``cfg`` in fp32 with AdamW at ``batch_size`` x ``seq_len``,
    over the process's memory before it, the larger of two moments, plus the validation set's
    tokens (``val_sequences``, default 8 batches; inputs and targets in int64):

    - a training step: the weights, gradients and AdamW's two moments (16 bytes a parameter),
      :func:`buffer_bytes` and the activations the step keeps (:func:`token_floats`);
    - the probes at step 0, before AdamW's moments exist: weights and gradients, the buffers
      twice (``normlab.lab.train.serving.buffers_restored`` copies them), the activations and
      the attention logits (:func:`probe_bytes`).

    Config arithmetic only: nothing is built."""
    tokens = batch_size * seq_len
    params, buffers = param_count(cfg), buffer_bytes(cfg)
    activations = FP32 * tokens * token_floats(cfg)
    step = TRAIN_BYTES_PER_PARAM * params + buffers + activations
    probe = 2 * FP32 * params + 2 * buffers + activations + probe_bytes(cfg, batch_size, seq_len)
    val = (8 * batch_size if val_sequences is None else val_sequences) * seq_len
    return max(step, probe) + 2 * INT64 * val
