"""The ``normlab`` command. Each subcommand lives in its own module, which provides
``add_arguments(parser)`` and ``run(args) -> int``; this file only lists them."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys

# name -> (module, one-line help). Only subcommands that exist are listed.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("normlab.lab.demo", "compare every norm and backend on one tensor (a quick look)"),
    "study": ("normlab.lab.study.command", "train small Transformers and report which claims hold"),
    "numerics": (
        "normlab.lab.numerics.command",
        "FP16/BF16/FP32 error, overflow and eps sweep vs float64",
    ),
    "train": (
        "normlab.lab.train.command",
        "one training run; under torchrun: DDP or FSDP2 (--fsdp)",
    ),
    "bench": ("normlab.lab.bench.command", "kernel GB/s vs copy_, torch eager and torch.compile"),
}

# What `pip install "normlab[lab]"` adds; the library itself never imports these.
LAB_PACKAGES = ("matplotlib", "tqdm", "scipy")


def missing_lab_packages() -> list[str]:
    """The lab's packages that cannot be imported here (found without importing them)."""

    def importable(name: str) -> bool:
        if name in sys.modules:
            return sys.modules[name] is not None
        return importlib.util.find_spec(name) is not None

    return [name for name in LAB_PACKAGES if not importable(name)]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="normlab",
        description="Normalization layers, fast kernels and a lab for Transformers.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
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
    return int(args._run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
