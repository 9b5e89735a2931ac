"""``normlab inspect``'s engine: options in, the measurements, the findings and the report out.

Sized before loading (:mod:`~normlab.lab.inspect.locate`), built on the meta device and loaded
offline (:mod:`~normlab.lab.inspect.load`), one eval pass with every norm's input recorded
(:mod:`~normlab.lab.inspect.record`), the inputs measured (:mod:`~normlab.lab.inspect.hazards`)
and replayed (:mod:`~normlab.lab.inspect.formats_replay`), the swapped and train-mode passes
(:mod:`~normlab.lab.inspect.swap`), the findings decided
(:mod:`~normlab.lab.inspect.scale_findings`), the report written
(:mod:`~normlab.lab.inspect.inspect_report`).
"""

from __future__ import annotations

import os
import platform
import time
from dataclasses import dataclass, field

import torch

from normlab.lab.inspect import formats_replay, hazards, locate, record, scale_findings, swap, text
from normlab.lab.inspect.inspect_options import InspectOptions
from normlab.lab.kit.errors import UsageError
from normlab.lab.kit.io import utc
from normlab.lab.kit.limits import fmt_bytes
from normlab.lab.kit.threads import set_threads


@dataclass
class ModelInfo:
    name: str
    family: str
    model_type: str
    arch: str  # the transformers class it was built with
    kind: str  # "embedding" | "lm"
    pooling: str
    params: int
    hidden: int
    layers: int
    norms: int
    norm_classes: list[str]
    need_bytes: int
    limit_bytes: int


@dataclass
class SampleInfo:
    chunks: int
    chunk: int
    tokens: int
    files: int
    tokenizer: str
    source: str = "docstrings of the standard library's *.py files (the lab's corpus)"


@dataclass
class InspectResult:
    model: ModelInfo
    sample: SampleInfo
    layers: list[hazards.LayerStats]
    stream_rms: list[float]  # median row RMS of each hidden state (embeddings, then each block)
    replay: list[formats_replay.LayerReplay]
    changes: list[swap.Change]
    findings: list[dict]
    eps_small: float
    seconds: dict[str, float] = field(default_factory=dict)  # stage -> wall seconds
    machine: dict[str, str] = field(default_factory=dict)


def read_result(path) -> InspectResult:
    """An ``inspect.json`` back as the result it was written from (the lab's bounded reader)."""
    from normlab.lab.kit.reading import read_json

    doc = read_json(path)
    rows = {
        "layers": hazards.LayerStats,
        "replay": formats_replay.LayerReplay,
        "changes": swap.Change,
    }
    typed = {k: [cls(**x) for x in doc[k]] for k, cls in rows.items()}
    model, sample = ModelInfo(**doc["model"]), SampleInfo(**doc["sample"])
    return InspectResult(**doc | typed | {"model": model, "sample": sample})


