"""The CPU kernels against the bandwidth limit on the machine of the day: the table of
docs/benchmarks.md, "CPU kernels against copy_, per machine class".

    python benchmarks/bench_cpu_limit.py --write-docs docs/benchmarks.md   # the published table
    python benchmarks/bench_cpu_limit.py --quick                           # a fast look
    python benchmarks/bench_cpu_limit.py --copy-sizes 32 64 128 256        # copy_ GB/s by MiB

First the tuner picks the launch choices of every key the table needs (in a temporary cache,
``--tune-budget`` seconds per key: more than a user's first call spends, for a steadier pick);
they are printed, as a ``choices.SHIPPED`` entry for this machine class too. On a busy machine
the tuner does what it does for a user there, nothing (the shipped choices run), unless
``--tune-always``: picks timed against others' load are no picks for a quiet machine. Then, per
op, dtype, hidden size and mode (forward; forward+backward), ``copy_`` of the input, normlab
with the tuned choices, normlab with the old choices (``choices.OLD``) and torch eager run in
interleaved rounds in this one process: each round times a batch (>= 20 ms) of each in turn, the
order reversed every other round, so a load spike of a shared machine lands on one round of
each. ``--force OP=CHOICE ...`` runs the named launch choices in the tuned column instead (no
tuning): a comparison of one candidate with the old choices, on a busy machine too;
``--baseline OP=CHOICE ...`` runs the named ones in the old-choices column instead: a paired
comparison of two candidates (the same pairs loops with and without ``/v512``, say).

``copy_`` moves the same bytes as the kernel: a source of tensors / 2 times the input's bytes
(tensors: 2 for a forward, 5 for forward+backward; bandwidth.TENSORS), so that both work on
the same amount of memory: a CPU whose last-level cache holds ``copy_``'s two tensors but not the
kernel's four or five would otherwise set a limit no kernel of that size can reach. Per round, %
of copy_ = t_copy / t_normlab, and eager x = t_eager / t_normlab; for forward+backward the
``copy_`` of the input alone is timed too (``% of copy_ x``: (5 x bytes / t_normlab) / (2 x bytes
/ t_copy_x)). The table gives each one's median over the rounds and its spread (min-max).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import os
import re
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

import normlab
from normlab.kernels.numba import choices, tuner
from normlab.kernels.numba import launch as numba_launch
from normlab.lab.bench.bandwidth import TENSORS
from normlab.lab.kit.doc import md_table

FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "avx_ne_convert", "sve", "asimd")
OPS = {"rms_norm": ("rms_fwd", "rms_bwd"), "layer_norm": ("ln_fwd", "ln_bwd")}
BATCH_S = 0.02
BEGIN, END = "<!-- bench_cpu_limit {} begin -->", "<!-- bench_cpu_limit {} end -->"
CLASSES_END = "<!-- bench_cpu_limit classes end -->"


@dataclass
class Case:
    """One row of the table: per round, % of copy_ (tuned and old choices), eager time over
    normlab's, and copy_ GB/s."""

    op: str
    dtype: str
    hidden: int
    mode: str
    choice: str
    pct: list[float]
    pct_old: list[float]
    x_eager: list[float]
    copy_gbps: list[float]
    pct_input_copy: list[float]  # against copy_ of the input alone (== pct for a forward)


def _call(op: str, n: int, eager: bool):
    if op == "rms_norm":
        if eager:
            return lambda x, w, b: F.rms_norm(x, (n,), w, 1e-6)
        return lambda x, w, b: normlab.rms_norm(x, w, 1e-6, casting="gemma", backend="numba")
    if eager:
        return lambda x, w, b: F.layer_norm(x, (n,), w, b, 1e-5)
    return lambda x, w, b: normlab.layer_norm(x, w, b, 1e-5, backend="numba")


def _runner(fn, mode: str, x, w, b, forced=None):
    """A no-argument forward (no grad) or forward+backward of ``fn``, under ``forced``."""
    ctx = (lambda: tuner.forced(forced)) if forced else contextlib.nullcontext
    if mode == "fwd":

        def run():
            with ctx(), torch.no_grad():
                fn(x, w, b)

        return run
    leaves = [t.detach().requires_grad_(True) for t in (x, w, b)]
    dy = torch.randn_like(x)

    def run():
        with ctx():
            torch.autograd.grad(fn(*leaves), leaves, dy, allow_unused=True)

    return run


