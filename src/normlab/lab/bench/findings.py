"""``normlab bench --findings``: the articles' two statements about cost, decided.

- ``layernorm-more-work`` (000 §3.3, 001): the time ratio RMSNorm / LayerNorm by hidden size and
  implementation (:mod:`normlab.lab.bench.ratio`), beside the work counted from the formulas;
- ``batchnorm-communication`` (003 §七): collectives and bytes per training step under
  ``torchrun`` (:mod:`normlab.lab.bench.comm`).

Rules fixed here, before the runs; the decision is the study's
(:mod:`normlab.lab.numerics.verdict`).
"""

from __future__ import annotations

import json
import math
import platform
from dataclasses import dataclass
from pathlib import Path

import torch

from normlab.lab.bench import comm, ratio
from normlab.lab.common import UsageError, out_dir
from normlab.lab.io import write_file
from normlab.lab.numerics.verdict import Finding, Rule
from normlab.lab.render import md_table

WORK_DELTA = -math.log(0.95)  # RMSNorm must save at least 5 % of LayerNorm's time to count
KINDS = ("ratio", "comm")

# Counted from the formulas and the kernels' code, not measured: forward, FP32 statistics,
# per element of a row of d (s bytes per element; weight and bias are read once per call).
WORK_HEADER = ["forward", "reads of x", "flops per element", "bytes per row (minimum)"]
WORK_ROWS = [
    ["RMSNorm: Σx², then x·rstd·g", "2 (the 2nd from cache)", "4", "2·d·s"],
    ["LayerNorm, two-pass (the articles' code): Σx, Σ(x−μ)², then (x−μ)·rstd·w + b", "3", "8",
     "2·d·s"],
    ["LayerNorm, one pass for Σx, Σx² (normlab's Numba kernel; torch's CPU kernel: Welford)",
     "2 (the 2nd from cache)", "7", "2·d·s"],
]  # fmt: skip


def more_work(sizes=ratio.SIZES, impls=ratio.IMPLS) -> Finding:
    return Finding(
        "layernorm-more-work",
        "LayerNorm needs two passes and more work per token than RMSNorm (so RMSNorm is faster).",
        "000 §3.3, 001",
        tuple(
            (
                f"{impl} d={d}",
                Rule(
                    "ln(t_LayerNorm / t_RMSNorm) per interleaved round, the part's "
                    f"implementation at its d (forward, FP32, {ratio.ELEMENTS} elements per "
                    "call); δ: RMSNorm saves 5 % of LayerNorm's time",
                    ">0",
                    WORK_DELTA,
                    trimmed=True,
                ),
            )
            for impl in impls
            for d in sizes
        ),
        unit="interleaved timing round",
    )


COMMUNICATION = Finding(
    "batchnorm-communication",
    "BatchNorm's global statistics cost communication in distributed training.",
    "003 §七",
    (
        (
            "collectives per step",
            Rule(
                "collectives(BatchNorm) − collectives(LayerNorm) in one DDP training step "
                "(gloo, 2 processes, the same model otherwise)",
                ">0",
                1.0,
            ),
        ),
        (
            "bytes per step",
            Rule(
                "bytes(BatchNorm) / bytes(LayerNorm) − 1 sent per rank in one training step",
                ">0",
                0.05,
            ),
        ),
    ),
    unit="training step",
)


@dataclass(frozen=True)
class FindingsOptions:
    """What ``normlab bench --findings`` measures (``kinds``: ``ratio``, ``comm``)."""

    out: str | Path = "bench_out"
    kinds: tuple[str, ...] = KINDS
    sizes: tuple[int, ...] = ratio.SIZES
    impls: tuple[str, ...] = ratio.IMPLS
    rounds: int = ratio.ROUNDS
    steps: int = comm.STEPS
    device: str = "cpu"
    threads: int = 0  # torch's (and so normlab's) threads for the timings; 0: torch's default


