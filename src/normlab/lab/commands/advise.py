"""``normlab advise``: a Hugging Face config's norm recipe against the alternatives, on a
scaled-down twin (``normlab.lab.advise.engine``)."""

from __future__ import annotations

import argparse
import sys
from functools import partial

from normlab.lab.advise.engine import EXAMPLE, SPEC_FILE, example_names
from normlab.lab.commands import PATH, int_in
from normlab.lab.commands.options import add_redecide, add_run_options, only_with
from normlab.lab.kit.errors import UsageError


def add_arguments(p: argparse.ArgumentParser) -> None:
    from normlab.lab.advise.twin import SCALES
    from normlab.lab.kit.limits import MAX_SEEDS, MAX_STEPS

    p.add_argument(
        "config",
        type=PATH,
        metavar="CONFIG",
        nargs="?",
        default=None,
        help="(required, except with --redecide) a Hugging Face decoder's config.json (read as "
        "JSON; transformers is not needed), a model directory holding one, or the name of an "
        f"example shipped with normlab: {example_names()}",
    )
    p.add_argument(
        "--hf-config",
        type=PATH,
        metavar="FILE",
        default=None,
        help="CONFIG, given as an option (the same forms)",
    )
    p.add_argument(
        "--preset",
        choices=tuple(SCALES),
        default=None,
        help="the twin's size: smoke (toy, seconds) or quick (a Llama twin; `--list` estimates "
        "its time); none: quick",
    )

    # A budget between the presets: the preset's twin, trained longer or shorter, on more or
    # fewer seeds (the bounds are a study's own: limits.MAX_SEEDS, MAX_STEPS).
    def budget(field: str, most: int, what: str, then: str) -> None:
        each = ", ".join(f"{k} {getattr(s, field)}" for k, s in SCALES.items())
        help_ = f"{what} instead of the preset's ({each}); {then}"
        p.add_argument(f"--{field}", metavar="N", type=int_in(1, most), default=None, help=help_)

    budget(
        "seeds",
        MAX_SEEDS,
        "seeds per arm",
        "1 trains fastest but gives no interval: no quality or stability claim can be decided",
    )
    budget(
        "steps", MAX_STEPS, "training steps per run", "the warmup keeps the preset's share of them"
    )
    add_redecide(
        p,
        "rebuild an advise's DIR/advice.md, reports and claims.json from its files, "
        "without training: the twin from DIR/twin.json, the study that ran (DIR/study.json's "
        "spec, or DIR/advise-spec.toml for an advise stopped before its study finished) and "
        "the runs in DIR/results.jsonl; the runs missing are named in the advice",
    )
    add_run_options(
        p, out="normlab-advise", listed="the twin and the plan (runs, claims, estimated CPU time)"
    )


def run(args: argparse.Namespace) -> int:
    from normlab.lab.advise.advice import headline
    from normlab.lab.advise.engine import describe, gaps_text, plan, run_advise
    from normlab.lab.commands.run_sequence import RunSteps, run_sequence
    from normlab.lab.study.run import format_plan

    if args.redecide:
        return _redecide(args)
    p = plan(_config(args), args.preset or "quick", args.seeds, args.steps)

    def listing(study) -> str:
        listed = format_plan(study, args.seed, workers=args.workers, threads=args.threads)
        listed = listed.split("\n", 1)[1]  # the plan without its title line
        return (
            f"{describe(p.twin)}\n\n{gaps_text(p.twin)}\n\n{p.command} --seed {args.seed}: the "
            f"study (written to DIR/{SPEC_FILE})\n{listed}"
        )

    def started(options) -> None:
        if not options.quiet:  # what is trained: its fields follow the bottom line
            print(describe(p.twin).split("\n\n")[0], end="\n\n")

    def gaps(*_) -> None:  # what the twin leaves out, even with --quiet: no difference unsaid
        print(gaps_text(p.twin), end="\n\n")

    def trained(r, options) -> None:
        # The bottom line first, in the first lines on screen; then the twin and the study.
        if not options.quiet:
            print(headline(r.blocks), end="\n\n")
            print(describe(p.twin).split("\n\n", 1)[1], end="\n\n")
        gaps()

    def closing(r, options) -> None:
        if not options.quiet:
            print(
                f"\n-> {options.out / 'advice.md'}; edit and rerun the study: normlab study "
                f"--spec {r.spec}"
            )

    steps = RunSteps(
        "advise",
        listing,
        partial(run_advise, p),
        study_of=lambda r: r.study,
        started=started,
        stopped=gaps,
        trained=trained,
        closing=closing,
    )
    return run_sequence(p.study(), args, steps)


def _config(args: argparse.Namespace) -> str:
    """CONFIG or --hf-config, given once."""
    if args.config and args.hf_config:
        raise UsageError(f"CONFIG {args.config} and --hf-config {args.hf_config}: give one")
    if not (args.config or args.hf_config):
        raise UsageError(
            "which model? type normlab advise path/to/config.json (or the model's directory), "
            f"or an example shipped with normlab: normlab advise {EXAMPLE} --list"
        )
    return args.config or args.hf_config


def _redecide(args: argparse.Namespace) -> int:
    """``--redecide DIR``: the advice, reports and claims.json rebuilt from DIR's files."""
    from pathlib import Path

    from normlab.lab.advise.advice import headline
    from normlab.lab.advise.engine import write_advice
    from normlab.lab.advise.redecide_advise import redecide_advise
    from normlab.lab.kit.io import hold
    from normlab.lab.study.run import summary

    # What would choose another twin, run anything or write elsewhere: the design is DIR's.
    reads = ("data", "device", "precision", "quiet")
    only_with(args, "redecide", reads, "it reads the twin and its study from DIR, and writes there")
    if args.config:
        raise UsageError(f"--redecide does not go with CONFIG {args.config}: it reads DIR's twin")
    out = Path(args.redecide)
    # Every refusal comes before anything is written; the lock then keeps a running advise out.
    r = redecide_advise(out, data=args.data, device=args.device, precision=args.precision)
    with hold(out, "advise", "--redecide"):
        write_advice(r, out)
    if not args.quiet:
        print(f"{headline(r.blocks)}\n\n{summary(r.study, out)}\n\n-> {out / 'advice.md'}")
    if r.study.failed:
        print(f"runs missing from {out / 'results.jsonl'}: {r.study.failed}", file=sys.stderr)
    return r.study.exit_code
