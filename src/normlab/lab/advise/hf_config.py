"""A Hugging Face model's ``config.json`` (a decoder, or BERT), read as plain JSON (no
``transformers``): what it fixes about normalization, in normlab's terms (``TransformerConfig``
fields, each with the config key it came from), its sizes, and what normlab's model does not
reproduce.

A key the file leaves out takes the default of the ``transformers`` config class that
``model_type`` names (the field's source then says so, e.g. "rms_norm_eps (absent:
Gemma3TextConfig's default)"), since that is the value the real model runs with.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from normlab.lab.common import UsageError

_LLAMA_KEYS = {
    "hidden": "hidden_size",
    "layers": "num_hidden_layers",
    "heads": "num_attention_heads",
    "ffn": "intermediate_size",
    "positions": "max_position_embeddings",
    "eps": "rms_norm_eps",
}
_BERT_KEYS = {**_LLAMA_KEYS, "eps": "layer_norm_eps"}
_GPT2_KEYS = {
    "hidden": "n_embd",
    "layers": "n_layer",
    "heads": "n_head",
    "ffn": "n_inner",
    "positions": "n_positions",
    "eps": "layer_norm_epsilon",
}


@dataclass(frozen=True)
class Family:
    """What a ``model_type`` fixes, as its modeling code in ``transformers`` has it."""

    name: str
    hf_class: str  # the config class whose defaults fill the keys a file leaves out
    norm_class: str  # the norm module of the modeling code
    norm: str = "rmsnorm"
    placement: str = "pre"
    qk_norm: bool = False
    gemma: bool = False  # (1 + w) RMSNorm in Gemma's cast order, embeddings × √hidden_size
    fp32_gain: bool = False  # RMSNorm's × w in FP32 before the cast (Gemma's cast order, no offset)
    masked_lm: bool = False  # an encoder trained to fill in masked tokens (BERT)
    act_key: str = ""  # the config key of the MLP activation ("" = the arch's usual one)
    tie_default: bool = False
    eps_default: float = 1e-6
    defaults: dict[str, Any] = field(default_factory=dict)  # the other class defaults read here
    keys: dict[str, str] = field(default_factory=lambda: dict(_LLAMA_KEYS))

    @property
    def arch(self) -> str:
        return "gpt2" if self.norm == "layernorm" else "llama"


_QWEN = {"use_sliding_window": False, "sliding_window": 4096}
_GEMMA = {"hidden_activation": "gelu_pytorch_tanh", "head_dim": 256, "num_key_value_heads": 16}
_GEMMA3 = {
    **_GEMMA,
    "sliding_window": 4096,
    "query_pre_attn_scalar": 256,
    # The multimodal configs give only some of their text_config's keys; these fill the rest.
    "hidden_size": 2304,
    "num_hidden_layers": 26,
    "intermediate_size": 9216,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "vocab_size": 262208,
    "max_position_embeddings": 131072,
}
_GEMMA2 = {
    **_GEMMA,
    "attn_logit_softcapping": 50.0,
    "final_logit_softcapping": 30.0,
    "sliding_window": 4096,
    "query_pre_attn_scalar": 256,
}
_PLACEMENT_SOURCES = {
    "pre": "one norm on each sublayer's input",
    "sandwich": "a norm before and after each sublayer (input_layernorm/post_attention_"
    "layernorm, pre_/post_feedforward_layernorm)",
    "reorder": "a norm on each sublayer's output inside the residual, x + N(F(x)) "
    "(post_attention_layernorm, post_feedforward_layernorm), none on its input",
    "post": "a norm after each residual add, N(x + F(x)) (attention.output.LayerNorm, "
    "output.LayerNorm)",
}
_FINAL_NORM_SOURCES = {
    "llama": "model.norm before the head",
    "gpt2": "ln_f before the head",
    "bert": "none before the head (each Post-LN block ends in a norm); the twin's Pre-LN "
    "arms get one",
}
FAMILIES: dict[str, Family] = {
    "llama": Family("Llama", "LlamaConfig", "LlamaRMSNorm"),
    "mistral": Family(
        "Mistral",
        "MistralConfig",
        "MistralRMSNorm",
        defaults={"sliding_window": 4096, "num_key_value_heads": 8},
    ),
    "qwen2": Family("Qwen2", "Qwen2Config", "Qwen2RMSNorm", defaults=_QWEN),
    "qwen3": Family(
        "Qwen3", "Qwen3Config", "Qwen3RMSNorm", qk_norm=True, defaults={**_QWEN, "head_dim": 128}
    ),
    "gemma": Family(
        "Gemma", "GemmaConfig", "GemmaRMSNorm", gemma=True, tie_default=True, defaults=_GEMMA
    ),
    "gemma2": Family(
        "Gemma 2",
        "Gemma2Config",
        "Gemma2RMSNorm",
        placement="sandwich",
        gemma=True,
        tie_default=True,
        defaults=_GEMMA2,
    ),
    "gemma3_text": Family(
        "Gemma 3",
        "Gemma3TextConfig",
        "Gemma3RMSNorm",
        placement="sandwich",
        qk_norm=True,
        gemma=True,
        tie_default=True,
        defaults=_GEMMA3,
    ),
    "phi3": Family(
        "Phi-3",
        "Phi3Config",
        "Phi3RMSNorm",
        eps_default=1e-5,
        defaults={"partial_rotary_factor": 1.0},
    ),
    "olmo2": Family(
        "OLMo 2",
        "Olmo2Config",
        "Olmo2RMSNorm",
        placement="reorder",
        qk_norm=True,
        fp32_gain=True,
        defaults={"num_key_value_heads": None, "rope_theta": 10000.0},
    ),
    "bert": Family(
        "BERT",
        "BertConfig",
        "nn.LayerNorm",
        norm="layernorm",
        placement="post",
        masked_lm=True,
        tie_default=True,
        eps_default=1e-12,
        act_key="hidden_act",
        defaults={"hidden_act": "gelu", "type_vocab_size": 2},
        keys=dict(_BERT_KEYS),
    ),
    "gpt2": Family(
        "GPT-2",
        "GPT2Config",
        "nn.LayerNorm",
        norm="layernorm",
        tie_default=True,
        eps_default=1e-5,
        defaults={"activation_function": "gelu_new"},
        keys=dict(_GPT2_KEYS),
    ),
}
# gemma3 is the multimodal Gemma 3: its decoder is a gemma3_text config under "text_config".
SUPPORTED = (*FAMILIES, "gemma3")


@dataclass
class HFModel:
    """A decoder config as normlab reads it."""

    name: str  # the file's name, for the report
    model_type: str
    family: Family
    sizes: dict[str, int]  # hidden, layers, heads, kv_heads, head_dim, ffn, vocab, positions
    recipe: dict[str, tuple[Any, str]]  # TransformerConfig field -> (value, where it came from)
    gaps: list[str]  # what normlab's model does not reproduce, one sentence each

    def params(self, embeddings: bool = True) -> int:
        """The real model's parameter count from its sizes (norms and biases left out)."""
        s, gated = self.sizes, self.family.arch == "llama"
        h, hd = s["hidden"], s["head_dim"]
        attn = h * hd * (2 * s["heads"] + 2 * s["kv_heads"])
        mlp = (3 if gated else 2) * h * s["ffn"]
        n = s["layers"] * (attn + mlp)
        if embeddings:
            tied = self.recipe["tie_embeddings"][0]
            n += s["vocab"] * h * (1 if tied else 2)
            if self.family.arch == "gpt2":
                n += s["positions"] * h
        return n


