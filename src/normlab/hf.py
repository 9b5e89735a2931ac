"""Opt-in patching of Hugging Face ``transformers`` models with normlab's norms.

``patch(model)`` swaps every norm module it knows for a normlab module of identical semantics
that holds the *same* ``nn.Parameter`` objects: nothing is copied, ``state_dict`` keys and
``save_pretrained`` files are unchanged, an optimizer built before the patch still sees the
same tensors. Nothing happens at import time, and ``patch`` never imports ``transformers``
itself: modules are recognised by class name, and the cast order of each family was read off its
``modeling_*.py`` in transformers 5.x:

- Llama, Mistral, Qwen2, Qwen3 (``q_norm``/``k_norm`` too), Phi-3:
  ``w * (x.float() * rsqrt(mean(x²) + eps)).to(x.dtype)`` -> ``casting="llama"``;
- Gemma, Gemma2, Gemma3 (weight stored as ``w``, applied as ``1 + w``, product in FP32, one
  rounding at the end): ``(x.float() * rsqrt(mean(x²) + eps) * (1 + w.float())).to(x.dtype)``
  -> ``casting="gemma", offset=1.0``;
- OLMo 2 (``q_norm``/``k_norm`` over the whole projection too): ``(w * (x.float() *
  rsqrt(mean(x²) + eps))).to(x.dtype)`` -> ``casting="gemma"``, no offset;
- ``torch.nn.LayerNorm`` (BERT, RoBERTa, GPT-2, OPT) -> ``normlab.LayerNorm``;
  ``torch.nn.RMSNorm`` -> ``casting="gemma"`` (what ``F.rms_norm`` computes).

The HF RMSNorms take statistics in FP32 even for FP64 models; normlab takes them in FP64 there,
so an FP64 model agrees to FP32 rounding, not bit for bit.

``patch_classes(families)`` does the same before a model exists: the families' norm classes in
their ``modeling_*`` modules are swapped for factories of normlab modules (and, with
``fuse_residual``, their decoder layers' ``forward``), so ``from_pretrained``/``from_config``
build normlab norms directly; ``.undo()`` puts the classes back. ``export(model, path)`` writes
a lab model (``normlab.models.Transformer``, ``arch="llama"``) as a ``LlamaForCausalLM``
directory. Only these two import ``transformers``, and only when called.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor, nn

from normlab.kernels import registry
from normlab.modules import LayerNorm, RMSNorm

# class name -> (casting, offset, name of the eps attribute)
_HF_RMSNORMS: dict[str, tuple[str, float, str]] = {
    **{
        f"{fam}RMSNorm": ("llama", 0.0, "variance_epsilon")
        for fam in ("Llama", "Mistral", "Qwen2", "Qwen3", "Phi3")
    },
    **{f"{fam}RMSNorm": ("gemma", 1.0, "eps") for fam in ("Gemma", "Gemma2", "Gemma3")},
    # OLMo 2: (w * x.float() * rsqrt(...)).to(dtype), the product in FP32 and no offset.
    "Olmo2RMSNorm": ("gemma", 0.0, "variance_epsilon"),
}

# Decoder layers whose forward is Llama's (Phi-3 adds a dropout on each branch). Their
# signature changed over transformers 4.45 .. 5.x (past_key_value -> past_key_values -> cache,
# output_attentions and cache_position dropped, a tuple return became a tensor); the fused
# forward binds the installed one's parameters and passes them on as the original does.
_FUSABLE_LAYERS = frozenset(
    f"{fam}DecoderLayer" for fam in ("Llama", "Mistral", "Qwen2", "Qwen3", "Phi3")
)
_LAYER_ARGS = frozenset(
    (
        "attention_mask",
        "position_ids",
        "past_key_value",
        "past_key_values",
        "cache",
        "output_attentions",
        "use_cache",
        "cache_position",
        "position_embeddings",
    )
)
# Old names the installed layers still accept through transformers' deprecate_kwarg.
_RENAMED = (("past_key_value", "past_key_values"), ("past_key_values", "cache"))


@dataclass
class PatchReport:
    """What :func:`patch` did: module path -> original class name, per outcome."""

    replaced: dict[str, str] = field(default_factory=dict)
    fused: list[str] = field(default_factory=list)
    unknown: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        classes = sorted(set(self.replaced.values()))
        lines = [f"replaced {len(self.replaced)} norm modules ({', '.join(classes) or 'none'})"]
        if self.fused:
            lines.append(f"fused the residual add into {len(self.fused)} decoder layers")
        if self.unknown:
            lines.append(f"left {len(self.unknown)} unknown norm modules: {self.unknown}")
        return "; ".join(lines)


def patch(
    model: nn.Module,
    *,
    fuse_residual: bool = False,
    backend: str = "auto",
    memory_efficient: bool = False,
) -> PatchReport:
    """Replace the norm modules of ``model`` in place by normlab modules sharing their parameters.

    ``memory_efficient=True`` gives the new modules the backward that recomputes xhat from the
    saved output instead of saving the input (:class:`normlab.RMSNorm`); modules that are
    normlab's already are left as they are.

    ``fuse_residual=True`` also rewrites the forward of Llama-family decoder layers so the add
    after attention and ``post_attention_layernorm`` run as one fused call returning
    ``(norm(h), h)``; outputs, returns and recorded hidden states/attentions are unchanged.
    Modules that look like norms but are not known are left as they are, with a warning.
    Calling it twice is harmless.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    _check_options(fuse_residual, backend, memory_efficient)
    report = PatchReport()
    # Materialise the list first: the tree is edited while walking it.
    for name, module in list(model.named_modules()):
        new = _replacement(module, backend, memory_efficient)
        if new is not None:
            _set_submodule(model, name, new)
            report.replaced[name] = type(module).__name__
        elif _looks_like_norm(module):
            report.unknown[name] = type(module).__name__
    if report.unknown:
        warnings.warn(
            f"normlab.hf.patch left {len(report.unknown)} norm modules of unknown classes "
            f"unchanged: {sorted(set(report.unknown.values()))}",
            stacklevel=2,
        )
    if fuse_residual:
        report.fused = _fuse_decoder_layers(model)
    return report


