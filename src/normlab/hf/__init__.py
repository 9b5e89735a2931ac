"""The Hugging Face integration, opt-in (``pip install "normlab[hf]"``); nothing here imports
``transformers`` until a function is called.

- ``patching``: :func:`patch` swaps the norms of a loaded model for normlab's, sharing their
  parameters; :func:`patch_classes` makes ``from_pretrained`` build normlab's norms directly;
- ``convert``: :func:`preln_to_rmsnorm`, a Pre-LN LayerNorm model (GPT-2, or the lab's) into an
  equal Pre-RMSNorm one;
- ``llama_export``: :func:`export`, a lab model written as a ``LlamaForCausalLM`` directory;
- ``families``: the one table of model families (norm classes, cast orders) the three above
  and ``normlab advise`` read.
"""

from normlab.hf.convert import preln_to_rmsnorm
from normlab.hf.llama_export import export
from normlab.hf.patching import CLASS_FAMILIES, ClassPatch, PatchReport, patch, patch_classes

__all__ = [
    "CLASS_FAMILIES",
    "ClassPatch",
    "PatchReport",
    "export",
    "patch",
    "patch_classes",
    "preln_to_rmsnorm",
]