def read(path: str | Path) -> HFModel:
    """Read ``path``; an unreadable file, bad JSON or an unsupported model is a UsageError."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text("utf-8"))
    except FileNotFoundError:
        raise UsageError(f"--hf-config {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"--hf-config {path}: cannot read it ({e})") from None
    except json.JSONDecodeError as e:
        raise UsageError(f"--hf-config {path}: not valid JSON ({e})") from None
    if not isinstance(doc, dict):
        raise UsageError(f"--hf-config {path}: expected a JSON object (a config.json)")
    return from_dict(doc, p.name, where=f"--hf-config {path}")


def from_dict(doc: dict[str, Any], name: str = "config.json", *, where: str = "") -> HFModel:
    """The ``HFModel`` of a parsed config; ``where`` starts the messages of its errors."""
    where = where or name
    model_type = doc.get("model_type")
    prefix, cfg = "", doc
    if model_type == "gemma3":
        cfg = doc.get("text_config")
        if not isinstance(cfg, dict):
            raise UsageError(f"{where}: model_type gemma3 without a text_config object")
        prefix, model_type = "text_config.", "gemma3_text"
    if model_type not in FAMILIES:
        raise UsageError(
            f"{where}: model_type {json.dumps(model_type)} is not supported; "
            f"supported: {', '.join(SUPPORTED)}"
        )
    return _Reader(name, where, model_type, cfg, doc, prefix).model()


def _num(v: Any) -> str:
    return f"{v:g}" if isinstance(v, int | float) and not isinstance(v, bool) else json.dumps(v)


class _Reader:
    def __init__(self, name, where, model_type: str, cfg: dict, top: dict, prefix: str):
        self.name, self.where, self.model_type = name, where, model_type
        self.cfg, self.top, self.prefix, self.fam = cfg, top, prefix, FAMILIES[model_type]

    def get(self, key: str, default: Any = None) -> tuple[Any, str]:
        """(value, source) of ``key``: the file's (an explicit null included: "no sliding
        window" is written so), else the class default."""
        if key in self.cfg:
            return self.cfg[key], self.prefix + key
        if self.prefix and key in self.top:
            return self.top[key], key
        default = self.fam.defaults.get(key, default)
        return default, f"{self.prefix}{key} (absent: {self.fam.hf_class}'s default)"

    def positive(self, key: str, default: Any = None) -> tuple[int, str]:
        v, src = self.get(key, default)
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            got = "missing" if v is None else f"got {json.dumps(v)}"
            raise UsageError(f"{self.where}: {self.prefix}{key}: expected a positive int ({got})")
        return v, src

    def model(self) -> HFModel:
        fam, mt, k = self.fam, self.model_type, self.fam.keys
        (hidden, _), (layers, _) = self.positive(k["hidden"]), self.positive(k["layers"])
        heads, _ = self.positive(k["heads"])
        vocab, _ = self.positive("vocab_size")
        ffn, ffn_src = self.get(k["ffn"])
        if ffn is None and fam.arch == "gpt2":  # GPT-2's n_inner = null means 4 × n_embd
            ffn, ffn_src = 4 * hidden, f"{ffn_src} = null: 4 × {k['hidden']}"
        else:
            ffn, ffn_src = self.positive(k["ffn"])
            ffn_src = f"{ffn_src} / {self.prefix}{k['hidden']} = {ffn} / {hidden}"
        kv = self.get("num_key_value_heads")[0] or heads  # null: one K/V head per query head
        head_dim = self.get("head_dim")[0] or hidden // heads
        positions = self.get(k["positions"])[0] or 0
        sizes = {
            "hidden": hidden,
            "layers": layers,
            "heads": heads,
            "kv_heads": kv,
            "head_dim": head_dim,
            "ffn": ffn,
            "vocab": vocab,
            "positions": positions,
        }
        tie, tie_src = self.get("tie_word_embeddings", fam.tie_default)
        eps, eps_src = self.get(k["eps"], fam.eps_default)
        if isinstance(eps, bool) or not isinstance(eps, int | float) or not eps >= 0:
            raise UsageError(
                f"{self.where}: {eps_src}: expected a number >= 0, got {json.dumps(eps)}"
            )
        on = f"model_type {mt}: "
        norm_src = on + fam.norm_class
        recipe: dict[str, tuple[Any, str]] = {
            "arch": (
                fam.arch,
                on
                + (
                    "learned positions, GELU MLP, biases"
                    if fam.arch == "gpt2"
                    else "RoPE, gated MLP, no biases"
                ),
            ),
            "norm": (fam.norm, norm_src),
            "placement": (
                fam.placement,
                on + _PLACEMENT_SOURCES[fam.placement],
            ),
            "qk_norm": (
                fam.qk_norm,
                on
                + (
                    (
                        "q_norm/k_norm over the q/k projections"
                        if mt == "olmo2"
                        else "q_norm/k_norm over head_dim"
                    )
                    if fam.qk_norm
                    else "no q/k norm"
                ),
            ),  # fmt: skip
            "final_norm": (True, on + _FINAL_NORM_SOURCES.get(mt, _FINAL_NORM_SOURCES[fam.arch])),
            "eps": (float(eps), eps_src),
        }
        if fam.norm == "rmsnorm":
            recipe["rms_casting"] = (
                "gemma" if fam.gemma or fam.fp32_gain else "llama",
                norm_src
                + (
                    ": (1 + w) applied in FP32, then cast"
                    if fam.gemma
                    else ": normalised and × w in FP32, then cast"
                    if fam.fp32_gain
                    else ": normalised in FP32, cast to the input dtype, then × w"
                ),
            )
            recipe["norm_offset"] = (
                1.0 if fam.gemma else 0.0,
                norm_src
                + (
                    ": output × (1 + weight), the weight stored around 0"
                    if fam.gemma
                    else ": output × weight"
                ),
            )
        recipe["scale_embeddings"] = (
            fam.gemma,
            on + ("embeddings × √hidden_size" if fam.gemma else "embeddings unscaled"),
        )
        recipe["tie_embeddings"] = (bool(tie), tie_src)
        recipe["mlp_ratio"] = (ffn / hidden, ffn_src)
        recipe.update(self.init())
        return HFModel(self.name, mt, fam, sizes, recipe, self.gaps(sizes))

    def init(self) -> dict[str, tuple[Any, str]]:
        """The family's ``_init_weights``: every linear and embedding N(0, initializer_range),
        biases 0; GPT-2 also scales its residual projections (c_proj) by 1/√(2·n_layer)."""
        std, src = self.get("initializer_range", 0.02)
        if isinstance(std, bool) or not isinstance(std, int | float) or not std > 0:
            raise UsageError(f"{self.where}: {src}: expected a number > 0, got {json.dumps(std)}")
        how = f"model_type {self.model_type}: transformers' _init_weights"
        gpt2 = self.fam.arch == "gpt2"
        return {
            "init": ("normal", f"{how}: linears and embeddings N(0, initializer_range)"),
            "init_std": (float(std), src),
            "scale_branch_init": (
                gpt2,
                f"{how}: "
                + (
                    "c_proj (attention and MLP outputs) × 1/√(2·n_layer)"
                    if gpt2
                    else "no residual-projection scaling"
                ),
            ),
        }

    # ---- what the twin does not reproduce

    def gaps(self, s: dict[str, int]) -> list[str]:
        fam, p, out = self.fam, self.prefix, []
        if fam.arch == "llama":
            out += self._attention(s)
            act, src = self.get("hidden_act", "silu")
            if fam.gemma:  # Gemma's MLP reads hidden_activation, hidden_act only where it is null
                act2, src2 = self.get("hidden_activation")
                act, src = (act2, src2) if act2 is not None else (act, src)
            if act != "silu":
                out.append(
                    f"{src} = {act}: a gated MLP with that activation; the twin's is SwiGLU (silu)"
                )
            out += self._biases()
            if self.model_type == "olmo2":
                out.append(
                    f"{p}q_norm/k_norm: one RMSNorm over each whole projection (num_heads × "
                    f"head_dim = {s['heads'] * s['head_dim']}); the twin's QK-norm is per head "
                    f"(over head_dim)"
                )
        else:
            act, src = self.get(fam.act_key or "activation_function")
            if act not in ("gelu_new", "gelu_pytorch_tanh"):
                out.append(f"{src} = {act}: the twin's GPT-2 MLP uses tanh-GELU (gelu_new)")
            for key in ("scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn"):
                if self.cfg.get(key):
                    out.append(f"{p}{key} = true: the twin's attention is plain softmax(q·kᵀ/√d)·v")
        drops = [
            key
            for key in (
                "attention_dropout",
                "attention_probs_dropout_prob",
                "hidden_dropout_prob",
                "attn_pdrop",
                "resid_pdrop",
                "embd_pdrop",
                "hidden_dropout",
                "resid_dropout",
            )
            if isinstance(self.cfg.get(key), int | float) and self.cfg[key] > 0
        ]
        if drops:
            vals = ", ".join(f"{p}{key} = {_num(self.cfg[key])}" for key in drops)
            out.append(f"dropout ({vals}): the twin trains without dropout")
        dtype = self.cfg.get("torch_dtype") or self.top.get("torch_dtype")
        if dtype in ("bfloat16", "float16"):
            out.append(
                f"torch_dtype = {dtype}: the twin trains in FP32, where the cast orders "
                "(rms_casting) give the same numbers"
            )
        if fam.masked_lm:
            out += self._masked_lm()
        if p and "vision_config" in self.top:
            out.append(
                "vision_config: the vision tower and its projector; the twin is the text "
                "decoder alone"
            )
        return out

    def _masked_lm(self) -> list[str]:
        """What an encoder trained as BERT was has and the lab's decoder has not."""
        types, src = self.get("type_vocab_size")
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

    def _attention(self, s: dict[str, int]) -> list[str]:
        p, out = self.prefix, []
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
        theta = self.cfg.get("rope_theta")
        if theta is not None and theta != 10000:
            out.append(f"{p}rope_theta = {_num(theta)}: the twin's RoPE base is 10000")
        rs = self.cfg.get("rope_scaling")
        if isinstance(rs, dict) and rs:
            kind = rs.get("rope_type") or rs.get("type") or "?"
            out.append(
                f"{p}rope_scaling ({kind}, factor {_num(rs.get('factor'))}): the twin's "
                "RoPE is unscaled"
            )
        local = self.cfg.get("rope_local_base_freq")
        if local is not None:
            out.append(
                f"{p}rope_local_base_freq = {_num(local)}: a second RoPE base for the "
                "sliding-window layers"
            )
        out += self._windows()
        for key in ("attn_logit_softcapping", "final_logit_softcapping"):
            cap, src = self.get(key)
            if cap is not None:
                what = "attention logits" if key.startswith("attn") else "output logits"
                out.append(
                    f"{src} = {_num(cap)}: soft-capping of the {what} "
                    "(cap·tanh(x/cap)); the twin does not cap"
                )
        q, src = self.get("query_pre_attn_scalar")
        if q is not None and q != s["head_dim"]:
            out.append(
                f"{src} = {_num(q)}: attention scaled by 1/√{_num(q)}, not by "
                f"1/√head_dim (head_dim = {s['head_dim']})"
            )
        if self.model_type == "phi3":
            prf, src = self.get("partial_rotary_factor", 1.0)
            if prf is not None and prf != 1:
                out.append(
                    f"{src} = {_num(prf)}: RoPE on part of each head; the twin rotates all of it"
                )
            out.append(
                "fused qkv_proj and gate_up_proj (one matrix each): the twin has separate "
                "projections (the same function, another parameter layout)"
            )
        return out

    def _windows(self) -> list[str]:
        mt = self.model_type
        window, src = self.get("sliding_window")
        if window is None:
            return []
        if mt in ("qwen2", "qwen3") and not self.get("use_sliding_window")[0]:
            return []  # the window is configured but off
        which = ""
        if mt == "gemma2":
            which = " in every other layer"
        elif mt == "gemma3_text":
            types = self.cfg.get("layer_types")
            pattern = self.cfg.get("sliding_window_pattern") or 6
            if isinstance(types, list):
                n = sum(t == "sliding_attention" for t in types)
                which = f" in {n} of {len(types)} layers (layer_types)"
            elif isinstance(pattern, int) and pattern > 1:
                which = f" in {pattern - 1} of every {pattern} layers"
        return [
            f"{src} = {_num(window)}: sliding-window attention{which}; the twin attends to "
            "its whole context"
        ]

    def _biases(self) -> list[str]:
        if self.model_type == "qwen2":
            return [
                "q_proj/k_proj/v_proj biases (Qwen2 always has them): the twin's llama-style "
                "projections have none"
            ]
        return [
            f"{self.prefix}{key} = true: biases in those projections; the twin has none"
            for key in ("attention_bias", "mlp_bias")
            if self.cfg.get(key)
        ]
