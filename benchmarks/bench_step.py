"""What the norms cost inside a real training step: AdamW steps of normlab's Transformer.

    python benchmarks/bench_step.py [--rows 0 1 2] [--dtype float32 bfloat16]
        [--placement pre|post] [--budget-s 300] [--write-docs docs/benchmarks.md]

For each model row and dtype three copies of the same model are stepped: norm_backend="auto"
(normlab's kernels), norm_backend="torch" (PyTorch's ``F.rms_norm``/``F.layer_norm``) and
norm="none" (no norm at all). A step is zero_grad, forward, cross-entropy, backward and
``AdamW.step`` (fused, as in the lab's trainer) on one fixed batch of random tokens; bfloat16
runs forward and loss under ``torch.autocast``. All cases live in one process and are timed in
interleaved rounds (the order rotating each round) until ``--budget-s`` is spent, so load drift
on a shared machine hits all alike; each figure is the median over rounds.

The norms' share of a step is ``(step - step with norm="none") / step``, and their cost per
call is that difference over the number of norm calls in the step (each call a forward and a
backward). RMSNorm runs the gemma cast order in both backends: F.rms_norm implements only that
one. With ``--placement post`` the residual add is fused into normlab's norms, while the torch
and no-norm models add in eager PyTorch, so the difference includes that add.

``--python-node`` adds, for the LayerNorm rows, a fourth model whose norms run PyTorch's own
C++ LayerNorm forward and backward inside a Python ``torch.autograd.Function``, as normlab's
kernels run: the column ``µs/call python node`` minus ``µs/call torch`` is what a Python
autograd node costs inside the step, before any kernel of its own.
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import platform
import re
import statistics
import sys
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from normlab.models import Transformer, TransformerConfig, param_groups
from normlab.modules import LayerNorm, RMSNorm

VOCAB = 256
SECTION = "## Training step (bench_step.py)"


@dataclass(frozen=True)
class Row:
    dim: int
    n_layers: int
    seq_len: int
    arch: str
    norm: str
    n_heads: int = 4
    batch: int = 16

    @property
    def label(self) -> str:
        kind = {"rmsnorm": "RMSNorm", "layernorm": "LayerNorm"}[self.norm]
        return f"d={self.dim} {self.n_layers} blocks T={self.seq_len} {self.arch}/{kind}"


ROWS = (
    Row(64, 4, 64, "llama", "rmsnorm"),
    Row(64, 24, 64, "gpt2", "layernorm"),
    Row(128, 12, 128, "llama", "rmsnorm"),
)
VARIANTS = ("normlab", "torch", "none")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


class _TorchLayerNormInPython(torch.autograd.Function):
    """PyTorch's C++ LayerNorm kernels behind a Python autograd node (``--python-node``)."""

    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        y, mean, rstd = torch.ops.aten.native_layer_norm(x, x.shape[-1:], weight, bias, eps)
        ctx.save_for_backward(x, weight, bias, mean, rstd)
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, bias, mean, rstd = ctx.saved_tensors
        grads = torch.ops.aten.native_layer_norm_backward(
            dy, x, x.shape[-1:], mean, rstd, weight, bias, [True, True, True]
        )
        return (*grads, None)


def _python_node_forward(norm: LayerNorm):
    return lambda x, residual=None: _TorchLayerNormInPython.apply(
        x, norm.weight, norm.bias, norm.eps
    )


class Case:
    """One model, its optimizer and batch: ``step()`` runs one training step."""

    def __init__(self, row: Row, variant: str, dtype: str, placement: str, device: str):
        kw = {"norm_backend": "torch" if variant == "torch" else "auto"}
        cfg = TransformerConfig(
            VOCAB, row.dim, row.n_layers, row.n_heads,
            norm="none" if variant == "none" else row.norm, placement=placement, arch=row.arch,
            max_seq_len=row.seq_len, rms_casting="gemma", **kw,
        )  # fmt: skip
        torch.manual_seed(0)
        self.model = Transformer(cfg).to(device)
        if variant == "python node":  # (no residual: Pre placement only)
            for m in self.model.modules():
                if isinstance(m, LayerNorm):
                    m.forward = _python_node_forward(m)
        self.opt = torch.optim.AdamW(param_groups(self.model, 0.1), lr=1e-3, fused=True)
        g = torch.Generator().manual_seed(1)
        tokens = torch.randint(VOCAB, (row.batch, row.seq_len + 1), generator=g).to(device)
        self.inputs, self.targets = tokens[:, :-1], tokens[:, 1:]
        self.autocast = torch.autocast(device, dtype=DTYPES[dtype], enabled=dtype != "float32")
        self.norm_calls = sum(isinstance(m, (RMSNorm, LayerNorm)) for m in self.model.modules())
        self.sync = torch.cuda.synchronize if device == "cuda" else lambda: None
        self.times: list[float] = []  # seconds per step, one entry per round

    def step(self) -> None:
        self.opt.zero_grad(set_to_none=True)
        with self.autocast:
            logits = self.model(self.inputs)
            loss = F.cross_entropy(logits.reshape(-1, VOCAB).float(), self.targets.reshape(-1))
        loss.backward()
        self.opt.step()

    def timed(self, steps: int) -> float:
        """Seconds per step over ``steps`` steps."""
        self.sync()
        t0 = time.perf_counter()
        for _ in range(steps):
            self.step()
        self.sync()
        return (time.perf_counter() - t0) / steps


