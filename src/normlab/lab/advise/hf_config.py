"""A Hugging Face model's ``config.json`` (a decoder, or BERT), read as plain JSON (no
``transformers``): what it fixes about normalization, in normlab's terms (``TransformerConfig``
fields, each with the config key it came from), its sizes, and what normlab's model does not
reproduce.

A key the file leaves out takes the default of the ``transformers`` config class that
``model_type`` names (the field's source then says so, e.g. "rms_norm_eps (absent:
Gemma3TextConfig's default)"), since that is the value the real model runs with.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from normlab.hf.families import FAMILIES, Family
from normlab.lab.advise.gaps import gaps
from normlab.lab.kit.errors import UsageError
from normlab.lab.kit.reading import check_tree, read_json, shown
from normlab.models.config import MAX_SIZE

_PLACEMENT_SOURCES = {
    "pre": "one norm on each sublayer's input",
    "sandwich": "a norm before and after each sublayer (input_layernorm/post_attention_"
    "layernorm, pre_/post_feedforward_layernorm)",
    "reorder": "a norm on each sublayer's output inside the residual, x + N(F(x)) "
    "(post_attention_layernorm, post_feedforward_layernorm), none on its input",
    "post": "a norm after each residual add, N(x + F(x)) (attention.output.LayerNorm, "
    "output.LayerNorm)",
}
_ARCH_SOURCES = {
    "gpt2": "learned positions, GELU MLP, biases",
    "llama": "RoPE, gated MLP, no biases",
}
_FINAL_NORM_SOURCES = {
    "llama": "model.norm before the head",
    "gpt2": "ln_f before the head",
    "bert": "none before the head (each Post-LN block ends in a norm); the twin's Pre-LN "
    "arms get one",
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
    # Bounded: nesting, ints within 64 bits, finite numbers (no Infinity eps), one line each.
    doc = read_json(p, f"--hf-config {path}")
    if not isinstance(doc, dict):
        raise UsageError(f"--hf-config {path}: expected a JSON object (a config.json)")
    return from_dict(doc, p.name, where=f"--hf-config {path}")


def from_dict(doc: dict[str, Any], name: str = "config.json", *, where: str = "") -> HFModel:
    """The ``HFModel`` of a parsed config; ``where`` starts the messages of its errors."""
    where = where or name
    check_tree(doc, where)  # a dict built in Python gets the same bounds as a file
    model_type = doc.get("model_type")
    prefix, cfg = "", doc
    if model_type == "gemma3":
        cfg = doc.get("text_config")
        if not isinstance(cfg, dict):
            raise UsageError(f"{where}: model_type gemma3 without a text_config object")
        prefix, model_type = "text_config.", "gemma3_text"
    if not isinstance(model_type, str) or model_type not in FAMILIES:
        raise UsageError(
            f"{where}: model_type {shown(model_type)} is not supported; "
            f"supported: {', '.join(SUPPORTED)}"
        )
    return _Reader(name, where, model_type, cfg, doc, prefix).model()


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
        return default, f"{self.prefix}{key} (absent: {self.fam.config_class}'s default)"

    def positive(self, key: str, default: Any = None) -> tuple[int, str]:
        """``key``'s size: a positive int, at most ``MAX_SIZE`` (the model configs' bound:
        beyond it the size arithmetic leaves int64)."""
        v, src = self.get(key, default)
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            got = "missing" if v is None else f"got {shown(v)}"
            raise UsageError(f"{self.where}: {self.prefix}{key}: expected a positive int ({got})")
        if v > MAX_SIZE:
            raise UsageError(f"{self.where}: {self.prefix}{key}: {v:,} is more than 2**40")
        return v, src

    def optional(self, key: str, default: int) -> int:
        """``key``'s positive int, or ``default`` where it is absent or null."""
        return default if self.get(key)[0] is None else self.positive(key)[0]

    def model(self) -> HFModel:
        sizes, ffn_src = self.sizes()
        recipe = self.recipe(sizes, ffn_src)
        return HFModel(self.name, self.model_type, self.fam, sizes, recipe, gaps(self, sizes))

    def sizes(self) -> tuple[dict[str, int], str]:
        """The model's sizes, and where its FFN width came from."""
        fam, k = self.fam, self.fam.keys
        keys = (k["hidden"], k["layers"], k["heads"], "vocab_size")
        hidden, layers, heads, vocab = (self.positive(key)[0] for key in keys)
        ffn, ffn_src = self.get(k["ffn"])
        if ffn is None and fam.arch == "gpt2":  # GPT-2's n_inner = null means 4 × n_embd
            ffn, ffn_src = 4 * hidden, f"{ffn_src} = null: 4 × {k['hidden']}"
        else:
            ffn, ffn_src = self.positive(k["ffn"])
            ffn_src = f"{ffn_src} / {self.prefix}{k['hidden']} = {ffn} / {hidden}"
        kv = self.optional("num_key_value_heads", heads)  # null: one K/V head per query head
        given = "(absent" not in self.get("num_key_value_heads")[1]  # the file's, not a default
        if given and heads % kv:  # grouped-query attention shares a K/V head among whole groups
            raise UsageError(
                f"{self.where}: {self.prefix}num_key_value_heads {kv} does not divide "
                f"{self.prefix}{k['heads']} {heads}: not a model transformers builds"
            )
        sizes = {
            "hidden": hidden,
            "layers": layers,
            "heads": heads,
            "kv_heads": kv,
            "head_dim": self.optional("head_dim", hidden // heads),
            "ffn": ffn,
            "vocab": vocab,
            "positions": self.optional(k["positions"], 0),
        }
        return sizes, ffn_src

    def number(self, key: str, default: Any, ok, expected: str) -> tuple[float, str]:
        """``key``'s number as a float, and its source; ``ok(value)`` false is a UsageError
        saying it ``expected``."""
        v, src = self.get(key, default)
        if isinstance(v, bool) or not isinstance(v, int | float) or not ok(v):
            raise UsageError(f"{self.where}: {src}: expected {expected}, got {shown(v)}")
        return float(v), src

    def recipe(self, sizes: dict[str, int], ffn_src: str) -> dict[str, tuple[Any, str]]:
        """The twin's recipe: each setting with its source (the file's key or the family's)."""
        fam, mt, k = self.fam, self.model_type, self.fam.keys
        tie, tie_src = self.get("tie_word_embeddings", fam.tie_default)
        if not isinstance(tie, bool):  # "no" must not read as tied
            raise UsageError(f"{self.where}: {tie_src}: expected true or false, got {shown(tie)}")
        eps = self.number(k["eps"], fam.eps_default, lambda x: 0 <= x < 1, "a number in [0, 1)")
        on, norm_src = f"model_type {mt}: ", f"model_type {mt}: {fam.norm_class}"
        qk = "no q/k norm"
        if fam.qk_norm:
            qk = "q_norm/k_norm over " + ("the q/k projections" if mt == "olmo2" else "head_dim")
        recipe: dict[str, tuple[Any, str]] = {
            "arch": (fam.arch, on + _ARCH_SOURCES[fam.arch]),
            "norm": (fam.norm, norm_src),
            "placement": (fam.placement, on + _PLACEMENT_SOURCES[fam.placement]),
            "qk_norm": (fam.qk_norm, on + qk),
            "final_norm": (True, on + _FINAL_NORM_SOURCES.get(mt, _FINAL_NORM_SOURCES[fam.arch])),
            "eps": eps,
        }
        if fam.norm == "rmsnorm":
            cast = ": normalised in FP32, cast to the input dtype, then × w"
            if fam.offset:
                cast = ": (1 + w) applied in FP32, then cast"
            elif fam.casting == "gemma":
                cast = ": normalised and × w in FP32, then cast"
            gain = "(1 + weight), the weight stored around 0" if fam.offset else "weight"
            recipe["rms_casting"] = (fam.casting, norm_src + cast)
            recipe["norm_offset"] = (fam.offset, f"{norm_src}: output × {gain}")
        scaled = "embeddings × √hidden_size" if fam.scale_embeddings else "embeddings unscaled"
        recipe["scale_embeddings"] = (fam.scale_embeddings, on + scaled)
        recipe["tie_embeddings"] = (tie, tie_src)
        recipe["mlp_ratio"] = (sizes["ffn"] / sizes["hidden"], ffn_src)
        # The family's _init_weights: every linear and embedding N(0, initializer_range), biases
        # 0; GPT-2 also scales its residual projections (c_proj) by 1/√(2·n_layer).
        how, gpt2 = f"model_type {mt}: transformers' _init_weights", fam.arch == "gpt2"
        std = self.number("initializer_range", 0.02, lambda x: 0 < x < 1e3, "a number > 0")
        branch = "no residual-projection scaling"
        if gpt2:
            branch = "c_proj (attention and MLP outputs) × 1/√(2·n_layer)"
        recipe["init"] = ("normal", f"{how}: linears and embeddings N(0, initializer_range)")
        recipe["init_std"] = std
        recipe["scale_branch_init"] = (gpt2, f"{how}: {branch}")
        return recipe