class _Clock:
    """The wall seconds of each stage, from the end of the one before."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self.at = time.perf_counter()

    def done(self, stage: str) -> None:
        now = time.perf_counter()
        self.seconds[stage] = now - self.at
        self.at = now


# The progress bar's steps after loading: the eval pass, one per norm layer's replay, the
# swapped and train-mode passes (one step) and the decision.
STEPS_BESIDE_THE_LAYERS = 3


def measure(o: InspectOptions, md: locate.ModelDir, log=print) -> InspectResult:
    """Everything but the report, for the model ``md`` read by :func:`locate.read`."""
    from tqdm.auto import tqdm

    from normlab.lab.inspect.load import load

    clock, busy = _Clock(), _load()
    block = {"seed_block": o.seed, "began": utc()}  # the data's (the registry reads them)
    m = load(md.path, md.name)  # refuses an unknown norm class before the weights are read
    encoder = text.Encoder(m.tokenizer, md.hf.sizes["vocab"], m.no_tokenizer)
    sample = text.sample(encoder, o.chunks, o.chunk, o.seed)  # the seed block's text
    clock.done("load")
    log(f"{md.name}: {m.arch}, {m.params:,} parameters, {len(m.sites)} norms")
    steps = len(m.sites) + STEPS_BESIDE_THE_LAYERS
    with tqdm(total=steps, desc="inspect", disable=not o.progress, leave=False) as bar:
        base, inputs = record.record(m.model, m.sites, sample.ids, m.kind, m.pooling)
        for s, _ in m.sites:
            if inputs[s.name].shape[0] != o.chunks:  # a norm called twice per forward
                raise UsageError(f"{md.name}: the norm {s.name} runs more than once per forward")
        clock.done("record")
        bar.update(1)
        log(f"recorded {sample.tokens:,} tokens in {o.chunks} chunks")
        stats = [hazards.layer_stats(s, mod, inputs[s.name]) for s, mod in m.sites]
        small = scale_findings.eps_small(min(s.eps for s, _ in m.sites))
        rep = formats_replay.Replay()
        for i, (s, mod) in enumerate(m.sites):
            formats_replay.replay_layer(rep, s, mod, inputs[s.name])
            formats_replay.replay_grads(  # the layer's own seed: 1000 * seed + i
                rep, s, mod, inputs[s.name], small, scale_findings.EPS_DEFAULT, 1000 * o.seed + i
            )
            bar.update(1)
        clock.done("replay")
        args = (m.model, sample.ids, m.kind, m.pooling)
        changes = [
            swap.measure("swap", base, swap.with_swap(m.model, m.sites, *args[1:])),
            swap.measure("train", base, swap.in_train_mode(*args, o.seed)),
        ]
        clock.done("compare")
        bar.update(1)
        rec = {"model": md.name, "kind": m.kind, "params": m.params, "tokens": sample.tokens}
        rec["eps_small"] = small
        decided = scale_findings.decide(m.kind, rep, changes[1], rec, **block)
        clock.done("decide")
        bar.update(1)
    return InspectResult(
        _info(md, m),
        SampleInfo(o.chunks, o.chunk, sample.tokens, len(set(sample.files)), sample.tokenizer),
        stats,
        [float(r.median()) for r in base.stream_rms],
        rep.layers,
        changes,
        decided,
        small,
        clock.seconds,
        _machine(busy),
    )


def _load() -> str:
    """The machine's 1-minute load average (what else ran beside this), where it is known."""
    try:
        return f"{os.getloadavg()[0]:.1f}"
    except OSError:
        return "unknown"


def _info(md: locate.ModelDir, m) -> ModelInfo:
    return ModelInfo(
        md.name,
        md.hf.family.name,
        md.hf.model_type,
        m.arch,
        m.kind,
        m.pooling,
        m.params,
        md.hf.sizes["hidden"],
        md.hf.sizes["layers"],
        len(m.sites),
        sorted({s.cls for s, _ in m.sites}),
        md.need,
        md.limit,
    )


def _machine(load: str) -> dict[str, str]:
    import transformers

    return {
        "load": load,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "threads": str(torch.get_num_threads()),
        "cpu": platform.processor() or platform.machine(),
    }


def run_inspect(o: InspectOptions, log=print):
    """Check, size, measure and write the report under ``o.out``; returns (result, paths)."""
    from normlab.lab.inspect.inspect_report import write
    from normlab.lab.kit.io import hold, out_dir

    o.check()
    set_threads(o.threads)
    t0 = time.perf_counter()
    md = locate.read(o)
    log(
        f"{md.name}: about {fmt_bytes(md.need)} needed, {fmt_bytes(md.limit)} allowed; three "
        f"passes of {o.tokens:,} tokens, about {md.flops / 1e9:,.0f} GFLOP"
    )
    out = out_dir(o.out)
    with hold(out, "inspect"):
        result = measure(o, md, log)
        result.seconds["total"] = time.perf_counter() - t0
        return result, write(result, out)
