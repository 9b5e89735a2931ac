"""Benchmark normlab's CPU (or CUDA) norm kernels: ``python benchmarks/bench_norms.py --help``.

The same as ``normlab bench``; the harness lives in :mod:`normlab.lab.bench.command`.
"""

import argparse
import sys

from normlab.lab.bench import command as bench


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    bench.add_arguments(parser)
    return bench.run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
