"""Registers and spills a thread of the Triton norm kernels for sm_90, per tuning-table row and
sweep candidate: compiled here with Triton's own ptxas, no GPU needed.

    python benchmarks/triton_registers.py [--candidates] [--out FILE.md]

One line per (kernel, N, config): registers and spill-store bytes for LayerNorm (with bias) and
RMSNorm (gemma cast order), bf16, no residual, and the CTAs of that size one SM's 64K registers
hold (the larger of the two kernels'). A config that spills pays local-memory traffic; a
persistent backward with more programs per SM than fit runs them in a second wave. This is what
the table's built-in rows were picked from before a GPU sweep (normlab.kernels.triton.tuning).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import tempfile
from pathlib import Path

os.environ.pop("TRITON_INTERPRET", None)  # compile, do not interpret

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.backends.nvidia.compiler import get_ptxas  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from normlab.kernels.triton import tuning  # noqa: E402
from normlab.kernels.triton.kernels import norm_bwd_kernel, norm_fwd_kernel  # noqa: E402

SM90 = GPUTarget("cuda", 90, 32)
I32 = "i32"


def _signature(backward: bool) -> tuple:
    if backward:
        names = ["H", "W", "B", "MEAN", "RSTD", "DY", "DHO", "DH", "DW", "DB"]
        ptrs = {k: "*fp32" if k in ("MEAN", "RSTD", "DW", "DB") else "*bf16" for k in names}
        ints = ["stride_h", "stride_dy", "stride_dho", "stride_dh", "M", "N"]
        return norm_bwd_kernel, ptrs, {**dict.fromkeys(ints, I32), "offset": "fp32"}
    names = ["X", "R", "H", "W", "B", "Y", "MEAN", "RSTD"]
    ptrs = {k: "*fp32" if k in ("MEAN", "RSTD") else "*bf16" for k in names}
    ints = ["stride_x", "stride_r", "stride_h", "stride_y", "M", "N"]
    return norm_fwd_kernel, ptrs, {**dict.fromkeys(ints, I32), "eps": "fp32", "offset": "fp32"}


def registers(cfg: tuning.LaunchConfig, *, backward: bool, rms: bool) -> tuple[int, int]:
    """(registers, spill-store bytes) a thread for one config, from ptxas -v."""
    kernel, ptrs, scalars = _signature(backward)
    flags = dict(IS_RMS=rms, HAS_W=True, HAS_B=not rms, CASTING=1, EPS_INSIDE=True)
    if backward:
        flags |= dict(HAS_DHO=False, FROM_Y=False, PREFETCH=cfg.prefetch and not cfg.looped)
    else:
        flags |= dict(HAS_RES=False)
    flags |= dict(BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, LOOPED=cfg.looped)
    types = {**ptrs, **scalars, **dict.fromkeys(flags, "constexpr")}
    names = kernel.arg_names  # the signature in the kernel's own argument order
    sig = {k: types[k] for k in names}
    src = ASTSource(kernel, sig, constexprs={(names.index(k),): v for k, v in flags.items()})
    out = triton.compile(src, target=SM90, options={"num_warps": cfg.num_warps})
    with tempfile.TemporaryDirectory() as d:
        ptx = Path(d) / "k.ptx"
        ptx.write_text(out.asm["ptx"])
        run = subprocess.run(
            [get_ptxas(90).path, "-arch=sm_90a", "-v", str(ptx), "-o", str(Path(d) / "k.o")],
            capture_output=True,
            text=True,
            check=True,
        )
    regs = int(re.findall(r"Used (\d+) registers", run.stderr)[-1])
    spills = re.findall(r"(\d+) bytes spill stores", run.stderr)
    return regs, int(spills[-1]) if spills else 0


def ctas_per_sm(regs: int, num_warps: int) -> int:
    """CTAs one sm_90 SM holds by registers: 64K of them, given out per warp in units of 256
    (8 a thread), at most 64 warps."""
    per_warp = -(-regs * 32 // 256) * 256
    return min(65536 // (per_warp * num_warps), 64 // num_warps)


def rows_to_check(candidates: bool):
    for backward in (False, True):
        for t in tuning.table(backward):
            n = 2 * tuning.fused_limit(backward) if t.looped else t.n_max
            for c in tuning.candidates(n, backward) if candidates else [t]:
                yield backward, n, c


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--candidates", action="store_true", help="every sweep candidate too")
    p.add_argument("--out", type=Path, help="also write the markdown table here")
    args = p.parse_args(argv)
    lines = [
        "| kernel | N | BLOCK_M x BLOCK_N | warps | looped | prefetch | programs/SM "
        "| LN regs (spill B) | RMS regs (spill B) | CTAs/SM |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    print("\n".join(lines), flush=True)
    for backward, n, t in rows_to_check(args.candidates):
        cfg = t.config(n)
        ln = registers(cfg, backward=backward, rms=False)
        rms = registers(cfg, backward=backward, rms=True)
        fit = ctas_per_sm(max(ln[0], rms[0]), cfg.num_warps)
        line = (
            f"| {'bwd' if backward else 'fwd'} | {n} | {cfg.block_m} x {cfg.block_n} "
            f"| {cfg.num_warps} | {cfg.looped} | {cfg.prefetch and backward} "
            f"| {cfg.programs_per_sm if backward else '–'} "
            f"| {ln[0]} ({ln[1]}) | {rms[0]} ({rms[1]}) | {fit} |"
        )
        lines.append(line)
        print(line, flush=True)
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
