"""``normlab vision``: BatchNorm vs LayerNorm vs no norm in a small CNN on 8×8 digits, at batch
64 and 4 (:mod:`normlab.lab.vision`)."""

from __future__ import annotations

import argparse

from normlab.lab.commands import PATH, SEED_BLOCK, int_in, options_of

_HELP_DESIGN = "; any other value than the default is not the registered design"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from normlab.lab.vision.cnn_findings import SEEDS
    from normlab.lab.vision.net import Recipe

    p.add_argument("--out", type=PATH, default="normlab-out/vision", help="output directory")
    p.add_argument(
        "--seed",
        type=SEED_BLOCK,
        default=0,
        help="the seed block: runs on seeds 10000·S + i (split, init, batch order), so a "
        "registered design can be decided on seeds no run has used",
    )
    p.add_argument("--list", action="store_true", help="print the runs and the rules; run nothing")
    p.add_argument(
        "--seeds", type=int_in(2, 1000), default=SEEDS, help="seeds per arm" + _HELP_DESIGN
    )
    p.add_argument(
        "--epochs",
        type=int_in(1, 1000),
        default=Recipe.epochs,
        help="passes over the training split per run" + _HELP_DESIGN,
    )
    p.add_argument("--jobs", type=int_in(1, 64), default=1, help="processes, one thread each")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    from normlab.lab.kit.io import hold, out_dir
    from normlab.lab.vision.cnn_findings import Plan
    from normlab.lab.vision.grid import VisionOptions, listing, run_vision, summary
    from normlab.lab.vision.net import Recipe

    plan = Plan(Recipe(epochs=args.epochs), seeds=args.seeds)
    if args.list:
        print(listing(plan, args.seed))
        return 0
    options = options_of(
        VisionOptions, args, seed_block=args.seed, plan=plan, progress=not args.quiet
    )
    with hold(out_dir(args.out), "vision"):
        decided, runs = run_vision(options)
    print(summary(decided, runs))
    print(f"wrote {args.out}/vision-findings.json (+ vision-runs.json, vision-loss.png)")
    return 0
