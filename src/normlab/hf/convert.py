"""Lossless conversion of Pre-LN LayerNorm Transformers to Pre-RMSNorm (Jiang et al. 2023).

In a Pre-LN model the residual stream is only ever read through a LayerNorm, and LayerNorm
ignores the mean of its input. So the mean can be removed from everything written into the
stream: re-center the rows of the embedding tables and the outputs of every projection that
adds into the stream, and the stream is zero-mean at every layer. On zero-mean ``x``

    LayerNorm(x) = γ ⊙ x / sqrt(mean(x²) + eps) + β = γ ⊙ RMSNorm(x) + β,

with eps in the same place. γ and β then fold into the linear layer(s) reading the norm's
output (``W·(γ⊙n + β) + b = (W·diag γ)·n + (W·β + b)``), and the LayerNorm becomes a weightless
RMSNorm. The logits are unchanged up to rounding; each norm no longer computes a mean.

What changes besides the norms:

- a tied LM head is untied: the head reads the *original* embedding (times γ of the final norm,
  plus a new bias ``W·β``) while the input embedding is re-centered, so they differ;
- the intermediate hidden states are those of the original minus their mean;
- ``inputs_embeds`` passed by hand must be re-centered by the caller;
- dropout on a branch breaks the zero mean, so equality holds in ``eval()`` (or without
  dropout); fine-tuning with dropout trains a model that is no longer the same function class.

The HF conversion keeps the model's class: its ``from_pretrained`` cannot rebuild the converted
model (norms without weights, a head with a bias); save it with ``torch.save`` or
``state_dict``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from normlab.kernels import registry
from normlab.modules import LayerNorm, RMSNorm


@dataclass
class _Plan:
    """Where the residual stream is written and read in one model."""

    embeddings: list[nn.Parameter] = field(default_factory=list)  # (rows, D) tables
    writers: list[nn.Module] = field(default_factory=list)  # projections added into the stream
    # (owner, attribute of the LayerNorm, linear layers that read its output)
    norms: list[tuple[nn.Module, str, list[nn.Module]]] = field(default_factory=list)
    finish: Callable[[], None] = lambda: None  # record the untied head in the model's config


def preln_to_rmsnorm(model: nn.Module, *, backend: str = "auto") -> nn.Module:
    """Convert a Pre-LN LayerNorm model to an equivalent Pre-RMSNorm one, in place.

    Supported: ``transformers.GPT2LMHeadModel`` and ``normlab.models.Transformer`` with
    ``norm="layernorm", placement="pre"`` and a final norm. The new norms are
    ``normlab.RMSNorm(elementwise_affine=False)`` with the LayerNorms' eps, on ``backend``.
    Returns ``model``.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if backend not in registry.KNOWN:
        raise ValueError(f"backend must be one of {registry.names()}, got {backend!r}")
    plan = _plan(model)
    _check(plan)  # before the first write: a rejected model is left as it was
    with torch.no_grad():
        _untie_readers(plan)
        for owner, attr, readers in plan.norms:
            ln = getattr(owner, attr)
            for reader in readers:
                _fold_norm(ln, reader)
            setattr(owner, attr, _rmsnorm_like(ln, backend))
        for table in plan.embeddings:
            table.sub_(table.mean(-1, keepdim=True, dtype=torch.float64).to(table.dtype))
        for writer in plan.writers:
            _center_outputs(writer)
    plan.finish()
    return model


# ---------------------------------------------------------------------------------------------
# per-architecture plans


def _plan(model: nn.Module) -> _Plan:
    name = type(model).__name__
    if name == "Transformer" and type(model).__module__.startswith("normlab."):
        return _plan_normlab(model)
    if name == "GPT2LMHeadModel":
        return _plan_gpt2(model)
    raise TypeError(
        f"preln_to_rmsnorm supports transformers' GPT2LMHeadModel and normlab.models.Transformer "
        f"(norm='layernorm', placement='pre'), got {name}"
    )


def _plan_gpt2(model: nn.Module) -> _Plan:
    cfg, t = model.config, model.transformer
    if getattr(cfg, "add_cross_attention", False):
        raise ValueError("GPT-2 with cross-attention is not supported (add_cross_attention=True)")
    plan = _Plan(embeddings=[t.wte.weight, t.wpe.weight])
    for block in t.h:
        plan.writers += [block.attn.c_proj, block.mlp.c_proj]
        plan.norms += [(block, "ln_1", [block.attn.c_attn]), (block, "ln_2", [block.mlp.c_fc])]
    plan.norms.append((t, "ln_f", [model.lm_head]))

    def finish() -> None:
        cfg.tie_word_embeddings = False  # the head is untied; keep HF from re-tying it

    plan.finish = finish
    return plan


