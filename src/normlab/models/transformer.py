"""A small decoder-only Transformer whose norm kind and norm placement are config fields."""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import Tensor, nn

from normlab.models.config import NORM_SLOTS, TransformerConfig
from normlab.models.deepnorm import deepnorm_constants
from normlab.models.layers import MLP, Attention, RotaryEmbedding, apply_norm, make_norm
from normlab.modules import NORM_MODULES

# Placements that add first and norm the sum: x = N(α·x + F(x)).
_NORM_AFTER_ADD = ("post", "deepnorm")


class Block(nn.Module):
    """One attention + MLP block. ``placement`` is one of

    - post ``x = N(x + F(x))``; pre ``x = x + F(N(x))``;
    - sandwich ``x = x + N_out(F(N_in(x)))``; deepnorm ``x = N(α·x + F(x))``;
    - reorder ``x = x + N(F(x))``: OLMo 2's reordered norm, the norm on each sublayer's output
      inside the residual and none on its input;

    ("mix" is resolved per block by the config); ``alpha`` scales the skip (DeepNorm);
    ``in_scale`` multiplies the output of the norms on the sublayers' inputs (LayerNorm
    Scaling)."""

    def __init__(
        self,
        cfg: TransformerConfig,
        placement: str,
        alpha: float = 1.0,
        rope: RotaryEmbedding | None = None,
        in_scale: float = 1.0,
    ):
        super().__init__()
        if placement not in NORM_SLOTS:
            raise ValueError(f"placement must be one of {tuple(NORM_SLOTS)}, got {placement!r}")
        self.placement, self.alpha, self.in_scale = placement, float(alpha), float(in_scale)
        self.norm_after_add = placement in _NORM_AFTER_ADD
        has_in, has_out = NORM_SLOTS[placement]
        self.attn_norm_in = make_norm(cfg, cfg.dim, attn=True) if has_in else None
        self.attn_norm_out = make_norm(cfg, cfg.dim, attn=True) if has_out else None
        self.mlp_norm_in = make_norm(cfg, cfg.dim) if has_in else None
        self.mlp_norm_out = make_norm(cfg, cfg.dim) if has_out else None
        self.attn = Attention(cfg, rope)
        self.mlp = MLP(cfg)
        # Probes: called as (is_attn, skip, added) by each sublayer, where skip + added is the
        # sum the stream (or the post norm) receives.
        self.on_branch = None

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        x = self._sublayer(x, self.attn, self.attn_norm_in, self.attn_norm_out, mask)
        return self._sublayer(x, self.mlp, self.mlp_norm_in, self.mlp_norm_out, mask)

    def _sublayer(self, x, branch, norm_in, norm_out, mask) -> Tensor:
        if self.norm_after_add:  # post, deepnorm: x = N(α·x + F(x)), the add fused into N
            skip = x if self.alpha == 1.0 else self.alpha * x
            f = branch(x, mask)
            if self.on_branch is not None:
                self.on_branch(branch is self.attn, skip, f)
            return apply_norm(norm_out, f, mask, residual=skip)
        # pre: x + F(N(x)) (norm_out is None); sandwich: x + N_out(F(N_in(x)));
        # reorder: x + N_out(F(x)) (norm_in is None, so h is x)
        h = apply_norm(norm_in, x, mask)
        if self.in_scale != 1.0:
            h = h * self.in_scale
        f = apply_norm(norm_out, branch(h, mask), mask)
        if self.on_branch is not None:
            self.on_branch(branch is self.attn, x, f)
        return x + f

    def extra_repr(self) -> str:
        scale = f", in_scale={self.in_scale:.4g}" if self.in_scale != 1.0 else ""
        return f"placement={self.placement!r}, alpha={self.alpha:.4g}{scale}"


