"""``normlab study``: a built-in preset or a user's spec file through the study's runner
(``normlab.lab.study.runner``), then the reports."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from normlab.lab.commands import NON_NEGATIVE_INT, POSITIVE_INT
from normlab.lab.study.runner import Interrupted, StudyOptions


def add_arguments(p: argparse.ArgumentParser) -> None:
    from normlab.lab.study.spec import builtin_names

    names = builtin_names()
    which = p.add_mutually_exclusive_group()
    which.add_argument(
        "--preset",
        choices=names,
        default=None,
        help="a built-in study (default: quick; `--list` estimates its time)",
    )
    which.add_argument(
        "--spec", metavar="FILE", default=None, help="a study spec file (TOML, see docs/spec.md)"
    )
    which.add_argument(
        "--print-spec",
        metavar="NAME",
        choices=names,
        default=None,
        help="print a preset's spec file, to copy and edit, and exit",
    )
    p.add_argument(
        "--set",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        dest="overrides",
        help="override a value of the spec (repeatable): a dotted path into its TOML document "
        "(base.steps=50, base.model.dim=32, arms[0].lr=3e-3) and a TOML value (else a string), "
        "checked like the spec itself",
    )
    p.add_argument(
        "--size-seeds",
        metavar="DIR",
        default=None,
        help="from a pilot study in DIR (run on a seed block no report uses, e.g. --seed 99), "
        "print the seeds each claim of this study needs for its detectable effect to reach δ, "
        "and exit",
    )
    p.add_argument(
        "--compare",
        metavar="DIR",
        nargs="+",
        default=None,
        help="print, as markdown, every claim that more than one of these studies' output "
        "directories decided: its verdict, effect and scope in each, and what differs where an "
        "effect changes sign; and exit",
    )
    add_run_options(p, out="normlab-out", listed="the plan (runs x seeds, claims, estimated time)")


def add_run_options(p: argparse.ArgumentParser, *, out: str, listed: str) -> None:
    """How a study runs (the fields of ``StudyOptions``), plus --list printing ``listed``.
    Shared by the commands that run one (``normlab study``, ``normlab advise``)."""
    p.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed block S: runs use seeds 10000*S + i, so two studies with different --seed "
        "share no seed",
    )
    p.add_argument("--list", action="store_true", help=f"print {listed} and exit")
    p.add_argument("--out", default=out, help="output directory")
    p.add_argument(
        "--data", default=None, help="train on this file; None = the stdlib's *.py files"
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="keep DIR/results.jsonl and skip the runs already in it",
    )
    p.add_argument(
        "--workers",
        type=POSITIVE_INT,
        default=0,
        help="runs trained at once (processes); default: as many as the usable CPUs hold at "
        "the runs' threads and the available memory at their size (`--list` shows the plan)",
    )
    p.add_argument(
        "--threads",
        type=NON_NEGATIVE_INT,
        default=0,
        help="torch threads of every run; 0 = what the run's model width pays for (1 up to "
        "d=128), within its worker's share of the CPUs",
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
        choices=("auto", "cpu", "cuda"),
        default=None,
        help="every run's device (auto: CUDA if available); default: the spec's (auto unless it "
        "says); recorded with each run, so --resume never mixes devices",
    )
    p.add_argument(
        "--precision",
        choices=("fp32", "bf16", "fp16"),
        default=None,
        help="every run's precision: bf16/fp16 autocast the forward (fp16 with a GradScaler); "
        "default: the spec's (fp32 unless it says)",
    )
    p.add_argument(
        "--tensorboard",
        metavar="DIR",
        default=None,
        help="also write TensorBoard event files, one run directory per arm and seed "
        "(DIR/<arm>/seed<i>), from the process that trains it (needs tensorboard)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bars or tables")


def configured(study, args: argparse.Namespace):
    """``study`` on ``--device`` in ``--precision``; without ``--list``, a UsageError now if it
    needs CUDA and there is none (before the output directory or the data)."""
    from normlab.lab.study.runner import checks_device, configure

    check = not args.list and checks_device(args.executor, args.address)
    return configure(study, args.device, args.precision, check=check)


def study_options(args: argparse.Namespace) -> StudyOptions:
    """The parsed run options as the runner's options, the output directory created."""
    from normlab.lab.common import out_dir

    return StudyOptions(
        out=out_dir(args.out),
        seed=args.seed,
        data=args.data,
        resume=args.resume,
        workers=args.workers,
        threads=args.threads,
        executor=args.executor,
        address=args.address,
        quiet=args.quiet,
        device=args.device,
        precision=args.precision,
        tensorboard=None if args.tensorboard is None else Path(args.tensorboard),
    )


def interrupted(e: Interrupted, options: StudyOptions) -> int:
    print(
        f"\nstudy stopped; finished runs are kept in {options.out / 'results.jsonl'}. Continue "
        "with the same command and --resume.",
        file=sys.stderr,
    )
    return e.code


def report_failed(failed: list[str]) -> None:
    if failed:
        print(f"runs that raised (not recorded; --resume retries them): {failed}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    from normlab.lab.common import load_data
    from normlab.lab.study import spec
    from normlab.lab.study.plan import format_plan
    from normlab.lab.study.runner import run_study, summary, write_reports

    if args.print_spec:
        print(spec.builtin_text(args.print_spec), end="")
        return 0
    if args.compare:
        return _compare(args.compare)
    # A spec is checked whole here, before anything runs or is written.
    sets = args.overrides
    if args.spec:
        study = spec.load_spec(args.spec, sets)
    else:
        study = spec.load_builtin(args.preset or "quick", sets)
    study = configured(study, args)
    if args.list:
        how = f"--spec {args.spec}" if args.spec else f"--preset {study.name}"
        print(format_plan(study, args.seed, how, workers=args.workers, threads=args.threads))
        return 0
    if args.size_seeds:
        return _size_seeds(study, args.size_seeds)
    options = study_options(args)
    corpus = load_data(args.data)
    try:
        result = run_study(study, options, corpus)
    except Interrupted as e:
        return interrupted(e, options)
    write_reports(result, options.out)
    if not options.quiet:
        print(summary(result, options.out))
    report_failed(result.failed)
    return result.exit_code


def _compare(dirs: list[str]) -> int:
    from normlab.lab.common import UsageError
    from normlab.lab.study.compare import markdown

    try:
        print(markdown([Path(d) for d in dirs]), end="")
    except (OSError, ValueError, KeyError) as e:
        raise UsageError(f"--compare: {e}") from e
    return 0


def _size_seeds(study, pilot_dir: str) -> int:
    import json

    from normlab.lab.common import UsageError
    from normlab.lab.study.pilot import format_plans, size_seeds

    path = Path(pilot_dir) / "claims.json"
    try:
        pilot = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise UsageError(f"--size-seeds {pilot_dir}: cannot read {path} ({e})") from e
    cap = 16
    print(f"seeds per claim from the pilot {path} (seed block {pilot.get('seed_block')}):")
    print(format_plans(size_seeds(study, pilot, cap), cap))
    return 0
