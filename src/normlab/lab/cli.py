"""The ``normlab`` command: the top of the import graph. Each subcommand is a module of
``normlab.lab.commands`` with ``add_arguments(parser)`` and ``run(args) -> int``; this file lists
them and turns a user's mistake into one line on stderr and status 2 (the commands and engines
raise :class:`normlab.lab.kit.errors.UsageError`, ``main`` prints it).

The command modules import nothing heavy at their top (matplotlib, scipy and tqdm are imported
inside functions), so a missing lab extra is reported before anything needs it.
"""

from __future__ import annotations

import argparse
import sys

from normlab.lab.commands import advise, bench, demo, inspect, numerics, study, train, vision
from normlab.lab.kit.errors import UsageError
from normlab.lab.kit.packages import missing_lab_packages
from normlab.lab.kit.reading import printable

MESSAGE_MAX = 4000  # characters of a refusal's line

# name -> (module, one-line help)
SUBCOMMANDS = {
    "demo": (demo, "compare every norm and backend on one tensor (a quick look)"),
    "study": (study, "train small Transformers and report which claims hold"),
    "numerics": (numerics, "FP16/BF16/FP32 error, overflow and eps sweep vs float64"),
    "train": (train, "one training run; under torchrun: DDP or FSDP2 (--fsdp)"),
    "bench": (bench, "kernel GB/s vs copy_, torch eager and torch.compile"),
    "advise": (
        advise,
        "a Hugging Face config's norm recipe vs the alternatives, on a scaled-down twin",
    ),
    "inspect": (
        inspect,
        "a real checkpoint's norms, measured without training: precision hazards, re-centering, "
        "eval mode",
    ),
    "vision": (
        vision,
        "BatchNorm vs LayerNorm vs none in a small CNN on 8×8 digits, batch 64 and 4",
    ),
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        # One line, not the usage block: the usage of a command with many options fills the
        # screen and hides the message.
        self.exit(2, f"{self.prog}: {printable(message, MESSAGE_MAX)} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    formatter = argparse.ArgumentDefaultsHelpFormatter
    parser = _Parser(
        prog="normlab",
        description="Normalization layers, fast kernels and a lab for Transformers.",
        formatter_class=formatter,
    )
    parser.add_argument(
        "--debug",
        action="store_true",
        help="show the traceback of a usage error instead of one line",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (module, help_) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_, description=help_, formatter_class=formatter)
        module.add_arguments(p)
        p.set_defaults(_run=module.run, _parser=p)
    return parser


def main(argv: list[str] | None = None) -> int:
    args, extra = build_parser().parse_known_args(argv)
    if extra:  # refused by the subcommand, which points to its own --help
        args._parser.error(f"unrecognized arguments: {' '.join(extra)}")
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
        # Escaped, whatever raised it: a refusal may quote a file's text or a path, and it
        # reaches a terminal (one line, no control character).
        print(f"normlab {args.command}: {printable(str(e), MESSAGE_MAX)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