def _rounds(fns: dict, rounds: int) -> dict[str, list[float]]:
    """Seconds per call of each of ``fns`` in each of ``rounds`` interleaved rounds."""
    number = {}
    for k, fn in fns.items():
        fn()  # warm up (page faults, a compile)
        t0 = time.perf_counter()
        fn()
        number[k] = max(1, math.ceil(BATCH_S / max(time.perf_counter() - t0, 1e-7)))
    out: dict[str, list[float]] = {k: [] for k in fns}
    order = list(fns)
    for r in range(rounds):
        for k in order if r % 2 == 0 else order[::-1]:
            t0 = time.perf_counter()
            for _ in range(number[k]):
                fns[k]()
            out[k].append((time.perf_counter() - t0) / number[k])
    return out


def measure(op, dtype, n, mode, elements, rounds, eager, force=None, baseline=None) -> Case:
    g = torch.Generator().manual_seed(n)
    x = torch.randn(max(1, elements // n), n, generator=g).to(dtype)
    w = (1 + 0.1 * torch.randn(n, generator=g)).to(dtype)
    b = (0.1 * torch.randn(n, generator=g)).to(dtype)
    k = TENSORS[(mode, False)]
    src = x if k == 2 else torch.randn(x.numel() * k // 2, generator=g).to(dtype)  # same bytes
    dst, dst_x = torch.empty_like(src), torch.empty_like(x)
    old = {o: (baseline or {}).get(o, choices.OLD[o]) for o in OPS[op]}
    mine = {o: force.get(o, choices.OLD[o]) for o in OPS[op]} if force else None
    fns = {
        "copy": lambda: dst.copy_(src),
        "tuned": _runner(_call(op, n, False), mode, x, w, b, forced=mine),
        "old": _runner(_call(op, n, False), mode, x, w, b, forced=old),
    }
    if k != 2:
        fns["copy_x"] = lambda: dst_x.copy_(x)
    if eager:
        fns["eager"] = _runner(_call(op, n, True), mode, x, w, b)
    t = _rounds(fns, rounds)
    pct = lambda ts: [100 * c / a for a, c in zip(ts, t["copy"], strict=True)]  # noqa: E731
    pct_x = [
        100 * (k / a) / (2 / c) for a, c in zip(t["tuned"], t.get("copy_x", t["copy"]), strict=True)
    ]
    ran = [(mine or {}).get(o) or numba_launch._launch(o, x, None) for o in OPS[op]]
    picks = "+".join(c.name for c in ran[: 1 + (mode != "fwd")])
    return Case(
        op,
        str(dtype).removeprefix("torch."),
        n,
        mode,
        picks,
        pct(t["tuned"]),
        pct(t["old"]),
        [e / a for e, a in zip(t.get("eager", []), t["tuned"], strict=False)],
        [2 * src.numel() * src.element_size() / c / 1e9 for c in t["copy"]],
        pct_x,
    )


def _spread(v: list[float], fmt: str) -> str:
    if not v:
        return "-"
    return f"{fmt.format(statistics.median(v))} [{fmt.format(min(v))}–{fmt.format(max(v))}]"


def _paired(c: Case) -> list[float]:
    """Per round, the old choices' time over the tuned ones' (> 1: the tuned ones faster)."""
    return [a / b for a, b in zip(c.pct, c.pct_old, strict=True)]


def table(cases: list[Case]) -> str:
    head = ["op", "dtype", "hidden", "mode", "copy_ GB/s", "% of copy_", "old choices",
            "old / tuned time", "x eager", "choice (fwd+bwd)"]  # fmt: skip
    rows = [
        [
            c.op,
            c.dtype,
            c.hidden,
            c.mode,
            _spread(c.copy_gbps, "{:.1f}"),
            _spread(c.pct, "{:.0f}"),
            _spread(c.pct_old, "{:.0f}"),
            _spread(_paired(c), "{:.2f}"),
            _spread(c.x_eager, "{:.1f}"),
            c.choice,
        ]  # fmt: skip
        for c in cases
    ]
    return md_table(head, rows)


def targets(cases: list[Case]) -> list[str]:
    """The issue's targets, each as met or not in how many rows (from the medians), and the rows
    where the tuned choices were slower than the old ones by more than 5 % (the median of the
    paired round ratios)."""
    out = []
    for dtype, mode, goal in (("float32", "fwd", 90), ("float32", "fwd+bwd", 85),
                              ("bfloat16", "fwd", None), ("bfloat16", "fwd+bwd", 75)):  # fmt: skip
        rows = [c for c in cases if c.dtype == dtype and c.mode == mode]
        if not rows:
            continue
        med = sorted(statistics.median(c.pct) for c in rows)
        slower = sum(statistics.median(_paired(c)) < 0.95 for c in rows)
        line = f"- {dtype} {mode}: medians {med[0]:.0f}–{med[-1]:.0f} % of copy_"
        if goal is not None:
            met = sum(m >= goal for m in med)
            line += f"; target ≥ {goal} %: met in {met} of {len(med)}"
        if mode != "fwd":
            inp = sorted(statistics.median(c.pct_input_copy) for c in rows)
            line += f" (against copy_ of the input alone: {inp[0]:.0f}–{inp[-1]:.0f} %"
            line += f", met in {sum(m >= goal for m in inp)} of {len(inp)})" if goal else ")"
        out.append(f"{line}; tuned > 5 % slower than the old choices in {slower} of {len(rows)}")
    return out


def copy_sizes(mib: list[int], dtypes: list[torch.dtype], rounds: int) -> str:
    """``copy_`` GB/s (read + write) by source size, interleaved as the kernels are: where the
    last-level cache stops serving it, and why ``measure`` copies the kernel's bytes."""
    fns = {}
    for dtype in dtypes:
        for size in mib:
            src = torch.randn(size * 2**20 // dtype.itemsize).to(dtype)
            dst = torch.empty_like(src)
            fns[(dtype, size)] = lambda dst=dst, src=src: dst.copy_(src)
    t = _rounds(fns, rounds)
    rows = [
        [
            str(d).removeprefix("torch."),
            size,
            _spread([2 * size * 2**20 / s / 1e9 for s in ts], "{:.1f}"),
        ]
        for (d, size), ts in t.items()
    ]
    return md_table(["dtype", "source MiB", "copy_ GB/s"], rows)


def _command() -> str:
    """This run's command line, without ``--json PATH`` (a path of this machine)."""
    argv = sys.argv[1:]
    if "--json" in argv:
        i = argv.index("--json")
        argv = argv[:i] + argv[i + 2 :]
    return " ".join(["python benchmarks/bench_cpu_limit.py", *argv])


def header(args, load: tuple[float, float], tuned: str) -> str:
    model, flags = choices.cpu_info()
    shown = " ".join(f for f in FLAGS if f in flags) or "-"
    today = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    return (
        f"Measured {today} on {model} ({choices.cpu_count()} CPUs, class "
        f"`{choices.machine_class()}`; flags: {shown}); torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads, Numba layer `{numba_threading_layer()}`; "
        f"{args.rounds} rounds, {args.elements} elements per tensor; {tuned}; load average "
        f"{load[0]:.1f} before, {load[1]:.1f} after.\nCommand: `{_command()}`."
    )


def numba_threading_layer() -> str:
    import numba

    try:
        return numba.threading_layer()
    except ValueError:  # no parallel region has run yet
        return "-"


def tune(args, dtypes) -> list[str]:
    """Tune the keys of the table's calls (of ``args.elements``) in a fresh temporary cache; the
    picks as lines of a ``choices.SHIPPED`` entry."""
    os.environ["NORMLAB_TUNE_DIR"] = tempfile.mkdtemp(prefix="normlab-bench-tune-")
    os.environ["NORMLAB_TUNE_BUDGET_S"] = str(args.tune_budget)
    os.environ["NORMLAB_TUNE"] = "always" if args.tune_always else "1"
    tuner.reset()
    lines = []
    for dtype in dtypes:
        for n in args.hidden:
            for op in (o for pair in OPS.values() for o in pair):
                rows = torch.empty(max(1, args.elements // n), n, dtype=dtype)  # never touched
                pick = numba_launch._launch(op, rows, None)
                k = choices.key(op, str(dtype).removeprefix("torch."), n, rows.numel())
                lines.append(f'    "{k}": {pick!r},')
                print(f"tuned {k}: {pick.name}", flush=True)
    return lines


def write_docs(path: Path, block: str) -> None:
    """Replace this machine class's block in ``path`` (or add it before the classes' end)."""
    cls = choices.machine_class()
    begin, end = BEGIN.format(cls), END.format(cls)
    text = path.read_text(encoding="utf-8")
    new = f"{begin}\n{block}\n{end}"
    if begin in text:
        text = re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: new, text, flags=re.S)
    elif CLASSES_END in text:
        text = text.replace(CLASSES_END, f"{new}\n\n{CLASSES_END}")
    else:
        raise SystemExit(f"{path}: no '{CLASSES_END}' marker to add this machine class before")
    path.write_text(text, encoding="utf-8")


def _forced(p: argparse.ArgumentParser, items: list[str], flag: str) -> dict[str, choices.Launch]:
    """``--force``'s (or ``--baseline``'s) ``OP=CHOICE ...`` as ``{op: Launch}``."""
    out = {}
    for item in items:
        op, _, name = item.partition("=")
        if op not in choices.OPS:
            p.error(f"{flag} {item}: the op is one of {', '.join(choices.OPS)}")
        try:
            out[op] = choices.Launch.from_name(name)
        except ValueError as e:
            p.error(f"{flag} {item}: {e}")
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=11, help="interleaved rounds (>= 9)")
    p.add_argument("--hidden", type=int, nargs="+", default=[1024, 4096, 8192])
    p.add_argument("--elements", type=int, default=1 << 25, help="elements per tensor")
    p.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    p.add_argument("--tune-budget", type=float, default=1.0, help="tuning seconds per key")
    p.add_argument("--tune-always", action="store_true", help="tune on a busy machine too")
    p.add_argument("--no-eager", action="store_true", help="skip torch eager (the slowest)")
    p.add_argument("--quick", action="store_true", help="9 rounds, hidden 4096, 2**23 elements")
    p.add_argument("--write-docs", type=Path, help="put the table in this Markdown file")
    p.add_argument("--json", type=Path, help="every round's values, as JSON")
    p.add_argument("--copy-sizes", type=int, nargs="+", metavar="MIB",
                   help="only time copy_ of sources of these sizes (MiB), then stop")  # fmt: skip
    p.add_argument(
        "--force",
        nargs="+",
        default=[],
        metavar="OP=CHOICE",
        help="run these launch choices in the tuned column instead of tuning (e.g. "
        "ln_bwd=2pass/c0/t1/pairs; the ops not named run their old choices)",
    )
    p.add_argument(
        "--baseline",
        nargs="+",
        default=[],
        metavar="OP=CHOICE",
        help="run these launch choices in the old-choices column instead of the old ones",
    )
    args = p.parse_args()
    if args.quick:
        args.rounds, args.hidden, args.elements = 9, [4096], 1 << 23
    if args.rounds < 9:
        p.error("--rounds: at least 9")
    dtypes = [getattr(torch, d) for d in args.dtypes]
    if args.copy_sizes:
        print(copy_sizes(args.copy_sizes, dtypes, args.rounds))
        return 0
    force, baseline = _forced(p, args.force, "--force"), _forced(p, args.baseline, "--baseline")
    if (force or baseline) and args.write_docs:
        p.error("--force/--baseline with --write-docs: the published table is tuned against old")
    load0 = os.getloadavg()[0]
    if force:
        tuned = "not tuned: forced choices " + ", ".join(f"{o}={c.name}" for o, c in force.items())
    elif args.tune_always or not tuner.busy():
        tuned = f"tuned {args.tune_budget:g} s per key" + (" on a busy machine" * tuner.busy())
    else:
        tuned = "not tuned (a busy machine): the shipped choices ran"
    if baseline:
        tuned += "; old-choices column: " + ", ".join(f"{o}={c.name}" for o, c in baseline.items())
    shipped = [] if force else tune(args, dtypes)
    cases = []
    for dtype in dtypes:
        for n in args.hidden:
            for op in OPS:
                for mode in ("fwd", "fwd+bwd"):
                    cases.append(measure(op, dtype, n, mode, args.elements, args.rounds,
                                         not args.no_eager, force, baseline))  # fmt: skip
                    print(table(cases[-1:]).splitlines()[-1], flush=True)
    load = (load0, os.getloadavg()[0])
    block = "\n\n".join([header(args, load, tuned), table(cases), "\n".join(targets(cases))])
    print(f"\n{block}\n\nchoices.SHIPPED[{choices.machine_class()!r}] = {{")
    print("\n".join(shipped) + "\n}")
    if args.json:
        args.json.write_text(json.dumps([asdict(c) for c in cases], indent=1), encoding="utf-8")
    if args.write_docs:
        write_docs(args.write_docs, block)
    return 0


if __name__ == "__main__":
    sys.exit(main())