def _check_options(fuse_residual: bool, backend: str, memory_efficient: bool) -> None:
    if not isinstance(fuse_residual, bool):
        raise TypeError(f"fuse_residual must be a bool, got {type(fuse_residual).__name__}")
    if backend not in registry.KNOWN:
        raise ValueError(f"backend must be one of {registry.names()}, got {backend!r}")
    if not isinstance(memory_efficient, bool):
        raise TypeError(f"memory_efficient must be a bool, got {type(memory_efficient).__name__}")
    if memory_efficient and backend == "torch":
        raise ValueError("memory_efficient=True needs a normlab backend, not backend='torch'")


def _replacement(module: nn.Module, backend: str, memory_efficient: bool) -> nn.Module | None:
    """A normlab module computing what ``module`` computes, on ``module``'s parameters."""
    cls = type(module)
    # Only transformers' own classes: remote code may reuse a name with another forward.
    if cls.__name__ in _HF_RMSNORMS and cls.__module__.startswith("transformers.models."):
        casting, offset, eps_attr = _HF_RMSNORMS[cls.__name__]
        new = RMSNorm(
            module.weight.shape,
            eps=getattr(module, eps_attr),
            offset=offset,
            casting=casting,
            backend=backend,
            memory_efficient=memory_efficient,
            device="meta",
            dtype=module.weight.dtype,
        )
    elif cls is nn.RMSNorm:
        affine = module.weight is not None
        new = RMSNorm(
            module.normalized_shape,
            eps=module.eps,
            elementwise_affine=affine,
            casting="gemma",
            backend=backend,
            memory_efficient=memory_efficient,
            device="meta",
        )
    elif cls is nn.LayerNorm:
        new = LayerNorm(
            module.normalized_shape,
            eps=module.eps,
            elementwise_affine=module.elementwise_affine,
            bias=module.bias is not None,
            backend=backend,
            memory_efficient=memory_efficient,
            device="meta",
        )
    else:
        return None
    # The new module was built on "meta" (no storage); hand it the original Parameters.
    for pname in ("weight", "bias"):
        if pname in new._parameters:
            setattr(new, pname, getattr(module, pname))
    return new.train(module.training)