def run(cases: dict, budget_s: float, batch_s: float) -> int:
    """Warm every case up, then time interleaved rounds until ``budget_s`` (counted from the
    start) is spent; returns the number of rounds (at least one)."""
    start = time.perf_counter()
    steps = {}
    for key, case in cases.items():
        for _ in range(2):  # first steps: kernel compilation, allocator and autocast caches
            case.step()
        steps[key] = max(1, math.ceil(batch_s / case.timed(1)))
    order, rounds = list(cases), 0
    while rounds == 0 or time.perf_counter() - start < budget_s:
        shift = rounds % len(order)
        for key in order[shift:] + order[:shift]:
            cases[key].times.append(cases[key].timed(steps[key]))
        rounds += 1
    return rounds


def table(rows: list[Row], dtypes: list[str], cases: dict, python_node: bool) -> str:
    head = (
        "| model | dtype | normlab ms | torch ms | no-norm ms | normlab/torch | share normlab % "
        "| share torch % | norm calls | µs/call normlab | µs/call torch |"
    )
    extra = " µs/call python node |" if python_node else ""
    lines = [head + extra, "|---" * (12 if python_node else 11) + "|"]
    for row in rows:
        for dtype in dtypes:
            ms = {v: 1e3 * statistics.median(c.times) for (r, d, v), c in cases.items()
                  if (r, d) == (row, dtype)}  # fmt: skip
            calls = cases[row, dtype, "normlab"].norm_calls
            share = {v: 100 * (ms[v] - ms["none"]) / ms[v] for v in ("normlab", "torch")}
            per_call = {v: 1e3 * (ms[v] - ms["none"]) / calls for v in ms}
            line = (
                f"| {row.label} | {dtype} | {ms['normlab']:.2f} | {ms['torch']:.2f} | "
                f"{ms['none']:.2f} | {ms['normlab'] / ms['torch']:.2f} | "
                f"{share['normlab']:.1f} | {share['torch']:.1f} | {calls} | "
                f"{per_call['normlab']:.0f} | {per_call['torch']:.0f} |"
            )
            if python_node:
                node = per_call.get("python node")
                line += " – |" if node is None else f" {node:.0f} |"
            lines.append(line)
    return "\n".join(lines)


def machine() -> str:
    """CPU model, torch version and thread count (the GPU's name on CUDA)."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            found = re.search(r"^model name\s*:\s*(.+)$", f.read(), re.MULTILINE)
        cpu = found.group(1).strip() if found else cpu
    except OSError:
        pass
    gpu = f", {torch.cuda.get_device_name()}" if torch.cuda.is_available() else ""
    return (
        f"{cpu} ({os.cpu_count()} cores){gpu}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads"
    )


def write_docs(path: str, body: str) -> None:
    """Replace this script's section of ``path`` (up to the next ``## `` heading), or append
    it; every other section is left as it is."""
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        text = ""
    section = f"{SECTION}\n\n{body.strip()}\n"
    start = text.find(SECTION + "\n")
    if start < 0:
        text = text.rstrip("\n") + ("\n\n" if text else "") + section
    else:
        end = text.find("\n## ", start + len(SECTION))
        rest = "" if end < 0 else "\n" + text[end + 1 :]
        text = text[:start] + section + rest
    with open(path, "w") as f:
        f.write(text)


def command(argv: list[str]) -> str:
    """The command line to reproduce the run, without --write-docs (a path of this machine)."""
    args, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--write-docs":
            skip = True
        elif not a.startswith("--write-docs="):
            args.append(a)
    return " ".join(["python benchmarks/bench_step.py", *args])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, nargs="+", default=list(range(len(ROWS))),
                   choices=range(len(ROWS)), help="; ".join(
                       f"{i}: {r.label}" for i, r in enumerate(ROWS)))  # fmt: skip
    p.add_argument("--dtype", nargs="+", default=list(DTYPES), choices=list(DTYPES))
    p.add_argument("--placement", default="pre", choices=["pre", "post"])
    p.add_argument("--budget-s", type=float, default=300.0, help="total run time, warm-up too")
    p.add_argument("--batch-s", type=float, default=0.1, help="time of one case in a round")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument(
        "--python-node",
        action="store_true",
        help="add torch's LayerNorm behind a Python autograd node (LayerNorm rows)",
    )
    p.add_argument("--write-docs", metavar="PATH", help="replace this script's section there")
    args = p.parse_args()
    if args.python_node and args.placement != "pre":
        p.error("--python-node needs --placement pre (its node has no fused residual add)")

    rows = [ROWS[i] for i in args.rows]
    cases = {}
    for row in rows:
        node = ("python node",) if args.python_node and row.norm == "layernorm" else ()
        for dtype in args.dtype:
            for v in VARIANTS + node:
                cases[row, dtype, v] = Case(row, v, dtype, args.placement, args.device)
    t0 = time.perf_counter()
    rounds = run(cases, args.budget_s, args.batch_s)
    elapsed = time.perf_counter() - t0
    result = table(rows, args.dtype, cases, args.python_node)
    date = datetime.date.today().isoformat()
    about = (
        f"{date}; {machine()}; {args.placement.capitalize()} placement, batch 16, fused AdamW; "
        f"median of {rounds} interleaved rounds ({elapsed:.0f} s).\n\n"
        f"`{command(sys.argv[1:])}`"
    )
    print(about + "\n\n" + result)
    if args.write_docs:
        write_docs(args.write_docs, about + "\n\n" + result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
