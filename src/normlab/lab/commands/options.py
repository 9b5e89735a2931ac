"""What several commands share: the options that run a study (``normlab study``, ``normlab
advise``; ``run_sequence`` makes them the runner's options), the options that pick a spec
(``--spec``, ``--set``; ``normlab train`` takes them too), and the modes' refusal of options they
would ignore."""

from __future__ import annotations

import argparse

from normlab.lab.commands import PATH, SEED_BLOCK, THREADS, int_in
from normlab.lab.kit.errors import UsageError
from normlab.lab.train.device import DEVICES, PRECISIONS

MAX_WORKERS = 1024  # processes: a million would be started before any run


def add_spec(group, help_: str) -> None:
    group.add_argument("--spec", type=PATH, metavar="FILE", default=None, help=help_)


def add_set(group, help_: str) -> None:
    """``--set KEY=VALUE`` (repeatable) into ``args.overrides``."""
    group.add_argument(
        "--set", metavar="KEY=VALUE", action="append", default=[], dest="overrides", help=help_
    )


def add_redecide(p: argparse.ArgumentParser, help_: str) -> None:
    """``--redecide DIR``: a finished run's directory, decided again without training."""
    p.add_argument("--redecide", type=PATH, metavar="DIR", default=None, help=help_)


def add_run_options(p: argparse.ArgumentParser, *, out: str, listed: str) -> None:
    """How a study runs (the fields of ``StudyOptions``), plus --list printing ``listed``.
    Shared by the commands that run one (``normlab study``, ``normlab advise``), after their
    other options: it ends by recording every option's default (:func:`record_defaults`)."""
    p.add_argument(
        "--seed",
        type=SEED_BLOCK,
        default=0,
        help="seed block S: runs use seeds 10000*S + i, so two studies with different --seed "
        "share no seed",
    )
    p.add_argument("--list", action="store_true", help=f"print {listed} and exit")
    p.add_argument("--out", type=PATH, default=out, help="output directory")
    p.add_argument(
        "--data", type=PATH, default=None, help="train on this file; None = the stdlib's *.py files"
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="keep DIR/results.jsonl and skip the runs already in it",
    )
    p.add_argument(
        "--workers",
        type=int_in(1, MAX_WORKERS),
        default=0,
        help="runs trained at once (processes); default: as many as the usable CPUs hold at "
        "the runs' threads and the available memory at their size (`--list` shows the plan)",
    )
    p.add_argument(
        "--threads",
        type=THREADS,
        default=0,
        help="torch threads of every run; 0 = what the run's model width pays for (1 up to "
        "d=512), within its worker's share of the CPUs",
    )
    p.add_argument(
        "--executor",
        choices=("local", "ray"),
        default="local",
        help="local: a process pool on this machine; ray: a Ray cluster "
        '(pip install "normlab[ray]")',
    )
    p.add_argument(
        "--address",
        default=None,
        help="with --executor ray: the cluster to join (auto, or HOST:6379); none: a local Ray "
        "instance started and stopped with the study",
    )
    p.add_argument(
        "--device",
        choices=DEVICES,
        default=None,
        help="every run's device (auto: CUDA if available); default: the spec's (auto unless it "
        "says); recorded with each run, so --resume never mixes devices",
    )
    p.add_argument(
        "--precision",
        choices=PRECISIONS,
        default=None,
        help="every run's precision: bf16/fp16 autocast the forward (fp16 with a GradScaler); "
        "default: the spec's (fp32 unless it says)",
    )
    p.add_argument(
        "--tensorboard",
        type=PATH,
        metavar="DIR",
        default=None,
        help="also write TensorBoard event files, one run directory per arm and seed "
        "(DIR/<arm>/seed<i>), from the process that trains it (needs tensorboard)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bars or tables")
    record_defaults(p)


def record_defaults(p: argparse.ArgumentParser) -> None:
    """Keep each option's flag and default with the parsed arguments (``args.option_defaults``),
    to tell the options given from the others (:func:`only_with`)."""
    defaults = {a.dest: (a.option_strings[0], a.default) for a in p._actions if a.option_strings}
    p.set_defaults(option_defaults={k: v for k, v in defaults.items() if k != "help"})


def only_with(args: argparse.Namespace, mode: str, reads: tuple[str, ...], why: str) -> None:
    """A UsageError if an option other than ``mode`` and those it ``reads`` is given a value:
    a mode that would ignore it refuses it (``--redecide DIR --out OTHER`` would write to
    DIR). ``args`` as :func:`record_defaults` keeps them."""
    options = args.option_defaults
    extra = [
        flag
        for k, (flag, none) in options.items()
        if k != mode and k not in reads and getattr(args, k) != none
    ]
    if extra:
        raise UsageError(f"{options[mode][0]} does not go with {', '.join(extra)}: {why}")
