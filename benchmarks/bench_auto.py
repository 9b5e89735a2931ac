"""normlab's Numba kernels against PyTorch's own CPU ops, per op, shape and mode (float32):
where would ``backend="auto"`` gain by routing a call to PyTorch?

    python benchmarks/bench_auto.py [--repeat 5] [--ops layer_norm rms_norm]

Each case times, interleaved in one process, ``backend="numba"`` and ``backend="torch"``
(``F.layer_norm`` / ``F.rms_norm``): forward alone under ``no_grad``, and forward+backward with
gradients for ``x`` and the weight (and bias). ``torch / numba`` below 1 is where PyTorch's op is
faster. ``auto`` stays on the kernels there all the same: PyTorch's CPU LayerNorm is less accurate
than the contract allows on some inputs (docs/kernels.md, "What auto runs").
"""

from __future__ import annotations

import argparse
import sys

import torch

import normlab
from normlab.lab.bench.bandwidth import time_ms

SHAPES = ((256, 32), (256, 256), (256, 1024), (1024, 64), (1024, 128), (1024, 256),
          (1024, 512), (4096, 32), (4096, 64), (4096, 256), (256, 4096))  # fmt: skip


def _op(op: str, backend: str):
    if op == "layer_norm":
        return lambda x, w, b: normlab.layer_norm(x, w, b, 1e-5, backend=backend)
    return lambda x, w, b: normlab.rms_norm(x, w, 1e-6, casting="gemma", backend=backend)


def time_case(op: str, m: int, n: int, grad: bool, repeat: int) -> dict[str, float]:
    """Microseconds per call of each backend on one float32 ``(m, n)`` input."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(m, n, generator=g).requires_grad_(grad)
    w = (1 + 0.1 * torch.randn(n, generator=g)).requires_grad_(grad)
    b = (0.1 * torch.randn(n, generator=g)).requires_grad_(grad)
    dy = torch.randn(m, n, generator=g)
    params = (x, w, b) if op == "layer_norm" else (x, w)

    def call(f):
        if grad:
            return lambda: torch.autograd.grad(f(x, w, b), params, dy)

        def fwd():
            with torch.no_grad():
                f(x, w, b)

        return fwd

    fns = {be: call(_op(op, be)) for be in ("numba", "torch")}
    return {k: 1e3 * v for k, v in time_ms(fns, repeat).items()}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--ops", nargs="+", default=["layer_norm", "rms_norm"])
    args = p.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; µs per call\n")
    print("| op | shape | mode | numba µs | torch µs | torch / numba |")
    print("|---|---|---|---|---|---|")
    for op in args.ops:
        for grad in (False, True):
            for m, n in SHAPES:
                t = time_case(op, m, n, grad, args.repeat)
                mode = "fwd+bwd" if grad else "fwd"
                print(
                    f"| {op} | {m}x{n} | {mode} | {t['numba']:.1f} | {t['torch']:.1f} | "
                    f"{t['torch'] / t['numba']:.2f} |",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
