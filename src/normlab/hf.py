"""Opt-in patching of Hugging Face ``transformers`` models with normlab's norms.

``patch(model)`` swaps every norm module it knows for a normlab module of identical semantics
that holds the *same* ``nn.Parameter`` objects: nothing is copied, ``state_dict`` keys and
``save_pretrained`` files are unchanged, an optimizer built before the patch still sees the
same tensors. Nothing happens at import time, and ``transformers`` itself is never imported
here: modules are recognised by class name, and the cast order of each family was read off its
``modeling_*.py`` in transformers 5.x:

- Llama, Mistral, Qwen2, Qwen3 (``q_norm``/``k_norm`` too), Phi-3:
  ``w * (x.float() * rsqrt(mean(x²) + eps)).to(x.dtype)`` -> ``casting="llama"``;
- Gemma, Gemma2, Gemma3 (weight stored as ``w``, applied as ``1 + w``, product in FP32, one
  rounding at the end): ``(x.float() * rsqrt(mean(x²) + eps) * (1 + w.float())).to(x.dtype)``
  -> ``casting="gemma", offset=1.0``;
- ``torch.nn.LayerNorm`` (BERT, RoBERTa, GPT-2, OPT) -> ``normlab.LayerNorm``;
  ``torch.nn.RMSNorm`` -> ``casting="gemma"`` (what ``F.rms_norm`` computes).

The HF RMSNorms take statistics in FP32 even for FP64 models; normlab takes them in FP64 there,
so an FP64 model agrees to FP32 rounding, not bit for bit.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from dataclasses import dataclass, field

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
}

# Decoder layers whose forward is Llama's (Phi-3 adds a dropout on each branch), checked
# against the installed signature before fusing.
_FUSABLE_LAYERS = frozenset(
    f"{fam}DecoderLayer" for fam in ("Llama", "Mistral", "Qwen2", "Qwen3", "Phi3")
)
_LAYER_PARAMS = (
    "self",
    "hidden_states",
    "attention_mask",
    "position_ids",
    "cache",
    "use_cache",
    "position_embeddings",
    "kwargs",
)


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
    if not isinstance(fuse_residual, bool):
        raise TypeError(f"fuse_residual must be a bool, got {type(fuse_residual).__name__}")
    if backend not in registry.KNOWN:
        raise ValueError(f"backend must be one of {registry.names()}, got {backend!r}")
    if not isinstance(memory_efficient, bool):
        raise TypeError(f"memory_efficient must be a bool, got {type(memory_efficient).__name__}")
    if memory_efficient and backend == "torch":
        raise ValueError("memory_efficient=True needs a normlab backend, not backend='torch'")
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
        if _signature(cls.forward) != _LAYER_PARAMS or not isinstance(
            getattr(layer, "post_attention_layernorm", None), RMSNorm
        ):
            skipped.append(name)
            continue
        # An instance attribute: the class, its hooks (output capture) and other layers stay.
        # A partial of a module-level function, unlike a bound method, survives pickling.
        layer.forward = functools.partial(_fused_decoder_forward, layer)
        layer._normlab_fused = True
        fused.append(name)
    if skipped:
        warnings.warn(
            f"normlab.hf.patch did not fuse {len(skipped)} decoder layers whose forward is not "
            f"the one normlab was written against: {skipped[:3]}",
            stacklevel=3,
        )
    return fused


def _signature(fn) -> tuple[str, ...]:
    return tuple(inspect.signature(inspect.unwrap(fn)).parameters)


def _fused_decoder_forward(
    self: nn.Module,
    hidden_states: Tensor,
    attention_mask: Tensor | None = None,
    position_ids: Tensor | None = None,
    cache=None,
    use_cache: bool | None = False,
    position_embeddings: tuple[Tensor, Tensor] | None = None,
    **kwargs,
) -> Tensor:
    """``LlamaDecoderLayer.forward`` (transformers 5.x) with the add after attention fused into
    ``post_attention_layernorm``; Phi-3's branch dropouts are applied where Phi-3 applies them."""
    if "past_key_values" in kwargs:  # the old name, still accepted by the layers it replaces
        cache = kwargs.pop("past_key_values")
    residual = hidden_states
    hidden_states = self.input_layernorm(hidden_states)
    attn_out, _ = self.self_attn(
        hidden_states=hidden_states,
        attention_mask=attention_mask,
        position_ids=position_ids,
        cache=cache,
        use_cache=use_cache,
        position_embeddings=position_embeddings,
        **kwargs,
    )
    if hasattr(self, "resid_attn_dropout"):
        attn_out = self.resid_attn_dropout(attn_out)
    # One pass: h = residual + attn_out (rounded once, as the eager add) and norm(h).
    hidden_states, residual = self.post_attention_layernorm(attn_out, residual=residual)
    hidden_states = self.mlp(hidden_states)
    if hasattr(self, "resid_mlp_dropout"):
        hidden_states = self.resid_mlp_dropout(hidden_states)
    return residual + hidden_states
