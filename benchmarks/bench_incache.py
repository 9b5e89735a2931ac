"""Is the CPU forward kernel compute- or memory-bound? Its cost per element with the data in cache
against the DRAM budget per element that ``copy_`` allows.

    python benchmarks/bench_incache.py [--repeat 9]

- in cache: the forward of RMSNorm / LayerNorm on one thread, ``(256, 4096)`` rows (4 MB in
  float32: L3-resident; the launch, ~20 us, is 5 % of a call), ns per element;
- DRAM budget: a large forward moves 2 tensors (read ``x``, write ``y``); at the bandwidth of
  ``copy_`` on a 32M-element tensor (measured in the same run) each of the T threads may spend
  ``T * 2 * itemsize / (copy_ bytes/s)`` per element. A kernel whose in-cache cost approaches
  that budget cannot reach ``copy_`` speed: its arithmetic and its memory traffic would have to
  overlap perfectly.
"""

import argparse
import sys

import torch

import normlab
from normlab.lab.bench.bandwidth import time_ms

SMALL, LARGE = (256, 4096), (8192, 4096)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=9)
    args = p.parse_args()
    threads = torch.get_num_threads()
    print(f"torch {torch.__version__}, {threads} threads for copy_, 1 thread in cache\n")
    print("| dtype | copy_ GB/s | DRAM budget ns/elem/thread | rms_norm in cache | "
          "layer_norm in cache |")  # fmt: skip
    print("|---|---|---|---|---|")
    for dtype in (torch.float32, torch.bfloat16):
        big = torch.randn(*LARGE, dtype=dtype)
        dst = torch.empty_like(big)
        copy_ms = time_ms({"copy": lambda: dst.copy_(big)}, args.repeat)["copy"]  # noqa: B023
        gbps = 2 * big.numel() * big.element_size() / copy_ms / 1e6
        budget = threads * 2 * big.element_size() / gbps  # ns per element per thread

        x = torch.randn(*SMALL, dtype=dtype)
        w, b = torch.ones(SMALL[1], dtype=dtype), torch.zeros(SMALL[1], dtype=dtype)
        torch.set_num_threads(1)  # normlab's kernels follow torch's thread count
        try:
            with torch.no_grad():
                ms = time_ms(
                    {
                        "rms": lambda: normlab.rms_norm(x, w, casting="gemma"),  # noqa: B023
                        "ln": lambda: normlab.layer_norm(x, w, b),  # noqa: B023
                    },
                    args.repeat,
                )
        finally:
            torch.set_num_threads(threads)
        ns = {k: 1e6 * v / x.numel() for k, v in ms.items()}
        print(f"| {str(dtype).removeprefix('torch.')} | {gbps:.1f} | {budget:.2f} | "
              f"{ns['rms']:.2f} | {ns['ln']:.2f} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
