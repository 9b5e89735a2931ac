"""``normlab study``: a built-in preset or a user's spec file through the study's runner
(``normlab.lab.study.runner``), then the reports."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from normlab.lab.commands.options import (
    add_run_options,
    add_set,
    add_spec,
    configured,
    interrupted,
    report_failed,
    study_options,
)
from normlab.lab.study.runner import Interrupted


def add_arguments(p: argparse.ArgumentParser) -> None:
    from normlab.lab.study.claims_page import HELP as coverage_help
    from normlab.lab.study.spec import builtin_names

    names = builtin_names()
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
    p.add_argument("--coverage", metavar="DOCS", nargs="?", const="docs", help=coverage_help)
    p.add_argument(
        "--redecide",
        metavar="DIR",
        default=None,
        help="decide a finished study in DIR again without training: its runs from "
        "DIR/results.jsonl, its spec, H and the timing rounds from DIR/study.json (nothing "
        "re-timed); rewrites DIR/claims.json and the reports (--spec FILE: decide with that spec "
        "instead, as a study.json without one needs)",
    )
    add_run_options(p, out="normlab-out", listed="the plan (runs x seeds, claims, estimated time)")


def run(args: argparse.Namespace) -> int:
    from normlab.lab.common import load_data
    from normlab.lab.io import hold
    from normlab.lab.limits import check_study
    from normlab.lab.study import results, spec
    from normlab.lab.study.plan import format_plan
    from normlab.lab.study.runner import run_study, summary, write_reports

    if args.print_spec:
        print(spec.builtin_text(args.print_spec), end="")
        return 0
    if args.compare:
        return _compare(args.compare)
    if args.coverage:
        return results.main(args.coverage)
    if args.redecide:
        return _redecide(args)
    # A spec is checked whole here, before anything runs or is written.
    sets = args.overrides
    if args.spec:
        study = spec.load_spec(args.spec, sets)
    else:
        study = spec.load_builtin(args.preset or "quick", sets)
    study = configured(study, args)
    check_study(study)  # sizes, from the configs' arithmetic: before anything is allocated
    if args.list:
        how = f"--spec {args.spec}" if args.spec else f"--preset {study.name}"
        print(format_plan(study, args.seed, how, workers=args.workers, threads=args.threads))
        return 0
    if args.size_seeds:
        return _size_seeds(study, args.size_seeds)
    options = study_options(args)
    with hold(options.out, "study"):  # one process per output directory, before any work
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


def _redecide(args: argparse.Namespace) -> int:
    from normlab.lab.common import UsageError
    from normlab.lab.study.redecide import redecide
    from normlab.lab.study.runner import summary, write_reports

    if args.overrides or args.preset:
        raise UsageError("--redecide reads the spec and its --set overrides from study.json")
    out = Path(args.redecide)
    result = redecide(out, spec_file=args.spec, device=args.device, precision=args.precision)
    write_reports(result, out)
    if not args.quiet:
        print(summary(result, out))
    if result.failed:
        print(f"runs missing from {out / 'results.jsonl'}: {result.failed}", file=sys.stderr)
    return result.exit_code


def _compare(dirs: list[str]) -> int:
    from normlab.lab.common import UsageError
    from normlab.lab.study.compare import markdown

    for d in dirs:
        _check_claims_json(Path(d) / "claims.json")
    try:
        print(markdown([Path(d) for d in dirs]), end="")
    except (OSError, ValueError, KeyError) as e:
        raise UsageError(f"--compare: {e}") from e
    return 0


def _check_claims_json(path: Path) -> None:
    """A ``claims.json`` given to ``--compare``, read bounded (nesting, finite numbers) before
    the comparison reads it, its strings without control characters and its claims' names and
    verdicts one short line each: they are copied into the comparison's Markdown."""
    from normlab.lab.common import UsageError
    from normlab.lab.reading import check_strings, check_text, read_json

    if not path.is_file():
        return  # the comparison names the missing file
    doc = check_strings(read_json(path, f"--compare: {path}"), f"--compare: {path}")
    claims = doc.get("claims") if isinstance(doc, dict) else None
    for i, c in enumerate(claims if isinstance(claims, list) else []):
        for key in ("name", "verdict"):
            v = c.get(key) if isinstance(c, dict) else None
            if isinstance(v, str):
                try:
                    check_text(v, f"claims[{i}].{key}", 200, newlines=False)
                except ValueError as e:
                    raise UsageError(f"--compare: {path}: {e}") from None


def _size_seeds(study, pilot_dir: str) -> int:
    from normlab.lab.common import UsageError
    from normlab.lab.reading import read_json
    from normlab.lab.study.pilot import format_plans, size_seeds

    path = Path(pilot_dir) / "claims.json"
    pilot = read_json(path, f"--size-seeds {pilot_dir}: {path}")  # bounded: depth, finite
    if not isinstance(pilot, dict) or not isinstance(pilot.get("claims"), list):
        raise UsageError(f"--size-seeds {pilot_dir}: {path} is not a study's claims.json")
    cap = 16
    print(f"seeds per claim from the pilot {path} (seed block {pilot.get('seed_block')}):")
    print(format_plans(size_seeds(study, pilot, cap), cap))
    return 0
