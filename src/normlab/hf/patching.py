"""Opt-in patching of Hugging Face ``transformers`` models with normlab's norms.

``patch(model)`` swaps every norm module it knows for a normlab module of identical semantics
that holds the *same* ``nn.Parameter`` objects: nothing is copied, ``state_dict`` keys and
``save_pretrained`` files are unchanged, an optimizer built before the patch still sees the
same tensors. Nothing happens at import time, and ``patch`` never imports ``transformers``
itself: modules are recognised by class name, from the family table
(:mod:`normlab.hf.families`, which has each family's cast order); ``torch.nn.LayerNorm`` (BERT,
RoBERTa, GPT-2, OPT) becomes ``normlab.LayerNorm`` and ``torch.nn.RMSNorm`` ``casting="gemma"``
(what ``F.rms_norm`` computes). The HF RMSNorms take statistics in FP32 even for FP64 models;
normlab takes them in FP64 there, so an FP64 model agrees to FP32 rounding, not bit for bit.

``patch_classes(families)`` does the same before a model exists: the families' norm classes in
their ``modeling_*`` modules are swapped for factories of normlab modules (and, with
``fuse_residual``, their decoder layers' ``forward``), so ``from_pretrained``/``from_config``
build normlab norms directly; ``.undo()`` puts the classes back. It imports ``transformers``,
and only when called.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field

from torch import Tensor, nn

from normlab.hf.families import BY_NORM_CLASS, BY_PACKAGE, FAMILIES
from normlab.kernels import registry
from normlab.modules import LayerNorm, RMSNorm

__all__ = ["CLASS_FAMILIES", "ClassPatch", "PatchReport", "patch", "patch_classes"]

# Decoder layers whose forward is Llama's (Phi-3 adds a dropout on each branch). Their
# signature changed over transformers 4.45 .. 5.x (past_key_value -> past_key_values -> cache,
# output_attentions and cache_position dropped, a tuple return became a tensor); the fused
# forward binds the installed one's parameters and passes them on as the original does.
_FUSABLE_LAYERS = frozenset(f"{f.prefix}DecoderLayer" for f in FAMILIES.values() if f.fusable)
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
    if cls.__name__ in BY_NORM_CLASS and cls.__module__.startswith("transformers.models."):
        fam = BY_NORM_CLASS[cls.__name__]
        new = RMSNorm(
            module.weight.shape,
            eps=getattr(module, fam.eps_attr),
            offset=fam.offset,
            casting=fam.casting,
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
CLASS_FAMILIES: dict[str, str] = {pkg: f.prefix for pkg, f in BY_PACKAGE.items()}


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
        for pkg in names:
            fam = BY_PACKAGE[pkg]
            mod = importlib.import_module(f"transformers.models.{pkg}.modeling_{pkg}")
            original = mod.__dict__[fam.norm_class]
            factory = _norm_factory(original, fam.casting, fam.offset, backend, memory_efficient)
            handle._set(mod, fam.norm_class, factory)
            layer_cls = mod.__dict__.get(f"{fam.prefix}DecoderLayer")
            if fuse_residual and fam.fusable and layer_cls is not None:
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