def _looks_like_norm(module: nn.Module) -> bool:
    if isinstance(module, (RMSNorm, LayerNorm)) or next(module.children(), None) is not None:
        return False
    return "norm" in type(module).__name__.lower()


def _set_submodule(model: nn.Module, name: str, new: nn.Module) -> None:
    if not name:
        raise TypeError("model is itself a norm module; patch the model that contains it")
    parent, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent), child, new)


# ---------------------------------------------------------------------------------------------
# fused residual add + norm in Llama-family decoder layers


def _fuse_decoder_layers(model: nn.Module) -> list[str]:
    fused, skipped = [], []
    for name, layer in model.named_modules():
        cls = type(layer)
        if (
            cls.__name__ not in _FUSABLE_LAYERS
            or not cls.__module__.startswith("transformers.models.")
            or getattr(layer, "_normlab_fused", False)
        ):
            continue
        params = _layer_params(layer)
        if params is None or not isinstance(
            getattr(layer, "post_attention_layernorm", None), RMSNorm
        ):
            skipped.append(name)
            continue
        # An instance attribute: the class, its hooks (output capture) and other layers stay.
        # A partial of a module-level function, unlike a bound method, survives pickling.
        layer.forward = functools.partial(_fused_decoder_forward, layer, params)
        layer._normlab_fused = True
        fused.append(name)
    if skipped:
        warnings.warn(
            f"normlab.hf.patch did not fuse {len(skipped)} decoder layers whose forward is not "
            f"the one normlab was written against: {skipped[:3]}",
            stacklevel=3,
        )
    return fused


def _layer_params(layer: nn.Module) -> tuple[tuple[tuple[str, object], ...], bool] | None:
    """``(name, default)`` of the installed layer forward's arguments after hidden_states,
    and whether its attention takes ``**kwargs``; None where ``layer`` is not a Llama-style
    decoder layer normlab knows how to fuse."""
    if not all(hasattr(layer, a) for a in ("input_layernorm", "self_attn", "mlp")):
        return None
    params = list(inspect.signature(inspect.unwrap(type(layer).forward)).parameters.values())
    names = [p.name for p in params]
    if names[:2] != ["self", "hidden_states"] or params[-1].kind != params[-1].VAR_KEYWORD:
        return None
    rest = params[2:-1]
    if not {p.name for p in rest} <= _LAYER_ARGS or any(
        p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) for p in rest
    ):
        return None
    attn = inspect.signature(inspect.unwrap(type(layer.self_attn).forward)).parameters.values()
    takes_kwargs = any(p.kind == p.VAR_KEYWORD for p in attn)
    return tuple((p.name, None if p.default is p.empty else p.default) for p in rest), takes_kwargs


