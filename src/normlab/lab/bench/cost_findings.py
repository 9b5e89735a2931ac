"""``normlab bench --findings``: the articles' statements about cost, decided.

- ``rmsnorm-faster-<impl>`` (000 §3.3, §4.2; 001; 003 §八): the time ratio LayerNorm / RMSNorm by
  hidden size, one finding per implementation (normlab's kernels, PyTorch eager,
  ``torch.compile``: :mod:`normlab.lab.bench.ratio`), each with its own verdict; the work itself
  (passes and operations per element) is counted from the code (:mod:`normlab.lab.bench.work`),
  not timed;
- ``batchnorm-communication`` (003 §七): collectives and bytes per training step under
  ``torchrun`` (:mod:`normlab.lab.bench.comm`);
- ``fused-add-norm-saves-traffic`` (001): the fused residual-add + RMSNorm against the same two
  kernels unfused (:mod:`normlab.lab.bench.fused`).

Rules fixed here, before the runs; the decision is the verdict engine's
(:mod:`normlab.lab.verdict.finding`).
"""

from __future__ import annotations

import math
import platform
import subprocess
from dataclasses import dataclass
from pathlib import Path

import torch

from normlab.lab.bench import comm, fused, ratio, work
from normlab.lab.kit import doc as d
from normlab.lab.kit.errors import UsageError
from normlab.lab.kit.io import out_dir, utc, write_file, write_json
from normlab.lab.kit.threads import set_threads
from normlab.lab.numerics.measuring import part, registered
from normlab.lab.numerics.sentences import OPS
from normlab.lab.verdict.finding import Finding

WORK_DELTA = -math.log(0.95)  # RMSNorm must save at least 5 % of LayerNorm's time to count
KINDS = ("ratio", "comm", "fused")
IMPL_WORDS = {
    "normlab": "normlab's fused kernels (Numba on the CPU, Triton on a GPU)",
    "eager": "PyTorch eager (F.rms_norm, F.layer_norm)",
    "compile": "torch.compile of the eager ops",
}


def _timed(name: str, statement: str, source: str, sizes, what: str) -> Finding:
    """A timing finding: one part per size ``d``, ``v`` = ``what`` per interleaved round, on
    the 20 %-trimmed mean (a round stalled by the machine moves nothing) against 5 %."""
    parts = tuple(part(f"d={d}", what, delta=WORK_DELTA, trim=0.2) for d in sizes)
    return Finding(name, statement, source, parts, unit="interleaved timing round")


def rmsnorm_faster(impl: str, sizes=ratio.SIZES) -> Finding:
    """RMSNorm's forward takes less time than LayerNorm's in ``impl``, at every size."""
    return _timed(
        f"rmsnorm-faster-{impl}",
        f"RMSNorm's forward takes less time than LayerNorm's, in {IMPL_WORDS[impl]}.",
        "000 §3.3, §4.2; 001; 003 §八",
        sizes,
        "ln(t_LayerNorm / t_RMSNorm) per interleaved round at this d (forward, FP32, "
        f"{ratio.ELEMENTS} elements per call); δ: RMSNorm saves 5 % of LayerNorm's time",
    )


def work_rows() -> list[list[str]]:
    """The counted work of the articles' two forwards (``work.count``)."""
    counted = {name: work.count(op) for op, name in OPS.items()}
    return [[k, str(w.passes), str(w.per_element), " → ".join(w.ops)] for k, w in counted.items()]


WORK_HEADER = ["the articles' forward", "passes over the row", "operations per element", "ops"]


COMMUNICATION = Finding(
    "batchnorm-communication",
    "BatchNorm's global statistics cost communication in distributed training.",
    "003 §七",
    (
        part(
            "collectives per step",
            "collectives(BatchNorm) − collectives(LayerNorm) in one DDP training step (gloo, 2 "
            "processes, the same model otherwise)",
            delta=1.0,
        ),
        part(
            "bytes per step",
            "bytes(BatchNorm) / bytes(LayerNorm) − 1 sent per rank in one training step",
            delta=0.05,
        ),
    ),
    unit="training step",
)


def fused_saves(sizes=fused.SIZES) -> Finding:
    """The fused residual-add + RMSNorm takes less time than the add and the norm apart."""
    return _timed(
        "fused-add-norm-saves-traffic",
        "Fusing the residual add into the norm's kernel saves time over the same two steps "
        "apart, by cutting a memory round trip (normlab's kernels on both sides).",
        "001",
        sizes,
        "ln(t_unfused / t_fused) per interleaved round at this d (forward, FP32, "
        f"{fused.ELEMENTS} elements a tensor per call, past the last-level cache; "
        "unfused: x + r, then the norm of the sum); δ: the fusion saves 5 % of the "
        "unfused time",
    )


@dataclass(frozen=True)
class FindingsOptions:
    """What ``normlab bench --findings`` measures (``kinds``: ``ratio``, ``comm``)."""

    out: str | Path = "bench_out"
    kinds: tuple[str, ...] = KINDS
    sizes: tuple[int, ...] = ratio.SIZES
    impls: tuple[str, ...] = ratio.IMPLS
    rounds: int = ratio.ROUNDS
    device: str = "cpu"
    threads: int = 0  # torch's (and so normlab's) threads for the timings; 0: torch's default


