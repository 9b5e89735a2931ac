"""GB/s of normlab's Triton RMSNorm/LayerNorm kernels against torch eager, torch.compile and
Liger-Kernel / quack (when installed), as a fraction of the device's ``copy_`` bandwidth; a
tuning sweep of the launch table's candidates; peak memory of a forward + backward.

    python benchmarks/gpu_bench.py --out DIR [--sweep] [--memory]

Writes ``DIR/results.csv`` (one line per measurement, appended as it finishes) and
``DIR/table.md`` (rewritten after every measurement), so a run cut short still leaves results.
Each shape's inputs are made once and every implementation is timed on them in turn (bf16
before fp32, torch.compile last, because it compiles per shape); work stops at ``--budget-s``.
Bytes counted are the ideal traffic: forward reads x and writes y (2 MN elements), backward
reads x, dy and writes dx (3 MN), fused add reads x, r and writes h, y (4 MN); weights ignored.

``--sweep`` first times every candidate of ``normlab.kernels.triton.tuning.candidates`` at each
size (bf16, both norms, forward and backward, through the launchers), writes
``DIR/sweep.csv``, ``DIR/sweep.md`` and the winning rows as ``DIR/tuning.json`` (the table
``NORMLAB_TRITON_TUNING`` or ``tuning.load`` put in place), and measures the main table with
them. ``--memory`` adds ``DIR/memory.md``: peak CUDA memory of one forward + backward (and the
bytes autograd saves for it) per implementation. A missing library (Liger, quack) is a column
of "n/a", never a failed run.
"""

from __future__ import annotations

import argparse
import csv
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch
import torch.nn.functional as F

EPS = 1e-6
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32, "fp16": torch.float16}
IO_ELEMS = {"rms_fwd": 2, "rms_bwd": 3, "rms_add": 4, "ln_fwd": 2, "ln_bwd": 3}


@dataclass
class Row:
    op: str
    dtype: str
    n: int
    m: int
    impl: str
    ms: float = float("nan")
    gbps: float = float("nan")
    pct_copy: float = float("nan")
    copy_gbps: float = float("nan")
    max_diff_vs_eager: float = float("nan")
    status: str = "ok"


# ---------------------------------------------------------------------------------------------
# implementations: each returns fn(x, w, b, r) -> output (y, or (y, h) for the fused add)


def _normlab(op: str) -> Callable:
    import normlab

    if op.startswith("rms"):
        kw = dict(casting="gemma", backend="triton")  # gemma == F.rms_norm's cast order
        if op == "rms_add":
            return lambda x, w, b, r: normlab.rms_norm(x, w, EPS, residual=r, **kw)
        return lambda x, w, b, r: normlab.rms_norm(x, w, EPS, **kw)
    return lambda x, w, b, r: normlab.layer_norm(x, w, b, EPS, backend="triton")


def _eager(op: str) -> Callable:
    if op == "rms_add":

        def fused(x, w, b, r):
            h = x + r
            return F.rms_norm(h, (h.shape[-1],), w, EPS), h

        return fused
    if op.startswith("rms"):
        return lambda x, w, b, r: F.rms_norm(x, (x.shape[-1],), w, EPS)
    return lambda x, w, b, r: F.layer_norm(x, (x.shape[-1],), w, b, EPS)


def _compiled(op: str) -> Callable:
    return torch.compile(_eager(op), dynamic=False, fullgraph=True)


def _liger(op: str) -> Callable:
    if op == "rms_add":
        from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction as Fn

        return lambda x, w, b, r: Fn.apply(x, r, w, EPS, 0.0, "gemma", False)
    if op.startswith("rms"):
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction as Fn

        return lambda x, w, b, r: Fn.apply(x, w, EPS, 0.0, "gemma", False)
    from liger_kernel.ops.layer_norm import LigerLayerNormFunction as Fn

    return lambda x, w, b, r: Fn.apply(x, w, b, EPS)


def _quack(op: str) -> Callable:
    from quack.rmsnorm import rmsnorm

    if op == "rms_add":
        return lambda x, w, b, r: rmsnorm(x, w, residual=r, eps=EPS, prenorm=True)
    if op.startswith("rms"):
        return lambda x, w, b, r: rmsnorm(x, w, eps=EPS)
    raise NotImplementedError("quack: RMSNorm only here")


