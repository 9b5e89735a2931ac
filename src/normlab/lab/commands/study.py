"""``normlab study``: a built-in preset or a user's spec file through the study's runner
(``normlab.lab.study.run.runner``), then the reports; or a mode that prints or writes and exits
(``--print-spec``, ``--compare``, ``--coverage``, ``--redecide``, ``--list``, ``--size-seeds``),
each the work of a module of ``normlab.lab.study``."""

from __future__ import annotations

import argparse
from functools import partial
from pathlib import Path

from normlab.lab.commands import PATH
from normlab.lab.commands.options import (
    add_redecide,
    add_run_options,
    add_set,
    add_spec,
    only_with,
)
from normlab.lab.commands.run_sequence import RunSteps, run_sequence
from normlab.lab.study.report import write_reports
from normlab.lab.study.run import format_plan, redecide, run_study
from normlab.lab.study.spec import parse as spec


def add_arguments(p: argparse.ArgumentParser) -> None:
    from normlab.lab.study.published.claims_page import HELP as coverage_help

    names = spec.builtin_names()
    which = p.add_mutually_exclusive_group()
    which.add_argument(
        "--preset",
        choices=names,
        default=None,
        help="a built-in study (default: quick; `--list` estimates its time)",
    )
    add_spec(which, "a study spec file (TOML, see docs/spec.md)")
    which.add_argument(
        "--print-spec",
        metavar="NAME",
        choices=names,
        default=None,
        help="print a preset's spec file, to copy and edit, and exit",
    )
    add_set(
        p,
        "override a value of the spec (repeatable): a dotted path into its TOML document "
        "(base.steps=50, base.model.dim=32, arms[0].lr=3e-3) and a TOML value (else a string), "
        "checked like the spec itself",
    )
    p.add_argument(
        "--size-seeds",
        type=PATH,
        metavar="DIR",
        default=None,
        help="from a pilot study in DIR (run on a seed block no report uses, e.g. --seed 99), "
        "print the seeds each claim of this study needs for its detectable effect to reach δ, "
        "and exit",
    )
    p.add_argument(
        "--compare",
        type=PATH,
        metavar="DIR",
        nargs="+",
        default=None,
        help="print, as markdown, every claim that more than one of these studies' output "
        "directories decided: its verdict, effect and scope in each, and what differs where an "
        "effect changes sign; and exit",
    )
    p.add_argument(
        "--coverage", type=PATH, metavar="DOCS", nargs="?", const="docs", help=coverage_help
    )
    p.add_argument(
        "--register",
        type=PATH,
        metavar="DOCS",
        nargs="?",
        const="docs",
        help="stamp every preset claim's design, statement's test plan and published finding's "
        "design that changed since DOCS/data/registry.json last registered it, and each "
        "published study's data, as fixed now (commit the file with the change, before any run "
        "of the new design); and exit",
    )
    add_redecide(
        p,
        "decide a finished study in DIR again without training: its runs from "
        "DIR/results.jsonl, its spec, H and the timing rounds from DIR/study.json (nothing "
        "re-timed); rewrites DIR/claims.json and the reports (--spec FILE: decide with that spec "
        "instead, as a study.json without one needs)",
    )
    add_run_options(p, out="normlab-out", listed="the plan (runs x seeds, claims, estimated time)")


# The modes that print or write and exit: the options each reads besides its own, and why the
# others do not apply. Any other option given with one is refused, not ignored (--redecide DIR
# --out OTHER would write to DIR, --redecide DIR --list would rewrite DIR instead of listing).
MODES = {
    "print_spec": ((), "it prints a preset's spec"),
    "compare": ((), "it prints the comparison of the studies' claims.json"),
    "coverage": ((), "it writes the coverage pages from the published data in DOCS"),
    "register": ((), "it stamps the changed designs and plans into DOCS/data/registry.json"),
    "redecide": (
        ("spec", "device", "precision", "quiet"),
        "it reads the spec and its --set overrides from DIR/study.json, and writes into DIR",
    ),
    "size_seeds": (
        ("preset", "spec", "overrides", "device", "precision"),
        "it prints the seeds each claim needs, from the pilot in DIR",
    ),
}


def _mode(args: argparse.Namespace) -> str | None:
    """The mode of :data:`MODES` given, if one is; a UsageError if an option it does not read is
    given with it."""
    mode = next((m for m in MODES if getattr(args, m) is not None), None)
    if mode is not None:
        only_with(args, mode, *MODES[mode])
    return mode


def run(args: argparse.Namespace) -> int:
    from normlab.lab.study.published import compare, register, results
    from normlab.lab.study.run import pilot

    mode = _mode(args)
    if mode == "print_spec":
        print(spec.builtin_text(args.print_spec), end="")
        return 0
    mains = {"compare": compare.main, "coverage": results.main, "register": register.main}
    if mode in mains:  # each given its option's value
        return mains[mode](getattr(args, mode))
    if mode == "redecide":
        out = Path(args.redecide)
        return redecide.main(out, args.spec, args.device, args.precision, args.quiet)
    # A spec is checked whole here, before anything runs or is written.
    sets = args.overrides
    if args.spec:
        study = spec.load_spec(args.spec, sets)
    else:
        study = spec.load_builtin(args.preset or "quick", sets)

    def listing(study) -> str:
        how = f"--spec {args.spec}" if args.spec else f"--preset {study.name}"
        assume = _published_assumption(study)
        kw = {"workers": args.workers, "threads": args.threads, "assume": assume}
        return format_plan(study, args.seed, how, **kw)

    instead = partial(pilot.main, pilot_dir=args.size_seeds) if mode == "size_seeds" else None
    return run_sequence(study, args, RunSteps("study", listing, _train, instead=instead))


def _published_assumption(study):
    """What a sequential study's expected cost assumes: its claims' values in the latest
    published block of its preset under ``docs/data`` (from a checkout's root), if there is
    one."""
    from normlab.lab.study.published.coverage import published
    from normlab.lab.study.run import budget

    docs = Path("docs")
    if study.sequential is None or not (docs / "data").is_dir():
        return budget.NONE
    rows = published(docs).get(study.name, {})
    wheres = ", ".join(f"docs/data/{w}" for w in sorted({r.where for r in rows.values()}))
    entries = {name: r.entry for name, r in rows.items()}
    return budget.Assumption(entries, f"the published {wheres}" if rows else "")


def _train(study, options, corpus):
    """The study trained and decided, its reports written."""
    result = run_study(study, options, corpus)
    write_reports(result, options.out)
    return result