class Transformer(nn.Module):
    """Decoder-only language model: embeddings, ``n_layers`` blocks, optional final norm, head.

    ``forward(tokens, mask=None)`` maps (B, T) token ids to (B, T, vocab) logits. ``mask``
    (bool (B, T), True = real token) only keeps padding out of BatchNorm's statistics; attention
    is causal, so with right padding real tokens never attend to padding anyway.
    """

    def __init__(self, config: TransformerConfig):
        super().__init__()
        if not isinstance(config, TransformerConfig):
            raise TypeError(f"config must be a TransformerConfig, got {type(config).__name__}")
        self.config = cfg = config
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.dim)
        # DyT's LLaMA recipe: a learnable scalar on the embeddings, initialized to √dim.
        self.embed_scale = nn.Parameter(torch.empty(())) if cfg.learn_embed_scale else None
        self.pos_emb = nn.Embedding(cfg.max_seq_len, cfg.dim) if cfg.arch == "gpt2" else None
        alpha, self.deepnorm_beta = (
            deepnorm_constants(cfg.n_layers) if cfg.placement == "deepnorm" else (1.0, 1.0)
        )
        if cfg.deepnorm_alpha is not None:  # an ablation of α: β's init kept
            alpha = float(cfg.deepnorm_alpha)
        rope = RotaryEmbedding(cfg.head_dim, cfg.max_seq_len) if cfg.arch == "llama" else None
        scale = (lambda i: (i + 1) ** -0.5) if cfg.depth_scaled_norm else (lambda i: 1.0)
        self.blocks = nn.ModuleList(
            Block(cfg, cfg.block_placement(i), alpha, rope, scale(i)) for i in range(cfg.n_layers)
        )
        self.norm = make_norm(cfg, cfg.dim) if cfg.has_final_norm else None
        self.lm_head = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.tok_emb.weight
        self.init_weights()

    # ---- init

    @torch.no_grad()
    def init_weights(self) -> None:
        """(Re)initialize every weight per ``config.init``, then apply DeepNorm's β scaling.

        Norm parameters keep their modules' identity init (weight 1, bias 0, ...).
        """
        init = self.config.init
        for m in self.modules():
            if m is self.lm_head and self.config.tie_embeddings:
                continue  # shares tok_emb's weight, which the embedding branch initializes
            if isinstance(m, nn.Linear):
                if init == "default":
                    m.reset_parameters()
                    continue
                if init == "xavier":
                    nn.init.xavier_normal_(m.weight)
                else:
                    nn.init.normal_(m.weight, std=self.config.init_std)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Embedding):
                if init == "default":
                    m.reset_parameters()
                else:  # xavier: rows of unit norm (std d^-½, as fairseq); normal: init_std
                    std = self.config.dim**-0.5 if init == "xavier" else self.config.init_std
                    nn.init.normal_(m.weight, std=std)
            elif isinstance(m, NORM_MODULES) and hasattr(m, "reset_parameters"):
                m.reset_parameters()
        if self.embed_scale is not None:
            self.embed_scale.fill_(self.config.dim**0.5)
        scale = self.config.branch_init_scale
        if scale != 1.0:
            for block in self.blocks:
                block.attn.wo.weight.mul_(scale)
                block.mlp.w_out.weight.mul_(scale)
        if self.config.placement == "deepnorm":
            # DeepNet: gain β on v, the attention output and the MLP; q and k keep gain 1.
            for block in self.blocks:
                for lin in self._deepnorm_scaled(block):
                    lin.weight.mul_(self.deepnorm_beta)

    @staticmethod
    def _deepnorm_scaled(block: Block) -> list[nn.Linear]:
        mlp = [m for m in (block.mlp.w_in, block.mlp.w_gate, block.mlp.w_out) if m is not None]
        return [block.attn.wv, block.attn.wo, *mlp]

    # ---- forward

    def forward(self, tokens: Tensor, *, mask: Tensor | None = None) -> Tensor:
        self._check_inputs(tokens, mask)
        x = self.tok_emb(tokens)  # (B, T, D)
        if self.config.scale_embeddings:  # Gemma: the stream starts at RMS ~1 from small rows
            x = x * self.config.dim**0.5
        if self.embed_scale is not None:
            x = x * self.embed_scale
        if self.pos_emb is not None:
            x = x + self.pos_emb(torch.arange(tokens.shape[1], device=tokens.device))
        for block in self.blocks:
            x = block(x, mask)
        return self.lm_head(apply_norm(self.norm, x, mask))  # (B, T, V)

    def _check_inputs(self, tokens: Tensor, mask: Tensor | None) -> None:
        if not isinstance(tokens, Tensor) or tokens.dtype not in (torch.long, torch.int):
            raise TypeError("tokens must be an int64/int32 tensor of token ids, shape (B, T)")
        if tokens.dim() != 2:
            raise ValueError(f"tokens must have shape (B, T), got {tuple(tokens.shape)}")
        if tokens.shape[1] > self.config.max_seq_len:
            raise ValueError(
                f"sequence length {tokens.shape[1]} exceeds max_seq_len={self.config.max_seq_len}"
            )
        if mask is not None:
            if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
                raise TypeError("mask must be a bool tensor (True marks real tokens)")
            if mask.shape != tokens.shape:
                want, got = tuple(tokens.shape), tuple(mask.shape)
                raise ValueError(f"mask must have the shape of tokens {want}, got {got}")

    # ---- introspection for the lab

    def num_params(self, exclude_embeddings: bool = False) -> int:
        """Parameter count (shared tensors counted once); optionally without the embeddings."""
        params = {id(p): p for p in self.parameters()}
        if exclude_embeddings:
            for emb in (self.tok_emb, self.pos_emb):
                if emb is not None:
                    params.pop(id(emb.weight), None)
        return sum(p.numel() for p in params.values())

    def named_norm_modules(self) -> Iterator[tuple[str, nn.Module]]:
        """``(name, module)`` for every normlab norm in the model (qk norms included)."""
        for name, m in self.named_modules():
            if isinstance(m, NORM_MODULES):
                yield name, m

    def norm_modules(self) -> Iterator[nn.Module]:
        """Every normlab norm module in the model, e.g. to time them with forward hooks."""
        for _, m in self.named_norm_modules():
            yield m

    def extra_repr(self) -> str:
        c = self.config
        return (
            f"arch={c.arch!r}, norm={c.norm!r}, placement={c.placement!r}, "
            f"params={self.num_params() / 1e6:.3g}M, init={c.init!r}"
        )