def _fused_decoder_forward(self: nn.Module, layer_params, hidden_states: Tensor, *args, **kwargs):
    """The Llama decoder layer's forward (any transformers version the ``hf`` extra allows)
    with the add after attention fused into ``post_attention_layernorm``; Phi-3's branch
    dropouts are applied where Phi-3 applies them."""
    params, attn_takes_kwargs = layer_params
    names = [n for n, _ in params]
    for old, new in _RENAMED:
        if old in kwargs and old not in names and new in names:
            kwargs[new] = kwargs.pop(old)
    if len(args) > len(names):
        raise TypeError(f"{type(self).__name__}.forward got {len(args)} extra positional args")
    call = dict(params) | dict(zip(names, args, strict=False))
    for n in names[len(args) :]:
        if n in kwargs:
            call[n] = kwargs.pop(n)
    residual = hidden_states
    more = kwargs if attn_takes_kwargs else {}  # 4.45's Qwen2/Phi-3 attention takes none
    attn = self.self_attn(hidden_states=self.input_layernorm(hidden_states), **call, **more)
    attn_out, extra = (attn[0], attn[1:]) if isinstance(attn, tuple) else (attn, ())
    if hasattr(self, "resid_attn_dropout"):
        attn_out = self.resid_attn_dropout(attn_out)
    # One pass: h = residual + attn_out (rounded once, as the eager add) and norm(h).
    hidden_states, residual = self.post_attention_layernorm(attn_out, residual=residual)
    hidden_states = self.mlp(hidden_states)
    if hasattr(self, "resid_mlp_dropout"):
        hidden_states = self.resid_mlp_dropout(hidden_states)
    out = residual + hidden_states
    if "output_attentions" not in names:  # transformers >= 4.54: the layer returns a tensor
        return out
    # 4.45 .. 4.53: (hidden, attn weights if asked, the cache if asked and attention gave one)
    outputs = (out,)
    if call["output_attentions"]:
        outputs += (extra[0],)
    if call.get("use_cache") and len(extra) > 1:
        outputs += (extra[1],)
    return outputs


# ---------------------------------------------------------------------------------------------
# class-level patching, before a model is built

# family (the ``transformers.models`` package) -> the prefix of its class names
CLASS_FAMILIES: dict[str, str] = {
    "llama": "Llama",
    "mistral": "Mistral",
    "qwen2": "Qwen2",
    "qwen3": "Qwen3",
    "phi3": "Phi3",
    "gemma": "Gemma",
    "gemma2": "Gemma2",
    "gemma3": "Gemma3",
    "olmo2": "Olmo2",
}


_ABSENT = object()  # what ClassPatch saves for an attribute that was inherited, not set


@dataclass
class ClassPatch:
    """What :func:`patch_classes` changed; ``undo()`` (or leaving its ``with``) restores it."""

    families: tuple[str, ...]
    patched: list[str] = field(default_factory=list)  # "module.Class[.forward]"
    _saved: list[tuple[object, str, object]] = field(default_factory=list, repr=False)

    def _set(self, owner: object, name: str, value: object) -> None:
        self._saved.append((owner, name, vars(owner).get(name, _ABSENT)))
        setattr(owner, name, value)
        where = getattr(owner, "__name__", "?")
        self.patched.append(f"{where}.{name}")

    def undo(self) -> None:
        """Put the original classes and forwards back (models built meanwhile keep theirs)."""
        while self._saved:
            owner, name, value = self._saved.pop()
            if value is _ABSENT:
                delattr(owner, name)
            else:
                setattr(owner, name, value)
        self.patched.clear()

    def __enter__(self) -> ClassPatch:
        return self

    def __exit__(self, *exc) -> None:
        self.undo()


def patch_classes(
    families: Iterable[str] | None = None,
    *,
    fuse_residual: bool = False,
    backend: str = "auto",
    memory_efficient: bool = False,
) -> ClassPatch:
    """Make ``transformers`` build normlab norms: for each family (``None``: all of
    :data:`CLASS_FAMILIES`), its ``modeling_<family>`` module's RMSNorm class is replaced by a
    factory of the :class:`normlab.RMSNorm` that :func:`patch` would put in its place, and
    with ``fuse_residual=True`` its decoder layer's ``forward`` by the fused one. A model built
    while the patch holds (``from_pretrained``, ``from_config``, the model class itself) is the
    model :func:`patch` makes of an unpatched one: same module types, ``state_dict``, logits.

    Returns a :class:`ClassPatch`; ``.undo()`` or a ``with`` block restores the classes.
    """
    _check_options(fuse_residual, backend, memory_efficient)
    if isinstance(families, str):
        raise TypeError(f"families must be a sequence of names, e.g. ({families!r},)")
    names = tuple(CLASS_FAMILIES) if families is None else tuple(families)
    unknown = [f for f in names if f not in CLASS_FAMILIES]
    if unknown:
        raise ValueError(f"unknown families {unknown}; known: {', '.join(CLASS_FAMILIES)}")
    handle = ClassPatch(names)
    try:
        for fam in names:
            prefix = CLASS_FAMILIES[fam]
            mod = importlib.import_module(f"transformers.models.{fam}.modeling_{fam}")
            norm_name = f"{prefix}RMSNorm"
            casting, offset, _ = _HF_RMSNORMS[norm_name]
            original = mod.__dict__[norm_name]
            factory = _norm_factory(original, casting, offset, backend, memory_efficient)
            handle._set(mod, norm_name, factory)
            layer_cls = mod.__dict__.get(f"{prefix}DecoderLayer")
            if fuse_residual and layer_cls is not None and layer_cls.__name__ in _FUSABLE_LAYERS:
                handle._set(layer_cls, "forward", _class_fused_forward(layer_cls.forward))
    except BaseException:
        handle.undo()
        raise
    return handle


