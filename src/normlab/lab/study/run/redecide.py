"""Decide a finished study again without training: its runs from ``DIR/results.jsonl``, its H
and timing rounds from ``DIR/study.json`` (nothing is re-timed), its arms and claims from the
spec ``study.json`` stores (``provenance``: the design that ran, never today's preset) or from
``--spec FILE``, with the overrides it recorded. ``normlab study --redecide DIR`` then rewrites
``claims.json`` and the reports; ``study.json`` and the results stay as they are. A study with a
sequential design is decided look by look, as it was while it ran (``decide.looks``).
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path

from normlab.lab.kit.errors import UsageError
from normlab.lab.kit.io import hold
from normlab.lab.kit.reading import printable, read_json
from normlab.lab.study.decide.looks import decide_looks, needed
from normlab.lab.study.report import write_reports
from normlab.lab.study.run.provenance import run_with, study_of
from normlab.lab.study.run.runner import StudyResult, configure, summary
from normlab.lab.study.run.study_json import StudyMeta


def redecide_study(
    out: Path,
    *,
    spec_file: str | None = None,
    device: str | None = None,
    precision: str | None = None,
) -> StudyResult:
    """The verdicts of the finished study in ``out``, from its recorded runs and timings.
    ``device``/``precision``: what the study was run with (``--device``/``--precision``), where
    ``study.json`` does not record it; its runs are found by the same keys it wrote them under."""
    from normlab.lab.study.run.store import ResultStore, results_of, run_key

    path = out / "study.json"  # bounded and checked: a tampered file is one line, not a crash
    doc = read_json(path, f"--redecide {out}: cannot read {path}")
    # the design first (a study.json that stores none says so), then the rest of it
    meta = StudyMeta.from_dict(doc, f"--redecide {path}", complete=False)
    ran_device, ran_precision = run_with(meta)
    study = study_of(meta, str(path), spec_file)
    meta = StudyMeta.from_dict(doc, f"--redecide {path}")
    # an arm's "auto" is the device the study ran on, not this machine's: its runs' keys
    ran_on = meta.environment.get("device", "cpu")
    study = configure(
        study, device or ran_device, precision or ran_precision, check=False, auto=ran_on
    )
    records = ResultStore(out / "results.jsonl").load(results=True)
    sha = meta.corpus["sha256"]
    runs = study.runs(meta.seed_block)
    results = results_of(records, runs, lambda r: run_key(r.config, sha), f"{out}/results.jsonl")
    if not results:
        raise UsageError(
            f"--redecide {out}: none of the study's {len(runs)} runs is in results.jsonl (a "
            "different spec, --set, --device or --precision than the study ran with?)"
        )
    outcomes = decide_looks(study, results, meta.plateau_h, meta.timings)
    verdicts = [(o.claim, o.verdict) for o in outcomes]
    if study.sequential is not None:  # the runs its looks needed, not every seed to the caps
        runs = study.runs(meta.seed_block, needed(study, outcomes))
    missing = [r.label for r in runs if r.index not in results.get(r.arm, {})]
    design = f"the spec {spec_file}" if spec_file else "the spec study.json stores"
    shown = replace(meta, decided_again=time.strftime("%Y-%m-%d %H:%M:%S %Z"), decided_with=design)
    return StudyResult(study, results, verdicts, shown, missing)


def main(
    out: Path, spec_file: str | None, device: str | None, precision: str | None, quiet: bool
) -> int:
    """``normlab study --redecide DIR``: :func:`redecide`, then ``claims.json`` and the reports
    rewritten and the claim table printed; 1 if runs are missing from ``results.jsonl``."""
    if not out.is_dir():
        raise UsageError(f"--redecide {printable(str(out))}: no such directory")
    result = redecide_study(out, spec_file=spec_file, device=device, precision=precision)
    # Every refusal comes before anything is written; the lock then keeps out a study that
    # still runs there (its reports are its own to write).
    with hold(out, "study", "--redecide"):
        write_reports(result, out)
    if not quiet:
        print(summary(result, out))
    if result.failed:
        print(f"runs missing from {out / 'results.jsonl'}: {result.failed}", file=sys.stderr)
    return result.exit_code
