"""``normlab numerics``: the options of the precision sweep (:mod:`normlab.lab.numerics.sweep`)."""

from __future__ import annotations

import argparse

from normlab.lab.commands import PATH, POSITIVE_INT, int_in, options_of
from normlab.lab.numerics.findings import SEEDS
from normlab.lab.numerics.sweep import REDUCED, Grid, NumericsOptions, run_numerics, summary

_DEFAULT = NumericsOptions()


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=PATH, default=str(_DEFAULT.out), help="output directory")
    p.add_argument("--reduced", action="store_true", help="the small grid the tests use")
    p.add_argument(
        "--rows",
        type=POSITIVE_INT,
        default=None,
        help=f"rows per case; None: the grid's ({Grid.rows}, or {REDUCED.rows} with --reduced)",
    )
    p.add_argument("--device", default=_DEFAULT.device, help="device the implementations run on")
    p.add_argument(
        "--backends",
        default="all",
        help="comma-separated normlab backends to include, or 'all' available",
    )
    p.add_argument(
        "--seeds",
        type=int_in(0, 10_000),
        default=None,
        help=f"input draws per finding (default {SEEDS}, 3 with --reduced; 0: no findings)",
    )
    p.add_argument(
        "--seed-block",
        type=int_in(0, 10_000),
        default=_DEFAULT.seed_block,
        help="the findings' draws come from this block (seeds 10000·block + i), so a design "
        "can be decided on draws no run has used (default 0)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar and no table")


def run(args: argparse.Namespace) -> int:
    from normlab.lab.kit.errors import UsageError
    from normlab.lab.kit.io import hold, out_dir
    from normlab.lab.kit.reading import printable
    from normlab.lab.train.device import check_device

    kind = args.device.split(":")[0]
    if kind not in ("cpu", "cuda"):
        raise UsageError(f"--device {printable(args.device, 30)}: expected cpu or cuda")
    check_device(kind)
    backends = None if args.backends == "all" else tuple(args.backends.split(","))
    options = options_of(NumericsOptions, args, backends=backends)
    options.resolved_grid()  # the rows' bound, before the directory is made
    # One process per output directory: two sweeps into one --out would mix their files.
    with hold(out_dir(args.out), "numerics"):
        print(summary(run_numerics(options), table=not args.quiet))
    return 0
