"""``normlab demo``: the options of the quick look at every backend (:mod:`normlab.lab.demo`)."""

from __future__ import annotations

import argparse

from normlab.lab.commands import POSITIVE_INT, options_of
from normlab.lab.demo import DTYPES, DemoOptions, run_demo

_DEFAULT = DemoOptions()


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--rows", type=POSITIVE_INT, default=_DEFAULT.rows, help="rows of the test tensor"
    )
    p.add_argument("--hidden", type=POSITIVE_INT, default=_DEFAULT.hidden, help="hidden size N")
    p.add_argument("--dtype", choices=DTYPES, default=_DEFAULT.dtype)


def run(args: argparse.Namespace) -> int:
    from normlab.lab.kit.limits import check_rows

    check_rows(args.rows, args.hidden)  # before the tensor is allocated
    run_demo(options_of(DemoOptions, args))
    return 0
