"""``normlab advise``: a Hugging Face config's norm recipe against the alternatives, on a
scaled-down twin (``normlab.lab.advise.runner``)."""

from __future__ import annotations

import argparse

from normlab.lab.advise.runner import SPEC_FILE, shipped_configs
from normlab.lab.commands.options import (
    add_run_options,
    configured,
    interrupted,
    report_failed,
    study_options,
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    from normlab.lab.advise.twin import SCALES

    p.add_argument(
        "--hf-config",
        metavar="FILE",
        required=True,
        help="a Hugging Face decoder's config.json (read as JSON; transformers is not "
        "needed), or the name of an example shipped with normlab: " + ", ".join(shipped_configs()),
    )
    p.add_argument(
        "--preset",
        choices=tuple(SCALES),
        default="quick",
        help="the twin's size: smoke (toy, seconds) or quick (a Llama twin; `--list` estimates "
        "its time)",
    )
    add_run_options(
        p, out="normlab-advise", listed="the twin and the plan (runs, claims, estimated CPU time)"
    )


def run(args: argparse.Namespace) -> int:
    from normlab.lab.advise.runner import describe, gaps_text, plan, run_advise
    from normlab.lab.common import load_data
    from normlab.lab.io import hold
    from normlab.lab.limits import check_study
    from normlab.lab.study.plan import format_plan
    from normlab.lab.study.runner import Interrupted, summary

    p = plan(args.hf_config, args.preset)
    study = configured(p.study(), args)  # --device cuda without CUDA stops here, before any work
    check_study(study)  # sizes, from the configs' arithmetic: before anything is allocated
    if not args.quiet or args.list:
        print(describe(p.twin, p.params), end="\n\n")
    # What the twin leaves out is printed even with --quiet: no difference may go unsaid.
    print(gaps_text(p.twin), end="\n\n")
    if args.list:
        plan = format_plan(study, args.seed, workers=args.workers, threads=args.threads)
        listed = plan.split("\n", 1)[1]
        print(f"{p.command} --seed {args.seed}: the study (written to DIR/{SPEC_FILE})\n{listed}")
        return 0
    options = study_options(args)
    with hold(options.out, "advise"):  # one process per output directory, before any work
        corpus = load_data(args.data)
        try:
            result = run_advise(p, study, options, corpus)
        except Interrupted as e:
            return interrupted(e, options)
    if not options.quiet:
        print(summary(result.study, options.out))
    report_failed(result.study.failed)
    if not options.quiet:
        print(
            f"\n{result.headline}\n\n-> {options.out / 'advice.md'}; edit and rerun the study: "
            f"normlab study --spec {result.spec or options.out / SPEC_FILE}"
        )
    return result.study.exit_code