def decide_ratio(o: FindingsOptions, log=print) -> dict:
    values, record = ratio.measure(o.sizes, o.rounds, o.impls, o.device, log=log)
    means = {
        f"median ms {key} d={d}": t
        for key, ts in record["median_ms"].items()
        for d, t in zip(record["sizes"], ts, strict=True)
    }
    finding = more_work(o.sizes, o.impls)
    return finding.decide(values, means=means) | {"record": record}


def decide_comm(o: FindingsOptions, out: Path) -> dict:
    """Run the torchrun job; a job that cannot run here makes the finding not testable."""
    try:
        counts = comm.launch(out / "comm_counts.json", o.steps)
    except (RuntimeError, OSError, TimeoutError) as e:
        why = f"the torchrun job did not run here: {str(e).splitlines()[0]}"
        return COMMUNICATION.decide({}, untestable={p: why for p, _ in COMMUNICATION.parts})
    return decide_counts(counts)


def decide_counts(counts: dict) -> dict:
    """The communication finding from the per-step counts the torchrun job wrote."""
    bn, ln = counts["norms"]["batchnorm"], counts["norms"]["layernorm"]
    total = lambda s, k: sum(s[k].values())  # noqa: E731
    values = {
        "collectives per step": [
            total(a, "calls") - total(b, "calls") for a, b in zip(bn, ln, strict=True)
        ],
        "bytes per step": [
            total(a, "bytes") / total(b, "bytes") - 1 for a, b in zip(bn, ln, strict=True)
        ],
    }
    means = {}
    for norm, steps in counts["norms"].items():
        for key in ("calls", "bytes"):
            for kind in comm.KINDS:
                xs = [s[key][kind] for s in steps]
                means[f"{norm} {key} {kind}"] = sum(xs) / len(xs)
    untestable = {}
    if counts.get("world_size", 1) < 2:
        untestable = {p: "one process: nothing to communicate" for p, _ in COMMUNICATION.parts}
    return COMMUNICATION.decide(values, means=means, untestable=untestable) | {"record": counts}


def run_findings(options: FindingsOptions, log=print) -> Path:
    """Measure, decide and write ``bench_findings.{md,json}`` (+ ``bench-ratio-vs-d.png``) under
    ``options.out``; returns the Markdown's path."""
    from normlab.lab.numerics import verdict

    o = options
    bad = [k for k in o.kinds if k not in KINDS] + [i for i in o.impls if i not in ratio.IMPLS]
    if bad or not o.kinds:
        raise UsageError(f"findings: unknown {bad}; kinds {list(KINDS)}, impls {ratio.IMPLS}")
    out = out_dir(o.out)
    if o.threads:
        torch.set_num_threads(o.threads)
    verdicts, rules, files = [], {}, []
    if "ratio" in o.kinds:
        verdicts.append(decide_ratio(o, log))
        rules["layernorm-more-work"] = more_work(o.sizes, o.impls)
        png = ratio.ratio_plot(verdicts[-1])
        if png:
            write_file(out / "bench-ratio-vs-d.png", png)
            files.append("bench-ratio-vs-d.png")
    if "comm" in o.kinds:
        verdicts.append(decide_comm(o, out))
        rules["batchnorm-communication"] = COMMUNICATION
    where = platform.processor() or platform.machine()
    head = f"normlab bench --findings: torch {torch.__version__}, {where}"
    if "ratio" in o.kinds:
        head += f"; timings: {torch.get_num_threads()} threads, {o.rounds} interleaved rounds"
    if "comm" in o.kinds:
        head += f"; communication: {o.steps} training steps of {comm.MODEL}"
    text = ["# normlab bench: the articles' cost statements, decided", "", head, ""]
    text += [verdict.markdown(verdicts, rules)]
    if "ratio" in o.kinds:
        text += ["Work per row, counted (not measured):", "", md_table(WORK_HEADER, WORK_ROWS)]
    text += [f"\n![{f}]({f})" for f in files]
    write_file(out / "bench_findings.md", "\n".join(text) + "\n")
    write_file(out / "bench-findings.json", json.dumps(verdicts, indent=1, allow_nan=False))
    return out / "bench_findings.md"
