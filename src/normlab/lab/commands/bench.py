"""``normlab bench``: the options of the kernel benchmark (:mod:`normlab.lab.bench.runner`)."""

from __future__ import annotations

import argparse

from normlab.lab.bench.runner import DTYPES, OPS, BenchOptions, parse_shape, run_bench
from normlab.lab.commands import NON_NEGATIVE_INT, POSITIVE_INT, arg_type

_DEFAULT = BenchOptions()
SHAPE = arg_type(parse_shape, "MxN")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default=_DEFAULT.device,
        help="cpu runs the numba backend, cuda the triton one",
    )
    p.add_argument("--out", default=str(_DEFAULT.out), help="directory for the table, CSV and JSON")
    p.add_argument("--quick", action="store_true", help="3 shapes, 3 repeats: a fast look")
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile baseline")
    p.add_argument(
        "--repeat",
        type=POSITIVE_INT,
        default=_DEFAULT.repeat,
        help="timed repeats per case (the fastest is kept)",
    )
    p.add_argument("--ops", nargs="+", choices=OPS, default=list(OPS), help="ops to time")
    p.add_argument(
        "--dtypes",
        nargs="+",
        choices=("float32", "bfloat16", "float16"),
        default=list(DTYPES),
        help="dtypes to time",
    )
    p.add_argument(
        "--shapes",
        nargs="+",
        type=SHAPE,
        default=None,
        metavar="MxN",
        help="shapes to time instead of the default set, e.g. 1024x64",
    )
    p.add_argument(
        "--threads",
        type=NON_NEGATIVE_INT,
        default=_DEFAULT.threads,
        help="torch threads (0: torch's default)",
    )


def run(args: argparse.Namespace) -> int:
    options = BenchOptions(
        device=args.device,
        out=args.out,
        quick=args.quick,
        compile=not args.no_compile,
        repeat=args.repeat,
        ops=tuple(args.ops),
        dtypes=tuple(args.dtypes),
        shapes=tuple(args.shapes) if args.shapes else None,
        threads=args.threads,
    )
    path = run_bench(options)  # NoDevice is a UsageError: one line on stderr, status 2
    print(f"wrote {path} (+ .csv, .json)")
    return 0