def _medians(ms: dict[str, list[float]], sizes) -> dict[str, float]:
    """What a timing verdict shows beside its parts: each contender's median ms at each size."""
    return {
        f"median ms {k} d={d}": t for k, ts in ms.items() for d, t in zip(sizes, ts, strict=True)
    }


def decide_ratio(o: FindingsOptions, log=print) -> list[dict]:
    """One finding per implementation from one interleaved measurement of them all."""
    values, median_ms = ratio.measure(o.sizes, o.rounds, o.impls, o.device, log=log)
    out = []
    for impl in o.impls:
        ms = {op: median_ms[f"{impl} {op}"] for op in OPS}
        mine = {f"d={d}": values[f"{impl} d={d}"] for d in o.sizes}
        own = {"sizes": list(o.sizes), "impl": impl, "median_ms": ms, "rows_x_d": ratio.ELEMENTS}
        finding = rmsnorm_faster(impl, o.sizes)
        out.append(registered(finding, mine, own, means=_medians(ms, o.sizes)))
    return out


def decide_fused(o: FindingsOptions, log=print) -> dict:
    """The fusion finding from one interleaved measurement of both sides at each size."""
    sizes = tuple(d for d in o.sizes if d in fused.SIZES) or fused.SIZES
    finding, began = fused_saves(sizes), utc()
    # The saved traffic would not come from memory here: nothing to decide.
    if why := fused.working_set_why(o.device):
        return registered(finding, {}, why=why, began=began)
    values, ms = fused.measure(sizes, o.rounds, o.device, log=log)
    record = {
        "sizes": list(sizes),
        "median_ms": ms,
        "traffic": fused.TRAFFIC,
        "llc": fused.llc_bytes(),
    }
    return registered(finding, values, record, means=_medians(ms, sizes), began=began)


def decide_comm(o: FindingsOptions, out: Path) -> dict:
    """Run the torchrun job; a job that cannot run here makes the finding not testable."""
    try:
        counts = comm.launch(out / "comm_counts.json")
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:  # a job hung past TIMEOUT_S
        why = f"the torchrun job did not run here: {str(e).splitlines()[0]}"
        return registered(COMMUNICATION, {}, why=why)
    return decide_counts(counts)


def decide_counts(counts: dict) -> dict:
    """The communication finding from the per-step counts the torchrun job wrote."""
    steps = list(zip(counts["norms"]["batchnorm"], counts["norms"]["layernorm"], strict=True))
    total = lambda step, key: sum(step[key].values())
    values = {
        "collectives per step": [total(bn, "calls") - total(ln, "calls") for bn, ln in steps],
        "bytes per step": [total(bn, "bytes") / total(ln, "bytes") - 1 for bn, ln in steps],
    }
    means = {
        f"{norm} {key} {kind}": sum(s[key][kind] for s in steps) / len(steps)
        for norm, steps in counts["norms"].items()
        for key in ("calls", "bytes")
        for kind in comm.KINDS
    }
    alone = "one process: nothing to communicate" if counts.get("world_size", 1) < 2 else ""
    return registered(COMMUNICATION, values, counts, means=means, why=alone)


def run_findings(options: FindingsOptions, log=print) -> Path:
    """Measure, decide and write ``bench_findings.{md,json}`` (+ ``bench-ratio-vs-d.png``) under
    ``options.out``; returns the Markdown's path."""
    from normlab.lab.numerics import tables

    o = options
    bad = [k for k in o.kinds if k not in KINDS] + [i for i in o.impls if i not in ratio.IMPLS]
    if bad or not o.kinds:
        raise UsageError(f"findings: unknown {bad}; kinds {list(KINDS)}, impls {ratio.IMPLS}")
    set_threads(o.threads)
    out = out_dir(o.out)
    head = f"normlab bench --findings: torch {torch.__version__}, "
    head += platform.processor() or platform.machine()
    verdicts, tail = [], []
    if "ratio" in o.kinds:
        verdicts += decide_ratio(o, log)
        head += f"; timings: {torch.get_num_threads()} threads, {o.rounds} interleaved rounds"
        counted = "Work per row, counted from the articles' code (`normlab.lab.bench.work`):"
        tail += [d.Paragraph(counted), d.dense_table(WORK_HEADER, work_rows())]
        if png := ratio.ratio_plot(verdicts):
            write_file(out / "bench-ratio-vs-d.png", png)
            tail.append(d.Figure("bench-ratio-vs-d.png", png, "bench-ratio-vs-d.png"))
    if "fused" in o.kinds:
        verdicts.append(decide_fused(o, log))
    if "comm" in o.kinds:
        verdicts.append(decide_comm(o, out))
        head += f"; communication: {comm.STEPS} training steps of {comm.MODEL}"
    rules = {f.name: f for f in all_findings(o.sizes, o.impls)}
    page = d.Document("normlab bench: the articles' cost statements, decided")
    page.add(d.Heading(1, page.title), d.Paragraph(head), *tables.blocks(verdicts, rules), *tail)
    write_file(out / "bench_findings.md", d.to_markdown(page))
    write_json(out / "bench-findings.json", verdicts, indent=1)
    return out / "bench_findings.md"


def all_findings(sizes=ratio.SIZES, impls=ratio.IMPLS) -> list[Finding]:
    """Every finding ``normlab bench --findings`` decides, by name order of its report."""
    return [rmsnorm_faster(impl, sizes) for impl in impls] + [COMMUNICATION, fused_saves()]