def _plan_normlab(model: nn.Module) -> _Plan:
    cfg = model.config
    if cfg.norm != "layernorm" or cfg.placement != "pre":
        raise ValueError(
            f"only norm='layernorm', placement='pre' models convert, got norm={cfg.norm!r}, "
            f"placement={cfg.placement!r}"
        )
    if model.norm is None:
        # The head would read the stream's mean directly, which the conversion removes.
        raise ValueError("a model without a final norm (final_norm=False) cannot be converted")
    plan = _Plan(embeddings=[e.weight for e in (model.tok_emb, model.pos_emb) if e is not None])
    for block in model.blocks:
        attn, mlp = block.attn, block.mlp
        plan.writers += [attn.wo, mlp.w_out]
        mlp_in = [mlp.w_in] + ([mlp.w_gate] if mlp.w_gate is not None else [])
        plan.norms += [
            (block, "attn_norm_in", [attn.wq, attn.wk, attn.wv]),
            (block, "mlp_norm_in", mlp_in),
        ]
    plan.norms.append((model, "norm", [model.lm_head]))

    def finish() -> None:
        # The config keeps describing the original architecture, except for the untied head.
        model.config = dataclasses.replace(cfg, tie_embeddings=False)

    plan.finish = finish
    return plan


# ---------------------------------------------------------------------------------------------
# the three rewrites


def _check(plan: _Plan) -> None:
    for owner, attr, readers in plan.norms:
        ln = getattr(owner, attr)
        if not isinstance(ln, (nn.LayerNorm, LayerNorm)):
            raise TypeError(
                f"expected a LayerNorm at {attr}, got {type(ln).__name__}; is the model Pre-LN "
                "and not converted already?"
            )
        for layer in readers:
            _weight_out_in(layer)
    for layer in plan.writers:
        _weight_out_in(layer)


def _weight_out_in(layer: nn.Module) -> Tensor:
    """The layer's weight as an (out, in) view: ``nn.Linear`` as stored, HF's ``Conv1D``
    (GPT-2, stored (in, out)) transposed. Writing into the view writes the parameter."""
    if isinstance(layer, nn.Linear):
        return layer.weight
    if type(layer).__name__ == "Conv1D" and hasattr(layer, "nf"):
        return layer.weight.t()
    raise TypeError(f"expected nn.Linear or transformers' Conv1D, got {type(layer).__name__}")


def _untie_readers(plan: _Plan) -> None:
    # A head tied to an embedding must keep reading the original table, and γ folds into it.
    tables = {id(p) for p in plan.embeddings}
    for _, _, readers in plan.norms:
        for layer in readers:
            if id(layer.weight) in tables:
                layer.weight = nn.Parameter(layer.weight.detach().clone())


def _fold_norm(ln: nn.Module, layer: nn.Module) -> None:
    """``layer(γ⊙n + β) == layer'(n)``: W' = W·diag(γ), b' = b + W·β (FP64, rounded once)."""
    w = _weight_out_in(layer)  # (out, in)
    w64 = w.double()
    if ln.bias is not None:
        b64 = w64 @ ln.bias.double()  # (out,)
        if layer.bias is not None:
            layer.bias.copy_(layer.bias.double() + b64)
        else:
            layer.bias = nn.Parameter(b64.to(w.dtype))
    if ln.weight is not None:
        w.copy_(w64 * ln.weight.double())


def _center_outputs(layer: nn.Module) -> None:
    """Subtract the mean over the output features from the layer's weight rows and bias."""
    w = _weight_out_in(layer)  # (out=D, in)
    w.sub_(w.mean(0, keepdim=True, dtype=torch.float64).to(w.dtype))
    if layer.bias is not None:
        layer.bias.sub_(layer.bias.mean(dtype=torch.float64).to(layer.bias.dtype))


def _rmsnorm_like(ln: nn.Module, backend: str) -> RMSNorm:
    # No weight, so "gemma" and "llama" cast orders are the same math; "gemma" is also what
    # backend="torch" (F.rms_norm) implements.
    return RMSNorm(
        ln.normalized_shape,
        eps=ln.eps,
        elementwise_affine=False,
        casting="gemma",
        backend=backend,
    ).train(ln.training)
