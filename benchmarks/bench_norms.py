"""Benchmark normlab's CPU (or CUDA) norm kernels: ``python benchmarks/bench_norms.py --help``.

The same as ``normlab bench`` (its options, its output); the harness lives in
:mod:`normlab.lab.bench.bandwidth`.
"""

import sys

from normlab.lab.cli import main as normlab_main


def main(argv: list[str] | None = None) -> int:
    return normlab_main(["bench", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
