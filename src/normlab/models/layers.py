"""The shared pieces of a block: norm factory, RoPE, causal attention and the MLPs."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from normlab.models.config import TransformerConfig


def make_norm(cfg: TransformerConfig, size: int, *, attn: bool = False) -> nn.Module | None:
    """One normlab norm of ``cfg.norm`` over the last ``size`` features (its row in
    normlab.models.norms builds it); None for the identity (norm="none"). ``attn``: a norm of an
    attention sublayer (DyT's ``dyt_alpha_attn``)."""
    return cfg.norm_kind.make(cfg, size, attn=attn)


def apply_norm(
    norm: nn.Module | None, x: Tensor, mask: Tensor | None, residual: Tensor | None = None
) -> Tensor:
    """``norm(x + residual)``; None is the identity, and a norm whose statistics span tokens
    (``takes_mask``: BatchNorm) gets the padding mask.

    With ``residual`` the add happens inside the norm's kernel (the fused form); the summed
    stream it also returns is not needed by the caller.
    """
    if norm is None:
        return x if residual is None else x + residual
    kw = {}
    if getattr(norm, "takes_mask", False):
        if mask is not None and mask.dim() < x.dim() - 1:  # (B, T) mask for (B, T, H, Dh) q/k
            mask = mask.reshape(*mask.shape, *[1] * (x.dim() - 1 - mask.dim())).expand(x.shape[:-1])
        kw["mask"] = mask
    return norm(x, **kw) if residual is None else norm(x, residual, **kw)[0]


class RotaryEmbedding(nn.Module):
    """RoPE (Su et al. 2021), rotate-half layout as in LLaMA/GPT-NeoX; base 10000.

    The cos/sin tables are non-persistent buffers: rebuilt from the config, never in state_dict.
    They are computed in FP32 exactly as ``transformers``' ``LlamaRotaryEmbedding`` computes
    them, so a model exported with :func:`normlab.hf.export` rotates by the same numbers.
    """

    def __init__(self, head_dim: int, max_seq_len: int, base: float = 10000.0):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float) / head_dim))
        angles = torch.arange(max_seq_len, dtype=torch.float)[:, None] * inv_freq
        angles = torch.cat([angles, angles], dim=-1)  # (T_max, Dh)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        """Rotate ``x`` of shape (B, H, T, Dh) by its positions 0..T-1."""
        t = x.shape[-2]
        cos, sin = self.cos[:t].to(x.dtype), self.sin[:t].to(x.dtype)
        x1, x2 = x.chunk(2, dim=-1)
        return x * cos + torch.cat([-x2, x1], dim=-1) * sin


class CausalSDPA(nn.Module):
    """``softmax(q kᵀ / √Dh + causal) v`` through PyTorch's fused kernel.

    A module of its own only so that :class:`~normlab.models.Probes` can hook its inputs (q, k)
    to measure attention logits; it holds no parameters.
    """

    def forward(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


class Attention(nn.Module):
    """Multi-head causal self-attention, separate q/k/v projections.

    Separate (not fused) projections because DeepNorm scales v but not q and k, and the probes
    report each matrix's gradient.
    """

    def __init__(self, cfg: TransformerConfig, rope: RotaryEmbedding | None = None):
        super().__init__()
        d, bias = cfg.dim, cfg.use_bias
        self.n_heads, self.head_dim = cfg.n_heads, cfg.head_dim
        self.wq, self.wk = nn.Linear(d, d, bias=bias), nn.Linear(d, d, bias=bias)
        self.wv, self.wo = nn.Linear(d, d, bias=bias), nn.Linear(d, d, bias=bias)
        self.q_norm = make_norm(cfg, cfg.head_dim, attn=True) if cfg.qk_norm else None
        self.k_norm = make_norm(cfg, cfg.head_dim, attn=True) if cfg.qk_norm else None
        if cfg.arch == "llama" and rope is None:
            rope = RotaryEmbedding(cfg.head_dim, cfg.max_seq_len)
        self.rope = rope  # llama only; one table shared by every block of a model
        self.sdpa = CausalSDPA()

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        b, t, d = x.shape
        heads = (b, t, self.n_heads, self.head_dim)
        q = apply_norm(self.q_norm, self.wq(x).view(heads), mask)  # (B, T, H, Dh)
        k = apply_norm(self.k_norm, self.wk(x).view(heads), mask)
        q, k, v = (z.transpose(1, 2) for z in (q, k, self.wv(x).view(heads)))  # (B, H, T, Dh)
        if self.rope is not None:
            q, k = self.rope(q), self.rope(k)
        y = self.sdpa(q, k, v).transpose(1, 2).reshape(b, t, d)
        return self.wo(y)


class MLP(nn.Module):
    """llama: SwiGLU ``w_out(silu(w_gate x) * w_in x)``; gpt2: ``w_out(gelu(w_in x))``."""

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        d, h, bias = cfg.dim, cfg.hidden_dim, cfg.use_bias
        self.w_in = nn.Linear(d, h, bias=bias)
        self.w_gate = nn.Linear(d, h, bias=bias) if cfg.arch == "llama" else None
        self.w_out = nn.Linear(h, d, bias=bias)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        if self.w_gate is None:
            return self.w_out(F.gelu(self.w_in(x), approximate="tanh"))
        return self.w_out(F.silu(self.w_gate(x)) * self.w_in(x))
