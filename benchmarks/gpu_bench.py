"""GB/s of normlab's Triton RMSNorm/LayerNorm kernels against torch eager, torch.compile and
Liger-Kernel / quack (when installed), as a fraction of the device's ``copy_`` bandwidth.

    python benchmarks/gpu_bench.py --out DIR

Writes ``DIR/results.csv`` (one line per measurement, appended as it finishes) and
``DIR/table.md`` (rewritten after every measurement), so a run cut short still leaves results.
Work is ordered by priority (bf16 before fp32, torch.compile last, because it compiles per
shape) and stops at ``--budget-s``: the whole run fits a short GPU loan. Bytes counted are the
ideal traffic: forward reads x and writes y (2 MN elements), backward reads x, dy and writes dx
(3 MN), fused add reads x, r and writes h, y (4 MN); weights are ignored.
"""

from __future__ import annotations

import argparse
import csv
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


def plan(args) -> list[tuple[str, str, str]]:
    """(impl, op, dtype) passes, most important first."""
    fast = [i for i in args.impls if i != "compile"]
    rms = [o for o in args.ops if o.startswith("rms")]
    ln = [o for o in args.ops if o.startswith("ln")]
    steps = []
    for dt in args.dtypes:
        steps += [(i, o, dt) for o in rms for i in fast]
    for dt in args.dtypes:
        steps += [(i, o, dt) for o in ln for i in fast]
    if "compile" in args.impls:  # one compile per shape: last, so it cannot crowd out the rest
        steps += [("compile", o, dt) for dt in args.dtypes for o in rms + ln]
    return steps


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path("gpu_bench_out"), help="output directory")
    p.add_argument("--sizes", default="1024,2048,4096,8192,16384,32768,65536", help="hidden sizes")
    p.add_argument("--dtypes", default="bf16,fp32", help="comma list of bf16, fp32, fp16")
    p.add_argument("--ops", default=",".join(IO_ELEMS), help="comma list of ops")
    p.add_argument("--impls", default=",".join(IMPLS), help="comma list of implementations")
    p.add_argument("--elems", type=int, default=1 << 26, help="elements per tensor (M = elems/N)")
    p.add_argument("--rep-ms", type=float, default=40.0, help="timing window per measurement")
    p.add_argument("--budget-s", type=float, default=270.0, help="stop starting work after this")
    p.add_argument(
        "--compile-reserve-s", type=float, default=20.0,
        help="start a torch.compile measurement only with this much budget left",
    )  # fmt: skip
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
    csv_path, table_path = args.out / "results.csv", args.out / "table.md"
    names = [f.name for f in fields(Row)]
    with csv_path.open("w", newline="") as f:
        csv.writer(f).writerow(names)
    if device.type == "cuda":
        print(f"device: {torch.cuda.get_device_name(device)}", flush=True)

    rows: list[Row] = []
    copies: dict[tuple[str, int], float] = {}
    eager_out: dict[tuple[str, str, int], torch.Tensor] = {}
    for impl, op, dt in plan(args):
        try:
            IMPLS[impl](op)
            error = None
        except Exception as e:  # not installed, or op not offered by that library
            error = f"n/a: {type(e).__name__}"
        for n in args.sizes:
            m = max(1, args.elems // n)
            row = Row(op, dt, n, m, impl)
            left = args.budget_s - (time.monotonic() - start)
            if error:
                row.status = error
            elif left < (args.compile_reserve_s if impl == "compile" else 1.0):
                row.status = "skipped: time budget"
            else:
                g = torch.Generator(device="cpu").manual_seed(n)
                x = torch.randn(m, n, generator=g).to(device, DTYPES[dt])
                r = torch.randn(m, n, generator=g).to(device, DTYPES[dt])
                w = (1 + 0.1 * torch.randn(n, generator=g)).to(device, DTYPES[dt])
                b = (0.1 * torch.randn(n, generator=g)).to(device, DTYPES[dt])
                if (dt, n) not in copies:
                    copies[(dt, n)] = copy_gbps(x, device, args.rep_ms)
                row.copy_gbps = copies[(dt, n)]
                try:
                    # A fresh function per shape: torch.compile then compiles each shape once
                    # and never hits its recompile limit (falling back to eager unnoticed).
                    fn = IMPLS[impl](op)
                    row.ms, out = measure(op, impl, fn, x, w, b, r, device, args.rep_ms)
                    row.gbps = IO_ELEMS[op] * m * n * x.element_size() / row.ms / 1e6
                    row.pct_copy = 100 * row.gbps / row.copy_gbps
                    key = (op, dt, n)
                    out = out[:64].float()  # enough rows to catch a wrong kernel
                    if impl == "torch":
                        eager_out[key] = out
                    if key in eager_out:
                        row.max_diff_vs_eager = (out - eager_out[key]).abs().max().item()
                except Exception as e:  # one failing library must not end the run
                    row.status = f"error: {type(e).__name__}: {str(e)[:120]}"
                del x, r, w, b
            rows.append(row)
            with csv_path.open("a", newline="") as f:
                csv.writer(f).writerow([asdict(row)[k] for k in names])
            write_table(rows, table_path)
            took = time.monotonic() - start
            print(
                f"[{took:5.0f}s] {op:8s} {dt:4s} N={n:<6d} {impl:8s} "
                + (f"{row.gbps:7.0f} GB/s {row.pct_copy:5.1f} % of copy_" if row.status == "ok"
                   else row.status),
                flush=True,
            )  # fmt: skip
        if device.type == "cuda":
            torch.cuda.empty_cache()
    print(write_table(rows, table_path))
    print(f"wrote {csv_path} and {table_path} in {time.monotonic() - start:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
