"""The Hugging Face model families normlab knows, one row each (no ``transformers`` import).

Each row says what a family's modeling code in ``transformers`` 5.x fixes about normalization
(its norm classes, their eps attribute, the cast order, the placement) and what its
``config.json`` holds (the keys of the sizes and of eps, the config class's defaults for keys a
file leaves out). :mod:`normlab.hf` (``patch``, ``patch_classes``), :mod:`normlab.hf.llama_export`
and ``normlab advise`` all read this table: a new family is one row here, plus its test.

The cast orders, read off each family's ``modeling_*.py``:

- ``casting="llama"``: ``w * (x.float() * rsqrt(mean(x²) + eps)).to(x.dtype)`` (Llama, Mistral,
  Qwen2, Qwen3, Phi-3);
- ``casting="gemma", offset=1.0``: ``(x.float() * rsqrt(mean(x²) + eps) * (1 + w.float()))
  .to(x.dtype)``, the weight stored around 0 (Gemma, Gemma 2, Gemma 3);
- ``casting="gemma"``, no offset: ``(w * (x.float() * rsqrt(mean(x²) + eps))).to(x.dtype)``,
  the product in FP32 (OLMo 2);
- ``norm="layernorm"``: ``torch.nn.LayerNorm`` (BERT, GPT-2).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# config.json key of each size (and of eps), by the naming a family's config uses
LLAMA_KEYS = {
    "hidden": "hidden_size",
    "layers": "num_hidden_layers",
    "heads": "num_attention_heads",
    "ffn": "intermediate_size",
    "positions": "max_position_embeddings",
    "eps": "rms_norm_eps",
}
BERT_KEYS = {**LLAMA_KEYS, "eps": "layer_norm_eps"}
GPT2_KEYS = {
    "hidden": "n_embd",
    "layers": "n_layer",
    "heads": "n_head",
    "ffn": "n_inner",
    "positions": "n_positions",
    "eps": "layer_norm_epsilon",
}


@dataclass(frozen=True)
class Family:
    """What one ``model_type`` fixes, as its modeling code in ``transformers`` has it."""

    name: str  # for people: "Gemma 2"
    package: str  # transformers.models.<package>.modeling_<package>
    prefix: str  # of its class names: <prefix>RMSNorm, <prefix>DecoderLayer
    config_class: str  # whose defaults fill the keys a config.json leaves out
    norm: str = "rmsnorm"  # "layernorm": torch's own nn.LayerNorm
    casting: str = "llama"  # the RMSNorm cast order (normlab's ``casting=``)
    offset: float = 0.0  # the RMSNorm gain is offset + w
    eps_attr: str = "variance_epsilon"  # the eps attribute of its RMSNorm modules
    fusable: bool = False  # its decoder layer's forward is Llama's (patch(fuse_residual=True))
    placement: str = "pre"
    qk_norm: bool = False
    scale_embeddings: bool = False  # embeddings × √hidden_size
    masked_lm: bool = False  # an encoder trained to fill in masked tokens (BERT)
    act_key: str = ""  # the config key of the MLP activation ("" = the arch's usual one)
    tie_default: bool = False
    eps_default: float = 1e-6
    defaults: dict[str, Any] = field(default_factory=dict)  # other config class defaults
    keys: dict[str, str] = field(default_factory=lambda: dict(LLAMA_KEYS))

    @property
    def arch(self) -> str:
        """The lab model's ``arch`` closest to the family."""
        return "gpt2" if self.norm == "layernorm" else "llama"

    @property
    def norm_class(self) -> str:
        """The class name of its norm modules."""
        return f"{self.prefix}RMSNorm" if self.norm == "rmsnorm" else "nn.LayerNorm"


_QWEN = {"use_sliding_window": False, "sliding_window": 4096}
_GEMMA = {"hidden_activation": "gelu_pytorch_tanh", "head_dim": 256, "num_key_value_heads": 16}
_GEMMA_NORM = dict(casting="gemma", offset=1.0, eps_attr="eps", scale_embeddings=True)
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
    "num_key_value_heads": 4,
}

# config.json's model_type -> its family
FAMILIES: dict[str, Family] = {
    "llama": Family("Llama", "llama", "Llama", "LlamaConfig", fusable=True),
    "mistral": Family(
        "Mistral",
        "mistral",
        "Mistral",
        "MistralConfig",
        fusable=True,
        defaults={"sliding_window": 4096, "num_key_value_heads": 8},
    ),
    "qwen2": Family("Qwen2", "qwen2", "Qwen2", "Qwen2Config", fusable=True, defaults=_QWEN),
    "qwen3": Family(
        "Qwen3",
        "qwen3",
        "Qwen3",
        "Qwen3Config",
        fusable=True,
        qk_norm=True,
        defaults={**_QWEN, "head_dim": 128},
    ),
    "gemma": Family(
        "Gemma",
        "gemma",
        "Gemma",
        "GemmaConfig",
        **_GEMMA_NORM,
        act_key="hidden_activation",
        tie_default=True,
        defaults=_GEMMA,
    ),
    "gemma2": Family(
        "Gemma 2",
        "gemma2",
        "Gemma2",
        "Gemma2Config",
        **_GEMMA_NORM,
        placement="sandwich",
        act_key="hidden_activation",
        tie_default=True,
        defaults=_GEMMA2,
    ),
    # the multimodal Gemma 3 ("gemma3") holds a gemma3_text config under "text_config"
    "gemma3_text": Family(
        "Gemma 3",
        "gemma3",
        "Gemma3",
        "Gemma3TextConfig",
        **_GEMMA_NORM,
        placement="sandwich",
        qk_norm=True,
        act_key="hidden_activation",
        tie_default=True,
        defaults=_GEMMA3,
    ),
    "phi3": Family(
        "Phi-3",
        "phi3",
        "Phi3",
        "Phi3Config",
        fusable=True,
        eps_default=1e-5,
        defaults={"partial_rotary_factor": 1.0},
    ),
    "olmo2": Family(
        "OLMo 2",
        "olmo2",
        "Olmo2",
        "Olmo2Config",
        casting="gemma",
        placement="reorder",
        qk_norm=True,
        eps_default=1e-5,
        defaults={"num_key_value_heads": None, "rope_theta": 10000.0},
    ),
    "bert": Family(
        "BERT",
        "bert",
        "Bert",
        "BertConfig",
        norm="layernorm",
        placement="post",
        masked_lm=True,
        tie_default=True,
        eps_default=1e-12,
        act_key="hidden_act",
        defaults={"hidden_act": "gelu", "type_vocab_size": 2},
        keys=dict(BERT_KEYS),
    ),
    "gpt2": Family(
        "GPT-2",
        "gpt2",
        "GPT2",
        "GPT2Config",
        norm="layernorm",
        tie_default=True,
        eps_default=1e-5,
        defaults={"activation_function": "gelu_new"},
        keys=dict(GPT2_KEYS),
    ),
}

# HF RMSNorm class name -> its family (what patch recognises)
BY_NORM_CLASS: dict[str, Family] = {
    f.norm_class: f for f in FAMILIES.values() if f.norm == "rmsnorm"
}
# transformers.models package -> its family, for the families with an RMSNorm class to patch
BY_PACKAGE: dict[str, Family] = {f.package: f for f in BY_NORM_CLASS.values()}
