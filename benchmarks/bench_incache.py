"""Is a CPU kernel compute- or memory-bound? Its cost per element with the data in cache against
the DRAM budget per element that ``copy_`` allows, for the forward and the backward, each with
both row loops (pipelined and two-pass: ``normlab.kernels.numba.choices``), and the bfloat16
kernels on pairs (``/pairs``) where an op has them, also built for 512-bit vectors (``/v512``).

    python benchmarks/bench_incache.py [--repeat 9]

- in cache: the launchers of RMSNorm / LayerNorm on one thread, ``(256, 4096)`` rows (4 MB in
  float32: L3-resident; the launch, ~20 us, is 5 % of a call), ns per element;
- DRAM budget: a large forward moves 2 tensors (read ``x``, write ``y``), a backward 3 (read
  ``h`` and ``dy``, write ``dx``); at the bandwidth of ``copy_`` on a 32M-element tensor
  (measured in the same run) each of the T threads may spend ``T * tensors * itemsize /
  (copy_ bytes/s)`` per element. A kernel whose in-cache cost approaches that budget cannot
  reach ``copy_`` speed: its arithmetic and its memory traffic would have to overlap perfectly.
"""

import argparse
import sys

import torch

from normlab.kernels.numba import choices
from normlab.kernels.numba import launch as L
from normlab.kernels.numba.choices import Launch
from normlab.lab.bench.bandwidth import time_ms

SMALL, LARGE = (256, 4096), (8192, 4096)
LOOPS = {
    c.name.replace("/c0/t1", ""): c
    for p in (True, False)
    for c in (Launch(p), Launch(p, bf16_pairs=True), Launch(p, bf16_pairs=True, vector_512=True))
}


def calls(dtype: torch.dtype) -> dict:
    """``"<op> <loop>" -> no-argument launcher call`` on :data:`SMALL` rows."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(*SMALL, generator=g).to(dtype)
    dy = torch.randn(*SMALL, generator=g).to(dtype)
    n = SMALL[1]
    w, b = torch.ones(n, dtype=dtype), torch.zeros(n, dtype=dtype)
    _, _, rstd = L.rms_fwd(x, w, None, 1e-6, 0.0, "gemma", True, dtype)
    _, _, mean, lstd = L.ln_fwd(x, w, b, None, 1e-5)
    out = {}
    for name, c in LOOPS.items():
        out |= {
            f"rms_fwd {name}": lambda c=c: L.rms_fwd(
                x, w, None, 1e-6, 0.0, "gemma", True, dtype, c
            ),
            f"ln_fwd {name}": lambda c=c: L.ln_fwd(x, w, b, None, 1e-5, c),
            f"rms_bwd {name}": lambda c=c: L.rms_bwd(
                dy, None, x, w, rstd, 1e-6, 0.0, "gemma", True, c
            ),
            f"ln_bwd {name}": lambda c=c: L.ln_bwd(dy, None, x, w, mean, lstd, True, c),
        }
    return out


def _no_pairs(op: str, loop: str) -> bool:
    """Whether ``op`` has no kernel on bfloat16 pairs (its ``/pairs`` loop would time the other)."""
    return "/pairs" in loop and op not in choices.PAIRS_OPS


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=9)
    args = p.parse_args()
    threads = torch.get_num_threads()
    print(f"torch {torch.__version__}, {threads} threads for copy_, 1 thread in cache\n")
    head = ["dtype", "copy_ GB/s", "budget fwd", "budget bwd"]
    ops = ("rms_fwd", "ln_fwd", "rms_bwd", "ln_bwd")
    keys = [f"{op} {loop}" for op in ops for loop in LOOPS if not _no_pairs(op, loop)]
    print("| " + " | ".join(head + keys) + " |\n|" + "---|" * (len(head) + len(keys)))
    for dtype in (torch.float32, torch.bfloat16):
        big = torch.randn(*LARGE, dtype=dtype)
        dst = torch.empty_like(big)
        copy_ms = time_ms({"copy": lambda: dst.copy_(big)}, args.repeat)["copy"]  # noqa: B023
        gbps = 2 * big.numel() * big.element_size() / copy_ms / 1e6
        budget = [threads * k * big.element_size() / gbps for k in (2, 3)]  # ns/elem/thread
        torch.set_num_threads(1)  # normlab's kernels follow torch's thread count
        try:
            ms = time_ms(calls(dtype), args.repeat)
        finally:
            torch.set_num_threads(threads)
        ns = [1e6 * ms[k] / (SMALL[0] * SMALL[1]) for k in keys]
        cells = [str(dtype).removeprefix("torch."), f"{gbps:.1f}", *(f"{v:.2f}" for v in budget)]
        shown = [
            "-" if "/pairs" in k and dtype != torch.bfloat16 else f"{v:.2f}"
            for k, v in zip(keys, ns, strict=True)
        ]
        print("| " + " | ".join(cells + shown) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
