"""The ``normlab`` command. Each subcommand lives in its own module, which provides
``add_arguments(parser)`` and ``run(args) -> int``; this file lists them and turns a user's
mistake into one line on stderr and status 2: the commands raise :class:`UsageError` (or use
the option types and helpers below, which do), ``main`` prints it.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from pathlib import Path

# The one UsageError: the engines raise common's, the older commands import it from here.
from normlab.lab.common import UsageError

# name -> (module, one-line help). Only subcommands that exist are listed.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "demo": (
        "normlab.lab.commands.demo",
        "compare every norm and backend on one tensor (a quick look)",
    ),
    "study": ("normlab.lab.study.command", "train small Transformers and report which claims hold"),
    "numerics": (
        "normlab.lab.commands.numerics",
        "FP16/BF16/FP32 error, overflow and eps sweep vs float64",
    ),
    "train": (
        "normlab.lab.train.command",
        "one training run; under torchrun: DDP or FSDP2 (--fsdp)",
    ),
    "bench": ("normlab.lab.commands.bench", "kernel GB/s vs copy_, torch eager and torch.compile"),
    "advise": (
        "normlab.lab.advise.command",
        "a Hugging Face config's norm recipe vs the alternatives, on a scaled-down twin",
    ),
}

# What `pip install "normlab[lab]"` adds; the library itself never imports these.
LAB_PACKAGES = ("matplotlib", "tqdm", "scipy") + (("tomli",) if sys.version_info < (3, 11) else ())


def importable(name: str) -> bool:
    """Whether ``name`` can be imported here, found without importing it."""
    if name in sys.modules:
        return sys.modules[name] is not None
    return importlib.util.find_spec(name) is not None


def missing_lab_packages() -> list[str]:
    """The lab's packages that cannot be imported here."""
    return [name for name in LAB_PACKAGES if not importable(name)]


def _int_at_least(low: int, what: str):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"expected {what}, got {value}")
        return value

    parse.__name__ = what  # argparse names the type by it in its own messages
    return parse


positive_int = _int_at_least(1, "an int >= 1")
non_negative_int = _int_at_least(0, "an int >= 0")


def out_dir(path: str | Path, flag: str = "--out") -> Path:
    """Create the output directory now, before any work whose results it would hold."""
    out = Path(path)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"{flag} {path}: cannot create the directory ({e.strerror or e})") from e
    return out


def load_data(path: str | None, flag: str = "--data"):
    """``load_corpus(path)``, with a missing, unreadable or too small file as a UsageError."""
    from normlab.lab.train.data import load_corpus

    try:
        return load_corpus(path)
    except FileNotFoundError as e:
        raise UsageError(f"{flag} {path}: no such file" if path else str(e)) from e
    except OSError as e:
        raise UsageError(f"{flag} {path}: cannot read it ({e.strerror or e})") from e
    except ValueError as e:  # empty, or too small to split into training and validation
        raise UsageError(f"{flag} {path or '(the standard library)'}: {e}") from e


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
    parser.add_argument("--debug", action="store_true",
                        help="show the traceback of a usage error instead of one line")  # fmt: skip
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (module, help_) in SUBCOMMANDS.items():
        p = sub.add_parser(
            name, help=help_, description=help_,
            formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        )  # fmt: skip
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