IMPLS = {  # torch first: every other output is compared with its
    "torch": _eager,
    "normlab": _normlab,
    "liger": _liger,
    "quack": _quack,
    "compile": _compiled,
}


# ---------------------------------------------------------------------------------------------
# timing


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_ms(fn: Callable[[], object], device: torch.device, rep_ms: float) -> float:
    """Median milliseconds of ``fn``; on CUDA Triton's do_bench (L2 flushed between calls)."""
    if device.type == "cuda":
        import triton.testing

        return triton.testing.do_bench(
            fn, warmup=max(5, rep_ms / 4), rep=rep_ms, return_mode="median"
        )
    fn()
    times = []
    for _ in range(5):
        t = time.perf_counter()
        fn()
        times.append(1e3 * (time.perf_counter() - t))
    return sorted(times)[len(times) // 2]


def _first(out):
    return out[0] if isinstance(out, tuple) else out


def measure(op, impl, fn, x, w, b, r, device, rep_ms) -> tuple[float, torch.Tensor]:
    """Time one op; returns (ms, the tensor compared across implementations)."""
    if op.endswith("_bwd"):
        leaves = [t.detach().requires_grad_() for t in (x, w)]
        y = _first(fn(leaves[0], leaves[1], b, r))
        torch.manual_seed(0)  # the same dy for every implementation: dx is compared
        dy = torch.randn_like(y)
        grad = lambda: torch.autograd.grad(y, leaves, dy, retain_graph=True)  # noqa: E731
        dx = grad()[0]
        return time_ms(grad, device, rep_ms), dx
    with torch.no_grad():
        out = _first(fn(x, w, b, r))
        return time_ms(lambda: fn(x, w, b, r), device, rep_ms), out


def copy_gbps(x: torch.Tensor, device, rep_ms) -> float:
    dst = torch.empty_like(x)
    ms = time_ms(lambda: dst.copy_(x), device, rep_ms)
    return 2 * x.numel() * x.element_size() / ms / 1e6


# ---------------------------------------------------------------------------------------------
# output


def write_table(rows: list[Row], path: Path) -> str:
    """One markdown table per (op, dtype): GB/s and % of copy_ per implementation."""
    impls = [i for i in IMPLS if any(r.impl == i and not r.status.startswith("n/a") for r in rows)]
    lines = []
    for op in IO_ELEMS:
        for dt in DTYPES:
            sel = [r for r in rows if r.op == op and r.dtype == dt]
            if not sel:
                continue
            lines += [f"\n### {op} {dt}\n", "| N | rows | copy_ GB/s | " + " | ".join(impls) + " |"]
            lines.append("|---" * (3 + len(impls)) + "|")
            for n in sorted({r.n for r in sel}):
                cell = {r.impl: r for r in sel if r.n == n}
                first = next(iter(cell.values()))
                vals = []
                for i in impls:
                    r = cell.get(i)
                    if r is None or r.status != "ok":
                        vals.append("–" if r is None else r.status.split(":")[0])
                    else:
                        vals.append(f"{r.gbps:.0f} ({r.pct_copy:.0f} %)")
                lines.append(
                    f"| {n} | {first.m} | {first.copy_gbps:.0f} | " + " | ".join(vals) + " |"
                )
    text = "\n".join(lines) + "\n"
    path.write_text(text)
    return text


def make_inputs(n: int, m: int, dtype: torch.dtype, device) -> tuple[torch.Tensor, ...]:
    """``(x, w, b, r)`` made on the device (a CPU randn of 2^26 elements would take longer than
    timing every implementation on it)."""
    g = torch.Generator(device=device).manual_seed(n)
    x = torch.randn(m, n, generator=g, device=device).to(dtype)
    r = torch.randn(m, n, generator=g, device=device).to(dtype)
    w = (1 + 0.1 * torch.randn(n, generator=g, device=device)).to(dtype)
    b = (0.1 * torch.randn(n, generator=g, device=device)).to(dtype)
    return x, w, b, r


def shapes(args) -> list[tuple[str, int]]:
    """(dtype, N) in priority order: bf16 before fp32."""
    return [(dt, n) for dt in args.dtypes for n in args.sizes]


# ---------------------------------------------------------------------------------------------
# the tuning sweep: every candidate row around each size, through the launchers


def sweep_call(cand, n, x, w, b, is_rms, backward) -> Callable[[], object]:
    """One launch of candidate row ``cand`` on ``x`` (forward, or backward with a fixed dy)."""
    from normlab.kernels.triton import launch as tk

    cfg = cand.config(n)
    kw = dict(is_rms=is_rms, casting="gemma") if is_rms else dict(is_rms=False)
    bias = None if is_rms else b
    if not backward:
        return lambda: tk.norm_fwd(x, w, bias, None, EPS, out_dtype=x.dtype, config=cfg, **kw)
    y, _, mean, rstd = tk.norm_fwd(x, w, bias, None, EPS, out_dtype=x.dtype, **kw)
    dy = torch.randn_like(y)
    return lambda: tk.norm_bwd(dy, None, x, w, mean, rstd, has_bias=not is_rms, config=cfg, **kw)


def sweep_one(cand, n, x, w, b, is_rms, backward, device, rep_ms) -> float:
    """GB/s of one candidate on one shape (forward: 2 MN elements moved, backward 3 MN)."""
    ms = time_ms(sweep_call(cand, n, x, w, b, is_rms, backward), device, rep_ms)
    return (3 if backward else 2) * x.numel() * x.element_size() / ms / 1e6


def _warm(task) -> str:
    """In a worker process: compile one candidate by launching it on 64 rows (Triton's disk
    cache then serves the timed launch: 64 rows specialize like 2^26 / N do)."""
    cand, n, is_rms, backward, device = task
    try:
        x, w, b, _ = make_inputs(n, 64, DTYPES["bf16"], torch.device(device))
        sweep_call(cand, n, x, w, b, is_rms, backward)()
        return "ok"
    except Exception as e:  # the timed launch reports it
        return f"{type(e).__name__}: {e}"[:200]


def _warm_bench(task) -> str:
    """In a worker process: one untimed run of (impl, op) on 64 rows, which compiles its
    kernels into Triton's disk cache."""
    impl, op, dt, n, device = task
    try:
        x, w, b, r = make_inputs(n, 64, DTYPES[dt], torch.device(device))
        measure(op, impl, IMPLS[impl](op), x, w, b, r, torch.device(device), 1.0)
        return "ok"
    except Exception as e:  # the timed run reports it
        return f"{type(e).__name__}: {e}"[:200]


def prewarm(worker, tasks, jobs: int, device, what: str) -> None:
    """Compile kernels in ``jobs`` processes at once (serial compiles would eat much of the
    budget): ``worker`` runs each task on a few rows; any failure here only leaves that compile
    to the timed run."""
    import concurrent.futures as cf
    import multiprocessing as mp

    if jobs <= 1 or not tasks:
        return
    t0 = time.monotonic()
    try:
        with cf.ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn")) as pool:
            done = list(pool.map(worker, [(*t, str(device)) for t in tasks]))
        bad = sum(d != "ok" for d in done)
        print(f"compiled {len(tasks)} {what} in {time.monotonic() - t0:.0f} s "
              f"with {jobs} processes ({bad} failed)", flush=True)  # fmt: skip
    except Exception as e:  # noqa: BLE001  (a pool that cannot start: compile serially)
        print(f"no parallel compile ({type(e).__name__}: {e}); compiling serially", flush=True)


def run_sweep(args, device, start) -> Path | None:
    """Time the candidates (bf16, both norms); write sweep.csv/.md and the winners' table as
    tuning.json. A row's winner has the best geometric-mean GB/s over both norms and the sizes
    it serves; rows the budget did not reach keep their built-in entry."""
    import math

    from normlab.kernels.triton import tuning

    dt = "bf16"  # the dtype the targets are set in
    results: dict[tuple[bool, int, object], list[float]] = {}
    lines = ["direction,norm,n,candidate,gbps,status"]
    # The backward first (what the table is most for), and N = 4096-16384 first within it.
    sizes = sorted(args.sizes, key=lambda n: (not 4096 <= n <= 16384, n))
    work = [(backward, n) for backward in (True, False) for n in sizes]
    tasks = [(c, n, rms, bwd) for bwd, n in work for c in tuning.candidates(n, bwd)
             for rms in (True, False)]  # fmt: skip
    prewarm(_warm, tasks, args.jobs, device, "sweep kernels")
    for backward, n in work:
        if time.monotonic() - start > args.sweep_budget_s:
            break
        m = max(1, args.elems // n)
        x, w, b, _ = make_inputs(n, m, DTYPES[dt], device)
        row = tuning.row(n, backward)
        for cand in tuning.candidates(n, backward):
            if time.monotonic() - start > args.sweep_budget_s:
                break
            for is_rms in (True, False):
                name = "rms" if is_rms else "ln"
                try:
                    gbps = sweep_one(cand, n, x, w, b, is_rms, backward, device, args.sweep_rep_ms)
                    status = "ok"
                except Exception as e:  # a config that does not compile or launch
                    gbps, status = float("nan"), f"error: {type(e).__name__}"
                if status == "ok":
                    results.setdefault((backward, row.n_max, cand), []).append(gbps)
                lines.append(
                    f'{"bwd" if backward else "fwd"},{name},{n},"{cand}",{gbps:.1f},{status}'
                )
                print(f"[{time.monotonic() - start:5.0f}s] sweep {lines[-1]}", flush=True)
        del x, w, b
    (args.out / "sweep.csv").write_text("\n".join(lines) + "\n")
    if not results:
        return None
    tables = {}
    md = ["| direction | row n_max | winner | GB/s (geo-mean) | built-in row GB/s |"]
    md.append("|---" * 5 + "|")
    for backward in (False, True):
        winners = {}
        for base in tuning.table(backward):
            scored = {
                c: v for (bwd, nm, c), v in results.items() if bwd == backward and nm == base.n_max
            }
            if base not in scored:  # the budget did not reach this row
                continue
            # Only candidates timed on every shape the row's own entry was (timed first) count.
            full = len(scored[base])
            geo = lambda v: math.exp(sum(math.log(max(g, 1e-9)) for g in v) / len(v))  # noqa: E731
            scored = {c: geo(v) for c, v in scored.items() if len(v) == full}
            best = max(scored, key=scored.get)
            winners[base.n_max] = best
            ref = scored[base]
            direction = "bwd" if backward else "fwd"
            md.append(f"| {direction} | {base.n_max} | {best} | {scored[best]:.0f} | {ref:.0f} |")
        tables[backward] = table_from_winners(tuning.table(backward), winners)
    path = args.out / "tuning.json"
    tuning.dump(tables, path)
    (args.out / "sweep.md").write_text("\n".join(md) + "\n")
    print("\n".join(md), flush=True)
    return path


def table_from_winners(rows, winners) -> list:
    """The table with each row replaced by its winner. A register-resident row whose winner is
    the looped path ends the register-resident rows (the looped row serves it and every longer
    one); a looped row whose winner holds the row in registers gets that as a new row before it.
    """
    import dataclasses

    out = []
    for row in rows:
        best = winners.get(row.n_max, row)
        if row.looped:
            if not best.looped:  # the fused alternative of the row twice the fused limit
                p2 = best.tile
                out.append(dataclasses.replace(best, n_max=p2))
                out.append(row)
            else:
                out.append(dataclasses.replace(best, n_max=row.n_max))
            break
        if best.looped:
            out.append(dataclasses.replace(best, n_max=rows[-1].n_max))
            break
        out.append(dataclasses.replace(best, n_max=row.n_max))
    if not out[-1].looped:
        out.append(rows[-1])
    return out


# ---------------------------------------------------------------------------------------------
# peak memory of one forward + backward


def _normlab_me(op: str) -> Callable:
    import normlab

    if op.startswith("rms"):
        kw = dict(casting="gemma", backend="triton", memory_efficient=True)
        return lambda x, w, b, r: normlab.rms_norm(x, w, EPS, **kw)
    return lambda x, w, b, r: normlab.layer_norm(
        x, w, b, EPS, backend="triton", memory_efficient=True
    )


MEMORY_IMPLS = {"torch": _eager, "normlab": _normlab, "normlab_me": _normlab_me, "liger": _liger}


def memory_one(fn, x, w, b, r, device) -> tuple[float, float]:
    """``(saved MiB, peak MiB)`` of ``y = fn(x); y.backward(dy)``: the bytes autograd keeps for
    backward, and the CUDA peak above what was allocated before (NaN off CUDA). One untimed
    call first, so compiling and caching allocations stay out of the peak."""
    from normlab.testing import saved_tensor_bytes

    x, w = x.detach().requires_grad_(), w.detach().requires_grad_()
    dy = torch.randn_like(x)
    _first(fn(x, w, b, r)).backward(dy)
    x.grad = w.grad = None
    _sync(device)
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
    saved, y = saved_tensor_bytes(lambda: _first(fn(x, w, b, r)), exclude=(w,))
    y.backward(dy)
    _sync(device)
    peak = (torch.cuda.max_memory_allocated(device) - base) if cuda else float("nan")
    return saved / 2**20, peak / 2**20


def run_memory(args, device) -> None:
    """memory.md: :func:`memory_one` per implementation, bf16, at N = 4096 and 16384."""
    n_sizes = [n for n in (4096, 16384) if n in args.sizes] or args.sizes[:1]
    lines = ["| op | N | rows | impl | saved MiB | peak MiB | peak / torch |"]
    lines.append("|---" * 7 + "|")
    for op in ("rms_bwd", "ln_bwd"):
        for n in n_sizes:
            m = max(1, args.memory_elems // n)
            data = make_inputs(n, m, DTYPES["bf16"], device)
            torch_peak = float("nan")
            for impl, make in MEMORY_IMPLS.items():
                try:
                    saved, peak = memory_one(make(op), *data, device)
                    torch_peak = peak if impl == "torch" else torch_peak
                    cells = f"{saved:.1f} | {peak:.1f} | {peak / torch_peak:.2f}"
                except Exception as e:  # not installed, or not offered
                    cells = f"n/a: {type(e).__name__} | – | –"
                lines.append(f"| {op[:-4]} | {n} | {m} | {impl} | {cells} |")
                print(lines[-1], flush=True)
            del data
    (args.out / "memory.md").write_text("\n".join(lines) + "\n")


# ---------------------------------------------------------------------------------------------


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path("gpu_bench_out"), help="output directory")
    p.add_argument("--sizes", default="1024,2048,4096,8192,16384,32768,65536", help="hidden sizes")
    p.add_argument("--dtypes", default="bf16,fp32", help="comma list of bf16, fp32, fp16")
    p.add_argument("--ops", default=",".join(IO_ELEMS), help="comma list of ops")
    p.add_argument("--impls", default=",".join(IMPLS), help="comma list of implementations")
    p.add_argument("--elems", type=int, default=1 << 26, help="elements per tensor (M = elems/N)")
    p.add_argument("--rep-ms", type=float, default=25.0, help="timing window per measurement")
    p.add_argument("--budget-s", type=float, default=270.0, help="stop starting work after this")
    p.add_argument(
        "--compile-reserve-s", type=float, default=20.0,
        help="start a torch.compile measurement only with this much budget left",
    )  # fmt: skip
    p.add_argument("--sweep", action="store_true", help="tune the launch table first")
    p.add_argument("--sweep-budget-s", type=float, default=140.0, help="the sweep's time limit")
    p.add_argument("--sweep-rep-ms", type=float, default=10.0, help="timing window there")
    p.add_argument("--jobs", type=int, default=8, help="processes compiling kernels up front")
    p.add_argument("--memory", action="store_true", help="peak memory of forward + backward")
    p.add_argument("--memory-elems", type=int, default=1 << 24, help="elements per tensor there")
    p.add_argument("--device", default="cuda", help="cuda (cpu only for a smoke test)")
    args = p.parse_args(argv)
    for name in ("sizes", "dtypes", "ops", "impls"):
        setattr(args, name, [s for s in getattr(args, name).split(",") if s])
    args.sizes = [int(s) for s in args.sizes]
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: this benchmark needs a GPU (use --device cpu only to smoke-test)")
        return 2
    start = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    if device.type == "cuda":
        print(f"device: {torch.cuda.get_device_name(device)}", flush=True)
    if args.sweep:
        path = run_sweep(args, device, start)
        if path is not None:
            from normlab.kernels.triton import tuning

            tuning.load(path)
            os.environ["NORMLAB_TRITON_TUNING"] = str(path.resolve())  # for worker processes
            print(f"tuned table {path} in use", flush=True)
    if args.memory:
        run_memory(args, device)
    csv_path, table_path = args.out / "results.csv", args.out / "table.md"
    names = [f.name for f in fields(Row)]
    with csv_path.open("w", newline="") as f:
        csv.writer(f).writerow(names)
    rows: list[Row] = []
    bench_start = time.monotonic()  # the budget counts compiling too
    fast = [i for i in args.impls if i != "compile"]
    warm = [
        (i, op, dt, n) for i in fast if i != "torch" for dt, n in shapes(args) for op in args.ops
    ]
    prewarm(_warm_bench, warm, args.jobs, device, "benchmark kernels")
    passes = [(fast, False)] + ([(["compile"], True)] if "compile" in args.impls else [])
    for impls, compiling in passes:  # torch.compile last: one compile per shape
        for dt, n in shapes(args):
            m = max(1, args.elems // n)
            left = args.budget_s - (time.monotonic() - bench_start)
            data = None
            if left >= (args.compile_reserve_s if compiling else 1.0):
                data = make_inputs(n, m, DTYPES[dt], device)
                copy = copy_gbps(data[0], device, args.rep_ms)
            eager_out: dict[str, torch.Tensor] = {}
            for op in args.ops:
                for impl in impls:
                    row = Row(op, dt, n, m, impl)
                    if data is None:
                        row.status = "skipped: time budget"
                    else:
                        row.copy_gbps = copy
                        bench_one(row, impl, op, data, eager_out, device, args.rep_ms)
                    rows.append(row)
                    with csv_path.open("a", newline="") as f:
                        csv.writer(f).writerow([asdict(row)[k] for k in names])
                    write_table(rows, table_path)
                    took = time.monotonic() - start
                    print(
                        f"[{took:5.0f}s] {op:8s} {dt:4s} N={n:<6d} {impl:8s} "
                        + (f"{row.gbps:7.0f} GB/s {row.pct_copy:5.1f} % of copy_"
                           if row.status == "ok" else row.status),
                        flush=True,
                    )  # fmt: skip
            del data
            if device.type == "cuda":
                torch.cuda.empty_cache()
    print(write_table(rows, table_path))
    print(f"wrote {args.out} in {time.monotonic() - start:.0f} s")
    return 0


def bench_one(row: Row, impl: str, op: str, data, eager_out: dict, device, rep_ms) -> None:
    """Time one (impl, op) on one shape into ``row``; failures become its status."""
    x, w, b, r = data
    try:
        # A fresh function per shape: torch.compile then compiles each shape once and never
        # hits its recompile limit (falling back to eager unnoticed).
        fn = IMPLS[impl](op)
    except Exception as e:  # not installed, or op not offered by that library
        row.status = f"n/a: {type(e).__name__}"
        return
    try:
        row.ms, out = measure(op, impl, fn, x, w, b, r, device, rep_ms)
        row.gbps = IO_ELEMS[op] * row.m * row.n * x.element_size() / row.ms / 1e6
        row.pct_copy = 100 * row.gbps / row.copy_gbps
        out = out[:64].float()  # enough rows to catch a wrong kernel
        if impl == "torch":
            eager_out[op] = out
        if op in eager_out:
            row.max_diff_vs_eager = (out - eager_out[op]).abs().max().item()
    except Exception as e:  # one failing library must not end the run
        row.status = f"error: {type(e).__name__}: {str(e)[:120]}"


if __name__ == "__main__":
    raise SystemExit(main())