def _norm_factory(original: type, casting: str, offset: float, backend: str, memory_eff: bool):
    """A stand-in for the HF norm class ``original``: called as transformers calls it
    (``(hidden_size, eps)`` or ``(dim=, eps=)``), it returns a :class:`normlab.RMSNorm`."""

    def __new__(cls, hidden_size=None, eps=1e-6, *, dim=None):
        return RMSNorm(
            hidden_size if dim is None else dim,
            eps=eps,
            offset=offset,
            casting=casting,
            backend=backend,
            memory_efficient=memory_eff,
        )

    doc = f"normlab.hf.patch_classes: builds a normlab.RMSNorm where {original.__name__} was."
    attrs = {"__new__": __new__, "__doc__": doc, "__module__": original.__module__}
    return type(original.__name__, (), attrs | {"normlab_original": original})


def _class_fused_forward(original):
    """A decoder layer class's forward that runs the fused one where the layer's
    ``post_attention_layernorm`` is normlab's, and ``original`` elsewhere."""
    cache: dict[type, object] = {}

    @functools.wraps(original)
    def forward(self, *args, **kwargs):
        if not isinstance(getattr(self, "post_attention_layernorm", None), RMSNorm):
            return original(self, *args, **kwargs)
        key = type(self.self_attn)
        if key not in cache:
            cache[key] = _layer_params(self)
        if cache[key] is None:
            return original(self, *args, **kwargs)
        return _fused_decoder_forward(self, cache[key], *args, **kwargs)

    return forward


# ---------------------------------------------------------------------------------------------
# a lab model written as a Hugging Face Llama


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
    dtype = model.tok_emb.weight.dtype
    hf_cfg = tf.LlamaConfig(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.dim,
        intermediate_size=cfg.hidden_dim,
        num_hidden_layers=cfg.n_layers,
        num_attention_heads=cfg.n_heads,
        num_key_value_heads=cfg.n_heads,
        head_dim=cfg.head_dim,
        max_position_embeddings=cfg.max_seq_len,
        rms_norm_eps=1e-6 if cfg.eps is None else cfg.eps,
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
    checks = [
        (cfg.arch != "llama", f'arch={cfg.arch!r} (needs "llama": RoPE, SwiGLU)'),
        (cfg.norm != "rmsnorm", f'norm={cfg.norm!r} (needs "rmsnorm")'),
        (cfg.placement != "pre", f'placement={cfg.placement!r} (needs "pre")'),
        (not cfg.final_norm, "final_norm=False (LlamaModel always norms before the head)"),
        (cfg.qk_norm, "qk_norm=True (Llama has no q/k norm)"),
        (cfg.depth_scaled_norm, "depth_scaled_norm=True"),
        (cfg.norm_offset != 0, f"norm_offset={cfg.norm_offset:g} (Llama's gain is w)"),
        (cfg.casting != "llama", f'rms_casting={cfg.casting!r} (LlamaRMSNorm\'s is "llama")'),
        (cfg.scale_embeddings, "scale_embeddings=True (Llama's embeddings are unscaled)"),
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
