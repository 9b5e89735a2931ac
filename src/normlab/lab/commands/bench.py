"""``normlab bench``: the options of the kernel benchmark (:mod:`normlab.lab.bench.bandwidth`)."""

from __future__ import annotations

import argparse

from normlab.lab.bench.bandwidth import DTYPES, OPS, BenchOptions, parse_shape, run_bench
from normlab.lab.bench.cost_findings import KINDS, FindingsOptions, run_findings
from normlab.lab.bench.ratio import IMPLS, ROUNDS, SIZES
from normlab.lab.commands import PATH, THREADS, arg_type, int_in, options_of

_DEFAULT = BenchOptions()
SHAPE = arg_type(parse_shape, "MxN")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default=_DEFAULT.device,
        help="cpu runs the numba backend, cuda the triton one",
    )
    p.add_argument(
        "--out", type=PATH, default=str(_DEFAULT.out), help="directory for the table, CSV and JSON"
    )
    p.add_argument("--quick", action="store_true", help="3 shapes, 3 repeats: a fast look")
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile baseline")
    p.add_argument(
        "--repeat",
        type=int_in(1, 10_000),
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
        type=THREADS,
        default=_DEFAULT.threads,
        help="torch threads (0: torch's default)",
    )

    p.add_argument(
        "--findings",
        nargs="?",
        const=",".join(KINDS),
        default=None,
        metavar="ratio,comm,fused",
        help="decide the articles' cost statements instead: the RMSNorm/LayerNorm time ratio by "
        "d and implementation (ratio), BatchNorm's collectives under torchrun (comm), the fused "
        "residual-add + norm against the two steps apart (fused); all three without a value",
    )
    p.add_argument(
        "--rounds",
        type=int_in(1, 10_000),
        default=ROUNDS,
        help="--findings: interleaved timing rounds per size",
    )


def _findings(args: argparse.Namespace) -> int:
    options = options_of(
        FindingsOptions,
        args,
        kinds=tuple(k for k in args.findings.split(",") if k),
        sizes=(64, 1024, 4096) if args.quick else SIZES,
        impls=tuple(i for i in IMPLS if i != "compile" or not args.no_compile),
        rounds=min(args.rounds, 7) if args.quick else args.rounds,
    )
    path = run_findings(options)
    print(path.read_text().split("\n### ")[0])
    print(f"wrote {path} (+ bench-findings.json)")
    return 0


def run(args: argparse.Namespace) -> int:
    from normlab.lab.kit.io import hold, out_dir
    from normlab.lab.train.device import check_device

    check_device(args.device)  # before the output directory exists: nothing done on a refusal
    # One process per output directory: two benches into one --out would mix their files.
    with hold(out_dir(args.out), "bench"):
        return _findings(args) if args.findings is not None else _bench(args)


def _bench(args: argparse.Namespace) -> int:
    options = options_of(
        BenchOptions,
        args,
        compile=not args.no_compile,
        ops=tuple(args.ops),
        dtypes=tuple(args.dtypes),
        shapes=tuple(args.shapes) if args.shapes else None,
    )
    path = run_bench(options)
    print(f"wrote {path} (+ .csv, .json)")
    return 0
