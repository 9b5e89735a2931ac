"""A lab model (``normlab.models.Transformer``, ``arch="llama"``) written as a Hugging Face
``LlamaForCausalLM`` directory: what ``normlab.hf.export`` does.

What the model must be is the Llama row of :mod:`normlab.hf.families`; ``transformers`` is
imported only when :func:`export` is called.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import torch
from torch import nn

from normlab.hf.families import FAMILIES

__all__ = ["export", "llama_state_dict"]


def export(model: nn.Module, path: str | Path, **save_kwargs) -> Path:
    """Write ``model`` (a :class:`normlab.models.Transformer` with ``arch="llama"``) to the
    directory ``path`` as a ``LlamaForCausalLM`` (``config.json`` + ``model.safetensors``, by
    ``save_pretrained(path, **save_kwargs)``), in the model's dtype; returns the path.

    A ``ValueError`` names every field ``LlamaForCausalLM`` cannot express (placement other than
    "pre", a norm other than rmsnorm, QK-norm, Gemma's offset or cast order, ...).
    """
    from normlab.models import Transformer

    if not isinstance(model, Transformer):
        raise TypeError(f"model must be a normlab.models.Transformer, got {type(model).__name__}")
    cfg = model.config
    problems = _llama_problems(cfg)
    if problems:
        raise ValueError("LlamaForCausalLM cannot express this model: " + "; ".join(problems))
    tf = importlib.import_module("transformers")
    fam = FAMILIES["llama"]
    dtype = model.tok_emb.weight.dtype
    # The sizes under the config keys the family table names (normlab advise reads them by it).
    sizes = {
        "hidden": cfg.dim,
        "layers": cfg.n_layers,
        "heads": cfg.n_heads,
        "ffn": cfg.hidden_dim,
        "positions": cfg.max_seq_len,
        "eps": fam.eps_default if cfg.eps is None else cfg.eps,
    }
    hf_cfg = getattr(tf, fam.config_class)(
        **{fam.keys[role]: value for role, value in sizes.items()},
        vocab_size=cfg.vocab_size,
        num_key_value_heads=cfg.n_heads,
        head_dim=cfg.head_dim,
        hidden_act="silu",
        attention_bias=cfg.use_bias,
        mlp_bias=cfg.use_bias,
        tie_word_embeddings=cfg.tie_embeddings,
        bos_token_id=None,
        eos_token_id=None,
    )
    rope = getattr(hf_cfg, "rope_parameters", None) or {}
    theta = rope.get("rope_theta", getattr(hf_cfg, "rope_theta", None))
    if theta != 10000.0:
        raise RuntimeError(f"transformers' LlamaConfig gave RoPE base {theta}, not 10000")
    hf = tf.LlamaForCausalLM(hf_cfg).to(dtype=dtype, device=model.tok_emb.weight.device)
    hf.load_state_dict(llama_state_dict(model), strict=True)
    hf.save_pretrained(path, **save_kwargs)
    return Path(path)


def _llama_problems(cfg) -> list[str]:
    """What in ``cfg`` (a ``TransformerConfig``) the Llama row of the family table does not have."""
    fam = FAMILIES["llama"]
    checks = [
        (cfg.arch != fam.arch, f'arch={cfg.arch!r} (needs "{fam.arch}": RoPE, SwiGLU)'),
        (cfg.norm != fam.norm, f'norm={cfg.norm!r} (needs "{fam.norm}")'),
        (cfg.placement != fam.placement, f'placement={cfg.placement!r} (needs "{fam.placement}")'),
        (not cfg.final_norm, "final_norm=False (LlamaModel always norms before the head)"),
        (cfg.qk_norm != fam.qk_norm, "qk_norm=True (Llama has no q/k norm)"),
        (cfg.depth_scaled_norm, "depth_scaled_norm=True"),
        (cfg.norm_offset != fam.offset, f"norm_offset={cfg.norm_offset:g} (Llama's gain is w)"),
        (
            cfg.casting != fam.casting,
            f'rms_casting={cfg.casting!r} ({fam.norm_class}\'s is "{fam.casting}")',
        ),
        (
            cfg.scale_embeddings != fam.scale_embeddings,
            "scale_embeddings=True (Llama's embeddings are unscaled)",
        ),
    ]
    return [why for bad, why in checks if bad]


# lab name -> HF name, per block
_LLAMA_BLOCK = {
    "attn_norm_in": "input_layernorm",
    "mlp_norm_in": "post_attention_layernorm",
    "attn.wq": "self_attn.q_proj",
    "attn.wk": "self_attn.k_proj",
    "attn.wv": "self_attn.v_proj",
    "attn.wo": "self_attn.o_proj",
    "mlp.w_gate": "mlp.gate_proj",
    "mlp.w_in": "mlp.up_proj",
    "mlp.w_out": "mlp.down_proj",
}


def llama_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The ``state_dict`` of an exportable lab model under ``LlamaForCausalLM``'s names."""
    out = {}
    for name, tensor in model.state_dict().items():
        head, _, leaf = name.rpartition(".")
        if head == "tok_emb":
            out[f"model.embed_tokens.{leaf}"] = tensor
        elif head == "norm":
            out[f"model.norm.{leaf}"] = tensor
        elif head == "lm_head":
            out[f"lm_head.{leaf}"] = tensor
        else:
            _, i, sub = head.split(".", 2)  # blocks.<i>.<sub>
            out[f"model.layers.{i}.{_LLAMA_BLOCK[sub]}.{leaf}"] = tensor
    return out
