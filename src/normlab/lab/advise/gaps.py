"""What a scaled-down twin does not reproduce of a Hugging Face model: one sentence per gap
(attention variants, activations, biases, dropout, dtype, BERT's objective, a vision tower),
read off the model's config by :mod:`normlab.lab.advise.hf_config`'s reader, which it is
handed as ``r`` (``r.get(key)`` -> ``(value, source)``, ``r.cfg``, ``r.top``, ``r.prefix``,
``r.fam``, ``r.model_type``).
"""

from __future__ import annotations

import json
from typing import Any

# The config keys of dropout probabilities, across the families.
_DROPOUTS = ("attention_dropout", "attention_probs_dropout_prob", "hidden_dropout_prob")
_DROPOUTS += ("attn_pdrop", "resid_pdrop", "embd_pdrop", "hidden_dropout", "resid_dropout")


def _num(v: Any) -> str:
    return f"{v:g}" if isinstance(v, int | float) and not isinstance(v, bool) else json.dumps(v)


def gaps(r, s: dict[str, int]) -> list[str]:
    """What the twin does not reproduce of the model that ``r`` (the config reader) reads, one
    sentence each; ``s`` is its sizes."""
    fam, p, out = r.fam, r.prefix, []
    if fam.arch == "llama":
        out += _attention(r, s)
        act, src = r.get("hidden_act", "silu")
        # Gemma's MLP reads hidden_activation, hidden_act only where it is null
        if fam.act_key and r.get(fam.act_key)[0] is not None:
            act, src = r.get(fam.act_key)
        if act != "silu":
            out.append(
                f"{src} = {act}: a gated MLP with that activation; the twin's is SwiGLU (silu)"
            )
        out += _biases(r)
        if r.model_type == "olmo2":
            out.append(
                f"{p}q_norm/k_norm: one RMSNorm over each whole projection (num_heads × "
                f"head_dim = {s['heads'] * s['head_dim']}); the twin's QK-norm is per head "
                f"(over head_dim)"
            )
    else:
        act, src = r.get(fam.act_key or "activation_function")
        if act not in ("gelu_new", "gelu_pytorch_tanh"):
            out.append(f"{src} = {act}: the twin's GPT-2 MLP uses tanh-GELU (gelu_new)")
        for key in ("scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn"):
            if r.cfg.get(key):
                out.append(f"{p}{key} = true: the twin's attention is plain softmax(q·kᵀ/√d)·v")
    drops = [k for k in _DROPOUTS if isinstance(r.cfg.get(k), int | float) and r.cfg[k] > 0]
    if drops:
        vals = ", ".join(f"{p}{key} = {_num(r.cfg[key])}" for key in drops)
        out.append(f"dropout ({vals}): the twin trains without dropout")
    dtype = r.cfg.get("torch_dtype") or r.top.get("torch_dtype")
    if dtype in ("bfloat16", "float16"):
        out.append(
            f"torch_dtype = {dtype}: the twin trains in FP32, where the cast orders "
            "(rms_casting) give the same numbers"
        )
    if fam.masked_lm:
        out += _masked_lm(r)
    if p and "vision_config" in r.top:
        out.append(
            "vision_config: the vision tower and its projector; the twin is the text decoder alone"
        )
    return out


def _masked_lm(r) -> list[str]:
    """What an encoder trained as BERT was has and the lab's decoder has not."""
    types, src = r.get("type_vocab_size")
    return [
        "the masked-LM objective (BERT's pretraining: predict masked tokens from both "
        "sides, with next-sentence prediction): the twin is trained as a causal LM, to "
        "predict the next byte; not reproduced",
        "bidirectional attention (every token sees the whole sequence): the twin's "
        "attention is causal; not reproduced",
        f"token types ({src} = {_num(types)}: segment embeddings added to the input): "
        "the twin has none; not reproduced",
        "embeddings.LayerNorm on the summed embeddings before the first block, and the "
        "MLM head's transform (dense, GELU, LayerNorm): the twin has neither",
    ]


def _attention(r, s: dict[str, int]) -> list[str]:
    p, out = r.prefix, []
    if s["kv_heads"] < s["heads"]:
        out.append(
            f"grouped KV heads: {p}num_key_value_heads = {s['kv_heads']} for "
            f"{s['heads']} query heads; the twin has one K/V head per query head"
        )
    if s["head_dim"] * s["heads"] != s["hidden"]:
        out.append(
            f"{p}head_dim = {s['head_dim']} ≠ hidden_size / num_attention_heads = "
            f"{s['hidden'] // s['heads']}: the twin's heads split its width evenly"
        )
    theta = r.cfg.get("rope_theta")
    if theta is not None and theta != 10000:
        out.append(f"{p}rope_theta = {_num(theta)}: the twin's RoPE base is 10000")
    rs = r.cfg.get("rope_scaling")
    if isinstance(rs, dict) and rs:
        kind = rs.get("rope_type") or rs.get("type") or "?"
        out.append(
            f"{p}rope_scaling ({kind}, factor {_num(rs.get('factor'))}): the twin's "
            "RoPE is unscaled"
        )
    if (local := r.cfg.get("rope_local_base_freq")) is not None:
        out.append(
            f"{p}rope_local_base_freq = {_num(local)}: a second RoPE base for the "
            "sliding-window layers"
        )
    out += _windows(r)
    for key in ("attn_logit_softcapping", "final_logit_softcapping"):
        cap, src = r.get(key)
        if cap is not None:
            what = "attention logits" if key.startswith("attn") else "output logits"
            out.append(
                f"{src} = {_num(cap)}: soft-capping of the {what} "
                "(cap·tanh(x/cap)); the twin does not cap"
            )
    q, src = r.get("query_pre_attn_scalar")
    if q is not None and q != s["head_dim"]:
        out.append(
            f"{src} = {_num(q)}: attention scaled by 1/√{_num(q)}, not by "
            f"1/√head_dim (head_dim = {s['head_dim']})"
        )
    if r.model_type == "phi3":
        prf, src = r.get("partial_rotary_factor", 1.0)
        if prf is not None and prf != 1:
            out.append(
                f"{src} = {_num(prf)}: RoPE on part of each head; the twin rotates all of it"
            )
        out.append(
            "fused qkv_proj and gate_up_proj (one matrix each): the twin has separate "
            "projections (the same function, another parameter layout)"
        )
    return out


def _windows(r) -> list[str]:
    mt = r.model_type
    window, src = r.get("sliding_window")
    if window is None:
        return []
    if mt in ("qwen2", "qwen3") and not r.get("use_sliding_window")[0]:
        return []  # the window is configured but off
    which = ""
    if mt == "gemma2":
        which = " in every other layer"
    elif mt == "gemma3_text":
        types = r.cfg.get("layer_types")
        pattern = r.cfg.get("sliding_window_pattern") or 6
        if isinstance(types, list):
            n = sum(t == "sliding_attention" for t in types)
            which = f" in {n} of {len(types)} layers (layer_types)"
        elif isinstance(pattern, int) and pattern > 1:
            which = f" in {pattern - 1} of every {pattern} layers"
    return [
        f"{src} = {_num(window)}: sliding-window attention{which}; the twin attends to "
        "its whole context"
    ]


def _biases(r) -> list[str]:
    if r.model_type == "qwen2":
        return [
            "q_proj/k_proj/v_proj biases (Qwen2 always has them): the twin's llama-style "
            "projections have none"
        ]
    return [
        f"{r.prefix}{key} = true: biases in those projections; the twin has none"
        for key in ("attention_bias", "mlp_bias")
        if r.cfg.get(key)
    ]
