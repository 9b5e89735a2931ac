"""The ``normlab`` command. Each subcommand lives in its own module, which provides
``add_arguments(parser)`` and ``run(args) -> int``; this file lists them and turns a user's
mistake into one line on stderr and status 2: the commands raise :class:`UsageError` (or use
the option types and helpers below, which do), ``main`` prints it.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from normlab.lab.commands import NON_NEGATIVE_INT as non_negative_int  # noqa: F401  TEMP
from normlab.lab.commands import POSITIVE_INT as positive_int  # noqa: F401  TEMP
from normlab.lab.common import UsageError, missing_lab_packages, out_dir  # noqa: F401  TEMP

# name -> (module, one-line help). Only subcommands that exist are listed.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("normlab.lab.demo", "compare every norm and backend on one tensor (a quick look)"),
    "study": (
        "normlab.lab.commands.study",
        "train small Transformers and report which claims hold",
    ),
    "numerics": (
        "normlab.lab.numerics.command",
        "FP16/BF16/FP32 error, overflow and eps sweep vs float64",
    ),
    "train": (
        "normlab.lab.commands.train",
        "one training run; under torchrun: DDP or FSDP2 (--fsdp)",
    ),
    "bench": ("normlab.lab.bench.command", "kernel GB/s vs copy_, torch eager and torch.compile"),
    "advise": (
        "normlab.lab.commands.advise",
        "a Hugging Face config's norm recipe vs the alternatives, on a scaled-down twin",
    ),
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        # One line, not the usage block: the usage of a command with many options fills the
        # screen and hides the message.
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="normlab",
        description="Normalization layers, fast kernels and a lab for Transformers.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--debug",
        action="store_true",
        help="show the traceback of a usage error instead of one line",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (module, help_) in SUBCOMMANDS.items():
        p = sub.add_parser(
            name,
            help=help_,
            description=help_,
            formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        )
        mod = importlib.import_module(module)
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    missing = missing_lab_packages()
    if missing:
        print(
            f"normlab {args.command} needs the lab extra (missing: {', '.join(missing)}): "
            'pip install "normlab[lab]"',
            file=sys.stderr,
        )
        return 2
    try:
        return int(args._run(args) or 0)
    except UsageError as e:
        if args.debug:
            raise
        print(f"normlab {args.command}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    # The commands raise normlab.lab.cli.UsageError, not this __main__ copy's: run that module's.
    from normlab.lab.cli import main as _main

    sys.exit(_main())
