"""The model, built and loaded offline, and its norm layers recognized.

The norms are recognized as :func:`normlab.hf.patch` recognizes them, from the family table
(:mod:`normlab.hf.families`): ``torch.nn.LayerNorm``, ``torch.nn.RMSNorm`` and each family's
RMSNorm class in ``transformers.models`` (its eps attribute, gain offset and cast order). The
model is built first on the meta device (no memory), so a norm of an unknown class is refused
before the weights are read.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
from torch import nn

from normlab.hf.families import BY_NORM_CLASS
from normlab.lab.kit.errors import UsageError
from normlab.lab.kit.reading import printable, read_json

LM_HEADS = ("ForCausalLM", "ForMaskedLM", "LMHeadModel")


@dataclass(frozen=True)
class NormSite:
    """One norm layer as the replay needs it (its parameters stay on the module)."""

    name: str  # the module's path in the model
    cls: str
    kind: str  # "layernorm" | "rmsnorm"
    eps: float
    offset: float = 0.0  # RMSNorm's gain is offset + weight (Gemma: 1)
    casting: str = ""  # RMSNorm's cast order (normlab.reference.rms_norm); "" for LayerNorm


def site_of(name: str, module: nn.Module) -> NormSite | None:
    """The norm ``module`` is, or None where it is not a norm normlab knows."""
    cls = type(module)
    if cls is nn.LayerNorm:
        return NormSite(name, "LayerNorm", "layernorm", float(module.eps))
    if cls is nn.RMSNorm:
        eps = module.eps if module.eps is not None else torch.finfo(torch.float32).eps
        return NormSite(name, "RMSNorm", "rmsnorm", float(eps), casting="gemma")
    fam = BY_NORM_CLASS.get(cls.__name__)
    if fam is not None and cls.__module__.startswith("transformers.models."):
        eps = float(getattr(module, fam.eps_attr))
        return NormSite(name, cls.__name__, "rmsnorm", eps, fam.offset, fam.casting)
    return None


def norm_sites(model: nn.Module, what: str) -> list[tuple[NormSite, nn.Module]]:
    """Every norm of ``model`` with its module; a leaf module whose class is named like a norm
    but is not one normlab knows is a UsageError (its replay would be a guess)."""
    sites, unknown = [], []
    for name, module in model.named_modules():
        site, cls = site_of(name, module), type(module).__name__
        if site is not None:
            sites.append((site, module))
        elif "norm" in cls.lower() and next(module.children(), None) is None:
            unknown.append(cls)
    if unknown:
        known = ", ".join(["nn.LayerNorm", "nn.RMSNorm", *BY_NORM_CLASS])
        raise UsageError(
            f"{what}: norm layers of an unknown class ({', '.join(sorted(set(unknown)))}); "
            f"normlab knows {known}"
        )
    if not sites:
        raise UsageError(f"{what}: no norm layer found")
    return sites


def transformers_offline():
    """``transformers``, imported with the Hub switched off and its progress bars quiet."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        import transformers
    except ImportError:
        raise UsageError('normlab inspect needs transformers: pip install "normlab[hf]"') from None
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    return transformers


@dataclass
class Loaded:
    model: nn.Module
    sites: list[tuple[NormSite, nn.Module]]
    arch: str  # the class it was built with
    kind: str  # "lm": its output has logits; "embedding": its pooled last hidden state
    pooling: str  # "mean" | "cls": how an embedding model's tokens become one vector
    params: int  # counted on the built model
    tokenizer: object | None
    no_tokenizer: str  # why there is none ("" where there is)


def load(path, what: str) -> Loaded:
    """Build the model of directory ``path`` on the meta device, recognize its norms, then load
    its weights in FP32 (offline), in eval mode; its tokenizer where the directory has one."""
    tf = transformers_offline()
    try:
        config = tf.AutoConfig.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError, KeyError) as e:
        raise UsageError(f"{what}: config.json: {printable(str(e).splitlines()[0], 160)}") from e
    arch = next((a for a in config.architectures or () if hasattr(tf, a)), None)
    cls = getattr(tf, arch) if arch else tf.AutoModel
    with torch.device("meta"):
        shell = cls(config) if arch else cls.from_config(config)
    norm_sites(shell, what)  # refused here, before the weights are read
    params = sum(p.numel() for p in shell.parameters())
    del shell
    try:
        model = cls.from_pretrained(path, dtype=torch.float32, local_files_only=True)
    except (OSError, ValueError, RuntimeError) as e:
        why = printable(str(e).splitlines()[0] if str(e) else type(e).__name__, 160)
        raise UsageError(f"{what}: cannot load its weights ({why})") from e
    model.eval()
    name = type(model).__name__
    kind = "lm" if name.endswith(LM_HEADS) else "embedding"
    sites = norm_sites(model, what)
    return Loaded(model, sites, name, kind, pooling(path), params, *tokenizer(tf, path))


def pooling(path) -> str:
    """How a sentence-transformers directory pools its tokens (``1_Pooling/config.json``):
    ``cls`` or ``mean``; ``mean`` where the directory does not say."""
    p = path / "1_Pooling" / "config.json"
    if not p.is_file():
        return "mean"
    doc = read_json(p, f"{path.name}/1_Pooling/config.json")
    return "cls" if isinstance(doc, dict) and doc.get("pooling_mode_cls_token") else "mean"


_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "tokenizer.model")


def tokenizer(tf, path) -> tuple[object | None, str]:
    """The directory's own tokenizer, or None and why (then the text's bytes are the token
    ids, and the report says so)."""
    if not any((path / f).is_file() for f in _TOKENIZER_FILES):
        return None, "no tokenizer in the directory"
    try:
        return tf.AutoTokenizer.from_pretrained(path, local_files_only=True), ""
    except (OSError, ValueError, KeyError, TypeError) as e:
        return None, f"its tokenizer did not load: {printable(str(e).splitlines()[0], 80)}"
